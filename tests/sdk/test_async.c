/*
 * End-to-end: the asynchronous lease operations of libtimeline
 * (tl_lease_delete_async, tl_lease_extend_async, tl_lease_release_async)
 * against the real broker — many deletes in flight from one thread, the
 * handle updated by an extend, the precise error of a stale lease through
 * done, done called exactly once per queued op and never after an error
 * return, done calling the library (blocking calls included), and deletes
 * started from on_message.
 */
#include "tltest.h"
#include "sdk_util.h"

SB_SUITE(async, "sdk-async");

/* Completions of a test's ops; each op has a slot. */
typedef struct tracker {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
} tracker;

typedef struct slot {
	tracker *t;
	tl_lease *l;
	bool free_lease;  /* done frees the lease (as an on_message would) */
	bool then_delete; /* done calls the blocking tl_lease_delete */
	int calls;
	int err;
	int err2; /* the blocking delete's result */
	pthread_t thr;
} slot;

static void
tracker_init(tracker *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->m, NULL);
	pthread_cond_init(&t->cv, NULL);
}

static void
tracker_fini(tracker *t)
{
	pthread_mutex_destroy(&t->m);
	pthread_cond_destroy(&t->cv);
}

/* A completion came: count it in its slot (calls, err) and wake the test. */
static void
tracker_done(tracker *t, int *calls, int *slot_err, int err)
{
	pthread_mutex_lock(&t->m);
	(*calls)++;
	*slot_err = err;
	t->done++;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->m);
}

static void
on_done(void *arg, int err)
{
	slot *s = arg;
	tracker *t = s->t;

	s->thr = pthread_self();
	if (s->then_delete) {
		s->err2 = tl_lease_delete(s->l);
	}
	if (s->free_lease) {
		tl_lease_free(s->l);
	}
	tracker_done(t, &s->calls, &s->err, err);
}

/* Wait until n completions or 20 s; returns the count. */
static int
tracker_wait(tracker *t, int n)
{
	int64_t deadline = tli_mono_ms() + 20000;
	int got;

	pthread_mutex_lock(&t->m);
	while (t->done < n && tli_mono_ms() < deadline) {
		struct timespec ts;

		tli_deadline(&ts, CLOCK_REALTIME, 50);
		pthread_cond_timedwait(&t->cv, &t->m, &ts);
	}
	got = t->done;
	pthread_mutex_unlock(&t->m);
	return got;
}

/* Put the n messages of p (ids as the caller set them, else made by the
 * broker) with the body "z", due in delay_ms; each must be stored. Frees
 * p. */
static void
put_z(const char *topic, tl_put *p, int n, int64_t delay_ms)
{
	for (int i = 0; i < n; i++) {
		p[i].ts = delay_ms;
		p[i].rel = true;
		p[i].body = "z";
		p[i].body_len = 1;
	}
	TL_PASS(tl_put_batch(C, topic, "p", p, (size_t) n));
	for (int i = 0; i < n; i++) {
		TL_PASS(p[i].err);
	}
	free(p);
}

static void
put_n(const char *topic, int n)
{
	tl_put *p = calloc((size_t) n, sizeof(*p));

	cr_assert_not_null(p);
	put_z(topic, p, n, 0);
}

/* Close the consumer and the client: every queued op has then completed
 * (tl_client_close runs the callbacks still queued before it returns), so
 * a second call of done would be visible in the counts. */
static void
close_all(tl_consumer *k)
{
	tl_consumer_close(k);
	tl_client_close(C);
	C = NULL;
}

