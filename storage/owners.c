/*
 * Per-owner message counts: how many messages each producer group has in a
 * topic (on the timeline or in the dead-letter list). They let the broker
 * cap what one group may store. Kept like the topic counters: the writer
 * collects a batch's deltas in a tli_htab, then adds one put per touched
 * (topic, owner) to the same WriteBatch, so the counts are exact after any
 * crash. A count that reaches zero is deleted, so the table does not grow
 * with owners that come and go.
 *
 * Key (default column family): 'O' topic(4) owner. Value: count(8).
 */
#include <string.h>

#include "store_int.h"

typedef struct own_ent {
	tli_hnode hn; /* first: in the batch's table, by tli_tkey_hash */
	uint32_t topic;
	uint8_t len;
	int64_t delta;
	char owner[TL_MAX_NAME_LEN];
} own_ent;

/* The pool and the table stay between batches: a batch allocates only
 * when it touches more owners than any batch before it. */
struct owner_deltas {
	own_ent *pool; /* cap entries; the first n in order of first touch */
	size_t cap;
	size_t n;
	tli_htab tab;
	bool oom;
};

size_t
tli_key_meta_owner(uint8_t *k, uint32_t topic, const char *owner, size_t olen)
{
	k[0] = 'O';
	tli_put_be32(k + 1, topic);
	memcpy(k + 5, owner, olen);
	return 5 + olen;
}

struct owner_deltas *
tli_owner_deltas_new(void)
{
	struct owner_deltas *d = tli_zalloc(sizeof(*d));

	if (d != NULL) {
		tli_htab_init(&d->tab);
	}
	return d;
}

void
tli_owner_deltas_free(struct owner_deltas *d)
{
	if (d == NULL) {
		return;
	}
	tli_htab_fini(&d->tab);
	tli_free(d->pool);
	tli_free(d);
}

void
tli_owner_deltas_reset(struct owner_deltas *d)
{
	tli_pool_unindex(&d->tab, d->pool, d->n, sizeof(own_ent));
	d->n = 0;
	d->oom = false;
}

static bool
own_is(const tli_hnode *hn, const void *key)
{
	const own_ent *e = TLI_CONTAINER(hn, own_ent, hn);

	return tli_tkey_is(key, e->topic, e->owner, e->len);
}

/* A pool twice as large; the table first gets room for all of it, so the
 * entries moved over are indexed again without allocating. Nothing changes
 * when memory is short. */
static int
grow(struct owner_deltas *d)
{
	size_t ncap = d->cap == 0 ? 64 : d->cap * 2;
	own_ent *np;

	if (tli_htab_reserve(&d->tab, ncap) != TL_OK ||
	    (np = tli_alloc(ncap * sizeof(*np))) == NULL) {
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < d->n; i++) {
		tli_htab_remove(&d->tab, &d->pool[i].hn);
		np[i] = d->pool[i];
		(void) tli_htab_insert(&d->tab, &np[i].hn, np[i].hn.hash);
	}
	tli_free(d->pool);
	d->pool = np;
	d->cap = ncap;
	return TL_OK;
}

void
tli_owner_note(struct owner_deltas *d, uint32_t topic, const char *owner,
    size_t olen, int64_t delta)
{
	tli_tkey k = {topic, owner, olen};
	uint64_t h = tli_tkey_hash(&k);
	tli_hnode *hn = tli_htab_find(&d->tab, h, own_is, &k);
	own_ent *e;

	if (hn != NULL) {
		TLI_CONTAINER(hn, own_ent, hn)->delta += delta;
		return;
	}
	if (d->n == d->cap && grow(d) != TL_OK) {
		d->oom = true;
		return;
	}
	e = &d->pool[d->n++];
	e->topic = topic;
	e->len = (uint8_t) olen;
	memcpy(e->owner, owner, olen);
	e->delta = delta;
	(void) tli_htab_insert(&d->tab, &e->hn, h);
}

static int
count_get(tli_store *s, const uint8_t *k, size_t kl, uint64_t *out)
{
	uint8_t v[8];
	bool found;
	int rv = tli_rdb_get_fixed(s, k, kl, v, sizeof(v), &found);

	if (rv == TL_OK) {
		*out = found ? tli_get_be64(v) : 0;
	}
	return rv;
}

/* Writer thread, after the batch's operations: add the new counts to the
 * WriteBatch. The committed counts are read back from the database (one
 * point lookup per touched owner and batch, usually from the memtable). */
int
tli_owner_stage(tli_store *s, struct owner_deltas *d)
{
	if (d->oom) {
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < d->n; i++) {
		own_ent *e = &d->pool[i];
		uint8_t k[5 + TL_MAX_NAME_LEN], v[8];
		size_t kl;
		uint64_t cur;
		int rv;

		if (e->delta == 0) {
			continue;
		}
		kl = tli_key_meta_owner(k, e->topic, e->owner, e->len);
		if ((rv = count_get(s, k, kl, &cur)) != TL_OK) {
			return rv;
		}
		cur = (uint64_t) ((int64_t) cur + e->delta);
		if (cur == 0) {
			rocksdb_writebatch_delete_cf(
			    s->wb, s->cf[CF_DEFAULT], (const char *) k, kl);
		} else {
			tli_put_be64(v, cur);
			rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT],
			    (const char *) k, kl, (const char *) v, 8);
		}
	}
	return TL_OK;
}

