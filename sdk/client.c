/*
 * The client: its connection to the broker over an nng byte stream, the
 * session (HELLO, PING and the clock offset), the request table keyed by
 * request id, the send queue, reconnection with backoff, and the threads
 * that run them (see the DESIGN paragraph in internal.h).
 *
 * Every submitted request is completed exactly once through its on_reply:
 * by its reply (connection thread), by its deadline (send thread), by a
 * connection loss (TL_ECONN) or by close (TL_ECLOSED). The request leaves
 * the table under the lock before on_reply runs, so only one of these can
 * win. A request may also leave the table for the parked list (a
 * TL_ENOTLEADER reply, or an unknown outcome of a request that may be sent
 * twice, with a cluster's URLs): it is then in exactly one of the two,
 * keeps its frame, and keeps its id when it is sent again (the cluster
 * keeps a write's answer under the client's id and the request id).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#include <nng/supplemental/tls/tls.h>

#define RD_MIN_CAP (64u * 1024u)

typedef struct rd_buf {
	uint8_t *buf;
	size_t cap;
	size_t len;
	size_t off;
	tl_client *c;
	tl_client *gate; /* set once the stream is c->stream: see io_start */
} rd_buf;

/* ---- small helpers ---- */

void
tli_client_log(tl_client *c, tl_log_level lvl, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (c->opts.log == NULL) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->opts.log(c->opts.log_arg, lvl, line);
}

static int
client_nng_err(int rv)
{
	switch (rv) {
	case 0:
		return TL_OK;
	case NNG_ETIMEDOUT:
		return TL_ETIMEDOUT;
	case NNG_ENOMEM:
		return TL_ENOMEM;
	case NNG_ECLOSED:
	case NNG_ECANCELED:
		return TL_ECLOSED;
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
		return TL_EINVAL;
	default:
		return TL_ECONN;
	}
}

static void
cv_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

static void
cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, int64_t deadline_ms)
{
	struct timespec ts;

	ts.tv_sec = deadline_ms / 1000;
	ts.tv_nsec = (long) (deadline_ms % 1000) * 1000000L;
	pthread_cond_timedwait(cv, m, &ts);
}

/* ---- request table ---- */

static bool
req_is(const tli_hnode *hn, const void *key)
{
	return TLI_CONTAINER(hn, tli_req, hn)->id == *(const uint32_t *) key;
}

static void
table_insert(tl_client *c, tli_req *q)
{
	/* Cannot fail: the table has had slots since the client opened. */
	(void) tli_htab_insert(&c->table, &q->hn, q->id);
	c->inflight++;
}

static void
table_take(tl_client *c, tli_req *q)
{
	TLI_ASSERT(c->inflight > 0);
	tli_htab_remove(&c->table, &q->hn);
	c->inflight--;
}

static tli_req *
table_find(tl_client *c, uint32_t id, bool take)
{
	tli_hnode *hn = tli_htab_find(&c->table, id, req_is, &id);
	tli_req *q = hn != NULL ? TLI_CONTAINER(hn, tli_req, hn) : NULL;

	if (q != NULL && take) {
		table_take(c, q);
	}
	return q;
}

/* Take out every request whose deadline passed (all: every request) and
 * return them as a list linked through next. */
static tli_req *
table_expire(tl_client *c, int64_t now, bool all)
{
	tli_req *out = NULL;
	tli_htab_iter it;

	if (c->inflight == 0) {
		return NULL;
	}
	for (tli_hnode *hn = tli_htab_first(&c->table, &it), *nx; hn != NULL;
	     hn = nx) {
		tli_req *q = TLI_CONTAINER(hn, tli_req, hn);

		nx = tli_htab_next(&c->table, &it, hn);
		if (all || q->deadline <= now) {
			table_take(c, q);
			q->next = out;
			out = q;
		}
	}
	return out;
}

/* Complete q: its frame goes, then its owner's callback (which may free
 * q). */
static void
req_done(tli_req *q, int err, tlp_r *r)
{
	tli_buf_fini(&q->frame);
	q->on_reply(q, err, r);
}

static void
reqs_fail(tli_req *list, int err)
{
	while (list != NULL) {
		tli_req *q = list;
		list = q->next;
		q->next = NULL;
		req_done(q, err, NULL);
	}
}

/* Whether sending q twice cannot apply it twice. */
static bool
req_idem(const tli_req *q)
{
	int64_t keep = atomic_load(&q->c->answers_ms);

	/* writes whose answer the broker keeps: sent again only well within
	 * that time (the broker counts it from the commit, after the send) */
	if ((tlp_op_is_batch(q->op) || q->op == TLP_OP_LOCK ||
	        q->op == TLP_OP_TOPIC_CREATE || q->op == TLP_OP_TOPIC_DELETE) &&
	    keep > 0 && q->sent_ms != 0 &&
	    tli_mono_ms() - q->sent_ms < keep - keep / 4) {
		return true;
	}
	switch (q->op) {
	case TLP_OP_PING:
	case TLP_OP_TOPIC_GET:
	case TLP_OP_TOPIC_LIST:
	case TLP_OP_GET:
	case TLP_OP_LIST:
	case TLP_OP_COUNT:
	case TLP_OP_DLQ_LIST:
	/* a new session subscribes anew (as a reconnect does) */
	case TLP_OP_SUBSCRIBE:
		return true;
	default:
		return q->idem;
	}
}

bool
tli_client_failover(const tl_client *c)
{
	return c->nurls > 1;
}

/* ---- parked requests ---- */

static void
park_locked(tl_client *c, tli_req *q, int why)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	q->park_err = why;
	q->next = NULL;
	if (c->park_tail != NULL) {
		c->park_tail->next = q;
	} else {
		c->park_head = q;
	}
	c->park_tail = q;
	c->nparked++;
}

/* Take out the parked requests whose deadline passed (all: every one),
 * as a list linked through next. */
static tli_req *
park_expire(tl_client *c, int64_t now, bool all)
{
	tli_req *out = NULL, **pp = &c->park_head, *last = NULL;

	while (*pp != NULL) {
		tli_req *q = *pp;
		if (all || q->deadline <= now) {
			*pp = q->next;
			c->nparked--;
			q->next = out;
			out = q;
		} else {
			last = q;
			pp = &q->next;
		}
	}
	c->park_tail = last;
	return out;
}

/* Fail a list of parked requests, each with the error that parked it. */
static void
park_fail(tli_req *list, int err)
{
	while (list != NULL) {
		tli_req *q = list;
		list = q->next;
		q->next = NULL;
		req_done(q, err != TL_OK ? err : q->park_err, NULL);
	}
}

/* ---- submitting ---- */

void
tli_frame_start(tli_buf *b, tlp_w *w, uint8_t op)
{
	tli_buf_init(b);
	tlp_frame_begin(b, w, op, 0, 0);
}

