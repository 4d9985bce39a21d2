/*
 * The consistency checker: every record against its body, its timeline,
 * owner and consumer index entries and the topic counters; then every index
 * entry against its record. It reads one RocksDB snapshot, so it can run
 * while the store is serving.
 */
#include <stdarg.h>
#include <stdio.h>

#include "store_int.h"

typedef struct chk_topic {
	uint32_t id;
	uint32_t buckets;
	uint64_t messages;
	uint64_t locked;
	uint64_t dead;
} chk_topic;

typedef struct chk {
	tli_store *s;
	rocksdb_readoptions_t *ro;
	chk_topic *topics;
	size_t ntopics;
	uint64_t problems;
	tli_check_report_fn report;
	void *arg;
} chk;

static void
problem(chk *c, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	c->problems++;
	if (c->report == NULL) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->report(c->arg, buf);
}

/* A printable rendering of an id or name (non-printables as \xNN). */
static const char *
printable(char *out, size_t cap, const char *p, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < cap; i++) {
		unsigned char ch = (unsigned char) p[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
			out[o++] = (char) ch;
		} else {
			o += (size_t) snprintf(out + o, cap - o, "\\x%02x", ch);
		}
	}
	out[o] = '\0';
	return out;
}

static chk_topic *
chk_topic_find(chk *c, uint32_t id)
{
	for (size_t i = 0; i < c->ntopics; i++) {
		if (c->topics[i].id == id) {
			return &c->topics[i];
		}
	}
	return NULL;
}

/* Get a key through the snapshot: 1 found (value in *v, free with
 * rocksdb_free), 0 missing, <0 on error (counted as a problem). */
static int
chk_get(chk *c, int cf, const uint8_t *k, size_t kl, char **v, size_t *vl)
{
	char *err = NULL;

	*v = rocksdb_get_cf(
	    c->s->db, c->ro, c->s->cf[cf], (const char *) k, kl, vl, &err);
	if (err != NULL) {
		problem(c, "read error: %s", err);
		rocksdb_free(err);
		return -1;
	}
	return *v != NULL;
}

/* Expect key k in cf with exactly the value ev[0..evl). */
static void
expect_entry(chk *c, int cf, const char *what, const uint8_t *k, size_t kl,
    const uint8_t *ev, size_t evl, const char *id)
{
	char *v;
	size_t vl;
	int found = chk_get(c, cf, k, kl, &v, &vl);

	if (found == 0) {
		problem(c, "message %s: %s entry missing", id, what);
	} else if (found > 0) {
		if (ev != NULL && (vl != evl || memcmp(v, ev, evl) != 0)) {
			problem(c, "message %s: %s entry has a stale value", id,
			    what);
		}
		rocksdb_free(v);
	}
}

/* Expect the consumer entry of a locked record r: its value is the lease's
 * as taken (ts, version, and a lease ahead's due time after them); an extend
 * leaves it (and may move the lease end either way), so its version is the
 * record's or an earlier one. */
static void
cons_expect(chk *c, const rec *r, uint32_t topic, const char *id, size_t len,
    const char *pid)
{
	uint8_t k[KEY_MAX];
	char *v;
	size_t vl;
	int found = chk_get(c, CF_CONS, k,
	    tli_key_cons(k, topic, r->cons, r->cons_len, id, len), &v, &vl);

	if (found == 0) {
		problem(c, "message %s: consumer entry missing", pid);
	} else if (found > 0) {
		if ((vl != 16 && vl != 24) ||
		    tli_get_be64((uint8_t *) v + 8) > r->version) {
			problem(c,
			    "message %s: consumer entry has a stale value",
			    pid);
		}
		rocksdb_free(v);
	}
}

/* Load the record of (topic, id); 1 found, 0 missing, <0 error. */
static int
chk_record(chk *c, uint32_t topic, const char *id, size_t len, rec *r)
{
	uint8_t k[5 + TL_MAX_ID_LEN];
	char *v;
	size_t vl;
	int found =
	    chk_get(c, CF_MSG, k, tli_key_msg(k, topic, id, len), &v, &vl);

	if (found > 0) {
		if (tli_rec_decode(r, (uint8_t *) v, vl) != TL_OK) {
			found = -1;
		}
		rocksdb_free(v);
	}
	return found;
}

/* A recurrence: 1 <= seq <= last, every >= 1, the last grid point in range,
 * and the record placed at its occurrence's grid time unless a release or a
 * kick put it elsewhere (REC_OFFGRID). */
