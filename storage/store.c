/*
 * The store object: opening RocksDB with its column families and format
 * check, the topic registry, the submission queue and the writer thread
 * that turns queued operations into group commits.
 *
 * DESIGN. Submitters append to a FIFO under q_lock and signal the writer.
 * The writer takes as many whole submissions as fit in max_batch_ops (a
 * topic create or delete always travels alone), applies them in order
 * against the stored state plus an overlay of the batch's own effects
 * (ops.c), adds the touched topics' counters to the same WriteBatch, writes
 * it once and hands the batch to the completer thread, which fsyncs the
 * log (TLI_SYNC_ALWAYS) and then completes the submissions, while the
 * writer goes on with the next batch ("the completer", below). A failed
 * write fails every operation of its batch that would have succeeded, and
 * rolls back nothing in memory because nothing in memory changed yet:
 * counters and topics change only after the write succeeded.
 *
 * Replicated mode (opts.replicate): the same, except that "write it" is
 * handing the WriteBatch's bytes to replicate as one entry, which returns
 * once the entry is committed and applied here by tli_store_apply_entry
 * (from another thread, usually while the writer waits). A failed
 * replicate is a failed write.
 */
#define _GNU_SOURCE /* pthread_setname_np, pthread_rwlockattr_setkind_np, \
                       qsort_r */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store_int.h"

static const char *cf_names[CF_COUNT] = {"default", "msg", "tl", "cons", "own"};

void
tli_store_opts_init(tli_store_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->sync_mode = TLI_SYNC_ALWAYS;
	o->sync_interval_ms = 100;
	o->max_batch_ops = TL_MAX_BATCH;
	o->min_lease_gap_ms = 1;
	o->cache_bytes = 32u << 20;
}

/* ---- topic registry ---- */

static int
topic_cmp_name(const topic_rt *t, const char *name)
{
	return strcmp(t->conf.name, name);
}

static size_t
topic_pos(tli_store *s, const char *name, bool *found)
{
	size_t lo = 0, hi = s->ntopics;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = topic_cmp_name(s->topics[mid], name);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	*found = false;
	return lo;
}

topic_rt *
tli_topic_find(tli_store *s, const char *name)
{
	bool found;
	size_t i;

	if (name == NULL) {
		return NULL;
	}
	i = topic_pos(s, name, &found);
	return found ? s->topics[i] : NULL;
}

int
tli_topic_lookup(
    tli_store *s, const char *name, uint32_t *id, tli_topic_conf *conf)
{
	topic_rt *t;
	int rv = TL_ENOTOPIC;

	pthread_rwlock_rdlock(&s->topics_lock);
	t = tli_topic_find(s, name);
	if (t != NULL) {
		*id = t->id;
		if (conf != NULL) {
			*conf = t->conf;
		}
		rv = TL_OK;
	}
	pthread_rwlock_unlock(&s->topics_lock);
	return rv;
}

static int
topic_insert(tli_store *s, topic_rt *t)
{
	bool found;
	size_t i = topic_pos(s, t->conf.name, &found);
	topic_rt **nt = tli_realloc(s->topics, (s->ntopics + 1) * sizeof(*nt));

	if (nt == NULL) {
		return TL_ENOMEM;
	}
	memmove(nt + i + 1, nt + i, (s->ntopics - i) * sizeof(*nt));
	nt[i] = t;
	s->topics = nt;
	s->ntopics++;
	return TL_OK;
}

static void
topic_remove(tli_store *s, topic_rt *t)
{
	bool found;
	size_t i = topic_pos(s, t->conf.name, &found);

	if (found) {
		memmove(s->topics + i, s->topics + i + 1,
		    (s->ntopics - i - 1) * sizeof(*s->topics));
		TLI_ASSERT(s->ntopics > 0);
		s->ntopics--;
	}
}

int
tli_topic_conf_init(tli_topic_conf *c, const char *name)
{
	size_t len = name != NULL ? strlen(name) : 0;

	memset(c, 0, sizeof(*c));
	if (len == 0) {
		return TL_EBADID;
	}
	if (len > TL_MAX_NAME_LEN) {
		return TL_ETOOLARGE;
	}
	memcpy(c->name, name, len);
	c->buckets = TL_DEFAULT_BUCKETS;
	c->max_body = TL_DEFAULT_MAX_BODY;
	c->default_lease_ms = TL_DEFAULT_LEASE_MS;
	c->max_lease_ms = TL_DEFAULT_MAX_LEASE_MS;
	c->max_deliveries = TL_DEFAULT_MAX_DELIVERIES;
	return TL_OK;
}

/* Fill zeros with defaults and check every setting's range. */
static int
topic_conf_normalise(tli_topic_conf *c)
{
	size_t len = strnlen(c->name, sizeof(c->name));

	if (len == 0) {
		return TL_EBADID;
	}
	if (len > TL_MAX_NAME_LEN) {
		return TL_ETOOLARGE;
	}
	if (c->buckets == 0) {
		c->buckets = TL_DEFAULT_BUCKETS;
	}
	if (c->max_body == 0) {
		c->max_body = TL_DEFAULT_MAX_BODY;
	}
	if (c->max_lease_ms == 0) {
		c->max_lease_ms = TL_DEFAULT_MAX_LEASE_MS;
	}
	if (c->default_lease_ms == 0) {
		c->default_lease_ms = TL_DEFAULT_LEASE_MS < c->max_lease_ms
		    ? TL_DEFAULT_LEASE_MS
		    : c->max_lease_ms;
	}
	if (c->buckets > TL_MAX_BUCKETS || c->max_body > TL_MAX_BODY_LEN ||
	    c->max_lease_ms < 0 || c->max_lease_ms > TL_MAX_LEASE_MS ||
	    c->default_lease_ms < 0 || c->default_lease_ms > c->max_lease_ms) {
		return TL_EINVAL;
	}
	return TL_OK;
}

/* ---- the writer's staging area (see store_int.h) ---- */

static int
stage_arena(stage *g, const void *p, size_t n, size_t *off)
{
	if (g->acap - g->alen < n) {
		size_t cap = g->acap ? g->acap : 65536;
		uint8_t *a;
		while (cap - g->alen < n) {
			cap *= 2;
		}
		if ((a = tli_realloc(g->arena, cap)) == NULL) {
			g->oom = true;
			return TL_ENOMEM;
		}
		g->arena = a;
		g->acap = cap;
	}
	*off = g->alen;
	memcpy(g->arena + g->alen, p, n);
	g->alen += n;
	return TL_OK;
}

static stage_ent *
stage_add(stage *g, int cf, const void *k, size_t kl)
{
	stage_ent *e;
	size_t off;

	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 1024;
		stage_ent *ne = tli_realloc(g->e, cap * sizeof(*ne));
		stage_key *nk;
		if (ne == NULL) {
			g->oom = true;
			return NULL;
		}
		g->e = ne;
		if ((nk = tli_realloc(g->sk, 2 * cap * sizeof(*nk))) == NULL) {
			g->oom = true;
			return NULL;
		}
		g->sk = nk;
		g->cap = cap;
	}
	if (stage_arena(g, k, kl, &off) != TL_OK) {
		return NULL;
	}
	e = &g->e[g->n];
	e->seq = (uint32_t) g->n;
	g->n++;
	e->cf = (uint8_t) cf;
	e->klen = (uint16_t) kl;
	e->koff = (uint32_t) off;
	e->del = 0;
	e->vlen = 0;
	e->voff = 0;
	e->vext = NULL;
	return e;
}

void
tli_stage_put(tli_store *s, int cf, const void *k, size_t kl, const void *v,
    size_t vl, bool external)
{
	stage_ent *e = stage_add(&s->stg, cf, k, kl);

	if (e == NULL) {
		return;
	}
	e->vlen = (uint32_t) vl;
	if (external) {
		e->vext = v;
	} else {
		stage_arena(&s->stg, v, vl, &e->voff);
	}
}

void
tli_stage_del(tli_store *s, int cf, const void *k, size_t kl)
{
	stage_ent *e = stage_add(&s->stg, cf, k, kl);

	if (e != NULL) {
		e->del = 1;
	}
}

static int
stage_cmp(const void *a, const void *b, void *arena)
{
	const stage_ent *x = a, *y = b;
	const uint8_t *ar = arena;
	size_t n;
	int c;

	if (x->cf != y->cf) {
		return x->cf < y->cf ? -1 : 1;
	}
	n = x->klen < y->klen ? x->klen : y->klen;
	c = memcmp(ar + x->koff, ar + y->koff, n);
	if (c != 0) {
		return c;
	}
	if (x->klen != y->klen) {
		return x->klen < y->klen ? -1 : 1;
	}
	return x->seq < y->seq ? -1 : 1;
}

static inline int
stage_key_cmp(const stage *g, const stage_key *a, const stage_key *b)
{
	if (a->hi != b->hi) {
		return a->hi < b->hi ? -1 : 1;
	}
	if (a->lo != b->lo) {
		return a->lo < b->lo ? -1 : 1;
	}
	return stage_cmp(&g->e[a->i], &g->e[b->i], g->arena);
}

/* Sorts the batch's n keys (g->sk) with the comparison inline: runs of 16
 * by insertion, then merged bottom-up through the scratch half. A
 * zero-padded prefix that differs orders two keys as the whole keys do
 * (bytes, then the shorter first), so the full comparison runs only for
 * keys that agree on 15 bytes. qsort_r's merge sort, calling stage_cmp for
 * every comparison, took 7 % of the writer thread's CPU in durable creates. */
static stage_key *
stage_sort(stage *g)
{
	stage_key *a = g->sk, *b = g->sk + g->n, *t;
	size_t n = g->n, run = 16;

	for (size_t i = 0; i < n; i++) {
		const stage_ent *e = &g->e[i];
		uint8_t k[16] = {0};

		memcpy(k, g->arena + e->koff, e->klen < 15 ? e->klen : 15);
		a[i].hi = ((uint64_t) e->cf << 56) | (tli_get_be64(k) >> 8);
		a[i].lo = tli_get_be64(k + 7);
		a[i].i = i;
	}
	for (size_t lo = 0; lo < n; lo += run) {
		size_t hi = lo + run < n ? lo + run : n;
		for (size_t i = lo + 1; i < hi; i++) {
			stage_key x = a[i];
			size_t j = i;
			while (j > lo && stage_key_cmp(g, &x, &a[j - 1]) < 0) {
				a[j] = a[j - 1];
				j--;
			}
			a[j] = x;
		}
	}
	for (; run < n; run *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * run) {
			size_t mid = lo + run < n ? lo + run : n;
			size_t hi = lo + 2 * run < n ? lo + 2 * run : n;
			size_t i = lo, j = mid, o = lo;
			while (i < mid && j < hi) {
				b[o++] = stage_key_cmp(g, &a[j], &a[i]) < 0
				    ? a[j++]
				    : a[i++];
			}
			while (i < mid) {
				b[o++] = a[i++];
			}
			while (j < hi) {
				b[o++] = a[j++];
			}
		}
		t = a;
		a = b;
		b = t;
	}
	return a;
}

