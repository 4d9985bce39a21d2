/*
 * The gateway's HTTP front (libmicrohttpd with poll event-loop threads):
 * routing of the client-server API to the delayed-event endpoints
 * (api.c), the caller's authentication, /versions and /capabilities
 * augmentation, and the pass-through of every other request to the
 * homeserver.
 *
 * A request is routed on its first call, when only the headers are in:
 * the raw URI comes from the URI log callback (libmicrohttpd would
 * otherwise unescape the path, and "%2F" in a room or state key matters).
 * Errors that need no body and no blocking check are answered there,
 * before the body is read; otherwise the body is collected up to its
 * limit and the request is handled on the last call.
 *
 * The event-loop threads never block. Checks that may block (whoami, a
 * repeated transaction id) wait for the last call. There a restart of a
 * known event starts tl_move_async with the connection suspended and the
 * completion resumes it; every other request is handed, suspended, to a
 * worker thread (the pool grows to the number of requests in progress, so
 * slow requests do not hold up each other), which makes the response and
 * resumes the connection. The resumed request is called again and queues
 * the response made for it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "gw.h"

#include "api.h"

/* event-loop threads of the daemon */
#define HTTP_LOOPS 2

/* ---- replies ---- */

/* A response is made for the request (on any thread) and queued by the
 * event loop: at once, or when the suspended connection was resumed. */
static enum MHD_Result
keep_resp(struct MHD_Connection *conn, greq *r, struct MHD_Response *resp,
    unsigned status)
{
	(void) conn;
	if (r->resp != NULL) {
		MHD_destroy_response(r->resp);
	}
	r->resp = resp;
	r->resp_status = status;
	r->responded = true;
	return MHD_YES;
}

/* On the event loop: queue the response made for r (none: close). */
static enum MHD_Result
flush_resp(struct MHD_Connection *conn, greq *r)
{
	enum MHD_Result rv;

	if (r->resp == NULL) {
		return MHD_NO;
	}
	rv = MHD_queue_response(conn, r->resp_status, r->resp);
	MHD_destroy_response(r->resp);
	r->resp = NULL;
	return rv;
}

static enum MHD_Result
send_resp(struct MHD_Connection *conn, greq *r, int status, const char *ctype,
    const void *body, size_t len, int64_t retry_ms)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_buffer(
	    len, (void *) body, MHD_RESPMEM_MUST_COPY);
	if (resp == NULL) {
		r->failed = true;
		return MHD_NO;
	}
	if (ctype != NULL) {
		MHD_add_response_header(resp, "Content-Type", ctype);
	}
	MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
	MHD_add_response_header(resp, "Access-Control-Allow-Methods",
	    "GET, POST, PUT, DELETE, OPTIONS");
	MHD_add_response_header(resp, "Access-Control-Allow-Headers",
	    "X-Requested-With, Content-Type, Authorization");
	if (retry_ms > 0) {
		char s[32];
		snprintf(
		    s, sizeof(s), "%lld", (long long) (retry_ms + 999) / 1000);
		MHD_add_response_header(resp, "Retry-After", s);
	}
	return keep_resp(conn, r, resp, (unsigned) status);
}

void
tlg_out_err(gout *o, int status, const char *code, const char *msg)
{
	o->status = status;
	tli_buf_reset(&o->body);
	tli_buf_puts(&o->body, "{\"errcode\":");
	tlh_json_str(&o->body, code, strlen(code));
	tli_buf_puts(&o->body, ",\"error\":");
	tlh_json_str(&o->body, msg, strlen(msg));
	tli_buf_puts(&o->body, "}");
}

void
tlg_out_limited(gout *o, int64_t ms)
{
	o->status = 429;
	o->retry_ms = ms;
	tli_buf_reset(&o->body);
	tli_buf_printf(&o->body,
	    "{\"errcode\":\"M_LIMIT_EXCEEDED\",\"error\":\"Too many "
	    "requests\",\"retry_after_ms\":%lld}",
	    (long long) ms);
}

static enum MHD_Result
send_out(struct MHD_Connection *conn, greq *r, gout *o)
{
	enum MHD_Result rv;

	if (o->body.oom) {
		tlg_out_err(o, 500, "M_UNKNOWN", "out of memory");
	}
	rv = send_resp(conn, r, o->status, "application/json", o->body.data,
	    o->body.len, o->retry_ms);
	tli_buf_fini(&o->body);
	return rv;
}

