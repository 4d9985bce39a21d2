/*
 * The writer thread's application of message operations: input checks,
 * time checks, state checks in the order docs/storage.md gives, and the
 * effects (record and every index entry) appended to the batch's WriteBatch.
 *
 * The overlay is a table (tli_htab over a pool allocated once, so nothing
 * is allocated per operation) of the records touched by the current batch. Each
 * operation reads its message from the overlay, falling back to RocksDB, and
 * writes its effect back to the overlay, so a later operation of the same batch
 * sees the earlier ones before anything is on disk.
 */
#include <stddef.h>
#include <stdlib.h>

#include "store_int.h"

#define OV_CAP (2 * TL_MAX_BATCH) /* > max messages per batch */
/* The record cache. Every mutation goes through the writer, so what it
 * holds is what the database holds: the committed state of recently touched
 * messages (present or absent). A lease and the ack that follows it then
 * cost no database read. Records are kept encoded (tli_rec_encode), one
 * after the other in a ring of RING_BYTES, and found through CACHE_CAP
 * direct-mapped slots naming where a message's latest copy starts; a copy
 * the ring has since written over is a miss. A decoded record takes about
 * 760 bytes whatever its body and names; an encoded one of a 100-byte body
 * about 170, so the ring holds as many records as a table of decoded ones
 * four times its size (at 100M messages the cache was 12.5 MB of the
 * broker's resident memory). */
#define CACHE_CAP 16384
#define RING_BYTES (4u << 20)
/* A ring entry: topic(4) id_len(1) present(1) id, then the record */
#define RING_HDR 6
#define RING_ENT_MAX (RING_HDR + TL_MAX_ID_LEN + REC_MAX)

typedef struct cslot {
	uint64_t pos; /* ring position of the entry + 1; 0: empty */
	uint32_t len;
	uint32_t hash; /* the low half of its tli_tkey_hash */
} cslot;

/* Read hints: for each of MOD_CAP hash slots, the commit generation of the
 * last batch that changed a message hashing there. A record read at
 * generation g is still the committed one if its slot's generation is at
 * most g (collisions only make the check stricter) and no topic was
 * deleted since g. */
#define MOD_CAP 65536

typedef struct ov_ent {
	tli_hnode hn; /* first: in the overlay's table (pool entries) */
	bool present;
	uint8_t id_len;
	uint32_t topic;
	char id[TL_MAX_ID_LEN];
	rec r;
	int64_t push_at; /* this operation's lease ahead (tli_op.at), or 0 */
} ov_ent;

struct overlay {
	ov_ent *pool; /* OV_CAP entries; the first nused are the batch's */
	size_t nused;
	tli_htab tab;        /* the pool's entries by tli_tkey_hash */
	cslot *slot;         /* CACHE_CAP */
	uint8_t *ring;       /* RING_BYTES */
	uint64_t head;       /* ring position of the next entry (monotonic) */
	uint64_t floor;      /* entries before it are forgotten */
	uint64_t *mod;       /* MOD_CAP generations */
	uint64_t forget_gen; /* generation of the last topic deletion */
};

static bool
ov_is(const tli_hnode *hn, const void *key)
{
	const ov_ent *e = TLI_CONTAINER(hn, ov_ent, hn);
	return tli_tkey_is(key, e->topic, e->id, e->id_len);
}

struct overlay *
tli_overlay_new(void)
{
	struct overlay *ov = tli_zalloc(sizeof(*ov));

	if (ov == NULL) {
		return NULL;
	}
	ov->pool = tli_zalloc(sizeof(ov_ent) * OV_CAP);
	tli_htab_init(&ov->tab);
	ov->slot = tli_zalloc(sizeof(cslot) * CACHE_CAP);
	ov->ring = tli_alloc(RING_BYTES);
	ov->mod = tli_zalloc(sizeof(uint64_t) * MOD_CAP);
	ov->forget_gen = 1;
	if (ov->pool == NULL || ov->slot == NULL || ov->ring == NULL ||
	    ov->mod == NULL || tli_htab_reserve(&ov->tab, OV_CAP) != TL_OK) {
		tli_overlay_free(ov);
		return NULL;
	}
	return ov;
}

