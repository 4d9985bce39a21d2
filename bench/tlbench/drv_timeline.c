/*
 * drv_timeline.c: Timeline in tl-bench, through the public SDK only. The
 * server is the build's own timelined, started on a directory of its own
 * and a loopback TCP port (the same transport as the peers) with one
 * topic, durability `always`: a create, extend or delete is answered only
 * after its group commit is on disk.
 *
 * Puts go out as tl_put_batch_async batches (TLB_TL_BATCH messages,
 * TLB_TL_INFLIGHT batches in flight). A consumer is a tl_consumer with the
 * asked-for credit whose on_message starts tl_lease_extend_async (when
 * asked) and then tl_lease_delete_async from the extend's done; the SDK
 * coalesces the pending operations into batch frames. on_message runs
 * inline, on the client's connection thread (--timeline-thread-delivery:
 * on the consumer's own thread).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "timeline/timeline.h"

#include "driver.h"

#define TLB_TL_TOPIC "bench"
#define TLB_TL_GROUP "tl-bench"
#define TLB_TL_BATCH 512
#define TLB_TL_INFLIGHT 16
#define TLB_TL_START_MS 600000 /* a large backlog at restart */
#define TLB_TL_TIMEOUT_MS 10000
#define TLB_TL_DRAIN_MS 15000
/* The line of a node's /metrics that says it is the leader. */
#define TLB_TL_LEADER_METRIC "timeline_cluster_serving 1"

#define TLB_TL_NODES 3

/* A node of timeline-cluster3 (p.pid and p.port are node 0's). */
typedef struct tl_node {
	pid_t pid;
	int raft_port;
	int client_port;
	int metrics_port;
	char conf[PATH_MAX + 16];
	char log[PATH_MAX + 16];
} tl_node;

struct tlb_server {
	tlb_proc p; /* data: the store's directory (a cluster: the nodes') */
	char bin[PATH_MAX];
	char url[3 * PATH_MAX]; /* what clients connect to: a cluster's list */
	char durability[32];    /* its --durability */
	int nnodes;             /* 0: one timelined */
	tl_node node[TLB_TL_NODES];
};

/* What a consume loop shares with its callbacks; lives as long as the
 * connection, because a done may run until the client closes. */
typedef struct tl_cstate {
	const tlb_consume *cc;
	atomic_long inflight;
} tl_cstate;

struct tlb_conn {
	tl_client *cl;
	tl_cstate *st;
};

static void
tl_log_cb(void *arg, tl_log_level level, const char *msg)
{
	(void) arg;
	if (level <= TL_LOG_ERROR) {
		fprintf(stderr, "libtimeline: %s\n", msg);
	}
}

static void
tl_args(tlb_server *s, char **argv)
{
	bool ipc = strncmp(s->url, "ipc://", 6) == 0;
	char *const v[] = {s->bin, "--data", s->p.data, "--listen",
	    s->p.scratch, "--metrics", "off", "--topic", TLB_TL_TOPIC ":16",
	    "--durability", s->durability, "--log-level", "warn",
	    ipc ? "--listen" : NULL, s->url, NULL};

	snprintf(s->p.scratch, sizeof(s->p.scratch), "tcp://127.0.0.1:%d",
	    s->p.port);
	memcpy(argv, v, sizeof(v));
}

static int
tl_prepare(tlb_server *s, const tlb_server_conf *conf)
{
	snprintf(s->bin, sizeof(s->bin), "%s", conf->timelined);
	snprintf(s->durability, sizeof(s->durability), "%s",
	    conf->tl_durability != NULL ? conf->tl_durability : "always");
	if (conf->ipc) {
		snprintf(s->url, sizeof(s->url), "ipc://%s/tl.sock", conf->dir);
	} else {
		snprintf(
		    s->url, sizeof(s->url), "tcp://127.0.0.1:%d", s->p.port);
	}
	return 0;
}

static const tlb_proc_kind tl_kind = {sizeof(tlb_server), "timelined.log",
    "data", TLB_TL_START_MS, 120000, tl_prepare, tl_args, NULL};

/* ---- timeline-cluster3: three timelined on loopback, one Raft group ----
 *
 * Each node has a configuration file of its own (its id, data directory,
 * client and metrics ports, and the three cluster_node lines); clients get
 * the three client URLs and follow the leader themselves. */

