/*
 * The gateway suites' processes and HTTP client (see gw_util.h).
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_util.h"
#include "testutil.h"

/* A base URL from a ready file into a gw_env field. */
#define gw_copy_url(field, addr) \
	snprintf(field, sizeof(field), "%.*s", (int) sizeof(field) - 1, addr)

/* timelined (and tl-msc4140) as the environment asks; the gateway's ready
 * file names its base URL. */
static void
gw_describe(gw_env *e)
{
	char url[600];

	snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
	tt_proc_fini(&e->tl);
	tt_proc_fini(&e->gw_proc);
	if (e->standalone) {
		tt_proc_timelined(&e->tl, e->dir, "timelined");
		tt_proc_arg(&e->tl, "--data");
		tt_proc_arg(&e->tl, "%s/data", e->dir);
		tt_proc_args(&e->tl, "--listen", url, "--metrics", "off", NULL);
		tt_proc_init(&e->gw_proc, tt_bin_msc4140(), e->dir, "gateway");
		tt_proc_set(&e->gw_proc, "ready_file", "%s", e->gw_proc.ready);
		tt_proc_args(&e->gw_proc, "--broker", url, NULL);
		return;
	}
	/* The gateway runs inside timelined and writes its own ready file. */
	tt_proc_init(&e->tl, tt_bin_timelined(), e->dir, "timelined");
	tt_proc_arg(&e->tl, "--data");
	tt_proc_arg(&e->tl, "%s/data", e->dir);
	tt_proc_args(&e->tl, "--listen", url, "--metrics", "off", NULL);
	tt_proc_set(&e->tl, "ready_file", "%s", e->tl.ready);
	e->tl.conf_flag = "--msc4140";
}

/* The gateway's settings, shared by both ways of running it. */
static void
gw_settings(gw_env *e, tt_proc *p, const char *extra)
{
	tt_proc_set(p, "listen", "127.0.0.1:0");
	tt_proc_set(p, "homeserver", "%s", e->hs);
	tt_proc_set(p, "as_token", "as_secret");
	tt_proc_set(p, "retry_for_ms", "20000");
	if (extra != NULL) {
		tt_proc_conf_text(p, extra);
		tt_proc_conf_text(p, "\n");
	}
}

void
gw_start_broker(gw_env *e)
{
	if (e->standalone) {
		tt_proc_start(&e->tl);
		if (!tt_proc_alive(&e->gw_proc)) {
			tt_proc_start(&e->gw_proc);
		}
		gw_copy_url(e->gw, e->gw_proc.addr);
		return;
	}
	tt_proc_start(&e->tl);
	gw_copy_url(e->gw, e->tl.addr);
}

void
gw_restart(gw_env *e, int sig)
{
	tt_proc *p = e->standalone ? &e->gw_proc : &e->tl;

	tt_proc_restart(p, sig);
	gw_copy_url(e->gw, p->addr);
}

void
gw_start(gw_env *e, const char *tag, bool standalone, const char *extra)
{
	char script[600];

	memset(e, 0, sizeof(*e));
	e->standalone = standalone;
	e->dir = tt_mkdtemp(tag);
	snprintf(script, sizeof(script), "%s/tests/msc4140/fake_hs.py",
	    TL_TEST_SRCDIR);
	tt_proc_init(&e->hs_proc, "python3", e->dir, "hs");
	tt_proc_args(&e->hs_proc, script, "--ready", e->hs_proc.ready, NULL);
	tt_proc_start(&e->hs_proc);
	gw_copy_url(e->hs, e->hs_proc.addr);
	gw_describe(e);
	gw_settings(e, standalone ? &e->gw_proc : &e->tl, extra);
	gw_start_broker(e);
}

void
gw_stop(gw_env *e)
{
	tt_proc_stop(&e->gw_proc);
	tt_proc_stop(&e->tl);
	tt_proc_kill(&e->hs_proc);
	if (e->dir != NULL) {
		tt_proc_check_log(&e->tl);
		tt_proc_check_log(&e->gw_proc);
	}
	tt_proc_fini(&e->gw_proc);
	tt_proc_fini(&e->tl);
	tt_proc_fini(&e->hs_proc);
	if (e->dir != NULL) {
		tt_rmtree(e->dir);
		free(e->dir);
		e->dir = NULL;
	}
}

/* ---- HTTP ---- */

size_t
gw_on_body(char *p, size_t size, size_t n, void *arg)
{
	gw_resp *r = arg;
	char *nb = realloc(r->body, r->len + size * n + 1);

	if (nb == NULL) {
		return 0;
	}
	r->body = nb;
	memcpy(r->body + r->len, p, size * n);
	r->len += size * n;
	r->body[r->len] = '\0';
	return size * n;
}

static size_t
gw_on_header(char *p, size_t size, size_t n, void *arg)
{
	gw_resp *r = arg;
	size_t have = strlen(r->headers);

	if (have + size * n < sizeof(r->headers)) {
		memcpy(r->headers + have, p, size * n);
		r->headers[have + size * n] = '\0';
	}
	return size * n;
}

typedef struct gw_upload {
	const char *p;
	size_t len, off;
} gw_upload;

