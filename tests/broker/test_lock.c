/*
 * End-to-end, the real broker over its wire protocol: LOCK. The reply
 * carries the lease as DELIVER does; a held lock answers TL_ELEASED with
 * the lease's end as a third element and a detail that says until when,
 * never naming the holder; malformed and out-of-range requests get a
 * precise error, change nothing and leave the session usable.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(lockwire);

static void
enc_lock(tlp_w *w, const void *arg)
{
	tlp_enc_lock(w, arg);
}

static tlp_lock
req(const char *topic, const char *consumer, const char *id, int64_t lease,
    const char *group)
{
	tlp_lock m;

	m.topic = TLP_STR(topic);
	m.consumer = TLP_STR(consumer);
	m.id = TLP_STR(id);
	m.lease_ms = lease;
	m.create_group = TLP_STR(group);
	return m;
}

/* Send a LOCK; the reply frame in *f (free it). Returns its code and, on
 * a failure, the detail (copied) and the number of fields after it. */
static int
lock_call(rc_client *c, const tlp_lock *m, rc_frame **f, tlp_r *r, char *detail,
    size_t cap, size_t *nf)
{
	tlp_str d;
	int err = -1;

	cr_assert_eq(rc_call(c, TLP_OP_LOCK, enc_lock, m, 5000, f), TL_OK,
	    "no reply to LOCK");
	rc_frame_body(*f, r);
	cr_assert_eq(tlp_dec_reply_head(r, &err, &d, nf), TL_OK);
	snprintf(detail, cap, "%.*s", (int) d.n, d.p != NULL ? d.p : "");
	return err;
}

/* A failed LOCK: its code (the frame is freed). */
static int
lock_err(rc_client *c, const tlp_lock *m)
{
	rc_frame *f = NULL;
	tlp_r r;
	char detail[256];
	size_t nf = 0;
	int err = lock_call(c, m, &f, &r, detail, sizeof(detail), &nf);

	rc_frame_free(f);
	return err;
}

Test(lockwire, the_reply_is_a_lease_and_a_held_lock_says_until_when)
{
	rc_client *a, *b;
	tlp_lock m = req("t", "holder-secret-7", "L", 30000, "grp");
	tlp_delivery d;
	rc_frame *f = NULL;
	tlp_r r;
	char detail[256], when[64];
	size_t nf = 0;
	int64_t until = 0, lease_until;
	tlp_msg msg;
	rc_frame *gf = NULL;

	rc_broker_start(&B, "lock-wire");
	a = rc_open(B.url, "a");
	b = rc_open(B.url, "b");
	TL_PASS(lock_call(a, &m, &f, &r, detail, sizeof(detail), &nf));
	TL_PASS(tlp_dec_lock_rep(&r, &d));
	cr_assert_eq(d.id.n, 1);
	cr_assert_eq(d.version, 2);
	cr_assert_eq(d.deliveries, 1);
	cr_assert_eq(d.owner.n, 3);
	cr_assert_eq(memcmp(d.owner.p, "grp", 3), 0);
	cr_assert_eq(d.placed_at, d.due_ts);
	cr_assert(d.lease_until >= d.due_ts + 29000);
	lease_until = d.lease_until;
	rc_frame_free(f);

	m.consumer = TLP_STR("other");
	TL_FAIL(
	    lock_call(b, &m, &f, &r, detail, sizeof(detail), &nf), TL_ELEASED);
	cr_assert_eq(nf, 1, "the held error carries until");
	TL_PASS(tlp_dec_error_until(&r, &until));
	cr_assert_eq(until, lease_until);
	snprintf(when, sizeof(when), "(%lld)", (long long) lease_until);
	cr_assert(strstr(detail, "held until") != NULL, "detail: %s", detail);
	cr_assert(strstr(detail, when) != NULL, "detail: %s", detail);
	cr_assert(strstr(detail, "holder-secret-7") == NULL,
	    "the detail names the holder: %s", detail);
	cr_assert(memmem(f->data, f->len, "holder-secret-7", 15) == NULL,
	    "the reply names the holder");
	rc_frame_free(f);

	/* GET: still a's lease, unchanged. */
	TL_PASS(rc_get(a, "t", "L", &msg, &gf));
	cr_assert_eq(msg.version, 2);
	cr_assert_eq(msg.ts, lease_until);
	rc_frame_free(gf);
	rc_close(a);
	rc_close(b);
}

Test(lockwire, bad_requests_get_precise_errors_and_change_nothing)
{
	char big[TL_MAX_ID_LEN + 2];
	rc_client *c;
	tlp_lock m;
	tlp_topic t;

	rc_broker_start(&B, "lock-bad");
	c = rc_open(B.url, "c");
	m = req("t", "a", "", 1000, "g");
	TL_FAIL(lock_err(c, &m), TL_EBADID);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	m = req("t", "a", big, 1000, "g");
	TL_FAIL(lock_err(c, &m), TL_ETOOLARGE);
	m = req("t", "", "x", 1000, "g");
	TL_FAIL(lock_err(c, &m), TL_EBADID);
	m = req("t", "a", "x", 1000, "g");
	m.consumer = (tlp_str){"a\0b", 3};
	TL_FAIL(lock_err(c, &m), TL_EINVAL);
	m = req("t", "a", "x", 1000, "g");
	m.create_group = (tlp_str){"g\0h", 3};
	TL_FAIL(lock_err(c, &m), TL_EINVAL);
	m = req("t", "a", "x", -5, "g");
	TL_FAIL(lock_err(c, &m), TL_EINVAL);
	m = req("t", "a", "x", INT64_MAX, "g");
	TL_FAIL(lock_err(c, &m), TL_ELEASELIMIT);
	m = req("", "a", "x", 1000, "g");
	TL_FAIL(lock_err(c, &m), TL_ENOTOPIC);
	m = req("nope", "a", "x", 1000, "g");
	TL_FAIL(lock_err(c, &m), TL_ENOTOPIC);
	m = req("t", "a", "x", 1000, NULL);
	TL_FAIL(lock_err(c, &m), TL_ENOTFOUND);
	/* Nothing was created; the session still works. */
	TL_PASS(rc_topic_get(c, "t", &t));
	cr_assert_eq(t.messages, 0);
	m = req("t", "a", "x", 1000, "g");
	TL_PASS(lock_err(c, &m));
	TL_PASS(rc_topic_get(c, "t", &t));
	cr_assert_eq(t.messages, 1);
	rc_close(c);
}
