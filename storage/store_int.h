/*
 * Internals of the timeline store shared between its files: the store
 * object, the in-memory topic registry, the key and record codecs and the
 * RocksDB error translation. Nothing outside storage/ includes this.
 *
 * Lock order: apply_lock, then db_lock, then topics_lock, then q_lock. The
 * writer thread is the only one that changes topics or counters (besides
 * tli_store_reload and tli_store_restore, which run while it is idle);
 * readers copy what they need under the read lock. db_lock guards the
 * RocksDB handles themselves: every public read and the writer, while it
 * handles a batch, hold it for reading; tli_store_reload and
 * tli_store_restore hold it for writing.
 */
#ifndef TL_STORAGE_STORE_INT_H
#define TL_STORAGE_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <rocksdb/c.h>

#include "htab.h"
#include "store.h"

/* Format 1 lacked the per-owner counts; it is migrated at open. Format 2
 * lacked recurrences; its records are read as they are (none), so its
 * migration only writes the new format number. */
#define TLI_STORE_FORMAT_1 1
#define TLI_STORE_FORMAT_2 2

enum { CF_DEFAULT, CF_MSG, CF_TL, CF_CONS, CF_OWN, CF_COUNT };

/* Key sizes: topic(4) + tag(1) + id, and the largest index key. */
#define KEY_MAX (4 + 4 + 8 + 1 + TL_MAX_NAME_LEN + TL_MAX_ID_LEN + 8)
/* Bodies up to INLINE_MAX bytes live inside the record (one key fewer per
 * create); larger ones under their own key, written once. */
#define INLINE_MAX 256
#define REC_MAX                                                        \
	(2 + 8 * 4 + 4 * 3 + 2 + REC_RECUR_LEN + TL_MAX_NAME_LEN * 2 + \
	    INLINE_MAX)
/* every(8) start(8) seq(4) last(4), with REC_RECUR */
#define REC_RECUR_LEN 24

typedef struct topic_rt {
	tli_topic_conf conf;
	uint32_t id;
	int64_t created_at;
	_Atomic uint64_t messages; /* committed counters */
	_Atomic uint64_t locked;
	_Atomic uint64_t dead;
	int64_t pend_messages; /* writer thread only: this batch's deltas */
	int64_t pend_locked;
	int64_t pend_dead;
	bool pend_dirty;
} topic_rt;

#define REC_DEAD 0x01    /* rec.flags: in the dead-letter list */
#define REC_INLINE 0x02  /* rec.flags: the body is in the record */
#define REC_RECUR 0x04   /* rec.flags: a recurrence (every, start, seq, last) */
#define REC_CATCHUP 0x08 /* rec.flags: with REC_RECUR, deliver missed ones */
/* rec.flags: with REC_RECUR, released or kicked off the grid: sched is not
 * the occurrence's grid time (the next occurrence is on it again). */
#define REC_OFFGRID 0x10

/* A decoded message record. A small body travels inside it (REC_INLINE,
 * up to INLINE_MAX bytes); a larger one lives under its own key. */
typedef struct rec {
	uint8_t flags;
	int64_t ts;
	int64_t sched; /* where the producer placed it: the owner index key */
	uint64_t version;
	int64_t created_at;
	uint32_t deliveries;
	uint32_t bucket;
	uint32_t body_len;
	int64_t every; /* REC_RECUR: the interval (ms) */
	int64_t start; /* REC_RECUR: grid time of occurrence 1 */
	uint32_t seq;  /* REC_RECUR: the current occurrence, 1..last */
	uint32_t last; /* REC_RECUR: the last occurrence */
	uint8_t owner_len;
	uint8_t cons_len;
	char owner[TL_MAX_NAME_LEN];
	char cons[TL_MAX_NAME_LEN];
	uint8_t body[INLINE_MAX]; /* with REC_INLINE */
} rec;

typedef struct sub sub;

typedef enum { SUB_OPS, SUB_TOPIC_CREATE, SUB_TOPIC_DELETE } sub_kind;

