/*
 * The homeserver client: one blocking HTTP request through libcurl, with
 * a small pool of easy handles so that connections to the homeserver are
 * kept alive between requests of different threads. A request either
 * holds its whole answer (tlg_hs_request: the gateway's own calls and the
 * answers it patches, small JSON, bounded by HS_MAX_RESPONSE) or streams
 * its body and answer through callbacks (tlg_hs_stream: pass-through);
 * curl waits inside a callback that waits, so nothing more is held.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hs.h"

/* Answers held whole are small JSON (whoami, a send's event id, versions,
 * capabilities). */
#define HS_MAX_RESPONSE (1024u * 1024u)

/* The status line of a new header block (after a 100 Continue or a
 * redirect). */
static bool
status_line(const char *p, size_t len)
{
	return len > 5 && strncmp(p, "HTTP/", 5) == 0;
}

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	hs_resp *r = arg;

	if (r->body.len + size * n > HS_MAX_RESPONSE) {
		return 0;
	}
	tli_buf_append(&r->body, p, size * n);
	return r->body.oom ? 0 : size * n;
}

static size_t
on_header(char *p, size_t size, size_t n, void *arg)
{
	hs_resp *r = arg;
	size_t len = size * n;

	/* A new status line (after a 100 Continue or a redirect) starts a
	 * new header block. */
	if (status_line(p, len)) {
		tli_buf_reset(&r->headers);
		r->ctype[0] = '\0';
		return len;
	}
	if (len > 13 && strncasecmp(p, "content-type:", 13) == 0) {
		size_t s = 13, e = len;
		while (s < e && (p[s] == ' ' || p[s] == '\t')) {
			s++;
		}
		while (e > s && (p[e - 1] == '\r' || p[e - 1] == '\n')) {
			e--;
		}
		if (e - s < sizeof(r->ctype)) {
			memcpy(r->ctype, p + s, e - s);
			r->ctype[e - s] = '\0';
		}
	}
	tli_buf_append(&r->headers, p, len);
	return len;
}

/* A stopping gateway aborts transfers in progress (a long /sync would
 * otherwise hold the stop for minutes). */
static int
on_progress(
    void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	tlg *g = arg;

	(void) dt;
	(void) dn;
	(void) ut;
	(void) un;
	return atomic_load(&g->stopping) ? 1 : 0;
}

/* A transfer's outcome to the outage log (health.c); transfers that we
 * cut short (stopping, a full buffer, a client gone) tell nothing. */
static void
outcome(tlg *g, CURLcode cc, long status)
{
	if (cc == CURLE_ABORTED_BY_CALLBACK || cc == CURLE_WRITE_ERROR ||
	    cc == CURLE_READ_ERROR || cc == CURLE_OUT_OF_MEMORY) {
		return;
	}
	tlg_hs_outcome(g, cc == CURLE_OK ? status : 0,
	    cc == CURLE_OK ? NULL : curl_easy_strerror(cc));
}

static CURL *
curl_get(tlg *g)
{
	CURL *h = NULL;

	pthread_mutex_lock(&g->curl_mtx);
	if (g->ncurls > 0) {
		h = g->curls[--g->ncurls];
	}
	pthread_mutex_unlock(&g->curl_mtx);
	if (h == NULL) {
		h = curl_easy_init();
	} else {
		curl_easy_reset(h);
	}
	return h;
}

static void
curl_put(tlg *g, CURL *h)
{
	pthread_mutex_lock(&g->curl_mtx);
	if (g->ncurls < (int) (sizeof(g->curls) / sizeof(g->curls[0]))) {
		g->curls[g->ncurls++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&g->curl_mtx);
	if (h != NULL) {
		curl_easy_cleanup(h);
	}
}

int
tlg_hs_request(tlg *g, const char *method, const char *url, const hs_hdr *hdrs,
    size_t nhdrs, const void *body, size_t len, hs_resp *r)
{
	struct curl_slist *hl = NULL;
	CURL *h;
	CURLcode cc;
	tli_buf line = {0};

	memset(r, 0, sizeof(*r));
	if ((h = curl_get(g)) == NULL) {
		return -1;
	}
	for (size_t i = 0; i < nhdrs; i++) {
		struct curl_slist *n;
		tli_buf_reset(&line);
		tli_buf_puts(&line, hdrs[i].name);
		tli_buf_puts(&line, ": ");
		tli_buf_puts(&line, hdrs[i].value);
		if (line.oom ||
		    (n = curl_slist_append(hl, tli_buf_str(&line))) == NULL) {
			break;
		}
		hl = n;
	}
	/* No "Expect: 100-continue" round trip; no added Accept-Encoding. */
	if ((body != NULL || strcmp(method, "GET") != 0)) {
		struct curl_slist *n = curl_slist_append(hl, "Expect:");
		hl = n != NULL ? n : hl;
	}
	tli_buf_fini(&line);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, g);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	}
	if (body != NULL) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(
		    h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
	} else if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(
		    h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) 0);
	}
	cc = curl_easy_perform(h);
	if (cc == CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	} else {
		r->status = 0;
	}
	outcome(g, cc, r->status);
	curl_slist_free_all(hl);
	curl_put(g, h);
	return r->status != 0 ? 0 : -1;
}

