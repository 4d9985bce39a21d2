/*
 * The HTTP client of the adapters (tlhttp.h, "the client"): blocking
 * requests through libcurl whose answer is held whole, and a pool of easy
 * handles so that connections stay alive between requests of different
 * threads. The MSC4140 gateway talks to its homeserver through it, the
 * timer service to its callbacks. The pool's lock is a leaf.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tlhttp.h"

#define CLIENT_SLOTS 256

struct tlh_client {
	pthread_mutex_t mtx;
	CURL *idle[CLIENT_SLOTS];
	unsigned nidle;
	unsigned keep;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void
global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int
tlh_client_alloc(tlh_client **out, unsigned keep)
{
	tlh_client *c;

	pthread_once(&global_once, global_init);
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		return TL_ENOMEM;
	}
	pthread_mutex_init(&c->mtx, NULL);
	c->keep = keep == 0 || keep > CLIENT_SLOTS ? CLIENT_SLOTS : keep;
	*out = c;
	return TL_OK;
}

void
tlh_client_free(tlh_client *c)
{
	if (c == NULL) {
		return;
	}
	for (unsigned i = 0; i < c->nidle; i++) {
		curl_easy_cleanup(c->idle[i]);
	}
	pthread_mutex_destroy(&c->mtx);
	free(c);
}

void *
tlh_client_handle(tlh_client *c)
{
	CURL *h = NULL;

	pthread_mutex_lock(&c->mtx);
	if (c->nidle > 0) {
		h = c->idle[--c->nidle];
	}
	pthread_mutex_unlock(&c->mtx);
	if (h == NULL) {
		h = curl_easy_init();
	} else {
		curl_easy_reset(h);
	}
	return h;
}

void
tlh_client_handle_put(tlh_client *c, void *handle, bool reuse)
{
	CURL *h = handle;

	if (h == NULL) {
		return;
	}
	pthread_mutex_lock(&c->mtx);
	if (reuse && c->nidle < c->keep) {
		c->idle[c->nidle++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&c->mtx);
	if (h != NULL) {
		curl_easy_cleanup(h);
	}
}

/* ---- a request whose answer is held ---- */

typedef struct fetch_ctx {
	tlh_resp *r;
	size_t max;
	const _Atomic bool *abort;
} fetch_ctx;

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
	fetch_ctx *f = arg;

	if (f->r->body.len + size * n > f->max) {
		return 0;
	}
	tli_buf_append(&f->r->body, p, size * n);
	return f->r->body.oom ? 0 : size * n;
}

static size_t
on_header(char *p, size_t size, size_t n, void *arg)
{
	tlh_resp *r = ((fetch_ctx *) arg)->r;
	size_t len = size * n;

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

static int
on_progress(
    void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	fetch_ctx *f = arg;

	(void) dt;
	(void) dn;
	(void) ut;
	(void) un;
	return f->abort != NULL && atomic_load(f->abort) ? 1 : 0;
}

struct curl_slist *
tlh_client_headers(const tlh_hdr *hdrs, size_t nhdrs, bool no_expect)
{
	struct curl_slist *hl = NULL, *n;
	tli_buf line = {0};

	for (size_t i = 0; i < nhdrs; i++) {
		tli_buf_reset(&line);
		/* "Name:" without a value removes a header libcurl adds */
		if (hdrs[i].value != NULL) {
			tli_buf_printf(
			    &line, "%s: %s", hdrs[i].name, hdrs[i].value);
		} else {
			tli_buf_printf(&line, "%s:", hdrs[i].name);
		}
		if (line.oom ||
		    (n = curl_slist_append(hl, tli_buf_str(&line))) == NULL) {
			break;
		}
		hl = n;
	}
	tli_buf_fini(&line);
	/* No "Expect: 100-continue" round trip. */
	if (no_expect && (n = curl_slist_append(hl, "Expect:")) != NULL) {
		hl = n;
	}
	return hl;
}

static void
fetch_setopts(CURL *h, const char *method, const char *url,
    struct curl_slist *hl, const tlh_fetch_opts *o, fetch_ctx *f)
{
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
	    (long) (o->connect_ms > 0 ? o->connect_ms : 5000));
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
	    (long) (o->timeout_ms > 0 ? o->timeout_ms : 120000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, f);
	if (o->abort != NULL) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, f);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	}
}

int
tlh_fetch(tlh_client *c, const char *method, const char *url,
    const tlh_hdr *hdrs, size_t nhdrs, const void *body, size_t len,
    const tlh_fetch_opts *o, tlh_resp *r)
{
	static const tlh_fetch_opts defaults = {0};
	fetch_ctx f = {.r = r};
	struct curl_slist *hl;
	CURL *h;
	CURLcode cc;

	memset(r, 0, sizeof(*r));
	o = o != NULL ? o : &defaults;
	f.max = o->max_body > 0 ? o->max_body : 1024u * 1024u;
	f.abort = o->abort;
	if ((h = tlh_client_handle(c)) == NULL) {
		r->why = "out of memory";
		r->cut = true;
		return -1;
	}
	hl = tlh_client_headers(
	    hdrs, nhdrs, body != NULL || strcmp(method, "GET") != 0);
	fetch_setopts(h, method, url, hl, o, &f);
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
		r->why = curl_easy_strerror(cc);
		/* transfers we cut short tell nothing of the peer */
		r->cut = cc == CURLE_ABORTED_BY_CALLBACK ||
		    cc == CURLE_WRITE_ERROR || cc == CURLE_READ_ERROR ||
		    cc == CURLE_OUT_OF_MEMORY;
		r->timed_out = cc == CURLE_OPERATION_TIMEDOUT;
	}
	curl_slist_free_all(hl);
	tlh_client_handle_put(c, h, true);
	return r->status != 0 ? 0 : -1;
}

void
tlh_resp_free(tlh_resp *r)
{
	tli_buf_fini(&r->body);
	tli_buf_fini(&r->headers);
}