/* ---- the request ---- */

static bool
has_msc4140_param(const greq *r)
{
	const char *q = r->query;

	while ((q = strstr(q, "org.matrix.msc4140.")) != NULL) {
		if (q == r->query || q[-1] == '&') {
			return true;
		}
		q++;
	}
	return false;
}

static bool
seg_is(const greq *r, int i, const char *s)
{
	return i < r->nseg && strcmp(r->segs[i], s) == 0;
}

/* Split and decode the path. Returns false on a bad escape. */
static bool
split_path(greq *r)
{
	char *p = r->segbuf;

	if (*p != '/') {
		return false;
	}
	p++;
	while (r->nseg < MAXSEG) {
		char *sl = strchr(p, '/');
		long n;
		if (sl != NULL) {
			*sl = '\0';
		}
		if ((n = tlh_url_dec(p, strlen(p))) < 0) {
			return false;
		}
		r->segs[r->nseg] = p;
		r->seglen[r->nseg++] = (size_t) n;
		if (sl == NULL) {
			return true;
		}
		p = sl + 1;
	}
	return false; /* too deep for us: the homeserver's business */
}

static route
route_of(greq *r, const char *method, bool stable)
{
	bool get = strcmp(method, "GET") == 0;
	bool post = strcmp(method, "POST") == 0;
	bool put = strcmp(method, "PUT") == 0;
	bool ours = has_msc4140_param(r);
	size_t ul = strlen(UNSTABLE);
	bool unst = strncmp(r->path, UNSTABLE, ul) == 0 &&
	    (r->path[ul] == '\0' || r->path[ul] == '/');
	bool cv;

	if (strcmp(r->path, "/_matrix/client/versions") == 0) {
		return get ? R_VERSIONS : R_PROXY;
	}
	if (!unst && strncmp(r->path, PFX, strlen(PFX)) != 0) {
		return R_PROXY;
	}
	/* CORS preflights of our requests are ours to answer (browsers
	 * send them for every schedule and management call) */
	if ((unst || ours) && strcmp(method, "OPTIONS") == 0) {
		return R_OPTIONS;
	}
	if ((r->segbuf = strdup(r->path)) == NULL || !split_path(r)) {
		return unst || ours ? R_BAD_PARAM : R_PROXY;
	}
	if (stable && seg_is(r, 2, "v1") && seg_is(r, 3, "delayed_events")) {
		r->idseg = 4;
		if (get && r->nseg == 4) {
			return R_ST_LIST;
		}
		return post && r->nseg == 6 ? R_MANAGE_PATH : R_BAD_PARAM;
	}
	r->idseg = 5;
	if (unst) {
		if (get && r->nseg == 5) {
			return R_LIST;
		}
		if (get && r->nseg == 6) {
			return R_GET_ONE;
		}
		if (post && r->nseg == 6) {
			return R_MANAGE_BODY;
		}
		if (post && r->nseg == 7) {
			return R_MANAGE_PATH;
		}
		return R_BAD_PARAM;
	}
	/* /_matrix/client/{v3,r0}/... */
	cv = seg_is(r, 2, "v3") || seg_is(r, 2, "r0");
	if (cv && get && r->nseg == 4 && seg_is(r, 3, "capabilities")) {
		return R_CAPS;
	}
	if (ours && cv && seg_is(r, 3, "rooms") && r->nseg >= 7 &&
	    ((put && seg_is(r, 5, "send") && r->nseg == 8) ||
	        (post && seg_is(r, 5, "send") && r->nseg == 7) ||
	        (put && seg_is(r, 5, "state") &&
	            (r->nseg == 7 || r->nseg == 8)))) {
		r->state = seg_is(r, 5, "state");
		r->has_txn = !r->state && r->nseg == 8;
		return R_SCHEDULE;
	}
	if (stable && put && seg_is(r, 2, "v3") && seg_is(r, 3, "rooms") &&
	    seg_is(r, 5, "delayed_event") && r->nseg == 8) {
		r->stable = true;
		r->has_txn = true;
		return R_SCHEDULE;
	}
	return ours ? R_BAD_PARAM : R_PROXY;
}

