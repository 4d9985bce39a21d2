/*
 * End-to-end, the real broker: large bodies. Messages whose bodies
 * together exceed what one DELIVER frame should carry are all delivered
 * (in several frames), each with its body intact.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(bigbody);

static void
enc_topic(tlp_w *w, const void *arg)
{
	tlp_enc_topic_create(w, arg);
}

#define BIG (3u * 1024u * 1024u)
#define NBIG 4

Test(bigbody, large_bodies_are_all_delivered_intact)
{
	tlp_topic t = {.name = TLP_STR("big"),
	    .buckets = 1,
	    .max_body = 4u * 1024u * 1024u,
	    .default_lease_ms = 30000,
	    .max_lease_ms = 60000};
	static char body[BIG];
	rc_client *p, *c;
	tlp_item items[NBIG];
	rc_results res;
	size_t got = 0, frames = 0;
	int64_t deadline;

	rc_broker_start(&B, "big");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_req(p, TLP_OP_TOPIC_CREATE, enc_topic, &t, NULL, NULL));
	for (size_t i = 0; i < sizeof(body); i++) {
		body[i] = (char) ('a' + i % 26);
	}
	for (int i = 0; i < NBIG; i++) {
		items[i] = (tlp_item){.id = TLP_STR(""),
		    .ts = 0,
		    .rel = true,
		    .body = body,
		    .body_len = sizeof(body)};
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "big", "g", items, NBIG, &res));
	for (size_t i = 0; i < res.n; i++) {
		TL_PASS(res.v[i].err, "create %zu", i);
	}
	rc_results_free(&res);

	/* Credit for all four at once: one lease batch, more than one
	 * frame's worth of bodies. */
	TL_PASS(rc_subscribe(c, "big", "w", 30000, NBIG));
	deadline = tli_wall_ms() + 20000;
	while (got < NBIG && tli_wall_ms() < deadline) {
		rc_deliver dv;
		int rv = rc_wait_deliver(c, 1000, &dv);
		cr_assert(rv >= 0, "a DELIVER push did not decode");
		if (rv == 0) {
			continue;
		}
		frames++;
		for (size_t i = 0; i < dv.d.n; i++) {
			cr_assert_eq(dv.d.v[i].body_len, sizeof(body));
			cr_assert_eq(
			    memcmp(dv.d.v[i].body, body, sizeof(body)), 0);
			got++;
		}
		rc_deliver_free(&dv);
	}
	cr_assert_eq(
	    got, NBIG, "only %zu of %d large messages delivered", got, NBIG);
	cr_assert_geq(frames, 2, "12 MiB of bodies came in one frame");
	rc_close(c);
	rc_close(p);
}
