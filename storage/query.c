/*
 * Reads of the timeline store: lookup, the due scan of one bucket, the
 * consumer and owner scans, counts by range and status, and topic totals.
 * They run on the caller's thread straight against RocksDB; every
 * acknowledged operation is visible to them.
 */
#include "store_int.h"

/* An iterator over [lo, hi) of one column family. The upper bound is not
 * copied by RocksDB: hi must outlive the iterator. The caller destroys the
 * iterator, then *ro. */
rocksdb_iterator_t *
tli_iter(tli_store *s, int cf, const uint8_t *lo, size_t lolen,
    const uint8_t *hi, size_t hilen, rocksdb_readoptions_t **ro)
{
	rocksdb_iterator_t *it;

	*ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_iterate_upper_bound(
	    *ro, (const char *) hi, hilen);
	/* The lower bound lets RocksDB skip whole files and deleted ranges
	 * before it; the bound must outlive the iterator, as hi. */
	rocksdb_readoptions_set_iterate_lower_bound(
	    *ro, (const char *) lo, lolen);
	it = rocksdb_create_iterator_cf(s->db, *ro, s->cf[cf]);
	rocksdb_iter_seek(it, (const char *) lo, lolen);
	return it;
}

/* Scan state kept on the stack: the bounds live here for the iterator. */
typedef struct scan {
	uint8_t lo[KEY_MAX];
	uint8_t hi[KEY_MAX];
	size_t lolen;
	size_t hilen;
	rocksdb_readoptions_t *ro;
	rocksdb_iterator_t *it;
} scan;

/* Whether the scan stands on an entry; if so its key and value. */
static bool
scan_kv(const scan *sc, const uint8_t **k, size_t *kl, const uint8_t **v,
    size_t *vl)
{
	if (!rocksdb_iter_valid(sc->it)) {
		return false;
	}
	*k = (const uint8_t *) rocksdb_iter_key(sc->it, kl);
	*v = (const uint8_t *) rocksdb_iter_value(sc->it, vl);
	return true;
}

static void
scan_open(tli_store *s, scan *sc, int cf)
{
	sc->it = tli_iter(s, cf, sc->lo, sc->lolen, sc->hi, sc->hilen, &sc->ro);
}

/* As scan_open, reading at a snapshot (so that further reads through
 * sc->ro see the same state). */
static void
scan_open_snap(tli_store *s, scan *sc, int cf, const rocksdb_snapshot_t *snap)
{
	if (snap == NULL) {
		scan_open(s, sc, cf);
		return;
	}
	sc->ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_iterate_upper_bound(
	    sc->ro, (const char *) sc->hi, sc->hilen);
	rocksdb_readoptions_set_iterate_lower_bound(
	    sc->ro, (const char *) sc->lo, sc->lolen);
	rocksdb_readoptions_set_snapshot(sc->ro, snap);
	sc->it = rocksdb_create_iterator_cf(s->db, sc->ro, s->cf[cf]);
	rocksdb_iter_seek(sc->it, (const char *) sc->lo, sc->lolen);
}

static int
scan_close(tli_store *s, scan *sc)
{
	char *err = NULL;

	rocksdb_iter_get_error(sc->it, &err);
	rocksdb_iter_destroy(sc->it);
	rocksdb_readoptions_destroy(sc->ro);
	return tli_rdb_err(s, err);
}

/* The smallest key greater than every key that starts with p[0..len). */
static size_t
prefix_end(uint8_t *out, const uint8_t *p, size_t len)
{
	memcpy(out, p, len);
	while (len > 0) {
		if (out[len - 1] != 0xff) {
			out[len - 1]++;
			return len;
		}
		len--;
	}
	return 0; /* unreachable for our prefixes: topic ids < 2^32-1 */
}

void
tli_cursor_from_entry(tli_cursor *c, const tli_entry *e)
{
	c->valid = true;
	c->ts = e->ts;
	c->id_len = e->id_len;
	memcpy(c->id, e->id, e->id_len);
}

/* Open positioned just after the cursor key ck: one seek, straight to it.
 * (Seeking to the start of the range first would walk every deleted key
 * before the cursor: a bucket's head is all tombstones of delivered
 * messages until compaction drops them.) */
