/*
 * The dispatcher: for every topic with subscribers it keeps a near-future
 * window of due entries in memory, takes leases for due messages through
 * the store and pushes them to consumers that have credit, tracks the
 * leases it handed out (credit comes back when an ack or release arrives,
 * or on expiry) and tells consumers which leases they lost.
 *
 * DESIGN. Per topic, each bucket has a cursor (ts, id): every timeline
 * entry at or before the cursor has been loaded into the topic's min-heaps
 * (due entries and lease ends; or was loaded and handled). The frontier is the
 * smallest cursor over the buckets; only entries at or before the frontier may
 * be popped, so buckets are merged in timeline order. Loading is lazy: a bucket
 * is read in chunks only while the frontier is behind the next due entry and
 * within now + window, so memory holds at most the window's entries plus
 * a chunk per bucket, never the backlog. A create, move, release or lease
 * that lands at or before a bucket's cursor is put straight into the heap
 * (tlb_dsp_note); one after it will be found by a later read. Entries in
 * the heap may be stale (the message changed since): the lease, fenced by
 * version, fails and the entry is dropped.
 *
 * The thread sleeps until the earliest of: the next due entry, the next
 * lease expiry, a refill of the window; a note, an ack or a new
 * subscription wakes it. Leases are taken durably (group
 * commit) before anything is pushed.
 *
 * LEASES AHEAD. An entry is popped lease_ahead_ms before it is due; its
 * lease is taken for its due time (tli_op.at: the lease runs from then)
 * and, once durable, the message is parked until that instant and pushed
 * by the push thread (push_main) when the µs clock reaches it. So an fsync
 * shorter than the lead adds nothing to the delivery's lateness. A message
 * whose lease became durable after its due time is pushed at once. The store
 * keeps the due time with the lease, so a consumer that returns (or a restarted
 * broker) parks its recovered leases the same way: never pushed early. Lock:
 * dsp->mtx, before any session's lock; bodies are read from the store without
 * it, and the pushes' frames are sent after it (outbox).
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "broker.h"
#include "clock.h"
#include "dispatch.h"
#include "htab.h"
#include "server.h"

#define CHUNK 256     /* entries read per bucket refill */
#define MAX_PASS 4096 /* leases taken per dispatcher pass */
/* A DELIVER frame is cut at about this many bytes of bodies, so that
 * credit x max_body never exceeds the frame limit (TLP_MAX_FRAME). */
#define PUSH_BUDGET (8u << 20)
#define LOST_MAX 64 /* LEASE_LOST notices per frame */

typedef struct went {
	int64_t ts;
	uint64_t version;
	uint32_t bucket;
	bool locked; /* a lease's end: leased again only once it is due */
	uint8_t id_len;
	char id[];
} went;

/* A min-heap of entries in timeline order. */
typedef struct wheap {
	went **v;
	size_t n;
	size_t cap;
} wheap;

typedef struct held {
	tli_hnode hn; /* in dsub.held, by id */
	int64_t until;
	uint64_t version;
	bool returned; /* its credit came back when its ACK/RELEASE arrived */
	uint8_t id_len;
	char id[TL_MAX_ID_LEN];
} held;

typedef struct dsub {
	struct dsub *next;
	int refs;
	bool gone;
	tlb_session *s;
	char consumer[TL_MAX_NAME_LEN + 1];
	size_t clen;
	int64_t lease_ms;
	uint32_t credit;
	uint32_t inflight; /* held (not returned) + leases being taken */
	uint32_t returned; /* held leases whose credit came back already */
	tli_htab held;     /* held leases by id */
	int64_t min_until; /* no held lease runs out before this */
	uint64_t delivered;
} dsub;

typedef struct dcur {
	int64_t ts; /* TL_TS_MIN - 1: nothing loaded yet */
	bool maxid; /* everything at ts is loaded */
	uint8_t id_len;
	char id[TL_MAX_ID_LEN];
} dcur;

/* A message leased ahead of its due time, waiting for it. */
typedef struct parked {
	int64_t due; /* ms: pushed when the µs clock reaches due * 1000 */
	dsub *d;     /* a reference */
	tli_msg m;   /* id, owner, body */
	uint64_t version;
	int64_t until;
	uint32_t deliveries;
} parked;

typedef struct dtopic {
	struct dtopic *next;
	char name[TL_MAX_NAME_LEN + 1];
	uint32_t buckets;
	int64_t default_lease_ms;
	int64_t max_lease_ms;
	/* The loaded entries: due ones are leased lease_ahead_ms before
	 * their time; lease ends (locked) only at it, since their holder may
	 * still act until then. */
	wheap due;
	wheap ends;
	dcur *cur;
	dsub *subs;
	dsub *rr;
	/* A bucket read in progress (outside the lock): entries offered to
	 * that bucket past its cursor wait in pending and are offered again
	 * against the cursor the read leaves behind. */
	bool scanning;
	uint32_t scan_bucket;
	went **pending;
	size_t npending;
	size_t pcap;
	uint64_t gen; /* bumped by topic_reset */
	bool dead;    /* unlinked while scanning: freed after the read */
	/* Parked pushes by due time: pk[pk_head .. pk_n) (parked_add). */
	parked **pk;
	size_t pk_head;
	size_t pk_n;
	size_t pk_cap;
} dtopic;

struct tlb_dsp {
	tlb_broker *b;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	pthread_t th;
	bool stop;
	bool kick;
	/* The push thread: parked messages at their due time (push_main). */
	pthread_cond_t pcv;
	pthread_t pth;
	int64_t pwake_us; /* it sleeps until then (µs; INT64_MAX: no end) */
	int64_t plead_us; /* and wakes this much before it (push_wait) */
	dtopic *topics;
	/* Leases taken by LOCK, by topic and id (dlock): a subscription of
	 * the same consumer id does not get them pushed on SUBSCRIBE. */
	tli_htab locks;
	size_t prune_at; /* drop run-out entries past this many */
};

/* A lease taken by LOCK for consumer, at this version. */
typedef struct dlock {
	tli_hnode hn;
	int64_t until;
	uint64_t version;
	char consumer[TL_MAX_NAME_LEN + 1];
	size_t clen;
	size_t klen; /* key: topic, NUL, id */
	char key[];
} dlock;

/* A lease being taken for a subscription. */
typedef struct litem {
	dsub *sub;
	went *e;
	tli_msg m;
} litem;

typedef struct lbatch {
	tlb_broker *b;
	char topic[TL_MAX_NAME_LEN + 1];
	size_t n;
	litem *it;
	int *rv; /* per item: the read's result */
	tli_op *ops;
	int64_t asked; /* ms: the pass that took it */
} lbatch;

/* ---- ordering ---- */

static int
id_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c != 0) {
		return c;
	}
	return al < bl ? -1 : al > bl ? 1 : 0;
}

/* Timeline order: by due time, then by id across the buckets (an id is in
 * one bucket), so messages due at the same millisecond go in the order of
 * their ids: for generated ids, the order they were created in. Their
 * records, keyed by id, are then read in key order (a burst due at once
 * reads each table block once, not once per bucket). */
static bool
went_less(const went *a, const went *b)
{
	if (a->ts != b->ts) {
		return a->ts < b->ts;
	}
	return id_cmp(a->id, a->id_len, b->id, b->id_len) < 0;
}

/* Is (ts, id) at or before the cursor? */
static bool
at_or_before(const dcur *c, int64_t ts, const char *id, size_t idl)
{
	if (ts != c->ts) {
		return ts < c->ts;
	}
	return c->maxid || id_cmp(id, idl, c->id, c->id_len) <= 0;
}

static int64_t
cur_frontier(const dcur *c)
{
	return c->maxid ? c->ts : c->ts - 1;
}

/* ---- the heap ---- */

/* An array of *cap elements of esz bytes at v, doubled (first when
 * empty): the new array (*cap updated), or NULL with v and *cap as they
 * were. */
static void *
grow(void *v, size_t *cap, size_t esz, size_t first)
{
	size_t c = *cap ? *cap * 2 : first;
	void *p = tli_realloc(v, c * esz);

	if (p != NULL) {
		*cap = c;
	}
	return p;
}

static int
heap_push(wheap *h, went *e)
{
	size_t i;

	if (h->n == h->cap) {
		went **v = grow(h->v, &h->cap, sizeof(*v), 256);
		if (v == NULL) {
			return TL_ENOMEM;
		}
		h->v = v;
	}
	i = h->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!went_less(e, h->v[p])) {
			break;
		}
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = e;
	return TL_OK;
}

static went *
heap_pop(wheap *h)
{
	went *top, *last;
	size_t i = 0;

	TLI_ASSERT(h->n > 0);
	top = h->v[0];
	last = h->v[--h->n];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < h->n && went_less(h->v[l], last)) {
			m = l;
		}
		if (l + 1 < h->n &&
		    went_less(h->v[l + 1], m == i ? last : h->v[l])) {
			m = l + 1;
		}
		if (m == i) {
			break;
		}
		h->v[i] = h->v[m];
		i = m;
	}
	if (h->n > 0) {
		h->v[i] = last;
	}
	return top;
}

