/*
 * End-to-end, the real broker over its wire protocol: records grow at the
 * end and stay understood both ways. A client built before recurring
 * messages sends CREATE items of five fields and decodes results of five,
 * GET records of nine and deliveries of eight, each with an exact-length
 * check; the broker must take its frames and answer in those lengths for
 * every message that does not use a newer field. A newer client's extra
 * trailing fields are skipped, a record shorter than the first layout is
 * refused with TL_EPROTO and changes nothing.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(compat);

/* An item as a client of the first layout writes it:
 * [id, version, ts, rel, body], plus `extra` unknown fields after it. */
typedef struct old_batch {
	const char *topic;
	const char *who;
	const char *ids[4];
	size_t n;
	int64_t ts;
	int fields; /* of each item: 5 = the first layout */
} old_batch;

static void
enc_old_batch(tlp_w *w, const void *arg)
{
	const old_batch *b = arg;

	tlp_w_array(w, 3);
	tlp_w_cstr(w, b->topic);
	tlp_w_cstr(w, b->who);
	tlp_w_array(w, b->n);
	for (size_t i = 0; i < b->n; i++) {
		tlp_w_array(w, (size_t) b->fields);
		if (b->fields >= 1) {
			tlp_w_cstr(w, b->ids[i]);
		}
		if (b->fields >= 2) {
			tlp_w_uint(w, 0);
		}
		if (b->fields >= 3) {
			tlp_w_int(w, b->ts);
		}
		if (b->fields >= 4) {
			tlp_w_bool(w, true);
		}
		if (b->fields >= 5) {
			tlp_w_bin(w, "old", 3);
		}
		/* fields a newer client added: none of ours (every_ms ...
		 * catch_up are zero) and then one this broker does not know */
		for (int k = 5; k < b->fields; k++) {
			if (k < 8) {
				tlp_w_int(w, 0);
			} else if (k == 8) {
				tlp_w_bool(w, false);
			} else {
				tlp_w_cstr(w, "a field from the future");
			}
		}
	}
}

/* The element count of the array the reader stands at (consumed). */
static size_t
array_len(tlp_r *r)
{
	size_t n = 0;

	TL_PASS(tlp_r_array(r, 1024, &n));
	return n;
}

/* Send an old-layout CREATE; the per-item codes, and each result record's
 * element count in nfields[]. */
static int
old_create(rc_client *c, const old_batch *b, int *codes, size_t *nfields)
{
	rc_frame *f = NULL;
	tlp_r r;
	size_t nf = 0, n;
	int err = -1;

	err = rc_req(c, TLP_OP_CREATE, enc_old_batch, b, &f, &r);
	(void) nf;
	if (err != TL_OK) {
		rc_frame_free(f);
		return err;
	}
	n = array_len(&r);
	cr_assert_eq(n, b->n);
	for (size_t i = 0; i < n; i++) {
		uint64_t code = 99;

		nfields[i] = array_len(&r);
		TL_PASS(tlp_r_uint(&r, &code));
		codes[i] = (int) code;
		for (size_t k = 1; k < nfields[i]; k++) {
			TL_PASS(tlp_r_skip(&r));
		}
	}
	TL_PASS(tlp_r_end(&r));
	rc_frame_free(f);
	return TL_OK;
}

Test(compat, a_first_layout_client_creates_reads_and_is_delivered)
{
	old_batch b = {.topic = "t",
	    .who = "old-producer",
	    .ids = {"m1", "m2"},
	    .n = 2,
	    .ts = 300,
	    .fields = 5};
	int codes[4];
	size_t nfields[4];
	rc_client *c;
	rc_frame *f = NULL, *p;
	tlp_r r;
	tlp_msg m;
	int err;

	rc_broker_start(&B, "compat-old");
	c = rc_open(B.url, "old");
	TL_PASS(old_create(c, &b, codes, nfields));
	for (int i = 0; i < 2; i++) {
		TL_PASS(codes[i]);
		cr_assert_eq(nfields[i], 5,
		    "a result of a non-recurring create has the first layout's "
		    "5 fields, not %zu",
		    nfields[i]);
	}

	/* GET: the record of a message without a recurrence is 9 long. */
	TL_PASS(rc_get(c, "t", "m1", &m, &f));
	cr_assert_eq(m.body_len, 3);
	cr_assert_eq(m.every_ms, 0);
	rc_frame_body(f, &r);
	cr_assert_eq(array_len(&r), 2);
	TL_PASS(tlp_r_skip(&r));
	cr_assert_eq(array_len(&r), 9, "GET's record is not the first layout");
	rc_frame_free(f);

	/* DELIVER: each delivery of such a message is 8 long. */
	TL_PASS(rc_subscribe(c, "t", "old-worker", 30000, 10));
	p = rc_wait_push(c, TLP_OP_DELIVER, 5000);
	cr_assert_not_null(p, "nothing delivered");
	rc_frame_body(p, &r);
	cr_assert_eq(array_len(&r), 3);
	TL_PASS(tlp_r_skip(&r));
	TL_PASS(tlp_r_skip(&r));
	err = (int) array_len(&r);
	cr_assert(err >= 1);
	for (int i = 0; i < err; i++) {
		cr_assert_eq(array_len(&r), 8,
		    "a delivery is not the first layout's 8 fields");
		for (int k = 0; k < 8; k++) {
			TL_PASS(tlp_r_skip(&r));
		}
	}
	rc_frame_free(p);
	rc_close(c);
}

