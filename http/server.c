/*
 * The HTTP server of tlhttp.h: libmicrohttpd with poll event-loop
 * threads, the route table, body limits, and the workers a request's
 * blocking work runs on.
 *
 * DESIGN. A request is routed on its first call, when only the headers
 * are in; the raw URI comes from the URI log callback (libmicrohttpd would
 * otherwise unescape the path, and "%2F" inside a parameter matters).
 * The event-loop threads never block: with the body in, the connection is
 * suspended and the request handed to a worker (the pool grows to the
 * number of requests in progress, so slow requests do not hold up each
 * other), or to the route's fast hook, whose asynchronous completion
 * either sends its reply or hands the request on to a worker. The worker
 * makes the reply and resumes the connection; the resumed request is
 * called again and queues the reply made for it. Stopping refuses new
 * work and waits until no connection is suspended before the daemon
 * stops, since libmicrohttpd cannot stop with suspended connections.
 *
 * Streams. A request marked by tlh_req_stream goes to a worker as soon
 * as its headers are in, with the connection live: the event loop puts
 * the body into a bounded buffer the handler reads (tlh_req_read),
 * suspending the connection while the buffer is full; the handler's
 * reply body goes through another bounded buffer the event loop sends
 * from (a libmicrohttpd content reader), which suspends the connection
 * while the buffer is empty. libmicrohttpd queues a reply only before the
 * body is read or once it is all in, so the connection also waits,
 * suspended, from the body's end until the reply is published (its first
 * body bytes, its end, or the handler's return); from then on the rest of
 * the body is dropped. Who suspended resumes nothing: the other side
 * resumes when it changes what the suspension waited for. A streamed
 * request is shared by the event loop, the worker and the reply's reader
 * and freed by the last of them (refs). Locks: a request's stream mutex,
 * then the server's mutex (a leaf).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base.h"
#include "guard.h"
#include "htab.h" /* TLI_CONTAINER */
#include "queue.h"
#include "tlhttp.h"

/* Workers are started when a request finds none idle (up to this) and
 * stay until the server stops. */
#define WORKERS_MAX 1024
/* Path segments a pattern may have; deeper paths go to the fallback. */
#define SEGS_MAX 32
/* A stream's buffer each way: the body is read into it until it holds
 * this much, then waits until the handler has taken it down to
 * STREAM_LOW; a handler's write waits while the reply's is full. */
#define STREAM_CAP (64u * 1024u)
#define STREAM_LOW (16u * 1024u)

/* ---- routes ---- */

