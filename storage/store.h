/*
 * The timeline store: Timeline's data model and its rules on an embedded
 * RocksDB. It owns topics, messages, the three indexes (timeline, consumer,
 * owner), the per-topic counters and durability (group commit).
 *
 * DESIGN. Every mutation (topic or message) is an operation submitted to the
 * store's single writer thread through a queue. The writer takes everything
 * queued (up to max_batch_ops), checks each operation's conditions against
 * the stored state plus the effects of the earlier operations of the same
 * batch (an in-memory overlay), builds one WriteBatch holding every record and
 * index change and writes it; a completer thread syncs the log (in the
 * default mode) and only then completes the submissions, while the writer
 * forms the next batch from the operations that arrived meanwhile: that is
 * group commit. Reads (lookup, scans, counts) go straight to RocksDB from
 * the caller's thread, see every acknowledged operation and show nothing
 * that is not yet durable ("Reads and durability", below).
 *
 * Time: the store reads "now" only through the clock given at open. A lease
 * is the message's timestamp moved to now + lease with lock_consumer set; a
 * lease that runs out makes the message available with no extra machinery.
 *
 * Thread-safety: every function may be called from any thread, except that
 * tli_store_close must not race with other calls.
 */
#ifndef TL_STORAGE_STORE_H
#define TL_STORAGE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"

/* The storage format version, stored in the database. Bump it whenever a key
 * layout or record encoding changes, and write the migration (or the refusal)
 * in tli_store_open next to the check. */
#define TLI_STORE_FORMAT 3

typedef struct tli_store tli_store;

typedef enum tli_sync_mode {
	/* Acknowledge only after the batch is fsynced (the default). */
	TLI_SYNC_ALWAYS = 0,
	/* Acknowledge after the write reaches the OS; fsync every
	 * sync_interval_ms. Risks: a power loss or kernel crash loses up to
	 * that long of acknowledged operations (a process crash loses none). */
	TLI_SYNC_INTERVAL = 1,
	/* Never fsync explicitly. Risks: a power loss or kernel crash loses
	 * whatever the OS had not written yet, possibly seconds of work. */
	TLI_SYNC_NONE = 2,
} tli_sync_mode;

typedef struct tli_store_opts {
	const char *path;         /* data directory, created if missing */
	tli_sync_mode sync_mode;  /* default TLI_SYNC_ALWAYS */
	int sync_interval_ms;     /* TLI_SYNC_INTERVAL only; default 100 */
	unsigned max_batch_ops;   /* ops per group commit; default 4096 */
	int64_t min_lease_gap_ms; /* lease/extend must end this far ahead;
	                             default 1 */
	size_t cache_bytes;       /* block cache; default 32 MiB */
	/* What RocksDB's flushes and compactions may write, bytes per
	 * second; default 0, no limit. Their bursts share the disk with the
	 * log's fsync that every acknowledgement waits for; a limit below
	 * what they need makes writes wait for them instead. */
	uint64_t background_bytes_per_s;
	/* RocksDB's compaction threads run this many nice levels above the
	 * caller's (at most 19); 0 leaves them as they are. */
	int compaction_nice;
	tli_clock clock;      /* default: wall clock */
	bool no_record_cache; /* the writer keeps no records between
	                         batches (tests: every path reads) */
	int fsync_delay_ms;   /* tests: in TLI_SYNC_ALWAYS every group commit
	                         waits this long before its write (a slow
	                         disk) */
	/* Tests: called by the thread that syncs the log, before each sync
	 * (TLI_SYNC_ALWAYS, not replicated). Optional. */
	void (*sync_hook)(void *arg);
	void *sync_hook_arg;
	/* Called from the writer thread once when writes stop (a write failed
	 * for lack of disk space; stopped true, detail RocksDB's text) and
	 * once when they resume (stopped false). Optional. */
	void (*report)(void *arg, bool stopped, const char *detail);
	void *report_arg;
	/* Replicated mode when set (see "replication" below): where the
	 * writer would write a batch to RocksDB it calls replicate(arg,
	 * entry, len) instead, from the writer thread, with the batch as an
	 * entry (TLI_REPL_*). It returns once the entry is committed and
	 * applied to this store through tli_store_apply_entry (TL_OK), or
	 * with the error the batch's operations then fail with
	 * (TL_ENOTLEADER, TL_ELEADERLOST, TL_ENOMEM...). sync_mode and
	 * sync_interval_ms do nothing in this mode. */
	int (*replicate)(void *arg, const void *entry, size_t len);
	void *replicate_arg;
	/* Replicated mode: how long the answer to a keyed submission
	 * (tli_store_submit_keyed) is kept, ms of the store's clock; 0 (the
	 * default): not kept. See "answers kept" below. */
	int64_t answers_ms;
} tli_store_opts;