static void
check_recur(chk *c, const rec *r, const char *pid)
{
	int64_t at;

	if (!(r->flags & REC_RECUR)) {
		if (r->flags & (REC_CATCHUP | REC_OFFGRID)) {
			problem(
			    c, "message %s: recurrence flags without one", pid);
		}
		return;
	}
	if (r->every < 1 || r->seq < 1 || r->seq > r->last) {
		problem(c, "message %s: recurrence every %lld, seq %u of %u",
		    pid, (long long) r->every, r->seq, r->last);
		return;
	}
	if (r->start > TL_TS_MAX || r->start < -TL_TS_MAX ||
	    (int64_t) (r->last - 1) > (TL_TS_MAX - r->start) / r->every) {
		problem(c, "message %s: recurrence runs out of range", pid);
		return;
	}
	at = r->start + (int64_t) (r->seq - 1) * r->every;
	if (!(r->flags & REC_OFFGRID) && r->sched != at) {
		problem(c,
		    "message %s: occurrence %u placed at %lld, its grid time "
		    "is %lld",
		    pid, r->seq, (long long) r->sched, (long long) at);
	}
}

static void
check_record(chk *c, uint32_t topic, const char *id, size_t len,
    const uint8_t *v, size_t vl)
{
	char pid[TL_MAX_ID_LEN * 4 + 8];
	uint8_t k[KEY_MAX], ev[16];
	chk_topic *t = chk_topic_find(c, topic);
	char *bv;
	size_t bl;
	rec r;

	printable(pid, sizeof(pid), id, len);
	if (tli_rec_decode(&r, v, vl) != TL_OK) {
		problem(c, "message %s: record does not decode", pid);
		return;
	}
	if (t == NULL) {
		problem(
		    c, "message %s: record of unknown topic %u", pid, topic);
		return;
	}
	if (r.flags & REC_DEAD) {
		t->dead++;
	} else {
		t->messages++;
		t->locked += r.cons_len > 0;
	}
	check_recur(c, &r, pid);
	if (r.bucket != tli_bucket_of(id, len, t->buckets)) {
		problem(c, "message %s: bucket %u, expected %u", pid, r.bucket,
		    tli_bucket_of(id, len, t->buckets));
	}
	if (chk_get(c, CF_MSG, k, tli_key_body(k, topic, id, len), &bv, &bl) ==
	    0) {
		if (!(r.flags & REC_INLINE)) {
			problem(c, "message %s: body missing", pid);
		}
	} else if (bv != NULL) {
		if (r.flags & REC_INLINE) {
			problem(
			    c, "message %s: body both inline and apart", pid);
		} else if (bl != r.body_len) {
			problem(c,
			    "message %s: body length %zu, record says %u", pid,
			    bl, r.body_len);
		}
		rocksdb_free(bv);
	}
	if (r.flags & REC_DEAD) {
		if (chk_get(c, CF_MSG, k, tli_key_dead(k, topic, id, len), &bv,
		        &bl) == 0) {
			problem(
			    c, "dead letter %s: dead index entry missing", pid);
		}
		rocksdb_free(bv);
		return; /* index_entry() flags any timeline entry it has */
	}
	tli_val_tl(ev, r.version, r.cons_len > 0);
	expect_entry(c, CF_TL, "timeline", k,
	    tli_key_tl(k, topic, r.bucket, r.ts, id, len), ev, 9, pid);
	/* Its value is not read (format 1 wrote one). */
	expect_entry(c, CF_OWN, "owner", k,
	    tli_key_own(k, topic, r.owner, r.owner_len, r.sched, id, len), NULL,
	    0, pid);
	if (r.cons_len > 0) {
		cons_expect(c, &r, topic, id, len, pid);
	}
}

typedef void (*entry_fn)(
    chk *c, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl);

static void
walk(chk *c, int cf, entry_fn fn)
{
	rocksdb_iterator_t *it =
	    rocksdb_create_iterator_cf(c->s->db, c->ro, c->s->cf[cf]);
	char *err = NULL;

	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl, vl;
		const uint8_t *k = (const uint8_t *) rocksdb_iter_key(it, &kl);
		const uint8_t *v =
		    (const uint8_t *) rocksdb_iter_value(it, &vl);
		fn(c, k, kl, v, vl);
	}
	rocksdb_iter_get_error(it, &err);
	if (err != NULL) {
		problem(c, "iteration error: %s", err);
		rocksdb_free(err);
	}
	rocksdb_iter_destroy(it);
}

static void
msg_entry(chk *c, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	uint32_t topic;
	const char *id = (const char *) k + 5;
	size_t len = kl - 5;
	char pid[TL_MAX_ID_LEN * 4 + 8];
	rec r;

	if (kl <= 5 || kl > 5 + TL_MAX_ID_LEN) {
		problem(c, "msg key of bad length %zu", kl);
		return;
	}
	topic = tli_get_be32(k);
	if (k[4] == 'm') {
		check_record(c, topic, id, len, v, vl);
	} else if (k[4] == 'b') {
		int found = chk_record(c, topic, id, len, &r);
		if (found == 0 || (found > 0 && (r.flags & REC_INLINE))) {
			problem(c, "body of %s without a record",
			    printable(pid, sizeof(pid), id, len));
		}
	} else if (k[4] == 'd') {
		int found = chk_record(c, topic, id, len, &r);
		if (found == 0 || (found > 0 && !(r.flags & REC_DEAD))) {
			problem(c,
			    "dead index entry of %s without a dead letter",
			    printable(pid, sizeof(pid), id, len));
		}
	} else {
		problem(c, "msg key with unknown tag 0x%02x", k[4]);
	}
}