static const char *const method_names[] = {
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", NULL};
#define METHODS_ANY 0xffffffffu

typedef struct rt {
	tlh_route r;
	char *pat; /* the pattern, split: segments NUL-ended */
	const char *segs[SEGS_MAX];
	bool param[SEGS_MAX]; /* segs[i] is a parameter's name */
	int nseg;
	unsigned methods; /* bit i: method_names[i] */
} rt;

static int
method_bit(const char *m, size_t n)
{
	for (int i = 0; method_names[i] != NULL; i++) {
		if (strlen(method_names[i]) == n &&
		    strncmp(method_names[i], m, n) == 0) {
			return i;
		}
	}
	return -1;
}

static int
methods_parse(const char *s, unsigned *out)
{
	*out = 0;
	if (strcmp(s, "*") == 0) {
		*out = METHODS_ANY;
		return TL_OK;
	}
	while (*s != '\0') {
		size_t n = strcspn(s, "|");
		int b = method_bit(s, n);
		if (b < 0) {
			return TL_EINVAL;
		}
		*out |= 1u << b;
		s += n + (s[n] == '|' ? 1 : 0);
	}
	return *out != 0 ? TL_OK : TL_EINVAL;
}

static int
pattern_parse(rt *t)
{
	char *p = t->pat;

	if (*p++ != '/') {
		return TL_EINVAL;
	}
	for (;;) {
		char *sl = strchr(p, '/');
		size_t n;
		if (t->nseg == SEGS_MAX) {
			return TL_EINVAL;
		}
		if (sl != NULL) {
			*sl = '\0';
		}
		n = strlen(p);
		t->param[t->nseg] = n >= 2 && p[0] == '{' && p[n - 1] == '}';
		if (t->param[t->nseg]) {
			p[n - 1] = '\0';
			p++;
		}
		t->segs[t->nseg++] = p;
		if (sl == NULL) {
			return TL_OK;
		}
		p = sl + 1;
	}
}

/* ---- the server ---- */

/* A byte queue of a stream: data[off, off + len). */
typedef struct fifo {
	char *data;
	size_t cap, off, len;
} fifo;

static bool
fifo_push(fifo *f, const char *p, size_t n)
{
	if (f->off + f->len + n > f->cap && f->off > 0) {
		memmove(f->data, f->data + f->off, f->len);
		f->off = 0;
	}
	if (f->len + n > f->cap) {
		size_t cap = f->len + n > STREAM_CAP ? f->len + n : STREAM_CAP;
		char *d = tli_realloc(f->data, cap);
		if (d == NULL) {
			return false;
		}
		f->data = d;
		f->cap = cap;
	}
	memcpy(f->data + f->off + f->len, p, n);
	f->len += n;
	return true;
}

static size_t
fifo_pop(fifo *f, void *out, size_t max)
{
	size_t n = f->len < max ? f->len : max;

	memcpy(out, f->data + f->off, n);
	f->off += n;
	f->len -= n;
	if (f->len == 0) {
		f->off = 0;
	}
	return n;
}

static void
fifo_fini(fifo *f)
{
	tli_free(f->data);
	memset(f, 0, sizeof(*f));
}

/* What a suspended stream waits for. */
enum {
	WAIT_NONE = 0,
	WAIT_ROOM,  /* the body's buffer to drain */
	WAIT_REPLY, /* the body is in: the reply to be published */
	WAIT_DATA,  /* the reply's next bytes (or its end) */
};

struct tlh_req;

struct tlh_server {
	tlh_config cfg;
	rt **routes;
	int nroutes;
	rt *fallback;
	struct MHD_Daemon *d;
	tlh_guard *guard; /* owns the listening socket */
	char url[300];

	pthread_mutex_t mtx;
	pthread_cond_t cv;      /* work queued, or stopping */
	pthread_cond_t idle_cv; /* no request suspended any more */
	tli_queue work;         /* requests waiting for a worker */
	pthread_t *tids;
	int nthreads, idle;
	int queued;        /* in work: a burst needs one idle worker each */
	int suspended;     /* connections suspended by us */
	bool draining;     /* stopping: suspend no more connections */
	bool stop;         /* workers: leave once the queue is empty */
	tlh_nets *trusted; /* cfg.trusted_proxies, parsed (realip.c) */
};

struct tlh_req {
	tlh_server *s;
	struct MHD_Connection *conn;
	char *uri;         /* raw */
	char *path;        /* raw, before '?' */
	const char *query; /* inside uri, or "" */
	char method[16];
	char ip[64];
	const rt *route;
	/* the decoded segments of the path, and the captured parameters */
	char *segbuf;
	char *seg[SEGS_MAX];
	size_t seglen[SEGS_MAX];
	int nseg;
	/* the body */
	tli_buf body;
	uint64_t limit;
	bool over;
	/* the state of the request */
	bool started;    /* the first call was made */
	bool suspended;  /* by us, until resumed */
	bool replied;    /* a reply was made (it may be queued already) */
	bool failed;     /* no reply could be made: close */
	bool body_timed; /* the body's timeout is on */
	struct MHD_Response *resp; /* made, not yet queued */
	unsigned resp_status;
	tli_qnode wn; /* in the worker queue */
	/* a stream (tlh_req_stream); the fields below under smtx */
	bool streaming;
	tli_buf hdrs;  /* the headers, "name\0value\0"... */
	bool hdrs_own; /* read from hdrs */
	pthread_mutex_t smtx;
	pthread_cond_t scv;    /* data, room, the end, or gone */
	int refs;              /* the connection, the worker, the reader */
	int wait;              /* WAIT_*: why the connection is suspended */
	fifo in, out;          /* the body, the reply's body */
	uint64_t body_seen;    /* counted against the limit */
	bool body_end;         /* the whole body is in */
	bool gone;             /* the connection is closed */
	bool published;        /* the reply may be queued */
	bool out_stream;       /* its body comes from tlh_reply_write */
	bool out_end, out_err; /* its body ended (with an error) */
	bool out_queued;       /* its reader holds a reference */
};

static void req_unref(tlh_req *q);
static bool stream_suspend(tlh_req *q, int why);
static void stream_wake(tlh_req *q, unsigned whys);

int
tlh_route_add(tlh_server *s, const tlh_route *r)
{
	rt *t, **nr;
	int rv;

	TLI_ASSERT(s->d == NULL);
	if (r->handler == NULL || (t = tli_zalloc(sizeof(*t))) == NULL) {
		return r->handler == NULL ? TL_EINVAL : TL_ENOMEM;
	}
	t->r = *r;
	rv = methods_parse(r->methods != NULL ? r->methods : "*", &t->methods);
	if (rv == TL_OK && r->pattern != NULL) {
		t->pat = tli_strndup(r->pattern, strlen(r->pattern));
		rv = t->pat == NULL ? TL_ENOMEM : pattern_parse(t);
	}
	if (rv == TL_OK && r->pattern == NULL) {
		tli_free(s->fallback);
		s->fallback = t;
		return TL_OK;
	}
	nr = rv == TL_OK
	    ? tli_realloc(s->routes, sizeof(*nr) * (size_t) (s->nroutes + 1))
	    : NULL;
	if (nr == NULL) {
		tli_free(t->pat);
		tli_free(t);
		return rv != TL_OK ? rv : TL_ENOMEM;
	}
	s->routes = nr;
	s->routes[s->nroutes++] = t;
	return TL_OK;
}

/* Split and decode the path; false on a bad escape or a deep path. */
static bool
req_split(tlh_req *q)
{
	char *p;

	if ((q->segbuf = tli_strndup(q->path, strlen(q->path))) == NULL) {
		return false;
	}
	p = q->segbuf + 1;
	while (q->nseg < SEGS_MAX) {
		char *sl = strchr(p, '/');
		long n;
		if (sl != NULL) {
			*sl = '\0';
		}
		if ((n = tlh_url_dec(p, strlen(p))) < 0) {
			return false;
		}
		q->seg[q->nseg] = p;
		q->seglen[q->nseg++] = (size_t) n;
		if (sl == NULL) {
			return true;
		}
		p = sl + 1;
	}
	return false;
}

static bool
route_fits(tlh_req *q, const rt *t)
{
	if (t->nseg != q->nseg) {
		return false;
	}
	for (int i = 0; i < t->nseg; i++) {
		if (!t->param[i] &&
		    (strlen(t->segs[i]) != q->seglen[i] ||
		        strcmp(t->segs[i], q->seg[i]) != 0)) {
			return false;
		}
	}
	if (t->r.when == NULL) {
		return true;
	}
	q->route = t; /* its parameters, for when() */
	return t->r.when(q, q->s->cfg.arg);
}

/* The route of q: a route, the fallback (NULL route, true), or a known
 * path asked with another method (false, *allow = the methods it takes). */
static bool
route_match(tlh_req *q, unsigned *allow)
{
	tlh_server *s = q->s;
	int bit = method_bit(q->method, strlen(q->method));
	unsigned mb = bit < 0 ? 0 : 1u << bit;
	const rt *first = NULL;

	*allow = 0;
	q->route = s->fallback;
	if (!req_split(q)) {
		return true;
	}
	for (int i = 0; i < s->nroutes; i++) {
		const rt *t = s->routes[i];
		if ((first != NULL && strcmp(t->r.pattern, first->r.pattern)) ||
		    !route_fits(q, t)) {
			q->route = s->fallback;
			continue;
		}
		if (first == NULL) {
			first = t;
		}
		if ((t->methods & mb) != 0 || t->methods == METHODS_ANY) {
			q->route = t;
			return true;
		}
		*allow |= t->methods;
	}
	q->route = s->fallback;
	return first == NULL || (first->r.flags & TLH_OTHERS_FALLBACK) != 0;
}

static void
allow_header(tlh_req *q, unsigned allow)
{
	tli_buf b = TLI_BUF_INIT;

	for (int i = 0; method_names[i] != NULL; i++) {
		if ((allow & (1u << i)) != 0) {
			tli_buf_printf(
			    &b, "%s%s", b.len > 0 ? ", " : "", method_names[i]);
		}
	}
	tlh_reply_header(q, "Allow", tli_buf_str(&b));
	tli_buf_fini(&b);
}

/* ---- replies ---- */

/* The reply made of resp (NULL: none could be: the connection closes). */
static int
reply_set(tlh_req *q, struct MHD_Response *resp, int status, const char *ctype,
    unsigned flags)
{
	const char *const *h = q->s->cfg.headers;

	if (resp == NULL) {
		q->failed = true;
		return TL_ENOMEM;
	}
	if (ctype != NULL) {
		MHD_add_response_header(resp, "Content-Type", ctype);
	}
	for (; (flags & TLH_REPLY_BARE) == 0 && h != NULL && h[0] != NULL;
	     h += 2) {
		MHD_add_response_header(resp, h[0], h[1]);
	}
	q->resp = resp;
	q->resp_status = (unsigned) status;
	return TL_OK;
}

int
tlh_reply(tlh_req *q, int status, const char *ctype, const void *body,
    size_t len, unsigned flags)
{
	struct MHD_Response *resp;

	TLI_ASSERT(!q->replied); /* one reply per request */
	q->replied = true;
	resp = MHD_create_response_from_buffer(
	    len, (void *) body, MHD_RESPMEM_MUST_COPY);
	return reply_set(q, resp, status, ctype, flags);
}

/* ---- streamed replies ---- */

/* On the event loop: the reply's next bytes; suspends while there are
 * none yet. */
static ssize_t
out_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	tlh_req *q = cls;
	ssize_t n = 0;

	(void) pos;
	pthread_mutex_lock(&q->smtx);
	if (q->out.len > 0) {
		n = (ssize_t) fifo_pop(&q->out, buf, max);
		pthread_cond_broadcast(&q->scv);
	} else if (q->out_end) {
		n = q->out_err ? MHD_CONTENT_READER_END_WITH_ERROR
		               : MHD_CONTENT_READER_END_OF_STREAM;
	} else if (!stream_suspend(q, WAIT_DATA)) {
		n = MHD_CONTENT_READER_END_WITH_ERROR;
	}
	pthread_mutex_unlock(&q->smtx);
	return n;
}