static went *
heap_top(const wheap *h)
{
	return h->n > 0 ? h->v[0] : NULL;
}

static void
heap_clear(wheap *h)
{
	while (h->n > 0) {
		tli_free(heap_pop(h));
	}
}

static went *
went_new(int64_t ts, uint64_t version, uint32_t bucket, bool locked,
    const char *id, size_t idl)
{
	went *e = tli_alloc(sizeof(*e) + idl);

	if (e != NULL) {
		e->ts = ts;
		e->version = version;
		e->bucket = bucket;
		e->locked = locked;
		e->id_len = (uint8_t) idl;
		memcpy(e->id, id, idl);
	}
	return e;
}

/* ---- held leases ---- */

static bool
held_is(const tli_hnode *n, const void *key)
{
	const held *h = TLI_CONTAINER(n, held, hn);
	const tlp_str *id = key;

	return h->id_len == id->n && memcmp(h->id, id->p, id->n) == 0;
}

static held *
held_find(dsub *d, const char *id, size_t idl)
{
	tlp_str key = {id, idl};
	tli_hnode *n =
	    tli_htab_find(&d->held, tli_hash64(id, idl), held_is, &key);

	return n != NULL ? TLI_CONTAINER(n, held, hn) : NULL;
}

/* Note that d holds id's lease (version, until); h: its entry if the
 * caller found one already, else NULL. */
static void
held_set(dsub *d, held *h, const char *id, size_t idl, uint64_t version,
    int64_t until)
{
	if (h == NULL) {
		if ((h = tli_alloc(sizeof(*h))) == NULL) {
			return;
		}
		h->id_len = (uint8_t) idl;
		memcpy(h->id, id, idl);
		h->returned = false;
		/* Cannot fail: the table has slots since the subscribe. */
		tli_htab_insert(&d->held, &h->hn, tli_hash64(id, idl));
	}
	if (h->returned) {
		/* A new lease of the id (its credit taken when it was
		 * asked for) replaces one whose credit came back. */
		h->returned = false;
		d->returned--;
	}
	h->version = version;
	h->until = until;
	if (until < d->min_until) {
		d->min_until = until;
	}
}

static void
held_put(dsub *d, const char *id, size_t idl, uint64_t version, int64_t until)
{
	held_set(d, held_find(d, id, idl), id, idl, version, until);
}

static void sub_took_back(dsub *d);

static void
held_remove(dsub *d, held *h)
{
	if (h->returned) {
		d->returned--;
	}
	tli_htab_remove(&d->held, &h->hn);
	tli_free(h);
}

/* A held lease ended: forgotten, and its credit is free again unless it
 * came back already (when its ACK or RELEASE arrived). */
static void
held_end(dsub *d, held *h)
{
	bool returned = h->returned;

	held_remove(d, h);
	if (!returned) {
		sub_took_back(d);
	}
}

/* ---- leases taken by LOCK ---- */

typedef struct lock_key {
	const char *p;
	size_t n;
} lock_key;

static bool
dlock_is(const tli_hnode *n, const void *key)
{
	const dlock *k = TLI_CONTAINER(n, dlock, hn);
	const lock_key *x = key;

	return k->klen == x->n && memcmp(k->key, x->p, x->n) == 0;
}

/* The key "topic\0id" in buf (TL_MAX_NAME_LEN + 1 + TL_MAX_ID_LEN). */
static lock_key
dlock_key(char *buf, const char *topic, const char *id, size_t idl)
{
	size_t tl = strlen(topic);

	memcpy(buf, topic, tl + 1);
	memcpy(buf + tl + 1, id, idl);
	return (lock_key){buf, tl + 1 + idl};
}

static dlock *
dlock_find(tlb_dsp *p, const char *topic, const char *id, size_t idl)
{
	char buf[TL_MAX_NAME_LEN + 1 + TL_MAX_ID_LEN];
	lock_key k = dlock_key(buf, topic, id, idl);
	tli_hnode *n =
	    tli_htab_find(&p->locks, tli_hash64(k.p, k.n), dlock_is, &k);

	return n != NULL ? TLI_CONTAINER(n, dlock, hn) : NULL;
}

static void
dlock_remove(tlb_dsp *p, dlock *k)
{
	tli_htab_remove(&p->locks, &k->hn);
	tli_free(k);
}

/* Forget the entries whose lease ran out (all of them with all set). */
static void
dlock_prune(tlb_dsp *p, int64_t now, bool all)
{
	tli_htab_iter it;
	tli_hnode *n, *nx;

	for (n = tli_htab_first(&p->locks, &it); n != NULL; n = nx) {
		dlock *k = TLI_CONTAINER(n, dlock, hn);
		nx = tli_htab_next(&p->locks, &it, n);
		if (all || k->until <= now) {
			dlock_remove(p, k);
		}
	}
	p->prune_at = 2 * p->locks.n + 256;
}

/* Whether (topic, id) at version is a LOCK lease of consumer. */
static bool
dlock_held(tlb_dsp *p, const char *topic, const char *id, size_t idl,
    const char *consumer, size_t clen, uint64_t version)
{
	dlock *k = dlock_find(p, topic, id, idl);

	return k != NULL && k->version == version && k->clen == clen &&
	    memcmp(k->consumer, consumer, clen) == 0;
}

void
tlb_dsp_lock_taken(tlb_broker *b, const char *topic, const char *consumer,
    size_t clen, const char *id, size_t idl, uint64_t version, int64_t until)
{
	tlb_dsp *p = b->dsp;
	dlock *k;

	if (p == NULL || clen > TL_MAX_NAME_LEN || idl > TL_MAX_ID_LEN) {
		return;
	}
	pthread_mutex_lock(&p->mtx);
	if ((k = dlock_find(p, topic, id, idl)) == NULL) {
		char buf[TL_MAX_NAME_LEN + 1 + TL_MAX_ID_LEN];
		lock_key key = dlock_key(buf, topic, id, idl);
		if (p->locks.n >= p->prune_at) {
			dlock_prune(p, tlb_clock_now(NULL), false);
		}
		if ((k = tli_alloc(sizeof(*k) + key.n)) == NULL ||
		    tli_htab_insert(
		        &p->locks, &k->hn, tli_hash64(key.p, key.n)) != TL_OK) {
			/* Without memory the lease may be pushed again to
			 * a subscription of its own consumer id. */
			tli_free(k);
			pthread_mutex_unlock(&p->mtx);
			return;
		}
		k->klen = key.n;
		memcpy(k->key, key.p, key.n);
	}
	k->version = version;
	k->until = until;
	memcpy(k->consumer, consumer, clen);
	k->clen = clen;
	pthread_mutex_unlock(&p->mtx);
}

/* ---- subscriptions ---- */

/* A lease of d ended or was never taken: its credit is free again.
 * inflight counts the held leases and those being taken, so it is never
 * below the held count. */
static void
sub_took_back(dsub *d)
{
	TLI_ASSERT(d->inflight > 0);
	d->inflight--;
	TLI_ASSERT(d->held.n - d->returned <= d->inflight);
}

static void
dsub_rele(dsub *d)
{
	tli_htab_iter it;
	tli_hnode *n, *nx;

	TLI_ASSERT(d->refs > 0);
	if (--d->refs > 0) {
		return;
	}
	for (n = tli_htab_first(&d->held, &it); n != NULL; n = nx) {
		nx = tli_htab_next(&d->held, &it, n);
		held_remove(d, TLI_CONTAINER(n, held, hn));
	}
	tli_htab_fini(&d->held);
	tlb_session_rele(d->s);
	tli_free(d);
}

static void
parked_free(parked *k)
{
	dsub_rele(k->d);
	tli_msg_fini(&k->m);
	tli_free(k);
}

/* Forget every parked push (no subscription is left to take them): their
 * leases run out, or come back to a returning consumer. */
static void
parked_drop_all(dtopic *t)
{
	for (size_t i = t->pk_head; i < t->pk_n; i++) {
		parked_free(t->pk[i]);
	}
	t->pk_head = t->pk_n = 0;
}

/* Park k in due order. Entries come nearly in order (leases are taken in
 * timeline order), so the place is found from the end. */
static bool
parked_add(dtopic *t, parked *k)
{
	size_t j;

	if (t->pk_n == t->pk_cap && t->pk_head > 0) {
		memmove(t->pk, t->pk + t->pk_head,
		    (t->pk_n - t->pk_head) * sizeof(*t->pk));
		t->pk_n -= t->pk_head;
		t->pk_head = 0;
	}
	if (t->pk_n == t->pk_cap) {
		parked **np = grow(t->pk, &t->pk_cap, sizeof(*np), 256);
		if (np == NULL) {
			return false;
		}
		t->pk = np;
	}
	for (j = t->pk_n; j > t->pk_head && t->pk[j - 1]->due > k->due; j--) {
		t->pk[j] = t->pk[j - 1];
	}
	t->pk[j] = k;
	t->pk_n++;
	return true;
}