/* An index entry must point at a record that agrees with it. */
static void
index_entry(chk *c, const char *what, uint32_t topic, const char *id,
    size_t len, const rec *want, int64_t ts, bool check_ts)
{
	char pid[TL_MAX_ID_LEN * 4 + 8];
	rec r;
	int found = chk_record(c, topic, id, len, &r);

	printable(pid, sizeof(pid), id, len);
	if (found == 0) {
		problem(c, "%s entry for %s without a record", what, pid);
	} else if (found > 0 && (r.flags & REC_DEAD)) {
		problem(c, "%s entry for dead letter %s", what, pid);
	} else if (found > 0) {
		int64_t rts = want->sched != 0 ? r.sched : r.ts;
		if (check_ts && rts != ts) {
			problem(c, "%s entry for %s at ts %lld, record at %lld",
			    what, pid, (long long) ts, (long long) rts);
		}
		if (want->owner_len > 0 &&
		    (r.owner_len != want->owner_len ||
		        memcmp(r.owner, want->owner, r.owner_len) != 0)) {
			problem(c, "%s entry for %s under another owner", what,
			    pid);
		}
		if (want->cons_len > 0 &&
		    (r.cons_len != want->cons_len ||
		        memcmp(r.cons, want->cons, r.cons_len) != 0)) {
			problem(c, "%s entry for %s under another consumer",
			    what, pid);
		}
		if (want->bucket != UINT32_MAX && r.bucket != want->bucket) {
			problem(c, "%s entry for %s in bucket %u, record in %u",
			    what, pid, want->bucket, r.bucket);
		}
	}
}

static void
tl_entry(chk *c, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	rec want;

	if (kl <= 16 || kl > 16 + TL_MAX_ID_LEN || vl != 9) {
		problem(c, "timeline entry of bad size");
		return;
	}
	memset(&want, 0, sizeof(want));
	want.bucket = tli_get_be32(k + 4);
	index_entry(c, "timeline", tli_get_be32(k), (const char *) k + 16,
	    kl - 16, &want, (int64_t) tli_get_be64(k + 8), true);
}

static void
cons_entry(chk *c, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	rec want;
	size_t clen;

	if (kl < 5 || (clen = k[4]) == 0 || kl <= 5 + clen ||
	    (vl != 16 && vl != 24)) {
		problem(c, "consumer entry of bad size");
		return;
	}
	memset(&want, 0, sizeof(want));
	want.bucket = UINT32_MAX;
	want.cons_len = (uint8_t) clen;
	memcpy(want.cons, k + 5, clen);
	/* its ts is the lease's as taken (cons_expect) */
	index_entry(c, "consumer", tli_get_be32(k), (const char *) k + 5 + clen,
	    kl - 5 - clen, &want, (int64_t) tli_get_be64(v), false);
}

static void
own_entry(chk *c, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	rec want;
	size_t olen;

	if (kl < 5 || (olen = k[4]) == 0 || kl <= 13 + olen ||
	    (vl != 0 && vl != 9)) {
		problem(c, "owner entry of bad size");
		return;
	}
	memset(&want, 0, sizeof(want));
	want.sched = 1; /* compare with the record's sched */
	want.bucket = UINT32_MAX;
	want.owner_len = (uint8_t) olen;
	memcpy(want.owner, k + 5, olen);
	index_entry(c, "owner", tli_get_be32(k), (const char *) k + 13 + olen,
	    kl - 13 - olen, &want, (int64_t) tli_get_be64(k + 5 + olen), true);
}

static void
check_counters(chk *c)
{
	for (size_t i = 0; i < c->ntopics; i++) {
		chk_topic *t = &c->topics[i];
		uint8_t k[5];
		char *v;
		size_t vl;
		int found = chk_get(
		    c, CF_DEFAULT, k, tli_key_meta_counters(k, t->id), &v, &vl);

		if (found == 0 || (found > 0 && vl != COUNTERS_LEN)) {
			problem(c, "topic %u: counters missing", t->id);
		} else if (found > 0) {
			uint64_t m = tli_get_be64((uint8_t *) v);
			uint64_t l = tli_get_be64((uint8_t *) v + 8);
			uint64_t d = tli_get_be64((uint8_t *) v + 16);
			if (m != t->messages || l != t->locked ||
			    d != t->dead) {
				problem(c,
				    "topic %u: counters say %llu messages, "
				    "%llu locked, %llu dead; found %llu, %llu, "
				    "%llu",
				    t->id, (unsigned long long) m,
				    (unsigned long long) l,
				    (unsigned long long) d,
				    (unsigned long long) t->messages,
				    (unsigned long long) t->locked,
				    (unsigned long long) t->dead);
			}
		}
		if (found > 0) {
			rocksdb_free(v);
		}
	}
}

