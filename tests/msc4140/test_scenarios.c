/*
 * The Matrix test-suite scenarios for MSC4140 against the gateway running
 * inside the real timelined (and standalone, for the restart case), with
 * the test homeserver behind it: delayed messages sent on timeout in
 * order, idempotent transaction ids, delayed state, cancel, send, restart,
 * persistence across a gateway restart, per-user lists, 404s and 401s.
 */
#include "tltest.h"
#include <stdatomic.h>

#include "gw_util.h"

#define ROOM "!room:test"

/* The due time of id in token's list (running_since + delay). */
static int64_t
due_of(const gw_env *e, const char *token, const char *id)
{
	gw_resp r = gw_req("GET", e->gw, UNSTABLE, token, NULL);
	json_t *it;
	size_t i;
	int64_t due = -1;

	gw_expect(r, 200, NULL);
	json_array_foreach(json_object_get(r.json, "delayed_events"), i, it)
	{
		if (strcmp(json_string_value(json_object_get(it, "delay_id")),
		        id) == 0) {
			due = (int64_t) json_number_value(
			          json_object_get(it, "running_since")) +
			    (int64_t) json_number_value(
			        json_object_get(it, "delay"));
		}
	}
	gw_resp_free(&r);
	cr_assert(due > 0, "%s is in the list", id);
	return due;
}

/* The time the homeserver received the n-th send of the gateway. */
static int64_t
hs_send_at(const gw_env *e, const char *body_b64_prefix)
{
	json_t *a = gw_hs_requests(e), *it;
	size_t i;
	int64_t at = -1;

	json_array_foreach(a, i, it)
	{
		const char *q = json_string_value(json_object_get(it, "query"));
		const char *b =
		    json_string_value(json_object_get(it, "body_b64"));
		if (strstr(q, "user_id=") != NULL &&
		    strncmp(b, body_b64_prefix, strlen(body_b64_prefix)) == 0) {
			at = (int64_t) (int64_t) json_number_value(
			    json_object_get(it, "at"));
		}
	}
	json_decref(a);
	return at;
}

Test(scenarios, three_messages_sent_on_timeout_in_order)
{
	gw_env e;
	char *ids[3];
	int64_t due[3];
	const char *bodies[3] = {
	    "{\"body\":\"one\"}", "{\"body\":\"two\"}", "{\"body\":\"three\"}"};
	json_t *evs, *ev;
	size_t i;
	gw_resp r;

	gw_start(&e, "gw-order", false, NULL);
	for (int k = 0; k < 3; k++) {
		char txn[16];
		snprintf(txn, sizeof(txn), "txn%d", k);
		ids[k] = gw_schedule(
		    &e, "tok_alice", ROOM, txn, 700 + 200 * k, bodies[k]);
	}
	/* The same txnId again, with no body: the same delay_id. */
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.message/txn1"
	    "?org.matrix.msc4140.delay=700",
	    "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	cr_assert_str_eq(gw_str(&r, "delay_id"), ids[1]);
	gw_resp_free(&r);
	/* A different device of the same user is another transaction. */
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.message/txn1"
	    "?org.matrix.msc4140.delay=60000",
	    "tok_alice2", "{\"body\":\"other device\"}");
	gw_expect(r, 200, NULL);
	cr_assert_str_neq(gw_str(&r, "delay_id"), ids[1]);
	gw_resp_free(&r);
	for (int k = 0; k < 3; k++) {
		due[k] = due_of(&e, "tok_alice", ids[k]);
	}
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 0, "nothing sent early");
	json_decref(evs);

	evs = gw_wait_events(&e, 3, 10000);
	cr_assert_eq(json_array_size(evs), 3, "three events sent");
	json_array_foreach(evs, i, ev)
	{
		json_t *c = json_object_get(ev, "content");
		char want[16];
		snprintf(want, sizeof(want), "%s",
		    i == 0       ? "one"
		        : i == 1 ? "two"
		                 : "three");
		cr_assert_str_eq(
		    json_string_value(json_object_get(c, "body")), want);
		cr_assert_str_eq(
		    json_string_value(json_object_get(ev, "sender")),
		    "@alice:test");
		cr_assert_eq((int64_t) json_number_value(
		                 json_object_get(ev, "origin_server_ts")),
		    due[i], "ts = the scheduled time %lld", (long long) due[i]);
	}
	json_decref(evs);
	/* never early: the homeserver got each one at or after its due */
	cr_assert_geq(hs_send_at(&e, "eyJib2R5Ijoib25lIn0"), due[0]);
	cr_assert_geq(hs_send_at(&e, "eyJib2R5IjoidHdvIn0"), due[1]);
	/* only the other device's event is left, in the user's list */
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 1);
	cr_assert_eq(gw_list_len(&e, "tok_alice2"), 1, "same user");
	for (int k = 0; k < 3; k++) {
		free(ids[k]);
	}
	gw_stop(&e);
}

