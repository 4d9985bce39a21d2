/*
 * Reads and durability: a batch's writes are in RocksDB (visible) a little
 * before the sync of the log makes them durable; a read that
 * answers a client waits for that sync, so nobody is shown a write a crash
 * could still take back. The sync is held (the store's sync hook), so that
 * a batch is written but not synced: a lookup of it waits until the sync
 * goes on, the dispatcher's due scan (which shows what it finds only
 * through a later lease) does not. And the completions run apart from the
 * sync: while one completion holds the completer, the batches written
 * after it are synced all the same, and a completion's own read does not
 * wait. The writer syncs a batch itself when nothing is queued behind it,
 * and hands the sync to the syncer when there is.
 */
#define _GNU_SOURCE /* pthread_getname_np */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)

static tt_clock clk;

static void
nap_ms(int ms)
{
	struct timespec d = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&d, NULL);
}

static void
noop_done(void *arg)
{
	(void) arg;
}

/* Holds whoever enters it (a completion, or the syncer before a sync)
 * until released. */
typedef struct gate {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	_Atomic bool armed;
	bool entered, open;
	tli_store *s;
	int self_read; /* the completion's own lookup of "a" */
} gate;

static void
gate_hold(gate *g)
{
	pthread_mutex_lock(&g->mtx);
	g->entered = true;
	pthread_cond_broadcast(&g->cv);
	while (!g->open) {
		pthread_cond_wait(&g->cv, &g->mtx);
	}
	pthread_mutex_unlock(&g->mtx);
}

static void
gate_wait_entered(gate *g)
{
	pthread_mutex_lock(&g->mtx);
	while (!g->entered) {
		pthread_cond_wait(&g->cv, &g->mtx);
	}
	pthread_mutex_unlock(&g->mtx);
}

static void
gate_release(gate *g)
{
	pthread_mutex_lock(&g->mtx);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mtx);
}

static void
gate_init(gate *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mtx, NULL);
	pthread_cond_init(&g->cv, NULL);
}

static void
gate_fini(gate *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mtx);
}

/* The store's sync hook: holds the thread that syncs once armed. */
static void
sync_gate(void *arg)
{
	gate *g = arg;

	if (atomic_load(&g->armed)) {
		gate_hold(g);
	}
}

/* A completion that reads its own write, then holds the completer. */
static void
gate_done(void *arg)
{
	gate *g = arg;
	tli_msg m;

	g->self_read = tli_store_get(g->s, "t", "a", 1, &m);
	if (g->self_read == TL_OK) {
		tli_msg_fini(&m);
	}
	gate_hold(g);
}

static _Atomic bool a_done;
static _Atomic bool b_done;

static void
a_completed(void *arg)
{
	(void) arg;
	atomic_store(&a_done, true);
}

static void
b_completed(void *arg)
{
	(void) arg;
	atomic_store(&b_done, true);
}

typedef struct reader {
	tli_store *s;
	_Atomic bool returned;
	_Atomic bool done_first; /* b's completion came before the return */
	int rv;
} reader;

static void *
reader_main(void *arg)
{
	reader *r = arg;
	tli_msg m;

	r->rv = tli_store_get(r->s, "t", "b", 1, &m);
	atomic_store(&r->done_first, atomic_load(&b_done));
	if (r->rv == TL_OK) {
		tli_msg_fini(&m);
	}
	atomic_store(&r->returned, true);
	return NULL;
}

/* "b" is in RocksDB: the due scan sees it (it does not wait). */
static bool
scan_sees_b(tli_store *s)
{
	tli_entry e[4];
	size_t n = 0;
	bool more = false;

	cr_assert_eq(
	    tli_store_scan_due(s, "t", 0, T0 + 1000, NULL, e, 4, &n, &more),
	    TL_OK);
	for (size_t i = 0; i < n; i++) {
		if (e[i].id_len == 1 && e[i].id[0] == 'b') {
			return true;
		}
	}
	return false;
}

static void
wait_scan_sees_b(tli_store *s)
{
	int waited = 0;

	while (!scan_sees_b(s)) {
		cr_assert_lt(waited++, 5000, "b never reached RocksDB");
		nap_ms(1);
	}
}

static tli_store *
open_with_sync_hook(
    const char *dir, void (*hook)(void *), void *arg, unsigned max_batch_ops)
{
	tli_store_opts o;
	tli_store *s = NULL;

	tli_store_opts_init(&o);
	o.path = dir;
	o.clock = tt_clock_as_tli(&clk);
	o.sync_hook = hook;
	o.sync_hook_arg = arg;
	if (max_batch_ops > 0) {
		o.max_batch_ops = max_batch_ops;
	}
	TL_PASS(tli_store_open(&s, &o));
	return s;
}

