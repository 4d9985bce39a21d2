/*
 * End-to-end, the real broker over its wire protocol: a scheduled message
 * arrives on time (never early, at most 50 ms late); ten thousand messages
 * spread over four consumers are each delivered exactly once and never
 * early; a consumer with credit 1 never holds two leases at once; messages
 * due at the same millisecond come in the order they were created.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(delivery);

Test(delivery, scheduled_message_arrives_on_time)
{
	rc_client *p, *c;
	rc_deliver dv;
	tlp_result res;
	int64_t due, late_us;

	rc_broker_start(&B, "e2e-ontime");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "worker", 30000, 10));

	due = tli_wall_ms() + 300;
	TL_PASS(rc_one(p, TLP_OP_CREATE, "t", "app", "job-1", 0, due, false,
	    "payload", &res));
	cr_assert_eq(res.ts, due, "the created message sits at %lld, not %lld",
	    (long long) res.ts, (long long) due);

	cr_assert_eq(rc_wait_deliver(c, 5000, &dv), 1,
	    "the message was not delivered within 5 s of being due");
	late_us = dv.f->rx_us - due * 1000;
	cr_assert_eq(dv.d.n, 1);
	cr_assert_eq(dv.d.v[0].id.n, 5);
	cr_assert(memcmp(dv.d.v[0].id.p, "job-1", 5) == 0);
	cr_assert_eq(dv.d.v[0].body_len, 7);
	cr_assert(memcmp(dv.d.v[0].body, "payload", 7) == 0);
	cr_assert_eq(dv.d.v[0].due_ts, due,
	    "the delivery says it was due at %lld, it was created for %lld",
	    (long long) dv.d.v[0].due_ts, (long long) due);
	cr_assert_eq(dv.d.v[0].deliveries, 1);
	cr_assert(late_us >= 0, "delivered %lld us before its due time",
	    (long long) -late_us);
	cr_assert(late_us <= 50000,
	    "delivered %lld ms after its due time "
	    "(limit 50 ms)",
	    (long long) (late_us / 1000));
	cr_assert(dv.d.v[0].lease_until >= due + 30000 &&
	        dv.d.v[0].lease_until <= dv.f->rx_ms + 30000 + 1,
	    "lease_until %lld does not match a 30 s lease taken between %lld "
	    "and "
	    "%lld",
	    (long long) dv.d.v[0].lease_until, (long long) due,
	    (long long) dv.f->rx_ms);
	cr_log_info(
	    "delivered %lld us after its due time", (long long) late_us);
	rc_deliver_free(&dv);
	rc_close(p);
	rc_close(c);
}

/* ---- 10k messages over 4 consumers ---- */

#define MANY 10000
#define NCONS 4

typedef struct many {
	pthread_mutex_t mtx;
	int64_t ts[MANY];       /* each message's created timestamp */
	_Atomic int seen[MANY]; /* deliveries of each message */
	_Atomic int total;      /* deliveries overall */
	_Atomic int acked;
	_Atomic int early;
	_Atomic int wrong_due;
	_Atomic int bad_id;
	_Atomic int ack_err;
	_Atomic int decode_err;
	int64_t min_margin_us; /* smallest receipt - due */
	int64_t max_late_us;
	int64_t deadline_ms; /* monotonic */
} many;

typedef struct cons {
	many *m;
	rc_client *c;
	char name[16];
	int got;
} cons;

static void
many_note(many *m, const rc_deliver *dv, size_t i)
{
	const tlp_delivery *d = &dv->d.v[i];
	char id[16];
	int idx;
	int64_t margin = dv->f->rx_us - d->due_ts * 1000;

	snprintf(id, sizeof(id), "%.*s", (int) d->id.n, d->id.p);
	if (d->id.n != 6 || sscanf(id, "m%05d", &idx) != 1 || idx < 0 ||
	    idx >= MANY) {
		m->bad_id++;
		return;
	}
	m->seen[idx]++;
	m->wrong_due += d->due_ts != m->ts[idx];
	m->early += margin < 0;
	pthread_mutex_lock(&m->mtx);
	m->min_margin_us =
	    margin < m->min_margin_us ? margin : m->min_margin_us;
	m->max_late_us = margin > m->max_late_us ? margin : m->max_late_us;
	pthread_mutex_unlock(&m->mtx);
}