Test(scenarios, delayed_state_sent_on_timeout)
{
	gw_env e;
	json_t *evs, *ev;
	size_t i;
	int seen = 0;

	gw_start(&e, "gw-state", false, NULL);
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/state/m.rtc.member/"
	    "%40alice%3Atest_ALICEDEV?org.matrix.msc4140.delay=600",
	    "tok_alice", "{\"application\":\"m.call\"}", 200, NULL);
	/* an empty state key as a trailing slash, on the r0 path */
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/r0/rooms/" ROOM "/state/m.room.topic/"
	    "?org.matrix.msc4140.delay=600",
	    "tok_alice", "{\"topic\":\"later\"}", 200, NULL);
	evs = gw_wait_events(&e, 2, 10000);
	cr_assert_eq(json_array_size(evs), 2);
	json_array_foreach(evs, i, ev)
	{
		const char *t = json_string_value(json_object_get(ev, "type"));
		const char *k =
		    json_string_value(json_object_get(ev, "state_key"));
		cr_assert(k != NULL, "a state event");
		if (strcmp(t, "m.rtc.member") == 0) {
			cr_assert_str_eq(k, "@alice:test_ALICEDEV");
			seen |= 1;
		} else {
			cr_assert_str_eq(t, "m.room.topic");
			cr_assert_str_eq(k, "");
			seen |= 2;
		}
	}
	cr_assert_eq(seen, 3);
	json_decref(evs);
	gw_stop(&e);
}

Test(scenarios, cancel_means_never_sent)
{
	gw_env e;
	char *id;
	json_t *evs;

	gw_start(&e, "gw-cancel", false, NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "c1", 500, "{\"body\":\"x\"}");
	gw_manage_expect(&e, id, "cancel", 200, NULL);
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 0);
	gw_manage_expect(&e, id, "cancel", 404, "M_NOT_FOUND");
	/* a later event in the same room is sent: the canceled one is not */
	free(gw_schedule(&e, "tok_alice", ROOM, "c2", 800, "{\"body\":\"y\"}"));
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	cr_assert_str_eq(
	    json_string_value(json_object_get(
	        json_object_get(json_array_get(evs, 0), "content"), "body")),
	    "y");
	json_decref(evs);
	free(id);
	gw_stop(&e);
}

Test(scenarios, send_on_request)
{
	gw_env e;
	char *id;
	gw_resp r;
	json_t *evs;
	char path[256];

	gw_start(&e, "gw-send", false, NULL);
	id = gw_schedule(
	    &e, "tok_alice", ROOM, "s1", 600000, "{\"body\":\"now\"}");
	gw_manage_expect(&e, id, "send", 200, NULL);
	/* answered after the homeserver took it */
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 1);
	json_decref(evs);
	/* sending again is fine; restarting or cancelling is too late */
	gw_manage_expect(&e, id, "send", 200, NULL);
	gw_manage_expect(&e, id, "restart", 404, "M_NOT_FOUND");
	gw_manage_expect(&e, id, "cancel", 404, "M_NOT_FOUND");
	/* the finalised record, owner only */
	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	r = gw_req("GET", e.gw, path, "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_object_get(r.json, "finalised"), "event_id")),
	    "$ev1");
	gw_resp_free(&r);
	gw_req_expect("GET", e.gw, path, "tok_bob", NULL, 404, "M_NOT_FOUND");
	/* the body form does the same */
	free(id);
	id = gw_schedule(
	    &e, "tok_alice", ROOM, "s2", 600000, "{\"body\":\"b\"}");
	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	gw_req_expect(
	    "POST", e.gw, path, NULL, "{\"action\":\"send\"}", 200, NULL);
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 2);
	json_decref(evs);
	free(id);
	gw_stop(&e);
}