void
tli_overlay_free(struct overlay *ov)
{
	if (ov != NULL) {
		tli_free(ov->pool);
		tli_htab_fini(&ov->tab);
		tli_free(ov->slot);
		tli_free(ov->ring);
		tli_free(ov->mod);
		tli_free(ov);
	}
}

/* Append the message's committed state to the ring and point its slot at
 * it. An entry never straddles the ring's end: the rest of the lap is
 * skipped instead. */
static void
cache_put(struct overlay *ov, const ov_ent *e)
{
	uint64_t at = ov->head;
	size_t off = (size_t) (at & (RING_BYTES - 1)), n;
	uint8_t *p;
	cslot *sl;

	if (off + RING_ENT_MAX > RING_BYTES) {
		at += RING_BYTES - off;
		off = 0;
	}
	p = ov->ring + off;
	tli_put_be32(p, e->topic);
	p[4] = e->id_len;
	p[5] = e->present;
	memcpy(p + RING_HDR, e->id, e->id_len);
	n = RING_HDR + e->id_len;
	if (e->present) {
		n += tli_rec_encode(p + n, &e->r);
	}
	ov->head = at + n;
	sl = &ov->slot[e->hn.hash & (CACHE_CAP - 1)];
	sl->pos = at + 1;
	sl->len = (uint32_t) n;
	sl->hash = (uint32_t) e->hn.hash;
}

/* The cached committed state of message k (hash h) into e: true if the
 * ring still holds it. */
static bool
cache_get(const struct overlay *ov, const tli_tkey *k, uint64_t h, ov_ent *e)
{
	const cslot *sl = &ov->slot[h & (CACHE_CAP - 1)];
	uint64_t at = sl->pos - 1;
	const uint8_t *p;

	if (sl->pos == 0 || sl->hash != (uint32_t) h || at < ov->floor ||
	    ov->head - at > RING_BYTES) {
		return false;
	}
	p = ov->ring + (at & (RING_BYTES - 1));
	if (!tli_tkey_is(
	        k, tli_get_be32(p), (const char *) p + RING_HDR, p[4])) {
		return false;
	}
	e->present = p[5] != 0;
	return !e->present ||
	    tli_rec_decode(
	        &e->r, p + RING_HDR + p[4], sl->len - RING_HDR - p[4]) == TL_OK;
}

/* The batch is durable as generation gen: its final states become the
 * cache's, and its messages' slots take the generation. */
void
tli_overlay_commit(struct overlay *ov, uint64_t gen)
{
	for (size_t i = 0; i < ov->nused; i++) {
		const ov_ent *e = &ov->pool[i];
		cache_put(ov, e);
		ov->mod[e->hn.hash & (MOD_CAP - 1)] = gen;
	}
}

/* Forget everything cached (a topic was deleted under it, as gen). */
void
tli_overlay_forget(struct overlay *ov, uint64_t gen)
{
	ov->floor = ov->head;
	ov->forget_gen = gen;
}

/* The record from a read hint, if nothing changed the message since. */
static bool
ov_from_hint(const struct overlay *ov, uint64_t h, const tli_msg *m,
    const char *id, size_t len, rec *r)
{
	if (m == NULL || m->gen == 0 || m->gen < ov->forget_gen ||
	    ov->mod[h & (MOD_CAP - 1)] > m->gen || m->id_len != len ||
	    memcmp(m->id, id, len) != 0 || m->owner_len == 0 ||
	    m->owner_len > TL_MAX_NAME_LEN ||
	    m->consumer_len > TL_MAX_NAME_LEN) {
		return false;
	}
	memset(r, 0, offsetof(rec, owner));
	r->flags = (uint8_t) ((m->dead ? REC_DEAD : 0) |
	    (m->body_len <= INLINE_MAX ? REC_INLINE : 0));
	if (m->every > 0) {
		r->flags |=
		    (uint8_t) (REC_RECUR | (m->catch_up ? REC_CATCHUP : 0) |
		        (m->off_grid ? REC_OFFGRID : 0));
		r->every = m->every;
		r->start = m->start;
		r->seq = m->seq;
		r->last = m->last;
	}
	r->ts = m->ts;
	r->sched = m->sched;
	r->version = m->version;
	r->created_at = m->created_at;
	r->deliveries = m->deliveries;
	r->bucket = m->bucket;
	r->body_len = (uint32_t) m->body_len;
	r->owner_len = (uint8_t) m->owner_len;
	memcpy(r->owner, m->owner, m->owner_len);
	r->cons_len = (uint8_t) m->consumer_len;
	memcpy(r->cons, m->consumer, m->consumer_len);
	if (r->flags & REC_INLINE) {
		memcpy(r->body, m->body, m->body_len);
	}
	return true;
}

