/*
 * End-to-end, the real broker over its wire protocol: a mock peer sends
 * broken frames — truncated, oversized, of another protocol version, of an
 * unknown operation, random bytes, a body that is not msgpack, a batch that
 * claims a billion items. Each attack gets an error reply or a disconnect
 * for that connection only: a client connected the whole time keeps
 * working, the broker keeps running and nothing is stored.
 */
#include "raw_client.c"

#include <sys/un.h>

static rc_broker B;

static void
teardown(void)
{
	rc_broker_stop(&B);
}

TestSuite(malformed, .fini = teardown, .timeout = 60);

/* A frame with any header: returns its length in out. */
static size_t
mkframe(uint8_t *out, uint8_t version, uint8_t op, uint8_t flags,
    uint32_t reqid, const void *body, size_t blen)
{
	tli_put_be32(out, (uint32_t) (TLP_HDR_LEN + blen));
	out[4] = version;
	out[5] = op;
	out[6] = flags;
	out[7] = 0;
	tli_put_be32(out + 8, reqid);
	if (blen > 0) {
		memcpy(out + 12, body, blen);
	}
	return TLP_LEN_BYTES + TLP_HDR_LEN + blen;
}

/* A valid HELLO frame with request id 1. */
static size_t
mkhello(uint8_t *out, size_t cap)
{
	tli_buf b;
	tlp_w w;
	tlp_hello h;
	size_t n;

	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR("attacker");
	h.client_ms = rc_now_ms();
	tli_buf_init(&b);
	tlp_frame_begin(&b, &w, TLP_OP_HELLO, 0, 1);
	tlp_enc_hello(&w, &h);
	cr_assert_eq(tlp_frame_end(&b, 0), TL_OK);
	cr_assert(b.len <= cap);
	memcpy(out, b.data, b.len);
	n = b.len;
	tli_buf_fini(&b);
	return n;
}

/* Open a raw connection that has said HELLO. */
static rc_client *
attacker(void)
{
	rc_client *x = rc_connect(B.url, 10000);

	cr_assert_not_null(x);
	cr_assert_eq(rc_hello(x, "attacker", rc_now_ms(), NULL), TL_OK);
	return x;
}

/* The next frame must be an error reply (request id reqid) with one of
 * the accepted codes; returns the code. */
static int
expect_error(rc_client *x, uint32_t reqid, int e1, int e2, const char *what)
{
	rc_frame *f = rc_next_frame(x, 10000);
	tlp_r r;
	tlp_str detail;
	size_t nf;
	int err = -1;

	cr_assert_not_null(f, "%s: no reply within 10 s (connection %s)", what,
	    x->eof ? "closed" : "open");
	cr_assert(
	    f->h.flags & TLP_F_REPLY, "%s: a frame that is not a reply", what);
	cr_assert_eq(f->h.reqid, reqid, "%s: reply to request %u, sent %u",
	    what, f->h.reqid, reqid);
	rc_frame_body(f, &r);
	cr_assert_eq(tlp_dec_reply_head(&r, &err, &detail, &nf), TL_OK,
	    "%s: the reply does not decode", what);
	cr_assert(err == e1 || err == e2, "%s: error %s (%.*s), expected %s",
	    what, tl_errname(err), (int) detail.n, detail.p ? detail.p : "",
	    tl_errname(e1));
	rc_frame_free(f);
	return err;
}

/* For attacks after which the broker hangs up: the next frame, if any,
 * must be the error reply; then the connection must close. Returns the
 * error, or 0 when the broker hung up without answering (allowed here;
 * refusal_is_answered_before_hangup holds it to the documented reply). */
static int
expect_error_or_hangup(
    rc_client *x, uint32_t reqid, int e1, int e2, const char *what)
{
	rc_frame *f;
	int err = 0;

	cr_assert(rc_wait_eof(x, 10000) || x->head != NULL,
	    "%s: neither a reply nor a hang-up within 10 s", what);
	pthread_mutex_lock(&x->mtx);
	f = x->head;
	pthread_mutex_unlock(&x->mtx);
	if (f != NULL) {
		err = expect_error(x, reqid, e1, e2, what);
	} else {
		cr_log_info(
		    "%s: the broker hung up without the error reply", what);
	}
	cr_assert(rc_wait_eof(x, 10000),
	    "%s: the broker kept a connection it refused", what);
	return err;
}

static int checks;

/* After every attack: the broker runs, the good client still works, a new
 * client can connect, and nothing reached the attacked topic. */
