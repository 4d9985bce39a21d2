/*
 * End-to-end, the real broker over its wire protocol: crashes and clean
 * stops. SIGKILL during a stream of creates loses no acknowledged create
 * and no lease; SIGTERM while producers and consumers are busy exits 0, and
 * the restarted broker carries on with what was there.
 */
#include "tltest.h"
#include "raw_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

RC_SUITE(restart);

#define MAXMSG 100000

enum { ST_NONE, ST_SENT, ST_OK, ST_FAIL };

/* A producer streaming batches of creates until the connection fails.
 * Runs on its own thread: it asserts nothing. */
typedef struct prod {
	rc_client *c;
	char prefix;
	bool mixed;    /* even ids due now, odd ones in 60 s */
	int64_t delay; /* otherwise every message is due after this */
	_Atomic int sent;
	_Atomic int ok;
	_Atomic int item_err; /* items refused although the request worked */
	_Atomic bool stop;
	unsigned char st[MAXMSG];
} prod;

static void
id_of(char *buf, size_t cap, char prefix, int i)
{
	snprintf(buf, cap, "%c%06d", prefix, i);
}

static int
idx_of(const tlp_str *id, char prefix)
{
	char tmp[16];
	int i;

	if (id->n != 7 || id->p[0] != prefix) {
		return -1;
	}
	snprintf(tmp, sizeof(tmp), "%.*s", (int) id->n - 1, id->p + 1);
	i = atoi(tmp);
	return i >= 0 && i < MAXMSG ? i : -1;
}

static void *
prod_main(void *arg)
{
	prod *p = arg;
	enum { N = 50 };
	tlp_item items[N];
	char ids[N][16];

	while (!p->stop && p->sent + N <= MAXMSG) {
		rc_results res;
		int base = p->sent, rv;

		memset(items, 0, sizeof(items));
		for (int j = 0; j < N; j++) {
			int i = base + j;
			id_of(ids[j], sizeof(ids[j]), p->prefix, i);
			items[j].id = TLP_STR(ids[j]);
			items[j].rel = true;
			items[j].ts =
			    p->mixed ? (i % 2 == 0 ? 0 : 60000) : p->delay;
			p->st[i] = ST_SENT;
		}
		p->sent = base + N;
		rv = rc_batch(p->c, TLP_OP_CREATE, "t", "app", items, N, &res);
		if (rv != TL_OK) {
			break; /* the broker went away: these stay "sent" */
		}
		for (size_t j = 0; j < res.n && j < N; j++) {
			if (res.v[j].err == TL_OK) {
				p->st[base + j] = ST_OK;
				p->ok++;
			} else {
				p->st[base + j] = ST_FAIL;
				p->item_err++;
			}
		}
		rc_results_free(&res);
	}
	return NULL;
}

static void
wait_count(_Atomic int *v, int want, int timeout_ms, const char *what)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	while (*v < want) {
		cr_assert(tli_mono_ms() < deadline, "%s: %d of %d within %d ms",
		    what, (int) *v, want, timeout_ms);
		tt_nap_ms(2);
	}
}

/* ---- SIGKILL during a produce stream ---- */