static void *
cons_main(void *arg)
{
	cons *k = arg;
	many *m = k->m;
	int64_t drain_until = 0;

	for (;;) {
		rc_deliver dv;
		rc_results res;
		int rv;
		int64_t now = tli_mono_ms();

		if (now >= m->deadline_ms) {
			break;
		}
		/* Once everything arrived, listen a little longer for
		 * duplicates, then stop. */
		if (m->total >= MANY && drain_until == 0) {
			drain_until = now + 300;
		}
		if (drain_until != 0 && now >= drain_until) {
			break;
		}
		rv = rc_wait_deliver(k->c, 50, &dv);
		if (rv < 0) {
			m->decode_err++;
			continue;
		}
		if (rv == 0) {
			continue;
		}
		for (size_t i = 0; i < dv.d.n; i++) {
			many_note(m, &dv, i);
		}
		k->got += (int) dv.d.n;
		m->total += (int) dv.d.n;
		rv = rc_ack_all(k->c, "t", k->name, &dv, &res);
		if (rv != TL_OK || res.n != dv.d.n) {
			m->ack_err += (int) dv.d.n;
		} else {
			for (size_t i = 0; i < res.n; i++) {
				if (res.v[i].err == TL_OK) {
					m->acked++;
				} else {
					m->ack_err++;
				}
			}
			rc_results_free(&res);
		}
		rc_deliver_free(&dv);
	}
	return NULL;
}

Test(delivery, ten_thousand_over_four_consumers_exactly_once)
{
	static many m;
	cons k[NCONS];
	pthread_t th[NCONS];
	rc_client *p;
	tlp_item *items;
	tlp_topic t;
	int64_t base;
	int missing = 0, dup = 0;

	memset(&m, 0, sizeof(m));
	pthread_mutex_init(&m.mtx, NULL);
	m.min_margin_us = INT64_MAX;
	rc_broker_start(&B, "e2e-many");
	p = rc_open(B.url, "producer");
	for (int i = 0; i < NCONS; i++) {
		k[i].m = &m;
		k[i].got = 0;
		snprintf(k[i].name, sizeof(k[i].name), "worker-%d", i);
		k[i].c = rc_open(B.url, k[i].name);
		TL_PASS(rc_subscribe(k[i].c, "t", k[i].name, 30000, 64));
	}
	m.deadline_ms = tli_mono_ms() + 45000;
	for (int i = 0; i < NCONS; i++) {
		cr_assert_eq(pthread_create(&th[i], NULL, cons_main, &k[i]), 0);
	}

	/* Due between 1.5 and 2.5 s from now, in batches of 500. */
	items = calloc(500, sizeof(*items));
	cr_assert_not_null(items);
	base = tli_wall_ms() + 1500;
	for (int b0 = 0; b0 < MANY; b0 += 500) {
		char ids[500][8];
		rc_results res;
		for (int j = 0; j < 500; j++) {
			int i = b0 + j;
			snprintf(ids[j], sizeof(ids[j]), "m%05d", i);
			m.ts[i] = base + (i * 7919) % 1000;
			items[j].id = (tlp_str){ids[j], 6};
			items[j].ts = m.ts[i];
			items[j].body = ids[j];
			items[j].body_len = 6;
		}
		TL_PASS(
		    rc_batch(p, TLP_OP_CREATE, "t", "app", items, 500, &res));
		cr_assert_eq(res.n, 500);
		for (int j = 0; j < 500; j++) {
			TL_PASS(res.v[j].err, "create m%05d", b0 + j);
			cr_assert_eq(res.v[j].ts, m.ts[b0 + j]);
		}
		rc_results_free(&res);
	}
	free(items);

	for (int i = 0; i < NCONS; i++) {
		pthread_join(th[i], NULL);
	}
	for (int i = 0; i < MANY; i++) {
		missing += m.seen[i] == 0;
		dup += m.seen[i] > 1;
	}
	cr_log_info("deliveries %d; per consumer %d %d %d %d; earliest margin "
	            "%lld us, latest %lld us",
	    (int) m.total, k[0].got, k[1].got, k[2].got, k[3].got,
	    (long long) m.min_margin_us, (long long) m.max_late_us);
	cr_assert_eq(m.decode_err, 0, "DELIVER pushes that did not decode");
	cr_assert_eq(m.bad_id, 0, "deliveries of ids never created");
	cr_assert_eq(missing, 0, "%d messages were never delivered", missing);
	cr_assert_eq(dup, 0, "%d messages were delivered more than once", dup);
	cr_assert_eq(m.total, MANY);
	cr_assert_eq(m.early, 0,
	    "%d deliveries arrived before their due time "
	    "(earliest by %lld us)",
	    (int) m.early, (long long) -m.min_margin_us);
	cr_assert_eq(m.wrong_due, 0,
	    "deliveries whose due_ts is not the "
	    "created ts");
	cr_assert_eq(m.ack_err, 0, "%d ACKs failed", (int) m.ack_err);
	cr_assert_eq(m.acked, MANY);
	for (int i = 0; i < NCONS; i++) {
		cr_assert(k[i].got > 0, "consumer %s got nothing", k[i].name);
	}
	TL_PASS(rc_topic_get(p, "t", &t));
	cr_assert_eq(t.messages, 0, "the topic still holds %llu messages",
	    (unsigned long long) t.messages);
	cr_assert_eq(t.available + t.waiting + t.processing, 0);

	for (int i = 0; i < NCONS; i++) {
		rc_close(k[i].c);
	}
	rc_close(p);
}

