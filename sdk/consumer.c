/*
 * Consumers and leases: SUBSCRIBE / UNSUBSCRIBE, the delivery queue fed by
 * the broker's DELIVER pushes (with de-duplication of the leases the
 * broker re-delivers after a reconnect), LEASE_LOST, the optional callback
 * thread, polling, and the lease operations (extend, release, delete).
 *
 * DESIGN. A lease operation is not sent by the caller: it is appended to
 * its consumer's pending list of that kind. A blocking caller then sleeps
 * on its own condition variable; an asynchronous one (tl_lease_*_async)
 * returns, its op allocated. The send thread turns every pending list into
 * one EXTEND, RELEASE or ACK batch frame (at most TL_MAX_BATCH items each)
 * when it next runs, so the operations that many threads (or one thread's
 * async calls) issue while a frame is being written travel together. The
 * reply completes each op once, in lop_done_locked, with its own item's
 * result: it updates the handle, then wakes the blocking caller or queues
 * the async callback for the client's callback thread. Timeouts, connection
 * loss and consumer close complete pending ops the same way. All consumer
 * state is guarded by the client's mutex.
 */
#include <stdio.h>
#include <time.h>

#include "internal.h"

static const uint8_t lop_ops[TLI_LOP_N] = {
    [TLI_LOP_EXTEND] = TLP_OP_EXTEND,
    [TLI_LOP_RELEASE] = TLP_OP_RELEASE,
    [TLI_LOP_ACK] = TLP_OP_ACK,
};

/* ---- leases ---- */

tl_lease *
tli_lease_new(const tlp_delivery *d)
{
	tl_lease *l;
	size_t owner_n =
	    d->owner.n > TL_MAX_NAME_LEN ? TL_MAX_NAME_LEN : d->owner.n;

	l = tli_zalloc(sizeof(*l) + d->id.n + 1 + d->body_len + 1);
	if (l == NULL) {
		return NULL;
	}
	l->id = (char *) (l + 1);
	if (d->id.n > 0) {
		memcpy(l->id, d->id.p, d->id.n);
	}
	l->id_len = d->id.n;
	l->version = d->version;
	l->until = d->lease_until;
	l->due = d->due_ts;
	l->placed = d->placed_at;
	l->deliveries = d->deliveries;
	l->seq = d->seq;
	l->last = d->last;
	l->every = d->every_ms;
	l->start = d->start;
	if (owner_n > 0) {
		memcpy(l->owner, d->owner.p, owner_n);
	}
	l->body = l->id + d->id.n + 1;
	l->body_len = d->body_len;
	if (d->body_len > 0) {
		memcpy(l->body, d->body, d->body_len);
	}
	return l;
}

typedef struct lease_key {
	const char *id;
	size_t n;
} lease_key;

static bool
lease_is(const tli_hnode *hn, const void *key)
{
	const tl_lease *l = TLI_CONTAINER(hn, tl_lease, hn);
	const lease_key *k = key;

	return l->id_len == k->n && memcmp(l->id, k->id, k->n) == 0;
}

static void
live_add(tl_consumer *k, tl_lease *l)
{
	TLI_ASSERT_LOCKED(&k->client->mtx);
	TLI_ASSERT(l->lprev == NULL && l->lnext == NULL && !l->queued);
	l->cons = k;
	l->client = k->client;
	l->lprev = NULL;
	l->lnext = k->live;
	if (k->live != NULL) {
		k->live->lprev = l;
	}
	k->live = l;
	k->nlive++;
	/* Cannot fail: the index has had slots since consumer_open. */
	(void) tli_htab_insert(&k->lht, &l->hn, tli_hash64(l->id, l->id_len));
}

static void
live_remove(tl_consumer *k, tl_lease *l)
{
	TLI_ASSERT_LOCKED(&k->client->mtx);
	TLI_ASSERT(k->nlive > 0 && l->cons == k);
	tli_htab_remove(&k->lht, &l->hn);
	if (l->lprev != NULL) {
		l->lprev->lnext = l->lnext;
	} else if (k->live == l) {
		k->live = l->lnext;
	}
	if (l->lnext != NULL) {
		l->lnext->lprev = l->lprev;
	}
	l->lprev = l->lnext = NULL;
	k->nlive--;
}

static tl_lease *
live_find(tl_consumer *k, const char *id, size_t n)
{
	lease_key key = {id, n};
	tli_hnode *hn =
	    tli_htab_find(&k->lht, tli_hash64(id, n), lease_is, &key);

	return hn != NULL ? TLI_CONTAINER(hn, tl_lease, hn) : NULL;
}