/* Give q (its frame finished) a fresh id and queue it on the current
 * connection. The frame stays q's. */
static int
req_send_locked(tl_client *c, tli_req *q)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	/* Sent again, q keeps its id: the cluster keeps its answer under it.
	 * The first sending takes the next free id (so does a repeat whose
	 * id another request took, 2^32 requests later). */
	if (q->sent_ms == 0 || table_find(c, q->id, false) != NULL) {
		do {
			c->next_id++;
		} while (c->next_id == 0 ||
		    table_find(c, c->next_id, false) != NULL);
		q->id = c->next_id;
		q->sent_ms = tli_mono_ms();
	}
	tli_put_be32(q->frame.data + TLP_LEN_BYTES + 4, q->id);
	if (tli_buf_append(&c->outq, q->frame.data, q->frame.len) != TL_OK) {
		c->outq.oom = false;
		return TL_ENOMEM;
	}
	table_insert(c, q);
	return TL_OK;
}

/* Finish q's frame and set its deadline; on failure the frame is gone. */
static int
req_prepare(tl_client *c, tli_req *q)
{
	int rv;

	if ((rv = tlp_frame_end(&q->frame, 0)) != TL_OK) {
		tli_buf_fini(&q->frame);
		return rv;
	}
	q->c = c;
	q->park_err = TL_OK;
	q->sent_ms = 0;
	q->deadline = tli_mono_ms() + c->opts.timeout_ms;
	return TL_OK;
}

int
tli_submit_locked(tl_client *c, tli_req *q)
{
	int rv;

	TLI_ASSERT_LOCKED(&c->mtx);
	if ((rv = req_prepare(c, q)) != TL_OK) {
		return rv;
	}
	if ((rv = req_send_locked(c, q)) != TL_OK) {
		tli_buf_fini(&q->frame);
	}
	return rv;
}

/* Send the parked requests on the connection that just came up; those
 * whose deadline passed (the sweep has not seen them yet) or that cannot
 * be queued go to *failed, with the error that parked them. */
static void
park_flush_locked(tl_client *c, tli_req **failed)
{
	tli_req *q = c->park_head;
	int64_t now = tli_mono_ms();

	c->park_head = c->park_tail = NULL;
	c->nparked = 0;
	while (q != NULL) {
		tli_req *nx = q->next;
		q->next = NULL;
		if (q->deadline <= now) {
			q->next = *failed;
			*failed = q;
		} else if (req_send_locked(c, q) != TL_OK) {
			q->park_err = TL_ENOMEM;
			q->next = *failed;
			*failed = q;
		}
		q = nx;
	}
}

int
tli_submit(tl_client *c, tli_req **qs, size_t n)
{
	int rv = TL_OK;
	size_t done = 0;
	size_t outq_len;

	bool park, no_park = false;

	for (size_t i = 0; i < n; i++) {
		no_park = no_park || qs[i]->no_park;
	}
	pthread_mutex_lock(&c->mtx);
	outq_len = c->outq.len;
	park = !no_park &&
	    (c->draining || (c->state != TLI_UP && tli_client_failover(c)));
	if (c->closing) {
		rv = TL_ECLOSED;
	} else if (c->state != TLI_UP && !park) {
		rv = TL_ECONN;
	}
	for (size_t i = 0; rv == TL_OK && i < n; i++) {
		rv = req_prepare(c, qs[i]);
	}
	for (; rv == TL_OK && done < n; done++) {
		if (park) {
			park_locked(c, qs[done], TL_ECONN);
		} else if ((rv = req_send_locked(c, qs[done])) != TL_OK) {
			break;
		}
	}
	if (rv != TL_OK) {
		/* all or none: take back what was queued */
		for (size_t i = 0; i < done; i++) {
			table_find(c, qs[i]->id, true);
		}
		c->outq.len = outq_len;
		c->outq.oom = false;
	} else {
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mtx);
	if (rv != TL_OK) {
		for (size_t i = 0; i < n; i++) {
			tli_buf_fini(&qs[i]->frame);
		}
	}
	return rv;
}

void
tli_waiter_init(tli_waiter *w)
{
	w->done = false;
	w->err = TL_OK;
	pthread_cond_init(&w->cv, NULL);
}

void
tli_waiter_fini(tli_waiter *w)
{
	pthread_cond_destroy(&w->cv);
}

/* Signalled under the lock: once it is released the waiter may return and
 * take its condition variable with it. */
void
tli_wait_done(tl_client *c, tli_waiter *w, int err)
{
	pthread_mutex_lock(&c->mtx);
	w->err = err;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&c->mtx);
}

int
tli_wait(tl_client *c, tli_waiter *w)
{
	int err;

	pthread_mutex_lock(&c->mtx);
	while (!w->done) {
		pthread_cond_wait(&w->cv, &c->mtx);
	}
	err = w->err;
	pthread_mutex_unlock(&c->mtx);
	tli_waiter_fini(w);
	return err;
}

/* The client whose connection thread this is (NULL on any other thread). */
static _Thread_local const tl_client *conn_of;

int
tli_may_block(const tl_client *c)
{
	if (conn_of == c) {
		tli_client_log((tl_client *) c, TL_LOG_ERROR,
		    "a blocking call from an inline delivery's callback "
		    "(the connection thread) would wait for itself: "
		    "use the asynchronous calls");
		return TL_EINVAL;
	}
	return TL_OK;
}

typedef struct call {
	tli_req q;
	tli_waiter w;
	tli_dec_fn dec;
	void *arg;
} call;

static void
call_reply(tli_req *q, int err, tlp_r *r)
{
	call *k = (call *) q;

	if (err == TL_OK && k->dec != NULL) {
		err = k->dec(k->arg, r);
	}
	tli_wait_done(q->c, &k->w, err);
}

int
tli_call(tl_client *c, tli_buf *frame, uint8_t op, tli_dec_fn dec, void *arg)
{
	call k;
	tli_req *q = &k.q;
	int rv;

	if ((rv = tli_may_block(c)) != TL_OK) {
		tli_buf_fini(frame);
		return rv;
	}
	memset(&k, 0, sizeof(k));
	k.q.frame = *frame;
	tli_buf_init(frame);
	k.q.op = op;
	k.q.on_reply = call_reply;
	/* a session that is gone, or a follower, holds no subscription: an
	 * UNSUBSCRIBE has nothing to wait for */
	k.q.no_park = op == TLP_OP_UNSUBSCRIBE;
	k.dec = dec;
	k.arg = arg;
	tli_waiter_init(&k.w);
	if ((rv = tli_submit(c, &q, 1)) != TL_OK) {
		tli_waiter_fini(&k.w);
		return rv;
	}
	return tli_wait(c, &k.w);
}

