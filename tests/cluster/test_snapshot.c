/*
 * The replicated broker's snapshots: a follower whose data directory is
 * deleted rejoins through a snapshot of the leader's store (the log before
 * it is gone) and ends with the same store as the others.
 */
#include "tltest.h"
#include "cluster_util.h"

static tc_cluster C;

static void
fini(void)
{
	tc_fini(&C);
}

TestSuite(snapshot, .fini = fini, .timeout = 120);

static void
create_range(rc_client *cl, int from, int to)
{
	for (int i = from; i < to; i++) {
		char id[16];

		snprintf(id, sizeof(id), "m%06d", i);
		TL_PASS(tc_create(cl, id, NULL, 0), "create %s", id);
	}
}

Test(snapshot, wiped_follower_rejoins_through_a_snapshot)
{
	enum { N = 300 };
	int leader, follower;
	rc_client *cl;
	tli_topic_info want;
	tli_store *s;

	tc_init(&C, 3, "cluster-e");
	C.snapshot_entries = 32;
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	follower = (leader + 1) % 3;
	cl = rc_open(C.url[leader], "tester");
	create_range(cl, 0, N / 2);

	tt_proc_kill(&C.p[follower]);
	cr_assert_eq(tli_rmtree(C.data[follower]), 0);
	create_range(cl, N / 2, N);
	rc_close(cl);
	cr_assert(tc_metric(&C, leader,
	              "timeline_cluster_snapshots_taken_total") > 0);

	tc_start(&C, follower);
	cr_assert(
	    tt_proc_log_wait(&C.p[follower], "R005 snapshot installed", 15000),
	    "the follower installed no snapshot");
	cr_assert(
	    tc_converged(&C, leader, 15000), "the follower did not catch up");
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	s = tc_open_store(&C, leader);
	TL_PASS(tli_store_topic_get(s, "t", &want));
	tli_store_close(s);
	cr_assert_eq(want.messages, N);
	for (int i = 0; i < 3; i++) {
		tli_topic_info ti;

		s = tc_open_store(&C, i);
		TL_PASS(tli_store_topic_get(s, "t", &ti));
		cr_assert_eq(ti.messages, N, "node %d holds %" PRIu64, i + 1,
		    ti.messages);
		for (int k = 0; k < N; k += 37) {
			char id[16];
			tli_msg m;

			snprintf(id, sizeof(id), "m%06d", k);
			TL_PASS(tli_store_get(s, "t", id, strlen(id), &m),
			    "node %d: %s", i + 1, id);
			tli_msg_fini(&m);
		}
		tli_store_close(s);
	}
}

/* A store larger than cluster_snapshot_max: every snapshot is refused
 * (R006) and the log is kept, and nothing else changes. libraft 0.15 takes
 * any error but RAFT_BUSY from the state machine's snapshot call as a
 * failed apply, and a follower then leaves the leader's AppendEntries
 * unanswered: the leader, hearing from no majority, stepped down. */
Test(snapshot, a_refused_snapshot_costs_no_leadership)
{
	int leader, n = 0;
	int64_t term, end;
	rc_client *cl;

	tc_init(&C, 3, "cluster-r");
	C.election_ms = 500;
	C.snapshot_entries = 8;
	for (int i = 0; i < 3; i++) {
		/* smaller than any checkpoint: every one is refused */
		tc_node_set(&C, i, "cluster_snapshot_max", "4096");
	}
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	term = tc_metric(&C, leader, "timeline_cluster_term");
	cl = rc_open(C.url[leader], "tester");
	/* back to back for several election timeouts: every AppendEntries
	 * then carries a commit for the followers to apply */
	end = tli_mono_ms() + 4 * C.election_ms;
	while (tli_mono_ms() < end) {
		char id[16];

		snprintf(id, sizeof(id), "m%06d", n++);
		TL_PASS(tc_create(cl, id, NULL, 0), "create %s", id);
	}
	rc_close(cl);
	cr_assert(tt_proc_log_wait(&C.p[leader], "R006 snapshot", 1000),
	    "no snapshot was refused");
	cr_assert_eq(tc_leader(&C, 10000), leader);
	cr_assert_eq(tc_metric(&C, leader, "timeline_cluster_term"), term,
	    "an election happened");
	cr_assert(tc_converged(&C, leader, 15000));
}
