/*
 * The Futures form of MSC4140 (futures = on) against the real timelined
 * with the gateway and the test homeserver: send_future / state_future
 * and their tokens, refresh, timeouts, the list of running futures, the
 * group rules (one event per group at most, 409, 405), the maximum
 * timeout, 410 and the N-then-429 throttle of guessed tokens, the
 * invalidation of state futures by a new state event, two triggers of one
 * group at once, and a scheduled future across kill -9.
 */
#include "tltest.h"
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "gw_util.h"

#define ROOM "/_matrix/client/v3/rooms/!room:test"
#define FUT "/_matrix/client/v3/future"
#define FUT_U "/_matrix/client/unstable/io.element.msc3140/future"

typedef struct ftoks {
	char send[64], cancel[64], refresh[64], group[80];
} ftoks;

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
nap(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* PUT a future (path under the room, query); expects 200 and its tokens. */
static ftoks
future(
    const gw_env *e, const char *token, const char *path, const char *content)
{
	ftoks t;
	char p[512];
	gw_resp r;

	snprintf(p, sizeof(p), ROOM "%s", path);
	r = gw_req("PUT", e->gw, p, token, content);
	gw_expect(r, 200, NULL);
	snprintf(t.send, sizeof(t.send), "%s", gw_str(&r, "send_token"));
	snprintf(t.cancel, sizeof(t.cancel), "%s", gw_str(&r, "cancel_token"));
	snprintf(
	    t.refresh, sizeof(t.refresh), "%s", gw_str(&r, "refresh_token"));
	snprintf(t.group, sizeof(t.group), "%s", gw_str(&r, "future_group_id"));
	cr_assert(strlen(t.send) >= 32 && strlen(t.cancel) >= 32, "%s", r.body);
	cr_assert(strlen(t.group) > 0);
	cr_assert_null(json_object_get(r.json, "event_id"));
	gw_resp_free(&r);
	return t;
}

/* POST .../future/{token}: the status. */
static long
use(const gw_env *e, const char *tok)
{
	char p[256];
	gw_resp r;
	long st;

	snprintf(p, sizeof(p), FUT "/%s", tok);
	r = gw_req("POST", e->gw, p, NULL, NULL);
	st = r.status;
	if (st == 410) {
		cr_assert_str_eq(gw_str(&r, "errcode"), "M_NOT_FOUND");
	}
	gw_resp_free(&r);
	return st;
}

static size_t
nevents(const gw_env *e)
{
	json_t *a = gw_hs_events(e);
	size_t n = json_array_size(a);

	json_decref(a);
	return n;
}

/* The list of running futures (a JSON array, owned). */
static json_t *
running(const gw_env *e, const char *token)
{
	gw_resp r = gw_req("GET", e->gw, FUT, token, NULL);
	json_t *a;

	gw_expect(r, 200, NULL);
	cr_assert(json_is_array(r.json), "%s", r.body);
	a = json_incref(r.json);
	gw_resp_free(&r);
	return a;
}

Test(futures, off_by_default)
{
	gw_env e;

	gw_start(&e, "gw-fut-off", false, NULL);
	/* not ours: the homeserver's answer */
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/t1?future_timeout=1000",
	    "tok_alice", "{}", 404, "M_UNRECOGNIZED");
	cr_assert_eq(gw_hs_count(&e, "PUT", ROOM "/send_future/"), 1);
	gw_stop(&e);
}

