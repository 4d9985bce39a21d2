/*
 * End-to-end: named leases (tl_lock_try, tl_lock, tlctl lock) against the
 * real broker — mutual exclusion between contending clients, a killed
 * holder's lock taken over within its lease, stale holders fenced, the
 * held error with its end, creation on demand, bad input, and a lock's
 * lease kept away from the topic's subscribers while it is held.
 */
#include "tltest.h"
#include "sdk_util.h"

SB_SUITE(lock, "sdk-lock");

static tl_lock_conf
lconf(const char *topic, const char *id, const char *who, int64_t lease_ms,
    const char *group)
{
	tl_lock_conf c;

	memset(&c, 0, sizeof(c));
	c.topic = topic;
	c.id = id;
	c.consumer_id = who;
	c.lease_ms = lease_ms;
	c.create_group = group;
	return c;
}

/* GET's view of the lock: holder, version, ts. */
static void
peek(const char *topic, const char *id, char *holder, size_t cap,
    uint64_t *version, int64_t *ts)
{
	tl_message *m = NULL;

	TL_PASS(tl_get(C, topic, id, &m));
	snprintf(holder, cap, "%s", m->consumer);
	*version = m->version;
	*ts = m->ts;
	tl_message_free(m);
}

/* ---- mutual exclusion ---- */

#define ROUNDS 40

typedef struct span {
	int64_t from, to; /* monotonic µs: [acquired, released) */
} span;

typedef struct racer {
	const char *who;
	tl_client *c;
	span v[ROUNDS];
	int n;
	int err;
} racer;

static _Atomic int holders;
static _Atomic int overlap;

static int64_t
mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *
racer_main(void *arg)
{
	racer *r = arg;
	tl_lock_conf conf = lconf("locks", "sync", r->who, 5000, "g");

	for (int i = 0; i < ROUNDS; i++) {
		tl_lease *l = NULL;
		int rv = tl_lock(r->c, &conf, 20000, &l);

		if (rv != TL_OK) {
			r->err = rv;
			return NULL;
		}
		r->v[r->n].from = mono_us();
		if (atomic_fetch_add(&holders, 1) != 0) {
			atomic_fetch_add(&overlap, 1);
		}
		tt_nap_ms(1); /* the work */
		atomic_fetch_sub(&holders, 1);
		r->v[r->n].to = mono_us();
		r->n++;
		rv = tl_lease_release(l, 0, true);
		tl_lease_free(l);
		if (rv != TL_OK) {
			r->err = rv;
			return NULL;
		}
	}
	return NULL;
}

static int
span_cmp(const void *a, const void *b)
{
	const span *x = a, *y = b;

	return x->from < y->from ? -1 : x->from > y->from;
}

Test(lock, two_clients_contend_and_exactly_one_holds_at_any_moment)
{
	racer r[2] = {{.who = "a"}, {.who = "b"}};
	pthread_t th[2];
	span all[2 * ROUNDS];
	int n = 0;

	sb_topic(C, "locks", 0);
	for (int i = 0; i < 2; i++) {
		r[i].c = sb_client(&B);
		pthread_create(&th[i], NULL, racer_main, &r[i]);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		TL_PASS(r[i].err, "client %s", r[i].who);
		cr_assert_eq(r[i].n, ROUNDS);
		memcpy(all + n, r[i].v, sizeof(span) * (size_t) r[i].n);
		n += r[i].n;
		tl_client_close(r[i].c);
	}
	qsort(all, (size_t) n, sizeof(span), span_cmp);
	for (int i = 1; i < n; i++) {
		cr_assert(all[i].from >= all[i - 1].to,
		    "holds %d and %d overlap by %lld us", i - 1, i,
		    (long long) (all[i - 1].to - all[i].from));
	}
	cr_assert_eq(atomic_load(&overlap), 0);
}

/* ---- a holder that dies ---- */

