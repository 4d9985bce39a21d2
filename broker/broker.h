/*
 * Internals of the broker daemon shared between its files: the broker
 * object, configuration, sessions, the request worker, the dispatcher, the
 * clock, logging and metrics.
 *
 * DESIGN. Threads: nng's own threads run the I/O callbacks (accept, read,
 * write) and do no blocking work: a complete frame is queued for the
 * request worker. The request worker (one thread) decodes and validates
 * requests in arrival order, answers reads from the store directly and
 * submits writes to the store's writer thread without waiting; the store's
 * completion (on the writer thread) encodes the reply, queues it on the
 * session and tells the dispatcher what changed. The dispatcher thread
 * keeps each subscribed topic's near-future window, takes leases for due
 * messages through the store and pushes them to consumers with credit.
 *
 * Lock order: dispatcher lock (dsp.mtx) before a session's lock; the
 * worker queue lock and the metrics are leaves. No lock is held while
 * calling into the store's blocking functions, except the dispatcher's
 * reads of the store, which never wait for the writer.
 */
#ifndef TL_BROKER_H
#define TL_BROKER_H

#include <nng/nng.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "frame.h"
#include "sha256.h"
#include "msgs.h"
#include "store.h"

/* ---- logging ---- */

typedef enum { TLB_ERROR, TLB_WARN, TLB_INFO, TLB_DEBUG } tlb_level;

extern tlb_level tlb_log_level;
/* A log line: level, a stable id (e.g. "S010"), printf text. */
void tlb_log(tlb_level lvl, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the broker clock ----
 * Timeline time that follows the wall clock but never jumps: it advances
 * with the monotonic clock and is slewed towards the wall clock by at most
 * TLB_SLEW_PER_S ms per second, so an NTP step does not fire a backlog at
 * once. */
#define TLB_SLEW_PER_S 100
int64_t tlb_clock_now(void *arg);
void tlb_clock_init(void);

/* ---- metrics ---- */

#define TLB_LAT_BUCKETS 14
extern const double tlb_lat_bounds[TLB_LAT_BUCKETS];

typedef struct tlb_metrics {
	_Atomic uint64_t ops[TLP_OP_MAX_];      /* requests by operation */
	_Atomic uint64_t items_ok[TLP_OP_MAX_]; /* items that succeeded */
	_Atomic uint64_t items_err[TLP_OP_MAX_];
	_Atomic uint64_t leases;
	_Atomic uint64_t lease_fail;
	_Atomic uint64_t dead_lettered;
	_Atomic uint64_t delivered;
	_Atomic uint64_t lost; /* LEASE_LOST notices */
	_Atomic uint64_t lat_count[TLB_LAT_BUCKETS + 1];
	_Atomic uint64_t lat_sum_us;
	_Atomic uint64_t early; /* must stay 0 */
	_Atomic uint64_t sessions;
	_Atomic uint64_t sessions_total;
	_Atomic uint64_t proto_errors;
	_Atomic uint64_t auth_refusals[TLP_OP_MAX_];  /* TL_ENOTAUTH */
	_Atomic uint64_t quota_refusals[TLP_OP_MAX_]; /* per-group limits */
} tlb_metrics;

void tlb_metrics_lateness(tlb_metrics *m, int64_t late_us);
void tlb_label_escape(char *out, size_t cap, const char *in);

/* ---- sessions ---- */

typedef struct tlb_broker tlb_broker;
typedef struct tlb_session tlb_session;

struct tlb_session {
	tlb_broker *b;
	nng_stream *st;
	uint64_t id;
	_Atomic int refs;
	pthread_mutex_t mtx;
	bool closed;
	bool hello;
	/* closing once its queued replies are sent (under mtx); no request
	 * is handled meanwhile */
	bool lingering;
	const char *linger_why;
	nng_aio *linger_aio;     /* the drain before such a close */
	_Atomic uint64_t rx_ops; /* reads completed (the drain's progress) */
	uint64_t linger_mark;
	int linger_rounds;
	bool linger_armed; /* under mtx */
	/* starts of reads and sends vs the stream's close (server.c) */
	pthread_mutex_t io_mtx;
	bool io_closed;
	char name[TL_MAX_NAME_LEN + 1];
	_Atomic int64_t clock_offset_ms;
	/* read side (nng callbacks only) */
	nng_aio *rx_aio;
	uint8_t rx_len[TLP_LEN_BYTES];
	uint8_t *rx_buf;
	size_t rx_need;
	size_t rx_got;
	bool rx_body;
	/* write side (under mtx) */
	nng_aio *tx_aio;
	tli_buf tx_pending;  /* frames waiting to be sent */
	tli_buf tx_inflight; /* the bytes of the send in progress */
	size_t tx_off;
	bool tx_busy;
	tlb_session *next; /* broker's session list */
	/* authentication: set by HELLO on the worker; tok_hash and authed
	 * under mtx (a reload reads them) */
	bool authed;
	uint8_t tok_hash[TLP_SHA256_LEN];
	struct tlb_auth *auth;            /* the table prin came from, held */
	const struct tlb_principal *prin; /* worker thread only */
};

void tlb_session_hold(tlb_session *s);
void tlb_session_rele(tlb_session *s);
/* Queue a complete frame (len prefix included) for sending. Frames for a
 * closed session are dropped. Closes a session whose unsent output exceeds
 * TLB_MAX_PENDING (a client that does not read). */
void tlb_session_send(tlb_session *s, const uint8_t *p, size_t n);
/* Encode and send a reply: `enc` writes the body. */
void tlb_session_close(tlb_session *s, const char *why);
/* Close once the replies queued so far are sent (an error reply that must
 * reach the client before the end); frames received meanwhile are dropped
 * unanswered. */
void tlb_session_close_after_reply(tlb_session *s, const char *why);
/* Whether the session is closed or closing: its requests are dropped. */
bool tlb_session_ending(tlb_session *s);
/* The open sessions, each held (tlb_session_rele each, then tli_free the
 * array), so that they can be walked outside the list's lock. NULL with
 * *n = 0 when there are none or no memory. */
tlb_session **tlb_sessions_hold(tlb_broker *b, size_t *n);

#define TLB_MAX_PENDING (64u * 1024u * 1024u)

/* ---- request worker ---- */

typedef struct tlb_job {
	struct tlb_job *next;
	tlb_session *s;
	uint8_t *frame; /* header + body, owned */
	size_t len;
} tlb_job;

void tlb_worker_push(tlb_broker *b, tlb_job *j);
void tlb_handle(tlb_broker *b, tlb_job *j);

/* ---- dispatcher ---- */

typedef struct tlb_dsp tlb_dsp;

int tlb_dsp_start(tlb_broker *b);
void tlb_dsp_stop(tlb_broker *b);
/* A message got timestamp ts (create, move, release, extend, kick): put it
 * in the window if the window already covers ts. */
void tlb_dsp_note(tlb_broker *b, const char *topic, uint32_t bucket, int64_t ts,
    const char *id, size_t id_len, uint64_t version);
/* Consumer bookkeeping. subscribe answers the request itself. */
int tlb_dsp_subscribe(
    tlb_broker *b, tlb_session *s, const tlp_sub *sub, uint32_t reqid);
int tlb_dsp_unsubscribe(tlb_broker *b, tlb_session *s, const tlp_sub *sub);
void tlb_dsp_session_gone(tlb_broker *b, tlb_session *s);
/* A lease op finished: ACK/RELEASE end the lease (credit back), EXTEND
 * moves its expiry. */
void tlb_dsp_lease_done(tlb_broker *b, const char *topic, const char *consumer,
    size_t consumer_len, const char *id, size_t id_len, int op, int64_t new_ts,
    uint64_t new_version);
void tlb_dsp_topic_gone(tlb_broker *b, const char *topic);
/* The same two under one lock held by the caller (a batch's effects). */
void tlb_dsp_lock(tlb_broker *b);
void tlb_dsp_unlock(tlb_broker *b);
void tlb_dsp_note_locked(tlb_broker *b, const char *topic, uint32_t bucket,
    int64_t ts, const char *id, size_t id_len, uint64_t version);
void tlb_dsp_lease_done_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len,
    int op, int64_t new_ts, uint64_t new_version);
