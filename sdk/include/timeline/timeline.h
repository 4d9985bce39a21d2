/*
 * libtimeline — the C client of the Timeline broker.
 *
 * A producer places messages on a topic's timeline at a UTC millisecond
 * time; when the time comes the broker pushes each message to one consumer
 * with a lease. The consumer deletes the message when done
 * (tl_lease_delete), extends the lease when it needs more time
 * (tl_lease_extend) or releases the message to a later time
 * (tl_lease_release). If the consumer dies the lease runs out and the
 * message is delivered again.
 *
 * Conventions:
 *  - Every fallible function returns TL_OK or an error code from
 *    timeline/errors.h (tl_strerror gives a sentence). Out-parameters are
 *    untouched on failure.
 *  - Handles are opaque. Every *_free / *_close accepts NULL.
 *  - All functions are thread-safe unless said otherwise: one tl_client
 *    may be shared by many threads, and concurrent calls are pipelined and
 *    batched on the wire.
 *  - The library never prints; set a log callback with tl_opts_set_log.
 *  - Times are UTC milliseconds (timeline time). Relative times ("in 5 s")
 *    are resolved on the broker's clock, which is the only clock that
 *    positions messages.
 */
#ifndef TIMELINE_TIMELINE_H
#define TIMELINE_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "timeline/errors.h"
#include "timeline/limits.h"
#include "timeline/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_VERSION_STRING "0.1.0"

/* ---- options ---- */

typedef struct tl_opts tl_opts;

typedef enum tl_log_level {
	TL_LOG_ERROR = 0,
	TL_LOG_WARN = 1,
	TL_LOG_INFO = 2,
	TL_LOG_DEBUG = 3,
} tl_log_level;

/* A log line from the library; called from library threads. */
typedef void (*tl_log_fn)(void *arg, tl_log_level level, const char *msg);

/* Allocate options with the defaults: url "tcp://127.0.0.1:7400", name
 * "libtimeline", request timeout 10 s, reconnect backoff 50 ms .. 5 s, no
 * token (or the TIMELINE_TOKEN environment variable when set). Errors:
 * TL_ENOMEM. */
TL_API int tl_opts_alloc(tl_opts **out);
TL_API void tl_opts_free(tl_opts *o);
/* The broker's address: "tcp://host:port", "ipc:///path",
 * "tls+tcp://host:port" (see tl_opts_set_tls_ca); or a cluster's nodes as
 * a comma-separated list of up to 16 such URLs
 * ("tcp://a:7400,tcp://b:7400,tcp://c:7400"), tried in order, the client
 * then finding and following the leader (see tl_client_open). The
 * TIMELINE_URL environment variable, when set, is the default. Errors:
 * TL_EINVAL for NULL, an unsupported scheme or an empty list element. */
TL_API int tl_opts_set_url(tl_opts *o, const char *url);
/* The client's name, shown in the broker's logs and metrics. */
TL_API int tl_opts_set_name(tl_opts *o, const char *name);
/* The credential sent in the session hello (brokers with auth on). */
TL_API int tl_opts_set_token(tl_opts *o, const char *token);
/* TLS (URLs "tls+tcp://host:port"): the PEM file of the CA(s) that sign
 * the broker's certificate; required for tls+tcp://. The
 * TIMELINE_TLS_CA environment variable, when set, is the default. NULL or
 * "" clears it. Errors: TL_EINVAL (o NULL), TL_ENOMEM. The file is read
 * by tl_client_open. */
TL_API int tl_opts_set_tls_ca(tl_opts *o, const char *ca_file);
/* The name the broker's certificate must carry (and the SNI sent); default
 * the host part of the URL. Errors: TL_EINVAL, TL_ENOMEM. */
TL_API int tl_opts_set_tls_server_name(tl_opts *o, const char *name);
/* A client certificate and its private key (PEM files), for brokers with
 * tls_client_auth = optional or required; both or neither (NULL, NULL
 * clears). Errors: TL_EINVAL, TL_ENOMEM. */