Test(futures, send_token_list_and_spent_tokens)
{
	gw_env e;
	ftoks t;
	json_t *a, *it, *evs;
	const char *content = "{\"body\": \"f\\u00e9\", \"n\": 1.5e300}";

	gw_start(&e, "gw-fut-send", false, "futures = on");
	t = future(&e, "tok_alice",
	    "/send_future/m.room.message/t1?future_timeout=600000", content);
	cr_assert(strlen(t.refresh) >= 32, "a timeout future has one");
	cr_assert(strcmp(t.send, t.cancel) && strcmp(t.send, t.refresh) &&
	    strcmp(t.cancel, t.refresh));
	/* a repeat of the transaction: the same future, with or without
	 * its body; another transaction id makes another one */
	{
		gw_resp r = gw_req("PUT", e.gw,
		    ROOM "/send_future/m.room.message/t1?future_timeout=600000",
		    "tok_alice", NULL);
		gw_expect(r, 200, NULL);
		cr_assert_str_eq(gw_str(&r, "send_token"), t.send);
		cr_assert_str_eq(gw_str(&r, "refresh_token"), t.refresh);
		gw_resp_free(&r);
		ftoks t2 = future(&e, "tok_alice",
		    "/send_future/m.room.message/t2?future_timeout=600000",
		    "{}");
		cr_assert(strcmp(t2.send, t.send) != 0);
		cr_assert_eq(use(&e, t2.cancel), 200);
	}

	a = running(&e, "tok_alice");
	cr_assert_eq(json_array_size(a), 1);
	it = json_array_get(a, 0);
	cr_assert(strstr(json_string_value(json_object_get(it, "url")),
	              "/rooms/!room:test/send_future/m.room.message/t1?"
	              "future_timeout=600000&future_group_id=") != NULL,
	    "%s", json_string_value(json_object_get(it, "url")));
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_object_get(it, "body"), "body")),
	    "f\xc3\xa9");
	it = json_object_get(it, "response");
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "send_token")), t.send);
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "cancel_token")), t.cancel);
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "refresh_token")), t.refresh);
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "future_group_id")), t.group);
	json_decref(a);
	/* another user's list does not show it */
	a = running(&e, "tok_bob");
	cr_assert_eq(json_array_size(a), 0);
	json_decref(a);

	/* a browser's preflight of a token request is answered */
	{
		char p[256];
		snprintf(p, sizeof(p), FUT "/%s", t.send);
		gw_req_expect("OPTIONS", e.gw, p, NULL, NULL, 200, NULL);
	}
	cr_assert_eq(use(&e, t.send), 200);
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	it = json_array_get(evs, 0);
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "sender")), "@alice:test");
	cr_assert_str_eq(
	    json_string_value(json_object_get(it, "type")), "m.room.message");
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_object_get(it, "content"), "body")),
	    "f\xc3\xa9");
	json_decref(evs);
	/* spent: every token of it, and unknown ones */
	cr_assert_eq(use(&e, t.send), 410);
	cr_assert_eq(use(&e, t.refresh), 410);
	cr_assert_eq(use(&e, t.cancel), 410);
	a = running(&e, "tok_alice");
	cr_assert_eq(json_array_size(a), 0);
	json_decref(a);
	nap(500);
	cr_assert_eq(nevents(&e), 1);
	gw_stop(&e);
}

Test(futures, timeout_refresh_and_cancel)
{
	gw_env e;
	ftoks t, c;
	int64_t t0, last;
	json_t *evs;
	gw_resp r;

	gw_start(&e, "gw-fut-timeout", false, "futures = on");
	/* the unstable prefix of the proposal */
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/unstable/io.element.msc3140/rooms/!room:test/"
	    "send_future/m.room.message/u1?future_timeout=1500",
	    "tok_alice", "{\"body\":\"late\"}");
	gw_expect(r, 200, NULL);
	snprintf(
	    t.refresh, sizeof(t.refresh), "%s", gw_str(&r, "refresh_token"));
	gw_resp_free(&r);
	t0 = now_ms();
	c = future(&e, "tok_alice",
	    "/send_future/m.room.message/c1?future_timeout=1500",
	    "{\"body\":\"never\"}");
	cr_assert_eq(use(&e, c.cancel), 200);
	/* two refreshes put the timeout off */
	for (int i = 0; i < 2; i++) {
		nap(1000);
		char p[256];
		snprintf(p, sizeof(p), FUT_U "/%s", t.refresh);
		r = gw_req("POST", e.gw, p, NULL, NULL);
		gw_expect(r, 200, NULL);
		gw_resp_free(&r);
		cr_assert_eq(nevents(&e), 0, "refreshed before it ran out");
	}
	last = now_ms();
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	cr_assert(now_ms() - last >= 1400 && now_ms() - t0 >= 3400);
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(evs, 0), "content"), "body")),
	    "late");
	json_decref(evs);
	cr_assert_eq(use(&e, t.refresh), 410);
	cr_assert_eq(use(&e, c.send), 410, "a cancelled future is spent");
	/* a timeout of 0: sent at once, and its answer still has its tokens */
	c = future(&e, "tok_alice",
	    "/send_future/m.room.message/z1?future_timeout=0",
	    "{\"body\":\"now\"}");
	cr_assert(strlen(c.refresh) >= 32);
	evs = gw_wait_events(&e, 2, 10000);
	cr_assert_eq(json_array_size(evs), 2);
	json_decref(evs);
	nap(1000);
	cr_assert_eq(nevents(&e), 2);
	gw_stop(&e);
}