Test(compat, newer_fields_are_skipped_and_short_records_refused)
{
	old_batch b = {.topic = "t",
	    .who = "g",
	    .ids = {"future"},
	    .n = 1,
	    .ts = 60000,
	    .fields = 10};
	int codes[4];
	size_t nfields[4];
	rc_client *c;
	rc_frame *f = NULL;
	tlp_msg m;
	tlp_topic t;

	rc_broker_start(&B, "compat-new");
	c = rc_open(B.url, "new");
	/* ten fields: ours, then one this broker has never heard of */
	TL_PASS(old_create(c, &b, codes, nfields));
	TL_PASS(codes[0]);
	TL_PASS(rc_get(c, "t", "future", &m, &f));
	cr_assert_eq(m.body_len, 3);
	cr_assert_eq(memcmp(m.body, "old", 3), 0);
	rc_frame_free(f);

	/* four fields: shorter than any layout */
	b.ids[0] = "short";
	b.fields = 4;
	TL_FAIL(old_create(c, &b, codes, nfields), TL_EPROTO);
	TL_FAIL(rc_get(c, "t", "short", &m, &f), TL_ENOTFOUND);
	rc_frame_free(f);
	TL_PASS(rc_topic_get(c, "t", &t));
	cr_assert_eq(t.messages, 1, "the refused batch stored something");
	rc_close(c);
}

/* The decoders of a newer peer's replies: a result with a field after
 * seq, and a first-layout delivery, decode with the missing fields zero. */
Test(compat, the_sdk_decoders_take_shorter_and_longer_records)
{
	tli_buf buf;
	tlp_w w;
	tlp_r r;
	tlp_result *res = NULL;
	tlp_deliver d;
	size_t n = 0, nf = 0;
	tlp_str detail;
	int err = -1;

	tli_buf_init(&buf);
	tlp_w_init(&w, &buf);
	tlp_w_array(&w, 2);
	tlp_w_uint(&w, 0);
	tlp_w_array(&w, 1);
	tlp_w_array(&w, 7);
	tlp_w_uint(&w, 0);
	tlp_w_cstr(&w, "x");
	tlp_w_uint(&w, 5);
	tlp_w_int(&w, 1234);
	tlp_w_uint(&w, 1);
	tlp_w_uint(&w, 3);
	tlp_w_map(&w, 0); /* unknown, and not even a scalar */
	tlp_r_init(&r, buf.data, buf.len);
	TL_PASS(tlp_dec_reply_head(&r, &err, &detail, &nf));
	TL_PASS(tlp_dec_results(&r, &res, &n));
	cr_assert_eq(n, 1);
	cr_assert_eq(res[0].version, 5);
	cr_assert_eq(res[0].seq, 3);
	tli_free(res);

	tli_buf_reset(&buf);
	tlp_w_init(&w, &buf);
	tlp_w_array(&w, 3);
	tlp_w_cstr(&w, "t");
	tlp_w_cstr(&w, "c");
	tlp_w_array(&w, 1);
	tlp_w_array(&w, 8);
	tlp_w_cstr(&w, "id");
	tlp_w_uint(&w, 2);
	tlp_w_int(&w, 5000);
	tlp_w_int(&w, 100);
	tlp_w_uint(&w, 1);
	tlp_w_cstr(&w, "g");
	tlp_w_bin(&w, "b", 1);
	tlp_w_int(&w, 90);
	tlp_r_init(&r, buf.data, buf.len);
	TL_PASS(tlp_dec_deliver(&r, &d));
	cr_assert_eq(d.n, 1);
	cr_assert_eq(d.v[0].placed_at, 90);
	cr_assert_eq(d.v[0].seq, 0);
	cr_assert_eq(d.v[0].every_ms, 0);
	tlp_deliver_fini(&d);
	tli_buf_fini(&buf);
}
