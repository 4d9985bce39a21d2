/*
 * The homeserver client: one blocking HTTP request through tlhttp's client
 * (tlh_fetch: a pool of easy handles so that connections to the homeserver
 * are kept alive between requests of different threads). A request either
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

int
tlg_hs_request(tlg *g, const char *method, const char *url, const hs_hdr *hdrs,
    size_t nhdrs, const void *body, size_t len, hs_resp *r)
{
	tlh_fetch_opts o = {
	    .connect_ms = 5000,
	    .timeout_ms = 120000,
	    .max_body = HS_MAX_RESPONSE,
	    .abort = &g->stopping,
	};
	int rv = tlh_fetch(g->hc, method, url, hdrs, nhdrs, body, len, &o, r);

	if (!r->cut) {
		tlg_hs_outcome(g, r->status, r->status != 0 ? NULL : r->why);
	}
	return rv;
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

int
tlg_hs_stream(tlg *g, const char *method, const char *url, hs_stream *st)
{
	stream_ctx c = {.st = st};
	struct curl_slist *hl;
	CURLcode cc;

	st->headed = false;
	if ((c.h = tlh_client_handle(g->hc)) == NULL) {
		return -1;
	}
	c.head_req = strcmp(method, "HEAD") == 0;
	hl = tlh_client_headers(st->hdrs, st->nhdrs, true);
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
	tlh_client_handle_put(g->hc, c.h, cc == CURLE_OK);
	return cc == CURLE_OK && !c.failed ? 0 : -1;
}

void
tlg_hs_resp_free(hs_resp *r)
{
	tlh_resp_free(r);
}