/* Fill opts with the defaults. */
void tli_store_opts_init(tli_store_opts *o);

/* Open (or create) the store at o->path. Errors: TL_EFORMAT for a database
 * of another format version, TL_ESTORAGE/TL_EIO/TL_ENOSPC when RocksDB
 * refuses, TL_ENOMEM. *out is untouched on failure. */
int tli_store_open(tli_store **out, const tli_store_opts *o);

/* Finish every queued batch, stop the writer and close the database.
 * Accepts NULL. Submissions made after close begins fail with TL_ECLOSED. */
void tli_store_close(tli_store *s);

/* The last RocksDB error text seen by this store (for logs), or "". */
const char *tli_store_last_error(tli_store *s);

/*
 * A full disk. When a write fails for lack of space the store stops taking
 * writes: every operation fails with TL_ENOSPC (nothing is acknowledged
 * that is not durable) while reads go on. The writer thread then asks
 * RocksDB to resume (DB::Resume: flush the memtables, clear the error)
 * every 250 ms, doubling up to 2 s, and lets writes through again once
 * that succeeds; the first write that succeeds after that ends the
 * episode. No restart is needed; opts.report hears of both ends.
 */
/* False from a write failing for lack of space until a write succeeds. */
bool tli_store_writable(tli_store *s);
/* How many times writes stopped since open. */
uint64_t tli_store_write_stops(tli_store *s);
/* True when the RocksDB this process runs on was built with its assertions
 * on (no NDEBUG, as Debian 12's is): correct, and markedly slower
 * (tools/rocksdb-release.sh builds the same version without them). */
bool tli_rdb_assertions(void);

/* ---- topics ---- */

typedef struct tli_topic_conf {
	char name[TL_MAX_NAME_LEN + 1];
	uint32_t buckets;         /* 1..TL_MAX_BUCKETS; 0 = default */
	uint32_t max_body;        /* 1..TL_MAX_BODY_LEN; 0 = default */
	int64_t default_lease_ms; /* 0 = TL_DEFAULT_LEASE_MS */
	int64_t max_lease_ms;     /* 0 = TL_DEFAULT_MAX_LEASE_MS */
	uint32_t max_deliveries;  /* 0 = never dead-letter */
} tli_topic_conf;

typedef struct tli_counts {
	uint64_t available;  /* ts <= now */
	uint64_t waiting;    /* ts > now, not leased */
	uint64_t processing; /* ts > now, leased */
} tli_counts;

typedef struct tli_topic_info {
	tli_topic_conf conf;
	uint32_t topic_id; /* internal key prefix; never reused */
	int64_t created_at;
	uint64_t messages; /* kept incrementally */
	uint64_t locked; /* messages with a lock_consumer (active or run out) */
	uint64_t dead;   /* dead letters */
} tli_topic_info;

/* Initialise a topic configuration with the name and every default. Returns
 * TL_EBADID for an empty name, TL_ETOOLARGE for one too long. */
int tli_topic_conf_init(tli_topic_conf *c, const char *name);

/* Create a topic. Durable when it returns. Errors: TL_ETOPICEXISTS,
 * TL_EBADID, TL_ETOOLARGE, TL_EINVAL (a setting out of range). */
int tli_store_topic_create(tli_store *s, const tli_topic_conf *c);

/* Delete a topic with all its messages. Errors: TL_ENOTOPIC. */
int tli_store_topic_delete(tli_store *s, const char *name);

/* The same for a client's request whose answer is kept ("answers kept"
 * below; key NULL: none). */
struct tli_reqkey;
int tli_store_topic_create_keyed(
    tli_store *s, const tli_topic_conf *c, const struct tli_reqkey *key);
int tli_store_topic_delete_keyed(
    tli_store *s, const char *name, const struct tli_reqkey *key);

/* Errors: TL_ENOTOPIC. */
int tli_store_topic_get(tli_store *s, const char *name, tli_topic_info *out);

