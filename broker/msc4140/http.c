/*
 * The gateway's HTTP front: its route table (every endpoint of the
 * client-server API it serves, declared once, served through the HTTP
 * module tlhttp), its replies, the caller's authentication, /versions and
 * /capabilities augmentation, and the pass-through of every other request
 * to the homeserver.
 *
 * What is served where (tlhttp.h tells the life of a request): CORS
 * preflights of our requests and parameters of ours on an endpoint that
 * is not ours are answered on the event loop; checks that may block
 * (whoami, a repeated transaction id) run on a worker. A restart of a
 * known event by its path is one tl_move_async with the connection
 * suspended, whose completion answers or hands the request to a worker.
 * A pass-through request streams both ways (tlhttp's streams, hs.c's
 * tlg_hs_stream): neither its body nor the answer is held whole; only the
 * answers to /versions and /capabilities, which are patched, are.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "hs.h"

#define PFX "/_matrix/client/"
#define VERSIONS "/_matrix/client/versions"
#define UNSTABLE "/_matrix/client/unstable/org.matrix.msc4140/delayed_events"
#define STABLE "/_matrix/client/v1/delayed_events"
#define ROOM "/_matrix/client/{v}/rooms/{room}"

/* ---- replies ---- */

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

/* Make the reply of o (freed). */
static void
send_out(tlh_req *q, gout *o)
{
	if (o->body.oom) {
		tlg_out_err(o, 500, "M_UNKNOWN", "out of memory");
	}
	if (tlh_reply(q, o->status, "application/json", o->body.data,
	        o->body.len, 0) == TL_OK &&
	    o->retry_ms > 0) {
		char s[32];
		snprintf(s, sizeof(s), "%lld",
		    (long long) (o->retry_ms + 999) / 1000);
		tlh_reply_header(q, "Retry-After", s);
	}
	tli_buf_fini(&o->body);
}

static void
send_err(tlh_req *q, int status, const char *code, const char *msg)
{
	gout o = {0};

	tlg_out_err(&o, status, code, msg);
	send_out(q, &o);
}

/* The module's own refusals, in the Matrix form. */
static void
on_error(tlh_req *q, tlh_error e, void *arg)
{
	static const struct {
		int status;
		const char *code, *msg;
	} m[] = {
	    [TLH_E_TARGET] = {400, "M_UNRECOGNIZED", "Unrecognized request"},
	    [TLH_E_METHOD] = {405, "M_UNRECOGNIZED", "Unrecognized request"},
	    [TLH_E_TOO_LARGE] = {413, "M_TOO_LARGE", "Request too large"},
	    [TLH_E_STOPPING] = {503, "M_UNKNOWN", "The gateway is stopping"},
	    [TLH_E_NO_REPLY] = {500, "M_UNKNOWN", "Internal error"},
	    [TLH_E_NOT_FOUND] = {404, "M_UNRECOGNIZED", "Unrecognized request"},
	    [TLH_E_BAD_REQUEST] = {400, "M_UNRECOGNIZED", "Malformed request"},
	};

	(void) arg;
	send_err(q, m[e].status, m[e].code, m[e].msg);
}

/* A refusal of broken framing, made before there is a request: the body
 * of the same Matrix error. */
static void
on_framing_error(void *arg, tlh_error e, tli_buf *body)
{
	gout o = {0};

	(void) arg;
	tlg_out_err(&o, e == TLH_E_TOO_LARGE ? 413 : 400,
	    e == TLH_E_TOO_LARGE ? "M_TOO_LARGE" : "M_UNRECOGNIZED",
	    e == TLH_E_TOO_LARGE ? "Request too large" : "Malformed request");
	tli_buf_append(body, o.body.data, o.body.len);
	tli_buf_fini(&o.body);
}

/* ---- the request ---- */

static greq *
req_of(tlh_req *q)
{
	greq *r = tlh_req_state(q);
	const gep *ep = tlh_req_route_data(q);

	if (r->hr == NULL) {
		r->hr = q;
		if (ep != NULL) {
			r->state = ep->state;
			r->has_txn = ep->has_txn;
			r->stable = ep->stable;
		}
	}
	return r;
}

static void
req_fini(tlh_req *q, void *arg)
{
	greq *r = tlh_req_state(q);

	(void) arg;
	free(r->skey);
}