/* One test's store, its gate and two creates of topic t: a, then b. */
typedef struct env {
	char *dir;
	tli_store *s;
	gate g;
	reader r;
	tli_op a, b;
} env;

/* With hold_sync, every sync of the store passes through g. */
static void
env_open(env *e, bool hold_sync)
{
	memset(e, 0, sizeof(*e));
	e->dir = tt_mkdtemp("durable");
	e->a = tt_mkop(TLI_OP_CREATE, "t", "a", "g", T0, 0);
	e->b = tt_mkop(TLI_OP_CREATE, "t", "b", "g", T0, 0);
	gate_init(&e->g);
	tt_clock_init(&clk, T0);
	e->s =
	    open_with_sync_hook(e->dir, hold_sync ? sync_gate : NULL, &e->g, 0);
	tt_topic(e->s, "t", 1);
	e->r.s = e->s;
}

static void
env_close(env *e)
{
	tli_store_close(e->s);
	gate_fini(&e->g);
	tt_rmtree_free(&e->dir);
}

Test(durable, a_lookup_shows_a_write_only_once_it_is_durable)
{
	env e;
	pthread_t th;
	int waited = 0;

	env_open(&e, true);
	TL_PASS(tli_store_submit(e.s, &e.a, 1, a_completed, NULL));
	while (!atomic_load(&a_done)) {
		cr_assert_lt(waited++, 5000, "a never completed");
		nap_ms(1);
	}

	/* The sync is held: b is written by the writer, not synced. */
	atomic_store(&e.g.armed, true);
	TL_PASS(tli_store_submit(e.s, &e.b, 1, b_completed, NULL));
	gate_wait_entered(&e.g);
	wait_scan_sees_b(e.s);
	cr_assert_eq(pthread_create(&th, NULL, reader_main, &e.r), 0);
	nap_ms(300);
	cr_assert(!atomic_load(&e.r.returned),
	    "a lookup returned a write that was not durable yet");
	cr_assert(!atomic_load(&b_done), "b completed before its sync");

	gate_release(&e.g);
	pthread_join(th, NULL);
	cr_assert_eq(e.r.rv, TL_OK, "the lookup found b once durable: %s",
	    tl_strerror(e.r.rv));
	cr_assert_eq(e.b.err, TL_OK);
	env_close(&e);
}

Test(durable, a_write_is_synced_while_earlier_completions_run)
{
	env e;
	pthread_t th;
	int waited = 0;

	env_open(&e, false);
	e.g.s = e.s;

	/* a's completion holds the completer. */
	TL_PASS(tli_store_submit(e.s, &e.a, 1, gate_done, &e.g));
	gate_wait_entered(&e.g);
	cr_assert_eq(e.g.self_read, TL_OK,
	    "a completion reads its own batch's write without waiting");

	/* b is written, synced and shown to a lookup while the completer is
	 * still busy with a: its completion has not run. */
	TL_PASS(tli_store_submit(e.s, &e.b, 1, b_completed, NULL));
	wait_scan_sees_b(e.s);
	cr_assert_eq(pthread_create(&th, NULL, reader_main, &e.r), 0);
	while (!atomic_load(&e.r.returned)) {
		cr_assert_lt(waited++, 5000,
		    "b's sync waited for a completion before it");
		nap_ms(1);
	}
	pthread_join(th, NULL);
	cr_assert_eq(
	    e.r.rv, TL_OK, "the lookup found b: %s", tl_strerror(e.r.rv));
	cr_assert(!atomic_load(&e.r.done_first) && !atomic_load(&b_done),
	    "completions stay in order: b's waits for a's");

	gate_release(&e.g);
	env_close(&e);
	cr_assert(atomic_load(&b_done), "b completed after a");
	cr_assert_eq(e.b.err, TL_OK);
}