Test(futures, group_rules_and_limits)
{
	gw_env e;
	ftoks ta, aa, t1, t2, a2, sb;
	gw_resp r;
	json_t *evs;

	gw_start(&e, "gw-fut-groups", false,
	    "futures = on\nfuture_max_timeout_ms = 60000");
	/* one of the two parameters is required; the timeout has a maximum */
	gw_req_expect("PUT", e.gw, ROOM "/send_future/m.room.message/x0",
	    "tok_alice", "{}", 400, "M_INVALID_PARAM");
	r = gw_req("PUT", e.gw,
	    ROOM "/send_future/m.room.message/x1?future_timeout=60001",
	    "tok_alice", "{}");
	gw_expect(r, 400, "M_INVALID_PARAM");
	cr_assert(strstr(gw_str(&r, "error"), "60000") != NULL);
	cr_assert_eq(
	    json_number_value(json_object_get(r.json, "max_future_timeout")),
	    60000);
	gw_resp_free(&r);
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/x2?future_timeout=-5",
	    "tok_alice", "{}", 400, "M_INVALID_PARAM");
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/x3?future_timeout=10", NULL, "{}",
	    401, "M_MISSING_TOKEN");
	/* an action future needs a timeout future in its group: 409 */
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/x4?future_group_id=nogroup",
	    "tok_alice", "{}", 409, NULL);

	/* group gA is alice's: bob gets 405 for either kind */
	ta = future(&e, "tok_alice",
	    "/send_future/m.room.message/a1?future_timeout=60000&future_group_"
	    "id=gA",
	    "{\"body\":\"timeout A\"}");
	cr_assert_str_eq(ta.group, "gA");
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/b1?future_group_id=gA", "tok_bob",
	    "{}", 405, NULL);
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/b2?future_timeout=5&future_group_"
	         "id=gA",
	    "tok_bob", "{}", 405, NULL);
	aa = future(&e, "tok_alice",
	    "/send_future/m.room.message/a2?future_group_id=gA",
	    "{\"body\":\"action A\"}");
	cr_assert_str_eq(aa.refresh, "", "an action future has none");
	cr_assert_str_eq(aa.group, "gA");
	/* cancelling the group's only timeout future ends the group */
	cr_assert_eq(use(&e, ta.cancel), 200);
	cr_assert_eq(use(&e, aa.send), 410);
	gw_req_expect("PUT", e.gw,
	    ROOM "/send_future/m.room.message/a3?future_group_id=gA",
	    "tok_alice", "{}", 409, NULL);

	/* group gB: two timeout futures and an action future; the action
	 * is sent, the rest of the group with it never */
	t1 = future(&e, "tok_alice",
	    "/send_future/m.room.message/b1?future_timeout=1000&future_group_"
	    "id=gB",
	    "{\"body\":\"t1\"}");
	t2 = future(&e, "tok_alice",
	    "/send_future/m.room.message/b2?future_timeout=1500&future_group_"
	    "id=gB",
	    "{\"body\":\"t2\"}");
	a2 = future(&e, "tok_alice",
	    "/send_future/m.room.message/b3?future_group_id=gB",
	    "{\"body\":\"action B\"}");
	cr_assert_eq(use(&e, a2.send), 200);
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(evs, 0), "content"), "body")),
	    "action B");
	json_decref(evs);
	cr_assert_eq(use(&e, t1.send), 410);
	cr_assert_eq(use(&e, t2.refresh), 410);
	/* the ended group takes no new future */
	gw_req_expect("PUT", e.gw,
	    ROOM
	    "/send_future/m.room.message/b4?future_timeout=10&future_group_"
	    "id=gB",
	    "tok_alice", "{}", 409, NULL);
	nap(2500); /* past both timeouts: nothing more */
	cr_assert_eq(nevents(&e), 1);

	/* a group is one user's: bob's own group works */
	sb = future(&e, "tok_bob",
	    "/send_future/m.room.message/s1?future_timeout=60000&future_group_"
	    "id=gBob",
	    "{\"body\":\"bob\"}");
	cr_assert_eq(use(&e, sb.send), 200);
	evs = gw_wait_events(&e, 2, 10000);
	cr_assert_str_eq(json_string_value(
	                     json_object_get(json_array_get(evs, 1), "sender")),
	    "@bob:test");
	json_decref(evs);
	gw_stop(&e);
}

