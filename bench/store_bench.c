/*
 * tl-store-bench: throughput of the timeline store on a real RocksDB in a
 * fresh temporary directory. `create` measures durable creates under group
 * commit from several submitter threads, each keeping a few asynchronous
 * submissions in flight; `create-sync1` has the same threads apply one op at
 * a time and wait (group commit across single-op callers); `scan` fills one
 * single-bucket topic, reopens the store and times a paged due scan over all
 * of it, twice. Every run prints one line; --json writes every run and the
 * medians. Any failed operation or short scan makes the exit status 1.
 * See docs/bench-store.md.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "store.h"

#include "bench_util.h"

#define BENCH_TOPIC "bench"
#define BENCH_OWNER "bench-producer"
#define BENCH_ID_CAP 24
#define BENCH_SPREAD_MS INT64_C(3600000)
#define BENCH_PAGE 1000
#define BENCH_FILL_PER 1000
#define BENCH_MAX_RUNS TLB_BENCH_MAX_RUNS

typedef struct bench_cfg {
	int threads;
	int inflight;
	int per;
	uint64_t count;
	uint64_t sync1_count;
	size_t body;
	tli_sync_mode sync;
	const char *sync_name;
	tlb_bench_common com; /* --dir, --keep, --repeat, --json */
} bench_cfg;

/* One run of one workload. */
typedef struct bench_result {
	const char *workload;
	int run;
	uint64_t msgs;
	double secs;
	double rate;
	uint64_t batches;
	uint64_t max_batch;
	double avg_batch;
	double avg_sync_ms;
	uint64_t failures;
	int first_err;
	/* scan only */
	double fill_secs;
	double reopen_secs;
	uint64_t scan_n[2];
	uint64_t pages[2];
	double scan_secs[2];
	double scan_rate[2];
} bench_result;

/* One asynchronous submission: its ops and their ids live here until the
 * completion callback hands the slot back to its submitter. */
typedef struct bench_slot {
	struct bench_worker *owner;
	tli_op *ops;
	char (*ids)[BENCH_ID_CAP];
	size_t n;
	struct bench_slot *next;
} bench_slot;

typedef struct bench_worker {
	pthread_t thr;
	tli_store *s;
	bool sync1; /* blocking apply of one op at a time */
	int per;
	int inflight;
	uint64_t first; /* message numbers [first, first + count) */
	uint64_t count;
	int64_t base_ts;
	const void *body;
	size_t body_len;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bench_slot *slots;
	bench_slot *free_list;
	int outstanding;
	uint64_t failures;
	int first_err;
} bench_worker;

/* Rates as "1.23M", "456k" or "789". */
static void
fmt_rate(char *buf, size_t len, double r)
{
	tlb_bench_fmt_rate(buf, len, r, 0);
}

static char *
dir_make(const bench_cfg *cfg)
{
	char tmpl[4096];

	if (tlb_bench_dir_make(tmpl, sizeof(tmpl), &cfg->com, "tl-bench") !=
	    0) {
		return NULL;
	}
	return strdup(tmpl);
}

static void
dir_done(const bench_cfg *cfg, char *path)
{
	if (path == NULL) {
		return;
	}
	tlb_bench_dir_done(&cfg->com, path);
	free(path);
}

static tli_store *
store_open(const char *path, tli_sync_mode mode)
{
	tli_store_opts o;
	tli_store *s = NULL;
	int rv;

	tli_store_opts_init(&o);
	o.path = path;
	o.sync_mode = mode;
	if ((rv = tli_store_open(&s, &o)) != TL_OK) {
		fprintf(
		    stderr, "tli_store_open(%s): %s\n", path, tl_errname(rv));
		return NULL;
	}
	return s;
}

static int
topic_make(tli_store *s, uint32_t buckets)
{
	tli_topic_conf c;
	int rv;

	if ((rv = tli_topic_conf_init(&c, BENCH_TOPIC)) == TL_OK) {
		c.buckets = buckets;
		rv = tli_store_topic_create(s, &c);
	}
	if (rv != TL_OK) {
		fprintf(stderr, "topic create: %s (%s)\n", tl_errname(rv),
		    tli_store_last_error(s));
	}
	return rv;
}

/* ---- submitters ---- */