static void
queue_push(tl_consumer *k, tl_lease *l)
{
	TLI_ASSERT_LOCKED(&k->client->mtx);
	TLI_ASSERT(!l->queued); /* a lease is queued at most once */
	l->qnext = NULL;
	l->queued = true;
	if (k->qtail != NULL) {
		k->qtail->qnext = l;
	} else {
		k->qhead = l;
	}
	k->qtail = l;
	k->qlen++;
}

static tl_lease *
queue_pop(tl_consumer *k)
{
	tl_lease *l = k->qhead;

	if (l != NULL) {
		if ((k->qhead = l->qnext) == NULL) {
			k->qtail = NULL;
		}
		TLI_ASSERT(l->queued && k->qlen > 0);
		l->qnext = NULL;
		l->queued = false;
		k->qlen--;
	}
	return l;
}

/* Take every queued lease out of k (and out of its live index) and add
 * them to the list out (through qnext), for the caller to free outside the
 * lock; returns the list. */
static tl_lease *
queue_drain(tl_consumer *k, tl_lease *out)
{
	tl_lease *l;

	while ((l = queue_pop(k)) != NULL) {
		live_remove(k, l);
		l->qnext = out;
		out = l;
	}
	return out;
}

void
tli_consumer_free_leases(tl_lease *l)
{
	while (l != NULL) {
		tl_lease *next = l->qnext;

		tli_free(l);
		l = next;
	}
}

static void
queue_remove(tl_consumer *k, tl_lease *l)
{
	tl_lease **pp = &k->qhead;
	tl_lease *prev = NULL;

	for (; *pp != NULL; prev = *pp, pp = &(*pp)->qnext) {
		if (*pp == l) {
			*pp = l->qnext;
			if (k->qtail == l) {
				k->qtail = prev;
			}
			TLI_ASSERT(l->queued && k->qlen > 0);
			l->qnext = NULL;
			l->queued = false;
			k->qlen--;
			return;
		}
	}
}

/* The lease's getters: a field, or none for a NULL lease. */
#define LEASE_GET(type, name, field, none)          \
	type tl_lease_##name(const tl_lease *l)     \
	{                                           \
		return l != NULL ? l->field : none; \
	}

LEASE_GET(const char *, id, id, NULL)
LEASE_GET(size_t, id_len, id_len, 0)
LEASE_GET(uint64_t, version, version, 0)
LEASE_GET(int64_t, until, until, 0)
LEASE_GET(int64_t, due, due, 0)
LEASE_GET(int64_t, placed_at, placed, 0)
LEASE_GET(uint32_t, deliveries, deliveries, 0)
LEASE_GET(uint32_t, seq, seq, 0)
LEASE_GET(uint32_t, last, last, 0)

int64_t
tl_lease_occurrence_at(const tl_lease *l)
{
	if (l == NULL) {
		return 0;
	}
	if (l->seq == 0) {
		return l->placed;
	}
	return l->start + (int64_t) (l->seq - 1) * l->every;
}
LEASE_GET(const char *, owner, owner, NULL)

const void *
tl_lease_body(const tl_lease *l, size_t *len)
{
	if (l == NULL) {
		if (len != NULL) {
			*len = 0;
		}
		return NULL;
	}
	if (len != NULL) {
		*len = l->body_len;
	}
	return l->body;
}

void
tl_lease_free(tl_lease *l)
{
	tl_consumer *k;

	if (l == NULL) {
		return;
	}
	if (l->own != NULL) {
		tli_lock_lease_free(l);
		return;
	}
	/* Its consumer may be closing on another thread: it sets cons to NULL
	 * under the client's lock and then frees itself, so cons is looked
	 * at again under that lock (the client outlives the consumer). */
	if (l->cons != NULL) {
		tl_client *c = l->client;
		pthread_mutex_lock(&c->mtx);
		if ((k = l->cons) != NULL) {
			if (l->queued) {
				queue_remove(k, l);
			}
			live_remove(k, l);
		}
		pthread_mutex_unlock(&c->mtx);
	}
	tli_free(l);
}

/* ---- lease operations ---- */

static void
lop_user_cb(void *arg)
{
	tli_lop *op = arg;
	tl_done_fn done = op->done;
	void *done_arg = op->arg;
	int err = op->err;

	tli_free(op); /* before done, which may free what op pointed to */
	done(done_arg, err);
}

/* The one completion of every lease op, under c->mtx: a blocking caller
 * is woken; an asynchronous op's callback is queued for the callback
 * thread, never run here. */