/* Every (topic, owner) count against the records, both ways. */
static void
owner_expect(
    void *arg, uint32_t topic, const char *owner, size_t olen, int64_t count)
{
	chk *c = arg;
	uint8_t k[5 + TL_MAX_NAME_LEN];
	char pown[TL_MAX_NAME_LEN * 4 + 8];
	char *v;
	size_t vl;
	int found = chk_get(c, CF_DEFAULT, k,
	    tli_key_meta_owner(k, topic, owner, olen), &v, &vl);
	uint64_t stored = 0;

	if (found < 0) {
		return;
	}
	if (found > 0) {
		stored = vl == 8 ? tli_get_be64((uint8_t *) v) : UINT64_MAX;
		rocksdb_free(v);
	}
	if (stored != (uint64_t) count) {
		problem(c, "topic %u owner %s: count says %llu, found %lld",
		    topic, printable(pown, sizeof(pown), owner, olen),
		    (unsigned long long) stored, (long long) count);
	}
}

static void
check_owners(chk *c)
{
	struct owner_deltas *d = tli_owner_deltas_new();
	rocksdb_iterator_t *it;
	char *err = NULL;

	if (d == NULL || tli_owner_tally(c->s, c->ro, d) != TL_OK) {
		problem(c, "owner counts: could not count the records");
		tli_owner_deltas_free(d);
		return;
	}
	tli_owner_each(d, owner_expect, c);
	/* Stored counts without records. */
	it = rocksdb_create_iterator_cf(c->s->db, c->ro, c->s->cf[CF_DEFAULT]);
	for (rocksdb_iter_seek(it, "O", 1); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl;
		const uint8_t *k = (const uint8_t *) rocksdb_iter_key(it, &kl);
		char pown[TL_MAX_NAME_LEN * 4 + 8];

		if (kl < 1 || k[0] != 'O') {
			break;
		}
		if (kl <= 5) {
			problem(c, "owner count key of bad size");
			continue;
		}
		if (tli_owner_get(d, tli_get_be32(k + 1), (const char *) k + 5,
		        kl - 5) == 0) {
			problem(c, "topic %u owner %s: a count but no messages",
			    tli_get_be32(k + 1),
			    printable(pown, sizeof(pown), (const char *) k + 5,
			        kl - 5));
		}
	}
	rocksdb_iter_get_error(it, &err);
	if (err != NULL) {
		problem(c, "iteration error: %s", err);
		rocksdb_free(err);
	}
	rocksdb_iter_destroy(it);
	tli_owner_deltas_free(d);
}

/* With db_lock held for reading. */
static int
locked_check(
    tli_store *s, tli_check_report_fn report, void *arg, uint64_t *problems)
{
	const rocksdb_snapshot_t *snap;
	chk c = {.s = s, .report = report, .arg = arg};

	pthread_rwlock_rdlock(&s->topics_lock);
	c.topics = tli_zalloc(sizeof(chk_topic) * (s->ntopics + 1));
	if (c.topics == NULL) {
		pthread_rwlock_unlock(&s->topics_lock);
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < s->ntopics; i++) {
		c.topics[i].id = s->topics[i]->id;
		c.topics[i].buckets = s->topics[i]->conf.buckets;
	}
	c.ntopics = s->ntopics;
	pthread_rwlock_unlock(&s->topics_lock);

	snap = rocksdb_create_snapshot(s->db);
	c.ro = rocksdb_readoptions_create();
	rocksdb_readoptions_set_snapshot(c.ro, snap);
	walk(&c, CF_MSG, msg_entry);
	walk(&c, CF_TL, tl_entry);
	walk(&c, CF_CONS, cons_entry);
	walk(&c, CF_OWN, own_entry);
	check_counters(&c);
	check_owners(&c);
	rocksdb_readoptions_destroy(c.ro);
	rocksdb_release_snapshot(s->db, snap);
	tli_free(c.topics);
	*problems = c.problems;
	return TL_OK;
}

int
tli_store_check(
    tli_store *s, tli_check_report_fn report, void *arg, uint64_t *problems)
{
	int rv = tli_db_rdlock(s);

	if (rv == TL_OK) {
		rv = locked_check(s, report, arg, problems);
		tli_db_unlock(s);
	}
	return rv;
}
