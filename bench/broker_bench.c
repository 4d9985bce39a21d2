/*
 * tl-broker-bench: end-to-end figures of the real broker, measured through
 * the public SDK over ipc. Every run starts its own timelined (--broker
 * PATH) on a new temporary directory, waits for its socket to accept,
 * measures one workload and stops it with SIGTERM.
 *
 *  - produce:     durable creates from one tl_client, many
 *                 tl_put_batch_async batches in flight; msgs/s.
 *  - lateness:    messages due at a steady rate, all created before they
 *                 fall due; the distribution of (receive wall time - due
 *                 time), early (must be 0) and missing deliveries.
 *  - lease-cycle: messages already due; one consumer with a large credit
 *                 deletes every lease it gets; cycles/s.
 *  - scale:       a large backlog scheduled an hour ahead; the broker's
 *                 RSS (VmRSS, VmHWM), disk bytes, bytes per message and
 *                 the time to restart with that backlog.
 *  - recurring:   N live recurring timers (every --every ms, first
 *                 occurrences spread over one interval) for --secs
 *                 seconds; consumers delete each occurrence, which places
 *                 the next one. Pops/s, lateness against each occurrence's
 *                 grid time, skipped occurrences, and the broker's CPU per
 *                 pop (utime + stime from /proc/PID/stat over the run).
 *
 * A delete is answered only after a durable group commit, so a consumer
 * thread that waited for each one would be bound by the round trip. The
 * on_message callback therefore records what it measures and starts
 * tl_lease_delete_async, whose done callback frees the lease; the SDK
 * coalesces the pending deletes into one ACK frame. With --ackers A it
 * hands the lease instead to A threads calling the blocking
 * tl_lease_delete (the former design, kept for comparison). Every run
 * prints one line; --json writes every run and the medians. See
 * docs/bench-broker.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "timeline/timeline.h"

#include "bench_util.h"

#define BENCH_TOPIC "bench"
#define BENCH_GROUP "bench-producer"
/* lateness: the put probe's creates and the side reader's big topic */
#define SIDE_TOPIC "side"
#define BENCH_ID_CAP 24
#define BENCH_HOUR_MS INT64_C(3600000)
#define BENCH_MAX_RUNS TLB_BENCH_MAX_RUNS
#define BENCH_LOG "timelined.log"
#define BENCH_READY_MS 60000  /* broker start deadline */
#define BENCH_STOP_MS 120000  /* SIGTERM to exit deadline */
#define BENCH_DRAIN_MS 120000 /* for the last deletes */

typedef struct bench_cfg {
	const char *broker;
	const char *durability;
	tlb_bench_common com; /* --dir, --keep, --repeat, --json */
	int timeout_ms;
	/* produce (and the fills of the other workloads) */
	uint64_t produce_count;
	int batch;
	int inflight;
	size_t body;
	bool natural_ids;
	/* lateness */
	int rate;
	int secs;
	int lead_ms; /* 0: automatic */
	int consumers;
	uint32_t credit;
	int ackers; /* 0: tl_lease_delete_async; else blocking threads */
	int grace_ms;
	/* lateness: messages in the side topic a side client COUNTs over and
	 * over during the run (0: no side reader) */
	uint64_t side_count;
	/* lease-cycle */
	uint64_t cycle_count;
	uint32_t cycle_credit;
	/* scale */
	uint64_t scale_count;
	bool scale_count_set;
	/* recurring */
	uint64_t timers;
	int every_ms;
} bench_cfg;

/* One run of one workload; the fields used depend on the workload. */
typedef struct bench_result {
	const char *workload;
	int run;
	double load1; /* 1-minute load average when the run started */
	uint64_t msgs;
	double secs;
	double rate;
	uint64_t failures;
	int first_err;
	/* lateness */
	uint64_t received;
	uint64_t missing;
	uint64_t dups;
	uint64_t early;
	uint64_t created_late; /* created after their due time */
	double slack_ms;       /* first due time minus end of creation */
	double p50, p90, p99, p999, max, mean;
	int64_t clock_offset_ms;
	uint64_t ack_fail;
	double ack_mean_ms, ack_max_ms; /* delete start to answer */
	/* lateness: the put probe (one create every 10 ms, another client)
	 * and the side reader */
	uint64_t probes;
	double put_p50, put_p99, put_max;
	uint64_t side_counts;
	double side_count_ms; /* mean duration of one COUNT */
	/* lease-cycle */
	double first_ms; /* subscribe to first delivery */
	uint64_t left;   /* messages left on the timeline afterwards */
	/* scale */
	double fill_rate;
	uint64_t rss_kb, hwm_kb;
	uint64_t disk_bytes, disk_apparent;
	double bytes_per_msg;
	double stop_s, accept_s, hello_s;
	uint64_t rss_after_kb;
	uint64_t count_after;
	/* recurring */
	double cpu_s;      /* the broker's CPU over the run */
	double cpu_us_pop; /* per pop */
	uint64_t skipped;  /* occurrences never delivered */
} bench_result;

static const bench_cfg *g_cfg;

/* ---- small helpers ---- */

/* Rates as "1.23M", "456.7k" or "789". */
static void
fmt_rate(char *buf, size_t len, double r)
{
	tlb_bench_fmt_rate(buf, len, r, 1);
}

static void
bench_log(void *arg, tl_log_level level, const char *msg)
{
	(void) arg;
	if (level <= TL_LOG_WARN) {
		fprintf(stderr, "libtimeline: %s\n", msg);
	}
}

/* ---- directories ---- */

static _Atomic uint64_t du_blocks, du_apparent;

static int
du_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) flag;
	if (strcmp(path + ftw->base, BENCH_LOG) == 0) {
		return 0;
	}
	du_blocks += (uint64_t) sb->st_blocks * 512u;
	if (S_ISREG(sb->st_mode)) {
		du_apparent += (uint64_t) sb->st_size;
	}
	return 0;
}

/* Bytes on disk under path (as du counts them) and apparent file bytes;
 * the broker's log is left out. */
static void
dir_usage(const char *path, uint64_t *blocks, uint64_t *apparent)
{
	du_blocks = 0;
	du_apparent = 0;
	nftw(path, du_one, 16, FTW_PHYS);
	*blocks = du_blocks;
	*apparent = du_apparent;
}

/* ---- the broker process ---- */

typedef struct broker {
	pid_t pid;
	char dir[PATH_MAX];
	char sock[PATH_MAX];
	char url[PATH_MAX + 8];
} broker;

static int
broker_spawn(broker *b)
{
	char logp[PATH_MAX + 32];
	char *argv[16];
	int argc = 0;
	pid_t pid;

	snprintf(logp, sizeof(logp), "%s/%s", b->dir, BENCH_LOG);
	argv[argc++] = (char *) g_cfg->broker;
	argv[argc++] = "--data";
	argv[argc++] = b->dir;
	argv[argc++] = "--listen";
	argv[argc++] = b->url;
	argv[argc++] = "--metrics";
	argv[argc++] = "off";
	argv[argc++] = "--topic";
	argv[argc++] = BENCH_TOPIC ":16";
	argv[argc++] = "--topic";
	argv[argc++] = SIDE_TOPIC ":1";
	if (g_cfg->durability != NULL) {
		argv[argc++] = "--durability";
		argv[argc++] = (char *) g_cfg->durability;
	}
	argv[argc] = NULL;
	if ((pid = fork()) < 0) {
		perror("fork");
		return -1;
	}
	if (pid == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	b->pid = pid;
	return 0;
}

static bool
sock_accepts(const char *path)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0) {
		return false;
	}
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	/* broker_start checked that the path fits */
	memcpy(a.sun_path, path, strnlen(path, sizeof(a.sun_path) - 1));
	ok = connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

static void
broker_show_log(const broker *b)
{
	char logp[PATH_MAX + 32];

	snprintf(logp, sizeof(logp), "%s/%s", b->dir, BENCH_LOG);
	tlb_bench_show_log(logp);
}

/* Wait, with a deadline, until the broker's socket accepts a connection;
 * fails at once when the broker exits. */
static int
broker_wait_accept(broker *b, int deadline_ms)
{
	double end = tlb_bench_mono_s() + deadline_ms / 1000.0;
	int st;

	while (tlb_bench_mono_s() < end) {
		if (sock_accepts(b->sock)) {
			return 0;
		}
		if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
			fprintf(stderr, "timelined exited (status %d)\n",
			    WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
			b->pid = 0;
			broker_show_log(b);
			return -1;
		}
		tlb_bench_sleep_ms(2);
	}
	fprintf(stderr, "timelined did not accept on %s within %d ms\n",
	    b->sock, deadline_ms);
	return -1;
}

/* SIGTERM and wait for the exit (SIGKILL after a deadline). Returns the
 * seconds it took, or -1. */