static int
cl_prepare(tlb_server *s, const tlb_server_conf *conf)
{
	char nodes[1024];
	size_t off = 0;

	tl_prepare(s, conf);
	s->nnodes = TLB_TL_NODES;
	s->url[0] = '\0';
	for (int i = 0; i < TLB_TL_NODES; i++) {
		tl_node *n = &s->node[i];

		n->client_port = i == 0 ? s->p.port : tlb_free_port();
		n->raft_port = tlb_free_port();
		n->metrics_port = tlb_free_port();
		if (n->client_port < 0 || n->raft_port < 0 ||
		    n->metrics_port < 0) {
			return -1;
		}
		off += (size_t) snprintf(nodes + off, sizeof(nodes) - off,
		    "cluster_node = %d 127.0.0.1:%d tcp://127.0.0.1:%d\n",
		    i + 1, n->raft_port, n->client_port);
		snprintf(s->url + strlen(s->url),
		    sizeof(s->url) - strlen(s->url), "%stcp://127.0.0.1:%d",
		    i > 0 ? "," : "", n->client_port);
	}
	if (mkdir(s->p.data, 0755) != 0 && errno != EEXIST) {
		return -1;
	}
	for (int i = 0; i < TLB_TL_NODES; i++) {
		tl_node *n = &s->node[i];
		FILE *f;

		snprintf(n->conf, sizeof(n->conf), "%s/node%d.conf", s->p.dir,
		    i + 1);
		snprintf(
		    n->log, sizeof(n->log), "%s/node%d.log", s->p.dir, i + 1);
		if ((f = fopen(n->conf, "w")) == NULL) {
			return -1;
		}
		fprintf(f,
		    "data = %s/node%d\nlisten = tcp://127.0.0.1:%d\n"
		    "metrics = 127.0.0.1:%d\ntopic = " TLB_TL_TOPIC ":16\n"
		    "durability = %s\nlog_level = warn\ncluster_id = %d\n%s",
		    s->p.data, i + 1, n->client_port, n->metrics_port,
		    s->durability, i + 1, nodes);
		fclose(f);
	}
	return 0;
}

/* Whether node i says, on its metrics page, that it leads. */
static bool
cl_is_leader(const tl_node *n)
{
	char page[65536], key[64];
	size_t len = 0;
	tlb_sock k;
	ssize_t got;

	if (n->pid <= 0 || tlb_sock_open(&k, n->metrics_port, 2000) != 0) {
		return false;
	}
	if (tlb_sock_printf(&k, "GET /metrics HTTP/1.0\r\n\r\n") != 0 ||
	    tlb_sock_flush(&k) != 0) {
		tlb_sock_close(&k);
		return false;
	}
	/* the page's lines end in \n alone: read it whole */
	while (len < sizeof(page) - 1 &&
	    (got = read(k.fd, page + len, sizeof(page) - 1 - len)) > 0) {
		len += (size_t) got;
	}
	tlb_sock_close(&k);
	page[len] = '\0';
	snprintf(key, sizeof(key), "\n%s\n", TLB_TL_LEADER_METRIC);
	return strstr(page, key) != NULL;
}

static void cl_signal_all(
    tlb_server *s, int sig, int deadline_ms, double *secs);

/* Start every node that is not running, then wait until all accept and
 * one of them leads. On failure none is left running (the caller frees
 * s: a node left behind held its ports through the next runs). */
static int
cl_spawn(tlb_server *s)
{
	for (int i = 0; i < s->nnodes; i++) {
		tl_node *n = &s->node[i];
		char *argv[] = {s->bin, "-c", n->conf, NULL};

		if (n->pid <= 0 && (n->pid = tlb_spawn(argv, n->log)) < 0) {
			goto fail;
		}
	}
	for (int i = 0; i < s->nnodes; i++) {
		tl_node *n = &s->node[i];

		if (tlb_wait_port(n->client_port, n->pid, s->p.k->start_ms,
		        n->log) != 0) {
			goto fail;
		}
	}
	s->p.pid = s->node[0].pid;
	/* ready when a node serves: the runs measure the cluster, not its
	 * first election */
	for (double end = tlb_bench_mono_s() + 60; tlb_bench_mono_s() < end;) {
		for (int i = 0; i < s->nnodes; i++) {
			if (cl_is_leader(&s->node[i])) {
				return 0;
			}
		}
		tlb_bench_sleep_ms(20);
	}
	fprintf(stderr, "timeline-cluster3: no leader within 60 s\n");
fail:
	cl_signal_all(s, SIGKILL, 30000, NULL);
	return -1;
}

