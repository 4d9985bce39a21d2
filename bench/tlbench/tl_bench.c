/*
 * tl-bench: Timeline side by side with the schedulers people use today,
 * measured by the same code in the same run on the same machine. Each
 * system is a driver (driver.h) in one of its modes; every run of a
 * workload starts the system's server on a new temporary directory and
 * a loopback port, measures, and stops it.
 *
 *  - produce:     N messages due over a window, every put acknowledged as
 *                 the mode promises; msg/s.
 *  - lateness:    N messages due inside a window; consumers receive and
 *                 delete them; receive wall time (CLOCK_REALTIME) minus
 *                 due time: p50 .. max, early deliveries (must be 0),
 *                 consume msg/s.
 *  - lease-cycle: N messages already due; lease, extend, delete; cycles/s.
 *  - scale:       N messages far ahead; server RSS and disk bytes per
 *                 message, the fill rate over time (its lowest over
 *                 TLB_FILL_WINDOW_S) and the highest RSS during it;
 *                 restart with that backlog to the first due delivery.
 *  - crash:       kill -9 in the middle of the puts and again in the
 *                 middle of the deletes; after each restart, the time to
 *                 the first delivery; at the end every acknowledged
 *                 message must have been delivered and deleted.
 *  - failover:    replicated systems only: paced puts, each message due a
 *                 second after its put, consumers running; kill -9 of the
 *                 leader a third of the way in; the time to the first
 *                 acknowledged put after it, to the first delivery of a
 *                 message that fell due in the outage, the throughput
 *                 over time, and every acknowledged message delivered,
 *                 none early.
 *  - long-read:   N messages far ahead; paced puts due a second later,
 *                 consumed, in slices that alternate without and with
 *                 one more client counting the whole timeline over and
 *                 over: put latency and lateness without and with that
 *                 long read.
 *
 * Runs are interleaved (for each workload, each repeat runs every system
 * once) so a noisy machine hurts every system alike; the table gives the
 * medians and the ratio Timeline / peer. See docs/benchmarks.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlbench.h"

#define TLB_HOUR_MS INT64_C(3600000)
#define TLB_DEADLINE_S 600.0
#define TLB_CRASH_CREDIT 16
#define TLB_STALL_S 60.0

const char *const tlb_workload_names[TLB_NWORKLOADS] = {"produce", "lateness",
    "lease-cycle", "scale", "crash", "failover", "long-read"};

static const tlb_cfg *g_cfg;

/* ---- the state of one run, shared with the drivers' callbacks ---- */

typedef struct run_state {
	uint64_t n;
	const tlb_item *items;
	const tlb_driver *d;
	tlb_server *srv;
	_Atomic uint8_t *acked;
	_Atomic uint8_t *seen;
	_Atomic uint8_t *deleted;
	/* F_ACKED | F_SEEN | F_DELETED, set once each: a message's ack may
	 * come after its delivery or delete (a put resent across a failover
	 * that had committed), and counts it as acknowledged and seen then */
	_Atomic uint8_t *flags;
	int64_t *late_us; /* of the first delivery */
	int64_t *ack_us;  /* failover: wall time of the acknowledgement */
	atomic_uint_fast64_t nacked, nseen, nseen_acked, ndeleted, ndel_acked;
	atomic_uint_fast64_t ndel_fail;
	atomic_uint_fast64_t nack_late; /* acknowledged after delivery */
	atomic_uint_fast64_t ndup, nearly, nbad, nresurrected, ncreated_late;
	atomic_int_fast64_t first_us, last_us;
	_Atomic double first_mono;
	/* crash: kill -9 when a count reaches these (0: never) */
	uint64_t kill_at_ack, kill_at_delete;
	atomic_bool killed;
	atomic_bool kill_taken;
} run_state;

enum { F_ACKED = 1, F_SEEN = 2, F_DELETED = 4 };

static void
kill_now(run_state *st)
{
	if (!atomic_exchange(&st->kill_taken, true)) {
		st->d->kill9(st->srv);
		atomic_store(&st->killed, true);
	}
}

static void
on_ack(void *arg, uint64_t seq)
{
	run_state *st = arg;
	uint64_t k;
	uint8_t old;

	if (seq >= st->n) {
		return;
	}
	if (st->items[seq].due_ms * 1000 < tlb_bench_wall_us()) {
		atomic_fetch_add(&st->ncreated_late, 1);
	}
	if (st->ack_us != NULL) {
		st->ack_us[seq] = tlb_bench_wall_us();
	}
	old = atomic_fetch_or(&st->flags[seq], F_ACKED);
	atomic_store(&st->acked[seq], 1);
	if ((old & (F_ACKED | F_SEEN)) == F_SEEN) {
		atomic_fetch_add(&st->nseen_acked, 1);
		atomic_fetch_add(&st->nack_late, 1);
	}
	if ((old & (F_ACKED | F_DELETED)) == F_DELETED) {
		atomic_fetch_add(&st->ndel_acked, 1);
	}
	k = atomic_fetch_add(&st->nacked, 1) + 1;
	if (st->kill_at_ack != 0 && k == st->kill_at_ack) {
		kill_now(st);
	}
}

static void
on_msg(void *arg, uint64_t seq, int64_t due_ms)
{
	run_state *st = arg;
	int64_t now = tlb_bench_wall_us();
	int64_t late = now - due_ms * 1000;
	int_fast64_t zero = 0;

	if (atomic_compare_exchange_strong(&st->first_us, &zero, now)) {
		atomic_store(&st->first_mono, tlb_bench_mono_s());
	}
	atomic_store(&st->last_us, now);
	if (seq >= st->n || due_ms != st->items[seq].due_ms) {
		atomic_fetch_add(&st->nbad, 1);
		return;
	}
	if (late < 0) {
		atomic_fetch_add(&st->nearly, 1);
	}
	if (atomic_load(&st->deleted[seq])) {
		atomic_fetch_add(&st->nresurrected, 1);
	}
	if (atomic_exchange(&st->seen[seq], 1) == 0) {
		uint8_t old = atomic_fetch_or(&st->flags[seq], F_SEEN);

		st->late_us[seq] = late;
		atomic_fetch_add(&st->nseen, 1);
		if (old & F_ACKED) {
			atomic_fetch_add(&st->nseen_acked, 1);
		}
	} else {
		atomic_fetch_add(&st->ndup, 1);
	}
}

static void
on_done(void *arg, uint64_t seq, int err)
{
	run_state *st = arg;
	uint64_t k;

	if (seq >= st->n) {
		return;
	}
	if (err != 0) {
		atomic_fetch_add(&st->ndel_fail, 1);
		return;
	}
	if (atomic_exchange(&st->deleted[seq], 1) == 0 &&
	    (atomic_fetch_or(&st->flags[seq], F_DELETED) & F_ACKED)) {
		atomic_fetch_add(&st->ndel_acked, 1);
	}
	k = atomic_fetch_add(&st->ndeleted, 1) + 1;
	if (st->kill_at_delete != 0 && k == st->kill_at_delete) {
		kill_now(st);
	}
}

static int
state_init(run_state *st, const tlb_item *items, uint64_t n)
{
	memset(st, 0, sizeof(*st));
	st->n = n;
	st->items = items;
	st->acked = calloc(n, 1);
	st->seen = calloc(n, 1);
	st->deleted = calloc(n, 1);
	st->flags = calloc(n, 1);
	st->late_us = calloc(n, sizeof(*st->late_us));
	if (st->acked == NULL || st->seen == NULL || st->deleted == NULL ||
	    st->flags == NULL || st->late_us == NULL) {
		fprintf(stderr, "out of memory\n");
		return -1;
	}
	return 0;
}

static void
state_fini(run_state *st)
{
	free((void *) st->acked);
	free((void *) st->seen);
	free((void *) st->deleted);
	free((void *) st->flags);
	free(st->late_us);
}

/* Forget the first delivery, to time the next one. */
static void
state_rearm(run_state *st)
{
	atomic_store(&st->first_us, 0);
	atomic_store(&st->first_mono, 0.0);
}

/* ---- servers ---- */

typedef struct sut {
	const tlb_system *sys;
	char dir[PATH_MAX];
	tlb_server *srv;
} sut;