static double
broker_stop(broker *b)
{
	double t0 = tlb_bench_mono_s();
	double end = t0 + BENCH_STOP_MS / 1000.0;
	int st;

	if (b->pid <= 0) {
		return -1;
	}
	kill(b->pid, SIGTERM);
	for (;;) {
		pid_t r = waitpid(b->pid, &st, WNOHANG);

		if (r == b->pid || (r < 0 && errno != EINTR)) {
			break;
		}
		if (tlb_bench_mono_s() > end) {
			fprintf(stderr, "timelined %d did not stop: SIGKILL\n",
			    (int) b->pid);
			kill(b->pid, SIGKILL);
			waitpid(b->pid, &st, 0);
			b->pid = 0;
			return -1;
		}
		tlb_bench_sleep_ms(2);
	}
	b->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "timelined exit status %d\n",
		    WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
		broker_show_log(b);
	}
	return tlb_bench_mono_s() - t0;
}

static int
broker_start(broker *b)
{
	char tmpl[PATH_MAX];

	memset(b, 0, sizeof(*b));
	if (tlb_bench_dir_make(tmpl, sizeof(tmpl), &g_cfg->com, "tl-bb") != 0) {
		return -1;
	}
	snprintf(b->dir, sizeof(b->dir), "%s", tmpl);
	if (snprintf(b->sock, sizeof(b->sock), "%s/tl.sock", b->dir) >=
	        (int) sizeof(b->sock) ||
	    strlen(b->sock) >= sizeof(((struct sockaddr_un *) 0)->sun_path)) {
		fprintf(stderr, "socket path too long: %s\n", b->sock);
		return -1;
	}
	snprintf(b->url, sizeof(b->url), "ipc://%s", b->sock);
	if (broker_spawn(b) != 0) {
		return -1;
	}
	return broker_wait_accept(b, BENCH_READY_MS);
}

static void
broker_finish(broker *b)
{
	if (b->pid > 0) {
		broker_stop(b);
	}
	if (b->dir[0] == '\0') {
		return;
	}
	tlb_bench_dir_done(&g_cfg->com, b->dir);
}

static int
client_open(const broker *b, const char *name, tl_client **out)
{
	tl_opts *o;
	int rv;

	if ((rv = tl_opts_alloc(&o)) != TL_OK) {
		return rv;
	}
	tl_opts_set_url(o, b->url);
	tl_opts_set_name(o, name);
	tl_opts_set_timeout(o, g_cfg->timeout_ms);
	tl_opts_set_log(o, bench_log, NULL);
	rv = tl_client_open(out, o);
	tl_opts_free(o);
	return rv;
}

/* A broker started and a producer client on it: 0, or -1 (said). */
static int
broker_up(broker *b, tl_client **c)
{
	int rv;

	if (broker_start(b) != 0) {
		return -1;
	}
	if ((rv = client_open(b, "bench-producer", c)) != TL_OK) {
		fprintf(stderr, "tl_client_open: %s\n", tl_strerror(rv));
		return -1;
	}
	return 0;
}

/* ---- producing: one client, many async batches in flight ---- */

typedef enum { TS_SPREAD, TS_RATE, TS_FIXED } ts_mode;

typedef struct prod_plan {
	uint64_t count;
	ts_mode mode;
	int64_t base;          /* UTC ms */
	int64_t spread;        /* TS_SPREAD: ms */
	int rate;              /* TS_RATE: messages due per second */
	const char *id_prefix; /* NULL: the broker makes the ids */
	int64_t every_ms;      /* a recurrence of `times` (0: none) */
	uint32_t times;
} prod_plan;

typedef struct prod_slot {
	struct prod *p;
	tl_put *puts;
	char (*ids)[BENCH_ID_CAP];
	size_t n;
	struct prod_slot *next;
} prod_slot;

typedef struct prod {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	prod_slot *slots;
	prod_slot *free_list;
	int outstanding;
	uint64_t failures;
	int first_err;
	uint64_t created_late;
} prod;

static int64_t
plan_ts(const prod_plan *pl, uint64_t i)
{
	switch (pl->mode) {
	case TS_SPREAD:
		return pl->base +
		    (int64_t) (tlb_bench_mix64(i) % (uint64_t) pl->spread);
	case TS_RATE:
		return pl->base + (int64_t) (i * 1000u / (uint64_t) pl->rate);
	default:
		return pl->base;
	}
}

/* On the SDK's callback thread. */
static void
prod_done(void *arg, int err)
{
	prod_slot *sl = arg;
	prod *p = sl->p;
	int64_t now = tlb_bench_wall_ms();

	pthread_mutex_lock(&p->mtx);
	for (size_t i = 0; i < sl->n; i++) {
		int e = err != TL_OK ? err : sl->puts[i].err;

		if (e != TL_OK) {
			if (p->failures++ == 0) {
				p->first_err = e;
			}
		} else if (sl->puts[i].due < now) {
			p->created_late++;
		}
	}
	sl->next = p->free_list;
	p->free_list = sl;
	p->outstanding--;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mtx);
}

/* Create pl->count messages; fills secs, failures, first_err and
 * created_late of r. */
static int
produce(tl_client *c, const prod_plan *pl, bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	prod p;
	void *body;
	uint64_t msg = 0;
	double t0;
	int rv = 0;

	memset(&p, 0, sizeof(p));
	pthread_mutex_init(&p.mtx, NULL);
	pthread_cond_init(&p.cv, NULL);
	body = malloc(cfg->body > 0 ? cfg->body : 1);
	p.slots = calloc((size_t) cfg->inflight, sizeof(*p.slots));
	if (body == NULL || p.slots == NULL) {
		rv = -1;
		goto out;
	}
	memset(body, 'b', cfg->body);
	for (int k = 0; k < cfg->inflight; k++) {
		prod_slot *sl = &p.slots[k];

		sl->p = &p;
		sl->puts = calloc((size_t) cfg->batch, sizeof(*sl->puts));
		sl->ids = calloc((size_t) cfg->batch, sizeof(*sl->ids));
		if (sl->puts == NULL || sl->ids == NULL) {
			rv = -1;
			goto out;
		}
		sl->next = p.free_list;
		p.free_list = sl;
	}
	t0 = tlb_bench_mono_s();
	while (msg < pl->count) {
		prod_slot *sl;
		uint64_t left = pl->count - msg;
		int e;

		pthread_mutex_lock(&p.mtx);
		while (p.free_list == NULL) {
			pthread_cond_wait(&p.cv, &p.mtx);
		}
		sl = p.free_list;
		p.free_list = sl->next;
		p.outstanding++;
		pthread_mutex_unlock(&p.mtx);
		sl->n = left < (uint64_t) cfg->batch ? (size_t) left
		                                     : (size_t) cfg->batch;
		for (size_t i = 0; i < sl->n; i++) {
			tl_put *u = &sl->puts[i];

			memset(u, 0, sizeof(*u));
			if (pl->id_prefix != NULL) {
				u->id_len = (size_t) snprintf(sl->ids[i],
				    BENCH_ID_CAP, "%s%010llu", pl->id_prefix,
				    (unsigned long long) (msg + i));
				u->id = sl->ids[i];
			}
			u->ts = plan_ts(pl, msg + i);
			u->body = body;
			u->body_len = cfg->body;
			u->every_ms = pl->every_ms;
			u->times = pl->every_ms > 0 ? pl->times : 0;
		}
		e = tl_put_batch_async(c, BENCH_TOPIC, BENCH_GROUP, sl->puts,
		    sl->n, prod_done, sl);
		msg += sl->n;
		if (e != TL_OK) {
			/* no callback comes: account for the slot here */
			pthread_mutex_lock(&p.mtx);
			if (p.failures == 0) {
				p.first_err = e;
			}
			p.failures += sl->n;
			sl->next = p.free_list;
			p.free_list = sl;
			p.outstanding--;
			pthread_mutex_unlock(&p.mtx);
			if (e == TL_ECLOSED || e == TL_ECONN) {
				break;
			}
		}
	}
	pthread_mutex_lock(&p.mtx);
	while (p.outstanding > 0) {
		pthread_cond_wait(&p.cv, &p.mtx);
	}
	pthread_mutex_unlock(&p.mtx);
	r->secs = tlb_bench_mono_s() - t0;
	r->msgs = pl->count;
	r->rate = r->secs > 0 ? (double) pl->count / r->secs : 0;
	r->failures += p.failures + (pl->count - msg);
	if (p.failures > 0 && r->first_err == 0) {
		r->first_err = p.first_err;
	}
	r->created_late = p.created_late;
out:
	if (p.slots != NULL) {
		for (int k = 0; k < cfg->inflight; k++) {
			free(p.slots[k].puts);
			free(p.slots[k].ids);
		}
	}
	free(p.slots);
	free(body);
	pthread_mutex_destroy(&p.mtx);
	pthread_cond_destroy(&p.cv);
	return rv;
}

/* ---- acking: tl_lease_delete_async, or threads calling tl_lease_delete
 * ---- */

