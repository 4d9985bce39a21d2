/*
 * The cluster's clock watch against real timelined processes: a node whose
 * clock runs 5 s off the other two (clock_offset_ms, the setting tests use
 * to fake a wrong clock) measures it, says it is degraded (log R012,
 * metrics) and never serves as leader; when it wins an election anyway
 * (it has the shortest election timeout here, so it tries first after the
 * leader dies) it hands the leadership over (R014) and a healthy node
 * serves. The two healthy nodes see the offset and are not degraded.
 */
#include "tltest.h"
#include "cluster_util.h"

TestSuite(clock, .timeout = 120);

#define SKEW_MS 5000

/* Wait until metric of node i equals want; false at the deadline. */
static bool
metric_becomes(
    tc_cluster *c, int i, const char *name, int64_t want, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	do {
		if (tc_metric(c, i, name) == want) {
			return true;
		}
		tt_nap_ms(50);
	} while (tli_mono_ms() < deadline);
	return false;
}

/* The serving node, watched for ms: -1 if none served throughout; fails
 * the test if the skewed node (index 2) ever serves. */
static int
watch_leader(tc_cluster *c, int ms)
{
	int64_t deadline = tli_mono_ms() + ms;
	int last = -1;

	do {
		for (int i = 0; i < c->n; i++) {
			if (tc_metric(c, i, "timeline_cluster_serving") == 1) {
				cr_assert_neq(i, 2,
				    "the node with the wrong clock serves");
				last = i;
			}
		}
		tt_nap_ms(25);
	} while (tli_mono_ms() < deadline);
	return last;
}

Test(clock, a_node_with_a_wrong_clock_is_degraded_and_never_leads)
{
	tc_cluster c;
	char *log;
	int leader, other;

	tc_init(&c, 3, "clock");
	c.election_ms = 1500;
	/* node 3: 5 s ahead, and the first to stand for election */
	tc_node_set(&c, 2, "clock_offset_ms", "%d", SKEW_MS);
	tc_node_set(&c, 2, "cluster_election_ms", "%d", 300);
	tc_node_set(&c, 2, "cluster_heartbeat_ms", "%d", 30);
	tc_start_all(&c);

	/* it knows, and says so */
	cr_assert(
	    metric_becomes(&c, 2, "timeline_cluster_clock_degraded", 1, 10000),
	    "the skewed node does not report itself degraded");
	cr_assert(tt_proc_log_wait(&c.p[2], "R012", 5000),
	    "the skewed node did not log R012");
	for (int i = 0; i < 2; i++) {
		int64_t maj = tc_metric(
		    &c, i, "timeline_cluster_clock_majority_offset_ms");

		cr_assert(metric_becomes(&c, i,
		              "timeline_cluster_clock_degraded", 0, 1000),
		    "healthy node %d reports itself degraded", i + 1);
		cr_assert(maj > -200 && maj < 200,
		    "healthy node %d is %lld ms off the majority", i + 1,
		    (long long) maj);
	}

	/* a healthy node leads, and keeps leading */
	leader = tc_leader(&c, 15000);
	cr_assert(leader == 0 || leader == 1, "no healthy leader (%d)", leader);
	cr_assert_eq(watch_leader(&c, 1500), leader);

	/* without it, the skewed node stands first; it must not serve, and
	 * the remaining healthy node takes over */
	other = 1 - leader;
	tt_proc_kill(&c.p[leader]);
	cr_assert_eq(watch_leader(&c, 6000), other,
	    "the remaining healthy node does not lead");
	log = tt_read_file(c.p[2].log);
	cr_assert_not_null(log);
	cr_assert(strstr(log, "R001") == NULL,
	    "the node with the wrong clock served at some point:\n%s", log);
	if (strstr(log, "R003 node 3 is the leader") != NULL) {
		cr_assert(strstr(log, "R014") != NULL,
		    "node 3 won an election and did not hand it over");
	}
	free(log);

	/* the cluster works through the healthy leader */
	{
		rc_client *cl = rc_open(c.url[other], "app");
		TL_PASS(tc_create(cl, "after-skew", NULL, 0));
		rc_close(cl);
	}
	tc_start(&c, leader);
	tc_fini(&c);
}