/* A submission to the writer. */
struct sub {
	sub *next;
	sub_kind kind;
	tli_op *ops;
	size_t n;
	tli_topic_conf conf; /* topic create; conf.name also for delete */
	int result;          /* topic subs */
	tli_store_done_fn done;
	void *arg;
	bool heap; /* allocated by tli_store_submit */
	/* answers kept (answers.c): keyed (key.client != 0 in replicated
	 * mode); replayed, or the same key as dup_of earlier in the batch */
	tli_reqkey key;
	bool replayed;
	sub *dup_of;
	/* first sub of a written batch, for the completer */
	sub *batch_next;
	uint64_t seq;     /* the batch's number (tli_store.visible) */
	int64_t write_ns; /* its rocksdb_write's duration */
	bool written;     /* it wrote something (successfully or not) */
};

/* The writer's staging area: a batch's puts and deletes are collected here
 * and written to RocksDB sorted by (column family, key, order of arrival).
 * Sorted inserts let RocksDB's memtable reuse its search position instead
 * of descending from the top for every key (measured: about a third less
 * writer CPU per create); arrival order breaks ties so a delete and a put
 * of the same key keep their meaning. */
typedef struct stage_ent {
	uint32_t seq;
	uint8_t cf;
	uint8_t del;
	uint16_t klen;
	uint32_t koff;
	uint32_t vlen;
	size_t voff;      /* into the arena, when vext is NULL */
	const void *vext; /* a value that outlives the batch (bodies) */
} stage_ent;

/* An entry's place in the sort: the column family and the key's first 15
 * bytes as two integers, zero-padded (keys mostly differ there: a topic,
 * a bucket and a due time; a topic and an id), and the entry's index. */
typedef struct stage_key {
	uint64_t hi; /* cf, then key bytes 0-6 */
	uint64_t lo; /* key bytes 7-14 */
	size_t i;
} stage_key;

typedef struct stage {
	stage_ent *e;
	size_t n;
	size_t cap;
	stage_key *sk; /* 2 * cap: the sort's keys and its scratch half */
	uint8_t *arena;
	size_t alen;
	size_t acap;
	bool oom;
} stage;

void tli_stage_put(tli_store *s, int cf, const void *k, size_t kl,
    const void *v, size_t vl, bool external);
void tli_stage_del(tli_store *s, int cf, const void *k, size_t kl);

struct tli_store {
	rocksdb_t *db;
	rocksdb_options_t *dbopts;
	rocksdb_options_t *cfopts[CF_COUNT];
	rocksdb_column_family_handle_t *cf[CF_COUNT];
	rocksdb_cache_t *cache;
	rocksdb_block_based_table_options_t *bbto[CF_COUNT];
	rocksdb_filterpolicy_t *filter;
	rocksdb_writeoptions_t *wopts;
	rocksdb_readoptions_t *ropts;
	tli_store_opts opts;
	char *path;

	pthread_rwlock_t topics_lock;
	topic_rt **topics; /* sorted by name */
	size_t ntopics;
	uint32_t next_topic_id;

	pthread_mutex_t q_lock;
	pthread_cond_t q_cv;
	sub *q_head;
	sub *q_tail;
	bool stopping;
	pthread_t writer;
	bool writer_started;

	/* The completer (store.c, "the completer"): written batches in
	 * order, each a list of subs through next, batches through
	 * batch_next of their first sub. c_lock guards the list and its
	 * flags; visible counts the batches the writer has begun to write
	 * (what a reader may see), durable those completed after their
	 * sync (or their failure). */
	bool pipelined; /* the completer syncs RocksDB's log: not replicated */
	pthread_t completer;
	bool completer_started;
	pthread_mutex_t c_lock;
	pthread_cond_t c_cv; /* the completer waits for batches */
	pthread_cond_t d_cv; /* readers wait for durable to catch up */
	sub *c_head;
	sub *c_tail;
	bool c_stopping;
	/* The syncer (TLI_SYNC_ALWAYS, not replicated): takes the written
	 * batches from c_head, syncs, and hands them on to the completer
	 * through k_head (c_lock too). */
	pthread_t syncer;
	bool syncer_started;
	pthread_cond_t k_cv; /* the completer waits for synced batches */
	sub *k_head;
	sub *k_tail;
	bool k_stopping;
	size_t c_pending; /* batches with the syncer (c_lock) */
	uint64_t c_seq;   /* writer: the last batch number handed out */
	_Atomic uint64_t visible;
	_Atomic uint64_t durable;
	int64_t batch_write_ns; /* writer: the current batch's writes */
	/* completer: the log file it syncs (store.c, log_sync) */
	uint64_t wal_num;
	int wal_fd;
	/* a sync of the log failed: no write is taken any more */
	_Atomic bool log_broken;

