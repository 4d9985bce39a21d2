/*
 * Cluster administration against real timelined processes, through the
 * SDK (tl_cluster_status / transfer / add / remove, which tlctl's
 * `cluster` commands call): every node reports the same configuration and
 * leader; the leadership moves to the node asked for; a fourth node
 * started empty with cluster_join is added as a voter, catches up (the
 * messages created before are in its store) and is removed again; wrong
 * requests get precise errors and change nothing. The client URL of a node
 * added at run time is replicated: after every node restarted, with the
 * added node leading, a follower still names it and a client given only
 * that follower's URL reaches it.
 */
#include "tltest.h"
#include "cluster_util.h"
#include "sdk_util.h"

TestSuite(admin, .timeout = 120);

static tl_client *
open_on(tc_cluster *c, int i)
{
	tl_opts *o = NULL;
	tl_client *cl = NULL;

	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, c->url[i]));
	TL_PASS(tl_opts_set_timeout(o, 20000));
	TL_PASS(tl_client_open(&cl, o));
	tl_opts_free(o);
	return cl;
}

/* The status as node i sees it. */
static void
status_of(tc_cluster *c, int i, tl_cluster_info *st)
{
	tl_client *cl = open_on(c, i);

	TL_PASS(tl_cluster_status(cl, st));
	tl_client_close(cl);
	cr_assert_eq(st->self_id, (uint64_t) i + 1);
}

static bool
has_voter(const tl_cluster_info *st, uint64_t id)
{
	for (size_t k = 0; k < st->n; k++) {
		if (st->nodes[k].id == id) {
			return strcmp(st->nodes[k].role, "voter") == 0;
		}
	}
	return false;
}

/* Node `id`'s URL in the status node i gives ("": none). */
static void
url_seen_by(tc_cluster *c, int i, uint64_t id, char *out, size_t cap)
{
	tl_cluster_info st;

	status_of(c, i, &st);
	out[0] = '\0';
	for (size_t k = 0; k < st.n; k++) {
		if (st.nodes[k].id == id) {
			snprintf(out, cap, "%s", st.nodes[k].url);
		}
	}
	tl_cluster_info_free(&st);
}

/* Wait (at most 5 s) until node i names `want` as node id's URL. */
static void
wait_url(tc_cluster *c, int i, uint64_t id, const char *want)
{
	int64_t end = tli_mono_ms() + 5000;
	char url[256];

	url_seen_by(c, i, id, url, sizeof(url));
	while (strcmp(url, want) != 0 && tli_mono_ms() < end) {
		tt_nap_ms(20);
		url_seen_by(c, i, id, url, sizeof(url));
	}
	cr_assert_str_eq(url, want, "node %d names node %llu's URL as", i + 1,
	    (unsigned long long) id);
}

static void
list_url(void *arg, uint64_t id, const char *url)
{
	(void) url;
	(*(int *) arg)++;
	cr_log_info("a URL is left for node %llu", (unsigned long long) id);
}

