/*
 * tl-chronos's pops, checked at a real HTTP receiver: the exact number of
 * pops of a recurring timer with sequence numbers 1..n, never before
 * creation + k × interval, the opaque data as the body; a repeat-for
 * below the interval never popping; a failing receiver retried with the
 * same sequence number then recorded as failed; a PUT or a DELETE during
 * the retries taking effect; a slow receiver not holding up the others.
 */
#include "tltest.h"
#include "chronos_util.h"

/* The hits on path must be exactly n, with sequence numbers 1..n in
 * order, each at or after created + k × interval_ms. */
static void
expect_pops(ck_env *e, const char *path, size_t n, int64_t created,
    int64_t interval_ms, const char *opaque)
{
	ck_hit hits[64];
	size_t got = ck_hits(&e->recv, path, hits, 64);

	cr_assert_eq(got, n, "%s: %zu pops, want %zu", path, got, n);
	for (size_t i = 0; i < n; i++) {
		int64_t due = created + (int64_t) (i + 1) * interval_ms;
		cr_expect_eq(hits[i].seq, (long) i + 1, "pop %zu: seq %ld", i,
		    hits[i].seq);
		cr_expect_geq(hits[i].at, due, "pop %zu early by %lld ms", i,
		    (long long) (due - hits[i].at));
		cr_expect_str_eq(hits[i].body, opaque);
		cr_expect_eq(hits[i].clen, (long) strlen(opaque));
		cr_expect(!hits[i].ctype, "a Content-Type was sent");
	}
}

Test(pops, recurring_timer_pops_exactly_with_sequence_numbers)
{
	ck_env e;
	char json[1024], id[33];
	int64_t created;

	ck_start(&e, "ck-rec", false, NULL);
	/* 0.3 s × 5 within repeat-for 1.5 (a pop exactly at the end counts) */
	ck_timer_json(&e, json, sizeof(json), 0.3, 1.5, "/ok/rec", "reg-1");
	created = tli_wall_ms();
	ck_post(&e, json, id);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/rec", 5, 10000), 5);
	tt_nap_ms(900); /* no sixth */
	expect_pops(&e, "/ok/rec", 5, created, 300, "reg-1");
	cr_expect_eq(ck_metric(&e, "chronos_pops_total"), 5);
	cr_expect_eq(ck_metric_wait(&e, "chronos_timers", 0, 3000), 0);
	ck_stop(&e);
}

Test(pops, one_shot_and_never_popping_timers)
{
	ck_env e;
	char json[1024], id[33];
	int64_t created;

	ck_start(&e, "ck-one", true, NULL);
	ck_timer_json(&e, json, sizeof(json), 0.4, 0.2, "/ok/never", "n");
	ck_post(&e, json, id); /* 200, as the seed says, but it never pops */
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 0);
	ck_timer_json(&e, json, sizeof(json), 0.4, -1, "/ok/once", "o");
	created = tli_wall_ms();
	ck_post(&e, json, id);
	ck_timer_json(&e, json, sizeof(json), 0.4, 0.4, "/ok/equal", "q");
	ck_post(&e, json, id);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/once", 1, 10000), 1);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/equal", 1, 10000), 1);
	tt_nap_ms(1200);
	expect_pops(&e, "/ok/once", 1, created, 400, "o");
	cr_expect_eq(ck_hits(&e.recv, "/ok/equal", NULL, 0), 1);
	cr_expect_eq(ck_hits(&e.recv, "/ok/never", NULL, 0), 0);
	ck_stop(&e);
}

#define FAST_RETRIES                                                    \
	"retry_for_ms = 1500\nretry_min_ms = 100\nretry_max_ms = 400\n" \
	"callback_timeout_ms = 1000\nlease_ms = 5000\n"