void
tli_cb_post_locked(tl_client *c, tli_cb *cb)
{
	TLI_ASSERT_LOCKED(&c->mtx);
	cb->next = NULL;
	if (c->cb_tail != NULL) {
		c->cb_tail->next = cb;
	} else {
		c->cb_head = cb;
		pthread_cond_signal(&c->cb_cv);
	}
	c->cb_tail = cb;
}

void
tli_cb_post(tl_client *c, tli_cb *cb)
{
	pthread_mutex_lock(&c->mtx);
	tli_cb_post_locked(c, cb);
	pthread_mutex_unlock(&c->mtx);
}

/* Takes the whole queue at once: a lease-op reply of n items posts n
 * callbacks, which then cost one lock round, not n. */
static void *
cb_main(void *arg)
{
	tl_client *c = arg;

	pthread_mutex_lock(&c->mtx);
	for (;;) {
		tli_cb *cb;
		while (c->cb_head == NULL && !c->cb_stop) {
			pthread_cond_wait(&c->cb_cv, &c->mtx);
		}
		if ((cb = c->cb_head) == NULL) {
			break;
		}
		c->cb_head = c->cb_tail = NULL;
		pthread_mutex_unlock(&c->mtx);
		while (cb != NULL) {
			tli_cb *next = cb->next; /* fn may free cb */
			cb->fn(cb->arg);
			cb = next;
		}
		pthread_mutex_lock(&c->mtx);
	}
	pthread_mutex_unlock(&c->mtx);
	return NULL;
}

/* ---- ping and the clock ---- */

typedef struct ping {
	tli_req q;
	int64_t t_send;
} ping;

static void
ping_reply(tli_req *q, int err, tlp_r *r)
{
	ping *p = (ping *) q;
	tl_client *c = q->c;
	int64_t bms = 0;

	if (err == TL_OK && tlp_dec_ping_rep(r, &bms) == TL_OK) {
		int64_t t_recv = tli_wall_ms();
		int64_t off = bms - (p->t_send + t_recv) / 2;
		pthread_mutex_lock(&c->mtx);
		c->offset_ms = off;
		pthread_mutex_unlock(&c->mtx);
	} else if (err != TL_OK && err != TL_ECONN && err != TL_ECLOSED) {
		tli_client_log(
		    c, TL_LOG_WARN, "ping failed: %s", tl_strerror(err));
	}
	tli_free(p);
}

/* Under the lock. */
static void
ping_queue(tl_client *c)
{
	ping *p = tli_zalloc(sizeof(*p));
	tlp_w w;

	if (p == NULL) {
		return;
	}
	p->t_send = tli_wall_ms();
	p->q.op = TLP_OP_PING;
	p->q.on_reply = ping_reply;
	tli_frame_start(&p->q.frame, &w, TLP_OP_PING);
	tlp_enc_ping(&w, p->t_send);
	if (tli_submit_locked(c, &p->q) != TL_OK) {
		tli_free(p);
	}
}

int64_t
tl_client_clock_offset(tl_client *c)
{
	int64_t v;

	if (c == NULL) {
		return 0;
	}
	pthread_mutex_lock(&c->mtx);
	v = c->offset_ms;
	pthread_mutex_unlock(&c->mtx);
	return v;
}

int64_t
tl_client_broker_now(tl_client *c)
{
	return tli_wall_ms() + tl_client_clock_offset(c);
}

/* ---- the send thread ---- */

/* Shut s down: I/O on it in progress or to come fails (the caller holds
 * c->mtx for a published s). */
static void
conn_close(tli_conn *s)
{
	if (s->s != NULL) {
		nng_stream_close(s->s);
	} else {
		tli_sock_shutdown(s->fd);
	}
}

/* Free s once no thread uses it. */
static void
conn_free(tli_conn *s)
{
	if (s->s != NULL) {
		nng_stream_free(s->s);
	} else {
		close(s->fd);
	}
	tli_free(s);
}

/* Start a send or receive on s. With a gate (s is the client's published
 * stream), only while the client has not closed s, checked under c->mtx,
 * where every close of the published stream happens: nng 1.5.2 may never
 * complete an operation started on a closed TLS stream, even when it is
 * aborted, while one in progress at the close fails. Returns whether it
 * started. */
static bool
io_start(tl_client *gate, tli_conn *s, nng_aio *aio, bool send)
{
	bool ok = true;

	if (gate != NULL) {
		pthread_mutex_lock(&gate->mtx);
		ok = !gate->closing && gate->stream == s && !gate->stream_dead;
	}
	if (ok && send) {
		nng_stream_send(s->s, aio);
	} else if (ok) {
		nng_stream_recv(s->s, aio);
	}
	if (gate != NULL) {
		pthread_mutex_unlock(&gate->mtx);
	}
	return ok;
}

/* Whether an own socket's wait before the connection is published (dial,
 * HELLO) gives up: the client closes. A published connection takes no stop:
 * whoever leaves it shuts it down, which ends its waits at once. */
static bool
closing_stop(void *arg)
{
	tl_client *c = arg;
	bool stop;

	pthread_mutex_lock(&c->mtx);
	stop = c->closing;
	pthread_mutex_unlock(&c->mtx);
	return stop;
}

/* Send n bytes on s (c: the client; gate: c once s is published). */
static int
stream_send(tl_client *c, tl_client *gate, tli_conn *s, nng_aio *aio,
    uint8_t *p, size_t n, int timeout_ms)
{
	if (s->s == NULL) {
		return tli_sock_send(s->fd, p, n, timeout_ms,
		    gate != NULL ? NULL : closing_stop, c);
	}
	while (n > 0) {
		nng_iov iov;
		size_t got;
		int rv;

		iov.iov_buf = p;
		iov.iov_len = n;
		nng_aio_set_iov(aio, 1, &iov);
		nng_aio_set_timeout(aio, timeout_ms);
		if (!io_start(gate, s, aio, true)) {
			return TL_ECONN;
		}
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio)) != 0) {
			return client_nng_err(rv);
		}
		got = nng_aio_count(aio);
		p += got;
		n -= got;
	}
	return TL_OK;
}