/* The reply is gone: a queued one held a reference to q. */
static void
out_free(void *cls)
{
	tlh_req *q = cls;

	if (q->out_queued) {
		req_unref(q);
	}
}

int
tlh_reply_stream(
    tlh_req *q, int status, const char *ctype, uint64_t size, unsigned flags)
{
	struct MHD_Response *resp;

	TLI_ASSERT(q->streaming && !q->replied);
	q->replied = true;
	q->out_stream = true;
	resp = MHD_create_response_from_callback(
	    size, 32 * 1024, out_read, q, out_free);
	return reply_set(q, resp, status, ctype, flags);
}

/* The reply may be queued (smtx held); the rest of the body is dropped. */
static void
stream_publish(tlh_req *q)
{
	if (q->published) {
		return;
	}
	q->published = true;
	fifo_fini(&q->in);
	pthread_cond_broadcast(&q->scv);
	stream_wake(q, 1u << WAIT_ROOM | 1u << WAIT_REPLY);
}

int
tlh_reply_write(tlh_req *q, const void *p, size_t n)
{
	const char *b = p;
	int rv = TL_OK;

	TLI_ASSERT(q->out_stream);
	pthread_mutex_lock(&q->smtx);
	stream_publish(q);
	while (n > 0 && rv == TL_OK) {
		size_t k = STREAM_CAP -
		    (q->out.len < STREAM_CAP ? q->out.len : STREAM_CAP);
		if (q->gone || q->out_end) {
			rv = TL_ECLOSED;
		} else if (k == 0) {
			pthread_cond_wait(&q->scv, &q->smtx);
		} else {
			k = k < n ? k : n;
			if (!fifo_push(&q->out, b, k)) {
				rv = TL_ENOMEM;
				break;
			}
			b += k;
			n -= k;
			stream_wake(q, 1u << WAIT_DATA);
		}
	}
	pthread_mutex_unlock(&q->smtx);
	return rv;
}

void
tlh_reply_end(tlh_req *q, bool ok)
{
	TLI_ASSERT(q->out_stream);
	pthread_mutex_lock(&q->smtx);
	stream_publish(q);
	if (!q->out_end) {
		q->out_end = true;
		q->out_err = !ok;
	}
	stream_wake(q, 1u << WAIT_DATA);
	pthread_mutex_unlock(&q->smtx);
}

void
tlh_reply_header(tlh_req *q, const char *name, const char *value)
{
	if (q->resp != NULL) {
		MHD_add_response_header(q->resp, name, value);
	}
}

bool
tlh_replied(const tlh_req *q)
{
	return q->replied;
}

/* Drops the reply made (a 413 takes precedence on the first call). */
static void
reply_drop(tlh_req *q)
{
	if (q->resp != NULL) {
		MHD_destroy_response(q->resp);
		q->resp = NULL;
	}
	q->replied = q->failed = false;
}

static void
reply_error(tlh_req *q, tlh_error e, unsigned allow)
{
	static const struct {
		int status;
		const char *text;
	} def[] = {
	    [TLH_E_TARGET] = {400, "Bad request target"},
	    [TLH_E_METHOD] = {405, "Method not allowed"},
	    [TLH_E_TOO_LARGE] = {413, "Request too large"},
	    [TLH_E_STOPPING] = {503, "Stopping"},
	    [TLH_E_NO_REPLY] = {500, "Internal error"},
	    [TLH_E_NOT_FOUND] = {404, "Not found"},
	    [TLH_E_BAD_REQUEST] = {400, "Bad request"},
	};

	if (q->s->cfg.error != NULL) {
		q->s->cfg.error(q, e, q->s->cfg.arg);
	} else {
		tli_buf b = TLI_BUF_INIT;
		tli_buf_puts(&b, "{\"error\":");
		tlh_json_str(&b, def[e].text, strlen(def[e].text));
		tli_buf_puts(&b, "}");
		tlh_reply(
		    q, def[e].status, "application/json", b.data, b.len, 0);
		tli_buf_fini(&b);
	}
	if (e == TLH_E_METHOD) {
		allow_header(q, allow);
	}
}