static int
sut_up(sut *u, const tlb_system *sys, int64_t lease_ms)
{
	tlb_server_conf conf;
	char prefix[80];

	memset(u, 0, sizeof(*u));
	u->sys = sys;
	snprintf(prefix, sizeof(prefix), "tl-bench-%s", sys->label);
	if (tlb_bench_dir_make(u->dir, sizeof(u->dir), &g_cfg->com, prefix) !=
	    0) {
		return -1;
	}
	memset(&conf, 0, sizeof(conf));
	conf.dir = u->dir;
	conf.mode = sys->mode;
	conf.lease_ms = lease_ms;
	conf.timelined = g_cfg->timelined;
	conf.ipc = g_cfg->ipc;
	conf.tl_durability = g_cfg->tl_durability;
	if (tlb_proc_start(&u->srv, &conf, sys->d->proc) != 0) {
		fprintf(stderr, "%s: the server did not start\n", sys->label);
		tlb_bench_dir_done(&g_cfg->com, u->dir);
		return -1;
	}
	return 0;
}

static void
sut_down(sut *u)
{
	u->sys->d->stop(u->srv);
	u->srv = NULL;
	tlb_bench_dir_done(&g_cfg->com, u->dir);
}

/* ---- producers: threads, each with a connection and a slice ---- */

typedef struct prod_thr {
	pthread_t t;
	const tlb_driver *d;
	tlb_server *srv;
	const tlb_item *items;
	size_t n;
	run_state *st;
	int rv;
} prod_thr;

static void *
prod_main(void *arg)
{
	prod_thr *p = arg;
	tlb_conn *c = NULL;

	p->rv = -1;
	if (p->d->connect(p->srv, &c) != 0) {
		fprintf(stderr, "%s: cannot connect\n", p->d->name);
		return NULL;
	}
	p->rv = p->d->put(c, p->items, p->n, g_cfg->body, on_ack, p->st);
	p->d->disconnect(c);
	return NULL;
}

/* Puts items[n] from `producers` connections; the seconds it took, or
 * -1 when a thread could not start. */
static double
produce(sut *u, run_state *st, const tlb_item *items, uint64_t n)
{
	int np = g_cfg->producers;
	prod_thr th[64];
	double t0 = tlb_bench_mono_s();

	np = np < 1 ? 1 : np > 64 ? 64 : np;
	for (int i = 0; i < np; i++) {
		uint64_t a = n * (uint64_t) i / (uint64_t) np;
		uint64_t b = n * (uint64_t) (i + 1) / (uint64_t) np;

		th[i] = (prod_thr){.d = u->sys->d,
		    .srv = u->srv,
		    .items = items + a,
		    .n = (size_t) (b - a),
		    .st = st};
		if (pthread_create(&th[i].t, NULL, prod_main, &th[i]) != 0) {
			np = i;
			break;
		}
	}
	for (int i = 0; i < np; i++) {
		pthread_join(th[i].t, NULL);
	}
	return tlb_bench_mono_s() - t0;
}

/* ---- consumers: threads, each with a connection and a loop ---- */

typedef struct cons_thr {
	pthread_t t;
	const tlb_driver *d;
	tlb_server *srv;
	tlb_consume cc;
	struct cons_set *set;
} cons_thr;

typedef struct cons_set {
	cons_thr th[64];
	int n;
	atomic_bool stop;
	atomic_int alive; /* consume loops still running */
	atomic_bool gone; /* every one ended (e.g. connections failed) */
} cons_set;

static void *
cons_main(void *arg)
{
	cons_thr *k = arg;
	tlb_conn *c = NULL;

	if (k->d->connect(k->srv, &c) != 0) {
		fprintf(stderr, "%s: consumer cannot connect\n", k->d->name);
	} else {
		run_state *st = k->cc.arg;

		/* after a kill -9 of the server, failing is expected */
		if (k->d->consume(c, &k->cc) != 0 && !atomic_load(k->cc.stop) &&
		    !atomic_load(&st->kill_taken)) {
			fprintf(stderr, "%s: consumer connection failed\n",
			    k->d->name);
		}
		k->d->disconnect(c);
	}
	if (atomic_fetch_sub(&k->set->alive, 1) == 1) {
		atomic_store(&k->set->gone, true);
	}
	return NULL;
}

static void
cons_start(cons_set *cs, sut *u, run_state *st, bool extend, int64_t lease,
    uint32_t credit)
{
	int n = g_cfg->consumers;

	n = n < 1 ? 1 : n > 64 ? 64 : n;
	atomic_store(&cs->stop, false);
	atomic_store(&cs->gone, false);
	atomic_store(&cs->alive, 0);
	cs->n = 0;
	for (int i = 0; i < n; i++) {
		cons_thr *k = &cs->th[i];

		memset(k, 0, sizeof(*k));
		k->d = u->sys->d;
		k->srv = u->srv;
		k->cc.lease_ms = lease;
		k->cc.extend = extend;
		k->cc.credit = credit;
		k->cc.index = i;
		k->cc.handoff = g_cfg->tl_thread_delivery;
		k->cc.stop = &cs->stop;
		k->cc.on_msg = on_msg;
		k->cc.on_done = on_done;
		k->cc.arg = st;
		k->set = cs;
		atomic_fetch_add(&cs->alive, 1);
		if (pthread_create(&k->t, NULL, cons_main, k) != 0) {
			atomic_fetch_sub(&cs->alive, 1);
			break;
		}
		cs->n++;
	}
}

static void
cons_stop(cons_set *cs)
{
	atomic_store(&cs->stop, true);
	for (int i = 0; i < cs->n; i++) {
		pthread_join(cs->th[i].t, NULL);
	}
	cs->n = 0;
}

/* Wait until *a >= want, or the deadline (monotonic s), or one of the
 * abort flags (may be NULL) is set, or *a stood still for TLB_STALL_S
 * (nothing is coming: a broken run ends in a minute, not at the
 * deadline). */
static bool
wait_count(atomic_uint_fast64_t *a, uint64_t want, double deadline,
    atomic_bool *abort1, atomic_bool *abort2)
{
	uint64_t last = atomic_load(a);
	double moved = tlb_bench_mono_s();

	while (atomic_load(a) < want) {
		double now = tlb_bench_mono_s();

		if (atomic_load(a) != last) {
			last = atomic_load(a);
			moved = now;
		}
		if (now > deadline || (abort1 != NULL && atomic_load(abort1)) ||
		    (abort2 != NULL && atomic_load(abort2)) ||
		    now - moved > TLB_STALL_S) {
			return false;
		}
		tlb_bench_sleep_ms(1);
	}
	return true;
}

/* ---- lateness statistics ---- */

static void
late_stats(const run_state *st, tlb_result *r)
{
	tlb_bench_late l;
	size_t n;
	int64_t *v = tlb_bench_late_stats(st->seen, st->late_us, st->n, &l, &n);

	TLB_BENCH_LATE_INTO(r, l);
	if (n > 0 &&
	    (r->cdf = malloc(sizeof(float) * TLB_CDF_POINTS)) != NULL) {
		for (size_t k = 0; k < TLB_CDF_POINTS; k++) {
			size_t i = (size_t) ((double) k / (TLB_CDF_POINTS - 1) *
			    (double) (n - 1));

			r->cdf[k] = (float) ((double) v[i] / 1000.0);
		}
	}
	free(v);
}

/* ---- workloads ---- */

static tlb_item *
items_make(uint64_t n)
{
	tlb_item *it = calloc(n, sizeof(*it));

	if (it == NULL) {
		fprintf(stderr, "out of memory for %" PRIu64 " items\n", n);
	}
	return it;
}

static void
count_into(const run_state *st, tlb_result *r)
{
	r->acked = atomic_load(&st->nacked);
	r->early = atomic_load(&st->nearly);
	r->dups = atomic_load(&st->ndup);
	r->resurrected = atomic_load(&st->nresurrected);
	r->created_late = atomic_load(&st->ncreated_late);
	r->failed += atomic_load(&st->nbad);
	if (r->w != TLB_W_CRASH && r->w != TLB_W_FAILOVER) {
		/* in crash and failover, deletes in flight at the kill fail
		 * (their outcome is unknown: the message may come again) */
		r->failed += atomic_load(&st->ndel_fail);
	}
}

/* What every workload sets up: n messages (and extra ones it places
 * itself) with their due times, the run's state, and the system up. */
typedef struct wl {
	tlb_item *items;
	uint64_t n;
	uint64_t total; /* n + extra */
	run_state st;
	sut u;
} wl;

/* Message i is due at base + mix64(i) % window (mixed), or spread evenly
 * over window, or at base (window 0). -1 (everything undone) on failure. */