/* All topics, sorted by name; free *out with tli_free. */
int tli_store_topic_list(tli_store *s, tli_topic_info **out, size_t *n);

/* ---- message operations ---- */

typedef enum tli_op_type {
	TLI_OP_CREATE = 1,    /* producer: id must not exist */
	TLI_OP_LEASE,         /* broker for a consumer: due, version matches */
	TLI_OP_EXTEND,        /* lease holder: new ts in the future */
	TLI_OP_RELEASE,       /* lease holder: new ts not in the past */
	TLI_OP_DELETE_LEASED, /* lease holder */
	TLI_OP_DELETE_OWNED,  /* owner: not under an active lease */
	TLI_OP_MOVE,          /* owner: not under an active lease */
	TLI_OP_DLQ_KICK,      /* operator: a dead letter back on the timeline */
} tli_op_type;

/* How op.ts is read. */
#define TLI_TS_ABS 0 /* ts is a timeline time (UTC ms) */
/* TLI_TS_REL: ts is a delay, added to the store's now when applied. */
#define TLI_TS_REL 1

/*
 * One operation. The caller fills the inputs and keeps every pointer valid
 * until the operation completes; the store fills the results.
 *
 *  op             topic id  who        ts           version    body
 *  CREATE         yes  opt  owner      when due     -          yes
 *  LEASE          yes  yes  consumer   lease end    expected   -
 *  EXTEND         yes  yes  consumer   lease end    expected   -
 *  RELEASE        yes  yes  consumer   due again    expected   -
 *  DELETE_LEASED  yes  yes  consumer   -            expected   -
 *  DELETE_OWNED   yes  yes  owner      -            0 or exp.  -
 *  MOVE           yes  yes  owner      new ts       0 or exp.  -
 *  DLQ_KICK       yes  yes  anyone     new ts       -          -
 *
 * A LEASE of a message already leased max_deliveries times (topic setting,
 * 0 = never) moves it to the dead-letter list instead and answers TL_EDEAD,
 * unless the op has no_dead_letter.
 *
 * CREATE with id_len 0 gets a generated sortable id, returned in gen_id.
 */
/* How far ahead of its due time a message may be leased (tli_op.at). */
#define TLI_LEASE_AHEAD_MAX 10000

typedef struct tli_op {
	/* inputs */
	tli_op_type type;
	const char *topic;
	const char *id;
	size_t id_len;
	const char *who;
	size_t who_len;
	int64_t ts;
	int ts_mode;      /* TLI_TS_ABS or TLI_TS_REL */
	uint64_t version; /* expected version; 0 = any (owner ops only) */
	/* LEASE only: the due time the lease is taken for, when that is
	 * ahead of now (at most TLI_LEASE_AHEAD_MAX ms): the message must be
	 * due by then and not under anybody's active lease now; a relative ts
	 * counts from `at`, and the consumer index remembers `at` so the
	 * message is not pushed before it (tli_entry.push_at). 0: now. */
	int64_t at;
	/* LEASE only: never dead-letter (a LOCK's lease: taking a lock over
	 * and over is not a message failing over and over). */
	bool no_dead_letter;
	const void *body;
	size_t body_len;
	/* CREATE only: a recurrence (every_ms 0 = none). Exactly one end:
	 * `times` occurrences (>= 1), or the last grid point at or before
	 * `until` (>= ts; 0 = not given). catch_up: a holder's delete places
	 * the very next occurrence even when it is already past, instead of
	 * the first one after now. docs/storage.md, "Recurring messages". */
	int64_t every_ms;
	uint32_t times;
	int64_t until;
	bool catch_up;
	/* Optional: the message as tli_store_get read it (same store, topic
	 * and id).
	 * When nothing has changed it since that read, the writer takes the
	 * record from here instead of reading it again; otherwise it reads.
	 * Must stay valid until the operation is done. */
	const struct tli_msg *hint;
	/* results */
	int err;              /* TL_OK or the precise error */
	uint64_t new_version; /* version after the operation */
	int64_t new_ts;       /* resolved timestamp after the operation;
	                       * a LEASE that fails with TL_ELEASED or
	                       * TL_ENOTDUE: the message's ts (the lease's
	                       * end, or when it is due) */
	uint32_t bucket;
	uint32_t deliveries; /* after a LEASE: how many times leased */
	/* A recurring message's occurrence after the operation (0: none, or
	 * the message is gone); after a holder's delete that placed the next
	 * occurrence, new_version and new_ts are that occurrence's. */
	uint32_t seq;
	char gen_id[TL_GEN_ID_LEN + 1];
	/* The results are the kept answer of the same request's first
	 * attempt (tli_store_submit_keyed): nothing was done now. */
	bool replayed;
} tli_op;