static void
topic_reset(dtopic *t)
{
	heap_clear(&t->due);
	heap_clear(&t->ends);
	for (size_t i = 0; i < t->npending; i++) {
		tli_free(t->pending[i]);
	}
	t->npending = 0;
	parked_drop_all(t);
	t->gen++;
	for (uint32_t i = 0; i < t->buckets; i++) {
		t->cur[i].ts = TL_TS_MIN - 1;
		t->cur[i].maxid = true;
	}
}

/* Unlink a subscription (it may live on while leases are being taken). */
static void
sub_remove(dtopic *t, dsub *d)
{
	dsub **pp;

	for (pp = &t->subs; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	}
	if (t->rr == d) {
		t->rr = NULL;
	}
	d->gone = true;
	if (t->subs == NULL) {
		topic_reset(t);
	}
	dsub_rele(d);
}

static dtopic *
topic_find(tlb_dsp *p, const char *name)
{
	TLI_ASSERT_LOCKED(&p->mtx);
	for (dtopic *t = p->topics; t != NULL; t = t->next) {
		if (strcmp(t->name, name) == 0) {
			return t;
		}
	}
	return NULL;
}

static dsub *
sub_find(dtopic *t, const char *consumer, size_t clen)
{
	for (dsub *d = t->subs; d != NULL; d = d->next) {
		if (d->clen == clen &&
		    memcmp(d->consumer, consumer, clen) == 0) {
			return d;
		}
	}
	return NULL;
}

static void
topic_free(dtopic *t)
{
	while (t->subs != NULL) {
		sub_remove(t, t->subs);
	}
	topic_reset(t);
	tli_free(t->due.v);
	tli_free(t->ends.v);
	tli_free(t->pending);
	tli_free(t->pk);
	tli_free(t->cur);
	tli_free(t);
}

/* Offer an entry to the window: into the heap when its bucket is loaded
 * that far, aside while that bucket is being read, else nowhere (a later
 * read finds it). Returns whether it went into the heap. */
static bool
window_offer(dtopic *t, int64_t ts, uint64_t version, uint32_t bucket,
    bool locked, const char *id, size_t idl)
{
	bool in = at_or_before(&t->cur[bucket], ts, id, idl);
	went *e;

	if (!in && !(t->scanning && t->scan_bucket == bucket)) {
		return false;
	}
	if ((e = went_new(ts, version, bucket, locked, id, idl)) == NULL) {
		return false;
	}
	if (in) {
		if (heap_push(locked ? &t->ends : &t->due, e) != TL_OK) {
			tli_free(e);
			return false;
		}
		return true;
	}
	if (t->npending == t->pcap) {
		went **np = grow(t->pending, &t->pcap, sizeof(*np), 64);
		if (np == NULL) {
			tli_free(e);
			return false;
		}
		t->pending = np;
	}
	t->pending[t->npending++] = e;
	return false;
}

/* ---- pushing ---- */

/* A DELIVER entry: message m (id, owner, body) under the lease (version,
 * until), due at due_ts. */
static void
delivery_fill(tlp_delivery *dv, const char *id, size_t idl, const tli_msg *m,
    uint64_t version, int64_t until, int64_t due_ts, uint32_t deliveries)
{
	memset(dv, 0, sizeof(*dv));
	dv->id = (tlp_str){id, idl};
	dv->version = version;
	dv->lease_until = until;
	dv->due_ts = due_ts;
	dv->deliveries = deliveries;
	dv->placed_at = m->sched;
	dv->seq = m->seq;
	dv->every_ms = m->every;
	dv->start = m->start;
	dv->last = m->last;
	dv->owner = (tlp_str){m->owner, m->owner_len};
	dv->body = m->body;
	dv->body_len = m->body_len;
}

static void
enc_deliver(tlp_w *w, const void *arg)
{
	tlp_enc_deliver(w, arg);
}

/* Frames built under the dispatcher's lock and sent after it
 * (outbox_send): starting a send can wait milliseconds for nng's and the
 * kernel's locks of the connection while their holders wait for a CPU
 * (measured: up to 5 ms with both cores busy, at 20 000 pushes a second),
 * and neither the pushes due meanwhile nor the store's completions should
 * wait behind it. */
typedef struct outframe {
	struct outframe *next;
	tlb_session *s; /* held */
	uint8_t *data;
	size_t len;
} outframe;

typedef struct outbox {
	outframe *head;
	outframe **tail;
} outbox;

#define OUTBOX_INIT(ob)          \
	{                        \
		NULL, &(ob).head \
	}

/* Send every frame of ob, in order; no lock held. */
static void
outbox_send(outbox *ob)
{
	outframe *f, *nx;

	for (f = ob->head; f != NULL; f = nx) {
		nx = f->next;
		tlb_session_send(f->s, f->data, f->len);
		tlb_session_rele(f->s);
		tli_free(f->data);
		tli_free(f);
	}
	ob->head = NULL;
	ob->tail = &ob->head;
}

/* One DELIVER or LEASE_LOST frame to a subscription's session: sent now
 * (ob NULL) or queued on ob. */
static void
send_push(tlb_session *s, uint8_t op, const char *topic, const dsub *d,
    tlp_delivery *v, size_t n, outbox *ob)
{
	tlp_deliver dl;
	tli_buf b;
	tlp_w w;
	outframe *f = NULL;
	int rv;

	dl.topic = TLP_STR(topic);
	dl.consumer = (tlp_str){d->consumer, d->clen};
	dl.v = v;
	dl.n = n;
	if (ob == NULL) {
		rv = tlb_session_send_enc(
		    s, op, TLP_F_PUSH, 0, enc_deliver, &dl);
	} else {
		tli_buf_init(&b);
		tlp_frame_begin(&b, &w, op, TLP_F_PUSH, 0);
		enc_deliver(&w, &dl);
		rv = tlp_frame_end(&b, 0);
		if (rv == TL_OK && (f = tli_alloc(sizeof(*f))) == NULL) {
			rv = TL_ENOMEM;
		}
		if (rv == TL_OK) {
			f->data = tli_buf_take(&b, &f->len);
			f->s = s;
			f->next = NULL;
			tlb_session_hold(s);
			*ob->tail = f;
			ob->tail = &f->next;
		}
		tli_buf_fini(&b);
	}
	if (rv != TL_OK) {
		/* The leases stay held and run out: the messages come back. */
		tlb_log(TLB_ERROR, "D002",
		    "consumer %s: a %s frame of %zu messages could not be "
		    "built (out of memory)",
		    d->consumer, tlp_op_name(op), n);
	}
}

/* ---- taking leases ---- */

static void
lbatch_free(lbatch *lb)
{
	for (size_t i = 0; i < lb->n; i++) {
		tli_msg_fini(&lb->it[i].m);
		tli_free(lb->it[i].e);
	}
	tli_free(lb->it);
	tli_free(lb->rv);
	tli_free(lb->ops);
	tli_free(lb);
}

/* DELIVER frames being built: one subscription's at a time, cut at
 * PUSH_BUDGET bytes of bodies. */
typedef struct pusher {
	tlb_broker *b;
	const char *topic;
	dsub *d;
	tlp_delivery *dv; /* room for every message of the round */
	size_t nd;
	size_t bytes;
	int64_t now_us;
	outbox *ob; /* the frames, sent by the caller after the lock */
} pusher;

static void
pusher_flush(pusher *u)
{
	if (u->nd > 0) {
		u->d->delivered += u->nd;
		atomic_fetch_add(&u->b->m.delivered, u->nd);
		send_push(u->d->s, TLP_OP_DELIVER, u->topic, u->d, u->dv, u->nd,
		    u->ob);
	}
	u->nd = 0;
	u->bytes = 0;
}

/* Add message m, leased to d (version, until), due at due_ts. */
static void
pusher_add(pusher *u, dsub *d, const tli_msg *m, uint64_t version,
    int64_t until, int64_t due_ts, uint32_t deliveries)
{
	if (u->d != d || (u->nd > 0 && u->bytes + m->body_len > PUSH_BUDGET)) {
		pusher_flush(u);
		u->d = d;
	}
	u->bytes += m->body_len + m->id_len + 64;
	delivery_fill(&u->dv[u->nd++], m->id, m->id_len, m, version, until,
	    due_ts, deliveries);
	/* To the µs: a ms reading would count most pushes 0 ms late. */
	if (u->now_us < due_ts * 1000) {
		atomic_fetch_add(&u->b->m.early, 1);
	}
	tlb_metrics_lateness(&u->b->m, u->now_us - due_ts * 1000);
}

/* Park message m, leased to d (version, until) ahead of its due time,
 * until then; m moves into it. False when out of memory (m is still the
 * caller's): the caller must not push it early. */
static bool
park(tlb_dsp *p, dtopic *t, dsub *d, tli_msg *m, int64_t due, uint64_t version,
    int64_t until, uint32_t deliveries)
{
	parked *k = tli_alloc(sizeof(*k));

	if (k == NULL) {
		return false;
	}
	k->due = due;
	k->d = d;
	k->m = *m;
	k->version = version;
	k->until = until;
	k->deliveries = deliveries;
	if (!parked_add(t, k)) {
		tli_free(k);
		return false;
	}
	if (due * 1000 < p->pwake_us) {
		/* Sooner than the push thread means to wake. */
		p->pwake_us = due * 1000;
		pthread_cond_signal(&p->pcv);
	}
	d->refs++;
	memset(m, 0, sizeof(*m)); /* owned by k now */
	return true;
}

