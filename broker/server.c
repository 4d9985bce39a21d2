/*
 * The network side of the broker: nng stream listeners (tcp, ipc), one
 * session per connection with its read loop (length-prefixed frames) and
 * its write queue, and the request worker thread that frames are handed to.
 *
 * DESIGN. A session is reference counted: the read loop holds one
 * reference, a send in progress another, and every store submission made
 * for it one more, so a completion arriving after the client went away
 * finds a closed session and drops its reply. I/O callbacks never block;
 * the read loop queues whole frames for the worker and reads on, except
 * that it stops (no read pending, its reference kept) while the input
 * memory is at max_input_bytes, and, before the session's HELLO is
 * accepted, until the worker has handled its last frame; whoever frees the
 * memory, or the worker, starts it again. Output is coalesced: frames
 * queued while a send is in progress go out together in the next send.
 * Reads that scan the store run on reader threads (tlb_session_read) while
 * the worker holds their session's later frames aside; those threads run
 * at a lower CPU priority (TLB_READER_NICE above the broker's nice value), so a
 * long scan takes what the write and delivery paths leave.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "auth.h"
#include "broker.h"
#include "msgs.h"
#include "server.h"

struct tlb_session {
	tlb_broker *b;
	struct tlb_server *srv;
	nng_stream *st;
	uint64_t id;
	_Atomic int refs;
	pthread_mutex_t mtx;
	bool closed;
	bool hello; /* worker thread only */
	/* closing once its queued replies are sent (under mtx); no request
	 * is handled meanwhile */
	bool lingering;
	const char *linger_why;
	nng_aio *linger_aio;     /* the drain before such a close */
	_Atomic uint64_t rx_ops; /* reads completed (the drain's progress) */
	uint64_t linger_mark;
	int linger_rounds;
	bool linger_armed; /* under mtx */
	/* starts of reads and sends vs the stream's close (io_start) */
	pthread_mutex_t io_mtx;
	bool io_closed;
	char name[TL_MAX_NAME_LEN + 1]; /* worker; read under mtx elsewhere */
	_Atomic int64_t clock_offset_ms;
	_Atomic uint64_t client_id; /* HELLO's, 0: none */
	/* read side (nng callbacks only) */
	nng_aio *rx_aio;
	uint8_t rx_len[TLP_LEN_BYTES];
	uint8_t *rx_buf;
	size_t rx_cap; /* rx_buf's size: grows with what arrived */
	size_t rx_need;
	size_t rx_got;
	bool rx_body;
	bool rx_first_done; /* a first frame (the HELLO) was read */
	size_t rx_held; /* of max_input_bytes: rx_cap, or what it waits for */
	/* waiting for input memory (the server's in_mtx) */
	bool in_waiting;
	bool in_closed; /* closed: never waits again */
	size_t in_want; /* the bytes it waits for */
	tlb_session *in_next;
	/* the HELLO deadline: closes a session not greeted by then */
	nng_aio *hello_aio;
	_Atomic bool hello_done;     /* HELLO accepted (set by the worker) */
	char peer[INET6_ADDRSTRLEN]; /* the client's IP address, or "" */
	/* write side (under mtx) */
	nng_aio *tx_aio;
	tli_buf tx_pending;  /* frames waiting to be sent */
	tli_buf tx_inflight; /* the bytes of the send in progress */
	size_t tx_off;
	bool tx_busy;
	tlb_session *next; /* the server's session list */
	/* authentication: set by HELLO on the worker; tok_hash and authed
	 * under mtx (a reload reads them) */
	bool authed;
	uint8_t tok_hash[TLP_SHA256_LEN];
	tlb_auth *auth;            /* the table prin came from, held */
	const tlb_principal *prin; /* worker thread only */
	/* a long read of this session is queued or running on a reader; its
	 * later frames wait in held meanwhile (under the server's wq_mtx) */
	bool read_busy;
	tlb_job *held_head;
	tlb_job *held_tail;
};

/* A long read queued for the reader threads. */
typedef struct tlb_read {
	struct tlb_read *next;
	tlb_session *s; /* held */
	tlb_read_fn fn;
	void *arg;
} tlb_read;

typedef struct acc_ctx {
	struct tlb_server *srv;
	int i;
} acc_ctx;

/* The server part of the broker (b->srv). */
typedef struct tlb_server {
	tlb_broker *b;
	tlb_server_hooks hooks;

	nng_stream_listener *lst[TLB_MAX_LISTEN];
	nng_aio *acc_aio[TLB_MAX_LISTEN];
	acc_ctx acc[TLB_MAX_LISTEN];
	char bound[TLB_MAX_LISTEN][300];
	int nlst;

	pthread_mutex_t sess_mtx; /* the list; a leaf */
	tlb_session *sessions;
	_Atomic uint64_t next_session;
	pthread_cond_t sess_cv; /* signalled when a session is freed */
	int live_sessions;
	int unauth_sessions; /* of them, not greeted yet */
	/* when a refusal at accept was last logged, per reason */
	_Atomic int64_t refused_log_ms[3];
	_Atomic uint64_t refused_unlogged[3];

	/* The input memory (max_input_bytes): the receive buffers and the
	 * frames queued for the worker (in_queued of in_bytes); the sessions
	 * waiting for room, oldest first; the one allowed over the bound. A
	 * leaf. */
	pthread_mutex_t in_mtx;
	uint64_t in_bytes;
	uint64_t in_queued;
	tlb_session *in_head;
	tlb_session *in_tail;
	tlb_session *in_over;

	pthread_mutex_t wq_mtx; /* the worker queue; a leaf */
	pthread_cond_t wq_cv;
	tlb_job *wq_head;
	tlb_job *wq_tail;
	pthread_t worker;
	bool worker_started;
	bool worker_stop;

	/* The long reads (under wq_mtx): queued for the readers, oldest
	 * first. */
	pthread_cond_t rq_cv;
	tlb_read *rq_head;
	tlb_read *rq_tail;
	pthread_t readers[TLB_READERS];
	int nreaders;
	bool readers_stop;
} tlb_server;

static void input_release(tlb_server *sv, size_t n, bool queued);
static void input_unwait(tlb_session *s);

/* ---- sessions ---- */

void
tlb_session_hold(tlb_session *s)
{
	int was = atomic_fetch_add(&s->refs, 1);

	TLI_ASSERT(was > 0); /* a free session cannot be held again */
	(void) was;
}

