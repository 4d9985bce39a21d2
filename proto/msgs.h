/*
 * The bodies of Timeline's wire operations: one C struct per shape, an
 * encoder and a strict decoder for each. docs/protocol.md shows each layout;
 * both the broker and the SDK use these functions, so the two ends cannot
 * disagree. Decoded strings and bodies point into the frame buffer, which
 * must outlive the struct; arrays of items are allocated (after their count
 * was checked against TL_MAX_BATCH) and freed with the matching _fini.
 *
 * Every reply body is an array whose first element is an error code: a
 * failed request answers [err, detail]; a successful one [0, fields...].
 */
#ifndef TL_PROTO_MSGS_H
#define TL_PROTO_MSGS_H

#include <stdbool.h>

#include "frame.h"

typedef struct tlp_str {
	const char *p;
	size_t n;
} tlp_str;

#define TLP_STR(s) ((tlp_str){(s), (s) != NULL ? strlen(s) : 0})

/* Whether url[0..n) starts with a scheme the SDK dials (tcp://, tcp4://,
 * tcp6://, ipc://, tls+tcp://) and has something after it: a URL the
 * broker may hand a client (a leader's), checked by both ends. */
bool tlp_url_scheme_ok(const char *url, size_t n);

/* ---- sessions ---- */

typedef struct tlp_hello {
	uint64_t proto;    /* TLP_VERSION the client speaks */
	tlp_str name;      /* client name, for logs and metrics */
	tlp_str role;      /* "producer", "consumer", "admin" or "" */
	int64_t client_ms; /* the client's wall clock */
	tlp_str token;     /* credentials, or empty */
	/* optional: the client's id, the same on all its connections (0:
	 * none); with it a broker that keeps answers answers a write request
	 * sent again under the same request id as the first time */
	uint64_t client_id;
} tlp_hello;

typedef struct tlp_hello_rep {
	int64_t broker_ms;
	tlp_str broker_name;
	uint64_t session_id;
	/* optional: how long (ms) the broker keeps the answer to a write
	 * request of a HELLO with a client id (0: it does not) */
	int64_t answers_ms;
} tlp_hello_rep;

void tlp_enc_hello(tlp_w *w, const tlp_hello *m);
int tlp_dec_hello(tlp_r *r, tlp_hello *m);
void tlp_enc_hello_rep(tlp_w *w, const tlp_hello_rep *m);
int tlp_dec_hello_rep(tlp_r *r, tlp_hello_rep *m);

/* PING: [client_ms]; reply [0, broker_ms]. */
void tlp_enc_ping(tlp_w *w, int64_t ms);
int tlp_dec_ping(tlp_r *r, int64_t *ms);
void tlp_enc_ping_rep(tlp_w *w, int64_t broker_ms);
int tlp_dec_ping_rep(tlp_r *r, int64_t *broker_ms);

/* ---- topics ---- */

typedef struct tlp_topic {
	tlp_str name;
	uint32_t buckets;
	uint32_t max_body;
	int64_t default_lease_ms;
	int64_t max_lease_ms;
	uint32_t max_deliveries;
	/* in replies only */
	uint64_t messages;
	uint64_t available;
	uint64_t waiting;
	uint64_t processing;
	uint64_t dead;
} tlp_topic;

/* TOPIC_CREATE: [name, buckets, max_body, default_lease_ms, max_lease_ms,
 * max_deliveries]; reply [0]. */
void tlp_enc_topic_create(tlp_w *w, const tlp_topic *t);
int tlp_dec_topic_create(tlp_r *r, tlp_topic *t);
/* TOPIC_DELETE, TOPIC_GET: [name]. */
void tlp_enc_name(tlp_w *w, tlp_str name);
int tlp_dec_name(tlp_r *r, tlp_str *name);
/* TOPIC_GET reply [0, topic]; TOPIC_LIST reply [0, [topic...]]. */
void tlp_enc_topic(tlp_w *w, const tlp_topic *t);
int tlp_dec_topic(tlp_r *r, tlp_topic *t);
int tlp_dec_topic_list(tlp_r *r, tlp_topic **v, size_t *n);

