/*
 * tlhttp: the HTTP layer an adapter (the MSC4140 gateway, a timer service)
 * serves its routes through, and the text helpers of an HTTP front.
 * Built on tlbase only; an adapter links it beside the public SDK.
 *
 * An adapter declares its routes in one table (tlh_route: method(s), path
 * pattern, body limit, authentication, handlers) and registers each entry
 * once with tlh_route_add; a fallback takes every request no route
 * matches. The server owns the rest: libmicrohttpd event loops, reading
 * the body up to the route's limit (413) and its timeout, 405 with an Allow
 * header for a known path asked with another method, the worker threads
 * blocking work runs on while the connection is suspended, the asynchronous
 * completion path, the authentication hook, connection limits and timeouts.
 * Every connection passes through a framing guard (guard.h) that refuses
 * broken request framing at once (400), such as a chunk size out of range,
 * which libmicrohttpd would otherwise wait on.
 *
 * The client (client.c) is the other direction: blocking requests of an
 * adapter (to a homeserver, to a timer's callback) over a pool of
 * kept-alive libcurl handles.
 *
 * The life of a request. On the event loop, when only the headers are in:
 * the target must be origin-form ("/..."; else error TLH_E_TARGET), the
 * server's `pre` hook may answer (CORS preflights), the path is matched
 * (405, a route, or the fallback), the route's `head` hook may answer or
 * change the body limit, and a Content-Length over the limit answers 413
 * whatever was answered before. Then the body is read (a longer body is
 * dropped and tlh_req_body_over says so: the handler decides when to
 * answer 413). With the body in, the connection is suspended: the route's
 * `fast` hook may answer at once or start asynchronous work that ends
 * with tlh_async_done; otherwise a worker runs the authentication hook
 * (routes with TLH_AUTH or TLH_AUTH_OPTIONAL) and the handler, which
 * makes the reply. Every reply is made once (tlh_reply) and queued by the
 * event loop when the connection resumes.
 *
 * Streams. A head hook may call tlh_req_stream: then the handler runs on
 * a worker as soon as the headers are in and reads the body as it comes
 * (tlh_req_read), through a small buffer (64 KiB) that holds the client
 * back while full; the limit still counts, as the body streams. Its reply
 * may be streamed too (tlh_reply_stream, tlh_reply_write, tlh_reply_end),
 * through a buffer as small that holds the handler back. libmicrohttpd
 * sends a reply only once the whole body is in, so a reply is published
 * (may be sent) at its first body bytes, its end or the handler's return,
 * and from then on the rest of the body is read and dropped.
 */
#ifndef TL_HTTP_TLHTTP_H
#define TL_HTTP_TLHTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "timeline/errors.h" /* TL_OK and the codes returned here */

typedef struct tlh_server tlh_server;
typedef struct tlh_req tlh_req;

/* ---- routes ---- */

/* On a worker, with the body in: makes the reply (tlh_reply). */
typedef void (*tlh_handler_fn)(tlh_req *req, void *arg);
/* On the event loop, headers only, never blocking: false when it made the
 * reply. */
typedef bool (*tlh_head_fn)(tlh_req *req, void *arg);
/* On the event loop with the body in and the connection suspended. */
enum {
	TLH_FAST_NO = 0,   /* go on to a worker */
	TLH_FAST_ANSWERED, /* the reply is made */
	TLH_FAST_STARTED,  /* asynchronous work will call tlh_async_done */
};
typedef int (*tlh_fast_fn)(tlh_req *req, void *arg);
/* Whether a route applies to this request beyond its path and method
 * (a query parameter, say; the route's parameters are readable); a route
 * that does not apply is not there. */
typedef bool (*tlh_when_fn)(const tlh_req *req, void *arg);

enum {
	TLH_AUTH = 1 << 0,          /* the auth hook must accept the caller */
	TLH_AUTH_OPTIONAL = 1 << 1, /* the auth hook runs; it may accept none */
	/* other methods on this path go to the fallback instead of 405 (a
	 * path the adapter only augments and otherwise passes on) */
	TLH_OTHERS_FALLBACK = 1 << 2,
};