static void
lop_done_locked(tl_client *c, tli_lop *op, int err)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	TLI_ASSERT(!op->finished); /* completed exactly once */
	op->err = err;
	op->finished = true;
	if (op->done != NULL) {
		op->cb.fn = lop_user_cb;
		op->cb.arg = op;
		tli_cb_post_locked(c, &op->cb);
	} else {
		pthread_cond_signal(&op->cv);
	}
}

void
tli_lops_finish(tl_client *c, tli_lop *list, int err)
{
	if (list == NULL) {
		return;
	}
	pthread_mutex_lock(&c->mtx);
	while (list != NULL) {
		tli_lop *op = list;
		list = op->next;
		op->next = NULL;
		lop_done_locked(c, op, err);
	}
	pthread_mutex_unlock(&c->mtx);
}

static void
dirty_remove(tl_client *c, tl_consumer *k)
{
	tl_consumer **pp = &c->dirty;

	for (; *pp != NULL; pp = &(*pp)->dnext) {
		if (*pp == k) {
			*pp = k->dnext;
			break;
		}
	}
	k->dirty = false;
	k->dnext = NULL;
}

void
tli_consumer_expire(tl_client *c, int64_t now, bool all, tli_lop **failed)
{
	for (tl_consumer *k = c->consumers; k != NULL; k = k->next) {
		for (int i = 0; i < TLI_LOP_N; i++) {
			tli_lop **pp = &k->pend[i];
			k->pend_tail[i] = NULL;
			while (*pp != NULL) {
				tli_lop *op = *pp;
				if (all || op->deadline <= now) {
					*pp = op->next;
					op->next = *failed;
					*failed = op;
				} else {
					k->pend_tail[i] = op;
					pp = &op->next;
				}
			}
		}
	}
}

typedef struct lgroup {
	tli_req q;
	int kind;
	size_t n;
	tli_lop *v[];
} lgroup;

static void
lgroup_reply(tli_req *q, int err, tlp_r *r)
{
	lgroup *g = (lgroup *) q;
	tl_client *c = q->c;
	tlp_result *res = NULL;
	size_t n = 0;

	if (err == TL_OK && (err = tlp_dec_results(r, &res, &n)) == TL_OK &&
	    n != g->n) {
		err = TL_EPROTO;
	}
	pthread_mutex_lock(&c->mtx);
	for (size_t i = 0; i < g->n; i++) {
		tli_lop *op = g->v[i];
		int e = err != TL_OK ? err : res[i].err;
		if (e == TL_OK) {
			op->lease->version = res[i].version;
			if (g->kind == TLI_LOP_EXTEND) {
				op->lease->until = res[i].ts;
			}
		}
		lop_done_locked(c, op, e);
	}
	pthread_mutex_unlock(&c->mtx);
	tli_free(res);
	tli_free(g);
}

/* Under the lock: one frame for up to TL_MAX_BATCH pending ops of a kind. */
static void
lgroup_send(tl_client *c, tl_consumer *k, int kind)
{
	size_t n = 0;
	tli_lop *op;
	lgroup *g;
	tlp_item *items;
	tlp_batch bt;

	TLI_ASSERT_LOCKED(&c->mtx);
	tlp_w w;

	for (op = k->pend[kind]; op != NULL && n < TL_MAX_BATCH;
	     op = op->next) {
		n++;
	}
	g = tli_zalloc(sizeof(*g) + sizeof(tli_lop *) * n);
	items = tli_zalloc(sizeof(*items) * (n + 1));
	if (g == NULL || items == NULL) {
		tli_free(g);
		tli_free(items);
		while (n-- > 0) {
			op = k->pend[kind];
			k->pend[kind] = op->next;
			lop_done_locked(c, op, TL_ENOMEM);
		}
		goto fixtail;
	}
	g->kind = kind;
	g->n = n;
	for (size_t i = 0; i < n; i++) {
		op = k->pend[kind];
		k->pend[kind] = op->next;
		op->next = NULL;
		g->v[i] = op;
		items[i].id.p = op->lease->id;
		items[i].id.n = op->lease->id_len;
		items[i].version = op->lease->version;
		items[i].ts = op->ts;
		items[i].rel = op->rel;
	}
	bt.topic = TLP_STR(k->topic);
	bt.who = TLP_STR(k->id);
	bt.items = items;
	bt.n = n;
	g->q.op = lop_ops[kind];
	g->q.on_reply = lgroup_reply;
	tli_frame_start(&g->q.frame, &w, lop_ops[kind]);
	tlp_enc_batch(&w, &bt);
	tli_free(items);
	if (tli_submit_locked(c, &g->q) != TL_OK) {
		for (size_t i = 0; i < n; i++) {
			lop_done_locked(c, g->v[i], TL_ENOMEM);
		}
		tli_free(g);
	}
fixtail:
	if (k->pend[kind] == NULL) {
		k->pend_tail[kind] = NULL;
	}
}