static void
req_free(greq *r)
{
	if (r == NULL) {
		return;
	}
	free(r->uri);
	free(r->path);
	free(r->segbuf);
	free(r->skey);
	tli_buf_fini(&r->body);
	if (r->resp != NULL) {
		MHD_destroy_response(r->resp);
	}
	free(r);
}

/* ---- the caller ---- */

static void
client_ip(tlg *g, struct MHD_Connection *conn, greq *r)
{
	const union MHD_ConnectionInfo *ci;

	snprintf(r->ip, sizeof(r->ip), "?");
	if (g->c.trust_forwarded) {
		const char *xff = MHD_lookup_connection_value(
		    conn, MHD_HEADER_KIND, "X-Forwarded-For");
		if (xff != NULL && *xff != '\0') {
			const char *last = strrchr(xff, ',');
			last = last ? last + 1 : xff;
			while (*last == ' ') {
				last++;
			}
			snprintf(r->ip, sizeof(r->ip), "%s", last);
			return;
		}
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci == NULL || ci->client_addr == NULL) {
		return;
	}
	if (ci->client_addr->sa_family == AF_INET) {
		inet_ntop(AF_INET,
		    &((const struct sockaddr_in *) (const void *)
		            ci->client_addr)
		         ->sin_addr,
		    r->ip, sizeof(r->ip));
	} else if (ci->client_addr->sa_family == AF_INET6) {
		inet_ntop(AF_INET6,
		    &((const struct sockaddr_in6 *) (const void *)
		            ci->client_addr)
		         ->sin6_addr,
		    r->ip, sizeof(r->ip));
	}
}

static const char *
token_of(struct MHD_Connection *conn, greq *r, char *buf, size_t cap)
{
	const char *h =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");

	if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0) {
		return h + 7;
	}
	return tlh_query_get(r->query, "access_token", buf, cap);
}

static bool
auth_cached(tlg *g, const char *tok, greq *r)
{
	gauth *a =
	    &g->auth[tli_hash64_mixed(tok, strlen(tok), 5) % TLG_AUTH_SLOTS];
	bool hit = false;

	pthread_mutex_lock(&g->auth_mtx);
	if (a->token != NULL && strcmp(a->token, tok) == 0 &&
	    a->until > tli_mono_ms()) {
		snprintf(r->user, sizeof(r->user), "%s", a->user);
		snprintf(r->device, sizeof(r->device), "%s", a->device);
		hit = true;
	}
	pthread_mutex_unlock(&g->auth_mtx);
	return hit;
}

static void
auth_store(tlg *g, const char *tok, const greq *r)
{
	gauth *a =
	    &g->auth[tli_hash64_mixed(tok, strlen(tok), 5) % TLG_AUTH_SLOTS];
	char *t = strdup(tok), *u = strdup(r->user), *d = strdup(r->device);

	if (t == NULL || u == NULL || d == NULL) {
		free(t);
		free(u);
		free(d);
		return;
	}
	pthread_mutex_lock(&g->auth_mtx);
	free(a->token);
	free(a->user);
	free(a->device);
	a->token = t;
	a->user = u;
	a->device = d;
	a->until = tli_mono_ms() + g->c.whoami_cache_ms;
	pthread_mutex_unlock(&g->auth_mtx);
}

/* Who is calling: true with r->user set, or false with o filled (401 from
 * the homeserver verbatim, or 401 M_MISSING_TOKEN). */