static void
still_fine(rc_client *good, const char *after)
{
	char id[16];
	tlp_result res;
	tlp_msg m;
	rc_frame *f;
	tlp_topic t;
	rc_client *fresh;
	int st;

	cr_assert_eq(waitpid(B.pid, &st, WNOHANG), 0,
	    "the broker died after: %s", after);
	snprintf(id, sizeof(id), "g%d", checks++);
	cr_assert_eq(rc_hello(good, "good", rc_now_ms(), NULL), TL_OK,
	    "HELLO of the good client after: %s", after);
	cr_assert_eq(rc_one(good, TLP_OP_CREATE, "good", "app", id, 0, 60000,
	                 true, "fine", &res),
	    TL_OK, "CREATE of the good client after: %s", after);
	cr_assert_eq(rc_get(good, "good", id, &m, &f), TL_OK,
	    "GET of the good client after: %s", after);
	cr_assert(m.body_len == 4 && memcmp(m.body, "fine", 4) == 0);
	rc_frame_free(f);
	fresh = rc_connect(B.url, 10000);
	cr_assert_not_null(fresh, "no new connection after: %s", after);
	cr_assert_eq(rc_hello(fresh, "fresh", rc_now_ms(), NULL), TL_OK);
	rc_close(fresh);
	cr_assert_eq(rc_topic_get(good, "attack", &t), TL_OK);
	cr_assert_eq(t.messages, 0, "%llu messages stored after: %s",
	    (unsigned long long) t.messages, after);
}