Test(admin, status_transfer_add_and_remove)
{
	tc_cluster c;
	tl_cluster_info st;
	tl_client *cl;
	rc_client *rc;
	tli_store *s;
	tli_msg m;
	int leader, target;
	char id[16];

	tc_init(&c, 4, "admin");
	c.members = 3;
	for (int i = 0; i < 3; i++) {
		tc_start(&c, i);
	}
	leader = tc_leader(&c, 15000);
	cr_assert(leader >= 0 && leader < 3, "no leader");

	/* every node: the three voters, and the same leader (a follower
	 * learns it from the leader's first message to it) */
	for (int i = 0; i < 3; i++) {
		int64_t end = tli_mono_ms() + 5000;

		status_of(&c, i, &st);
		while (st.leader_id != (uint64_t) leader + 1 &&
		    tli_mono_ms() < end) {
			tl_cluster_info_free(&st);
			tt_nap_ms(20);
			status_of(&c, i, &st);
		}
		cr_assert_eq(st.n, 3, "node %d sees %zu nodes", i + 1, st.n);
		for (uint64_t k = 1; k <= 3; k++) {
			cr_assert(has_voter(&st, k));
		}
		cr_assert_eq(st.leader_id, (uint64_t) leader + 1);
		cr_assert_eq(st.serving, i == leader);
		cr_assert_str_eq(st.state, i == leader ? "leader" : "follower");
		tl_cluster_info_free(&st);
	}

	/* the leadership goes where it is sent */
	target = (leader + 1) % 3;
	cl = open_on(&c, leader);
	TL_PASS(tl_cluster_transfer(cl, (uint64_t) target + 1));
	{
		int64_t end = tli_mono_ms() + 10000;

		while (tc_metric(&c, target, "timeline_cluster_serving") != 1 &&
		    tli_mono_ms() < end) {
			tt_nap_ms(20);
		}
		cr_assert_eq(tc_metric(&c, target, "timeline_cluster_serving"),
		    1, "node %d does not serve after the transfer", target + 1);
	}
	leader = target;
	/* sent again (a retry, or from a client that followed the redirect
	 * to the new leader): it leads already, which is what was asked */
	TL_PASS(tl_cluster_transfer(cl, (uint64_t) target + 1));
	tl_client_close(cl);

	/* messages, then a fourth node that joins */
	rc = rc_open(c.url[leader], "app");
	for (int k = 0; k < 20; k++) {
		snprintf(id, sizeof(id), "m%02d", k);
		TL_PASS(tc_create(rc, id, NULL, 0));
	}
	rc_close(rc);
	tc_start(&c, 3);
	cl = open_on(&c, leader);
	{
		char raft[64];

		snprintf(raft, sizeof(raft), "127.0.0.1:%d", c.raft_port[3]);
		TL_FAIL(tl_cluster_add(cl, 4, "no-port", c.url[3]), TL_EINVAL);
		TL_PASS(tl_cluster_add(cl, 4, raft, c.url[3]));
		/* the same id again: refused, nothing changes */
		cr_assert_neq(tl_cluster_add(cl, 4, raft, c.url[3]), TL_OK);
	}
	TL_FAIL(tl_cluster_transfer(cl, 9), TL_ENOTFOUND);
	TL_PASS(tl_cluster_status(cl, &st));
	cr_assert_eq(st.n, 4);
	cr_assert(has_voter(&st, 4), "node 4 is not a voter");
	tl_cluster_info_free(&st);
	cr_assert(tc_converged(&c, leader, 10000), "node 4 did not catch up");
	/* a follower knows its URL, not only the leader that added it */
	wait_url(&c, (leader + 1) % 3, 4, c.url[3]);

	/* and leaves again; the three go on */
	TL_PASS(tl_cluster_remove(cl, 4));
	TL_PASS(tl_cluster_status(cl, &st));
	cr_assert_eq(st.n, 3);
	tl_cluster_info_free(&st);
	rc = rc_open(c.url[leader], "app");
	TL_PASS(tc_create(rc, "after-remove", NULL, 0));
	rc_close(rc);
	tl_client_close(cl);

	/* node 4's store holds what was created before it joined */
	tt_proc_stop_clean(&c.p[3]);
	s = tc_open_store(&c, 3);
	for (int k = 0; k < 20; k++) {
		snprintf(id, sizeof(id), "m%02d", k);
		TL_PASS(tli_store_get(s, "t", id, strlen(id), &m), "%s", id);
		tli_msg_fini(&m);
	}
	tli_store_close(s);
	/* and the removal took its URL off the others' stores */
	cr_assert(tc_converged(&c, leader, 10000));
	target = (leader + 1) % 3;
	tt_proc_stop_clean(&c.p[target]);
	s = tc_open_store(&c, target);
	{
		int left = 0;

		TL_PASS(tli_store_node_urls(s, list_url, &left));
		cr_assert_eq(left, 0, "node %d keeps a URL", target + 1);
	}
	tli_store_close(s);
	tc_fini(&c);
}