static void
session_free(tlb_session *s)
{
	tlb_broker *b = s->b;
	tlb_server *sv = s->srv;
	tlb_session **pp;

	/* Only a closed session loses its last reference (the read loop's
	 * ends after a close), and no send is in progress (it holds one). */
	TLI_ASSERT(s->closed && !s->tx_busy);
	pthread_mutex_lock(&sv->sess_mtx);
	for (pp = &sv->sessions; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	sv->live_sessions--;
	if (!atomic_load(&s->hello_done)) {
		sv->unauth_sessions--;
	}
	pthread_cond_broadcast(&sv->sess_cv);
	pthread_mutex_unlock(&sv->sess_mtx);
	/* the buffer of a frame cut off by the close */
	input_release(sv, s->rx_held, false);
	/* The last reference may be dropped inside one of the session's own
	 * aio callbacks: reap instead of free. */
	nng_aio_reap(s->rx_aio);
	nng_aio_reap(s->tx_aio);
	nng_aio_reap(s->linger_aio);
	nng_aio_reap(s->hello_aio);
	nng_stream_free(s->st);
	tli_free(s->rx_buf);
	tli_buf_fini(&s->tx_pending);
	tli_buf_fini(&s->tx_inflight);
	if (s->auth != NULL) {
		tlb_auth_rele(s->auth);
	}
	pthread_mutex_destroy(&s->mtx);
	pthread_mutex_destroy(&s->io_mtx);
	atomic_fetch_sub(&b->m.sessions, 1);
	tli_free(s);
}

void
tlb_session_rele(tlb_session *s)
{
	int was = atomic_fetch_sub(&s->refs, 1);

	TLI_ASSERT(was > 0);
	if (was == 1) {
		session_free(s);
	}
}

void
tlb_session_close(tlb_session *s, const char *why)
{
	bool was;

	pthread_mutex_lock(&s->mtx);
	was = s->closed;
	s->closed = true;
	pthread_mutex_unlock(&s->mtx);
	if (was) {
		return;
	}
	tlb_log(why != NULL ? TLB_INFO : TLB_DEBUG, "S020",
	    "session %llu (%s) closed%s%s", (unsigned long long) s->id,
	    s->name[0] ? s->name : "-", why ? ": " : "", why ? why : "");
	if (s->srv->hooks.closed != NULL) {
		s->srv->hooks.closed(s->b, s);
	}
	pthread_mutex_lock(&s->io_mtx);
	s->io_closed = true;
	nng_stream_close(s->st);
	pthread_mutex_unlock(&s->io_mtx);
	nng_aio_abort(s->linger_aio, NNG_ECLOSED);
	nng_aio_abort(s->hello_aio, NNG_ECLOSED);
	input_unwait(s);
}

/* Closing after an error reply: the reply is sent, but the client may
 * have sent more behind the request that was refused. Closing a socket
 * with unread input makes the peer's next read fail (ECONNRESET), and nng
 * then drops the reply the client had not read yet. So the read loop goes
 * on (the frames are dropped unanswered) until the client has been quiet
 * for LINGER_MS, at most LINGER_ROUNDS times, then the session closes. */
#define LINGER_MS 100
#define LINGER_ROUNDS 20

static void
linger_arm(tlb_session *s)
{
	s->linger_mark = atomic_load(&s->rx_ops);
	nng_sleep_aio(LINGER_MS, s->linger_aio);
}

/* Start the drain once (the session is lingering). */
static void
linger_start(tlb_session *s)
{
	bool start;

	pthread_mutex_lock(&s->mtx);
	TLI_ASSERT(s->lingering); /* only a closing session drains */
	start = !s->linger_armed && !s->closed;
	s->linger_armed = true;
	pthread_mutex_unlock(&s->mtx);
	if (start) {
		tlb_session_hold(s); /* the drain's reference */
		linger_arm(s);
	}
}

static void
linger_cb(void *arg)
{
	tlb_session *s = arg;
	bool again;

	if (nng_aio_result(s->linger_aio) != 0) {
		tlb_session_rele(s); /* closed meanwhile */
		return;
	}
	pthread_mutex_lock(&s->mtx);
	again = !s->closed && atomic_load(&s->rx_ops) != s->linger_mark &&
	    ++s->linger_rounds < LINGER_ROUNDS;
	pthread_mutex_unlock(&s->mtx);
	if (again) {
		linger_arm(s);
		return;
	}
	tlb_session_close(s, s->linger_why);
	tlb_session_rele(s); /* the drain's reference */
}

void
tlb_session_close_after_reply(tlb_session *s, const char *why)
{
	bool now;

	pthread_mutex_lock(&s->mtx);
	s->lingering = true;
	s->linger_why = why;
	now = !s->tx_busy && s->tx_pending.len == 0;
	pthread_mutex_unlock(&s->mtx);
	if (now) {
		linger_start(s); /* else the end of the send starts it */
	}
}

bool
tlb_session_ending(tlb_session *s)
{
	bool r;

	pthread_mutex_lock(&s->mtx);
	r = s->closed || s->lingering;
	pthread_mutex_unlock(&s->mtx);
	return r;
}

/* Start a send or receive unless the stream is closed. An operation
 * started on a closed stream may never complete in nng 1.5.2 (a tcp or ipc
 * receive waits for ever; on a TLS stream not even an abort ends it),
 * while one in progress at the close fails. So starts and the close are
 * serialised by io_mtx, recursive because nng may run a completion (which
 * starts the next operation) on the starting thread. Returns whether the
 * operation started. */
static bool
io_start(tlb_session *s, nng_aio *aio, bool send)
{
	bool ok;

	pthread_mutex_lock(&s->io_mtx);
	ok = !s->io_closed;
	if (ok && send) {
		nng_stream_send(s->st, aio);
	} else if (ok) {
		nng_stream_recv(s->st, aio);
	}
	pthread_mutex_unlock(&s->io_mtx);
	return ok;
}

static void
tx_start(tlb_session *s)
{
	nng_iov iov;

	iov.iov_buf = s->tx_inflight.data + s->tx_off;
	iov.iov_len = s->tx_inflight.len - s->tx_off;
	nng_aio_set_iov(s->tx_aio, 1, &iov);
	tlb_session_hold(s); /* the send may complete and drop its own */
	if (!io_start(s, s->tx_aio, true)) {
		/* closed: end the send as tx_cb ends a failed one */
		pthread_mutex_lock(&s->mtx);
		s->tx_busy = false;
		tli_buf_reset(&s->tx_inflight);
		pthread_mutex_unlock(&s->mtx);
		tlb_session_rele(s); /* the send's reference */
	}
	tlb_session_rele(s);
}

/* Move pending output into flight; called with mtx held. Returns whether a
 * send must be started. */
static bool
tx_swap(tlb_session *s)
{
	tli_buf t;

	TLI_ASSERT_LOCKED(&s->mtx);
	if (s->tx_busy || s->tx_pending.len == 0 || s->closed) {
		return false;
	}
	t = s->tx_inflight;
	s->tx_inflight = s->tx_pending;
	s->tx_pending = t;
	tli_buf_reset(&s->tx_pending);
	s->tx_off = 0;
	s->tx_busy = true;
	return true;
}

static void
tx_cb(void *arg)
{
	tlb_session *s = arg;
	int rv = nng_aio_result(s->tx_aio);
	bool more = false, linger_done;

	pthread_mutex_lock(&s->mtx);
	TLI_ASSERT(s->tx_busy); /* a send completes only once started */
	if (rv == 0) {
		s->tx_off += nng_aio_count(s->tx_aio);
		if (s->tx_off < s->tx_inflight.len) {
			pthread_mutex_unlock(&s->mtx);
			tx_start(s);
			return;
		}
	}
	s->tx_busy = false;
	tli_buf_reset(&s->tx_inflight);
	if (rv == 0) {
		more = tx_swap(s);
	}
	linger_done = !more && s->lingering;
	pthread_mutex_unlock(&s->mtx);
	if (rv != 0) {
		tlb_session_close(s, NULL);
	} else if (linger_done) {
		linger_start(s);
	}
	if (more) {
		tx_start(s);
	} else {
		tlb_session_rele(s); /* the send's reference */
	}
}

void
tlb_session_send(tlb_session *s, const uint8_t *p, size_t n)
{
	bool start = false, overflow = false;

	pthread_mutex_lock(&s->mtx);
	if (!s->closed) {
		if (s->tx_pending.len + n > TLB_MAX_PENDING ||
		    tli_buf_append(&s->tx_pending, p, n) != TL_OK) {
			overflow = true;
		} else {
			start = tx_swap(s);
		}
	}
	pthread_mutex_unlock(&s->mtx);
	if (overflow) {
		tlb_session_close(s, "client does not read its replies");
		return;
	}
	if (start) {
		tlb_session_hold(s);
		tx_start(s);
	}
}

int
tlb_session_send_enc(tlb_session *s, uint8_t op, uint8_t flags, uint32_t reqid,
    tlb_enc_fn enc, const void *arg)
{
	tli_buf b;
	tlp_w w;
	int rv;

	tli_buf_init(&b);
	tlp_frame_begin(&b, &w, op, flags, reqid);
	enc(&w, arg);
	if ((rv = tlp_frame_end(&b, 0)) == TL_OK) {
		tlb_session_send(s, b.data, b.len);
	}
	tli_buf_fini(&b);
	return rv;
}

void
tlb_send_frame(tlb_session *s, uint8_t op, uint8_t flags, uint32_t reqid,
    tlb_enc_fn enc, const void *arg)
{
	if (tlb_session_send_enc(s, op, flags, reqid, enc, arg) != TL_OK) {
		tlb_log(TLB_ERROR, "S030",
		    "session %llu: reply to %s too large "
		    "or out of memory",
		    (unsigned long long) s->id,
		    tlp_op_name(op) ? tlp_op_name(op) : "?");
	}
}

typedef struct err_arg {
	int err;
	const char *detail;
} err_arg;

static void
enc_err(tlp_w *w, const void *arg)
{
	const err_arg *e = arg;
	tlp_enc_error(w, e->err, e->detail);
}

void
tlb_send_error(
    tlb_session *s, uint8_t op, uint32_t reqid, int err, const char *detail)
{
	err_arg e = {err, detail};
	tlb_send_frame(s, op, TLP_F_REPLY, reqid, enc_err, &e);
}

/* ---- the input memory (max_input_bytes) ----
 *
 * The receive buffers of all sessions and the frames queued for the worker
 * count against max_input_bytes. A session that needs more (a body's first
 * chunk, or a bigger buffer as its frame arrives) and does not fit, or
 * finds others waiting already (they go first, so that a long frame is not
 * passed by short ones for ever), waits with its read loop stopped: its
 * client's sends block in the kernel. Memory coming back (a frame handled,
 * a session gone) goes to the waiting sessions in order.
 *
 * Half-read frames waiting for room could hold the whole bound between
 * them with nothing queued to free it, for ever. So when sessions wait and
 * nothing is queued, the oldest waiting one may finish its frame over the
 * bound (one session at a time): the total stays under max_input_bytes
 * plus one frame. */

static void rx_resume(tlb_session *s);

/* Hand out what fits to the waiting sessions; they are returned as a list
 * (through in_next) to resume outside the lock. */
static tlb_session *
input_kick(tlb_server *sv)
{
	uint64_t max = (uint64_t) sv->b->conf.max_input_bytes;
	tlb_session *go = NULL, **tail = &go, *s;

	TLI_ASSERT_LOCKED(&sv->in_mtx);
	while ((s = sv->in_head) != NULL &&
	    (sv->in_bytes + s->in_want <= max ||
	        (sv->in_over == NULL && sv->in_queued == 0))) {
		if (sv->in_bytes + s->in_want > max) {
			sv->in_over = s; /* until its frame is complete */
		}
		sv->in_head = s->in_next;
		if (sv->in_head == NULL) {
			sv->in_tail = NULL;
		}
		s->in_waiting = false;
		sv->in_bytes += s->in_want;
		s->rx_held += s->in_want;
		s->in_next = NULL;
		*tail = s;
		tail = &s->in_next;
	}
	atomic_store(&sv->b->m.input_bytes, sv->in_bytes);
	return go;
}

static void
input_resume(tlb_session *go)
{
	tlb_session *s;

	while ((s = go) != NULL) {
		go = s->in_next; /* s may be freed by its read */
		rx_resume(s);
	}
}

/* n more bytes for s's receive buffer. False when s must wait: its read
 * loop stops, and rx_resume goes on once the bytes are s's. */
static bool
input_take(tlb_session *s, size_t n)
{
	tlb_server *sv = s->srv;
	uint64_t max = (uint64_t) s->b->conf.max_input_bytes;
	tlb_session *go = NULL;
	bool ok;

	pthread_mutex_lock(&sv->in_mtx);
	/* a closed session goes on to fail its read */
	ok = s->in_closed || max == 0 || sv->in_over == s ||
	    (sv->in_head == NULL && sv->in_bytes + n <= max);
	if (ok) {
		sv->in_bytes += n;
		s->rx_held += n;
		atomic_store(&s->b->m.input_bytes, sv->in_bytes);
	} else {
		s->in_waiting = true;
		s->in_want = n;
		s->in_next = NULL;
		if (sv->in_tail != NULL) {
			sv->in_tail->in_next = s;
		} else {
			sv->in_head = s;
		}
		sv->in_tail = s;
		go = input_kick(sv); /* s itself, when it may go over */
	}
	pthread_mutex_unlock(&sv->in_mtx);
	if (!ok) {
		atomic_fetch_add(&s->b->m.input_stalls, 1);
	}
	input_resume(go);
	return ok;
}

/* s's frame is complete: its buffer is now a queued frame. */
static void
input_queue(tlb_session *s)
{
	tlb_server *sv = s->srv;

	pthread_mutex_lock(&sv->in_mtx);
	sv->in_queued += s->rx_held;
	if (sv->in_over == s) {
		sv->in_over = NULL;
	}
	pthread_mutex_unlock(&sv->in_mtx);
}

/* Give back n bytes (of a queued frame, or of a session's buffer), then
 * hand out what fits now. */
static void
input_release(tlb_server *sv, size_t n, bool queued)
{
	tlb_session *go;

	pthread_mutex_lock(&sv->in_mtx);
	TLI_ASSERT(sv->in_bytes >= n); /* only what was taken */
	sv->in_bytes -= n;
	if (queued) {
		TLI_ASSERT(sv->in_queued >= n);
		sv->in_queued -= n;
	}
	go = input_kick(sv);
	pthread_mutex_unlock(&sv->in_mtx);
	input_resume(go);
}

/* s is closing: it leaves the waiting sessions (its read loop ends) and
 * never waits again. */
static void
input_unwait(tlb_session *s)
{
	tlb_server *sv = s->srv;
	tlb_session **pp, *prev = NULL, *go = NULL;
	bool was;

	pthread_mutex_lock(&sv->in_mtx);
	s->in_closed = true;
	if ((was = s->in_waiting)) {
		for (pp = &sv->in_head; *pp != s; pp = &(*pp)->in_next) {
			prev = *pp;
		}
		*pp = s->in_next;
		if (sv->in_tail == s) {
			sv->in_tail = prev;
		}
		s->in_waiting = false;
	}
	if (sv->in_over == s) {
		sv->in_over = NULL; /* its buffer goes when it is freed */
	}
	go = input_kick(sv); /* those behind it may go now */
	pthread_mutex_unlock(&sv->in_mtx);
	input_resume(go);
	if (was) {
		tlb_session_rele(s); /* the read loop's reference */
	}
}

/* ---- the read loop ---- */

static void
rx_start(tlb_session *s)
{
	nng_iov iov;

	iov.iov_buf = (s->rx_body ? s->rx_buf : s->rx_len) + s->rx_got;
	iov.iov_len = (s->rx_body ? s->rx_cap : s->rx_need) - s->rx_got;
	nng_aio_set_iov(s->rx_aio, 1, &iov);
	tlb_session_hold(s); /* the read may complete and drop its own */
	if (!io_start(s, s->rx_aio, false)) {
		tlb_session_rele(s); /* closed: the read loop ends here */
	}
	tlb_session_rele(s);
}

static void worker_push(tlb_server *sv, tlb_job *j);

/* A whole frame: queue it for the worker with its share of the input
 * memory. Returns whether to read on. A session whose HELLO has not been
 * accepted reads its next frame only once the worker has handled this one
 * (the worker restarts the read), so that whether that frame may be longer
 * than max_hello_bytes follows from how the HELLO went, also for frames
 * sent right behind it. */
static bool
rx_frame_done(tlb_session *s)
{
	tlb_job *j = tli_alloc(sizeof(*j));
	uint8_t *frame = s->rx_buf;
	size_t len = s->rx_need, resv = s->rx_held;
	bool greeted = atomic_load(&s->hello_done);

	input_queue(s);
	/* Reset before queueing: the worker may restart the read at once. */
	s->rx_buf = NULL;
	s->rx_cap = 0;
	s->rx_body = false;
	s->rx_got = 0;
	s->rx_need = TLP_LEN_BYTES;
	s->rx_first_done = true;
	s->rx_held = 0;
	if (j == NULL) {
		/* Cannot queue it: say so by hanging up rather than leave
		 * the request unanswered. */
		tli_free(frame);
		input_release(s->srv, resv, true);
		tlb_session_close(s, "out of memory");
		return true; /* the read fails on the closed stream */
	}
	tlb_session_hold(s);
	j->s = s;
	j->frame = frame;
	j->len = len;
	j->resv = resv;
	j->rx_parked = !greeted;
	j->next = NULL;
	worker_push(s->srv, j);
	return greeted;
}

/* The first chunk of a body, or the next size of its buffer. */
static size_t
rx_next_cap(const tlb_session *s)
{
	size_t cap = s->rx_body ? s->rx_cap * 2 : TLB_RX_CHUNK;

	return cap < s->rx_need ? cap : s->rx_need;
}

/* The memory for rx_next_cap is s's (rx_held): allocate it and read on.
 * Memory follows the bytes that arrived, never the length a peer declared:
 * a body starts in a chunk that doubles each time it fills. */
static void
rx_resume(tlb_session *s)
{
	size_t cap = rx_next_cap(s);
	uint8_t *p = tli_realloc(s->rx_buf, cap);

	if (p == NULL) {
		tlb_session_close(s, "out of memory");
		tlb_session_rele(s); /* the read loop's reference */
		return;
	}
	s->rx_buf = p;
	s->rx_cap = cap;
	s->rx_body = true;
	rx_start(s);
}

/* Read the body, or the rest of it, when its memory can be had now. */
static void
rx_more(tlb_session *s)
{
	if (input_take(s, rx_next_cap(s) - s->rx_cap)) {
		rx_resume(s);
	} /* else input_kick hands it the memory later */
}

/* A frame longer than max_hello_bytes from a session whose HELLO has not
 * been accepted: refused before anything is allocated for it. The read
 * loop ends here; the session closes once this error (and an earlier
 * reply, such as a refused HELLO's) has been sent. */
static void
rx_refuse_unauth(tlb_session *s)
{
	bool first = !s->rx_first_done;

	atomic_fetch_add(&s->b->m.proto_errors, 1);
	atomic_fetch_add(&s->b->m.pre_hello_refused, 1);
	tlb_send_error(s, 0, 0, TL_ETOOLARGE,
	    first ? "the first frame (HELLO) is longer than max_hello_bytes"
	          : "a frame before an accepted HELLO is longer than "
	            "max_hello_bytes");
	tlb_session_close_after_reply(
	    s, first ? "first frame too long" : "frame too long before HELLO");
	tlb_session_rele(s); /* the read loop's reference */
}

static void
rx_cb(void *arg)
{
	tlb_session *s = arg;
	int rv = nng_aio_result(s->rx_aio);
	uint32_t len;

	if (rv != 0) {
		char why[80];

		/* A TLS peer that hangs up reads as NNG_ECONNREFUSED (nng
		 * 1.5.2 over mbedTLS); a failed handshake as NNG_ECRYPTO. */
		if (rv == NNG_ETIMEDOUT) {
			snprintf(why, sizeof(why),
			    "nothing received for %lld ms",
			    (long long) s->b->conf.idle_ms);
		} else {
			snprintf(why, sizeof(why), "read failed: %s",
			    nng_strerror(rv));
		}
		tlb_session_close(s,
		    rv == NNG_ECLOSED || rv == NNG_ECONNSHUT ||
		            rv == NNG_ECONNRESET || rv == NNG_ECONNREFUSED
		        ? NULL
		        : why);
		tlb_session_rele(s); /* the read loop's reference */
		return;
	}
	atomic_fetch_add(&s->rx_ops, 1);
	s->rx_got += nng_aio_count(s->rx_aio);
	if (s->rx_got < s->rx_need) {
		if (s->rx_body && s->rx_got == s->rx_cap) {
			rx_more(s); /* the buffer is full, the frame is not */
		} else {
			rx_start(s);
		}
		return;
	}
	if (!s->rx_body) {
		rv = tlp_frame_len(s->rx_len, &len);
		if (rv == TL_OK && !atomic_load(&s->hello_done) &&
		    len > (uint64_t) s->b->conf.max_hello_bytes) {
			/* Before HELLO only a HELLO-sized frame: a stranger
			 * gets no large buffer. */
			rx_refuse_unauth(s);
			return;
		}
		if (rv != TL_OK) {
			/* The stream's framing is lost: nothing after this can
			 * be trusted. Say why, then hang up. */
			atomic_fetch_add(&s->b->m.proto_errors, 1);
			tlb_send_error(s, 0, 0, rv,
			    rv == TL_ETOOLARGE ? "frame longer than the limit"
			                       : "frame shorter than a header");
			tlb_session_close(s, "bad frame length");
			tlb_session_rele(s);
			return;
		}
		s->rx_need = len;
		s->rx_got = 0;
		rx_more(s);
		return;
	}
	if (rx_frame_done(s)) {
		rx_start(s);
	} /* else the worker restarts the read */
}

/* The peer's IP address as text into out ("" when not an IP peer). */
static void
peer_addr(nng_stream *st, char *out, size_t cap)
{
	nng_sockaddr sa;

	out[0] = '\0';
	if (nng_stream_get_addr(st, NNG_OPT_REMADDR, &sa) != 0) {
		return;
	}
	if (sa.s_family == NNG_AF_INET) {
		inet_ntop(AF_INET, &sa.s_in.sa_addr, out, (socklen_t) cap);
	} else if (sa.s_family == NNG_AF_INET6) {
		inet_ntop(AF_INET6, sa.s_in6.sa_addr, out, (socklen_t) cap);
	}
}

enum { REFUSE_TOTAL, REFUSE_PER_IP, REFUSE_UNAUTH };

/* Per reason: the setting, what was counted, and the metric. */
static const char *const refuse_setting[] = {
    "max_sessions", "max_sessions_per_ip", "max_unauth_sessions"};
static const char *const refuse_what[] = {
    "sessions", "sessions from that address", "sessions without HELLO"};

/* Which limit a connection from peer would go over (-1: none). */
static int
session_over(tlb_server *sv, const char *peer, int *count, int64_t *limit)
{
	const tlb_conf *c = &sv->b->conf;
	int total, same = 0, unauth;

	pthread_mutex_lock(&sv->sess_mtx);
	total = sv->live_sessions;
	unauth = sv->unauth_sessions;
	if (peer[0] != '\0' && c->max_sessions_per_ip > 0) {
		for (tlb_session *s = sv->sessions; s != NULL; s = s->next) {
			same += strcmp(s->peer, peer) == 0;
		}
	}
	pthread_mutex_unlock(&sv->sess_mtx);
	if (c->max_sessions > 0 && total >= c->max_sessions) {
		*count = total;
		*limit = c->max_sessions;
		return REFUSE_TOTAL;
	}
	if (c->max_sessions_per_ip > 0 && same >= c->max_sessions_per_ip) {
		*count = same;
		*limit = c->max_sessions_per_ip;
		return REFUSE_PER_IP;
	}
	if (c->max_unauth_sessions > 0 && unauth >= c->max_unauth_sessions) {
		*count = unauth;
		*limit = c->max_unauth_sessions;
		return REFUSE_UNAUTH;
	}
	return -1;
}

/* Whether a connection from peer would go over max_sessions,
 * max_sessions_per_ip or max_unauth_sessions; if so it is logged (at most
 * once a second per reason) and counted. */
static bool
session_refused(tlb_server *sv, const char *peer)
{
	tlb_broker *b = sv->b;
	_Atomic uint64_t *counter[] = {&b->m.refused_max_sessions,
	    &b->m.refused_per_ip, &b->m.refused_unauth};
	int count = 0, why;
	int64_t limit = 0, now, last;

	if ((why = session_over(sv, peer, &count, &limit)) < 0) {
		return false;
	}
	atomic_fetch_add(counter[why], 1);
	now = tli_mono_ms();
	last = atomic_load(&sv->refused_log_ms[why]);
	if (now - last >= 1000 &&
	    atomic_compare_exchange_strong(
	        &sv->refused_log_ms[why], &last, now)) {
		uint64_t more = atomic_exchange(&sv->refused_unlogged[why], 0);

		tlb_log(TLB_WARN, "S012",
		    "connection from %s refused: %d %s (%s = %lld); "
		    "%llu more refused since the last such message",
		    peer[0] ? peer : "a local socket", count, refuse_what[why],
		    refuse_setting[why], (long long) limit,
		    (unsigned long long) more);
	} else {
		atomic_fetch_add(&sv->refused_unlogged[why], 1);
	}
	return true;
}

/* The HELLO deadline passed (or the session closed first). */
static void
hello_cb(void *arg)
{
	tlb_session *s = arg;

	if (nng_aio_result(s->hello_aio) == 0 && !atomic_load(&s->hello_done)) {
		char why[80];

		atomic_fetch_add(&s->b->m.hello_timeouts, 1);
		snprintf(why, sizeof(why), "no HELLO within %lld ms",
		    (long long) s->b->conf.hello_ms);
		tlb_session_close(s, why);
	}
	tlb_session_rele(s); /* the deadline's reference */
}

static void
session_new(tlb_server *sv, nng_stream *st)
{
	tlb_broker *b = sv->b;
	tlb_session *s;
	pthread_mutexattr_t ma;
	char peer[INET6_ADDRSTRLEN];

	peer_addr(st, peer, sizeof(peer));
	if (session_refused(sv, peer)) {
		nng_stream_free(st);
		return;
	}
	s = tli_zalloc(sizeof(*s));
	if (s == NULL || nng_aio_alloc(&s->rx_aio, rx_cb, s) != 0 ||
	    nng_aio_alloc(&s->tx_aio, tx_cb, s) != 0 ||
	    nng_aio_alloc(&s->linger_aio, linger_cb, s) != 0 ||
	    nng_aio_alloc(&s->hello_aio, hello_cb, s) != 0) {
		if (s != NULL) {
			nng_aio_free(s->rx_aio);
			nng_aio_free(s->tx_aio);
			nng_aio_free(s->linger_aio);
			tli_free(s);
		}
		nng_stream_free(st);
		return;
	}
	s->b = b;
	s->srv = sv;
	s->st = st;
	memcpy(s->peer, peer, sizeof(s->peer));
	s->id = atomic_fetch_add(&sv->next_session, 1);
	/* Every read waits at most idle_ms: a client that sends nothing (not
	 * even the SDK's pings) for that long is gone, or its connection is
	 * (a half-open TCP connection would keep its subscriptions' credit
	 * and its leases' renewals from ever ending). */
	nng_aio_set_timeout(s->rx_aio,
	    b->conf.idle_ms > 0 ? (nng_duration) b->conf.idle_ms
	                        : NNG_DURATION_INFINITE);
	atomic_store(&s->refs, 1); /* the read loop */
	pthread_mutex_init(&s->mtx, NULL);
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&s->io_mtx, &ma);
	pthread_mutexattr_destroy(&ma);
	tli_buf_init(&s->tx_pending);
	tli_buf_init(&s->tx_inflight);
	s->rx_need = TLP_LEN_BYTES;
	if (b->conf.hello_ms > 0) {
		/* Started before the session can be closed, so that the
		 * close's abort always finds it. */
		tlb_session_hold(s); /* the deadline's reference */
		nng_sleep_aio((nng_duration) b->conf.hello_ms, s->hello_aio);
	}
	pthread_mutex_lock(&sv->sess_mtx);
	s->next = sv->sessions;
	sv->sessions = s;
	sv->live_sessions++;
	sv->unauth_sessions++;
	pthread_mutex_unlock(&sv->sess_mtx);
	atomic_fetch_add(&b->m.sessions, 1);
	atomic_fetch_add(&b->m.sessions_total, 1);
	tlb_log(TLB_DEBUG, "S010", "session %llu accepted",
	    (unsigned long long) s->id);
	rx_start(s);
}