typedef struct tlh_route {
	/* "GET", or several: "PUT|POST"; "*" any */
	const char *methods;
	/* literal segments and captured parameters, each a whole segment:
	 * "/timers/{id}". Captured values are percent-decoded, literal
	 * segments compared decoded. NULL: the fallback. */
	const char *pattern;
	uint64_t body_max; /* 0: the server's default */
	unsigned flags;    /* TLH_AUTH... */
	tlh_when_fn when;  /* NULL: always */
	tlh_head_fn head;  /* NULL: none */
	tlh_fast_fn fast;  /* NULL: none */
	tlh_handler_fn handler;
	const void *data; /* for the handlers: tlh_req_route_data */
} tlh_route;

/* Adds one route (copied; the pattern is parsed now). Routes are tried in
 * the order added; the first whose pattern matches the path names the
 * resource, and among the routes with that same pattern the first that
 * takes the method serves it. TL_OK, TL_EINVAL (bad pattern or methods) or
 * TL_ENOMEM. Before tlh_server_start only. */
int tlh_route_add(tlh_server *s, const tlh_route *r);

/* ---- the server ---- */

/* The server's own refusals, answered through the error hook. */
typedef enum tlh_error {
	TLH_E_TARGET,      /* 400: not an origin-form request target */
	TLH_E_METHOD,      /* 405: known path, other method (Allow is added) */
	TLH_E_TOO_LARGE,   /* 413: Content-Length over the route's limit */
	TLH_E_STOPPING,    /* 503: the server is stopping */
	TLH_E_NO_REPLY,    /* 500: a handler made no reply */
	TLH_E_NOT_FOUND,   /* 404: no route and no fallback */
	TLH_E_BAD_REQUEST, /* 400: malformed framing (Content-Length twice, a
	                    * chunk size out of range...) */
} tlh_error;

typedef struct tlh_config {
	const char *listen;      /* "HOST:PORT", "[V6]:PORT"; port 0: any */
	unsigned loops;          /* event-loop threads; 0: 2 */
	unsigned conn_limit;     /* 0: 2000 */
	unsigned conn_timeout_s; /* idle connections; 0: 300 */
	/* a request body that stops coming for this long closes the
	 * connection; 0: 30 */
	unsigned body_timeout_s;
	uint64_t body_max;    /* the default body limit; 0: 64 KiB */
	bool trust_forwarded; /* client address from X-Forwarded-For */
	/* the reverse proxies whose X-Forwarded-For is believed, a list of
	 * "ADDR[/BITS]" (tlh_nets_parse); NULL or "": trust_forwarded
	 * decides (any peer's last entry) */
	const char *trusted_proxies;
	/* headers added to every reply made without TLH_REPLY_BARE (CORS) */
	const char *const *headers; /* name, value, ..., NULL */
	size_t req_size;            /* bytes of adapter state per request */
	void (*req_fini)(tlh_req *req, void *arg); /* frees that state */
	/* first call, before routing; false when it made the reply */
	tlh_head_fn pre;
	/* who is calling (on a worker): true to go on (optional: also with
	 * no caller), false when it made the reply */
	bool (*auth)(tlh_req *req, bool optional, void *arg);
	/* the server's refusals; NULL: {"error":"..."} */
	void (*error)(tlh_req *req, tlh_error e, void *arg);
	/* the JSON body of a refusal made before there is a request (broken
	 * framing: TLH_E_BAD_REQUEST, TLH_E_TOO_LARGE); NULL:
	 * {"error":"..."} */
	void (*framing_error)(void *arg, tlh_error e, tli_buf *body);
	/* a chunk larger than this is refused (413) at its size line;
	 * 0: the largest of body_max and the routes' limits */
	uint64_t chunk_max;
	void *arg; /* for every hook and handler */
} tlh_config;

/* A server, not yet listening; cfg is copied (headers and listen are
 * referenced and must outlive it). TL_OK, TL_EINVAL (bad trusted_proxies)
 * or TL_ENOMEM. */
int tlh_server_alloc(tlh_server **out, const tlh_config *cfg);
/* Listens and serves. TL_OK, TL_EINVAL (bad listen address) or TL_ECONN
 * (cannot listen). */