static void
cl_signal_all(tlb_server *s, int sig, int deadline_ms, double *secs)
{
	double t = 0;

	for (int i = 0; i < s->nnodes; i++) {
		double d = tlb_stop_pid(s->node[i].pid, sig, deadline_ms);

		t = d > t ? d : t;
		s->node[i].pid = 0;
	}
	s->p.pid = 0;
	if (secs != NULL) {
		*secs = t;
	}
}

static double
cl_stop_only(tlb_server *s)
{
	double t;

	cl_signal_all(s, SIGTERM, s->p.k->term_ms, &t);
	return t;
}

static void
cl_stop(tlb_server *s)
{
	if (s != NULL) {
		cl_stop_only(s);
		free(s);
	}
}

/* Every node at once, as a power loss would. */
static void
cl_kill9(tlb_server *s)
{
	cl_signal_all(s, SIGKILL, 30000, NULL);
}

/* The leader's RSS (the node that holds the dispatcher and the writes). */
static int
cl_rss(tlb_server *s, uint64_t *kb)
{
	uint64_t best = 0;

	for (int i = 0; i < s->nnodes; i++) {
		uint64_t v = 0;

		s->p.pid = s->node[i].pid;
		if (s->p.pid > 0 && tlb_proc_rss(s, &v) == 0 && v > best) {
			best = v;
		}
	}
	s->p.pid = s->node[0].pid;
	*kb = best;
	return best > 0 ? 0 : -1;
}

static int
cl_kill_leader(tlb_server *s)
{
	double end = tlb_bench_mono_s() + 10;

	while (tlb_bench_mono_s() < end) {
		for (int i = 0; i < s->nnodes; i++) {
			if (cl_is_leader(&s->node[i])) {
				tlb_stop_pid(s->node[i].pid, SIGKILL, 30000);
				s->node[i].pid = 0;
				return 0;
			}
		}
		tlb_bench_sleep_ms(20);
	}
	fprintf(stderr, "timeline-cluster3: no node says it leads\n");
	return -1;
}

static uint64_t
cl_disk(tlb_server *s)
{
	return tlb_dir_bytes(s->p.data) / (uint64_t) s->nnodes;
}

static const tlb_proc_kind cl_kind = {sizeof(tlb_server), "node1.log", "data",
    TLB_TL_START_MS, 120000, cl_prepare, tl_args, cl_spawn};

/* A client of s whose calls wait up to timeout_ms for their answer. */
static int
tl_connect_for(tlb_server *s, tlb_conn **out, int timeout_ms)
{
	tl_opts *o = NULL;
	tlb_conn *c = calloc(1, sizeof(*c));
	int rv;

	if (c == NULL || tl_opts_alloc(&o) != TL_OK) {
		free(c);
		return -1;
	}
	tl_opts_set_url(o, s->url);
	tl_opts_set_name(o, "tl-bench");
	tl_opts_set_timeout(o, timeout_ms);
	tl_opts_set_log(o, tl_log_cb, NULL);
	rv = tl_client_open(&c->cl, o);
	tl_opts_free(o);
	if (rv != TL_OK) {
		fprintf(stderr, "tl_client_open: %s\n", tl_strerror(rv));
		free(c);
		return -1;
	}
	*out = c;
	return 0;
}

static int
tl_connect(tlb_server *s, tlb_conn **out)
{
	return tl_connect_for(s, out, TLB_TL_TIMEOUT_MS);
}

static void
tl_disconnect(tlb_conn *c)
{
	if (c == NULL) {
		return;
	}
	tl_client_close(c->cl); /* runs the dones still queued */
	free(c->st);
	free(c);
}

/* ---- puts ---- */

typedef struct tl_pslot {
	struct tl_pstate *ps;
	tl_put puts[TLB_TL_BATCH];
	const tlb_item *items;
	size_t n;
	struct tl_pslot *next;
} tl_pslot;

typedef struct tl_pstate {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	tl_pslot *free_list;
	int outstanding;
	bool failed;
	tlb_ack_fn ack;
	void *arg;
} tl_pstate;