TL_API int tl_opts_set_tls_cert(
    tl_opts *o, const char *cert_file, const char *key_file);
/* How long a request may wait for its answer (ms, > 0). */
TL_API int tl_opts_set_timeout(tl_opts *o, int ms);
/* Reconnect backoff: first delay and ceiling (ms); doubles each try. */
TL_API int tl_opts_set_reconnect(tl_opts *o, int min_ms, int max_ms);
TL_API int tl_opts_set_log(tl_opts *o, tl_log_fn fn, void *arg);

/* ---- client ---- */

typedef struct tl_client tl_client;

/* Connect and open a session (hello). Blocks until the broker answered or
 * the timeout passed. The options are copied. Errors: TL_ECONN (cannot
 * reach the broker), TL_ETIMEDOUT, TL_ENOTAUTH, TL_ENOTSUP (protocol
 * version), TL_ENOMEM. After a connection loss the client reconnects by
 * itself with backoff; requests in flight then fail with TL_ECONN (they may
 * or may not have been applied: retry idempotently, e.g. creates with
 * natural ids).
 *
 * With a list of URLs (a cluster) the client tries them in order, once
 * each, and fails with the most telling error met (a refusal over
 * TL_ECONN) when none answers; after a loss it starts again with the URL
 * last used and goes round the list, backing off after each whole round.
 * A node that answers TL_ENOTLEADER applied nothing: the client connects to
 * the leader it names (added to the list when it is not in it) or, naming
 * none, to the next URL after a short pause, re-subscribes its consumers
 * there and sends the request again; the caller sees TL_ENOTLEADER only if
 * the request's timeout passes first. While it switches, and with more
 * than one URL while it is disconnected, new requests wait for the next
 * connection (up to their timeout, then TL_ECONN) instead of failing at
 * once; so do lease operations, also those queued but not sent when the
 * connection broke. After an unknown outcome (TL_ELEADERLOST, or a connection
 * lost with more than one URL) only requests that cannot apply twice are sent
 * again: reads, and writes whose answer the cluster keeps (creates, moves,
 * deletes, lease operations, locks, DLQ kicks, topic creation and deletion,
 * within three quarters of its cluster_answers_ms of their first sending:
 * the repeat gets the first answer and is applied once); against a
 * cluster that keeps none, creates
 * whose every message has its own id (a repeat of one that had landed
 * answers TL_EEXISTS in its tl_put.err). The others fail with
 * TL_ELEADERLOST / TL_ECONN. docs/sdk.md has the details. */
TL_API int tl_client_open(tl_client **out, const tl_opts *o);
/* Close the connection. Requests in flight fail with TL_ECLOSED; consumers
 * of this client must be closed first. */
TL_API void tl_client_close(tl_client *c);
/* The broker's clock minus this machine's, as last measured (ms). */
TL_API int64_t tl_client_clock_offset(tl_client *c);
/* The broker's current time as estimated from the last measurement. */
TL_API int64_t tl_client_broker_now(tl_client *c);

/* ---- topics (administration) ---- */

typedef struct tl_topic_conf {
	const char *name;
	uint32_t buckets;         /* 0 = default (16) */
	uint32_t max_body;        /* 0 = default (256 KiB) */
	int64_t default_lease_ms; /* 0 = default (30 s) */
	int64_t max_lease_ms;     /* 0 = default (12 h) */
	uint32_t max_deliveries;  /* 0 = never dead-letter */
} tl_topic_conf;

typedef struct tl_topic_info {
	char name[TL_MAX_NAME_LEN + 1];
	uint32_t buckets;
	uint32_t max_body;
	int64_t default_lease_ms;
	int64_t max_lease_ms;
	uint32_t max_deliveries;
	uint64_t messages;   /* on the timeline */
	uint64_t available;  /* due now */
	uint64_t waiting;    /* due later, not leased */
	uint64_t processing; /* leased */
	uint64_t dead;       /* in the dead-letter list */
} tl_topic_info;

