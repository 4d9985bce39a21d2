/*
 * End-to-end against a real three-node cluster (timelined with
 * cluster_node lines, docs/cluster.md): a client given the three URLs
 * produces through a kill -9 of the leader and sees no error but the
 * documented outcome of a resent create (TL_EEXISTS), and a consumer keeps
 * receiving: every message produced, before and after the kill, reaches
 * it. Create batches in flight at the kill are sent again and stored once;
 * a lease operation made while there is no leader waits for the next one.
 * The nodes come from the cluster suites' launcher (cluster_util.h).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tltest.h"

#include "cluster_util.h"
#include "sdk_util.h"

static tc_cluster TC;

static void
teardown(void)
{
	if (TC.dir != NULL) {
		tc_fini(&TC);
	}
}

TestSuite(cluster, .fini = teardown, .timeout = 90);

/* Three nodes (topic "t") and their leader. */
static int
cluster_start(void)
{
	int leader;

	tc_init(&TC, 3, "sdk-cluster");
	tc_start_all(&TC);
	leader = tc_leader(&TC, 10000);
	cr_assert(leader >= 0, "no leader elected");
	return leader;
}

/* A client given the three URLs. */
static tl_client *
cluster_client(tl_log_fn log)
{
	char all[256];

	tc_urls(&TC, 3, all, sizeof(all));
	return sb_client_url(all, 10000, log);
}

typedef struct seen {
	bool got[1000];
	size_t distinct;
	size_t del_failed;
} seen;

/* Take what the consumer has (waiting up to wait_ms for the first) and
 * delete it. A delete may meet the failover (TL_ECONN, TL_ELEADERLOST:
 * an unknown outcome); the lease then runs out and the message comes
 * again, which only counts once. */
static void
drain(tl_consumer *k, seen *s, int wait_ms)
{
	tl_lease *ls[64];
	size_t n = 0;

	TL_PASS(tl_consumer_poll(k, ls, 64, &n, wait_ms));
	for (size_t i = 0; i < n; i++) {
		int id = atoi(tl_lease_id(ls[i]) + 1);
		cr_assert(id >= 0 && id < 1000);
		if (!s->got[id]) {
			s->got[id] = true;
			s->distinct++;
		}
		if (tl_lease_delete(ls[i]) != TL_OK) {
			s->del_failed++;
		}
		tl_lease_free(ls[i]);
	}
}

Test(cluster, produce_and_consume_through_a_leader_kill)
{
	enum { TOTAL = 300, KILL_AT = 100 };
	tl_client *c = NULL;
	tl_consumer *k = NULL;
	tl_consumer_conf conf = {.topic = "t",
	    .consumer_id = "survivor",
	    .lease_ms = 3000,
	    .credit = 64};
	static seen s;
	int64_t worst = 0, t_kill = 0;
	size_t exists = 0;
	int leader;

	leader = cluster_start();
	c = cluster_client(NULL);
	TL_PASS(tl_consumer_open(&k, c, &conf));

	memset(&s, 0, sizeof(s));
	for (int i = 0; i < TOTAL; i++) {
		char id[16];
		int64_t t0 = tli_mono_ms();
		int rv;

		if (i == KILL_AT) {
			tt_proc_kill(&TC.p[leader]);
			t_kill = t0;
		}
		snprintf(id, sizeof(id), "m%03d", i);
		rv = tl_put_in(c, "t", "p", id, 0, id, strlen(id), NULL);
		if (rv == TL_EEXISTS) {
			exists++; /* a resent create whose first try landed */
		} else {
			TL_PASS(
			    rv, "put %s (%d after the kill)", id, i - KILL_AT);
		}
		if (tli_mono_ms() - t0 > worst) {
			worst = tli_mono_ms() - t0;
		}
		drain(k, &s, 0);
	}
	for (int64_t deadline = tli_mono_ms() + 20000;
	     s.distinct < TOTAL && tli_mono_ms() < deadline;) {
		drain(k, &s, 200);
	}
	cr_log_info("failover: the slowest put took %lld ms (kill at %lld); "
	            "%zu resent creates answered TL_EEXISTS; %zu lease "
	            "deletes met the failover",
	    (long long) worst, (long long) t_kill, exists, s.del_failed);
	fprintf(stderr,
	    "cluster failover: slowest put %lld ms, %zu TL_EEXISTS, %zu "
	    "failed deletes\n",
	    (long long) worst, exists, s.del_failed);
	cr_assert_eq(s.distinct, TOTAL, "the consumer received %zu of %d",
	    s.distinct, TOTAL);
	/* a new leader serves, and it is not the killed node */
	cr_assert(!tt_proc_alive(&TC.p[leader]));
	tl_consumer_close(k);
	tl_client_close(c);
}

typedef struct inflight {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	int pending;
	int batch_err; /* the first batch error other than TL_OK */
} inflight;

static void
batch_done(void *arg, int err)
{
	inflight *f = arg;

	pthread_mutex_lock(&f->mtx);
	if (err != TL_OK && f->batch_err == TL_OK) {
		f->batch_err = err;
	}
	f->pending--;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mtx);
}

/* Batches in flight when the leader dies: each carries its own ids, so
 * the client sends them again on the new leader; every message is then
 * stored exactly once (TL_EEXISTS for one whose first try had landed). */