typedef struct ackq {
	pthread_mutex_t mtx;
	pthread_cond_t cv;      /* work queued, or stop */
	pthread_cond_t done_cv; /* a delete finished */
	tl_lease **ring;        /* threads only */
	size_t cap, head, n;
	size_t busy; /* deletes in progress */
	bool stop;
	pthread_t *thr;
	int nthr; /* 0: asynchronous deletes */
	uint64_t ok;
	uint64_t fail;
	int first_err;
	double lat_sum; /* seconds from start to answer of a delete */
	double lat_max;
} ackq;

/* One asynchronous delete in flight. */
typedef struct ack_op {
	ackq *q;
	tl_lease *l;
	double t0;
} ack_op;

static void
ackq_note(ackq *q, int rv, double dt)
{
	pthread_mutex_lock(&q->mtx);
	q->lat_sum += dt;
	q->lat_max = dt > q->lat_max ? dt : q->lat_max;
	if (rv == TL_OK) {
		q->ok++;
	} else if (q->fail++ == 0) {
		q->first_err = rv;
	}
	pthread_cond_broadcast(&q->done_cv);
	pthread_mutex_unlock(&q->mtx);
}

/* tl_lease_delete_async's done, on the client's callback thread. */
static void
ack_done(void *arg, int err)
{
	ack_op *a = arg;
	ackq *q = a->q;
	double dt = tlb_bench_mono_s() - a->t0;

	tl_lease_free(a->l);
	free(a);
	ackq_note(q, err, dt);
}

static void *
ackq_main(void *arg)
{
	ackq *q = arg;

	pthread_mutex_lock(&q->mtx);
	for (;;) {
		tl_lease *l;
		double t0, dt;
		int rv;

		while (q->n == 0 && !q->stop) {
			pthread_cond_wait(&q->cv, &q->mtx);
		}
		if (q->n == 0) {
			break;
		}
		l = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->n--;
		q->busy++;
		pthread_mutex_unlock(&q->mtx);
		t0 = tlb_bench_mono_s();
		rv = tl_lease_delete(l);
		dt = tlb_bench_mono_s() - t0;
		tl_lease_free(l);
		pthread_mutex_lock(&q->mtx);
		q->busy--;
		pthread_mutex_unlock(&q->mtx);
		ackq_note(q, rv, dt);
		pthread_mutex_lock(&q->mtx);
	}
	pthread_mutex_unlock(&q->mtx);
	return NULL;
}

static int
ackq_init(ackq *q, size_t cap, int nthr)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->mtx, NULL);
	pthread_cond_init(&q->cv, NULL);
	pthread_cond_init(&q->done_cv, NULL);
	if (nthr == 0) {
		return 0;
	}
	q->cap = cap;
	q->ring = calloc(cap, sizeof(*q->ring));
	q->thr = calloc((size_t) nthr, sizeof(*q->thr));
	if (q->ring == NULL || q->thr == NULL) {
		return -1;
	}
	for (; q->nthr < nthr; q->nthr++) {
		if (pthread_create(&q->thr[q->nthr], NULL, ackq_main, q) != 0) {
			return -1;
		}
	}
	return 0;
}

/* From a consumer's on_message: never blocks (with threads: while the
 * ring has room, which the consumers' credit guarantees). */
static void
ackq_push(ackq *q, tl_lease *l)
{
	if (q->nthr == 0) {
		ack_op *a = malloc(sizeof(*a));
		int rv = TL_ENOMEM;

		if (a != NULL) {
			a->q = q;
			a->l = l;
			a->t0 = tlb_bench_mono_s();
			if ((rv = tl_lease_delete_async(l, ack_done, a)) ==
			    TL_OK) {
				return;
			}
			free(a);
		}
		tl_lease_free(l);
		ackq_note(q, rv, 0);
		return;
	}
	pthread_mutex_lock(&q->mtx);
	while (q->n == q->cap) {
		pthread_cond_wait(&q->done_cv, &q->mtx);
	}
	q->ring[(q->head + q->n) % q->cap] = l;
	q->n++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mtx);
}

/* Wait until `total` deletes finished or the deadline (monotonic s). */
static void
ackq_wait(ackq *q, uint64_t total, double deadline)
{
	pthread_mutex_lock(&q->mtx);
	while (q->ok + q->fail < total && tlb_bench_mono_s() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&q->done_cv, &q->mtx, &ts);
	}
	pthread_mutex_unlock(&q->mtx);
}

static void
ackq_fini(ackq *q)
{
	pthread_mutex_lock(&q->mtx);
	q->stop = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mtx);
	for (int i = 0; i < q->nthr; i++) {
		pthread_join(q->thr[i], NULL);
	}
	/* leases nobody deleted (after a deadline) just run out; async
	 * deletes all finished when their client closed */
	while (q->n > 0) {
		tl_lease_free(q->ring[q->head]);
		q->head = (q->head + 1) % q->cap;
		q->n--;
	}
	free(q->ring);
	free(q->thr);
	pthread_mutex_destroy(&q->mtx);
	pthread_cond_destroy(&q->cv);
	pthread_cond_destroy(&q->done_cv);
}

static void
ack_stats(ackq *q, bench_result *r)
{
	pthread_mutex_lock(&q->mtx);
	r->ack_mean_ms = q->ok + q->fail > 0
	    ? q->lat_sum * 1e3 / (double) (q->ok + q->fail)
	    : 0;
	r->ack_max_ms = q->lat_max * 1e3;
	pthread_mutex_unlock(&q->mtx);
}

/* ---- consumers ---- */

typedef struct recv_state {
	ackq *aq;
	uint64_t total;
	_Atomic uint8_t *seen; /* lateness: by message number */
	int64_t *late_us;      /* lateness: by message number */
	_Atomic uint64_t got;  /* deliveries */
	_Atomic uint64_t uniq; /* distinct messages */
	_Atomic uint64_t dups;
	_Atomic uint64_t bad_ids;
	_Atomic int64_t first_us; /* wall time of the first delivery */
} recv_state;

static void
on_lateness(void *arg, tl_lease *l)
{
	recv_state *rs = arg;
	int64_t now = tlb_bench_wall_us();
	const char *id = tl_lease_id(l);
	unsigned long long k;

	if (id == NULL || id[0] != 'L' ||
	    (k = strtoull(id + 1, NULL, 10)) >= rs->total) {
		rs->bad_ids++;
	} else if (atomic_exchange(&rs->seen[k], 1) != 0) {
		rs->dups++;
	} else {
		rs->late_us[k] = now - tl_lease_due(l) * 1000;
		rs->uniq++;
	}
	rs->got++;
	ackq_push(rs->aq, l);
}

static void
on_cycle(void *arg, tl_lease *l)
{
	recv_state *rs = arg;

	if (rs->got++ == 0) {
		rs->first_us = tlb_bench_wall_us();
	}
	ackq_push(rs->aq, l);
}

typedef struct cons_set {
	tl_client **clients;
	tl_consumer **cons;
	int n;
} cons_set;

static int
cons_open(const broker *b, cons_set *cs, int n, uint32_t credit,
    tl_deliver_fn fn, void *arg)
{
	int rv = TL_OK;

	cs->clients = calloc((size_t) n, sizeof(*cs->clients));
	cs->cons = calloc((size_t) n, sizeof(*cs->cons));
	if (cs->clients == NULL || cs->cons == NULL) {
		return TL_ENOMEM;
	}
	for (cs->n = 0; cs->n < n; cs->n++) {
		char name[64];
		tl_consumer_conf conf;

		snprintf(name, sizeof(name), "bench-consumer-%d", cs->n);
		if ((rv = client_open(b, name, &cs->clients[cs->n])) != TL_OK) {
			fprintf(
			    stderr, "consumer client: %s\n", tl_strerror(rv));
			return rv;
		}
		memset(&conf, 0, sizeof(conf));
		conf.topic = BENCH_TOPIC;
		conf.consumer_id = name;
		conf.lease_ms = 60000;
		conf.credit = credit;
		conf.on_message = fn;
		conf.arg = arg;
		rv = tl_consumer_open(
		    &cs->cons[cs->n], cs->clients[cs->n], &conf);
		if (rv != TL_OK) {
			fprintf(
			    stderr, "tl_consumer_open: %s\n", tl_strerror(rv));
			tl_client_close(cs->clients[cs->n]);
			return rv;
		}
	}
	return TL_OK;
}

static void
cons_close(cons_set *cs)
{
	for (int i = 0; i < cs->n; i++) {
		tl_consumer_close(cs->cons[i]);
		tl_client_close(cs->clients[i]);
	}
	free(cs->clients);
	free(cs->cons);
	memset(cs, 0, sizeof(*cs));
}

/* ---- workloads ---- */

/* "async deletes" or "64 ackers", for the result lines */
static const char *
ack_mode(void)
{
	static char buf[48];

	if (g_cfg->ackers == 0) {
		return "async deletes";
	}
	snprintf(buf, sizeof(buf), "%d ackers", g_cfg->ackers);
	return buf;
}

