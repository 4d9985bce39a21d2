/*
 * Helpers of the MSC4140 gateway suites (header-only: every test_*.c is
 * its own executable). Each test gets a private directory with the test
 * homeserver (fake_hs.py), the real timelined running the gateway
 * in-process (or timelined plus the standalone tl-msc4140), and an HTTP
 * client (libcurl) that speaks to the gateway and reads the homeserver's
 * record. Every wait is for a condition with a deadline.
 */
#ifndef TL_TESTS_GW_UTIL_H
#define TL_TESTS_GW_UTIL_H

#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testutil.h"

#define UNSTABLE "/_matrix/client/unstable/org.matrix.msc4140/delayed_events"

typedef struct gw_env {
	char *dir;
	char hs[128];
	char gw[128];
	pid_t hs_pid;
	pid_t tl_pid;
	pid_t gw_pid; /* standalone gateway, or 0 */
	bool standalone;
} gw_env;

typedef struct gw_resp {
	long status;
	char *body;
	size_t len;
	char headers[4096];
	json_t *json;
} gw_resp;

static inline int64_t
gw_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void
gw_nap(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static inline char *
gw_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[256];
	size_t n;

	if (f == NULL) {
		return NULL;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
		n--;
	}
	buf[n] = '\0';
	return strdup(buf);
}