/* On the event loop: queue the reply made for q (none: close). */
static enum MHD_Result
reply_flush(struct MHD_Connection *conn, tlh_req *q)
{
	enum MHD_Result rv;

	if (q->resp == NULL) {
		return MHD_NO;
	}
	if (q->out_stream) {
		/* the queued reply's reader holds q until it is freed */
		pthread_mutex_lock(&q->smtx);
		q->refs++;
		q->out_queued = true;
		pthread_mutex_unlock(&q->smtx);
	}
	rv = MHD_queue_response(conn, q->resp_status, q->resp);
	MHD_destroy_response(q->resp);
	q->resp = NULL;
	return rv;
}

/* ---- the request ---- */

const char *
tlh_req_method(const tlh_req *q)
{
	return q->method;
}

const char *
tlh_req_uri(const tlh_req *q)
{
	return q->uri;
}

const char *
tlh_req_path(const tlh_req *q)
{
	return q->path;
}

const char *
tlh_req_query(const tlh_req *q)
{
	return q->query;
}

const char *
tlh_req_ip(const tlh_req *q)
{
	return q->ip;
}

/* A stream's worker reads the headers from a copy: the event loop adds a
 * chunked body's trailers to libmicrohttpd's list meanwhile. */
/* The copied header after name (NULL: the first); its value in *value. */
static const char *
hdrs_next(const tlh_req *q, const char *name, const char **value)
{
	const char *b = (const char *) q->hdrs.data;
	const char *p = name == NULL ? b : *value + strlen(*value) + 1;

	if (b == NULL || p >= b + q->hdrs.len) {
		return NULL;
	}
	*value = p + strlen(p) + 1;
	return p;
}

static enum MHD_Result
hdrs_copy(void *arg, enum MHD_ValueKind kind, const char *k, const char *v)
{
	tli_buf *b = arg;

	(void) kind;
	tli_buf_append(b, k, strlen(k) + 1);
	v = v != NULL ? v : "";
	tli_buf_append(b, v, strlen(v) + 1);
	return MHD_YES;
}

const char *
tlh_req_header(const tlh_req *q, const char *name)
{
	const char *p, *v = NULL;

	if (!q->hdrs_own) {
		return MHD_lookup_connection_value(
		    q->conn, MHD_HEADER_KIND, name);
	}
	for (p = hdrs_next(q, NULL, &v); p != NULL; p = hdrs_next(q, p, &v)) {
		if (strcasecmp(p, name) == 0) {
			return v;
		}
	}
	return NULL;
}

typedef struct each_ctx {
	void (*fn)(const char *, const char *, void *);
	void *arg;
} each_ctx;

static enum MHD_Result
each_header(void *arg, enum MHD_ValueKind kind, const char *k, const char *v)
{
	each_ctx *c = arg;

	(void) kind;
	c->fn(k, v != NULL ? v : "", c->arg);
	return MHD_YES;
}

void
tlh_req_each_header(const tlh_req *q,
    void (*fn)(const char *name, const char *value, void *arg), void *arg)
{
	each_ctx c = {fn, arg};
	const char *p, *v = NULL;

	if (!q->hdrs_own) {
		MHD_get_connection_values(
		    q->conn, MHD_HEADER_KIND, each_header, &c);
		return;
	}
	for (p = hdrs_next(q, NULL, &v); p != NULL; p = hdrs_next(q, p, &v)) {
		fn(p, v, arg);
	}
}

const char *
tlh_req_param_at(const tlh_req *q, size_t i, const char **name, size_t *len)
{
	const rt *t = q->route;
	size_t k = 0;

	for (int j = 0; t != NULL && t->r.pattern != NULL && j < t->nseg; j++) {
		if (t->param[j] && k++ == i) {
			if (name != NULL) {
				*name = t->segs[j];
			}
			if (len != NULL) {
				*len = q->seglen[j];
			}
			return q->seg[j];
		}
	}
	return NULL;
}

const char *
tlh_req_param(const tlh_req *q, const char *name, size_t *len)
{
	const char *n, *v;

	for (size_t i = 0; (v = tlh_req_param_at(q, i, &n, len)) != NULL; i++) {
		if (strcmp(n, name) == 0) {
			return v;
		}
	}
	return NULL;
}

const char *
tlh_req_body(const tlh_req *q, size_t *len)
{
	if (len != NULL) {
		*len = q->body.len;
	}
	return tli_buf_str(&q->body);
}

bool
tlh_req_body_over(const tlh_req *q)
{
	return q->over;
}

void
tlh_req_set_body_max(tlh_req *q, uint64_t max)
{
	q->limit = max;
}

void
tlh_req_stream(tlh_req *q)
{
	q->streaming = true;
}

int
tlh_req_read(tlh_req *q, void *buf, size_t cap, size_t *n)
{
	int rv = TL_OK;

	TLI_ASSERT(q->streaming);
	*n = 0;
	pthread_mutex_lock(&q->smtx);
	while (q->in.len == 0 && !q->body_end && !q->over && !q->gone &&
	    !q->published) {
		pthread_cond_wait(&q->scv, &q->smtx);
	}
	if (q->over) {
		rv = TL_ETOOLARGE;
	} else if (q->in.len > 0) {
		*n = fifo_pop(&q->in, buf, cap);
		if (q->in.len <= STREAM_LOW) {
			stream_wake(q, 1u << WAIT_ROOM);
		}
	} else if (!q->body_end) {
		rv = TL_ECLOSED; /* gone, or the reply is published */
	}
	pthread_mutex_unlock(&q->smtx);
	return rv;
}

const void *
tlh_req_route_data(const tlh_req *q)
{
	return q->route != NULL ? q->route->r.data : NULL;
}

/* The adapter's state follows the request at its aligned size. */
static size_t
state_off(void)
{
	return (sizeof(tlh_req) + alignof(max_align_t) - 1) /
	    alignof(max_align_t) * alignof(max_align_t);
}

void *
tlh_req_state(tlh_req *q)
{
	return (char *) q + state_off();
}