static void *
send_main(void *arg)
{
	tl_client *c = arg;
	tli_buf out;
	nng_aio *aio = c->saio;
	int64_t next_sweep = 0;

	tli_buf_init(&out);
	pthread_mutex_lock(&c->mtx);
	while (!c->closing) {
		int64_t now = tli_mono_ms();
		int64_t wake;

		if (now >= next_sweep) {
			tli_req *late = table_expire(c, now, false);
			tli_req *plate = park_expire(c, now, false);
			tli_lop *llate = NULL;
			tli_consumer_expire(c, now, false, &llate);
			next_sweep = now + 50;
			if (late != NULL || plate != NULL || llate != NULL) {
				pthread_mutex_unlock(&c->mtx);
				reqs_fail(late, TL_ETIMEDOUT);
				park_fail(plate, TL_OK);
				tli_lops_finish(c, llate, TL_ETIMEDOUT);
				pthread_mutex_lock(&c->mtx);
				continue;
			}
		}
		if (c->state == TLI_UP) {
			if (now >= c->next_ping) {
				c->next_ping = now + c->ping_ms;
				ping_queue(c);
			}
			tli_consumer_flush(c);
		}
		if (c->state == TLI_UP && c->outq.len > 0) {
			tli_buf t = out;
			tli_conn *s = c->stream;
			int rv;

			out = c->outq;
			c->outq = t;
			c->sending = true;
			pthread_mutex_unlock(&c->mtx);
			rv = stream_send(
			    c, c, s, aio, out.data, out.len, TLI_STALL_MS);
			tli_buf_reset(&out);
			pthread_mutex_lock(&c->mtx);
			c->sending = false;
			pthread_cond_broadcast(&c->cv);
			if (rv != TL_OK && c->stream == s) {
				tli_client_log(c, TL_LOG_WARN,
				    "send failed: %s", tl_strerror(rv));
				c->stream_dead = true;
				conn_close(s);
				/* The reader may wait on the dead stream for
				 * ever: wake it so it takes the connection
				 * down (and fails what is in flight). */
				nng_aio_abort(c->raio, NNG_ECLOSED);
			}
			continue;
		}
		/* sweep for deadlines only while something can expire */
		wake =
		    c->inflight > 0 || c->nparked > 0 ? next_sweep : now + 1000;
		if (c->state == TLI_UP && c->next_ping < wake) {
			wake = c->next_ping;
		}
		cv_wait_until(&c->cv, &c->mtx, wake);
	}
	c->send_done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	tli_buf_fini(&out);
	return NULL;
}

/* ---- the connection thread ---- */

/* Read the next whole frame into r; body points into r->buf until the next
 * call. */
static int
rd_frame(tli_conn *s, nng_aio *aio, rd_buf *r, int timeout_ms, tlp_hdr *h,
    const uint8_t **body, size_t *blen)
{
	for (;;) {
		size_t avail = r->len - r->off;
		size_t need = TLP_LEN_BYTES;
		nng_iov iov;
		int rv;

		if (avail >= TLP_LEN_BYTES) {
			uint32_t flen;
			if ((rv = tlp_frame_len(r->buf + r->off, &flen)) != 0) {
				return rv;
			}
			need = TLP_LEN_BYTES + flen;
			if (avail >= need) {
				const uint8_t *f =
				    r->buf + r->off + TLP_LEN_BYTES;
				if ((rv = tlp_hdr_decode(h, f, flen)) !=
				    TL_OK) {
					return rv;
				}
				*body = f + TLP_HDR_LEN;
				*blen = flen - TLP_HDR_LEN;
				r->off += need;
				return TL_OK;
			}
		}
		if (r->off > 0) {
			memmove(r->buf, r->buf + r->off, avail);
			r->len = avail;
			r->off = 0;
		}
		if (r->cap < need || r->cap == r->len) {
			size_t ncap =
			    r->cap < RD_MIN_CAP ? RD_MIN_CAP : r->cap * 2;
			uint8_t *nb;
			while (ncap < need) {
				ncap *= 2;
			}
			if ((nb = tli_realloc(r->buf, ncap)) == NULL) {
				return TL_ENOMEM;
			}
			r->buf = nb;
			r->cap = ncap;
		}
		if (s->s == NULL) {
			size_t got;
			if ((rv = tli_sock_recv(s->fd, r->buf + r->len,
			         r->cap - r->len, &got, timeout_ms,
			         r->gate != NULL ? NULL : closing_stop,
			         r->c)) != TL_OK) {
				return rv;
			}
			r->len += got;
			continue;
		}
		iov.iov_buf = r->buf + r->len;
		iov.iov_len = r->cap - r->len;
		nng_aio_set_iov(aio, 1, &iov);
		nng_aio_set_timeout(aio, timeout_ms);
		if (!io_start(r->gate, s, aio, false)) {
			return TL_ECONN;
		}
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio)) != 0) {
			return client_nng_err(rv);
		}
		if (nng_aio_count(aio) == 0) {
			return TL_ECONN;
		}
		r->len += nng_aio_count(aio);
	}
}

static int
conn_dial(tl_client *c, nng_aio *aio, const tli_url *u, tli_conn **out)
{
	tli_conn *s = tli_zalloc(sizeof(*s));
	int rv;

	if (s == NULL) {
		return TL_ENOMEM;
	}
	s->fd = -1;
	if (u->own_tcp) {
		rv =
		    tli_sock_dial(u->url, c->hello_ms, closing_stop, c, &s->fd);
		if (rv != TL_OK) {
			tli_free(s);
			return rv == TL_ETIMEDOUT ? TL_ETIMEDOUT : TL_ECONN;
		}
		*out = s;
		return TL_OK;
	}
	nng_aio_set_timeout(aio, c->hello_ms);
	nng_stream_dialer_dial(u->d, aio);
	nng_aio_wait(aio);
	if ((rv = nng_aio_result(aio)) != 0) {
		tli_free(s);
		return client_nng_err(rv) == TL_ETIMEDOUT ? TL_ETIMEDOUT
		                                          : TL_ECONN;
	}
	s->s = nng_aio_get_output(aio, 0);
	*out = s;
	return TL_OK;
}

