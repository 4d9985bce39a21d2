/*
 * End-to-end, the real broker on a TCP listener against strangers that
 * declare the largest frame the protocol allows and then send little of it:
 * the broker's memory follows the bytes that arrived, not the declared
 * lengths, a first frame longer than a HELLO is refused and the connection
 * closed, a connection that never says HELLO is closed after
 * hello_timeout_ms, a connection over max_sessions_per_ip is closed at
 * accept, and a normal client works throughout.
 */
#include "tltest.h"
#include "raw_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define NCONN 16
#define DECLARED (TLP_MAX_FRAME - 16u)
#define MIB (1024L * 1024L)

static tt_proc P;
static char *dir;
static int port;

static void
prelogin_fini(void)
{
	tt_proc_fini(&P);
	tt_rmtree_free(&dir);
}

TestSuite(prelogin, .fini = prelogin_fini, .timeout = 60);

static void
start_with(const char *hello_timeout, const char *per_ip)
{
	dir = tt_mkdtemp("prelogin");
	port = tt_free_port();
	tt_proc_timelined(&P, dir, "b");
	tt_proc_arg(&P, "--data");
	tt_proc_arg(&P, "%s/data", dir);
	tt_proc_arg(&P, "--listen");
	tt_proc_arg(&P, "tcp://127.0.0.1:%d", port);
	tt_proc_args(&P, "--topic", "t", "--metrics", "off", "--log-level",
	    "info", "--hello-timeout", hello_timeout, "--max-sessions-per-ip",
	    per_ip, NULL);
	tt_proc_start(&P);
}

static void
start(void)
{
	start_with("10000", "256");
}

/* A length prefix declaring a DECLARED-byte frame, then the header and
 * body bytes of it (at most DECLARED). */
static bool
send_big_start(int fd, size_t body)
{
	uint8_t *buf = calloc(1, TLP_LEN_BYTES + body);
	bool ok;

	cr_assert_not_null(buf);
	tli_put_be32(buf, DECLARED);
	buf[4] = TLP_VERSION;
	buf[5] = TLP_OP_CREATE;
	ok = tt_send_all(fd, buf, TLP_LEN_BYTES + body);
	free(buf);
	return ok;
}

/* A normal client can connect and be answered. */
static void
client_works(void)
{
	char url[64];
	rc_client *c;
	tlp_topic t;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	c = rc_open(url, "normal");
	TL_PASS(rc_topic_get(c, "t", &t), "a normal client after the attack");
	rc_close(c);
}

/* Sixteen greeted sessions each declare a 32 MiB frame and send 4 KiB of
 * it: the broker's memory (committed and resident) grows by far less than
 * the 512 MiB declared. */
Test(prelogin, memory_follows_bytes_received)
{
	int fd[NCONN];
	long data0, rss0, data1, rss1;
	tli_buf hello;

	start();
	TL_PASS(rc_hello_frame(&hello, "big"));
	tt_nap_ms(200);
	data0 = (tt_proc_status_kb(P.pid, "VmData") * 1024);
	rss0 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	for (int i = 0; i < NCONN; i++) {
		fd[i] = tt_tcp_open(port, 5);
		cr_assert(tt_send_all(fd[i], hello.data, hello.len));
		cr_assert(send_big_start(fd[i], 4096), "connection %d", i);
	}
	tli_buf_fini(&hello);
	tt_nap_ms(500);
	data1 = (tt_proc_status_kb(P.pid, "VmData") * 1024);
	rss1 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	fprintf(stderr,
	    "prelogin: %d x %u declared, 4 KiB sent: VmData +%ld MiB, "
	    "VmRSS +%ld MiB\n",
	    NCONN, DECLARED, (data1 - data0) / MIB, (rss1 - rss0) / MIB);
	cr_assert_lt(data1 - data0, 64 * MIB,
	    "VmData grew by %ld MiB for %d x 4 KiB received",
	    (data1 - data0) / MIB, NCONN);
	cr_assert_lt(rss1 - rss0, 64 * MIB);
	client_works();
	for (int i = 0; i < NCONN; i++) {
		close(fd[i]);
	}
	tt_proc_stop_clean(&P);
}