/* ---- message batches ----
 * CREATE, MOVE, DELETE (owner) and EXTEND, RELEASE, ACK (lease holder),
 * DLQ_KICK: [topic, who, [[id|nil, version, ts, rel, body|nil, every_ms,
 * times, until, catch_up]...]]
 * reply [0, [[err, id, version, ts, deliveries, seq]...]] in item order. */

typedef struct tlp_item {
	tlp_str id;       /* empty on CREATE: the broker generates one */
	uint64_t version; /* expected version (0 = any where allowed) */
	int64_t ts;       /* absolute UTC ms, or a delay when rel */
	bool rel;
	const void *body;
	size_t body_len;
	/* CREATE: a recurrence (every_ms 0 = none); 0 elsewhere */
	int64_t every_ms;
	uint32_t times;
	int64_t until;
	bool catch_up;
} tlp_item;

typedef struct tlp_batch {
	tlp_str topic;
	tlp_str who; /* producer group or consumer id */
	tlp_item *items;
	size_t n;
} tlp_batch;

typedef struct tlp_result {
	int err;
	tlp_str id;
	uint64_t version;
	int64_t ts;
	uint32_t deliveries;
	uint32_t seq; /* a recurring message's occurrence after the op; 0 */
} tlp_result;

void tlp_enc_batch(tlp_w *w, const tlp_batch *b);
int tlp_dec_batch(tlp_r *r, tlp_batch *b);
void tlp_batch_fini(tlp_batch *b);
void tlp_enc_results(tlp_w *w, const tlp_result *v, size_t n);
int tlp_dec_results(tlp_r *r, tlp_result **v, size_t *n);

/* ---- reads ---- */

typedef struct tlp_msg {
	tlp_str id;
	int64_t ts;
	uint32_t bucket;
	tlp_str owner;
	tlp_str consumer;
	uint64_t version;
	uint32_t deliveries;
	int64_t created_at;
	const void *body;
	size_t body_len;
	int64_t every_ms; /* the recurrence: every_ms 0 = none */
	int64_t start;
	uint32_t seq;
	uint32_t last;
	bool catch_up;
} tlp_msg;

/* GET: [topic, id]; reply [0, [id, ts, bucket, owner, consumer, version,
 * deliveries, created_at, body, every_ms, start, seq, last, catch_up]]. */
void tlp_enc_get(tlp_w *w, tlp_str topic, tlp_str id);
int tlp_dec_get(tlp_r *r, tlp_str *topic, tlp_str *id);
void tlp_enc_msg(tlp_w *w, const tlp_msg *m);
int tlp_dec_msg(tlp_r *r, tlp_msg *m);

typedef struct tlp_list {
	tlp_str topic;
	tlp_str owner; /* LIST: the owner; DLQ_LIST: unused */
	uint32_t limit;
	bool has_cursor;
	int64_t cursor_ts;
	tlp_str cursor_id;
} tlp_list;

typedef struct tlp_entry {
	tlp_str id;
	int64_t ts;
	uint64_t version;
	bool locked;
} tlp_entry;

/* LIST, DLQ_LIST: [topic, owner, limit, cursor_ts|nil, cursor_id|nil];
 * reply [0, [[id, ts, version, locked]...], more]. */
void tlp_enc_list(tlp_w *w, const tlp_list *l);
int tlp_dec_list(tlp_r *r, tlp_list *l);
void tlp_enc_entries(tlp_w *w, const tlp_entry *v, size_t n, bool more);
int tlp_dec_entries(tlp_r *r, tlp_entry **v, size_t *n, bool *more);