bool
tlg_authenticate(tlg *g, struct MHD_Connection *conn, greq *r, gout *o)
{
	char qbuf[1024], authz[1100];
	const char *tok = token_of(conn, r, qbuf, sizeof(qbuf));
	hs_resp hr;
	tli_buf url = {0};
	json_t *j;

	if (tok == NULL || *tok == '\0') {
		tlg_out_err(o, 401, "M_MISSING_TOKEN", "Missing access token");
		return false;
	}
	if (strlen(tok) > 1000) {
		tlg_out_err(
		    o, 401, "M_UNKNOWN_TOKEN", "Unrecognised access token");
		return false;
	}
	if (g->c.whoami_cache_ms > 0 && auth_cached(g, tok, r)) {
		r->authed = true;
		return true;
	}
	snprintf(authz, sizeof(authz), "Bearer %s", tok);
	hs_hdr h[] = {{"Authorization", authz}};
	tli_buf_puts(&url, g->c.homeserver);
	tli_buf_puts(&url, "/_matrix/client/v3/account/whoami");
	if (tlg_hs_request(g, "GET", tli_buf_str(&url), h, 1, NULL, 0, &hr) !=
	    0) {
		tli_buf_fini(&url);
		tlg_out_err(
		    o, 502, "M_UNKNOWN", "The homeserver did not answer");
		return false;
	}
	tli_buf_fini(&url);
	if (hr.status != 200) {
		o->status = (int) hr.status;
		tli_buf_reset(&o->body);
		tli_buf_append(&o->body, hr.body.data, hr.body.len);
		tlg_hs_resp_free(&hr);
		return false;
	}
	j = json_loadb(tli_buf_str(&hr.body), hr.body.len, 0, NULL);
	tlg_hs_resp_free(&hr);
	if (!json_is_string(json_object_get(j, "user_id"))) {
		json_decref(j);
		tlg_out_err(o, 502, "M_UNKNOWN", "Unexpected whoami answer");
		return false;
	}
	snprintf(r->user, sizeof(r->user), "%s",
	    json_string_value(json_object_get(j, "user_id")));
	if (json_is_string(json_object_get(j, "device_id"))) {
		snprintf(r->device, sizeof(r->device), "%s",
		    json_string_value(json_object_get(j, "device_id")));
	}
	json_decref(j);
	r->authed = true;
	auth_store(g, tok, r);
	return true;
}

/* ---- pass-through ---- */

typedef struct hdr_ctx {
	hs_hdr h[64];
	size_t n;
	char xff[128];
} hdr_ctx;

static enum MHD_Result
collect_hdr(void *arg, enum MHD_ValueKind kind, const char *k, const char *v)
{
	static const char *hop[] = {"host", "connection", "content-length",
	    "transfer-encoding", "expect", "keep-alive", "upgrade", "te",
	    "proxy-connection", "x-forwarded-for", NULL};
	hdr_ctx *c = arg;

	(void) kind;
	for (int i = 0; hop[i] != NULL; i++) {
		if (strcasecmp(k, hop[i]) == 0) {
			return MHD_YES;
		}
	}
	if (c->n < sizeof(c->h) / sizeof(c->h[0]) - 1) {
		c->h[c->n].name = k;
		c->h[c->n++].value = v ? v : "";
	}
	return MHD_YES;
}

static bool
hop_header(const char *k, size_t n)
{
	static const char *hop[] = {"content-length", "transfer-encoding",
	    "connection", "keep-alive", "date", NULL};
	for (int i = 0; hop[i] != NULL; i++) {
		if (strlen(hop[i]) == n && strncasecmp(k, hop[i], n) == 0) {
			return true;
		}
	}
	return false;
}

/* Forward the request; on a JSON answer to versions / capabilities,
 * patch (json_t) it with fn. */
static enum MHD_Result
proxy(tlg *g, struct MHD_Connection *conn, greq *r, const char *method,
    void (*fn)(tlg *, json_t *))
{
	hdr_ctx hc = {0};
	tli_buf url = {0}, patched = {0};
	struct MHD_Response *resp;
	enum MHD_Result rv;
	hs_resp hr;
	const char *body;
	size_t blen;

	MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_hdr, &hc);
	snprintf(hc.xff, sizeof(hc.xff), "%s", r->ip);
	hc.h[hc.n].name = "X-Forwarded-For";
	hc.h[hc.n++].value = hc.xff;
	tli_buf_puts(&url, g->c.homeserver);
	tli_buf_puts(&url, r->uri);
	if (url.oom ||
	    tlg_hs_request(g, method, tli_buf_str(&url), hc.h, hc.n,
	        r->body.len ? r->body.data : NULL, r->body.len, &hr) != 0) {
		gout o = {0};
		tli_buf_fini(&url);
		tlg_out_err(
		    &o, 502, "M_UNKNOWN", "The homeserver did not answer");
		return send_out(conn, r, &o);
	}
	tli_buf_fini(&url);
	body = tli_buf_str(&hr.body);
	blen = hr.body.len;
	if (fn != NULL && hr.status == 200) {
		json_t *j = json_loadb(body, blen, 0, NULL);
		if (json_is_object(j)) {
			char *s;
			fn(g, j);
			if ((s = json_dumps(j, JSON_COMPACT)) != NULL) {
				tli_buf_puts(&patched, s);
				free(s);
				body = tli_buf_str(&patched);
				blen = patched.len;
			}
		}
		json_decref(j);
	}
	resp = MHD_create_response_from_buffer(
	    blen, (void *) body, MHD_RESPMEM_MUST_COPY);
	if (resp == NULL) {
		tlg_hs_resp_free(&hr);
		tli_buf_fini(&patched);
		r->failed = true;
		return MHD_NO;
	}
	for (const char *p = tli_buf_str(&hr.headers);
	     p != NULL && *p != '\0';) {
		const char *eol = strstr(p, "\r\n"), *colon;
		size_t len = eol ? (size_t) (eol - p) : strlen(p);
		char name[128], value[2048];
		colon = memchr(p, ':', len);
		if (colon != NULL && (size_t) (colon - p) < sizeof(name) &&
		    !hop_header(p, (size_t) (colon - p))) {
			const char *v = colon + 1;
			size_t vl;
			while (v < p + len && (*v == ' ' || *v == '\t')) {
				v++;
			}
			vl = (size_t) (p + len - v);
			if (vl < sizeof(value)) {
				memcpy(name, p, (size_t) (colon - p));
				name[colon - p] = '\0';
				memcpy(value, v, vl);
				value[vl] = '\0';
				MHD_add_response_header(resp, name, value);
			}
		}
		if (eol == NULL) {
			break;
		}
		p = eol + 2;
	}
	rv = keep_resp(conn, r, resp, (unsigned) hr.status);
	tlg_hs_resp_free(&hr);
	tli_buf_fini(&patched);
	return rv;
}

