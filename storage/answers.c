/*
 * Answers kept (store.h, "answers kept"): the results of a client's keyed
 * write request are written in the same entry as its effects, so that the
 * request sent again after an unknown outcome (a lost connection, a
 * leader lost mid-replication) is answered as the first time instead of
 * being applied twice. Writer thread only; replicated mode only.
 *
 * Keys in the default column family (docs/storage.md):
 *   'R' client(8) reqid(4)        -> the answer (below)
 *   'Q' time(8) client(8) reqid(4) -> empty: the answers by age, so the
 *                                     leader finds the expired ones
 * The answer: format byte (1), digest (8), n (varint), then per op err,
 * new_version, new_ts, bucket, deliveries, seq (varints) and the
 * generated id (length byte, bytes); a topic's create or delete has no
 * ops, and its result (varint) instead.
 *
 * Which entry holds an answer decides everything: a new leader serves
 * only after every entry committed before it is applied here, and a
 * leader whose entry's fate became unknown reloads before it serves again
 * (docs/cluster.md), so a lookup sees the first attempt whenever it was
 * committed. Two attempts in one batch are caught in the batch itself.
 * The writer has one entry in flight, so a repeat queued behind its first
 * attempt on the same leader is looked up once that attempt is applied;
 * with several entries in flight the lookup would have to search those
 * too.
 */
#include <string.h>

#include "store_int.h"

#define ANS_FORMAT 1
#define ANS_KEY_LEN (1 + 8 + 4)
#define AGE_KEY_LEN (1 + 8 + 8 + 4)
/* expired answers deleted per batch at most: more than any batch adds */
#define PRUNE_MAX 8192

static size_t
ans_key(uint8_t *k, uint64_t client, uint32_t reqid)
{
	k[0] = 'R';
	tli_put_be64(k + 1, client);
	tli_put_be32(k + 9, reqid);
	return ANS_KEY_LEN;
}

static size_t
age_key(uint8_t *k, int64_t ms, uint64_t client, uint32_t reqid)
{
	k[0] = 'Q';
	tli_put_be64(k + 1, (uint64_t) (ms < 0 ? 0 : ms));
	tli_put_be64(k + 9, client);
	tli_put_be32(k + 17, reqid);
	return AGE_KEY_LEN;
}

static bool
same_key(const sub *a, const sub *b)
{
	return a->key.client == b->key.client && a->key.reqid == b->key.reqid;
}

/* ---- the answer's encoding ---- */

typedef struct abuf {
	uint8_t *p;
	size_t n;
	size_t cap;
	bool oom;
} abuf;

static void
ab_need(abuf *b, size_t more)
{
	uint8_t *np;
	size_t cap;

	if (b->oom || b->n + more <= b->cap) {
		return;
	}
	cap = b->cap == 0 ? 256 : b->cap;
	while (cap < b->n + more) {
		cap *= 2;
	}
	if ((np = tli_realloc(b->p, cap)) == NULL) {
		b->oom = true;
		return;
	}
	b->p = np;
	b->cap = cap;
}

static void
ab_bytes(abuf *b, const void *p, size_t n)
{
	ab_need(b, n);
	if (!b->oom) {
		memcpy(b->p + b->n, p, n);
		b->n += n;
	}
}

static void
ab_var(abuf *b, uint64_t v)
{
	uint8_t t[10];
	size_t n = 0;

	do {
		t[n] = (uint8_t) (v & 0x7f);
		v >>= 7;
		if (v != 0) {
			t[n] |= 0x80;
		}
		n++;
	} while (v != 0);
	ab_bytes(b, t, n);
}

static bool
rd_var(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t c = *(*p)++;
		v |= (uint64_t) (c & 0x7f) << shift;
		if ((c & 0x80) == 0) {
			*out = v;
			return true;
		}
	}
	return false;
}