/* COUNT: [topic, from, to]; reply [0, available, waiting, processing]. */
void tlp_enc_count(tlp_w *w, tlp_str topic, int64_t from, int64_t to);
int tlp_dec_count(tlp_r *r, tlp_str *topic, int64_t *from, int64_t *to);
void tlp_enc_counts(tlp_w *w, uint64_t a, uint64_t wt, uint64_t p);
int tlp_dec_counts(tlp_r *r, uint64_t *a, uint64_t *wt, uint64_t *p);

/* ---- consumers ---- */

typedef struct tlp_sub {
	tlp_str topic;
	tlp_str consumer;
	int64_t lease_ms; /* 0 = the topic's default */
	uint32_t credit;  /* leases held at once, >= 1 */
} tlp_sub;

/* SUBSCRIBE: [topic, consumer, lease_ms, credit]; UNSUBSCRIBE: [topic,
 * consumer, 0, 0]; reply [0]. */
void tlp_enc_sub(tlp_w *w, const tlp_sub *s);
int tlp_dec_sub(tlp_r *r, tlp_sub *s);

typedef struct tlp_delivery {
	tlp_str id;
	uint64_t version;    /* the lease's version: quote it to extend etc. */
	int64_t lease_until; /* the lease runs out at this time */
	int64_t due_ts;      /* when the message was due */
	uint32_t deliveries;
	int64_t placed_at; /* where its producer placed it (create, move) */
	tlp_str owner;
	const void *body;
	size_t body_len;
	uint32_t seq; /* a recurring message's occurrence, else 0 */
	int64_t every_ms;
	int64_t start;
	uint32_t last;
} tlp_delivery;

typedef struct tlp_deliver {
	tlp_str topic;
	tlp_str consumer;
	tlp_delivery *v;
	size_t n;
} tlp_deliver;

/* DELIVER push: [topic, consumer, [[id, version, lease_until, due_ts,
 * deliveries, owner, body, placed_at, seq, every_ms, start, last]...]].
 * LEASE_LOST push: the same with only id and version set. */
void tlp_enc_deliver(tlp_w *w, const tlp_deliver *d);
int tlp_dec_deliver(tlp_r *r, tlp_deliver *d);
void tlp_deliver_fini(tlp_deliver *d);

/* ---- named leases ---- */

typedef struct tlp_lock {
	tlp_str topic;
	tlp_str consumer;     /* who takes the lease */
	tlp_str id;           /* the message: the lock's name */
	int64_t lease_ms;     /* 0 = the topic's default */
	tlp_str create_group; /* empty: do not create a missing message */
} tlp_lock;

/* LOCK: [topic, consumer, id, lease_ms, create_group|nil]; reply [0,
 * delivery] with the delivery's layout (tlp_delivery). A held lock
 * (TL_ELEASED) or one placed later (TL_ENOTDUE) answers [err, detail,
 * until]: when the lease runs out, or when the message is due. */
void tlp_enc_lock(tlp_w *w, const tlp_lock *m);
int tlp_dec_lock(tlp_r *r, tlp_lock *m);
void tlp_enc_lock_rep(tlp_w *w, const tlp_delivery *d);
int tlp_dec_lock_rep(tlp_r *r, tlp_delivery *d);
void tlp_enc_error_until(tlp_w *w, int err, const char *detail, int64_t until);
/* After tlp_dec_reply_head of a failed reply with one field left. */
int tlp_dec_error_until(tlp_r *r, int64_t *until);

/* ---- cluster administration ---- */

/* CLUSTER: [action: str, id: uint, raft: str, url: str]. action "status"
 * (every node answers its own view), "transfer" (the leadership to node
 * id, 0 = any voter), "add" (node id at Raft address raft, client URL
 * url, as a voter), "remove" (node id). */
typedef struct tlp_cluster_req {
	tlp_str action;
	uint64_t id;
	tlp_str raft;
	tlp_str url;
} tlp_cluster_req;

/* A node of the status: [id, raft, url, role, match, clock_known,
 * clock_offset_ms]. role: voter, standby, spare; match: the last entry
 * the leader knows it has (0 unless the answering node leads);
 * clock_offset_ms: its clock minus the answering node's. */
