/*
 * One entry point that runs a byte string through every body decoder of
 * the wire protocol, for the deterministic mutation test (test_decode.c;
 * the libFuzzer targets, one per decoder, are in tests/fuzz/). Every
 * decoder must answer TL_OK or an error, never crash, never read past the
 * input.
 */
#ifndef TL_FUZZ_MSGS_H
#define TL_FUZZ_MSGS_H

#include "msgs.h"

static inline int
tlf_run_decoders(const uint8_t *p, size_t n)
{
	tlp_r r;
	int ok = 0;
	union {
		tlp_hello hello;
		tlp_hello_rep hello_rep;
		tlp_topic topic;
		tlp_batch batch;
		tlp_msg msg;
		tlp_list list;
		tlp_sub sub;
		tlp_deliver deliver;
	} u;
	tlp_str s1, s2;
	int64_t a, b;
	uint64_t x, y, z;
	tlp_topic *tv;
	tlp_result *rv;
	tlp_entry *ev;
	size_t cnt;
	bool more;
	int err;
	tlp_hdr h;
	uint32_t len;

#define RUN(call)                      \
	do {                           \
		tlp_r_init(&r, p, n);  \
		ok += (call) == TL_OK; \
	} while (0)

	RUN(tlp_dec_hello(&r, &u.hello));
	RUN(tlp_dec_ping(&r, &a));
	RUN(tlp_dec_topic_create(&r, &u.topic));
	RUN(tlp_dec_name(&r, &s1));
	RUN(tlp_dec_get(&r, &s1, &s2));
	RUN(tlp_dec_list(&r, &u.list));
	RUN(tlp_dec_count(&r, &s1, &a, &b));
	RUN(tlp_dec_sub(&r, &u.sub));
	tlp_r_init(&r, p, n);
	if (tlp_dec_batch(&r, &u.batch) == TL_OK) {
		ok++;
		tlp_batch_fini(&u.batch);
	}
	tlp_r_init(&r, p, n);
	if (tlp_dec_deliver(&r, &u.deliver) == TL_OK) {
		ok++;
		tlp_deliver_fini(&u.deliver);
	}
	/* Replies: the head, then each body layout. */
	tlp_r_init(&r, p, n);
	if (tlp_dec_reply_head(&r, &err, &s1, &cnt) == TL_OK) {
		const uint8_t *rest = r.p;
		size_t left = tlp_r_left(&r);
		tlp_r_init(&r, rest, left);
		ok += tlp_dec_hello_rep(&r, &u.hello_rep) == TL_OK;
		tlp_r_init(&r, rest, left);
		ok += tlp_dec_ping_rep(&r, &a) == TL_OK;
		tlp_r_init(&r, rest, left);
		ok += tlp_dec_topic(&r, &u.topic) == TL_OK;
		tlp_r_init(&r, rest, left);
		if (tlp_dec_topic_list(&r, &tv, &cnt) == TL_OK) {
			ok++;
			tli_free(tv);
		}
		tlp_r_init(&r, rest, left);
		if (tlp_dec_results(&r, &rv, &cnt) == TL_OK) {
			ok++;
			tli_free(rv);
		}
		tlp_r_init(&r, rest, left);
		ok += tlp_dec_msg(&r, &u.msg) == TL_OK;
		tlp_r_init(&r, rest, left);
		if (tlp_dec_entries(&r, &ev, &cnt, &more) == TL_OK) {
			ok++;
			tli_free(ev);
		}
		tlp_r_init(&r, rest, left);
		ok += tlp_dec_counts(&r, &x, &y, &z) == TL_OK;
	}
	/* Framing. */
	if (n >= TLP_LEN_BYTES) {
		ok += tlp_frame_len(p, &len) == TL_OK;
	}
	ok += tlp_hdr_decode(&h, p, n) == TL_OK;
	tlp_r_init(&r, p, n);
	ok += tlp_r_skip(&r) == TL_OK;
#undef RUN
	return ok;
}

#endif
