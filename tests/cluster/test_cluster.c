/*
 * The replicated broker end to end: three real timelined processes on
 * loopback. A leader is elected and serves; a follower answers
 * TL_ENOTLEADER naming the leader's client URL; what the leader
 * acknowledged is in every node's store; a leader killed in the middle of
 * a stream of creates is replaced within 3 s and loses no acknowledged
 * create; a bad cluster configuration stops the start with a clear line.
 */
#include "tltest.h"
#include "cluster_util.h"

static tc_cluster C;

static void
fini(void)
{
	tc_fini(&C);
}

TestSuite(cluster, .fini = fini, .timeout = 120);

static void
id_of(char *buf, size_t cap, int i)
{
	snprintf(buf, cap, "m%06d", i);
}

/* Every id of ok[0..n) is a message of topic t in node i's store, and the
 * topic holds exactly `total` messages. */
static void
check_store(int node, const bool *ok, int n, int64_t total)
{
	tli_store *s = tc_open_store(&C, node);
	tli_topic_info ti;

	for (int i = 0; i < n; i++) {
		char id[16];
		tli_msg m;

		if (!ok[i]) {
			continue;
		}
		id_of(id, sizeof(id), i);
		TL_PASS(tli_store_get(s, "t", id, strlen(id), &m),
		    "node %d: acknowledged %s", node + 1, id);
		tli_msg_fini(&m);
	}
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	if (total >= 0) {
		cr_assert_eq((int64_t) ti.messages, total,
		    "node %d holds %" PRIu64 " messages, the leader %" PRId64,
		    node + 1, ti.messages, total);
	}
	tli_store_close(s);
}

/* Stop every node cleanly, then compare: every store holds the acked ids
 * and as many messages as the first one. */
static void
stop_and_compare(const bool *ok, int n)
{
	tli_store *s;
	tli_topic_info ti;

	for (int i = 0; i < C.n; i++) {
		if (C.p[i].pid > 0) {
			tt_proc_stop_clean(&C.p[i]);
		}
	}
	s = tc_open_store(&C, 0);
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	tli_store_close(s);
	for (int i = 0; i < C.n; i++) {
		check_store(i, ok, n, (int64_t) ti.messages);
	}
}

Test(cluster, leader_serves_followers_redirect_everyone_has_the_acks)
{
	enum { N = 200 };
	static bool ok[N];
	char url[256], id[16];
	rc_client *lc, *fc;
	int leader, follower;

	tc_init(&C, 3, "cluster-a");
	tc_node_set(&C, 2, "lease_ahead_ms", "80");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	follower = (leader + 1) % 3;
	/* lease_ahead_ms = auto is 250 ms in a cluster (a lease is durable
	 * once an entry commits); a value given stays */
	for (int i = 0; i < 3; i++) {
		const char *want = i == 2 ? "leases taken 80 ms ahead"
		                          : "leases taken 250 ms ahead";

		cr_assert(tt_proc_log_wait(&C.p[i], want, 5000),
		    "node %d does not say \"%s\"", i + 1, want);
	}

	/* a follower: HELLO and PING work, a create names the leader */
	fc = rc_open(C.url[follower], "tester");
	TL_FAIL(tc_create(fc, "x", url, sizeof(url)), TL_ENOTLEADER);
	cr_assert_str_eq(url, C.url[leader]);
	TL_FAIL(rc_subscribe(fc, "t", "c1", 30000, 10), TL_ENOTLEADER);
	rc_close(fc);

	lc = rc_open(C.url[leader], "tester");
	for (int i = 0; i < N; i++) {
		id_of(id, sizeof(id), i);
		TL_PASS(tc_create(lc, id, NULL, 0), "create %s", id);
		ok[i] = true;
	}
	rc_close(lc);
	cr_assert(
	    tc_converged(&C, leader, 10000), "the nodes did not catch up");
	stop_and_compare(ok, N);
}

/* A producer thread: creates one id at a time until told to stop or the
 * connection fails; ok[i] once acknowledged. Asserts nothing. */
typedef struct prod {
	rc_client *c;
	_Atomic int next;
	_Atomic bool stop;
	bool ok[100000];
	int last_err;
} prod;

static void *
prod_main(void *arg)
{
	prod *p = arg;

	while (!p->stop && p->next < 100000) {
		char id[16];
		int i = p->next, rv;

		id_of(id, sizeof(id), i);
		rv = tc_create(p->c, id, NULL, 0);
		if (rv != TL_OK) {
			p->last_err = rv;
			break;
		}
		p->ok[i] = true;
		p->next = i + 1;
	}
	return NULL;
}