	/* writer-thread state */
	rocksdb_writebatch_t *wb;
	stage stg;
	struct overlay *ov;
	struct owner_deltas *owners;
	int64_t last_sync_ms;
	bool unsynced;

	/* Commit generation: bumped (by the writer) after each batch is
	 * durable; readers note it before a read (tli_msg.gen) so the writer
	 * can tell whether a message changed since (ops.c, read hints). */
	_Atomic uint64_t commit_gen;

	_Atomic uint64_t st_batches;
	_Atomic uint64_t st_ops;
	_Atomic uint64_t st_sync_ns;
	_Atomic uint64_t st_max_batch;
	_Atomic uint64_t st_keys_written;
	_Atomic uint64_t st_stage_merged;
	/* the writer's record lookups: from its cache, from RocksDB */
	_Atomic uint64_t st_rec_cached;
	_Atomic uint64_t st_rec_reads;
	_Atomic uint64_t st_sync_hist[TLI_SYNC_BUCKETS + 1];
	_Atomic uint64_t st_queued_ops; /* in submissions not yet taken */
	_Atomic uint64_t st_ans_kept;
	_Atomic uint64_t st_ans_replayed;
	_Atomic uint64_t st_ans_expired;

	pthread_mutex_t err_lock;
	char last_err[256];

	/* Replicated mode (store.c, "replication"). */
	pthread_rwlock_t db_lock;   /* see the lock order above */
	pthread_mutex_t apply_lock; /* one apply, checkpoint or restore */
	_Atomic uint64_t applied;   /* the applied index, as stored under 'A' */
	rocksdb_writeoptions_t *apply_wopts; /* no sync: Raft's log is */
	uint32_t cf_ids[CF_COUNT]; /* RocksDB's ids of the column families */
	_Atomic bool in_replicate; /* the writer is inside replicate */
	uint8_t *entry;            /* writer: the entry being replicated */
	size_t entry_cap;

	/* Answers kept (answers.c), writer thread: the kept-answer index
	 * key from which the next prune looks (none before the first), and
	 * the store time before which it knows nothing is left to prune. */
	uint8_t ans_floor[1 + 8 + 8 + 4];
	bool ans_floor_set;
	int64_t ans_next_ms;
	uint64_t ans_pend_kept, ans_pend_expired; /* this batch's */

	/* A full disk (store.c, "writes stopped"): set and cleared by the
	 * writer, read by anyone. */
	_Atomic bool stopped;
	_Atomic uint64_t st_stops;
	bool need_resume;       /* writer: RocksDB holds a background error */
	int64_t resume_at_ms;   /* writer: next DB::Resume attempt */
	int64_t resume_wait_ms; /* writer: the backoff */
};

/* ---- codec.c: keys and values ---- */
size_t tli_key_msg(uint8_t *k, uint32_t topic, const char *id, size_t len);
size_t tli_key_body(uint8_t *k, uint32_t topic, const char *id, size_t len);
size_t tli_key_dead(uint8_t *k, uint32_t topic, const char *id, size_t len);
size_t tli_key_tl(uint8_t *k, uint32_t topic, uint32_t bucket, int64_t ts,
    const char *id, size_t len);
size_t tli_key_cons(uint8_t *k, uint32_t topic, const char *cons, size_t clen,
    const char *id, size_t len);
