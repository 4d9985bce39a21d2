/*
 * The raw wire client of the end-to-end suites and the broker described
 * for the launcher (see raw_client.h).
 */
#define _GNU_SOURCE
#include <nng/nng.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "raw_client.h"
#include "testutil.h"
#include "tlcheck.h"

/* ---- the broker process ---- */

void
rc_broker_init(rc_broker *b, const char *tag)
{
	memset(b, 0, sizeof(*b));
	b->dir = tt_mkdtemp(tag);
	snprintf(b->data, sizeof(b->data), "%s/data", b->dir);
	snprintf(b->sock, sizeof(b->sock), "%s/tl.sock", b->dir);
	snprintf(b->url, sizeof(b->url), "ipc://%s", b->sock);
	tt_proc_timelined(&b->proc, b->dir, "broker");
}

void
rc_broker_dump_log(const rc_broker *b)
{
	tt_proc_dump_log(&b->proc);
}

/* The command line from the settings the test chose (they may change
 * between two starts). */
static void
rc_broker_args(rc_broker *b)
{
	tt_proc *p = &b->proc;

	tt_proc_fini(p);
	tt_proc_timelined(p, b->dir, "broker");
	tt_proc_args(p, "--data", b->data, "--listen", b->url, NULL);
	if (b->ntopics == 0) {
		tt_proc_args(p, "--topic", "t", NULL);
	}
	for (int i = 0; i < b->ntopics; i++) {
		tt_proc_args(p, "--topic", b->topics[i], NULL);
	}
	tt_proc_arg(p, "--metrics");
	if (b->metrics_port > 0) {
		tt_proc_arg(p, "127.0.0.1:%d", b->metrics_port);
	} else {
		tt_proc_arg(p, "off");
	}
	tt_proc_args(p, "--log-level",
	    b->log_level != NULL ? b->log_level : "debug", NULL);
	if (b->window_ms > 0) {
		tt_proc_arg(p, "--window");
		tt_proc_arg(p, "%lld", (long long) b->window_ms);
	}
	if (b->durability != NULL) {
		tt_proc_args(p, "--durability", b->durability, NULL);
	}
	if (b->idle_ms > 0) {
		tt_proc_arg(p, "--idle-timeout");
		tt_proc_arg(p, "%lld", (long long) b->idle_ms);
	}
	for (int i = 0; i < 8 && b->args[i] != NULL; i++) {
		tt_proc_arg(p, "%s", b->args[i]);
	}
}

void
rc_broker_spawn(rc_broker *b, int timeout_ms)
{
	rc_broker_args(b);
	b->proc.timeout_ms = timeout_ms;
	tt_proc_start(&b->proc);
}

void
rc_broker_start(rc_broker *b, const char *tag)
{
	rc_broker_init(b, tag);
	rc_broker_spawn(b, 20000);
}

int
rc_broker_signal(rc_broker *b, int sig, int timeout_ms)
{
	return tt_proc_signal(&b->proc, sig, timeout_ms);
}

void
rc_broker_stop(rc_broker *b)
{
	rc_broker_signal(b, SIGTERM, 20000);
	tt_proc_fini(&b->proc);
	if (b->dir != NULL && getenv("TL_E2E_KEEP") != NULL) {
		fprintf(stderr, "kept %s\n", b->dir);
	} else if (b->dir != NULL) {
		tt_rmtree(b->dir);
		free(b->dir);
		b->dir = NULL;
	}
}

/* ---- frames ---- */

void
rc_frame_free(rc_frame *f)
{
	if (f != NULL) {
		free(f->data);
		free(f);
	}
}

void
rc_frame_body(const rc_frame *f, tlp_r *r)
{
	tlp_r_init(r, f->data + TLP_HDR_LEN, f->len - TLP_HDR_LEN);
}

/* ---- the client ---- */

static int
rc_read_full(rc_client *c, nng_aio *aio, uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		nng_iov iov = {buf + got, n - got};
		int rv;

		if (c->closing) {
			return NNG_ECLOSED;
		}
		nng_aio_set_iov(aio, 1, &iov);
		nng_stream_recv(c->st, aio);
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio)) != 0) {
			return rv;
		}
		got += nng_aio_count(aio);
	}
	return 0;
}