Test(async, delete_many_from_one_thread)
{
	enum { N = 500 };
	tl_consumer_conf conf = {
	    .topic = "dm", .consumer_id = "c1", .lease_ms = 30000, .credit = N};
	tl_consumer *k = NULL;
	tl_lease *ls[N];
	slot *sl = calloc(N, sizeof(*sl));
	tracker t;
	tl_counts cnt;

	cr_assert_not_null(sl);
	tracker_init(&t);
	sb_topic(C, "dm", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	put_n("dm", N);
	cr_assert_eq(sb_poll_n(k, ls, N, 15000), N);
	for (int i = 0; i < N; i++) {
		sl[i].t = &t;
		sl[i].l = ls[i];
		sl[i].err = -1;
		TL_PASS(
		    tl_lease_delete_async(ls[i], on_done, &sl[i]), "op %d", i);
	}
	cr_assert_eq(tracker_wait(&t, N), N, "%d of %d completed", t.done, N);
	for (int i = 0; i < N; i++) {
		TL_PASS(sl[i].err, "op %d", i);
		cr_assert(!pthread_equal(sl[i].thr, pthread_self()),
		    "done runs on a library thread");
	}
	TL_PASS(tl_count(C, "dm", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0,
	    "the topic is empty");
	close_all(k);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(sl[i].calls, 1, "op %d: done called %d times", i,
		    sl[i].calls);
		tl_lease_free(ls[i]);
	}
	tracker_fini(&t);
	free(sl);
}

Test(async, extend_and_release_update_the_handle)
{
	tl_consumer_conf conf = {
	    .topic = "ex", .consumer_id = "c1", .lease_ms = 10000, .credit = 2};
	tl_consumer *k = NULL;
	tl_lease *l = NULL;
	tl_message *m = NULL;
	slot s[2];
	tracker t;
	uint64_t v0, v1;
	int64_t u0;

	tracker_init(&t);
	memset(s, 0, sizeof(s));
	s[0].t = s[1].t = &t;
	sb_topic(C, "ex", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "ex", "p", "a", 0, "A", 1, NULL));
	cr_assert_eq(sb_poll_n(k, &l, 1, 10000), 1);
	v0 = tl_lease_version(l);
	u0 = tl_lease_until(l);

	TL_PASS(tl_lease_extend_async(l, 60000, on_done, &s[0]));
	cr_assert_eq(tracker_wait(&t, 1), 1);
	TL_PASS(s[0].err);
	v1 = tl_lease_version(l);
	cr_assert(v1 > v0, "a new version");
	cr_assert(tl_lease_until(l) > u0 + 40000, "a later expiry");
	TL_PASS(tl_get(C, "ex", "a", &m));
	cr_assert_eq(m->version, v1, "the broker's version");
	cr_assert_eq(m->ts, tl_lease_until(l), "the broker's expiry");
	tl_message_free(m);

	/* release: the lease ends, the message is back with a new version */
	TL_PASS(tl_lease_release_async(l, 60000, true, on_done, &s[1]));
	cr_assert_eq(tracker_wait(&t, 2), 2);
	TL_PASS(s[1].err);
	cr_assert(tl_lease_version(l) > v1);
	TL_PASS(tl_get(C, "ex", "a", &m));
	cr_assert_str_eq(m->consumer, "", "no lease any more");
	cr_assert_eq(m->version, tl_lease_version(l));
	tl_message_free(m);
	close_all(k);
	cr_assert_eq(s[0].calls, 1);
	cr_assert_eq(s[1].calls, 1);
	tl_lease_free(l);
	tracker_fini(&t);
}

Test(async, stale_lease_reports_the_precise_error)
{
	tl_consumer_conf conf = {
	    .topic = "st", .consumer_id = "c1", .lease_ms = 1000, .credit = 2};
	tl_consumer *k = NULL;
	tl_lease *l1 = NULL, *l2 = NULL;
	slot s[3];
	tracker t;
	int blocking;

	tracker_init(&t);
	memset(s, 0, sizeof(s));
	for (int i = 0; i < 3; i++) {
		s[i].t = &t;
	}
	sb_topic(C, "st", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "st", "p", "x", 0, "X", 1, NULL));
	cr_assert_eq(sb_poll_n(k, &l1, 1, 10000), 1);
	/* l1 runs out; the message comes back as l2 (a new version) */
	cr_assert_eq(sb_poll_n(k, &l2, 1, 10000), 1);
	cr_assert_str_eq(tl_lease_id(l2), "x");
	cr_assert(tl_lease_version(l2) > tl_lease_version(l1));

	TL_PASS(tl_lease_delete_async(l1, on_done, &s[0]));
	TL_PASS(tl_lease_extend_async(l1, 5000, on_done, &s[1]));
	TL_PASS(tl_lease_release_async(l1, 0, true, on_done, &s[2]));
	cr_assert_eq(tracker_wait(&t, 3), 3);
	/* The broker answers TL_ELEASEEXPIRED while the run-out lease is
	 * still this version and TL_EVERSION once it was leased again (as
	 * here); done carries exactly what the blocking call returns. */
	blocking = tl_lease_delete(l1);
	cr_assert(blocking == TL_EVERSION || blocking == TL_ELEASEEXPIRED,
	    "blocking: %s", tl_errname(blocking));
	TL_CODE_EQ(s[0].err, blocking, "delete");
	TL_CODE_EQ(s[1].err, tl_lease_extend(l1, 5000), "extend");
	TL_CODE_EQ(s[2].err, tl_lease_release(l1, 0, true), "release");
	TL_CODE_EQ(s[1].err, blocking);
	TL_CODE_EQ(s[2].err, blocking);
	/* the live lease is unaffected */
	TL_PASS(tl_lease_delete(l2));
	close_all(k);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(s[i].calls, 1);
	}
	tl_lease_free(l1);
	tl_lease_free(l2);
	tracker_fini(&t);
}

