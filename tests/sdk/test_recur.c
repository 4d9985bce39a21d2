/*
 * End-to-end: recurring messages through libtimeline and the real broker.
 * A series is delivered once per occurrence with its sequence number, each
 * occurrence at or after its grid time; a lease that runs out redelivers
 * the same occurrence; a broker killed mid-series continues it after the
 * restart; after a consumer's pause the default skips the missed
 * occurrences and catch_up delivers every one.
 */
#include <signal.h>

#include "sdk_util.h"
#include "tltest.h"

SB_SUITE(recur, "sdk-recur");

/* Slack for the client's estimate of the broker's clock. */
#define SLACK_MS 5

typedef struct got {
	uint32_t seq[32];
	int64_t at[32]; /* the occurrence's grid time */
	int n;
	int early;
} got;

static void
put_series(const char *topic, const char *id, int64_t in_ms, int64_t every,
    uint32_t times, bool catch_up)
{
	tl_put p;

	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = in_ms;
	p.rel = true;
	p.body = "tick";
	p.body_len = 4;
	p.every_ms = every;
	p.times = times;
	p.catch_up = catch_up;
	TL_PASS(tl_put_batch(C, topic, "prod", &p, 1));
	TL_PASS(p.err, "put %s", id);
}

static tl_consumer *
consumer(const char *topic, int64_t lease_ms, uint32_t credit)
{
	tl_consumer_conf conf = {.topic = topic,
	    .consumer_id = "c1",
	    .lease_ms = lease_ms,
	    .credit = credit};
	tl_consumer *k = NULL;

	TL_PASS(tl_consumer_open(&k, C, &conf));
	return k;
}

/* One lease within timeout_ms, or NULL; notes its occurrence in g (and
 * whether it came before its grid time). */
static tl_lease *
next_lease(tl_consumer *k, got *g, int timeout_ms)
{
	tl_lease *l = NULL;
	size_t n = 0;

	TL_PASS(tl_consumer_poll(k, &l, 1, &n, timeout_ms));
	if (n == 0) {
		return NULL;
	}
	if (g != NULL && g->n < 32) {
		g->seq[g->n] = tl_lease_seq(l);
		g->at[g->n] = tl_lease_occurrence_at(l);
		g->early += tl_client_broker_now(C) + SLACK_MS <
		    tl_lease_occurrence_at(l);
		g->n++;
	}
	return l;
}

static void
ack(tl_lease *l)
{
	TL_PASS(tl_lease_delete(l), "ack of seq %u", tl_lease_seq(l));
	tl_lease_free(l);
}

static void
check_gone(const char *topic, const char *id)
{
	tl_message *m = NULL;

	TL_FAIL(tl_get(C, topic, id, &m), TL_ENOTFOUND);
}

Test(recur, five_occurrences_are_delivered_once_each_on_their_grid)
{
	tl_consumer *k;
	tl_message *m = NULL;
	got g = {0};
	tl_lease *l;

	sb_topic(C, "t", 0);
	k = consumer("t", 0, 4);
	put_series("t", "r", 200, 200, 5, false);
	TL_PASS(tl_get(C, "t", "r", &m));
	cr_assert(m->every_ms == 200 && m->seq == 1 && m->last == 5 &&
	    m->start == m->ts && !m->catch_up);
	tl_message_free(m);
	while ((l = next_lease(k, &g, 3000)) != NULL) {
		cr_assert_eq(tl_lease_last(l), 5);
		size_t bl = 0;
		const void *b = tl_lease_body(l, &bl);

		cr_assert(bl == 4 && memcmp(b, "tick", 4) == 0);
		ack(l);
		if (g.n == 5) {
			break;
		}
	}
	cr_assert_eq(g.n, 5, "got %d of 5 occurrences", g.n);
	/* nothing after the last one, and the message is gone */
	cr_assert_null(next_lease(k, &g, 700), "a sixth delivery");
	check_gone("t", "r");
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(g.seq[i], (uint32_t) i + 1, "delivery %d: seq %u",
		    i, g.seq[i]);
		cr_assert_eq(g.at[i], g.at[0] + 200 * i);
	}
	cr_assert_eq(
	    g.early, 0, "%d deliveries before their grid time", g.early);
	tl_consumer_close(k);
}

Test(recur, a_lease_that_runs_out_redelivers_the_same_occurrence)
{
	tl_consumer *k;
	got g = {0};
	tl_lease *l;

	sb_topic(C, "t", 0);
	k = consumer("t", 300, 1);
	put_series("t", "r", 100, 2000, 2, false);
	l = next_lease(k, &g, 3000);
	cr_assert_not_null(l);
	cr_assert_eq(tl_lease_seq(l), 1);
	tl_lease_free(l); /* not acked: the lease runs out */
	l = next_lease(k, &g, 3000);
	cr_assert_not_null(l, "no redelivery");
	cr_assert_eq(
	    tl_lease_seq(l), 1, "redelivered as seq %u", tl_lease_seq(l));
	cr_assert_eq(tl_lease_deliveries(l), 2);
	ack(l);
	l = next_lease(k, &g, 4000);
	cr_assert_not_null(l);
	cr_assert_eq(tl_lease_seq(l), 2);
	cr_assert_eq(tl_lease_deliveries(l), 1, "counted per occurrence");
	cr_assert_eq(tl_lease_occurrence_at(l), g.at[0] + 2000);
	ack(l);
	check_gone("t", "r");
	cr_assert_eq(g.early, 0);
	tl_consumer_close(k);
}