static void
scan_open_after(tli_store *s, scan *sc, int cf, const uint8_t *ck, size_t cklen,
    const rocksdb_snapshot_t *snap)
{
	size_t kl;
	const char *k;

	memcpy(sc->lo, ck, cklen);
	sc->lolen = cklen;
	scan_open_snap(s, sc, cf, snap);
	if (rocksdb_iter_valid(sc->it)) {
		k = rocksdb_iter_key(sc->it, &kl);
		if (kl == cklen && memcmp(k, ck, kl) == 0) {
			rocksdb_iter_next(sc->it);
		}
	}
}

static int
check_name(const char *p, size_t len)
{
	if (p == NULL || len == 0) {
		return TL_EBADID;
	}
	return len > TL_MAX_NAME_LEN ? TL_ETOOLARGE : TL_OK;
}

/* With db_lock held for reading. */
static int
locked_scan_due(tli_store *s, const char *topic, uint32_t bucket, int64_t up_to,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more)
{
	tli_topic_conf conf;
	uint32_t tid;
	scan sc;
	size_t got = 0;
	int rv;

	*n = 0;
	*more = false;
	if ((rv = tli_topic_lookup(s, topic, &tid, &conf)) != TL_OK) {
		return rv;
	}
	if (bucket >= conf.buckets) {
		return TL_EINVAL;
	}
	if (up_to < TL_TS_MIN) {
		return TL_OK;
	}
	if (up_to > TL_TS_MAX) {
		up_to = TL_TS_MAX;
	}
	sc.lolen = tli_key_tl(sc.lo, tid, bucket, TL_TS_MIN, "", 0);
	sc.hilen = tli_key_tl(sc.hi, tid, bucket, up_to + 1, "", 0);
	if (after != NULL && after->valid) {
		uint8_t ck[KEY_MAX];
		scan_open_after(s, &sc, CF_TL, ck,
		    tli_key_tl(
		        ck, tid, bucket, after->ts, after->id, after->id_len),
		    NULL);
	} else {
		scan_open(s, &sc, CF_TL);
	}
	size_t kl, vl;
	const uint8_t *k, *v;

	for (; scan_kv(&sc, &k, &kl, &v, &vl); rocksdb_iter_next(sc.it)) {
		tli_entry *e;

		if (got == max) {
			*more = true;
			break;
		}
		if (kl <= 16 || kl > 16 + TL_MAX_ID_LEN || vl != 9) {
			rv = TL_ECORRUPT;
			break;
		}
		e = &out[got++];
		e->ts = (int64_t) tli_get_be64(k + 8);
		e->bucket = bucket;
		e->version = tli_get_be64(v);
		e->locked = v[8] != 0;
		e->push_at = 0;
		e->id_len = (uint8_t) (kl - 16);
		memcpy(e->id, k + 16, e->id_len);
		e->id[e->id_len] = '\0';
	}
	*n = got;
	{
		int rv2 = scan_close(s, &sc);
		return rv != TL_OK ? rv : rv2;
	}
}

int
tli_store_scan_due(tli_store *s, const char *topic, uint32_t bucket,
    int64_t up_to, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_scan_due(
		    s, topic, bucket, up_to, after, out, max, n, more);
		tli_db_unlock(s);
	}
	return rv;
}

/* The entries of a scan whose keys are prefix + id and whose values are
 * ts(8) version(8): the consumer and the dead-letter indexes. Closes the
 * scan. */
static int
scan_id_entries(tli_store *s, scan *sc, size_t pre, uint32_t buckets,
    bool locked, tli_entry *out, size_t max, size_t *n, bool *more)
{
	size_t got = 0;
	int rv = TL_OK, rv2;

	size_t kl, vl;
	const uint8_t *k, *v;

	for (; scan_kv(sc, &k, &kl, &v, &vl); rocksdb_iter_next(sc->it)) {
		tli_entry *e;

		if (got == max) {
			*more = true;
			break;
		}
		if (kl <= pre || kl > pre + TL_MAX_ID_LEN ||
		    (vl != 16 && !(locked && vl == 24))) {
			rv = TL_ECORRUPT;
			break;
		}
		e = &out[got++];
		e->ts = (int64_t) tli_get_be64(v);
		e->version = tli_get_be64(v + 8);
		e->push_at = vl == 24 ? (int64_t) tli_get_be64(v + 16) : 0;
		e->locked = locked;
		e->id_len = (uint8_t) (kl - pre);
		memcpy(e->id, k + pre, e->id_len);
		e->id[e->id_len] = '\0';
		e->bucket = tli_bucket_of(e->id, e->id_len, buckets);
	}
	*n = got;
	rv2 = scan_close(s, sc);
	return rv != TL_OK ? rv : rv2;
}