typedef struct racer {
	const gw_env *e;
	const char *tok;
	pthread_barrier_t *bar;
	long status;
} racer;

static void *
race_main(void *arg)
{
	racer *r = arg;
	char p[256];
	gw_resp resp;

	snprintf(p, sizeof(p), FUT "/%s", r->tok);
	pthread_barrier_wait(r->bar);
	resp = gw_req("POST", r->e->gw, p, NULL, NULL);
	r->status = resp.status;
	gw_resp_free(&resp);
	return NULL;
}

Test(futures, racing_triggers_send_one_event)
{
	enum { GROUPS = 8 };
	gw_env e;
	ftoks t[GROUPS], a[GROUPS];
	json_t *evs;
	char path[256], body[64];
	int seen[GROUPS] = {0};

	gw_start(&e, "gw-fut-race", false, "futures = on\nrate_limits = off");
	for (int i = 0; i < GROUPS; i++) {
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/rt%d?future_timeout=600000&"
		    "future_group_id=race%d",
		    i, i);
		snprintf(body, sizeof(body), "{\"g\":%d,\"k\":\"t\"}", i);
		t[i] = future(&e, "tok_alice", path, body);
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/ra%d?future_group_id=race%d",
		    i, i);
		snprintf(body, sizeof(body), "{\"g\":%d,\"k\":\"a\"}", i);
		a[i] = future(&e, "tok_alice", path, body);
	}
	/* the timeout future's send, the action future's send and the
	 * timeout future's cancel, all at once: one event at most (the
	 * action's when the cancel came first) */
	for (int i = 0; i < GROUPS; i++) {
		pthread_barrier_t bar;
		pthread_t th[3];
		racer r[3] = {{&e, t[i].send, &bar, 0},
		    {&e, a[i].send, &bar, 0}, {&e, t[i].cancel, &bar, 0}};
		int ok = 0;
		pthread_barrier_init(&bar, NULL, 3);
		for (int k = 0; k < 3; k++) {
			pthread_create(&th[k], NULL, race_main, &r[k]);
		}
		for (int k = 0; k < 3; k++) {
			pthread_join(th[k], NULL);
			cr_assert(r[k].status == 200 || r[k].status == 410,
			    "status %ld", r[k].status);
			ok += r[k].status == 200;
		}
		pthread_barrier_destroy(&bar);
		cr_assert(ok <= 1 || (ok == 2 && r[2].status == 200),
		    "group %d: %d triggers won", i, ok);
	}
	nap(2000);
	evs = gw_hs_events(&e);
	for (size_t i = 0; i < json_array_size(evs); i++) {
		int g = (int) json_number_value(json_object_get(
		    json_object_get(json_array_get(evs, i), "content"), "g"));
		cr_assert(g >= 0 && g < GROUPS);
		seen[g]++;
	}
	for (int i = 0; i < GROUPS; i++) {
		cr_assert(seen[i] <= 1, "group %d reached the room %d times", i,
		    seen[i]);
	}
	json_decref(evs);
	gw_stop(&e);
}