static int
conn_hello(tl_client *c, tli_conn *s, nng_aio *aio, rd_buf *r)
{
	tli_buf b;
	tlp_w w;
	tlp_hello m;
	tlp_hdr h;
	tlp_r rr;
	tlp_str detail;
	tlp_hello_rep rep;
	const uint8_t *body;
	size_t blen, nf;
	int64_t t_send, t_recv;
	int rv, err = TL_OK;

	memset(&m, 0, sizeof(m));
	m.proto = TLP_VERSION;
	m.name = TLP_STR(c->opts.name);
	m.role = TLP_STR("");
	m.token = TLP_STR(c->opts.token);
	m.client_id = c->client_id;
	t_send = m.client_ms = tli_wall_ms();
	tli_buf_init(&b);
	tlp_frame_begin(&b, &w, TLP_OP_HELLO, 0, 1);
	tlp_enc_hello(&w, &m);
	if ((rv = tlp_frame_end(&b, 0)) == TL_OK) {
		rv = stream_send(c, NULL, s, aio, b.data, b.len, c->hello_ms);
	}
	tli_buf_fini(&b);
	if (rv != TL_OK) {
		return rv == TL_ECLOSED ? TL_ECONN : rv;
	}
	do {
		rv = rd_frame(s, aio, r, c->hello_ms, &h, &body, &blen);
	} while (rv == TL_OK && (h.flags & TLP_F_REPLY) == 0);
	if (rv != TL_OK) {
		return rv == TL_ECLOSED ? TL_ECONN : rv;
	}
	t_recv = tli_wall_ms();
	tlp_r_init(&rr, body, blen);
	if (tlp_dec_reply_head(&rr, &err, &detail, &nf) != TL_OK) {
		return TL_EPROTO;
	}
	if (err != TL_OK) {
		tli_client_log(c, TL_LOG_ERROR,
		    "the broker refused the session: %s (%.*s)",
		    tl_strerror(err), (int) detail.n,
		    detail.p != NULL ? detail.p : "");
		return err;
	}
	if (tlp_dec_hello_rep(&rr, &rep) != TL_OK) {
		return TL_EPROTO;
	}
	pthread_mutex_lock(&c->mtx);
	c->offset_ms = rep.broker_ms - (t_send + t_recv) / 2;
	c->session_id = rep.session_id;
	pthread_mutex_unlock(&c->mtx);
	atomic_store(&c->answers_ms, rep.answers_ms);
	tli_client_log(c, TL_LOG_INFO,
	    "session %llu with %.*s, clock offset %lld ms",
	    (unsigned long long) rep.session_id, (int) rep.broker_name.n,
	    rep.broker_name.p != NULL ? rep.broker_name.p : "",
	    (long long) c->offset_ms);
	return TL_OK;
}

/* ---- following the cluster's leader ---- */

static int url_add(tl_client *c, const char *url, size_t n, size_t *idx);

static bool
url_find(const tl_client *c, const char *url, size_t n, size_t *idx)
{
	for (size_t i = 0; i < c->nurls; i++) {
		if (strlen(c->urls[i].url) == n &&
		    memcmp(c->urls[i].url, url, n) == 0) {
			*idx = i;
			return true;
		}
	}
	return false;
}

/* The index of the leader a TL_ENOTLEADER reply names, added to the list
 * when it is not in it; -1 when it names none (or one the client cannot
 * dial, or the node that answered). */
static int
conn_leader(tl_client *c, tlp_r *r)
{
	tlp_str u = {NULL, 0};
	size_t idx;
	int rv;

	if (tlp_dec_error_leader(r, &u) != TL_OK || u.n == 0) {
		return -1;
	}
	if (!url_find(c, u.p, u.n, &idx)) {
		if (!tlp_url_scheme_ok(u.p, u.n) ||
		    (rv = url_add(c, u.p, u.n, &idx)) != TL_OK) {
			tli_client_log(c, TL_LOG_WARN,
			    "the cluster names %.*s as its leader, which "
			    "cannot be dialled; trying the next URL",
			    (int) u.n, u.p);
			return -1;
		}
		tli_client_log(c, TL_LOG_INFO,
		    "the cluster names %s as its leader (added to the URLs)",
		    c->urls[idx].url);
	}
	return idx == c->cur ? -1 : (int) idx;
}

/* The error a parked request reports: a request whose first answer left
 * its outcome unknown (TL_ELEADERLOST, a lost connection) keeps that
 * answer, whatever a follower said later. */
static int
req_sticky(const tli_req *q, int err)
{
	if (err == TL_ENOTLEADER &&
	    (q->park_err == TL_ELEADERLOST || q->park_err == TL_ECONN)) {
		return q->park_err;
	}
	return err;
}

/* A reply that sends q to the leader: TL_ENOTLEADER (nothing was applied),
 * or TL_ELEADERLOST for a request that may be sent twice. q is parked to
 * be sent again (a TL_ELEADERLOST at once on this connection, whose node
 * then names the new leader) and a TL_ENOTLEADER starts leaving this
 * connection for the leader it names, or the next URL. Returns false when
 * q is to be completed as it is: its deadline passed, it is never parked,
 * or the client closes. Connection thread. */
static bool
conn_redirect(tl_client *c, tli_req *q, int err, tlp_r *r)
{
	int target = err == TL_ENOTLEADER ? conn_leader(c, r) : -1;
	bool parked = false;

	pthread_mutex_lock(&c->mtx);
	if (err == TL_ENOTLEADER && !c->draining) {
		c->draining = true;
		c->redirect = target;
		tli_client_log(c, TL_LOG_INFO,
		    "%s is not the cluster leader; moving to %s",
		    c->urls[c->cur].url,
		    target >= 0 ? c->urls[target].url : "the next URL");
	}
	if (!c->closing && !q->no_park && q->deadline > tli_mono_ms()) {
		int why = req_sticky(q, err);
		if (err == TL_ELEADERLOST && !c->draining &&
		    req_send_locked(c, q) == TL_OK) {
			q->park_err = why;
			pthread_cond_broadcast(&c->cv);
		} else {
			park_locked(c, q, why);
		}
		parked = true;
	}
	pthread_mutex_unlock(&c->mtx);
	return parked;
}

static void
conn_dispatch(tl_client *c, const tlp_hdr *h, const uint8_t *body, size_t blen)
{
	tli_req *q;
	tlp_r r;
	tlp_str detail;
	size_t nf;
	int err = TL_OK;

	if (h->flags & TLP_F_PUSH) {
		tli_consumer_push(c, h->op, body, blen);
		return;
	}
	if ((h->flags & TLP_F_REPLY) == 0) {
		tli_client_log(c, TL_LOG_WARN,
		    "ignored a frame that is neither a reply "
		    "nor a push (op %d)",
		    h->op);
		return;
	}
	pthread_mutex_lock(&c->mtx);
	q = table_find(c, h->reqid, true);
	pthread_mutex_unlock(&c->mtx);
	if (q == NULL) {
		return; /* timed out already */
	}
	tlp_r_init(&r, body, blen);
	if (tlp_dec_reply_head(&r, &err, &detail, &nf) != TL_OK) {
		req_done(q, TL_EPROTO, NULL);
		return;
	}
	if (err == TL_ENOTLEADER || (err == TL_ELEADERLOST && req_idem(q))) {
		if (conn_redirect(c, q, err, &r)) {
			return;
		}
		err = req_sticky(q, err);
	} else if (q->op != TLP_OP_PING) {
		c->noleader_ms = 0; /* a node that acts as the leader */
		c->redirects = 0;
	}
	if (err != TL_OK) {
		tli_client_log(c, TL_LOG_DEBUG, "%s failed: %s (%.*s)",
		    tlp_op_name(q->op) != NULL ? tlp_op_name(q->op) : "?",
		    tl_strerror(err), (int) detail.n,
		    detail.p != NULL ? detail.p : "");
	}
	/* A failed reply may carry fields after its detail (LOCK's until). */
	req_done(q, err, &r);
}

