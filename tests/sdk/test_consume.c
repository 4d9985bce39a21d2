/*
 * End-to-end: consumers of libtimeline against the real broker — delivery
 * to a callback and to poll, never early, extend / release / delete
 * through leases, lease expiry and re-delivery, credit.
 */
#include <unistd.h>

#include "tltest.h"
#include "sdk_util.h"

SB_SUITE(consume, "sdk-cons");

/* What a test's on_message saw (the inline tests use all of it). */
typedef struct seen {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int n;
	int early;
	int errs;
	char bodies[16][16];
	int deleted, del_errs; /* asynchronous deletes done, failed */
	int blocked_delete, blocked_put, blocked_open;
	bool one_thread;
	pthread_t thr;
	int hold_ms;     /* the callback sleeps this long */
	bool in_cb, out; /* a callback started / returned */
} seen;

static void
seen_init(seen *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->m, NULL);
	pthread_cond_init(&s->cv, NULL);
}

/* Under s->m: lease l arrived at broker time now. */
static void
seen_note_locked(seen *s, tl_lease *l, int64_t now)
{
	size_t len = 0;
	const char *b = tl_lease_body(l, &len);

	if (s->n < 16) {
		snprintf(s->bodies[s->n], sizeof(s->bodies[0]), "%.*s",
		    (int) len, b);
	}
	s->n++;
	/* 5 ms of slack for the clock offset estimate */
	s->early += tl_lease_due(l) > now + 5;
	pthread_cond_broadcast(&s->cv);
}

/* Wait (up to 15 s) until *v reaches want; its value then. */
static int
seen_wait(seen *s, const int *v, int want)
{
	int64_t deadline = tli_mono_ms() + 15000;
	int got;

	pthread_mutex_lock(&s->m);
	while (*v < want && tli_mono_ms() < deadline) {
		struct timespec ts;

		tli_deadline(&ts, CLOCK_REALTIME, 50);
		pthread_cond_timedwait(&s->cv, &s->m, &ts);
	}
	got = *v;
	pthread_mutex_unlock(&s->m);
	return got;
}

/* Put m0..m4 on topic, due 200, 250, ... 400 ms from now. */
static void
put_five(const char *topic)
{
	for (int i = 0; i < 5; i++) {
		char body[8];
		snprintf(body, sizeof(body), "m%d", i);
		TL_PASS(tl_put_in(C, topic, "p", NULL, 200 + 50 * i, body,
		    strlen(body), NULL));
	}
}

/* The five of put_five arrived, once each, in due order, none early. */
static void
seen_five(const seen *s)
{
	cr_assert_eq(s->n, 5, "got %d of 5 messages", s->n);
	cr_assert_eq(s->early, 0);
	for (int i = 0; i < 5; i++) {
		char want[8];
		snprintf(want, sizeof(want), "m%d", i);
		cr_assert_str_eq(s->bodies[i], want, "in due order");
	}
}

