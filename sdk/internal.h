/*
 * The inside of libtimeline, shared by its files: the options, the client
 * with its connection, request table, send queue and callback queue, the
 * consumer with its delivery queue and pending lease operations, and the
 * lease handle. Nothing here is installed.
 *
 * DESIGN. A client runs three threads. The connection thread dials, says
 * HELLO, re-subscribes the open consumers and then reads frames, completing
 * requests and queueing deliveries; on a read error it fails every request
 * in flight with TL_ECONN and reconnects with backoff. Given several URLs
 * (a cluster) it goes round them; a TL_ENOTLEADER reply parks its request
 * and makes it leave for the leader named (or the next URL) once the
 * replies in flight are in, and parked requests are sent again on the next
 * session (see "following the cluster's leader" in client.c). The send thread
 * writes the send queue (many frames per send), builds the
 * coalesced lease-op batches, sends PINGs and times requests out. The
 * callback thread runs user completion callbacks (tl_put_batch_async, the
 * tl_lease_*_async ops), so no user code runs on the reader or under a
 * lock. A consumer with
 * on_message has one more thread that feeds the callback from its queue,
 * unless its deliveries are inline (the connection thread calls it).
 *
 * Locking: one mutex per client (c->mtx) guards the client and all its
 * consumers and leases' list links. Nothing is called out of the library
 * while it is held, and nng is only asked to close streams under it.
 */
#ifndef TL_SDK_INTERNAL_H
#define TL_SDK_INTERNAL_H

#include <nng/nng.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "timeline/timeline.h"

#include "base.h"
#include "frame.h"
#include "htab.h"
#include "mp.h"
#include "msgs.h"

#define TLI_PING_MS 5000
/* A connection that accepts no byte of a send for this long, or sends
 * nothing (not even a ping reply) for TLI_IDLE_MS, is dead: nng 1.5.2 was
 * seen to leave both a send and a receive pending forever on an ipc stream
 * whose peer was killed. */
#define TLI_STALL_MS 3000
#define TLI_IDLE_MS (3 * TLI_PING_MS)
/* With a cluster's URLs a paused or cut-off node must be left quickly for
 * the new leader: pings every second, a connection silent for 3 s is dead,
 * and a node that does not answer HELLO within 3 s is passed over. */
#define TLI_CLUSTER_PING_MS 1000
#define TLI_CLUSTER_IDLE_MS (3 * TLI_CLUSTER_PING_MS)
#define TLI_TABLE_SIZE 1024u
/* URLs in a list given to tl_opts_set_url, and the room for leader URLs a
 * cluster names that are not in it. */
#define TLI_MAX_URLS 16
#define TLI_MAX_LEARNED 8
/* The pause before trying the next URL when a node answers TL_ENOTLEADER
 * without naming a leader (an election): doubles from the reconnect
 * backoff's minimum up to this. An election takes an election timeout or
 * two; a longer cap added up to a second to the time a client took to
 * find the new leader after it (tl-bench failover). */
#define TLI_NOLEADER_MAX_MS 200
/* A send is cut into batches of bodies below this many bytes. */
#define TLI_BATCH_BYTES (24u * 1024u * 1024u)

struct tl_opts {
	char *url;
	char *name;
	char *token;
	char *tls_ca;          /* CA file that signs the broker's certificate */
	char *tls_server_name; /* name to verify; default the URL's host */
	char *tls_cert;        /* client certificate file, or NULL */
	char *tls_key;         /* its private key file */
	int timeout_ms;
	int backoff_min_ms;
	int backoff_max_ms;
	tl_log_fn log;
	void *log_arg;
};

typedef struct tli_req tli_req;

/* Called exactly once per submitted request, without the client lock, on a
 * library thread: err is the reply's code (r then stands after the reply
 * head: after the detail of a failed reply), or a local error (TL_ECONN,
 * TL_ETIMEDOUT, TL_ECLOSED, TL_EPROTO for a bad head) with r NULL.
 * It must not block on the network. */
typedef void (*tli_reply_fn)(tli_req *q, int err, tlp_r *r);