/* Store completion of a lease batch (its completer thread): push what is due,
 * park what is not yet. */
static void
lease_done(void *arg)
{
	lbatch *lb = arg;
	tlb_broker *b = lb->b;
	tlb_dsp *p = b->dsp;
	dtopic *t;
	outbox ob = OUTBOX_INIT(ob);
	pusher u = {.b = b,
	    .topic = lb->topic,
	    .now_us = tlb_clock_now_us(),
	    .ob = &ob};

	u.dv = tli_zalloc(sizeof(*u.dv) * (lb->n + 1));
	pthread_mutex_lock(&p->mtx);
	t = topic_find(p, lb->topic);
	for (size_t i = 0; i < lb->n; i++) {
		litem *it = &lb->it[i];
		tli_op *o = &lb->ops[i];
		dsub *d = it->sub;
		held *h;

		if (o->err != TL_OK) {
			sub_took_back(d);
			atomic_fetch_add(o->err == TL_EDEAD
			        ? &b->m.dead_lettered
			        : &b->m.lease_fail,
			    1);
			continue;
		}
		atomic_fetch_add(&b->m.leases, 1);
		if (t != NULL && !d->gone) {
			/* The lease's end is the message's new place. */
			window_offer(t, o->new_ts, o->new_version,
			    it->e->bucket, true, it->e->id, it->e->id_len);
		}
		if (d->gone) {
			continue;
		}
		if (u.dv == NULL) {
			/* Cannot push it: the lease runs out and the message
			 * comes back; the credit returns now. */
			sub_took_back(d);
			continue;
		}
		h = held_find(d, it->e->id, it->e->id_len);
		if (h != NULL && h->version >= o->new_version) {
			/* A returning consumer's recovery read this lease
			 * from the store before this completion and pushed
			 * (or parked) it already (and the consumer may have
			 * extended it since): once is enough; the credit it
			 * took returns. */
			sub_took_back(d);
			continue;
		}
		held_set(
		    d, h, it->e->id, it->e->id_len, o->new_version, o->new_ts);
		if (it->e->ts * 1000 > u.now_us && t != NULL &&
		    park(p, t, d, &it->m, it->e->ts, o->new_version, o->new_ts,
		        o->deliveries)) {
			continue;
		}
		if (it->e->ts * 1000 > u.now_us) {
			/* Not parked (out of memory): forget the push; the
			 * lease runs out and the message comes back. */
			continue;
		}
		if (it->e->ts > lb->asked) {
			/* Asked for ahead, durable only after its time. */
			atomic_fetch_add(&b->m.leases_late, 1);
		}
		pusher_add(&u, d, &it->m, o->new_version, o->new_ts, it->e->ts,
		    o->deliveries);
	}
	pusher_flush(&u);
	for (size_t i = 0; i < lb->n; i++) {
		dsub_rele(lb->it[i].sub);
	}
	p->kick = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mtx);
	outbox_send(&ob);
	tli_free(u.dv);
	lbatch_free(lb);
}

static int
parked_cmp(const void *a, const void *b)
{
	const parked *x = *(parked *const *) a, *y = *(parked *const *) b;

	return x->d != y->d ? ((uintptr_t) x->d < (uintptr_t) y->d ? -1 : 1)
	                    : 0;
}

/* Push every parked message of t whose due time has come (one frame per
 * subscription, onto ob); lower *wake (ms) to the next one. */
static void
push_parked(tlb_dsp *p, dtopic *t, int64_t *wake, outbox *ob)
{
	pusher u = {.b = p->b, .topic = t->name, .ob = ob};
	size_t n = 0;
	parked **due;

	TLI_ASSERT_LOCKED(&p->mtx);
	if (t->pk_head == t->pk_n) {
		return;
	}
	u.now_us = tlb_clock_now_us();
	while (t->pk_head + n < t->pk_n &&
	    t->pk[t->pk_head + n]->due * 1000 <= u.now_us) {
		n++;
	}
	if (t->pk_head + n < t->pk_n && t->pk[t->pk_head + n]->due < *wake) {
		*wake = t->pk[t->pk_head + n]->due;
	}
	if (n == 0) {
		return;
	}
	due = t->pk + t->pk_head;
	u.dv = tli_alloc(sizeof(*u.dv) * n);
	qsort(due, n, sizeof(*due), parked_cmp);
	for (size_t i = 0; i < n; i++) {
		parked *k = due[i];
		held *h = held_find(k->d, k->m.id, k->m.id_len);
		/* Gone, or out of memory: the lease runs out (or comes back to
		 * a returning consumer) and the message with it. A lease the
		 * consumer already ended or extended (a recovered one it was
		 * working on) is not pushed again. */
		if (!k->d->gone && u.dv != NULL && h != NULL &&
		    h->version == k->version) {
			pusher_add(&u, k->d, &k->m, k->version, k->until,
			    k->due, k->deliveries);
		}
	}
	pusher_flush(&u);
	for (size_t i = 0; i < n; i++) {
		parked_free(due[i]);
	}
	t->pk_head += n;
	if (t->pk_head == t->pk_n) {
		t->pk_head = t->pk_n = 0;
	}
	tli_free(u.dv);
}

/* Pick the next subscription with free credit, round robin. */
static dsub *
next_sub(dtopic *t)
{
	dsub *start =
	    t->rr != NULL && t->rr->next != NULL ? t->rr->next : t->subs;
	dsub *d = start;

	if (d == NULL) {
		return NULL;
	}
	do {
		if (d->inflight < d->credit) {
			t->rr = d;
			return d;
		}
		d = d->next != NULL ? d->next : t->subs;
	} while (d != start);
	return NULL;
}

/* A bucket read: prepared under the lock, done without it, merged under
 * it again. */
typedef struct refill {
	dtopic *t;
	char topic[TL_MAX_NAME_LEN + 1];
	uint32_t bucket;
	int64_t horizon;
	uint64_t gen;
	tli_cursor after;
	tli_entry *v;
	size_t n;
	bool more;
	int rv;
} refill;

/* Choose the bucket furthest behind and mark it being read. */
static void
refill_prepare(dtopic *t, int64_t horizon, refill *rf)
{
	uint32_t bk = 0;
	dcur *c;

	for (uint32_t i = 1; i < t->buckets; i++) {
		if (cur_frontier(&t->cur[i]) < cur_frontier(&t->cur[bk])) {
			bk = i;
		}
	}
	c = &t->cur[bk];
	TLI_ASSERT(!t->scanning); /* one read per topic at a time */
	memset(rf, 0, sizeof(*rf));
	rf->t = t;
	snprintf(rf->topic, sizeof(rf->topic), "%s", t->name);
	rf->bucket = bk;
	rf->horizon = horizon;
	rf->gen = t->gen;
	if (c->ts >= TL_TS_MIN) {
		rf->after.valid = true;
		if (c->maxid) {
			rf->after.ts =
			    c->ts + 1; /* seek to the next timestamp */
		} else {
			rf->after.ts = c->ts;
			rf->after.id_len = c->id_len;
			memcpy(rf->after.id, c->id, c->id_len);
		}
	}
	t->scanning = true;
	t->scan_bucket = bk;
}

/* The read itself: no lock held, never waits for the writer. */
static void
refill_read(tlb_broker *b, refill *rf)
{
	if ((rf->v = tli_alloc(sizeof(tli_entry) * CHUNK)) == NULL) {
		rf->rv = TL_ENOMEM;
		return;
	}
	rf->rv = tli_store_scan_due(b->store, rf->topic, rf->bucket,
	    rf->horizon, &rf->after, rf->v, CHUNK, &rf->n, &rf->more);
}

/* Back under the lock: entries into the heap, the cursor forward, and the
 * entries offered meanwhile offered again. */
static void
refill_merge(tlb_dsp *p, refill *rf)
{
	dtopic *t = rf->t;
	dcur *c = &t->cur[rf->bucket];
	size_t np;

	TLI_ASSERT_LOCKED(&p->mtx);
	TLI_ASSERT(t->scanning && rf->bucket == t->scan_bucket);
	t->scanning = false;
	if (t->dead || t->gen != rf->gen || rf->rv != TL_OK) {
		if (rf->rv != TL_OK) {
			tlb_log(TLB_ERROR, "D001",
			    "topic %s: cannot read the timeline: %s", t->name,
			    tli_store_last_error(p->b->store));
		}
		goto done;
	}
	for (size_t i = 0; i < rf->n; i++) {
		const tli_entry *e = &rf->v[i];
		went *w = went_new(
		    e->ts, e->version, rf->bucket, e->locked, e->id, e->id_len);
		if (w == NULL ||
		    heap_push(w->locked ? &t->ends : &t->due, w) != TL_OK) {
			tli_free(w);
		}
	}
	if (rf->more && rf->n > 0) {
		c->ts = rf->v[rf->n - 1].ts;
		c->maxid = false;
		c->id_len = rf->v[rf->n - 1].id_len;
		memcpy(c->id, rf->v[rf->n - 1].id, c->id_len);
	} else {
		c->ts = rf->horizon;
		c->maxid = true;
	}
done:
	np = t->npending;
	t->npending = 0;
	for (size_t i = 0; i < np; i++) {
		went *w = t->pending[i];
		if (!t->dead && t->gen == rf->gen) {
			window_offer(t, w->ts, w->version, w->bucket, w->locked,
			    w->id, w->id_len);
		}
		tli_free(w);
	}
	if (t->dead) {
		topic_free(t);
	}
	tli_free(rf->v);
}