Test(pops, failing_receiver_is_retried_with_the_same_sequence_then_failed)
{
	ck_env e;
	char json[1024], id[33];
	ck_hit hits[64];
	size_t n;

	ck_start(&e, "ck-fail", true, FAST_RETRIES);
	/* two pops: the first fails throughout, the second too */
	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/fail/a", "f");
	ck_post(&e, json, id);
	cr_assert(tt_proc_log_wait(&e.k, "C020", 10000));
	n = ck_hits(&e.recv, "/fail/a", hits, 64);
	cr_expect_geq(n, 3, "only %zu attempts", n);
	for (size_t i = 0; i < n && i < 64; i++) {
		cr_expect_eq(
		    hits[i].seq, 1, "attempt %zu: seq %ld", i, hits[i].seq);
	}
	/* retried for retry_for_ms after the due time, not longer */
	cr_expect_leq(hits[n - 1].at - hits[0].at, 1500 + 500);
	cr_expect_eq(ck_metric(&e, "chronos_callback_failures_total"), 1);
	cr_expect_eq(ck_metric_wait(&e, "chronos_timers", 0, 3000), 0);
	tt_nap_ms(800); /* given up: no more attempts */
	cr_expect_eq(ck_hits(&e.recv, "/fail/a", NULL, 0), n);
	ck_stop(&e);
}

Test(pops, put_and_delete_during_retries_take_effect)
{
	ck_env e;
	char json[1024], a[33], b[33], path[64];
	ck_resp r;
	size_t n;

	ck_start(&e, "ck-putretry", true,
	    "retry_for_ms = 20000\nretry_min_ms = 200\nretry_max_ms = 300\n");
	ck_timer_json(&e, json, sizeof(json), 0.2, -1, "/fail/put", "x");
	ck_post(&e, json, a);
	ck_timer_json(&e, json, sizeof(json), 0.2, -1, "/fail/del", "y");
	ck_post(&e, json, b);
	cr_assert_eq(ck_wait_hits(&e.recv, "/fail/put", 2, 10000), 2);
	cr_assert_eq(ck_wait_hits(&e.recv, "/fail/del", 2, 10000), 2);
	/* PUT a: the new timer pops at its new callback, from seq 1 */
	ck_timer_json(&e, json, sizeof(json), 0.3, 0.6, "/ok/put", "z");
	snprintf(path, sizeof(path), "/timers/%s", a);
	r = ck_req(&e, "PUT", path, json);
	cr_assert_eq(r.status, 200, "%ld %s", r.status, r.reason);
	ck_resp_free(&r);
	snprintf(path, sizeof(path), "/timers/%s", b);
	r = ck_req(&e, "DELETE", path, NULL);
	cr_assert_eq(r.status, 200, "%ld %s", r.status, r.reason);
	ck_resp_free(&r);
	n = ck_hits(&e.recv, "/fail/put", NULL, 0) +
	    ck_hits(&e.recv, "/fail/del", NULL, 0);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/put", 2, 10000), 2);
	tt_nap_ms(1000);
	cr_expect_eq(ck_hits(&e.recv, "/fail/put", NULL, 0) +
	        ck_hits(&e.recv, "/fail/del", NULL, 0),
	    n, "the old callbacks were called after the PUT / DELETE");
	expect_pops(&e, "/ok/put", 2, 0, 0, "z");
	cr_expect_eq(ck_metric_wait(&e, "chronos_timers", 0, 3000), 0);
	ck_stop(&e);
}

Test(pops, a_slow_receiver_does_not_hold_up_the_others)
{
	ck_env e;
	char json[1024], id[33], path[32];
	int64_t created[6];
	ck_hit h;

	ck_start(&e, "ck-slow", true, "workers = 4\nretry_for_ms = 0\n");
	ck_timer_json(&e, json, sizeof(json), 0.5, -1, "/slow/s", "s");
	for (int i = 0; i < 3; i++) {
		ck_post(&e, json, id);
	}
	for (int i = 0; i < 6; i++) {
		snprintf(path, sizeof(path), "/ok/f%d", i);
		ck_timer_json(&e, json, sizeof(json), 0.6, -1, path, "f");
		created[i] = tli_wall_ms();
		ck_post(&e, json, id);
	}
	for (int i = 0; i < 6; i++) {
		snprintf(path, sizeof(path), "/ok/f%d", i);
		cr_assert_eq(ck_wait_hits(&e.recv, path, 1, 10000), 1);
		ck_hits(&e.recv, path, &h, 1);
		/* within a second of due, while three callbacks hang 3 s */
		cr_expect_lt(h.at - created[i], 600 + 1000, "%s after %lld ms",
		    path, (long long) (h.at - created[i]));
	}
	cr_assert(tt_proc_log_wait(&e.k, "C020", 10000));
	ck_stop(&e);
}