Test(scenarios, restart_pushes_the_event_later)
{
	gw_env e;
	char *id;
	json_t *evs;
	int64_t due0, due1;

	gw_start(&e, "gw-restart", false, NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "r1", 1000, "{\"body\":\"r\"}");
	due0 = due_of(&e, "tok_alice", id);
	tt_nap_ms(500);
	gw_manage_expect(&e, id, "restart", 200, NULL);
	due1 = due_of(&e, "tok_alice", id);
	cr_assert_geq(due1, due0 + 400, "moved later by the restart");
	/* past the first due time: still not sent */
	while (tli_wall_ms() < due0 + 200) {
		tt_nap_ms(20);
	}
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 0, "not sent at the old time");
	json_decref(evs);
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	cr_assert_eq((int64_t) json_number_value(json_object_get(
	                 json_array_get(evs, 0), "origin_server_ts")),
	    due1);
	json_decref(evs);
	cr_assert_geq(hs_send_at(&e, "eyJib2R5IjoiciJ9"), due1);
	free(id);
	gw_stop(&e);
}

static void
kept_across_restart(bool standalone)
{
	gw_env e;
	char *id, *id2;
	json_t *evs;

	gw_start(&e, "gw-persist", standalone, NULL);
	/* Due after the restart even when a sanitizer build on a busy machine
	 * takes a few seconds to restart. */
	id = gw_schedule(&e, "tok_alice", ROOM, "p1", 6000, "{\"body\":\"p\"}");
	id2 = gw_schedule(
	    &e, "tok_alice", ROOM, "p2", 600000, "{\"body\":\"q\"}");
	gw_restart(&e, SIGKILL);
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 0);
	json_decref(evs);
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 2);
	evs = gw_wait_events(&e, 1, 15000);
	cr_assert_eq(json_array_size(evs), 1, "sent after the restart");
	json_decref(evs);
	/* the other one is still managed by its id */
	gw_manage_expect(&e, id2, "cancel", 200, NULL);
	free(id);
	free(id2);
	gw_stop(&e);
}

Test(scenarios, kept_across_a_restart_in_timelined)
{
	kept_across_restart(false);
}

Test(scenarios, kept_across_a_restart_standalone)
{
	kept_across_restart(true);
}

Test(scenarios, lists_per_user_only)
{
	gw_env e;
	char *a1, *a2, *b1;
	gw_resp r;
	json_t *list;

	gw_start(&e, "gw-list", false, NULL);
	a1 = gw_schedule(&e, "tok_alice", ROOM, "l1", 90000, "{\"n\":1}");
	a2 = gw_schedule(&e, "tok_alice", ROOM, "l2", 30000, "{\"n\":2}");
	b1 = gw_schedule(&e, "tok_bob", ROOM, "l1", 60000, "{\"n\":3}");
	r = gw_req("GET", e.gw, UNSTABLE, "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	list = json_object_get(r.json, "delayed_events");
	cr_assert_eq(json_array_size(list), 2);
	/* soonest first */
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_array_get(list, 0), "delay_id")),
	    a2);
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_array_get(list, 1), "delay_id")),
	    a1);
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_array_get(list, 0), "room_id")),
	    ROOM);
	cr_assert_eq(
	    json_number_value(json_object_get(
	        json_object_get(json_array_get(list, 0), "content"), "n")),
	    2);
	gw_resp_free(&r);
	r = gw_req("GET", e.gw, UNSTABLE, "tok_bob", NULL);
	gw_expect(r, 200, NULL);
	list = json_object_get(r.json, "delayed_events");
	cr_assert_eq(json_array_size(list), 1);
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_array_get(list, 0), "delay_id")),
	    b1);
	gw_resp_free(&r);
	r = gw_req("GET", e.gw, UNSTABLE, "tok_guest", NULL);
	gw_expect(r, 200, NULL);
	cr_assert_eq(
	    json_array_size(json_object_get(r.json, "delayed_events")), 0);
	gw_resp_free(&r);
	free(a1);
	free(a2);
	free(b1);
	gw_stop(&e);
}

Test(scenarios, unknown_ids_are_404_in_both_forms)
{
	gw_env e;

	gw_start(&e, "gw-404", false, NULL);
	gw_manage_expect(&e, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "restart", 404,
	    "M_NOT_FOUND");
	gw_manage_expect(
	    &e, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "send", 404, "M_NOT_FOUND");
	gw_req_expect("POST", e.gw,
	    UNSTABLE "/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "tok_alice",
	    "{\"action\":\"cancel\"}", 404, "M_NOT_FOUND");
	gw_req_expect("GET", e.gw, UNSTABLE "/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "tok_alice", NULL, 404, "M_NOT_FOUND");
	/* an unknown action in the path */
	gw_manage_expect(&e, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "explode", 404,
	    "M_UNRECOGNIZED");
	gw_stop(&e);
}

Test(scenarios, missing_token_is_401)
{
	gw_env e;

	gw_start(&e, "gw-401", false, NULL);
	gw_req_expect(
	    "GET", e.gw, UNSTABLE, NULL, NULL, 401, "M_MISSING_TOKEN");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.message/x1"
	    "?org.matrix.msc4140.delay=1000",
	    NULL, "{}", 401, "M_MISSING_TOKEN");
	gw_req_expect(
	    "GET", e.gw, UNSTABLE, "tok_nobody", NULL, 401, "M_UNKNOWN_TOKEN");
	/* the token may come as a query parameter */
	gw_req_expect("GET", e.gw, UNSTABLE "?access_token=tok_bob", NULL, NULL,
	    200, NULL);
	gw_stop(&e);
}