Test(async, error_returns_never_call_done)
{
	tl_consumer_conf conf = {
	    .topic = "er", .consumer_id = "c1", .lease_ms = 10000, .credit = 1};
	tl_consumer *k = NULL;
	tl_lease *l = NULL;
	slot s;
	tracker t;

	tracker_init(&t);
	memset(&s, 0, sizeof(s));
	s.t = &t;
	sb_topic(C, "er", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	TL_PASS(tl_put_in(C, "er", "p", "a", 0, "A", 1, NULL));
	cr_assert_eq(sb_poll_n(k, &l, 1, 10000), 1);

	TL_FAIL(tl_lease_delete_async(NULL, on_done, &s), TL_EINVAL);
	TL_FAIL(tl_lease_delete_async(l, NULL, &s), TL_EINVAL);
	TL_FAIL(tl_lease_extend_async(l, 0, on_done, &s), TL_EINVAL);
	TL_FAIL(tl_lease_extend_async(l, -5, on_done, &s), TL_EINVAL);
	TL_FAIL(tl_lease_release_async(l, -1, true, on_done, &s), TL_EINVAL);
	TL_FAIL(tl_lease_release_async(l, 0, true, NULL, &s), TL_EINVAL);

	/* after its consumer closed, the handle refuses at once */
	tl_consumer_close(k);
	k = NULL;
	TL_FAIL(tl_lease_delete_async(l, on_done, &s), TL_ECLOSED);
	TL_FAIL(tl_lease_extend_async(l, 1000, on_done, &s), TL_ECLOSED);
	TL_FAIL(tl_lease_release_async(l, 0, true, on_done, &s), TL_ECLOSED);
	close_all(NULL);
	cr_assert_eq(s.calls, 0, "done was called %d times", s.calls);
	cr_assert_eq(t.done, 0);
	tl_lease_free(l);
	tracker_fini(&t);
}

Test(async, done_may_call_blocking_ops_and_free)
{
	enum { N = 16 };
	tl_consumer_conf conf = {
	    .topic = "cb", .consumer_id = "c1", .lease_ms = 10000, .credit = N};
	tl_consumer *k = NULL;
	tl_lease *ls[N];
	slot s[N];
	tracker t;
	tl_counts cnt;

	tracker_init(&t);
	memset(s, 0, sizeof(s));
	sb_topic(C, "cb", 0);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	put_n("cb", N);
	cr_assert_eq(sb_poll_n(k, ls, N, 10000), N);
	/* extend, then from done (the callback thread) a blocking delete
	 * and the handle's free */
	for (int i = 0; i < N; i++) {
		s[i].t = &t;
		s[i].l = ls[i];
		s[i].then_delete = true;
		s[i].free_lease = true;
		TL_PASS(tl_lease_extend_async(ls[i], 20000, on_done, &s[i]));
	}
	cr_assert_eq(tracker_wait(&t, N), N);
	for (int i = 0; i < N; i++) {
		TL_PASS(s[i].err, "%d", i);
		TL_PASS(s[i].err2, "%d", i);
	}
	TL_PASS(tl_count(C, "cb", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	close_all(k);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(s[i].calls, 1);
	}
	tracker_fini(&t);
}

/* The bench's pattern: on_message starts an async delete and returns; done
 * frees the lease. */
typedef struct msg_state {
	tracker t;
	_Atomic int started;
	_Atomic int start_errs;
	slot *slots;
	int cap;
} msg_state;

static void
on_msg_async(void *arg, tl_lease *l)
{
	msg_state *ms = arg;
	int i = ms->started++;
	slot *s;

	if (i >= ms->cap) {
		tl_lease_free(l);
		return;
	}
	s = &ms->slots[i];
	s->t = &ms->t;
	s->l = l;
	s->free_lease = true;
	if (tl_lease_delete_async(l, on_done, s) != TL_OK) {
		ms->start_errs++;
		tl_lease_free(l);
	}
}

Test(async, on_message_deletes_without_blocking)
{
	enum { N = 300 };
	msg_state ms;
	tl_consumer_conf conf = {.topic = "om",
	    .consumer_id = "c1",
	    .lease_ms = 30000,
	    .credit = 64,
	    .on_message = on_msg_async,
	    .arg = &ms};
	tl_consumer *k = NULL;
	tl_counts cnt;

	memset(&ms, 0, sizeof(ms));
	tracker_init(&ms.t);
	ms.cap = N;
	ms.slots = calloc(N, sizeof(*ms.slots));
	cr_assert_not_null(ms.slots);
	sb_topic(C, "om", 0);
	put_n("om", N);
	TL_PASS(tl_consumer_open(&k, C, &conf));
	cr_assert_eq(
	    tracker_wait(&ms.t, N), N, "%d of %d deleted", ms.t.done, N);
	cr_assert_eq(ms.start_errs, 0);
	for (int i = 0; i < N; i++) {
		TL_PASS(ms.slots[i].err, "%d", i);
	}
	TL_PASS(tl_count(C, "om", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	close_all(k);
	cr_assert_eq(ms.started, N, "no message delivered twice");
	for (int i = 0; i < N; i++) {
		cr_assert_eq(ms.slots[i].calls, 1);
	}
	tracker_fini(&ms.t);
	free(ms.slots);
}

/* ---- tl_move_async ---- */

typedef struct mslot {
	tracker *t;
	const char *topic;
	char id[32];
	bool then_get; /* done calls the blocking tl_get */
	int calls;
	int err;
	int get_err;
	int64_t got_ts;
	pthread_t thr;
} mslot;

static void
on_moved(void *arg, int err)
{
	mslot *s = arg;
	tracker *t = s->t;

	s->thr = pthread_self();
	if (s->then_get) {
		tl_message *m = NULL;
		s->get_err = tl_get(C, s->topic, s->id, &m);
		if (s->get_err == TL_OK) {
			s->got_ts = m->ts;
		}
		tl_message_free(m);
	}
	tracker_done(t, &s->calls, &s->err, err);
}

/* n messages with ids "m0".."m{n-1}" in topic, owned by group "p", due in
 * an hour. */
static void
put_ids(const char *topic, mslot *sl, int n)
{
	tl_put *p = calloc((size_t) n, sizeof(*p));

	cr_assert_not_null(p);
	for (int i = 0; i < n; i++) {
		snprintf(sl[i].id, sizeof(sl[i].id), "m%d", i);
		p[i].id = sl[i].id;
	}
	put_z(topic, p, n, 3600000);
}

Test(async, move_many_from_one_thread)
{
	enum { N = 400 };
	mslot *sl = calloc(N, sizeof(*sl));
	int64_t before;
	tracker t;

	cr_assert_not_null(sl);
	tracker_init(&t);
	sb_topic(C, "mv", 0);
	put_ids("mv", sl, N);
	before = tl_client_broker_now(C);
	for (int i = 0; i < N; i++) {
		sl[i].t = &t;
		sl[i].topic = "mv";
		sl[i].err = -1;
		sl[i].then_get = i % 50 == 0;
		/* half relative, half absolute */
		TL_PASS(tl_move_async(C, "mv", "p", sl[i].id, 0,
		            i % 2 ? 7200000 : before + 7200000, i % 2 == 1,
		            on_moved, &sl[i]),
		    "move %d", i);
	}
	cr_assert_eq(tracker_wait(&t, N), N, "%d of %d completed", t.done, N);
	for (int i = 0; i < N; i++) {
		tl_message *m = NULL;
		TL_PASS(sl[i].err, "move %d", i);
		cr_assert(!pthread_equal(sl[i].thr, pthread_self()),
		    "done runs on a library thread");
		if (sl[i].then_get) {
			TL_PASS(sl[i].get_err, "a blocking call from done");
			cr_assert_geq(sl[i].got_ts, before + 7200000 - 60000);
		}
		TL_PASS(tl_get(C, "mv", sl[i].id, &m));
		cr_assert_geq(m->ts, before + 7200000 - 60000,
		    "message %d was moved (ts %lld)", i, (long long) m->ts);
		cr_assert_eq(m->version, 2, "one move, one new version");
		tl_message_free(m);
	}
	tl_client_close(C);
	C = NULL;
	for (int i = 0; i < N; i++) {
		cr_assert_eq(sl[i].calls, 1, "move %d: done called %d times", i,
		    sl[i].calls);
	}
	tracker_fini(&t);
	free(sl);
}

Test(async, move_reports_the_precise_error)
{
	mslot sl[4];
	tracker t;

	memset(sl, 0, sizeof(sl));
	tracker_init(&t);
	sb_topic(C, "me", 0);
	put_ids("me", sl, 1);
	for (int i = 0; i < 4; i++) {
		sl[i].t = &t;
		sl[i].err = -1;
	}
	/* unknown id, another owner, a stale version, then a good one */
	TL_PASS(tl_move_async(
	    C, "me", "p", "nope", 0, 1000, true, on_moved, &sl[0]));
	TL_PASS(
	    tl_move_async(C, "me", "q", "m0", 0, 1000, true, on_moved, &sl[1]));
	TL_PASS(
	    tl_move_async(C, "me", "p", "m0", 7, 1000, true, on_moved, &sl[2]));
	cr_assert_eq(tracker_wait(&t, 3), 3);
	TL_FAIL(sl[0].err, TL_ENOTFOUND);
	TL_FAIL(sl[1].err, TL_ENOTOWNER);
	TL_FAIL(sl[2].err, TL_EVERSION);
	TL_PASS(
	    tl_move_async(C, "me", "p", "m0", 1, 1000, true, on_moved, &sl[3]));
	cr_assert_eq(tracker_wait(&t, 4), 4);
	TL_PASS(sl[3].err);
	close_all(NULL);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(
		    sl[i].calls, 1, "move %d: %d calls", i, sl[i].calls);
	}
	tracker_fini(&t);
}

Test(async, move_error_returns_never_call_done)
{
	char big[TL_MAX_ID_LEN + 2];
	mslot s;
	tracker t;

	tracker_init(&t);
	memset(&s, 0, sizeof(s));
	s.t = &t;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	sb_topic(C, "mr", 0);
	TL_FAIL(tl_move_async(NULL, "mr", "p", "a", 0, 1, true, on_moved, &s),
	    TL_EINVAL);
	TL_FAIL(
	    tl_move_async(C, "mr", "p", "a", 0, 1, true, NULL, &s), TL_EINVAL);
	TL_FAIL(tl_move_async(C, "mr", "p", NULL, 0, 1, true, on_moved, &s),
	    TL_EINVAL);
	TL_FAIL(tl_move_async(C, "mr", "p", "", 0, 1, true, on_moved, &s),
	    TL_EBADID);
	TL_FAIL(tl_move_async(C, "mr", "p", big, 0, 1, true, on_moved, &s),
	    TL_ETOOLARGE);
	TL_FAIL(tl_move_async(C, "mr", "", "a", 0, 1, true, on_moved, &s),
	    TL_EBADID);
	TL_FAIL(tl_move_async(C, "", "p", "a", 0, 1, true, on_moved, &s),
	    TL_EBADID);
	close_all(NULL);
	cr_assert_eq(s.calls, 0, "done was called %d times", s.calls);
	cr_assert_eq(t.done, 0);
	tracker_fini(&t);
}

Test(async, close_with_moves_in_flight_completes_each_once)
{
	enum { N = 300 };
	mslot *sl = calloc(N, sizeof(*sl));
	tracker t;
	int started = 0;

	cr_assert_not_null(sl);
	tracker_init(&t);
	sb_topic(C, "mc", 0);
	put_ids("mc", sl, N);
	for (int i = 0; i < N; i++) {
		sl[i].t = &t;
		sl[i].err = -1;
		if (tl_move_async(C, "mc", "p", sl[i].id, 0, 5000, true,
		        on_moved, &sl[i]) == TL_OK) {
			started++;
		} else {
			sl[i].calls = -1; /* never started */
		}
	}
	tl_client_close(C);
	C = NULL;
	cr_assert_eq(
	    t.done, started, "%d of %d completed by close", t.done, started);
	for (int i = 0; i < N; i++) {
		if (sl[i].calls == -1) {
			continue;
		}
		cr_assert_eq(
		    sl[i].calls, 1, "move %d: %d calls", i, sl[i].calls);
		cr_assert(sl[i].err == TL_OK || sl[i].err == TL_ECLOSED ||
		        sl[i].err == TL_ECONN,
		    "move %d: %s", i, tl_errname(sl[i].err));
	}
	tracker_fini(&t);
	free(sl);
}
