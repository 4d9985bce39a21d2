/*
 * End-to-end, leases taken ahead of the due time (lease_ahead_ms): the
 * real broker takes a due message's lease before the due time and pushes
 * the message at the due time itself, never before; the lease runs from
 * the due time; the owner meets a lease in between; and a consumer that
 * returns, after a reconnect or after the broker was killed with SIGKILL
 * and restarted, gets that lease at the due time, not early.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(ahead);

/* Wide margins for slow runs (the sanitizer build on a busy machine): a
 * message due within LEAD is leased at once. */
#define LEAD 5000
#define LEASE INT64_C(30000)

static void
start(const char *tag)
{
	rc_broker_init(&B, tag);
	B.args[0] = "--lease-ahead";
	B.args[1] = "5000";
	rc_broker_spawn(&B, 20000);
}

/* Wait until GET shows the message leased to `consumer` (at most
 * timeout_ms); the wall time (ms) it was first seen so, or -1. */
static int64_t
wait_leased(rc_client *c, const char *id, const char *consumer,
    uint64_t *version, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	while (tli_mono_ms() < deadline) {
		tlp_msg m;
		rc_frame *f = NULL;
		bool got = false;

		if (rc_get(c, "t", id, &m, &f) == TL_OK &&
		    m.consumer.n == strlen(consumer) &&
		    memcmp(m.consumer.p, consumer, m.consumer.n) == 0) {
			*version = m.version;
			got = true;
		}
		rc_frame_free(f);
		if (got) {
			return tli_wall_ms();
		}
		tt_nap_ms(5);
	}
	return -1;
}

/* The one DELIVER of id: arrived at the due time or after it, under the
 * lease `version` that runs from the due time. */
static void
expect_on_time(rc_client *c, const char *id, int64_t due, uint64_t version)
{
	rc_deliver dv;

	cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1, "%s did not come", id);
	cr_assert_eq(dv.d.n, 1);
	cr_assert_eq(dv.d.v[0].id.n, strlen(id));
	cr_assert_eq(memcmp(dv.d.v[0].id.p, id, dv.d.v[0].id.n), 0);
	cr_assert_geq(dv.f->rx_us, due * 1000,
	    "%s pushed %lld us before its due time", id,
	    (long long) (due * 1000 - dv.f->rx_us));
	cr_assert_eq(dv.d.v[0].due_ts, due);
	cr_assert_eq(dv.d.v[0].version, version);
	cr_assert_eq(dv.d.v[0].lease_until, due + LEASE,
	    "the lease runs from the due time");
	cr_assert_eq(dv.d.v[0].deliveries, 1);
	rc_deliver_free(&dv);
}

Test(ahead, leased_before_the_due_time_pushed_at_it)
{
	rc_client *p, *c;
	tlp_result res;
	uint64_t ver = 0;
	int64_t due, seen;

	start("ahead-push");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w", LEASE, 8));
	due = tli_wall_ms() + 2000;
	TL_PASS(rc_one(
	    p, TLP_OP_CREATE, "t", "app", "m1", 0, due, false, "x", &res));
	seen = wait_leased(p, "m1", "w", &ver, 10000);
	cr_assert_geq(seen, 0, "m1 was never leased");
	cr_assert_lt(seen, due, "m1 was leased only %lld ms after its due time",
	    (long long) (seen - due));
	/* Processing now, as a moment later: the owner meets the lease. */
	TL_CODE_EQ(
	    rc_one(p, TLP_OP_DELETE, "t", "app", "m1", 0, 0, false, NULL, &res),
	    TL_ELEASED);
	expect_on_time(c, "m1", due, ver);
	rc_close(p);
	rc_close(c);
}

/* A message leased ahead for consumer w, then w's session goes (or the
 * broker is killed and restarted): the returning w gets the same lease at
 * the due time. */
static void
returning_consumer(bool kill_broker)
{
	rc_client *p, *c;
	tlp_result res;
	uint64_t ver = 0;
	int64_t due;

	start(kill_broker ? "ahead-kill" : "ahead-back");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w", LEASE, 8));
	due = tli_wall_ms() + LEAD;
	TL_PASS(rc_one(
	    p, TLP_OP_CREATE, "t", "app", "m1", 0, due, false, "x", &res));
	cr_assert_geq(wait_leased(p, "m1", "w", &ver, 10000), 0);
	rc_close(c);
	rc_close(p);
	if (kill_broker) {
		rc_broker_signal(&B, SIGKILL, 5000);
		rc_broker_spawn(&B, 20000);
	}
	cr_assert_lt(
	    tli_wall_ms(), due, "too slow to test before the due time");
	c = rc_open(B.url, "consumer-again");
	TL_PASS(rc_subscribe(c, "t", "w", LEASE, 8));
	expect_on_time(c, "m1", due, ver);
	rc_close(c);
}

Test(ahead, a_returning_consumer_gets_the_lease_at_the_due_time)
{
	returning_consumer(false);
}

Test(ahead, after_sigkill_the_lease_taken_ahead_comes_at_the_due_time)
{
	returning_consumer(true);
}