Test(futures, race_of_two_sends_of_one_group)
{
	enum { GROUPS = 10 };
	gw_env e;
	ftoks t, a;
	json_t *evs;
	char path[256];

	gw_start(&e, "gw-fut-race2", false, "futures = on\nrate_limits = off");
	for (int i = 0; i < GROUPS; i++) {
		pthread_barrier_t bar;
		pthread_t th[2];
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/r%d?future_timeout=600000&"
		    "future_group_id=two%d",
		    i, i);
		t = future(&e, "tok_alice", path, "{\"k\":\"t\"}");
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/s%d?future_group_id=two%d", i,
		    i);
		a = future(&e, "tok_alice", path, "{\"k\":\"a\"}");
		racer r[2] = {{&e, t.send, &bar, 0}, {&e, a.send, &bar, 0}};
		pthread_barrier_init(&bar, NULL, 2);
		for (int k = 0; k < 2; k++) {
			pthread_create(&th[k], NULL, race_main, &r[k]);
		}
		for (int k = 0; k < 2; k++) {
			pthread_join(th[k], NULL);
		}
		pthread_barrier_destroy(&bar);
		cr_assert((r[0].status == 200) + (r[1].status == 200) == 1,
		    "group %d: %ld and %ld", i, r[0].status, r[1].status);
		cr_assert(r[0].status == 410 || r[1].status == 410);
	}
	evs = gw_wait_events(&e, GROUPS, 10000);
	cr_assert_eq(json_array_size(evs), GROUPS);
	json_decref(evs);
	nap(1000);
	cr_assert_eq(nevents(&e), GROUPS, "one event per group, no more");
	gw_stop(&e);
}

Test(futures, new_state_event_invalidates_state_futures)
{
	gw_env e;
	ftoks s1, s2, s3;
	json_t *a, *evs;

	gw_start(&e, "gw-fut-state", false, "futures = on");
	s1 = future(&e, "tok_alice",
	    "/state_future/m.call.member/@alice:test_D?future_timeout=600000",
	    "{\"left\":true}");
	s2 = future(&e, "tok_alice",
	    "/state_future/m.call.member/@alice:test_E?future_timeout=600000",
	    "{\"left\":true}");
	/* a state event the homeserver refuses invalidates nothing */
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!nosuch:test/state/m.call.member/"
	    "@alice:test_D",
	    "tok_alice", "{\"x\":1}", 403, "M_FORBIDDEN");
	a = running(&e, "tok_alice");
	cr_assert_eq(json_array_size(a), 2);
	json_decref(a);
	/* the new state event for key _D, through the gateway, by anyone */
	gw_req_expect("PUT", e.gw, ROOM "/state/m.call.member/@alice:test_D",
	    "tok_bob", "{\"joined\":true}", 200, NULL);
	a = running(&e, "tok_alice");
	cr_assert_eq(json_array_size(a), 1, "only _E is left");
	cr_assert_eq(use(&e, s1.send), 410);
	json_decref(a);
	/* reading state is passed on as before */
	gw_req_expect("GET", e.gw, ROOM "/state/m.call.member/@alice:test_D",
	    "tok_alice", NULL, 404, NULL);
	/* the other key's future is still live */
	cr_assert_eq(use(&e, s2.send), 200);
	evs = gw_wait_events(&e, 2, 10000);
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_array_get(evs, 1), "state_key")),
	    "@alice:test_E");
	json_decref(evs);
	/* a state future with an empty state key, and its new state */
	s3 = future(&e, "tok_alice",
	    "/state_future/m.room.topic?future_timeout=600000",
	    "{\"topic\":\"later\"}");
	gw_req_expect("PUT", e.gw, ROOM "/state/m.room.topic", "tok_alice",
	    "{\"topic\":\"now\"}", 200, NULL);
	cr_assert_eq(use(&e, s3.refresh), 410);
	nap(300);
	cr_assert_eq(nevents(&e), 3);
	gw_stop(&e);
}

