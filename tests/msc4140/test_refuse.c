/*
 * The HTTP layer (http/tlhttp.h) refuses requests whose framing is
 * ambiguous or broken, at once and with 400, over raw TCP against a real
 * server on 127.0.0.1:0: two different Content-Length headers (a request
 * smuggling risk behind a proxy that reads the other one), Content-Length
 * with Transfer-Encoding, a Transfer-Encoding that does not end in
 * chunked, HTTP/1.1 without Host, and every broken chunk: a size out of
 * range (2^64 - 1 among them, which libmicrohttpd alone waits on for as
 * long as the connection lives), a size that is not hex, a size line that
 * never ends, a chunk not followed by its line end; a chunk larger than
 * any body the server takes is 413 at once. A normal request on a new
 * connection still works after each, and pipelined requests are answered
 * in order up to the broken one. A body that stops coming (a chunk that
 * declares more than is sent) holds the connection only for the body
 * timeout (1 s here), buffered or streamed, while a slow but moving
 * chunked body still gets through.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "tlhttp.h"

static void
on_echo(tlh_req *q, void *arg)
{
	size_t n;
	const char *b = tlh_req_body(q, &n);

	(void) arg;
	tlh_reply(q, 200, "text/plain", n > 0 ? b : "ok", n > 0 ? n : 2, 0);
}

/* A streamed route: the body's length, counted as it is read, in a
 * streamed reply. */
static bool
stream_head(tlh_req *q, void *arg)
{
	(void) arg;
	tlh_req_stream(q);
	return true;
}

static void
on_count(tlh_req *q, void *arg)
{
	char buf[4096], out[32];
	size_t n, total = 0;
	int rv;

	(void) arg;
	while ((rv = tlh_req_read(q, buf, sizeof(buf), &n)) == TL_OK && n > 0) {
		total += n;
	}
	if (rv != TL_OK) {
		tlh_reply(q, 400, "text/plain", "bad", 3, 0);
		return;
	}
	snprintf(out, sizeof(out), "%zu", total);
	tlh_reply_stream(q, 200, "text/plain", TLH_SIZE_UNKNOWN, 0);
	tlh_reply_write(q, out, strlen(out));
	tlh_reply_end(q, true);
}

static const tlh_route routes[] = {
    {"GET|POST", "/echo", 1 << 20, 0, NULL, NULL, NULL, on_echo, NULL},
    {"POST", "/count", 1 << 20, 0, NULL, stream_head, NULL, on_count, NULL},
};

static tlh_server *srv;
static int port;

static void
setup(void)
{
	tlh_config cfg = {.listen = "127.0.0.1:0", .body_timeout_s = 1};
	const char *url;

	cr_assert_eq(tlh_server_alloc(&srv, &cfg), TL_OK);
	cr_assert_eq(tlh_route_add(srv, &routes[0]), TL_OK);
	cr_assert_eq(tlh_route_add(srv, &routes[1]), TL_OK);
	cr_assert_eq(tlh_server_start(srv), TL_OK);
	url = tlh_server_url(srv);
	port = atoi(strrchr(url, ':') + 1);
	cr_assert(port > 0, "%s", url);
}

static void
teardown(void)
{
	tlh_server_free(srv);
	srv = NULL;
}

TestSuite(refuse, .init = setup, .fini = teardown, .timeout = 30);

/* Sends req on a new connection and returns the status of the answer,
 * read within timeout_ms (0: none came). */
static int
status_of(const char *req, int timeout_ms)
{
	char buf[4096] = "";
	size_t len = 0;
	int64_t end = tli_mono_ms() + timeout_ms;
	int fd = tt_tcp_connect(port), st = 0;

	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t) strlen(req));
	/* the status line is enough */
	while (len < sizeof(buf) - 1 && strstr(buf, "\r\n") == NULL) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = end - tli_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int) left) <= 0 ||
		    (n = read(fd, buf + len, sizeof(buf) - 1 - len)) <= 0) {
			break;
		}
		len += (size_t) n;
		buf[len] = '\0';
	}
	buf[len] = '\0';
	close(fd);
	if (sscanf(buf, "HTTP/1.%*d %d", &st) != 1) {
		return 0;
	}
	return st;
}

static void
refused_then_ok(const char *bad)
{
	int64_t t0 = tli_mono_ms();

	cr_assert_eq(
	    status_of(bad, 1000), 400, "no 400 within 1 s for:\n%s", bad);
	cr_assert(tli_mono_ms() - t0 < 1000);
	cr_assert_eq(
	    status_of("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", 5000), 200);
}

Test(refuse, two_different_content_lengths)
{
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Content-Length: 5\r\nContent-Length: 50\r\n\r\n"
	                "hello");
}

Test(refuse, http11_without_host)
{
	refused_then_ok("GET /echo HTTP/1.1\r\n\r\n");
}

Test(refuse, well_formed_requests_still_work)
{
	cr_assert_eq(status_of("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                       "Content-Length: 5\r\nContent-Length: 5\r\n\r\n"
	                       "hello",
	                 5000),
	    200);
	cr_assert_eq(status_of("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                       "Transfer-Encoding: chunked\r\n\r\n"
	                       "5\r\nhello\r\n0\r\n\r\n",
	                 5000),
	    200);
	cr_assert_eq(status_of("GET /echo HTTP/1.0\r\n\r\n", 5000), 200);
}