/* The record of an index entry (topic tid, id), read through ro (at the
 * index scan's snapshot): an index entry and its record are written in one
 * batch, so a missing or unreadable record is TL_ECORRUPT. */
static int
entry_record(tli_store *s, rocksdb_readoptions_t *ro, uint32_t tid,
    const char *id, size_t id_len, rec *r)
{
	uint8_t mk[5 + TL_MAX_ID_LEN];
	char *v, *err = NULL;
	size_t vl = 0;
	int rv;

	v = rocksdb_get_cf(s->db, ro, s->cf[CF_MSG], (char *) mk,
	    tli_key_msg(mk, tid, id, id_len), &vl, &err);
	if (err != NULL) {
		return tli_rdb_err(s, err);
	}
	rv = v != NULL && tli_rec_decode(r, (uint8_t *) v, vl) == TL_OK
	    ? TL_OK
	    : TL_ECORRUPT;
	rocksdb_free(v);
	return rv;
}

/* A consumer entry's value is the lease's as it was taken (ts, version
 * and, for a lease taken ahead, its due time); an extend leaves the entry
 * (ops.c, index_delete). The lease as it is now comes from the record, read
 * at the snapshot of the scan: ts and version; the due time only while the
 * record is still at the version the entry has. */
static int
cons_fill(tli_store *s, uint32_t tid, const rocksdb_snapshot_t *snap,
    tli_entry *out, size_t n)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	int rv = TL_OK;

	rocksdb_readoptions_set_snapshot(ro, snap);
	for (size_t i = 0; i < n && rv == TL_OK; i++) {
		tli_entry *e = &out[i];
		rec r;

		if ((rv = entry_record(s, ro, tid, e->id, e->id_len, &r)) !=
		    TL_OK) {
			break;
		}
		if (r.cons_len == 0 || r.version < e->version) {
			rv =
			    TL_ECORRUPT; /* written in one batch: never apart */
			break;
		}
		if (r.version != e->version) {
			e->push_at = 0; /* extended since */
		}
		e->ts = r.ts;
		e->version = r.version;
	}
	rocksdb_readoptions_destroy(ro);
	return rv;
}

/* With db_lock held for reading. */
static int
locked_scan_consumer(tli_store *s, const char *topic, const char *consumer,
    size_t consumer_len, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more)
{
	const rocksdb_snapshot_t *snap;
	tli_topic_conf conf;
	uint32_t tid;
	size_t pre;
	scan sc;
	int rv;

	*n = 0;
	*more = false;
	if ((rv = tli_topic_lookup(s, topic, &tid, &conf)) != TL_OK ||
	    (rv = check_name(consumer, consumer_len)) != TL_OK) {
		return rv;
	}
	pre = tli_key_cons(sc.lo, tid, consumer, consumer_len, "", 0);
	sc.lolen = pre;
	sc.hilen = prefix_end(sc.hi, sc.lo, pre);
	snap = rocksdb_create_snapshot(s->db);
	if (after != NULL && after->valid) {
		uint8_t ck[KEY_MAX];
		scan_open_after(s, &sc, CF_CONS, ck,
		    tli_key_cons(ck, tid, consumer, consumer_len, after->id,
		        after->id_len),
		    snap);
	} else {
		scan_open_snap(s, &sc, CF_CONS, snap);
	}
	rv =
	    scan_id_entries(s, &sc, pre, conf.buckets, true, out, max, n, more);
	if (rv == TL_OK) {
		rv = cons_fill(s, tid, snap, out, *n);
	}
	rocksdb_release_snapshot(s->db, snap);
	return rv;
}

int
tli_store_scan_consumer(tli_store *s, const char *topic, const char *consumer,
    size_t consumer_len, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_scan_consumer(
		    s, topic, consumer, consumer_len, after, out, max, n, more);
		tli_db_unlock(s);
		tli_durable_wait(s);
	}
	return rv;
}