Test(restart, sigkill_loses_no_acknowledged_create_or_lease)
{
	static prod pr;
	static unsigned char got[MAXMSG];
	const char *held_ids[5] = {"L0", "L1", "L2", "L3", "L4"};
	uint64_t held_ver[5];
	tlp_item items[5];
	rc_results res;
	rc_client *p, *holder, *other, *holder2;
	pthread_t th;
	int64_t deadline;
	int need = 0, seen = 0, extra = 0;

	rc_broker_start(&B, "e2e-kill");
	p = rc_open(B.url, "producer");
	memset(items, 0, sizeof(items));
	for (int i = 0; i < 5; i++) {
		items[i].id = TLP_STR(held_ids[i]);
		items[i].rel = true;
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, 5, &res));
	rc_results_free(&res);

	/* A consumer holds five leases of a minute when the broker dies. */
	holder = rc_open(B.url, "holder");
	TL_PASS(rc_subscribe(holder, "t", "holder", 60000, 5));
	for (int n = 0; n < 5;) {
		rc_deliver dv;
		cr_assert_eq(rc_wait_deliver(holder, 10000, &dv), 1,
		    "the holder got %d of its 5 leases", n);
		for (size_t i = 0; i < dv.d.n; i++, n++) {
			int k = dv.d.v[i].id.p[1] - '0';
			cr_assert(dv.d.v[i].id.n == 2 && k >= 0 && k < 5);
			held_ver[k] = dv.d.v[i].version;
		}
		rc_deliver_free(&dv);
	}

	/* Stream creates (due 1.5 s after they are made) and kill the broker
	 * in the middle of it. */
	memset(&pr, 0, sizeof(pr));
	pr.c = rc_open(B.url, "stream");
	pr.prefix = 's';
	pr.delay = 1500;
	cr_assert_eq(pthread_create(&th, NULL, prod_main, &pr), 0);
	wait_count(&pr.ok, 500, 20000, "acknowledged creates before the crash");
	cr_assert_neq(rc_broker_signal(&B, SIGKILL, 10000), -2);
	pthread_join(th, NULL);
	cr_assert_eq(pr.item_err, 0, "creates refused before the crash");
	cr_log_info("crash after %d creates sent, %d acknowledged",
	    (int) pr.sent, (int) pr.ok);
	rc_close(pr.c);
	rc_close(holder);
	rc_close(p);

	rc_broker_spawn(&B, 20000);

	/* Another consumer gets every acknowledged create, none of the
	 * held messages. */
	other = rc_open(B.url, "other");
	TL_PASS(rc_subscribe(other, "t", "other", 30000, 1024));
	for (int i = 0; i < MAXMSG; i++) {
		need += pr.st[i] == ST_OK;
	}
	deadline = tli_mono_ms() + 20000;
	while (seen < need) {
		rc_deliver dv;
		int rv;

		cr_assert(tli_mono_ms() < deadline,
		    "after the restart only %d of "
		    "%d acknowledged creates came",
		    seen, need);
		rv = rc_wait_deliver(other, 500, &dv);
		cr_assert(rv >= 0);
		if (rv == 0) {
			continue;
		}
		for (size_t j = 0; j < dv.d.n; j++) {
			int i = idx_of(&dv.d.v[j].id, 's');
			cr_assert(i >= 0,
			    "%.*s was delivered to another consumer "
			    "while its lease is active",
			    (int) dv.d.v[j].id.n, dv.d.v[j].id.p);
			cr_assert(
			    pr.st[i] != ST_NONE, "s%06d was never sent", i);
			cr_assert_eq(got[i], 0, "s%06d delivered twice", i);
			got[i] = 1;
			if (pr.st[i] == ST_OK) {
				seen++;
			} else {
				extra++; /* in flight at the crash: may exist */
			}
		}
		TL_PASS(rc_ack_all(other, "t", "other", &dv, &res));
		for (size_t j = 0; j < res.n; j++) {
			TL_PASS(res.v[j].err);
		}
		rc_results_free(&res);
		rc_deliver_free(&dv);
	}

	/* The holder comes back under its id: its leases are still its. */
	holder2 = rc_open(B.url, "holder");
	TL_PASS(rc_subscribe(holder2, "t", "holder", 60000, 5));
	for (int n = 0; n < 5;) {
		rc_deliver dv;
		cr_assert_eq(rc_wait_deliver(holder2, 10000, &dv), 1,
		    "the holder got back %d of its 5 leases", n);
		for (size_t i = 0; i < dv.d.n; i++, n++) {
			int k = dv.d.v[i].id.p[1] - '0';
			cr_assert(dv.d.v[i].id.n == 2 &&
			    dv.d.v[i].id.p[0] == 'L' && k >= 0 && k < 5);
			cr_assert_eq(dv.d.v[i].version, held_ver[k],
			    "L%d came back with version %llu, the lease had "
			    "%llu",
			    k, (unsigned long long) dv.d.v[i].version,
			    (unsigned long long) held_ver[k]);
		}
		rc_deliver_free(&dv);
	}
	/* Late arrivals at "other" may only be creates that were in flight
	 * at the crash (applied, never acknowledged). */
	for (;;) {
		rc_deliver dv;
		int rv = rc_wait_deliver(other, 300, &dv);
		cr_assert(rv >= 0);
		if (rv == 0) {
			break;
		}
		for (size_t j = 0; j < dv.d.n; j++) {
			int i = idx_of(&dv.d.v[j].id, 's');
			cr_assert(i >= 0 && pr.st[i] == ST_SENT && !got[i],
			    "the other consumer got %.*s (version %llu, "
			    "deliveries "
			    "%u) after the holder came back",
			    (int) dv.d.v[j].id.n, dv.d.v[j].id.p,
			    (unsigned long long) dv.d.v[j].version,
			    dv.d.v[j].deliveries);
			got[i] = 1;
			extra++;
		}
		rc_deliver_free(&dv);
	}
	cr_log_info("after the restart: %d acknowledged and %d unacknowledged "
	            "creates delivered",
	    seen, extra);
	for (int k = 0; k < 5; k++) {
		tlp_result r;
		TL_PASS(rc_one(holder2, TLP_OP_ACK, "t", "holder", held_ids[k],
		            held_ver[k], 0, false, NULL, &r),
		    "ACK of %s with the pre-crash lease", held_ids[k]);
	}
	rc_close(holder2);
	rc_close(other);
}