struct tli_req {
	tl_client *c;
	uint32_t id;
	uint8_t op;
	int64_t deadline; /* monotonic ms */
	tli_hnode hn;     /* in the request table, by id */
	tli_req *next;    /* a list of expired, failed or parked requests */
	tli_buf frame;    /* the encoded frame, kept until completion so
	                   * the request can be sent again */
	tli_reply_fn on_reply;
	void *arg;
	/* Sending it twice cannot apply it twice (a read, or a create whose
	 * every message carries its own id): after an unknown outcome
	 * (TL_ELEADERLOST, a lost connection to a cluster) it is sent again
	 * on the new leader. Set by the encoder; reads are known by op. */
	bool idem;
	/* Never parked: completed with TL_ENOTLEADER at once, and with
	 * TL_ECONN at once while disconnected (the SUBSCRIBEs of a reconnect,
	 * which the next connection sends anyway; an UNSUBSCRIBE). */
	bool no_park;
	/* Why it waits on the parked list (TL_ENOTLEADER, TL_ELEADERLOST,
	 * TL_ECONN): its error when the deadline passes there. */
	int park_err;
	/* When it was first sent (monotonic ms; 0: not yet): it keeps its
	 * id when sent again, and a write is sent again only while the
	 * broker keeps its answer (tl_client.answers_ms). */
	int64_t sent_ms;
};

/* A blocking caller's completion. The caller sleeps on its own condition
 * variable (with c->mtx), so a completion wakes that caller only, not
 * every thread blocked in the client. */
typedef struct tli_waiter {
	bool done;
	int err;
	pthread_cond_t cv;
} tli_waiter;

/* A closure for the callback thread. */
typedef struct tli_cb {
	void (*fn)(void *arg);
	void *arg;
	struct tli_cb *next;
} tli_cb;

typedef enum tli_state {
	TLI_DOWN = 0,
	TLI_UP,
	TLI_CLOSING,
} tli_state;

typedef struct tli_lop tli_lop;

struct tl_lease {
	/* NULL once the consumer closed: read it under client->mtx (an
	 * unlocked read only says whether the consumer was still open) */
	tl_consumer *_Atomic cons;
	tl_client *client;       /* the consumer's client */
	tl_consumer *own;        /* a lock's lease (tl_lock): the hidden
	                          * consumer it owns, == cons; else NULL */
	tl_lease *lprev, *lnext; /* the consumer's live handles */
	tli_hnode hn;            /* the consumer's live index, by id */
	tl_lease *qnext;         /* the consumer's delivery queue */
	bool queued;
	char *id;
	size_t id_len;
	uint64_t version;
	int64_t until;
	int64_t due;
	int64_t placed;
	uint32_t deliveries;
	uint32_t seq; /* the recurrence: seq 0 = none */
	uint32_t last;
	int64_t every;
	int64_t start;
	char owner[TL_MAX_NAME_LEN + 1];
	void *body;
	size_t body_len;
};

/* One pending lease operation: a blocking caller's (on its stack, done
 * NULL) or an asynchronous one's (allocated, freed after done ran). Both
 * travel the same way: queued on the consumer's pending list, batched by
 * the send thread, completed by lop_done_locked. */
struct tli_lop {
	tl_lease *lease;
	int64_t ts;
	bool rel;
	int64_t deadline;
	tli_lop *next;
	/* A blocking caller sleeps on its own condition variable (with
	 * c->mtx), so a reply of many items wakes each caller once, not
	 * every caller once per item. Unused by asynchronous ops. */
	pthread_cond_t cv;
	/* asynchronous ops: the user's callback, run on the callback thread */
	tl_done_fn done;
	void *arg;
	tli_cb cb;
	/* results */
	bool finished;
	int err;
};

enum { TLI_LOP_EXTEND = 0, TLI_LOP_RELEASE, TLI_LOP_ACK, TLI_LOP_N };

struct tl_consumer {
	tl_client *client;
	tl_consumer *next; /* the client's consumers */
	/* The hidden consumer of one lock lease (sdk/lock.c): it carries
	 * the topic, the consumer id and the pending lease ops, and is never
	 * subscribed nor given deliveries. */
	bool lock;
	/* tl_consumer_open waits for its SUBSCRIBE: a reconnect leaves it
	 * to that request (which the client sends again) */
	bool opening;
	char *topic;
	char *id;
	int64_t lease_ms;
	uint32_t credit;
	tl_deliver_fn on_message;
	void *arg;
	bool closing;
	bool inline_delivery; /* on_message runs on the connection thread */
	bool in_cb;           /* ... and is running now */
	pthread_t thr;
	bool has_thr;
	pthread_cond_t cv; /* the queue became non-empty, or closing */
	tl_lease *qhead, *qtail;
	size_t qlen;
	tl_lease *live; /* handles given out or queued */
	/* The same handles by id, so a delivery finds an older handle of its
	 * id in O(1) with a large credit. Has slots from the start, so adding
	 * never fails (growing may: chains get longer). */
	tli_htab lht;
	size_t nlive;
	uint64_t lost;
	/* lease operations waiting for the send thread, per kind */
	tli_lop *pend[TLI_LOP_N];
	tli_lop *pend_tail[TLI_LOP_N];
	bool dirty;
	tl_consumer *dnext; /* the client's dirty list */
};