void
tli_overlay_reset(struct overlay *ov)
{
	tli_pool_unindex(&ov->tab, ov->pool, ov->nused, sizeof(ov_ent));
	ov->nused = 0;
}

/* Make the batch's next pool entry e the message's (its record already
 * filled in, when present) and index it. Cannot allocate: the table has room
 * for the whole pool. */
static int
ov_claim(struct overlay *ov, ov_ent *e, const tli_tkey *k, uint64_t h,
    bool present, ov_ent **out)
{
	TLI_ASSERT(e == &ov->pool[ov->nused]);
	e->present = present;
	e->topic = k->topic;
	e->id_len = (uint8_t) k->n;
	memcpy(e->id, k->p, k->n);
	(void) tli_htab_insert(&ov->tab, &e->hn, h);
	ov->nused++;
	*out = e;
	return TL_OK;
}

/* Find the message's entry, loading it from RocksDB on first touch. A
 * fresh id (generated by this create) is not looked up: it names no stored
 * message (genid.c: 48 bits of the time and 80 random bits drawn afresh
 * each millisecond, so a stored id could only match if the same 80 bits
 * were drawn in the same millisecond), and the lookup was a tenth of the
 * writer's time in a fill (every level's filter probed for a key that is
 * nowhere). */
static int
ov_get(tli_store *s, uint32_t topic, const char *id, size_t len,
    const tli_msg *hint, bool fresh, ov_ent **out)
{
	struct overlay *ov = s->ov;
	tli_tkey k = {topic, id, len};
	uint64_t h = tli_tkey_hash(&k);
	tli_hnode *hn = tli_htab_find(&ov->tab, h, ov_is, &k);
	ov_ent *e = &ov->pool[ov->nused];
	uint8_t key[5 + TL_MAX_ID_LEN];
	char *err = NULL, *v;
	size_t vl = 0;
	int rv;

	if (hn != NULL) {
		*out = TLI_CONTAINER(hn, ov_ent, hn);
		return TL_OK;
	}
	TLI_ASSERT(ov->nused < OV_CAP);
	if (fresh) {
		return ov_claim(ov, e, &k, h, false, out);
	}
	if (!s->opts.no_record_cache && cache_get(ov, &k, h, e)) {
		atomic_fetch_add_explicit(
		    &s->st_rec_cached, 1, memory_order_relaxed);
		return ov_claim(ov, e, &k, h, e->present, out);
	}
	if (ov_from_hint(ov, h, hint, id, len, &e->r)) {
		return ov_claim(ov, e, &k, h, true, out);
	}
	atomic_fetch_add_explicit(&s->st_rec_reads, 1, memory_order_relaxed);
	v = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_MSG], (char *) key,
	    tli_key_msg(key, topic, id, len), &vl, &err);
	if (err != NULL) {
		return tli_rdb_err(s, err);
	}
	if (v != NULL) {
		rv = tli_rec_decode(&e->r, (uint8_t *) v, vl);
		rocksdb_free(v);
		if (rv != TL_OK) {
			return rv;
		}
	}
	return ov_claim(ov, e, &k, h, v != NULL, out);
}

/* ---- effects ---- */

/* Which index entries besides the timeline's an update rewrites. The owner
 * entry is keyed by sched, where the producer placed the message: a lease or
 * an extend moves the timeline entry but not the owner's, so they write two
 * keys fewer. An extend leaves the consumer entry too (the same key; its
 * value is the lease's as taken, and readers take ts and version from the
 * record: query.c, cons_fill): two keys fewer again. */