void
tli_consumer_flush(tl_client *c)
{
	while (c->dirty != NULL) {
		tl_consumer *k = c->dirty;
		c->dirty = k->dnext;
		k->dnext = NULL;
		k->dirty = false;
		for (int i = 0; i < TLI_LOP_N; i++) {
			while (k->pend[i] != NULL) {
				lgroup_send(c, k, i);
			}
		}
	}
}

/* Check the handle and fill op; the client is returned in *cp (the
 * consumer is looked up under its lock: lop_queue_lease). */
static int
lop_init(
    tl_lease *l, int kind, int64_t ts, bool rel, tli_lop *op, tl_client **cp)
{
	if (l == NULL || (kind == TLI_LOP_EXTEND && ts <= 0) ||
	    (kind == TLI_LOP_RELEASE && rel && ts < 0)) {
		return TL_EINVAL;
	}
	if (l->cons == NULL) {
		return TL_ECLOSED;
	}
	op->lease = l;
	op->ts = ts;
	op->rel = rel;
	op->deadline = tli_mono_ms() + l->client->opts.timeout_ms;
	*cp = l->client;
	return TL_OK;
}

/* Under c->mtx: append op to its consumer's pending list of its kind for
 * the send thread; from here on lop_done_locked completes it once. */
static int
lop_queue_locked(tl_client *c, tl_consumer *k, int kind, tli_lop *op)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	TLI_ASSERT(kind >= 0 && kind < TLI_LOP_N && !op->finished);
	if (c->closing || k->closing) {
		return TL_ECLOSED;
	}
	if (c->state != TLI_UP && !tli_client_failover(c)) {
		return TL_ECONN;
	}
	op->next = NULL;
	if (k->pend_tail[kind] != NULL) {
		k->pend_tail[kind]->next = op;
	} else {
		k->pend[kind] = op;
	}
	k->pend_tail[kind] = op;
	if (!k->dirty) {
		k->dirty = true;
		k->dnext = c->dirty;
		c->dirty = k;
	}
	pthread_cond_broadcast(&c->cv);
	return TL_OK;
}

/* Queue op for l's consumer, unless it closed meanwhile. */
static int
lop_queue_lease(tl_client *c, tl_lease *l, int kind, tli_lop *op)
{
	tl_consumer *k = l->cons;

	TLI_ASSERT_LOCKED(&c->mtx);
	return k != NULL ? lop_queue_locked(c, k, kind, op) : TL_ECLOSED;
}

/* The blocking calls: the asynchronous path with the caller asleep on its
 * own condition variable instead of a callback. They do not go through
 * the callback thread: that would add a thread hop to every call, and a
 * blocking lease op made from a tl_done_fn (on that thread) would wait
 * for itself. */
static int
lease_op_wait(tl_lease *l, int kind, int64_t ts, bool rel)
{
	tl_client *c;
	tli_lop op;
	int rv;

	memset(&op, 0, sizeof(op));
	if ((rv = lop_init(l, kind, ts, rel, &op, &c)) != TL_OK ||
	    (rv = tli_may_block(c)) != TL_OK) {
		return rv;
	}
	pthread_cond_init(&op.cv, NULL);
	pthread_mutex_lock(&c->mtx);
	if ((rv = lop_queue_lease(c, l, kind, &op)) == TL_OK) {
		while (!op.finished) {
			pthread_cond_wait(&op.cv, &c->mtx);
		}
		rv = op.err;
	}
	pthread_mutex_unlock(&c->mtx);
	pthread_cond_destroy(&op.cv);
	return rv;
}

static int
lease_op_async(
    tl_lease *l, int kind, int64_t ts, bool rel, tl_done_fn done, void *arg)
{
	tl_client *c;
	tli_lop *op;
	int rv;

	if (done == NULL) {
		return TL_EINVAL;
	}
	if ((op = tli_zalloc(sizeof(*op))) == NULL) {
		return TL_ENOMEM;
	}
	if ((rv = lop_init(l, kind, ts, rel, op, &c)) != TL_OK) {
		goto fail;
	}
	op->done = done;
	op->arg = arg;
	pthread_mutex_lock(&c->mtx);
	rv = lop_queue_lease(c, l, kind, op);
	pthread_mutex_unlock(&c->mtx);
	if (rv != TL_OK) {
		goto fail;
	}
	return TL_OK;

fail:
	tli_free(op);
	return rv;
}