size_t tli_key_own(uint8_t *k, uint32_t topic, const char *owner, size_t olen,
    int64_t ts, const char *id, size_t len);
size_t tli_key_meta_topic(uint8_t *k, const char *name, size_t len);
size_t tli_key_meta_counters(uint8_t *k, uint32_t topic);

size_t tli_rec_encode(uint8_t *out, const rec *r);
int tli_rec_decode(rec *r, const uint8_t *p, size_t len);

/* Index values: version(8) locked(1) for tl; ts(8) version(8) for cons;
 * nothing for own (format 1 wrote version and locked there, now unread). */
void tli_val_tl(uint8_t out[9], uint64_t version, bool locked);
void tli_val_cons(uint8_t out[16], int64_t ts, uint64_t version);
/* Consumer index value: as tli_val_cons, then, for a lease taken ahead of
 * its due time, that time (8). Returns the length (16 or 24). */
size_t tli_val_cons_ahead(
    uint8_t out[24], int64_t ts, uint64_t version, int64_t at);
/* Dead index value: dead-lettered at (8), version (8) — as tli_val_cons. */
#define COUNTERS_LEN 24 /* messages, locked, dead */

size_t tli_topic_encode(uint8_t *out, const topic_rt *t);
int tli_topic_decode(topic_rt *t, const uint8_t *p, size_t len);

/* ---- rdb.c: the one place RocksDB error strings become codes ---- */
int tli_rdb_err(tli_store *s, char *errstr);
/* rdb_resume.cc: DB::Resume, which the C API lacks; *errptr as in c.h. */
void tli_rdb_resume(rocksdb_t *db, char **errptr);
/* rdb_resume.cc: no automatic recovery; the writer calls tli_rdb_resume. */
void tli_rdb_manual_resume(rocksdb_options_t *o);
void tli_rdb_insert_hints(rocksdb_options_t *o);
void tli_rdb_delayed_write_rate(rocksdb_options_t *o, uint64_t bytes_per_s);
/* rdb_resume.cc: the number of the log file written now; 0 on success. */
int tli_rdb_current_wal(rocksdb_t *db, uint64_t *number);
/* A value of exactly len bytes under k in the default column family, into
 * out; *found false (out untouched) when there is none. TL_ECORRUPT for a
 * value of another size. */
int tli_rdb_get_fixed(
    tli_store *s, const void *k, size_t kl, void *out, size_t len, bool *found);

/* rdb_batch.cc: whether rep (len bytes) is a well-formed serialized
 * WriteBatch that only puts and deletes (keys and ranges) in the n column
 * families of ids. 0 if so; -1 with *errptr (a malloc'd "Corruption: ..."
 * text, as RocksDB's) if not. */
int tli_rdb_batch_check(
    const char *rep, size_t len, const uint32_t *ids, size_t n, char **errptr);

/* ---- store.c: the RocksDB handles (db_lock) ---- */
/* A failure of the store's own (not RocksDB's): fmt becomes the last error
 * (tli_store_last_error); returns rv. */