enum { IX_OWN = 1, IX_CONS = 2 };

static void
index_delete(tli_store *s, uint32_t topic, const ov_ent *e, unsigned ix)
{
	uint8_t k[KEY_MAX];
	const rec *r = &e->r;

	tli_stage_del(s, CF_TL, k,
	    tli_key_tl(k, topic, r->bucket, r->ts, e->id, e->id_len));
	if (ix & IX_OWN) {
		tli_stage_del(s, CF_OWN, k,
		    tli_key_own(k, topic, r->owner, r->owner_len, r->sched,
		        e->id, e->id_len));
	}
	if (r->cons_len > 0 && (ix & IX_CONS)) {
		tli_stage_del(s, CF_CONS, k,
		    tli_key_cons(
		        k, topic, r->cons, r->cons_len, e->id, e->id_len));
	}
}

static void
record_put(tli_store *s, uint32_t topic, const ov_ent *e, unsigned ix)
{
	uint8_t k[KEY_MAX], v[REC_MAX], iv[24];
	const rec *r = &e->r;
	bool locked = r->cons_len > 0;

	tli_stage_put(s, CF_MSG, k, tli_key_msg(k, topic, e->id, e->id_len),
	    (char *) v, tli_rec_encode(v, r), false);
	tli_val_tl(iv, r->version, locked);
	tli_stage_put(s, CF_TL, k,
	    tli_key_tl(k, topic, r->bucket, r->ts, e->id, e->id_len),
	    (char *) iv, 9, false);
	if (ix & IX_OWN) {
		tli_stage_put(s, CF_OWN, k,
		    tli_key_own(k, topic, r->owner, r->owner_len, r->sched,
		        e->id, e->id_len),
		    "", 0, false);
	}
	if (locked && (ix & IX_CONS)) {
		size_t vl =
		    tli_val_cons_ahead(iv, r->ts, r->version, e->push_at);
		tli_stage_put(s, CF_CONS, k,
		    tli_key_cons(
		        k, topic, r->cons, r->cons_len, e->id, e->id_len),
		    (char *) iv, vl, false);
	}
}

static void
counters_note(topic_rt *t, int64_t dmsg, int64_t dlocked, int64_t ddead)
{
	t->pend_messages += dmsg;
	t->pend_locked += dlocked;
	t->pend_dead += ddead;
	t->pend_dirty = true;
}

static bool
is_live(const ov_ent *e)
{
	return e->present && (e->r.flags & REC_DEAD) == 0;
}

/* Change ts / lock of a present message: old index entries out, new in.
 * With place, ts is also where the producer's view has it (move, release);
 * without, the owner entry stays (lease, extend). With keep_cons (an extend:
 * the same holder) the consumer entry stays. */
static void
msg_update(tli_store *s, topic_rt *t, ov_ent *e, int64_t ts, const char *cons,
    size_t clen, bool place, bool keep_cons)
{
	bool was_locked = e->r.cons_len > 0;
	unsigned ix = (place && e->r.sched != ts ? IX_OWN : 0) |
	    (keep_cons ? 0 : IX_CONS);

	index_delete(s, t->id, e, ix);
	e->r.ts = ts;
	if (place) {
		e->r.sched = ts;
	}
	e->r.version++;
	e->r.cons_len = (uint8_t) clen;
	memcpy(e->r.cons, cons, clen);
	record_put(s, t->id, e, ix);
	if (was_locked != (clen > 0)) {
		counters_note(t, 0, clen > 0 ? 1 : -1, 0);
	}
}

static void
msg_delete(tli_store *s, topic_rt *t, ov_ent *e)
{
	uint8_t k[KEY_MAX];

	if (is_live(e)) {
		index_delete(s, t->id, e, IX_OWN | IX_CONS);
		counters_note(t, -1, e->r.cons_len > 0 ? -1 : 0, 0);
	} else {
		tli_stage_del(
		    s, CF_MSG, k, tli_key_dead(k, t->id, e->id, e->id_len));
		counters_note(t, 0, 0, -1);
	}
	tli_owner_note(s->owners, t->id, e->r.owner, e->r.owner_len, -1);
	tli_stage_del(s, CF_MSG, k, tli_key_msg(k, t->id, e->id, e->id_len));
	if (!(e->r.flags & REC_INLINE)) {
		tli_stage_del(
		    s, CF_MSG, k, tli_key_body(k, t->id, e->id, e->id_len));
	}
	e->present = false;
}