Test(durable, close_completes_every_written_batch)
{
	char *dir = tt_mkdtemp("durable");
	enum { N = 2000 };
	tli_op *ops = calloc(N, sizeof(*ops));
	char(*ids)[16] = calloc(N, 16);
	tli_store *s;
	tli_topic_info ti;

	cr_assert(ops != NULL && ids != NULL);
	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 1);
	atomic_store(&b_done, false);
	for (int i = 0; i < N; i++) {
		snprintf(ids[i], 16, "m%05d", i);
		ops[i] = tt_mkop(TLI_OP_CREATE, "t", ids[i], "g", T0 + i, 0);
		TL_PASS(tli_store_submit(
		    s, &ops[i], 1, i == N - 1 ? b_completed : noop_done, NULL));
	}
	tli_store_close(s); /* every submission completes, in order */
	cr_assert(atomic_load(&b_done), "the last submission completed");
	for (int i = 0; i < N; i++) {
		cr_assert_eq(ops[i].err, TL_OK, "%s: %s", ids[i],
		    tl_strerror(ops[i].err));
	}
	s = tt_store_open(dir, &clk);
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	cr_assert_eq(ti.messages, N, "%llu of %d after a reopen",
	    (unsigned long long) ti.messages, N);
	tli_store_close(s);
	free(ops);
	free(ids);
	tt_rmtree_free(&dir);
}

/* The threads that synced, in order (the sync hook's record). */
typedef struct syncers {
	gate g;
	pthread_mutex_t mtx;
	int n;
	char names[16][16];
} syncers;

static void
sync_note_thread(void *arg)
{
	syncers *y = arg;

	pthread_mutex_lock(&y->mtx);
	if (y->n < 16) {
		pthread_getname_np(pthread_self(), y->names[y->n++], 16);
	}
	pthread_mutex_unlock(&y->mtx);
	if (atomic_exchange(&y->g.armed, false)) {
		gate_hold(&y->g);
	}
}

static _Atomic int completed;

static void
count_done(void *arg)
{
	int *at = arg;

	*at = atomic_fetch_add(&completed, 1);
}

/* A write with nothing queued behind it is synced by the writer itself
 * (one thread less to wake on the delivery path); with writes queued, the
 * writer hands the sync on and writes the next batch. Either way every
 * write completes, in order, and is there after a reopen. */
Test(durable, the_writer_syncs_when_idle_and_hands_on_when_busy)
{
	char *dir = tt_mkdtemp("durable");
	syncers y;
	tli_store *s;
	tli_op ops[4];
	int at[4];
	const char *ids[4] = {"a", "b", "c", "d"};
	tli_topic_info ti;
	bool handed = false;
	int waited = 0;

	memset(&y, 0, sizeof(y));
	gate_init(&y.g);
	pthread_mutex_init(&y.mtx, NULL);
	tt_clock_init(&clk, T0);
	/* one write per batch: b, c, d are three */
	s = open_with_sync_hook(dir, sync_note_thread, &y, 1);
	tt_topic(s, "t", 1);
	pthread_mutex_lock(&y.mtx);
	y.n = 0; /* the topic's own commit */
	pthread_mutex_unlock(&y.mtx);
	atomic_store(&completed, 0);

	/* a's sync is held: b, c and d queue behind it. */
	atomic_store(&y.g.armed, true);
	for (int i = 0; i < 4; i++) {
		ops[i] = tt_mkop(TLI_OP_CREATE, "t", ids[i], "g", T0 + i, 0);
		at[i] = -1;
	}
	TL_PASS(tli_store_submit(s, &ops[0], 1, count_done, &at[0]));
	gate_wait_entered(&y.g);
	for (int i = 1; i < 4; i++) {
		TL_PASS(tli_store_submit(s, &ops[i], 1, count_done, &at[i]));
	}
	gate_release(&y.g);
	while (atomic_load(&completed) < 4) {
		cr_assert_lt(waited++, 5000, "%d of 4 writes completed",
		    atomic_load(&completed));
		nap_ms(1);
	}

	pthread_mutex_lock(&y.mtx);
	cr_assert_geq(y.n, 2, "%d syncs for four batches", y.n);
	cr_assert_str_eq(y.names[0], "tl-writer",
	    "a write with nothing behind it is synced by %s", y.names[0]);
	for (int i = 1; i < y.n; i++) {
		handed = handed || strcmp(y.names[i], "tl-sync") == 0;
	}
	pthread_mutex_unlock(&y.mtx);
	cr_assert(handed, "with writes queued, a sync was handed on");
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(ops[i].err, TL_OK, "%s: %s", ids[i],
		    tl_strerror(ops[i].err));
		cr_assert_eq(at[i], i, "%s completed %d-th", ids[i], at[i]);
	}
	tli_store_close(s);
	s = open_with_sync_hook(dir, NULL, NULL, 0);
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	cr_assert_eq(ti.messages, 4, "%llu of 4 after a reopen",
	    (unsigned long long) ti.messages);
	tli_store_close(s);
	pthread_mutex_destroy(&y.mtx);
	gate_fini(&y.g);
	tt_rmtree_free(&dir);
}