static void
patch_versions(tlg *g, json_t *j)
{
	json_t *u = json_object_get(j, "unstable_features");

	(void) g;
	if (!json_is_object(u)) {
		u = json_object();
		json_object_set_new(j, "unstable_features", u);
	}
	json_object_set_new(u, "org.matrix.msc4140", json_true());
}

static void
patch_caps(tlg *g, json_t *j)
{
	json_t *c = json_object_get(j, "capabilities");

	if (!json_is_object(c)) {
		c = json_object();
		json_object_set_new(j, "capabilities", c);
	}
	json_object_set_new(c, "org.matrix.msc4140.delayed_events",
	    json_pack("{sIsI}", "max_delay_ms", (json_int_t) g->c.max_delay_ms,
	        "max_scheduled", (json_int_t) g->c.max_scheduled));
}

/* ---- libmicrohttpd callbacks ---- */

static void *
on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	greq *r = calloc(1, sizeof(*r));
	const char *q;

	(void) cls;
	(void) conn;
	if (r == NULL) {
		return NULL;
	}
	r->uri = strdup(uri);
	q = strchr(uri, '?');
	r->path = q ? strndup(uri, (size_t) (q - uri)) : strdup(uri);
	if (r->uri == NULL || r->path == NULL) {
		req_free(r);
		return NULL;
	}
	r->query = q ? strchr(r->uri, '?') + 1 : "";
	return r;
}

static void
on_done(void *cls, struct MHD_Connection *conn, void **req_cls,
    enum MHD_RequestTerminationCode toe)
{
	greq *r = *req_cls;

	(void) cls;
	(void) conn;
	(void) toe;
	req_free(r);
	*req_cls = NULL;
}

static size_t
no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void) cls;
	(void) c;
	return strlen(s);
}

/* The checks that need only the headers and never block; false with o
 * filled when they answer. The ones that may block are deferred to the
 * last call (head_checks). */
static bool
first_call(
    tlg *g, struct MHD_Connection *conn, greq *r, const char *method, gout *o)
{
	const char *cl;

	client_ip(g, conn, r);
	/* Only origin-form targets: "@host/..." or an absolute URL would
	 * send the pass-through elsewhere than the homeserver. */
	if (r->uri[0] != '/') {
		tlg_out_err(o, 400, "M_UNRECOGNIZED", "Unrecognized request");
		return false;
	}
	r->rt = route_of(r, method, g->c.stable);
	r->limit = r->rt == R_PROXY || r->rt == R_VERSIONS || r->rt == R_CAPS
	    ? g->c.proxy_max_body
	    : g->c.max_body;
	cl = MHD_lookup_connection_value(
	    conn, MHD_HEADER_KIND, "Content-Length");
	if (cl != NULL && strtoull(cl, NULL, 10) > r->limit) {
		tlg_out_err(o, 413, "M_TOO_LARGE", "Request too large");
		return false;
	}
	switch (r->rt) {
	case R_BAD_PARAM:
		tlg_out_err(o, 400, "M_UNRECOGNIZED", "Unrecognized request");
		return false;
	case R_OPTIONS:
		o->status = 200;
		tli_buf_puts(&o->body, "{}");
		return false;
	case R_SCHEDULE:
	case R_LIST:
	case R_GET_ONE:
	case R_ST_LIST:
		r->head_deferred = true;
		return true;
	case R_MANAGE_PATH:
	case R_MANAGE_BODY: {
		char qbuf[1024];
		const char *tok = token_of(conn, r, qbuf, sizeof(qbuf));
		r->head_deferred = tok != NULL && *tok != '\0';
		return true;
	}
	default:
		return true;
	}
}