/* Leave the timeline for the dead-letter list: the record stays (marked),
 * its index entries go, a dead index entry comes. */
static void
msg_dead_letter(tli_store *s, topic_rt *t, ov_ent *e, int64_t now)
{
	uint8_t k[KEY_MAX], v[REC_MAX], dv[16];

	index_delete(s, t->id, e, IX_OWN | IX_CONS);
	counters_note(t, -1, e->r.cons_len > 0 ? -1 : 0, 1);
	e->r.flags |= REC_DEAD;
	e->r.cons_len = 0;
	e->r.version++;
	tli_stage_put(s, CF_MSG, k, tli_key_msg(k, t->id, e->id, e->id_len),
	    (char *) v, tli_rec_encode(v, &e->r), false);
	tli_val_cons(dv, now, e->r.version);
	tli_stage_put(s, CF_MSG, k, tli_key_dead(k, t->id, e->id, e->id_len),
	    (char *) dv, 16, false);
}

/* ---- recurrences ---- */

/* Occurrence k's grid time; in range for 1 <= k <= last (checked at create
 * and move). */
static int64_t
recur_at(const rec *r, uint32_t k)
{
	return r->start + (int64_t) (k - 1) * r->every;
}

/* The occurrence a holder's delete places next, or 0 when the series is
 * over: the next one with catch_up, else the first whose grid time is after
 * now (missed ones are skipped; the overdue one was just delivered). */
static uint32_t
recur_next(const rec *r, int64_t now)
{
	int64_t j;

	if (r->seq >= r->last) {
		return 0;
	}
	j = (int64_t) r->seq + 1;
	if (!(r->flags & REC_CATCHUP) && recur_at(r, (uint32_t) j) <= now) {
		j = (now - r->start) / r->every + 2;
	}
	return j > (int64_t) r->last ? 0 : (uint32_t) j;
}

/* Mark whether ts (a release's or a kick's) is off the occurrence's grid
 * time: then sched is not that grid time (the checker allows it). */
static void
recur_note_place(rec *r, int64_t ts)
{
	if (!(r->flags & REC_RECUR)) {
		return;
	}
	if (ts == recur_at(r, r->seq)) {
		r->flags &= (uint8_t) ~REC_OFFGRID;
	} else {
		r->flags |= REC_OFFGRID;
	}
}

/* A create's recurrence: *last is the number of occurrences (0: none). */
static int
check_recur(const tli_op *op, int64_t ts, uint32_t *last)
{
	int64_t n;

	*last = 0;
	if (op->every_ms == 0) {
		return op->times != 0 || op->until != 0 || op->catch_up
		    ? TL_EINVAL
		    : TL_OK;
	}
	if (op->every_ms < 0) {
		return TL_ERANGE;
	}
	if ((op->times != 0) == (op->until != 0)) {
		return TL_EINVAL; /* no end (open-ended), or two */
	}
	if (op->until != 0) {
		if (op->until > TL_TS_MAX) {
			return TL_ERANGE;
		}
		if (op->until < ts) {
			return TL_EINVAL;
		}
		n = (op->until - ts) / op->every_ms + 1;
	} else {
		n = op->times;
	}
	if (n > UINT32_MAX || n - 1 > (TL_TS_MAX - ts) / op->every_ms) {
		return TL_ERANGE;
	}
	*last = (uint32_t) n;
	return TL_OK;
}

/* An owner's move shifts the series: occurrence seq at ts, the last one
 * must stay in range. */
static int
check_move_recur(const rec *r, int64_t ts)
{
	if (!(r->flags & REC_RECUR)) {
		return TL_OK;
	}
	if ((int64_t) (r->last - r->seq) > (TL_TS_MAX - ts) / r->every) {
		return TL_ERANGE;
	}
	return TL_OK;
}

