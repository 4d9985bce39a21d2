/*
 * The HTTP layer (http/tlhttp.h) refuses requests whose framing is
 * ambiguous or broken, at once and with 400, over raw TCP against a real
 * server on 127.0.0.1:0: two different Content-Length headers (a request
 * smuggling risk behind a proxy that reads the other one) and HTTP/1.1
 * without Host. A normal request on a new connection still works after
 * each.
 */
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

static const tlh_route routes[] = {
    {"GET|POST", "/echo", 1 << 20, 0, NULL, NULL, NULL, on_echo, NULL},
};

static tlh_server *srv;
static int port;

static void
setup(void)
{
	tlh_config cfg = {.listen = "127.0.0.1:0"};
	const char *url;

	cr_assert_eq(tlh_server_alloc(&srv, &cfg), TL_OK);
	cr_assert_eq(tlh_route_add(srv, &routes[0]), TL_OK);
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