static void
worker_fill_op(bench_worker *w, tli_op *op, char *id, uint64_t msg)
{
	memset(op, 0, sizeof(*op));
	op->type = TLI_OP_CREATE;
	op->topic = BENCH_TOPIC;
	op->id_len = (size_t) snprintf(
	    id, BENCH_ID_CAP, "m%012llu", (unsigned long long) msg);
	op->id = id;
	op->who = BENCH_OWNER;
	op->who_len = sizeof(BENCH_OWNER) - 1;
	op->ts = w->base_ts +
	    (int64_t) (tlb_bench_mix64(msg) % (uint64_t) BENCH_SPREAD_MS);
	op->ts_mode = TLI_TS_ABS;
	op->body = w->body;
	op->body_len = w->body_len;
}

static void
worker_count_errs(bench_worker *w, const tli_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (ops[i].err != TL_OK) {
			if (w->failures++ == 0) {
				w->first_err = ops[i].err;
			}
		}
	}
}

/* Runs on the store's writer thread: keep it short. */
static void
worker_done_cb(void *arg)
{
	bench_slot *sl = arg;
	bench_worker *w = sl->owner;

	pthread_mutex_lock(&w->mtx);
	worker_count_errs(w, sl->ops, sl->n);
	sl->next = w->free_list;
	w->free_list = sl;
	w->outstanding--;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

static bench_slot *
worker_slot_take(bench_worker *w)
{
	bench_slot *sl;

	pthread_mutex_lock(&w->mtx);
	while (w->free_list == NULL) {
		pthread_cond_wait(&w->cv, &w->mtx);
	}
	sl = w->free_list;
	w->free_list = sl->next;
	w->outstanding++;
	pthread_mutex_unlock(&w->mtx);
	return sl;
}

static void
worker_run_async(bench_worker *w)
{
	uint64_t msg = w->first;
	uint64_t end = w->first + w->count;

	while (msg < end) {
		bench_slot *sl = worker_slot_take(w);
		uint64_t left = end - msg;
		int rv;

		sl->n =
		    left < (uint64_t) w->per ? (size_t) left : (size_t) w->per;
		for (size_t i = 0; i < sl->n; i++) {
			worker_fill_op(w, &sl->ops[i], sl->ids[i], msg + i);
		}
		msg += sl->n;
		rv = tli_store_submit(w->s, sl->ops, sl->n, worker_done_cb, sl);
		if (rv != TL_OK) {
			/* No callback comes: account for the slot here. */
			pthread_mutex_lock(&w->mtx);
			if (w->failures == 0) {
				w->first_err = rv;
			}
			w->failures += sl->n;
			sl->next = w->free_list;
			w->free_list = sl;
			w->outstanding--;
			pthread_mutex_unlock(&w->mtx);
		}
	}
	pthread_mutex_lock(&w->mtx);
	while (w->outstanding > 0) {
		pthread_cond_wait(&w->cv, &w->mtx);
	}
	pthread_mutex_unlock(&w->mtx);
}

static void
worker_run_sync1(bench_worker *w)
{
	char id[BENCH_ID_CAP];
	tli_op op;

	for (uint64_t msg = w->first; msg < w->first + w->count; msg++) {
		int rv;

		worker_fill_op(w, &op, id, msg);
		rv = tli_store_apply(w->s, &op, 1);
		if (rv != TL_OK) {
			op.err = rv;
		}
		worker_count_errs(w, &op, 1);
	}
}

static void *
worker_main(void *arg)
{
	bench_worker *w = arg;

	if (w->sync1) {
		worker_run_sync1(w);
	} else {
		worker_run_async(w);
	}
	return NULL;
}

static int
worker_init(bench_worker *w, tli_store *s, bool sync1, int per, int inflight)
{
	memset(w, 0, sizeof(*w));
	w->s = s;
	w->sync1 = sync1;
	w->per = per;
	w->inflight = inflight;
	pthread_mutex_init(&w->mtx, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (sync1) {
		return 0;
	}
	if ((w->slots = calloc((size_t) inflight, sizeof(*w->slots))) == NULL) {
		return -1;
	}
	for (int k = 0; k < inflight; k++) {
		bench_slot *sl = &w->slots[k];

		sl->owner = w;
		sl->ops = calloc((size_t) per, sizeof(*sl->ops));
		sl->ids = calloc((size_t) per, sizeof(*sl->ids));
		if (sl->ops == NULL || sl->ids == NULL) {
			return -1;
		}
		sl->next = w->free_list;
		w->free_list = sl;
	}
	return 0;
}

static void
worker_fini(bench_worker *w)
{
	if (w->slots != NULL) {
		for (int k = 0; k < w->inflight; k++) {
			free(w->slots[k].ops);
			free(w->slots[k].ids);
		}
		free(w->slots);
	}
	pthread_mutex_destroy(&w->mtx);
	pthread_cond_destroy(&w->cv);
}

/*
 * Create `count` messages from `threads` submitters and wait for all of
 * them. Fills secs, failures and the batch statistics of r.
 */
static int
creates_run(tli_store *s, bool sync1, int threads, int inflight, int per,
    uint64_t count, size_t body_len, bench_result *r)
{
	bench_worker *ws;
	tli_store_stats st0, st1;
	void *body;
	uint64_t first = 0;
	int64_t base_ts = tli_wall_ms() + 60000;
	double t0;
	int rv = 0;

	ws = calloc((size_t) threads, sizeof(*ws));
	body = malloc(body_len > 0 ? body_len : 1);
	if (ws == NULL || body == NULL) {
		free(ws);
		free(body);
		return -1;
	}
	memset(body, 'b', body_len);
	for (int t = 0; t < threads; t++) {
		uint64_t share = count / (uint64_t) threads +
		    ((uint64_t) t < count % (uint64_t) threads ? 1 : 0);

		if (worker_init(&ws[t], s, sync1, per, inflight) != 0) {
			rv = -1;
		}
		ws[t].first = first;
		ws[t].count = share;
		ws[t].base_ts = base_ts;
		ws[t].body = body;
		ws[t].body_len = body_len;
		first += share;
	}
	if (rv == 0) {
		tli_store_get_stats(s, &st0);
		t0 = tlb_bench_mono_s();
		for (int t = 0; t < threads; t++) {
			pthread_create(&ws[t].thr, NULL, worker_main, &ws[t]);
		}
		for (int t = 0; t < threads; t++) {
			pthread_join(ws[t].thr, NULL);
		}
		r->secs = tlb_bench_mono_s() - t0;
		tli_store_get_stats(s, &st1);
		r->msgs = count;
		r->rate = r->secs > 0 ? (double) count / r->secs : 0;
		r->batches = st1.batches - st0.batches;
		r->max_batch = st1.max_batch;
		r->avg_batch = r->batches > 0
		    ? (double) (st1.ops - st0.ops) / (double) r->batches
		    : 0;
		r->avg_sync_ms = r->batches > 0
		    ? (double) (st1.sync_ns_total - st0.sync_ns_total) /
		        (double) r->batches / 1e6
		    : 0;
		for (int t = 0; t < threads; t++) {
			if (ws[t].failures > 0 && r->failures == 0) {
				r->first_err = ws[t].first_err;
			}
			r->failures += ws[t].failures;
		}
	}
	for (int t = 0; t < threads; t++) {
		worker_fini(&ws[t]);
	}
	free(ws);
	free(body);
	return rv;
}

/* ---- workloads ---- */

static void
create_print(const bench_result *r)
{
	char rate[32];

	fmt_rate(rate, sizeof(rate), r->rate);
	printf("%s: %llu msgs in %.2f s = %s msg/s (batches %llu, "
	       "avg %.0f ops/batch, max %llu, avg sync %.2f ms)",
	    r->workload, (unsigned long long) r->msgs, r->secs, rate,
	    (unsigned long long) r->batches, r->avg_batch,
	    (unsigned long long) r->max_batch, r->avg_sync_ms);
	if (r->failures > 0) {
		printf(" FAILURES %llu (first %s)",
		    (unsigned long long) r->failures, tl_errname(r->first_err));
	}
	printf("\n");
	fflush(stdout);
}

static int
bench_create(const bench_cfg *cfg, bool sync1, bench_result *r)
{
	char *dir = dir_make(cfg);
	tli_store *s;
	int rv = -1;

	if (dir == NULL) {
		return -1;
	}
	if ((s = store_open(dir, cfg->sync)) != NULL &&
	    topic_make(s, 0) == TL_OK) {
		rv =
		    creates_run(s, sync1, cfg->threads, cfg->inflight, cfg->per,
		        sync1 ? cfg->sync1_count : cfg->count, cfg->body, r);
	}
	tli_store_close(s);
	dir_done(cfg, dir);
	if (rv == 0) {
		create_print(r);
	}
	return rv;
}

/* One pass of the due scan over the whole bucket, page by page. */
static int
scan_pass(tli_store *s, uint32_t bucket, tli_entry *page, uint64_t *total,
    uint64_t *pages, uint64_t *disorder)
{
	tli_cursor cur;
	int64_t last_ts = INT64_MIN;
	bool more = true;

	memset(&cur, 0, sizeof(cur));
	*total = 0;
	*pages = 0;
	*disorder = 0;
	while (more) {
		size_t n = 0;
		int rv;

		rv = tli_store_scan_due(s, BENCH_TOPIC, bucket, TL_TS_MAX, &cur,
		    page, BENCH_PAGE, &n, &more);
		if (rv != TL_OK) {
			fprintf(stderr, "scan_due: %s (%s)\n", tl_errname(rv),
			    tli_store_last_error(s));
			return rv;
		}
		(*pages)++;
		for (size_t i = 0; i < n; i++) {
			if (page[i].ts < last_ts) {
				(*disorder)++;
			}
			last_ts = page[i].ts;
		}
		*total += n;
		if (n == 0) {
			break;
		}
		tli_cursor_from_entry(&cur, &page[n - 1]);
	}
	return TL_OK;
}

static void
scan_print(const bench_result *r)
{
	static const char *pass[2] = {"cold", "warm"};

	for (int p = 0; p < 2; p++) {
		char rate[32];

		fmt_rate(rate, sizeof(rate), r->scan_rate[p]);
		printf("scan (%s): %llu entries in %.3f s = %s entries/s "
		       "(%llu pages of %d)",
		    pass[p], (unsigned long long) r->scan_n[p], r->scan_secs[p],
		    rate, (unsigned long long) r->pages[p], BENCH_PAGE);
		if (p == 0) {
			printf(" [fill %.2f s, reopen %.2f s]", r->fill_secs,
			    r->reopen_secs);
		}
		printf("\n");
	}
	if (r->failures > 0) {
		printf(
		    "scan: FAILURES %llu\n", (unsigned long long) r->failures);
	}
	fflush(stdout);
}

static int
bench_scan(const bench_cfg *cfg, bench_result *r)
{
	char *dir = dir_make(cfg);
	tli_store *s = NULL;
	tli_entry *page = NULL;
	bench_result fill;
	uint32_t bucket;
	double t0;
	int rv = -1;

	if (dir == NULL) {
		return -1;
	}
	memset(&fill, 0, sizeof(fill));
	bucket = tli_bucket_of("m000000000000", 13, 1);
	if ((page = calloc(BENCH_PAGE, sizeof(*page))) == NULL) {
		goto out;
	}
	if ((s = store_open(dir, TLI_SYNC_NONE)) == NULL ||
	    topic_make(s, 1) != TL_OK) {
		goto out;
	}
	if (creates_run(s, false, 2, 4, BENCH_FILL_PER, cfg->count, cfg->body,
	        &fill) != 0) {
		goto out;
	}
	r->fill_secs = fill.secs;
	r->failures = fill.failures;
	r->first_err = fill.first_err;
	if (fill.failures > 0) {
		fprintf(stderr, "scan fill: %llu failures (first %s)\n",
		    (unsigned long long) fill.failures,
		    tl_errname(fill.first_err));
	}
	tli_store_close(s);
	t0 = tlb_bench_mono_s();
	if ((s = store_open(dir, TLI_SYNC_ALWAYS)) == NULL) {
		goto out;
	}
	r->reopen_secs = tlb_bench_mono_s() - t0;
	for (int p = 0; p < 2; p++) {
		uint64_t disorder;

		t0 = tlb_bench_mono_s();
		if (scan_pass(s, bucket, page, &r->scan_n[p], &r->pages[p],
		        &disorder) != TL_OK) {
			goto out;
		}
		r->scan_secs[p] = tlb_bench_mono_s() - t0;
		r->scan_rate[p] = r->scan_secs[p] > 0
		    ? (double) r->scan_n[p] / r->scan_secs[p]
		    : 0;
		if (r->scan_n[p] != cfg->count || disorder > 0) {
			fprintf(stderr,
			    "scan pass %d: %llu entries of %llu, "
			    "%llu out of order\n",
			    p + 1, (unsigned long long) r->scan_n[p],
			    (unsigned long long) cfg->count,
			    (unsigned long long) disorder);
			r->failures++;
		}
	}
	r->msgs = cfg->count;
	rv = 0;
	scan_print(r);
out:
	tli_store_close(s);
	free(page);
	dir_done(cfg, dir);
	return rv;
}

/* ---- medians and JSON ---- */

static double
median_of(const bench_result *rs, int n, const char *workload, int field)
{
	double v[BENCH_MAX_RUNS];
	int k = 0;

	for (int i = 0; i < n; i++) {
		if (strcmp(rs[i].workload, workload) != 0) {
			continue;
		}
		v[k++] = field < 0 ? rs[i].rate : rs[i].scan_rate[field];
	}
	return tlb_bench_median(v, k, 0);
}

static void
json_write(const bench_cfg *cfg, const bench_result *rs, int n)
{
	static const char *names[] = {"create", "create-sync1"};
	FILE *f = tlb_bench_json_open(&cfg->com);
	bool any;

	if (f == NULL) {
		return;
	}
	fprintf(f,
	    "  \"config\": {\"threads\": %d, \"inflight\": %d, "
	    "\"per\": %d, \"count\": %llu, \"sync1_count\": %llu, "
	    "\"body\": %zu, \"sync\": \"%s\", \"repeat\": %d},\n",
	    cfg->threads, cfg->inflight, cfg->per,
	    (unsigned long long) cfg->count,
	    (unsigned long long) cfg->sync1_count, cfg->body, cfg->sync_name,
	    cfg->com.repeat);
	tlb_bench_json_runs(f);
	for (int i = 0; i < n; i++) {
		const bench_result *r = &rs[i];

		fprintf(f,
		    "    {\"workload\": \"%s\", \"run\": %d, "
		    "\"msgs\": %llu, \"failures\": %llu, ",
		    r->workload, r->run, (unsigned long long) r->msgs,
		    (unsigned long long) r->failures);
		if (strcmp(r->workload, "scan") == 0) {
			fprintf(f,
			    "\"fill_s\": %.4f, \"reopen_s\": %.4f, "
			    "\"cold_s\": %.4f, \"cold_entries_per_s\": %.0f, "
			    "\"warm_s\": %.4f, \"warm_entries_per_s\": %.0f}",
			    r->fill_secs, r->reopen_secs, r->scan_secs[0],
			    r->scan_rate[0], r->scan_secs[1], r->scan_rate[1]);
		} else {
			fprintf(f,
			    "\"seconds\": %.4f, \"msgs_per_s\": %.0f, "
			    "\"batches\": %llu, \"max_batch\": %llu, "
			    "\"avg_batch\": %.1f, \"avg_sync_ms\": %.3f}",
			    r->secs, r->rate, (unsigned long long) r->batches,
			    (unsigned long long) r->max_batch, r->avg_batch,
			    r->avg_sync_ms);
		}
		tlb_bench_json_run_end(f, i, n);
	}
	tlb_bench_json_median(f);
	any = false;
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		double m = median_of(rs, n, names[k], -1);

		if (m > 0) {
			fprintf(f, "%s\"%s_msgs_per_s\": %.0f", any ? ", " : "",
			    names[k], m);
			any = true;
		}
	}
	if (median_of(rs, n, "scan", 0) > 0) {
		fprintf(f,
		    "%s\"scan_cold_entries_per_s\": %.0f, "
		    "\"scan_warm_entries_per_s\": %.0f",
		    any ? ", " : "", median_of(rs, n, "scan", 0),
		    median_of(rs, n, "scan", 1));
	}
	tlb_bench_json_close(f);
}

/* ---- main ---- */

/* --sync MODE */
static bool
sync_opt(void *arg, int c, const char *val)
{
	bench_cfg *cfg = arg;

	(void) c;
	cfg->sync_name = val;
	if (strcmp(val, "always") == 0) {
		cfg->sync = TLI_SYNC_ALWAYS;
	} else if (strcmp(val, "interval") == 0) {
		cfg->sync = TLI_SYNC_INTERVAL;
	} else if (strcmp(val, "none") == 0) {
		cfg->sync = TLI_SYNC_NONE;
	} else {
		return false;
	}
	return true;
}

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tl-store-bench [options] create|create-sync1|scan|all\n"
	    "  --threads T       submitter threads (default 4)\n"
	    "  --inflight K      async submissions in flight per thread (4)\n"
	    "  --per N           creates per submission (64, max %u)\n"
	    "  --count M         messages for create and scan (1000000)\n"
	    "  --sync1-count S   messages for create-sync1 (20000)\n"
	    "  --body B          body bytes (100)\n"
	    "  --sync MODE       always|interval|none for creates (always)\n"
	    "  --dir D           make run directories under D (/tmp)\n"
	    "  --keep            keep the run directories\n"
	    "  --repeat R        runs per workload, median printed (1)\n"
	    "  --json FILE       write every run and the medians as JSON\n",
	    TL_MAX_BATCH);
}