Test(cluster, batches_in_flight_at_the_kill_are_resent)
{
	enum { BATCHES = 40, PER = 25 };
	static tl_put puts[BATCHES][PER];
	static char ids[BATCHES][PER][16];
	tl_client *c = NULL;
	inflight f = {
	    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, TL_OK};
	tl_counts cnt;
	size_t exists = 0, resent = 0;
	int leader, at_kill = 0;

	leader = cluster_start();
	c = cluster_client(NULL);
	/* on the leader before the batches: sent while the client still
	 * follows a redirect, they would wait for it (nothing sent to the
	 * node that is killed, nothing to send again) */
	TL_PASS(tl_put_in(c, "t", "p", "warm", 3600000, "w", 1, NULL));
	memset(puts, 0, sizeof(puts));
	for (int b = 0; b < BATCHES; b++) {
		for (int i = 0; i < PER; i++) {
			snprintf(
			    ids[b][i], sizeof(ids[b][i]), "b%02d-%02d", b, i);
			puts[b][i].id = ids[b][i];
			puts[b][i].ts = 3600000;
			puts[b][i].rel = true;
			puts[b][i].body = ids[b][i];
			puts[b][i].body_len = strlen(ids[b][i]);
		}
	}
	for (int b = 0; b < BATCHES; b++) {
		pthread_mutex_lock(&f.mtx);
		f.pending++;
		pthread_mutex_unlock(&f.mtx);
		TL_PASS(tl_put_batch_async(
		    c, "t", "p", puts[b], PER, batch_done, &f));
		if (b == BATCHES / 2) {
			tt_proc_kill(&TC.p[leader]);
			pthread_mutex_lock(&f.mtx);
			at_kill = f.pending;
			pthread_mutex_unlock(&f.mtx);
		}
	}
	pthread_mutex_lock(&f.mtx);
	while (f.pending > 0) {
		pthread_cond_wait(&f.cv, &f.mtx);
	}
	pthread_mutex_unlock(&f.mtx);
	TL_PASS(f.batch_err, "a batch failed");
	for (int b = 0; b < BATCHES; b++) {
		for (int i = 0; i < PER; i++) {
			resent += puts[b][i].resent ? 1 : 0;
			if (puts[b][i].err == TL_EEXISTS) {
				/* only a repeat meets its own first try */
				cr_assert(puts[b][i].resent,
				    "%s: TL_EEXISTS but not resent", ids[b][i]);
				exists++;
				continue;
			}
			TL_PASS(puts[b][i].err, "%s", ids[b][i]);
		}
	}
	fprintf(stderr,
	    "cluster in-flight batches: %d of %d unanswered at the kill, "
	    "%zu TL_EEXISTS and %zu resent of %d messages\n",
	    at_kill, BATCHES / 2 + 1, exists, resent, BATCHES * PER);
	cr_assert_gt(at_kill, 0, "some batches were in flight at the kill");
	/* those in flight went again to the new leader, and say so */
	cr_assert_gt(resent, 0, "no put says it was resent");
	TL_PASS(tl_count(c, "t", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing,
	    (uint64_t) BATCHES * PER + 1, "each message stored once");
	tl_client_close(c);
}

static atomic_bool lost_seen;

static void
watch_log(void *arg, tl_log_level lvl, const char *msg)
{
	(void) arg;
	(void) lvl;
	if (strstr(msg, "lost") != NULL) {
		atomic_store(&lost_seen, true);
	}
}

/* A lease operation made while the client has no leader waits for the
 * next one, where the lease (replicated with the store) is still valid. */
Test(cluster, a_lease_op_during_the_failover_lands_on_the_new_leader)
{
	tl_client *c = NULL;
	tl_consumer *k = NULL;
	tl_consumer_conf conf = {
	    .topic = "t", .consumer_id = "holder", .lease_ms = 30000};
	tl_lease *l = NULL;
	tl_counts cnt;
	int leader;

	leader = cluster_start();
	c = cluster_client(watch_log);
	TL_PASS(tl_consumer_open(&k, c, &conf));
	TL_PASS(tl_put_in(c, "t", "p", "job", 0, "x", 1, NULL));
	cr_assert_eq(sb_poll_n(k, &l, 1, 5000), 1);

	atomic_store(&lost_seen, false);
	tt_proc_kill(&TC.p[leader]);
	for (int64_t deadline = tli_mono_ms() + 5000;
	     !atomic_load(&lost_seen) && tli_mono_ms() < deadline;) {
		tt_nap_ms(5);
	}
	cr_assert(atomic_load(&lost_seen), "the client saw the loss");
	/* no leader yet (an election takes >= 500 ms): it waits for one */
	TL_PASS(tl_lease_extend(l, 30000), "extend during the failover");
	TL_PASS(tl_lease_delete(l), "delete after the failover");
	tl_lease_free(l);
	TL_PASS(tl_count(c, "t", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 0);
	tl_consumer_close(k);
	tl_client_close(c);
}

/* A leader that hangs (SIGSTOP) rather than dies: the client notices the
 * silence within a few seconds, leaves it for the new leader and the
 * request (its own id: safe to send again) succeeds within its timeout. */
Test(cluster, a_paused_leader_is_left_for_the_new_one)
{
	tl_client *c;
	tl_counts cnt;
	int64_t t0, took;
	int leader;

	leader = cluster_start();
	c = cluster_client(NULL);
	TL_PASS(tl_put_in(c, "t", "p", "before", 3600000, "", 0, NULL));
	tc_pause(&TC, leader);
	t0 = tli_mono_ms();
	TL_PASS(tl_put_in(c, "t", "p", "during", 3600000, "", 0, NULL),
	    "put while the leader hangs");
	took = tli_mono_ms() - t0;
	fprintf(stderr, "cluster paused leader: the put took %lld ms\n",
	    (long long) took);
	TL_PASS(tl_count(c, "t", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.waiting, 2);
	tl_client_close(c);
	tc_resume(&TC, leader);
}
