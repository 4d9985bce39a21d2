/*
 * The homeserver client: one blocking HTTP request through libcurl, with
 * a small pool of easy handles so that connections to the homeserver are
 * kept alive between requests of different threads.
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw.h"

#define HS_MAX_RESPONSE (256u * 1024u * 1024u)

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
	if (len > 5 && strncmp(p, "HTTP/", 5) == 0) {
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
	curl_slist_free_all(hl);
	curl_put(g, h);
	return r->status != 0 ? 0 : -1;
}

void
tlg_hs_resp_free(hs_resp *r)
{
	tli_buf_fini(&r->body);
	tli_buf_fini(&r->headers);
}