typedef void (*tli_store_done_fn)(void *arg);

/* Submit n operations; `done` is called exactly once, from the store's
 * completer thread, after all of them are durable (or failed), with each
 * op's err set; completions come in the order of the batches. The
 * operations are applied in order and may share a batch with other
 * submissions. Returns TL_OK, or TL_ECLOSED / TL_ETOOLARGE (n >
 * TL_MAX_BATCH) / TL_EINVAL synchronously, in which case `done` is never
 * called. */
int tli_store_submit(
    tli_store *s, tli_op *ops, size_t n, tli_store_done_fn done, void *arg);

/* Answers kept (replicated mode, opts.answers_ms > 0). A client that may
 * send a write request again after an unknown outcome (its connection
 * lost, TL_ELEADERLOST) names it: its client id (chosen at random, the
 * same on every connection), its request id and a digest of the request.
 * The first time a key is seen the submission is applied and its results
 * are written in the same entry, under the key, with the store's time;
 * a later submission with the same key is not applied: its ops get the
 * kept results (tli_op.replayed), or TL_EINVAL each when the digest
 * differs (another request under a reused id). Kept answers older than
 * answers_ms are deleted by the leader's later batches (deterministic:
 * the deletions are in the entries). Without replicated mode or with
 * answers_ms 0, or a key of client 0, this is tli_store_submit. */
typedef struct tli_reqkey {
	uint64_t client;
	uint32_t reqid;
	uint64_t digest;
} tli_reqkey;

int tli_store_submit_keyed(tli_store *s, tli_op *ops, size_t n,
    const tli_reqkey *key, tli_store_done_fn done, void *arg);

/* Submit and wait. Returns the submission error (the per-op errors are in
 * ops[i].err). */
int tli_store_apply(tli_store *s, tli_op *ops, size_t n);

/* ---- reads ---- */

typedef struct tli_msg {
	char id[TL_MAX_ID_LEN + 1];
	size_t id_len;
	char owner[TL_MAX_NAME_LEN + 1];
	size_t owner_len;
	char consumer[TL_MAX_NAME_LEN + 1]; /* lock_consumer; "" if none */
	size_t consumer_len;
	int64_t ts;
	uint32_t bucket;
	uint64_t version;
	uint32_t deliveries;
	int64_t created_at;
	bool dead;  /* in the dead-letter list */
	void *body; /* owned; release with tli_msg_fini */
	size_t body_len;
	int64_t
	    sched;    /* where its producer placed it (create, move, release) */
	uint64_t gen; /* the store's commit generation before the read */
	/* Recurrence (every 0 = none): occurrence seq of 1..last, occurrence
	 * k due on the grid start + (k - 1) * every. off_grid: released or
	 * kicked to a time of its own (the next occurrence is on the grid
	 * again). */
	int64_t every;
	int64_t start;
	uint32_t seq;
	uint32_t last;
	bool catch_up;
	bool off_grid;
} tli_msg;

void tli_msg_fini(tli_msg *m);

/* Reads and durability. In TLI_SYNC_ALWAYS a batch's writes are visible in
 * RocksDB a little before its sync has made them durable (store.c, "the
 * completer"). tli_store_get, the scans other than tli_store_scan_due,
 * tli_store_count, tli_store_totals, tli_store_topic_get and
 * tli_store_topic_list therefore return only once every batch they may
 * have seen is durable: what they return may be shown to anyone. Two do
 * not wait, for the dispatcher, which shows what they find only through a
 * lease (durable after them): tli_store_scan_due and tli_store_get_many;
 * nor do the owner counts (quota checks before a submit). Called from a
 * completion (tli_store_done_fn), nothing waits. */

/* Look a message up. Errors: TL_ENOTOPIC, TL_ENOTFOUND, TL_ECORRUPT. */
int tli_store_get(tli_store *s, const char *topic, const char *id,
    size_t id_len, tli_msg *out);

