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
 * coalesces the pending operations into batch frames.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeline/timeline.h"

#include "driver.h"

#define TLB_TL_TOPIC "bench"
#define TLB_TL_GROUP "tl-bench"
#define TLB_TL_BATCH 512
#define TLB_TL_INFLIGHT 16
#define TLB_TL_START_MS 600000 /* a large backlog at restart */
#define TLB_TL_TIMEOUT_MS 10000
#define TLB_TL_DRAIN_MS 15000

struct tlb_server {
	tlb_proc p; /* data: the store's directory */
	char bin[PATH_MAX];
	char url[PATH_MAX + 16]; /* what clients connect to */
	char durability[32];     /* its --durability */
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
    "data", TLB_TL_START_MS, 120000, tl_prepare, tl_args};

static int
tl_connect(tlb_server *s, tlb_conn **out)
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
	tl_opts_set_timeout(o, TLB_TL_TIMEOUT_MS);
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
			failed = true;
		}
	}
	pthread_mutex_lock(&ps->mtx);
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

const tlb_driver tlb_drv_timeline = {
    .name = "timeline",
    .nmodes = 1,
    .mode_name = {"always"},
    .mode_desc = {"timelined --durability always: every create, extend "
                  "and delete is on disk (group commit) before the reply"},
    .scale_mode = 0,
    TLB_DRIVER_OPS(
        &tl_kind, tl_connect, tl_disconnect, tl_put_items, tl_consume),
};