Test(cluster, leader_killed_mid_stream_loses_no_acknowledged_create)
{
	static prod P;
	pthread_t th;
	int leader, next, acked = 0;
	int64_t t0, serve_ms = -1;
	rc_client *nc;

	tc_init(&C, 3, "cluster-b");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");

	memset(&P, 0, sizeof(P));
	P.c = rc_open(C.url[leader], "producer");
	cr_assert_eq(pthread_create(&th, NULL, prod_main, &P), 0);
	while (P.next < 100) {
		tt_nap_ms(10);
	}
	tt_proc_kill(&C.p[leader]);
	t0 = tli_mono_ms();
	pthread_join(th, NULL);
	rc_close(P.c);

	/* the first create acknowledged by a new leader */
	next = tc_leader(&C, 5000);
	cr_assert(next >= 0 && next != leader, "no new leader");
	nc = rc_open(C.url[next], "after");
	while (tli_mono_ms() - t0 < 10000) {
		if (tc_create(nc, "after-failover", NULL, 0) == TL_OK) {
			serve_ms = tli_mono_ms() - t0;
			break;
		}
		tt_nap_ms(10);
	}
	cr_log_info("failover: first acknowledged create %" PRId64
	            " ms after the kill",
	    serve_ms);
	cr_assert(serve_ms >= 0 && serve_ms <= 3000,
	    "the new leader served %" PRId64 " ms after the kill", serve_ms);
	/* every acknowledged create is on the new leader */
	for (int i = 0; i < P.next; i++) {
		char id[16];
		tlp_msg m;
		rc_frame *f = NULL;

		if (!P.ok[i]) {
			continue;
		}
		acked++;
		id_of(id, sizeof(id), i);
		TL_PASS(rc_get(nc, "t", id, &m, &f), "acknowledged %s", id);
		rc_frame_free(f);
	}
	cr_assert(acked >= 100);
	rc_close(nc);

	/* the old leader comes back and catches up */
	tc_start(&C, leader);
	cr_assert(tc_converged(&C, next, 10000), "the nodes did not catch up");
	stop_and_compare(P.ok, P.next);
}

Test(cluster, bad_configuration_exits_1_with_a_clear_line)
{
	static const struct {
		const char *conf, *says;
	} cases[] = {
	    {"cluster_id = 1\n"
	     "cluster_node = 1 127.0.0.1:17411 tcp://127.0.0.1:17400\n"
	     "cluster_node = 1 127.0.0.1:17412 tcp://127.0.0.1:17420\n",
	        "id 1 is given twice"},
	    {"cluster_id = 3\n"
	     "cluster_node = 1 127.0.0.1:17411 tcp://127.0.0.1:17400\n"
	     "cluster_node = 2 127.0.0.1:17412 tcp://127.0.0.1:17420\n",
	        "cluster_id 3 is not among the cluster_node ids"},
	    {"cluster_id = 1\n"
	     "cluster_node = 1 127.0.0.1:17411 tcp://127.0.0.1:17400\n"
	     "cluster_node = 2 127.0.0.1:17411 tcp://127.0.0.1:17420\n",
	        "Raft address 127.0.0.1:17411 is given twice"},
	    {"cluster_id = 1\n"
	     "cluster_node = 1 127.0.0.1 tcp://127.0.0.1:17400\n",
	        "the Raft address must be HOST:PORT"},
	    {"cluster_id = 1\n"
	     "cluster_node = 0 127.0.0.1:17411 tcp://127.0.0.1:17400\n",
	        "the id must be a number >= 1"},
	    {"cluster_node = 1 127.0.0.1:17411 tcp://127.0.0.1:17400\n",
	        "need cluster_id"},
	    {"lease_ahead_ms = soon\n",
	        "lease_ahead_ms must be auto or a whole number from 0 to "
	        "10000"},
	};
	char out[4096];

	C.dir = tt_mkdtemp("cluster-c");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char conf[1024];
		int rv;

		snprintf(conf, sizeof(conf), "data = %s/data\n%s", C.dir,
		    cases[i].conf);
		rv = tt_run_conf(tt_bin_timelined(), C.dir, "bad.conf", conf,
		    "", out, sizeof(out));
		cr_assert_eq(rv, 1, "case %zu: exit %d: %s", i, rv, out);
		cr_assert(strstr(out, cases[i].says) != NULL,
		    "case %zu: \"%s\" not in: %s", i, cases[i].says, out);
		cr_assert(strchr(out, '\n') == out + strlen(out) - 1,
		    "case %zu: not one line: %s", i, out);
	}
}
