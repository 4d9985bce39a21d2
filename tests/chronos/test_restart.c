/*
 * tl-chronos's timers survive kill -9 of the service and of the broker:
 * the pops due while either was down are sent after the restart, in due
 * order, and the timer pops exactly its number of times (a pop sent just
 * before the kill may come again with the same sequence number, which the
 * seed's receivers drop).
 */
#include "tltest.h"
#include "chronos_util.h"

#define RESTART_SETTINGS "lease_ms = 2000\ncallback_timeout_ms = 1000\n"

/* After a kill: the receiver's hits on path must cover 1..n exactly, in
 * order of sequence number, none early. */
static void
expect_series(
    ck_env *e, const char *path, long n, int64_t created, int64_t interval_ms)
{
	ck_hit hits[64];
	size_t got = ck_hits(&e->recv, path, hits, 64);
	long next = 1, dups = 0;

	for (size_t i = 0; i < got; i++) {
		cr_expect_geq(hits[i].at, created + hits[i].seq * interval_ms,
		    "pop %ld early", hits[i].seq);
		if (hits[i].seq == next - 1) {
			dups++; /* sent again after the kill */
			continue;
		}
		cr_assert_eq(hits[i].seq, next, "hit %zu: seq %ld, want %ld", i,
		    hits[i].seq, next);
		next++;
	}
	cr_expect_eq(next - 1, n, "%ld pops, want %ld", next - 1, n);
	cr_expect_leq(dups, 1, "%ld pops sent twice", dups);
}

/* A 10-pop timer; the kill comes after its second pop and lasts long
 * enough for several pops to fall due meanwhile. */
static void
kill_during_series(bool broker)
{
	ck_env e;
	char json[1024], id[33];
	int64_t created;

	ck_start(
	    &e, broker ? "ck-kill-tl" : "ck-kill-k", true, RESTART_SETTINGS);
	ck_timer_json(&e, json, sizeof(json), 0.3, 3.0, "/ok/series", "s");
	created = tli_wall_ms();
	ck_post(&e, json, id);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/series", 2, 10000), 2);
	if (broker) {
		tt_proc_kill(&e.tl);
		tt_nap_ms(1200);
		tt_proc_start(&e.tl);
	} else {
		tt_proc_kill(&e.k);
		tt_nap_ms(1200);
		tt_proc_start(&e.k);
	}
	ck_wait_hits(&e.recv, "/ok/series", 10, 15000);
	tt_nap_ms(800); /* nothing more comes */
	expect_series(&e, "/ok/series", 10, created, 300);
	ck_stop(&e);
}

Test(restart, kill9_of_the_service_loses_no_pop)
{
	kill_during_series(false);
}

Test(restart, kill9_of_the_broker_loses_no_pop)
{
	kill_during_series(true);
}

Test(restart, in_process_timers_survive_kill9_of_timelined)
{
	ck_env e;
	char json[1024], id[33];
	int64_t created;

	ck_start(&e, "ck-kill-in", false, RESTART_SETTINGS);
	ck_timer_json(&e, json, sizeof(json), 1.0, -1, "/ok/in", "i");
	created = tli_wall_ms();
	ck_post(&e, json, id);
	ck_restart_service(&e, SIGKILL);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/in", 1, 10000), 1);
	expect_series(&e, "/ok/in", 1, created, 1000);
	ck_stop(&e);
}