gstr
tlg_param(const greq *r, const char *name)
{
	gstr v = {"", 0};
	const char *p = tlh_req_param(r->hr, name, &v.n);

	if (p != NULL) {
		v.p = p;
	} else {
		v.n = 0; /* tlh_req_param left the last parameter's length */
	}
	return v;
}

/* A query parameter of ours (org.matrix.msc4140.*). */
static bool
has_msc4140_param(const tlh_req *q)
{
	const char *query = tlh_req_query(q), *p = query;

	while ((p = strstr(p, "org.matrix.msc4140.")) != NULL) {
		if (p == query || p[-1] == '&') {
			return true;
		}
		p++;
	}
	return false;
}

/* path is prefix or below it */
static bool
under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	return strncmp(path, prefix, n) == 0 &&
	    (path[n] == '\0' || path[n] == '/');
}

/* ---- the caller ---- */

static const char *
token_of(tlh_req *q, char *buf, size_t cap)
{
	const char *h = tlh_req_header(q, "Authorization");

	if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0) {
		return h + 7;
	}
	return tlh_query_get(tlh_req_query(q), "access_token", buf, cap);
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

/* Who is calling (whoami, cached): true with r->user set, or false with o
 * filled (401 from the homeserver verbatim, or 401 M_MISSING_TOKEN). */
static bool
authenticate(tlg *g, greq *r, gout *o)
{
	char qbuf[1024], authz[1100];
	const char *tok = token_of(r->hr, qbuf, sizeof(qbuf));
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

static void
collect_hdr(const char *k, const char *v, void *arg)
{
	static const char *hop[] = {"host", "connection", "content-length",
	    "transfer-encoding", "expect", "keep-alive", "upgrade", "te",
	    "proxy-connection", "x-forwarded-for", NULL};
	hdr_ctx *c = arg;

	for (int i = 0; hop[i] != NULL; i++) {
		if (strcasecmp(k, hop[i]) == 0) {
			return;
		}
	}
	if (c->n < sizeof(c->h) / sizeof(c->h[0]) - 1) {
		c->h[c->n].name = k;
		c->h[c->n++].value = v;
	}
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

/* The homeserver's headers onto the reply made, but the hop-by-hop ones. */
static void
copy_headers(tlh_req *q, const char *p)
{
	while (*p != '\0') {
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
				tlh_reply_header(q, name, value);
			}
		}
		if (eol == NULL) {
			break;
		}
		p = eol + 2;
	}
}

/* The headers to pass on, and the homeserver's URL of the request. */
static void
proxy_prepare(tlg *g, tlh_req *q, hdr_ctx *hc, tli_buf *url)
{
	tlh_req_each_header(q, collect_hdr, hc);
	snprintf(hc->xff, sizeof(hc->xff), "%s", tlh_req_ip(q));
	hc->h[hc->n].name = "X-Forwarded-For";
	hc->h[hc->n++].value = hc->xff;
	tli_buf_puts(url, g->c.homeserver);
	tli_buf_puts(url, tlh_req_uri(q));
}

static void
reply_no_answer(tlh_req *q)
{
	send_err(q, 502, "M_UNKNOWN", "The homeserver did not answer");
}

/* Forward the request with its body held (read whole); false when the
 * homeserver did not answer (then the reply is made). */
static bool
proxy_held(tlg *g, tlh_req *q, hs_resp *hr)
{
	hdr_ctx hc = {0};
	tli_buf url = {0};
	size_t blen;
	const char *body = tlh_req_body(q, &blen);
	int rv;

	proxy_prepare(g, q, &hc, &url);
	rv = url.oom ? -1
	             : tlg_hs_request(g, tlh_req_method(q), tli_buf_str(&url),
	                   hc.h, hc.n, blen ? body : NULL, blen, hr);
	tli_buf_fini(&url);
	if (rv != 0) {
		reply_no_answer(q);
		return false;
	}
	return true;
}

/* Forward the request; on a JSON answer to versions / capabilities,
 * patch (json_t) it with fn. The answer is held (hs.c bounds it). */
