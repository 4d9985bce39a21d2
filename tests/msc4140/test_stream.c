/*
 * Pass-through bodies stream through the gateway (embedded in timelined)
 * and are never held whole: eight 90 MiB uploads at once and a 200 MiB
 * /sync answer cross it while the process's peak resident memory grows by
 * far less than the bodies, and every byte arrives intact (the test
 * homeserver checks each upload against a known pattern as it reads it;
 * the test checks the answer the same way). Under the sanitizers the
 * sizes are smaller, the bound stays well under one body. A homeserver
 * that fails is told apart: 502 before its answer began, a connection cut
 * short after; HEAD passes the status and length alone. proxy_max_body
 * still counts, as the body streams. After each, timelined stops at once,
 * with status 0: no transfer is left holding the gateway.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define UPLOAD_MB 24
#define ANSWER_MB 64
#define BOUND_MB 48
#else
#define UPLOAD_MB 90
#define ANSWER_MB 200
#define BOUND_MB 64
#endif
#define UPLOADS 8
#define MIB (1024 * 1024)
#define BLOCK 65536 /* as fake_hs.py */

/* Byte p of the pattern stream of seed (fake_hs.py: pattern). */
static unsigned char
pattern_at(unsigned seed, uint64_t p)
{
	unsigned o = (seed * 131 + (unsigned) (p / BLOCK) * 7) % 256;

	return (unsigned char) ((o + p % BLOCK) % 256);
}

/* Resets VmHWM to the current RSS (false where the kernel cannot). */
static bool
peak_reset(pid_t pid)
{
	char path[64];
	FILE *f;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int) pid);
	if ((f = fopen(path, "w")) == NULL) {
		return false;
	}
	ok = fputs("5", f) >= 0;
	return fclose(f) == 0 && ok;
}

typedef struct xfer {
	const char *base;
	unsigned seed;
	uint64_t size, pos; /* bytes sent or received */
	bool chunked;
	uint64_t stop_at; /* > 0: the client goes away after this many */
	bool intact;      /* every byte received matched */
	CURLcode cc;
	long status;
	char reply[512];
	size_t rlen;
} xfer;

static size_t
up_read(char *out, size_t size, size_t n, void *arg)
{
	xfer *x = arg;
	size_t k = 0;

	if (x->stop_at > 0 && x->pos >= x->stop_at) {
		return CURL_READFUNC_ABORT;
	}
	while (k < size * n && x->pos < x->size) {
		out[k++] = (char) pattern_at(x->seed, x->pos++);
	}
	return k;
}

static size_t
up_reply(char *p, size_t size, size_t n, void *arg)
{
	xfer *x = arg;
	size_t k = size * n;

	if (x->rlen + k < sizeof(x->reply)) {
		memcpy(x->reply + x->rlen, p, k);
		x->rlen += k;
		x->reply[x->rlen] = '\0';
	}
	return size * n;
}

static size_t
down_check(char *p, size_t size, size_t n, void *arg)
{
	xfer *x = arg;

	if (x->stop_at > 0 && x->pos >= x->stop_at) {
		return 0; /* gone */
	}
	for (size_t i = 0; i < size * n; i++) {
		if ((unsigned char) p[i] != pattern_at(x->seed, x->pos++)) {
			x->intact = false;
		}
	}
	return size * n;
}

/* A client that neither holds nor hurries: generous time, no total
 * timeout on slow machines, but not forever. */
static void
xfer_run(CURL *c, xfer *x)
{
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	x->cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &x->status);
}

/* GET a /sync answer of down->size bytes (the homeserver's pattern seed)
 * through the gateway at gw, checking it as it streams. */
static void
download(xfer *down, const char *gw, unsigned seed)
{
	char url[256];
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "%s/_matrix/client/v3/sync?big=%llu&seed=%u",
	    gw, (unsigned long long) down->size, seed);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, down_check);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, down);
	xfer_run(c, down);
	curl_easy_cleanup(c);
}

/* Asserted on the test's own thread (Criterion's asserts are not for the
 * uploads' threads). */
#define xfer_expect(x, st)                                                  \
	do {                                                                \
		cr_assert((x).cc == CURLE_OK, "seed %u: %s", (x).seed,      \
		    curl_easy_strerror((x).cc));                            \
		cr_assert_eq((x).status, (st), "seed %u: %ld %s", (x).seed, \
		    (x).status, (x).reply);                                 \
	} while (0)

