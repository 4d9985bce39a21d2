/*
 * End-to-end: consumers of libtimeline against the real broker — delivery
 * to a callback and to poll, never early, extend / release / delete
 * through leases, lease expiry and re-delivery, credit.
 */
#include "tltest.h"
#include "sdk_util.h"

SB_SUITE(consume, "sdk-cons");

typedef struct seen {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int n;
	int early;
	int errs;
	char bodies[16][16];
} seen;

static void
on_msg(void *arg, tl_lease *l)
{
	seen *s = arg;
	size_t len = 0;
	const char *b = tl_lease_body(l, &len);
	int64_t now = tl_client_broker_now(C);
	int rv = tl_lease_delete(l);

	pthread_mutex_lock(&s->m);
	if (s->n < 16) {
		snprintf(s->bodies[s->n], sizeof(s->bodies[0]), "%.*s",
		    (int) len, b);
	}
	s->n++;
	/* 5 ms of slack for the clock offset estimate */
	s->early += tl_lease_due(l) > now + 5;
	s->errs += rv != TL_OK;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->m);
	tl_lease_free(l);
}

Test(consume, callback_gets_due_messages_and_deletes)
{
	seen s;
	tl_consumer_conf conf = {.topic = "cb",
	    .consumer_id = "c1",
	    .credit = 4,
	    .on_message = on_msg,
	    .arg = &s};
	tl_consumer *k = NULL;
	tl_counts cnt;
	int64_t deadline = tli_mono_ms() + 15000;

	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.m, NULL);
	pthread_cond_init(&s.cv, NULL);
	sb_topic(C, "cb", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	for (int i = 0; i < 5; i++) {
		char body[8];
		snprintf(body, sizeof(body), "m%d", i);
		TL_PASS(tl_put_in(C, "cb", "p", NULL, 200 + 50 * i, body,
		    strlen(body), NULL));
	}
	pthread_mutex_lock(&s.m);
	while (s.n < 5 && tli_mono_ms() < deadline) {
		struct timespec ts;

		tli_deadline(&ts, CLOCK_REALTIME, 50);
		pthread_cond_timedwait(&s.cv, &s.m, &ts);
	}
	pthread_mutex_unlock(&s.m);
	cr_assert_eq(s.n, 5, "got %d of 5 messages", s.n);
	cr_assert_eq(s.early, 0);
	cr_assert_eq(s.errs, 0);
	for (int i = 0; i < 5; i++) {
		char want[8];
		snprintf(want, sizeof(want), "m%d", i);
		cr_assert_str_eq(s.bodies[i], want, "in due order");
	}
	tl_consumer_close(k);
	TL_PASS(tl_count(C, "cb", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
}

Test(consume, poll_extend_release_delete)
{
	tl_consumer_conf conf = {
	    .topic = "pl", .consumer_id = "c1", .lease_ms = 10000, .credit = 8};
	tl_consumer *k = NULL;
	tl_lease *ls[8];
	tl_message *m = NULL;
	uint64_t v0;
	int64_t u0;

	sb_topic(C, "pl", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "pl", "p", "a", 0, "A", 1, NULL));
	TL_PASS(tl_put_in(C, "pl", "p", "b", 0, "B", 1, NULL));
	TL_PASS(tl_put_in(C, "pl", "p", "c", 0, "C", 1, NULL));
	cr_assert_eq(sb_poll_n(k, ls, 3, 10000), 3);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tl_lease_deliveries(ls[i]), 1);
		cr_assert_str_eq(tl_lease_owner(ls[i]), "p");
		cr_assert(tl_lease_until(ls[i]) > tl_lease_due(ls[i]));
		cr_assert_eq(tl_lease_placed_at(ls[i]), tl_lease_due(ls[i]),
		    "a first delivery is due where it was placed");
	}
	/* the broker sees the leases */
	TL_PASS(tl_get(C, "pl", tl_lease_id(ls[0]), &m));
	cr_assert_str_eq(m->consumer, "c1");
	cr_assert_eq(m->version, tl_lease_version(ls[0]));
	tl_message_free(m);

	/* extend: a new version and a later expiry */
	v0 = tl_lease_version(ls[0]);
	u0 = tl_lease_until(ls[0]);
	TL_PASS(tl_lease_extend(ls[0], 60000));
	cr_assert(tl_lease_version(ls[0]) > v0);
	cr_assert(tl_lease_until(ls[0]) > u0);
	TL_FAIL(tl_lease_extend(ls[0], 0), TL_EINVAL);

	/* the owner cannot touch a leased message */
	TL_FAIL(tl_delete(C, "pl", "p", tl_lease_id(ls[1]), 0), TL_ELEASED);

	/* release: it comes back later with a second delivery */
	TL_PASS(tl_lease_release(ls[1], 100, true));
	char relid[TL_MAX_ID_LEN + 1];
	snprintf(relid, sizeof(relid), "%s", tl_lease_id(ls[1]));
	tl_lease_free(ls[1]);
	cr_assert_eq(sb_poll_n(k, &ls[1], 1, 10000), 1);
	cr_assert_str_eq(tl_lease_id(ls[1]), relid);
	cr_assert_eq(tl_lease_deliveries(ls[1]), 2);

	/* delete all three; a second delete fails precisely */
	for (int i = 0; i < 3; i++) {
		TL_PASS(tl_lease_delete(ls[i]));
	}
	TL_NOT_OK(tl_lease_delete(ls[0]));
	for (int i = 0; i < 3; i++) {
		tl_lease_free(ls[i]);
	}
	TL_FAIL(tl_get(C, "pl", "a", &m), TL_ENOTFOUND);
	tl_consumer_close(k);
}