static void
tl_put_done(void *arg, int err)
{
	tl_pslot *sl = arg;
	tl_pstate *ps = sl->ps;
	bool failed = err != TL_OK;

	for (size_t i = 0; i < sl->n && err == TL_OK; i++) {
		if (sl->puts[i].err == TL_OK) {
			ps->ack(ps->arg, sl->items[i].seq);
		} else {
			err = sl->puts[i].err;
			failed = true;
		}
	}
	pthread_mutex_lock(&ps->mtx);
	if (failed && !ps->failed) {
		/* the first failure says why */
		fprintf(stderr, "timeline: a put of %zu failed: %s\n", sl->n,
		    tl_errname(err));
	}
	ps->failed = ps->failed || failed;
	sl->next = ps->free_list;
	ps->free_list = sl;
	ps->outstanding--;
	pthread_cond_signal(&ps->cv);
	pthread_mutex_unlock(&ps->mtx);
}

static int
tl_put_items(tlb_conn *c, const tlb_item *items, size_t n, size_t body_len,
    tlb_ack_fn ack, void *arg)
{
	tl_pslot *slots = calloc(TLB_TL_INFLIGHT, sizeof(*slots));
	char *bodies =
	    malloc((size_t) TLB_TL_INFLIGHT * TLB_TL_BATCH * body_len);
	tl_pstate ps;
	size_t done = 0;
	bool failed;

	if (slots == NULL || bodies == NULL) {
		free(slots);
		free(bodies);
		return -1;
	}
	memset(&ps, 0, sizeof(ps));
	pthread_mutex_init(&ps.mtx, NULL);
	pthread_cond_init(&ps.cv, NULL);
	ps.ack = ack;
	ps.arg = arg;
	for (int k = 0; k < TLB_TL_INFLIGHT; k++) {
		slots[k].ps = &ps;
		slots[k].next = ps.free_list;
		ps.free_list = &slots[k];
	}
	while (done < n) {
		tl_pslot *sl;
		char *b;

		pthread_mutex_lock(&ps.mtx);
		while (ps.free_list == NULL) {
			pthread_cond_wait(&ps.cv, &ps.mtx);
		}
		failed = ps.failed;
		sl = ps.free_list;
		ps.free_list = sl->next;
		if (!failed) {
			ps.outstanding++;
		}
		pthread_mutex_unlock(&ps.mtx);
		if (failed) {
			break;
		}
		b = bodies + (size_t) (sl - slots) * TLB_TL_BATCH * body_len;
		sl->items = items + done;
		sl->n = n - done < TLB_TL_BATCH ? n - done : TLB_TL_BATCH;
		for (size_t i = 0; i < sl->n; i++) {
			tl_put *u = &sl->puts[i];

			memset(u, 0, sizeof(*u));
			tlb_body_fill(b + i * body_len, body_len,
			    sl->items[i].seq, sl->items[i].due_ms);
			u->ts = sl->items[i].due_ms;
			u->body = b + i * body_len;
			u->body_len = body_len;
		}
		done += sl->n;
		if (tl_put_batch_async(c->cl, TLB_TL_TOPIC, TLB_TL_GROUP,
		        sl->puts, sl->n, tl_put_done, sl) != TL_OK) {
			pthread_mutex_lock(&ps.mtx);
			ps.failed = true;
			sl->next = ps.free_list;
			ps.free_list = sl;
			ps.outstanding--;
			pthread_mutex_unlock(&ps.mtx);
			break;
		}
	}
	pthread_mutex_lock(&ps.mtx);
	while (ps.outstanding > 0) {
		pthread_cond_wait(&ps.cv, &ps.mtx);
	}
	failed = ps.failed || done < n;
	pthread_mutex_unlock(&ps.mtx);
	pthread_mutex_destroy(&ps.mtx);
	pthread_cond_destroy(&ps.cv);
	free(slots);
	free(bodies);
	return failed ? -1 : 0;
}

/* ---- consuming ---- */

/* One lease between on_message and its delete's done. */
typedef struct tl_op {
	tl_cstate *st;
	tl_lease *l;
	uint64_t seq;
} tl_op;

static void
tl_op_end(tl_op *op, int err)
{
	tl_cstate *st = op->st;

	st->cc->on_done(st->cc->arg, op->seq, err);
	tl_lease_free(op->l);
	free(op);
	atomic_fetch_sub(&st->inflight, 1);
}

static void
tl_deleted(void *arg, int err)
{
	tl_op_end(arg, err);
}

static void
tl_extended(void *arg, int err)
{
	tl_op *op = arg;

	if (err == TL_OK) {
		err = tl_lease_delete_async(op->l, tl_deleted, op);
		if (err == TL_OK) {
			return;
		}
	}
	tl_op_end(op, err);
}