static void
proxy(tlg *g, tlh_req *q, void (*fn)(tlg *, json_t *))
{
	tli_buf patched = {0};
	hs_resp hr;
	size_t blen;
	const char *body;

	if (!proxy_held(g, q, &hr)) {
		return;
	}
	body = tli_buf_str(&hr.body);
	blen = hr.body.len;
	if (fn != NULL && hr.status == 200) {
		json_t *j = json_loadb(body, blen, 0, NULL);
		char *s;
		if (json_is_object(j)) {
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
	if (tlh_reply(q, (int) hr.status, NULL, body, blen, TLH_REPLY_BARE) ==
	    TL_OK) {
		copy_headers(q, tli_buf_str(&hr.headers));
	}
	tlg_hs_resp_free(&hr);
	tli_buf_fini(&patched);
}

/* ---- streamed pass-through ---- */

static long
pass_read(void *arg, char *buf, size_t cap)
{
	size_t n;

	return tlh_req_read(arg, buf, cap, &n) == TL_OK ? (long) n : -1;
}

static int
pass_head(void *arg, long status, const char *headers, int64_t len)
{
	tlh_req *q = arg;

	if (tlh_reply_stream(q, (int) status, NULL,
	        len < 0 ? TLH_SIZE_UNKNOWN : (uint64_t) len,
	        TLH_REPLY_BARE) != TL_OK) {
		return -1;
	}
	copy_headers(q, headers);
	return 0;
}

static int
pass_write(void *arg, const char *p, size_t n)
{
	return tlh_reply_write(arg, p, n) == TL_OK ? 0 : -1;
}

/* The request body's length as the client framed it (-1: chunked). */
static int64_t
body_len(tlh_req *q)
{
	const char *cl = tlh_req_header(q, "Content-Length");
	const char *te = tlh_req_header(q, "Transfer-Encoding");

	if (te != NULL && strcasecmp(te, "identity") != 0) {
		return -1;
	}
	return cl != NULL ? (int64_t) strtoll(cl, NULL, 10) : 0;
}

/* Forward the request, its body and the answer streamed: 502 before the
 * answer began, a connection cut short after. */
static void
proxy_stream(tlg *g, tlh_req *q)
{
	hdr_ctx hc = {0};
	tli_buf url = {0};
	hs_stream st = {.read = pass_read,
	    .head = pass_head,
	    .write = pass_write,
	    .arg = q};
	int rv = -1;

	proxy_prepare(g, q, &hc, &url);
	st.hdrs = hc.h;
	st.nhdrs = hc.n;
	st.len = body_len(q);
	if (!url.oom) {
		rv =
		    tlg_hs_stream(g, tlh_req_method(q), tli_buf_str(&url), &st);
	}
	tli_buf_fini(&url);
	if (st.headed) {
		tlh_reply_end(q, rv == 0);
	} else if (tlh_replied(q)) {
		return; /* no reply could be made: the connection closes */
	} else if (tlh_req_body_over(q)) {
		send_err(q, 413, "M_TOO_LARGE", "Request too large");
	} else {
		reply_no_answer(q);
	}
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

/* The authentication hook: who is calling. Management takes a token when
 * one comes (the user's rate limit then applies) but needs none. */
static bool
on_auth(tlh_req *q, bool optional, void *arg)
{
	gout o = {0};

	if (authenticate(arg, req_of(q), &o) || optional) {
		tli_buf_fini(&o.body);
		return true;
	}
	send_out(q, &o);
	return false;
}

/* ---- the endpoints ---- */

/* An endpoint of api.c (the route's data) makes o. */
static void
on_endpoint(tlh_req *q, void *arg)
{
	const gep *ep = tlh_req_route_data(q);
	gout o = {0};

	ep->fn(arg, req_of(q), &o);
	if (o.status == 0) {
		tlg_out_err(&o, 500, "M_UNKNOWN", "Internal error");
	}
	send_out(q, &o);
}

static void
restart_done(void *arg, int err)
{
	greq *r = arg;
	gout o = {0};

	if (tlg_restart_fast_result(r->gw, r, err, &o)) {
		send_out(r->hr, &o);
	} else {
		tli_buf_fini(&o.body);
	}
	tlh_async_done(r->hr);
}

/* A restart by the path without a token: one asynchronous move. */
static int
manage_fast(tlh_req *q, void *arg)
{
	char qbuf[1024];
	const char *tok = token_of(q, qbuf, sizeof(qbuf));
	greq *r = req_of(q);
	gout o = {0};
	int rv;

	if (tok != NULL && *tok != '\0') {
		return TLH_FAST_NO; /* the user's rate limit needs whoami */
	}
	r->gw = arg;
	rv = tlg_restart_fast(arg, r, &o, restart_done);
	if (rv == TLH_FAST_ANSWERED) {
		send_out(q, &o);
	} else {
		tli_buf_fini(&o.body);
	}
	return rv;
}

/* A path of the stable form's endpoints, when they are served. */
static bool
stable_path(const tlg *g, const char *path)
{
	static const char rooms[] = "/_matrix/client/v3/rooms/";
	const char *p;

	if (!g->c.stable) {
		return false;
	}
	if (under(path, STABLE)) {
		return true;
	}
	if (strncmp(path, rooms, sizeof(rooms) - 1) != 0) {
		return false;
	}
	p = strchr(path + sizeof(rooms) - 1, '/');
	return p != NULL && strncmp(p, "/delayed_event/", 15) == 0;
}

/* A path of the Futures form (its scheduling, tokens and list). */
static bool
future_path(const char *path)
{
	const char *f = strstr(path, "/future");

	return strncmp(path, PFX, strlen(PFX)) == 0 &&
	    (strstr(path, "/send_future/") != NULL ||
	        strstr(path, "/state_future/") != NULL ||
	        (f != NULL && (f[7] == '\0' || f[7] == '/')));
}

/* CORS preflights of our requests are ours to answer (browsers send them
 * for every schedule and management call). */
static bool
on_pre(tlh_req *q, void *arg)
{
	const char *path = tlh_req_path(q);
	const tlg *g = arg;

	if (strcmp(tlh_req_method(q), "OPTIONS") != 0 ||
	    strcmp(path, VERSIONS) == 0 ||
	    !(under(path, UNSTABLE) || stable_path(arg, path) ||
	        (g->c.futures && future_path(path)) ||
	        (strncmp(path, PFX, strlen(PFX)) == 0 &&
	            has_msc4140_param(q)))) {
		return true;
	}
	tlh_reply(q, 200, "application/json", "{}", 2, 0);
	return false;
}

/* Requests for the homeserver may be large: streamed. */
static bool
proxy_head(tlh_req *q, void *arg)
{
	tlg *g = arg;

	tlh_req_set_body_max(q, g->c.proxy_max_body);
	tlh_req_stream(q);
	return true;
}

/* What no route serves: refused when it is meant for us (our paths, our
 * parameters), else passed on. */
static bool
fallback_head(tlh_req *q, void *arg)
{
	tlg *g = arg;
	const char *path = tlh_req_path(q);

	if (strncmp(path, PFX, strlen(PFX)) == 0 && strcmp(path, VERSIONS) &&
	    (under(path, UNSTABLE) || has_msc4140_param(q) ||
	        (g->c.stable && under(path, STABLE)))) {
		/* Under our own prefixes, an endpoint we do not have: 404, as
		 * the spec has it for M_UNRECOGNIZED (a known path asked with
		 * another method is tlhttp's 405). Our parameters on an
		 * endpoint that is not ours: 400, never forwarded. */
		bool ours = under(path, UNSTABLE) ||
		    (g->c.stable && under(path, STABLE));
		send_err(q, ours ? 404 : 400, "M_UNRECOGNIZED",
		    "Unrecognized request");
		return false;
	}
	return proxy_head(q, arg);
}

static void
on_proxy(tlh_req *q, void *arg)
{
	proxy_stream(arg, q);
}

static void
on_versions(tlh_req *q, void *arg)
{
	proxy(arg, q, patch_versions);
}

static void
on_caps(tlh_req *q, void *arg)
{
	proxy(arg, q, patch_caps);
}

/* /_matrix/client/{v3,r0}/... */
static bool
client_v(const tlh_req *q, void *arg)
{
	const char *v = tlh_req_param(q, "v", NULL);

	(void) arg;
	return v != NULL && (strcmp(v, "v3") == 0 || strcmp(v, "r0") == 0);
}

/* Scheduling in the unstable form: a send or state event with our
 * parameters. */
static bool
scheduling(const tlh_req *q, void *arg)
{
	return client_v(q, arg) && has_msc4140_param(q);
}

/* ---- the Futures form ---- */

#define FUT_UNSTABLE "/_matrix/client/unstable/io.element.msc3140"

/* A state event for the homeserver (no parameter of ours), seen by the
 * Futures form: passed on (held: a state event is at most max_body),
 * and once the homeserver took it, the state futures with its key are
 * invalidated. */
static bool
plain_state(const tlh_req *q, void *arg)
{
	return client_v(q, arg) && !has_msc4140_param(q);
}

static void
on_state_plain(tlh_req *q, void *arg)
{
	tlg *g = arg;
	hs_resp hr;
	gstr room = {"", 0}, type = {"", 0}, skey = {"", 0};

	if (tlh_req_body_over(q)) {
		send_err(q, 413, "M_TOO_LARGE", "Request too large");
		return;
	}
	if (!proxy_held(g, q, &hr)) {
		return;
	}
	if (hr.status >= 200 && hr.status < 300) {
		room.p = tlh_req_param(q, "room", &room.n);
		type.p = tlh_req_param(q, "type", &type.n);
		if ((skey.p = tlh_req_param(q, "skey", &skey.n)) == NULL) {
			skey = (gstr){"", 0};
		}
		tlg_fut_state_changed(g, room, type, skey);
	}
	if (tlh_reply(q, (int) hr.status, NULL, tli_buf_str(&hr.body),
	        hr.body.len, TLH_REPLY_BARE) == TL_OK) {
		copy_headers(q, tli_buf_str(&hr.headers));
	}
	tlg_hs_resp_free(&hr);
}

#define EP(f, ...) (&(const gep){.fn = f, __VA_ARGS__})

/* THE ROUTE TABLE: every endpoint of the gateway, once. Body limit 0 is
 * max_body; proxy_head raises it to proxy_max_body for the streamed
 * pass-through (versions and capabilities are held: max_body). Endpoints marked
 * stable are served only with `stable = true`. */
static const tlh_route routes[] = {
    {"GET", VERSIONS, 0, TLH_OTHERS_FALLBACK, NULL, NULL, NULL, on_versions,
        NULL},
    {"GET", "/_matrix/client/{v}/capabilities", 0, TLH_OTHERS_FALLBACK,
        client_v, NULL, NULL, on_caps, NULL},
    /* scheduling, unstable form */
    {"PUT", ROOM "/send/{type}/{txn}", 0, TLH_AUTH, scheduling, NULL, NULL,
        on_endpoint, EP(tlg_schedule, .has_txn = true)},
    {"POST", ROOM "/send/{type}", 0, TLH_AUTH, scheduling, NULL, NULL,
        on_endpoint, EP(tlg_schedule)},
    {"PUT", ROOM "/state/{type}", 0, TLH_AUTH, scheduling, NULL, NULL,
        on_endpoint, EP(tlg_schedule, .state = true)},
    {"PUT", ROOM "/state/{type}/{skey}", 0, TLH_AUTH, scheduling, NULL, NULL,
        on_endpoint, EP(tlg_schedule, .state = true)},
    /* management and lists, unstable form */
    {"GET", UNSTABLE, 0, TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_list_scheduled)},
    {"GET", UNSTABLE "/{id}", 0, TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_get_one)},
    {"POST", UNSTABLE "/{id}", 0, TLH_AUTH_OPTIONAL, NULL, NULL, NULL,
        on_endpoint, EP(tlg_manage_body)},
    {"POST", UNSTABLE "/{id}/{action}", 0, TLH_AUTH_OPTIONAL, NULL, NULL,
        manage_fast, on_endpoint, EP(tlg_manage_path)},
    /* the stable form */
    {"PUT", "/_matrix/client/v3/rooms/{room}/delayed_event/{type}/{txn}", 0,
        TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_schedule, .stable = true, .has_txn = true)},
    {"GET", STABLE, 0, TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_stable_list, .stable = true)},
    {"POST", STABLE "/{id}/{action}", 0, TLH_AUTH_OPTIONAL, NULL, NULL,
        manage_fast, on_endpoint, EP(tlg_manage_path, .stable = true)},
    {"GET", STABLE "/{id}", 0, TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_get_one, .stable = true)},
    /* the Futures form, with `futures = on` */
    {"PUT", ROOM "/send_future/{type}/{txn}", 0, TLH_AUTH, client_v, NULL, NULL,
        on_endpoint, EP(tlg_fut_schedule, .has_txn = true, .futures = true)},
    {"PUT", ROOM "/state_future/{type}", 0, TLH_AUTH, client_v, NULL, NULL,
        on_endpoint, EP(tlg_fut_schedule, .state = true, .futures = true)},
    {"PUT", ROOM "/state_future/{type}/{skey}", 0, TLH_AUTH, client_v, NULL,
        NULL, on_endpoint,
        EP(tlg_fut_schedule, .state = true, .futures = true)},
    {"PUT", FUT_UNSTABLE "/rooms/{room}/send_future/{type}/{txn}", 0, TLH_AUTH,
        NULL, NULL, NULL, on_endpoint,
        EP(tlg_fut_schedule, .has_txn = true, .futures = true)},
    {"PUT", FUT_UNSTABLE "/rooms/{room}/state_future/{type}", 0, TLH_AUTH, NULL,
        NULL, NULL, on_endpoint,
        EP(tlg_fut_schedule, .state = true, .futures = true)},
    {"PUT", FUT_UNSTABLE "/rooms/{room}/state_future/{type}/{skey}", 0,
        TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_fut_schedule, .state = true, .futures = true)},
    {"POST", "/_matrix/client/{v}/future/{token}", 0, 0, client_v, NULL, NULL,
        on_endpoint, EP(tlg_fut_token, .futures = true)},
    {"POST", FUT_UNSTABLE "/future/{token}", 0, 0, NULL, NULL, NULL,
        on_endpoint, EP(tlg_fut_token, .futures = true)},
    {"GET", "/_matrix/client/{v}/future", 0, TLH_AUTH, client_v, NULL, NULL,
        on_endpoint, EP(tlg_fut_list, .futures = true)},
    {"GET", FUT_UNSTABLE "/future", 0, TLH_AUTH, NULL, NULL, NULL, on_endpoint,
        EP(tlg_fut_list, .futures = true)},
    /* a new state event invalidates the state futures with its key */
    {"PUT", ROOM "/state/{type}", 0, TLH_OTHERS_FALLBACK, plain_state, NULL,
        NULL, on_state_plain, EP(NULL, .futures = true)},
    {"PUT", ROOM "/state/{type}/{skey}", 0, TLH_OTHERS_FALLBACK, plain_state,
        NULL, NULL, on_state_plain, EP(NULL, .futures = true)},
    /* everything else: the homeserver's */
    {"*", NULL, 0, 0, NULL, fallback_head, NULL, on_proxy, NULL},
};