/* The connection s is gone: fail what was in flight and forget it. */
static void
conn_down(tl_client *c, tli_conn *s, int why)
{
	tli_req *reqs;
	tli_lop *lops = NULL;
	tl_lease *queued;
	int err;

	pthread_mutex_lock(&c->mtx);
	c->stream_dead = true;
	conn_close(s);
	err = c->closing ? TL_ECLOSED : TL_ECONN;
	if (!c->closing && !c->draining) {
		tli_client_log(c, TL_LOG_WARN, "connection to %s lost: %s",
		    c->urls[c->cur].url, tl_strerror(why));
	}
	c->state = c->closing ? TLI_CLOSING : TLI_DOWN;
	c->stream = NULL;
	while (c->sending) {
		/* see stream_abort_wait: a send begun after the close would
		 * wait forever */
		nng_aio_abort(c->saio, NNG_ECLOSED);
		cv_wait_until(&c->cv, &c->mtx, tli_mono_ms() + 10);
	}
	reqs = table_expire(c, 0, true);
	if (!c->closing && tli_client_failover(c)) {
		/* what may be sent twice goes to the next node */
		int64_t now = tli_mono_ms();
		for (tli_req **pp = &reqs; *pp != NULL;) {
			tli_req *q = *pp;
			if (req_idem(q) && !q->no_park && q->deadline > now) {
				*pp = q->next;
				park_locked(c, q,
				    q->park_err == TL_ELEADERLOST
				        ? TL_ELEADERLOST
				        : TL_ECONN);
			} else {
				pp = &q->next;
			}
		}
	}
	c->draining = false;
	/* lease operations not sent yet wait for the next node too */
	tli_consumer_expire(
	    c, tli_mono_ms(), c->closing || !tli_client_failover(c), &lops);
	tli_buf_reset(&c->outq);
	queued = tli_consumer_session_lost(c);
	pthread_mutex_unlock(&c->mtx);
	reqs_fail(reqs, err);
	tli_lops_finish(c, lops, err);
	tli_consumer_free_leases(queued);
	conn_free(s);
}

static void
conn_backoff(tl_client *c, int ms)
{
	int64_t until = tli_mono_ms() + ms;

	pthread_mutex_lock(&c->mtx);
	while (!c->closing && tli_mono_ms() < until) {
		cv_wait_until(&c->cv, &c->mtx, until);
	}
	pthread_mutex_unlock(&c->mtx);
}

/* Dial urls[idx] and open a session; *out is its stream. */
static int
conn_open(tl_client *c, size_t idx, nng_aio *aio, rd_buf *r, tli_conn **out)
{
	int rv;

	r->len = r->off = 0;
	r->c = c;
	r->gate = NULL;
	if ((rv = conn_dial(c, aio, &c->urls[idx], out)) == TL_OK &&
	    (rv = conn_hello(c, *out, aio, r)) != TL_OK) {
		conn_free(*out);
	}
	return rv;
}

/* What tl_client_open reports when no URL gave a session: a broker's
 * refusal (TL_ENOTAUTH, TL_ENOTSUP) says more than an unreachable node. */
static int
conn_open_err(int have, int rv)
{
	if (have != TL_OK && have != TL_ECONN && have != TL_ETIMEDOUT) {
		return have;
	}
	return rv;
}

/* Publish s as the client's session: requests flow again, consumers are
 * re-subscribed (not on the first connection) and the parked requests are
 * sent. */
static void
conn_up(tl_client *c, tli_conn *s, rd_buf *r, bool first)
{
	tli_req *failed = NULL;

	pthread_mutex_lock(&c->mtx);
	c->stream = s;
	c->stream_dead = false;
	r->gate = c;
	c->state = TLI_UP;
	c->gen++;
	c->next_ping = tli_mono_ms() + c->ping_ms;
	if (!first) {
		tli_client_log(
		    c, TL_LOG_INFO, "reconnected to %s", c->urls[c->cur].url);
		tli_consumer_resubscribe(c);
	}
	park_flush_locked(c, &failed);
	c->first_err = TL_OK;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	park_fail(failed, TL_OK);
}

/* Read the session's frames until it fails or, after a TL_ENOTLEADER,
 * the replies in flight are in (*drained then). */
static int
conn_read(tl_client *c, tli_conn *s, nng_aio *aio, rd_buf *r, bool *drained)
{
	tlp_hdr h;
	const uint8_t *body;
	size_t blen;
	int rv;

	/* The broker answers a ping every ping_ms: a longer silence means
	 * the connection is dead. */
	while ((rv = rd_frame(s, aio, r, c->draining ? 1000 : c->idle_ms, &h,
	            &body, &blen)) == TL_OK) {
		conn_dispatch(c, &h, body, blen);
		if (c->draining) {
			pthread_mutex_lock(&c->mtx);
			*drained = c->inflight == 0;
			pthread_mutex_unlock(&c->mtx);
			if (*drained) {
				return TL_ENOTLEADER;
			}
		}
	}
	*drained = c->draining;
	return rv;
}

/* After leaving a session (why: its error): where to dial next and how
 * long to wait first. A redirect goes at once to the named leader; a
 * follower that named none sends the client to the next URL after a pause
 * that grows while no node acts as the leader; a lost connection starts
 * again with the same URL (the last good one) after the reconnect backoff,
 * unless that node went silent (paused, cut off), which a cluster's list
 * passes over at once. */
static int
conn_next(tl_client *c, size_t idx, bool drained, int why, int backoff)
{
	int target;

	pthread_mutex_lock(&c->mtx);
	target = c->redirect;
	c->redirect = -1;
	pthread_mutex_unlock(&c->mtx);
	if (!drained) {
		if (why == TL_ETIMEDOUT && tli_client_failover(c)) {
			c->cur = (idx + 1) % c->nurls;
			return 0;
		}
		return backoff;
	}
	c->cur = target >= 0 ? (size_t) target : (idx + 1) % c->nurls;
	if (target >= 0 && c->redirects++ == 0) {
		return 0; /* straight to the leader named */
	}
	/* no leader named, or the named one sent the client on again (nodes
	 * that disagree during an election): pause, longer each time */
	c->noleader_ms =
	    c->noleader_ms == 0 ? c->opts.backoff_min_ms : c->noleader_ms * 2;
	if (c->noleader_ms > TLI_NOLEADER_MAX_MS) {
		c->noleader_ms = TLI_NOLEADER_MAX_MS;
	}
	return c->noleader_ms;
}

