/*
 * End-to-end, the real broker: a message due at ms T is pushed at the
 * earliest when the wall clock reads T.000 ms (never early, to the
 * microsecond) and, on an idle broker with nothing to write to the disk,
 * well within that millisecond: the broker clock keeps microseconds and
 * the dispatcher sleeps until the due microsecond, not whole milliseconds
 * counted from a clock anchored at a millisecond reading. The pushes come
 * from their own thread (tl-push), with normal scheduling unless
 * push_priority asks for a real-time one. RocksDB's compactions run nicer
 * than the broker's own threads (compaction_nice), so that they take the CPU
 * the writer and the deliveries leave.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "tltest.h"
#include "raw_client.h"

RC_SUITE(ontime);

#define N 100   /* messages, one every STEP ms */
#define STEP 20 /* over 2 s: the clock is re-anchored on the way */
/* The median lateness must stay below this (µs); the sanitizers slow
 * every hop between the due time and the receipt. */
#if defined(__SANITIZE_ADDRESS__)
#define SUB_US 1500
#else
#define SUB_US 1000
#endif

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

/* Receive and acknowledge until every message came or deadline (mono ms);
 * late[i] = receive wall time (us) - due time (us) of message i. */
static int
receive_all(rc_client *c, const int64_t *due, int64_t *late, int *seen,
    int64_t deadline)
{
	int got = 0;

	while (got < N && tli_mono_ms() < deadline) {
		rc_deliver dv;
		rc_results res;
		int rv = rc_wait_deliver(c, 100, &dv);

		cr_assert(rv >= 0, "a DELIVER push did not decode: %d", rv);
		if (rv == 0) {
			continue;
		}
		for (size_t k = 0; k < dv.d.n; k++) {
			const tlp_delivery *d = &dv.d.v[k];
			int i;

			cr_assert(d->id.n == 4 &&
			        sscanf(d->id.p, "o%03d", &i) == 1 && i >= 0 &&
			        i < N,
			    "a delivery of an id never created");
			cr_assert_eq(d->due_ts, due[i]);
			cr_assert_eq(seen[i]++, 0, "o%03d delivered twice", i);
			late[i] = dv.f->rx_us - due[i] * 1000;
			got++;
		}
		TL_PASS(rc_ack_all(c, "t", "clockwork", &dv, &res));
		rc_results_free(&res);
		rc_deliver_free(&dv);
	}
	return got;
}

/* The id of the broker's thread named comm; -1: no such thread. */
static pid_t
tid_of(pid_t pid, const char *comm)
{
	pid_t tid;

	return tt_threads_named(pid, comm, &tid, 1) == 1 ? tid : -1;
}

/* The scheduling policy of that thread; -1: no such thread. */
static int
thread_policy(pid_t pid, const char *comm)
{
	pid_t tid = tid_of(pid, comm);

	return tid < 0 ? -1 : sched_getscheduler(tid);
}

/* 100 messages due over 2 s through the broker started with args (NULL:
 * none): every one pushed at or after its due microsecond, the median
 * within a millisecond. */
static void
pushed_on_time(const char *tag, const char *const *args)
{
	static int64_t due[N], late[N], sorted[N];
	static int seen[N];
	static char ids[N][8];
	tlp_item items[N];
	rc_client *p, *c;
	rc_results res;
	int64_t base;
	int got, early = 0, worst = 0;

	/* No fsync on the way: what is measured is the clock and the
	 * dispatcher's wake-up, not the disk. */
	memset(seen, 0, sizeof(seen));
	rc_broker_init(&B, tag);
	B.durability = "none";
	for (int i = 0; args != NULL && args[i] != NULL && i < 8; i++) {
		B.args[i] = args[i];
	}
	rc_broker_spawn(&B, 20000);
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "clockwork", 30000, 128));

	memset(items, 0, sizeof(items));
	base = tli_wall_ms() + 500;
	for (int i = 0; i < N; i++) {
		snprintf(ids[i], sizeof(ids[i]), "o%03d", i);
		due[i] = base + (int64_t) i * STEP;
		items[i].id = TLP_STR(ids[i]);
		items[i].ts = due[i];
		items[i].body = ids[i];
		items[i].body_len = 4;
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, N, &res));
	cr_assert_eq(res.n, N);
	for (size_t i = 0; i < res.n; i++) {
		TL_PASS(res.v[i].err, "create o%03zu", i);
	}
	rc_results_free(&res);

	got = receive_all(c, due, late, seen, tli_mono_ms() + 20000);
	cr_assert_eq(got, N, "%d of %d messages delivered", got, N);
	for (int i = 0; i < N; i++) {
		early += late[i] < 0;
		worst = late[i] < late[worst] ? i : worst;
		sorted[i] = late[i];
	}
	qsort(sorted, N, sizeof(sorted[0]), cmp_i64);
	cr_log_info("lateness us: min %lld p50 %lld p90 %lld max %lld",
	    (long long) sorted[0], (long long) sorted[N / 2],
	    (long long) sorted[N * 9 / 10], (long long) sorted[N - 1]);
	cr_assert_eq(early, 0,
	    "%d messages were pushed before their due time (o%03d by %lld "
	    "us)",
	    early, worst, (long long) -late[worst]);
	cr_assert(sorted[N / 2] < SUB_US,
	    "median lateness %lld us: due times are met to the ms, not the us",
	    (long long) sorted[N / 2]);
	rc_close(p);
	rc_close(c);
}