/* The owner index is keyed by where the producer placed each message
 * (sched) and has no value: the version and lock come from the record, read
 * at the same snapshot as the index. */
/* With db_lock held for reading. */
static int
locked_scan_owner(tli_store *s, const char *topic, const char *owner,
    size_t owner_len, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more)
{
	const rocksdb_snapshot_t *snap;
	tli_topic_conf conf;
	uint32_t tid;
	size_t got = 0, pre;
	scan sc;
	int rv, rv2;

	*n = 0;
	*more = false;
	if ((rv = tli_topic_lookup(s, topic, &tid, &conf)) != TL_OK ||
	    (rv = check_name(owner, owner_len)) != TL_OK) {
		return rv;
	}
	pre = 5 + owner_len;
	sc.lolen = tli_key_own(sc.lo, tid, owner, owner_len, TL_TS_MIN, "", 0);
	sc.hilen = prefix_end(sc.hi, sc.lo, pre);
	snap = rocksdb_create_snapshot(s->db);
	if (after != NULL && after->valid) {
		uint8_t ck[KEY_MAX];
		scan_open_after(s, &sc, CF_OWN, ck,
		    tli_key_own(ck, tid, owner, owner_len, after->ts, after->id,
		        after->id_len),
		    snap);
	} else {
		scan_open_snap(s, &sc, CF_OWN, snap);
	}
	for (; rocksdb_iter_valid(sc.it); rocksdb_iter_next(sc.it)) {
		size_t kl;
		const uint8_t *k =
		    (const uint8_t *) rocksdb_iter_key(sc.it, &kl);
		tli_entry *e;
		rec r;

		if (got == max) {
			*more = true;
			break;
		}
		if (kl <= pre + 8 || kl > pre + 8 + TL_MAX_ID_LEN) {
			rv = TL_ECORRUPT;
			break;
		}
		e = &out[got];
		e->ts = (int64_t) tli_get_be64(k + pre);
		e->id_len = (uint8_t) (kl - pre - 8);
		memcpy(e->id, k + pre + 8, e->id_len);
		e->id[e->id_len] = '\0';
		if ((rv = entry_record(s, sc.ro, tid, e->id, e->id_len, &r)) !=
		    TL_OK) {
			break;
		}
		e->version = r.version;
		e->locked = r.cons_len > 0;
		e->push_at = 0;
		e->bucket = r.bucket;
		got++;
	}
	*n = got;
	rv2 = scan_close(s, &sc);
	rocksdb_release_snapshot(s->db, snap);
	return rv != TL_OK ? rv : rv2;
}

int
tli_store_scan_owner(tli_store *s, const char *topic, const char *owner,
    size_t owner_len, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_scan_owner(
		    s, topic, owner, owner_len, after, out, max, n, more);
		tli_db_unlock(s);
		tli_durable_wait(s);
	}
	return rv;
}

/* With db_lock held for reading. */
static int
locked_scan_dead(tli_store *s, const char *topic, const tli_cursor *after,
    tli_entry *out, size_t max, size_t *n, bool *more)
{
	tli_topic_conf conf;
	uint32_t tid;
	size_t pre;
	scan sc;
	int rv;

	*n = 0;
	*more = false;
	if ((rv = tli_topic_lookup(s, topic, &tid, &conf)) != TL_OK) {
		return rv;
	}
	pre = tli_key_dead(sc.lo, tid, "", 0);
	sc.lolen = pre;
	sc.hilen = prefix_end(sc.hi, sc.lo, pre);
	if (after != NULL && after->valid) {
		uint8_t ck[KEY_MAX];
		scan_open_after(s, &sc, CF_MSG, ck,
		    tli_key_dead(ck, tid, after->id, after->id_len), NULL);
	} else {
		scan_open(s, &sc, CF_MSG);
	}
	return scan_id_entries(
	    s, &sc, pre, conf.buckets, false, out, max, n, more);
}

int
tli_store_scan_dead(tli_store *s, const char *topic, const tli_cursor *after,
    tli_entry *out, size_t max, size_t *n, bool *more)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_scan_dead(s, topic, after, out, max, n, more);
		tli_db_unlock(s);
		tli_durable_wait(s);
	}
	return rv;
}