/* Errors: TL_ETOPICEXISTS, TL_EBADID, TL_ETOOLARGE, TL_EINVAL. */
TL_API int tl_topic_create(tl_client *c, const tl_topic_conf *conf);
/* Delete a topic and every message in it. Errors: TL_ENOTOPIC. */
TL_API int tl_topic_delete(tl_client *c, const char *name);
/* Errors: TL_ENOTOPIC. */
TL_API int tl_topic_get(tl_client *c, const char *name, tl_topic_info *out);
/* Every topic; free *out with tl_free. */
TL_API int tl_topic_list(tl_client *c, tl_topic_info **out, size_t *n);

/* Free memory returned by the library (lists). Accepts NULL. */
TL_API void tl_free(void *p);

/* ---- producer ---- */

/* One message to create. Fill the inputs; the library fills the results. */
typedef struct tl_put {
	const char *id; /* natural id, or NULL: the broker makes one */
	size_t id_len;  /* 0 with a non-NULL id: strlen(id) */
	int64_t ts;     /* UTC ms, or a delay when rel */
	bool rel;       /* ts is "in ts ms" on the broker's clock */
	const void *body;
	size_t body_len;
	/* Recurrence (every_ms 0 = none). The message is due at ts, then on
	 * the grid ts + k * every_ms. Exactly one end is required, an
	 * open-ended recurrence is refused (TL_EINVAL): `times` occurrences in
	 * all, or the last grid point at or before `until` (UTC ms). The
	 * holder's delete (tl_lease_delete) completes an occurrence and places
	 * the next one in the same write; after the last one the message is
	 * gone. When grid points passed while nobody consumed, the next one is
	 * the first grid point after now; with catch_up every missed
	 * occurrence is delivered, in order. `until` 0 = not given. Errors
	 * (in err): TL_EINVAL (no end, both ends, until < ts, an end or
	 * catch_up without every_ms), TL_ERANGE (every_ms < 0, a grid that
	 * leaves the timestamp range, over 2^32-1 occurrences). */
	int64_t every_ms;
	uint32_t times;
	int64_t until;
	bool catch_up;
	/* results */
	int err; /* TL_OK, TL_EEXISTS, TL_ETOOLARGE, ... */
	char id_out[TL_MAX_ID_LEN + 1]; /* the id (natural or generated) */
	uint64_t version;
	int64_t due; /* the resolved due time */
	/* Sent more than once: the first attempt's outcome was unknown (a
	 * failover, a lost connection). A cluster that keeps answers (the
	 * default) answered the repeat as it answered the first attempt, or
	 * applied it if the first never landed: the message exists once. A
	 * cluster that keeps none (cluster_answers_ms 0; then only creates
	 * whose every message has its own id are sent again): TL_EEXISTS
	 * means the first attempt had landed, TL_OK that it had not, or that
	 * it had and the message was delivered and deleted before the repeat
	 * arrived (then created twice and delivered again). */
	bool resent;
} tl_put;

/* Create n messages in topic as producer group `group`; returns when every
 * one is durably stored or failed (each with its own err). Returns TL_OK
 * when the batch was answered (check each put->err), or the error that
 * failed the whole batch (TL_ENOTOPIC, TL_ECONN, TL_ETIMEDOUT, ...). */
TL_API int tl_put_batch(
    tl_client *c, const char *topic, const char *group, tl_put *puts, size_t n);

typedef void (*tl_done_fn)(void *arg, int err);

/* As tl_put_batch, but returns at once; `done` is called (from a library
 * thread) when the batch was answered, with the batch error. The puts must
 * stay valid until then. Returns an error (and never calls done) when the
 * batch could not be sent. */