static void
req_free(tlh_req *q)
{
	tlh_server *s;

	if (q == NULL) {
		return;
	}
	s = q->s;
	TLI_ASSERT(!q->suspended);
	if (s->cfg.req_fini != NULL) {
		s->cfg.req_fini(q, s->cfg.arg);
	}
	tli_free(q->uri);
	tli_free(q->path);
	tli_free(q->segbuf);
	tli_buf_fini(&q->body);
	if (q->resp != NULL) {
		MHD_destroy_response(q->resp);
	}
	tli_buf_fini(&q->hdrs);
	fifo_fini(&q->in);
	fifo_fini(&q->out);
	pthread_mutex_destroy(&q->smtx);
	pthread_cond_destroy(&q->scv);
	tli_free(q);
}

/* Drops a reference to q: the last frees it. */
static void
req_unref(tlh_req *q)
{
	int refs;

	pthread_mutex_lock(&q->smtx);
	refs = --q->refs;
	pthread_mutex_unlock(&q->smtx);
	if (refs == 0) {
		req_free(q);
	}
}

/* Behind trusted proxies: the peer's address, then X-Forwarded-For. */
static void
client_ip_trusted(tlh_req *q)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
	    q->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
	char peer[64] = "?";

	if (sa != NULL && sa->sa_family == AF_INET) {
		inet_ntop(AF_INET,
		    &((const struct sockaddr_in *) (const void *) sa)->sin_addr,
		    peer, sizeof(peer));
	} else if (sa != NULL && sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6,
		    &((const struct sockaddr_in6 *) (const void *) sa)
		         ->sin6_addr,
		    peer, sizeof(peer));
	}
	tlh_client_addr(q->s->trusted, peer,
	    tlh_req_header(q, "X-Forwarded-For"), q->ip, sizeof(q->ip));
}

static void
client_ip(tlh_req *q)
{
	const union MHD_ConnectionInfo *ci;
	const struct sockaddr *sa;

	snprintf(q->ip, sizeof(q->ip), "?");
	if (q->s->trusted != NULL) {
		client_ip_trusted(q);
		return;
	}
	if (q->s->cfg.trust_forwarded) {
		const char *xff = tlh_req_header(q, "X-Forwarded-For");
		if (xff != NULL && *xff != '\0') {
			const char *last = strrchr(xff, ',');
			last = last ? last + 1 : xff;
			while (*last == ' ') {
				last++;
			}
			snprintf(q->ip, sizeof(q->ip), "%s", last);
			return;
		}
	}
	ci = MHD_get_connection_info(
	    q->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci == NULL || (sa = ci->client_addr) == NULL) {
		return;
	}
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET,
		    &((const struct sockaddr_in *) (const void *) sa)->sin_addr,
		    q->ip, sizeof(q->ip));
	} else if (sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6,
		    &((const struct sockaddr_in6 *) (const void *) sa)
		         ->sin6_addr,
		    q->ip, sizeof(q->ip));
	}
}

/* ---- workers and suspended connections ---- */

static void
resumed(tlh_server *s)
{
	pthread_mutex_lock(&s->mtx);
	TLI_ASSERT(s->suspended > 0);
	if (--s->suspended == 0) {
		pthread_cond_broadcast(&s->idle_cv);
	}
	pthread_mutex_unlock(&s->mtx);
}

/* Resume q's connection; q may be gone once this returns. */
static void
resume(tlh_req *q)
{
	tlh_server *s = q->s;

	TLI_ASSERT(q->suspended); /* suspended exactly once before */
	q->suspended = false;
	MHD_resume_connection(q->conn);
	resumed(s);
}

/* Suspend q's connection; false while the server stops. */
static bool
suspend(tlh_req *q)
{
	tlh_server *s = q->s;

	pthread_mutex_lock(&s->mtx);
	if (s->draining) {
		pthread_mutex_unlock(&s->mtx);
		return false;
	}
	s->suspended++;
	pthread_mutex_unlock(&s->mtx);
	TLI_ASSERT(!q->suspended);
	q->suspended = true;
	MHD_suspend_connection(q->conn);
	return true;
}

/* Suspend a stream's connection (on the event loop, smtx held) until the
 * worker changes what it waits for; false while the server stops (then
 * the connection is closed instead, and the worker finds it gone). */
static bool
stream_suspend(tlh_req *q, int why)
{
	/* libmicrohttpd may call again before it stops serving a connection
	 * suspended (several chunks read at once) */
	if (q->wait != WAIT_NONE) {
		q->wait = why;
		return true;
	}
	if (!suspend(q)) {
		return false;
	}
	q->wait = why;
	return true;
}

/* Resume a stream's connection if it waits for one of whys (1 << WAIT_*;
 * smtx held). */
static void
stream_wake(tlh_req *q, unsigned whys)
{
	if (q->wait != WAIT_NONE && (whys & (1u << q->wait)) != 0) {
		q->wait = WAIT_NONE;
		resume(q);
	}
}

/* The stream's handler returned: its reply is published and ended. */
static void
stream_done(tlh_req *q)
{
	pthread_mutex_lock(&q->smtx);
	if (q->out_stream && !q->out_end) {
		q->out_end = q->out_err = true; /* not ended: cut short */
	}
	stream_publish(q);
	stream_wake(q, 1u << WAIT_DATA);
	pthread_mutex_unlock(&q->smtx);
	req_unref(q);
}

/* The request's work on a worker: authentication, then the handler. */
static void
run(tlh_req *q)
{
	tlh_server *s = q->s;
	const tlh_route *r = &q->route->r;
	bool go = true;

	if ((r->flags & (TLH_AUTH | TLH_AUTH_OPTIONAL)) != 0 &&
	    s->cfg.auth != NULL) {
		go = s->cfg.auth(q, (r->flags & TLH_AUTH) == 0, s->cfg.arg);
		TLI_ASSERT(go != q->replied);
	}
	if (go) {
		r->handler(q, s->cfg.arg);
	}
	if (!q->replied) {
		reply_error(q, TLH_E_NO_REPLY, 0);
	}
}