/* The broker's log says the push thread got real-time priority prio, and
 * it runs so; or says why not, and it runs normally. */
static void
check_push_thread(int prio)
{
	char set[96], refused[96], *log;
	int policy = thread_policy(B.proc.pid, "tl-push");

	snprintf(set, sizeof(set), "real-time priority %d (SCHED_FIFO)", prio);
	snprintf(
	    refused, sizeof(refused), "real-time priority %d refused", prio);
	cr_assert_not_null(log = tli_read_file(B.proc.log, 1u << 22));
	if (strstr(log, set) != NULL) {
		/* Allowed (root, or CAP_SYS_NICE): the thread runs so. */
		struct sched_param sp;
		cr_assert_eq(policy, SCHED_FIFO,
		    "the log says real-time, the thread is not");
		cr_assert_eq(
		    sched_getparam(tid_of(B.proc.pid, "tl-push"), &sp), 0);
		cr_assert_eq(sp.sched_priority, prio);
	} else {
		cr_assert(strstr(log, refused) != NULL,
		    "neither D011 line in the broker's log");
		cr_assert_eq(policy, SCHED_OTHER);
	}
	tli_free(log);
}

Test(ontime, pushed_from_the_due_microsecond_never_before)
{
	/* push_priority auto: real-time priority 1 where allowed. */
	pushed_on_time("e2e-ontime-us", NULL);
	check_push_thread(1);
}

Test(ontime, push_priority_sets_the_push_thread_or_leaves_it_normal)
{
	static const char *const five[] = {"--push-priority", "5", NULL};
	static const char *const off[] = {"--push-priority", "off", NULL};
	char *log;

	pushed_on_time("e2e-ontime-rt5", five);
	check_push_thread(5);
	rc_broker_stop(&B);
	pushed_on_time("e2e-ontime-normal", off);
	cr_assert_eq(thread_policy(B.proc.pid, "tl-push"), SCHED_OTHER);
	cr_assert_not_null(log = tli_read_file(B.proc.log, 1u << 22));
	cr_assert_null(strstr(log, "D011"), "off, yet the log names D011");
	tli_free(log);
}

/* Every RocksDB compaction thread (rocksdb:low) of the broker runs `more`
 * nice levels above its writer thread; returns how many there are. */
static int
compactions_nicer_by(pid_t pid, int more)
{
	pid_t writer = tid_of(pid, "tl-writer"), tids[64];
	int base, n = tt_threads_named(pid, "rocksdb:low", tids, 64);

	cr_assert(writer > 0, "no tl-writer thread");
	errno = 0;
	base = getpriority(PRIO_PROCESS, (id_t) writer);
	cr_assert_eq(errno, 0);
	for (int i = 0; i < n; i++) {
		int nice;

		errno = 0;
		nice = getpriority(PRIO_PROCESS, (id_t) tids[i]);
		cr_assert_eq(errno, 0);
		cr_assert_eq(nice, base + more > 19 ? 19 : base + more,
		    "a compaction thread at nice %d, the writer at %d (asked: "
		    "%d more)",
		    nice, base, more);
	}
	return n;
}

Test(ontime, compactions_run_nicer_than_the_writer)
{
	static const struct {
		const char *tag, *arg;
		int more;
	} runs[] = {{"e2e-cnice-default", NULL, 5}, {"e2e-cnice-3", "3", 3},
	    {"e2e-cnice-off", "off", 0}};

	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		rc_broker_init(&B, runs[i].tag);
		if (runs[i].arg != NULL) {
			B.args[0] = "--compaction-nice";
			B.args[1] = runs[i].arg;
		}
		rc_broker_spawn(&B, 20000);
		cr_assert_gt(compactions_nicer_by(B.proc.pid, runs[i].more), 0,
		    "%s: no RocksDB compaction thread found", runs[i].tag);
		rc_broker_stop(&B);
	}
}
