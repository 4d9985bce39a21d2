/*
 * End-to-end: the broker is killed and restarted under a client. Requests
 * fail with TL_ECONN while it is down and work again after it is back; an
 * open consumer is re-subscribed and keeps (or gets back) its leases. Over
 * ipc:// (nng's stream) and over tcp:// (the client's own socket,
 * sdk/sock.c); and a listener that never answers, or none at all.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tltest.h"
#include "raw_client.h"
#include "sdk_util.h"

static sb_broker B;

static void
teardown(void)
{
	sb_stop(&B);
}

TestSuite(reconnect, .fini = teardown, .timeout = 60);

/* The consumer of both lease tests: long leases, so none runs out. */
static const tl_consumer_conf keeper = {
    .topic = "rc", .consumer_id = "keeper", .lease_ms = 30000, .credit = 4};

/* Start the broker (tag), a client (over TCP or ipc), topic "rc", the
 * consumer and m1. */
static void
start_keeper(const char *tag, bool tcp, tl_client **c, tl_consumer **k)
{
	sb_start(&B, tag);
	*c = tcp ? sb_client_tcp(&B) : sb_client(&B);
	sb_topic(*c, "rc", 0);
	TL_PASS(tl_consumer_open(k, *c, &keeper));
	TL_PASS(tl_put_in(*c, "rc", "p", "m1", 0, "one", 3, NULL));
}

static int
count_all(tl_client *c, tl_counts *k)
{
	return tl_count(c, "rc", 0, TL_TS_MAX, k);
}