TL_API int tl_put_batch_async(tl_client *c, const char *topic,
    const char *group, tl_put *puts, size_t n, tl_done_fn done, void *arg);

/* One message, convenience: at UTC ms `at`. id may be NULL; id_out (may be
 * NULL) receives the id, at least TL_MAX_ID_LEN + 1 bytes. */
TL_API int tl_put_at(tl_client *c, const char *topic, const char *group,
    const char *id, int64_t at, const void *body, size_t len, char *id_out);
/* One message due `in_ms` from now on the broker's clock. */
TL_API int tl_put_in(tl_client *c, const char *topic, const char *group,
    const char *id, int64_t in_ms, const void *body, size_t len, char *id_out);

/* Owner operations. version 0 means "whatever the current version".
 * Errors: TL_ENOTFOUND, TL_ENOTOWNER, TL_ELEASED (an active lease: the
 * consumer has the message), TL_EVERSION, TL_ERANGE. */
TL_API int tl_move(tl_client *c, const char *topic, const char *group,
    const char *id, uint64_t version, int64_t ts, bool rel,
    uint64_t *new_version);
TL_API int tl_delete(tl_client *c, const char *topic, const char *group,
    const char *id, uint64_t version);
/* As tl_move, but returns at once. TL_OK means sent: `done` is then called
 * exactly once, from the client's callback thread (never under a library
 * lock, so it may call the library, blocking calls included), with the
 * move's result: TL_OK or the error tl_move would have returned (plus
 * TL_ECONN, TL_ETIMEDOUT, and TL_ECLOSED when the client closes first).
 * Any other return is an error of the call itself (TL_EINVAL for a NULL
 * client, id or done, TL_EBADID, TL_ETOOLARGE, TL_ECLOSED, TL_ECONN while
 * disconnected, TL_ENOMEM) and done is never called. The strings are
 * copied before it returns. It shares tl_move's encoding and reply. */
TL_API int tl_move_async(tl_client *c, const char *topic, const char *group,
    const char *id, uint64_t version, int64_t ts, bool rel, tl_done_fn done,
    void *arg);

/* A message as stored. */
typedef struct tl_message {
	char id[TL_MAX_ID_LEN + 1];
	size_t id_len;
	int64_t ts;
	uint32_t bucket;
	char owner[TL_MAX_NAME_LEN + 1];
	char consumer[TL_MAX_NAME_LEN + 1]; /* lease holder or "" */
	uint64_t version;
	uint32_t deliveries;
	int64_t created_at;
	/* recurrence: every_ms 0 = none; seq = the current occurrence (1 =
	 * the first), last = the last occurrence's seq, start = the first
	 * occurrence's grid time */
	int64_t every_ms;
	int64_t start;
	uint32_t seq;
	uint32_t last;
	bool catch_up;
	void *body;
	size_t body_len;
} tl_message;

/* Look a message up; free with tl_message_free. Errors: TL_ENOTFOUND. */
TL_API int tl_get(
    tl_client *c, const char *topic, const char *id, tl_message **out);
TL_API void tl_message_free(tl_message *m);

typedef struct tl_entry {
	char id[TL_MAX_ID_LEN + 1];
	int64_t ts;
	uint64_t version;
	bool leased;
} tl_entry;

/* A producer group's messages in timeline order, up to `limit` (<= 1000)
 * after the cursor (NULL = from the start; pass the last entry of the
 * previous page). Free *out with tl_free. */
TL_API int tl_list(tl_client *c, const char *topic, const char *group,
    uint32_t limit, const tl_entry *after, tl_entry **out, size_t *n,
    bool *more);

typedef struct tl_counts {
	uint64_t available;
	uint64_t waiting;
	uint64_t processing;
} tl_counts;

/* Messages with from <= ts < to, by status, at the broker's now. */
TL_API int tl_count(
    tl_client *c, const char *topic, int64_t from, int64_t to, tl_counts *out);

