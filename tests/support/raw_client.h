/*
 * A small blocking client of Timeline's wire protocol for the broker's
 * end-to-end suites, and helpers that run the real broker binary.
 *
 * The client speaks raw frames over an nng byte stream: a reader thread
 * reads whole frames (partial reads are joined) and queues them with the
 * wall-clock time of their arrival; a request waits for the reply with its
 * request id while pushes (DELIVER, LEASE_LOST) stay queued for
 * rc_wait_push. Nothing here hides a protocol error: replies come back as
 * frames, and the helpers return the broker's error code.
 *
 * The broker helpers describe timelined by the settings the suites vary
 * (metrics port, window, durability, topics ...) and run it through the
 * launcher (launch.h) on an ipc socket in a private temporary directory.
 * Every wait has a deadline; none sleeps to "let something happen".
 *
 * Part of the test support library (tltestsupport_wire), compiled once.
 */
#ifndef TL_TESTS_BROKER_RAW_CLIENT_H
#define TL_TESTS_BROKER_RAW_CLIENT_H

#include <nng/nng.h>

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"
#include "launch.h"
#include "msgs.h"

/* ---- the broker process ---- */

typedef struct rc_broker {
	char *dir; /* private temp dir: data/, the socket, logs */
	char data[600];
	char sock[600];
	char url[700];
	int metrics_port;       /* 0: --metrics off */
	int64_t window_ms;      /* 0: the broker's default */
	const char *durability; /* NULL: the broker's default */
	const char *log_level;  /* NULL: debug */
	int64_t idle_ms;        /* 0: the broker's default idle timeout */
	const char *topics[8];  /* --topic values; none: "t" */
	int ntopics;
	const char *args[9]; /* more arguments, as given (NULL-ended) */
	tt_proc proc;        /* the process: pid, log, ready file */
} rc_broker;

/* Make the directory and fill in the paths (no process yet). */
void rc_broker_init(rc_broker *b, const char *tag);
/* Start the broker on b's directory and wait (at most timeout_ms) for its
 * ready file; fails the test if it exits or times out. */
void rc_broker_spawn(rc_broker *b, int timeout_ms);
/* init + spawn with a 20 s deadline. */
void rc_broker_start(rc_broker *b, const char *tag);
/* Send sig and reap within timeout_ms (then SIGKILL). Returns the wait
 * status, or -1 when there was no process. */
int rc_broker_signal(rc_broker *b, int sig, int timeout_ms);
/* SIGTERM, reap, remove the directory. */
void rc_broker_stop(rc_broker *b);
/* Print the broker's log to stderr (for failures). */
void rc_broker_dump_log(const rc_broker *b);

/* A suite whose tests each start the broker B: defines it, a fini that
 * stops it, and the TestSuite (timeout 60 s). */