static void *
rc_reader(void *arg)
{
	rc_client *c = arg;
	nng_aio *aio = c->rx_aio;
	int rv = 0;

	while (rv == 0) {
		uint8_t lenb[TLP_LEN_BYTES];
		uint32_t len;
		rc_frame *f;

		if ((rv = rc_read_full(c, aio, lenb, sizeof(lenb))) != 0) {
			break;
		}
		if (tlp_frame_len(lenb, &len) != TL_OK) {
			rv = NNG_EPROTO;
			break;
		}
		if ((f = calloc(1, sizeof(*f))) == NULL ||
		    (f->data = malloc(len)) == NULL) {
			free(f);
			rv = NNG_ENOMEM;
			break;
		}
		f->len = len;
		if ((rv = rc_read_full(c, aio, f->data, len)) != 0) {
			rc_frame_free(f);
			break;
		}
		f->rx_us = tli_wall_us();
		f->rx_ms = f->rx_us / 1000;
		if (tlp_hdr_decode(&f->h, f->data, f->len) != TL_OK) {
			/* Keep it: the test decides what a bad header means. */
			f->h.version = f->data[0];
			f->h.op = f->data[1];
			f->h.flags = f->data[2];
			f->h.reqid = tli_get_be32(f->data + 4);
		}
		pthread_mutex_lock(&c->mtx);
		if (c->tail != NULL) {
			c->tail->next = f;
		} else {
			c->head = f;
		}
		c->tail = f;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mtx);
	}
	pthread_mutex_lock(&c->mtx);
	c->eof = true;
	c->rx_err = rv;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	c->th_done = true;
	return NULL;
}

rc_client *
rc_connect(const char *url, int timeout_ms)
{
	rc_client *c = calloc(1, sizeof(*c));
	nng_aio *aio = NULL;
	pthread_condattr_t ca;

	if (c == NULL) {
		return NULL;
	}
	if (nng_stream_dialer_alloc(&c->dialer, url) != 0 ||
	    nng_aio_alloc(&aio, NULL, NULL) != 0) {
		goto fail;
	}
	nng_aio_set_timeout(aio, timeout_ms);
	nng_stream_dialer_dial(c->dialer, aio);
	nng_aio_wait(aio);
	if (nng_aio_result(aio) != 0) {
		goto fail;
	}
	c->st = nng_aio_get_output(aio, 0);
	nng_aio_free(aio);
	aio = NULL;
	pthread_mutex_init(&c->mtx, NULL);
	pthread_mutex_init(&c->tx_mtx, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	c->next_id = 1;
	if (nng_aio_alloc(&c->rx_aio, NULL, NULL) != 0 ||
	    pthread_create(&c->th, NULL, rc_reader, c) != 0) {
		nng_aio_free(c->rx_aio);
		nng_stream_free(c->st);
		goto fail;
	}
	c->th_started = true;
	return c;
fail:
	nng_aio_free(aio);
	nng_stream_dialer_free(c->dialer);
	free(c);
	return NULL;
}

rc_client *
rc_open(const char *url, const char *name)
{
	rc_client *c = rc_connect(url, 10000);
	int rv;

	cr_assert_not_null(c, "cannot connect to %s", url);
	rv = rc_hello(c, name, tli_wall_ms(), NULL);
	TL_PASS(rv, "HELLO as %s", name);
	return c;
}

void
rc_close(rc_client *c)
{
	if (c == NULL) {
		return;
	}
	/* A recv started just after the close may not see it: cancel
	 * until the reader is out. */
	c->closing = true;
	nng_stream_close(c->st);
	while (c->th_started && !c->th_done) {
		nng_aio_cancel(c->rx_aio);
		tt_nap_ms(1);
	}
	if (c->th_started) {
		pthread_join(c->th, NULL);
	}
	nng_aio_free(c->rx_aio);
	nng_stream_free(c->st);
	nng_stream_dialer_free(c->dialer);
	while (c->head != NULL) {
		rc_frame *f = c->head;
		c->head = f->next;
		rc_frame_free(f);
	}
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mtx);
	pthread_mutex_destroy(&c->tx_mtx);
	free(c);
}