/* Count [from, to) of every bucket, classifying at `now`. */
static int
count_range(tli_store *s, uint32_t tid, uint32_t buckets, int64_t from,
    int64_t to, int64_t now, tli_counts *out)
{
	int rv = TL_OK;

	memset(out, 0, sizeof(*out));
	if (from < TL_TS_MIN) {
		from = TL_TS_MIN;
	}
	if (to > TL_TS_MAX + 1) {
		to = TL_TS_MAX + 1;
	}
	if (from >= to) {
		return TL_OK;
	}
	for (uint32_t b = 0; b < buckets && rv == TL_OK; b++) {
		scan sc;

		sc.lolen = tli_key_tl(sc.lo, tid, b, from, "", 0);
		sc.hilen = tli_key_tl(sc.hi, tid, b, to, "", 0);
		scan_open(s, &sc, CF_TL);
		size_t kl, vl;
		const uint8_t *k, *v;

		for (; scan_kv(&sc, &k, &kl, &v, &vl);
		     rocksdb_iter_next(sc.it)) {
			int64_t ts;

			if (kl <= 16 || vl != 9) {
				rv = TL_ECORRUPT;
				break;
			}
			ts = (int64_t) tli_get_be64(k + 8);
			if (ts <= now) {
				out->available++;
			} else if (v[8] != 0) {
				out->processing++;
			} else {
				out->waiting++;
			}
		}
		{
			int rv2 = scan_close(s, &sc);
			if (rv == TL_OK) {
				rv = rv2;
			}
		}
	}
	return rv;
}

/* With db_lock held for reading. */
static int
locked_count(
    tli_store *s, const char *topic, int64_t from, int64_t to, tli_counts *out)
{
	tli_topic_conf conf;
	uint32_t tid;
	int rv;

	if ((rv = tli_topic_lookup(s, topic, &tid, &conf)) != TL_OK) {
		return rv;
	}
	return count_range(
	    s, tid, conf.buckets, from, to, tli_clock_now(&s->opts.clock), out);
}

int
tli_store_count(
    tli_store *s, const char *topic, int64_t from, int64_t to, tli_counts *out)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_count(s, topic, from, to, out);
		tli_db_unlock(s);
		tli_durable_wait(s);
	}
	return rv;
}

/* Totals from the incremental counters plus a scan of the due part only:
 * processing = locked - locked-and-due; waiting = the rest. */
/* With db_lock held for reading. */
static int
locked_totals(tli_store *s, const char *topic, tli_counts *out)
{
	tli_topic_info info;
	tli_counts due;
	uint64_t locked_due = 0, avail;
	int64_t now = tli_clock_now(&s->opts.clock);
	int rv;

	if ((rv = tli_store_topic_get(s, topic, &info)) != TL_OK) {
		return rv;
	}
	memset(&due, 0, sizeof(due));
	avail = 0;
	for (uint32_t b = 0; b < info.conf.buckets && rv == TL_OK; b++) {
		scan sc;

		sc.lolen =
		    tli_key_tl(sc.lo, info.topic_id, b, TL_TS_MIN, "", 0);
		sc.hilen = tli_key_tl(sc.hi, info.topic_id, b,
		    (now < TL_TS_MIN ? TL_TS_MIN - 1 : now) + 1, "", 0);
		scan_open(s, &sc, CF_TL);
		for (; rocksdb_iter_valid(sc.it); rocksdb_iter_next(sc.it)) {
			size_t vl;
			const uint8_t *v =
			    (const uint8_t *) rocksdb_iter_value(sc.it, &vl);
			avail++;
			if (vl == 9 && v[8] != 0) {
				locked_due++;
			}
		}
		rv = scan_close(s, &sc);
	}
	if (rv != TL_OK) {
		return rv;
	}
	/* The counters and the scan are read at slightly different moments
	 * under concurrent writes; clamp so the figures never underflow. */
	out->available = avail;
	out->processing =
	    info.locked > locked_due ? info.locked - locked_due : 0;
	out->waiting = info.messages > avail + out->processing
	    ? info.messages - avail - out->processing
	    : 0;
	return TL_OK;
}