static int
parse_args(int argc, char **argv, bench_cfg *cfg, const char **workload)
{
	const tlb_bench_opt opts[] = {
	    {"threads", 't', TLB_BENCH_INT, 1, 1024, &cfg->threads},
	    {"inflight", 'k', TLB_BENCH_INT, 1, 1024, &cfg->inflight},
	    {"per", 'n', TLB_BENCH_INT, 1, TL_MAX_BATCH, &cfg->per},
	    {"count", 'm', TLB_BENCH_U64, 1, UINT64_C(1) << 40, &cfg->count},
	    {"sync1-count", 'S', TLB_BENCH_U64, 1, UINT64_C(1) << 40,
	        &cfg->sync1_count},
	    {"body", 'b', TLB_BENCH_SIZE, 0, TL_DEFAULT_MAX_BODY, &cfg->body},
	    {"sync", 's', TLB_BENCH_FN, 0, 0, NULL},
	    TLB_BENCH_COMMON_OPTS(&cfg->com),
	};

	if (tlb_bench_getopt(argc, argv, opts, sizeof(opts) / sizeof(opts[0]),
	        sync_opt, cfg, usage, workload) != 0) {
		return -1;
	}
	if (strcmp(*workload, "create") != 0 &&
	    strcmp(*workload, "create-sync1") != 0 &&
	    strcmp(*workload, "scan") != 0 && strcmp(*workload, "all") != 0) {
		return -1;
	}
	return 0;
}