/* ---- consumer ---- */

typedef struct tl_consumer tl_consumer;
typedef struct tl_lease tl_lease;

/* Called for every delivered message, from the consumer's own thread (or,
 * with inline_delivery, the client's connection thread), one at a time.
 * The callback owns the lease: it must end with tl_lease_free (after
 * delete / release, or to keep the lease running out), or hand the lease
 * to an asynchronous operation whose done frees it. It must not close its
 * own consumer nor the client. */
typedef void (*tl_deliver_fn)(void *arg, tl_lease *lease);

typedef struct tl_consumer_conf {
	const char *topic;
	const char *consumer_id;  /* stable across restarts: leases come back */
	int64_t lease_ms;         /* 0 = the topic's default */
	uint32_t credit;          /* leases held at once; 0 = 1 */
	tl_deliver_fn on_message; /* NULL: use tl_consumer_poll */
	void *arg;
	/* With on_message: call it on the client's connection thread as
	 * each delivery is read, instead of handing the lease to the
	 * consumer's own thread; a thread wake-up less on the way to the
	 * callback (the lowest lateness, see docs/sdk.md). The callback then
	 * must not block: while it runs the client reads nothing, so a
	 * blocking call of this client made from it (tl_lease_delete,
	 * tl_put, ...) fails with TL_EINVAL. Use the _async lease
	 * operations, or hand the lease to a thread of your own. */
	bool inline_delivery;
} tl_consumer_conf;

/* Subscribe. Leases this consumer id still holds (e.g. after a restart)
 * are delivered again first. Errors: TL_ENOTOPIC, TL_EINVAL,
 * TL_ELEASELIMIT (lease_ms over the topic's maximum). */
TL_API int tl_consumer_open(
    tl_consumer **out, tl_client *c, const tl_consumer_conf *conf);
/* Wait up to timeout_ms (0 = don't wait, -1 = forever) for delivered
 * messages; stores up to max leases in out[] and their count in *n (0 on
 * timeout). Only without on_message. Errors: TL_ECLOSED. */
TL_API int tl_consumer_poll(
    tl_consumer *c, tl_lease **out, size_t max, size_t *n, int timeout_ms);
/* Unsubscribe and free. Leases held stay held until they run out. */
TL_API void tl_consumer_close(tl_consumer *c);
/* Leases reported lost by the broker (run out, taken over) so far. */
TL_API uint64_t tl_consumer_lost(tl_consumer *c);

TL_API const char *tl_lease_id(const tl_lease *l);
TL_API size_t tl_lease_id_len(const tl_lease *l);
TL_API uint64_t tl_lease_version(const tl_lease *l);
/* When the lease runs out (broker time). */
TL_API int64_t tl_lease_until(const tl_lease *l);
/* When the message was due (for a delivery after a lease ran out: when
 * that lease ran out). */
TL_API int64_t tl_lease_due(const tl_lease *l);
/* Where its producer placed the message: the time given at create or
 * by the last move (or a consumer's release); a lease does not change it.
 * The original due time, also on a delivery after a lease ran out. */
TL_API int64_t tl_lease_placed_at(const tl_lease *l);
TL_API uint32_t tl_lease_deliveries(const tl_lease *l);
/* The occurrence of a recurring message this lease is for: 1 for the
 * first, +1 per grid point; the same again when a lease ran out and the
 * occurrence is redelivered. 0 for a message without recurrence. */
TL_API uint32_t tl_lease_seq(const tl_lease *l);
/* The occurrence's grid time (start + (seq - 1) * every_ms); for a
 * message without recurrence, tl_lease_placed_at. */
TL_API int64_t tl_lease_occurrence_at(const tl_lease *l);
/* The last occurrence's seq (0 without recurrence): seq == last means
 * the delete ends the series. */
TL_API uint32_t tl_lease_last(const tl_lease *l);
TL_API const char *tl_lease_owner(const tl_lease *l);
TL_API const void *tl_lease_body(const tl_lease *l, size_t *len);