int tlh_server_start(tlh_server *s);
/* "http://HOST:PORT" as listened on (127.0.0.1 for a wildcard). */
const char *tlh_server_url(const tlh_server *s);
/* Stops: refuses new work (503), waits for the requests in progress,
 * stops the loops and the workers, frees. NULL is fine. */
void tlh_server_free(tlh_server *s);

/* ---- the request (valid until its reply is queued) ---- */

const char *tlh_req_method(const tlh_req *req);
const char *tlh_req_uri(const tlh_req *req);   /* raw, as received */
const char *tlh_req_path(const tlh_req *req);  /* raw, before '?' */
const char *tlh_req_query(const tlh_req *req); /* raw, after '?', or "" */
const char *tlh_req_ip(const tlh_req *req);    /* the caller, or "?" */
/* A header's value or NULL. */
const char *tlh_req_header(const tlh_req *req, const char *name);
/* Calls fn for every request header, in order. */
void tlh_req_each_header(const tlh_req *req,
    void (*fn)(const char *name, const char *value, void *arg), void *arg);
/* A captured parameter of the route's pattern, decoded (NUL-terminated;
 * len may be NULL); NULL when the pattern has no such name. */
const char *tlh_req_param(const tlh_req *req, const char *name, size_t *len);
/* The i-th captured parameter (NULL past the last). */
const char *tlh_req_param_at(
    const tlh_req *req, size_t i, const char **name, size_t *len);
/* The body read so far (NUL-terminated), and whether it was over the
 * route's limit (then it was dropped). */
const char *tlh_req_body(const tlh_req *req, size_t *len);
bool tlh_req_body_over(const tlh_req *req);
/* Changes the body limit (a head hook, before the body is read). */
void tlh_req_set_body_max(tlh_req *req, uint64_t max);
/* In a head hook: the handler starts with the headers in and reads the
 * body with tlh_req_read (tlh_req_body stays empty). */
void tlh_req_stream(tlh_req *req);
/* On a stream's worker: up to cap bytes of the body into buf, waiting
 * until some come. TL_OK with *n bytes (0: the body ended), TL_ETOOLARGE
 * (over the limit: tlh_req_body_over; the rest is dropped) or TL_ECLOSED
 * (the client went away, or the reply is published). */
int tlh_req_read(tlh_req *req, void *buf, size_t cap, size_t *n);
/* The data of the route serving the request (NULL for the fallback's). */
const void *tlh_req_route_data(const tlh_req *req);
/* The adapter's per-request state (cfg.req_size bytes, zeroed). */
void *tlh_req_state(tlh_req *req);

/* ---- replies ---- */

enum {
	TLH_REPLY_BARE = 1 << 0, /* without the server's common headers */
};
/* Makes the reply (once per request): status, the body (copied), a
 * Content-Type unless ctype is NULL. TL_OK or TL_ENOMEM (then the
 * connection is closed). */
int tlh_reply(tlh_req *req, int status, const char *ctype, const void *body,
    size_t len, unsigned flags);
/* A stream's reply whose body follows through tlh_reply_write: status,
 * the body's size (TLH_SIZE_UNKNOWN: chunked, or until the connection
 * closes for HTTP/1.0), a Content-Type unless ctype is NULL. Headers may be
 * added until the first write or the end. TL_OK or TL_ENOMEM (then the
 * connection is closed). */
#define TLH_SIZE_UNKNOWN UINT64_MAX
int tlh_reply_stream(
    tlh_req *req, int status, const char *ctype, uint64_t size, unsigned flags);
/* The reply's next bytes, waiting while its buffer is full. TL_OK,
 * TL_ECLOSED (the client went away: stop) or TL_ENOMEM. */
int tlh_reply_write(tlh_req *req, const void *p, size_t n);
/* The end of the reply's body; !ok: it is cut short (the connection is
 * closed, so the client sees it incomplete). A handler that returns
 * without it cuts the reply short. */
void tlh_reply_end(tlh_req *req, bool ok);
/* Adds a header to the reply made. */
void tlh_reply_header(tlh_req *req, const char *name, const char *value);
bool tlh_replied(const tlh_req *req);
/* The end of the work a fast hook started (any thread): the reply made is
 * sent, or without one the request goes on to a worker. */
void tlh_async_done(tlh_req *req);

/* ---- the client behind reverse proxies (realip.c) ---- */