static void
fail_note(bench_result *r)
{
	if (r->failures > 0) {
		printf(" FAILURES %llu (first %s)",
		    (unsigned long long) r->failures, tl_errname(r->first_err));
	}
}

static int
bench_produce(bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	broker b;
	tl_client *c = NULL;
	prod_plan pl;
	char rate[32];
	int rv = -1;

	if ((rv = broker_up(&b, &c)) != 0) {
		goto out;
	}
	pl = (prod_plan){.count = cfg->produce_count,
	    .mode = TS_SPREAD,
	    .base = tlb_bench_wall_ms() + 60000,
	    .spread = BENCH_HOUR_MS,
	    .id_prefix = cfg->natural_ids ? "P" : NULL};
	if ((rv = produce(c, &pl, r)) != 0) {
		goto out;
	}
	fmt_rate(rate, sizeof(rate), r->rate);
	printf("produce: %llu msgs in %.2f s = %s msg/s "
	       "(batches of %d, %d in flight, body %zu B, %s ids) [load %.2f]",
	    (unsigned long long) r->msgs, r->secs, rate, cfg->batch,
	    cfg->inflight, cfg->body, cfg->natural_ids ? "natural" : "broker",
	    r->load1);
	fail_note(r);
	printf("\n");
	fflush(stdout);
out:
	tl_client_close(c);
	broker_finish(&b);
	return rv;
}

static void
lateness_stats(recv_state *rs, bench_result *r)
{
	tlb_bench_late l;
	size_t n;

	free(tlb_bench_late_stats(rs->seen, rs->late_us, rs->total, &l, &n));
	r->early += l.early;
	TLB_BENCH_LATE_INTO(r, l);
}

/* ---- lateness beside a long read ----
 * A probe client creates one message (an hour ahead, in SIDE_TOPIC) every
 * 10 ms and times each answer; with --side-count N, SIDE_TOPIC first gets
 * N messages and another client COUNTs all of them again and again. */

#define PROBE_MAX 100000

typedef struct side_run {
	const broker *b;
	atomic_bool stop;
	pthread_t probe_t, count_t;
	bool probe_on, count_on;
	int64_t *put_us; /* PROBE_MAX */
	uint64_t probes;
	uint64_t counts;
	double count_s;
} side_run;

static void *
probe_main(void *arg)
{
	side_run *sr = arg;
	tl_client *c = NULL;

	if (client_open(sr->b, "bench-probe", &c) != TL_OK) {
		fprintf(stderr, "lateness: the put probe cannot connect\n");
		return NULL;
	}
	while (!atomic_load(&sr->stop) && sr->probes < PROBE_MAX) {
		double t0 = tlb_bench_mono_s();

		if (tl_put_in(c, SIDE_TOPIC, BENCH_GROUP, NULL, 3600000, "p", 1,
		        NULL) == TL_OK) {
			sr->put_us[sr->probes++] =
			    (int64_t) ((tlb_bench_mono_s() - t0) * 1e6);
		}
		tlb_bench_sleep_ms(10);
	}
	tl_client_close(c);
	return NULL;
}

static void *
count_main(void *arg)
{
	side_run *sr = arg;
	tl_client *c = NULL;
	tl_counts n;

	if (client_open(sr->b, "bench-reader", &c) != TL_OK) {
		fprintf(stderr, "lateness: the side reader cannot connect\n");
		return NULL;
	}
	while (!atomic_load(&sr->stop)) {
		double t0 = tlb_bench_mono_s();

		if (tl_count(c, SIDE_TOPIC, 0, INT64_C(253402300800000), &n) !=
		    TL_OK) {
			break;
		}
		sr->count_s += tlb_bench_mono_s() - t0;
		sr->counts++;
	}
	tl_client_close(c);
	return NULL;
}

/* Fill SIDE_TOPIC with n messages an hour ahead: 0 or -1 (said). */
static int
side_fill(tl_client *c, uint64_t n)
{
	static tl_put puts[TL_MAX_BATCH];
	int64_t at = tlb_bench_wall_ms() + 3600000;
	double t0 = tlb_bench_mono_s();

	for (uint64_t done = 0; done < n;) {
		size_t k = n - done < TL_MAX_BATCH ? (size_t) (n - done)
		                                   : TL_MAX_BATCH;
		int rv;

		for (size_t i = 0; i < k; i++) {
			puts[i] =
			    (tl_put){.ts = at, .body = "s", .body_len = 1};
		}
		if ((rv = tl_put_batch(c, SIDE_TOPIC, BENCH_GROUP, puts, k)) !=
		    TL_OK) {
			fprintf(stderr, "lateness: side fill: %s\n",
			    tl_strerror(rv));
			return -1;
		}
		done += k;
	}
	printf("lateness: side topic filled with %llu messages in %.1f s\n",
	    (unsigned long long) n, tlb_bench_mono_s() - t0);
	fflush(stdout);
	return 0;
}

static void
side_start(side_run *sr, const broker *b)
{
	memset(sr, 0, sizeof(*sr));
	sr->b = b;
	atomic_store(&sr->stop, false);
	if ((sr->put_us = calloc(PROBE_MAX, sizeof(int64_t))) != NULL) {
		sr->probe_on =
		    pthread_create(&sr->probe_t, NULL, probe_main, sr) == 0;
	}
	if (g_cfg->side_count > 0) {
		sr->count_on =
		    pthread_create(&sr->count_t, NULL, count_main, sr) == 0;
	}
}

/* Stop the probe and the side reader, their figures into r; once. */
static void
side_stop(side_run *sr, bench_result *r)
{
	if (sr->put_us == NULL && !sr->count_on) {
		return; /* not started, or stopped already */
	}
	atomic_store(&sr->stop, true);
	if (sr->probe_on) {
		pthread_join(sr->probe_t, NULL);
	}
	if (sr->count_on) {
		pthread_join(sr->count_t, NULL);
	}
	r->probes = sr->probes;
	if (sr->probes > 0) {
		tlb_bench_sort_i64(sr->put_us, sr->probes);
		r->put_p50 = tlb_bench_pct_ms(sr->put_us, sr->probes, 0.50);
		r->put_p99 = tlb_bench_pct_ms(sr->put_us, sr->probes, 0.99);
		r->put_max = (double) sr->put_us[sr->probes - 1] / 1000.0;
	}
	r->side_counts = sr->counts;
	r->side_count_ms =
	    sr->counts > 0 ? sr->count_s * 1000.0 / (double) sr->counts : 0;
	free(sr->put_us);
	sr->put_us = NULL;
	sr->probe_on = sr->count_on = false;
}