Test(lock, a_killed_holder_loses_the_lock_within_its_lease)
{
	tt_proc p;
	tl_lock_conf conf = lconf("locks", "job", "b", 5000, NULL);
	tl_lease *l = NULL;
	int64_t until = 0, killed, got;

	sb_topic(C, "locks", 0);
	tt_proc_init(&p, TL_TEST_BINDIR "/sdk/tlctl", B.dir, "holder");
	p.conf_flag = NULL;
	tt_proc_args(&p, "--url", B.url, "lock", "locks", "job", "--consumer",
	    "a", "--lease", "1500ms", "--create", "g", "--hold", "60s", NULL);
	tt_proc_spawn(&p);
	cr_assert(tt_proc_log_wait(&p, "locked job", 10000),
	    "tlctl lock did not take the lock");
	TL_FAIL(tl_lock_try(C, &conf, &l, &until), TL_ELEASED);
	cr_assert_gt(until, tl_client_broker_now(C));
	/* Outlive two heartbeats: the holder extends, it does not run out. */
	tt_nap_ms(1200);
	TL_FAIL(tl_lock_try(C, &conf, &l, &until), TL_ELEASED);
	tt_proc_kill(&p);
	killed = tl_client_broker_now(C);
	TL_PASS(tl_lock(C, &conf, 5000, &l));
	got = tl_client_broker_now(C);
	cr_assert_leq(got - killed, 1500 + 500,
	    "took %lld ms after the kill; the lease is 1500 ms",
	    (long long) (got - killed));
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	tt_proc_fini(&p);
}

/* tlctl lock: a usage error, a held lock (exit 1, until when), a take. */
static int
tlctl_run(const char *name, const char *topic, const char *id,
    const char *consumer, tt_proc *p)
{
	tt_proc_init(p, TL_TEST_BINDIR "/sdk/tlctl", B.dir, name);
	p->conf_flag = NULL;
	tt_proc_args(p, "--url", B.url, "lock", topic, id, NULL);
	if (consumer != NULL) {
		tt_proc_args(p, "--consumer", consumer, "--lease", "5s", NULL);
	}
	tt_proc_spawn(p);
	return tt_proc_wait_exit(p, 10000);
}

Test(lock, tlctl_lock_exit_codes_and_messages)
{
	tl_lock_conf conf = lconf("locks", "t1", "a", 10000, "g");
	tl_lease *l = NULL;
	tt_proc p;

	sb_topic(C, "locks", 0);
	cr_assert_eq(tlctl_run("usage", "locks", "t1", NULL, &p), 2);
	cr_assert(tt_proc_log_wait(&p, "--consumer", 1000));
	tt_proc_fini(&p);
	TL_PASS(tl_lock_try(C, &conf, &l, NULL));
	cr_assert_eq(tlctl_run("held", "locks", "t1", "b", &p), 1);
	cr_assert(tt_proc_log_wait(&p, "is held until", 1000));
	tt_proc_fini(&p);
	TL_PASS(tl_lease_release(l, 0, true));
	tl_lease_free(l);
	cr_assert_eq(tlctl_run("take", "locks", "t1", "b", &p), 0);
	cr_assert(tt_proc_log_wait(&p, "locked t1 version 4 until", 1000));
	tt_proc_fini(&p);
}

/* ---- stale holders ---- */

Test(lock, a_stale_holders_operations_fail_and_change_nothing)
{
	tl_lock_conf ca = lconf("locks", "s", "a", 200, "g");
	tl_lock_conf cb = lconf("locks", "s", "b", 10000, NULL);
	tl_lease *la = NULL, *la2 = NULL, *lb = NULL;
	char holder[TL_MAX_NAME_LEN + 1];
	uint64_t v0, v1;
	int64_t ts0, ts1, until = 0;

	sb_topic(C, "locks", 0);
	TL_PASS(tl_lock_try(C, &ca, &la, NULL));
	tt_nap_ms(300);
	/* Run out, nobody took it: the holder's own lease expired. */
	TL_FAIL(tl_lease_extend(la, 1000), TL_ELEASEEXPIRED);
	/* The same consumer id takes it again: the old handle is stale. */
	TL_PASS(tl_lock_try(C, &ca, &la2, NULL));
	TL_FAIL(tl_lease_extend(la, 1000), TL_EVERSION);
	tt_nap_ms(300);
	TL_PASS(tl_lock_try(C, &cb, &lb, NULL));
	peek("locks", "s", holder, sizeof(holder), &v0, &ts0);
	cr_assert_str_eq(holder, "b");
	cr_assert_eq(v0, tl_lease_version(lb));
	/* a is no longer the holder: every operation is refused. */
	TL_FAIL(tl_lease_extend(la2, 5000), TL_ELEASED);
	TL_FAIL(tl_lease_release(la2, 0, true), TL_ELEASED);
	TL_FAIL(tl_lease_delete(la2), TL_ELEASED);
	TL_FAIL(tl_lock_try(C, &ca, &la, &until), TL_ELEASED);
	cr_assert_eq(until, tl_lease_until(lb), "held until the lease's end");
	peek("locks", "s", holder, sizeof(holder), &v1, &ts1);
	cr_assert_str_eq(holder, "b");
	cr_assert_eq(v1, v0, "a failed operation changed the version");
	cr_assert_eq(ts1, ts0, "a failed operation moved the lease");
	/* b's lease is intact. */
	TL_PASS(tl_lease_extend(lb, 10000));
	TL_PASS(tl_lease_release(lb, 0, true));
	tl_lease_free(la);
	tl_lease_free(la2);
	tl_lease_free(lb);
}

