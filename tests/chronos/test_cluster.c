/*
 * tl-chronos against a replicated Timeline: given the three nodes' URLs
 * (one comma-separated --url), a timer set before a leader's kill -9 pops
 * once, not before its time and late by no more than the failover. And
 * tl-chronos inside a node that knows no leader (it waits to join) serves
 * through the other nodes.
 */
#include "tltest.h"

#include "chronos_util.h"
#include "cluster_util.h"

/* The timer's interval, how long before it pops the leader is killed, and
 * the lateness allowed (the failover: one to two election timeouts of
 * 500 ms, then the SDK's session finds the new leader). */
#define INTERVAL_MS 3000
#define KILL_BEFORE_DUE_MS 700
#define LATE_MAX_MS 4000

static tc_cluster C;

Test(cluster, timer_pops_once_through_a_leader_kill)
{
	ck_env e;
	char urls[256], json[1024], id[33];
	ck_hit hits[8];
	int leader;
	int64_t t0, t1, late;
	size_t n;

	tc_init(&C, 3, "ck-cluster");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");

	memset(&e, 0, sizeof(e));
	e.standalone = true;
	ck_recv_start(&e.recv);
	cr_assert_eq(tlh_client_alloc(&e.hc, 8), TL_OK);
	snprintf(urls, sizeof(urls), "%s,%s,%s", C.url[0], C.url[1], C.url[2]);
	tt_proc_init(&e.k, tt_bin_chronos(), C.dir, "chronos");
	tt_proc_args(&e.k, "--url", urls, NULL);
	tt_proc_set(&e.k, "ready_file", "%s", e.k.ready);
	tt_proc_set(&e.k, "listen", "127.0.0.1:0");
	tt_proc_start(&e.k);
	snprintf(e.api, sizeof(e.api), "%.127s", e.k.addr);

	/* one pop, INTERVAL_MS after it is set; the leader dies shortly
	 * before */
	ck_timer_json(&e, json, sizeof(json), INTERVAL_MS / 1000.0, -1,
	    "/ok/once", "once");
	t0 = tli_wall_ms();
	ck_post(&e, json, id);
	t1 = tli_wall_ms();
	cr_assert(t1 - t0 < INTERVAL_MS - KILL_BEFORE_DUE_MS,
	    "setting the timer took %" PRId64 " ms", t1 - t0);
	tt_nap_ms(
	    (int) (t0 + INTERVAL_MS - KILL_BEFORE_DUE_MS - tli_wall_ms()));
	tt_proc_kill(&C.p[leader]);

	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/once", 1,
	                 INTERVAL_MS + LATE_MAX_MS + 5000),
	    1, "the timer did not pop");
	tt_nap_ms(1500); /* no second pop comes */
	n = ck_hits(&e.recv, "/ok/once", hits, 8);
	cr_assert_eq(n, 1, "%zu pops", n);
	cr_assert_eq(hits[0].seq, 1);
	late = hits[0].at - (t1 + INTERVAL_MS);
	cr_log_info("popped %" PRId64 " ms after its due time, leader node %d "
	            "killed %d ms before it",
	    late, leader + 1, KILL_BEFORE_DUE_MS);
	cr_assert(hits[0].at >= t0 + INTERVAL_MS, "popped %" PRId64 " ms early",
	    t0 + INTERVAL_MS - hits[0].at);
	cr_assert(late <= LATE_MAX_MS, "popped %" PRId64 " ms late", late);

	tt_proc_stop_clean(&e.k);
	tt_proc_check_log(&e.k);
	tt_proc_fini(&e.k);
	ck_recv_stop(&e.recv);
	tlh_client_free(e.hc);
	tc_fini(&C);
}

/* tl-chronos inside node 4, which waits to join and is not added: the
 * service starts through the other nodes' URLs and its timers pop. */
Test(cluster, inside_a_joining_node_reaches_the_leader)
{
	ck_env e;
	char path[TT_PATH], conf[1024], json[1024], id[33], *ready = NULL;
	int64_t deadline;

	tc_init(&C, 4, "ck-cluster-join");
	C.members = 3;
	memset(&e, 0, sizeof(e));
	ck_recv_start(&e.recv);
	cr_assert_eq(tlh_client_alloc(&e.hc, 8), TL_OK);
	snprintf(conf, sizeof(conf),
	    "listen = 127.0.0.1:0\nready_file = %s/chronos4.ready\n", C.dir);
	snprintf(path, sizeof(path), "%s/chronos4.conf", C.dir);
	tt_write_file(path, conf);
	tc_node_set(&C, 3, "chronos", "%s", path);
	for (int i = 0; i < C.n; i++) {
		tc_start(&C, i);
	}
	cr_assert(tc_leader(&C, 10000) >= 0, "no leader within 10 s");

	snprintf(path, sizeof(path), "%s/chronos4.ready", C.dir);
	deadline = tli_mono_ms() + 10000;
	while ((ready = tt_read_file(path)) == NULL ||
	    strchr(ready, '\n') == NULL) {
		free(ready);
		ready = NULL;
		cr_assert(tli_mono_ms() < deadline,
		    "node 4's tl-chronos is not ready");
		tt_nap_ms(50);
	}
	snprintf(
	    e.api, sizeof(e.api), "%.*s", (int) strcspn(ready, "\n"), ready);
	free(ready);

	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/ok/join", "j");
	ck_post(&e, json, id);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/join", 1, 10000), 1,
	    "the timer set through the joining node did not pop");

	ck_recv_stop(&e.recv);
	tlh_client_free(e.hc);
	tc_fini(&C);
}