static bool
stage_same_key(const stage *g, const stage_ent *x, const stage_ent *y)
{
	return x->cf == y->cf && x->klen == y->klen &&
	    memcmp(g->arena + x->koff, g->arena + y->koff, x->klen) == 0;
}

/* Whether cf's keys are deleted with SingleDelete. An index entry (the
 * timeline's, a consumer's, an owner's) is put once and deleted once: a
 * change deletes the old entry and puts the new one (ops.c, msg_update),
 * never puts a key that is there. So a SingleDelete may stand for the
 * delete, and when it meets its put in a flush or a compaction both are
 * dropped; a Delete's tombstone stays until the last level. A lease and
 * the extend and delete after it put and delete two or three index
 * entries within milliseconds: with SingleDelete they vanish in the flush
 * of their memtable instead of going to the tables as tombstones that
 * every compaction carries down and every scan over them steps past.
 * Records (msg) are overwritten and keep Delete. Replicated
 * mode keeps Delete too: a follower of an earlier version refuses
 * entries that hold a SingleDelete (rdb_batch.cc), and an entry applied
 * twice would put a key twice. */
static bool
stage_single_del(const tli_store *s, int cf)
{
	return s->pipelined && (cf == CF_TL || cf == CF_CONS || cf == CF_OWN);
}

/* Sorted into the WriteBatch (the arena passed to the comparator: every
 * store's writer sorts at the same time as the others). Of the entries
 * for one key only the batch's last goes in: a put or delete replaces
 * whatever came before it in the same batch, so the earlier ones would
 * only cost memtable inserts (a lease and the delete that follows it in
 * one batch write the timeline entry twice). A put that replaces a delete
 * of a key deleted with SingleDelete keeps the delete before it: the key
 * may have been put by an earlier batch, and two puts under one
 * SingleDelete would leave the first (a message moved back to the time it
 * had, an entry rewritten with a new version). */
static void
stage_flush(tli_store *s)
{
	stage *g = &s->stg;
	const stage_key *sk;
	uint64_t merged = 0;
	bool run_del = false; /* a delete among the key's earlier entries */

	if (g->n == 0) {
		return;
	}
	sk = stage_sort(g);
	for (size_t i = 0; i < g->n; i++) {
		const stage_ent *e = &g->e[sk[i].i];
		const char *k = (const char *) g->arena + e->koff;
		bool single = stage_single_del(s, e->cf);
		if (i + 1 < g->n && stage_same_key(g, e, &g->e[sk[i + 1].i])) {
			run_del = run_del || e->del;
			merged++;
			continue;
		}
		if (e->del && single) {
			rocksdb_writebatch_singledelete_cf(
			    s->wb, s->cf[e->cf], k, e->klen);
		} else if (e->del) {
			rocksdb_writebatch_delete_cf(
			    s->wb, s->cf[e->cf], k, e->klen);
		} else {
			if (run_del && single) {
				rocksdb_writebatch_singledelete_cf(
				    s->wb, s->cf[e->cf], k, e->klen);
				merged--;
			}
			rocksdb_writebatch_put_cf(s->wb, s->cf[e->cf], k,
			    e->klen,
			    e->vext != NULL ? (const char *) e->vext
			                    : (const char *) g->arena + e->voff,
			    e->vlen);
		}
		run_del = false;
	}
	atomic_fetch_add(&s->st_stage_merged, merged);
	atomic_fetch_add(&s->st_keys_written, g->n - merged);
}

static void
stage_reset(stage *g)
{
	g->n = 0;
	g->alen = 0;
	g->oom = false;
}

/* ---- the writer ---- */

/* A full disk (see store.h): the first and the longest wait between two
 * DB::Resume attempts. */
#define RESUME_FIRST_MS 250
#define RESUME_MAX_MS 2000

/* A write failed for lack of space: RocksDB now refuses every write until
 * resumed. Reported once per episode. */
static bool
stop_report(tli_store *s)
{
	if (atomic_load(&s->stopped)) {
		return false;
	}
	atomic_store(&s->stopped, true);
	atomic_fetch_add(&s->st_stops, 1);
	if (s->opts.report != NULL) {
		char detail[sizeof(s->last_err)];
		pthread_mutex_lock(&s->err_lock);
		memcpy(detail, s->last_err, sizeof(detail));
		pthread_mutex_unlock(&s->err_lock);
		s->opts.report(s->opts.report_arg, true, detail);
	}
	return true;
}

static void
writes_stop(tli_store *s)
{
	if (stop_report(s)) {
		s->resume_wait_ms = RESUME_FIRST_MS;
	}
	s->need_resume = true;
	s->resume_at_ms = tli_mono_ms() + s->resume_wait_ms;
}

/* While RocksDB holds the error, ask it to resume when the backoff has
 * run out. Its failure (the disk is still full) doubles the backoff. */
static void
writes_try_resume(tli_store *s)
{
	char *err = NULL;

	if (!s->need_resume || tli_mono_ms() < s->resume_at_ms) {
		return;
	}
	tli_rdb_resume(s->db, &err);
	if (err == NULL) {
		s->need_resume = false;
		return;
	}
	(void) tli_rdb_err(s, err);
	s->resume_wait_ms = s->resume_wait_ms * 2 > RESUME_MAX_MS
	    ? RESUME_MAX_MS
	    : s->resume_wait_ms * 2;
	s->resume_at_ms = tli_mono_ms() + s->resume_wait_ms;
}

/* One group commit: the time from its write to its durability (hist_ns,
 * into the histogram), and what it adds to the time spent writing and
 * syncing (total_ns: a sync that covers several batches counts once). */
static void
sync_note(tli_store *s, int64_t hist_ns, int64_t total_ns)
{
	int i = 0;

	while (i < TLI_SYNC_BUCKETS &&
	    (double) hist_ns > tli_sync_bounds[i] * 1e6) {
		i++;
	}
	atomic_fetch_add(&s->st_sync_hist[i], 1);
	atomic_fetch_add(&s->st_sync_ns, (uint64_t) total_ns);
	atomic_fetch_add(&s->st_batches, 1);
}

/* Replicated mode: the batch as one entry, handed to replicate. */
static int
replicate_batch(tli_store *s, tli_repl_kind kind)
{
	size_t n, len;
	const char *data = rocksdb_writebatch_data(s->wb, &n);
	int64_t t0;
	int rv;

	len = TLI_REPL_HEADER + n;
	if (len > s->entry_cap) {
		uint8_t *e = tli_realloc(s->entry, len);
		if (e == NULL) {
			return TL_ENOMEM;
		}
		s->entry = e;
		s->entry_cap = len;
	}
	s->entry[0] = TLI_REPL_VERSION;
	s->entry[1] = (uint8_t) kind;
	s->entry[2] = TLI_STORE_FORMAT;
	s->entry[3] = 0;
	memcpy(s->entry + TLI_REPL_HEADER, data, n);
	t0 = tli_mono_ns();
	atomic_store(&s->in_replicate, true);
	rv = s->opts.replicate(s->opts.replicate_arg, s->entry, len);
	atomic_store(&s->in_replicate, false);
	t0 = tli_mono_ns() - t0;
	sync_note(s, t0, t0);
	if (rv != TL_OK && rv != TL_ENOTLEADER) {
		/* The entry may still be committed and applied later
		 * (TL_ELEADERLOST): no cached record is trusted any more.
		 * TL_ENOTLEADER: nothing was proposed. */
		uint64_t gen = atomic_load(&s->commit_gen) + 1;
		tli_overlay_forget(s->ov, gen);
		atomic_store(&s->commit_gen, gen);
	}
	return rv;
}

/* A sync of the log failed (the completer): every write is refused until a
 * restart, which replays what reached the disk. Reported once. */
static int
log_broken_refuse(tli_store *s)
{
	(void) stop_report(s);
	return tli_store_err(s, TL_EIO,
	    "a sync of the log failed: writes are refused until a restart "
	    "(%s)",
	    s->path);
}

static int
write_batch(tli_store *s, tli_repl_kind kind)
{
	char *err = NULL;
	int64_t t0;
	int rv;

	if (rocksdb_writebatch_count(s->wb) == 0) {
		return TL_OK;
	}
	if (s->opts.replicate != NULL) {
		return replicate_batch(s, kind);
	}
	writes_try_resume(s);
	if (s->need_resume) {
		return TL_ENOSPC;
	}
	if (s->opts.fsync_delay_ms > 0 &&
	    s->opts.sync_mode == TLI_SYNC_ALWAYS) {
		struct timespec d = {s->opts.fsync_delay_ms / 1000,
		    (long) (s->opts.fsync_delay_ms % 1000) * 1000000L};
		nanosleep(&d, NULL);
	}
	if (atomic_load(&s->log_broken)) {
		return log_broken_refuse(s);
	}
	/* A reader from now on may see this batch's writes. */
	atomic_store(&s->visible, s->c_seq);
	t0 = tli_mono_ns();
	rocksdb_write(s->db, s->wopts, s->wb, &err);
	s->batch_write_ns += tli_mono_ns() - t0;
	if (err == NULL && s->opts.sync_mode != TLI_SYNC_ALWAYS) {
		s->unsynced = true;
	}
	rv = tli_rdb_err(s, err);
	if (rv == TL_ENOSPC) {
		writes_stop(s);
	} else if (rv == TL_OK && atomic_load(&s->stopped)) {
		atomic_store(&s->stopped, false);
		if (s->opts.report != NULL) {
			s->opts.report(s->opts.report_arg, false, "");
		}
	}
	return rv;
}

static void
interval_sync(tli_store *s, bool force)
{
	char *err = NULL;
	int64_t now = tli_mono_ms();

	if (!s->unsynced || s->opts.sync_mode != TLI_SYNC_INTERVAL) {
		return;
	}
	if (!force && now - s->last_sync_ms < s->opts.sync_interval_ms) {
		return;
	}
	rocksdb_flush_wal(s->db, 1, &err);
	if (tli_rdb_err(s, err) == TL_ENOSPC) {
		writes_stop(s);
	}
	s->last_sync_ms = now;
	s->unsynced = false;
}

/* A topic batch's write, with its kept answer (the success it is about to
 * be) when the request is keyed. */
static int
topic_write(tli_store *s, sub *sb, tli_repl_kind kind)
{
	int rv;

	if (sb->key.client != 0) {
		sb->result = TL_OK;
		tli_answers_write(s, sb, tli_clock_now(&s->opts.clock));
	}
	rv = write_batch(s, kind);
	if (sb->key.client != 0) {
		tli_answers_done(s, sb, rv == TL_OK);
	}
	return rv;
}

static void topic_create_apply(tli_store *s, sub *sb);
static void topic_delete_apply(tli_store *s, sub *sb);