/* Before HELLO a frame longer than a HELLO is refused and the connection
 * closed: sixteen strangers sending 8 MiB each of a declared 32 MiB first
 * frame leave the broker's resident memory where it was. */
Test(prelogin, large_first_frame_refused)
{
	int fd[NCONN];
	long rss0, rss1;

	start();
	tt_nap_ms(200);
	rss0 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	for (int i = 0; i < NCONN; i++) {
		fd[i] = tt_tcp_open(port, 5);
		(void) send_big_start(fd[i], 8 * MIB); /* may be cut off */
	}
	tt_nap_ms(500);
	rss1 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	fprintf(stderr,
	    "prelogin: %d x %u declared before HELLO, 8 MiB sent: VmRSS "
	    "+%ld MiB\n",
	    NCONN, DECLARED, (rss1 - rss0) / MIB);
	for (int i = 0; i < NCONN; i++) {
		cr_assert(tt_closed_within(fd[i], 5000),
		    "connection %d still open after a 32 MiB first frame", i);
		close(fd[i]);
	}
	cr_assert_lt(rss1 - rss0, 64 * MIB, "VmRSS grew by %ld MiB",
	    (rss1 - rss0) / MIB);
	client_works();
	cr_assert(tt_proc_log_wait(&P, "first frame too long", 2000));
	tt_proc_stop_clean(&P);
}

/* A connection that never sends HELLO is closed after hello_timeout_ms;
 * one that did stays open past it. */
Test(prelogin, no_hello_closed_after_timeout)
{
	char url[64];
	rc_client *c;
	tlp_topic t;
	int fd;
	int64_t t0;

	start_with("500", "256");
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	c = rc_open(url, "greeted");
	t0 = tli_wall_ms();
	fd = tt_tcp_open(port, 5);
	cr_assert(tt_closed_within(fd, 5000),
	    "a connection without HELLO still open after 5 s");
	cr_assert_geq(tli_wall_ms() - t0, 400, "closed before the deadline");
	close(fd);
	cr_assert(tt_proc_log_wait(&P, "no HELLO within 500 ms", 2000));
	tt_nap_ms(300);
	TL_PASS(rc_topic_get(c, "t", &t), "a greeted session after 800 ms");
	rc_close(c);
	tt_proc_stop_clean(&P);
}

/* With max_sessions_per_ip 4, a fifth connection from 127.0.0.1 is closed
 * at once; once one of the four has gone, a client connects again. */
Test(prelogin, per_ip_limit)
{
	struct pollfd pfd = {.events = POLLIN};
	uint8_t buf[256];
	tli_buf hello;
	bool ok = false;
	int fd[4], extra;

	start_with("10000", "4");
	for (int i = 0; i < 4; i++) {
		fd[i] = tt_tcp_open(port, 5);
	}
	extra = tt_tcp_open(port, 5);
	cr_assert(tt_closed_within(extra, 3000),
	    "a fifth connection from one address still open");
	close(extra);
	cr_assert(tt_proc_log_wait(&P, "max_sessions_per_ip = 4", 2000));
	for (int i = 0; i < 4; i++) {
		cr_assert(
		    !tt_closed_within(fd[i], 0), "connection %d closed", i);
	}
	close(fd[0]);
	/* The broker sees that close when it reads: try until it has. */
	for (int tries = 0; tries < 40 && !ok; tries++) {
		tt_nap_ms(50);
		extra = tt_tcp_open(port, 5);
		if (tt_closed_within(extra, 100)) {
			close(extra);
			continue;
		}
		TL_PASS(rc_hello_frame(&hello, "after"));
		cr_assert(tt_send_all(extra, hello.data, hello.len));
		tli_buf_fini(&hello);
		pfd.fd = extra;
		cr_assert_eq(poll(&pfd, 1, 5000), 1, "no HELLO reply");
		cr_assert_gt(recv(extra, buf, sizeof(buf), 0), 0, "no reply");
		close(extra);
		ok = true;
	}
	cr_assert(ok, "no connection accepted after one of the four closed");
	for (int i = 1; i < 4; i++) {
		close(fd[i]);
	}
	tt_proc_stop_clean(&P);
}