/* Metrics: one line per subscription. */
void tlb_dsp_metrics(tlb_broker *b, tli_buf *out);

/* ---- the broker ---- */

struct tlb_broker {
	tlb_conf conf;
	tli_store *store;
	tlb_metrics m;
	_Atomic bool stopping;

	nng_stream_listener *lst[TLB_MAX_LISTEN];
	nng_aio *acc_aio[TLB_MAX_LISTEN];
	char bound[TLB_MAX_LISTEN][300];
	int nlst;

	pthread_mutex_t sess_mtx;
	tlb_session *sessions;
	_Atomic uint64_t next_session;
	pthread_cond_t sess_cv; /* signalled when a session is freed */
	int live_sessions;

	pthread_mutex_t wq_mtx;
	pthread_cond_t wq_cv;
	tlb_job *wq_head;
	tlb_job *wq_tail;
	pthread_t worker;
	bool worker_started;
	bool worker_stop;

	tlb_dsp *dsp;
	void *http;    /* metrics server */
	void *msc4140; /* the in-process MSC4140 gateway (tlg *) */

	/* authentication (auth.c): the current credentials table (NULL with
	 * auth off) under auth_mtx, and the creates in flight per group */
	pthread_mutex_t auth_mtx;
	struct tlb_auth *auth;
	struct tlb_inflight *inflight;
};

/* Load the credentials at start (auth on) and make the in-flight table.
 * Logs and returns -1 on a bad file. */
int tlb_auth_start(tlb_broker *b);
/* SIGHUP: load the credentials file again; on success new sessions use
 * it and open sessions whose token is gone are closed. A bad file keeps
 * the old table (logged). */
void tlb_auth_reload(tlb_broker *b);
void tlb_auth_stop(tlb_broker *b);
/* The current table, held (release with tlb_auth_rele), or NULL. */
struct tlb_auth *tlb_auth_current(tlb_broker *b);

int tlb_server_start(tlb_broker *b);
void tlb_server_stop(tlb_broker *b);
void tlb_server_wait(tlb_broker *b);
void tlb_dsp_free(tlb_broker *b);
int tlb_metrics_start(tlb_broker *b);
void tlb_metrics_stop(tlb_broker *b);

/* Encode a whole frame into a fresh buffer and send it on s. */
typedef void (*tlb_enc_fn)(tlp_w *w, const void *arg);
void tlb_send_frame(tlb_session *s, uint8_t op, uint8_t flags, uint32_t reqid,
    tlb_enc_fn enc, const void *arg);
void tlb_send_error(
    tlb_session *s, uint8_t op, uint32_t reqid, int err, const char *detail);

#endif
