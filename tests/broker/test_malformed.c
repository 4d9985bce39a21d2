/*
 * End-to-end, the real broker over its wire protocol: a mock peer sends
 * broken frames — truncated, oversized, of another protocol version, of an
 * unknown operation, random bytes, a body that is not msgpack, a batch that
 * claims a billion items. Each attack gets an error reply or a disconnect
 * for that connection only: a client connected the whole time keeps
 * working, the broker keeps running and nothing is stored.
 */
#include "tltest.h"
#include "raw_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

RC_SUITE(malformed);

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
	size_t n;

	TL_PASS(rc_hello_frame(&b, "attacker"));
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
	TL_PASS(rc_hello(x, "attacker", tli_wall_ms(), NULL));
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
	TL_PASS(tlp_dec_reply_head(&r, &err, &detail, &nf),
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

	cr_assert_eq(waitpid(B.proc.pid, &st, WNOHANG), 0,
	    "the broker died after: %s", after);
	snprintf(id, sizeof(id), "g%d", checks++);
	TL_PASS(rc_hello(good, "good", tli_wall_ms(), NULL),
	    "HELLO of the good client after: %s", after);
	TL_PASS(rc_one(good, TLP_OP_CREATE, "good", "app", id, 0, 60000, true,
	            "fine", &res),
	    "CREATE of the good client after: %s", after);
	TL_PASS(rc_get(good, "good", id, &m, &f),
	    "GET of the good client after: %s", after);
	cr_assert(m.body_len == 4 && memcmp(m.body, "fine", 4) == 0);
	rc_frame_free(f);
	fresh = rc_connect(B.url, 10000);
	cr_assert_not_null(fresh, "no new connection after: %s", after);
	TL_PASS(rc_hello(fresh, "fresh", tli_wall_ms(), NULL));
	rc_close(fresh);
	TL_PASS(rc_topic_get(good, "attack", &t));
	cr_assert_eq(t.messages, 0, "%llu messages stored after: %s",
	    (unsigned long long) t.messages, after);
}

/* The broken-frame scenarios: each runs on its own broker with the topics
 * "attack" and "good" and a good client connected the whole time. */
static rc_client *good;
static uint8_t frame_buf[8192];

static void
attack_setup(void)
{
	rc_broker_init(&B, "e2e-malformed");
	B.topics[B.ntopics++] = "attack";
	B.topics[B.ntopics++] = "good";
	rc_broker_spawn(&B, 20000);
	good = rc_open(B.url, "good");
	still_fine(good, "nothing");
}

static void
attack_teardown(void)
{
	rc_close(good);
	good = NULL;
	rc_broker_stop(&B);
}

/* The noise of the random scenarios: one generator, so that each scenario
 * sends the bytes it sent when they all ran in one sequence. */
static uint8_t
noise_byte(uint32_t *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (uint8_t) (*seed >> 16);
}

static uint32_t
noise_seed(size_t skip)
{
	uint32_t seed = 12345;

	while (skip-- > 0) {
		noise_byte(&seed);
	}
	return seed;
}

#define RANDOM_BYTES 4096

/* A connection that says nothing else, with the wrong first bytes. */
static rc_client *
raw_attacker(void)
{
	rc_client *x = rc_connect(B.url, 10000);

	cr_assert_not_null(x);
	return x;
}

#define ATTACK(name) \
	Test(malformed, name, .init = attack_setup, .fini = attack_teardown)

ATTACK(a_truncated_frame)
{
	rc_client *x = attacker();
	size_t n;

	/* A frame cut short, then the connection closes. */
	n = mkframe(frame_buf, TLP_VERSION, TLP_OP_CREATE, 0, 2,
	    "\x93\xa6"
	    "attack",
	    8);
	tli_put_be32(frame_buf, 100); /* claims 100 bytes, 16 follow */
	cr_assert_eq(rc_send_raw(x, frame_buf, n), 0);
	rc_close(x);
	still_fine(good, "a truncated frame");
}

/* Bytes the broker refuses with an error reply and a hang-up (or only
 * the hang-up): what it must answer to which request id. */
typedef struct refusal {
	uint32_t reqid;
	int e1, e2;
	const char *what, *after;
	bool eof_checked; /* the scenario checks the hang-up once more */
} refusal;

/* Send n bytes on a fresh connection x, expect the refusal, then check
 * that nothing else suffered. */
static void
refused(rc_client *x, const void *p, size_t n, const refusal *c)
{
	cr_assert_eq(rc_send_raw(x, p, n), 0);
	expect_error_or_hangup(x, c->reqid, c->e1, c->e2, c->what);
	if (c->eof_checked) {
		cr_assert(rc_wait_eof(x, 10000));
	}
	rc_close(x);
	still_fine(good, c->after);
}