/* A topic submission: its kept answer, or applied. */
static void
topic_sub_apply(tli_store *s, sub *sb)
{
	if (sb->key.client != 0) {
		tli_answers_lookup(s, sb);
		if (sb->replayed) {
			tli_answers_done(s, sb, true); /* counted */
			return;
		}
	}
	if (sb->kind == SUB_TOPIC_CREATE) {
		topic_create_apply(s, sb);
	} else {
		topic_delete_apply(s, sb);
	}
}

static void
topic_create_apply(tli_store *s, sub *sb)
{
	uint8_t key[1 + TL_MAX_NAME_LEN], val[64], nk[1] = {'N'}, nv[4];
	uint8_t ck[5], cv[COUNTERS_LEN] = {0};
	topic_rt *t;
	size_t kl;
	int rv;

	if (tli_topic_find(s, sb->conf.name) != NULL) {
		sb->result = TL_ETOPICEXISTS;
		return;
	}
	if ((t = tli_zalloc(sizeof(*t))) == NULL) {
		sb->result = TL_ENOMEM;
		return;
	}
	t->conf = sb->conf;
	t->id = s->next_topic_id;
	t->created_at = tli_clock_now(&s->opts.clock);
	rocksdb_writebatch_clear(s->wb);
	kl = tli_key_meta_topic(key, t->conf.name, strlen(t->conf.name));
	rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT], (char *) key, kl,
	    (char *) val, tli_topic_encode(val, t));
	tli_put_be32(nv, t->id + 1);
	rocksdb_writebatch_put_cf(
	    s->wb, s->cf[CF_DEFAULT], (char *) nk, 1, (char *) nv, 4);
	rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT], (char *) ck,
	    tli_key_meta_counters(ck, t->id), (char *) cv, sizeof(cv));
	rv = topic_write(s, sb, TLI_REPL_TOPIC_CREATE);
	if (rv != TL_OK) {
		goto fail;
	}
	pthread_rwlock_wrlock(&s->topics_lock);
	rv = topic_insert(s, t);
	pthread_rwlock_unlock(&s->topics_lock);
	if (rv != TL_OK) {
		goto fail;
	}
	s->next_topic_id++;
	sb->result = TL_OK;
	return;
fail:
	tli_free(t);
	sb->result = rv;
}

static void
topic_delete_apply(tli_store *s, sub *sb)
{
	uint8_t key[1 + TL_MAX_NAME_LEN], ck[5], lo[4], hi[4], ok[5], oh[5];
	topic_rt *t = tli_topic_find(s, sb->conf.name);
	int rv;

	if (t == NULL) {
		sb->result = TL_ENOTOPIC;
		return;
	}
	rocksdb_writebatch_clear(s->wb);
	rocksdb_writebatch_delete_cf(s->wb, s->cf[CF_DEFAULT], (char *) key,
	    tli_key_meta_topic(key, t->conf.name, strlen(t->conf.name)));
	rocksdb_writebatch_delete_cf(s->wb, s->cf[CF_DEFAULT], (char *) ck,
	    tli_key_meta_counters(ck, t->id));
	ok[0] = 'O';
	tli_put_be32(ok + 1, t->id);
	oh[0] = 'O';
	tli_put_be32(oh + 1, t->id + 1);
	rocksdb_writebatch_delete_range_cf(
	    s->wb, s->cf[CF_DEFAULT], (char *) ok, 5, (char *) oh, 5);
	tli_put_be32(lo, t->id);
	tli_put_be32(hi, t->id + 1);
	for (int cf = CF_MSG; cf < CF_COUNT; cf++) {
		rocksdb_writebatch_delete_range_cf(
		    s->wb, s->cf[cf], (char *) lo, 4, (char *) hi, 4);
	}
	if ((rv = topic_write(s, sb, TLI_REPL_TOPIC_DELETE)) != TL_OK) {
		sb->result = rv;
		return;
	}
	{
		uint64_t gen = atomic_load(&s->commit_gen) + 1;
		tli_overlay_forget(s->ov, gen);
		atomic_store(&s->commit_gen, gen);
	}
	pthread_rwlock_wrlock(&s->topics_lock);
	topic_remove(s, t);
	pthread_rwlock_unlock(&s->topics_lock);
	tli_free(t);
	sb->result = TL_OK;
}

static void
counters_put(tli_store *s, topic_rt *t)
{
	uint8_t ck[5], cv[COUNTERS_LEN];

	tli_put_be64(cv,
	    (uint64_t) ((int64_t) atomic_load(&t->messages) +
	        t->pend_messages));
	tli_put_be64(cv + 8,
	    (uint64_t) ((int64_t) atomic_load(&t->locked) + t->pend_locked));
	tli_put_be64(cv + 16,
	    (uint64_t) ((int64_t) atomic_load(&t->dead) + t->pend_dead));
	rocksdb_writebatch_put_cf(s->wb, s->cf[CF_DEFAULT], (char *) ck,
	    tli_key_meta_counters(ck, t->id), (char *) cv, sizeof(cv));
}

static void
ops_batch_apply(tli_store *s, sub *first, size_t nops)
{
	bool keyed = false;
	uint64_t m;
	int rv;

	for (sub *sb = first; sb != NULL && !keyed; sb = sb->next) {
		keyed = sb->key.client != 0;
	}

	rocksdb_writebatch_clear(s->wb);
	stage_reset(&s->stg);
	tli_overlay_reset(s->ov);
	tli_owner_deltas_reset(s->owners);
	if (keyed) {
		tli_answers_lookup(s, first);
	}
	for (sub *sb = first; sb != NULL; sb = sb->next) {
		if (sb->replayed || sb->dup_of != NULL) {
			continue;
		}
		for (size_t i = 0; i < sb->n; i++) {
			tli_apply_op(s, &sb->ops[i]);
		}
	}
	stage_flush(s);
	for (size_t i = 0; i < s->ntopics; i++) {
		if (s->topics[i]->pend_dirty) {
			counters_put(s, s->topics[i]);
		}
	}
	rv = s->stg.oom ? TL_ENOMEM : tli_owner_stage(s, s->owners);
	if (rv == TL_OK && keyed) {
		tli_answers_write(s, first, tli_clock_now(&s->opts.clock));
	}
	if (rv == TL_OK) {
		rv = write_batch(s, TLI_REPL_OPS);
	}
	if (keyed) {
		tli_answers_done(s, first, rv == TL_OK);
	}
	if (rv == TL_OK) {
		uint64_t gen = atomic_load(&s->commit_gen) + 1;
		tli_overlay_commit(s->ov, gen);
		atomic_store(&s->commit_gen, gen);
	}
	for (size_t i = 0; i < s->ntopics; i++) {
		topic_rt *t = s->topics[i];
		if (!t->pend_dirty) {
			continue;
		}
		/* the committed counts never go below zero */
		TLI_ASSERT(rv != TL_OK ||
		    ((int64_t) atomic_load(&t->messages) + t->pend_messages >=
		            0 &&
		        (int64_t) atomic_load(&t->locked) + t->pend_locked >=
		            0 &&
		        (int64_t) atomic_load(&t->dead) + t->pend_dead >= 0));
		if (rv == TL_OK) {
			atomic_fetch_add(
			    &t->messages, (uint64_t) t->pend_messages);
			atomic_fetch_add(&t->locked, (uint64_t) t->pend_locked);
			atomic_fetch_add(&t->dead, (uint64_t) t->pend_dead);
		}
		t->pend_messages = t->pend_locked = t->pend_dead = 0;
		t->pend_dirty = false;
	}
	if (rv != TL_OK) {
		for (sub *sb = first; sb != NULL; sb = sb->next) {
			for (size_t i = 0; i < sb->n; i++) {
				/* A dead-lettering lease changed state too. */
				if (sb->ops[i].err == TL_OK ||
				    sb->ops[i].err == TL_EDEAD) {
					sb->ops[i].err = rv;
					sb->ops[i].new_version = 0;
					sb->ops[i].new_ts = 0;
				}
			}
		}
	}
	if (keyed) {
		tli_answers_copy_dups(first);
	}
	atomic_fetch_add(&s->st_ops, nops);
	m = atomic_load(&s->st_max_batch);
	if (nops > m) {
		atomic_store(&s->st_max_batch, nops);
	}
}

/* Take whole submissions off the queue: a topic submission alone, or as
 * many op submissions as fit in max_batch_ops. Called with q_lock held. */
static sub *
queue_take(tli_store *s, size_t *nops)
{
	sub *first = s->q_head, *last = first;
	size_t n;

	TLI_ASSERT_LOCKED(&s->q_lock);
	TLI_ASSERT(first != NULL && s->q_tail != NULL);
	n = first->n;

	if (first->kind == SUB_OPS) {
		while (last->next != NULL && last->next->kind == SUB_OPS &&
		    n + last->next->n <= s->opts.max_batch_ops) {
			last = last->next;
			n += last->n;
		}
	}
	s->q_head = last->next;
	if (s->q_head == NULL) {
		s->q_tail = NULL;
	}
	last->next = NULL;
	*nops = n;
	atomic_fetch_sub(&s->st_queued_ops, n);
	return first;
}