static void
tl_on_message(void *arg, tl_lease *l)
{
	tl_cstate *st = arg;
	size_t len;
	const void *body = tl_lease_body(l, &len);
	tl_op *op = malloc(sizeof(*op));
	int64_t due;
	int rv;

	atomic_fetch_add(&st->inflight, 1);
	if (op == NULL) {
		tl_lease_free(l);
		atomic_fetch_sub(&st->inflight, 1);
		return;
	}
	op->st = st;
	op->l = l;
	if (!tlb_body_parse(body, len, &op->seq, &due)) {
		fprintf(stderr, "timeline: a foreign message\n");
		free(op);
		tl_lease_free(l);
		atomic_fetch_sub(&st->inflight, 1);
		return;
	}
	st->cc->on_msg(st->cc->arg, op->seq, due);
	rv = st->cc->extend
	    ? tl_lease_extend_async(l, st->cc->lease_ms, tl_extended, op)
	    : tl_lease_delete_async(l, tl_deleted, op);
	if (rv != TL_OK) {
		tl_op_end(op, rv);
	}
}

static int
tl_consume(tlb_conn *c, const tlb_consume *cc)
{
	char id[32];
	tl_consumer_conf conf;
	tl_consumer *k = NULL;
	double end;
	int rv;

	if (c->st != NULL) {
		return -1; /* one consume loop per connection */
	}
	if ((c->st = calloc(1, sizeof(*c->st))) == NULL) {
		return -1;
	}
	c->st->cc = cc;
	snprintf(id, sizeof(id), "tl-bench-%d", cc->index);
	memset(&conf, 0, sizeof(conf));
	conf.topic = TLB_TL_TOPIC;
	conf.consumer_id = id;
	conf.lease_ms = cc->lease_ms;
	conf.credit = cc->credit;
	conf.on_message = tl_on_message;
	conf.arg = c->st;
	conf.inline_delivery = !cc->handoff;
	if ((rv = tl_consumer_open(&k, c->cl, &conf)) != TL_OK) {
		fprintf(stderr, "tl_consumer_open: %s\n", tl_strerror(rv));
		return -1;
	}
	while (!atomic_load(cc->stop)) {
		tlb_bench_sleep_ms(2);
	}
	end = tlb_bench_mono_s() + TLB_TL_DRAIN_MS / 1000.0;
	while (atomic_load(&c->st->inflight) > 0 && tlb_bench_mono_s() < end) {
		tlb_bench_sleep_ms(1);
	}
	tl_consumer_close(k);
	return 0;
}

/* ---- a long read: COUNT over the whole timeline ---- */

static int
tl_long_read(tlb_server *s, uint64_t *n)
{
	tlb_conn *c;
	tl_counts k;
	int rv;

	if (tl_connect_for(s, &c, TLB_SOCK_TIMEOUT_MS) != 0) {
		return -1;
	}
	rv = tl_count(c->cl, TLB_TL_TOPIC, TL_TS_MIN, TL_TS_MAX + 1, &k);
	tl_disconnect(c);
	if (rv != TL_OK) {
		fprintf(stderr, "tl_count: %s\n", tl_strerror(rv));
		return -1;
	}
	*n = k.available + k.waiting + k.processing;
	return 0;
}

const tlb_driver tlb_drv_timeline = {
    .name = "timeline",
    .nmodes = 1,
    .mode_name = {"always"},
    .mode_desc = {"timelined --durability always: every create, extend "
                  "and delete is on disk (group commit) before the reply"},
    .scale_mode = 0,
    TLB_DRIVER_OPS(
        &tl_kind, tl_connect, tl_disconnect, tl_put_items, tl_consume),
    .long_read = tl_long_read,
};

const tlb_driver tlb_drv_timeline_cluster3 = {
    .name = "timeline-cluster3",
    .nmodes = 1,
    .mode_name = {"raft"},
    .mode_desc = {"three timelined on this machine, one Raft group: every "
                  "create, extend and delete is on a majority's disk "
                  "(Raft's log) before the reply"},
    .scale_mode = 0,
    .proc = &cl_kind,
    .stop = cl_stop,
    .kill9 = cl_kill9,
    .restart = tlb_proc_restart,
    .stop_only = cl_stop_only,
    .rss_kb = cl_rss,
    .disk_bytes = cl_disk,
    .connect = tl_connect,
    .disconnect = tl_disconnect,
    .put = tl_put_items,
    .consume = tl_consume,
    .kill_leader = cl_kill_leader,
    .long_read = tl_long_read,
};