/* The deferred header checks (on a worker); false with o filled when they
 * answer. */
static bool
head_checks(tlg *g, struct MHD_Connection *conn, greq *r, gout *o)
{
	switch (r->rt) {
	case R_SCHEDULE:
		return tlg_schedule_head(g, conn, r, o);
	case R_LIST:
	case R_GET_ONE:
	case R_ST_LIST:
		return tlg_authenticate(g, conn, r, o);
	case R_MANAGE_PATH:
	case R_MANAGE_BODY:
		/* with a token, the rate limit is the user's */
		if (tlg_authenticate(g, conn, r, o)) {
			int64_t wait = tlg_rate_take(g, "user", r->user,
			    g->c.mgmt_rate * 4, g->c.mgmt_burst * 4);
			if (wait > 0) {
				tlg_out_limited(o, wait);
				return false;
			}
		}
		tli_buf_reset(&o->body);
		o->status = 0;
		return true;
	default:
		return true;
	}
}

/* The request once its body is in (on a worker): makes r->resp. */
static void
handle(tlg *g, struct MHD_Connection *conn, greq *r)
{
	gout o = {0};

	if (r->head_deferred && !head_checks(g, conn, r, &o)) {
		send_out(conn, r, &o);
		return;
	}
	tli_buf_fini(&o.body);
	memset(&o, 0, sizeof(o));
	switch (r->rt) {
	case R_VERSIONS:
		proxy(g, conn, r, r->method, patch_versions);
		return;
	case R_CAPS:
		proxy(g, conn, r, r->method, patch_caps);
		return;
	case R_PROXY:
		if (r->too_large) {
			tlg_out_err(
			    &o, 413, "M_TOO_LARGE", "Request too large");
			send_out(conn, r, &o);
			return;
		}
		proxy(g, conn, r, r->method, NULL);
		return;
	case R_SCHEDULE:
		tlg_schedule_body(g, r, &o);
		break;
	case R_MANAGE_PATH:
		tlg_manage_path(g, r, &o);
		break;
	case R_MANAGE_BODY:
		tlg_manage_body(g, r, &o);
		break;
	case R_LIST:
		tlg_list_scheduled(g, r, &o);
		break;
	case R_GET_ONE:
		tlg_get_one(g, r, &o);
		break;
	case R_ST_LIST:
		tlg_stable_list(g, r, &o);
		break;
	default:
		tlg_out_err(&o, 400, "M_UNRECOGNIZED", "Unrecognized request");
		break;
	}
	if (o.status == 0) {
		tlg_out_err(&o, 500, "M_UNKNOWN", "Internal error");
	}
	send_out(conn, r, &o);
}

/* ---- suspended requests and the workers ---- */

/* Workers are started when a request finds none idle (up to
 * HW_MAX_THREADS) and stay until the gateway stops. */
#define HW_MAX_THREADS 1024

struct ghttp {
	pthread_mutex_t mtx;
	pthread_cond_t cv;      /* work queued, or stopping */
	pthread_cond_t idle_cv; /* no request suspended any more */
	greq *head, *tail;      /* waiting for a worker */
	pthread_t *tids;
	int nthreads, idle;
	int suspended; /* connections suspended by us */
	bool draining; /* stopping: suspend no more connections */
	bool stop;     /* workers: leave once the queue is empty */
};

static void
hw_resumed(ghttp *h)
{
	pthread_mutex_lock(&h->mtx);
	if (--h->suspended == 0) {
		pthread_cond_broadcast(&h->idle_cv);
	}
	pthread_mutex_unlock(&h->mtx);
}