int
tl_lease_extend(tl_lease *l, int64_t ms)
{
	return lease_op_wait(l, TLI_LOP_EXTEND, ms, true);
}

int
tl_lease_release(tl_lease *l, int64_t ts, bool rel)
{
	return lease_op_wait(l, TLI_LOP_RELEASE, ts, rel);
}

int
tl_lease_delete(tl_lease *l)
{
	return lease_op_wait(l, TLI_LOP_ACK, 0, false);
}

int
tl_lease_extend_async(tl_lease *l, int64_t ms, tl_done_fn done, void *arg)
{
	return lease_op_async(l, TLI_LOP_EXTEND, ms, true, done, arg);
}

int
tl_lease_release_async(
    tl_lease *l, int64_t ts, bool rel, tl_done_fn done, void *arg)
{
	return lease_op_async(l, TLI_LOP_RELEASE, ts, rel, done, arg);
}

int
tl_lease_delete_async(tl_lease *l, tl_done_fn done, void *arg)
{
	return lease_op_async(l, TLI_LOP_ACK, 0, false, done, arg);
}

/* ---- pushes ---- */

static tl_consumer *
consumer_find(tl_client *c, tlp_str topic, tlp_str id)
{
	for (tl_consumer *k = c->consumers; k != NULL; k = k->next) {
		if (!k->closing && !k->lock && strlen(k->topic) == topic.n &&
		    memcmp(k->topic, topic.p, topic.n) == 0 &&
		    strlen(k->id) == id.n && memcmp(k->id, id.p, id.n) == 0) {
			return k;
		}
	}
	return NULL;
}

/* Under the lock: queue l unless the consumer already has this lease. */
static bool
consumer_offer(tl_consumer *k, tl_lease *l)
{
	tl_lease *old = live_find(k, l->id, l->id_len);

	if (old != NULL && old->queued) {
		old->version = l->version;
		old->until = l->until;
		old->deliveries = l->deliveries;
		old->seq = l->seq;
		old->last = l->last;
		old->every = l->every;
		old->start = l->start;
		return false;
	}
	if (old != NULL && old->version == l->version) {
		return false; /* the caller still works on it */
	}
	if (old != NULL && l->due == l->until) {
		/* A lease recovered on a new subscription (its due_ts is its
		 * end) that the caller holds: the same lease. Its version
		 * differs when an operation of the caller's crossed the
		 * broker's read: an older one is stale; a newer one is the
		 * lease as the broker has it now (an extend whose answer was
		 * lost, or is on its way with the same version). */
		if (l->version > old->version) {
			old->version = l->version;
			old->until = l->until;
			old->deliveries = l->deliveries;
		}
		return false;
	}
	live_add(k, l);
	queue_push(k, l);
	return true;
}

/* An inline delivery: on the connection thread, with c->mtx held (released
 * around each call), on_message for every lease queued on k, in order,
 * until none is left or k closes. tl_consumer_close waits until in_cb is
 * false before it lets go of k. */
static void
consumer_run_inline(tl_client *c, tl_consumer *k)
{
	tl_lease *l;

	while (!k->closing && (l = queue_pop(k)) != NULL) {
		k->in_cb = true;
		pthread_mutex_unlock(&c->mtx);
		k->on_message(k->arg, l);
		pthread_mutex_lock(&c->mtx);
		k->in_cb = false;
	}
	if (k->closing) {
		pthread_cond_broadcast(&k->cv); /* a closer waits for in_cb */
	}
}