ATTACK(an_oversized_length_prefix)
{
	/* A length prefix over the limit: error, then hang-up. */
	static const uint8_t prefix[] = {0x7f, 0xff, 0xff, 0xff};
	static const refusal c = {0, TL_ETOOLARGE, TL_ETOOLARGE,
	    "oversized length", "an oversized length prefix", false};

	refused(raw_attacker(), prefix, sizeof(prefix), &c);
}

ATTACK(an_undersized_length_prefix)
{
	/* A length prefix shorter than a header. */
	static const uint8_t prefix[] = {0, 0, 0, 3, 'a', 'b', 'c'};
	static const refusal c = {0, TL_EPROTO, TL_EPROTO, "undersized length",
	    "an undersized length prefix", true};

	refused(raw_attacker(), prefix, sizeof(prefix), &c);
}

ATTACK(a_wrong_protocol_version)
{
	/* Another protocol version: ENOTSUP, then hang-up. */
	static const refusal c = {1, TL_ENOTSUP, TL_ENOTSUP,
	    "wrong protocol version", "a wrong protocol version", true};
	rc_client *x = raw_attacker();
	size_t n = mkhello(frame_buf, sizeof(frame_buf));

	frame_buf[4] = TLP_VERSION + 1;
	refused(x, frame_buf, n, &c);
}

/* Frames after HELLO that each get an error reply; the connection may
 * stay. */
typedef struct bad_frame {
	uint8_t op, flags;
	uint32_t reqid;
	const void *body;
	size_t blen;
	int e1, e2;
	const char *what;
} bad_frame;

static void
send_bad_frames(const bad_frame *fr, size_t nfr, const char *after)
{
	rc_client *x = attacker();

	for (size_t i = 0; i < nfr; i++) {
		size_t n = mkframe(frame_buf, TLP_VERSION, fr[i].op,
		    fr[i].flags, fr[i].reqid, fr[i].body, fr[i].blen);

		cr_assert_eq(rc_send_raw(x, frame_buf, n), 0);
		expect_error(x, fr[i].reqid, fr[i].e1, fr[i].e2, fr[i].what);
	}
	rc_close(x);
	still_fine(good, after);
}

ATTACK(an_unknown_operation)
{
	/* An unknown operation: ENOTSUP; the connection may stay. 59: in
	 * the handler table (below TLP_OP_MAX_), in a gap between the
	 * groups of codes that new operations do not fill. */
	static const bad_frame fr[] = {
	    {59, 0, 7, "\x90", 1, TL_ENOTSUP, TL_ENOTSUP, "unknown operation"},
	    {255, 0, 8, "\x90", 1, TL_ENOTSUP, TL_ENOTSUP, "operation 255"},
	};

	send_bad_frames(fr, 2, "an unknown operation");
}

ATTACK(a_request_before_hello)
{
	static const refusal c = {3, TL_EPROTO, TL_EPROTO,
	    "request before HELLO", "a request before HELLO", true};
	rc_client *x = raw_attacker();
	size_t n =
	    mkframe(frame_buf, TLP_VERSION, TLP_OP_TOPIC_LIST, 0, 3, "\x90", 1);

	refused(x, frame_buf, n, &c);
}

ATTACK(pushes_from_a_client)
{
	/* A client that sends a reply or a push. */
	static const bad_frame fr[] = {
	    {TLP_OP_DELIVER, TLP_F_PUSH, 0, "\x90", 1, TL_EPROTO, TL_EPROTO,
	        "a push from a client"},
	    {TLP_OP_DELIVER, 0, 9, "\x90", 1, TL_EPROTO, TL_EPROTO,
	        "DELIVER as a request"},
	};

	send_bad_frames(fr, 2, "pushes from a client");
}

ATTACK(random_bytes)
{
	static const refusal c = {0, TL_ETOOLARGE, TL_ETOOLARGE, "random bytes",
	    "random bytes", true};
	rc_client *x = raw_attacker();
	uint32_t seed = noise_seed(0);

	/* Random bytes from the first byte on (the first byte makes the
	 * length prefix exceed the limit, so the answer is deterministic). */
	for (size_t i = 0; i < RANDOM_BYTES; i++) {
		frame_buf[i] = noise_byte(&seed);
	}
	frame_buf[0] = 0xa5;
	refused(x, frame_buf, RANDOM_BYTES, &c);
}