/* Resume r's connection; r may be gone once this returns. */
static void
resume(tlg *g, greq *r)
{
	MHD_resume_connection(r->conn);
	hw_resumed(g->http);
}

static void *
hw_main(void *arg)
{
	tlg *g = arg;
	ghttp *h = g->http;

	pthread_mutex_lock(&h->mtx);
	for (;;) {
		greq *r;
		while (h->head == NULL && !h->stop) {
			pthread_cond_wait(&h->cv, &h->mtx);
		}
		if ((r = h->head) == NULL) {
			break;
		}
		if ((h->head = r->wnext) == NULL) {
			h->tail = NULL;
		}
		r->wnext = NULL;
		h->idle--;
		pthread_mutex_unlock(&h->mtx);
		handle(g, r->conn, r);
		resume(g, r);
		pthread_mutex_lock(&h->mtx);
		h->idle++;
	}
	h->idle--;
	pthread_mutex_unlock(&h->mtx);
	return NULL;
}

/* Hand a suspended request to a worker. */
static void
hw_queue(tlg *g, greq *r)
{
	ghttp *h = g->http;
	bool none;

	pthread_mutex_lock(&h->mtx);
	r->wnext = NULL;
	if (h->tail != NULL) {
		h->tail->wnext = r;
	} else {
		h->head = r;
	}
	h->tail = r;
	if (h->idle == 0 && h->nthreads < HW_MAX_THREADS) {
		pthread_t *t =
		    realloc(h->tids, sizeof(*t) * (size_t) (h->nthreads + 1));
		if (t != NULL) {
			h->tids = t;
			if (pthread_create(&t[h->nthreads], NULL, hw_main, g) ==
			    0) {
				h->nthreads++;
				h->idle++;
			}
		}
	}
	none = h->nthreads == 0;
	if (none) {
		/* no worker could be started: answer here */
		h->head = h->tail = NULL;
	} else {
		pthread_cond_signal(&h->cv);
	}
	pthread_mutex_unlock(&h->mtx);
	if (none) {
		handle(g, r->conn, r);
		resume(g, r);
	}
}

/* Suspend r's connection; false while the gateway stops. */
static bool
hw_suspend(tlg *g, struct MHD_Connection *conn, greq *r)
{
	ghttp *h = g->http;

	pthread_mutex_lock(&h->mtx);
	if (h->draining) {
		pthread_mutex_unlock(&h->mtx);
		return false;
	}
	h->suspended++;
	pthread_mutex_unlock(&h->mtx);
	r->conn = conn;
	MHD_suspend_connection(conn);
	return true;
}