static int
wl_up(wl *w, const tlb_system *sys, uint64_t n, uint64_t extra, int64_t base,
    int64_t window, bool mixed, int64_t lease_ms)
{
	w->n = n;
	w->total = n + extra;
	if ((w->items = items_make(n + extra)) == NULL ||
	    state_init(&w->st, w->items, n + extra) != 0) {
		free(w->items);
		return -1;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = mixed ? tlb_bench_mix64(i) % (uint64_t) window
		                     : i * (uint64_t) window / n;
		w->items[i].seq = i;
		w->items[i].due_ms = base + (int64_t) off;
	}
	if (sut_up(&w->u, sys, lease_ms) != 0) {
		state_fini(&w->st);
		free(w->items);
		return -1;
	}
	return 0;
}

/* The run's counts into r; with unacked_failed, every message not
 * acknowledged is a failure (in crash, a kill explains them). */
static void
wl_count(wl *w, tlb_result *r, bool unacked_failed)
{
	r->n = w->n;
	count_into(&w->st, r);
	if (unacked_failed) {
		r->failed += w->total - r->acked;
	}
}

static int
wl_end(wl *w)
{
	sut_down(&w->u);
	state_fini(&w->st);
	free(w->items);
	return 0;
}

static int
w_produce(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	int64_t base = tlb_bench_wall_us() / 1000 + 60000;
	wl w;

	if (wl_up(&w, sys, cfg->produce_n, 0, base, cfg->produce_window_ms,
	        true, cfg->lease_ms) != 0) {
		return -1;
	}
	r->secs = produce(&w.u, &w.st, w.items, w.n);
	wl_count(&w, r, true);
	r->rate = r->secs > 0 ? (double) r->acked / r->secs : 0;
	printf("  %-20s produce: %" PRIu64 " msgs in %.2f s = %.0f msg/s",
	    sys->label, r->acked, r->secs, r->rate);
	return wl_end(&w);
}

static int
w_lateness(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	uint64_t n = r->rate_due > 0
	    ? (uint64_t) r->rate_due * (uint64_t) cfg->late_window_ms / 1000
	    : cfg->late_n;
	int64_t lead = cfg->lead_ms > 0 ? cfg->lead_ms
	                                : 1000 + (int64_t) (n / 2); /* 2k/s */
	int64_t base = tlb_bench_wall_us() / 1000 + lead;
	cons_set cs;
	wl w;
	double deadline, t0, span;

	if (wl_up(&w, sys, n, 0, base, cfg->late_window_ms, false,
	        cfg->lease_ms) != 0) {
		return -1;
	}
	produce(&w.u, &w.st, w.items, n);
	cons_start(&cs, &w.u, &w.st, false, cfg->lease_ms, cfg->credit);
	/* nothing is due before base: the stall watch (TLB_STALL_S without a
	 * delivery) starts then, or a lead over a minute (the default from
	 * 118k messages on) would end the run before its first due time */
	while (tlb_bench_wall_us() / 1000 < base && !atomic_load(&cs.gone)) {
		tlb_bench_sleep_ms(5);
	}
	t0 = tlb_bench_mono_s();
	deadline = t0 +
	    (double) (w.items[n - 1].due_ms - tlb_bench_wall_us() / 1000 +
	        cfg->grace_ms) /
	        1000.0;
	wait_count(&w.st.nseen, n, deadline, &cs.gone, NULL);
	wait_count(&w.st.ndeleted, atomic_load(&w.st.nseen),
	    tlb_bench_mono_s() + 10, &cs.gone, NULL);
	cons_stop(&cs);
	wl_count(&w, r, true);
	r->lost = r->acked - atomic_load(&w.st.nseen);
	late_stats(&w.st, r);
	span = (double) (atomic_load(&w.st.last_us) -
	           atomic_load(&w.st.first_us)) /
	    1e6;
	r->secs = span;
	r->rate = span > 0 ? (double) atomic_load(&w.st.nseen) / span : 0;
	if (r->rate_due > 0) {
		printf("  %-20s @%u/s", sys->label, r->rate_due);
	} else {
		printf("  %-20s", sys->label);
	}
	printf(" lateness: %" PRIu64 "/%" PRIu64 " delivered, ms p50 "
	       "%.2f p90 %.2f p99 %.2f p99.9 %.2f max %.2f, early %" PRIu64
	       ", %.0f msg/s",
	    atomic_load(&w.st.nseen), n, r->p50, r->p90, r->p99, r->p999,
	    r->max, r->early, r->rate);
	if (r->created_late > 0) {
		printf(" (%" PRIu64 " acknowledged after their due time: "
		       "raise --lead)",
		    r->created_late);
	}
	return wl_end(&w);
}

static int
w_cycle(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	int64_t due = tlb_bench_wall_us() / 1000 - 1000;
	cons_set cs;
	wl w;
	double t0;

	if (wl_up(&w, sys, cfg->cycle_n, 0, due, 0, false, cfg->lease_ms) !=
	    0) {
		return -1;
	}
	produce(&w.u, &w.st, w.items, w.n);
	t0 = tlb_bench_mono_s();
	cons_start(&cs, &w.u, &w.st, true, cfg->lease_ms, cfg->credit);
	wait_count(&w.st.ndel_acked, atomic_load(&w.st.nacked),
	    t0 + TLB_DEADLINE_S, &cs.gone, NULL);
	r->secs = tlb_bench_mono_s() - t0;
	cons_stop(&cs);
	wl_count(&w, r, true);
	r->lost = r->acked - atomic_load(&w.st.ndel_acked);
	r->rate =
	    r->secs > 0 ? (double) atomic_load(&w.st.ndeleted) / r->secs : 0;
	printf("  %-20s lease-cycle: %" PRIu64 " lease+extend+delete in %.2f "
	       "s = %.0f cycles/s",
	    sys->label, atomic_load(&w.st.ndeleted), r->secs, r->rate);
	return wl_end(&w);
}

/* ---- a fill watched over time ---- */

/* Every TLB_FILL_TICK_MS: the acknowledged puts of that tick (as a rate)
 * and the server's resident memory. */
typedef struct sampler {
	pthread_t t;
	const tlb_driver *d;
	tlb_server *srv;
	atomic_uint_fast64_t *count;
	atomic_bool stop;
	float *series;
	int n, cap;
	uint64_t rss_max_kb;
} sampler;

static void *
sampler_main(void *arg)
{
	sampler *sp = arg;
	double t0 = tlb_bench_mono_s();
	uint64_t last = atomic_load(sp->count);

	for (int k = 1; !atomic_load(&sp->stop); k++) {
		double at = t0 + (double) k * TLB_FILL_TICK_MS / 1000.0;
		uint64_t now, rss = 0;

		while (!atomic_load(&sp->stop) && tlb_bench_mono_s() < at) {
			tlb_bench_sleep_ms(10);
		}
		if (atomic_load(&sp->stop)) {
			break; /* a partial tick is left out */
		}
		now = atomic_load(sp->count);
		if (sp->n == sp->cap) {
			int cap = sp->cap > 0 ? sp->cap * 2 : 256;
			float *v =
			    realloc(sp->series, sizeof(float) * (size_t) cap);

			if (v == NULL) {
				break;
			}
			sp->series = v;
			sp->cap = cap;
		}
		sp->series[sp->n++] =
		    (float) ((double) (now - last) * 1000.0 / TLB_FILL_TICK_MS);
		last = now;
		if (sp->d->rss_kb(sp->srv, &rss) == 0 && rss > sp->rss_max_kb) {
			sp->rss_max_kb = rss;
		}
	}
	return NULL;
}

static int
sampler_start(sampler *sp, sut *u, atomic_uint_fast64_t *count)
{
	memset(sp, 0, sizeof(*sp));
	sp->d = u->sys->d;
	sp->srv = u->srv;
	sp->count = count;
	return pthread_create(&sp->t, NULL, sampler_main, sp) == 0 ? 0 : -1;
}

/* Stops the sampler and hands its series to r (series, nseries), with the
 * lowest rate over TLB_FILL_WINDOW_S (the whole fill when shorter). */
static void
sampler_stop(sampler *sp, tlb_result *r)
{
	int w = TLB_FILL_WINDOW_S * 1000 / TLB_FILL_TICK_MS;

	atomic_store(&sp->stop, true);
	pthread_join(sp->t, NULL);
	r->series = sp->series;
	r->nseries = sp->n;
	r->rss_max_kb = sp->rss_max_kb;
	r->fill_min_rate = NAN;
	if (w > sp->n) {
		w = sp->n;
	}
	for (int i = 0; w > 0 && i + w <= sp->n; i++) {
		double sum = 0;

		for (int j = i; j < i + w; j++) {
			sum += sp->series[j];
		}
		if (isnan(r->fill_min_rate) || sum / w < r->fill_min_rate) {
			r->fill_min_rate = sum / w;
		}
	}
}