static void
consumer_deliver(tl_client *c, const tlp_deliver *d)
{
	tl_lease **ls;
	tl_consumer *k;
	size_t dropped = 0;

	if ((ls = tli_zalloc(sizeof(*ls) * (d->n + 1))) == NULL) {
		tli_client_log(c, TL_LOG_ERROR,
		    "out of memory for %zu deliveries; "
		    "their leases will run out",
		    d->n);
		return;
	}
	for (size_t i = 0; i < d->n; i++) {
		ls[i] = tli_lease_new(&d->v[i]);
	}
	pthread_mutex_lock(&c->mtx);
	k = consumer_find(c, d->topic, d->consumer);
	for (size_t i = 0; i < d->n; i++) {
		if (ls[i] != NULL && k != NULL && consumer_offer(k, ls[i])) {
			ls[i] = NULL;
		} else if (ls[i] == NULL || k == NULL) {
			dropped++;
		}
	}
	if (k != NULL && k->inline_delivery) {
		consumer_run_inline(c, k);
	} else if (k != NULL) {
		pthread_cond_broadcast(&k->cv);
	}
	pthread_mutex_unlock(&c->mtx);
	for (size_t i = 0; i < d->n; i++) {
		tli_free(ls[i]);
	}
	tli_free(ls);
	if (dropped > 0) {
		tli_client_log(c, TL_LOG_WARN,
		    "dropped %zu deliveries for %.*s/%.*s", dropped,
		    (int) d->topic.n, d->topic.p, (int) d->consumer.n,
		    d->consumer.p);
	}
}

static void
consumer_lost(tl_client *c, const tlp_deliver *d)
{
	tl_consumer *k;
	tl_lease *gone = NULL;

	pthread_mutex_lock(&c->mtx);
	if ((k = consumer_find(c, d->topic, d->consumer)) != NULL) {
		for (size_t i = 0; i < d->n; i++) {
			tl_lease *l = live_find(k, d->v[i].id.p, d->v[i].id.n);
			k->lost++;
			if (l != NULL && l->queued &&
			    (d->v[i].version == 0 ||
			        l->version <= d->v[i].version)) {
				queue_remove(k, l);
				live_remove(k, l);
				l->qnext = gone;
				gone = l;
			}
		}
	}
	pthread_mutex_unlock(&c->mtx);
	tli_consumer_free_leases(gone);
}

void
tli_consumer_push(tl_client *c, uint8_t op, const uint8_t *body, size_t len)
{
	tlp_deliver d;
	tlp_r r;
	int rv;

	if (op != TLP_OP_DELIVER && op != TLP_OP_LEASE_LOST) {
		tli_client_log(c, TL_LOG_DEBUG, "ignored push op %d", op);
		return;
	}
	tlp_r_init(&r, body, len);
	if ((rv = tlp_dec_deliver(&r, &d)) != TL_OK) {
		tli_client_log(c, TL_LOG_ERROR, "a %s push did not decode: %s",
		    tlp_op_name(op), tl_strerror(rv));
		return;
	}
	if (op == TLP_OP_DELIVER) {
		consumer_deliver(c, &d);
	} else {
		consumer_lost(c, &d);
	}
	tlp_deliver_fini(&d);
}

/* ---- subscribe ---- */

int
tli_sub_encode(tli_buf *b, uint8_t op, const tl_consumer *k)
{
	tlp_w w;
	tlp_sub s;

	memset(&s, 0, sizeof(s));
	s.topic = TLP_STR(k->topic);
	s.consumer = TLP_STR(k->id);
	if (op == TLP_OP_SUBSCRIBE) {
		s.lease_ms = k->lease_ms;
		s.credit = k->credit;
	}
	tli_frame_start(b, &w, op);
	tlp_enc_sub(&w, &s);
	return b->oom ? TL_ENOMEM : TL_OK;
}

typedef struct resub {
	tli_req q;
	char what[2 * TL_MAX_NAME_LEN + 2];
} resub;

static void
resub_reply(tli_req *q, int err, tlp_r *r)
{
	resub *s = (resub *) q;

	if (err == TL_ENOTLEADER) {
		/* the client moves to the leader and subscribes there */
		tli_client_log(q->c, TL_LOG_INFO,
		    "re-subscribing %s: not the leader", s->what);
	} else if (err != TL_OK) {
		tli_client_log(q->c, TL_LOG_ERROR,
		    "re-subscribing %s failed: %s", s->what, tl_strerror(err));
	}
	tli_free(s);
}

tl_lease *
tli_consumer_session_lost(tl_client *c)
{
	tl_lease *out = NULL;

	TLI_ASSERT_LOCKED(&c->mtx);
	for (tl_consumer *k = c->consumers; k != NULL; k = k->next) {
		if (!k->lock) {
			out = queue_drain(k, out);
		}
	}
	return out;
}