static void
restart_done(void *arg, int err)
{
	greq *r = arg;
	tlg *g = r->gw;
	gout o = {0};

	if (tlg_restart_fast_result(g, r, err, &o)) {
		send_out(r->conn, r, &o);
		resume(g, r);
		return;
	}
	tli_buf_fini(&o.body);
	hw_queue(g, r); /* the long way decides */
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **req_cls)
{
	tlg *g = cls;
	greq *r = *req_cls;
	gout o = {0};

	(void) url;
	(void) version;
	if (r == NULL) {
		return MHD_NO;
	}
	if (r->resp != NULL || r->failed) {
		return flush_resp(conn, r); /* resumed with its response */
	}
	if (!r->started) {
		r->started = true;
		r->gw = g;
		snprintf(r->method, sizeof(r->method), "%s", method);
		if (!first_call(g, conn, r, method, &o)) {
			send_out(conn, r, &o);
			return flush_resp(conn, r);
		}
		tli_buf_fini(&o.body);
		return MHD_YES;
	}
	if (*upload_size > 0) {
		if (!r->responded && !r->too_large) {
			if (r->body.len + *upload_size > r->limit) {
				r->too_large = true;
				tli_buf_fini(&r->body);
			} else {
				tli_buf_append(&r->body, upload, *upload_size);
			}
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->responded) {
		return MHD_YES;
	}
	if (!hw_suspend(g, conn, r)) {
		tlg_out_err(&o, 503, "M_UNKNOWN", "The gateway is stopping");
		send_out(conn, r, &o);
		return flush_resp(conn, r);
	}
	if (r->rt == R_MANAGE_PATH && !r->head_deferred) {
		switch (tlg_restart_fast(g, r, &o, restart_done)) {
		case TLG_FAST_STARTED:
			tli_buf_fini(&o.body);
			return MHD_YES;
		case TLG_FAST_ANSWERED:
			send_out(conn, r, &o);
			resume(g, r);
			return MHD_YES;
		default:
			tli_buf_fini(&o.body);
			break;
		}
	}
	hw_queue(g, r);
	return MHD_YES;
}

/* ---- start and stop ---- */

static int
bind_addr(const char *listen, struct sockaddr_storage *ss, bool *v6)
{
	char host[256], port[16];
	const char *colon = strrchr(listen, ':');
	struct addrinfo hints, *res = NULL;
	size_t hl;

	if (colon == NULL || strlen(colon + 1) >= sizeof(port)) {
		return -1;
	}
	hl = (size_t) (colon - listen);
	if (hl >= sizeof(host)) {
		return -1;
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
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*v6 = res->ai_family == AF_INET6;
	freeaddrinfo(res);
	return 0;
}

int
tlg_http_start(tlg *g)
{
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *di;
	unsigned flags =
	    MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
	ghttp *h;
	bool v6 = false;
	char host[256];
	const char *colon;

	memset(&ss, 0, sizeof(ss));
	if (bind_addr(g->c.listen, &ss, &v6) != 0) {
		tli_log("msc4140", TLI_LOG_ERROR, "G004",
		    "bad listen address %s", g->c.listen);
		return -1;
	}
	if (v6) {
		flags |= MHD_USE_IPv6;
	}
	if ((h = calloc(1, sizeof(*h))) == NULL) {
		return -1;
	}
	pthread_mutex_init(&h->mtx, NULL);
	pthread_cond_init(&h->cv, NULL);
	pthread_cond_init(&h->idle_cv, NULL);
	g->http = h;
	g->httpd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, g,
	    MHD_OPTION_THREAD_POOL_SIZE, (unsigned) HTTP_LOOPS,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &ss,
	    MHD_OPTION_URI_LOG_CALLBACK, on_uri, g, MHD_OPTION_NOTIFY_COMPLETED,
	    on_done, g, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, g,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) 300,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned) 2000, MHD_OPTION_END);
	if (g->httpd == NULL) {
		tli_log("msc4140", TLI_LOG_ERROR, "G004", "cannot listen on %s",
		    g->c.listen);
		return -1;
	}
	di = MHD_get_daemon_info(g->httpd, MHD_DAEMON_INFO_BIND_PORT);
	colon = strrchr(g->c.listen, ':');
	snprintf(host, sizeof(host), "%.*s", (int) (colon - g->c.listen),
	    g->c.listen);
	if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) {
		snprintf(host, sizeof(host), "127.0.0.1");
	}
	snprintf(g->url, sizeof(g->url), "http://%s:%u", host,
	    di != NULL ? (unsigned) di->port : 0);
	if (g->c.ready_file[0] != '\0') {
		char tmp[600];
		FILE *f;
		snprintf(tmp, sizeof(tmp), "%s.tmp", g->c.ready_file);
		if ((f = fopen(tmp, "w")) != NULL) {
			fprintf(f, "%s\n", g->url);
			fclose(f);
			rename(tmp, g->c.ready_file);
		}
	}
	return 0;
}

void
tlg_http_stop(tlg *g)
{
	ghttp *h = g->http;

	if (h == NULL) {
		return;
	}
	/* every suspended connection must be resumed before the daemon
	 * stops: refuse new work, wait for the work in progress */
	pthread_mutex_lock(&h->mtx);
	h->draining = true;
	while (h->suspended > 0) {
		pthread_cond_wait(&h->idle_cv, &h->mtx);
	}
	pthread_mutex_unlock(&h->mtx);
	if (g->httpd != NULL) {
		MHD_stop_daemon(g->httpd);
		g->httpd = NULL;
	}
	pthread_mutex_lock(&h->mtx);
	h->stop = true;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mtx);
	for (int i = 0; i < h->nthreads; i++) {
		pthread_join(h->tids[i], NULL);
	}
	free(h->tids);
	pthread_mutex_destroy(&h->mtx);
	pthread_cond_destroy(&h->cv);
	pthread_cond_destroy(&h->idle_cv);
	free(h);
	g->http = NULL;
}