static void *
conn_main(void *arg)
{
	tl_client *c = arg;
	nng_aio *aio = c->raio;
	rd_buf r = {0};
	int backoff = c->opts.backoff_min_ms;
	bool first = true, drained;
	size_t fails = 0;
	int rv, open_err = TL_OK;

	conn_of = c;
	for (;;) {
		tli_conn *s = NULL;
		size_t idx = c->cur;
		bool closing;

		pthread_mutex_lock(&c->mtx);
		closing = c->closing;
		pthread_mutex_unlock(&c->mtx);
		if (closing) {
			break;
		}
		if ((rv = conn_open(c, idx, aio, &r, &s)) != TL_OK) {
			c->cur = (idx + 1) % c->nurls;
			fails++;
			if (first) {
				/* one round over the URLs, then give up */
				open_err = conn_open_err(open_err, rv);
				if (fails < c->nurls) {
					continue;
				}
				pthread_mutex_lock(&c->mtx);
				c->first_err = open_err;
				pthread_cond_broadcast(&c->cv);
				pthread_mutex_unlock(&c->mtx);
				break;
			}
			tli_client_log(c, TL_LOG_DEBUG,
			    "reconnect to %s failed: %s", c->urls[idx].url,
			    tl_strerror(rv));
			if (fails % c->nurls == 0) {
				/* a whole round failed */
				conn_backoff(c, backoff);
				backoff = backoff * 2 > c->opts.backoff_max_ms
				    ? c->opts.backoff_max_ms
				    : backoff * 2;
			}
			continue;
		}
		pthread_mutex_lock(&c->mtx);
		closing = c->closing;
		pthread_mutex_unlock(&c->mtx);
		if (closing) {
			conn_free(s);
			break;
		}
		fails = 0;
		conn_up(c, s, &r, first);
		first = false;
		backoff = c->opts.backoff_min_ms;
		drained = false;
		rv = conn_read(c, s, aio, &r, &drained);
		conn_down(c, s, rv);
		conn_backoff(c, conn_next(c, idx, drained, rv, backoff));
	}
	tli_free(r.buf);
	pthread_mutex_lock(&c->mtx);
	c->conn_done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	return NULL;
}

/* ---- open and close ---- */

static void
client_free(tl_client *c)
{
	for (size_t i = 0; i < c->nurls; i++) {
		nng_stream_dialer_free(c->urls[i].d);
		tli_free(c->urls[i].url);
	}
	if (c->raio != NULL) {
		nng_aio_free(c->raio);
	}
	if (c->saio != NULL) {
		nng_aio_free(c->saio);
	}
	tli_buf_fini(&c->outq);
	tli_htab_fini(&c->table);
	tli_opts_fini(&c->opts);
	pthread_mutex_destroy(&c->mtx);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->cb_cv);
	tli_free(c);
}

/* A small PEM file as a string (NULL on failure, logged). */
static char *
read_pem(tl_client *c, const char *path)
{
	char *buf = tli_read_file(path, 1024 * 1024);

	if (buf == NULL) {
		tli_client_log(c, TL_LOG_ERROR, "cannot read %s: %s", path,
		    strerror(errno));
	}
	return buf;
}

/* The client side of TLS: the broker's certificate is verified against
 * the CA file and the server name (default: the URL's host); a client
 * certificate is offered when one is set. */
static int
client_tls(tl_client *c, const tli_url *u)
{
	nng_tls_config *cfg = NULL;
	char host[256], *cert = NULL, *key = NULL;
	const char *h = u->url + 10, *colon;
	int rv = TL_EINVAL, nrv;

	if (c->opts.tls_ca == NULL) {
		tli_client_log(c, TL_LOG_ERROR,
		    "%s needs a CA file (tl_opts_set_tls_ca or "
		    "TIMELINE_TLS_CA) to verify the broker",
		    u->url);
		return TL_EINVAL;
	}
	colon = strrchr(h, ':');
	snprintf(host, sizeof(host), "%.*s",
	    (int) (colon != NULL ? (size_t) (colon - h) : strlen(h)), h);
	if ((nrv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT)) != 0) {
		return nrv == NNG_ENOMEM ? TL_ENOMEM : TL_EINVAL;
	}
	if ((nrv = nng_tls_config_ca_file(cfg, c->opts.tls_ca)) != 0) {
		tli_client_log(c, TL_LOG_ERROR,
		    "the CA file %s is not usable: %s", c->opts.tls_ca,
		    nng_strerror(nrv));
		goto out;
	}
	if ((nrv = nng_tls_config_server_name(cfg,
	         c->opts.tls_server_name != NULL ? c->opts.tls_server_name
	                                         : host)) != 0 ||
	    (nrv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) !=
	        0) {
		goto out;
	}
	if (c->opts.tls_cert != NULL) {
		if ((cert = read_pem(c, c->opts.tls_cert)) == NULL ||
		    (key = read_pem(c, c->opts.tls_key)) == NULL) {
			goto out;
		}
		if ((nrv = nng_tls_config_own_cert(cfg, cert, key, NULL)) !=
		    0) {
			tli_client_log(c, TL_LOG_ERROR,
			    "the client certificate %s or key %s is not "
			    "usable: %s",
			    c->opts.tls_cert, c->opts.tls_key,
			    nng_strerror(nrv));
			goto out;
		}
	}
	if (nng_stream_dialer_set_ptr(u->d, NNG_OPT_TLS_CONFIG, cfg) == 0) {
		rv = TL_OK;
	}
out:
	if (key != NULL) {
		memset(key, 0, strlen(key));
	}
	tli_free(key);
	tli_free(cert);
	nng_tls_config_free(cfg);
	return rv;
}

/* Add url[0..n) with its dialer (TLS and no Nagle delay as its scheme
 * asks); its index in *idx. Errors: TL_EINVAL (a URL nng refuses, TLS
 * settings that cannot be used), TL_ENOMEM (also when the list is full). */
static int
url_add(tl_client *c, const char *url, size_t n, size_t *idx)
{
	tli_url u = {NULL, NULL, false};
	int rv;

	if (c->nurls == TLI_MAX_URLS + TLI_MAX_LEARNED) {
		return TL_ENOMEM;
	}
	if ((u.url = tli_strndup(url, n)) == NULL) {
		return TL_ENOMEM;
	}
	if ((rv = nng_stream_dialer_alloc(&u.d, u.url)) != 0) {
		tli_free(u.url);
		return rv == NNG_ENOMEM ? TL_ENOMEM : TL_EINVAL;
	}
	if (strncmp(u.url, "tls+tcp://", 10) == 0 &&
	    (rv = client_tls(c, &u)) != TL_OK) {
		nng_stream_dialer_free(u.d);
		tli_free(u.url);
		return rv;
	}
	/* tcp:// on the client's own socket: a thread wake-up less on the way
	 * to every delivery and reply (sdk/sock.c) */
	u.own_tcp = tli_sock_url(u.url);
	/* Requests are coalesced into frames already: no Nagle delay on top
	 * (nng's stream dialer leaves it on). */
	if (strncmp(u.url, "ipc://", 6) != 0) {
		nng_stream_dialer_set_bool(u.d, NNG_OPT_TCP_NODELAY, true);
	}
	pthread_mutex_lock(&c->mtx);
	*idx = c->nurls;
	c->urls[c->nurls++] = u;
	pthread_mutex_unlock(&c->mtx);
	return TL_OK;
}