void
tli_consumer_resubscribe(tl_client *c)
{
	for (tl_consumer *k = c->consumers; k != NULL; k = k->next) {
		resub *s;
		/* an opening consumer's own SUBSCRIBE is sent again by the
		 * client when it was not answered: once is enough (a second
		 * one would take the first one's leases over) */
		if (k->closing || k->lock || k->opening ||
		    (s = tli_zalloc(sizeof(*s))) == NULL) {
			continue;
		}
		snprintf(s->what, sizeof(s->what), "%s/%s", k->topic, k->id);
		s->q.op = TLP_OP_SUBSCRIBE;
		s->q.on_reply = resub_reply;
		s->q.no_park = true;
		tli_sub_encode(&s->q.frame, TLP_OP_SUBSCRIBE, k);
		if (tli_submit_locked(c, &s->q) != TL_OK) {
			tli_free(s);
		}
	}
}

/* ---- consumer lifecycle ---- */

static void *
consumer_main(void *arg)
{
	tl_consumer *k = arg;
	tl_client *c = k->client;

	pthread_mutex_lock(&c->mtx);
	for (;;) {
		tl_lease *l;
		while (k->qhead == NULL && !k->closing) {
			pthread_cond_wait(&k->cv, &c->mtx);
		}
		if (k->closing) {
			break;
		}
		l = queue_pop(k);
		pthread_mutex_unlock(&c->mtx);
		k->on_message(k->arg, l);
		pthread_mutex_lock(&c->mtx);
	}
	pthread_mutex_unlock(&c->mtx);
	return NULL;
}

static void
consumer_unlink(tl_client *c, tl_consumer *k)
{
	for (tl_consumer **pp = &c->consumers; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	}
	if (k->dirty) {
		dirty_remove(c, k);
	}
}

void
tli_consumer_detach(tl_client *c, tl_consumer *k, tli_lop **failed)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	consumer_unlink(c, k);
	for (int i = 0; i < TLI_LOP_N; i++) {
		while (k->pend[i] != NULL) {
			tli_lop *op = k->pend[i];
			k->pend[i] = op->next;
			op->next = *failed;
			*failed = op;
		}
		k->pend_tail[i] = NULL;
	}
}

void
tli_consumer_free(tl_consumer *k)
{
	pthread_cond_destroy(&k->cv);
	tli_htab_fini(&k->lht);
	tli_free(k->topic);
	tli_free(k->id);
	tli_free(k);
}

static int
consumer_conf_check(const tl_consumer_conf *conf)
{
	int rv;

	if (conf->topic == NULL || conf->lease_ms < 0 ||
	    (conf->inline_delivery && conf->on_message == NULL)) {
		return TL_EINVAL;
	}
	if ((rv = tli_len_check(strlen(conf->topic), TL_MAX_NAME_LEN)) !=
	    TL_OK) {
		return rv;
	}
	if (conf->consumer_id != NULL &&
	    (rv = tli_len_check(strlen(conf->consumer_id), TL_MAX_NAME_LEN)) !=
	        TL_OK) {
		return rv;
	}
	if (conf->lease_ms > TL_MAX_LEASE_MS) {
		return TL_ELEASELIMIT;
	}
	return TL_OK;
}

static char *
consumer_make_id(void)
{
	char buf[48];
	uint64_t x =
	    (uint64_t) tli_mono_ns() ^ ((uint64_t) tli_wall_ms() << 20);

	x ^= (uint64_t) (uintptr_t) buf;
	x *= UINT64_C(0x9E3779B97F4A7C15);
	snprintf(buf, sizeof(buf), "consumer-%016llx", (unsigned long long) x);
	return tli_strndup(buf, strlen(buf));
}