/* With db_lock held for reading. */
static int
locked_owner_count_topic(tli_store *s, const char *topic, const char *owner,
    size_t olen, uint64_t *out)
{
	uint8_t k[5 + TL_MAX_NAME_LEN];
	tli_topic_conf conf;
	uint32_t id;
	int rv;

	if (owner == NULL || olen == 0 || olen > TL_MAX_NAME_LEN) {
		return TL_EBADID;
	}
	if ((rv = tli_topic_lookup(s, topic, &id, &conf)) != TL_OK) {
		return rv;
	}
	return count_get(s, k, tli_key_meta_owner(k, id, owner, olen), out);
}

int
tli_store_owner_count_topic(tli_store *s, const char *topic, const char *owner,
    size_t olen, uint64_t *out)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_owner_count_topic(s, topic, owner, olen, out);
		tli_db_unlock(s);
	}
	return rv;
}

/* With db_lock held for reading. */
static int
locked_owner_count(tli_store *s, const char *owner, size_t olen, uint64_t *out)
{
	uint8_t k[5 + TL_MAX_NAME_LEN];
	uint32_t *ids;
	size_t n;
	uint64_t sum = 0;
	int rv = TL_OK;

	if (owner == NULL || olen == 0 || olen > TL_MAX_NAME_LEN) {
		return TL_EBADID;
	}
	pthread_rwlock_rdlock(&s->topics_lock);
	n = s->ntopics;
	ids = tli_alloc((n > 0 ? n : 1) * sizeof(*ids));
	for (size_t i = 0; ids != NULL && i < n; i++) {
		ids[i] = s->topics[i]->id;
	}
	pthread_rwlock_unlock(&s->topics_lock);
	if (ids == NULL) {
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < n && rv == TL_OK; i++) {
		uint64_t c = 0;
		rv = count_get(
		    s, k, tli_key_meta_owner(k, ids[i], owner, olen), &c);
		sum += c;
	}
	tli_free(ids);
	if (rv == TL_OK) {
		*out = sum;
	}
	return rv;
}

int
tli_store_owner_count(
    tli_store *s, const char *owner, size_t olen, uint64_t *out)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_owner_count(s, owner, olen, out);
		tli_db_unlock(s);
	}
	return rv;
}

void
tli_owner_each(struct owner_deltas *d,
    void (*fn)(void *arg, uint32_t topic, const char *owner, size_t olen,
        int64_t count),
    void *arg)
{
	for (size_t i = 0; i < d->n; i++) {
		own_ent *e = &d->pool[i];
		fn(arg, e->topic, e->owner, e->len, e->delta);
	}
}

bool
tli_owner_oom(const struct owner_deltas *d)
{
	return d->oom;
}

/* Count every record (timeline and dead letters) by (topic, owner) into d,
 * reading through ro. Used by the format migration and the checker. */
int
tli_owner_tally(tli_store *s, rocksdb_readoptions_t *ro, struct owner_deltas *d)
{
	rocksdb_iterator_t *it =
	    rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_MSG]);
	char *err = NULL;
	int rv = TL_OK;

	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl, vl;
		const uint8_t *k = (const uint8_t *) rocksdb_iter_key(it, &kl);
		const uint8_t *v;
		rec r;

		if (kl <= 5 || k[4] != 'm') {
			continue;
		}
		v = (const uint8_t *) rocksdb_iter_value(it, &vl);
		if (tli_rec_decode(&r, v, vl) != TL_OK) {
			continue; /* the checker reports it */
		}
		tli_owner_note(d, tli_get_be32(k), r.owner, r.owner_len, 1);
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err != NULL) {
		rv = tli_rdb_err(s, err);
	}
	return rv == TL_OK && d->oom ? TL_ENOMEM : rv;
}

static void
put_count(
    void *arg, uint32_t topic, const char *owner, size_t olen, int64_t count)
{
	tli_store *s = arg;
	uint8_t k[5 + TL_MAX_NAME_LEN], v[8];

	tli_put_be64(v, (uint64_t) count);
	rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT], (const char *) k,
	    tli_key_meta_owner(k, topic, owner, olen), (const char *) v, 8);
}

/* Format 1 had no per-owner counts: count the records once, write the
 * counts and the new format number in one synced batch. */
int
tli_owner_migrate(tli_store *s)
{
	struct owner_deltas *d = tli_owner_deltas_new();
	char *err = NULL;
	uint8_t v[4];
	int rv;

	if (d == NULL) {
		return TL_ENOMEM;
	}
	if ((rv = tli_owner_tally(s, s->ropts, d)) == TL_OK) {
		rocksdb_writebatch_clear(s->wb);
		tli_owner_each(d, put_count, s);
		tli_put_be32(v, TLI_STORE_FORMAT);
		rocksdb_writebatch_put_cf(
		    s->wb, s->cf[CF_DEFAULT], "F", 1, (char *) v, 4);
		rocksdb_write(s->db, s->wopts, s->wb, &err);
		rv = tli_rdb_err(s, err);
		rocksdb_writebatch_clear(s->wb);
	}
	tli_owner_deltas_free(d);
	return rv;
}

int64_t
tli_owner_get(
    struct owner_deltas *d, uint32_t topic, const char *owner, size_t olen)
{
	tli_tkey k = {topic, owner, olen};
	tli_hnode *hn = tli_htab_find(&d->tab, tli_tkey_hash(&k), own_is, &k);

	return hn != NULL ? TLI_CONTAINER(hn, own_ent, hn)->delta : 0;
}