static void
queue_wait(tli_store *s)
{
	struct timespec ts;
	int64_t ms;

	TLI_ASSERT_LOCKED(&s->q_lock);
	ms = -1;
	if (s->unsynced && s->opts.sync_mode == TLI_SYNC_INTERVAL) {
		ms = s->opts.sync_interval_ms;
	}
	if (s->need_resume) {
		int64_t r = s->resume_at_ms - tli_mono_ms();
		r = r < 1 ? 1 : r;
		ms = ms < 0 || r < ms ? r : ms;
	}
	if (ms < 0) {
		pthread_cond_wait(&s->q_cv, &s->q_lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&s->q_cv, &s->q_lock, &ts);
}

/* The database is closed (a failed restore): the batch fails whole. */
static void
batch_fail(sub *first, int rv)
{
	for (sub *sb = first; sb != NULL; sb = sb->next) {
		sb->result = rv;
		for (size_t i = 0; i < sb->n; i++) {
			sb->ops[i].err = rv;
			sb->ops[i].new_version = 0;
			sb->ops[i].new_ts = 0;
		}
	}
}

void
tli_store_thread_setup(void)
{
	rocksdb_set_perf_level(1); /* kDisable */
}

/* ---- the completer ----
 *
 * The writer hands each written batch here and goes on with the next one;
 * this thread takes every batch written so far, makes them durable with one
 * sync of RocksDB's log (TLI_SYNC_ALWAYS; a write without sync has put its
 * record in the log file already, through the kernel's cache) and
 * completes their submissions in order. The writer's batch N+1 thus forms
 * and is written while N syncs and its answers go out (measured: the
 * writer spent a fifth of its time in the completions and another in the
 * sync). With TLI_SYNC_ALWAYS the sync and the completions are two
 * threads: the syncer syncs the batches written so far and hands them to
 * the completer, and syncs the next ones while it completes. With one
 * thread a batch written while the completions of earlier ones ran (the
 * answers to clients; up to 10 ms on two busy cores) waited for all of
 * them before its sync began, and a lease asked for ahead of its due time
 * became durable after it (docs/benchmarks.md, "Leases durable after
 * their due time").
 *
 * The writer syncs a batch itself, when nothing is queued behind it and the
 * syncer is idle (writer_may_sync): most commits at a few thousand a
 * second, and one thread fewer to wake for each.
 *
 * What that changes: a batch's writes are visible in RocksDB before they
 * are durable. The writer's own checks want that (N+1 is checked against
 * N), and the dispatcher's due-index scan and body reads may see them (what
 * they find is pushed only under a lease of a later batch, durable after
 * this one: the log is synced in order). Every other public read waits,
 * after reading and before returning, until each batch it may have seen is
 * durable (tli_durable_wait): no client is ever shown a write that a crash
 * could still take back.
 *
 * The sync is the store's own fdatasync of RocksDB's log files (log_sync,
 * below), which runs beside the writer's next write. A failed sync fails
 * its batches' operations (the outcome of an operation answered with a
 * storage error is unknown, as with any failed write) and every later
 * write (TL_EIO until a restart): what it held may be gone from the
 * kernel's cache, so nothing after it can be acknowledged; the restart
 * replays what reached the disk.
 *
 * Replicated mode: replicate returns once the entry is committed (Raft's
 * log is the durable one), the store's writes are not synced and nothing
 * waits; the completer only completes, beside the writer's next batch
 * (docs/benchmarks.md, "The completer"). */

static _Thread_local bool t_nowait; /* the writer and the completer */

static void
batch_complete(sub *batch)
{
	sub *next;

	for (; batch != NULL; batch = next) {
		bool heap = batch->heap;
		next = batch->next;
		batch->done(batch->arg);
		if (heap) {
			tli_free(batch);
		}
	}
}

/* A sync failed after the batch was written: its operations that had
 * succeeded fail with rv. */
static void
batch_sync_failed(sub *batch, int rv)
{
	for (sub *sb = batch; sb != NULL; sb = sb->next) {
		if (sb->kind != SUB_OPS) {
			sb->result = sb->result == TL_OK ? rv : sb->result;
			continue;
		}
		for (size_t i = 0; i < sb->n; i++) {
			if (sb->ops[i].err == TL_OK ||
			    sb->ops[i].err == TL_EDEAD) {
				sb->ops[i].err = rv;
				sb->ops[i].new_version = 0;
				sb->ops[i].new_ts = 0;
			}
		}
	}
}

/* Append the batches first..last to a queue of c_lock and wake its
 * thread (c_lock held). */
static void
batches_append(
    sub **head, sub **tail, pthread_cond_t *cv, sub *first, sub *last)
{
	if (*tail != NULL) {
		(*tail)->batch_next = first;
	} else {
		*head = first;
	}
	*tail = last;
	pthread_cond_signal(cv);
}

static void
completer_push(tli_store *s, sub *batch)
{
	batch->batch_next = NULL;
	pthread_mutex_lock(&s->c_lock);
	s->c_pending++;
	batches_append(&s->c_head, &s->c_tail, &s->c_cv, batch, batch);
	pthread_mutex_unlock(&s->c_lock);
}

/* fdatasync of one log file by number (an older one may be gone: its
 * memtables are in tables, which RocksDB synced). */
static int
log_file_sync(tli_store *s, uint64_t num, int *keep)
{
	char path[PATH_MAX];
	int fd, rv = 0;

	snprintf(path, sizeof(path), "%s/%06" PRIu64 ".log", s->path, num);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		return errno == ENOENT && keep == NULL ? 0 : -1;
	}
	if (fdatasync(fd) != 0) {
		rv = -1;
	}
	if (keep != NULL && rv == 0) {
		*keep = fd;
	} else {
		close(fd);
	}
	return rv;
}

/* The log files after `after` and before `before`: written since the last
 * sync when RocksDB switched files more than once meanwhile. */
static int
log_sync_between(tli_store *s, uint64_t after, uint64_t before)
{
	DIR *d = opendir(s->path);
	struct dirent *e;
	int rv = 0;

	if (d == NULL) {
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char *end;
		uint64_t n = strtoull(e->d_name, &end, 10);

		if (end != e->d_name && strcmp(end, ".log") == 0 && n > after &&
		    n < before && log_file_sync(s, n, NULL) != 0) {
			rv = -1;
		}
	}
	closedir(d);
	return rv;
}

/* Make every write made so far durable: fdatasync of the log file RocksDB
 * writes to (and of those it left since the last sync, and the directory
 * that names a new one). The store's own, not DB::SyncWAL: a build of
 * RocksDB with its assertions on (Debian's) aborts when SyncWAL meets a
 * log file whose write just failed (a full disk), and a write may fail
 * at any moment beside the sync; this sync only reads the file. */
static int
log_sync(tli_store *s)
{
	uint64_t cur;
	int rv;

	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		return rv;
	}
	if (tli_rdb_current_wal(s->db, &cur) != 0) {
		rv = tli_store_err(
		    s, TL_EIO, "no current log file in %s", s->path);
	} else if (cur != s->wal_num) {
		int dfd, fd = -1;

		if (s->wal_fd >= 0 &&
		    (fdatasync(s->wal_fd) != 0 || close(s->wal_fd) != 0)) {
			rv = TL_EIO;
		}
		s->wal_fd = -1;
		if (log_sync_between(s, s->wal_num, cur) != 0 ||
		    log_file_sync(s, cur, &fd) != 0) {
			rv = TL_EIO;
		}
		s->wal_fd = fd;
		s->wal_num = cur;
		dfd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) != 0) {
			rv = TL_EIO;
		}
		if (dfd >= 0) {
			close(dfd);
		}
		if (rv != TL_OK) {
			rv = tli_store_err(s, TL_EIO,
			    "sync of the log in %s: %s", s->path,
			    strerror(errno));
		}
	} else if (fdatasync(s->wal_fd) != 0) {
		rv = tli_store_err(s, TL_EIO,
		    "sync of the log %s/%06" PRIu64 ".log: %s", s->path, cur,
		    strerror(errno));
	}
	tli_db_unlock(s);
	return rv;
}

/* Take every batch of a queue (c_lock held inside); NULL once it is empty
 * and stopping. */
static sub *
batches_take(tli_store *s, sub **head, sub **tail, pthread_cond_t *cv,
    const bool *stopping)
{
	sub *list;

	pthread_mutex_lock(&s->c_lock);
	while (*head == NULL && !*stopping) {
		pthread_cond_wait(cv, &s->c_lock);
	}
	list = *head;
	*head = *tail = NULL;
	pthread_mutex_unlock(&s->c_lock);
	return list;
}

/* Make a list of written batches durable (one sync of the log for all),
 * or fail them, and say so to the readers that wait. */
static void
batches_sync(tli_store *s, sub *list)
{
	uint64_t upto = 0, nwritten = 0;
	int64_t sync_ns = 0;

	for (sub *b = list; b != NULL; b = b->batch_next) {
		upto = b->seq;
		nwritten += b->written;
	}
	if (nwritten > 0 && s->opts.sync_mode == TLI_SYNC_ALWAYS) {
		int64_t t0;

		if (s->opts.sync_hook != NULL) {
			s->opts.sync_hook(s->opts.sync_hook_arg);
		}
		t0 = tli_mono_ns();
		if (log_sync(s) != TL_OK) {
			/* What the failed sync held may be lost (the kernel
			 * may drop pages it could not write): nothing after
			 * it may be acknowledged. */
			atomic_store(&s->log_broken, true);
		}
		sync_ns = tli_mono_ns() - t0;
	}
	if (atomic_load(&s->log_broken)) {
		for (sub *b = list; b != NULL; b = b->batch_next) {
			batch_sync_failed(b, TL_EIO);
		}
	}
	for (sub *b = list, *first = NULL; b != NULL; b = b->batch_next) {
		if (b->written) {
			first = first == NULL ? b : first;
			/* the sync's time counts once in the total */
			sync_note(s, b->write_ns + sync_ns,
			    b->write_ns + (b == first ? sync_ns : 0));
		}
	}
	pthread_mutex_lock(&s->c_lock);
	atomic_store(&s->durable, upto);
	pthread_cond_broadcast(&s->d_cv);
	pthread_mutex_unlock(&s->c_lock);
}

static void
batches_complete(sub *list)
{
	sub *next;

	for (; list != NULL; list = next) {
		next = list->batch_next;
		batch_complete(list);
	}
}

/* Hand synced batches, in order, to the completer. */
static void
completer_hand(tli_store *s, sub *list)
{
	sub *last = list;
	size_t n = 1;

	while (last->batch_next != NULL) {
		last = last->batch_next;
		n++;
	}
	pthread_mutex_lock(&s->c_lock);
	s->c_pending -= n;
	batches_append(&s->k_head, &s->k_tail, &s->k_cv, list, last);
	pthread_mutex_unlock(&s->c_lock);
}

/* With a syncer: sync what the writer wrote, hand it to the completer. */
static void *
syncer_main(void *arg)
{
	tli_store *s = arg;
	sub *list;

	t_nowait = true;
	pthread_setname_np(pthread_self(), "tl-sync");
	while ((list = batches_take(s, &s->c_head, &s->c_tail, &s->c_cv,
	            &s->c_stopping)) != NULL) {
		batches_sync(s, list);
		completer_hand(s, list);
	}
	return NULL;
}

static void *
completer_main(void *arg)
{
	tli_store *s = arg;
	sub *list;

	t_nowait = true;
	pthread_setname_np(pthread_self(), "tl-complete");
	if (s->syncer_started) {
		while ((list = batches_take(s, &s->k_head, &s->k_tail, &s->k_cv,
		            &s->k_stopping)) != NULL) {
			batches_complete(list);
		}
		return NULL;
	}
	while ((list = batches_take(s, &s->c_head, &s->c_tail, &s->c_cv,
	            &s->c_stopping)) != NULL) {
		batches_sync(s, list);
		batches_complete(list);
	}
	return NULL;
}

/* After the writer stopped: the syncer syncs and the completer completes
 * what is left. */
static void
completer_stop(tli_store *s)
{
	pthread_mutex_lock(&s->c_lock);
	s->c_stopping = true;
	pthread_cond_signal(&s->c_cv);
	pthread_mutex_unlock(&s->c_lock);
	if (s->syncer_started) {
		pthread_join(s->syncer, NULL);
		s->syncer_started = false;
	}
	pthread_mutex_lock(&s->c_lock);
	s->k_stopping = true;
	pthread_cond_signal(&s->k_cv);
	pthread_mutex_unlock(&s->c_lock);
	if (s->completer_started) {
		pthread_join(s->completer, NULL);
		s->completer_started = false;
	}
}