static void
on_msg(void *arg, tl_lease *l)
{
	seen *s = arg;
	int64_t now = tl_client_broker_now(C);
	int rv = tl_lease_delete(l);

	pthread_mutex_lock(&s->m);
	seen_note_locked(s, l, now);
	s->errs += rv != TL_OK;
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

	seen_init(&s);
	sb_topic(C, "cb", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	put_five("cb");
	seen_wait(&s, &s.n, 5);
	seen_five(&s);
	cr_assert_eq(s.errs, 0);
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

/* Inline delivery: on_message on the connection thread, as each DELIVER
 * frame is read. What it calls there: a blocking call of the client would
 * wait for a reply that only this thread reads, so it is refused at once;
 * the asynchronous delete works and completes on the callback thread. */
typedef struct inl_op {
	seen *s;
	tl_lease *l; /* freed once its delete is done */
} inl_op;

static void
inl_deleted(void *arg, int err)
{
	inl_op *op = arg;
	seen *s = op->s;

	tl_lease_free(op->l);
	free(op);
	pthread_mutex_lock(&s->m);
	s->deleted++;
	s->del_errs += err != TL_OK;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->m);
}

static void
inl_msg(void *arg, tl_lease *l)
{
	seen *s = arg;
	int64_t now = tl_client_broker_now(C);
	inl_op *op;
	tl_consumer_conf other = {.topic = "inl", .consumer_id = "c2"};
	tl_consumer *k2 = NULL;
	int del = tl_lease_delete(l);
	int put = tl_put_in(C, "inl", "p", NULL, 0, "x", 1, NULL);
	int open = tl_consumer_open(&k2, C, &other);

	pthread_mutex_lock(&s->m);
	s->in_cb = true;
	pthread_cond_broadcast(&s->cv);
	if (s->n == 0) {
		s->thr = pthread_self();
		s->one_thread = true;
	} else if (!pthread_equal(s->thr, pthread_self())) {
		s->one_thread = false;
	}
	seen_note_locked(s, l, now);
	s->blocked_delete += del == TL_EINVAL;
	s->blocked_put += put == TL_EINVAL;
	s->blocked_open += open == TL_EINVAL && k2 == NULL;
	pthread_mutex_unlock(&s->m);
	if (s->hold_ms > 0) {
		usleep((useconds_t) s->hold_ms * 1000);
	}
	if ((op = malloc(sizeof(*op))) == NULL) {
		tl_lease_free(l); /* never counted as deleted: the test fails */
		return;
	}
	op->s = s;
	op->l = l;
	if (tl_lease_delete_async(l, inl_deleted, op) != TL_OK) {
		inl_deleted(op, TL_ECLOSED); /* not queued: done never runs */
	}
	pthread_mutex_lock(&s->m);
	s->out = true;
	pthread_mutex_unlock(&s->m);
}

Test(consume, inline_delivery_on_the_connection_thread)
{
	seen s;
	tl_consumer_conf conf = {.topic = "inl",
	    .consumer_id = "c1",
	    .credit = 4,
	    .on_message = inl_msg,
	    .arg = &s,
	    .inline_delivery = true};
	tl_consumer *k = NULL;
	tl_counts cnt;

	seen_init(&s);
	sb_topic(C, "inl", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	put_five("inl");
	cr_assert_eq(seen_wait(&s, &s.deleted, 5), 5, "5 deleted");
	seen_five(&s);
	cr_assert_eq(s.del_errs, 0, "the asynchronous deletes succeed");
	cr_assert(s.one_thread, "one thread runs the callback");
	cr_assert(!pthread_equal(s.thr, pthread_self()));
	cr_assert_eq(s.blocked_delete, 5, "a blocking lease op is refused");
	cr_assert_eq(s.blocked_put, 5, "a blocking request is refused");
	cr_assert_eq(s.blocked_open, 5, "so is opening a consumer");
	tl_consumer_close(k);
	/* nothing was put from the callback, and the client still works */
	TL_PASS(tl_count(C, "inl", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	conf.on_message = NULL;
	TL_FAIL(tl_consumer_open(&k, C, &conf), TL_EINVAL); /* no callback */
}

Test(consume, closing_waits_for_a_running_inline_callback)
{
	seen s;
	tl_consumer_conf conf = {.topic = "inc",
	    .consumer_id = "c1",
	    .on_message = inl_msg,
	    .arg = &s,
	    .inline_delivery = true};
	tl_consumer *k = NULL;
	bool in_cb, out;

	seen_init(&s);
	s.hold_ms = 300;
	sb_topic(C, "inc", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "inc", "p", NULL, 0, "a", 1, NULL));
	pthread_mutex_lock(&s.m);
	while (!s.in_cb) {
		pthread_cond_wait(&s.cv, &s.m);
	}
	out = s.out;
	pthread_mutex_unlock(&s.m);
	cr_assert(!out, "the callback is still running");
	tl_consumer_close(k);
	pthread_mutex_lock(&s.m);
	in_cb = s.in_cb;
	out = s.out;
	pthread_mutex_unlock(&s.m);
	cr_assert(in_cb && out, "close returned only after the callback");
	/* its delete, started as the consumer closed, ends either way */
	cr_assert_eq(seen_wait(&s, &s.deleted, 1), 1);
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
