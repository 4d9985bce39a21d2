/*
 * End-to-end, the real broker's bounds on what clients send before their
 * frames are handled: max_input_bytes bounds the memory of the frames being
 * read or waiting for the worker across all sessions (a session over it
 * stops reading and goes on once frames are handled: nothing is lost);
 * max_unauth_sessions refuses connections at accept while that many
 * sessions have no accepted HELLO; max_hello_bytes holds for every frame
 * until the HELLO is accepted, also for one sent right behind a HELLO that
 * is refused, while a frame sent right behind an accepted HELLO is read.
 */
#include "tltest.h"
#include "raw_client.h"
#include "sha256.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MIB (1024L * 1024L)
/* A declared frame length (header and body) just under the frame limit. */
#define BIG (TLP_MAX_FRAME - 16u)

static tt_proc P;
static char *dir;
static int port, mport;

static void
input_fini(void)
{
	tt_proc_fini(&P);
	tt_rmtree_free(&dir);
}

TestSuite(input, .fini = input_fini, .timeout = 120);

#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif

/* In the sanitizer build the broker keeps freed memory in AddressSanitizer's
 * quarantine (256 MiB), where every buffer a growing frame left behind
 * would still count in its VmRSS: turn that off so that the memory figures
 * mean the same in both builds. */
static void
no_quarantine(void)
{
#ifdef __SANITIZE_ADDRESS__
	const char *was = getenv("ASAN_OPTIONS");
	char opts[1024];

	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0",
	    was != NULL ? was : "", was != NULL && was[0] ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
#endif
}

/* The broker on TCP with metrics, plus the given flags (up to NULL). */
static void
start_args(const char *first, ...)
{
	va_list ap;

	if (dir == NULL) {
		dir = tt_mkdtemp("input");
	}
	port = tt_free_port();
	mport = tt_free_port();
	no_quarantine();
	tt_proc_timelined(&P, dir, "b");
	tt_proc_arg(&P, "--data");
	tt_proc_arg(&P, "%s/data", dir);
	tt_proc_arg(&P, "--listen");
	tt_proc_arg(&P, "tcp://127.0.0.1:%d", port);
	tt_proc_arg(&P, "--metrics");
	tt_proc_arg(&P, "127.0.0.1:%d", mport);
	tt_proc_args(&P, "--topic", "t", "--log-level", "info", NULL);
	va_start(ap, first);
	for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
		tt_proc_arg(&P, "%s", a);
	}
	va_end(ap);
	tt_proc_start(&P);
}

/* The value of the sample `name` (with its labels) in /metrics, or -1. */
static long long
metric(const char *name)
{
	int status = 0;
	/* generous: a loaded sanitizer build serves it slowly */
	char *text = rc_http_get(mport, "/metrics", 20000, &status);
	size_t n = strlen(name);
	long long v = -1;

	cr_assert_not_null(text, "no /metrics within 20 s");
	for (char *p = text; (p = strstr(p, name)) != NULL; p += n) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ') {
			v = strtoll(p + n + 1, NULL, 10);
			break;
		}
	}
	free(text);
	return v;
}

static const uint8_t zeros[1 << 20];

/* n zero bytes. */
static bool
send_zeros(int fd, size_t n)
{
	while (n > 0) {
		size_t k = n < sizeof(zeros) ? n : sizeof(zeros);

		if (!tt_send_all(fd, zeros, k)) {
			return false;
		}
		n -= k;
	}
	return true;
}

/* The length prefix and header of a CREATE frame declaring len bytes
 * (header included) with request id reqid; its body is zeros (it does not
 * decode: the broker answers TL_EPROTO and the session goes on). */
static bool
send_big_head(int fd, uint32_t len, uint32_t reqid)
{
	uint8_t h[TLP_LEN_BYTES + TLP_HDR_LEN] = {0};

	tli_put_be32(h, len);
	h[4] = TLP_VERSION;
	h[5] = TLP_OP_CREATE;
	tli_put_be32(h + 8, reqid);
	return tt_send_all(fd, h, sizeof(h));
}

/* The next frame on fd: its header and the error code of a reply (TL_OK
 * for a success). False when none came. */