/* The holder's delete of a recurring occurrence that is not the last one
 * of the series: the same message becomes occurrence j on the grid,
 * unlocked, its deliveries counted afresh; the producer-style placement
 * moves the owner entry too. */
static void
msg_advance(tli_store *s, topic_rt *t, ov_ent *e, uint32_t j)
{
	e->r.seq = j;
	e->r.deliveries = 0;
	e->r.flags &= (uint8_t) ~REC_OFFGRID;
	msg_update(s, t, e, recur_at(&e->r, j), "", 0, true, false);
}

/* Back from the dead-letter list onto the timeline at ts, deliveries 0. */
static void
msg_kick(tli_store *s, topic_rt *t, ov_ent *e, int64_t ts)
{
	uint8_t k[KEY_MAX];

	tli_stage_del(s, CF_MSG, k, tli_key_dead(k, t->id, e->id, e->id_len));
	counters_note(t, 1, 0, -1);
	e->r.flags &= (uint8_t) ~REC_DEAD;
	e->r.deliveries = 0;
	e->r.ts = ts;
	e->r.sched = ts;
	recur_note_place(&e->r, ts);
	e->r.version++;
	record_put(s, t->id, e, IX_OWN | IX_CONS);
}

static void
msg_create(tli_store *s, topic_rt *t, ov_ent *e, const tli_op *op, int64_t ts,
    int64_t now, uint32_t last)
{
	uint8_t k[KEY_MAX];

	memset(&e->r, 0, sizeof(e->r));
	if (last > 0) {
		e->r.flags =
		    (uint8_t) (REC_RECUR | (op->catch_up ? REC_CATCHUP : 0));
		e->r.every = op->every_ms;
		e->r.start = ts;
		e->r.seq = 1;
		e->r.last = last;
	}
	e->r.ts = ts;
	e->r.sched = ts;
	e->r.version = 1;
	e->r.created_at = now;
	e->r.bucket = tli_bucket_of(e->id, e->id_len, t->conf.buckets);
	e->r.body_len = (uint32_t) op->body_len;
	e->r.owner_len = (uint8_t) op->who_len;
	memcpy(e->r.owner, op->who, op->who_len);
	e->present = true;
	if (op->body_len <= INLINE_MAX) {
		e->r.flags |= REC_INLINE;
		memcpy(
		    e->r.body, op->body != NULL ? op->body : "", op->body_len);
	} else {
		tli_stage_put(s, CF_MSG, k,
		    tli_key_body(k, t->id, e->id, e->id_len), op->body,
		    op->body_len, true);
	}
	record_put(s, t->id, e, IX_OWN | IX_CONS);
	counters_note(t, 1, 0, 0);
	tli_owner_note(s->owners, t->id, op->who, op->who_len, 1);
}

/* ---- checks ---- */

static bool
op_has_ts(tli_op_type type)
{
	return type == TLI_OP_CREATE || type == TLI_OP_LEASE ||
	    type == TLI_OP_EXTEND || type == TLI_OP_RELEASE ||
	    type == TLI_OP_MOVE || type == TLI_OP_DLQ_KICK;
}

static int
check_input(const topic_rt *t, const tli_op *op, size_t id_len)
{
	if (op->type < TLI_OP_CREATE || op->type > TLI_OP_DLQ_KICK) {
		return TL_EINVAL;
	}
	if (id_len == 0) {
		return TL_EBADID;
	}
	if (id_len > TL_MAX_ID_LEN) {
		return TL_ETOOLARGE;
	}
	if (op->who == NULL || op->who_len == 0) {
		return TL_EBADID;
	}
	if (op->who_len > TL_MAX_NAME_LEN) {
		return TL_ETOOLARGE;
	}
	if (op->type == TLI_OP_CREATE) {
		if (op->body_len > t->conf.max_body) {
			return TL_ETOOLARGE;
		}
		if (op->body == NULL && op->body_len > 0) {
			return TL_EINVAL;
		}
	}
	return TL_OK;
}