Test(futures, guessed_tokens_get_429)
{
	gw_env e;
	ftoks t;
	gw_resp r;

	gw_start(&e, "gw-fut-throttle", false,
	    "futures = on\nfuture_block_ms = 1500");
	t = future(&e, "tok_alice",
	    "/send_future/m.room.message/g1?future_timeout=600000",
	    "{\"body\":\"x\"}");
	/* misses that are not in a row do not add up */
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(use(&e, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), 410);
	}
	cr_assert_eq(use(&e, t.refresh), 200);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(use(&e, "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"), 410);
	}
	/* the fifth in a row: then 429 for every token, the good one too */
	cr_assert_eq(use(&e, "not-a-token"), 410);
	r = gw_req("POST", e.gw, FUT "/CCCC", NULL, NULL);
	gw_expect(r, 429, "M_LIMIT_EXCEEDED");
	cr_assert(strstr(r.headers, "Retry-After: 2") != NULL ||
	        strstr(r.headers, "Retry-After: 1") != NULL,
	    "%s", r.headers);
	gw_resp_free(&r);
	cr_assert_eq(use(&e, t.refresh), 429);
	nap(1600);
	cr_assert_eq(use(&e, t.refresh), 200);
	/* spent tokens count as well */
	cr_assert_eq(use(&e, t.send), 200);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(use(&e, t.send), 410);
	}
	cr_assert_eq(use(&e, t.send), 429);
	gw_stop(&e);
}

Test(futures, scheduled_future_survives_kill_9)
{
	gw_env e;
	ftoks t, a, a2;
	json_t *l, *evs;
	int64_t t0;

	gw_start(&e, "gw-fut-kill", false, "futures = on");
	t = future(&e, "tok_alice",
	    "/send_future/m.room.message/k1?future_timeout=5000&future_group_"
	    "id=kg",
	    "{\"body\":\"after the crash\"}");
	a = future(&e, "tok_alice",
	    "/send_future/m.room.message/k2?future_group_id=kg",
	    "{\"body\":\"action\"}");
	/* a second group, sent by its action token just before the crash:
	 * the answer 200 means the decision is stored */
	future(&e, "tok_alice",
	    "/send_future/m.room.message/k3?future_timeout=600000&future_"
	    "group_id=kg2",
	    "{\"body\":\"timeout 2\"}");
	a2 = future(&e, "tok_alice",
	    "/send_future/m.room.message/k4?future_group_id=kg2",
	    "{\"body\":\"sent before the crash\"}");
	t0 = now_ms();
	cr_assert_eq(use(&e, a2.send), 200);
	gw_restart(&e, SIGKILL);
	l = running(&e, "tok_alice");
	if (now_ms() - t0 < 4500) { /* a slow restart (sanitizers) may not */
		cr_assert_eq(
		    json_array_size(l), 2, "both futures of kg are there");
	}
	json_decref(l);
	evs = gw_wait_events(&e, 2, 15000);
	cr_assert_eq(json_array_size(evs), 2);
	cr_assert(now_ms() - t0 >= 4900, "not before its timeout");
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(evs, 0), "content"), "body")),
	    "sent before the crash");
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(evs, 1), "content"), "body")),
	    "after the crash");
	json_decref(evs);
	cr_assert_eq(use(&e, a.send), 410, "the group has ended");
	cr_assert_eq(use(&e, t.refresh), 410);
	nap(1000);
	cr_assert_eq(nevents(&e), 2);
	gw_stop(&e);
}

/* Found with the state futures: a delayed state event scheduled by the
 * path without a state key (.../state/{type}) was stored with a state
 * key read past the end of an empty string. */
Test(futures, delayed_state_without_key_in_path)
{
	gw_env e;
	gw_resp r;

	gw_start(&e, "gw-fut-nokey", false, NULL);
	r = gw_req("PUT", e.gw,
	    ROOM "/state/m.room.topic?org.matrix.msc4140.delay=600000",
	    "tok_alice", "{\"topic\":\"t\"}");
	gw_expect(r, 200, NULL);
	gw_resp_free(&r);
	r = gw_req("GET", e.gw, UNSTABLE, "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_array_get(json_object_get(r.json, "delayed_events"), 0),
	        "state_key")),
	    "");
	gw_resp_free(&r);
	gw_stop(&e);
}

/* Power levels are evaluated when the future is sent, not when it is
 * made: bob's future is accepted without the power, fails while he has
 * none, and one made the same way is sent once he has it. */