Test(consume, expired_lease_is_delivered_again)
{
	tl_consumer_conf conf = {
	    .topic = "ex", .consumer_id = "c1", .lease_ms = 300, .credit = 2};
	tl_consumer *k = NULL;
	tl_lease *l1 = NULL, *l2 = NULL;
	int rv;

	sb_topic(C, "ex", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "ex", "p", "x", 0, "X", 1, NULL));
	cr_assert_eq(sb_poll_n(k, &l1, 1, 10000), 1);
	/* do not finish: the lease runs out and the message comes back */
	cr_assert_eq(sb_poll_n(k, &l2, 1, 10000), 1);
	cr_assert_str_eq(tl_lease_id(l2), "x");
	cr_assert_eq(tl_lease_deliveries(l2), 2);
	cr_assert(tl_lease_version(l2) > tl_lease_version(l1));
	rv = tl_lease_delete(l1);
	cr_assert(rv == TL_EVERSION || rv == TL_ELEASEEXPIRED, "stale: %s",
	    tl_errname(rv));
	TL_PASS(tl_lease_delete(l2));
	tl_lease_free(l1);
	tl_lease_free(l2);
	tl_consumer_close(k);
}

Test(consume, credit_bounds_leases_held)
{
	tl_consumer_conf conf = {
	    .topic = "cr", .consumer_id = "c1", .lease_ms = 20000, .credit = 2};
	tl_consumer *k = NULL;
	tl_lease *ls[5];
	size_t n;

	sb_topic(C, "cr", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	for (int i = 0; i < 5; i++) {
		TL_PASS(tl_put_in(C, "cr", "p", NULL, 0, "z", 1, NULL));
	}
	cr_assert_eq(sb_poll_n(k, ls, 2, 10000), 2);
	/* nothing more while both are held */
	TL_PASS(tl_consumer_poll(k, ls + 2, 3, &n, 300));
	cr_assert_eq(n, 0);
	TL_PASS(tl_lease_delete(ls[0]));
	cr_assert_eq(sb_poll_n(k, ls + 2, 1, 10000), 1);
	for (int i = 1; i < 3; i++) {
		TL_PASS(tl_lease_delete(ls[i]));
	}
	for (int i = 0; i < 3; i++) {
		tl_lease_free(ls[i]);
	}
	tl_consumer_close(k);
}

typedef struct worker {
	tl_lease *l;
	int rv;
} worker;

static void *
worker_main(void *arg)
{
	worker *w = arg;
	w->rv = tl_lease_delete(w->l);
	return NULL;
}

Test(consume, concurrent_lease_ops_are_batched)
{
	enum { N = 32 };
	tl_consumer_conf conf = {
	    .topic = "co", .consumer_id = "c1", .lease_ms = 20000, .credit = N};
	tl_consumer *k = NULL;
	tl_lease *ls[N];
	pthread_t th[N];
	worker w[N];
	tl_counts cnt;

	sb_topic(C, "co", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	for (int i = 0; i < N; i++) {
		TL_PASS(tl_put_in(C, "co", "p", NULL, 0, "z", 1, NULL));
	}
	cr_assert_eq(sb_poll_n(k, ls, N, 10000), N);
	for (int i = 0; i < N; i++) {
		w[i].l = ls[i];
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		TL_PASS(w[i].rv, "%d", i);
		tl_lease_free(ls[i]);
	}
	TL_PASS(tl_count(C, "co", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	tl_consumer_close(k);
}

Test(consume, bad_subscriptions)
{
	tl_consumer *k = NULL;
	tl_consumer_conf conf = {.topic = "nosuch", .consumer_id = "c"};

	TL_FAIL(tl_consumer_open(&k, C, &conf), TL_ENOTOPIC);
	cr_assert_null(k);
	conf.topic = "default";
	conf.lease_ms = TL_MAX_LEASE_MS + 1;
	TL_FAIL(tl_consumer_open(&k, C, &conf), TL_ELEASELIMIT);
	conf.lease_ms = 0;
	conf.consumer_id = "";
	TL_FAIL(tl_consumer_open(&k, C, &conf), TL_EBADID);
	tl_consumer_close(NULL);
	tl_lease_free(NULL);
}

/* A consumer closed while another thread frees its leases and asks to
 * extend them (a pool of workers stopped after the consumer, as
 * tl-chronos does): every call sees the consumer open or closed, never a
 * consumer being freed (the sanitizer build checks every access). */
typedef struct freer {
	tl_lease **ls;
	size_t n;
} freer;

static void *
freer_main(void *arg)
{
	freer *f = arg;

	for (size_t i = 0; i < f->n; i++) {
		int rv = tl_lease_extend(f->ls[i], 20000);
		cr_assert(rv == TL_OK || rv == TL_ECLOSED, "extend: %s",
		    tl_strerror(rv));
		tl_lease_free(f->ls[i]);
	}
	return NULL;
}

Test(consume, leases_freed_while_their_consumer_closes)
{
	enum { ROUNDS = 8, N = 16 };

	sb_topic(C, "fr", 0);
	for (int r = 0; r < ROUNDS; r++) {
		tl_consumer_conf conf = {.topic = "fr",
		    .consumer_id = "c1",
		    .lease_ms = 20000,
		    .credit = N};
		tl_consumer *k = NULL;
		tl_lease *ls[N];
		freer f = {ls, N};
		pthread_t th;

		TL_PASS(tl_consumer_open(&k, C, &conf));
		for (int i = 0; i < N; i++) {
			TL_PASS(tl_put_in(C, "fr", "p", NULL, 0, "z", 1, NULL));
		}
		cr_assert_eq(sb_poll_n(k, ls, N, 10000), N);
		cr_assert_eq(pthread_create(&th, NULL, freer_main, &f), 0);
		tl_consumer_close(k);
		pthread_join(th, NULL);
		/* the next round's consumer gets them when their leases end:
		 * give each round its messages by deleting what is left */
		for (;;) {
			tl_counts cnt;
			TL_PASS(tl_count(C, "fr", 0, TL_TS_MAX, &cnt));
			if (cnt.available + cnt.waiting + cnt.processing == 0) {
				break;
			}
			TL_PASS(tl_topic_delete(C, "fr"));
			sb_topic(C, "fr", 0);
		}
	}
}