typedef struct tlp_cluster_node {
	uint64_t id;
	tlp_str raft;
	tlp_str url;
	tlp_str role;
	uint64_t match;
	bool clock_known;
	int64_t clock_offset_ms;
} tlp_cluster_node;

/* The status reply: [0, self, leader, term, commit, applied, last, state,
 * serving, degraded, majority_offset_ms, [node...]]. */
typedef struct tlp_cluster_status {
	uint64_t self_id;
	uint64_t leader_id; /* 0: none known */
	uint64_t term;
	uint64_t commit_index;
	uint64_t applied_index;
	uint64_t last_index;
	tlp_str state; /* follower, candidate, leader, unavailable */
	bool serving;
	bool degraded; /* its clock is off the majority's */
	int64_t majority_offset_ms;
	tlp_cluster_node *nodes;
	size_t n;
} tlp_cluster_status;

void tlp_enc_cluster_req(tlp_w *w, const tlp_cluster_req *m);
int tlp_dec_cluster_req(tlp_r *r, tlp_cluster_req *m);
void tlp_enc_cluster_status(tlp_w *w, const tlp_cluster_status *m);
/* After tlp_dec_reply_head; m->nodes is allocated (free with
 * tlp_cluster_status_fini). */
int tlp_dec_cluster_status(tlp_r *r, tlp_cluster_status *m);
void tlp_cluster_status_fini(tlp_cluster_status *m);

/* SNAPSHOT_READ: [name: str, file: str, offset: uint, max: uint]; the
 * reply [0, size: uint, data: bin]: the file's size and at most max of its
 * bytes from offset (fewer at its end). */
#define TLP_SNAP_PART (1u << 20) /* the most one reply carries */

typedef struct tlp_snap_read {
	tlp_str name;
	tlp_str file;
	uint64_t offset;
	uint64_t max;
} tlp_snap_read;

typedef struct tlp_snap_chunk {
	uint64_t size;
	const void *data;
	size_t data_len;
} tlp_snap_chunk;

/* SNAPSHOT_LATEST: [min_index: uint]; the reply is a tlp_snap_chunk whose
 * data is the manifest of a snapshot at store index min_index or later
 * (size: its length). */
typedef struct tlp_snap_latest {
	uint64_t min_index;
} tlp_snap_latest;

void tlp_enc_snap_read(tlp_w *w, const tlp_snap_read *m);
int tlp_dec_snap_read(tlp_r *r, tlp_snap_read *m);
void tlp_enc_snap_latest(tlp_w *w, const tlp_snap_latest *m);
int tlp_dec_snap_latest(tlp_r *r, tlp_snap_latest *m);
void tlp_enc_snap_chunk(tlp_w *w, const tlp_snap_chunk *m);
/* After tlp_dec_reply_head; data points into the frame. */
int tlp_dec_snap_chunk(tlp_r *r, tlp_snap_chunk *m);

/* ---- replies ---- */

/* [err, detail] for a failed request. */
void tlp_enc_error(tlp_w *w, int err, const char *detail);
/* [err, detail, leader]: TL_ENOTLEADER with the client URL of the cluster's
 * leader ("" when none is known). */
void tlp_enc_error_leader(
    tlp_w *w, int err, const char *detail, const char *leader);
/* After tlp_dec_reply_head of a failed reply with one field left: the
 * leader's URL (empty when the reply names none). */
int tlp_dec_error_leader(tlp_r *r, tlp_str *leader);
/* Read the head of any reply: its error code and, when it failed, the
 * detail text (may be empty). On TL_OK the reader stands at the first
 * field after the code; *nfields says how many follow. */
int tlp_dec_reply_head(tlp_r *r, int *err, tlp_str *detail, size_t *nfields);
/* [0] for a request with nothing to return. */
void tlp_enc_ok(tlp_w *w);

#endif