/* The instant an operation acts at: now, or a lease's due time ahead. */
static int64_t
op_base(const tli_op *op, int64_t now)
{
	return op->type == TLI_OP_LEASE && op->at > now ? op->at : now;
}

static int
resolve_ts(const tli_op *op, int64_t now, int64_t *ts)
{
	if (op->ts < -TL_TS_MAX || op->ts > TL_TS_MAX) {
		return TL_ERANGE;
	}
	*ts = op->ts_mode == TLI_TS_REL ? op_base(op, now) + op->ts : op->ts;
	if (*ts < TL_TS_MIN || *ts > TL_TS_MAX) {
		return TL_ERANGE;
	}
	return TL_OK;
}

static int
check_time(
    tli_store *s, const topic_rt *t, const tli_op *op, int64_t ts, int64_t now)
{
	int64_t base = op_base(op, now);

	switch (op->type) {
	case TLI_OP_LEASE:
		if (op->at > now + TLI_LEASE_AHEAD_MAX) {
			return TL_ERANGE;
		}
		/* fall through */
	case TLI_OP_EXTEND:
		if (ts < base + s->opts.min_lease_gap_ms) {
			return TL_ETOOCLOSE;
		}
		if (ts - base > t->conf.max_lease_ms) {
			return TL_ELEASELIMIT;
		}
		return TL_OK;
	case TLI_OP_RELEASE:
		return ts < now ? TL_ETOOCLOSE : TL_OK;
	default:
		return TL_OK;
	}
}

static bool
is_holder(const rec *r, const tli_op *op)
{
	return r->cons_len == op->who_len &&
	    memcmp(r->cons, op->who, op->who_len) == 0;
}

static int
check_holder(const ov_ent *e, const tli_op *op, int64_t now)
{
	if (!is_live(e)) {
		return TL_ENOTFOUND;
	}
	if (e->r.cons_len == 0) {
		return TL_ENOTLEASED;
	}
	if (!is_holder(&e->r, op)) {
		return TL_ELEASED;
	}
	if (e->r.version != op->version) {
		return TL_EVERSION;
	}
	if (e->r.ts <= now) {
		return TL_ELEASEEXPIRED;
	}
	return TL_OK;
}

static int
check_owner(const ov_ent *e, const tli_op *op, int64_t now)
{
	if (!e->present) {
		return TL_ENOTFOUND;
	}
	if (e->r.owner_len != op->who_len ||
	    memcmp(e->r.owner, op->who, op->who_len) != 0) {
		return TL_ENOTOWNER;
	}
	if (op->version != 0 && e->r.version != op->version) {
		return TL_EVERSION;
	}
	if (is_live(e) && e->r.cons_len > 0 && e->r.ts > now) {
		return TL_ELEASED;
	}
	return TL_OK;
}

/* A lease: due by its base (now, or the due time it is taken ahead for),
 * and nobody's active lease now, even one that runs out before that. */
static int
check_lease(const ov_ent *e, const tli_op *op, int64_t now)
{
	if (!is_live(e)) {
		return TL_ENOTFOUND;
	}
	if (op->version != 0 && e->r.version != op->version) {
		return TL_EVERSION;
	}
	if (e->r.cons_len > 0 && e->r.ts > now) {
		return TL_ELEASED;
	}
	if (e->r.ts > op_base(op, now)) {
		return TL_ENOTDUE;
	}
	return TL_OK;
}

/* ---- one operation ---- */