/* Extend the lease to now + ms (broker time). On success the lease handle
 * carries the new version and expiry. Errors: TL_ELEASEEXPIRED (it ran out:
 * stop working on it), TL_ELEASED (another consumer has it now),
 * TL_EVERSION, TL_ENOTFOUND, TL_ELEASELIMIT, TL_ETOOCLOSE. */
TL_API int tl_lease_extend(tl_lease *l, int64_t ms);
/* Put the message back on the timeline at ts (UTC ms, or a delay when
 * rel); the lease ends. Errors as extend. */
TL_API int tl_lease_release(tl_lease *l, int64_t ts, bool rel);
/* Delete the message: the work is done. Errors as extend. */
TL_API int tl_lease_delete(tl_lease *l);
/* Free the handle (does not end the lease). Not while an asynchronous
 * operation on it is pending. */
TL_API void tl_lease_free(tl_lease *l);

/* Asynchronous lease operations: as tl_lease_extend, tl_lease_release and
 * tl_lease_delete, but they return at once. TL_OK means queued: `done`
 * is then called exactly once, from the client's callback thread (never
 * under a library lock, so it may call the library, blocking calls and
 * tl_lease_free included), with the operation's result: TL_OK or the
 * error the blocking call would have returned (the same list, plus
 * TL_ECONN, TL_ETIMEDOUT, and TL_ECLOSED when the consumer or client
 * closes first). Any other return is an error of the call itself
 * (TL_EINVAL for a NULL lease or done or a bad ms / ts, TL_ECLOSED,
 * TL_ECONN while disconnected, TL_ENOMEM) and done is never called.
 * The lease handle must stay valid (not freed) until done was called,
 * even after tl_consumer_close; on success the handle carries the new
 * version (and, for extend, expiry) before done runs. They share the
 * blocking calls' path: operations of the same kind on one consumer,
 * blocking or not, are coalesced into one batch frame. Thread-safe; for
 * one lease, start the next operation from done, not before. */
TL_API int tl_lease_extend_async(
    tl_lease *l, int64_t ms, tl_done_fn done, void *arg);
TL_API int tl_lease_release_async(
    tl_lease *l, int64_t ts, bool rel, tl_done_fn done, void *arg);
TL_API int tl_lease_delete_async(tl_lease *l, tl_done_fn done, void *arg);

/* ---- named leases (locks) ---- */

/* Take the lease on one message by its id, now, rather than waiting for
 * a delivery: a lock with a heartbeat (extend), released or deleted with
 * the tl_lease_* calls like a delivered lease. */
typedef struct tl_lock_conf {
	const char *topic;
	const char *id;          /* the lock's name: the message id */
	size_t id_len;           /* 0: strlen(id) */
	const char *consumer_id; /* who holds it; the permission table's
	                          * consumer id */
	int64_t lease_ms;        /* 0 = the topic's default */
	/* Non-NULL: when the message does not exist, create it (due now, no
	 * body) as this producer group first, in the same write. */
	const char *create_group;
} tl_lock_conf;

/* One attempt. On success *out is a lease handle: tl_lease_extend (the
 * heartbeat), tl_lease_release (0, true: available to others at once),
 * tl_lease_delete and their _async forms work on it as on a delivered
 * lease; free it with tl_lease_free before tl_client_close. Errors:
 * TL_ELEASED (another holder has it: *held_until, if not NULL, receives
 * until when, broker time; the holder is never named), TL_ENOTFOUND (no
 * such message and no create_group), TL_ENOTDUE (it is placed later:
 * released to a future time; *held_until receives that time),
 * TL_ENOTOPIC, TL_ENOTAUTH, TL_ELEASELIMIT, TL_EBADID / TL_ETOOLARGE
 * (names and id), TL_EINVAL, TL_EDEAD, and the request errors (TL_ECONN,
 * TL_ETIMEDOUT). *out and *held_until are untouched on other errors. Any
 * thread. */