Test(scenarios, overdue_events_are_sent_in_due_order_after_a_restart)
{
	gw_env e;
	json_t *evs, *ev;
	size_t i;
	char txn[16], body[64];

	gw_start(&e, "gw-overdue", false, NULL);
	/* scheduled out of order; all due while the gateway is down */
	static const int delays[] = {400, 100, 300, 200, 500};
	for (int k = 0; k < 5; k++) {
		snprintf(txn, sizeof(txn), "o%d", k);
		snprintf(body, sizeof(body), "{\"d\":%d}", delays[k]);
		free(gw_schedule(&e, "tok_alice", ROOM, txn, delays[k], body));
	}
	tt_proc_kill(&e.tl);
	tt_nap_ms(800);
	gw_start_broker(&e);
	evs = gw_wait_events(&e, 5, 10000);
	cr_assert_eq(json_array_size(evs), 5);
	json_array_foreach(evs, i, ev)
	{
		cr_assert_eq(json_number_value(json_object_get(
		                 json_object_get(ev, "content"), "d")),
		    100 * (int) (i + 1), "event %zu in due order", i);
	}
	json_decref(evs);
	gw_stop(&e);
}

Test(scenarios, finalised_records_are_trimmed_and_expire)
{
	gw_env e;
	char *ids[3], path[256];
	gw_resp r;

	gw_start(&e, "gw-final", false,
	    "finalised_max = 2\nfinalised_keep_ms = 1500");
	for (int k = 0; k < 3; k++) {
		char txn[16];
		snprintf(txn, sizeof(txn), "f%d", k);
		ids[k] = gw_schedule(&e, "tok_alice", ROOM, txn, 600000, "{}");
		gw_manage_expect(&e, ids[k], "send", 200, NULL);
	}
	/* the oldest record went when the third came */
	snprintf(path, sizeof(path), UNSTABLE "/%s", ids[0]);
	gw_req_expect("GET", e.gw, path, "tok_alice", NULL, 404, "M_NOT_FOUND");
	snprintf(path, sizeof(path), UNSTABLE "/%s", ids[2]);
	gw_req_expect("GET", e.gw, path, "tok_alice", NULL, 200, NULL);
	/* and the rest expire */
	int64_t deadline = tli_mono_ms() + 10000;
	for (;;) {
		r = gw_req("GET", e.gw, path, "tok_alice", NULL);
		long st = r.status;
		gw_resp_free(&r);
		if (st == 404) {
			break;
		}
		cr_assert(tli_mono_ms() < deadline, "the record expired");
		tt_nap_ms(50);
	}
	for (int k = 0; k < 3; k++) {
		free(ids[k]);
	}
	gw_stop(&e);
}

Test(scenarios, stop_while_sending_then_sent_after_the_restart)
{
	gw_env e;
	json_t *evs;
	int64_t t0, deadline, due;
	char *id;
	int st;

	gw_start(&e, "gw-hang", false, NULL);
	gw_req_expect(
	    "POST", e.hs, "/_test/hang", NULL, "{\"seconds\":60}", 200, NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "h1", 1000, "{\"body\":\"h\"}");
	due = due_of(&e, "tok_alice", id);
	free(id);
	deadline = tli_mono_ms() + 10000;
	while (gw_hs_count(&e, "PUT", "/_matrix/client/v3/rooms/") == 0) {
		cr_assert(tli_mono_ms() < deadline, "the send started");
		tt_nap_ms(20);
	}
	/* the homeserver holds the send: stopping does not wait for it */
	t0 = tli_mono_ms();
	st = tt_proc_stop(&e.tl);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	cr_assert_lt(tli_mono_ms() - t0, 5000, "stopped promptly");
	/* the lease comes back to the same consumer id: sent now, with the
	 * time it was scheduled for (not the lease's) */
	gw_start_broker(&e);
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	cr_assert_eq((int64_t) json_number_value(json_object_get(
	                 json_array_get(evs, 0), "origin_server_ts")),
	    due, "ts = the scheduled time %lld", (long long) due);
	json_decref(evs);
	gw_stop(&e);
}