/* One address of the broker (or of a cluster's node) with its dialer. */
typedef struct tli_url {
	char *url;
	nng_stream_dialer *d;
	bool own_tcp; /* tcp://: dialled with the client's own socket */
} tli_url;

/* A session's connection: nng's stream (tls+tcp://, ipc://) or, for
 * tcp://, the client's own socket (sdk/sock.c). */
typedef struct tli_conn {
	nng_stream *s; /* NULL: the own socket */
	int fd;        /* -1 with s */
} tli_conn;

/* sdk/sock.c. A wait given a stop gives up (TL_ECONN) when stop(arg) says
 * so, asked at least every 50 ms; without one it sleeps until the socket is
 * ready or the timeout (a shutdown makes it ready). Timeouts <= 0: none. */
typedef bool (*tli_sock_stop_fn)(void *arg);
bool tli_sock_url(const char *url); /* a tcp://HOST:PORT the socket takes */
int tli_sock_dial(
    const char *url, int timeout_ms, tli_sock_stop_fn stop, void *arg, int *fd);
int tli_sock_send(int fd, const uint8_t *p, size_t n, int timeout_ms,
    tli_sock_stop_fn stop, void *arg);
int tli_sock_recv(int fd, uint8_t *p, size_t cap, size_t *got, int timeout_ms,
    tli_sock_stop_fn stop, void *arg);
void tli_sock_shutdown(int fd);

struct tl_client {
	tl_opts opts;
	/* The URLs given (ngiven of them), then leader URLs learned from
	 * TL_ENOTLEADER replies; cur is the one in use (or to dial next).
	 * Appended to by the connection thread only, under mtx. */
	tli_url urls[TLI_MAX_URLS + TLI_MAX_LEARNED];
	size_t nurls, ngiven, cur;
	/* The connection is being left for another node (a TL_ENOTLEADER):
	 * new requests are parked, the reader waits for the replies in
	 * flight, then reconnects to redirect (-1: the next URL). */
	bool draining;
	int redirect;
	int noleader_ms; /* the pause after a reply that named no leader */
	int redirects;   /* redirects since a node last acted as the leader */
	/* TLI_PING_MS, TLI_IDLE_MS and the request timeout for one URL; the
	 * TLI_CLUSTER_ ones (HELLO within at most the idle time) for a list */
	int ping_ms, idle_ms, hello_ms;
	/* Requests waiting for a connection to the leader, oldest first:
	 * sent as soon as one is up, failed at their deadline. */
	tli_req *park_head, *park_tail;
	size_t nparked;
	pthread_mutex_t mtx;
	pthread_cond_t cv;    /* state changes, sender work, waiters */
	pthread_cond_t cb_cv; /* callback queue */
	tli_state state;
	bool closing;
	bool sending;  /* the send thread uses the stream */
	uint64_t gen;  /* connection generation */
	int first_err; /* the first connect's outcome, -1 pending */
	tli_conn *stream;
	bool stream_dead; /* stream was closed: start no I/O on it */
	pthread_t conn_thr, send_thr, cb_thr;
	nng_aio *raio;             /* the connection thread's (dial, read) */
	nng_aio *saio;             /* the send thread's */
	bool conn_done, send_done; /* the thread left its loop */
	uint32_t next_id;
	/* Named in every HELLO (random, never 0): the brokers of a cluster
	 * keep the answers to this client's writes under it and the request
	 * id for answers_ms (the last HELLO's; 0: they do not), so a write
	 * sent again within that time keeps its id and gets its first answer
	 * (docs/sdk.md, "Clusters"). */
	uint64_t client_id;
	_Atomic int64_t answers_ms;
	/* In-flight requests by id; the id is the hash (ids are sequential, so
	 * they spread over the slots as they are). Has TLI_TABLE_SIZE slots
	 * from the start. */
	tli_htab table;
	size_t inflight;
	tli_buf outq;
	tli_cb *cb_head, *cb_tail;
	bool cb_stop;
	tl_consumer *consumers;
	tl_consumer *dirty;
	int64_t offset_ms;
	int64_t next_ping; /* monotonic ms */
	uint64_t session_id;
};

/* A client that knows more than one address (a cluster) waits for the
 * next connection rather than failing requests and lease operations with
 * TL_ECONN. Under c->mtx or on the connection thread. */
