/*
 * The wire decoders under hostile input: every valid body round-trips;
 * every truncation of a valid body is refused; counts and lengths that
 * claim more than the bytes present are refused before anything is
 * allocated; and a hundred thousand random mutations of valid bodies run
 * through every decoder without a crash (the sanitizer build checks every
 * read). tests/fuzz/ runs the same decoders under libFuzzer.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_msgs.h"
#include "tlcheck.h"

static tli_buf
encode_batch(size_t n)
{
	tli_buf b;
	tlp_w w;
	tlp_item items[8];
	tlp_batch bt = {TLP_STR("topic"), TLP_STR("group"), items, n};

	for (size_t i = 0; i < n; i++) {
		items[i] = (tlp_item){.id = TLP_STR(i % 2 ? "id-1" : ""),
		    .version = i * 7,
		    .ts = INT64_C(1800000000000) + (int64_t) i,
		    .rel = i % 3 == 0,
		    .body = i % 2 ? "body" : NULL,
		    .body_len = i % 2 ? 4 : 0,
		    .every_ms = (int64_t) i * 1000,
		    .times = (uint32_t) i,
		    .until = i % 2 ? INT64_C(1900000000000) : 0,
		    .catch_up = i % 2 == 1};
	}
	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_batch(&w, &bt);
	return b;
}

Test(decode, batch_round_trips)
{
	tli_buf b = encode_batch(5);
	tlp_batch out;
	tlp_r r;

	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_batch(&r, &out));
	cr_assert_eq(out.n, 5);
	cr_assert_eq(out.topic.n, 5);
	cr_assert_eq(memcmp(out.topic.p, "topic", 5), 0);
	for (size_t i = 0; i < 5; i++) {
		cr_assert_eq(out.items[i].version, i * 7);
		cr_assert_eq(
		    out.items[i].ts, INT64_C(1800000000000) + (int64_t) i);
		cr_assert_eq(out.items[i].rel, i % 3 == 0);
		cr_assert_eq(out.items[i].id.n, i % 2 ? 4u : 0u);
		cr_assert_eq(out.items[i].body_len, i % 2 ? 4u : 0u);
		cr_assert_eq(out.items[i].every_ms, (int64_t) i * 1000);
		cr_assert_eq(out.items[i].times, (uint32_t) i);
		cr_assert_eq(
		    out.items[i].until, i % 2 ? INT64_C(1900000000000) : 0);
		cr_assert_eq(out.items[i].catch_up, i % 2 == 1);
	}
	tlp_batch_fini(&out);
	tli_buf_fini(&b);
}

/* HELLO's client_id and its reply's answers_ms are optional: left out
 * when 0, so each side of the first layout reads the other's. */
Test(decode, hello_client_id_and_answers_ms_are_optional)
{
	tlp_hello h = {.proto = 1, .name = TLP_STR("n"), .client_ms = 5};
	tlp_hello_rep rep = {7, TLP_STR("b"), 9, 0}, got;
	tli_buf b;
	tlp_w w;
	tlp_r r;
	tlp_hello hd;
	tlp_str detail;
	size_t nf;
	int code;

	for (int with = 0; with < 2; with++) {
		h.client_id = with ? UINT64_C(0xfeedface12345678) : 0;
		rep.answers_ms = with ? 30000 : 0;
		tli_buf_init(&b);
		tlp_w_init(&w, &b);
		tlp_enc_hello(&w, &h);
		tlp_r_init(&r, b.data, b.len);
		TL_PASS(tlp_dec_hello(&r, &hd));
		cr_assert_eq(hd.client_id, h.client_id);
		cr_assert_eq(hd.client_ms, 5);
		tli_buf_fini(&b);

		tli_buf_init(&b);
		tlp_w_init(&w, &b);
		tlp_enc_hello_rep(&w, &rep);
		tlp_r_init(&r, b.data, b.len);
		TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
		/* the first layout's three fields when answers_ms is 0 */
		cr_assert_eq(nf, with ? 4u : 3u);
		TL_PASS(tlp_dec_hello_rep(&r, &got));
		cr_assert_eq(got.session_id, 9);
		cr_assert_eq(got.answers_ms, rep.answers_ms);
		tli_buf_fini(&b);
	}
}