static bool
recv_reply(int fd, tlp_hdr *h, int *err)
{
	uint8_t len[TLP_LEN_BYTES], *buf;
	uint32_t n = 0;
	tlp_r r;
	tlp_str detail;
	size_t nf;
	bool ok;

	if (!tt_recv_all(fd, len, sizeof(len)) ||
	    tlp_frame_len(len, &n) != TL_OK) {
		return false;
	}
	cr_assert_not_null(buf = malloc(n));
	ok = tt_recv_all(fd, buf, n) && tlp_hdr_decode(h, buf, n) == TL_OK;
	*err = -1;
	if (ok) {
		tlp_r_init(&r, buf + TLP_HDR_LEN, n - TLP_HDR_LEN);
		ok = tlp_dec_reply_head(&r, err, &detail, &nf) == TL_OK;
	}
	free(buf);
	return ok;
}

/* A connection that has said HELLO (and read the reply). */
static int
open_greeted(const char *name)
{
	int fd = tt_tcp_open(port, 30), err;
	tli_buf hello;
	tlp_hdr h;

	TL_PASS(rc_hello_frame(&hello, name));
	cr_assert(tt_send_all(fd, hello.data, hello.len));
	tli_buf_fini(&hello);
	cr_assert(recv_reply(fd, &h, &err), "no HELLO reply");
	TL_PASS(err, "HELLO");
	return fd;
}

/* ---- max_input_bytes ---- */

#define NBIG 16

typedef struct big_conn {
	pthread_t th;
	int fd;
	uint32_t reqid;
	_Atomic bool most_sent; /* all but the last byte left the client */
	_Atomic int answered;   /* 1: the reply came; -1: something failed */
	char why[96];
} big_conn;

static pthread_mutex_t go_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static bool go;

/* One client: a BIG frame but its last byte, then (once the test says go)
 * the last byte, then its reply. */
static void *
big_main(void *arg)
{
	big_conn *c = arg;
	tlp_hdr h;
	int err;

	if (!send_big_head(c->fd, BIG, c->reqid) ||
	    !send_zeros(c->fd, BIG - TLP_HDR_LEN - 1)) {
		snprintf(c->why, sizeof(c->why), "send: %s", strerror(errno));
		goto fail;
	}
	atomic_store(&c->most_sent, true);
	pthread_mutex_lock(&go_mtx);
	while (!go) {
		pthread_cond_wait(&go_cv, &go_mtx);
	}
	pthread_mutex_unlock(&go_mtx);
	if (!send_zeros(c->fd, 1) || !recv_reply(c->fd, &h, &err)) {
		snprintf(
		    c->why, sizeof(c->why), "no reply: %s", strerror(errno));
		goto fail;
	}
	if (h.reqid != c->reqid || h.op != TLP_OP_CREATE || err != TL_EPROTO) {
		snprintf(c->why, sizeof(c->why),
		    "reply to %u op %u (%s), expected %u CREATE TL_EPROTO",
		    h.reqid, h.op, tl_errname(err), c->reqid);
		goto fail;
	}
	atomic_store(&c->answered, 1);
	return NULL;
fail:
	atomic_store(&c->answered, -1);
	return NULL;
}

static int
count_most_sent(big_conn *c)
{
	int n = 0;

	for (int i = 0; i < NBIG; i++) {
		n += atomic_load(&c[i].most_sent);
	}
	return n;
}

/* Wait until the broker reads no more: a session has stopped, and the
 * input memory and the clients' progress stayed unchanged for a second (at
 * most 30 s). */
static void
wait_still(big_conn *c)
{
	long long last = -1, now;
	int lastn = -1, n, same = 0;
	int64_t deadline = tli_mono_ms() + 30000;

	while (same < 5 && tli_mono_ms() < deadline) {
		tt_nap_ms(200);
		now = metric("timeline_input_bytes");
		n = count_most_sent(c);
		same = now == last && n == lastn &&
		        metric("timeline_input_stalls_total") > 0
		    ? same + 1
		    : 0;
		last = now;
		lastn = n;
	}
	cr_assert_eq(same, 5, "the broker's input still moves after 30 s");
}

/* With max_input_bytes 64 MiB, sixteen greeted sessions each send all but
 * the last byte of a 32 MiB frame: the broker reads until its buffers hold
 * 64 MiB (one session may finish its frame over it), then stops reading
 * (the other clients' sends block), so its memory stays near 64 MiB instead
 * of growing by 512. Once the clients finish their frames, all sixteen are
 * answered. */