static int
w_scale(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	uint64_t n = cfg->scale_n;
	int64_t base = tlb_bench_wall_us() / 1000 + TLB_HOUR_MS;
	cons_set cs;
	sampler sp;
	wl w;
	double t0;

	if (wl_up(&w, sys, n, 1, base, TLB_HOUR_MS, true, cfg->lease_ms) != 0) {
		return -1;
	}
	sys->d->rss_kb(w.u.srv, &r->rss0_kb);
	if (sampler_start(&sp, &w.u, &w.st.nacked) != 0) {
		return wl_end(&w), -1;
	}
	r->secs = produce(&w.u, &w.st, w.items, n);
	sampler_stop(&sp, r);
	r->rate =
	    r->secs > 0 ? (double) atomic_load(&w.st.nacked) / r->secs : 0;
	sys->d->rss_kb(w.u.srv, &r->rss_kb);
	r->disk_bytes = sys->d->disk_bytes(w.u.srv);
	r->rss_per_msg =
	    (double) (r->rss_kb - r->rss0_kb) * 1024.0 / (double) n;
	r->disk_per_msg = (double) r->disk_bytes / (double) n;
	/* one message due now: the first the restarted server must deliver */
	w.items[n].seq = n;
	w.items[n].due_ms = tlb_bench_wall_us() / 1000;
	produce(&w.u, &w.st, w.items + n, 1);
	r->stop_s = sys->d->stop_only(w.u.srv);
	t0 = tlb_bench_mono_s();
	if (sys->d->restart(w.u.srv) != 0) {
		fprintf(stderr, "%s: restart failed\n", sys->label);
		r->failed++;
	} else {
		cons_start(&cs, &w.u, &w.st, false, cfg->lease_ms, cfg->credit);
		wait_count(&w.st.nseen, 1, t0 + TLB_DEADLINE_S, &cs.gone, NULL);
		r->first_s = atomic_load(&w.st.first_mono) > 0
		    ? atomic_load(&w.st.first_mono) - t0
		    : NAN;
		wait_count(
		    &w.st.ndeleted, 1, tlb_bench_mono_s() + 10, &cs.gone, NULL);
		cons_stop(&cs);
	}
	wl_count(&w, r, true);
	r->lost = atomic_load(&w.st.seen[n]) ? 0 : 1;
	printf("  %-20s scale: %" PRIu64 " msgs (fill %.0f msg/s, lowest "
	       "over %d s %.0f msg/s): RSS %.1f MB (+%.0f B/msg, highest "
	       "during the fill %.1f MB), disk %.1f MB (%.0f B/msg); stop "
	       "%.2f s, restart to first delivery %.2f s",
	    sys->label, n, r->rate, TLB_FILL_WINDOW_S, r->fill_min_rate,
	    (double) r->rss_kb / 1024.0, r->rss_per_msg,
	    (double) r->rss_max_kb / 1024.0, (double) r->disk_bytes / 1048576.0,
	    r->disk_per_msg, r->stop_s, r->first_s);
	return wl_end(&w);
}

/* Restart after a kill; seconds to the first delivery, NAN if none. */
static double
crash_recover(sut *u, run_state *st, cons_set *cs, uint64_t want, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	double lease_s = (double) cfg->crash_lease_ms / 1000.0;
	double t0 = tlb_bench_mono_s();
	double first;

	state_rearm(st);
	atomic_store(&st->killed, false);
	atomic_store(&st->kill_taken, false);
	if (u->sys->d->restart(u->srv) != 0) {
		fprintf(stderr, "%s: restart failed\n", u->sys->label);
		r->failed++;
		return NAN;
	}
	/* a small credit: most messages wait on the server, not in leases,
	 * when the next kill comes */
	cons_start(cs, u, st, false, cfg->crash_lease_ms, TLB_CRASH_CREDIT);
	/* every acknowledged message delivered (leases held at the kill
	 * run out first) and then deleted, unless killed again; a message
	 * whose delete was applied but not answered before the kill may be
	 * gone, so the deletes get a bounded wait */
	if (wait_count(&st->nseen_acked, want, t0 + 30 + lease_s * 4,
	        &st->killed, &cs->gone)) {
		wait_count(&st->ndel_acked, want,
		    tlb_bench_mono_s() + 2 + lease_s * 3, &st->killed,
		    &cs->gone);
	}
	first = atomic_load(&st->first_mono);
	return first > 0 ? first - t0 : NAN;
}

static int
w_crash(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	uint64_t n = cfg->crash_n;
	int64_t due = tlb_bench_wall_us() / 1000 - 1000;
	cons_set cs;
	wl w;
	run_state *st = &w.st;

	if (wl_up(&w, sys, n, 0, due, 0, false, cfg->crash_lease_ms) != 0) {
		return -1;
	}
	st->d = sys->d;
	st->srv = w.u.srv;
	/* kill -9 from the acknowledgement of a quarter of the puts (with
	 * batches in flight, more may have been acknowledged by then) */
	st->kill_at_ack = n / 4 > 0 ? n / 4 : 1;
	produce(&w.u, st, w.items, n);
	r->acked_at_kill = atomic_load(&st->nacked);
	if (!atomic_load(&st->killed)) {
		fprintf(stderr, "%s: every put was answered before the kill\n",
		    sys->label);
		kill_now(st);
	}
	/* restart; kill -9 again when half of those are deleted */
	st->kill_at_delete =
	    r->acked_at_kill / 2 > 0 ? r->acked_at_kill / 2 : 1;
	r->first1_s = crash_recover(&w.u, st, &cs, r->acked_at_kill, r);
	cons_stop(&cs);
	r->deleted_at_kill = atomic_load(&st->ndel_acked);
	if (!atomic_load(&st->killed)) {
		fprintf(stderr,
		    "%s: every delete was answered before the "
		    "kill\n",
		    sys->label);
		kill_now(st);
	}
	/* restart; every acknowledged message must come and be deleted */
	st->kill_at_delete = 0;
	r->first2_s = crash_recover(&w.u, st, &cs, r->acked_at_kill, r);
	cons_stop(&cs);
	wl_count(&w, r, false);
	r->lost = r->acked_at_kill - atomic_load(&st->nseen_acked);
	r->undeleted = r->acked_at_kill - atomic_load(&st->ndel_acked);
	printf("  %-20s crash: killed after %" PRIu64 "/%" PRIu64
	       " puts acknowledged; restart to first delivery %.2f s; killed "
	       "after %" PRIu64 " deletes; restart to first delivery %.2f s; "
	       "lost %" PRIu64 ", early %" PRIu64 ", redelivered after an "
	       "acknowledged delete %" PRIu64
	       ", not deleted at the end %" PRIu64,
	    sys->label, r->acked_at_kill, n, r->first1_s, r->deleted_at_kill,
	    r->first2_s, r->lost, r->early, r->resurrected, r->undeleted);
	return wl_end(&w);
}

/* ---- failover ---- */

typedef struct fo_killer {
	pthread_t t;
	tlb_server *srv;
	const tlb_driver *d;
	int64_t at_us; /* wall time to kill at */
	int64_t killed_us;
	int rv;
} fo_killer;

static void *
fo_kill_main(void *arg)
{
	fo_killer *k = arg;
	int64_t wait = k->at_us - tlb_bench_wall_us();

	if (wait > 0) {
		tlb_bench_sleep_ms(wait / 1000);
	}
	k->rv = k->d->kill_leader(k->srv);
	k->killed_us = tlb_bench_wall_us();
	return NULL;
}

/* Paced puts of items [from, to) on one connection: item i in chunk
 * (i - from) / per_tick, sent at t0 + chunk * 10 ms (a put that blocks,
 * e.g. while a cluster elects, delays the next chunks, which then catch
 * up). A put that fails is an unknown outcome across a failover: its
 * messages are not counted as acknowledged, and the connection is opened
 * again. */