Test(futures, power_levels_at_send_time)
{
	gw_env e;
	ftoks t1, t2;
	char p[512];
	gw_resp r;
	json_t *evs;
	const char *room = "{\"room_id\":\"!pl:test\",\"enforce\":true,"
	                   "\"power\":{\"users\":{\"@bob:test\":%d},"
	                   "\"users_default\":0,\"state_default\":50,"
	                   "\"events_default\":0,\"events\":{}}}";

	gw_start(&e, "gw-fut-power", false, "futures = on");
	snprintf(p, sizeof(p), room, 0);
	gw_req_expect("POST", e.hs, "/_test/room", NULL, p, 200, NULL);
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!pl:test/state_future/m.room.topic/"
	    "?future_timeout=600000",
	    "tok_bob", "{\"topic\":\"a\"}");
	gw_expect(r, 200, NULL);
	snprintf(t1.send, sizeof(t1.send), "%s", gw_str(&r, "send_token"));
	gw_resp_free(&r);
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!pl:test/state_future/m.room.name/"
	    "?future_timeout=600000",
	    "tok_bob", "{\"name\":\"b\"}");
	gw_expect(r, 200, NULL);
	snprintf(t2.send, sizeof(t2.send), "%s", gw_str(&r, "send_token"));
	gw_resp_free(&r);
	cr_assert_eq(use(&e, t1.send), 200);
	nap(1000);
	cr_assert_eq(nevents(&e), 0, "refused by the power levels");
	cr_assert(gw_hs_count(&e, "PUT",
	              "/_matrix/client/v3/rooms/%21pl%3Atest/state/") +
	            gw_hs_count(&e, "PUT",
	                "/_matrix/client/v3/rooms/!pl:test/state/") >=
	        1,
	    "the homeserver was asked");
	snprintf(p, sizeof(p), room, 100);
	gw_req_expect("POST", e.hs, "/_test/room", NULL, p, 200, NULL);
	cr_assert_eq(use(&e, t2.send), 200);
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_array_get(evs, 0), "type")),
	    "m.room.name");
	json_decref(evs);
	gw_stop(&e);
}

/* A send token used while its group's timeout runs out: the room gets
 * exactly one event per group, the action's when its send was answered
 * 200, else the timeout's. */
Test(futures, send_token_against_timeout)
{
	enum { GROUPS = 10 };
	gw_env e;
	ftoks a[GROUPS];
	long st[GROUPS];
	int64_t made[GROUPS];
	char path[256], body[64];
	json_t *evs;
	int kind[GROUPS];

	gw_start(&e, "gw-fut-race3", false, "futures = on\nrate_limits = off");
	for (int i = 0; i < GROUPS; i++) {
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/tt%d?future_timeout=800&"
		    "future_group_id=tt%d",
		    i, i);
		snprintf(body, sizeof(body), "{\"g\":%d,\"k\":0}", i);
		made[i] = now_ms();
		future(&e, "tok_alice", path, body);
		snprintf(path, sizeof(path),
		    "/send_future/m.room.message/ta%d?future_group_id=tt%d", i,
		    i);
		snprintf(body, sizeof(body), "{\"g\":%d,\"k\":1}", i);
		a[i] = future(&e, "tok_alice", path, body);
	}
	/* each action's send near its group's timeout, a little before or
	 * after */
	for (int i = 0; i < GROUPS; i++) {
		int64_t at = made[i] + 800 + (i % 5) * 10 - 20;
		while (now_ms() < at) {
			nap(1);
		}
		st[i] = use(&e, a[i].send);
		cr_assert(st[i] == 200 || st[i] == 410, "%ld", st[i]);
		cr_log_info("group %d: the send at %+lld ms answered %ld", i,
		    (long long) (now_ms() - made[i] - 800), st[i]);
	}
	evs = gw_wait_events(&e, GROUPS, 10000);
	nap(500);
	json_decref(evs);
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), GROUPS, "one event per group");
	for (int i = 0; i < GROUPS; i++) {
		kind[i] = -1;
	}
	for (size_t i = 0; i < json_array_size(evs); i++) {
		json_t *c = json_object_get(json_array_get(evs, i), "content");
		int g = (int) json_number_value(json_object_get(c, "g"));
		cr_assert(g >= 0 && g < GROUPS && kind[g] == -1);
		kind[g] = (int) json_number_value(json_object_get(c, "k"));
	}
	for (int i = 0; i < GROUPS; i++) {
		cr_assert_eq(kind[i], st[i] == 200 ? 1 : 0,
		    "group %d: send answered %ld", i, st[i]);
	}
	json_decref(evs);
	gw_stop(&e);
}