static void *
upload(void *arg)
{
	xfer *x = arg;
	char url[256];
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "%s/_matrix/media/v3/upload?seed=%u",
	    x->base, x->seed);
	h = curl_slist_append(h, "Content-Type: application/octet-stream");
	if (x->chunked) {
		h = curl_slist_append(h, "Transfer-Encoding: chunked");
	} else {
		curl_easy_setopt(
		    c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) x->size);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, up_read);
	curl_easy_setopt(c, CURLOPT_READDATA, x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, up_reply);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	xfer_run(c, x);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return NULL;
}

Test(stream, big_bodies_pass_without_being_held)
{
	gw_env e;
	pthread_t t[UPLOADS];
	xfer up[UPLOADS], down = {0};
	long base_kb, peak_kb;

	gw_start(&e, "gw-stream", false, NULL);
	gw_req_expect(
	    "GET", e.gw, "/_matrix/client/versions", NULL, NULL, 200, NULL);
	base_kb = tt_proc_status_kb(e.tl.pid, "VmRSS");
	peak_reset(e.tl.pid);

	/* uploads: seven with a Content-Length, one chunked */
	for (unsigned i = 0; i < UPLOADS; i++) {
		up[i] = (xfer){.base = e.gw,
		    .seed = i + 1,
		    .size = (uint64_t) UPLOAD_MB * MIB,
		    .chunked = i == UPLOADS - 1};
		cr_assert_eq(pthread_create(&t[i], NULL, upload, &up[i]), 0);
	}
	for (unsigned i = 0; i < UPLOADS; i++) {
		json_t *j;
		pthread_join(t[i], NULL);
		xfer_expect(up[i], 200);
		j = json_loads(up[i].reply, 0, NULL);
		cr_assert(json_is_true(json_object_get(j, "intact")),
		    "upload %u arrived changed: %s", i, up[i].reply);
		cr_assert_eq(json_integer_value(json_object_get(j, "len")),
		    (json_int_t) up[i].size, "%s", up[i].reply);
		json_decref(j);
	}
	peak_kb = tt_proc_status_kb(e.tl.pid, "VmHWM");
	fprintf(stderr,
	    "stream: %d uploads of %d MiB: RSS %ld KiB before, peak %ld KiB "
	    "(+%ld KiB)\n",
	    UPLOADS, UPLOAD_MB, base_kb, peak_kb, peak_kb - base_kb);
	cr_assert(peak_kb - base_kb < BOUND_MB * 1024,
	    "the gateway grew by %ld KiB for %d uploads of %d MiB",
	    peak_kb - base_kb, UPLOADS, UPLOAD_MB);

	/* a long answer */
	base_kb = tt_proc_status_kb(e.tl.pid, "VmRSS");
	if (!peak_reset(e.tl.pid)) {
		base_kb = peak_kb; /* the peak so far counts from here */
	}
	down = (xfer){
	    .seed = 99, .size = (uint64_t) ANSWER_MB * MIB, .intact = true};
	download(&down, e.gw, 99);
	xfer_expect(down, 200);
	cr_assert_eq(down.pos, down.size, "%llu of %llu bytes",
	    (unsigned long long) down.pos, (unsigned long long) down.size);
	cr_assert(down.intact, "the answer arrived changed");
	peak_kb = tt_proc_status_kb(e.tl.pid, "VmHWM");
	fprintf(stderr,
	    "stream: a %d MiB answer: RSS %ld KiB before, peak %ld KiB "
	    "(+%ld KiB)\n",
	    ANSWER_MB, base_kb, peak_kb, peak_kb - base_kb);
	cr_assert(peak_kb - base_kb < BOUND_MB * 1024,
	    "the gateway grew by %ld KiB for a %d MiB answer",
	    peak_kb - base_kb, ANSWER_MB);
	tt_proc_stop_clean(&e.tl); /* no transfer holds the stop */
	gw_stop(&e);
}