static int
rc_send_locked(rc_client *c, const void *p, size_t n)
{
	nng_aio *aio;
	size_t off = 0;
	int rv;

	if ((rv = nng_aio_alloc(&aio, NULL, NULL)) != 0) {
		return rv;
	}
	nng_aio_set_timeout(aio, 10000);
	while (off < n) {
		nng_iov iov = {(uint8_t *) p + off, n - off};
		nng_aio_set_iov(aio, 1, &iov);
		nng_stream_send(c->st, aio);
		nng_aio_wait(aio);
		if ((rv = nng_aio_result(aio)) != 0) {
			break;
		}
		off += nng_aio_count(aio);
	}
	nng_aio_free(aio);
	return rv;
}

int
rc_send_raw(rc_client *c, const void *p, size_t n)
{
	int rv;

	pthread_mutex_lock(&c->tx_mtx);
	rv = rc_send_locked(c, p, n);
	pthread_mutex_unlock(&c->tx_mtx);
	return rv;
}

/* Wait on c->cv (held) until the monotonic deadline; false when it passed. */
static bool
rc_wait_until(rc_client *c, int64_t deadline_ms)
{
	struct timespec ts;
	int64_t left = deadline_ms - tli_mono_ms();

	if (left <= 0) {
		return false;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->cv, &c->mtx, &ts);
	return true;
}

/* Unlink the first queued frame that `match` accepts; mtx held. */
typedef bool (*rc_match_fn)(const rc_frame *f, uint32_t arg);

static rc_frame *
rc_take(rc_client *c, rc_match_fn match, uint32_t arg)
{
	rc_frame **pp, *prev = NULL;

	for (pp = &c->head; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
		rc_frame *f = *pp;
		if (match(f, arg)) {
			*pp = f->next;
			if (c->tail == f) {
				c->tail = prev;
			}
			f->next = NULL;
			return f;
		}
	}
	return NULL;
}

static bool
rc_match_any(const rc_frame *f, uint32_t arg)
{
	(void) f;
	(void) arg;
	return true;
}

static bool
rc_match_reply(const rc_frame *f, uint32_t reqid)
{
	return (f->h.flags & TLP_F_REPLY) != 0 && f->h.reqid == reqid;
}

static bool
rc_match_push(const rc_frame *f, uint32_t op)
{
	return (f->h.flags & TLP_F_PUSH) != 0 && (op == 0 || f->h.op == op);
}

static rc_frame *
rc_take_wait(
    rc_client *c, rc_match_fn match, uint32_t arg, int timeout_ms, bool *eof)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	rc_frame *f;

	pthread_mutex_lock(&c->mtx);
	for (;;) {
		if ((f = rc_take(c, match, arg)) != NULL || c->eof) {
			break;
		}
		if (!rc_wait_until(c, deadline)) {
			break;
		}
	}
	if (eof != NULL) {
		*eof = c->eof;
	}
	pthread_mutex_unlock(&c->mtx);
	return f;
}

bool
rc_wait_eof(rc_client *c, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	bool eof;

	pthread_mutex_lock(&c->mtx);
	while (!c->eof && rc_wait_until(c, deadline)) {
	}
	eof = c->eof;
	pthread_mutex_unlock(&c->mtx);
	return eof;
}

rc_frame *
rc_next_frame(rc_client *c, int timeout_ms)
{
	return rc_take_wait(c, rc_match_any, 0, timeout_ms, NULL);
}

rc_frame *
rc_wait_push(rc_client *c, uint8_t op, int timeout_ms)
{
	return rc_take_wait(c, rc_match_push, op, timeout_ms, NULL);
}

rc_frame *
rc_wait_push_any(
    rc_client **cs, size_t n, uint8_t op, int timeout_ms, size_t *which)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	for (;;) {
		for (size_t i = 0; i < n; i++) {
			rc_frame *f;
			pthread_mutex_lock(&cs[i]->mtx);
			f = rc_take(cs[i], rc_match_push, op);
			pthread_mutex_unlock(&cs[i]->mtx);
			if (f != NULL) {
				if (which != NULL) {
					*which = i;
				}
				return f;
			}
		}
		if (tli_mono_ms() >= deadline) {
			return NULL;
		}
		/* Arrival times are taken by the readers, so polling here
		 * costs no precision. */
		tt_nap_ms(1);
	}
}