Test(malformed, broken_frames_hurt_only_their_connection)
{
	static uint8_t buf[8192];
	rc_client *good, *x;
	size_t n;
	uint32_t seed = 12345;

	rc_broker_init(&B, "e2e-malformed");
	B.topics[B.ntopics++] = "attack";
	B.topics[B.ntopics++] = "good";
	rc_broker_spawn(&B, 20000);
	good = rc_open(B.url, "good");
	still_fine(good, "nothing");

	/* A frame cut short, then the connection closes. */
	x = attacker();
	n = mkframe(buf, TLP_VERSION, TLP_OP_CREATE, 0, 2,
	    "\x93\xa6"
	    "attack",
	    8);
	tli_put_be32(buf, 100); /* claims 100 bytes, 16 follow */
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	rc_close(x);
	still_fine(good, "a truncated frame");

	/* A length prefix over the limit: error, then hang-up. */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	tli_put_be32(buf, 0x7fffffffu);
	cr_assert_eq(rc_send_raw(x, buf, 4), 0);
	expect_error_or_hangup(
	    x, 0, TL_ETOOLARGE, TL_ETOOLARGE, "oversized length");
	rc_close(x);
	still_fine(good, "an oversized length prefix");

	/* A length prefix shorter than a header. */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	tli_put_be32(buf, 3);
	memcpy(buf + 4, "abc", 3);
	cr_assert_eq(rc_send_raw(x, buf, 7), 0);
	expect_error_or_hangup(x, 0, TL_EPROTO, TL_EPROTO, "undersized length");
	cr_assert(rc_wait_eof(x, 10000));
	rc_close(x);
	still_fine(good, "an undersized length prefix");

	/* Another protocol version: ENOTSUP, then hang-up. */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	n = mkhello(buf, sizeof(buf));
	buf[4] = TLP_VERSION + 1;
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error_or_hangup(
	    x, 1, TL_ENOTSUP, TL_ENOTSUP, "wrong protocol version");
	cr_assert(rc_wait_eof(x, 10000));
	rc_close(x);
	still_fine(good, "a wrong protocol version");

	/* An unknown operation: ENOTSUP; the connection may stay. */
	x = attacker();
	n = mkframe(buf, TLP_VERSION, 60, 0, 7, "\x90", 1);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 7, TL_ENOTSUP, TL_ENOTSUP, "unknown operation");
	n = mkframe(buf, TLP_VERSION, 255, 0, 8, "\x90", 1);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 8, TL_ENOTSUP, TL_ENOTSUP, "operation 255");
	rc_close(x);
	still_fine(good, "an unknown operation");

	/* A request before HELLO. */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	n = mkframe(buf, TLP_VERSION, TLP_OP_TOPIC_LIST, 0, 3, "\x90", 1);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error_or_hangup(
	    x, 3, TL_EPROTO, TL_EPROTO, "request before HELLO");
	cr_assert(rc_wait_eof(x, 10000));
	rc_close(x);
	still_fine(good, "a request before HELLO");

	/* A client that sends a reply or a push. */
	x = attacker();
	n = mkframe(buf, TLP_VERSION, TLP_OP_DELIVER, TLP_F_PUSH, 0, "\x90", 1);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 0, TL_EPROTO, TL_EPROTO, "a push from a client");
	n = mkframe(buf, TLP_VERSION, TLP_OP_DELIVER, 0, 9, "\x90", 1);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 9, TL_EPROTO, TL_EPROTO, "DELIVER as a request");
	rc_close(x);
	still_fine(good, "pushes from a client");

	/* Random bytes from the first byte on (the first byte makes the
	 * length prefix exceed the limit, so the answer is deterministic). */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	for (size_t i = 0; i < 4096; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t) (seed >> 16);
	}
	buf[0] = 0xa5;
	cr_assert_eq(rc_send_raw(x, buf, 4096), 0);
	expect_error_or_hangup(
	    x, 0, TL_ETOOLARGE, TL_ETOOLARGE, "random bytes");
	cr_assert(rc_wait_eof(x, 10000));
	rc_close(x);
	still_fine(good, "random bytes");

	/* Random bodies under valid headers: HELLO, then (after a good
	 * HELLO) CREATE and GET. */
	x = rc_connect(B.url, 10000);
	cr_assert_not_null(x);
	{
		uint8_t noise[200];
		for (size_t i = 0; i < sizeof(noise); i++) {
			seed = seed * 1103515245u + 12345u;
			noise[i] = (uint8_t) (seed >> 16);
		}
		n = mkframe(
		    buf, TLP_VERSION, TLP_OP_HELLO, 0, 4, noise, sizeof(noise));
	}
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error_or_hangup(
	    x, 4, TL_EPROTO, TL_ETOOLARGE, "random HELLO body");
	cr_assert(rc_wait_eof(x, 10000),
	    "a session that failed its HELLO "
	    "stays open");
	rc_close(x);
	x = attacker();
	for (int k = 0; k < 20; k++) {
		uint8_t body[300];
		for (size_t i = 0; i < sizeof(body); i++) {
			seed = seed * 1103515245u + 12345u;
			body[i] = (uint8_t) (seed >> 16);
		}
		body[0] = 0x93; /* a 3-array, as CREATE wants, then noise */
		n = mkframe(buf, TLP_VERSION,
		    k % 2 ? TLP_OP_GET : TLP_OP_CREATE, 0, (uint32_t) (100 + k),
		    body, sizeof(body));
		cr_assert_eq(rc_send_raw(x, buf, n), 0);
		expect_error(x, (uint32_t) (100 + k), TL_EPROTO, TL_ETOOLARGE,
		    "random body");
	}
	rc_close(x);
	still_fine(good, "random bodies");

	/* A body that is not msgpack at all (0xc1 is never used). */
	x = attacker();
	n = mkframe(
	    buf, TLP_VERSION, TLP_OP_CREATE, 0, 5, "\xc1\xc1\xc1\xc1", 4);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 5, TL_EPROTO, TL_EPROTO, "not msgpack");
	/* Trailing bytes after a valid body. */
	n = mkframe(buf, TLP_VERSION, TLP_OP_TOPIC_LIST, 0, 6, "\x90\x90", 2);
	cr_assert_eq(rc_send_raw(x, buf, n), 0);
	expect_error(x, 6, TL_EPROTO, TL_EPROTO, "trailing bytes");
	rc_close(x);
	still_fine(good, "a body that is not msgpack");

	/* A batch that claims a billion items (array32 header, a few bytes
	 * behind it). */
	x = attacker();
	{
		static const uint8_t body[] = {0x93, 0xa6, 'a', 't', 't', 'a',
		    'c', 'k', 0xa3, 'a', 'p', 'p', 0xdd, 0x3b, 0x9a, 0xca, 0x00,
		    0x95, 0xa1, 'z', 0x00, 0x00, 0xc2, 0xc0};
		n = mkframe(
		    buf, TLP_VERSION, TLP_OP_CREATE, 0, 10, body, sizeof(body));
		cr_assert_eq(rc_send_raw(x, buf, n), 0);
		expect_error(x, 10, TL_ETOOLARGE, TL_EPROTO, "a billion items");
		/* The same claim on a lease-holder batch. */
		n = mkframe(
		    buf, TLP_VERSION, TLP_OP_ACK, 0, 11, body, sizeof(body));
		cr_assert_eq(rc_send_raw(x, buf, n), 0);
		expect_error(
		    x, 11, TL_ETOOLARGE, TL_EPROTO, "a billion items (ACK)");
	}
	rc_close(x);
	still_fine(good, "a batch claiming a billion items");

	/* And the attacked topic still works for a well-behaved client. */
	{
		tlp_result res;
		tlp_topic t;
		cr_assert_eq(rc_one(good, TLP_OP_CREATE, "attack", "app", "ok",
		                 0, 60000, true, NULL, &res),
		    TL_OK);
		cr_assert_eq(rc_topic_get(good, "attack", &t), TL_OK);
		cr_assert_eq(t.messages, 1);
	}
	rc_close(good);
}