static int
bench_lateness(bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	uint64_t total = (uint64_t) cfg->rate * (uint64_t) cfg->secs;
	broker b;
	tl_client *c = NULL;
	cons_set cs = {0};
	ackq aq;
	recv_state rs = {0};
	prod_plan pl;
	bench_result fill = {0};
	side_run sr = {0};
	int64_t lead, last_due;
	double deadline;
	int rv = -1;

	rs.total = total;
	rs.seen = calloc(total, sizeof(*rs.seen));
	rs.late_us = calloc(total, sizeof(*rs.late_us));
	if (rs.seen == NULL || rs.late_us == NULL ||
	    ackq_init(&aq, (size_t) cfg->credit * (size_t) cfg->consumers + 1,
	        cfg->ackers) != 0) {
		fprintf(stderr, "lateness: out of memory\n");
		free(rs.seen);
		free(rs.late_us);
		return -1;
	}
	rs.aq = &aq;
	if ((rv = broker_up(&b, &c)) != 0) {
		goto out;
	}
	if (cfg->side_count > 0 && (rv = side_fill(c, cfg->side_count)) != 0) {
		goto out;
	}
	/* Every message must be on the timeline before it falls due: lead
	 * time for creating at a conservative 20k/s, plus 2 s. */
	lead = cfg->lead_ms > 0 ? cfg->lead_ms
	                        : 2000 + (int64_t) (total * 1000u / 20000u);
	pl = (prod_plan){.count = total,
	    .mode = TS_RATE,
	    .base = tl_client_broker_now(c) + lead,
	    .rate = cfg->rate,
	    .id_prefix = "L"};
	if ((rv = produce(c, &pl, &fill)) != 0) {
		goto out;
	}
	r->failures = fill.failures;
	r->first_err = fill.first_err;
	r->created_late = fill.created_late;
	r->slack_ms = (double) (pl.base - tl_client_broker_now(c));
	r->clock_offset_ms = tl_client_clock_offset(c);
	side_start(&sr, &b);
	if ((rv = cons_open(&b, &cs, cfg->consumers, cfg->credit, on_lateness,
	         &rs)) != TL_OK) {
		rv = -1;
		goto out;
	}
	last_due = plan_ts(&pl, total - 1);
	deadline = tlb_bench_mono_s() +
	    (double) (last_due - tlb_bench_wall_ms() + cfg->grace_ms) / 1000.0;
	while (rs.uniq < total && tlb_bench_mono_s() < deadline) {
		tlb_bench_sleep_ms(20);
	}
	/* Every delivered lease is deleted before the consumers close
	 * (deletes can stall for seconds on a loaded broker). */
	ackq_wait(&aq, rs.got, tlb_bench_mono_s() + BENCH_DRAIN_MS / 1000.0);
	side_stop(&sr, r);
	cons_close(&cs);
	r->msgs = total;
	r->received = rs.uniq;
	r->missing = total - rs.uniq;
	r->dups = rs.dups;
	r->ack_fail = aq.fail;
	if (aq.fail > 0 && r->first_err == 0) {
		r->first_err = aq.first_err;
	}
	ack_stats(&aq, r);
	lateness_stats(&rs, r);
	printf("lateness: %llu msgs due at %d/s for %d s, %d consumer(s) "
	       "credit %u, %s: late p50 %.2f p90 %.2f p99 %.2f "
	       "p99.9 %.2f max %.2f ms (mean %.2f); early %llu, missing %llu, "
	       "dup %llu, ack failures %llu; delete latency mean %.1f max %.1f "
	       "ms; "
	       "created late %llu, slack %.0f ms, clock offset %lld ms "
	       "[load %.2f]",
	    (unsigned long long) total, cfg->rate, cfg->secs, cfg->consumers,
	    cfg->credit, ack_mode(), r->p50, r->p90, r->p99, r->p999, r->max,
	    r->mean, (unsigned long long) r->early,
	    (unsigned long long) r->missing, (unsigned long long) r->dups,
	    (unsigned long long) r->ack_fail, r->ack_mean_ms, r->ack_max_ms,
	    (unsigned long long) r->created_late, r->slack_ms,
	    (long long) r->clock_offset_ms, r->load1);
	if (r->ack_fail > 0) {
		printf(" (first ack error %s)", tl_errname(aq.first_err));
	}
	printf("; put probe (%llu creates): p50 %.2f p99 %.2f max %.2f ms",
	    (unsigned long long) r->probes, r->put_p50, r->put_p99, r->put_max);
	if (cfg->side_count > 0) {
		printf(
		    "; side reader: %llu COUNTs of %llu messages, %.0f ms each",
		    (unsigned long long) r->side_counts,
		    (unsigned long long) cfg->side_count, r->side_count_ms);
	}
	fail_note(r);
	printf("\n");
	fflush(stdout);
	if (r->early > 0 || r->missing > 0 || r->created_late > 0) {
		r->failures += r->early + r->missing + r->created_late;
	}
	rv = 0;
out:
	side_stop(&sr, r);
	cons_close(&cs);
	ackq_fini(&aq);
	tl_client_close(c);
	broker_finish(&b);
	free(rs.seen);
	free(rs.late_us);
	return rv;
}

static int
bench_cycle(bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	uint64_t total = cfg->cycle_count;
	broker b;
	tl_client *c = NULL;
	cons_set cs = {0};
	ackq aq;
	recv_state rs = {0};
	prod_plan pl;
	bench_result fill = {0};
	tl_topic_info ti;
	char rate[32];
	double t0, deadline;
	int64_t t0_us;
	int rv = -1;

	rs.total = total;
	if (ackq_init(&aq, (size_t) cfg->cycle_credit + 1, cfg->ackers) != 0) {
		return -1;
	}
	rs.aq = &aq;
	if ((rv = broker_up(&b, &c)) != 0) {
		goto out;
	}
	/* over the last minute: all due already */
	pl = (prod_plan){.count = total,
	    .mode = TS_SPREAD,
	    .base = tl_client_broker_now(c) - 61000,
	    .spread = 60000,
	    .id_prefix = cfg->natural_ids ? "C" : NULL};
	if ((rv = produce(c, &pl, &fill)) != 0) {
		goto out;
	}
	r->failures = fill.failures;
	r->first_err = fill.first_err;
	r->fill_rate = fill.rate;
	t0 = tlb_bench_mono_s();
	t0_us = tlb_bench_wall_us();
	if ((rv = cons_open(&b, &cs, 1, cfg->cycle_credit, on_cycle, &rs)) !=
	    TL_OK) {
		rv = -1;
		goto out;
	}
	deadline = t0 + 600;
	ackq_wait(&aq, total, deadline);
	r->secs = tlb_bench_mono_s() - t0;
	cons_close(&cs);
	r->msgs = aq.ok;
	r->rate = r->secs > 0 ? (double) aq.ok / r->secs : 0;
	r->first_ms = rs.got > 0 ? (double) (rs.first_us - t0_us) / 1000.0 : -1;
	r->ack_fail = aq.fail;
	if (aq.fail > 0 && r->first_err == 0) {
		r->first_err = aq.first_err;
	}
	ack_stats(&aq, r);
	r->failures += aq.fail + (total - aq.ok - aq.fail);
	if (aq.fail > 0) {
		fprintf(stderr, "lease-cycle: %llu deletes failed (first %s)\n",
		    (unsigned long long) aq.fail, tl_errname(aq.first_err));
	}
	if (tl_topic_get(c, BENCH_TOPIC, &ti) == TL_OK) {
		r->left = ti.messages;
	}
	fmt_rate(rate, sizeof(rate), r->rate);
	printf("lease-cycle: %llu deliver+delete cycles in %.2f s = %s "
	       "cycles/s (credit %u, %s; first delivery after %.1f ms; "
	       "delete latency mean %.1f max %.1f ms; %llu left on the "
	       "timeline; fill %.1fk msg/s) [load %.2f]",
	    (unsigned long long) r->msgs, r->secs, rate, cfg->cycle_credit,
	    ack_mode(), r->first_ms, r->ack_mean_ms, r->ack_max_ms,
	    (unsigned long long) r->left, r->fill_rate / 1e3, r->load1);
	fail_note(r);
	printf("\n");
	fflush(stdout);
	rv = 0;
out:
	cons_close(&cs);
	ackq_fini(&aq);
	tl_client_close(c);
	broker_finish(&b);
	return rv;
}

/* ---- recurring timers ---- */

typedef struct recur_state {
	recv_state rs;           /* seen / late_us by timer * times + seq - 1 */
	uint32_t times;          /* occurrences per timer */
	uint64_t timers;         /* ids R0000000000.. */
	_Atomic int64_t last_us; /* wall time of the latest delivery */
} recur_state;

static void
on_recur(void *arg, tl_lease *l)
{
	recur_state *st = arg;
	recv_state *rs = &st->rs;
	int64_t now = tlb_bench_wall_us();
	const char *id = tl_lease_id(l);
	uint32_t seq = tl_lease_seq(l);
	unsigned long long k;

	if (id == NULL || id[0] != 'R' ||
	    (k = strtoull(id + 1, NULL, 10)) >= st->timers || seq == 0 ||
	    seq > st->times) {
		rs->bad_ids++;
	} else {
		uint64_t i = k * st->times + seq - 1;

		if (atomic_exchange(&rs->seen[i], 1) != 0) {
			rs->dups++;
		} else {
			rs->late_us[i] = now - tl_lease_occurrence_at(l) * 1000;
			rs->uniq++;
		}
	}
	rs->got++;
	atomic_store(&st->last_us, now);
	ackq_push(rs->aq, l);
}

/* Wait until every occurrence was deleted, or nothing arrived for a second
 * after the last grid time (skipped occurrences never come), or the
 * deadline (monotonic s). */
static void
recur_wait(recur_state *st, ackq *aq, uint64_t total, double last_grid,
    double deadline)
{
	uint64_t seen = 0;
	double quiet = tlb_bench_mono_s();

	for (;;) {
		double now = tlb_bench_mono_s();
		uint64_t got = atomic_load(&st->rs.got);

		pthread_mutex_lock(&aq->mtx);
		bool all = aq->ok + aq->fail >= total;
		pthread_mutex_unlock(&aq->mtx);
		if (all || now > deadline) {
			return;
		}
		if (got != seen) {
			seen = got;
			quiet = now;
		} else if (now > last_grid && now - quiet > 1.0) {
			return;
		}
		tlb_bench_sleep_ms(50);
	}
}

/* utime + stime of a process in seconds, or -1. */
static double
proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut = 0, st = 0;
	const char *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	if ((f = fopen(path, "r")) == NULL) {
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* after "(comm)": state is field 3, utime 14, stime 15 */
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 2,
	        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
	        &st) != 2) {
		return -1;
	}
	return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