static size_t
gw_on_read(char *out, size_t size, size_t n, void *arg)
{
	gw_upload *u = arg;
	size_t k = size * n < u->len - u->off ? size * n : u->len - u->off;

	if (k > 1000) {
		k = 1000; /* several chunks */
	}
	memcpy(out, u->p + u->off, k);
	u->off += k;
	return k;
}

/* One request to base+path. token may be NULL; body may be NULL;
 * chunked sends the body with Transfer-Encoding: chunked. */
gw_resp
gw_req_full(const char *method, const char *base, const char *path,
    const char *token, const char *body, size_t len, bool chunked)
{
	gw_resp r;
	struct curl_slist *h = NULL;
	char url[8192], auth[300];
	gw_upload up = {body, len, 0};
	CURL *c = curl_easy_init();
	CURLcode cc;

	memset(&r, 0, sizeof(r));
	cr_assert(c != NULL);
	snprintf(url, sizeof(url), "%s%s", base, path);
	if (token != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		h = curl_slist_append(h, auth);
	}
	h = curl_slist_append(h, "Expect:");
	if (body != NULL) {
		h = curl_slist_append(h, "Content-Type: application/json");
	}
	if (chunked) {
		h = curl_slist_append(h, "Transfer-Encoding: chunked");
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, gw_on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, &up);
	} else if (body != NULL) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(
		    c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gw_on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, gw_on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
	cc = curl_easy_perform(c);
	cr_assert(
	    cc == CURLE_OK, "%s %s: %s", method, url, curl_easy_strerror(cc));
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (r.body != NULL) {
		r.json =
		    json_loadb(r.body, r.len, JSON_DECODE_INT_AS_REAL, NULL);
	}
	return r;
}

gw_resp
gw_req(const char *method, const char *base, const char *path,
    const char *token, const char *body)
{
	return gw_req_full(
	    method, base, path, token, body, body ? strlen(body) : 0, false);
}

void
gw_resp_free(gw_resp *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

const char *
gw_str(const gw_resp *r, const char *key)
{
	json_t *v = r->json ? json_object_get(r->json, key) : NULL;
	return json_is_string(v) ? json_string_value(v) : "";
}

/* Schedule a delayed message; returns the delay_id (malloc'd). */
char *
gw_schedule(const gw_env *e, const char *token, const char *room,
    const char *txn, int64_t delay, const char *content)
{
	char path[1024];
	gw_resp r;
	char *id;

	snprintf(path, sizeof(path),
	    "/_matrix/client/v3/rooms/%s/send/m.room.message/%s"
	    "?org.matrix.msc4140.delay=%lld",
	    room, txn, (long long) delay);
	r = gw_req("PUT", e->gw, path, token, content);
	gw_expect(r, 200, NULL);
	id = strdup(gw_str(&r, "delay_id"));
	cr_assert(strlen(id) >= 22, "a delay_id: %s", r.body);
	gw_resp_free(&r);
	return id;
}

gw_resp
gw_manage(const gw_env *e, const char *id, const char *action)
{
	char path[512];

	snprintf(path, sizeof(path), UNSTABLE "/%s/%s", id, action);
	return gw_req("POST", e->gw, path, NULL, NULL);
}

/* One of the homeserver's records (GET /_test/<what>, member <what>). */
static json_t *
gw_hs_record(const gw_env *e, const char *what)
{
	char path[64];
	gw_resp r;
	json_t *a;

	snprintf(path, sizeof(path), "/_test/%s", what);
	r = gw_req("GET", e->hs, path, NULL, NULL);
	gw_expect(r, 200, NULL);
	a = json_incref(json_object_get(r.json, what));
	gw_resp_free(&r);
	return a;
}

json_t *
gw_hs_events(const gw_env *e)
{
	return gw_hs_record(e, "events");
}

json_t *
gw_hs_requests(const gw_env *e)
{
	return gw_hs_record(e, "requests");
}

/* Wait until the homeserver has at least n events (at most ms). */
json_t *
gw_wait_events(const gw_env *e, size_t n, int ms)
{
	int64_t deadline = tli_mono_ms() + ms;

	for (;;) {
		json_t *a = gw_hs_events(e);
		if (json_array_size(a) >= n || tli_mono_ms() > deadline) {
			return a;
		}
		json_decref(a);
		tt_nap_ms(20);
	}
}

/* How many requests with this method and path prefix the homeserver saw. */
size_t
gw_hs_count(const gw_env *e, const char *method, const char *prefix)
{
	json_t *a = gw_hs_requests(e), *it;
	size_t i, n = 0;

	json_array_foreach(a, i, it)
	{
		const char *m =
		    json_string_value(json_object_get(it, "method"));
		const char *p = json_string_value(json_object_get(it, "path"));
		if (strcmp(m, method) == 0 &&
		    strncmp(p, prefix, strlen(prefix)) == 0) {
			n++;
		}
	}
	json_decref(a);
	return n;
}

/* The number of scheduled events in token's list. */
size_t
gw_list_len(const gw_env *e, const char *token)
{
	gw_resp r = gw_req("GET", e->gw, UNSTABLE, token, NULL);
	size_t n;

	gw_expect(r, 200, NULL);
	n = json_array_size(json_object_get(r.json, "delayed_events"));
	gw_resp_free(&r);
	return n;
}