Test(decode, deliver_get_and_results_carry_the_recurrence)
{
	tlp_delivery dv = {.id = TLP_STR("r"),
	    .version = 3,
	    .owner = TLP_STR("o"),
	    .body = "b",
	    .body_len = 1,
	    .seq = 4,
	    .every_ms = 300000,
	    .start = INT64_C(1800000000000),
	    .last = 13};
	tlp_deliver d = {TLP_STR("t"), TLP_STR("c"), &dv, 1}, dout;
	tlp_msg m = {.id = TLP_STR("r"),
	            .owner = TLP_STR("o"),
	            .body = "b",
	            .body_len = 1,
	            .every_ms = 1000,
	            .start = 5,
	            .seq = 2,
	            .last = 3,
	            .catch_up = true},
	        mout;
	tlp_result res = {.id = TLP_STR("r"), .version = 5, .seq = 3}, *rout;
	size_t n = 0;
	tli_buf b;
	tlp_w w;
	tlp_r r;
	tlp_str detail;
	size_t nf = 0;
	int code = -1;

	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_deliver(&w, &d);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_deliver(&r, &dout));
	cr_assert(dout.n == 1 && dout.v[0].seq == 4 &&
	    dout.v[0].every_ms == 300000 &&
	    dout.v[0].start == INT64_C(1800000000000) && dout.v[0].last == 13);
	tlp_deliver_fini(&dout);
	tli_buf_fini(&b);

	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_msg(&w, &m);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	TL_PASS(tlp_dec_msg(&r, &mout));
	cr_assert(mout.every_ms == 1000 && mout.start == 5 && mout.seq == 2 &&
	    mout.last == 3 && mout.catch_up);
	tli_buf_fini(&b);

	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_results(&w, &res, 1);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	TL_PASS(tlp_dec_results(&r, &rout, &n));
	cr_assert(n == 1 && rout[0].seq == 3 && rout[0].version == 5);
	tli_free(rout);
	tli_buf_fini(&b);
}

/* b, a reply encoded as a fixarray, with `extra` more elements after its
 * fields: a map and a nested array, as a newer broker might add. */
static void
grow_reply(tli_buf *b, unsigned extra)
{
	tlp_w w;

	cr_assert(
	    (b->data[0] & 0xf0) == 0x90 && (b->data[0] & 0x0f) + extra < 16);
	b->data[0] = (uint8_t) (b->data[0] + extra);
	tlp_w_init(&w, b);
	for (unsigned i = 0; i < extra; i++) {
		if (i % 2 == 0) {
			tlp_w_map(&w, 1);
			tlp_w_cstr(&w, "added");
			tlp_w_uint(&w, i);
		} else {
			tlp_w_array(&w, 2);
			tlp_w_cstr(&w, "x");
			tlp_w_array(&w, 0);
		}
	}
}

/* A client reads the replies of a broker that added fields at their end:
 * it takes what it knows and skips the rest; bytes after the reply's
 * array, or a reply short of a field it needs, are still refused. */
Test(decode, replies_grow_at_the_end)
{
	tlp_result res = {.id = TLP_STR("r"), .version = 5}, *rout;
	uint64_t a = 0, wt = 0, p = 0;
	int64_t until = 0;
	size_t n = 0, nf = 0;
	tlp_str detail;
	int code = -1;
	tli_buf b;
	tlp_w w;
	tlp_r r;

	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_counts(&w, 7, 8, 9);
	grow_reply(&b, 2);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	cr_assert_eq(nf, 5u);
	TL_PASS(tlp_dec_counts(&r, &a, &wt, &p));
	cr_assert(a == 7 && wt == 8 && p == 9);
	tli_buf_append(&b, "\x00", 1);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	TL_FAIL(tlp_dec_counts(&r, &a, &wt, &p), TL_EPROTO);
	tli_buf_fini(&b);

	/* [0, [result]] and one more */
	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_results(&w, &res, 1);
	grow_reply(&b, 1);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	TL_PASS(tlp_dec_results(&r, &rout, &n));
	cr_assert(n == 1 && rout[0].version == 5);
	tli_free(rout);
	tli_buf_fini(&b);

	/* a failure: [code, detail, until] and three more */
	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_enc_error_until(&w, TL_ELEASED, "held", 1234);
	grow_reply(&b, 3);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	cr_assert_eq(code, TL_ELEASED);
	TL_PASS(tlp_dec_error_until(&r, &until));
	cr_assert_eq(until, 1234);
	tli_buf_fini(&b);

	/* [0, a]: the counts short of two fields */
	tli_buf_init(&b);
	tlp_w_init(&w, &b);
	tlp_w_array(&w, 2);
	tlp_w_uint(&w, 0);
	tlp_w_uint(&w, 7);
	tlp_r_init(&r, b.data, b.len);
	TL_PASS(tlp_dec_reply_head(&r, &code, &detail, &nf));
	TL_FAIL(tlp_dec_counts(&r, &a, &wt, &p), TL_EPROTO);
	tli_buf_fini(&b);
}