typedef struct waiter {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool done;
	int err;
} waiter;

static void
waiter_init(waiter *w)
{
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->done = false;
	w->err = -1;
}

static void
waiter_done(void *arg, int err)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->m);
	w->done = true;
	w->err = err;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->m);
}

static int
waiter_get(waiter *w)
{
	int err;

	pthread_mutex_lock(&w->m);
	while (!w->done) {
		pthread_cond_wait(&w->cv, &w->m);
	}
	err = w->err;
	pthread_mutex_unlock(&w->m);
	return err;
}

Test(lock, async_operations_work_on_a_locks_lease)
{
	tl_lock_conf conf = lconf("locks", "as", "a", 2000, "g");
	tl_lease *l = NULL;

	sb_topic(C, "locks", 0);
	TL_PASS(tl_lock_try(C, &conf, &l, NULL));
	uint64_t v = tl_lease_version(l);
	waiter w;
	waiter_init(&w);
	TL_PASS(tl_lease_extend_async(l, 5000, waiter_done, &w));
	TL_PASS(waiter_get(&w));
	cr_assert_eq(tl_lease_version(l), v + 1);
	waiter_init(&w);
	TL_PASS(tl_lease_delete_async(l, waiter_done, &w));
	TL_PASS(waiter_get(&w));
	tl_lease_free(l);
	{
		tl_message *m = NULL;
		TL_FAIL(tl_get(C, "locks", "as", &m), TL_ENOTFOUND);
	}
}

/* ---- creation, release, errors ---- */

Test(lock, create_on_demand_and_release_makes_it_available_at_once)
{
	tl_lock_conf plain = lconf("locks", "c", "a", 10000, NULL);
	tl_lock_conf create = lconf("locks", "c", "a", 10000, "grp");
	tl_lease *l = NULL;
	char holder[TL_MAX_NAME_LEN + 1];
	uint64_t v;
	int64_t ts;
	size_t len = 9;

	sb_topic(C, "locks", 0);
	TL_FAIL(tl_lock_try(C, &plain, &l, NULL), TL_ENOTFOUND);
	TL_PASS(tl_lock_try(C, &create, &l, NULL));
	cr_assert_str_eq(tl_lease_owner(l), "grp");
	cr_assert_eq(tl_lease_version(l), 2, "created (1) and leased (2)");
	cr_assert_eq(tl_lease_deliveries(l), 1);
	tl_lease_body(l, &len);
	cr_assert_eq(len, 0);
	peek("locks", "c", holder, sizeof(holder), &v, &ts);
	cr_assert_str_eq(holder, "a");
	cr_assert_eq(ts, tl_lease_until(l));
	/* Released with no time: the next taker gets it now, not at the
	 * lease's end. */
	TL_PASS(tl_lease_release(l, 0, true));
	tl_lease_free(l);
	create.consumer_id = "b";
	TL_PASS(tl_lock_try(C, &create, &l, NULL)); /* exists: no create */
	cr_assert_eq(tl_lease_version(l), 4);
	cr_assert_str_eq(tl_lease_owner(l), "grp");
	tl_lease_free(l);
}

Test(lock, a_lock_taken_often_is_never_dead_lettered)
{
	tl_lock_conf conf = lconf("few", "often", "a", 5000, "g");
	tl_topic_conf tc;
	tl_lease *l = NULL;

	memset(&tc, 0, sizeof(tc));
	tc.name = "few";
	tc.max_deliveries = 2;
	TL_PASS(tl_topic_create(C, &tc));
	for (uint32_t i = 1; i <= 5; i++) {
		TL_PASS(tl_lock_try(C, &conf, &l, NULL), "take %u", i);
		cr_assert_eq(tl_lease_deliveries(l), i);
		TL_PASS(tl_lease_release(l, 0, true));
		tl_lease_free(l);
	}
}