Test(stream, homeserver_failures)
{
	gw_env e;
	xfer down = {.seed = 5, .size = 8 * MIB, .intact = true};
	char url[256];
	curl_off_t hlen = -1;
	CURLcode cc;
	CURL *c;
	gw_resp r;

	gw_start(&e, "gw-stream-fail", false, NULL);
	/* the answer breaks off after 1 MiB: so does the client's */
	snprintf(url, sizeof(url),
	    "%s/_matrix/client/v3/sync?big=%llu&seed=5&cut=%d", e.gw,
	    (unsigned long long) down.size, MIB);
	c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, down_check);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &down);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &down.status);
	curl_easy_cleanup(c);
	cr_assert_neq(
	    cc, CURLE_OK, "a cut answer arrived whole (%ld)", down.status);
	cr_assert(cc != CURLE_OPERATION_TIMEDOUT, "the cut was not passed on");
	cr_assert_eq(down.status, 200);
	cr_assert(down.pos <= (uint64_t) MIB && down.intact);

	/* HEAD: the homeserver's status and length, no body */
	c = curl_easy_init();
	snprintf(url, sizeof(url), "%s/_matrix/client/v3/nothing", e.gw);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	cc = curl_easy_perform(c);
	cr_assert_eq(cc, CURLE_OK, "HEAD: %s", curl_easy_strerror(cc));
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &down.status);
	cr_assert_eq(down.status, 404);
	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &hlen);
	cr_assert(hlen > 0, "HEAD: length %lld", (long long) hlen);
	curl_easy_cleanup(c);

	/* no homeserver: 502, with or without a body */
	tt_proc_kill(&e.hs_proc);
	r = gw_req("GET", e.gw, "/_matrix/client/v3/sync", "tok_alice", NULL);
	gw_expect(r, 502, "M_UNKNOWN");
	gw_resp_free(&r);
	r = gw_req_full("POST", e.gw, "/_matrix/media/v3/upload", "tok_alice",
	    "some bytes", 10, false);
	gw_expect(r, 502, "M_UNKNOWN");
	gw_resp_free(&r);
	r = gw_req_full("POST", e.gw, "/_matrix/media/v3/upload", "tok_alice",
	    "some bytes", 10, true);
	gw_expect(r, 502, "M_UNKNOWN");
	gw_resp_free(&r);
	tt_proc_stop_clean(&e.tl); /* no transfer holds the stop */
	gw_stop(&e);
}

Test(stream, the_body_limit_counts_as_it_streams)
{
	gw_env e;
	/* chunked: no length tells in advance (a Content-Length over the
	 * limit is refused with the headers, as before) */
	xfer up = {.seed = 20, .size = 2 * MIB, .chunked = true};
	json_t *rec;
	gw_resp r;

	gw_start(&e, "gw-stream-limit", false, "proxy_max_body = 1048576");
	up.base = e.gw;
	upload(&up);
	xfer_expect(up, 413);
	cr_assert(strstr(up.reply, "M_TOO_LARGE") != NULL, "%s", up.reply);
	/* nothing over the limit reached the homeserver whole */
	r = gw_req("GET", e.hs, "/_test/uploads", NULL, NULL);
	rec = json_object_get(r.json, "uploads");
	for (size_t i = 0; i < json_array_size(rec); i++) {
		json_t *u = json_array_get(rec, i);
		cr_assert(json_number_value(json_object_get(u, "len")) <=
		        (double) MIB,
		    "the homeserver got %.0f bytes",
		    json_number_value(json_object_get(u, "len")));
	}
	gw_resp_free(&r);
	tt_proc_stop_clean(&e.tl); /* no transfer holds the stop */
	gw_stop(&e);
}

/* Clients that go away in the middle of a body or of an answer: the
 * gateway lets go of both transfers, serves the next request, and stops
 * cleanly (gw_stop fails on a sanitizer report or a stop that hangs). */
Test(stream, clients_that_go_away)
{
	gw_env e;
	xfer up = {.seed = 30, .size = 64 * MIB, .stop_at = 2 * MIB};
	xfer down = {.seed = 31, .size = 64 * MIB, .stop_at = 2 * MIB};

	gw_start(&e, "gw-stream-gone", false, NULL);
	up.base = e.gw;
	upload(&up);
	cr_assert_eq(
	    up.cc, CURLE_ABORTED_BY_CALLBACK, "%s", curl_easy_strerror(up.cc));
	download(&down, e.gw, 31);
	cr_assert_eq(
	    down.cc, CURLE_WRITE_ERROR, "%s", curl_easy_strerror(down.cc));
	gw_req_expect(
	    "GET", e.gw, "/_matrix/client/versions", NULL, NULL, 200, NULL);
	tt_proc_stop_clean(&e.tl); /* no transfer holds the stop */
	gw_stop(&e);
}