/* ---- credit 1 ---- */

Test(delivery, credit_one_holds_one_lease_at_a_time)
{
	rc_client *p, *c;
	tlp_item items[20];
	char ids[20][8];
	rc_results res;
	tlp_topic t;

	rc_broker_start(&B, "e2e-credit");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	memset(items, 0, sizeof(items));
	for (int i = 0; i < 20; i++) {
		snprintf(ids[i], sizeof(ids[i]), "c%02d", i);
		items[i].id = TLP_STR(ids[i]);
		items[i].ts = 0;
		items[i].rel = true; /* due now */
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, 20, &res));
	for (size_t i = 0; i < res.n; i++) {
		TL_PASS(res.v[i].err);
	}
	rc_results_free(&res);
	TL_PASS(rc_subscribe(c, "t", "solo", 30000, 1));

	for (int round = 0; round < 5; round++) {
		rc_deliver dv;
		rc_frame *extra;
		tlp_result ar;
		char id[8];

		cr_assert_eq(rc_wait_deliver(c, 5000, &dv), 1,
		    "round %d: no delivery within 5 s", round);
		cr_assert_eq(dv.d.n, 1,
		    "round %d: one push carried %zu leases "
		    "with credit 1",
		    round, dv.d.n);
		snprintf(id, sizeof(id), "%.*s", (int) dv.d.v[0].id.n,
		    dv.d.v[0].id.p);
		/* While it holds this lease, nothing else may come. */
		extra = rc_wait_push(c, TLP_OP_DELIVER, 400);
		cr_assert_null(extra,
		    "round %d: a second DELIVER arrived while "
		    "%s was held (credit 1)",
		    round, id);
		TL_PASS(rc_topic_get(p, "t", &t));
		cr_assert_eq(t.processing, 1, "round %d: %llu leases held",
		    round, (unsigned long long) t.processing);
		cr_assert_eq(t.messages, (uint64_t) (20 - round));
		TL_PASS(rc_one(c, TLP_OP_ACK, "t", "solo", id,
		            dv.d.v[0].version, 0, false, NULL, &ar),
		    "round %d: ACK %s failed", round, id);
		rc_deliver_free(&dv);
	}
	rc_close(p);
	rc_close(c);
}

/* Messages due at the same millisecond go in the order of their ids, across
 * the topic's 16 buckets: with generated ids, the order they were created
 * in. (Ordered by bucket first, forty ids spread over the buckets would
 * come in the order of their hashes.) */
Test(delivery, same_due_time_in_creation_order)
{
	enum { N = 40 };
	char ids[N][TL_GEN_ID_LEN + 1];
	rc_client *p, *c;
	int64_t due;

	rc_broker_start(&B, "e2e-fifo");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	due = tli_wall_ms() + 1000;
	for (int i = 0; i < N; i++) {
		tlp_item it;
		rc_results res;

		memset(&it, 0, sizeof(it));
		it.ts = due;
		it.body = "x";
		it.body_len = 1;
		TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", &it, 1, &res));
		cr_assert_eq(res.n, 1);
		TL_PASS(res.v[0].err);
		cr_assert_eq(res.v[0].id.n, TL_GEN_ID_LEN);
		memcpy(ids[i], res.v[0].id.p, TL_GEN_ID_LEN);
		ids[i][TL_GEN_ID_LEN] = '\0';
		rc_results_free(&res);
	}
	TL_PASS(rc_subscribe(c, "t", "solo", 30000, 1));
	for (int i = 0; i < N; i++) {
		rc_deliver dv;
		tlp_result ar;
		char id[TL_GEN_ID_LEN + 1];

		cr_assert_eq(rc_wait_deliver(c, 5000, &dv), 1,
		    "message %d of %d not delivered within 5 s", i + 1, N);
		cr_assert_eq(dv.d.n, 1);
		snprintf(id, sizeof(id), "%.*s", (int) dv.d.v[0].id.n,
		    dv.d.v[0].id.p);
		cr_assert_str_eq(id, ids[i],
		    "delivery %d is %s, not %s (created %d-th)", i + 1, id,
		    ids[i], i + 1);
		cr_assert_eq(dv.d.v[0].due_ts, due);
		TL_PASS(rc_one(c, TLP_OP_ACK, "t", "solo", id,
		    dv.d.v[0].version, 0, false, NULL, &ar));
		rc_deliver_free(&dv);
	}
	rc_close(p);
	rc_close(c);
}