/* Sends req on a new connection, then parts[] each after pause_ms; the
 * answer read within timeout_ms (0: none), and in *closed_ms how long the
 * server took to close without one (-1: it did not). */
static int
answer_of(const char *req, const char *const *parts, int pause_ms,
    int timeout_ms, int64_t *closed_ms, char *body, size_t cap)
{
	char buf[4096] = "";
	size_t len = 0;
	int64_t t0 = tli_mono_ms(), end = t0 + timeout_ms;
	int fd = tt_tcp_connect(port), st = 0;
	const char *b;

	cr_assert(fd >= 0);
	*closed_ms = -1;
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t) strlen(req));
	for (; parts != NULL && *parts != NULL; parts++) {
		struct timespec ts = {0, pause_ms * 1000000L};
		nanosleep(&ts, NULL);
		cr_assert_eq(write(fd, *parts, strlen(*parts)),
		    (ssize_t) strlen(*parts));
	}
	while (len < sizeof(buf) - 1) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = end - tli_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int) left) <= 0) {
			break;
		}
		if ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) <= 0) {
			if (len == 0) {
				*closed_ms = tli_mono_ms() - t0;
			}
			break;
		}
		len += (size_t) n;
		buf[len] = '\0';
		if ((b = strstr(buf, "\r\n\r\n")) != NULL &&
		    strstr(b + 4, "\r\n0\r\n") != NULL) {
			break; /* a chunked answer's end */
		}
	}
	close(fd);
	if (body != NULL && (b = strstr(buf, "\r\n\r\n")) != NULL) {
		snprintf(body, cap, "%s", b + 4);
	}
	if (sscanf(buf, "HTTP/1.%*d %d", &st) != 1) {
		return 0;
	}
	return st;
}

static void
stalled_body_closes(const char *path)
{
	char req[256];
	int64_t closed;

	snprintf(req, sizeof(req),
	    "POST %s HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n"
	    "fffff\r\nhello",
	    path);
	cr_assert_eq(answer_of(req, NULL, 0, 5000, &closed, NULL, 0), 0,
	    "%s answered a body that never ends", path);
	cr_assert(closed >= 0 && closed < 2500,
	    "%s: the connection was held %lld ms", path, (long long) closed);
	cr_assert_eq(
	    status_of("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", 5000), 200);
}

Test(refuse, a_chunk_larger_than_will_come_holds_only_the_body_timeout)
{
	stalled_body_closes("/echo");
	stalled_body_closes("/count");
}

/* A chunked request to path whose body is chunks: refused with want at
 * once (within 1 s), and the server goes on. */
static void
chunks_refused(const char *path, const char *chunks, int want)
{
	char req[8192];
	int64_t t0 = tli_mono_ms();

	snprintf(req, sizeof(req),
	    "POST %s HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n%s",
	    path, chunks);
	cr_assert_eq(status_of(req, 1000), want, "no %d within 1 s for %s:\n%s",
	    want, path, chunks);
	cr_assert(tli_mono_ms() - t0 < 1000);
	cr_assert_eq(
	    status_of("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", 5000), 200);
}

Test(refuse, chunk_sizes_out_of_range_or_malformed_are_refused_at_once)
{
	static const char *const bad[] = {"ffffffffffffffff\r\n", /* 2^64 - 1 */
	    "ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
	    "8000000000000000\r\n",       /* 2^63 */
	    "10000000000000000\r\n",      /* 17 digits */
	    "FFFFFFFFFFFFFFFF;ext=1\r\n", /* with an extension */
	    "zz\r\nhello\r\n0\r\n\r\n",   /* not hex */
	    "-5\r\nhello\r\n0\r\n\r\n",   /* signed */
	    "\r\nhello\r\n0\r\n\r\n",     /* no size */
	    "5x\r\nhello\r\n0\r\n\r\n",   /* junk after it */
	    "5\r\nhelloXY0\r\n\r\n",      /* no line end after data */
	    NULL};
	char longline[6000];

	for (const char *const *b = bad; *b != NULL; b++) {
		chunks_refused("/echo", *b, 400);
		chunks_refused("/count", *b, 400);
	}
	/* a size line that never ends: refused once it is too long to be
	 * one, without waiting for its end */
	memset(longline, 0, sizeof(longline));
	memcpy(longline, "5;", 2);
	memset(longline + 2, 'a', 5000);
	chunks_refused("/echo", longline, 400);
	/* leading zeros are not digits that count */
	cr_assert_eq(status_of("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                       "Transfer-Encoding: chunked\r\n\r\n"
	                       "00000000000000000005\r\nhello\r\n0\r\n\r\n",
	                 5000),
	    200);
}

Test(refuse, a_chunk_larger_than_any_body_is_413_at_once)
{
	/* the routes take 1 MiB; 2 MiB in one chunk cannot pass */
	chunks_refused("/echo", "200000\r\n", 413);
	chunks_refused("/count", "200000\r\nhello", 413);
}