int
rc_call(rc_client *c, uint8_t op, rc_enc_fn enc, const void *arg,
    int timeout_ms, rc_frame **rep)
{
	tli_buf b;
	tlp_w w;
	uint32_t id;
	bool eof = false;
	int rv;

	*rep = NULL;
	tli_buf_init(&b);
	pthread_mutex_lock(&c->tx_mtx);
	id = c->next_id++;
	tlp_frame_begin(&b, &w, op, 0, id);
	enc(&w, arg);
	if ((rv = tlp_frame_end(&b, 0)) == TL_OK) {
		rv = rc_send_locked(c, b.data, b.len) == 0 ? TL_OK : TL_ECLOSED;
	}
	pthread_mutex_unlock(&c->tx_mtx);
	tli_buf_fini(&b);
	if (rv != TL_OK) {
		return rv;
	}
	*rep = rc_take_wait(c, rc_match_reply, id, timeout_ms, &eof);
	if (*rep == NULL) {
		return eof ? TL_ECLOSED : TL_ETIMEDOUT;
	}
	return TL_OK;
}

int
rc_req(rc_client *c, uint8_t op, rc_enc_fn enc, const void *arg, rc_frame **rep,
    tlp_r *r)
{
	rc_frame *f;
	tlp_r rr;
	tlp_str detail;
	size_t nf;
	int err = TL_EPROTO;
	int rv = rc_call(c, op, enc, arg, 10000, &f);

	if (rv != TL_OK) {
		return rv;
	}
	rc_frame_body(f, &rr);
	if (tlp_dec_reply_head(&rr, &err, &detail, &nf) != TL_OK) {
		err = TL_EPROTO;
	}
	if (err == TL_OK && rep != NULL) {
		*rep = f;
		if (r != NULL) {
			*r = rr;
		}
	} else {
		rc_frame_free(f);
	}
	return err;
}

/* ---- operations ---- */

static void
rc_enc_hello(tlp_w *w, const void *arg)
{
	tlp_enc_hello(w, arg);
}

static int
hello_with(rc_client *c, const tlp_hello *h, tlp_hello_rep *out)
{
	rc_frame *f = NULL;
	tlp_r r;
	tlp_hello_rep rep;
	int rv;

	rv = rc_req(c, TLP_OP_HELLO, rc_enc_hello, h, &f, &r);
	if (rv != TL_OK) {
		return rv;
	}
	rv = tlp_dec_hello_rep(&r, &rep);
	if (rv == TL_OK && out != NULL) {
		out->broker_ms = rep.broker_ms;
		out->broker_name = (tlp_str){NULL, 0};
		out->session_id = rep.session_id;
		out->answers_ms = rep.answers_ms;
	}
	rc_frame_free(f);
	return rv;
}

int
rc_hello(rc_client *c, const char *name, int64_t client_ms, tlp_hello_rep *out)
{
	return rc_hello_token(c, name, NULL, client_ms, out);
}

int
rc_hello_token(rc_client *c, const char *name, const char *token,
    int64_t client_ms, tlp_hello_rep *out)
{
	tlp_hello h;

	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR(name);
	h.role = TLP_STR("admin");
	h.client_ms = client_ms;
	if (token != NULL) {
		h.token = TLP_STR(token);
	}
	return hello_with(c, &h, out);
}

int
rc_hello_client(
    rc_client *c, const char *name, uint64_t client_id, tlp_hello_rep *out)
{
	tlp_hello h;

	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR(name);
	h.role = TLP_STR("admin");
	h.client_ms = tli_wall_ms();
	h.client_id = client_id;
	return hello_with(c, &h, out);
}

static void
rc_enc_batch(tlp_w *w, const void *arg)
{
	tlp_enc_batch(w, arg);
}

