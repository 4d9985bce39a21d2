/*
 * Broken request framing at the gateway, end to end (the real timelined
 * with the gateway, the test homeserver): a chunk size of 2^64 - 1 on a
 * scheduling request and on a pass-through upload is answered at once with
 * the gateway's own Matrix error (400 M_UNRECOGNIZED), nothing is
 * scheduled and nothing reaches the homeserver; a chunk larger than the
 * pass-through limit is 413 M_TOO_LARGE at once; a chunked upload larger
 * than the gateway's own body limit but within the pass-through limit
 * still passes whole.
 */
#include "tltest.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_util.h"

#define SEND_PATH "/_matrix/client/v3/rooms/!room:test/send/m.room.message/"

/* Sends req raw to the gateway; the whole answer (up to the connection's
 * end or timeout_ms) into out. */
static void
raw(const gw_env *e, const char *req, size_t len, char *out, size_t cap,
    int timeout_ms)
{
	int fd = tt_tcp_connect(atoi(strrchr(e->gw, ':') + 1));
	size_t got = 0;
	int64_t end = tli_mono_ms() + timeout_ms;

	cr_assert(fd >= 0);
	cr_assert(tt_send_all(fd, req, len));
	while (got < cap - 1) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = end - tli_mono_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int) left) <= 0 ||
		    (n = read(fd, out + got, cap - 1 - got)) <= 0) {
			break;
		}
		got += (size_t) n;
	}
	out[got] = '\0';
	close(fd);
}

static void
refused_at_once(const gw_env *e, const char *head, const char *chunks,
    int status, const char *code)
{
	char req[2048], ans[8192], want[64];
	int64_t t0 = tli_mono_ms();

	snprintf(req, sizeof(req),
	    "%sHost: x\r\nAuthorization: Bearer tok_alice\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n%s",
	    head, chunks);
	raw(e, req, strlen(req), ans, sizeof(ans), 2000);
	snprintf(want, sizeof(want), "HTTP/1.1 %d ", status);
	cr_assert(strncmp(ans, want, strlen(want)) == 0, "answer: %s", ans);
	cr_assert(tli_mono_ms() - t0 < 1000, "answered after %lld ms",
	    (long long) (tli_mono_ms() - t0));
	cr_assert(strstr(ans, code) != NULL, "answer: %s", ans);
	cr_assert(strstr(ans, "Connection: close") != NULL, "%s", ans);
}

Test(framing, broken_chunks_are_refused_at_once_and_change_nothing,
    .timeout = 60)
{
	gw_env e;

	gw_start(&e, "gw-framing", false, "proxy_max_body = 1048576");
	refused_at_once(&e,
	    "PUT " SEND_PATH "f1?org.matrix.msc4140.delay=100 HTTP/1.1\r\n",
	    "ffffffffffffffff\r\n{\"body\":\"x\"}\r\n0\r\n\r\n", 400,
	    "\"errcode\":\"M_UNRECOGNIZED\"");
	refused_at_once(&e, "POST /_matrix/media/v3/upload?seed=1 HTTP/1.1\r\n",
	    "ffffffffffffffff\r\n", 400, "\"errcode\":\"M_UNRECOGNIZED\"");
	/* 2 MiB in one chunk, over the 1 MiB pass-through limit */
	refused_at_once(&e, "POST /_matrix/media/v3/upload?seed=1 HTTP/1.1\r\n",
	    "200000\r\n", 413, "\"errcode\":\"M_TOO_LARGE\"");
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 0, "nothing scheduled");
	cr_assert_eq(gw_hs_count(&e, "PUT", "/_matrix/client/v3/rooms/"), 0,
	    "nothing forwarded");
	cr_assert_eq(gw_hs_count(&e, "POST", "/_matrix/media/"), 0,
	    "no upload forwarded");
	/* the gateway goes on: a well-formed chunked schedule is taken */
	{
		gw_resp r = gw_req_full("PUT", e.gw,
		    SEND_PATH "f2?org.matrix.msc4140.delay=60000", "tok_alice",
		    "{\"body\":\"ok\"}", 13, true);
		gw_expect(r, 200, NULL);
		gw_resp_free(&r);
	}
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 1);
	gw_stop(&e);
}

/* A chunked body over the gateway's own limit (64 KiB) but within the
 * pass-through limit passes whole: the guard's chunk limit is the larger
 * of the two. */
Test(framing, chunked_pass_through_bodies_within_the_limit_pass, .timeout = 60)
{
	gw_env e;
	gw_resp r;
	size_t n = 512 * 1024;
	char *body = malloc(n);

	/* the homeserver checks an upload against its pattern (block k of
	 * 64 KiB starts at byte (seed * 131 + k * 7) % 256: fake_hs.py) */
	for (size_t i = 0; i < n; i++) {
		size_t k = i / 65536, o = (0 * 131 + k * 7) % 256;
		body[i] = (char) ((o + i % 65536) % 256);
	}
	gw_start(&e, "gw-framing-big", false, NULL);
	r = gw_req_full("POST", e.gw, "/_matrix/media/v3/upload?seed=0",
	    "tok_alice", body, n, true);
	gw_expect(r, 200, NULL);
	cr_assert(
	    json_is_true(json_object_get(r.json, "intact")), "%s", r.body);
	cr_assert_eq(json_number_value(json_object_get(r.json, "len")),
	    (double) n, "%s", r.body);
	gw_resp_free(&r);
	free(body);
	gw_stop(&e);
}