/* The URLs of the options: one, or a comma-separated list. */
static int
client_urls(tl_client *c)
{
	const char *p = c->opts.url, *item;
	size_t n, idx;
	int rv;

	while (tli_url_next(&p, &item, &n)) {
		if (n == 0 || c->nurls == TLI_MAX_URLS) {
			return TL_EINVAL;
		}
		if ((rv = url_add(c, item, n, &idx)) != TL_OK) {
			return rv;
		}
	}
	c->ngiven = c->nurls;
	c->ping_ms = TLI_PING_MS;
	c->idle_ms = TLI_IDLE_MS;
	c->hello_ms = c->opts.timeout_ms;
	if (c->nurls > 1) {
		c->ping_ms = TLI_CLUSTER_PING_MS;
		c->idle_ms = TLI_CLUSTER_IDLE_MS;
		if (c->hello_ms > TLI_CLUSTER_IDLE_MS) {
			c->hello_ms = TLI_CLUSTER_IDLE_MS;
		}
	}
	return c->nurls > 0 ? TL_OK : TL_EINVAL;
}

/* Tell a library thread to stop (its flag, under the lock, and a wake-up)
 * and wait for it. */
static void
thread_stop(tl_client *c, bool *flag, pthread_cond_t *cv, pthread_t thr)
{
	pthread_mutex_lock(&c->mtx);
	*flag = true;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(&c->mtx);
	pthread_join(thr, NULL);
}

static int
client_threads(tl_client *c)
{
	if (pthread_create(&c->cb_thr, NULL, cb_main, c) != 0) {
		return TL_ENOMEM;
	}
	if (pthread_create(&c->send_thr, NULL, send_main, c) != 0) {
		goto fail_send;
	}
	if (pthread_create(&c->conn_thr, NULL, conn_main, c) != 0) {
		goto fail_conn;
	}
	return TL_OK;

fail_conn:
	thread_stop(c, &c->closing, &c->cv, c->send_thr);
fail_send:
	thread_stop(c, &c->cb_stop, &c->cb_cv, c->cb_thr);
	return TL_ENOMEM;
}

/* nng 1.5.2's ipc and tcp streams do not fail a receive or send that
 * begins after nng_stream_close: it waits forever. So the closer keeps
 * aborting the threads' aios until both threads have left their loops. */
static void
stream_abort_wait(tl_client *c)
{
	pthread_mutex_lock(&c->mtx);
	while (!c->conn_done || !c->send_done) {
		pthread_mutex_unlock(&c->mtx);
		nng_aio_abort(c->raio, NNG_ECLOSED);
		nng_aio_abort(c->saio, NNG_ECLOSED);
		pthread_mutex_lock(&c->mtx);
		if (!c->conn_done || !c->send_done) {
			cv_wait_until(&c->cv, &c->mtx, tli_mono_ms() + 10);
		}
	}
	pthread_mutex_unlock(&c->mtx);
}

static void
client_stop(tl_client *c)
{
	tli_req *parked;
	size_t n;

	pthread_mutex_lock(&c->mtx);
	c->closing = true;
	if (c->stream != NULL) {
		c->stream_dead = true;
		conn_close(c->stream);
	}
	pthread_cond_broadcast(&c->cv);
	n = c->nurls;
	pthread_mutex_unlock(&c->mtx);
	for (size_t i = 0; i < n; i++) {
		nng_stream_dialer_close(c->urls[i].d);
	}
	stream_abort_wait(c);
	pthread_join(c->conn_thr, NULL);
	pthread_join(c->send_thr, NULL);
	pthread_mutex_lock(&c->mtx);
	parked = park_expire(c, 0, true);
	pthread_mutex_unlock(&c->mtx);
	park_fail(parked, TL_ECLOSED);
	thread_stop(c, &c->cb_stop, &c->cb_cv, c->cb_thr);
}

int
tl_client_open(tl_client **out, const tl_opts *o)
{
	tl_client *c;
	tl_opts def;
	int rv;

	if (out == NULL) {
		return TL_EINVAL;
	}
	if ((c = tli_zalloc(sizeof(*c))) == NULL) {
		return TL_ENOMEM;
	}
	pthread_mutex_init(&c->mtx, NULL);
	cv_init_mono(&c->cv);
	cv_init_mono(&c->cb_cv);
	tli_buf_init(&c->outq);
	tli_htab_init(&c->table);
	c->first_err = -1;
	while (c->client_id == 0) {
		if (getrandom(&c->client_id, sizeof(c->client_id), 0) !=
		    (ssize_t) sizeof(c->client_id)) {
			c->client_id = (uint64_t) tli_mono_ns() ^
			    ((uint64_t) getpid() << 32) ^ (uintptr_t) c;
		}
	}
	if (o == NULL) {
		tl_opts *d = NULL;
		if ((rv = tl_opts_alloc(&d)) != TL_OK) {
			goto fail;
		}
		def = *d;
		rv = tli_opts_copy(&c->opts, &def);
		tl_opts_free(d);
	} else {
		rv = tli_opts_copy(&c->opts, o);
	}
	if (rv == TL_OK &&
	    tli_htab_reserve(&c->table, TLI_TABLE_SIZE) != TL_OK) {
		rv = TL_ENOMEM;
	}
	if (rv != TL_OK) {
		goto fail;
	}
	if (nng_aio_alloc(&c->raio, NULL, NULL) != 0 ||
	    nng_aio_alloc(&c->saio, NULL, NULL) != 0) {
		rv = TL_ENOMEM;
		goto fail;
	}
	c->redirect = -1;
	if ((rv = client_urls(c)) != TL_OK) {
		goto fail;
	}
	if ((rv = client_threads(c)) != TL_OK) {
		goto fail;
	}
	pthread_mutex_lock(&c->mtx);
	while (c->first_err == -1) {
		pthread_cond_wait(&c->cv, &c->mtx);
	}
	rv = c->first_err;
	pthread_mutex_unlock(&c->mtx);
	if (rv != TL_OK) {
		client_stop(c);
		goto fail;
	}
	*out = c;
	return TL_OK;

fail:
	client_free(c);
	return rv;
}

void
tl_client_close(tl_client *c)
{
	if (c == NULL) {
		return;
	}
	client_stop(c);
	client_free(c);
}