static int64_t
frontier(const dtopic *t)
{
	int64_t f = TL_TS_MAX;

	for (uint32_t i = 0; i < t->buckets; i++) {
		int64_t x = cur_frontier(&t->cur[i]);
		f = x < f ? x : f;
	}
	return f;
}

/* Send the collected LEASE_LOST notices and free their ids. */
static void
lost_flush(dsub *d, const char *topic, tlp_delivery *lost, size_t *nl)
{
	if (*nl > 0) {
		send_push(d->s, TLP_OP_LEASE_LOST, topic, d, lost, *nl, NULL);
	}
	for (size_t k = 0; k < *nl; k++) {
		tli_free((char *) lost[k].id.p);
	}
	*nl = 0;
}

/* Collect a LEASE_LOST notice for h (sent by lost_flush). The notice
 * carries a copy of the id: h may be freed before the flush. */
static void
lost_add(
    dsub *d, const char *topic, tlp_delivery *lost, size_t *nl, const held *h)
{
	if (*nl == LOST_MAX) {
		lost_flush(d, topic, lost, nl);
	}
	memset(&lost[*nl], 0, sizeof(lost[*nl]));
	lost[*nl].id.p = tli_strndup(h->id, h->id_len);
	lost[*nl].id.n = h->id_len;
	lost[*nl].version = h->version;
	lost[*nl].lease_until = h->until;
	(*nl)++;
}

/* A subscription taken over by a newer SUBSCRIBE of the same consumer id:
 * tell its session that every lease it held is no longer its to work on
 * (the newer subscription recovers them). With p->mtx held. */
static void
notify_taken_over(dsub *d, const char *topic)
{
	tlp_delivery lost[LOST_MAX];
	size_t nl = 0;
	tli_htab_iter it;

	for (tli_hnode *n = tli_htab_first(&d->held, &it); n != NULL;
	     n = tli_htab_next(&d->held, &it, n)) {
		lost_add(d, topic, lost, &nl, TLI_CONTAINER(n, held, hn));
	}
	lost_flush(d, topic, lost, &nl);
}

/* Expire one subscription's held leases whose time ran out and tell its
 * session; lower *wake to the next expiry. */
static void
expire_sub(tlb_dsp *p, dtopic *t, dsub *d, int64_t now, int64_t *wake)
{
	tlp_delivery lost[LOST_MAX];
	size_t nl = 0;
	tli_htab_iter it;
	tli_hnode *n, *nx;

	d->min_until = INT64_MAX;
	for (n = tli_htab_first(&d->held, &it); n != NULL; n = nx) {
		held *h = TLI_CONTAINER(n, held, hn);

		nx = tli_htab_next(&d->held, &it, n);
		if (h->until > now) {
			*wake = h->until < *wake ? h->until : *wake;
			if (h->until < d->min_until) {
				d->min_until = h->until;
			}
			continue;
		}
		lost_add(d, t->name, lost, &nl, h);
		held_end(d, h);
		atomic_fetch_add(&p->b->m.lost, 1);
	}
	lost_flush(d, t->name, lost, &nl);
}

/* Expire held leases whose time ran out; send LEASE_LOST notices. */
static void
expire_held(tlb_dsp *p, dtopic *t, int64_t now, int64_t *wake)
{
	for (dsub *d = t->subs; d != NULL; d = d->next) {
		if (now < d->min_until) {
			*wake = d->min_until < *wake ? d->min_until : *wake;
			continue;
		}
		expire_sub(p, t, d, now, wake);
	}
}

/* One pass over a topic: expire, then pop due entries into a lease batch.
 * Returns the batch (or NULL), lowers *wake, and sets *read when a bucket
 * must be read first (outside the lock): something may be due that is not
 * loaded, or the window has fallen below half its length. */
static lbatch *
topic_pass(tlb_dsp *p, dtopic *t, int64_t now, int64_t *wake, bool *read)
{
	tlb_broker *b = p->b;
	int64_t half = b->conf.window_ms / 2;
	int64_t ahead = b->conf.lease_ahead_ms;
	lbatch *lb = NULL;
	size_t cap = 0;
	int64_t f;

	TLI_ASSERT_LOCKED(&p->mtx);
	*read = false;
	expire_held(p, t, now, wake);
	if (t->subs == NULL || t->scanning) {
		return NULL;
	}
	f = frontier(t);
	for (;;) {
		went *a = heap_top(&t->due), *l = heap_top(&t->ends);
		bool a_ok = a != NULL && a->ts <= f && a->ts <= now + ahead;
		bool l_ok = l != NULL && l->ts <= f && l->ts <= now;
		wheap *from;
		dsub *d;

		if (!a_ok && !l_ok) {
			/* The next entries are known: lease a due one ahead,
			 * a lease's end at its time. */
			if (a != NULL && a->ts <= f && a->ts - ahead < *wake) {
				*wake = a->ts - ahead;
			}
			if (l != NULL && l->ts <= f && l->ts < *wake) {
				*wake = l->ts;
			}
			*read = f < now + ahead || f < now + half;
			break;
		}
		from = a_ok && (!l_ok || went_less(a, l)) ? &t->due : &t->ends;
		if ((d = next_sub(t)) == NULL) {
			break; /* no credit: acks wake us */
		}
		if (lb == NULL || lb->n == cap) {
			litem *ni;
			if (cap >= MAX_PASS) {
				break;
			}
			if (lb == NULL &&
			    (lb = tli_zalloc(sizeof(*lb))) == NULL) {
				break;
			}
			if ((ni = grow(lb->it, &cap, sizeof(*ni), 64)) ==
			    NULL) {
				break;
			}
			lb->it = ni;
		}
		memset(&lb->it[lb->n], 0, sizeof(litem));
		lb->it[lb->n].sub = d;
		lb->it[lb->n].e = heap_pop(from);
		lb->n++;
		d->refs++;
		d->inflight++;
	}
	/* Read again when the window falls below half its length. */
	if (f - half + 1 < *wake) {
		*wake = f - half + 1 > now ? f - half + 1 : now + 1;
	}
	if (lb != NULL) {
		snprintf(lb->topic, sizeof(lb->topic), "%s", t->name);
		lb->b = b;
		lb->asked = now;
	}
	return lb;
}

/* Order the batch by subscription so each gets one frame, read the bodies
 * (no lock held) and submit the leases. */
static int
litem_cmp(const void *a, const void *b)
{
	const litem *x = a, *y = b;
	if (x->sub != y->sub) {
		return (uintptr_t) x->sub < (uintptr_t) y->sub ? -1 : 1;
	}
	return went_less(x->e, y->e) ? -1 : went_less(y->e, x->e) ? 1 : 0;
}

/* Read every message of the batch in one batched lookup; lb->rv[i] is
 * message i's result. */
static int
read_all(tlb_broker *b, lbatch *lb)
{
	const char **ids = tli_alloc(sizeof(*ids) * lb->n);
	size_t *lens = tli_alloc(sizeof(*lens) * lb->n);
	tli_msg *m = tli_alloc(sizeof(*m) * lb->n);
	int rv = TL_ENOMEM;

	lb->rv = tli_alloc(sizeof(int) * lb->n);
	if (ids != NULL && lens != NULL && m != NULL && lb->rv != NULL) {
		for (size_t i = 0; i < lb->n; i++) {
			ids[i] = lb->it[i].e->id;
			lens[i] = lb->it[i].e->id_len;
		}
		rv = tli_store_get_many(
		    b->store, lb->topic, lb->n, ids, lens, m, lb->rv);
		for (size_t i = 0; rv == TL_OK && i < lb->n; i++) {
			if (lb->rv[i] == TL_OK) {
				lb->it[i].m = m[i];
			}
		}
	}
	tli_free(ids);
	tli_free(lens);
	tli_free(m);
	return rv;
}