/* ---- streamed ---- */

typedef struct stream_ctx {
	hs_stream *st;
	CURL *h;
	bool head_req;
	tli_buf headers;
	bool failed; /* a callback of st refused */
} stream_ctx;

static size_t
stream_on_read(char *buf, size_t size, size_t n, void *arg)
{
	stream_ctx *c = arg;
	long k = c->st->read(c->st->arg, buf, size * n);

	if (k < 0) {
		c->failed = true;
		return CURL_READFUNC_ABORT;
	}
	return (size_t) k;
}

static size_t
stream_on_header(char *p, size_t size, size_t n, void *arg)
{
	stream_ctx *c = arg;

	if (status_line(p, size * n)) {
		tli_buf_reset(&c->headers);
	}
	tli_buf_append(&c->headers, p, size * n);
	return c->headers.oom ? 0 : size * n;
}

/* The answer's status and headers to st, once, before its body. */
static bool
stream_head(stream_ctx *c, bool body)
{
	long status = 0;
	curl_off_t len = -1;

	if (c->st->headed) {
		return true;
	}
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(c->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	if (!body && !c->head_req) {
		len = 0; /* no body came: none is announced */
	}
	if (c->st->head(c->st->arg, status, tli_buf_str(&c->headers),
	        (int64_t) len) != 0) {
		c->failed = true;
		return false;
	}
	c->st->headed = true;
	return true;
}

static size_t
stream_on_body(char *p, size_t size, size_t n, void *arg)
{
	stream_ctx *c = arg;

	if (!stream_head(c, true) || c->st->write(c->st->arg, p, size * n)) {
		c->failed = true;
		return 0;
	}
	return size * n;
}

static struct curl_slist *
headers_list(const hs_hdr *hdrs, size_t nhdrs)
{
	struct curl_slist *hl = NULL, *n;
	tli_buf line = {0};

	for (size_t i = 0; i < nhdrs; i++) {
		tli_buf_reset(&line);
		tli_buf_printf(&line, "%s: %s", hdrs[i].name, hdrs[i].value);
		if (line.oom ||
		    (n = curl_slist_append(hl, tli_buf_str(&line))) == NULL) {
			break;
		}
		hl = n;
	}
	tli_buf_fini(&line);
	/* No "Expect: 100-continue" round trip. */
	n = curl_slist_append(hl, "Expect:");
	return n != NULL ? n : hl;
}

int
tlg_hs_stream(tlg *g, const char *method, const char *url, hs_stream *st)
{
	stream_ctx c = {.st = st};
	struct curl_slist *hl;
	CURLcode cc;

	st->headed = false;
	if ((c.h = curl_get(g)) == NULL) {
		return -1;
	}
	c.head_req = strcmp(method, "HEAD") == 0;
	hl = headers_list(st->hdrs, st->nhdrs);
	curl_easy_setopt(c.h, CURLOPT_URL, url);
	curl_easy_setopt(c.h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	/* A large body may take long; a silent homeserver may not. */
	curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_TIME, 120L);
	curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, stream_on_body);
	curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &c);
	curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, stream_on_header);
	curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &c);
	curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, g);
	curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
	if (c.head_req) {
		curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
	}
	if (st->len != 0) {
		/* a length of -1 sends the body chunked */
		curl_easy_setopt(c.h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c.h, CURLOPT_READFUNCTION, stream_on_read);
		curl_easy_setopt(c.h, CURLOPT_READDATA, &c);
		curl_easy_setopt(
		    c.h, CURLOPT_INFILESIZE_LARGE, (curl_off_t) st->len);
	} else if (strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
		curl_easy_setopt(c.h, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(
		    c.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) 0);
	}
	cc = curl_easy_perform(c.h);
	if (cc == CURLE_OK && !c.failed) {
		stream_head(&c, false);
	}
	if (!c.failed) {
		long status = 0;
		curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
		outcome(g, cc, cc == CURLE_OK ? status : 0);
	}
	curl_slist_free_all(hl);
	tli_buf_fini(&c.headers);
	/* a transfer cut short leaves the connection unusable */
	if (cc == CURLE_OK) {
		curl_put(g, c.h);
	} else {
		curl_easy_cleanup(c.h);
	}
	return cc == CURLE_OK && !c.failed ? 0 : -1;
}

void
tlg_hs_resp_free(hs_resp *r)
{
	tli_buf_fini(&r->body);
	tli_buf_fini(&r->headers);
}