Test(admin, an_added_nodes_url_is_known_to_all_after_restarts)
{
	tc_cluster c;
	tl_client *cl;
	rc_client *rc;
	char raft[64], url[256];
	int leader, rv = TL_OK;

	tc_init(&c, 4, "admin-url");
	c.members = 3;
	tc_start_all(&c); /* node 4 waits to be added (cluster_join) */
	leader = tc_leader(&c, 15000);
	cr_assert(leader >= 0 && leader < 3, "no leader");

	/* bad URLs are refused before anything is proposed */
	cl = open_on(&c, leader);
	snprintf(raft, sizeof(raft), "127.0.0.1:%d", c.raft_port[3]);
	TL_FAIL(tl_cluster_add(cl, 4, raft, ""), TL_EINVAL);
	TL_FAIL(tl_cluster_add(cl, 4, raft, "http://127.0.0.1:1"), TL_EINVAL);
	TL_FAIL(tl_cluster_add(cl, 4, raft, "tcp://"), TL_EINVAL);
	TL_FAIL(tl_cluster_add(cl, 4, raft, "tcp://a:1,tcp://b:2"), TL_EINVAL);
	TL_PASS(tl_cluster_add(cl, 4, raft, c.url[3]));
	tl_client_close(cl);
	cr_assert(tc_converged(&c, leader, 10000), "node 4 did not catch up");

	/* every node crashes and starts again: the three never had node 4
	 * in their configuration files */
	for (int i = 0; i < 4; i++) {
		tt_proc_kill(&c.p[i]);
	}
	for (int i = 0; i < 4; i++) {
		tc_spawn(&c, i);
	}
	for (int i = 0; i < 4; i++) {
		tt_proc_wait_ready(&c.p[i]);
	}
	leader = tc_leader(&c, 15000);
	cr_assert(leader >= 0, "no leader after the restart");
	cr_assert(
	    tc_converged(&c, leader, 10000), "the nodes did not catch up");
	if (leader != 3) {
		/* node 4 may still be reconnecting: a transfer to it can time
		 * out until then (5 s at most); if an election makes it the
		 * leader meanwhile, the client follows the redirect to it and
		 * it answers that it leads */
		cl = open_on(&c, leader);
		for (int k = 0;
		     (rv = tl_cluster_transfer(cl, 4)) != TL_OK && k < 50;
		     k++) {
			tt_nap_ms(100);
		}
		TL_PASS(rv);
		tl_client_close(cl);
	}
	for (int64_t end = tli_mono_ms() + 10000;
	     tc_metric(&c, 3, "timeline_cluster_serving") != 1 &&
	     tli_mono_ms() < end;) {
		tt_nap_ms(20);
	}
	cr_assert_eq(tc_metric(&c, 3, "timeline_cluster_serving"), 1,
	    "node 4 does not lead");

	/* a follower names node 4 in its status and in its redirect (once
	 * it has heard from node 4 as leader: until then it may name the
	 * leader before the transfer) */
	wait_url(&c, 0, 4, c.url[3]);
	rc = rc_open(c.url[0], "app");
	url[0] = '\0';
	for (int64_t end = tli_mono_ms() + 5000; tli_mono_ms() < end;) {
		rv = tc_create(rc, "redirected", url, sizeof(url));
		if (rv == TL_ENOTLEADER && strcmp(url, c.url[3]) == 0) {
			break;
		}
		tt_nap_ms(20);
	}
	rc_close(rc);
	TL_FAIL(rv, TL_ENOTLEADER);
	cr_assert_str_eq(url, c.url[3], "node 1's redirect");

	/* a client given node 1 alone follows it to node 4 */
	cl = sb_client_url(c.url[0], 10000, NULL);
	TL_PASS(tl_put_in(cl, "t", "app", "via-1", 0, "x", 1, NULL));
	tl_client_close(cl);
	rc = rc_open(c.url[3], "app");
	TL_FAIL(tc_create(rc, "via-1", NULL, 0), TL_EEXISTS);
	rc_close(rc);
	tc_fini(&c);
}

Test(admin, a_single_broker_is_not_a_cluster)
{
	rc_broker b;
	tl_cluster_info st;
	tl_client *cl = NULL;
	tl_opts *o = NULL;

	rc_broker_start(&b, "admin-single");
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, b.url));
	TL_PASS(tl_client_open(&cl, o));
	tl_opts_free(o);
	TL_FAIL(tl_cluster_status(cl, &st), TL_ENOTSUP);
	TL_FAIL(tl_cluster_transfer(cl, 0), TL_ENOTSUP);
	tl_client_close(cl);
	rc_broker_stop(&b);
}