static int
bench_recurring(bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	uint32_t times =
	    (uint32_t) ((int64_t) cfg->secs * 1000 / cfg->every_ms);
	uint64_t total = cfg->timers * (times > 0 ? times : 1);
	recur_state st = {
	    .times = times > 0 ? times : 1, .timers = cfg->timers};
	broker b;
	tl_client *c = NULL;
	cons_set cs = {0};
	ackq aq;
	prod_plan pl;
	bench_result fill = {0};
	tlb_bench_late lt;
	int64_t lead, base;
	double cpu0, cpu1, t_base, end, last_grid;
	size_t nl;
	char rate[32];
	int rv = -1;

	st.rs.total = total;
	st.rs.seen = calloc(total, sizeof(*st.rs.seen));
	st.rs.late_us = calloc(total, sizeof(*st.rs.late_us));
	if (st.rs.seen == NULL || st.rs.late_us == NULL ||
	    ackq_init(&aq, (size_t) cfg->consumers * cfg->credit + 1,
	        cfg->ackers) != 0) {
		free(st.rs.seen);
		free(st.rs.late_us);
		return -1;
	}
	st.rs.aq = &aq;
	if ((rv = broker_up(&b, &c)) != 0) {
		goto out;
	}
	if ((rv = cons_open(&b, &cs, cfg->consumers, cfg->credit, on_recur,
	         &st)) != TL_OK) {
		rv = -1;
		goto out;
	}
	/* The fill must end before the first occurrence: about 50k creates
	 * a second at worst, and a second more. */
	lead = cfg->lead_ms > 0 ? cfg->lead_ms
	                        : 1000 + (int64_t) (cfg->timers / 50);
	base = tl_client_broker_now(c) + lead;
	pl = (prod_plan){.count = cfg->timers,
	    .mode = TS_RATE,
	    .base = base,
	    /* the first occurrences spread over one interval */
	    .rate = (int) ((double) cfg->timers * 1000.0 / cfg->every_ms) > 0
	        ? (int) ((double) cfg->timers * 1000.0 / cfg->every_ms)
	        : 1,
	    .id_prefix = "R",
	    .every_ms = cfg->every_ms,
	    .times = st.times};
	if ((rv = produce(c, &pl, &fill)) != 0) {
		goto out;
	}
	r->failures = fill.failures;
	r->first_err = fill.first_err;
	r->fill_rate = fill.rate;
	r->created_late = fill.created_late;
	while (tlb_bench_wall_ms() < base) {
		tlb_bench_sleep_ms(1);
	}
	t_base = tlb_bench_mono_s();
	cpu0 = proc_cpu_s(b.pid);
	last_grid = t_base + (double) st.times * cfg->every_ms / 1000.0;
	end = last_grid + cfg->grace_ms / 1000.0;
	recur_wait(&st, &aq, total, last_grid, end);
	cpu1 = proc_cpu_s(b.pid);
	/* from the first grid time to the last delivery */
	r->secs = (double) (atomic_load(&st.last_us) - base * 1000) / 1e6;
	cons_close(&cs);
	r->msgs = st.rs.uniq;
	r->received = st.rs.got;
	r->dups = st.rs.dups;
	r->skipped = total - st.rs.uniq;
	r->rate = r->secs > 0 ? (double) st.rs.uniq / r->secs : 0;
	r->cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
	r->cpu_us_pop = r->cpu_s >= 0 && st.rs.got > 0
	    ? r->cpu_s * 1e6 / (double) st.rs.got
	    : -1;
	r->ack_fail = aq.fail;
	ack_stats(&aq, r);
	free(tlb_bench_late_stats(st.rs.seen, st.rs.late_us, total, &lt, &nl));
	r->early = lt.early;
	TLB_BENCH_LATE_INTO(r, lt);
	r->failures += aq.fail + st.rs.bad_ids;
	fmt_rate(rate, sizeof(rate), r->rate);
	printf("recurring: %llu timers every %d ms for %u occurrences: %llu "
	       "pops in %.2f s = %s pops/s; late p50 %.2f p99 %.2f max %.2f "
	       "ms; early %llu, skipped %llu, dups %llu; broker CPU %.2f s "
	       "= %.1f us/pop (consumers %d, credit %u, %s; fill %.1fk "
	       "msg/s, %llu created late) [load %.2f]",
	    (unsigned long long) cfg->timers, cfg->every_ms, st.times,
	    (unsigned long long) r->msgs, r->secs, rate, r->p50, r->p99, r->max,
	    (unsigned long long) r->early, (unsigned long long) r->skipped,
	    (unsigned long long) r->dups, r->cpu_s, r->cpu_us_pop,
	    cfg->consumers, cfg->credit, ack_mode(), r->fill_rate / 1e3,
	    (unsigned long long) r->created_late, r->load1);
	fail_note(r);
	printf("\n");
	fflush(stdout);
	rv = 0;
out:
	cons_close(&cs);
	ackq_fini(&aq);
	tl_client_close(c);
	broker_finish(&b);
	free(st.rs.seen);
	free(st.rs.late_us);
	return rv;
}

/* Restart the broker on its directory; time to accept and to HELLO. */
static int
scale_restart(broker *b, bench_result *r)
{
	tl_client *c = NULL;
	double t0, end;
	int rv;

	r->stop_s = broker_stop(b);
	if (r->stop_s < 0) {
		return -1;
	}
	t0 = tlb_bench_mono_s();
	end = t0 + BENCH_READY_MS / 1000.0;
	if (broker_spawn(b) != 0 ||
	    broker_wait_accept(b, BENCH_READY_MS) != 0) {
		return -1;
	}
	r->accept_s = tlb_bench_mono_s() - t0;
	while ((rv = client_open(b, "bench-restart", &c)) != TL_OK) {
		if (tlb_bench_mono_s() > end) {
			fprintf(stderr, "no HELLO after restart: %s\n",
			    tl_strerror(rv));
			return -1;
		}
		tlb_bench_sleep_ms(2);
	}
	r->hello_s = tlb_bench_mono_s() - t0;
	{
		tl_topic_info ti;
		uint64_t hwm;

		if (tl_topic_get(c, BENCH_TOPIC, &ti) == TL_OK) {
			r->count_after = ti.messages;
		}
		tlb_bench_proc_mem(b->pid, &r->rss_after_kb, &hwm);
	}
	tl_client_close(c);
	return 0;
}

static int
bench_scale(bench_result *r)
{
	const bench_cfg *cfg = g_cfg;
	broker b;
	tl_client *c = NULL;
	prod_plan pl;
	bench_result fill;
	int rv = -1;

	memset(&fill, 0, sizeof(fill));
	if ((rv = broker_up(&b, &c)) != 0) {
		goto out;
	}
	pl = (prod_plan){.count = cfg->scale_count,
	    .mode = TS_SPREAD,
	    .base = tlb_bench_wall_ms() + BENCH_HOUR_MS,
	    .spread = BENCH_HOUR_MS,
	    .id_prefix = cfg->natural_ids ? "S" : NULL};
	if ((rv = produce(c, &pl, &fill)) != 0) {
		goto out;
	}
	tl_client_close(c);
	c = NULL;
	r->msgs = pl.count;
	r->secs = fill.secs;
	r->fill_rate = fill.rate;
	r->failures = fill.failures;
	r->first_err = fill.first_err;
	if (tlb_bench_proc_mem(b.pid, &r->rss_kb, &r->hwm_kb) != 0) {
		fprintf(stderr, "cannot read /proc/%d/status\n", (int) b.pid);
	}
	dir_usage(b.dir, &r->disk_bytes, &r->disk_apparent);
	r->bytes_per_msg = (double) r->disk_bytes / (double) pl.count;
	if (scale_restart(&b, r) != 0) {
		rv = -1;
		goto out;
	}
	if (r->count_after != pl.count - r->failures) {
		fprintf(stderr, "after restart the topic holds %llu messages\n",
		    (unsigned long long) r->count_after);
		r->failures++;
	}
	printf("scale: %llu msgs scheduled (fill %.1f s = %.1fk msg/s): "
	       "broker RSS %.1f MB (HWM %.1f MB), disk %.1f MB (apparent "
	       "%.1f MB) = %.0f B/msg; restart: stop %.2f s, accept %.2f s, "
	       "HELLO %.2f s, RSS after %.1f MB, %llu msgs [load %.2f]",
	    (unsigned long long) r->msgs, r->secs, r->fill_rate / 1e3,
	    (double) r->rss_kb / 1024.0, (double) r->hwm_kb / 1024.0,
	    (double) r->disk_bytes / 1048576.0,
	    (double) r->disk_apparent / 1048576.0, r->bytes_per_msg, r->stop_s,
	    r->accept_s, r->hello_s, (double) r->rss_after_kb / 1024.0,
	    (unsigned long long) r->count_after, r->load1);
	fail_note(r);
	printf("\n");
	fflush(stdout);
	rv = 0;
out:
	tl_client_close(c);
	broker_finish(&b);
	return rv;
}

/* ---- medians and JSON ---- */

typedef double (*field_fn)(const bench_result *r);