static void
lbatch_submit(tlb_dsp *p, lbatch *lb)
{
	tlb_broker *b = p->b;
	size_t keep = 0;

	qsort(lb->it, lb->n, sizeof(litem), litem_cmp);
	if (read_all(b, lb) != TL_OK) {
		goto fail;
	}
	for (size_t i = 0; i < lb->n; i++) {
		litem *it = &lb->it[i];
		int rv = lb->rv[i];
		if (rv != TL_OK) {
			/* Deleted since it was read: nothing to lease. */
			pthread_mutex_lock(&p->mtx);
			sub_took_back(it->sub);
			dsub_rele(it->sub);
			pthread_mutex_unlock(&p->mtx);
			tli_free(it->e);
			continue;
		}
		lb->it[keep++] = *it;
	}
	lb->n = keep;
	if (keep == 0) {
		lbatch_free(lb);
		return;
	}
	if ((lb->ops = tli_zalloc(sizeof(tli_op) * keep)) == NULL) {
		goto fail;
	}
	for (size_t i = 0; i < keep; i++) {
		tli_op *o = &lb->ops[i];
		litem *it = &lb->it[i];
		o->type = TLI_OP_LEASE;
		o->topic = lb->topic;
		o->id = it->e->id;
		o->id_len = it->e->id_len;
		o->who = it->sub->consumer;
		o->who_len = it->sub->clen;
		o->ts = it->sub->lease_ms;
		o->ts_mode = TLI_TS_REL;
		o->version = it->e->version;
		o->at = it->e->ts; /* ahead of now: the lease runs from it */
		o->hint = &it->m;  /* read above: spares the writer a read */
	}
	if (tli_store_submit(b->store, lb->ops, keep, lease_done, lb) ==
	    TL_OK) {
		return;
	}
fail:
	pthread_mutex_lock(&p->mtx);
	for (size_t i = 0; i < lb->n; i++) {
		sub_took_back(lb->it[i].sub);
		dsub_rele(lb->it[i].sub);
	}
	pthread_mutex_unlock(&p->mtx);
	lbatch_free(lb);
}

/* Wait on cv (with p->mtx) until the µs clock reads us at the latest: not
 * a whole ms rounded from a ms reading (which made every delivery up to
 * 1 ms late). The wait is on the monotonic clock, which the broker clock
 * follows between anchors; INT64_MAX waits for a signal alone. Returns
 * whether the time came (false: a signal or a spurious wake-up). */
static bool
wait_until_us(tlb_dsp *p, pthread_cond_t *cv, int64_t us)
{
	int64_t left;
	struct timespec ts;
	int64_t ns;

	if (us == INT64_MAX) {
		pthread_cond_wait(cv, &p->mtx);
		return false;
	}
	if ((left = us - tlb_clock_now_us()) <= 0) {
		return true;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = ts.tv_nsec + left * 1000;
	ts.tv_sec += (time_t) (ns / 1000000000);
	ts.tv_nsec = (long) (ns % 1000000000);
	return pthread_cond_timedwait(cv, &p->mtx, &ts) == ETIMEDOUT;
}

/* The longest the push thread wakes before a due time, and the margin
 * over its wake-up delay, µs. */
#define PUSH_LEAD_MAX_US 150
#define PUSH_LEAD_MARGIN_US 5

/* The push thread's sleep until p->pwake_us. A timed wake-up comes late by
 * itself: 60-70 µs at the median on the virtual machines measured, with
 * timer slack at 1 µs and real-time priority, so every push was that late.
 * So it asks to wake plead_us early and spins out the rest without the
 * mutex. plead_us follows the delay's 70th percentile (up 7 µs after a
 * wake-up later than it less a margin, down 3 otherwise): a mean would
 * follow the long delays of a busy machine and spin longer at every other
 * wake-up. A park() meanwhile waits for the spin to end (it saw pwake_us
 * 0). */
static void
push_wait(tlb_dsp *p)
{
	int64_t want = p->pwake_us, early, now, lead, until;

	if (want == INT64_MAX) {
		wait_until_us(p, &p->pcv, want);
		return;
	}
	early = want - p->plead_us;
	if (early > tlb_clock_now_us()) {
		if (!wait_until_us(p, &p->pcv, early) || p->stop) {
			return; /* a signal: something else to do first */
		}
		now = tlb_clock_now_us();
		lead = now - early + PUSH_LEAD_MARGIN_US > p->plead_us
		    ? p->plead_us + 7
		    : p->plead_us - 3;
		p->plead_us = lead < 0        ? 0
		    : lead > PUSH_LEAD_MAX_US ? PUSH_LEAD_MAX_US
		                              : lead;
	}
	now = tlb_clock_now_us();
	if (now >= want || want - now > PUSH_LEAD_MAX_US) {
		return;
	}
	/* on the monotonic clock, which needs no lock (the broker clock,
	 * slewed, may then be a few µs short: the loop comes back) */
	until = tli_mono_ns() + (want - now) * 1000;
	p->pwake_us = 0;
	pthread_mutex_unlock(&p->mtx);
	while (tli_mono_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	pthread_mutex_lock(&p->mtx);
}

/* The dispatcher sleeps until the timeline instant wake_ts (ms) begins,
 * or a kick. */
static void
sleep_until(tlb_dsp *p, int64_t wake_ts)
{
	if (p->kick || p->stop) {
		p->kick = false;
		return;
	}
	wait_until_us(p, &p->cv, wake_ts * 1000);
	p->kick = false;
}

/* The push thread's scheduling (push_priority): SCHED_FIFO at prio, or at
 * 1 for auto (-1), or as it is (0). */
static void
set_push_priority(int64_t prio)
{
	struct sched_param sp = {.sched_priority = prio < 0 ? 1 : (int) prio};
	int rv;

	if (prio == 0) {
		return;
	}
	if ((rv = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp)) !=
	    0) {
		/* auto: not an error where real-time threads are not
		 * allowed, only information. */
		tlb_log(prio < 0 ? TLB_INFO : TLB_WARN, "D011",
		    "push thread: real-time priority %d refused (%s); it "
		    "runs with normal scheduling",
		    sp.sched_priority, strerror(rv));
		return;
	}
	tlb_log(TLB_INFO, "D011",
	    "push thread: real-time priority %d (SCHED_FIFO)",
	    sp.sched_priority);
}

/* The push thread: parked messages leave at their due microsecond. It
 * does nothing else, so that the dispatcher's reads and lease submissions
 * (a batched read took 2 ms at times) and a send that waits for its
 * connection's locks (up to 5 ms) do not hold back the next due push;
 * its frames go out after the lock. park() wakes it when a message is due
 * before it meant to wake. */
static void *
push_main(void *arg)
{
	tlb_dsp *p = arg;
	outbox ob = OUTBOX_INIT(ob);

	pthread_setname_np(pthread_self(), "tl-push");
	/* Wake-ups on time to the µs: the default slack (50 µs) would be
	 * added to most deliveries. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	set_push_priority(p->b->conf.push_priority);
	pthread_mutex_lock(&p->mtx);
	while (!p->stop) {
		int64_t wake = TL_TS_MAX;

		for (dtopic *t = p->topics; t != NULL; t = t->next) {
			push_parked(p, t, &wake, &ob);
		}
		if (ob.head != NULL) {
			int64_t t0;

			pthread_mutex_unlock(&p->mtx);
			t0 = tli_mono_ns();
			outbox_send(&ob);
			tlb_metrics_push_send(&p->b->m, tli_mono_ns() - t0);
			pthread_mutex_lock(&p->mtx);
			continue; /* time went by: look again */
		}
		p->pwake_us = wake == TL_TS_MAX ? INT64_MAX : wake * 1000;
		push_wait(p);
		p->pwake_us = 0; /* awake: park() need not signal */
	}
	pthread_mutex_unlock(&p->mtx);
	return NULL;
}