/* ---- what the protocol sets on a session ---- */

uint64_t
tlb_session_id(const tlb_session *s)
{
	return s->id;
}

const char *
tlb_session_name(const tlb_session *s)
{
	return s->name;
}

bool
tlb_session_greeted(const tlb_session *s)
{
	return s->hello;
}

void
tlb_session_greet(tlb_session *s, const char *name, size_t n)
{
	pthread_mutex_lock(&s->mtx);
	snprintf(s->name, sizeof(s->name), "%.*s",
	    (int) (n < TL_MAX_NAME_LEN ? n : TL_MAX_NAME_LEN),
	    name != NULL ? name : "");
	pthread_mutex_unlock(&s->mtx);
	s->hello = true;
	if (!atomic_exchange(&s->hello_done, true)) {
		pthread_mutex_lock(&s->srv->sess_mtx);
		s->srv->unauth_sessions--;
		pthread_mutex_unlock(&s->srv->sess_mtx);
	}
}

int64_t
tlb_session_clock_offset_swap(tlb_session *s, int64_t off_ms)
{
	return atomic_exchange(&s->clock_offset_ms, off_ms);
}

void
tlb_session_set_client(tlb_session *s, uint64_t id)
{
	atomic_store(&s->client_id, id);
}

uint64_t
tlb_session_client(tlb_session *s)
{
	return atomic_load(&s->client_id);
}