static void
paced_put(sut *u, run_state *st, uint64_t from, uint64_t to, int64_t t0_us,
    uint32_t per_tick)
{
	const tlb_driver *d = u->sys->d;
	tlb_conn *c = NULL;
	uint64_t i = from;

	while (i < to) {
		uint64_t k = (i - from) / per_tick;
		int64_t at = t0_us + (int64_t) k * 10000;
		size_t n = to - i < per_tick ? (size_t) (to - i) : per_tick;
		int64_t now = tlb_bench_wall_us();

		if (at > now) {
			tlb_bench_sleep_ms((at - now) / 1000);
		}
		if (c == NULL && d->connect(u->srv, &c) != 0) {
			c = NULL;
			tlb_bench_sleep_ms(100);
			continue;
		}
		if (d->put(c, st->items + i, n, g_cfg->body, on_ack, st) != 0) {
			d->disconnect(c);
			c = NULL;
		}
		i += n;
	}
	if (c != NULL) {
		d->disconnect(c);
	}
}

static int
w_failover(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	uint32_t per_tick =
	    cfg->failover_rate / 100 > 0 ? cfg->failover_rate / 100 : 1;
	uint64_t n = (uint64_t) cfg->failover_rate * cfg->failover_s;
	int64_t t0_us, kill_ms, first_ack = 0, first_del = 0;
	int64_t outage_end_ms;
	fo_killer k;
	cons_set cs;
	wl w;
	run_state *st = &w.st;

	if (wl_up(&w, sys, n, 0, 0, 0, false, cfg->crash_lease_ms) != 0) {
		return -1;
	}
	if ((st->ack_us = calloc(n, sizeof(int64_t))) == NULL) {
		return wl_end(&w), -1;
	}
	/* message i is put at t0 + (i / per_tick) * 10 ms, due 1 s later */
	t0_us = tlb_bench_wall_us() + 500000;
	for (uint64_t i = 0; i < n; i++) {
		w.items[i].due_ms =
		    t0_us / 1000 + (int64_t) (i / per_tick) * 10 + 1000;
	}
	cons_start(&cs, &w.u, st, false, cfg->crash_lease_ms, cfg->credit);
	memset(&k, 0, sizeof(k));
	k.srv = w.u.srv;
	k.d = sys->d;
	k.at_us = t0_us + (int64_t) cfg->failover_s * 1000000 / 3;
	if (pthread_create(&k.t, NULL, fo_kill_main, &k) != 0) {
		cons_stop(&cs);
		free(st->ack_us);
		st->ack_us = NULL;
		return wl_end(&w), -1;
	}
	paced_put(&w.u, st, 0, n, t0_us, per_tick);
	pthread_join(k.t, NULL);
	kill_ms = k.killed_us / 1000;
	/* every acknowledged message delivered: the leases that the dead
	 * leader handed out run out first */
	wait_count(&st->nseen_acked, atomic_load(&st->nacked),
	    tlb_bench_mono_s() + 30 + (double) cfg->crash_lease_ms / 250.0,
	    &cs.gone, NULL);
	cons_stop(&cs);
	wl_count(&w, r, false);
	r->acked_at_kill = r->acked;
	r->lost = r->acked - atomic_load(&st->nseen_acked);
	late_stats(st, r);

	/* the outage: from the kill to the first acknowledgement after it */
	for (uint64_t i = 0; i < n; i++) {
		if (atomic_load(&st->acked[i]) && st->ack_us[i] > k.killed_us &&
		    (first_ack == 0 || st->ack_us[i] < first_ack)) {
			first_ack = st->ack_us[i];
		}
	}
	outage_end_ms = first_ack > 0 ? first_ack / 1000 : kill_ms;
	r->fo_lateness_max = 0;
	for (uint64_t i = 0; i < n; i++) {
		int64_t due = w.items[i].due_ms;
		int64_t at;

		if (!atomic_load(&st->seen[i]) || due <= kill_ms ||
		    due > outage_end_ms) {
			continue;
		}
		at = due * 1000 + st->late_us[i];
		if (first_del == 0 || at < first_del) {
			first_del = at;
		}
		if ((double) st->late_us[i] / 1000.0 > r->fo_lateness_max) {
			r->fo_lateness_max = (double) st->late_us[i] / 1000.0;
		}
	}
	r->first1_s =
	    first_ack > 0 ? (double) (first_ack - k.killed_us) / 1e6 : NAN;
	r->first2_s =
	    first_del > 0 ? (double) (first_del - k.killed_us) / 1e6 : NAN;
	r->rate = (double) r->acked / cfg->failover_s;

	/* acknowledgements over time */
	r->nseries = (int) (cfg->failover_s * 1000 / TLB_FO_TICK_MS) +
	    (int) (30000 / TLB_FO_TICK_MS);
	r->kill_tick = (int) ((k.killed_us - t0_us) / 1000 / TLB_FO_TICK_MS);
	if ((r->series = calloc((size_t) r->nseries, sizeof(float))) != NULL) {
		for (uint64_t i = 0; i < n; i++) {
			int64_t t;

			if (!atomic_load(&st->acked[i])) {
				continue;
			}
			t = (st->ack_us[i] - t0_us) / 1000 / TLB_FO_TICK_MS;
			if (t >= 0 && t < r->nseries) {
				r->series[t] += 1000.0f / TLB_FO_TICK_MS;
			}
		}
	}
	if (k.rv != 0) {
		r->failed++;
	}
	printf("  %-20s failover: %" PRIu64 "/%" PRIu64 " puts acknowledged "
	       "(%u/s paced); leader killed at %.2f s; first acknowledged "
	       "put %.2f s after, first delivery of a message due in the "
	       "outage %.2f s after (lateness up to %.0f ms); %" PRIu64
	       " acknowledged after their delivery; lost %" PRIu64
	       ", early %" PRIu64,
	    sys->label, r->acked, n, cfg->failover_rate,
	    (double) (k.killed_us - t0_us) / 1e6, r->first1_s, r->first2_s,
	    r->fo_lateness_max, (uint64_t) atomic_load(&st->nack_late), r->lost,
	    r->early);
	free(st->ack_us);
	st->ack_us = NULL;
	return wl_end(&w);
}

/* ---- long-read: one client reads the whole backlog, others go on ---- */

#define TLB_LR_LEAD_MS 1000 /* a paced put's message is due this after */
#define TLB_LR_MAX_READS 256

typedef struct lr_reader {
	pthread_t t;
	const tlb_driver *d;
	tlb_server *srv;
	atomic_bool stop;
	int reads, failed;
	int64_t read_us[TLB_LR_MAX_READS];
	uint64_t counted;
} lr_reader;

static void *
lr_main(void *arg)
{
	lr_reader *k = arg;

	while (!atomic_load(&k->stop)) {
		double t0 = tlb_bench_mono_s();
		uint64_t n = 0;

		if (k->d->long_read(k->srv, &n) != 0) {
			k->failed++;
			tlb_bench_sleep_ms(100);
			continue;
		}
		if (k->reads < TLB_LR_MAX_READS) {
			k->read_us[k->reads++] =
			    (int64_t) ((tlb_bench_mono_s() - t0) * 1e6);
		}
		k->counted = n;
	}
	return NULL;
}

/* Slices alternate: without the reader (phase 0), with it (phase 1). */
#define TLB_LR_SLICES 4

/* Phase p (slices p, p + 2, ...; ms items each from n + slice * ms, put
 * from t0_us[slice]): put latency (planned send time to acknowledgement)
 * and lateness into r's [p] fields; the acknowledged ones not delivered
 * are added to r->lost. */
static void
lr_phase_stats(const run_state *st, uint64_t n, uint64_t ms,
    const int64_t *t0_us, uint32_t per_tick, int p, tlb_result *r)
{
	uint64_t m = ms * (TLB_LR_SLICES / 2);
	int64_t *v = malloc(sizeof(int64_t) * m);
	int64_t *late = malloc(sizeof(int64_t) * m);
	_Atomic uint8_t *seen = calloc(m, 1);
	size_t nv = 0, nl;
	uint64_t k = 0;
	tlb_bench_late l;
	int64_t *lv;

	if (v == NULL || late == NULL || seen == NULL) {
		free(v), free(late), free((void *) seen);
		r->failed++;
		return;
	}
	for (int q = p; q < TLB_LR_SLICES; q += 2) {
		uint64_t off = n + (uint64_t) q * ms;

		for (uint64_t j = 0; j < ms; j++, k++) {
			bool acked = atomic_load(&st->acked[off + j]);

			atomic_store(&seen[k], atomic_load(&st->seen[off + j]));
			late[k] = st->late_us[off + j];
			if (acked) {
				v[nv++] = st->ack_us[off + j] - t0_us[q] -
				    (int64_t) (j / per_tick) * 10000;
			}
			if (acked && !atomic_load(&seen[k])) {
				r->lost++;
			}
		}
	}
	tlb_bench_sort_i64(v, nv);
	r->put_p50[p] = tlb_bench_pct_ms(v, nv, 0.50);
	r->put_p99[p] = tlb_bench_pct_ms(v, nv, 0.99);
	r->put_max[p] = tlb_bench_pct_ms(v, nv, 1.0);
	lv = tlb_bench_late_stats(seen, late, m, &l, &nl);
	r->late_p50[p] = l.p50;
	r->late_p99[p] = l.p99;
	r->late_max[p] = l.max;
	if (p == 1) {
		TLB_BENCH_LATE_INTO(r, l);
	}
	free(lv);
	free(v);
	free(late);
	free((void *) seen);
}

