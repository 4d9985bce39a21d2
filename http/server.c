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
 * Lock: one mutex per server (the worker queue and counters), a leaf.
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

#include "base.h"
#include "htab.h" /* TLI_CONTAINER */
#include "queue.h"
#include "tlhttp.h"

/* Workers are started when a request finds none idle (up to this) and
 * stay until the server stops. */
#define WORKERS_MAX 1024
/* Path segments a pattern may have; deeper paths go to the fallback. */
#define SEGS_MAX 32

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

struct tlh_req;

struct tlh_server {
	tlh_config cfg;
	rt **routes;
	int nroutes;
	rt *fallback;
	struct MHD_Daemon *d;
	char url[300];

	pthread_mutex_t mtx;
	pthread_cond_t cv;      /* work queued, or stopping */
	pthread_cond_t idle_cv; /* no request suspended any more */
	tli_queue work;         /* requests waiting for a worker */
	pthread_t *tids;
	int nthreads, idle;
	int suspended; /* connections suspended by us */
	bool draining; /* stopping: suspend no more connections */
	bool stop;     /* workers: leave once the queue is empty */
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
	bool started;   /* the first call was made */
	bool suspended; /* by us, until resumed */
	bool replied;   /* a reply was made (it may be queued already) */
	bool failed;    /* no reply could be made: close */
	struct MHD_Response *resp; /* made, not yet queued */
	unsigned resp_status;
	tli_qnode wn; /* in the worker queue */
};

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

int
tlh_reply(tlh_req *q, int status, const char *ctype, const void *body,
    size_t len, unsigned flags)
{
	const char *const *h = q->s->cfg.headers;
	struct MHD_Response *resp;

	TLI_ASSERT(!q->replied); /* one reply per request */
	q->replied = true;
	resp = MHD_create_response_from_buffer(
	    len, (void *) body, MHD_RESPMEM_MUST_COPY);
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

const char *
tlh_req_header(const tlh_req *q, const char *name)
{
	return MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, name);
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

	MHD_get_connection_values(q->conn, MHD_HEADER_KIND, each_header, &c);
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
	tli_free(q);
}

static void
client_ip(tlh_req *q)
{
	const union MHD_ConnectionInfo *ci;
	const struct sockaddr *sa;

	snprintf(q->ip, sizeof(q->ip), "?");
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
		s->idle--;
		pthread_mutex_unlock(&s->mtx);
		run(q);
		resume(q);
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
	if (s->idle > 0 || s->nthreads >= WORKERS_MAX) {
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
	tli_queue_push(&s->work, &q->wn);
	worker_add(s);
	if ((none = s->nthreads == 0)) {
		tli_queue_init(&s->work); /* no worker: answer here */
	} else {
		pthread_cond_signal(&s->cv);
	}
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
	(void) cls;
	(void) conn;
	(void) toe;
	req_free(*req_cls);
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

/* The last call, the body in: a fast answer, or a worker. true when the
 * reply is to be queued now; otherwise q belongs to the work in progress
 * until the connection resumes. */
static bool
last_call(tlh_req *q)
{
	int fast = TLH_FAST_NO;

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
	TLI_ASSERT(!q->suspended);
	if (q->resp != NULL || q->failed) {
		return reply_flush(conn, q); /* resumed with its reply */
	}
	if (!q->started) {
		q->started = true;
		snprintf(q->method, sizeof(q->method), "%s", method);
		first_call(q);
		return q->replied ? reply_flush(conn, q) : MHD_YES;
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
	if (s->cfg.body_max == 0) {
		s->cfg.body_max = 65536;
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
url_make(tlh_server *s)
{
	const union MHD_DaemonInfo *di =
	    MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	const char *colon = strrchr(s->cfg.listen, ':');
	char host[256];

	snprintf(host, sizeof(host), "%.*s", (int) (colon - s->cfg.listen),
	    s->cfg.listen);
	if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) {
		snprintf(host, sizeof(host), "127.0.0.1");
	}
	snprintf(s->url, sizeof(s->url), "http://%s:%u", host,
	    di != NULL ? (unsigned) di->port : 0);
}

int
tlh_server_start(tlh_server *s)
{
	struct sockaddr_storage ss;
	unsigned flags =
	    MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
	bool v6 = false;

	memset(&ss, 0, sizeof(ss));
	if (bind_addr(s->cfg.listen, &ss, &v6) != TL_OK) {
		return TL_EINVAL;
	}
	if (v6) {
		flags |= MHD_USE_IPv6;
	}
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
	    MHD_OPTION_THREAD_POOL_SIZE, s->cfg.loops, MHD_OPTION_SOCK_ADDR,
	    (struct sockaddr *) &ss, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
	    MHD_OPTION_NOTIFY_COMPLETED, on_done, s,
	    MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, s,
	    MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.conn_timeout_s,
	    MHD_OPTION_CONNECTION_LIMIT, s->cfg.conn_limit,
	    /* HTTP/1.1 without Host: 400 */
	    MHD_OPTION_STRICT_FOR_CLIENT, (int) 1, MHD_OPTION_END);
	if (s->d == NULL) {
		return TL_ECONN;
	}
	url_make(s);
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
	 * stops: refuse new work, wait for the work in progress */
	pthread_mutex_lock(&s->mtx);
	s->draining = true;
	while (s->suspended > 0) {
		pthread_cond_wait(&s->idle_cv, &s->mtx);
	}
	pthread_mutex_unlock(&s->mtx);
	if (s->d != NULL) {
		MHD_stop_daemon(s->d);
	}
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
	tli_free(s);
}