int
tl_consumer_open(tl_consumer **out, tl_client *c, const tl_consumer_conf *conf)
{
	tl_consumer *k;
	tli_buf b;
	pthread_condattr_t a;
	int rv;

	if (out == NULL || c == NULL || conf == NULL) {
		return TL_EINVAL;
	}
	if ((rv = consumer_conf_check(conf)) != TL_OK ||
	    (rv = tli_may_block(c)) != TL_OK) {
		return rv;
	}
	if ((k = tli_zalloc(sizeof(*k))) == NULL) {
		return TL_ENOMEM;
	}
	k->client = c;
	k->topic = tli_strndup(conf->topic, strlen(conf->topic));
	k->id = conf->consumer_id != NULL
	    ? tli_strndup(conf->consumer_id, strlen(conf->consumer_id))
	    : consumer_make_id();
	k->lease_ms = conf->lease_ms;
	k->credit = conf->credit == 0 ? 1 : conf->credit;
	k->on_message = conf->on_message;
	k->arg = conf->arg;
	k->inline_delivery = conf->inline_delivery;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cv, &a);
	pthread_condattr_destroy(&a);
	tli_htab_init(&k->lht);
	if (k->topic == NULL || k->id == NULL ||
	    tli_htab_reserve(&k->lht, 64) != TL_OK) {
		tli_consumer_free(k);
		return TL_ENOMEM;
	}
	/* Linked before SUBSCRIBE: deliveries may overtake its reply. */
	pthread_mutex_lock(&c->mtx);
	k->next = c->consumers;
	c->consumers = k;
	k->opening = true;
	pthread_mutex_unlock(&c->mtx);
	if ((rv = tli_sub_encode(&b, TLP_OP_SUBSCRIBE, k)) == TL_OK) {
		rv = tli_call(c, &b, TLP_OP_SUBSCRIBE, NULL, NULL);
	}
	tli_buf_fini(&b);
	pthread_mutex_lock(&c->mtx);
	k->opening = false;
	pthread_mutex_unlock(&c->mtx);
	if (rv == TL_OK && k->on_message != NULL && !k->inline_delivery) {
		if (pthread_create(&k->thr, NULL, consumer_main, k) != 0) {
			rv = TL_ENOMEM;
		} else {
			k->has_thr = true;
		}
	}
	if (rv != TL_OK) {
		tl_lease *q;
		pthread_mutex_lock(&c->mtx);
		consumer_unlink(c, k);
		q = queue_drain(k, NULL);
		pthread_mutex_unlock(&c->mtx);
		tli_consumer_free_leases(q);
		tli_consumer_free(k);
		return rv;
	}
	*out = k;
	return TL_OK;
}

int
tl_consumer_poll(
    tl_consumer *k, tl_lease **out, size_t max, size_t *n, int timeout_ms)
{
	tl_client *c;
	int64_t deadline;
	size_t got = 0;
	int rv = TL_OK;

	if (k == NULL || out == NULL || n == NULL || max == 0) {
		return TL_EINVAL;
	}
	if (k->on_message != NULL) {
		return TL_EINVAL;
	}
	c = k->client;
	if (timeout_ms != 0 && (rv = tli_may_block(c)) != TL_OK) {
		return rv;
	}
	deadline = tli_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	pthread_mutex_lock(&c->mtx);
	while (k->qhead == NULL && !k->closing && timeout_ms != 0) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&k->cv, &c->mtx);
			continue;
		}
		if (tli_mono_ms() >= deadline) {
			break;
		}
		struct timespec ts = {
		    deadline / 1000, (long) (deadline % 1000) * 1000000L};
		pthread_cond_timedwait(&k->cv, &c->mtx, &ts);
	}
	if (k->closing) {
		rv = TL_ECLOSED;
	} else {
		while (got < max && k->qhead != NULL) {
			out[got++] = queue_pop(k);
		}
	}
	pthread_mutex_unlock(&c->mtx);
	if (rv == TL_OK) {
		*n = got;
	}
	return rv;
}

uint64_t
tl_consumer_lost(tl_consumer *k)
{
	uint64_t v;

	if (k == NULL) {
		return 0;
	}
	pthread_mutex_lock(&k->client->mtx);
	v = k->lost;
	pthread_mutex_unlock(&k->client->mtx);
	return v;
}

void
tl_consumer_close(tl_consumer *k)
{
	tl_client *c;
	tli_buf b;
	tli_lop *lops = NULL;
	tl_lease *queued = NULL, *l;

	if (k == NULL) {
		return;
	}
	c = k->client;
	if (tli_may_block(c) != TL_OK) {
		return; /* from its own inline callback: it would wait for
		         * itself (logged) */
	}
	pthread_mutex_lock(&c->mtx);
	k->closing = true;
	pthread_cond_broadcast(&k->cv);
	while (k->in_cb) {
		pthread_cond_wait(&k->cv, &c->mtx);
	}
	pthread_mutex_unlock(&c->mtx);
	if (k->has_thr) {
		pthread_join(k->thr, NULL);
	}
	if (tli_sub_encode(&b, TLP_OP_UNSUBSCRIBE, k) == TL_OK) {
		(void) tli_call(c, &b, TLP_OP_UNSUBSCRIBE, NULL, NULL);
	}
	tli_buf_fini(&b);
	pthread_mutex_lock(&c->mtx);
	tli_consumer_detach(c, k, &lops);
	queued = queue_drain(k, NULL);
	while ((l = k->live) != NULL) {
		live_remove(k, l);
		l->cons = NULL;
	}
	pthread_mutex_unlock(&c->mtx);
	tli_lops_finish(c, lops, TL_ECLOSED);
	tli_consumer_free_leases(queued);
	tli_consumer_free(k);
}