void
tli_durable_wait(tli_store *s)
{
	uint64_t v;

	if (!s->pipelined || t_nowait || s->opts.sync_mode != TLI_SYNC_ALWAYS) {
		return;
	}
	v = atomic_load(&s->visible);
	if (atomic_load(&s->durable) >= v) {
		return;
	}
	pthread_mutex_lock(&s->c_lock);
	while (atomic_load(&s->durable) < v) {
		pthread_cond_wait(&s->d_cv, &s->c_lock);
	}
	pthread_mutex_unlock(&s->c_lock);
}

/* ---- the writer thread ---- */

/* Whether the writer syncs the batch it wrote itself: when nothing is
 * queued for it and the syncer has nothing (so the log is synced in order).
 * A batch handed to the syncer and then to the completer wakes two threads
 * for one group commit; at a few thousand commits a second, on two cores
 * shared with the consumers, those wake-ups doubled the lateness p99
 * (docs/benchmarks.md, "The writer syncs when it is idle"). With work
 * queued the writer hands the sync on and writes the next batch. Either
 * way the completions run on the completer. */
static bool
writer_may_sync(tli_store *s)
{
	bool idle;

	if (!s->syncer_started) {
		return false;
	}
	pthread_mutex_lock(&s->q_lock);
	idle = s->q_head == NULL;
	pthread_mutex_unlock(&s->q_lock);
	if (!idle) {
		return false;
	}
	pthread_mutex_lock(&s->c_lock);
	if ((idle = s->c_pending == 0)) {
		s->c_pending = 1; /* the writer's own, until completer_hand */
	}
	pthread_mutex_unlock(&s->c_lock);
	return idle;
}

static void *
writer_main(void *arg)
{
	tli_store *s = arg;

	/* measured: ~10% of the writer's CPU */
	tli_store_thread_setup();
	t_nowait = true;
	pthread_setname_np(pthread_self(), "tl-writer");

	for (;;) {
		sub *batch;
		size_t nops;
		int rv;

		pthread_mutex_lock(&s->q_lock);
		while (s->q_head == NULL && !s->stopping) {
			queue_wait(s);
			if (s->q_head == NULL) {
				pthread_mutex_unlock(&s->q_lock);
				if (tli_db_rdlock(s) == TL_OK) {
					interval_sync(s, false);
					writes_try_resume(s);
					tli_db_unlock(s);
				}
				pthread_mutex_lock(&s->q_lock);
			}
		}
		if (s->q_head == NULL) {
			pthread_mutex_unlock(&s->q_lock);
			break;
		}
		batch = queue_take(s, &nops);
		pthread_mutex_unlock(&s->q_lock);
		batch->seq = ++s->c_seq;
		s->batch_write_ns = 0;

		/* Held for the whole batch, replicate included: a restore
		 * waits for it. Not while completing: done may read. */
		if ((rv = tli_db_rdlock(s)) != TL_OK) {
			batch_fail(batch, rv);
		} else {
			switch (batch->kind) {
			case SUB_OPS:
				ops_batch_apply(s, batch, nops);
				break;
			case SUB_TOPIC_CREATE:
			case SUB_TOPIC_DELETE:
				topic_sub_apply(s, batch);
				break;
			}
			interval_sync(s, false);
			tli_db_unlock(s);
		}
		batch->write_ns = s->batch_write_ns;
		batch->written = s->batch_write_ns > 0;
		if (writer_may_sync(s)) {
			batch->batch_next = NULL;
			batches_sync(s, batch);
			completer_hand(s, batch);
		} else {
			completer_push(s, batch);
		}
	}
	if (tli_db_rdlock(s) == TL_OK) {
		interval_sync(s, true);
		tli_db_unlock(s);
	}
	return NULL;
}

static int
queue_push(tli_store *s, sub *sb)
{
	pthread_mutex_lock(&s->q_lock);
	if (s->stopping) {
		pthread_mutex_unlock(&s->q_lock);
		return TL_ECLOSED;
	}
	sb->next = NULL;
	atomic_fetch_add(&s->st_queued_ops, sb->n);
	if (s->q_tail != NULL) {
		s->q_tail->next = sb;
	} else {
		s->q_head = sb;
	}
	s->q_tail = sb;
	pthread_cond_signal(&s->q_cv);
	pthread_mutex_unlock(&s->q_lock);
	return TL_OK;
}

/* ---- submissions ---- */

/* The key of a submission: kept only where answers are. */
static void
sub_key(tli_store *s, sub *sb, const tli_reqkey *key)
{
	if (key != NULL && key->client != 0 && s->opts.replicate != NULL &&
	    s->opts.answers_ms > 0) {
		sb->key = *key;
	}
}

int
tli_store_submit(
    tli_store *s, tli_op *ops, size_t n, tli_store_done_fn done, void *arg)
{
	return tli_store_submit_keyed(s, ops, n, NULL, done, arg);
}

int
tli_store_submit_keyed(tli_store *s, tli_op *ops, size_t n,
    const tli_reqkey *key, tli_store_done_fn done, void *arg)
{
	sub *sb;
	int rv;

	if (s == NULL || done == NULL || (ops == NULL && n > 0)) {
		return TL_EINVAL;
	}
	if (n > TL_MAX_BATCH) {
		return TL_ETOOLARGE;
	}
	if ((sb = tli_zalloc(sizeof(*sb))) == NULL) {
		return TL_ENOMEM;
	}
	sb->kind = SUB_OPS;
	sb->ops = ops;
	sb->n = n;
	sb->done = done;
	sb->arg = arg;
	sb->heap = true;
	sub_key(s, sb, key);
	if ((rv = queue_push(s, sb)) != TL_OK) {
		tli_free(sb);
	}
	return rv;
}

typedef struct waiter {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bool done;
} waiter;

static void
waiter_done(void *arg)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->mtx);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

/* Push a stack submission and wait for the writer to complete it. */
static int
submit_wait(tli_store *s, sub *sb)
{
	waiter w = {.done = false};
	int rv;

	pthread_mutex_init(&w.mtx, NULL);
	pthread_cond_init(&w.cv, NULL);
	sb->done = waiter_done;
	sb->arg = &w;
	if ((rv = queue_push(s, sb)) == TL_OK) {
		pthread_mutex_lock(&w.mtx);
		while (!w.done) {
			pthread_cond_wait(&w.cv, &w.mtx);
		}
		pthread_mutex_unlock(&w.mtx);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mtx);
	return rv;
}

int
tli_store_apply(tli_store *s, tli_op *ops, size_t n)
{
	sub sb = {.kind = SUB_OPS, .ops = ops, .n = n};

	if (s == NULL || (ops == NULL && n > 0)) {
		return TL_EINVAL;
	}
	if (n > TL_MAX_BATCH) {
		return TL_ETOOLARGE;
	}
	return submit_wait(s, &sb);
}

int
tli_store_topic_create(tli_store *s, const tli_topic_conf *c)
{
	return tli_store_topic_create_keyed(s, c, NULL);
}

int
tli_store_topic_create_keyed(
    tli_store *s, const tli_topic_conf *c, const tli_reqkey *key)
{
	sub sb = {.kind = SUB_TOPIC_CREATE};
	int rv;

	if (s == NULL || c == NULL) {
		return TL_EINVAL;
	}
	sub_key(s, &sb, key);
	sb.conf = *c;
	if ((rv = topic_conf_normalise(&sb.conf)) != TL_OK) {
		return rv;
	}
	if ((rv = submit_wait(s, &sb)) != TL_OK) {
		return rv;
	}
	return sb.result;
}

int
tli_store_topic_delete(tli_store *s, const char *name)
{
	return tli_store_topic_delete_keyed(s, name, NULL);
}

int
tli_store_topic_delete_keyed(
    tli_store *s, const char *name, const tli_reqkey *key)
{
	sub sb = {.kind = SUB_TOPIC_DELETE};
	size_t len = name != NULL ? strlen(name) : 0;
	int rv;

	if (s == NULL || len == 0 || len > TL_MAX_NAME_LEN) {
		return len > TL_MAX_NAME_LEN ? TL_ETOOLARGE : TL_ENOTOPIC;
	}
	sub_key(s, &sb, key);
	memcpy(sb.conf.name, name, len);
	if ((rv = submit_wait(s, &sb)) != TL_OK) {
		return rv;
	}
	return sb.result;
}

static void
topic_info_fill(tli_topic_info *out, const topic_rt *t)
{
	out->conf = t->conf;
	out->topic_id = t->id;
	out->created_at = t->created_at;
	out->messages = atomic_load(&t->messages);
	out->locked = atomic_load(&t->locked);
	out->dead = atomic_load(&t->dead);
}

int
tli_store_topic_get(tli_store *s, const char *name, tli_topic_info *out)
{
	topic_rt *t;
	int rv = TL_ENOTOPIC;

	pthread_rwlock_rdlock(&s->topics_lock);
	if ((t = tli_topic_find(s, name)) != NULL) {
		topic_info_fill(out, t);
		rv = TL_OK;
	}
	pthread_rwlock_unlock(&s->topics_lock);
	tli_durable_wait(s);
	return rv;
}

int
tli_store_topic_list(tli_store *s, tli_topic_info **out, size_t *n)
{
	tli_topic_info *v;

	pthread_rwlock_rdlock(&s->topics_lock);
	v = tli_alloc(sizeof(*v) * (s->ntopics + 1));
	if (v == NULL) {
		pthread_rwlock_unlock(&s->topics_lock);
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < s->ntopics; i++) {
		topic_info_fill(&v[i], s->topics[i]);
	}
	*n = s->ntopics;
	pthread_rwlock_unlock(&s->topics_lock);
	tli_durable_wait(s);
	*out = v;
	return TL_OK;
}

static uint64_t
rdb_int(tli_store *s, int cf, const char *prop)
{
	uint64_t v = 0;

	if (cf < 0) {
		return rocksdb_property_int(s->db, prop, &v) == 0 ? v : 0;
	}
	return rocksdb_property_int_cf(s->db, s->cf[cf], prop, &v) == 0 ? v : 0;
}

/* A property RocksDB gives only as text (num-files-at-level<N>). */
static uint64_t
rdb_str_int(tli_store *s, int cf, const char *prop)
{
	char *v = rocksdb_property_value_cf(s->db, s->cf[cf], prop);
	uint64_t n = v != NULL ? strtoull(v, NULL, 10) : 0;

	rocksdb_free(v);
	return n;
}