TL_API int tl_lock_try(tl_client *c, const tl_lock_conf *conf, tl_lease **out,
    int64_t *held_until);
/* As tl_lock_try, retried while the lock is held (TL_ELEASED, TL_ENOTDUE)
 * or the connection is down (TL_ECONN) until it succeeds or timeout_ms
 * passed (-1 = forever): TL_ETIMEDOUT. Waits until the reported
 * held_until, at most 1 s between attempts; other errors return at once. */
TL_API int tl_lock(
    tl_client *c, const tl_lock_conf *conf, int timeout_ms, tl_lease **out);

/* ---- dead letters ---- */

/* Messages that were delivered more than the topic's max_deliveries times
 * without being deleted. Free *out with tl_free. */
TL_API int tl_dlq_list(tl_client *c, const char *topic, uint32_t limit,
    const tl_entry *after, tl_entry **out, size_t *n, bool *more);
/* Put a dead letter back on the timeline, due in_ms from now, with its
 * delivery count reset. Errors: TL_ENOTFOUND. */
TL_API int tl_dlq_kick(
    tl_client *c, const char *topic, const char *id, int64_t in_ms);

/* ---- cluster administration (docs/cluster.md) ---- */

typedef struct tl_cluster_node {
	uint64_t id;
	char raft[256]; /* its Raft address, HOST:PORT */
	char url[256];  /* its client URL, as the answering node knows it */
	char role[16];  /* voter, standby or spare */
	/* The last log entry the leader knows this node has (0 unless the
	 * answering node leads): the leader's last index minus this is the
	 * node's lag. */
	uint64_t match_index;
	bool clock_known;        /* it answered the clock watch */
	int64_t clock_offset_ms; /* its clock minus the answering node's */
} tl_cluster_node;

typedef struct tl_cluster_info {
	uint64_t self_id;   /* the answering node */
	uint64_t leader_id; /* 0: none known */
	uint64_t term;
	uint64_t commit_index;
	uint64_t applied_index;
	uint64_t last_index;
	char state[16]; /* follower, candidate, leader or unavailable */
	bool serving;   /* it leads and serves requests */
	bool degraded;  /* its clock is off the majority's: it will not lead */
	int64_t majority_offset_ms; /* the majority's clock minus its own */
	tl_cluster_node *nodes;     /* the configuration, n of them */
	size_t n;
} tl_cluster_info;

/* The view of the node the client is connected to (any node answers).
 * Free with tl_cluster_info_free. Errors: TL_ENOTSUP (not a cluster). */
TL_API int tl_cluster_status(tl_client *c, tl_cluster_info *out);
TL_API void tl_cluster_info_free(tl_cluster_info *s);
/* Hand the leadership to node id (0: any other voter); returns once it
 * moved. Needs an admin principal when auth is on. Errors: TL_ENOTFOUND
 * (no such voter), TL_ETIMEDOUT (it did not move within the election
 * timeout), TL_EBUSY (a change is in progress). */
TL_API int tl_cluster_transfer(tl_client *c, uint64_t id);
/* Add node id (Raft address HOST:PORT, client URL url) as a voter: it
 * catches up first (a node started with cluster_join = on), then votes;
 * returns once it does. url is replicated to every node (their redirects
 * and status name it). Errors: TL_EINVAL (id or address in use, bad
 * address, url empty, over 255 bytes, a list, or of a scheme the SDK does
 * not dial), TL_EBUSY. */
TL_API int tl_cluster_add(
    tl_client *c, uint64_t id, const char *raft, const char *url);
/* Remove node id from the cluster. Errors: TL_ENOTFOUND, TL_EBUSY. */
TL_API int tl_cluster_remove(tl_client *c, uint64_t id);

#ifdef __cplusplus
}
#endif
#endif
