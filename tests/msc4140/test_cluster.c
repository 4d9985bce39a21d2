/*
 * The gateway against a replicated Timeline: tl-msc4140 given the three
 * nodes' URLs (one comma-separated broker URL) keeps its delayed events
 * through a leader's kill -9. An event scheduled before the kill reaches
 * the homeserver once, not before its time and late by no more than the
 * failover; an event scheduled after the kill is taken and sent too.
 * The same with the gateway inside every node (msc4140 = FILE), scheduled
 * through a follower's gateway; and the gateway inside a node that knows
 * no leader (it waits to join) serves through the other nodes.
 */
#include "tltest.h"

#include "cluster_util.h"
#include "gw_util.h"

#define ROOM "!room:test"
#define SEND_PATH "/_matrix/client/v3/rooms/%21room%3Atest/send/"

/* The delay of the event scheduled before the kill, how long before its
 * due time the leader is killed, and the lateness allowed (the failover:
 * an election takes one to two election timeouts of 500 ms, then the
 * gateway's session finds the new leader). */
#define DELAY_MS 3000
#define KILL_BEFORE_DUE_MS 700
#define LATE_MAX_MS 4000

static tc_cluster C;

/* The content of the event scheduled before the kill, and its base64 as
 * the homeserver records the body of a request (the gateway passes the
 * content byte for byte). */
#define BEFORE "{\"body\":\"before\"}"
#define BEFORE_B64 "eyJib2R5IjoiYmVmb3JlIn0="

/* The homeserver's send requests with this body (base64): how many, and
 * the wall clock time of the first (-1: none). */
static size_t
sends_of(const gw_env *e, const char *b64, int64_t *first_at)
{
	json_t *a = gw_hs_requests(e), *it;
	size_t i, n = 0;

	*first_at = -1;
	json_array_foreach(a, i, it)
	{
		const char *p = json_string_value(json_object_get(it, "path"));
		const char *m =
		    json_string_value(json_object_get(it, "method"));
		const char *b =
		    json_string_value(json_object_get(it, "body_b64"));

		if (p == NULL || m == NULL || b == NULL ||
		    strcmp(m, "PUT") != 0 ||
		    strncmp(p, SEND_PATH, strlen(SEND_PATH)) != 0 ||
		    strcmp(b, b64) != 0) {
			continue;
		}
		if (n++ == 0) {
			*first_at = (int64_t) json_number_value(
			    json_object_get(it, "at"));
		}
	}
	json_decref(a);
	return n;
}

/* How many events with this body the homeserver's room holds. */
static size_t
events_with(const gw_env *e, const char *body)
{
	json_t *a = gw_hs_events(e), *it;
	size_t i, n = 0;

	json_array_foreach(a, i, it)
	{
		const char *b = json_string_value(
		    json_object_get(json_object_get(it, "content"), "body"));
		n += b != NULL && strcmp(b, body) == 0;
	}
	json_decref(a);
	return n;
}

/* Wait (at most ms) until the homeserver has an event with this body. */
static bool
wait_event(const gw_env *e, const char *body, int ms)
{
	int64_t deadline = tli_mono_ms() + ms;

	while (events_with(e, body) == 0) {
		if (tli_mono_ms() > deadline) {
			return false;
		}
		tt_nap_ms(50);
	}
	return true;
}

/* The test homeserver and tl-msc4140 with the broker URL list, in the
 * cluster's directory (removed with it). */
static void
start_gateway(gw_env *e, const char *urls)
{
	char script[600];

	memset(e, 0, sizeof(*e));
	e->standalone = true;
	snprintf(script, sizeof(script), "%s/tests/msc4140/fake_hs.py",
	    TL_TEST_SRCDIR);
	tt_proc_init(&e->hs_proc, "python3", C.dir, "hs");
	tt_proc_args(&e->hs_proc, script, "--ready", e->hs_proc.ready, NULL);
	tt_proc_start(&e->hs_proc);
	snprintf(e->hs, sizeof(e->hs), "%.127s", e->hs_proc.addr);

	tt_proc_init(&e->gw_proc, tt_bin_msc4140(), C.dir, "gateway");
	tt_proc_set(&e->gw_proc, "ready_file", "%s", e->gw_proc.ready);
	tt_proc_set(&e->gw_proc, "listen", "127.0.0.1:0");
	tt_proc_set(&e->gw_proc, "homeserver", "%s", e->hs);
	tt_proc_set(&e->gw_proc, "as_token", "as_secret");
	tt_proc_set(&e->gw_proc, "retry_for_ms", "20000");
	tt_proc_set(&e->gw_proc, "broker", "%s", urls);
	tt_proc_start(&e->gw_proc);
	snprintf(e->gw, sizeof(e->gw), "%.127s", e->gw_proc.addr);
}

