/*
 * The network side of the broker: the listeners (tcp, ipc, tls+tcp), one
 * session per connection with its read loop and write queue, and the
 * request worker thread that complete frames are queued for. A session is
 * opaque outside server.c: others hold and release it, send on it, close
 * it, and read or set what the protocol gives it (name, clock offset,
 * principal) through the functions below.
 *
 * Threads: nng's callback threads run the reads, writes and accepts, and
 * never block; the request worker (one thread, tl-worker) runs the handler
 * given to tlb_server_start for each frame, in arrival order, except that
 * a session's frames are held while its long read (tlb_session_read) runs
 * on a reader thread (tl-reader); any thread may send on or close a
 * session. Lock order: the dispatcher's lock before
 * a session's lock (mtx) before its I/O lock (io_mtx); the session list's
 * lock, the worker queue's lock and the input memory's lock are leaves (a
 * session is held, and the list lock dropped, before anything is done with
 * it).
 */
#ifndef TL_BROKER_SERVER_H
#define TL_BROKER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "timeline/limits.h"

typedef struct tlb_broker tlb_broker;
typedef struct tlb_session tlb_session;
struct tlb_auth;
struct tlb_principal;

/* A complete request frame queued for the worker; it holds its session. */
typedef struct tlb_job {
	struct tlb_job *next;
	tlb_session *s;
	uint8_t *frame; /* header + body, owned */
	size_t len;
	/* server.c's: the input memory it holds until handled, and whether
	 * its session's read loop waits for it (a session before HELLO) */
	size_t resv;
	bool rx_parked;
} tlb_job;

/* What the server calls out to; set by whoever starts it. */
typedef struct tlb_server_hooks {
	/* On the request worker: handle j, then free it (tlb_handle). */
	void (*handle)(tlb_broker *b, tlb_job *j);
	/* A session closed (on the closing thread, no lock held): forget it.
	 * It is still held by the caller. */
	void (*closed)(tlb_broker *b, tlb_session *s);
} tlb_server_hooks;

/* Start the request worker and the listeners of b->conf. Returns -1 when
 * a listener cannot start (logged); call tlb_server_stop and
 * tlb_server_wait all the same. */
int tlb_server_start(tlb_broker *b, const tlb_server_hooks *hooks);
/* Write the ready file (the listeners' bound addresses): once everything
 * the broker serves is up, the metrics too. */
void tlb_server_ready(tlb_broker *b);
/* Stop accepting, finish the queued requests, close every session. */
void tlb_server_stop(tlb_broker *b);
/* After the store is closed (every completion ran): wait until every
 * session is freed, then free the listeners and the server. */
void tlb_server_wait(tlb_broker *b);
/* The URL listener i is bound to (port 0 replaced), or "". */
const char *tlb_server_url(tlb_broker *b, int i);

/* ---- sessions ---- */

void tlb_session_hold(tlb_session *s);
void tlb_session_rele(tlb_session *s);
/* Queue a complete frame (len prefix included) for sending. Frames for a
 * closed session are dropped. Closes a session whose unsent output exceeds
 * TLB_MAX_PENDING (a client that does not read). */
void tlb_session_send(tlb_session *s, const uint8_t *p, size_t n);
/* Close now: no more reads or sends, queued output is dropped, the closed
 * hook runs once. why is logged (at info; NULL: the peer went away, at
 * debug). The session is freed when its last reference goes. */
void tlb_session_close(tlb_session *s, const char *why);
/* Close once the replies queued so far are sent (an error reply that must
 * reach the client before the end); frames received meanwhile are dropped
 * unanswered. */
void tlb_session_close_after_reply(tlb_session *s, const char *why);
/* Whether the session is closed or closing: its requests are dropped. */
bool tlb_session_ending(tlb_session *s);

#define TLB_MAX_PENDING (64u * 1024u * 1024u)
/* A frame body is read into a buffer of at most this much at first, then
 * doubled as bytes arrive (never sized by the declared length alone). */