static double
f_rate(const bench_result *r)
{
	return r->rate;
}
static double
f_p50(const bench_result *r)
{
	return r->p50;
}
static double
f_p90(const bench_result *r)
{
	return r->p90;
}
static double
f_p99(const bench_result *r)
{
	return r->p99;
}
static double
f_p999(const bench_result *r)
{
	return r->p999;
}
static double
f_max(const bench_result *r)
{
	return r->max;
}
static double
f_rss(const bench_result *r)
{
	return (double) r->rss_kb / 1024.0;
}
static double
f_hwm(const bench_result *r)
{
	return (double) r->hwm_kb / 1024.0;
}
static double
f_bpm(const bench_result *r)
{
	return r->bytes_per_msg;
}
static double
f_hello(const bench_result *r)
{
	return r->hello_s;
}

static double
f_cpu_pop(const bench_result *r)
{
	return r->cpu_us_pop;
}

static double
median_of(const bench_result *rs, int n, const char *workload, field_fn f)
{
	double v[BENCH_MAX_RUNS];
	int k = 0;

	for (int i = 0; i < n; i++) {
		if (strcmp(rs[i].workload, workload) == 0) {
			v[k++] = f(&rs[i]);
		}
	}
	return tlb_bench_median(v, k, NAN);
}

static void
median_print(const void *res, int n, const char *w, int repeat)
{
	const bench_result *rs = res;
	char a[32];

	if (repeat < 2) {
		return;
	}
	printf("%s: median of %d runs: ", w, repeat);
	if (strcmp(w, "produce") == 0) {
		fmt_rate(a, sizeof(a), median_of(rs, n, w, f_rate));
		printf("%s msg/s\n", a);
	} else if (strcmp(w, "lateness") == 0) {
		printf(
		    "late p50 %.2f p90 %.2f p99 %.2f p99.9 %.2f max %.2f ms\n",
		    median_of(rs, n, w, f_p50), median_of(rs, n, w, f_p90),
		    median_of(rs, n, w, f_p99), median_of(rs, n, w, f_p999),
		    median_of(rs, n, w, f_max));
	} else if (strcmp(w, "lease-cycle") == 0) {
		fmt_rate(a, sizeof(a), median_of(rs, n, w, f_rate));
		printf("%s cycles/s\n", a);
	} else if (strcmp(w, "recurring") == 0) {
		fmt_rate(a, sizeof(a), median_of(rs, n, w, f_rate));
		printf(
		    "%s pops/s, late p50 %.2f p99 %.2f ms, %.1f us CPU/pop\n",
		    a, median_of(rs, n, w, f_p50), median_of(rs, n, w, f_p99),
		    median_of(rs, n, w, f_cpu_pop));
	} else {
		printf("RSS %.1f MB (HWM %.1f MB), %.0f B/msg on disk, "
		       "restart to HELLO %.2f s\n",
		    median_of(rs, n, w, f_rss), median_of(rs, n, w, f_hwm),
		    median_of(rs, n, w, f_bpm), median_of(rs, n, w, f_hello));
	}
	fflush(stdout);
}

static void
json_run(FILE *f, const bench_result *r)
{
	fprintf(f,
	    "    {\"workload\": \"%s\", \"run\": %d, \"load1\": %.2f, "
	    "\"msgs\": %llu, \"failures\": %llu, ",
	    r->workload, r->run, r->load1, (unsigned long long) r->msgs,
	    (unsigned long long) r->failures);
	if (strcmp(r->workload, "produce") == 0) {
		fprintf(f, "\"seconds\": %.4f, \"msgs_per_s\": %.0f}", r->secs,
		    r->rate);
	} else if (strcmp(r->workload, "lateness") == 0) {
		fprintf(f,
		    "\"received\": %llu, \"missing\": %llu, \"dups\": %llu, "
		    "\"early\": %llu, \"created_late\": %llu, "
		    "\"slack_ms\": %.0f, \"clock_offset_ms\": %lld, "
		    "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, "
		    "\"p999_ms\": %.3f, \"max_ms\": %.3f, \"mean_ms\": %.3f, "
		    "\"ack_failures\": %llu, \"delete_mean_ms\": %.2f, "
		    "\"delete_max_ms\": %.2f}",
		    (unsigned long long) r->received,
		    (unsigned long long) r->missing,
		    (unsigned long long) r->dups, (unsigned long long) r->early,
		    (unsigned long long) r->created_late, r->slack_ms,
		    (long long) r->clock_offset_ms, r->p50, r->p90, r->p99,
		    r->p999, r->max, r->mean, (unsigned long long) r->ack_fail,
		    r->ack_mean_ms, r->ack_max_ms);
	} else if (strcmp(r->workload, "recurring") == 0) {
		fprintf(f,
		    "\"seconds\": %.4f, \"pops_per_s\": %.0f, "
		    "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, "
		    "\"early\": %llu, \"skipped\": %llu, \"dups\": %llu, "
		    "\"broker_cpu_s\": %.2f, \"cpu_us_per_pop\": %.2f, "
		    "\"created_late\": %llu}",
		    r->secs, r->rate, r->p50, r->p99, r->max,
		    (unsigned long long) r->early,
		    (unsigned long long) r->skipped,
		    (unsigned long long) r->dups, r->cpu_s, r->cpu_us_pop,
		    (unsigned long long) r->created_late);
	} else if (strcmp(r->workload, "lease-cycle") == 0) {
		fprintf(f,
		    "\"seconds\": %.4f, \"cycles_per_s\": %.0f, "
		    "\"first_delivery_ms\": %.1f, \"left\": %llu, "
		    "\"fill_msgs_per_s\": %.0f, \"delete_mean_ms\": %.2f, "
		    "\"delete_max_ms\": %.2f}",
		    r->secs, r->rate, r->first_ms, (unsigned long long) r->left,
		    r->fill_rate, r->ack_mean_ms, r->ack_max_ms);
	} else {
		fprintf(f,
		    "\"fill_s\": %.3f, \"fill_msgs_per_s\": %.0f, "
		    "\"rss_kb\": %llu, \"hwm_kb\": %llu, \"disk_bytes\": %llu, "
		    "\"disk_apparent_bytes\": %llu, \"bytes_per_msg\": %.1f, "
		    "\"stop_s\": %.3f, \"accept_s\": %.3f, \"hello_s\": %.3f, "
		    "\"rss_after_restart_kb\": %llu, \"count_after\": %llu}",
		    r->secs, r->fill_rate, (unsigned long long) r->rss_kb,
		    (unsigned long long) r->hwm_kb,
		    (unsigned long long) r->disk_bytes,
		    (unsigned long long) r->disk_apparent, r->bytes_per_msg,
		    r->stop_s, r->accept_s, r->hello_s,
		    (unsigned long long) r->rss_after_kb,
		    (unsigned long long) r->count_after);
	}
}

static void
json_write(const bench_result *rs, int n)
{
	const bench_cfg *cfg = g_cfg;
	FILE *f = tlb_bench_json_open(&cfg->com);

	if (f == NULL) {
		return;
	}
	fprintf(f,
	    "  \"config\": {\"broker\": \"%s\", \"durability\": \"%s\", "
	    "\"produce_count\": %llu, \"batch\": %d, \"inflight\": %d, "
	    "\"body\": %zu, \"natural_ids\": %s, \"rate\": %d, \"secs\": %d, "
	    "\"consumers\": %d, \"credit\": %u, \"ackers\": %d, "
	    "\"cycle_count\": %llu, \"cycle_credit\": %u, "
	    "\"scale_count\": %llu, \"repeat\": %d},\n",
	    cfg->broker, cfg->durability != NULL ? cfg->durability : "always",
	    (unsigned long long) cfg->produce_count, cfg->batch, cfg->inflight,
	    cfg->body, cfg->natural_ids ? "true" : "false", cfg->rate,
	    cfg->secs, cfg->consumers, cfg->credit, cfg->ackers,
	    (unsigned long long) cfg->cycle_count, cfg->cycle_credit,
	    (unsigned long long) cfg->scale_count, cfg->com.repeat);
	tlb_bench_json_runs(f);
	for (int i = 0; i < n; i++) {
		json_run(f, &rs[i]);
		tlb_bench_json_run_end(f, i, n);
	}
	tlb_bench_json_median(f);
	{
		const char *sep = "";
		double m;

		if (!isnan(m = median_of(rs, n, "produce", f_rate))) {
			fprintf(f, "%s\"produce_msgs_per_s\": %.0f", sep, m);
			sep = ", ";
		}
		if (!isnan(m = median_of(rs, n, "lateness", f_p99))) {
			fprintf(f,
			    "%s\"lateness_p50_ms\": %.3f, "
			    "\"lateness_p90_ms\": %.3f, "
			    "\"lateness_p99_ms\": %.3f, "
			    "\"lateness_p999_ms\": %.3f, "
			    "\"lateness_max_ms\": %.3f",
			    sep, median_of(rs, n, "lateness", f_p50),
			    median_of(rs, n, "lateness", f_p90), m,
			    median_of(rs, n, "lateness", f_p999),
			    median_of(rs, n, "lateness", f_max));
			sep = ", ";
		}
		if (!isnan(m = median_of(rs, n, "lease-cycle", f_rate))) {
			fprintf(f, "%s\"lease_cycles_per_s\": %.0f", sep, m);
			sep = ", ";
		}
		if (!isnan(m = median_of(rs, n, "scale", f_rss))) {
			fprintf(f,
			    "%s\"scale_rss_mb\": %.1f, \"scale_hwm_mb\": %.1f, "
			    "\"scale_bytes_per_msg\": %.1f, "
			    "\"scale_restart_hello_s\": %.3f",
			    sep, m, median_of(rs, n, "scale", f_hwm),
			    median_of(rs, n, "scale", f_bpm),
			    median_of(rs, n, "scale", f_hello));
		}
	}
	tlb_bench_json_close(f);
}