static void *
dsp_main(void *arg)
{
	tlb_dsp *p = arg;

	pthread_setname_np(pthread_self(), "tl-dispatch");
	tli_store_thread_setup();
	/* Wake-ups on time to the µs: the default slack (50 µs) would be
	 * added to most deliveries. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	pthread_mutex_lock(&p->mtx);
	while (!p->stop) {
		int64_t now = tlb_clock_now(NULL);
		int64_t wake = now + 1000;
		lbatch *work[64];
		int nw = 0;
		dtopic *rt = NULL;
		refill rf;

		for (dtopic *t = p->topics; t != NULL && nw < 64; t = t->next) {
			bool read;
			lbatch *lb = topic_pass(p, t, now, &wake, &read);
			if (lb != NULL) {
				work[nw++] = lb;
			}
			if (read && rt == NULL) {
				rt = t;
			}
		}
		if (nw == 0 && rt == NULL) {
			sleep_until(p, wake);
			continue;
		}
		if (rt != NULL) {
			refill_prepare(rt, now + p->b->conf.window_ms, &rf);
		}
		pthread_mutex_unlock(&p->mtx);
		for (int i = 0; i < nw; i++) {
			lbatch_submit(p, work[i]);
		}
		if (rt != NULL) {
			refill_read(p->b, &rf);
		}
		pthread_mutex_lock(&p->mtx);
		if (rt != NULL) {
			refill_merge(p, &rf);
		}
	}
	pthread_mutex_unlock(&p->mtx);
	return NULL;
}

/* ---- the interface ---- */

int
tlb_dsp_start(tlb_broker *b)
{
	tlb_dsp *p = tli_zalloc(sizeof(*p));
	pthread_condattr_t ca;

	if (p == NULL) {
		return TL_ENOMEM;
	}
	p->b = b;
	tli_htab_init(&p->locks);
	p->prune_at = 256;
	pthread_mutex_init(&p->mtx, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_cond_init(&p->pcv, &ca);
	pthread_condattr_destroy(&ca);
	b->dsp = p;
	if (pthread_create(&p->th, NULL, dsp_main, p) != 0) {
		b->dsp = NULL;
		tli_free(p);
		return TL_ENOMEM;
	}
	if (pthread_create(&p->pth, NULL, push_main, p) != 0) {
		tli_thread_stop(p->th, &p->mtx, &p->cv, &p->stop);
		b->dsp = NULL;
		tli_free(p);
		return TL_ENOMEM;
	}
	return TL_OK;
}

void
tlb_dsp_stop(tlb_broker *b)
{
	tlb_dsp *p = b->dsp;

	if (p == NULL) {
		return;
	}
	tli_thread_stop(p->pth, &p->mtx, &p->pcv, &p->stop);
	tli_thread_stop(p->th, &p->mtx, &p->cv, &p->stop);
}

/* Free the dispatcher's state after the store is closed (no completion
 * can run any more). */
void
tlb_dsp_free(tlb_broker *b)
{
	tlb_dsp *p = b->dsp;

	if (p == NULL) {
		return;
	}
	while (p->topics != NULL) {
		dtopic *t = p->topics;
		p->topics = t->next;
		topic_free(t);
	}
	dlock_prune(p, 0, true);
	tli_htab_fini(&p->locks);
	pthread_cond_destroy(&p->cv);
	pthread_cond_destroy(&p->pcv);
	pthread_mutex_destroy(&p->mtx);
	tli_free(p);
	b->dsp = NULL;
}

static void
wake(tlb_dsp *p)
{
	TLI_ASSERT_LOCKED(&p->mtx);
	p->kick = true;
	pthread_cond_signal(&p->cv);
}

void
tlb_dsp_lock(tlb_broker *b)
{
	pthread_mutex_lock(&b->dsp->mtx);
}

void
tlb_dsp_unlock(tlb_broker *b)
{
	pthread_mutex_unlock(&b->dsp->mtx);
}

void
tlb_dsp_note_locked(tlb_broker *b, const char *topic, uint32_t bucket,
    int64_t ts, bool locked, const char *id, size_t id_len, uint64_t version)
{
	tlb_dsp *p = b->dsp;
	dtopic *t = topic_find(p, topic);

	if (t != NULL && t->subs != NULL && bucket < t->buckets &&
	    window_offer(t, ts, version, bucket, locked, id, id_len) &&
	    (ts <= tlb_clock_now(NULL) + b->conf.lease_ahead_ms ||
	        heap_top(locked ? &t->ends : &t->due)->ts == ts)) {
		/* To be leased now, or a new earliest due time (the thread
		 * sleeps until the earliest one); a later entry needs no
		 * wake. */
		wake(p);
	}
}

void
tlb_dsp_note(tlb_broker *b, const char *topic, uint32_t bucket, int64_t ts,
    bool locked, const char *id, size_t id_len, uint64_t version)
{
	if (b->dsp == NULL) {
		return;
	}
	tlb_dsp_lock(b);
	tlb_dsp_note_locked(b, topic, bucket, ts, locked, id, id_len, version);
	tlb_dsp_unlock(b);
}

void
tlb_dsp_lease_done_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len,
    int op, int64_t new_ts, uint64_t new_version)
{
	tlb_dsp *p = b->dsp;
	dtopic *t = topic_find(p, topic);
	dsub *d = t != NULL ? sub_find(t, consumer, consumer_len) : NULL;
	dlock *k = dlock_find(p, topic, id, id_len);

	if (k != NULL && k->clen == consumer_len &&
	    memcmp(k->consumer, consumer, consumer_len) == 0) {
		/* A lock's lease moved on (extend) or ended. */
		if (op == TLP_OP_EXTEND) {
			k->version = new_version;
			k->until = new_ts;
		} else {
			dlock_remove(p, k);
		}
	}
	if (d == NULL) {
		return;
	}
	if (op == TLP_OP_EXTEND) {
		held *h = held_find(d, id, id_len);
		if (h != NULL) {
			h->until = new_ts;
			h->version = new_version;
		}
	} else {
		held *h = held_find(d, id, id_len);
		if (h != NULL) {
			held_end(d, h);
			wake(p);
		}
	}
}

/* An ACK or RELEASE of consumer's lease `version` on id arrived (it is
 * not yet applied): the subscription's credit for it comes back now, so
 * the next lease can be taken while this one's group commit is written,
 * often into the same commit. The held entry stays until the ACK is
 * done. */
/* consumer's held lease on id in topic (and its subscription), or NULL. */
static held *
held_of(tlb_dsp *p, const char *topic, const char *consumer, size_t clen,
    const char *id, size_t idl, dsub **dp)
{
	dtopic *t = p != NULL ? topic_find(p, topic) : NULL;

	*dp = t != NULL ? sub_find(t, consumer, clen) : NULL;
	return *dp != NULL ? held_find(*dp, id, idl) : NULL;
}

void
tlb_dsp_ack_arrived_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len,
    uint64_t version)
{
	tlb_dsp *p = b->dsp;
	dsub *d;
	held *h = held_of(p, topic, consumer, consumer_len, id, id_len, &d);

	if (h == NULL || h->returned || h->version != version) {
		return;
	}
	h->returned = true;
	d->returned++;
	sub_took_back(d);
	wake(p);
}

/* That ACK or RELEASE failed: the lease is still held (as far as the
 * dispatcher knows), and counts again, even if that takes the
 * subscription past its credit for a while. */
void
tlb_dsp_ack_failed_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len)
{
	dsub *d;
	held *h =
	    held_of(b->dsp, topic, consumer, consumer_len, id, id_len, &d);

	if (h == NULL || !h->returned) {
		return;
	}
	h->returned = false;
	d->returned--;
	d->inflight++;
}

void
tlb_dsp_lease_done(tlb_broker *b, const char *topic, const char *consumer,
    size_t consumer_len, const char *id, size_t id_len, int op, int64_t new_ts,
    uint64_t new_version)
{
	if (b->dsp == NULL) {
		return;
	}
	tlb_dsp_lock(b);
	tlb_dsp_lease_done_locked(b, topic, consumer, consumer_len, id, id_len,
	    op, new_ts, new_version);
	tlb_dsp_unlock(b);
}

/* Leases a returning consumer still holds: deliver them again (those
 * taken ahead of their due time: at that time). Each message is read,
 * checked and pushed under dsp->mtx: an EXTEND, RELEASE or ACK of it that
 * the store applies after the read tells the dispatcher (and answers its
 * client) only after the push is on the session, so the client never gets
 * a lease back after the answer that ended it. */
static void
recover_leases(tlb_broker *b, tlb_session *s, const char *topic, dsub *d)
{
	tlb_dsp *p = b->dsp;
	tli_entry *v = tli_alloc(sizeof(*v) * 256);
	tli_cursor after;
	bool more = true;

	memset(&after, 0, sizeof(after));
	while (v != NULL && more) {
		size_t n = 0;

		if (tli_store_scan_consumer(b->store, topic, d->consumer,
		        d->clen, &after, v, 256, &n, &more) != TL_OK) {
			break;
		}
		for (size_t i = 0; i < n; i++) {
			tli_msg m;
			tlp_delivery dv;
			dtopic *t;

			pthread_mutex_lock(&p->mtx);
			if (d->gone || v[i].ts <= tlb_clock_now(NULL) ||
			    held_find(d, v[i].id, v[i].id_len) != NULL) {
				/* Gone; run out (it will be delivered anew);
				 * or already pushed (or parked) to d. */
				pthread_mutex_unlock(&p->mtx);
				continue;
			}
			/* Under the lock that completions take: no wait
			 * (the version must be the scan's, which waited). */
			if (tli_store_get_nowait(b->store, topic, v[i].id,
			        v[i].id_len, &m) != TL_OK) {
				pthread_mutex_unlock(&p->mtx);
				continue;
			}
			if (m.version != v[i].version ||
			    m.consumer_len != d->clen ||
			    memcmp(m.consumer, d->consumer, d->clen) != 0 ||
			    dlock_held(p, topic, v[i].id, v[i].id_len,
			        d->consumer, d->clen, m.version)) {
				/* Changed since the scan, or a lock's lease:
				 * its LOCK holds it, not d. */
				pthread_mutex_unlock(&p->mtx);
				tli_msg_fini(&m);
				continue;
			}
			held_put(d, v[i].id, v[i].id_len, m.version, m.ts);
			d->inflight++;
			if (v[i].push_at > tlb_clock_now(NULL)) {
				/* Leased ahead of a due time still to come: at
				 * that time (out of memory: never early, the
				 * lease runs out). */
				t = topic_find(p, topic);
				if (t != NULL &&
				    park(p, t, d, &m, v[i].push_at, m.version,
				        m.ts, m.deliveries)) {
					wake(p);
				}
			} else {
				delivery_fill(&dv, m.id, m.id_len, &m,
				    m.version, m.ts, m.ts, m.deliveries);
				send_push(
				    s, TLP_OP_DELIVER, topic, d, &dv, 1, NULL);
			}
			pthread_mutex_unlock(&p->mtx);
			tli_msg_fini(&m);
		}
		if (n > 0) {
			tli_cursor_from_entry(&after, &v[n - 1]);
		}
	}
	tli_free(v);
}