static void
ans_encode(abuf *b, const sub *sb)
{
	uint8_t d[8];

	b->n = 0;
	ab_bytes(b, &(uint8_t){ANS_FORMAT}, 1);
	tli_put_be64(d, sb->key.digest);
	ab_bytes(b, d, 8);
	ab_var(b, sb->n);
	for (size_t i = 0; i < sb->n; i++) {
		const tli_op *o = &sb->ops[i];
		uint8_t gl = (uint8_t) strnlen(o->gen_id, TL_GEN_ID_LEN);

		ab_var(b, (uint64_t) o->err);
		ab_var(b, o->new_version);
		ab_var(b, (uint64_t) o->new_ts);
		ab_var(b, o->bucket);
		ab_var(b, o->deliveries);
		ab_var(b, o->seq);
		ab_bytes(b, &gl, 1);
		ab_bytes(b, o->gen_id, gl);
	}
	if (sb->kind != SUB_OPS) {
		ab_var(b, (uint64_t) sb->result);
	}
}

/* The kept answer v into sb's ops; false when it is not sb's request. */
static bool
ans_decode(sub *sb, const uint8_t *v, size_t vl, bool *corrupt)
{
	const uint8_t *p = v, *end = v + vl;
	uint64_t n, x[6];

	*corrupt = true;
	if (vl < 9 || v[0] != ANS_FORMAT) {
		return false;
	}
	p += 9;
	if (!rd_var(&p, end, &n)) {
		return false;
	}
	*corrupt = false;
	if (tli_get_be64(v + 1) != sb->key.digest || n != sb->n) {
		return false;
	}
	*corrupt = true;
	for (size_t i = 0; i < sb->n; i++) {
		tli_op *o = &sb->ops[i];
		uint8_t gl;

		for (int j = 0; j < 6; j++) {
			if (!rd_var(&p, end, &x[j])) {
				return false;
			}
		}
		if (p >= end || (gl = *p++) > TL_GEN_ID_LEN ||
		    (size_t) (end - p) < gl) {
			return false;
		}
		o->err = (int) x[0];
		o->new_version = x[1];
		o->new_ts = (int64_t) x[2];
		o->bucket = (uint32_t) x[3];
		o->deliveries = (uint32_t) x[4];
		o->seq = (uint32_t) x[5];
		memcpy(o->gen_id, p, gl);
		o->gen_id[gl] = '\0';
		o->replayed = true;
		p += gl;
	}
	if (sb->kind != SUB_OPS) {
		if (!rd_var(&p, end, &x[0])) {
			return false;
		}
		sb->result = (int) x[0];
	}
	*corrupt = p != end;
	return !*corrupt;
}

static void
fail_ops(sub *sb, int err)
{
	sb->result = err; /* a topic's */
	for (size_t i = 0; i < sb->n; i++) {
		sb->ops[i].err = err;
		sb->ops[i].new_version = 0;
		sb->ops[i].new_ts = 0;
		sb->ops[i].replayed = true;
	}
}

/* ---- the writer's steps ---- */

void
tli_answers_lookup(tli_store *s, sub *first)
{
	for (sub *sb = first; sb != NULL; sb = sb->next) {
		uint8_t k[ANS_KEY_LEN];
		char *err = NULL, *v;
		size_t vl = 0;
		bool corrupt;
		int rv;

		sb->replayed = false;
		sb->dup_of = NULL;
		if (sb->key.client == 0) {
			continue;
		}
		for (sub *pr = first; pr != sb; pr = pr->next) {
			if (pr->key.client != 0 && same_key(pr, sb)) {
				sb->dup_of =
				    pr->dup_of != NULL ? pr->dup_of : pr;
				break;
			}
		}
		if (sb->dup_of != NULL) {
			continue;
		}
		v = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_DEFAULT],
		    (const char *) k, ans_key(k, sb->key.client, sb->key.reqid),
		    &vl, &err);
		if ((rv = tli_rdb_err(s, err)) != TL_OK) {
			fail_ops(sb, rv);
			sb->replayed = true;
		} else if (v != NULL) {
			if (!ans_decode(
			        sb, (const uint8_t *) v, vl, &corrupt)) {
				/* another request under a reused id */
				fail_ops(sb, corrupt ? TL_ECORRUPT : TL_EINVAL);
			}
			sb->replayed = true;
		}
		rocksdb_free(v);
	}
}

/* Delete the answers older than answers_ms (both keys), oldest first, up
 * to PRUNE_MAX; s->ans_floor remembers where to look next time. */
