/*
 * End-to-end, the real broker: dead letters. A message that keeps coming
 * back (its consumer never acks) is delivered max_deliveries times, then
 * leaves the timeline for the dead-letter list: GET says TL_EDEAD,
 * DLQ_LIST shows it, nothing delivers it any more, and DLQ_KICK puts it
 * back with its delivery count reset, after which it is delivered again.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(deadletter);

static void
enc_list(tlp_w *w, const void *arg)
{
	tlp_enc_list(w, arg);
}

static void
enc_topic(tlp_w *w, const void *arg)
{
	tlp_enc_topic_create(w, arg);
}

/* DLQ_LIST of a topic: how many entries, and whether `id` is one. */
static size_t
dlq_list(rc_client *c, const char *topic, const char *id, bool *has)
{
	tlp_list l = {.topic = TLP_STR(topic), .limit = 100};
	rc_frame *f = NULL;
	tlp_entry *v;
	size_t n = 0;
	bool more;
	tlp_r r;

	TL_PASS(rc_req(c, TLP_OP_DLQ_LIST, enc_list, &l, &f, &r));
	TL_PASS(tlp_dec_entries(&r, &v, &n, &more));
	*has = false;
	for (size_t i = 0; i < n; i++) {
		if (v[i].id.n == strlen(id) &&
		    memcmp(v[i].id.p, id, v[i].id.n) == 0) {
			*has = true;
		}
	}
	tli_free(v);
	rc_frame_free(f);
	return n;
}

Test(deadletter, poison_message_is_dead_lettered_listed_and_kicked_back)
{
	tlp_topic t = {.name = TLP_STR("poison"),
	    .buckets = 2,
	    .max_body = 1024,
	    .default_lease_ms = 200,
	    .max_lease_ms = 60000,
	    .max_deliveries = 2};
	rc_client *p, *c;
	tlp_result res;
	tlp_topic info;
	tlp_msg m;
	rc_frame *f = NULL;
	bool has;

	rc_broker_start(&B, "dead");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_req(p, TLP_OP_TOPIC_CREATE, enc_topic, &t, NULL, NULL));
	TL_PASS(rc_one(
	    p, TLP_OP_CREATE, "poison", "g", "bad", 0, 0, true, "x", &res));
	TL_PASS(rc_subscribe(c, "poison", "w", 200, 4));

	/* Delivered twice (the lease runs out each time), never acked. */
	for (uint32_t i = 1; i <= 2; i++) {
		rc_deliver dv;
		cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1,
		    "delivery %u did not come", i);
		cr_assert_eq(dv.d.n, 1);
		cr_assert_eq(dv.d.v[0].deliveries, i);
		rc_deliver_free(&dv);
	}
	/* The third lease dead-letters it instead. */
	{
		int64_t deadline = tli_wall_ms() + 10000;
		bool dead = false;
		while (!dead && tli_wall_ms() < deadline) {
			dead = dlq_list(p, "poison", "bad", &has) == 1 && has;
			if (!dead) {
				tt_nap_ms(20);
			}
		}
		cr_assert(dead, "the message never reached the dead letters");
	}
	TL_FAIL(rc_get(p, "poison", "bad", &m, &f), TL_EDEAD);
	rc_frame_free(f);
	f = NULL;
	TL_PASS(rc_topic_get(p, "poison", &info));
	cr_assert_eq(info.dead, 1);
	cr_assert_eq(info.messages, 0);
	{
		rc_deliver dv;
		cr_assert_eq(rc_wait_deliver(c, 600, &dv), 0,
		    "a dead letter was delivered");
	}

	/* Kicked back: delivered again, its count starting over. */
	TL_PASS(rc_one(p, TLP_OP_DLQ_KICK, "poison", "ops", "bad", 0, 0, true,
	    NULL, &res));
	{
		rc_deliver dv;
		cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1,
		    "the kicked message was not delivered");
		cr_assert_eq(dv.d.v[0].deliveries, 1);
		TL_PASS(rc_one(c, TLP_OP_ACK, "poison", "w", "bad",
		    dv.d.v[0].version, 0, false, NULL, &res));
		rc_deliver_free(&dv);
	}
	cr_assert_eq(dlq_list(p, "poison", "bad", &has), 0);
	TL_PASS(rc_topic_get(p, "poison", &info));
	cr_assert_eq(info.dead, 0);
	cr_assert_eq(info.messages, 0);
	rc_close(c);
	rc_close(p);
}