Test(decode, every_truncation_is_refused)
{
	tli_buf b = encode_batch(6);

	for (size_t cut = 0; cut < b.len; cut++) {
		tlp_batch out;
		tlp_r r;
		tlp_r_init(&r, b.data, cut);
		TL_NOT_OK(tlp_dec_batch(&r, &out),
		    "a batch cut to %zu of %zu bytes decoded", cut, b.len);
	}
	tli_buf_fini(&b);
}

Test(decode, trailing_bytes_are_refused)
{
	tli_buf b = encode_batch(2);
	tlp_batch out;
	tlp_r r;

	tli_buf_append(&b, "\x00", 1);
	tlp_r_init(&r, b.data, b.len);
	TL_FAIL(tlp_dec_batch(&r, &out), TL_EPROTO);
	tli_buf_fini(&b);
}

Test(decode, lying_counts_are_refused_before_allocation)
{
	/* [topic, who, array32 of 4e9 items] in a dozen bytes. */
	static const uint8_t huge[] = {
	    0x93, 0xa1, 't', 0xa1, 'g', 0xdd, 0xee, 0x6b, 0x28, 0x00};
	/* The same with a plausible count but no bytes behind it. */
	static const uint8_t lie[] = {
	    0x93, 0xa1, 't', 0xa1, 'g', 0xdc, 0x0f, 0xa0};
	/* A string claiming 4 GiB. */
	static const uint8_t bigstr[] = {
	    0x91, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'};
	tlp_batch out;
	tlp_str name;
	tlp_r r;
	unsigned long before;

	tli_alloc_fail_after(-1);
	before = tli_alloc_count();
	tlp_r_init(&r, huge, sizeof(huge));
	TL_FAIL(tlp_dec_batch(&r, &out), TL_ETOOLARGE);
	tlp_r_init(&r, lie, sizeof(lie));
	TL_FAIL(tlp_dec_batch(&r, &out), TL_EPROTO);
	cr_assert_eq(
	    tli_alloc_count(), before, "a decoder allocated for a lie");
	tlp_r_init(&r, bigstr, sizeof(bigstr));
	TL_FAIL(tlp_dec_name(&r, &name), TL_ETOOLARGE);
}

Test(decode, deep_nesting_is_refused_when_skipped)
{
	uint8_t deep[64];

	memset(deep, 0x91, sizeof(deep) - 1); /* [[[[...]]]] */
	deep[sizeof(deep) - 1] = 0xc0;
	{
		tlp_r r;
		tlp_r_init(&r, deep, sizeof(deep));
		TL_FAIL(tlp_r_skip(&r), TL_EPROTO);
	}
}

Test(decode, frame_lengths_are_checked)
{
	uint8_t p[4];
	uint32_t len;

	tli_put_be32(p, 3);
	TL_FAIL(tlp_frame_len(p, &len), TL_EPROTO);
	tli_put_be32(p, TLP_MAX_FRAME + 1);
	TL_FAIL(tlp_frame_len(p, &len), TL_ETOOLARGE);
	tli_put_be32(p, 100);
	TL_PASS(tlp_frame_len(p, &len));
	cr_assert_eq(len, 100);
}

static uint64_t
rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

Test(decode, random_mutations_never_crash_any_decoder)
{
	tli_buf seeds[3];
	uint64_t st = 42;
	uint8_t buf[512];
	long decoded = 0;

	seeds[0] = encode_batch(3);
	seeds[1] = encode_batch(8);
	{
		tlp_w w;
		tlp_topic t = {.name = TLP_STR("t"), .buckets = 4};
		tli_buf_init(&seeds[2]);
		tlp_w_init(&w, &seeds[2]);
		tlp_enc_topic(&w, &t);
	}
	for (int i = 0; i < 100000; i++) {
		tli_buf *sd = &seeds[rnd(&st) % 3];
		size_t n = sd->len < sizeof(buf) ? sd->len : sizeof(buf);
		int flips = 1 + (int) (rnd(&st) % 4);

		memcpy(buf, sd->data, n);
		for (int f = 0; f < flips; f++) {
			buf[rnd(&st) % n] = (uint8_t) rnd(&st);
		}
		if (rnd(&st) % 4 == 0) {
			n = rnd(&st) % (n + 1);
		}
		/* Decode from a heap copy of exactly n bytes, so the address
		 * sanitizer sees any read past the end. */
		{
			uint8_t *heap = malloc(n ? n : 1);
			memcpy(heap, buf, n);
			decoded += tlf_run_decoders(heap, n);
			free(heap);
		}
	}
	cr_assert_gt(
	    decoded, 0, "no mutation decoded at all: the seeds are off");
	for (int i = 0; i < 3; i++) {
		tli_buf_fini(&seeds[i]);
	}
}