const tlb_principal *
tlb_session_principal(const tlb_session *s)
{
	return s->prin;
}

void
tlb_session_set_principal(
    tlb_session *s, tlb_auth *a, const tlb_principal *p, const uint8_t *h)
{
	if (p == NULL) {
		tlb_auth_rele(a);
		s->hello = false;
		pthread_mutex_lock(&s->mtx);
		s->authed = false;
		pthread_mutex_unlock(&s->mtx);
		return;
	}
	tlb_auth_rele(s->auth);
	s->auth = a;
	s->prin = p;
	pthread_mutex_lock(&s->mtx);
	memcpy(s->tok_hash, h, sizeof(s->tok_hash));
	s->authed = true;
	pthread_mutex_unlock(&s->mtx);
}

bool
tlb_session_auth_refresh(tlb_session *s, tlb_auth *cur)
{
	const tlb_principal *p;

	if (cur == s->auth) {
		tlb_auth_rele(cur);
		return true;
	}
	/* tok_hash is written on this (the worker) thread only */
	if (cur == NULL || (p = tlb_auth_find(cur, s->tok_hash)) == NULL) {
		tlb_auth_rele(cur);
		return false;
	}
	tlb_auth_rele(s->auth);
	s->auth = cur;
	s->prin = p;
	return true;
}