/* The test homeserver alone (for the gateways inside the nodes). */
static void
start_hs(gw_env *e)
{
	char script[600];

	memset(e, 0, sizeof(*e));
	snprintf(script, sizeof(script), "%s/tests/msc4140/fake_hs.py",
	    TL_TEST_SRCDIR);
	tt_proc_init(&e->hs_proc, "python3", C.dir, "hs");
	tt_proc_args(&e->hs_proc, script, "--ready", e->hs_proc.ready, NULL);
	tt_proc_start(&e->hs_proc);
	snprintf(e->hs, sizeof(e->hs), "%.127s", e->hs_proc.addr);
}

/* Node i runs the gateway inside it (msc4140 = FILE), with a consumer id
 * of its own. */
static void
gateway_inside(const gw_env *e, int i)
{
	char path[TT_PATH], conf[2048];

	snprintf(conf, sizeof(conf),
	    "listen = 127.0.0.1:0\nhomeserver = %s\n"
	    "as_token = as_secret\nretry_for_ms = 20000\n"
	    "consumer_id = msc4140-node%d\n"
	    "ready_file = %s/gw%d.ready\n",
	    e->hs, i + 1, C.dir, i + 1);
	snprintf(path, sizeof(path), "%s/gw%d.conf", C.dir, i + 1);
	tt_write_file(path, conf);
	tc_node_set(&C, i, "msc4140", "%s", path);
}

/* Node i's gateway base URL, from its ready file (at most 10 s). */
static void
inside_url(char *out, size_t cap, int i)
{
	char path[TT_PATH];
	int64_t deadline = tli_mono_ms() + 10000;

	snprintf(path, sizeof(path), "%s/gw%d.ready", C.dir, i + 1);
	for (;;) {
		char *s = tt_read_file(path);

		if (s != NULL && strchr(s, '\n') != NULL) {
			snprintf(out, cap, "%.*s", (int) strcspn(s, "\n"), s);
			free(s);
			return;
		}
		free(s);
		cr_assert(tli_mono_ms() < deadline,
		    "node %d's gateway is not ready", i + 1);
		tt_nap_ms(50);
	}
}

static void
stop_gateway(gw_env *e)
{
	tt_proc_stop_clean(&e->gw_proc);
	tt_proc_check_log(&e->gw_proc);
	tt_proc_kill(&e->hs_proc);
	tt_proc_fini(&e->gw_proc);
	tt_proc_fini(&e->hs_proc);
}

Test(cluster, delayed_event_survives_a_leader_kill)
{
	gw_env e;
	char urls[256];
	int leader, next;
	int64_t t0, t1, at = -1, late;
	size_t n;

	tc_init(&C, 3, "gw-cluster");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	snprintf(urls, sizeof(urls), "%s,%s,%s", C.url[0], C.url[1], C.url[2]);
	start_gateway(&e, urls);

	/* scheduled on the leader, which dies shortly before it is due */
	t0 = tli_wall_ms();
	free(gw_schedule(&e, "tok_alice", ROOM, "before", DELAY_MS,
	    "{\"body\":\"before\"}"));
	t1 = tli_wall_ms();
	cr_assert(t1 - t0 < DELAY_MS - KILL_BEFORE_DUE_MS,
	    "scheduling took %" PRId64 " ms", t1 - t0);
	tt_nap_ms((int) (t0 + DELAY_MS - KILL_BEFORE_DUE_MS - tli_wall_ms()));
	tt_proc_kill(&C.p[leader]);

	/* sent once, on time */
	cr_assert(wait_event(&e, "before", DELAY_MS + LATE_MAX_MS + 5000),
	    "the event scheduled before the kill was not sent");
	next = tc_leader(&C, 5000);
	cr_assert(next >= 0 && next != leader, "no new leader");
	n = sends_of(&e, BEFORE_B64, &at);
	cr_assert(n >= 1 && at > 0);
	late = at - (t1 + DELAY_MS);
	cr_log_info("sent %" PRId64 " ms after its due time (%zu send "
	            "request(s)), leader node %d killed %d ms before it",
	    late, n, leader + 1, KILL_BEFORE_DUE_MS);
	cr_assert(at >= t0 + DELAY_MS, "sent %" PRId64 " ms early",
	    t0 + DELAY_MS - at);
	cr_assert(late <= LATE_MAX_MS, "sent %" PRId64 " ms late", late);

	/* scheduled after the kill, through the new leader */
	free(gw_schedule(
	    &e, "tok_alice", ROOM, "after", 300, "{\"body\":\"after\"}"));
	cr_assert(wait_event(&e, "after", 10000),
	    "the event scheduled after the kill was not sent");

	/* once: no second copy of either comes later */
	tt_nap_ms(1500);
	cr_assert_eq(events_with(&e, "before"), 1);
	cr_assert_eq(events_with(&e, "after"), 1);

	stop_gateway(&e);
	tc_fini(&C);
}