/* RocksDB's flush, compaction and stall state, read now. */
static void
rdb_state(tli_store *s, tli_store_stats *out)
{
	out->write_stopped = rdb_int(s, -1, "rocksdb.is-write-stopped");
	out->delayed_write_rate =
	    rdb_int(s, -1, "rocksdb.actual-delayed-write-rate");
	out->running_flushes = rdb_int(s, -1, "rocksdb.num-running-flushes");
	out->running_compactions =
	    rdb_int(s, -1, "rocksdb.num-running-compactions");
	out->imm_memtables = out->l0_files = out->pending_compaction_bytes = 0;
	out->mem_memtables = out->mem_table_readers = 0;
	/* one cache for every column family */
	out->mem_block_cache = rdb_int(s, 0, "rocksdb.block-cache-usage");
	out->block_cache_capacity =
	    rdb_int(s, 0, "rocksdb.block-cache-capacity");
	for (int i = 0; i < CF_COUNT; i++) {
		out->mem_memtables +=
		    rdb_int(s, i, "rocksdb.cur-size-all-mem-tables");
		out->mem_table_readers +=
		    rdb_int(s, i, "rocksdb.estimate-table-readers-mem");
		out->imm_memtables +=
		    rdb_int(s, i, "rocksdb.num-immutable-mem-table");
		out->l0_files +=
		    rdb_str_int(s, i, "rocksdb.num-files-at-level0");
		out->pending_compaction_bytes +=
		    rdb_int(s, i, "rocksdb.estimate-pending-compaction-bytes");
	}
}

void
tli_store_get_stats(tli_store *s, tli_store_stats *out)
{
	out->batches = atomic_load(&s->st_batches);
	out->ops = atomic_load(&s->st_ops);
	out->sync_ns_total = atomic_load(&s->st_sync_ns);
	out->max_batch = atomic_load(&s->st_max_batch);
	out->keys_written = atomic_load(&s->st_keys_written);
	out->keys_merged = atomic_load(&s->st_stage_merged);
	out->records_cached = atomic_load(&s->st_rec_cached);
	out->records_read = atomic_load(&s->st_rec_reads);
	out->answers_kept = atomic_load(&s->st_ans_kept);
	out->answers_replayed = atomic_load(&s->st_ans_replayed);
	out->answers_expired = atomic_load(&s->st_ans_expired);
	for (int i = 0; i <= TLI_SYNC_BUCKETS; i++) {
		out->sync_hist[i] = atomic_load(&s->st_sync_hist[i]);
	}
	out->queued_ops = atomic_load(&s->st_queued_ops);
	if (tli_db_rdlock(s) == TL_OK) {
		rdb_state(s, out);
		tli_db_unlock(s);
	} else {
		out->write_stopped = out->delayed_write_rate = 0;
		out->running_flushes = out->running_compactions = 0;
		out->imm_memtables = out->l0_files = 0;
		out->pending_compaction_bytes = 0;
	}
}

/* ---- open / close ---- */

static void
topics_free(topic_rt **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		tli_free(v[i]);
	}
	tli_free(v);
}

/* Close the RocksDB handles (the options stay for a reopen). */
static void
db_close(tli_store *s)
{
	for (int i = 0; i < CF_COUNT; i++) {
		if (s->cf[i] != NULL) {
			rocksdb_column_family_handle_destroy(s->cf[i]);
			s->cf[i] = NULL;
		}
	}
	if (s->db != NULL) {
		rocksdb_close(s->db);
		s->db = NULL;
	}
}

/* Every column family's memtables to tables, waiting for it. */
static void
flush_all(tli_store *s, char **err)
{
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();

	rocksdb_flushoptions_set_wait(fo, 1);
	for (int i = 0; i < CF_COUNT && *err == NULL; i++) {
		rocksdb_flush_cf(s->db, fo, s->cf[i], err);
	}
	rocksdb_flushoptions_destroy(fo);
}

static void
store_free(tli_store *s)
{
	topics_free(s->topics, s->ntopics);
	if (s->ov != NULL) {
		tli_overlay_free(s->ov);
	}
	tli_owner_deltas_free(s->owners);
	if (s->wb != NULL) {
		rocksdb_writebatch_destroy(s->wb);
	}
	tli_free(s->stg.e);
	tli_free(s->stg.sk);
	tli_free(s->stg.arena);
	tli_free(s->entry);
	db_close(s);
	for (int i = 0; i < CF_COUNT; i++) {
		if (s->cfopts[i] != NULL) {
			rocksdb_options_destroy(s->cfopts[i]);
		}
		if (s->bbto[i] != NULL) {
			rocksdb_block_based_options_destroy(s->bbto[i]);
		}
	}
	if (s->dbopts != NULL) {
		rocksdb_options_destroy(s->dbopts);
	}
	if (s->cache != NULL) {
		rocksdb_cache_destroy(s->cache);
	}
	if (s->wopts != NULL) {
		rocksdb_writeoptions_destroy(s->wopts);
	}
	if (s->apply_wopts != NULL) {
		rocksdb_writeoptions_destroy(s->apply_wopts);
	}
	if (s->ropts != NULL) {
		rocksdb_readoptions_destroy(s->ropts);
	}
	pthread_rwlock_destroy(&s->topics_lock);
	pthread_rwlock_destroy(&s->db_lock);
	pthread_mutex_destroy(&s->apply_lock);
	pthread_mutex_destroy(&s->q_lock);
	pthread_cond_destroy(&s->q_cv);
	pthread_mutex_destroy(&s->c_lock);
	if (s->wal_fd >= 0) {
		close(s->wal_fd);
	}
	pthread_cond_destroy(&s->c_cv);
	pthread_cond_destroy(&s->k_cv);
	pthread_cond_destroy(&s->d_cv);
	pthread_mutex_destroy(&s->err_lock);
	tli_free(s->path);
	tli_free(s);
}

static void
options_setup(tli_store *s)
{
	s->dbopts = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(s->dbopts, 1);
	rocksdb_options_set_create_missing_column_families(s->dbopts, 1);
	/* One flush and up to three compactions at once. With one
	 * compaction, a merge of the due-time index's large sorted runs
	 * (minutes at 100M messages) kept every other column family's
	 * level-0 files waiting until RocksDB stopped writes (the stop
	 * trigger), for over 10 s; another thread takes those meanwhile.
	 * docs/benchmarks.md, "A backlog of 100 million". */
	rocksdb_options_increase_parallelism(s->dbopts, 4);
	rocksdb_options_set_max_background_jobs(s->dbopts, 4);
	rocksdb_options_set_keep_log_file_num(s->dbopts, 4);
	/* A full disk: the writer resumes RocksDB itself (store.h). */
	tli_rdb_manual_resume(s->dbopts);
	/* Bound the write-ahead log: past this RocksDB flushes the column
	 * families holding the oldest log, so a restart replays at most this
	 * much (measured: 1.7 GB of log and 3.6 s of replay after 5M creates
	 * without it). */
	rocksdb_options_set_max_total_wal_size(s->dbopts, 256u << 20);
	/* A slowdown whose first step keeps a fill going (rdb_resume.cc). */
	tli_rdb_delayed_write_rate(s->dbopts, 32u << 20);
	/* Flushes and compactions write at most this much per second, in
	 * 100 ms portions (the log's writes are never limited): unlimited,
	 * after a large fill they wrote 100-250 MB/s here and the log's
	 * fsync, which every acknowledgement waits for, took up to 100-250
	 * ms meanwhile (docs/benchmarks.md, "Disk work behind the
	 * acknowledgements"). The options hold the limiter (a shared
	 * pointer); the handle goes at once. */
	if (s->opts.background_bytes_per_s > 0) {
		rocksdb_ratelimiter_t *rl = rocksdb_ratelimiter_create(
		    (int64_t) s->opts.background_bytes_per_s, 100000, 10);

		rocksdb_options_set_ratelimiter(s->dbopts, rl);
		rocksdb_ratelimiter_destroy(rl);
	}
	/* RocksDB's own LOG file: with the Debian build, a logger whose file
	 * hit a write error aborts the process (an assertion) on its next
	 * line, and on a full disk RocksDB logs the error it is handling.
	 * Only fatal lines and the header go to LOG; our own log says the
	 * rest (tli_store_last_error). */
	rocksdb_options_set_info_log_level(s->dbopts, 4 /* FATAL */);
	s->cache = rocksdb_cache_create_lru(s->opts.cache_bytes);
	for (int i = 0; i < CF_COUNT; i++) {
		s->cfopts[i] = rocksdb_options_create_copy(s->dbopts);
		s->bbto[i] = rocksdb_block_based_options_create();
		rocksdb_block_based_options_set_block_cache(
		    s->bbto[i], s->cache);
		rocksdb_block_based_options_set_cache_index_and_filter_blocks(
		    s->bbto[i], 1);
		if (i == CF_MSG) {
			/* Point lookups (does this id exist?) dominate: bloom
			 * filters on disk and in the memtable. The policy is
			 * owned by the table options from here. */
			rocksdb_block_based_options_set_filter_policy(
			    s->bbto[i],
			    rocksdb_filterpolicy_create_bloom_full(10));
			rocksdb_options_set_memtable_prefix_bloom_size_ratio(
			    s->cfopts[i], 0.1);
			rocksdb_options_set_memtable_whole_key_filtering(
			    s->cfopts[i], 1);
			/* Small memtables: an insert or lookup walks a
			 * skiplist whose nodes are cache misses; fewer
			 * entries, fewer levels. Measured with the lease
			 * cycle and durable creates: 16 MiB here and 4 MiB
			 * for the indexes cost the writer thread 10-20% less
			 * CPU than 64 / 16 MiB (the flushes, on background
			 * threads, cost a little more). docs/bench-broker.md */
			rocksdb_options_set_write_buffer_size(
			    s->cfopts[i], 16u << 20);
		} else if (i != CF_DEFAULT) {
			rocksdb_options_set_write_buffer_size(
			    s->cfopts[i], 4u << 20);
			/* Index keys barely compress; spare the flushes the
			 * CPU (the writer needs it). */
			rocksdb_options_set_compression(
			    s->cfopts[i], rocksdb_no_compression);
		}
		if (i == CF_MSG) {
			rocksdb_options_set_compression(
			    s->cfopts[i], rocksdb_lz4_compression);
		}
		if (i == CF_TL || i == CF_OWN) {
			/* The due-time and owner indexes take their keys in
			 * the order of the due times, not of the writes:
			 * leveled compaction rewrote them at every level and
			 * a fill slowed to what the compactions left (30M
			 * messages an hour ahead: 74k msg/s, a 5 s low of
			 * 16k); universal compaction rewrites each key fewer
			 * times (both indexes: 109k, 52k). docs/benchmarks.md,
			 * "A backlog of 100 million". A store written with
			 * leveled compaction opens as it is: its levels are
			 * sorted runs. */
			rocksdb_options_set_compaction_style(
			    s->cfopts[i], rocksdb_universal_compaction);
		}
		if (i != CF_DEFAULT) {
			/* Each insert starts from where the topic's last one
			 * went (storage/rdb_resume.cc). */
			tli_rdb_insert_hints(s->cfopts[i]);
		}
		rocksdb_options_set_block_based_table_factory(
		    s->cfopts[i], s->bbto[i]);
	}
	s->wopts = rocksdb_writeoptions_create();
	/* With a completer, it syncs the log after the write. */
	rocksdb_writeoptions_set_sync(
	    s->wopts, s->opts.sync_mode == TLI_SYNC_ALWAYS && !s->pipelined);
	s->ropts = rocksdb_readoptions_create();
	s->apply_wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(s->apply_wopts, 0);
}