static int
w_longread(const tlb_system *sys, tlb_result *r)
{
	const tlb_cfg *cfg = g_cfg;
	uint64_t n = cfg->read_n;
	uint32_t per_tick = cfg->read_rate / 100 > 0 ? cfg->read_rate / 100 : 1;
	/* per slice: read_s seconds of puts per phase, over its slices */
	uint64_t ms =
	    (uint64_t) per_tick * 100 * cfg->read_s / (TLB_LR_SLICES / 2);
	uint64_t m = ms * TLB_LR_SLICES;
	int64_t base = tlb_bench_wall_us() / 1000 + TLB_HOUR_MS;
	int64_t t0_us[TLB_LR_SLICES];
	lr_reader rd;
	cons_set cs;
	wl w;
	run_state *st = &w.st;

	if (ms == 0) {
		ms = per_tick;
		m = ms * TLB_LR_SLICES;
	}
	if (wl_up(&w, sys, n, m, base, TLB_HOUR_MS, true, cfg->lease_ms) != 0) {
		return -1;
	}
	if ((st->ack_us = calloc(n + m, sizeof(int64_t))) == NULL) {
		return wl_end(&w), -1;
	}
	r->secs = produce(&w.u, st, w.items, n);
	r->rate = r->secs > 0 ? (double) atomic_load(&st->nacked) / r->secs : 0;
	memset(&rd, 0, sizeof(rd));
	rd.d = sys->d;
	rd.srv = w.u.srv;
	cons_start(&cs, &w.u, st, false, cfg->lease_ms, cfg->credit);
	for (int q = 0; q < TLB_LR_SLICES; q++) {
		uint64_t off = n + (uint64_t) q * ms;
		bool reading = q % 2 == 1;

		if (reading) {
			atomic_store(&rd.stop, false);
			if (pthread_create(&rd.t, NULL, lr_main, &rd) != 0) {
				rd.failed++;
				reading = false;
			} else {
				tlb_bench_sleep_ms(200); /* under way */
			}
		}
		t0_us[q] = tlb_bench_wall_us() + 100000;
		for (uint64_t j = 0; j < ms; j++) {
			w.items[off + j].seq = off + j;
			w.items[off + j].due_ms = t0_us[q] / 1000 +
			    (int64_t) (j / per_tick) * 10 + TLB_LR_LEAD_MS;
		}
		paced_put(&w.u, st, off, off + ms, t0_us[q], per_tick);
		/* the slice ends when its messages are delivered and deleted */
		wait_count(&st->nseen, (uint64_t) (q + 1) * ms,
		    tlb_bench_mono_s() + TLB_LR_LEAD_MS / 1000.0 +
		        (double) cfg->grace_ms / 1000.0,
		    &cs.gone, NULL);
		wait_count(&st->ndeleted, atomic_load(&st->nseen),
		    tlb_bench_mono_s() + 10, &cs.gone, NULL);
		if (reading) {
			atomic_store(&rd.stop, true);
			pthread_join(rd.t, NULL);
		}
	}
	cons_stop(&cs);
	wl_count(&w, r, true);
	r->lost = 0;
	for (int p = 0; p < 2; p++) {
		lr_phase_stats(st, n, ms, t0_us, per_tick, p, r);
	}
	r->reads = rd.reads;
	r->counted = rd.counted;
	tlb_bench_sort_i64(rd.read_us, (size_t) rd.reads);
	r->read_s =
	    tlb_bench_pct_ms(rd.read_us, (size_t) rd.reads, 0.5) / 1000.0;
	if (rd.reads == 0 || rd.failed > 0) {
		fprintf(stderr, "%s: %d long read(s) failed, %d done\n",
		    sys->label, rd.failed, rd.reads);
		r->failed++;
	}
	printf("  %-20s long-read: %" PRIu64 " msgs (fill %.0f msg/s); %u "
	       "puts/s, %u s without and %u s with one more client counting "
	       "the whole timeline, alternating (%d reads of %" PRIu64
	       " msgs, median %.2f s): put ms p50/p99/max %.2f/%.2f/%.2f -> "
	       "%.2f/%.2f/%.2f, lateness ms p50/p99/max %.2f/%.2f/%.2f -> "
	       "%.2f/%.2f/%.2f, early %" PRIu64,
	    sys->label, n, r->rate, per_tick * 100, cfg->read_s, cfg->read_s,
	    r->reads, r->counted, r->read_s, r->put_p50[0], r->put_p99[0],
	    r->put_max[0], r->put_p50[1], r->put_p99[1], r->put_max[1],
	    r->late_p50[0], r->late_p99[0], r->late_max[0], r->late_p50[1],
	    r->late_p99[1], r->late_max[1], r->early);
	free(st->ack_us);
	st->ack_us = NULL;
	return wl_end(&w);
}

static int (*const workload_fns[TLB_NWORKLOADS])(
    const tlb_system *, tlb_result *) = {
    w_produce, w_lateness, w_cycle, w_scale, w_crash, w_failover, w_longread};

/* ---- options ---- */

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tl-bench [options] [WORKLOAD,...|all]\n"
	    "workloads: produce lateness lease-cycle scale crash failover "
	    "long-read "
	    "(all)\n"
	    "  --quick             small counts: a correctness smoke test "
	    "(< 2 min)\n"
	    "  --systems LIST      labels or driver names, comma separated "
	    "(all)\n"
	    "  --repeat R          runs of each workload per system; medians "
	    "(1)\n"
	    "  --json FILE         every run, the medians and the ratios\n"
	    "  --plots DIR         PNG plots (gnuplot)\n"
	    "  --dir D             run directories under D (/tmp)\n"
	    "  --keep              keep the run directories\n"
	    "  --timelined PATH    the broker (<builddir>/broker/timelined)\n"
	    "  --timeline-ipc      Timeline's clients over ipc:// (default: "
	    "TCP, as the peers)\n"
	    "  --timeline-thread-delivery  Timeline's consumers get each "
	    "message on\n"
	    "                      the consumer's own thread (default: "
	    "inline, on the\n"
	    "                      connection thread: "
	    "tl_consumer_conf.inline_delivery)\n"
	    "  --timeline-durability MODE  timelined --durability MODE "
	    "(always; none\n"
	    "                      measures Timeline without its fsyncs)\n"
	    "  --body BYTES        body size (100, at least %d)\n"
	    "  --producers P       producer connections (1)\n"
	    "  --consumers C       consumer connections (2)\n"
	    "  --credit N          messages a consumer holds at once, where "
	    "the\n"
	    "                      system can (256)\n"
	    "  --lease MS          lease / TTR (30000)\n"
	    "  --produce-n N       produce: messages (100000)\n"
	    "  --window MS         produce: due times spread over MS after "
	    "now+60s (3600000)\n"
	    "  --lateness-n N      lateness: messages (20000)\n"
	    "  --lateness-window MS  lateness: they fall due over MS (10000)\n"
	    "  --rates R,...       lateness: one run per rate, R messages "
	    "falling due\n"
	    "                      per second over the window (instead of "
	    "--lateness-n)\n"
	    "  --lead MS           lateness: first due time after the start "
	    "(1 s + N/2 ms)\n"
	    "  --grace MS          lateness: wait after the last due time "
	    "(5000)\n"
	    "  --cycle-n N         lease-cycle: messages (20000)\n"
	    "  --scale-n N         scale: messages an hour ahead (1000000)\n"
	    "  --crash-n N         crash: messages (20000)\n"
	    "  --crash-lease MS    crash and failover: lease / TTR (2000)\n"
	    "  --failover-rate R   failover: puts per second, paced (5000)\n"
	    "  --failover-s S      failover: seconds of puts; the leader is "
	    "killed at S/3 (6)\n"
	    "  --read-n N          long-read: messages an hour ahead, counted "
	    "whole by\n"
	    "                      one client over and over (10000000)\n"
	    "  --read-rate R       long-read: other clients' puts per second, "
	    "paced,\n"
	    "                      each due 1 s later (2000)\n"
	    "  --read-s S          long-read: seconds of puts without, then "
	    "with the\n"
	    "                      reader (10)\n"
	    "Every system in turn; the exit status is 1 when any message was "
	    "lost or early,\nor an operation failed (a crash loss by a mode "
	    "that replies before its fsync,\nbeanstalkd-default or "
	    "redis-everysec, is reported, not a failure).\n",
	    TLB_BODY_MIN);
}