/* tli_store_get without the durability wait, for a caller holding a lock
 * that a completion takes (waiting there could wait for ever: the
 * completer would be blocked on that lock before the sync it waits for).
 * Show what it returns only when it is the version a waiting read (a
 * scan) returned before. */
int tli_store_get_nowait(tli_store *s, const char *topic, const char *id,
    size_t id_len, tli_msg *out);

/* Look n messages of one topic up at one snapshot, in one batched read
 * (no durability wait, see above).
 * Returns TL_OK (then rvs[i] is message i's result and out[i] is filled
 * where it is TL_OK), or TL_ENOTOPIC / TL_ENOMEM for the whole call. */
int tli_store_get_many(tli_store *s, const char *topic, size_t n,
    const char *const *ids, const size_t *id_lens, tli_msg *out, int *rvs);

/* An index entry: enough to lease or list without a lookup. */
typedef struct tli_entry {
	int64_t ts;
	uint64_t version;
	/* Consumer scans: the due time a lease was taken ahead for (push the
	 * message no earlier), else 0. */
	int64_t push_at;
	uint32_t bucket;
	bool locked; /* has a lock_consumer (maybe run out) */
	uint8_t id_len;
	char id[TL_MAX_ID_LEN + 1];
} tli_entry;

/* A resume point: pass the last entry of a page to continue after it;
 * zero-initialised means "from the start". */
typedef struct tli_cursor {
	bool valid;
	int64_t ts;
	uint8_t id_len;
	char id[TL_MAX_ID_LEN];
} tli_cursor;

void tli_cursor_from_entry(tli_cursor *c, const tli_entry *e);

/* Messages of one bucket with ts <= up_to, in (ts, id) order, after the
 * cursor; at most max. *more tells whether entries remain. No durability
 * wait (see above). */
int tli_store_scan_due(tli_store *s, const char *topic, uint32_t bucket,
    int64_t up_to, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more);

/* Messages whose lock_consumer is `consumer` (leases, active or run out), in
 * id order after the cursor (its ts is ignored). */
int tli_store_scan_consumer(tli_store *s, const char *topic,
    const char *consumer, size_t consumer_len, const tli_cursor *after,
    tli_entry *out, size_t max, size_t *n, bool *more);

/* Messages of an owner in (ts, id) order after the cursor. */
int tli_store_scan_owner(tli_store *s, const char *topic, const char *owner,
    size_t owner_len, const tli_cursor *after, tli_entry *out, size_t max,
    size_t *n, bool *more);

/* Dead letters of a topic in id order after the cursor (its ts is
 * ignored); entry.ts is when the message was dead-lettered. */
int tli_store_scan_dead(tli_store *s, const char *topic,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more);

/* Count messages with from <= ts < to by status, at the store's now. */
int tli_store_count(
    tli_store *s, const char *topic, int64_t from, int64_t to, tli_counts *out);

/* The status counts of the whole topic, from the incremental counters plus
 * a scan of the due part only. */
int tli_store_totals(tli_store *s, const char *topic, tli_counts *out);

/* How many messages a producer group (owner) has stored — on the timeline
 * or in the dead-letter list — in one topic, or in all topics. Exact as of
 * the last committed batch. Errors: TL_EBADID, TL_ENOTOPIC, TL_ESTORAGE. */
int tli_store_owner_count_topic(tli_store *s, const char *topic,
    const char *owner, size_t olen, uint64_t *out);
int tli_store_owner_count(
    tli_store *s, const char *owner, size_t olen, uint64_t *out);

/* ---- consistency ---- */

typedef void (*tli_check_report_fn)(void *arg, const char *problem);

/* Check every record against every index and the counters, and every index
 * entry against its record. Calls report (if not NULL) once per problem and
 * stores the count in *problems. Returns TL_OK when the scan itself worked
 * (even if problems were found). */
int tli_store_check(
    tli_store *s, tli_check_report_fn report, void *arg, uint64_t *problems);