static int
meta_get_u32(tli_store *s, char key, uint32_t *out, bool *found)
{
	uint8_t v[4];
	int rv = tli_rdb_get_fixed(s, &key, 1, v, sizeof(v), found);

	if (*found) {
		*out = tli_get_be32(v);
	}
	return rv;
}

static int
format_check(tli_store *s)
{
	uint32_t fmt = 0, next = 0;
	bool has_fmt, has_next;
	char *err = NULL;
	uint8_t v[4];
	int rv;

	if ((rv = meta_get_u32(s, 'F', &fmt, &has_fmt)) != TL_OK ||
	    (rv = meta_get_u32(s, 'N', &next, &has_next)) != TL_OK) {
		return rv;
	}
	if (has_fmt) {
		if (!has_next ||
		    (fmt != TLI_STORE_FORMAT && fmt != TLI_STORE_FORMAT_1 &&
		        fmt != TLI_STORE_FORMAT_2)) {
			return TL_EFORMAT;
		}
		s->next_topic_id = next;
		if (fmt == TLI_STORE_FORMAT_1) {
			return tli_owner_migrate(s);
		}
		if (fmt == TLI_STORE_FORMAT_2) {
			/* Its records read as records without a recurrence. */
			tli_put_be32(v, TLI_STORE_FORMAT);
			rocksdb_put_cf(s->db, s->wopts, s->cf[CF_DEFAULT], "F",
			    1, (char *) v, 4, &err);
			return tli_rdb_err(s, err);
		}
		return TL_OK;
	}
	if (has_next) {
		return TL_EFORMAT;
	}
	/* A new database. */
	rocksdb_writebatch_clear(s->wb);
	tli_put_be32(v, TLI_STORE_FORMAT);
	rocksdb_writebatch_put_cf(
	    s->wb, s->cf[CF_DEFAULT], "F", 1, (char *) v, 4);
	tli_put_be32(v, 1);
	rocksdb_writebatch_put_cf(
	    s->wb, s->cf[CF_DEFAULT], "N", 1, (char *) v, 4);
	s->next_topic_id = 1;
	rocksdb_write(s->db, s->wopts, s->wb, &err);
	return tli_rdb_err(s, err);
}

static int
topics_load(tli_store *s)
{
	rocksdb_readoptions_t *ro = NULL;
	rocksdb_iterator_t *it = tli_iter(
	    s, CF_DEFAULT, (uint8_t *) "T", 1, (uint8_t *) "U", 1, &ro);
	char *err = NULL;
	int rv = TL_OK;

	for (; rv == TL_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl, cl = 0;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		uint8_t ck[5];
		char *cv;
		topic_rt *t;

		if (kl < 2 || kl > 1 + TL_MAX_NAME_LEN ||
		    (t = tli_zalloc(sizeof(*t))) == NULL) {
			rv = kl < 2 || kl > 1 + TL_MAX_NAME_LEN ? TL_ECORRUPT
			                                        : TL_ENOMEM;
			break;
		}
		memcpy(t->conf.name, k + 1, kl - 1);
		rv = tli_topic_decode(t, (const uint8_t *) v, vl);
		if (rv == TL_OK) {
			cv = rocksdb_get_cf(s->db, s->ropts, s->cf[CF_DEFAULT],
			    (char *) ck, tli_key_meta_counters(ck, t->id), &cl,
			    &err);
			if (err != NULL) {
				rv = tli_rdb_err(s, err);
			} else if (cv == NULL || cl != COUNTERS_LEN) {
				rv = TL_ECORRUPT;
			} else {
				atomic_store(
				    &t->messages, tli_get_be64((uint8_t *) cv));
				atomic_store(&t->locked,
				    tli_get_be64((uint8_t *) cv + 8));
				atomic_store(&t->dead,
				    tli_get_be64((uint8_t *) cv + 16));
			}
			rocksdb_free(cv);
		}
		if (rv == TL_OK) {
			rv = topic_insert(s, t);
		}
		if (rv != TL_OK) {
			tli_free(t);
		}
	}
	rocksdb_iter_get_error(it, &err);
	if (rv == TL_OK && err != NULL) {
		rv = tli_rdb_err(s, err);
	} else if (err != NULL) {
		rocksdb_free(err);
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	return rv;
}

/* RocksDB's compaction threads (its LOW pool, one for the process; RocksDB
 * names them rocksdb:low) `more` nice levels above the calling thread,
 * where Linux keeps a nice value per thread. A thread already as nice or
 * nicer is left as it is. The pool's threads exist once a database with
 * its background jobs has opened. */
static void
compactions_nicer(int more)
{
	DIR *d;
	struct dirent *e;
	int target;

	if (more <= 0 || (d = opendir("/proc/self/task")) == NULL) {
		return;
	}
	errno = 0;
	target = getpriority(PRIO_PROCESS, 0);
	target = errno != 0 ? more : target + more;
	target = target > 19 ? 19 : target;
	while ((e = readdir(d)) != NULL) {
		char path[64], comm[32];
		ssize_t n;
		int fd, cur;
		long tid = strtol(e->d_name, NULL, 10);

		if (tid <= 0) {
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", tid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			continue;
		}
		n = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		if (n < 11 || strncmp(comm, "rocksdb:low", 11) != 0) {
			continue;
		}
		errno = 0;
		cur = getpriority(PRIO_PROCESS, (id_t) tid);
		if (errno == 0 && cur < target) {
			(void) setpriority(PRIO_PROCESS, (id_t) tid, target);
		}
	}
	closedir(d);
}

/* Open RocksDB at s->path with the store's options: the column families,
 * the format check, the applied index. */
static int
db_open(tli_store *s)
{
	const rocksdb_options_t *cfo[CF_COUNT];
	char *err = NULL;
	uint8_t v[8];
	bool found;
	int rv;

	for (int i = 0; i < CF_COUNT; i++) {
		cfo[i] = s->cfopts[i];
	}
	s->db = rocksdb_open_column_families(
	    s->dbopts, s->path, CF_COUNT, cf_names, cfo, s->cf, &err);
	if (err != NULL) {
		s->db = NULL;
		return tli_rdb_err(s, err);
	}
	for (int i = 0; i < CF_COUNT; i++) {
		s->cf_ids[i] = rocksdb_column_family_handle_get_id(s->cf[i]);
	}
	if ((rv = format_check(s)) != TL_OK ||
	    (rv = tli_rdb_get_fixed(s, "A", 1, v, sizeof(v), &found)) !=
	        TL_OK) {
		return rv;
	}
	atomic_store(&s->applied, found ? tli_get_be64(v) : 0);
	compactions_nicer(s->opts.compaction_nice);
	return TL_OK;
}

int
tli_store_open(tli_store **out, const tli_store_opts *o)
{
	tli_store *s;
	int rv;

	if (out == NULL || o == NULL || o->path == NULL || o->path[0] == '\0') {
		return TL_EINVAL;
	}
	if ((s = tli_zalloc(sizeof(*s))) == NULL) {
		return TL_ENOMEM;
	}
	pthread_rwlock_init(&s->topics_lock, NULL);
	{
		/* A restore waiting for the lock holds new readers back, so
		 * a stream of reads cannot starve it. Nobody takes it twice. */
		pthread_rwlockattr_t ra;
		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(
		    &ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&s->db_lock, &ra);
		pthread_rwlockattr_destroy(&ra);
	}
	pthread_mutex_init(&s->apply_lock, NULL);
	pthread_mutex_init(&s->q_lock, NULL);
	pthread_mutex_init(&s->c_lock, NULL);
	s->wal_fd = -1;
	pthread_cond_init(&s->c_cv, NULL);
	pthread_cond_init(&s->k_cv, NULL);
	pthread_cond_init(&s->d_cv, NULL);
	{
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->q_cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_mutex_init(&s->err_lock, NULL);
	s->opts = *o;
	if (s->opts.max_batch_ops == 0 ||
	    s->opts.max_batch_ops > TL_MAX_BATCH) {
		s->opts.max_batch_ops = TL_MAX_BATCH;
	}
	if (s->opts.sync_interval_ms <= 0) {
		s->opts.sync_interval_ms = 100;
	}
	if (s->opts.cache_bytes == 0) {
		s->opts.cache_bytes = 32u << 20;
	}
	if (s->opts.min_lease_gap_ms < 0) {
		s->opts.min_lease_gap_ms = 0;
	}
	if ((s->path = tli_strndup(o->path, strlen(o->path))) == NULL ||
	    (s->wb = rocksdb_writebatch_create()) == NULL ||
	    (s->ov = tli_overlay_new()) == NULL ||
	    (s->owners = tli_owner_deltas_new()) == NULL) {
		rv = TL_ENOMEM;
		goto fail;
	}
	/* Generations start at the monotonic clock: a read hint from before
	 * a reopen is older than anything this instance trusts. */
	atomic_store(&s->commit_gen, (uint64_t) tli_mono_ns());
	tli_overlay_forget(s->ov, atomic_load(&s->commit_gen));
	s->opts.path = s->path;
	s->pipelined = s->opts.replicate == NULL;
	options_setup(s);
	if ((rv = db_open(s)) != TL_OK || (rv = topics_load(s)) != TL_OK) {
		goto fail;
	}
	s->last_sync_ms = tli_mono_ms();
	/* The syncer starts first: the completer looks at syncer_started. */
	if (s->pipelined && s->opts.sync_mode == TLI_SYNC_ALWAYS) {
		if (pthread_create(&s->syncer, NULL, syncer_main, s) != 0) {
			rv = TL_ENOMEM;
			goto fail;
		}
		s->syncer_started = true;
	}
	if (pthread_create(&s->completer, NULL, completer_main, s) != 0) {
		rv = TL_ENOMEM;
		goto fail;
	}
	s->completer_started = true;
	if (pthread_create(&s->writer, NULL, writer_main, s) != 0) {
		rv = TL_ENOMEM;
		goto fail;
	}
	s->writer_started = true;
	*out = s;
	return TL_OK;
fail:
	completer_stop(s);
	store_free(s);
	return rv;
}

void
tli_store_close(tli_store *s)
{
	char *err = NULL;

	if (s == NULL) {
		return;
	}
	pthread_mutex_lock(&s->q_lock);
	s->stopping = true;
	pthread_cond_signal(&s->q_cv);
	pthread_mutex_unlock(&s->q_lock);
	if (s->writer_started) {
		pthread_join(s->writer, NULL);
	}
	completer_stop(s);
	/* The memtables go to tables now, so the next open has no log to
	 * replay: a planned restart (an upgrade, a configuration change)
	 * with a large backlog then takes as long as one with none. After
	 * a crash the log is replayed as always. A failure (a full disk)
	 * loses nothing: the log still holds it all. */
	if (!s->need_resume && tli_db_rdlock(s) == TL_OK) {
		flush_all(s, &err);
		tli_db_unlock(s);
		if (err != NULL) {
			(void) tli_rdb_err(s, err);
		}
	}
	store_free(s);
}

/* ---- replication (store.h) ---- */

int
tli_db_rdlock(tli_store *s)
{
	pthread_rwlock_rdlock(&s->db_lock);
	if (s->db == NULL) {
		pthread_rwlock_unlock(&s->db_lock);
		return TL_ESTORAGE;
	}
	return TL_OK;
}

void
tli_db_unlock(tli_store *s)
{
	pthread_rwlock_unlock(&s->db_lock);
}

/* A failure of the store's own (not RocksDB's) as the last error. */
int
tli_store_err(tli_store *s, int rv, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->err_lock);
	va_start(ap, fmt);
	vsnprintf(s->last_err, sizeof(s->last_err), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&s->err_lock);
	return rv;
}

/* Take db_lock for writing (reload, restore: the writer must be idle).
 * A writer inside replicate holds the read lock and may be waiting for
 * the very thread that calls this (a Raft node's): that is refused with
 * TL_EBUSY instead of waiting for ever. */
#define WRLOCK_SLICE_MS 20

static int
db_wrlock(tli_store *s)
{
	for (;;) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += WRLOCK_SLICE_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_rwlock_timedwrlock(&s->db_lock, &ts) == 0) {
			return TL_OK;
		}
		if (atomic_load(&s->in_replicate)) {
			return tli_store_err(s, TL_EBUSY,
			    "the writer is replicating a batch (it must be "
			    "idle)");
		}
	}
}