enum {
	OPT_QUICK = 256,
	OPT_SYSTEMS,
	OPT_REPEAT,
	OPT_JSON,
	OPT_PLOTS,
	OPT_DIR,
	OPT_KEEP,
	OPT_TIMELINED,
	OPT_BODY,
	OPT_PRODUCERS,
	OPT_CONSUMERS,
	OPT_CREDIT,
	OPT_LEASE,
	OPT_PRODUCE_N,
	OPT_WINDOW,
	OPT_LATE_N,
	OPT_LATE_WINDOW,
	OPT_LEAD,
	OPT_GRACE,
	OPT_CYCLE_N,
	OPT_SCALE_N,
	OPT_CRASH_N,
	OPT_CRASH_LEASE,
	OPT_IPC,
	OPT_TL_THREAD_DELIVERY,
	OPT_RATES,
	OPT_TL_DURABILITY,
	OPT_FO_RATE,
	OPT_FO_S,
	OPT_READ_N,
	OPT_READ_RATE,
	OPT_READ_S,
};

static const struct option long_opts[] = {
    {"quick", no_argument, NULL, OPT_QUICK},
    {"systems", required_argument, NULL, OPT_SYSTEMS},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {"json", required_argument, NULL, OPT_JSON},
    {"plots", required_argument, NULL, OPT_PLOTS},
    {"dir", required_argument, NULL, OPT_DIR},
    {"keep", no_argument, NULL, OPT_KEEP},
    {"timelined", required_argument, NULL, OPT_TIMELINED},
    {"body", required_argument, NULL, OPT_BODY},
    {"producers", required_argument, NULL, OPT_PRODUCERS},
    {"consumers", required_argument, NULL, OPT_CONSUMERS},
    {"credit", required_argument, NULL, OPT_CREDIT},
    {"lease", required_argument, NULL, OPT_LEASE},
    {"produce-n", required_argument, NULL, OPT_PRODUCE_N},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"lateness-n", required_argument, NULL, OPT_LATE_N},
    {"lateness-window", required_argument, NULL, OPT_LATE_WINDOW},
    {"lead", required_argument, NULL, OPT_LEAD},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"cycle-n", required_argument, NULL, OPT_CYCLE_N},
    {"scale-n", required_argument, NULL, OPT_SCALE_N},
    {"crash-n", required_argument, NULL, OPT_CRASH_N},
    {"crash-lease", required_argument, NULL, OPT_CRASH_LEASE},
    {"timeline-ipc", no_argument, NULL, OPT_IPC},
    {"timeline-thread-delivery", no_argument, NULL, OPT_TL_THREAD_DELIVERY},
    {"rates", required_argument, NULL, OPT_RATES},
    {"timeline-durability", required_argument, NULL, OPT_TL_DURABILITY},
    {"failover-rate", required_argument, NULL, OPT_FO_RATE},
    {"failover-s", required_argument, NULL, OPT_FO_S},
    {"read-n", required_argument, NULL, OPT_READ_N},
    {"read-rate", required_argument, NULL, OPT_READ_RATE},
    {"read-s", required_argument, NULL, OPT_READ_S},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* A decimal in [lo, hi]; false (said) when it is not. */
static bool
num(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *v)
{
	if (!tlb_bench_parse_u64(s, lo, hi, v)) {
		fprintf(stderr,
		    "--%s: expected a number in [%" PRIu64 ", %" PRIu64
		    "], got \"%s\"\n",
		    name, lo, hi, s);
		return false;
	}
	return true;
}

static bool
set_workloads(tlb_cfg *cfg, const char *list)
{
	char buf[256], *save = NULL;

	if (strcmp(list, "all") == 0) {
		for (int w = 0; w < TLB_NWORKLOADS; w++) {
			cfg->workload_on[w] = true;
		}
		return true;
	}
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t != NULL;
	     t = strtok_r(NULL, ",", &save)) {
		int w = 0;

		while (w < TLB_NWORKLOADS && strcmp(t, tlb_workload_names[w])) {
			w++;
		}
		if (w == TLB_NWORKLOADS) {
			fprintf(stderr, "unknown workload: %s\n", t);
			return false;
		}
		cfg->workload_on[w] = true;
	}
	return true;
}

/* --rates: up to TLB_MAX_RATES rates in [1, 1000000] msg/s. */
static bool
set_rates(tlb_cfg *cfg, const char *list)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	cfg->nrates = 0;
	for (char *t = strtok_r(buf, ",", &save); t != NULL;
	     t = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (cfg->nrates == TLB_MAX_RATES) {
			fprintf(stderr, "--rates: at most %d rates\n",
			    TLB_MAX_RATES);
			return false;
		}
		if (!num("rates", t, 1, 1000000, &v)) {
			return false;
		}
		cfg->rates[cfg->nrates++] = (uint32_t) v;
	}
	if (cfg->nrates == 0) {
		fprintf(stderr, "--rates: expected a list such as 2000,4000\n");
		return false;
	}
	return true;
}

static void
quick_defaults(tlb_cfg *cfg)
{
	cfg->produce_n = 2000;
	cfg->late_n = 1000;
	cfg->late_window_ms = 1500;
	cfg->grace_ms = 10000; /* a bound only: the run ends when all came */
	cfg->cycle_n = 1000;
	cfg->scale_n = 20000;
	cfg->crash_n = 2000;
	cfg->failover_rate = 1000;
	cfg->failover_s = 3;
	cfg->read_n = 100000;
	cfg->read_rate = 1000;
	cfg->read_s = 2;
}

static int
parse_args(int argc, char **argv, tlb_cfg *cfg)
{
	uint64_t v;
	int c;

	/* --quick first: later options override its counts */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			cfg->quick = true;
			quick_defaults(cfg);
		}
	}
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		const char *name = "";

		for (const struct option *o = long_opts; o->name; o++) {
			if (o->val == c) {
				name = o->name;
			}
		}
		switch (c) {
		case 'h':
			usage(stdout);
			exit(0);
		case OPT_QUICK:
			break;
		case OPT_SYSTEMS:
			cfg->systems = optarg;
			break;
		case OPT_REPEAT:
			if (!num(name, optarg, 1, 15, &v)) {
				return -1;
			}
			cfg->com.repeat = (int) v;
			break;
		case OPT_JSON:
			cfg->com.json = optarg;
			break;
		case OPT_PLOTS:
			cfg->plots = optarg;
			break;
		case OPT_DIR:
			cfg->com.dir = optarg;
			break;
		case OPT_KEEP:
			cfg->com.keep = true;
			break;
		case OPT_IPC:
			cfg->ipc = true;
			break;
		case OPT_TL_THREAD_DELIVERY:
			cfg->tl_thread_delivery = true;
			break;
		case OPT_TIMELINED:
			cfg->timelined = optarg;
			break;
		case OPT_TL_DURABILITY:
			if (strlen(optarg) >= 32 ||
			    strspn(optarg,
			        "abcdefghijklmnopqrstuvwxyz"
			        "0123456789:") != strlen(optarg)) {
				fprintf(stderr,
				    "--timeline-durability: always, none or "
				    "interval:MS\n");
				return -1;
			}
			cfg->tl_durability = optarg;
			break;
		case OPT_RATES:
			if (!set_rates(cfg, optarg)) {
				return -1;
			}
			break;
		case OPT_BODY:
			if (!num(name, optarg, TLB_BODY_MIN, 65000, &v)) {
				return -1;
			}
			cfg->body = (size_t) v;
			break;
		case OPT_PRODUCERS:
		case OPT_CONSUMERS:
			if (!num(name, optarg, 1, 64, &v)) {
				return -1;
			}
			*(c == OPT_PRODUCERS ? &cfg->producers
			                     : &cfg->consumers) = (int) v;
			break;
		case OPT_CREDIT:
			if (!num(name, optarg, 1, 65536, &v)) {
				return -1;
			}
			cfg->credit = (uint32_t) v;
			break;
		case OPT_LEASE:
		case OPT_CRASH_LEASE:
			if (!num(name, optarg, 1000, 3600000, &v)) {
				return -1;
			}
			*(c == OPT_LEASE ? &cfg->lease_ms
			                 : &cfg->crash_lease_ms) = (int64_t) v;
			break;
		case OPT_WINDOW:
		case OPT_LATE_WINDOW:
		case OPT_LEAD:
		case OPT_GRACE:
			if (!num(name, optarg, 1, 24 * TLB_HOUR_MS, &v)) {
				return -1;
			}
			*(c == OPT_WINDOW              ? &cfg->produce_window_ms
			        : c == OPT_LATE_WINDOW ? &cfg->late_window_ms
			        : c == OPT_LEAD        ? &cfg->lead_ms
			                        : &cfg->grace_ms) = (int64_t) v;
			break;
		case OPT_FO_RATE:
		case OPT_FO_S:
			if (!num(name, optarg, 1,
			        c == OPT_FO_RATE ? 1000000 : 3600, &v)) {
				return -1;
			}
			*(c == OPT_FO_RATE ? &cfg->failover_rate
			                   : &cfg->failover_s) = (uint32_t) v;
			break;
		case OPT_READ_RATE:
		case OPT_READ_S:
			if (!num(name, optarg, 1,
			        c == OPT_READ_RATE ? 100000 : 3600, &v)) {
				return -1;
			}
			*(c == OPT_READ_RATE ? &cfg->read_rate : &cfg->read_s) =
			    (uint32_t) v;
			break;
		case OPT_PRODUCE_N:
		case OPT_LATE_N:
		case OPT_CYCLE_N:
		case OPT_SCALE_N:
		case OPT_CRASH_N:
		case OPT_READ_N:
			if (!num(name, optarg, 1, UINT64_C(100000000), &v)) {
				return -1;
			}
			*(c == OPT_PRODUCE_N       ? &cfg->produce_n
			        : c == OPT_LATE_N  ? &cfg->late_n
			        : c == OPT_CYCLE_N ? &cfg->cycle_n
			        : c == OPT_SCALE_N ? &cfg->scale_n
			        : c == OPT_READ_N  ? &cfg->read_n
			                           : &cfg->crash_n) = v;
			break;
		default:
			return -1;
		}
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "one list of workloads, please\n");
		return -1;
	}
	return set_workloads(cfg, optind < argc ? argv[optind] : "all") ? 0
	                                                                : -1;
}