Test(recur, a_broker_killed_mid_series_continues_it)
{
	tl_consumer *k;
	got g = {0};
	tl_lease *l;
	int64_t deadline;

	sb_topic(C, "t", 0);
	k = consumer("t", 0, 1);
	put_series("t", "r", 100, 300, 6, true);
	for (int i = 0; i < 2; i++) {
		l = next_lease(k, &g, 3000);
		cr_assert_not_null(l);
		ack(l);
	}
	sb_kill(&B, SIGKILL);
	tt_nap_ms(200);
	sb_spawn(&B);
	deadline = tli_mono_ms() + 15000;
	while (g.n < 6 && tli_mono_ms() < deadline) {
		l = next_lease(k, &g, 500);
		if (l == NULL) {
			continue;
		}
		if (tl_lease_delete(l) != TL_OK) {
			/* an ACK lost to the reconnection: the same
			 * occurrence comes back */
			g.n--;
		}
		tl_lease_free(l);
	}
	cr_assert_eq(g.n, 6, "got %d of 6 occurrences", g.n);
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(g.seq[i], (uint32_t) i + 1, "delivery %d: seq %u",
		    i, g.seq[i]);
	}
	cr_assert_null(next_lease(k, &g, 700), "a seventh delivery");
	check_gone("t", "r");
	cr_assert_eq(g.early, 0);
	tl_consumer_close(k);
}

Test(recur, after_a_pause_the_default_skips_and_catch_up_delivers_all)
{
	tl_consumer *k;
	got d = {0}, c = {0}; /* the default series and the catch_up one */
	tl_lease *l, *first[2];
	int64_t deadline;

	sb_topic(C, "t", 0);
	k = consumer("t", 10000, 4);
	put_series("t", "d", 100, 200, 6, false);
	put_series("t", "c", 100, 200, 6, true);
	for (int i = 0; i < 2; i++) {
		l = next_lease(k, NULL, 3000);
		cr_assert_not_null(l);
		cr_assert_eq(tl_lease_seq(l), 1);
		first[strcmp(tl_lease_id(l), "d") == 0 ? 0 : 1] = l;
	}
	/* the consumer pauses over grid points 2..4 */
	tt_nap_ms(750);
	ack(first[0]);
	ack(first[1]);
	deadline = tli_mono_ms() + 10000;
	while (c.n < 5 && tli_mono_ms() < deadline) {
		l = next_lease(k, NULL, 500);
		if (l == NULL) {
			continue;
		}
		got *g = strcmp(tl_lease_id(l), "d") == 0 ? &d : &c;
		g->seq[g->n] = tl_lease_seq(l);
		g->at[g->n] = tl_lease_occurrence_at(l);
		g->early += tl_client_broker_now(C) + SLACK_MS <
		    tl_lease_occurrence_at(l);
		g->n++;
		ack(l);
	}
	/* let the default series end too */
	while ((l = next_lease(k, &d, 700)) != NULL) {
		ack(l);
	}
	cr_assert_eq(c.n, 5, "catch_up: %d of the 5 after the pause", c.n);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(c.seq[i], (uint32_t) i + 2);
	}
	cr_assert(d.n >= 1 && d.n < 5 && d.seq[0] >= 4,
	    "default: %d deliveries after the pause, the first seq %u", d.n,
	    d.n > 0 ? d.seq[0] : 0);
	cr_assert_eq(d.seq[d.n - 1], 6, "the last occurrence is delivered");
	for (int i = 1; i < d.n; i++) {
		cr_assert_eq(d.seq[i], d.seq[i - 1] + 1);
	}
	cr_assert_eq(d.early + c.early, 0);
	check_gone("t", "d");
	check_gone("t", "c");
	tl_consumer_close(k);
}

Test(recur, refused_recurrences_store_nothing)
{
	tl_put p;
	tl_message *m = NULL;

	sb_topic(C, "t", 0);
	memset(&p, 0, sizeof(p));
	p.id = "r";
	p.ts = 1000;
	p.rel = true;
	p.every_ms = 1000; /* no end */
	TL_PASS(tl_put_batch(C, "t", "prod", &p, 1));
	TL_FAIL(p.err, TL_EINVAL);
	p.times = 3;
	p.until = tl_client_broker_now(C) + 60000; /* two ends */
	TL_PASS(tl_put_batch(C, "t", "prod", &p, 1));
	TL_FAIL(p.err, TL_EINVAL);
	p.until = 0;
	p.every_ms = -1;
	TL_PASS(tl_put_batch(C, "t", "prod", &p, 1));
	TL_FAIL(p.err, TL_ERANGE);
	TL_FAIL(tl_get(C, "t", "r", &m), TL_ENOTFOUND);
	/* until becomes the last grid point before it */
	p.every_ms = 1000;
	p.times = 0;
	p.ts = tl_client_broker_now(C) + 60000;
	p.rel = false;
	p.until = p.ts + 4500;
	TL_PASS(tl_put_batch(C, "t", "prod", &p, 1));
	TL_PASS(p.err);
	TL_PASS(tl_get(C, "t", "r", &m));
	cr_assert(m->seq == 1 && m->last == 5 && m->start == p.ts);
	tl_message_free(m);
}