/* ---- replication ----
 *
 * A replicated store (opts.replicate set) is one node's copy of a Raft
 * group's state. Its writer checks every operation exactly as a single
 * node does and builds the same WriteBatch, but hands the batch to
 * replicate as one entry instead of writing it; every node, the leader
 * included, writes each committed entry with tli_store_apply_entry, in
 * log order. A replicated store writes RocksDB only there and in
 * tli_store_restore. docs/storage.md, "Replicated mode".
 *
 * An entry: a header of TLI_REPL_HEADER bytes, then RocksDB's serialized
 * WriteBatch (rocksdb_writebatch_data). Header: the entry format version
 * (TLI_REPL_VERSION), the kind (tli_repl_kind), the storage format
 * (TLI_STORE_FORMAT) of the store that built it, and a zero byte. A new
 * entry layout bumps TLI_REPL_VERSION; a node refuses (TL_ECORRUPT) an
 * entry of a version, kind or storage format it does not know.
 */
#define TLI_REPL_VERSION 1
#define TLI_REPL_HEADER 4

typedef enum tli_repl_kind {
	TLI_REPL_OPS = 1,          /* a batch of message operations */
	TLI_REPL_TOPIC_CREATE = 2, /* one topic created */
	TLI_REPL_TOPIC_DELETE = 3, /* one topic deleted with its messages */
	/* the seed check of a group seeded from a store (applied with
	 * tli_store_seed_apply, never tli_store_apply_entry) */
	TLI_REPL_SEED = 4,
	/* a node's client URL (applied with tli_store_node_apply) */
	TLI_REPL_NODE = 5,
} tli_repl_kind;

/* Apply one committed entry as Raft index `index`: its WriteBatch plus
 * the applied index (the key "A" of the default column family) in one
 * write, not synced (Raft's log is the durable copy). An index at or
 * below the applied index is skipped (TL_OK): replaying the log after a
 * restart is harmless. Only RocksDB changes: a node that did not build
 * the entry calls tli_store_reload before its writer takes writes (a
 * follower that becomes leader). Call from one thread at a time; it may
 * run while the writer thread waits inside replicate. Errors:
 * TL_ECORRUPT (a header or WriteBatch that does not decode; nothing
 * written), TL_ESTORAGE/TL_EIO/TL_ENOSPC (RocksDB refused: a committed
 * entry cannot be skipped, so the caller stops), TL_EINVAL. */
int tli_store_apply_entry(
    tli_store *s, uint64_t index, const void *entry, size_t len);

/* Once in each thread that reads or writes the store (the writer does it
 * itself): RocksDB otherwise counts every key comparison of the thread in a
 * thread-local perf context nobody reads (about a tenth of an apply's or a
 * scan's CPU). */
void tli_store_thread_setup(void);

/* The index of the last entry applied (0: none), kept in memory, loaded
 * at open. */
uint64_t tli_store_applied_index(tli_store *s);

/* Re-read what the writer keeps in memory from RocksDB: the topics, their
 * counters and the next topic id; drop every cached record and read hint
 * (the commit generation moves on). For a node whose database changed
 * under its writer (applied entries it did not build, a topic created or
 * deleted by another node) before it serves, and after a replicate that
 * failed with an entry that may still be applied (TL_ELEADERLOST), before
 * the writer takes writes again. Precondition: the writer is idle (no
 * submission in flight). It waits for a batch in progress, but answers
 * TL_EBUSY while the writer is inside replicate (which may be waiting
 * for the caller's thread). Errors: TL_EBUSY, TL_ESTORAGE, TL_ECORRUPT,
 * TL_ENOMEM (then the registry is the one from before). */
int tli_store_reload(tli_store *s);

/* Create a RocksDB checkpoint of the store at dir (which must not exist;
 * same filesystem as the store for hard links), after syncing the WAL,
 * and set *index to the applied index it holds: no entry is applied
 * between the two. Errors: TL_ESTORAGE/TL_EIO/TL_ENOSPC with
 * tli_store_last_error. */
int tli_store_checkpoint(tli_store *s, const char *dir, uint64_t *index);

/* Replace the store's database in place with the checkpoint at dir (same
 * filesystem; dir is moved, not copied): close RocksDB, move the old
 * directory aside (path + ".old"), move dir to path, reopen with the same
 * options, reload (as tli_store_reload) and remove the old directory. The
 * tli_store pointer stays valid; readers wait for the swap (they never
 * see a closed database). Precondition: the writer is idle (a follower;
 * TL_EBUSY while it is inside replicate, as for tli_store_reload).
 * On failure the old database is put back and reopened (the store goes on
 * as before) and the error is returned: TL_EFORMAT, TL_ESTORAGE... with
 * tli_store_last_error. Should even that fail, every later call answers
 * TL_ESTORAGE. */