int
rc_batch(rc_client *c, uint8_t op, const char *topic, const char *who,
    const tlp_item *items, size_t n, rc_results *out)
{
	tlp_batch bt;
	tlp_r r;
	int rv;

	memset(out, 0, sizeof(*out));
	bt.topic = TLP_STR(topic);
	bt.who = TLP_STR(who);
	bt.items = (tlp_item *) items;
	bt.n = n;
	rv = rc_req(c, op, rc_enc_batch, &bt, &out->f, &r);
	if (rv != TL_OK) {
		return rv;
	}
	if ((rv = tlp_dec_results(&r, &out->v, &out->n)) != TL_OK) {
		rc_results_free(out);
	}
	return rv;
}

void
rc_results_free(rc_results *r)
{
	tli_free(r->v);
	rc_frame_free(r->f);
	memset(r, 0, sizeof(*r));
}

int
rc_one(rc_client *c, uint8_t op, const char *topic, const char *who,
    const char *id, uint64_t version, int64_t ts, bool rel, const char *body,
    tlp_result *res)
{
	tlp_item it;
	rc_results out;
	int rv;

	memset(&it, 0, sizeof(it));
	it.id = TLP_STR(id);
	it.version = version;
	it.ts = ts;
	it.rel = rel;
	it.body = body;
	it.body_len = body != NULL ? strlen(body) : 0;
	rv = rc_batch(c, op, topic, who, &it, 1, &out);
	if (rv != TL_OK) {
		return rv;
	}
	if (out.n != 1) {
		rc_results_free(&out);
		return TL_EPROTO;
	}
	rv = out.v[0].err;
	if (res != NULL) {
		res->err = out.v[0].err;
		res->id = (tlp_str){NULL, 0};
		res->version = out.v[0].version;
		res->ts = out.v[0].ts;
		res->deliveries = out.v[0].deliveries;
	}
	rc_results_free(&out);
	return rv;
}

static void
rc_enc_sub(tlp_w *w, const void *arg)
{
	tlp_enc_sub(w, arg);
}

int
rc_subscribe(rc_client *c, const char *topic, const char *consumer,
    int64_t lease_ms, uint32_t credit)
{
	tlp_sub s;

	s.topic = TLP_STR(topic);
	s.consumer = TLP_STR(consumer);
	s.lease_ms = lease_ms;
	s.credit = credit;
	return rc_req(c, TLP_OP_SUBSCRIBE, rc_enc_sub, &s, NULL, NULL);
}

typedef struct rc_get_arg {
	const char *topic;
	const char *id;
} rc_get_arg;

static void
rc_enc_get(tlp_w *w, const void *arg)
{
	const rc_get_arg *g = arg;
	tlp_enc_get(w, TLP_STR(g->topic), TLP_STR(g->id));
}

int
rc_get(
    rc_client *c, const char *topic, const char *id, tlp_msg *m, rc_frame **f)
{
	rc_get_arg g = {topic, id};
	tlp_r r;
	int rv;

	*f = NULL;
	if ((rv = rc_req(c, TLP_OP_GET, rc_enc_get, &g, f, &r)) != TL_OK) {
		return rv;
	}
	if ((rv = tlp_dec_msg(&r, m)) != TL_OK) {
		rc_frame_free(*f);
		*f = NULL;
	}
	return rv;
}

static void
rc_enc_name(tlp_w *w, const void *arg)
{
	tlp_enc_name(w, TLP_STR((const char *) arg));
}

int
rc_topic_get(rc_client *c, const char *topic, tlp_topic *t)
{
	rc_frame *f = NULL;
	tlp_r r;
	int rv;

	memset(t, 0, sizeof(*t));
	rv = rc_req(c, TLP_OP_TOPIC_GET, rc_enc_name, topic, &f, &r);
	if (rv != TL_OK) {
		return rv;
	}
	rv = tlp_dec_topic(&r, t);
	t->name = (tlp_str){NULL, 0};
	rc_frame_free(f);
	return rv;
}

static void
rc_enc_topic_create(tlp_w *w, const void *arg)
{
	tlp_enc_topic_create(w, arg);
}

int
rc_topic_create(rc_client *c, const char *topic, int64_t default_lease)
{
	tlp_topic t;

	memset(&t, 0, sizeof(t));
	t.name = TLP_STR(topic);
	t.buckets = TL_DEFAULT_BUCKETS;
	t.max_body = TL_DEFAULT_MAX_BODY;
	t.default_lease_ms = default_lease;
	t.max_lease_ms = TL_DEFAULT_MAX_LEASE_MS;
	t.max_deliveries = TL_DEFAULT_MAX_DELIVERIES;
	return rc_req(
	    c, TLP_OP_TOPIC_CREATE, rc_enc_topic_create, &t, NULL, NULL);
}