static void
enc_ok(tlp_w *w, const void *arg)
{
	(void) arg;
	tlp_enc_ok(w);
}

int
tlb_dsp_subscribe(
    tlb_broker *b, tlb_session *s, const tlp_sub *sub, uint32_t reqid)
{
	tlb_dsp *p = b->dsp;
	char topic[TL_MAX_NAME_LEN + 1];
	tli_topic_info ti;
	dtopic *t;
	dsub *d, *old;
	int rv;

	if (sub->topic.n == 0 || sub->topic.n > TL_MAX_NAME_LEN) {
		return TL_ENOTOPIC;
	}
	if (sub->consumer.n == 0) {
		return TL_EBADID;
	}
	if (sub->consumer.n > TL_MAX_NAME_LEN) {
		return TL_ETOOLARGE;
	}
	if (memchr(sub->topic.p, '\0', sub->topic.n) != NULL ||
	    memchr(sub->consumer.p, '\0', sub->consumer.n) != NULL) {
		return TL_EINVAL;
	}
	memcpy(topic, sub->topic.p, sub->topic.n);
	topic[sub->topic.n] = '\0';
	if ((rv = tli_store_topic_get(b->store, topic, &ti)) != TL_OK) {
		return rv;
	}
	if (sub->lease_ms < 0 || sub->credit > 65536) {
		return TL_EINVAL;
	}
	if (sub->lease_ms > ti.conf.max_lease_ms) {
		return TL_ELEASELIMIT;
	}
	if ((d = tli_zalloc(sizeof(*d))) == NULL) {
		return TL_ENOMEM;
	}
	d->refs = 1;
	d->s = s;
	d->min_until = INT64_MAX;
	memcpy(d->consumer, sub->consumer.p, sub->consumer.n);
	d->clen = sub->consumer.n;
	d->lease_ms =
	    sub->lease_ms > 0 ? sub->lease_ms : ti.conf.default_lease_ms;
	d->credit = sub->credit > 0 ? sub->credit : 1;
	tli_htab_init(&d->held);
	if (tli_htab_reserve(&d->held,
	        d->credit * 2 < 65536 ? (size_t) d->credit * 2 : 65536) !=
	    TL_OK) {
		tli_free(d);
		return TL_ENOMEM;
	}
	tlb_session_hold(s);

	pthread_mutex_lock(&p->mtx);
	if ((t = topic_find(p, topic)) == NULL) {
		t = tli_zalloc(sizeof(*t));
		if (t == NULL ||
		    (t->cur = tli_zalloc(sizeof(dcur) * ti.conf.buckets)) ==
		        NULL) {
			tli_free(t);
			pthread_mutex_unlock(&p->mtx);
			dsub_rele(d);
			return TL_ENOMEM;
		}
		memcpy(t->name, topic, sub->topic.n + 1);
		t->buckets = ti.conf.buckets;
		t->default_lease_ms = ti.conf.default_lease_ms;
		t->max_lease_ms = ti.conf.max_lease_ms;
		topic_reset(t);
		t->next = p->topics;
		p->topics = t;
	}
	if ((old = sub_find(t, d->consumer, d->clen)) != NULL) {
		/* The same consumer id again (a reconnect that arrived before
		 * the old session was noticed gone): the new one takes over,
		 * and the old session hears that its leases are gone. */
		notify_taken_over(old, t->name);
		sub_remove(t, old);
	}
	d->next = t->subs;
	t->subs = d;
	d->refs++; /* kept across the recovery below */
	pthread_mutex_unlock(&p->mtx);

	tlb_log(TLB_INFO, "D010",
	    "consumer %s subscribed to %s (lease %lld ms, "
	    "credit %u)",
	    d->consumer, topic, (long long) d->lease_ms, d->credit);
	tlb_send_frame(s, TLP_OP_SUBSCRIBE, TLP_F_REPLY, reqid, enc_ok, NULL);
	recover_leases(b, s, topic, d);

	pthread_mutex_lock(&p->mtx);
	dsub_rele(d);
	wake(p);
	pthread_mutex_unlock(&p->mtx);
	return TL_OK;
}

int
tlb_dsp_unsubscribe(tlb_broker *b, tlb_session *s, const tlp_sub *sub)
{
	tlb_dsp *p = b->dsp;
	dtopic *t;
	dsub *d = NULL;
	char topic[TL_MAX_NAME_LEN + 1];

	if (sub->topic.n == 0 || sub->topic.n > TL_MAX_NAME_LEN) {
		return TL_ENOTOPIC;
	}
	memcpy(topic, sub->topic.p, sub->topic.n);
	topic[sub->topic.n] = '\0';
	pthread_mutex_lock(&p->mtx);
	t = topic_find(p, topic);
	if (t != NULL) {
		d = sub_find(t, sub->consumer.p, sub->consumer.n);
	}
	if (d != NULL && d->s == s) {
		sub_remove(t, d);
	} else {
		d = NULL;
	}
	pthread_mutex_unlock(&p->mtx);
	return d != NULL ? TL_OK : TL_EINVAL;
}

void
tlb_dsp_session_gone(tlb_broker *b, tlb_session *s)
{
	tlb_dsp *p = b->dsp;

	if (p == NULL) {
		return;
	}
	pthread_mutex_lock(&p->mtx);
	for (dtopic *t = p->topics; t != NULL; t = t->next) {
		dsub *d = t->subs;
		while (d != NULL) {
			dsub *next = d->next;
			if (d->s == s) {
				sub_remove(t, d);
			}
			d = next;
		}
	}
	pthread_mutex_unlock(&p->mtx);
}

void
tlb_dsp_close_subscribers(tlb_broker *b)
{
	tlb_dsp *p = b->dsp;
	tlb_session **v = NULL;
	size_t n = 0, cap = 0;

	if (p == NULL) {
		return;
	}
	pthread_mutex_lock(&p->mtx);
	for (dtopic *t = p->topics; t != NULL; t = t->next) {
		for (dsub *d = t->subs; d != NULL; d = d->next) {
			if (n == cap) {
				size_t nc = cap == 0 ? 16 : cap * 2;
				tlb_session **w =
				    tli_realloc(v, nc * sizeof(*v));
				if (w == NULL) {
					break; /* the rest: session_gone below
					        */
				}
				v = w;
				cap = nc;
			}
			tlb_session_hold(d->s);
			v[n++] = d->s;
		}
	}
	pthread_mutex_unlock(&p->mtx);
	for (size_t i = 0; i < n; i++) {
		tlb_dsp_session_gone(b, v[i]);
		tlb_session_close(v[i], "not the leader any more");
		tlb_session_rele(v[i]);
	}
	tli_free(v);
}

void
tlb_dsp_topic_gone(tlb_broker *b, const char *topic)
{
	tlb_dsp *p = b->dsp;
	dtopic **pp;

	pthread_mutex_lock(&p->mtx);
	for (pp = &p->topics; *pp != NULL; pp = &(*pp)->next) {
		if (strcmp((*pp)->name, topic) == 0) {
			dtopic *t = *pp;
			*pp = t->next;
			if (t->scanning) {
				t->dead = true; /* the reader frees it */
			} else {
				topic_free(t);
			}
			break;
		}
	}
	pthread_mutex_unlock(&p->mtx);
}

int
tlb_dsp_stats(tlb_broker *b, tlb_dsp_stat **out, size_t *n)
{
	tlb_dsp *p = b->dsp;
	tlb_dsp_stat *v = NULL;
	size_t rows = 0, i = 0;
	int rv = TL_OK;

	*out = NULL;
	*n = 0;
	if (p == NULL) {
		return TL_OK;
	}
	pthread_mutex_lock(&p->mtx);
	for (dtopic *t = p->topics; t != NULL; t = t->next) {
		rows++;
		for (dsub *d = t->subs; d != NULL; d = d->next) {
			rows++;
		}
	}
	if (rows > 0 && (v = tli_zalloc(sizeof(*v) * rows)) == NULL) {
		rv = TL_ENOMEM;
	}
	for (dtopic *t = v != NULL ? p->topics : NULL; t != NULL; t = t->next) {
		tlb_dsp_stat *tr = &v[i++];

		snprintf(tr->topic, sizeof(tr->topic), "%s", t->name);
		tr->window = t->due.n + t->ends.n;
		for (dsub *d = t->subs; d != NULL; d = d->next) {
			tlb_dsp_stat *sr = &v[i++];

			memcpy(sr->topic, tr->topic, sizeof(sr->topic));
			memcpy(sr->consumer, d->consumer, d->clen);
			sr->credit = d->credit;
			sr->held = d->held.n;
			sr->delivered = d->delivered;
			tr->consumers++;
		}
	}
	pthread_mutex_unlock(&p->mtx);
	*out = v;
	*n = v != NULL ? rows : 0;
	return rv;
}