int
tli_store_totals(tli_store *s, const char *topic, tli_counts *out)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_totals(s, topic, out);
		tli_db_unlock(s);
		tli_durable_wait(s);
	}
	return rv;
}

void
tli_msg_fini(tli_msg *m)
{
	if (m != NULL) {
		tli_free(m->body);
		m->body = NULL;
		m->body_len = 0;
	}
}

static int
msg_fill(tli_msg *out, const char *id, size_t id_len, const rec *r,
    const void *body, size_t bl, uint64_t gen)
{
	memset(out, 0, sizeof(*out));
	out->body = tli_alloc(bl);
	if (out->body == NULL) {
		return TL_ENOMEM;
	}
	memcpy(out->body, body, bl);
	out->body_len = bl;
	memcpy(out->id, id, id_len);
	out->id_len = id_len;
	memcpy(out->owner, r->owner, r->owner_len);
	out->owner_len = r->owner_len;
	memcpy(out->consumer, r->cons, r->cons_len);
	out->consumer_len = r->cons_len;
	out->ts = r->ts;
	out->sched = r->sched;
	out->gen = gen;
	out->bucket = r->bucket;
	out->version = r->version;
	out->deliveries = r->deliveries;
	out->created_at = r->created_at;
	out->dead = (r->flags & REC_DEAD) != 0;
	if (r->flags & REC_RECUR) {
		out->every = r->every;
		out->start = r->start;
		out->seq = r->seq;
		out->last = r->last;
		out->catch_up = (r->flags & REC_CATCHUP) != 0;
		out->off_grid = (r->flags & REC_OFFGRID) != 0;
	}
	return TL_OK;
}

static int
id_check(const char *id, size_t id_len)
{
	if (id == NULL || id_len == 0) {
		return TL_EBADID;
	}
	return id_len > TL_MAX_ID_LEN ? TL_ETOOLARGE : TL_OK;
}

/* One batched MultiGet of keys[0..n) in the msg column family at ro;
 * vals[i] NULL when missing; errors as codes in rvs. */
static void
msg_multi_get(tli_store *s, rocksdb_readoptions_t *ro, size_t n,
    const char **keys, const size_t *klens, rocksdb_pinnableslice_t **vals,
    char **errs, int *rvs)
{
	rocksdb_batched_multi_get_cf(
	    s->db, ro, s->cf[CF_MSG], n, keys, klens, vals, errs, false);
	for (size_t i = 0; i < n; i++) {
		rvs[i] = errs[i] != NULL ? tli_rdb_err(s, errs[i]) : TL_OK;
	}
}