/* Send bytes on a plain AF_UNIX socket and read everything the broker
 * sends until it hangs up (at most 10 s). nng's own stream client can
 * drop data that arrives together with the hang-up, so this reads with
 * the socket API to see exactly what the broker sent. Returns the bytes
 * read; *hung_up says whether the broker closed. */
static size_t
plain_exchange(
    const void *out, size_t n, uint8_t *in, size_t cap, bool *hung_up)
{
	struct sockaddr_un sa;
	int64_t deadline = tli_mono_ms() + 10000;
	size_t got = 0;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	*hung_up = false;
	cr_assert(fd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	cr_assert(strlen(B.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, B.sock, strlen(B.sock) + 1);
	cr_assert_eq(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
	cr_assert_eq(write(fd, out, n), (ssize_t) n);
	while (got < cap) {
		struct pollfd pf = {fd, POLLIN, 0};
		int64_t left = deadline - tli_mono_ms();
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, (int) left) <= 0) {
			break;
		}
		if ((r = read(fd, in + got, cap - got)) <= 0) {
			*hung_up = true; /* EOF or reset: either is a hang-up */
			break;
		}
		got += (size_t) r;
	}
	close(fd);
	return got;
}

/* The error code of the first frame in p (a reply), or -1. */
static int
first_reply_error(const uint8_t *p, size_t n)
{
	uint32_t len;
	tlp_r r;
	tlp_str detail;
	size_t nf;
	int err = -1;

	if (n < TLP_LEN_BYTES || tlp_frame_len(p, &len) != TL_OK ||
	    n < TLP_LEN_BYTES + len || !(p[6] & TLP_F_REPLY)) {
		return -1;
	}
	tlp_r_init(&r, p + TLP_LEN_BYTES + TLP_HDR_LEN, len - TLP_HDR_LEN);
	if (tlp_dec_reply_head(&r, &err, &detail, &nf) != TL_OK) {
		return -1;
	}
	return err;
}

/* frame.h: "a broker answers a frame of an unknown version with TL_ENOTSUP
 * and the versions it speaks, then closes"; server.c: a bad length prefix
 * is answered, then the connection closed ("say why, then hang up"). */
Test(malformed, refusal_is_answered_before_hangup)
{
	static uint8_t buf[512], in[4096];
	bool hung_up;
	size_t n, got;

	rc_broker_start(&B, "e2e-refusal");
	for (int i = 0; i < 10; i++) {
		n = mkhello(buf, sizeof(buf));
		buf[4] = TLP_VERSION + 1;
		got = plain_exchange(buf, n, in, sizeof(in), &hung_up);
		cr_assert(hung_up, "wrong version: the broker did not hang up");
		cr_assert_eq(first_reply_error(in, got), TL_ENOTSUP,
		    "wrong version: no TL_ENOTSUP reply before the hang-up "
		    "(%zu bytes came)",
		    got);

		tli_put_be32(buf, 0x7fffffffu);
		got = plain_exchange(buf, 4, in, sizeof(in), &hung_up);
		cr_assert(
		    hung_up, "oversized length: the broker did not hang up");
		cr_assert_eq(first_reply_error(in, got), TL_ETOOLARGE,
		    "oversized length: no TL_ETOOLARGE reply before the "
		    "hang-up "
		    "(%zu bytes came)",
		    got);
	}
}

static void
enc_ping_now(tlp_w *w, const void *arg)
{
	(void) arg;
	tlp_enc_ping(w, rc_now_ms());
}

/* A client that sends nothing for the idle timeout is closed (its
 * connection may be dead: half-open TCP keeps nothing alive); one that
 * pings, as the SDK does every 5 s, is not. */
Test(malformed, silent_clients_are_closed_after_the_idle_timeout)
{
	rc_client *silent, *pinging;
	int64_t t0, waited;

	rc_broker_init(&B, "e2e-idle");
	B.idle_ms = 400;
	rc_broker_spawn(&B, 20000);
	silent = rc_open(B.url, "silent");
	pinging = rc_open(B.url, "pinging");
	t0 = rc_now_ms();
	while (rc_now_ms() - t0 < 1500) {
		rc_frame *f = NULL;
		cr_assert_eq(
		    rc_req(pinging, TLP_OP_PING, enc_ping_now, NULL, &f, NULL),
		    TL_OK, "a pinging client was closed");
		rc_frame_free(f);
		rc_nap_ms(100);
	}
	cr_assert(rc_wait_eof(silent, 3000),
	    "a client silent for 1.5 s was not closed (idle timeout 400 ms)");
	waited = rc_now_ms() - t0;
	cr_assert_geq(waited, 400, "closed before the idle timeout");
	cr_assert(!rc_wait_eof(pinging, 0), "the pinging client was closed");
	rc_close(silent);
	rc_close(pinging);
}