/* ---- walking the sessions ---- */

/* Hold s unless its last reference is gone (it is being freed and waits
 * for the list's lock to unlink itself). With sess_mtx held. */
static bool
session_tryhold(tlb_session *s)
{
	int r = atomic_load(&s->refs);

	TLI_ASSERT_LOCKED(&s->srv->sess_mtx);
	while (r > 0) {
		if (atomic_compare_exchange_weak(&s->refs, &r, r + 1)) {
			return true;
		}
	}
	return false;
}

/* The listed sessions, each held (tlb_session_rele each, then tli_free the
 * array), so that they can be walked outside the list's lock. NULL with
 * *n = 0 when there are none or no memory. */
static tlb_session **
sessions_hold(tlb_server *sv, size_t *n)
{
	tlb_session *s, **v;
	size_t cap;

	*n = 0;
	pthread_mutex_lock(&sv->sess_mtx);
	cap = (size_t) sv->live_sessions;
	v = tli_alloc(sizeof(*v) * (cap + 1));
	for (s = sv->sessions; s != NULL && v != NULL && *n < cap;
	     s = s->next) {
		if (session_tryhold(s)) {
			v[(*n)++] = s;
		}
	}
	pthread_mutex_unlock(&sv->sess_mtx);
	return v;
}

static void
sessions_rele(tlb_session **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		tlb_session_rele(v[i]);
	}
	tli_free(v);
}