static int
apply(tli_store *s, tli_op *op)
{
	topic_rt *t = tli_topic_find(s, op->topic);
	int64_t now = tli_clock_now(&s->opts.clock), ts = 0;
	const char *id = op->id;
	size_t id_len = op->id_len;
	ov_ent *e = NULL;
	bool fresh = false;
	uint32_t last = 0, next;
	int rv;

	if (t == NULL) {
		return TL_ENOTOPIC;
	}
	if (op->type == TLI_OP_CREATE && id_len == 0) {
		tli_gen_id(op->gen_id, now);
		id = op->gen_id;
		id_len = TL_GEN_ID_LEN;
		fresh = true;
	} else if (id == NULL) {
		id_len = 0;
	}
	if ((rv = check_input(t, op, id_len)) != TL_OK) {
		return rv;
	}
	if (op_has_ts(op->type) &&
	    ((rv = resolve_ts(op, now, &ts)) != TL_OK ||
	        (rv = check_time(s, t, op, ts, now)) != TL_OK)) {
		return rv;
	}
	if (op->type == TLI_OP_CREATE &&
	    (rv = check_recur(op, ts, &last)) != TL_OK) {
		return rv;
	}
	if ((rv = ov_get(s, t->id, id, id_len,
	         op->type == TLI_OP_CREATE ? NULL : op->hint, fresh, &e)) !=
	    TL_OK) {
		return rv;
	}
	e->push_at = 0;
	switch (op->type) {
	case TLI_OP_CREATE:
		if (e->present) {
			return TL_EEXISTS;
		}
		msg_create(s, t, e, op, ts, now, last);
		break;
	case TLI_OP_LEASE:
		if ((rv = check_lease(e, op, now)) != TL_OK) {
			if (rv == TL_ELEASED || rv == TL_ENOTDUE) {
				/* When to try again: the holder's lease end,
				 * or the time the message is placed at. */
				op->new_ts = e->r.ts;
			}
			return rv;
		}
		e->push_at = op_base(op, now) > now ? op->at : 0;
		if (!op->no_dead_letter && t->conf.max_deliveries > 0 &&
		    e->r.deliveries >= t->conf.max_deliveries) {
			msg_dead_letter(s, t, e, now);
			op->new_version = e->r.version;
			op->deliveries = e->r.deliveries;
			op->bucket = e->r.bucket;
			return TL_EDEAD;
		}
		e->r.deliveries++;
		msg_update(s, t, e, ts, op->who, op->who_len, false, false);
		break;
	case TLI_OP_EXTEND:
		if ((rv = check_holder(e, op, now)) != TL_OK) {
			return rv;
		}
		msg_update(s, t, e, ts, e->r.cons, e->r.cons_len, false, true);
		break;
	case TLI_OP_RELEASE:
		if ((rv = check_holder(e, op, now)) != TL_OK) {
			return rv;
		}
		recur_note_place(&e->r, ts);
		msg_update(s, t, e, ts, "", 0, true, false);
		break;
	case TLI_OP_DELETE_LEASED:
		if ((rv = check_holder(e, op, now)) != TL_OK) {
			return rv;
		}
		if ((e->r.flags & REC_RECUR) &&
		    (next = recur_next(&e->r, now)) != 0) {
			msg_advance(s, t, e, next);
		} else {
			msg_delete(s, t, e);
		}
		break;
	case TLI_OP_DELETE_OWNED:
		if ((rv = check_owner(e, op, now)) != TL_OK) {
			return rv;
		}
		msg_delete(s, t, e);
		break;
	case TLI_OP_MOVE:
		if (!is_live(e)) {
			return TL_ENOTFOUND;
		}
		if ((rv = check_owner(e, op, now)) != TL_OK ||
		    (rv = check_move_recur(&e->r, ts)) != TL_OK) {
			return rv;
		}
		if (e->r.flags & REC_RECUR) {
			e->r.start = ts - (int64_t) (e->r.seq - 1) * e->r.every;
			e->r.flags &= (uint8_t) ~REC_OFFGRID;
		}
		msg_update(s, t, e, ts, "", 0, true, false);
		break;
	case TLI_OP_DLQ_KICK:
		if (!e->present || is_live(e)) {
			return TL_ENOTFOUND;
		}
		msg_kick(s, t, e, ts);
		break;
	}
	op->bucket = e->r.bucket;
	op->deliveries = e->r.deliveries;
	op->new_version = is_live(e) ? e->r.version : 0;
	op->new_ts = is_live(e) ? e->r.ts : 0;
	op->seq = is_live(e) ? e->r.seq : 0;
	return TL_OK;
}

void
tli_apply_op(tli_store *s, tli_op *op)
{
	op->new_version = 0;
	op->new_ts = 0;
	op->seq = 0;
	op->replayed = false;
	op->err = apply(s, op);
}