#define RC_SUITE(suite)                \
	static rc_broker B;            \
	static void suite##_fini(void) \
	{                              \
		rc_broker_stop(&B);    \
	}                              \
	TestSuite(suite, .fini = suite##_fini, .timeout = 60)

/* ---- frames ---- */

typedef struct rc_frame {
	struct rc_frame *next;
	tlp_hdr h;
	uint8_t *data; /* header + body */
	size_t len;
	int64_t rx_ms; /* wall clock (UTC ms) when it was read */
	int64_t rx_us; /* the same in microseconds */
} rc_frame;

void rc_frame_free(rc_frame *f);
/* A reader over the frame's body. */
void rc_frame_body(const rc_frame *f, tlp_r *r);

/* ---- the client ---- */

typedef struct rc_client {
	nng_stream_dialer *dialer;
	nng_stream *st;
	pthread_t th;
	bool th_started;
	nng_aio *rx_aio; /* the reader's; rc_close cancels it */
	_Atomic bool closing;
	_Atomic bool th_done;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	rc_frame *head, *tail;
	bool eof;   /* the broker closed the connection */
	int rx_err; /* nng error that ended the reader */
	pthread_mutex_t tx_mtx;
	uint32_t next_id;
} rc_client;

/* Connect (without HELLO); NULL on failure. */
rc_client *rc_connect(const char *url, int timeout_ms);
/* Connect and HELLO as `name` with the current wall clock; asserts, so
 * only on the test's main thread. */
rc_client *rc_open(const char *url, const char *name);
void rc_close(rc_client *c);

/* Send bytes as they are (all of them); nng error code. */
int rc_send_raw(rc_client *c, const void *p, size_t n);
/* Whether the broker closed the connection, waiting at most timeout_ms. */
bool rc_wait_eof(rc_client *c, int timeout_ms);
/* The next frame of any kind, waiting at most timeout_ms; NULL if none. */
rc_frame *rc_next_frame(rc_client *c, int timeout_ms);

typedef void (*rc_enc_fn)(tlp_w *w, const void *arg);
/* Send a request and wait for its reply (pushes stay queued). Returns
 * TL_OK with *rep set, TL_ETIMEDOUT or TL_ECLOSED. */
int rc_call(rc_client *c, uint8_t op, rc_enc_fn enc, const void *arg,
    int timeout_ms, rc_frame **rep);
/* rc_call and decode the reply head: returns the broker's error code
 * (or TL_ETIMEDOUT / TL_ECLOSED / TL_EPROTO). On TL_OK, *rep (if not
 * NULL) keeps the frame and *r stands after the code. */
int rc_req(rc_client *c, uint8_t op, rc_enc_fn enc, const void *arg,
    rc_frame **rep, tlp_r *r);

/* The next push of the given op (0 = any push), waiting at most
 * timeout_ms; NULL if none came. Other frames stay queued. */
rc_frame *rc_wait_push(rc_client *c, uint8_t op, int timeout_ms);
/* The same over several clients: *which says whose. */
rc_frame *rc_wait_push_any(
    rc_client **cs, size_t n, uint8_t op, int timeout_ms, size_t *which);

/* ---- operations ---- */

int rc_hello(
    rc_client *c, const char *name, int64_t client_ms, tlp_hello_rep *out);
/* The same with a token (auth = on); NULL: none. */
int rc_hello_token(rc_client *c, const char *name, const char *token,
    int64_t client_ms, tlp_hello_rep *out);
/* HELLO naming the client (tlp_hello.client_id; 0: none), with the wall
 * clock; out->answers_ms says how long the broker keeps its answers. */
int rc_hello_client(
    rc_client *c, const char *name, uint64_t client_id, tlp_hello_rep *out);
/* A batch op; on TL_OK *res / *nres hold the per-item results (free
 * with rc_results_free, which also frees the frame they point into). */
typedef struct rc_results {
	rc_frame *f;
	tlp_result *v;
	size_t n;
} rc_results;
int rc_batch(rc_client *c, uint8_t op, const char *topic, const char *who,
    const tlp_item *items, size_t n, rc_results *out);
void rc_results_free(rc_results *r);
/* One item: returns the request's error, or else the item's error; *res
 * gets the item's version and ts. */
int rc_one(rc_client *c, uint8_t op, const char *topic, const char *who,
    const char *id, uint64_t version, int64_t ts, bool rel, const char *body,
    tlp_result *res);
int rc_subscribe(rc_client *c, const char *topic, const char *consumer,
    int64_t lease_ms, uint32_t credit);
/* GET: *m points into *f (free it with rc_frame_free). */
int rc_get(
    rc_client *c, const char *topic, const char *id, tlp_msg *m, rc_frame **f);
/* TOPIC_GET: the counts (name left NULL). */
int rc_topic_get(rc_client *c, const char *topic, tlp_topic *t);
int rc_topic_create(rc_client *c, const char *topic, int64_t default_lease);

/* A DELIVER push decoded: d.v points into f. */
typedef struct rc_deliver {
	rc_frame *f;
	tlp_deliver d;
} rc_deliver;
/* Wait for a DELIVER and decode it: 1 when one came, 0 on timeout, a
 * negative TL_ error when it did not decode. Safe off the test's main
 * thread (it asserts nothing). */
int rc_wait_deliver(rc_client *c, int timeout_ms, rc_deliver *out);
void rc_deliver_free(rc_deliver *d);
/* ACK every message of a DELIVER (id and version) as `consumer`: the
 * request's error; on TL_OK *res holds the per-message results (free with
 * rc_results_free). Asserts nothing, so safe off the main thread. */
int rc_ack_all(rc_client *c, const char *topic, const char *consumer,
    const rc_deliver *dv, rc_results *res);

/* ---- below the client ---- */

/* A plain AF_UNIX stream socket connected to the broker's socket path
 * (for tests that need to see every byte); the fd, or -1 with errno. */
int rc_unix_connect(const char *path);
/* A HELLO frame (protocol TLP_VERSION, request id 1) from `name` with the
 * current wall clock into b (initialised here; tli_buf_fini it). */
int rc_hello_frame(tli_buf *b, const char *name);

/* ---- HTTP ---- */

/* GET http://127.0.0.1:port/path; returns the body (malloc'd, NUL
 * terminated) or NULL. *status gets the HTTP status. */
char *rc_http_get(int port, const char *path, int timeout_ms, int *status);

#endif