int tli_store_restore(tli_store *s, const char *dir);

/* ---- seeding a new group (seed.c) ----
 *
 * Offline operations on a store directory, for tl-store: each opens the
 * database itself (plain mode, nothing replicated) and closes it again,
 * so no broker may run on it. A copy made while its node ran would miss
 * its unsynced applies; a running broker holds RocksDB's LOCK file and is
 * refused (TL_EBUSY, naming its process). On failure `why` (cap bytes;
 * may be NULL) gets one sentence for the operator and nothing changed.
 * docs/cluster.md, "Upgrades and restores".
 */

/* Copy the store in src to dst as a RocksDB checkpoint: consistent, the
 * memtables flushed first so the copy needs no log replay; its tables
 * are hard links when dst is on the same filesystem. dst must not exist.
 * *index gets the applied index the copy holds (0: none, as in a single
 * broker's store). Errors: TL_EINVAL (src holds no store, dst exists),
 * TL_EBUSY (a process has src open), TL_EFORMAT, TL_ESTORAGE / TL_EIO /
 * TL_ENOSPC (RocksDB refused; a partial dst may be left). */
int tli_store_copy(
    const char *src, const char *dst, uint64_t *index, char *why, size_t cap);

/* Prepare the store in path to seed a new Raft group: remove its applied
 * index (key "A"; a new group's log starts again at index 1, which the old
 * index would have skipped as applied) and the old group's node URLs
 * (keys "M", naming nodes of the old group), and mark it as a seed (key "S":
 * the seed id, a digest of its metadata, pending), in one synced write.
 * Nothing else in a store belongs to its group (the Raft log, terms,
 * votes and the configuration live beside it in DATA/raft), but every
 * node of the new group must start from this same store: the seed mark
 * lets the group check that (tli_store_seed_apply). A store prepared
 * already keeps its id. *was gets the index removed (0: none), *id the
 * seed id (never 0). Errors as tli_store_copy. */
int tli_store_seed(
    const char *path, uint64_t *was, uint64_t *id, char *why, size_t cap);

/* The store's seed mark: *id 0 when it has none; *pending while no entry
 * of the new group was applied (the seed check comes first). Errors:
 * TL_ESTORAGE, TL_ECORRUPT (a mark of the wrong size). */
int tli_store_seed_get(tli_store *s, uint64_t *id, bool *pending);

/*
 * The seed check: the first leader of a seeded group (its store's mark
 * pending) proposes, before any other entry of its own, an entry of kind
 * TLI_REPL_SEED holding its seed id; every node applies it with
 * tli_store_seed_apply. A node whose store carries the same id confirms
 * its mark and sets its applied index to the entry's, in one write (not
 * synced, as every applied entry). A node whose store carries another id
 * or none (an empty store, a copy of another backup) is not a copy of the
 * leader's seed: nothing is written and the node must stop rather than
 * go on with data the others do not have (or lack data they have). A
 * node whose mark is still pending must likewise refuse an ordinary entry
 * (its leader started from a store that was not the seed).
 */
#define TLI_REPL_SEED_LEN (TLI_REPL_HEADER + 8)

/* The seed check entry of seed id `id`. */
void tli_store_seed_entry(uint64_t id, uint8_t out[TLI_REPL_SEED_LEN]);

/* Apply the seed check entry at Raft index `index`. *have gets this
 * store's seed id (0: none); the check passed when it is the entry's.
 * An index at or below the applied index is skipped (passed). Errors:
 * TL_ECORRUPT (not a seed check entry), TL_ESTORAGE / TL_EIO / TL_ENOSPC
 * (RocksDB refused; the caller stops, as for tli_store_apply_entry),
 * TL_EINVAL. */
int tli_store_seed_apply(tli_store *s, uint64_t index, const void *entry,
    size_t len, uint64_t *have);

/* ---- the client URLs of the group's nodes (nodes.c) ----
 *
 * Raft's configuration keeps only a node's Raft address; the client URL
 * a follower redirects to is replicated beside it as an entry of kind
 * TLI_REPL_NODE: the header, the node id (8 bytes, big-endian), the URL
 * and its NUL, nothing after (an empty URL removes the node's). Every
 * node applies it with tli_store_node_apply: the URL under the key "M"
 * id(8) of the default column family (the bytes without the NUL) and the
 * applied index, in one write (not synced, as every applied entry). A
 * snapshot (a checkpoint) carries the URLs with the rest.
 */