/* The systems: every mode of every driver that --systems names. */
static int
systems_make(const tlb_cfg *cfg, tlb_system *sys)
{
	int n = 0;

	for (size_t i = 0; i < tlb_ndrivers; i++) {
		const tlb_driver *d = tlb_drivers[i];

		for (int m = 0; m < d->nmodes && n < TLB_MAX_SYSTEMS; m++) {
			tlb_system *s = &sys[n];
			bool on = cfg->systems == NULL;
			char buf[256], *save = NULL;

			s->d = d;
			s->mode = m;
			if (d->nmodes == 1) {
				snprintf(
				    s->label, sizeof(s->label), "%s", d->name);
			} else {
				snprintf(s->label, sizeof(s->label), "%s-%s",
				    d->name, d->mode_name[m]);
			}
			if (cfg->systems != NULL) {
				snprintf(buf, sizeof(buf), "%s", cfg->systems);
				for (char *t = strtok_r(buf, ",", &save); t;
				     t = strtok_r(NULL, ",", &save)) {
					on = on || strcmp(t, s->label) == 0 ||
					    strcmp(t, d->name) == 0;
				}
			}
			n += on ? 1 : 0;
		}
	}
	return n;
}

static bool
result_bad(const tlb_result *r, const tlb_system *sys)
{
	bool may_lose = r->w == TLB_W_CRASH && sys->d->lossy[sys->mode];

	return (r->lost > 0 && !may_lose) || r->early > 0 || r->failed > 0;
}

/* One run of workload w on system s into the next result; 1 when it
 * failed, else 0. */
static int
run_one(tlb_report *rp, tlb_workload w, int s, int run, uint32_t rate)
{
	const tlb_system *sys = &rp->sys[s];
	tlb_result *r = &rp->res[rp->nres];
	bool bad;

	if ((w == TLB_W_SCALE && sys->mode != sys->d->scale_mode) ||
	    (w == TLB_W_FAILOVER && sys->d->kill_leader == NULL) ||
	    (w == TLB_W_LONGREAD && sys->d->long_read == NULL) ||
	    rp->nres == TLB_MAX_RESULTS) {
		return 0;
	}
	memset(r, 0, sizeof(*r));
	r->w = w;
	r->sys = s;
	r->run = run;
	r->rate_due = rate;
	r->load1 = tlb_bench_load_avg();
	rp->nres++;
	if (workload_fns[w](sys, r) != 0) {
		fprintf(stderr, "%s on %s could not run\n",
		    tlb_workload_names[w], sys->label);
		r->failed++;
		return 1;
	}
	r->ran = true;
	bad = result_bad(r, sys);
	if (bad) {
		printf(" FAILED: lost %" PRIu64 ", early %" PRIu64
		       ", failed %" PRIu64,
		    r->lost, r->early, r->failed);
	}
	printf(" [load %.2f]\n", r->load1);
	fflush(stdout);
	return bad ? 1 : 0;
}

int
main(int argc, char **argv)
{
	static tlb_result res[TLB_MAX_RESULTS];
	static tlb_system sys[TLB_MAX_SYSTEMS];
	tlb_cfg cfg = {
	    .com = {.repeat = 1},
	    .body = 100,
	    .producers = 1,
	    .consumers = 2,
	    .credit = 256,
	    .lease_ms = 30000,
	    .produce_n = 100000,
	    .produce_window_ms = TLB_HOUR_MS,
	    .late_n = 20000,
	    .late_window_ms = 10000,
	    .grace_ms = 5000,
	    .cycle_n = 20000,
	    .scale_n = 1000000,
	    .crash_n = 20000,
	    .crash_lease_ms = 2000,
	    .failover_rate = 5000,
	    .failover_s = 6,
	    .read_n = 10000000,
	    .read_rate = 2000,
	    .read_s = 10,
	};
	tlb_report rp = {.cfg = &cfg, .sys = sys, .res = res};
	char *def = NULL;
	uint64_t bad = 0;

	if (parse_args(argc, argv, &cfg) != 0) {
		usage(stderr);
		return 2;
	}
	if (cfg.timelined == NULL) {
		cfg.timelined = def = tlb_bench_default_timelined();
	}
	if ((rp.nsys = systems_make(&cfg, sys)) == 0) {
		fprintf(
		    stderr, "no system matches --systems %s\n", cfg.systems);
		free(def);
		return 2;
	}
	g_cfg = &cfg;
	signal(SIGPIPE, SIG_IGN);
	printf("tl-bench: %d systems, %d run(s) each%s; body %zu B\n", rp.nsys,
	    cfg.com.repeat, cfg.quick ? ", quick" : "", cfg.body);
	for (int s = 0; s < rp.nsys; s++) {
		printf("  %-20s %s\n", sys[s].label,
		    sys[s].d->mode_desc[sys[s].mode]);
	}
	fflush(stdout);
	for (int w = 0; w < TLB_NWORKLOADS; w++) {
		if (!cfg.workload_on[w]) {
			continue;
		}
		printf("%s\n", tlb_workload_names[w]);
		for (int run = 1; run <= cfg.com.repeat; run++) {
			/* lateness of a --rates sweep: every rate in a run */
			int nr = w == TLB_W_LATENESS && cfg.nrates > 0
			    ? cfg.nrates
			    : 1;

			for (int k = 0; k < nr; k++) {
				uint32_t rate =
				    w == TLB_W_LATENESS && cfg.nrates > 0
				    ? cfg.rates[k]
				    : 0;

				for (int s = 0; s < rp.nsys; s++) {
					bad += run_one(&rp, (tlb_workload) w, s,
					    run, rate);
				}
			}
		}
	}
	tlb_report_table(&rp);
	if (cfg.com.json != NULL && tlb_report_json(&rp, cfg.com.json) != 0) {
		bad++;
	}
	if (cfg.plots != NULL && tlb_report_plots(&rp, cfg.plots) != 0) {
		bad++;
	}
	for (int i = 0; i < rp.nres; i++) {
		free(res[i].cdf);
		free(res[i].series);
	}
	free(def);
	if (bad > 0) {
		fprintf(stderr,
		    "tl-bench: %" PRIu64 " run(s) failed (lost, "
		    "early or failed operations)\n",
		    bad);
		return 1;
	}
	return 0;
}