Test(refuse, ambiguous_transfer_encodings)
{
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Content-Length: 5\r\n"
	                "Transfer-Encoding: chunked\r\n\r\n"
	                "5\r\nhello\r\n0\r\n\r\n");
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Transfer-Encoding: gzip\r\n\r\nhello");
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Transfer-Encoding: chunked, gzip\r\n\r\nhello");
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Content-Length: 5x\r\n\r\nhello");
	refused_then_ok("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                "Content-Length: 5\r\n"
	                " 50\r\n\r\nhello");
}

/* Reads from fd until the connection ends (or timeout_ms): the statuses
 * of the answers into st[] (at most max); their number. */
static int
statuses(int fd, int *st, int max, int timeout_ms)
{
	static char buf[65536];
	size_t len = 0;
	int n = 0;
	int64_t end = tli_mono_ms() + timeout_ms;
	const char *p;

	while (len < sizeof(buf) - 1) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int64_t left = end - tli_mono_ms();
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, (int) left) <= 0 ||
		    (r = read(fd, buf + len, sizeof(buf) - 1 - len)) <= 0) {
			break;
		}
		len += (size_t) r;
	}
	buf[len] = '\0';
	for (p = buf; (p = strstr(p, "HTTP/1.1 ")) != NULL && n < max; p += 9) {
		st[n++] = atoi(p + 9);
	}
	return n;
}

Test(refuse, pipelined_requests_are_answered_up_to_the_broken_one)
{
	static const char two[] =
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
	    "hello"
	    "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n0\r\n\r\n"
	    "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	static const char bad[] =
	    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
	    "hello"
	    "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n"
	    "ffffffffffffffff\r\n";
	int st[4] = {0}, fd, n;

	fd = tt_tcp_connect(port);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, two, strlen(two)), (ssize_t) strlen(two));
	n = statuses(fd, st, 4, 5000);
	close(fd);
	cr_assert_eq(n, 3, "answers: %d", n);
	cr_assert(st[0] == 200 && st[1] == 200 && st[2] == 200, "%d %d %d",
	    st[0], st[1], st[2]);

	/* the broken second request: the first may be answered (the
	 * guard's 400 does not wait for it); the 400 comes at once and the
	 * connection ends */
	fd = tt_tcp_connect(port);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, bad, strlen(bad)), (ssize_t) strlen(bad));
	memset(st, 0, sizeof(st));
	n = statuses(fd, st, 4, 2000);
	close(fd);
	cr_assert(n >= 1, "no answer");
	cr_assert_eq(st[n - 1], 400, "last answer %d of %d", st[n - 1], n);
}

/* Big bodies pass the guard whole, both ways, with a length and chunked. */
Test(refuse, large_bodies_pass_the_guard_intact)
{
	size_t n = 900 * 1024;
	char *body = malloc(n), *req = malloc(n + 256),
	     *back = malloc(n + 4096);
	size_t hl, got = 0;
	int fd;
	int64_t end = tli_mono_ms() + 10000;
	const char *p;

	for (size_t i = 0; i < n; i++) {
		body[i] = (char) ('a' + (i * 7 + i / 1000) % 26);
	}
	hl = (size_t) snprintf(req, 256,
	    "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "Content-Length: %zu\r\n\r\n",
	    n);
	memcpy(req + hl, body, n);
	fd = tt_tcp_connect(port);
	cr_assert(fd >= 0);
	tt_send_all(fd, req, hl + n);
	while (got < n + 4096 && tli_mono_ms() < end) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t r;
		if (poll(&pf, 1, 1000) <= 0 ||
		    (r = read(fd, back + got, n + 4096 - got)) <= 0) {
			break;
		}
		got += (size_t) r;
	}
	close(fd);
	cr_assert(got > n, "got %zu bytes", got);
	p = memmem(back, got, "\r\n\r\n", 4);
	cr_assert(p != NULL);
	cr_assert_eq((size_t) (back + got - (p + 4)), n);
	cr_assert(memcmp(p + 4, body, n) == 0, "the body came back changed");
	free(body);
	free(req);
	free(back);
}

Test(refuse, slow_chunked_bodies_still_pass)
{
	static const char *const parts[] = {
	    "5\r\nhello\r\n", "6\r\n world\r\n", "0\r\n\r\n", NULL};
	char body[128] = "";
	int64_t closed;

	cr_assert_eq(answer_of("POST /count HTTP/1.1\r\nHost: x\r\n"
	                       "Connection: close\r\n"
	                       "Transfer-Encoding: chunked\r\n\r\n",
	                 parts, 400, 5000, &closed, body, sizeof(body)),
	    200);
	cr_assert(strstr(body, "\r\n11\r\n") != NULL, "%s", body);
	cr_assert_eq(answer_of("POST /echo HTTP/1.1\r\nHost: x\r\n"
	                       "Connection: close\r\n"
	                       "Transfer-Encoding: chunked\r\n\r\n",
	                 parts, 400, 5000, &closed, body, sizeof(body)),
	    200);
	cr_assert(strstr(body, "hello world") != NULL, "%s", body);
}