#define TLI_NODE_URL_CAP 256 /* a URL's bytes with its NUL */
#define TLI_REPL_NODE_MAX (TLI_REPL_HEADER + 8 + TLI_NODE_URL_CAP)

/* Write the entry setting node id's URL ("" removes it) into out; its
 * length, or 0 when the URL does not fit (TLI_NODE_URL_CAP - 1 bytes at
 * most) or id is 0. */
size_t tli_store_node_entry(
    uint64_t id, const char *url, uint8_t out[TLI_REPL_NODE_MAX]);

/* Apply a node URL entry at Raft index `index`. An index at or below the
 * applied index is skipped (TL_OK). Errors: TL_ECORRUPT (an entry of
 * another version, kind or storage format, node id 0, a length that is
 * not header + 8 + URL + NUL, a URL without its NUL, with a NUL inside or
 * over TLI_NODE_URL_CAP bytes; nothing written, tli_store_last_error says
 * which), TL_ESTORAGE / TL_EIO / TL_ENOSPC (RocksDB refused), TL_EINVAL. */
int tli_store_node_apply(
    tli_store *s, uint64_t index, const void *entry, size_t len);

/* Call fn(arg, id, url) for each node URL the store holds, by id. A stored
 * value that is no URL is skipped. Errors: TL_ESTORAGE, TL_EINVAL. */
int tli_store_node_urls(tli_store *s,
    void (*fn)(void *arg, uint64_t id, const char *url), void *arg);

/* ---- statistics ---- */

/* Upper bounds (ms) of the write+sync duration histogram's buckets; one
 * more bucket holds the rest. */
#define TLI_SYNC_BUCKETS 12
static const double tli_sync_bounds[TLI_SYNC_BUCKETS] = {
    0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 500, 1000};

typedef struct tli_store_stats {
	uint64_t batches;       /* group commits written */
	uint64_t ops;           /* operations applied (ok or failed) */
	uint64_t sync_ns_total; /* time spent in write+sync */
	uint64_t max_batch;     /* largest batch in ops */
	uint64_t keys_written;  /* record and index keys staged into batches */
	uint64_t keys_merged;   /* staged keys another of the batch replaced */
	/* the writer's first look at a message in a batch: its record cache
	 * had it, or it read RocksDB (neither: a read hint was used) */
	uint64_t records_cached;
	uint64_t records_read;
	/* answers kept (replicated mode): requests whose answer was written,
	 * requests answered from a kept answer (or refused: another
	 * request under the id), answers deleted once expired */
	uint64_t answers_kept;
	uint64_t answers_replayed;
	uint64_t answers_expired;
	uint64_t sync_hist[TLI_SYNC_BUCKETS + 1]; /* write+sync durations */
	uint64_t queued_ops; /* operations waiting for the writer now */
	/* RocksDB's state now: what can hold a write up. */
	uint64_t write_stopped;      /* 1 while RocksDB stops writes */
	uint64_t delayed_write_rate; /* bytes/s while it slows them, else 0 */
	uint64_t running_flushes;
	uint64_t running_compactions;
	uint64_t imm_memtables; /* full memtables waiting for their flush */
	uint64_t l0_files;      /* summed over the column families */
	uint64_t pending_compaction_bytes;
	/* RocksDB's memory now, bytes */
	uint64_t mem_memtables;        /* every memtable, active and full */
	uint64_t mem_table_readers;    /* open table files, beside the cache */
	uint64_t mem_block_cache;      /* the block cache's use (index, filter,
	                                  data blocks) */
	uint64_t block_cache_capacity; /* its capacity (block_cache_mb) */
} tli_store_stats;

void tli_store_get_stats(tli_store *s, tli_store_stats *out);

/* The bucket a message id lands in for a topic with `buckets` buckets. */
uint32_t tli_bucket_of(const char *id, size_t id_len, uint32_t buckets);

/* Write a new sortable id (TL_GEN_ID_LEN chars + NUL) for time now_ms. */
void tli_gen_id(char out[TL_GEN_ID_LEN + 1], int64_t now_ms);

#endif