/* Many connections at once: restarts of known events (answered through
 * tl_move_async while the connection is suspended), unknown ids and lists
 * (answered by workers) each get their own answer; then the gateway stops
 * with requests in flight and exits cleanly. */
typedef struct hammer {
	const gw_env *e;
	char **ids;
	int nids;
	int n; /* requests to make, or -1: until *stop */
	atomic_bool *stop;
	int ok, notfound, other;
	long last_other;
} hammer;

static size_t
discard(char *p, size_t size, size_t n, void *arg)
{
	(void) p;
	(void) arg;
	return size * n;
}

/* Restarts until *stop, over one connection; failures (the gateway is
 * going away) are expected. */
static void
hammer_until_stop(hammer *h)
{
	CURL *c = curl_easy_init();
	char url[600];

	cr_assert(c != NULL);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	for (int i = 0; !atomic_load(h->stop); i++) {
		snprintf(url, sizeof(url), "%s" UNSTABLE "/%s/restart",
		    h->e->gw, h->ids[i % h->nids]);
		curl_easy_setopt(c, CURLOPT_URL, url);
		if (curl_easy_perform(c) != CURLE_OK) {
			tt_nap_ms(5);
		}
	}
	curl_easy_cleanup(c);
}

static void *
hammer_main(void *arg)
{
	hammer *h = arg;

	if (h->n < 0) {
		hammer_until_stop(h);
		return NULL;
	}
	for (int i = 0; i < h->n; i++) {
		gw_resp r;
		if (i % 10 == 9) {
			r = gw_req(
			    "GET", h->e->gw, UNSTABLE, "tok_alice", NULL);
		} else if (i % 10 == 8) {
			r = gw_manage(h->e, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
			    "restart");
		} else {
			r = gw_manage(h->e, h->ids[i % h->nids], "restart");
		}
		if (r.status == 200) {
			h->ok++;
		} else if (r.status == 404) {
			h->notfound++;
		} else {
			h->other++;
			h->last_other = r.status;
		}
		gw_resp_free(&r);
	}
	return NULL;
}

Test(scenarios, many_connections_then_stop_in_flight)
{
	enum { T = 8, IDS = 16, PER = 60 };
	gw_env e;
	char *ids[IDS];
	hammer h[T];
	pthread_t th[T];
	atomic_bool stop = false;
	int64_t due0;

	curl_global_init(CURL_GLOBAL_ALL);
	gw_start(&e, "gw-many", false, "rate_limits = off");
	for (int i = 0; i < IDS; i++) {
		char txn[16];
		snprintf(txn, sizeof(txn), "m%d", i);
		ids[i] = gw_schedule(
		    &e, "tok_alice", ROOM, txn, 3600000, "{\"body\":\"m\"}");
	}
	due0 = due_of(&e, "tok_alice", ids[0]);
	tt_nap_ms(20);
	memset(h, 0, sizeof(h));
	for (int i = 0; i < T; i++) {
		h[i].e = &e;
		h[i].ids = ids;
		h[i].nids = IDS;
		h[i].n = PER;
		h[i].stop = &stop;
		cr_assert_eq(
		    pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(h[i].other, 0, "thread %d: %d answers (last %ld)",
		    i, h[i].other, h[i].last_other);
		cr_assert_eq(h[i].notfound, PER / 10, "the unknown ids");
		cr_assert_eq(h[i].ok, PER - PER / 10);
	}
	cr_assert_gt(due_of(&e, "tok_alice", ids[0]), due0, "restarted");

	/* stop with requests in flight: timelined must exit by itself */
	for (int i = 0; i < T; i++) {
		h[i].n = -1;
		cr_assert_eq(
		    pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
	}
	tt_nap_ms(300);
	{
		int st = 0;
		int64_t t0 = tli_wall_ms();
		st = tt_proc_stop(&e.tl);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		    "timelined exited cleanly (status %d)", st);
		cr_assert_lt(tli_wall_ms() - t0, 20000, "and promptly");
	}
	atomic_store(&stop, true);
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
	}
	for (int i = 0; i < IDS; i++) {
		free(ids[i]);
	}
	gw_stop(&e);
	curl_global_cleanup();
}