/* ---- SIGTERM during activity ---- */

typedef struct acker {
	rc_client *c;
	prod *p;
	_Atomic int acked;
	_Atomic bool stop;
	unsigned char st[MAXMSG]; /* ST_SENT: ack sent, ST_OK: acked */
} acker;

static void *
acker_main(void *arg)
{
	acker *a = arg;

	while (!a->stop) {
		rc_deliver dv;
		rc_results res;
		int rv = rc_wait_deliver(a->c, 50, &dv);

		if (rv < 0) {
			break;
		}
		if (rv == 0) {
			if (a->c->eof) {
				break;
			}
			continue;
		}
		for (size_t j = 0; j < dv.d.n; j++) {
			int i = idx_of(&dv.d.v[j].id, 'a');
			if (i >= 0) {
				a->st[i] = ST_SENT;
			}
		}
		rv = rc_ack_all(a->c, "t", "c", &dv, &res);
		if (rv == TL_OK) {
			for (size_t j = 0; j < res.n; j++) {
				int i = idx_of(&dv.d.v[j].id, 'a');
				if (res.v[j].err == TL_OK && i >= 0) {
					a->st[i] = ST_OK;
					a->acked++;
				}
			}
			rc_results_free(&res);
		}
		rc_deliver_free(&dv);
		if (rv != TL_OK) {
			break;
		}
	}
	return NULL;
}

Test(restart, sigterm_during_activity_exits_cleanly_and_resumes)
{
	static prod pr;
	static acker ak;
	static unsigned char gone[MAXMSG];
	pthread_t tp, ta;
	rc_client *c, *q;
	tlp_topic t;
	int st, exist = 0, due_left = 0, delivered = 0;
	int64_t deadline;
	char id[16];

	rc_broker_start(&B, "e2e-term");
	memset(&pr, 0, sizeof(pr));
	memset(&ak, 0, sizeof(ak));
	pr.c = rc_open(B.url, "stream");
	pr.prefix = 'a';
	pr.mixed = true;
	ak.c = rc_open(B.url, "acker");
	ak.p = &pr;
	TL_PASS(rc_subscribe(ak.c, "t", "c", 30000, 16));
	cr_assert_eq(pthread_create(&tp, NULL, prod_main, &pr), 0);
	cr_assert_eq(pthread_create(&ta, NULL, acker_main, &ak), 0);
	wait_count(&pr.ok, 400, 20000, "acknowledged creates");
	wait_count(&ak.acked, 50, 20000, "acknowledged ACKs");

	st = rc_broker_signal(&B, SIGTERM, 20000);
	cr_assert_neq(st, -2, "the broker did not stop within 20 s of SIGTERM");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "the broker did not exit 0 on SIGTERM (status 0x%x)", st);
	pthread_join(tp, NULL);
	ak.stop = true;
	pthread_join(ta, NULL);
	cr_assert_eq(pr.item_err, 0);
	cr_log_info("stopped after %d creates sent, %d acknowledged, %d acked",
	    (int) pr.sent, (int) pr.ok, (int) ak.acked);
	rc_close(pr.c);
	rc_close(ak.c);

	rc_broker_spawn(&B, 20000);
	q = rc_open(B.url, "checker");
	for (int i = 0; i < pr.sent; i++) {
		tlp_msg m;
		rc_frame *f;
		int rv;

		id_of(id, sizeof(id), 'a', i);
		rv = rc_get(q, "t", id, &m, &f);
		rc_frame_free(f);
		cr_assert(rv == TL_OK || rv == TL_ENOTFOUND, "GET %s: %s", id,
		    tl_strerror(rv));
		if (ak.st[i] == ST_OK) {
			TL_FAIL(rv, TL_ENOTFOUND,
			    "%s was acked before the "
			    "stop but is back",
			    id);
		} else if (pr.st[i] == ST_OK && ak.st[i] == ST_NONE) {
			TL_PASS(rv,
			    "%s was acknowledged before the stop "
			    "but is gone",
			    id);
		}
		gone[i] = rv != TL_OK;
		exist += rv == TL_OK;
		due_left += rv == TL_OK && i % 2 == 0;
	}
	TL_PASS(rc_topic_get(q, "t", &t));
	cr_assert_eq(t.messages, (uint64_t) exist);

	/* The consumer comes back and gets every due message that is left
	 * (its old leases included). */
	c = rc_open(B.url, "acker");
	TL_PASS(rc_subscribe(c, "t", "c", 30000, 1024));
	deadline = tli_mono_ms() + 20000;
	while (delivered < due_left) {
		rc_deliver dv;
		rc_results res;
		int rv;

		cr_assert(tli_mono_ms() < deadline,
		    "after the restart only %d of "
		    "%d due messages came",
		    delivered, due_left);
		rv = rc_wait_deliver(c, 500, &dv);
		cr_assert(rv >= 0);
		if (rv == 0) {
			continue;
		}
		for (size_t j = 0; j < dv.d.n; j++) {
			int i = idx_of(&dv.d.v[j].id, 'a');
			cr_assert(i >= 0 && i % 2 == 0 && !gone[i],
			    "unexpected delivery %.*s", (int) dv.d.v[j].id.n,
			    dv.d.v[j].id.p);
			gone[i] = 1;
		}
		delivered += (int) dv.d.n;
		TL_PASS(rc_ack_all(c, "t", "c", &dv, &res));
		for (size_t j = 0; j < res.n; j++) {
			TL_PASS(res.v[j].err);
		}
		rc_results_free(&res);
		rc_deliver_free(&dv);
	}
	TL_PASS(rc_topic_get(q, "t", &t));
	cr_assert_eq(t.messages, (uint64_t) (exist - due_left),
	    "%llu messages left, expected the %d scheduled ones",
	    (unsigned long long) t.messages, exist - due_left);
	rc_close(c);
	rc_close(q);

	st = rc_broker_signal(&B, SIGTERM, 20000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "the restarted broker did not exit 0 on SIGTERM (status 0x%x)", st);
}