static const char *const all[] = {"create", "create-sync1", "scan"};

static int
run_one(void *arg, void *res, size_t w, int run, uint64_t *failures)
{
	const bench_cfg *cfg = arg;
	bench_result *r = res;
	int rv;

	r->workload = all[w];
	r->run = run;
	if (w == 2) {
		rv = bench_scan(cfg, r);
	} else {
		rv = bench_create(cfg, w == 1, r);
	}
	*failures = r->failures;
	return rv;
}

static void
median_print(const void *res, int n, const char *workload, int repeat)
{
	const bench_result *rs = res;
	char a[32], b[32];

	if (repeat < 2) {
		return;
	}
	if (strcmp(workload, "scan") == 0) {
		fmt_rate(a, sizeof(a), median_of(rs, n, "scan", 0));
		fmt_rate(b, sizeof(b), median_of(rs, n, "scan", 1));
		printf("scan: median of %d runs: cold %s entries/s, "
		       "warm %s entries/s\n",
		    repeat, a, b);
	} else {
		fmt_rate(a, sizeof(a), median_of(rs, n, workload, -1));
		printf(
		    "%s: median of %d runs: %s msg/s\n", workload, repeat, a);
	}
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	static bench_result rs[3 * BENCH_MAX_RUNS];
	bench_cfg cfg = {
	    .threads = 4,
	    .inflight = 4,
	    .per = 64,
	    .count = 1000000,
	    .sync1_count = 20000,
	    .body = 100,
	    .sync = TLI_SYNC_ALWAYS,
	    .sync_name = "always",
	    .com = {.repeat = 1},
	};
	tlb_bench_driver d = {
	    .names = all,
	    .n = sizeof(all) / sizeof(all[0]),
	    .res = rs,
	    .size = sizeof(rs[0]),
	    .run = run_one,
	    .done = median_print,
	    .arg = &cfg,
	};
	const char *workload = NULL;

	if (parse_args(argc, argv, &cfg, &workload) != 0) {
		usage(stderr);
		return 2;
	}
	if (tlb_bench_run_all(&d, workload, cfg.com.repeat) != 0) {
		return 1;
	}
	if (cfg.com.json != NULL) {
		json_write(&cfg, rs, d.nres);
	}
	return tlb_bench_exit_status(d.failures);
}