/* ---- main ---- */

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tl-broker-bench [options] "
	    "produce|lateness|lease-cycle|scale|recurring|all\n"
	    "  --broker PATH       timelined to start "
	    "(<builddir>/broker/timelined)\n"
	    "  --durability MODE   passed to timelined: "
	    "always|interval:MS|none\n"
	    "  --dir D             make run directories under D (/tmp)\n"
	    "  --keep              keep the run directories\n"
	    "  --repeat R          runs per workload, median printed (1)\n"
	    "  --json FILE         write every run and the medians as JSON\n"
	    "  --timeout MS        SDK request timeout (30000)\n"
	    "  --count N           messages of the named workload (produce,\n"
	    "                      lease-cycle, scale; with all: each of "
	    "them)\n"
	    "  --batch B           creates per tl_put_batch_async (512, max "
	    "%u)\n"
	    "  --inflight K        batches in flight (16)\n"
	    "  --body BYTES        body size (100)\n"
	    "  --natural-ids       producer-chosen ids (default: the "
	    "broker's)\n"
	    "  --rate R            lateness: messages due per second (20000)\n"
	    "  --secs S            lateness: seconds of due messages (10)\n"
	    "  --lead MS           lateness: first due time after the start "
	    "(auto)\n"
	    "  --consumers C       lateness: consumers, one client each (1)\n"
	    "  --credit N          lateness: credit per consumer (1024)\n"
	    "  --cycle-credit N    lease-cycle: credit (8192)\n"
	    "  --ackers A          A threads calling the blocking "
	    "tl_lease_delete\n"
	    "                      instead of tl_lease_delete_async (0 = "
	    "async)\n"
	    "  --grace MS          lateness: wait after the last due time "
	    "(10000)\n"
	    "  --side-count N      lateness: a side client COUNTs a topic of "
	    "N\n"
	    "                      messages over and over meanwhile (0)\n"
	    "  --timers N          recurring: live timers (100000)\n"
	    "  --every MS          recurring: their interval (1000); --secs "
	    "is\n"
	    "                      how long they run, --consumers and "
	    "--credit\n"
	    "                      the consumers\n"
	    "defaults for --count: produce 1000000, lease-cycle 200000, scale "
	    "5000000\n(1000000 under all)\n",
	    TL_MAX_BATCH);
}

static const char *workloads[] = {
    "produce", "lateness", "lease-cycle", "scale", "recurring"};
#define NWORKLOADS (sizeof(workloads) / sizeof(workloads[0]))

static int
parse_args(int argc, char **argv, bench_cfg *cfg, const char **workload)
{
	uint64_t count = 0;
	const tlb_bench_opt opts[] = {
	    {"broker", 'B', TLB_BENCH_STR, 0, 0, &cfg->broker},
	    {"durability", 'D', TLB_BENCH_STR, 0, 0, &cfg->durability},
	    TLB_BENCH_COMMON_OPTS(&cfg->com),
	    {"timeout", 'T', TLB_BENCH_INT, 1, 3600000, &cfg->timeout_ms},
	    {"count", 'm', TLB_BENCH_U64, 1, UINT64_C(1) << 36, &count},
	    {"batch", 'n', TLB_BENCH_INT, 1, TL_MAX_BATCH, &cfg->batch},
	    {"inflight", 'k', TLB_BENCH_INT, 1, 1024, &cfg->inflight},
	    {"body", 'b', TLB_BENCH_SIZE, 0, TL_DEFAULT_MAX_BODY, &cfg->body},
	    {"natural-ids", 'N', TLB_BENCH_FLAG, 0, 0, &cfg->natural_ids},
	    {"rate", 'R', TLB_BENCH_INT, 1, 10000000, &cfg->rate},
	    {"secs", 's', TLB_BENCH_INT, 1, 3600, &cfg->secs},
	    {"lead", 'L', TLB_BENCH_INT, 1, 3600000, &cfg->lead_ms},
	    {"consumers", 'c', TLB_BENCH_INT, 1, 256, &cfg->consumers},
	    {"credit", 'C', TLB_BENCH_U32, 1, 1000000, &cfg->credit},
	    {"cycle-credit", 'X', TLB_BENCH_U32, 1, 1000000,
	        &cfg->cycle_credit},
	    {"ackers", 'A', TLB_BENCH_INT, 0, 4096, &cfg->ackers},
	    {"grace", 'G', TLB_BENCH_INT, 0, 3600000, &cfg->grace_ms},
	    {"side-count", 'S', TLB_BENCH_U64, 0, UINT64_C(1) << 32,
	        &cfg->side_count},
	    {"timers", 'I', TLB_BENCH_U64, 1, UINT64_C(1) << 28, &cfg->timers},
	    {"every", 'E', TLB_BENCH_INT, 1, 3600000, &cfg->every_ms},
	};

	if (tlb_bench_getopt(argc, argv, opts, sizeof(opts) / sizeof(opts[0]),
	        NULL, NULL, usage, workload) != 0) {
		return -1;
	}
	{
		bool known = strcmp(*workload, "all") == 0;

		for (size_t w = 0; w < NWORKLOADS; w++) {
			known = known || strcmp(*workload, workloads[w]) == 0;
		}
		if (!known) {
			return -1;
		}
	}
	if (strcmp(*workload, "all") == 0 && count == 0) {
		cfg->scale_count = 1000000;
	}
	if (count > 0) {
		bool all = strcmp(*workload, "all") == 0;

		if (all || strcmp(*workload, "produce") == 0) {
			cfg->produce_count = count;
		}
		if (all || strcmp(*workload, "lease-cycle") == 0) {
			cfg->cycle_count = count;
		}
		if (all || strcmp(*workload, "scale") == 0) {
			cfg->scale_count = count;
		}
	}
	return 0;
}

static int
run_one(void *arg, void *res, size_t w, int run, uint64_t *failures)
{
	bench_result *r = res;
	int rv;

	(void) arg;
	r->workload = workloads[w];
	r->run = run;
	r->load1 = tlb_bench_load_avg();
	switch (w) {
	case 0:
		rv = bench_produce(r);
		break;
	case 1:
		rv = bench_lateness(r);
		break;
	case 2:
		rv = bench_cycle(r);
		break;
	case 3:
		rv = bench_scale(r);
		break;
	default:
		rv = bench_recurring(r);
		break;
	}
	*failures = r->failures;
	return rv;
}

int
main(int argc, char **argv)
{
	static bench_result rs[NWORKLOADS * BENCH_MAX_RUNS];
	bench_cfg cfg = {
	    .com = {.repeat = 1},
	    .timeout_ms = 30000,
	    .produce_count = 1000000,
	    .batch = 512,
	    .inflight = 16,
	    .body = 100,
	    .rate = 20000,
	    .secs = 10,
	    .consumers = 1,
	    .credit = 1024,
	    .ackers = 0,
	    .grace_ms = 10000,
	    .cycle_count = 200000,
	    .cycle_credit = 8192,
	    .scale_count = 5000000,
	    .timers = 100000,
	    .every_ms = 1000,
	};
	tlb_bench_driver d = {
	    .names = workloads,
	    .n = NWORKLOADS,
	    .res = rs,
	    .size = sizeof(rs[0]),
	    .run = run_one,
	    .done = median_print,
	};
	char *def_broker = NULL;
	const char *workload = NULL;

	if (parse_args(argc, argv, &cfg, &workload) != 0) {
		usage(stderr);
		return 2;
	}
	if (cfg.broker == NULL) {
		cfg.broker = def_broker = tlb_bench_default_timelined();
	}
	if (access(cfg.broker, X_OK) != 0) {
		fprintf(stderr, "cannot run %s: %s (use --broker PATH)\n",
		    cfg.broker, strerror(errno));
		return 2;
	}
	g_cfg = &cfg;
	signal(SIGPIPE, SIG_IGN);
	if (tlb_bench_run_all(&d, workload, cfg.com.repeat) != 0) {
		free(def_broker);
		return 1;
	}
	if (cfg.com.json != NULL) {
		json_write(rs, d.nres);
	}
	free(def_broker);
	return tlb_bench_exit_status(d.failures);
}