/* With db_lock held for reading. */
static int
locked_get_many(tli_store *s, const char *topic, size_t n,
    const char *const *ids, const size_t *id_lens, tli_msg *out, int *rvs)
{
	const rocksdb_snapshot_t *snap;
	rocksdb_readoptions_t *ro;
	rocksdb_pinnableslice_t **vals, **bvals;
	uint8_t(*k)[5 + TL_MAX_ID_LEN];
	const char **keys;
	size_t *klens, *need, nneed = 0;
	char **errs;
	int *brv;
	uint32_t tid;
	uint64_t gen;
	rec r;
	int rv;

	/* Noted before the read: the writer trusts the record only if
	 * nothing changed it after this generation. */
	gen = atomic_load(&s->commit_gen);
	if ((rv = tli_topic_lookup(s, topic, &tid, NULL)) != TL_OK) {
		return rv;
	}
	if (n == 0) {
		return TL_OK;
	}
	k = tli_alloc(n * sizeof(*k));
	keys = tli_alloc(n * sizeof(*keys));
	klens = tli_alloc(n * sizeof(*klens));
	vals = tli_zalloc(n * sizeof(*vals));
	bvals = tli_zalloc(n * sizeof(*bvals));
	errs = tli_zalloc(n * sizeof(*errs));
	need = tli_alloc(n * sizeof(*need));
	brv = tli_alloc(n * sizeof(*brv));
	if (k == NULL || keys == NULL || klens == NULL || vals == NULL ||
	    bvals == NULL || errs == NULL || need == NULL || brv == NULL) {
		rv = TL_ENOMEM;
		goto out;
	}
	/* Records, then the bodies kept apart, from one snapshot: a
	 * concurrent delete cannot split a record from its body. */
	snap = rocksdb_create_snapshot(s->db);
	ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_snapshot(ro, snap);
	for (size_t i = 0; i < n; i++) {
		rvs[i] = id_check(ids[i], id_lens[i]);
		keys[i] = (const char *) k[i];
		klens[i] = rvs[i] == TL_OK
		    ? tli_key_msg(k[i], tid, ids[i], id_lens[i])
		    : tli_key_msg(k[i], tid, "", 0);
	}
	msg_multi_get(s, ro, n, keys, klens, vals, errs, brv);
	for (size_t i = 0; i < n; i++) {
		const char *v;
		size_t vl = 0;

		if (rvs[i] != TL_OK) {
			continue;
		}
		if ((rvs[i] = brv[i]) != TL_OK) {
			continue;
		}
		if (vals[i] == NULL) {
			rvs[i] = TL_ENOTFOUND;
			continue;
		}
		v = rocksdb_pinnableslice_value(vals[i], &vl);
		if ((rvs[i] = tli_rec_decode(&r, (const uint8_t *) v, vl)) !=
		    TL_OK) {
			continue;
		}
		if (r.flags & REC_INLINE) {
			rvs[i] = msg_fill(&out[i], ids[i], id_lens[i], &r,
			    r.body, r.body_len, gen);
		} else {
			keys[nneed] = (const char *) k[i];
			klens[nneed] =
			    tli_key_body(k[i], tid, ids[i], id_lens[i]);
			need[nneed++] = i;
		}
	}
	if (nneed > 0) {
		memset(errs, 0, nneed * sizeof(*errs));
		msg_multi_get(s, ro, nneed, keys, klens, bvals, errs, brv);
	}
	for (size_t j = 0; j < nneed; j++) {
		size_t i = need[j], vl = 0, bl = 0;
		const char *v = rocksdb_pinnableslice_value(vals[i], &vl);
		const char *b;

		tli_rec_decode(&r, (const uint8_t *) v, vl); /* decoded above */
		if ((rvs[i] = brv[j]) != TL_OK) {
			continue;
		}
		b = bvals[j] != NULL
		    ? rocksdb_pinnableslice_value(bvals[j], &bl)
		    : NULL;
		if (b == NULL || bl != r.body_len) {
			rvs[i] = TL_ECORRUPT; /* written in one batch */
			continue;
		}
		rvs[i] = msg_fill(&out[i], ids[i], id_lens[i], &r, b, bl, gen);
	}
	for (size_t i = 0; i < n; i++) {
		rocksdb_pinnableslice_destroy(vals[i]);
		rocksdb_pinnableslice_destroy(bvals[i]);
	}
	rocksdb_readoptions_destroy(ro);
	rocksdb_release_snapshot(s->db, snap);
	rv = TL_OK;
out:
	tli_free(k);
	tli_free(keys);
	tli_free(klens);
	tli_free(vals);
	tli_free(bvals);
	tli_free(errs);
	tli_free(need);
	tli_free(brv);
	return rv;
}

int
tli_store_get_many(tli_store *s, const char *topic, size_t n,
    const char *const *ids, const size_t *id_lens, tli_msg *out, int *rvs)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_get_many(s, topic, n, ids, id_lens, out, rvs);
		tli_db_unlock(s);
	}
	return rv;
}

/* With db_lock held for reading. */
static int
locked_get(tli_store *s, const char *topic, const char *id, size_t id_len,
    tli_msg *out)
{
	tli_msg m;
	int rv, one;

	if ((rv = locked_get_many(s, topic, 1, &id, &id_len, &m, &one)) !=
	    TL_OK) {
		return rv;
	}
	if (one == TL_OK) {
		*out = m;
	}
	return one;
}

int
tli_store_get_nowait(tli_store *s, const char *topic, const char *id,
    size_t id_len, tli_msg *out)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_get(s, topic, id, id_len, out);
		tli_db_unlock(s);
	}
	return rv;
}

int
tli_store_get(tli_store *s, const char *topic, const char *id, size_t id_len,
    tli_msg *out)
{
	int rv = tli_store_get_nowait(s, topic, id, id_len, out);

	tli_durable_wait(s);
	return rv;
}