/* ---- SIGTERM after refused clients ---- */

/* Sessions the broker closes itself (here: a HELLO of another protocol
 * version, answered with TL_ENOTSUP and a hang-up) must not keep it from
 * stopping. */
Test(restart, sigterm_after_refused_clients_exits_cleanly)
{
	tli_buf b;
	rc_client *good;
	int st;

	rc_broker_init(&B, "e2e-refused");
	B.log_level = "info"; /* as deployed; debug logs change the timing */
	rc_broker_spawn(&B, 20000);
	TL_PASS(rc_hello_frame(&b, "old-client"));
	b.data[4] = TLP_VERSION + 1;
	for (int i = 0; i < 300; i++) {
		/* Half send a whole HELLO, half the smallest frame; over a
		 * plain socket, which makes a connection quickly. */
		static const uint8_t tiny[] = {0, 0, 0, 9, TLP_VERSION + 1,
		    TLP_OP_HELLO, 0, 0, 0, 0, 0, 1, 0x90};
		struct pollfd pf;
		uint8_t in[256];
		int fd = rc_unix_connect(B.sock);
		ssize_t r = 1;

		cr_assert(fd >= 0, "connect %s: %s", B.sock, strerror(errno));
		if (i % 2) {
			cr_assert_eq(write(fd, tiny, sizeof(tiny)),
			    (ssize_t) sizeof(tiny));
		} else {
			cr_assert_eq(write(fd, b.data, b.len), (ssize_t) b.len);
		}
		/* Read until the broker hangs up (10 s at most). */
		pf.fd = fd;
		pf.events = POLLIN;
		while (r > 0 && poll(&pf, 1, 10000) > 0) {
			r = read(fd, in, sizeof(in));
		}
		cr_assert(
		    r <= 0, "client %d: a refused session was not closed", i);
		close(fd);
	}
	tli_buf_fini(&b);
	good = rc_open(B.url, "good");
	rc_close(good);

	st = rc_broker_signal(&B, SIGTERM, 20000);
	cr_assert_neq(st, -2,
	    "the broker did not stop within 20 s of SIGTERM after 150 refused "
	    "clients");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "the broker did not exit 0 (status 0x%x)", st);
}