int
rc_wait_deliver(rc_client *c, int timeout_ms, rc_deliver *out)
{
	tlp_r r;
	int rv;

	memset(out, 0, sizeof(*out));
	if ((out->f = rc_wait_push(c, TLP_OP_DELIVER, timeout_ms)) == NULL) {
		return 0;
	}
	rc_frame_body(out->f, &r);
	if ((rv = tlp_dec_deliver(&r, &out->d)) != TL_OK) {
		rc_deliver_free(out);
		return -rv;
	}
	return 1;
}

void
rc_deliver_free(rc_deliver *d)
{
	tlp_deliver_fini(&d->d);
	rc_frame_free(d->f);
	memset(d, 0, sizeof(*d));
}

int
rc_ack_all(rc_client *c, const char *topic, const char *consumer,
    const rc_deliver *dv, rc_results *res)
{
	tlp_item acks[TL_MAX_BATCH];
	size_t n = dv->d.n < TL_MAX_BATCH ? dv->d.n : TL_MAX_BATCH;

	memset(acks, 0, sizeof(acks[0]) * n);
	for (size_t j = 0; j < n; j++) {
		acks[j].id = dv->d.v[j].id;
		acks[j].version = dv->d.v[j].version;
	}
	return rc_batch(c, TLP_OP_ACK, topic, consumer, acks, n, res);
}

/* ---- below the client ---- */

int
rc_unix_connect(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0) {
		return -1;
	}
	return tt_connect_or_close(fd, &sa, sizeof(sa));
}

int
rc_hello_frame(tli_buf *b, const char *name)
{
	tlp_w w;
	tlp_hello h;

	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR(name);
	h.client_ms = tli_wall_ms();
	tli_buf_init(b);
	tlp_frame_begin(b, &w, TLP_OP_HELLO, 0, 1);
	tlp_enc_hello(&w, &h);
	return tlp_frame_end(b, 0);
}

/* ---- HTTP ---- */

char *
rc_http_get(int port, const char *path, int timeout_ms, int *status)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	char req[512];
	char *buf = NULL, *body;
	size_t len = 0, cap = 0;
	int fd, n;

	*status = 0;
	if ((fd = tt_tcp_connect(port)) < 0) {
		return NULL;
	}
	n = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: "
	    "close\r\n\r\n",
	    path, port);
	if (write(fd, req, (size_t) n) != n) {
		close(fd);
		return NULL;
	}
	for (;;) {
		struct pollfd pf = {fd, POLLIN, 0};
		int64_t left = deadline - tli_mono_ms();
		char *hend;
		ssize_t got;

		if (left <= 0) {
			break;
		}
		if (cap - len < 4097) {
			char *nb = realloc(buf, cap * 2 + 8192);
			if (nb == NULL) {
				break;
			}
			buf = nb;
			cap = cap * 2 + 8192;
		}
		if (poll(&pf, 1, (int) left) <= 0) {
			continue;
		}
		if ((got = read(fd, buf + len, cap - len - 1)) <= 0) {
			break; /* EOF (Connection: close) or error */
		}
		len += (size_t) got;
		buf[len] = '\0';
		/* Stop as soon as Content-Length bytes of body are in. */
		if ((hend = strstr(buf, "\r\n\r\n")) != NULL) {
			char *cl = strcasestr(buf, "Content-Length:");
			if (cl != NULL && cl < hend &&
			    len - (size_t) (hend + 4 - buf) >=
			        strtoul(cl + 15, NULL, 10)) {
				break;
			}
		}
	}
	close(fd);
	if (buf == NULL || len == 0) {
		free(buf);
		return NULL;
	}
	buf[len] = '\0';
	if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1 ||
	    (body = strstr(buf, "\r\n\r\n")) == NULL) {
		free(buf);
		return NULL;
	}
	body += 4;
	memmove(buf, body, strlen(body) + 1);
	return buf;
}