static void *
worker_main(void *arg)
{
	tlh_server *s = arg;

	pthread_mutex_lock(&s->mtx);
	for (;;) {
		tli_qnode *n;
		tlh_req *q;
		while (s->work.head == NULL && !s->stop) {
			pthread_cond_wait(&s->cv, &s->mtx);
		}
		if ((n = tli_queue_pop(&s->work)) == NULL) {
			break;
		}
		q = TLI_CONTAINER(n, tlh_req, wn);
		s->queued--;
		s->idle--;
		pthread_mutex_unlock(&s->mtx);
		run(q);
		if (q->streaming) {
			stream_done(q);
		} else {
			resume(q);
		}
		pthread_mutex_lock(&s->mtx);
		s->idle++;
	}
	s->idle--;
	pthread_mutex_unlock(&s->mtx);
	return NULL;
}

static void
worker_add(tlh_server *s)
{
	pthread_t *t;

	TLI_ASSERT_LOCKED(&s->mtx);
	/* an idle worker that has not yet taken the queued requests is
	 * spoken for: requests that wait (a slow handler) must not queue
	 * behind each other */
	if (s->idle > s->queued || s->nthreads >= WORKERS_MAX) {
		return;
	}
	t = tli_realloc(s->tids, sizeof(*t) * (size_t) (s->nthreads + 1));
	if (t == NULL) {
		return;
	}
	s->tids = t;
	if (pthread_create(&t[s->nthreads], NULL, worker_main, s) == 0) {
		s->nthreads++;
		s->idle++;
	}
}

/* Hand a suspended request to a worker. */
static void
worker_queue(tlh_req *q)
{
	tlh_server *s = q->s;
	bool none;

	TLI_ASSERT(q->suspended);
	pthread_mutex_lock(&s->mtx);
	worker_add(s);
	if (!(none = s->nthreads == 0)) {
		tli_queue_push(&s->work, &q->wn);
		s->queued++;
		pthread_cond_signal(&s->cv);
	} /* else no worker: answer here */
	pthread_mutex_unlock(&s->mtx);
	if (none) {
		run(q);
		resume(q);
	}
}

void
tlh_async_done(tlh_req *q)
{
	if (q->replied) {
		resume(q);
	} else {
		worker_queue(q); /* the long way decides */
	}
}

/* ---- libmicrohttpd callbacks ---- */

static void *
on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	tlh_server *s = cls;
	tlh_req *q = tli_zalloc(state_off() + s->cfg.req_size);
	const char *qm = strchr(uri, '?');

	if (q == NULL) {
		return NULL;
	}
	pthread_mutex_init(&q->smtx, NULL);
	pthread_cond_init(&q->scv, NULL);
	q->refs = 1; /* the connection's */
	q->s = s;
	q->conn = conn;
	q->uri = tli_strndup(uri, strlen(uri));
	q->path = tli_strndup(uri, qm ? (size_t) (qm - uri) : strlen(uri));
	if (q->uri == NULL || q->path == NULL) {
		req_free(q);
		return NULL;
	}
	q->query = qm ? q->uri + (qm - uri) + 1 : "";
	return q;
}

static void
on_done(void *cls, struct MHD_Connection *conn, void **req_cls,
    enum MHD_RequestTerminationCode toe)
{
	tlh_req *q = *req_cls;

	(void) cls;
	(void) conn;
	(void) toe;
	if (q != NULL) {
		pthread_mutex_lock(&q->smtx);
		q->gone = true;
		pthread_cond_broadcast(&q->scv);
		pthread_mutex_unlock(&q->smtx);
		req_unref(q);
	}
	*req_cls = NULL;
}

static size_t
no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void) cls;
	(void) c;
	return strlen(s);
}

/* The first call, headers only: route, and answer what needs no body. */
/* Counts the Content-Length headers and whether they differ. */
typedef struct clen_ctx {
	const char *first;
	bool differ;
} clen_ctx;

static enum MHD_Result
clen_header(void *arg, enum MHD_ValueKind kind, const char *k, const char *v)
{
	clen_ctx *c = arg;

	(void) kind;
	if (strcasecmp(k, "Content-Length") == 0) {
		if (c->first == NULL) {
			c->first = v;
		} else if (strcmp(c->first, v) != 0) {
			c->differ = true;
		}
	}
	return MHD_YES;
}

/* Two different Content-Length headers leave the body's end to whoever
 * reads it (RFC 9112 6.3: a request smuggling risk behind a proxy that
 * reads the other): refused. */
static bool
framing_ok(tlh_req *q)
{
	clen_ctx c = {NULL, false};

	MHD_get_connection_values(q->conn, MHD_HEADER_KIND, clen_header, &c);
	return !c.differ;
}

/* The connection's idle timeout: body_timeout_s while a body is read (a
 * body that stops coming, such as a chunk that declares more than will
 * ever be sent, closes the connection then), conn_timeout_s otherwise. */
static void
body_timeout(tlh_req *q, bool reading)
{
	MHD_set_connection_option(q->conn, MHD_CONNECTION_OPTION_TIMEOUT,
	    reading ? q->s->cfg.body_timeout_s : q->s->cfg.conn_timeout_s);
	q->body_timed = reading;
}

/* Whether a body follows the headers. */
static bool
body_expected(tlh_req *q)
{
	const char *cl = tlh_req_header(q, "Content-Length");

	return tlh_req_header(q, "Transfer-Encoding") != NULL ||
	    (cl != NULL && strtoull(cl, NULL, 10) > 0);
}

static void
first_call(tlh_req *q)
{
	tlh_server *s = q->s;
	const char *cl;
	unsigned allow;

	client_ip(q);
	q->limit = s->cfg.body_max;
	if (!framing_ok(q)) {
		reply_error(q, TLH_E_BAD_REQUEST, 0);
		return;
	}
	/* Only origin-form targets: "@host/..." or an absolute URL would
	 * send a pass-through elsewhere. */
	if (q->uri[0] != '/') {
		reply_error(q, TLH_E_TARGET, 0);
		return;
	}
	if (s->cfg.pre != NULL && !s->cfg.pre(q, s->cfg.arg)) {
		goto limit;
	}
	if (!route_match(q, &allow)) {
		reply_error(q, TLH_E_METHOD, allow);
		goto limit;
	}
	if (q->route == NULL) {
		reply_error(q, TLH_E_NOT_FOUND, 0); /* and no fallback */
		goto limit;
	}
	if (q->route->r.body_max > 0) {
		q->limit = q->route->r.body_max;
	}
	if (q->route->r.head != NULL) {
		q->route->r.head(q, s->cfg.arg);
	}
limit:
	cl = tlh_req_header(q, "Content-Length");
	if (cl != NULL && strtoull(cl, NULL, 10) > q->limit) {
		reply_drop(q);
		reply_error(q, TLH_E_TOO_LARGE, 0);
	}
	if (!q->replied && body_expected(q)) {
		body_timeout(q, true);
	}
}