bool tli_client_failover(const tl_client *c);

/* logging (never prints; only the user's callback) */
void tli_client_log(tl_client *c, tl_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* options */
/* The next element of a comma-separated URL list at *p (spaces around it
 * trimmed): 1 with *item, *n set and *p advanced, 0 at the end. */
int tli_url_next(const char **p, const char **item, size_t *n);
int tli_opts_copy(tl_opts *dst, const tl_opts *src);
void tli_opts_fini(tl_opts *o);
void tli_opts_defaults(tl_opts *o);

/* requests */
void tli_frame_start(tli_buf *b, tlp_w *w, uint8_t op);
/* A name or id of n bytes: TL_EBADID when empty, TL_ETOOLARGE over max. */
static inline int
tli_len_check(size_t n, size_t max)
{
	return n == 0 ? TL_EBADID : n > max ? TL_ETOOLARGE : TL_OK;
}
/* Queue requests for sending, all or none: TL_ECONN while disconnected,
 * TL_ECLOSED while closing, TL_ENOMEM. On success each on_reply will be
 * called exactly once. Their frames are consumed either way. */
int tli_submit(tl_client *c, tli_req **qs, size_t n);
/* TL_EINVAL on c's connection thread (an inline delivery's callback),
 * where a call waiting for c's replies would wait for itself; else TL_OK. */
int tli_may_block(const tl_client *c);
/* A blocking caller: tli_waiter_init before the request is submitted,
 * then tli_wait (which also finalises the waiter), or tli_waiter_fini when
 * the submit failed. */
void tli_waiter_init(tli_waiter *w);
void tli_waiter_fini(tli_waiter *w);
void tli_wait_done(tl_client *c, tli_waiter *w, int err);
int tli_wait(tl_client *c, tli_waiter *w);
/* Run cb->fn(cb->arg) on the callback thread; cb stays the caller's. */
void tli_cb_post(tl_client *c, tli_cb *cb);
/* The same, with c->mtx held. */
void tli_cb_post_locked(tl_client *c, tli_cb *cb);
/* Under c->mtx: queue one request (its frame finished by the caller's
 * encoder, not yet ended). */
int tli_submit_locked(tl_client *c, tli_req *q);

/* A blocking request: body encoded by the caller after tli_frame_start;
 * dec (may be NULL) reads a successful reply's fields on the reader thread.
 * Returns the reply's code or a local error. Frees the frame. */
typedef int (*tli_dec_fn)(void *arg, tlp_r *r);
int tli_call(
    tl_client *c, tli_buf *frame, uint8_t op, tli_dec_fn dec, void *arg);

/* consumers (consumer.c), called by the client */
void tli_consumer_push(
    tl_client *c, uint8_t op, const uint8_t *body, size_t len);
/* Under c->mtx: build the lease-op frames of the dirty consumers into the
 * send queue. */
void tli_consumer_flush(tl_client *c);
/* Under c->mtx: fail pending lease ops whose deadline passed (or all when
 * all is set) into *failed, to be completed without the lock. */
void tli_consumer_expire(tl_client *c, int64_t now, bool all, tli_lop **failed);
void tli_lops_finish(tl_client *c, tli_lop *list, int err);
/* Queue the SUBSCRIBE of every open consumer (after a reconnect). */
void tli_consumer_resubscribe(tl_client *c);
/* The session is gone (under c->mtx): take out the leases it pushed that
 * the application has not taken yet. That session would have told of
 * their end (LEASE_LOST) and the next one knows nothing of them: its
 * subscription delivers again those that still run (the broker recovers
 * a returning consumer's leases), the others ran out meanwhile and must
 * not reach the application, their messages perhaps leased elsewhere or
 * deleted already. Returns them for tli_consumer_free_leases, after the
 * unlock. */
tl_lease *tli_consumer_session_lost(tl_client *c);
void tli_consumer_free_leases(tl_lease *l);
int tli_sub_encode(tli_buf *b, uint8_t op, const tl_consumer *k);
/* A lease handle from a DELIVER entry or a LOCK reply; NULL without
 * memory. */
tl_lease *tli_lease_new(const tlp_delivery *d);
/* Under c->mtx: take k off the client's lists (consumers, dirty) and move
 * its pending lease ops to *failed. */
void tli_consumer_detach(tl_client *c, tl_consumer *k, tli_lop **failed);
/* Free a consumer taken off the client's lists. */
void tli_consumer_free(tl_consumer *k);
/* Free a lock's lease and its hidden consumer (sdk/lock.c). */
void tli_lock_lease_free(tl_lease *l);

#endif