Test(lock, unknown_topic_and_bad_input_are_refused)
{
	char big[TL_MAX_ID_LEN + 2];
	tl_lock_conf conf = lconf("locks", "x", "a", 0, "g");
	tl_topic_conf tc;
	tl_lease *l = NULL;

	memset(&tc, 0, sizeof(tc));
	tc.name = "short";
	tc.max_lease_ms = 1000;
	tc.default_lease_ms = 500;
	TL_PASS(tl_topic_create(C, &tc));
	sb_topic(C, "locks", 0);
	conf.topic = "nope";
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_ENOTOPIC);
	conf.topic = "locks";
	conf.id = "";
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_EBADID);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	conf.id = big;
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_ETOOLARGE);
	conf.id = "x";
	conf.consumer_id = "";
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_EBADID);
	conf.consumer_id = "a";
	conf.lease_ms = -1;
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_EINVAL);
	conf.topic = "short";
	conf.lease_ms = 2000; /* over the topic's max_lease_ms */
	TL_FAIL(tl_lock_try(C, &conf, &l, NULL), TL_ELEASELIMIT);
	conf.lease_ms = 0; /* the topic's default */
	TL_PASS(tl_lock_try(C, &conf, &l, NULL));
	int64_t len = tl_lease_until(l) - tl_client_broker_now(C);
	cr_assert(len > 300 && len <= 520, "default lease: %lld ms left",
	    (long long) len);
	tl_lease_free(l);
	/* Nothing was created by the refused attempts. */
	{
		tl_message *m = NULL;
		TL_FAIL(tl_get(C, "locks", "x", &m), TL_ENOTFOUND);
	}
}

Test(lock, lock_waits_until_the_holders_end_or_times_out)
{
	tl_lock_conf ca = lconf("locks", "w", "a", 700, "g");
	tl_lock_conf cb = lconf("locks", "w", "b", 5000, NULL);
	tl_lease *la = NULL, *lb = NULL;
	int64_t t0;

	sb_topic(C, "locks", 0);
	TL_PASS(tl_lock_try(C, &ca, &la, NULL));
	t0 = tli_mono_ms();
	TL_FAIL(tl_lock(C, &cb, 200, &lb), TL_ETIMEDOUT);
	cr_assert_geq(tli_mono_ms() - t0, 190);
	TL_PASS(tl_lock(C, &cb, 5000, &lb));
	cr_assert_geq(tl_client_broker_now(C), tl_lease_until(la) - 5,
	    "taken before the holder's end");
	tl_lease_free(la);
	tl_lease_free(lb);
}

/* ---- the topic's subscribers ---- */

Test(lock, a_held_lock_is_not_delivered_to_subscribers)
{
	tl_lock_conf conf = lconf("locks", "d", "a", 10000, "g");
	tl_consumer_conf kc;
	tl_consumer *k = NULL, *k2 = NULL;
	tl_lease *l = NULL, *got[2];

	sb_topic(C, "locks", 0);
	TL_PASS(tl_lock_try(C, &conf, &l, NULL));
	memset(&kc, 0, sizeof(kc));
	kc.topic = "locks";
	kc.consumer_id = "worker";
	kc.credit = 4;
	TL_PASS(tl_consumer_open(&k, C, &kc));
	/* The lock's own consumer id subscribing does not get it either. */
	kc.consumer_id = "a";
	TL_PASS(tl_consumer_open(&k2, C, &kc));
	cr_assert_eq(sb_poll_n(k, got, 1, 600), 0, "a held lock was pushed");
	cr_assert_eq(
	    sb_poll_n(k2, got, 1, 300), 0, "a held lock was pushed to its id");
	/* Still held by the lock's handle. */
	TL_PASS(tl_lease_extend(l, 10000));
	TL_PASS(tl_lease_release(l, 0, true));
	tl_lease_free(l);
	size_t n = 0;
	for (int64_t end = tli_mono_ms() + 5000;
	     n == 0 && tli_mono_ms() < end;) {
		n = sb_poll_n(k, got, 1, 20) + sb_poll_n(k2, got, 1, 20);
	}
	cr_assert_eq(n, 1, "released: a subscriber gets it");
	tl_lease_free(got[0]);
	tl_consumer_close(k);
	tl_consumer_close(k2);
}