int tli_store_err(tli_store *s, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Take db_lock for reading: TL_OK, or TL_ESTORAGE (nothing held) when the
 * database is closed because a tli_store_restore failed beyond repair. */
int tli_db_rdlock(tli_store *s);
/* A read about to be answered waits until every batch it may have seen is
 * durable (store.c, "the completer"). */
void tli_durable_wait(tli_store *s);
void tli_db_unlock(tli_store *s);
/* With apply_lock and db_lock: replicated entry `index` applies as wb
 * (taken and destroyed) with the applied index beside it, in one write. */
int tli_store_write_applied(
    tli_store *s, rocksdb_writebatch_t *wb, uint64_t index);
/* Apply replicated entry `index` under apply_lock and db_lock, unless it
 * applied before (a replay after a restart: TL_OK, nothing written):
 * build(s, arg, &wb) makes its batch or refuses (its error returned). */
int tli_store_apply_with(tli_store *s, uint64_t index,
    int (*build)(tli_store *s, void *arg, rocksdb_writebatch_t **wb),
    void *arg);

/* ---- store.c: topic registry ---- */
/* Writer thread or with topics_lock held. */
topic_rt *tli_topic_find(tli_store *s, const char *name);
/* Copy a topic's id and settings under the read lock. */
int tli_topic_lookup(
    tli_store *s, const char *name, uint32_t *id, tli_topic_conf *conf);

/* ---- ops.c: the writer's application of message operations ---- */
/* A name or id within a topic: the key of the writer's per-batch tables
 * (the overlay by message id, the owner deltas by owner). */
typedef struct tli_tkey {
	uint32_t topic;
	const char *p;
	size_t n;
} tli_tkey;

/* Mixed: the writer's record cache and read-hint slots take its low bits,
 * and FNV-1a's low bits depend only on the low bits of the id's bytes (ids
 * that differ in a few digits met in the same slots: a third of the lease
 * cycle's extends and deletes missed the cache and read RocksDB). */
static inline uint64_t
tli_tkey_hash(const tli_tkey *k)
{
	return tli_mix64(tli_hash64(k->p, k->n) ^
	    ((uint64_t) k->topic * 0x9e3779b97f4a7c15u));
}

static inline bool
tli_tkey_is(const tli_tkey *k, uint32_t topic, const char *p, size_t n)
{
	return k->topic == topic && k->n == n && memcmp(k->p, p, n) == 0;
}

/* Empties a per-batch table whose entries are the first n of a pool of
 * elem-byte entries that each begin with their tli_hnode. */
static inline void
tli_pool_unindex(tli_htab *t, void *pool, size_t n, size_t elem)
{
	for (size_t i = 0; i < n; i++) {
		tli_htab_remove(
		    t, (tli_hnode *) (void *) ((char *) pool + i * elem));
	}
	TLI_ASSERT(t->n == 0);
}

struct overlay *tli_overlay_new(void);
void tli_overlay_free(struct overlay *ov);
void tli_overlay_reset(struct overlay *ov);
void tli_overlay_commit(struct overlay *ov, uint64_t gen);
void tli_overlay_forget(struct overlay *ov, uint64_t gen);
void tli_apply_op(tli_store *s, tli_op *op);

/* ---- answers.c: kept answers of keyed submissions (writer thread) ---- */
void tli_answers_lookup(tli_store *s, sub *first);
void tli_answers_write(tli_store *s, sub *first, int64_t now);
void tli_answers_copy_dups(sub *first);
void tli_answers_forget(tli_store *s);
/* After the batch's write: count it, or forget the prune's position. */
void tli_answers_done(tli_store *s, sub *first, bool written);

/* ---- owners.c: per-owner counts (writer thread) ---- */
size_t tli_key_meta_owner(
    uint8_t *k, uint32_t topic, const char *owner, size_t olen);
struct owner_deltas *tli_owner_deltas_new(void);
void tli_owner_deltas_free(struct owner_deltas *d);
void tli_owner_deltas_reset(struct owner_deltas *d);
void tli_owner_note(struct owner_deltas *d, uint32_t topic, const char *owner,
    size_t olen, int64_t delta);
int tli_owner_stage(tli_store *s, struct owner_deltas *d);
void tli_owner_each(struct owner_deltas *d,
    void (*fn)(void *arg, uint32_t topic, const char *owner, size_t olen,
        int64_t count),
    void *arg);
bool tli_owner_oom(const struct owner_deltas *d);
int tli_owner_tally(
    tli_store *s, rocksdb_readoptions_t *ro, struct owner_deltas *d);
int tli_owner_migrate(tli_store *s);
int64_t tli_owner_get(
    struct owner_deltas *d, uint32_t topic, const char *owner, size_t olen);

/* ---- query.c ---- */
rocksdb_iterator_t *tli_iter(tli_store *s, int cf, const uint8_t *lo,
    size_t lolen, const uint8_t *hi, size_t hilen, rocksdb_readoptions_t **ro);

#endif