static inline pid_t
gw_spawn(const char *logname, const char *dir, char *const argv[])
{
	char logp[600];
	pid_t pid;

	snprintf(logp, sizeof(logp), "%s/%s", dir, logname);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Wait for a ready file written by pid; its content into out. */
static inline void
gw_wait_ready(pid_t pid, const char *path, char *out, size_t cap,
    const char *what, const char *dir)
{
	int64_t deadline = tli_mono_ms() + 20000;
	char *s;

	while ((s = gw_read_file(path)) == NULL) {
		int st;
		cr_assert(waitpid(pid, &st, WNOHANG) != pid,
		    "%s exited before it was ready (status %d); logs in %s",
		    what, st, dir);
		cr_assert(tli_mono_ms() < deadline,
		    "%s not ready within 20 s; logs in %s", what, dir);
		gw_nap(10);
	}
	snprintf(out, cap, "%s", s);
	free(s);
}

static inline void
gw_start_broker(gw_env *e)
{
	char data[600], url[600], conf[600], ready[600], bin[600];

	snprintf(bin, sizeof(bin), "%s/broker/timelined", TL_TEST_BINDIR);
	snprintf(data, sizeof(data), "%s/data", e->dir);
	snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
	snprintf(conf, sizeof(conf), "%s/gw.conf", e->dir);
	snprintf(ready, sizeof(ready), "%s/gw.url", e->dir);
	unlink(ready);
	if (e->standalone) {
		char bready[600], gbin[600], burl[300];
		snprintf(bready, sizeof(bready), "%s/tl.ready", e->dir);
		unlink(bready);
		char *argv[] = {bin, "--data", data, "--listen", url,
		    "--metrics", "off", "--ready-file", bready, NULL};
		e->tl_pid = gw_spawn("timelined.log", e->dir, argv);
		gw_wait_ready(
		    e->tl_pid, bready, burl, sizeof(burl), "timelined", e->dir);
		snprintf(gbin, sizeof(gbin), "%s/broker/msc4140/tl-msc4140",
		    TL_TEST_BINDIR);
		char *gargv[] = {gbin, "-c", conf, "--broker", url, NULL};
		e->gw_pid = gw_spawn("gateway.log", e->dir, gargv);
		gw_wait_ready(e->gw_pid, ready, e->gw, sizeof(e->gw),
		    "tl-msc4140", e->dir);
		return;
	}
	char *argv[] = {bin, "--data", data, "--listen", url, "--metrics",
	    "off", "--msc4140", conf, NULL};
	e->tl_pid = gw_spawn("timelined.log", e->dir, argv);
	gw_wait_ready(e->tl_pid, ready, e->gw, sizeof(e->gw),
	    "timelined with the gateway", e->dir);
}

static inline void
gw_kill(pid_t *pid, int sig)
{
	int st;

	if (*pid > 0) {
		kill(*pid, sig);
		waitpid(*pid, &st, 0);
		*pid = 0;
	}
}

/* Stop (sig) and start again the gateway, on the same data. */
static inline void
gw_restart(gw_env *e, int sig)
{
	if (e->standalone) {
		char ready[600], conf[600], gbin[600], url[600];
		gw_kill(&e->gw_pid, sig);
		snprintf(ready, sizeof(ready), "%s/gw.url", e->dir);
		snprintf(conf, sizeof(conf), "%s/gw.conf", e->dir);
		snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
		snprintf(gbin, sizeof(gbin), "%s/broker/msc4140/tl-msc4140",
		    TL_TEST_BINDIR);
		unlink(ready);
		char *gargv[] = {gbin, "-c", conf, "--broker", url, NULL};
		e->gw_pid = gw_spawn("gateway.log", e->dir, gargv);
		gw_wait_ready(e->gw_pid, ready, e->gw, sizeof(e->gw),
		    "tl-msc4140", e->dir);
		return;
	}
	gw_kill(&e->tl_pid, sig);
	gw_start_broker(e);
}

/* Start the homeserver and the gateway; extra: more gateway settings. */
static inline void
gw_start(gw_env *e, const char *tag, bool standalone, const char *extra)
{
	char script[600], ready[600], conf[600];
	FILE *f;

	memset(e, 0, sizeof(*e));
	e->standalone = standalone;
	e->dir = tt_mkdtemp(tag);
	snprintf(script, sizeof(script), "%s/tests/msc4140/fake_hs.py",
	    TL_TEST_SRCDIR);
	snprintf(ready, sizeof(ready), "%s/hs.url", e->dir);
	char *argv[] = {"python3", script, "--ready", ready, NULL};
	e->hs_pid = gw_spawn("hs.log", e->dir, argv);
	gw_wait_ready(e->hs_pid, ready, e->hs, sizeof(e->hs),
	    "the test homeserver", e->dir);
	snprintf(conf, sizeof(conf), "%s/gw.conf", e->dir);
	f = fopen(conf, "w");
	cr_assert(f != NULL);
	fprintf(f,
	    "listen = 127.0.0.1:0\nhomeserver = %s\nas_token = as_secret\n"
	    "ready_file = %s/gw.url\nretry_for_ms = 20000\n%s\n",
	    e->hs, e->dir, extra ? extra : "");
	fclose(f);
	gw_start_broker(e);
}

/* A sanitizer report in a child's log fails the test (the children's
 * output does not reach ctest). */
static inline void
gw_check_log(const gw_env *e, const char *name)
{
	static const char *bad[] = {"ERROR: AddressSanitizer",
	    "ERROR: LeakSanitizer", "runtime error:", NULL};
	char path[600], *text;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/%s", e->dir, name);
	if ((f = fopen(path, "r")) == NULL) {
		return;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	text = calloc(1, (size_t) n + 1);
	cr_assert(text != NULL);
	n = (long) fread(text, 1, (size_t) n, f);
	fclose(f);
	for (int i = 0; bad[i] != NULL; i++) {
		if (strstr(text, bad[i]) != NULL) {
			fprintf(stderr, "%s\n", text);
			free(text);
			cr_assert_fail("%s in %s", bad[i], name);
		}
	}
	free(text);
}

static inline void
gw_stop(gw_env *e)
{
	gw_kill(&e->gw_pid, SIGTERM);
	gw_kill(&e->tl_pid, SIGTERM);
	gw_kill(&e->hs_pid, SIGKILL);
	if (e->dir != NULL) {
		gw_check_log(e, "timelined.log");
		gw_check_log(e, "gateway.log");
	}
	if (e->dir != NULL) {
		tt_rmtree(e->dir);
		free(e->dir);
		e->dir = NULL;
	}
}

/* ---- HTTP ---- */

static inline size_t
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

static inline size_t
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

static inline size_t
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
static inline gw_resp
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

static inline gw_resp
gw_req(const char *method, const char *base, const char *path,
    const char *token, const char *body)
{
	return gw_req_full(
	    method, base, path, token, body, body ? strlen(body) : 0, false);
}

static inline void
gw_resp_free(gw_resp *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

static inline const char *
gw_str(const gw_resp *r, const char *key)
{
	json_t *v = r->json ? json_object_get(r->json, key) : NULL;
	return json_is_string(v) ? json_string_value(v) : "";
}

/* Assert status and (when errcode != NULL) the Matrix errcode. */
#define gw_expect(r, st, code)                                            \
	do {                                                              \
		cr_assert_eq((r).status, (st), "status %ld, want %d: %s", \
		    (r).status, (st), (r).body ? (r).body : "");          \
		if ((code) != NULL) {                                     \
			cr_assert_str_eq(gw_str(&(r), "errcode"),         \
			    (const char *) (code), "body %s",             \
			    (r).body ? (r).body : "");                    \
		}                                                         \
	} while (0)

/* Schedule a delayed message; returns the delay_id (malloc'd). */
static inline char *
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

static inline gw_resp
gw_manage(const gw_env *e, const char *id, const char *action)
{
	char path[512];

	snprintf(path, sizeof(path), UNSTABLE "/%s/%s", id, action);
	return gw_req("POST", e->gw, path, NULL, NULL);
}

/* The events the homeserver accepted so far (a JSON array, owned). */
static inline json_t *
gw_hs_events(const gw_env *e)
{
	gw_resp r = gw_req("GET", e->hs, "/_test/events", NULL, NULL);
	json_t *a;

	gw_expect(r, 200, NULL);
	a = json_incref(json_object_get(r.json, "events"));
	gw_resp_free(&r);
	return a;
}

static inline json_t *
gw_hs_requests(const gw_env *e)
{
	gw_resp r = gw_req("GET", e->hs, "/_test/requests", NULL, NULL);
	json_t *a;

	gw_expect(r, 200, NULL);
	a = json_incref(json_object_get(r.json, "requests"));
	gw_resp_free(&r);
	return a;
}

/* Wait until the homeserver has at least n events (at most ms). */
static inline json_t *
gw_wait_events(const gw_env *e, size_t n, int ms)
{
	int64_t deadline = tli_mono_ms() + ms;

	for (;;) {
		json_t *a = gw_hs_events(e);
		if (json_array_size(a) >= n || tli_mono_ms() > deadline) {
			return a;
		}
		json_decref(a);
		gw_nap(20);
	}
}

/* How many requests with this method and path prefix the homeserver saw. */
static inline size_t
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
static inline size_t
gw_list_len(const gw_env *e, const char *token)
{
	gw_resp r = gw_req("GET", e->gw, UNSTABLE, token, NULL);
	size_t n;

	gw_expect(r, 200, NULL);
	n = json_array_size(json_object_get(r.json, "delayed_events"));
	gw_resp_free(&r);
	return n;
}

#endif