/* ---- start and stop ---- */

static const char *const cors[] = {"Access-Control-Allow-Origin", "*",
    "Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Allow-Headers",
    "X-Requested-With, Content-Type, Authorization", NULL};

static int
routes_add(tlg *g)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const gep *ep = routes[i].data;
		int rv;
		if (ep != NULL && ep->stable && !g->c.stable) {
			continue;
		}
		if (ep != NULL && ep->futures && !g->c.futures) {
			continue;
		}
		if ((rv = tlh_route_add(g->http, &routes[i])) != TL_OK) {
			return rv;
		}
	}
	return TL_OK;
}

static void
ready_file_write(const tlg *g)
{
	char tmp[600];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", g->c.ready_file);
	if ((f = fopen(tmp, "w")) != NULL) {
		fprintf(f, "%s\n", g->url);
		fclose(f);
		rename(tmp, g->c.ready_file);
	}
}

int
tlg_http_start(tlg *g)
{
	tlh_config cfg = {
	    .listen = g->c.listen,
	    .body_max = g->c.max_body,
	    .trust_forwarded = g->c.trust_forwarded,
	    .trusted_proxies = g->c.trusted_proxies,
	    .headers = cors,
	    .req_size = sizeof(greq),
	    .req_fini = req_fini,
	    .pre = on_pre,
	    .auth = on_auth,
	    .error = on_error,
	    .framing_error = on_framing_error,
	    /* a pass-through body may be as large as proxy_max_body */
	    .chunk_max = g->c.proxy_max_body > g->c.max_body
	        ? g->c.proxy_max_body
	        : g->c.max_body,
	    .arg = g,
	};
	int rv;

	if (tlh_server_alloc(&g->http, &cfg) != TL_OK ||
	    routes_add(g) != TL_OK) {
		return -1;
	}
	if ((rv = tlh_server_start(g->http)) != TL_OK) {
		tli_log("msc4140", TLI_LOG_ERROR, "G004", "%s %s",
		    rv == TL_EINVAL ? "bad listen address" : "cannot listen on",
		    g->c.listen);
		return -1;
	}
	snprintf(g->url, sizeof(g->url), "%s", tlh_server_url(g->http));
	if (g->c.ready_file[0] != '\0') {
		ready_file_write(g);
	}
	return 0;
}

void
tlg_http_stop(tlg *g)
{
	tlh_server_free(g->http);
	g->http = NULL;
}