ATTACK(random_bodies)
{
	rc_client *x = raw_attacker();
	uint32_t seed = noise_seed(RANDOM_BYTES);
	uint8_t noise[200];
	size_t n;

	/* Random bodies under valid headers: HELLO, then (after a good
	 * HELLO) CREATE and GET. */
	for (size_t i = 0; i < sizeof(noise); i++) {
		noise[i] = noise_byte(&seed);
	}
	n = mkframe(
	    frame_buf, TLP_VERSION, TLP_OP_HELLO, 0, 4, noise, sizeof(noise));
	cr_assert_eq(rc_send_raw(x, frame_buf, n), 0);
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
			body[i] = noise_byte(&seed);
		}
		body[0] = 0x93; /* a 3-array, as CREATE wants, then noise */
		n = mkframe(frame_buf, TLP_VERSION,
		    k % 2 ? TLP_OP_GET : TLP_OP_CREATE, 0, (uint32_t) (100 + k),
		    body, sizeof(body));
		cr_assert_eq(rc_send_raw(x, frame_buf, n), 0);
		expect_error(x, (uint32_t) (100 + k), TL_EPROTO, TL_ETOOLARGE,
		    "random body");
	}
	rc_close(x);
	still_fine(good, "random bodies");
}

ATTACK(a_body_that_is_not_msgpack)
{
	/* A body that is not msgpack at all (0xc1 is never used), then
	 * trailing bytes after a valid body. */
	static const bad_frame fr[] = {
	    {TLP_OP_CREATE, 0, 5, "\xc1\xc1\xc1\xc1", 4, TL_EPROTO, TL_EPROTO,
	        "not msgpack"},
	    {TLP_OP_TOPIC_LIST, 0, 6, "\x90\x90", 2, TL_EPROTO, TL_EPROTO,
	        "trailing bytes"},
	};

	send_bad_frames(fr, 2, "a body that is not msgpack");
}

ATTACK(a_batch_claiming_a_billion_items)
{
	/* A batch that claims a billion items (array32 header, a few bytes
	 * behind it), on a producer batch and on a lease-holder batch. */
	static const uint8_t body[] = {0x93, 0xa6, 'a', 't', 't', 'a', 'c', 'k',
	    0xa3, 'a', 'p', 'p', 0xdd, 0x3b, 0x9a, 0xca, 0x00, 0x95, 0xa1, 'z',
	    0x00, 0x00, 0xc2, 0xc0};
	static const bad_frame fr[] = {
	    {TLP_OP_CREATE, 0, 10, body, sizeof(body), TL_ETOOLARGE, TL_EPROTO,
	        "a billion items"},
	    {TLP_OP_ACK, 0, 11, body, sizeof(body), TL_ETOOLARGE, TL_EPROTO,
	        "a billion items (ACK)"},
	};
	tlp_result res;
	tlp_topic t;

	send_bad_frames(fr, 2, "a batch claiming a billion items");
	/* And the attacked topic still works for a well-behaved client. */
	TL_PASS(rc_one(good, TLP_OP_CREATE, "attack", "app", "ok", 0, 60000,
	    true, NULL, &res));
	TL_PASS(rc_topic_get(good, "attack", &t));
	cr_assert_eq(t.messages, 1);
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
	int64_t deadline = tli_mono_ms() + 10000;
	size_t got = 0;
	int fd = rc_unix_connect(B.sock);

	*hung_up = false;
	cr_assert(fd >= 0, "connect %s: %s", B.sock, strerror(errno));
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
		TL_FAIL(first_reply_error(in, got), TL_ENOTSUP,
		    "wrong version: no TL_ENOTSUP reply before the hang-up "
		    "(%zu bytes came)",
		    got);

		tli_put_be32(buf, 0x7fffffffu);
		got = plain_exchange(buf, 4, in, sizeof(in), &hung_up);
		cr_assert(
		    hung_up, "oversized length: the broker did not hang up");
		TL_FAIL(first_reply_error(in, got), TL_ETOOLARGE,
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
	tlp_enc_ping(w, tli_wall_ms());
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
	t0 = tli_wall_ms();
	while (tli_wall_ms() - t0 < 1500) {
		rc_frame *f = NULL;
		TL_PASS(
		    rc_req(pinging, TLP_OP_PING, enc_ping_now, NULL, &f, NULL),
		    "a pinging client was closed");
		rc_frame_free(f);
		tt_nap_ms(100);
	}
	cr_assert(rc_wait_eof(silent, 3000),
	    "a client silent for 1.5 s was not closed (idle timeout 400 ms)");
	waited = tli_wall_ms() - t0;
	cr_assert_geq(waited, 400, "closed before the idle timeout");
	cr_assert(!rc_wait_eof(pinging, 0), "the pinging client was closed");
	rc_close(silent);
	rc_close(pinging);
}