#define TLB_RX_CHUNK (64u * 1024u)
/* Before its HELLO is accepted a session may send frames of at most
 * conf.max_hello_bytes; all sessions' frames being read or waiting for the
 * worker count against conf.max_input_bytes (a session whose next frame
 * does not fit stops reading until it does). */

/* Encode a whole frame into a fresh buffer and send it on s: `enc` writes
 * the body. Returns TL_OK, or TL_ETOOLARGE / TL_ENOMEM when the frame
 * could not be built (then nothing was sent). */
typedef void (*tlb_enc_fn)(tlp_w *w, const void *arg);
int tlb_session_send_enc(tlb_session *s, uint8_t op, uint8_t flags,
    uint32_t reqid, tlb_enc_fn enc, const void *arg);
/* The same for a reply; a frame that cannot be built is logged (S030). */
void tlb_send_frame(tlb_session *s, uint8_t op, uint8_t flags, uint32_t reqid,
    tlb_enc_fn enc, const void *arg);
void tlb_send_error(
    tlb_session *s, uint8_t op, uint32_t reqid, int err, const char *detail);

/* A read that scans the store (COUNT, LIST, DLQ_LIST, TOPIC_GET,
 * TOPIC_LIST), run on a reader thread so that the request worker goes on
 * with other sessions. fn replies on s and frees arg; run is false when s
 * was closed before the read started (then fn only frees arg). */
typedef void (*tlb_read_fn)(tlb_broker *b, tlb_session *s, void *arg, bool run);
/* On the request worker, from a handler whose checks passed: queue fn for
 * a reader thread. s's later frames are held, not handled, until fn has
 * returned (its reply is queued), so the session's order is kept; other
 * sessions are not held. TL_OK, or TL_ENOMEM (nothing queued: arg is still
 * the caller's). */
int tlb_session_read(tlb_session *s, tlb_read_fn fn, void *arg);
/* The reader threads. */
#define TLB_READERS 2
/* How much nicer the reader threads are than the rest of the broker. */
#define TLB_READER_NICE 10

/* What HELLO set: the session's number, the client's name ("" before) and
 * whether HELLO was accepted. Name and greeting are the worker's. */
uint64_t tlb_session_id(const tlb_session *s);
const char *tlb_session_name(const tlb_session *s);
bool tlb_session_greeted(const tlb_session *s);
/* HELLO accepted: the client's name (cut at TL_MAX_NAME_LEN). */
void tlb_session_greet(tlb_session *s, const char *name, size_t n);
/* The client's clock minus the broker's: set it, get the previous one. */
int64_t tlb_session_clock_offset_swap(tlb_session *s, int64_t off_ms);
/* The client id its HELLO named (0: none): the key of its kept answers. */
void tlb_session_set_client(tlb_session *s, uint64_t id);
uint64_t tlb_session_client(tlb_session *s);

/* Authentication (worker thread). The principal, or NULL before HELLO or
 * with auth off. */
const struct tlb_principal *tlb_session_principal(const tlb_session *s);
/* HELLO with auth on: the session is principal p of table a (the caller's
 * reference to a moves to the session) and its token hashes to h; with p
 * NULL the HELLO was refused: a is released, the session is not greeted
 * and not authenticated. */
void tlb_session_set_principal(tlb_session *s, struct tlb_auth *a,
    const struct tlb_principal *p, const uint8_t *h);
/* Before a request with auth on: cur is the current table (the caller's
 * reference moves here). When it is not the one the principal came from
 * (SIGHUP since), the token is looked up again. Returns false when the
 * token is gone. */
bool tlb_session_auth_refresh(tlb_session *s, struct tlb_auth *cur);
/* After SIGHUP: close every authenticated session whose token the current
 * table no longer knows. */
void tlb_server_close_revoked(tlb_broker *b);

/* A copy of what the metrics show per greeted session. */
typedef struct tlb_session_info {
	uint64_t id;
	char name[TL_MAX_NAME_LEN + 1];
	int64_t clock_offset_ms;
} tlb_session_info;

/* The greeted sessions, newest first (free with tli_free); NULL with *n 0
 * when there are none or no memory. */
tlb_session_info *tlb_sessions_info(tlb_broker *b, size_t *n);

#endif