Test(input, backpressure_bounds_memory)
{
	static big_conn c[NBIG];
	long rss0, hwm0, rss1, hwm1, hwm2;
	long long held, stalls;
	int most;

	start_args("--max-input-bytes", "67108864", NULL);
	for (int i = 0; i < NBIG; i++) {
		c[i].fd = open_greeted("big");
		c[i].reqid = 100 + (uint32_t) i;
	}
	tt_nap_ms(200);
	rss0 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	hwm0 = (tt_proc_status_kb(P.pid, "VmHWM") * 1024);
	go = false;
	for (int i = 0; i < NBIG; i++) {
		cr_assert_eq(
		    pthread_create(&c[i].th, NULL, big_main, &c[i]), 0);
	}
	wait_still(c);
	most = count_most_sent(c);
	held = metric("timeline_input_bytes");
	stalls = metric("timeline_input_stalls_total");
	rss1 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	hwm1 = (tt_proc_status_kb(P.pid, "VmHWM") * 1024);
	fprintf(stderr,
	    "input: %d x 32 MiB frames, max_input_bytes 64 MiB: %d clients "
	    "sent all but the last byte, %lld stalls, input memory %lld MiB; "
	    "VmRSS %ld MiB before, %ld MiB then (peak %ld, then %ld)\n",
	    NBIG, most, stalls, held / MIB, rss0 / MIB, rss1 / MIB, hwm0 / MIB,
	    hwm1 / MIB);
	cr_assert_lt(
	    most, NBIG, "every client sent its 32 MiB: no back-pressure");
	cr_assert_gt(stalls, 0);
	cr_assert_leq(
	    held, 64 * MIB + BIG, "input memory %lld MiB", held / MIB);
	cr_assert_lt(rss1 - rss0, 128 * MIB, "VmRSS grew by %ld MiB",
	    (rss1 - rss0) / MIB);
	pthread_mutex_lock(&go_mtx);
	go = true;
	pthread_cond_broadcast(&go_cv);
	pthread_mutex_unlock(&go_mtx);
	for (int i = 0; i < NBIG; i++) {
		pthread_join(c[i].th, NULL);
		cr_assert_eq(atomic_load(&c[i].answered), 1, "client %d: %s", i,
		    c[i].why);
		close(c[i].fd);
	}
	hwm2 = (tt_proc_status_kb(P.pid, "VmHWM") * 1024);
	fprintf(stderr,
	    "input: all %d answered; peak VmRSS %ld MiB (%ld MiB over the "
	    "start)\n",
	    NBIG, hwm2 / MIB, (hwm2 - rss0) / MIB);
	cr_assert_lt(hwm2 - rss0, 160 * MIB, "the peak grew by %ld MiB",
	    (hwm2 - rss0) / MIB);
	for (int64_t end = tli_mono_ms() + 5000;
	     metric("timeline_input_bytes") != 0 && tli_mono_ms() < end;) {
		tt_nap_ms(20);
	}
	cr_assert_eq(metric("timeline_input_bytes"), 0, "input memory kept");
	tt_proc_check_log(&P);
	tt_proc_stop_clean(&P);
}

/* ---- max_unauth_sessions ---- */

/* With max_unauth_sessions 4, a fifth connection while four have not said
 * HELLO is closed at accept (logged, counted); once one of the four has
 * said HELLO, a new connection is accepted. */
Test(input, unauth_limit)
{
	int fd[4], extra, err;
	tli_buf hello;
	tlp_hdr h;

	start_args("--max-unauth-sessions", "4", NULL);
	for (int i = 0; i < 4; i++) {
		fd[i] = tt_tcp_open(port, 30);
	}
	extra = tt_tcp_open(port, 30);
	cr_assert(tt_closed_within(extra, 3000),
	    "a fifth connection without HELLO still open");
	close(extra);
	cr_assert(tt_proc_log_wait(&P, "max_unauth_sessions = 4", 2000));
	cr_assert_eq(
	    metric("timeline_sessions_refused_total{reason=\"unauth\"}"), 1);
	cr_assert_eq(metric("timeline_sessions_refused_total{reason=\""
	                    "max_sessions_per_ip\"}"),
	    0);
	for (int i = 0; i < 4; i++) {
		cr_assert(
		    !tt_closed_within(fd[i], 0), "connection %d closed", i);
	}
	TL_PASS(rc_hello_frame(&hello, "late"));
	cr_assert(tt_send_all(fd[0], hello.data, hello.len));
	tli_buf_fini(&hello);
	cr_assert(recv_reply(fd[0], &h, &err), "no HELLO reply");
	TL_PASS(err, "HELLO");
	extra = open_greeted("after");
	close(extra);
	for (int i = 0; i < 4; i++) {
		close(fd[i]);
	}
	tt_proc_stop_clean(&P);
}

/* ---- max_hello_bytes ---- */