tlb_session_info *
tlb_sessions_info(tlb_broker *b, size_t *n)
{
	size_t nv = 0;
	tlb_session **v = sessions_hold(b->srv, &nv);
	tlb_session_info *out = tli_alloc(sizeof(*out) * (nv + 1));

	*n = 0;
	for (size_t i = 0; out != NULL && i < nv; i++) {
		tlb_session *s = v[i];
		tlb_session_info *o = &out[*n];

		if (!s->hello) {
			continue;
		}
		o->id = s->id;
		pthread_mutex_lock(&s->mtx);
		memcpy(o->name, s->name, sizeof(o->name));
		pthread_mutex_unlock(&s->mtx);
		o->clock_offset_ms = atomic_load(&s->clock_offset_ms);
		(*n)++;
	}
	sessions_rele(v, nv);
	if (*n == 0) {
		tli_free(out);
		out = NULL;
	}
	return out;
}

void
tlb_server_close_revoked(tlb_broker *b)
{
	tlb_auth *a = tlb_auth_current(b);
	size_t n = 0;
	tlb_session **v = a != NULL ? sessions_hold(b->srv, &n) : NULL;

	for (size_t i = 0; i < n; i++) {
		uint8_t h[TLP_SHA256_LEN];
		bool authed;

		pthread_mutex_lock(&v[i]->mtx);
		authed = v[i]->authed;
		memcpy(h, v[i]->tok_hash, sizeof(h));
		pthread_mutex_unlock(&v[i]->mtx);
		if (authed && tlb_auth_find(a, h) == NULL) {
			tlb_session_close(v[i], "credentials revoked");
		}
	}
	sessions_rele(v, n);
	tlb_auth_rele(a);
}

/* ---- listeners ---- */

static void
accept_cb(void *arg)
{
	acc_ctx *c = arg;
	tlb_server *sv = c->srv;
	nng_aio *aio = sv->acc_aio[c->i];
	int rv = nng_aio_result(aio);

	if (rv == 0) {
		session_new(sv, nng_aio_get_output(aio, 0));
	} else if (rv == NNG_ECLOSED || atomic_load(&sv->b->stopping)) {
		return;
	} else {
		tlb_log(TLB_WARN, "S002", "accept on %s failed: %s",
		    sv->bound[c->i], nng_strerror(rv));
	}
	if (!atomic_load(&sv->b->stopping)) {
		nng_stream_listener_accept(sv->lst[c->i], aio);
	}
}

/* A whole (small) PEM file as a string, or NULL (logged). */
static char *
read_pem(const char *path, const char *what)
{
	char *buf = tli_read_file(path, 1024 * 1024);

	if (buf == NULL) {
		tlb_log(TLB_ERROR, "S005", "cannot read %s %s: %s", what, path,
		    strerror(errno));
	}
	return buf;
}

/* The server side of TLS for a tls+tcp:// listener: certificate, key,
 * and the CAs and mode for client certificates. */
static int
listen_tls(tlb_broker *b, nng_stream_listener *l, const char *url)
{
	static const nng_tls_auth_mode modes[] = {NNG_TLS_AUTH_MODE_NONE,
	    NNG_TLS_AUTH_MODE_OPTIONAL, NNG_TLS_AUTH_MODE_REQUIRED};
	nng_tls_config *cfg = NULL;
	char *cert = NULL, *key = NULL;
	int rv = -1, nrv;

	if ((cert = read_pem(b->conf.tls_cert, "tls_cert")) == NULL ||
	    (key = read_pem(b->conf.tls_key, "tls_key")) == NULL) {
		goto out;
	}
	if ((nrv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER)) != 0 ||
	    (nrv = nng_tls_config_own_cert(cfg, cert, key, NULL)) != 0) {
		tlb_log(TLB_ERROR, "S006",
		    "%s: the certificate %s or key %s is not usable: %s", url,
		    b->conf.tls_cert, b->conf.tls_key, nng_strerror(nrv));
		goto out;
	}
	if (b->conf.tls_ca[0] != '\0' &&
	    (nrv = nng_tls_config_ca_file(cfg, b->conf.tls_ca)) != 0) {
		tlb_log(TLB_ERROR, "S006",
		    "%s: the CA file %s is not usable: %s", url, b->conf.tls_ca,
		    nng_strerror(nrv));
		goto out;
	}
	if ((nrv = nng_tls_config_auth_mode(
	         cfg, modes[b->conf.tls_client_auth])) != 0 ||
	    (nrv = nng_stream_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg)) !=
	        0) {
		tlb_log(TLB_ERROR, "S006", "%s: TLS setup failed: %s", url,
		    nng_strerror(nrv));
		goto out;
	}
	rv = 0;