static void
prune(tli_store *s, int64_t now)
{
	int64_t cut = now - s->opts.answers_ms;
	uint8_t lo[AGE_KEY_LEN], hi[1] = {'Q' + 1};
	size_t lol = 1, n = 0;
	rocksdb_readoptions_t *ro;
	rocksdb_iterator_t *it;

	if (s->ans_floor_set && cut < s->ans_next_ms) {
		return;
	}
	if (s->ans_floor_set) {
		memcpy(lo, s->ans_floor, AGE_KEY_LEN);
		lol = AGE_KEY_LEN;
	} else {
		lo[0] = 'Q';
	}
	it = tli_iter(s, CF_DEFAULT, lo, lol, hi, sizeof(hi), &ro);
	s->ans_next_ms = now; /* nothing older left, unless found below */
	for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl;
		const uint8_t *k = (const uint8_t *) rocksdb_iter_key(it, &kl);
		uint8_t ak[ANS_KEY_LEN];
		int64_t t;

		if (kl != AGE_KEY_LEN) {
			continue;
		}
		t = (int64_t) tli_get_be64(k + 1);
		if (t >= cut || n == PRUNE_MAX) {
			s->ans_next_ms = n == PRUNE_MAX ? cut : t;
			break;
		}
		rocksdb_writebatch_delete_cf(
		    s->wb, s->cf[CF_DEFAULT], (const char *) k, kl);
		rocksdb_writebatch_delete_cf(s->wb, s->cf[CF_DEFAULT],
		    (const char *) ak,
		    ans_key(ak, tli_get_be64(k + 9), tli_get_be32(k + 17)));
		memcpy(s->ans_floor, k, AGE_KEY_LEN);
		s->ans_floor_set = true;
		s->ans_pend_expired++;
		n++;
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	if (!s->ans_floor_set) {
		/* nothing expired: start from the first age key next time */
		s->ans_floor_set = true;
		memset(s->ans_floor, 0, AGE_KEY_LEN);
		s->ans_floor[0] = 'Q';
	}
}

void
tli_answers_write(tli_store *s, sub *first, int64_t now)
{
	abuf b = {NULL, 0, 0, false};

	for (sub *sb = first; sb != NULL; sb = sb->next) {
		uint8_t k[AGE_KEY_LEN];
		size_t kl;

		if (sb->key.client == 0 || sb->replayed || sb->dup_of != NULL) {
			continue;
		}
		ans_encode(&b, sb);
		if (b.oom) {
			/* not kept: a repeat would be applied again */
			break;
		}
		kl = ans_key(k, sb->key.client, sb->key.reqid);
		rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT],
		    (const char *) k, kl, (const char *) b.p, b.n);
		kl = age_key(k, now, sb->key.client, sb->key.reqid);
		rocksdb_writebatch_put_cf(
		    s->wb, s->cf[CF_DEFAULT], (const char *) k, kl, "", 0);
		s->ans_pend_kept++;
	}
	tli_free(b.p);
	prune(s, now);
}

void
tli_answers_done(tli_store *s, sub *first, bool written)
{
	uint64_t replayed = 0;

	for (sub *sb = first; sb != NULL; sb = sb->next) {
		replayed += sb->replayed || sb->dup_of != NULL;
	}
	if (written) {
		atomic_fetch_add(&s->st_ans_kept, s->ans_pend_kept);
		atomic_fetch_add(&s->st_ans_expired, s->ans_pend_expired);
		atomic_fetch_add(&s->st_ans_replayed, replayed);
	} else {
		tli_answers_forget(s); /* its deletions were not written */
	}
	s->ans_pend_kept = s->ans_pend_expired = 0;
}

void
tli_answers_forget(tli_store *s)
{
	s->ans_floor_set = false;
	s->ans_next_ms = 0;
}

void
tli_answers_copy_dups(sub *first)
{
	for (sub *sb = first; sb != NULL; sb = sb->next) {
		const sub *o = sb->dup_of;

		if (o == NULL) {
			continue;
		}
		if (o->n != sb->n || o->key.digest != sb->key.digest) {
			fail_ops(sb, TL_EINVAL);
			continue;
		}
		for (size_t i = 0; i < sb->n; i++) {
			tli_op *d = &sb->ops[i];
			const tli_op *x = &o->ops[i];
			d->err = x->err;
			d->new_version = x->new_version;
			d->new_ts = x->new_ts;
			d->bucket = x->bucket;
			d->deliveries = x->deliveries;
			d->seq = x->seq;
			memcpy(d->gen_id, x->gen_id, sizeof(d->gen_id));
			d->replayed = true;
		}
	}
}