static void
fail_then_work(const char *tag, bool tcp)
{
	tl_client *c;
	tl_consumer *k = NULL;
	tl_lease *ls[2] = {NULL, NULL}, *back = NULL;
	tl_counts cnt;
	size_t n = 0, got = 0;
	int64_t deadline;
	uint64_t v2;
	int rv;

	start_keeper(tag, tcp, &c, &k);
	TL_PASS(tl_put_in(c, "rc", "p", "m2", 0, "two", 3, NULL));
	deadline = tli_mono_ms() + 10000;
	while (got < 2 && tli_mono_ms() < deadline) {
		TL_PASS(tl_consumer_poll(k, ls + got, 2 - got, &n, 200));
		got += n;
	}
	cr_assert_eq(got, 2);
	if (strcmp(tl_lease_id(ls[0]), "m1") != 0) {
		tl_lease *t = ls[0];
		ls[0] = ls[1];
		ls[1] = t;
	}
	/* keep the handle of m1; drop the handle of m2 without finishing it */
	v2 = tl_lease_version(ls[1]);
	tl_lease_free(ls[1]);

	sb_kill(&B, SIGKILL);
	deadline = tli_mono_ms() + 10000;
	do {
		rv = count_all(c, &cnt);
	} while (rv == TL_OK && tli_mono_ms() < deadline);
	TL_FAIL(rv, TL_ECONN, "while down");
	TL_FAIL(tl_put_in(c, "rc", "p", "m3", 0, "", 0, NULL), TL_ECONN);
	TL_FAIL(tl_lease_extend(ls[0], 30000), TL_ECONN);

	unlink(B.sock);
	sb_spawn(&B);
	deadline = tli_mono_ms() + 15000;
	do {
		rv = count_all(c, &cnt);
	} while (rv != TL_OK && tli_mono_ms() < deadline);
	TL_PASS(rv, "after restart");
	cr_assert_eq(cnt.processing, 2);

	/* m2's lease is delivered again to the same consumer id */
	TL_PASS(tl_consumer_poll(k, &back, 1, &n, 10000));
	cr_assert_eq(n, 1);
	cr_assert_str_eq(tl_lease_id(back), "m2");
	cr_assert_eq(tl_lease_version(back), v2);
	/* and the kept handle of m1 still works */
	TL_PASS(tl_lease_extend(ls[0], 30000));
	TL_PASS(tl_lease_delete(ls[0]));
	TL_PASS(tl_lease_delete(back));
	tl_lease_free(ls[0]);
	tl_lease_free(back);
	TL_PASS(count_all(c, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	tl_consumer_close(k);
	tl_client_close(c);
}

Test(reconnect, requests_fail_then_work_and_leases_come_back)
{
	fail_then_work("sdk-rc", false);
}

Test(reconnect, requests_fail_then_work_and_leases_come_back_over_tcp)
{
	fail_then_work("sdk-rct", true);
}

/* A lease the application holds whose version moved without its handle
 * knowing (here another session of the same consumer id extended it; in
 * a failover, an extend whose answer was lost) is recovered when the
 * client subscribes again: the handle takes the broker's version and goes
 * on working, and the lease is not handed to the application twice. */
Test(reconnect, a_held_lease_that_moved_is_adopted_not_delivered_twice)
{
	tl_client *c;
	tl_consumer *k = NULL;
	tl_lease *l = NULL, *again = NULL;
	tlp_result res;
	tl_counts cnt;
	rc_client *raw;
	size_t n = 0;
	int64_t deadline;

	start_keeper("sdk-rc3", false, &c, &k);
	TL_PASS(tl_consumer_poll(k, &l, 1, &n, 10000));
	cr_assert_eq(n, 1);

	raw = rc_open(B.url, "other");
	TL_PASS(rc_one(raw, TLP_OP_EXTEND, "rc", "keeper", "m1",
	    tl_lease_version(l), 20000, true, NULL, &res));
	rc_close(raw);
	cr_assert_gt(res.version, tl_lease_version(l));

	sb_kill(&B, SIGKILL);
	unlink(B.sock);
	sb_spawn(&B);
	deadline = tli_mono_ms() + 15000;
	while (tl_lease_version(l) != res.version && tli_mono_ms() < deadline) {
		tt_nap_ms(10);
	}
	cr_assert_eq(tl_lease_version(l), res.version,
	    "the handle has v%llu, the broker v%llu",
	    (unsigned long long) tl_lease_version(l),
	    (unsigned long long) res.version);
	cr_assert_eq(tl_lease_until(l), res.ts);
	TL_PASS(tl_consumer_poll(k, &again, 1, &n, 0));
	cr_assert_eq(n, 0, "the held lease was delivered a second time");
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	TL_PASS(count_all(c, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	tl_consumer_close(k);
	tl_client_close(c);
}

/* A lease pushed to the client but not yet taken by the application
 * (queued) when the broker died, and run out before it came back, is not
 * handed over after the reconnect: the message is leased anew (a new
 * version, a lease that runs) and only that lease reaches the
 * application. */
Test(reconnect, a_queued_lease_that_ran_out_meanwhile_is_not_handed_over)
{
	static const tl_consumer_conf brief = {
	    .topic = "rc", .consumer_id = "brief", .lease_ms = 1000};
	tl_client *c;
	tl_consumer *k = NULL;
	tl_lease *l = NULL;
	tl_message *m = NULL;
	int64_t until, deadline;
	size_t n = 0;

	sb_start(&B, "sdk-rc4");
	c = sb_client(&B);
	sb_topic(c, "rc", 0);
	TL_PASS(tl_consumer_open(&k, c, &brief));
	TL_PASS(tl_put_in(c, "rc", "p", "m1", 0, "one", 3, NULL));
	/* leased to "brief" (pushed once durable); not polled */
	deadline = tli_mono_ms() + 10000;
	do {
		tl_message_free(m);
		m = NULL;
		TL_PASS(tl_get(c, "rc", "m1", &m));
	} while (m->consumer[0] == '\0' && tli_mono_ms() < deadline);
	cr_assert_str_eq(m->consumer, "brief");
	until = m->ts;
	tl_message_free(m);
	tt_nap_ms(100); /* the push reaches the client's queue */

	sb_kill(&B, SIGKILL);
	while (tli_wall_ms() < until + 200) {
		tt_nap_ms(20);
	}
	unlink(B.sock);
	sb_spawn(&B);

	TL_PASS(tl_consumer_poll(k, &l, 1, &n, 15000));
	cr_assert_eq(n, 1);
	cr_assert_str_eq(tl_lease_id(l), "m1");
	cr_assert_gt(tl_lease_until(l), until,
	    "handed over the lease that ran out at %lld (now %lld)",
	    (long long) until, (long long) tli_wall_ms());
	TL_PASS(tl_lease_delete(l), "deleting the handed-over lease");
	tl_lease_free(l);
	tl_consumer_close(k);
	tl_client_close(c);
}

static void
close_while_down(const char *tag, bool tcp)
{
	tl_client *c;
	tl_counts cnt;
	int64_t deadline;

	sb_start(&B, tag);
	c = tcp ? sb_client_tcp(&B) : sb_client(&B);
	sb_kill(&B, SIGKILL);
	deadline = tli_mono_ms() + 10000;
	while (count_all(c, &cnt) != TL_ECONN && tli_mono_ms() < deadline) {
	}
	tl_client_close(c);
}

Test(reconnect, close_while_down_does_not_hang)
{
	close_while_down("sdk-rc2", false);
}

Test(reconnect, close_while_down_does_not_hang_over_tcp)
{
	close_while_down("sdk-rc2t", true);
}

/* A listener that accepts the connection and never answers HELLO (a hung
 * broker, another service on the port): tl_client_open fails with
 * TL_ETIMEDOUT once its timeout has passed, not before and not long
 * after; with nothing listening any more, TL_ECONN at once. And a host
 * name is resolved (tcp://localhost:PORT reaches the broker). */
Test(reconnect, a_silent_listener_times_out_and_a_closed_port_is_refused)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	tl_opts *o = NULL;
	tl_client *c = NULL;
	tl_counts cnt;
	char url[64];
	int64_t t0, ms;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(ls >= 0);
	cr_assert_eq(bind(ls, (struct sockaddr *) &a, sizeof(a)), 0);
	cr_assert_eq(listen(ls, 4), 0);
	cr_assert_eq(getsockname(ls, (struct sockaddr *) &a, &len), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, url));
	TL_PASS(tl_opts_set_timeout(o, 400));
	t0 = tli_mono_ms();
	TL_FAIL(tl_client_open(&c, o), TL_ETIMEDOUT);
	ms = tli_mono_ms() - t0;
	cr_assert(
	    ms >= 390 && ms < 3000, "gave up after %lld ms", (long long) ms);
	cr_assert_null(c);
	close(ls);
	t0 = tli_mono_ms();
	TL_FAIL(tl_client_open(&c, o), TL_ECONN);
	cr_assert(tli_mono_ms() - t0 < 1000);
	tl_opts_free(o);

	sb_start(&B, "sdk-rc5");
	snprintf(url, sizeof(url), "tcp://localhost:%s",
	    strrchr(B.tcp_url, ':') + 1);
	c = sb_client_url(url, 5000, NULL);
	TL_FAIL(count_all(c, &cnt), TL_ENOTOPIC, "the broker answers");
	tl_client_close(c);
}