/* auth = on with one principal (token "tok"). */
static void
start_auth(void)
{
	char path[800], text[256];

	dir = tt_mkdtemp("input");
	snprintf(path, sizeof(path), "%s/creds", dir);
	{
		uint8_t d[TLP_SHA256_LEN];
		char hex[TLP_SHA256_HEX + 1];

		tlp_sha256("tok", 3, d);
		tlp_sha256_hex(d, hex);
		snprintf(text, sizeof(text),
		    "[principal p]\ntoken_sha256 = %s\nproduce = *\n", hex);
	}
	tt_write_file(path, text);
	start_args("--auth", "on", "--credentials", path, NULL);
}

/* A HELLO frame with a token (request id 1). */
static void
hello_with(tli_buf *b, const char *token)
{
	tlp_w w;
	tlp_hello m = {.proto = TLP_VERSION,
	    .name = TLP_STR("x"),
	    .client_ms = tli_wall_ms(),
	    .token = TLP_STR(token)};

	tli_buf_init(b);
	tlp_frame_begin(b, &w, TLP_OP_HELLO, 0, 1);
	tlp_enc_hello(&w, &m);
	TL_PASS(tlp_frame_end(b, 0));
}

#define NPIPE 8

/* auth = on: eight clients each send a HELLO with an unknown token and,
 * right behind it, a frame declaring 32 MiB with 8 MiB of it. Each gets
 * the HELLO refused, then TL_ETOOLARGE for the frame, and is closed; the
 * broker never reads those frames (its peak memory stays where it was). A
 * client sending a 1 MiB frame right behind an accepted HELLO is
 * answered. */
Test(input, frame_behind_refused_hello)
{
	long rss0, hwm1;
	tli_buf hello;
	tlp_hdr h;
	int fd, err;

	start_auth();
	tt_nap_ms(200);
	rss0 = (tt_proc_status_kb(P.pid, "VmRSS") * 1024);
	hello_with(&hello, "wrong");
	for (int i = 0; i < NPIPE; i++) {
		fd = tt_tcp_open(port, 30);
		cr_assert(tt_send_all(fd, hello.data, hello.len));
		/* the broker stops reading: the rest may be cut off */
		(void) (send_big_head(fd, BIG, 7) && send_zeros(fd, 8 * MIB));
		cr_assert(recv_reply(fd, &h, &err), "%d: no HELLO reply", i);
		cr_assert_eq(h.op, TLP_OP_HELLO);
		TL_CODE_EQ(err, TL_ENOTAUTH, "HELLO with a wrong token");
		cr_assert(recv_reply(fd, &h, &err), "%d: no second reply", i);
		cr_assert_eq(h.op, 0, "the refusal of the frame is on op 0");
		TL_CODE_EQ(err, TL_ETOOLARGE, "32 MiB behind a refused HELLO");
		cr_assert(tt_closed_within(fd, 5000), "%d: still open", i);
		close(fd);
	}
	tli_buf_fini(&hello);
	hwm1 = (tt_proc_status_kb(P.pid, "VmHWM") * 1024);
	fprintf(stderr,
	    "input: %d x (refused HELLO + 8 MiB of a 32 MiB frame): VmRSS "
	    "%ld MiB before, peak %ld MiB after\n",
	    NPIPE, rss0 / MIB, hwm1 / MIB);
	cr_assert_lt(hwm1 - rss0, 32 * MIB, "the peak grew by %ld MiB",
	    (hwm1 - rss0) / MIB);
	cr_assert(tt_proc_log_wait(&P, "frame too long before HELLO", 2000));
	cr_assert_eq(metric("timeline_pre_hello_refused_total"), NPIPE);

	/* the same right behind an accepted HELLO: read and answered */
	hello_with(&hello, "tok");
	fd = tt_tcp_open(port, 30);
	cr_assert(tt_send_all(fd, hello.data, hello.len));
	tli_buf_fini(&hello);
	cr_assert(send_big_head(fd, (uint32_t) MIB, 8));
	cr_assert(send_zeros(fd, MIB - TLP_HDR_LEN));
	cr_assert(recv_reply(fd, &h, &err), "no HELLO reply");
	TL_PASS(err, "HELLO with the right token");
	cr_assert(recv_reply(fd, &h, &err), "no reply to the 1 MiB frame");
	cr_assert_eq(h.reqid, 8);
	TL_CODE_EQ(err, TL_EPROTO, "a 1 MiB CREATE of zeros");
	close(fd);
	tt_proc_stop_clean(&P);
}