/* With db_lock held for writing: the topic registry and the next topic id
 * from RocksDB, every cached record and read hint forgotten. */
static int
registry_reload(tli_store *s)
{
	topic_rt **old = s->topics;
	size_t nold = s->ntopics;
	uint32_t next = 0;
	bool found;
	uint64_t gen;
	int rv;

	gen = atomic_load(&s->commit_gen) + 1;
	tli_overlay_forget(s->ov, gen);
	atomic_store(&s->commit_gen, gen);
	if ((rv = meta_get_u32(s, 'N', &next, &found)) != TL_OK) {
		return rv;
	}
	if (!found) {
		return tli_store_err(
		    s, TL_ECORRUPT, "reload: no next topic id");
	}
	pthread_rwlock_wrlock(&s->topics_lock);
	s->topics = NULL;
	s->ntopics = 0;
	if ((rv = topics_load(s)) != TL_OK) {
		topics_free(s->topics, s->ntopics);
		s->topics = old;
		s->ntopics = nold;
	} else {
		topics_free(old, nold);
		s->next_topic_id = next;
	}
	pthread_rwlock_unlock(&s->topics_lock);
	return rv;
}

int
tli_store_reload(tli_store *s)
{
	int rv;

	if (s == NULL) {
		return TL_EINVAL;
	}
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = db_wrlock(s)) == TL_OK) {
		rv = s->db != NULL ? registry_reload(s) : TL_ESTORAGE;
		tli_answers_forget(s); /* other leaders wrote answers since */
		pthread_rwlock_unlock(&s->db_lock);
	}
	pthread_mutex_unlock(&s->apply_lock);
	return rv;
}

uint64_t
tli_store_applied_index(tli_store *s)
{
	return atomic_load(&s->applied);
}

/* The batch of an ordinary entry: its serialized WriteBatch, checked. */
struct entry_rep {
	const char *rep;
	size_t len;
};

static int
build_entry(tli_store *s, void *arg, rocksdb_writebatch_t **wb)
{
	struct entry_rep *e = arg;
	char *err = NULL;

	if (tli_rdb_batch_check(e->rep, e->len, s->cf_ids, CF_COUNT, &err) !=
	    0) {
		return tli_rdb_err(s, err);
	}
	*wb = rocksdb_writebatch_create_from(e->rep, e->len);
	return TL_OK;
}

int
tli_store_apply_entry(
    tli_store *s, uint64_t index, const void *entry, size_t len)
{
	const uint8_t *p = entry;
	struct entry_rep e;

	if (s == NULL || (p == NULL && len > 0)) {
		return TL_EINVAL;
	}
	if (len < TLI_REPL_HEADER || p[0] != TLI_REPL_VERSION ||
	    p[1] < TLI_REPL_OPS || p[1] > TLI_REPL_TOPIC_DELETE ||
	    p[2] != TLI_STORE_FORMAT || p[3] != 0) {
		return tli_store_err(s, TL_ECORRUPT,
		    "replicated entry %llu: unknown header",
		    (unsigned long long) index);
	}
	e.rep = (const char *) p + TLI_REPL_HEADER;
	e.len = len - TLI_REPL_HEADER;
	return tli_store_apply_with(s, index, build_entry, &e);
}

int
tli_store_apply_with(tli_store *s, uint64_t index,
    int (*build)(tli_store *s, void *arg, rocksdb_writebatch_t **wb), void *arg)
{
	rocksdb_writebatch_t *wb = NULL;
	int rv;

	pthread_mutex_lock(&s->apply_lock);
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		pthread_mutex_unlock(&s->apply_lock);
		return rv;
	}
	if (index > atomic_load(&s->applied) &&
	    (rv = build(s, arg, &wb)) == TL_OK) {
		rv = tli_store_write_applied(s, wb, index);
	}
	tli_db_unlock(s);
	pthread_mutex_unlock(&s->apply_lock);
	return rv;
}

int
tli_store_write_applied(tli_store *s, rocksdb_writebatch_t *wb, uint64_t index)
{
	uint8_t v[8];
	char *err = NULL;
	int rv;

	tli_put_be64(v, index);
	rocksdb_writebatch_put_cf(
	    wb, s->cf[CF_DEFAULT], "A", 1, (const char *) v, sizeof(v));
	rocksdb_write(s->db, s->apply_wopts, wb, &err);
	rocksdb_writebatch_destroy(wb);
	if ((rv = tli_rdb_err(s, err)) == TL_OK) {
		atomic_store(&s->applied, index);
	}
	return rv;
}

int
tli_store_checkpoint(tli_store *s, const char *dir, uint64_t *index)
{
	rocksdb_checkpoint_t *cp;
	char *err = NULL;
	int rv;

	if (s == NULL || dir == NULL || dir[0] == '\0' || index == NULL) {
		return TL_EINVAL;
	}
	/* The memtables are flushed first, without the apply lock: the
	 * checkpoint below then flushes only what was applied meanwhile, so
	 * appliers wait for hard links and a small flush, not a full one. */
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		return rv;
	}
	flush_all(s, &err);
	tli_db_unlock(s);
	if ((rv = tli_rdb_err(s, err)) != TL_OK) {
		return rv;
	}
	/* apply_lock: no entry lands between the checkpoint and the index
	 * read next to it. */
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		pthread_mutex_unlock(&s->apply_lock);
		return rv;
	}
	rocksdb_flush_wal(s->db, 1, &err);
	if ((rv = tli_rdb_err(s, err)) == TL_OK) {
		cp = rocksdb_checkpoint_object_create(s->db, &err);
		if ((rv = tli_rdb_err(s, err)) == TL_OK) {
			/* 0: flush the memtables first, so the checkpoint's
			 * tables hold everything (no log to replay). */
			rocksdb_checkpoint_create(cp, dir, 0, &err);
			rv = tli_rdb_err(s, err);
			rocksdb_checkpoint_object_destroy(cp);
		}
	}
	if (rv == TL_OK) {
		*index = atomic_load(&s->applied);
	}
	tli_db_unlock(s);
	pthread_mutex_unlock(&s->apply_lock);
	return rv;
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) st;
	(void) flag;
	(void) ftw;
	return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* rm -rf path; true when nothing is left. */
static bool
rmtree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0) {
		return errno == ENOENT;
	}
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

int
tli_store_restore(tli_store *s, const char *dir)
{
	struct stat st;
	size_t plen;
	char *old;
	int rv;

	if (s == NULL || dir == NULL || dir[0] == '\0') {
		return TL_EINVAL;
	}
	/* Not a database: RocksDB would create an empty one in its place. */
	plen = strlen(dir);
	if ((old = tli_alloc(plen + sizeof("/CURRENT"))) == NULL) {
		return TL_ENOMEM;
	}
	memcpy(old, dir, plen);
	memcpy(old + plen, "/CURRENT", sizeof("/CURRENT"));
	rv = stat(old, &st) == 0 ? TL_OK : errno;
	tli_free(old);
	if (rv != TL_OK) {
		return tli_store_err(s, TL_ESTORAGE,
		    "restore: %s: no database: %s", dir, strerror(rv));
	}
	plen = strlen(s->path);
	if ((old = tli_alloc(plen + sizeof(".old"))) == NULL) {
		return TL_ENOMEM;
	}
	memcpy(old, s->path, plen);
	memcpy(old + plen, ".old", sizeof(".old"));
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = db_wrlock(s)) != TL_OK) {
		pthread_mutex_unlock(&s->apply_lock);
		tli_free(old);
		return rv;
	}
	db_close(s);
	if (!rmtree(old)) { /* left by an interrupted restore */
		rv = tli_store_err(s, TL_ESTORAGE, "restore: removing %s: %s",
		    old, strerror(errno));
	} else if (rename(s->path, old) != 0) {
		rv = tli_store_err(s, TL_ESTORAGE,
		    "restore: moving %s aside: %s", s->path, strerror(errno));
	} else if (rename(dir, s->path) != 0) {
		rv = tli_store_err(s, TL_ESTORAGE,
		    "restore: moving %s to %s: %s", dir, s->path,
		    strerror(errno));
		(void) rename(old, s->path);
	} else if ((rv = db_open(s)) != TL_OK) {
		/* The checkpoint back where it was, the old database in
		 * place again (the error text stays the first one's). */
		db_close(s);
		(void) rename(s->path, dir);
		(void) rename(old, s->path);
	}
	if (rv == TL_OK) {
		(void) rmtree(old);
	} else if (s->db == NULL) {
		char keep[sizeof(s->last_err)];
		pthread_mutex_lock(&s->err_lock);
		memcpy(keep, s->last_err, sizeof(keep));
		pthread_mutex_unlock(&s->err_lock);
		/* Not where it was (a rename back failed): not a new empty
		 * database in its place either. */
		if (lstat(s->path, &st) != 0 || db_open(s) != TL_OK) {
			/* Closed for good: every call answers TL_ESTORAGE. */
			db_close(s);
		} else {
			pthread_mutex_lock(&s->err_lock);
			memcpy(s->last_err, keep, sizeof(keep));
			pthread_mutex_unlock(&s->err_lock);
		}
	}
	if (s->db != NULL) {
		int rv2 = registry_reload(s);
		rv = rv == TL_OK ? rv2 : rv;
	}
	pthread_rwlock_unlock(&s->db_lock);
	pthread_mutex_unlock(&s->apply_lock);
	tli_free(old);
	return rv;
}