typedef struct tlh_nets tlh_nets;

/* "ADDR[/BITS], ..." (IPv4 or IPv6, spaces around entries allowed; ""
 * is no network). TL_OK with *out (tlh_nets_free), TL_EINVAL for a bad
 * entry, TL_ENOMEM. */
int tlh_nets_parse(const char *s, tlh_nets **out);
void tlh_nets_free(tlh_nets *ns);
/* Whether the textual address ip is in one of the networks (NULL: none). */
bool tlh_nets_has(const tlh_nets *ns, const char *ip);
/* The client of a request from peer with this X-Forwarded-For (NULL:
 * none): from the right, each entry while the address at hand is a
 * trusted proxy; the first that is not one is the client. */
void tlh_client_addr(const tlh_nets *ns, const char *peer, const char *xff,
    char *out, size_t cap);

/* ---- text (text.c) ---- */

/* A JSON string literal (quotes included) of n bytes of UTF-8. */
void tlh_json_str(tli_buf *b, const char *s, size_t n);
/* Percent-encode for a URL path segment or query value. */
void tlh_url_enc(tli_buf *b, const char *s, size_t n);
/* The value of a hex digit, or -1. */
int tlh_hexval(char c);
/* Decode %XX in place (NUL-terminated after); returns the new length or -1
 * on a bad escape. */
long tlh_url_dec(char *s, size_t n);
/* The decoded value of parameter name in a raw query string ("a=1&b")
 * into out; "" for a bare name; NULL when absent, too long or badly
 * escaped. */
const char *tlh_query_get(
    const char *query, const char *name, char *out, size_t cap);

/* ---- the client (client.c, libcurl) ---- */

/* Blocking requests whose answer is held, over kept-alive connections: a
 * pool of libcurl easy handles shared by the threads of one program. */
typedef struct tlh_client tlh_client;

/* A client keeping up to keep idle handles (0: 256). TL_OK or
 * TL_ENOMEM. */
int tlh_client_alloc(tlh_client **out, unsigned keep);
/* Frees the idle handles; none may be out. NULL is fine. */
void tlh_client_free(tlh_client *c);
/* An easy handle (a CURL *, reset) from the pool or new; NULL when out of
 * memory. For a caller that drives libcurl itself (streams). */
void *tlh_client_handle(tlh_client *c);
/* Gives a handle back; reuse false (a transfer cut short) closes it. */
void tlh_client_handle_put(tlh_client *c, void *handle, bool reuse);

typedef struct tlh_hdr {
	const char *name;
	const char *value; /* NULL: the header is not sent (libcurl's own) */
} tlh_hdr;

/* The header lines of a request as a struct curl_slist * (free with
 * curl_slist_free_all); no_expect adds "Expect:" (no 100-continue). */
struct curl_slist *tlh_client_headers(
    const tlh_hdr *hdrs, size_t nhdrs, bool no_expect);

typedef struct tlh_fetch_opts {
	int64_t connect_ms; /* 0: 5 s */
	int64_t timeout_ms; /* the whole request; 0: 120 s */
	size_t max_body;    /* the answer's body is refused past it; 0: 1 MiB */
	const _Atomic bool *abort; /* non-NULL: true aborts the transfer */
} tlh_fetch_opts;

typedef struct tlh_resp {
	long status;     /* 0: no answer */
	tli_buf body;    /* the answer's body */
	tli_buf headers; /* raw "Name: value\r\n" lines */
	char ctype[128]; /* its Content-Type */
	const char *why; /* no answer: libcurl's reason (static) */
	bool cut;        /* no answer because we cut it short (abort, size) */
	bool timed_out;  /* no answer within timeout_ms */
} tlh_resp;

/* One request to url; body may be NULL (an empty body for PUT and POST);
 * o may be NULL (the defaults). 0 with r filled (any status), or -1 when
 * no answer came (r->status 0, r->why). Free r with tlh_resp_free either
 * way. Thread-safe. */
int tlh_fetch(tlh_client *c, const char *method, const char *url,
    const tlh_hdr *hdrs, size_t nhdrs, const void *body, size_t len,
    const tlh_fetch_opts *o, tlh_resp *r);
void tlh_resp_free(tlh_resp *r);

#endif