out:
	if (cfg != NULL) {
		nng_tls_config_free(cfg); /* the listener holds its own */
	}
	if (key != NULL) {
		memset(key, 0, strlen(key));
	}
	tli_free(key);
	tli_free(cert);
	return rv;
}

static int
listen_one(tlb_server *sv, const char *url)
{
	tlb_broker *b = sv->b;
	int i = sv->nlst, rv, port = 0;
	nng_stream_listener *l;
	bool tls = strncmp(url, "tls+tcp://", 10) == 0;

	if ((rv = nng_stream_listener_alloc(&l, url)) != 0) {
		tlb_log(TLB_ERROR, "S001", "cannot use listen address %s: %s",
		    url, nng_strerror(rv));
		return -1;
	}
	if (tls && listen_tls(b, l, url) != 0) {
		nng_stream_listener_free(l);
		return -1;
	}
	/* Frames are coalesced by the writer already; Nagle's delay would
	 * only hold a lone reply or push back (nng's streams leave it on). */
	if (strncmp(url, "tcp://", 6) == 0 || tls) {
		nng_stream_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true);
	}
	if ((rv = nng_stream_listener_listen(l)) != 0) {
		tlb_log(TLB_ERROR, "S001", "cannot listen on %s: %s", url,
		    nng_strerror(rv));
		nng_stream_listener_free(l);
		return -1;
	}
	snprintf(sv->bound[i], sizeof(sv->bound[i]), "%s", url);
	if ((strncmp(url, "tcp://", 6) == 0 || tls) &&
	    nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) ==
	        0) {
		/* Replace the port (maybe 0) with the one bound. */
		const char *colon = strrchr(url, ':');
		if (colon != NULL) {
			snprintf(sv->bound[i], sizeof(sv->bound[i]), "%.*s:%d",
			    (int) (colon - url), url, port);
		}
	}
	sv->acc[i].srv = sv;
	sv->acc[i].i = i;
	if (nng_aio_alloc(&sv->acc_aio[i], accept_cb, &sv->acc[i]) != 0) {
		nng_stream_listener_free(l);
		return -1;
	}
	sv->lst[i] = l;
	sv->nlst++;
	tlb_log(TLB_INFO, "S003", "listening on %s", sv->bound[i]);
	nng_stream_listener_accept(l, sv->acc_aio[i]);
	return 0;
}

const char *
tlb_server_url(tlb_broker *b, int i)
{
	tlb_server *sv = b->srv;

	return sv != NULL && i >= 0 && i < sv->nlst ? sv->bound[i] : "";
}

/* ---- the request worker ---- */

static void
worker_push(tlb_server *sv, tlb_job *j)
{
	pthread_mutex_lock(&sv->wq_mtx);
	if (sv->wq_tail != NULL) {
		sv->wq_tail->next = j;
	} else {
		sv->wq_head = j;
	}
	sv->wq_tail = j;
	pthread_cond_signal(&sv->wq_cv);
	pthread_mutex_unlock(&sv->wq_mtx);
}

/* The next job, or NULL once stopped and drained. With wq_mtx held. */
static tlb_job *
worker_pop(tlb_server *sv)
{
	tlb_job *j = sv->wq_head;

	TLI_ASSERT_LOCKED(&sv->wq_mtx);
	if (j != NULL) {
		sv->wq_head = j->next;
		if (sv->wq_head == NULL) {
			sv->wq_tail = NULL;
		}
	}
	return j;
}

static void *
worker_main(void *arg)
{
	tlb_server *sv = arg;
	tlb_session *s;
	tlb_job *j;
	size_t resv;
	bool parked;

	pthread_setname_np(pthread_self(), "tl-worker");
	tli_store_thread_setup();
	for (;;) {
		pthread_mutex_lock(&sv->wq_mtx);
		while (sv->wq_head == NULL && !sv->worker_stop) {
			pthread_cond_wait(&sv->wq_cv, &sv->wq_mtx);
		}
		j = worker_pop(sv);
		if (j != NULL && j->s->read_busy) {
			/* behind its session's long read: kept in order */
			j->next = NULL;
			if (j->s->held_tail != NULL) {
				j->s->held_tail->next = j;
			} else {
				j->s->held_head = j;
			}
			j->s->held_tail = j;
			pthread_mutex_unlock(&sv->wq_mtx);
			continue;
		}
		pthread_mutex_unlock(&sv->wq_mtx);
		if (j == NULL) {
			break;
		}
		s = j->s; /* held by its parked read loop, if any */
		resv = j->resv;
		parked = j->rx_parked;
		sv->hooks.handle(sv->b, j);
		input_release(sv, resv, true);
		if (parked) {
			rx_start(s);
		}
	}
	return NULL;
}

/* ---- the reader threads ----
 *
 * A long read is queued by the worker (tlb_session_read) with its session
 * marked busy; until the read's fn has returned, the worker holds that
 * session's frames aside instead of handling them. Then they go back to
 * the head of the worker's queue: they arrived before any frame of the
 * session still queued there, so the session's order is kept. */

int
tlb_session_read(tlb_session *s, tlb_read_fn fn, void *arg)
{
	tlb_server *sv = s->srv;
	tlb_read *r = tli_alloc(sizeof(*r));

	if (r == NULL) {
		return TL_ENOMEM;
	}
	tlb_session_hold(s);
	r->next = NULL;
	r->s = s;
	r->fn = fn;
	r->arg = arg;
	pthread_mutex_lock(&sv->wq_mtx);
	TLI_ASSERT(!s->read_busy); /* its frames are held meanwhile */
	s->read_busy = true;
	if (sv->rq_tail != NULL) {
		sv->rq_tail->next = r;
	} else {
		sv->rq_head = r;
	}
	sv->rq_tail = r;
	pthread_cond_signal(&sv->rq_cv);
	pthread_mutex_unlock(&sv->wq_mtx);
	atomic_fetch_add(&s->b->m.reads_total, 1);
	return TL_OK;
}

/* s's read returned: its held frames go first in the worker's queue. */
static void
read_done(tlb_server *sv, tlb_session *s)
{
	pthread_mutex_lock(&sv->wq_mtx);
	s->read_busy = false;
	if (s->held_head != NULL) {
		s->held_tail->next = sv->wq_head;
		if (sv->wq_head == NULL) {
			sv->wq_tail = s->held_tail;
		}
		sv->wq_head = s->held_head;
		s->held_head = NULL;
		s->held_tail = NULL;
		pthread_cond_signal(&sv->wq_cv);
	}
	pthread_mutex_unlock(&sv->wq_mtx);
}