static void
body_add(tlh_req *q, const char *p, size_t n)
{
	if (q->replied || q->over) {
		return;
	}
	if (q->body.len + n > q->limit) {
		q->over = true;
		tli_buf_fini(&q->body);
	} else {
		tli_buf_append(&q->body, p, n);
	}
}

/* A stream's handler starts on a worker now, the body to come (on the
 * event loop, the first call); false when it cannot (then the reply is
 * made: 503). */
static bool
stream_start(tlh_req *q)
{
	tlh_server *s = q->s;
	bool ok;

	MHD_get_connection_values(
	    q->conn, MHD_HEADER_KIND, hdrs_copy, &q->hdrs);
	q->hdrs_own = true;
	pthread_mutex_lock(&q->smtx);
	q->refs++; /* the worker's */
	pthread_mutex_unlock(&q->smtx);
	pthread_mutex_lock(&s->mtx);
	worker_add(s);
	if ((ok = s->nthreads > 0 && !s->draining && !q->hdrs.oom)) {
		tli_queue_push(&s->work, &q->wn);
		s->queued++;
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mtx);
	if (!ok) {
		q->refs--; /* no other holder yet */
		q->streaming = false;
		reply_error(q, TLH_E_STOPPING, 0);
	}
	return ok;
}

/* A later call of a stream: a piece of the body into its buffer, or the
 * end of the body: the reply once published. */
static enum MHD_Result
stream_call(tlh_req *q, struct MHD_Connection *conn, const char *upload,
    size_t *upload_size)
{
	size_t n = *upload_size;
	bool ok = true;

	*upload_size = 0;
	pthread_mutex_lock(&q->smtx);
	if (n > 0) {
		if (!q->published && !q->over) {
			q->body_seen += n;
			if (q->body_seen > q->limit) {
				q->over = true; /* the rest is dropped */
				fifo_fini(&q->in);
			} else if (!fifo_push(&q->in, upload, n)) {
				ok = false;
			} else if (q->in.len >= STREAM_CAP) {
				ok = stream_suspend(q, WAIT_ROOM);
			}
			pthread_cond_broadcast(&q->scv);
		}
		pthread_mutex_unlock(&q->smtx);
		return ok ? MHD_YES : MHD_NO;
	}
	q->body_end = true;
	if (q->body_timed) {
		body_timeout(q, false);
	}
	pthread_cond_broadcast(&q->scv);
	if (!q->published) {
		ok = stream_suspend(q, WAIT_REPLY);
		pthread_mutex_unlock(&q->smtx);
		return ok ? MHD_YES : MHD_NO;
	}
	pthread_mutex_unlock(&q->smtx);
	return reply_flush(conn, q);
}

/* The last call, the body in: a fast answer, or a worker. true when the
 * reply is to be queued now; otherwise q belongs to the work in progress
 * until the connection resumes. */