Test(cluster, gateway_inside_a_follower_sends_through_a_leader_kill)
{
	gw_env e;
	int leader, via, other;
	int64_t t0, t1, at = -1, late;

	tc_init(&C, 3, "gw-cluster-in");
	start_hs(&e);
	for (int i = 0; i < C.n; i++) {
		gateway_inside(&e, i);
	}
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	via = (leader + 1) % C.n;
	other = (leader + 2) % C.n;
	inside_url(e.gw, sizeof(e.gw), via);

	/* scheduled through a follower's gateway; the leader dies before
	 * the event is due */
	t0 = tli_wall_ms();
	free(gw_schedule(&e, "tok_alice", ROOM, "before", DELAY_MS, BEFORE));
	t1 = tli_wall_ms();
	cr_assert(t1 - t0 < DELAY_MS - KILL_BEFORE_DUE_MS,
	    "scheduling took %" PRId64 " ms", t1 - t0);
	tt_nap_ms((int) (t0 + DELAY_MS - KILL_BEFORE_DUE_MS - tli_wall_ms()));
	tt_proc_kill(&C.p[leader]);

	cr_assert(wait_event(&e, "before", DELAY_MS + LATE_MAX_MS + 5000),
	    "the event scheduled before the kill was not sent");
	cr_assert(sends_of(&e, BEFORE_B64, &at) >= 1 && at > 0);
	late = at - (t1 + DELAY_MS);
	cr_log_info("inside node %d: sent %" PRId64 " ms after its due time",
	    via + 1, late);
	cr_assert(at >= t0 + DELAY_MS, "sent %" PRId64 " ms early",
	    t0 + DELAY_MS - at);
	cr_assert(late <= LATE_MAX_MS, "sent %" PRId64 " ms late", late);

	/* the other survivor's gateway schedules on the new leader */
	inside_url(e.gw, sizeof(e.gw), other);
	free(gw_schedule(
	    &e, "tok_alice", ROOM, "after", 300, "{\"body\":\"after\"}"));
	cr_assert(wait_event(&e, "after", 10000),
	    "the event scheduled after the kill was not sent");
	tt_nap_ms(1500);
	cr_assert_eq(events_with(&e, "before"), 1);
	cr_assert_eq(events_with(&e, "after"), 1);

	tt_proc_kill(&e.hs_proc);
	tt_proc_fini(&e.hs_proc);
	tc_fini(&C);
}

/* A node that is not a member yet (started to join, not added) knows no
 * leader: its gateway reaches the cluster's leader through the other
 * nodes' URLs, starts, and its events are sent. */
Test(cluster, gateway_inside_a_joining_node_reaches_the_leader)
{
	gw_env e;

	tc_init(&C, 4, "gw-cluster-join");
	C.members = 3;
	start_hs(&e);
	gateway_inside(&e, 3);
	for (int i = 0; i < C.n; i++) {
		tc_start(&C, i);
	}
	cr_assert(tc_leader(&C, 10000) >= 0, "no leader within 10 s");
	inside_url(e.gw, sizeof(e.gw), 3);
	free(gw_schedule(&e, "tok_alice", ROOM, "j1", 300, BEFORE));
	cr_assert(wait_event(&e, "before", 10000),
	    "the event scheduled through the joining node was not sent");
	cr_assert_eq(events_with(&e, "before"), 1);

	tt_proc_kill(&e.hs_proc);
	tt_proc_fini(&e.hs_proc);
	tc_fini(&C);
}