static void *
reader_main(void *arg)
{
	tlb_server *sv = arg;
	tlb_broker *b = sv->b;
	tlb_read *r;
	int nice;

	pthread_setname_np(pthread_self(), "tl-reader");
	/* A long scan yields the CPU to the writer, the dispatcher and the
	 * I/O threads that acknowledgements and deliveries wait for (on
	 * Linux the nice value is per thread); failing that it runs as is. */
	errno = 0;
	nice = getpriority(PRIO_PROCESS, (id_t) gettid());
	if (errno == 0) {
		nice =
		    nice + TLB_READER_NICE > 19 ? 19 : nice + TLB_READER_NICE;
		(void) setpriority(PRIO_PROCESS, (id_t) gettid(), nice);
	}
	tli_store_thread_setup();
	for (;;) {
		pthread_mutex_lock(&sv->wq_mtx);
		while (sv->rq_head == NULL && !sv->readers_stop) {
			pthread_cond_wait(&sv->rq_cv, &sv->wq_mtx);
		}
		if ((r = sv->rq_head) != NULL) {
			sv->rq_head = r->next;
			if (sv->rq_head == NULL) {
				sv->rq_tail = NULL;
			}
		}
		pthread_mutex_unlock(&sv->wq_mtx);
		if (r == NULL) {
			break; /* stopped and drained */
		}
		atomic_fetch_add(&b->m.reads_running, 1);
		/* A session closed meanwhile gets no scan: its reply would be
		 * dropped. One closed during the scan has it dropped. */
		r->fn(b, r->s, r->arg, !tlb_session_ending(r->s));
		atomic_fetch_sub(&b->m.reads_running, 1);
		read_done(sv, r->s);
		tlb_session_rele(r->s);
		tli_free(r);
	}
	return NULL;
}

static void
readers_stop(tlb_server *sv)
{
	pthread_mutex_lock(&sv->wq_mtx);
	sv->readers_stop = true;
	pthread_cond_broadcast(&sv->rq_cv);
	pthread_mutex_unlock(&sv->wq_mtx);
	for (int i = 0; i < sv->nreaders; i++) {
		pthread_join(sv->readers[i], NULL);
	}
	sv->nreaders = 0;
}

static void
write_ready_file(tlb_server *sv)
{
	const char *path = sv->b->conf.ready_file;
	char tmp[600];
	FILE *f;

	if (path[0] == '\0') {
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((f = fopen(tmp, "w")) == NULL) {
		tlb_log(TLB_WARN, "S004", "cannot write %s: %s", tmp,
		    strerror(errno));
		return;
	}
	for (int i = 0; i < sv->nlst; i++) {
		fprintf(f, "%s\n", sv->bound[i]);
	}
	fclose(f);
	rename(tmp, path);
}

int
tlb_server_start(tlb_broker *b, const tlb_server_hooks *hooks)
{
	tlb_server *sv = tli_zalloc(sizeof(*sv));

	if (sv == NULL) {
		return -1;
	}
	sv->b = b;
	sv->hooks = *hooks;
	pthread_mutex_init(&sv->sess_mtx, NULL);
	pthread_cond_init(&sv->sess_cv, NULL);
	pthread_mutex_init(&sv->wq_mtx, NULL);
	pthread_cond_init(&sv->wq_cv, NULL);
	pthread_cond_init(&sv->rq_cv, NULL);
	pthread_mutex_init(&sv->in_mtx, NULL);
	atomic_store(&sv->next_session, 1);
	b->srv = sv;
	if (pthread_create(&sv->worker, NULL, worker_main, sv) != 0) {
		return -1;
	}
	sv->worker_started = true;
	while (sv->nreaders < TLB_READERS) {
		if (pthread_create(&sv->readers[sv->nreaders], NULL,
		        reader_main, sv) != 0) {
			return -1;
		}
		sv->nreaders++;
	}
	for (int i = 0; i < b->conf.nlisten; i++) {
		if (listen_one(sv, b->conf.listen[i]) != 0) {
			return -1;
		}
	}
	return 0;
}

void
tlb_server_ready(tlb_broker *b)
{
	if (b->srv != NULL) {
		write_ready_file(b->srv);
	}
}

void
tlb_server_stop(tlb_broker *b)
{
	tlb_server *sv = b->srv;
	tlb_session **v;
	size_t n = 0;
	tlb_job *j;

	if (sv == NULL) {
		return;
	}
	for (int i = 0; i < sv->nlst; i++) {
		nng_stream_listener_close(sv->lst[i]);
		nng_aio_stop(sv->acc_aio[i]);
	}
	/* Close every session (no more reads), holding each so the list can
	 * be walked outside its lock (a close reaches the dispatcher, whose
	 * lock comes first). */
	v = sessions_hold(sv, &n);
	for (size_t i = 0; i < n; i++) {
		tlb_session_close(v[i], NULL);
	}
	sessions_rele(v, n);
	/* The worker finishes what was queued (writes still reach the store;
	 * their replies are dropped), then stops. */
	if (sv->worker_started) {
		tli_thread_stop(
		    sv->worker, &sv->wq_mtx, &sv->wq_cv, &sv->worker_stop);
		sv->worker_started = false;
	}
	/* Then the readers: a read already scanning runs to its end (its
	 * reply is dropped), the queued ones of the closed sessions only free
	 * their memory. The frames they held go back to the worker's queue,
	 * released below. */
	readers_stop(sv);
	/* A read that completed during the close may have queued a frame
	 * after the worker left: release it. */
	pthread_mutex_lock(&sv->wq_mtx);
	while ((j = worker_pop(sv)) != NULL) {
		pthread_mutex_unlock(&sv->wq_mtx);
		tli_free(j->frame);
		input_release(sv, j->resv, true);
		if (j->rx_parked) {
			rx_start(j->s); /* fails on the closed stream */
		}
		tlb_session_rele(j->s);
		tli_free(j);
		pthread_mutex_lock(&sv->wq_mtx);
	}
	pthread_mutex_unlock(&sv->wq_mtx);
}

/* Whether sessions remain; if so, wait up to 20 ms for one to go. */
static bool
sessions_wait(tlb_server *sv)
{
	struct timespec ts;
	bool left;

	pthread_mutex_lock(&sv->sess_mtx);
	if ((left = sv->live_sessions > 0)) {
		tli_deadline(&ts, CLOCK_REALTIME, 20);
		pthread_cond_timedwait(&sv->sess_cv, &sv->sess_mtx, &ts);
	}
	pthread_mutex_unlock(&sv->sess_mtx);
	return left;
}

void
tlb_server_wait(tlb_broker *b)
{
	tlb_server *sv = b->srv;

	if (sv == NULL) {
		return;
	}
	for (;;) {
		tlb_session **v;
		size_t n = 0;

		pthread_mutex_lock(&sv->sess_mtx);
		if (sv->live_sessions == 0) {
			pthread_mutex_unlock(&sv->sess_mtx);
			break;
		}
		pthread_mutex_unlock(&sv->sess_mtx);
		/* nng 1.5.2 can leave an operation on a dead stream pending
		 * even after the close: abort them until the sessions are
		 * gone (outside the lock: a callback may free a session). */
		v = sessions_hold(sv, &n);
		for (size_t i = 0; i < n; i++) {
			nng_aio_abort(v[i]->rx_aio, NNG_ECLOSED);
			nng_aio_abort(v[i]->tx_aio, NNG_ECLOSED);
		}
		sessions_rele(v, n);
		if (!sessions_wait(sv)) {
			break;
		}
	}
	for (int i = 0; i < sv->nlst; i++) {
		nng_aio_free(sv->acc_aio[i]);
		nng_stream_listener_free(sv->lst[i]);
	}
	pthread_cond_destroy(&sv->wq_cv);
	pthread_cond_destroy(&sv->rq_cv);
	pthread_mutex_destroy(&sv->wq_mtx);
	pthread_mutex_destroy(&sv->in_mtx);
	pthread_cond_destroy(&sv->sess_cv);
	pthread_mutex_destroy(&sv->sess_mtx);
	tli_free(sv);
	b->srv = NULL;
}