static bool
last_call(tlh_req *q)
{
	int fast = TLH_FAST_NO;

	if (q->body_timed) {
		body_timeout(q, false);
	}
	if (!suspend(q)) {
		reply_error(q, TLH_E_STOPPING, 0);
		return true;
	}
	if (q->route->r.fast != NULL) {
		fast = q->route->r.fast(q, q->s->cfg.arg);
	}
	switch (fast) {
	case TLH_FAST_STARTED:
		break;
	case TLH_FAST_ANSWERED:
		TLI_ASSERT(q->replied);
		resume(q);
		break;
	default:
		TLI_ASSERT(!q->replied);
		worker_queue(q);
	}
	return false;
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **req_cls)
{
	tlh_req *q = *req_cls;

	(void) cls;
	(void) url;
	(void) version;
	if (q == NULL) {
		return MHD_NO;
	}
	if (q->streaming) {
		return stream_call(q, conn, upload, upload_size);
	}
	TLI_ASSERT(!q->suspended);
	if (q->resp != NULL || q->failed) {
		return reply_flush(conn, q); /* resumed with its reply */
	}
	if (!q->started) {
		q->started = true;
		snprintf(q->method, sizeof(q->method), "%s", method);
		first_call(q);
		if (q->replied) {
			q->streaming = false; /* answered: no handler */
			return reply_flush(conn, q);
		}
		/* a stream's handler may answer as soon as it starts: only
		 * a stream that could not start is answered here */
		if (q->streaming && !stream_start(q)) {
			return reply_flush(conn, q);
		}
		return MHD_YES;
	}
	if (*upload_size > 0) {
		body_add(q, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (q->replied) {
		return MHD_YES;
	}
	return last_call(q) ? reply_flush(conn, q) : MHD_YES;
}

/* ---- start and stop ---- */

int
tlh_server_alloc(tlh_server **out, const tlh_config *cfg)
{
	tlh_server *s = tli_zalloc(sizeof(*s));

	if (s == NULL) {
		return TL_ENOMEM;
	}
	s->cfg = *cfg;
	if (s->cfg.loops == 0) {
		s->cfg.loops = 2;
	}
	if (s->cfg.conn_limit == 0) {
		s->cfg.conn_limit = 2000;
	}
	if (s->cfg.conn_timeout_s == 0) {
		s->cfg.conn_timeout_s = 300;
	}
	if (s->cfg.body_timeout_s == 0) {
		s->cfg.body_timeout_s = 30;
	}
	if (s->cfg.body_max == 0) {
		s->cfg.body_max = 65536;
	}
	if (cfg->trusted_proxies != NULL && cfg->trusted_proxies[0] != '\0') {
		int rv = tlh_nets_parse(cfg->trusted_proxies, &s->trusted);
		if (rv != TL_OK) {
			tli_free(s);
			return rv;
		}
	}
	tli_queue_init(&s->work);
	pthread_mutex_init(&s->mtx, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_cond_init(&s->idle_cv, NULL);
	*out = s;
	return TL_OK;
}

static int
bind_addr(const char *listen, struct sockaddr_storage *ss, bool *v6)
{
	char host[256], port[16];
	const char *colon = strrchr(listen, ':');
	struct addrinfo hints, *res = NULL;
	size_t hl;

	if (colon == NULL || strlen(colon + 1) >= sizeof(port) ||
	    (hl = (size_t) (colon - listen)) >= sizeof(host)) {
		return TL_EINVAL;
	}
	memcpy(host, listen, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host[0] ? host : NULL, port, &hints, &res) != 0) {
		return TL_EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*v6 = res->ai_family == AF_INET6;
	freeaddrinfo(res);
	return TL_OK;
}

static void
url_make(tlh_server *s, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	const char *colon = strrchr(s->cfg.listen, ':');
	char host[256];
	unsigned port = 0;

	if (getsockname(lfd, (struct sockaddr *) &ss, &len) == 0) {
		port = ntohs(ss.ss_family == AF_INET6
		        ? ((struct sockaddr_in6 *) &ss)->sin6_port
		        : ((struct sockaddr_in *) &ss)->sin_port);
	}
	snprintf(host, sizeof(host), "%.*s", (int) (colon - s->cfg.listen),
	    s->cfg.listen);
	if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) {
		snprintf(host, sizeof(host), "127.0.0.1");
	}
	snprintf(s->url, sizeof(s->url), "http://%s:%u", host, port);
}

/* The listening socket, non-blocking; -1 when it cannot listen. */
static int
listen_open(const struct sockaddr_storage *ss, bool v6)
{
	int fd = socket(
	    ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0) {
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (v6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	if (bind(fd, (const struct sockaddr *) ss,
	        v6 ? sizeof(struct sockaddr_in6)
	           : sizeof(struct sockaddr_in)) != 0 ||
	    listen(fd, 511) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The guard hands a connection to libmicrohttpd (which closes fd when it
 * refuses it: over the connection limit). */
static bool
guard_hand(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
	tlh_server *s = arg;

	return MHD_add_connection(s->d, fd, sa, len) == MHD_YES;
}

static void
guard_body(void *arg, tlh_error e, tli_buf *out)
{
	tlh_server *s = arg;

	if (s->cfg.framing_error != NULL) {
		s->cfg.framing_error(s->cfg.arg, e, out);
	} else {
		tli_buf_puts(out,
		    e == TLH_E_TOO_LARGE ? "{\"error\":\"Request too large\"}"
		                         : "{\"error\":\"Bad request\"}");
	}
}

/* The largest body a request may have: a larger chunk cannot pass. */
static uint64_t
chunk_max(const tlh_server *s)
{
	uint64_t m = s->cfg.body_max;

	if (s->cfg.chunk_max > 0) {
		return s->cfg.chunk_max;
	}
	for (int i = 0; i < s->nroutes; i++) {
		if (s->routes[i]->r.body_max > m) {
			m = s->routes[i]->r.body_max;
		}
	}
	return m;
}

int
tlh_server_start(tlh_server *s)
{
	struct sockaddr_storage ss;
	unsigned flags = MHD_USE_POLL_INTERNAL_THREAD |
	    MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
	bool v6 = false;
	tlh_guard_cfg gc = {
	    .threads = s->cfg.loops,
	    .chunk_max = chunk_max(s),
	    .hand = guard_hand,
	    .body = guard_body,
	    .headers = s->cfg.headers,
	    .arg = s,
	};

	memset(&ss, 0, sizeof(ss));
	if (bind_addr(s->cfg.listen, &ss, &v6) != TL_OK) {
		return TL_EINVAL;
	}
	if (v6) {
		flags |= MHD_USE_IPv6;
	}
	if ((gc.lfd = listen_open(&ss, v6)) < 0) {
		return TL_ECONN;
	}
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
	    MHD_OPTION_THREAD_POOL_SIZE, s->cfg.loops,
	    MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_NOTIFY_COMPLETED,
	    on_done, s, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, s,
	    MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.conn_timeout_s,
	    MHD_OPTION_CONNECTION_LIMIT, s->cfg.conn_limit,
	    /* HTTP/1.1 without Host: 400 */
	    MHD_OPTION_STRICT_FOR_CLIENT, (int) 1, MHD_OPTION_END);
	if (s->d == NULL) {
		close(gc.lfd);
		return TL_ECONN;
	}
	url_make(s, gc.lfd);
	if (tlh_guard_start(&s->guard, &gc) != TL_OK) {
		MHD_stop_daemon(s->d);
		s->d = NULL;
		return TL_ENOMEM;
	}
	return TL_OK;
}

const char *
tlh_server_url(const tlh_server *s)
{
	return s->url;
}

void
tlh_server_free(tlh_server *s)
{
	if (s == NULL) {
		return;
	}
	/* every suspended connection must be resumed before the daemon
	 * stops: accept no more connections, refuse new work, wait for the
	 * work in progress */
	tlh_guard_close(s->guard);
	pthread_mutex_lock(&s->mtx);
	s->draining = true;
	while (s->suspended > 0) {
		pthread_cond_wait(&s->idle_cv, &s->mtx);
	}
	pthread_mutex_unlock(&s->mtx);
	if (s->d != NULL) {
		MHD_stop_daemon(s->d);
	}
	tlh_guard_free(s->guard);
	pthread_mutex_lock(&s->mtx);
	s->stop = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mtx);
	for (int i = 0; i < s->nthreads; i++) {
		pthread_join(s->tids[i], NULL);
	}
	TLI_ASSERT(s->work.head == NULL && s->idle == 0);
	for (int i = 0; i < s->nroutes; i++) {
		tli_free(s->routes[i]->pat);
		tli_free(s->routes[i]);
	}
	tli_free(s->fallback);
	tli_free(s->routes);
	tli_free(s->tids);
	pthread_mutex_destroy(&s->mtx);
	pthread_cond_destroy(&s->cv);
	pthread_cond_destroy(&s->idle_cv);
	tlh_nets_free(s->trusted);
	tli_free(s);
}
