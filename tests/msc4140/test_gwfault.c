/*
 * The gateway under faults of the homeserver and the broker, as a client
 * developer and an operator meet them: its own appservice credentials
 * refused (at start and while sending; never passed to a user as theirs),
 * a `send` action while the homeserver is down (a bounded wait, a
 * retryable answer; restart, cancel and GET tell the truth meanwhile),
 * the operator's logs of outages and of the broker connection, and
 * Synapse's answers at scheduling time (unknown room, wrong method,
 * unknown endpoint).
 */
#include "tltest.h"

#include <signal.h>
#include <sys/wait.h>

#include "gw_util.h"

#define ROOM "!room:test"
#define CRED "ORG.TIMELINE.GATEWAY_CREDENTIALS"

/* How many times what occurs in the log of p. */
static int
log_count(const tt_proc *p, const char *what)
{
	char *s = tt_read_file(p->log);
	int n = 0;

	for (const char *q = s; q != NULL && (q = strstr(q, what)) != NULL;
	     q++) {
		n++;
	}
	free(s);
	return n;
}

/* The gateway's log (inside timelined, or the standalone one). */
static const tt_proc *
gw_log(const gw_env *e)
{
	return e->standalone ? &e->gw_proc : &e->tl;
}

/* GET one delayed event until it is finalised (at most ms). */
static gw_resp
wait_finalised(const gw_env *e, const char *id, int ms)
{
	char path[256];
	int64_t deadline = tli_mono_ms() + ms;

	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	for (;;) {
		gw_resp r = gw_req("GET", e->gw, path, "tok_alice", NULL);
		if (json_object_get(r.json, "finalised") != NULL ||
		    tli_mono_ms() > deadline) {
			return r;
		}
		gw_resp_free(&r);
		tt_nap_ms(50);
	}
}

static void
hs_post(const gw_env *e, const char *path, const char *body)
{
	gw_req_expect("POST", e->hs, path, NULL, body, 200, NULL);
}

/* ---- item 1: the gateway's own credentials ---- */

/* A homeserver that does not know as_token: the gateway does not start
 * (timelined, which runs it, exits with an error) and says why. */
Test(gwfault, refused_as_token_stops_the_gateway)
{
	char script[600], url[600];
	tt_proc hs, tl;
	char *dir = tt_mkdtemp("gwf-refused");
	int rc;

	snprintf(script, sizeof(script), "%s/tests/msc4140/fake_hs.py",
	    TL_TEST_SRCDIR);
	tt_proc_init(&hs, "python3", dir, "hs");
	tt_proc_args(&hs, script, "--ready", hs.ready, NULL);
	tt_proc_start(&hs);
	snprintf(url, sizeof(url), "ipc://%s/tl.sock", dir);
	tt_proc_init(&tl, tt_bin_timelined(), dir, "timelined");
	tt_proc_arg(&tl, "--data");
	tt_proc_arg(&tl, "%s/data", dir);
	tt_proc_args(&tl, "--listen", url, "--metrics", "off", NULL);
	tl.conf_flag = "--msc4140";
	tt_proc_set(&tl, "ready_file", "%s", tl.ready);
	tt_proc_set(&tl, "listen", "127.0.0.1:0");
	tt_proc_set(&tl, "homeserver", "%s", hs.addr);
	tt_proc_set(&tl, "as_token", "not_the_registered_one");
	tt_proc_spawn(&tl);
	rc = tt_proc_wait_exit(&tl, 15000);
	cr_assert(rc > 0, "timelined exits with an error, not %d", rc);
	cr_assert(log_count(&tl, "G007") >= 1, "the refusal is logged");
	cr_assert(log_count(&tl, "(401 M_UNKNOWN_TOKEN)") >= 1,
	    "with the homeserver's answer");
	cr_assert(log_count(&tl, "not starting") == 1);
	tt_proc_check_log(&tl);
	tt_proc_fini(&tl);
	tt_proc_kill(&hs);
	tt_proc_fini(&hs);
	tt_rmtree(dir);
	free(dir);
}

/* as_check = retry: the gateway serves, logs each refusal, and says so
 * once the homeserver takes the token (here: it learns it). */
Test(gwfault, retry_logs_each_refusal_until_accepted)
{
	gw_env e;
	char *id;
	json_t *evs;

	gw_start(
	    &e, "gwf-retry", false, "as_check = retry\nas_token = as_later");
	cr_assert(tt_proc_log_wait(gw_log(&e), "(401 M_UNKNOWN_TOKEN)", 5000));
	/* checked again with backoff (0.5 s, 1 s, ...), each refusal loud */
	cr_assert(tt_proc_log_wait(gw_log(&e), "G007", 100));
	{
		int64_t deadline = tli_mono_ms() + 5000;
		while (log_count(gw_log(&e), "(401 M_UNKNOWN_TOKEN)") < 3 &&
		    tli_mono_ms() < deadline) {
			tt_nap_ms(50);
		}
	}
	cr_assert_geq(log_count(gw_log(&e), "(401 M_UNKNOWN_TOKEN)"), 3,
	    "each refusal is logged");
	hs_post(&e, "/_test/as_token", "{\"token\":\"as_later\"}");
	cr_assert(
	    tt_proc_log_wait(gw_log(&e),
	        "accepts the gateway's appservice credentials again", 10000),
	    "the end of the refusal is logged");
	id = gw_schedule(&e, "tok_alice", ROOM, "r1", 100, "{\"b\":1}");
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1, "sent with the token");
	json_decref(evs);
	free(id);
	gw_stop(&e);
}

/* The homeserver starts refusing the gateway's token: a `send` action
 * answers 502 with the gateway's errcode (never the homeserver's 401,
 * which clients take for their own logout); an event that falls due is
 * retried, then fails with that record and a log line naming the
 * homeserver's answer. */
Test(gwfault, refusal_at_send_is_the_gateways_502)
{
	gw_env e;
	gw_resp r;
	char *id, *id2, *id3;
	int64_t t0;
	json_t *evs;

	gw_start(&e, "gwf-send401", false, "retry_for_ms = 1500");
	id = gw_schedule(&e, "tok_alice", ROOM, "c1", 600000, "{\"b\":1}");
	id2 = gw_schedule(&e, "tok_alice", ROOM, "c2", 600000, "{\"b\":2}");
	hs_post(&e, "/_test/as_token", "{\"reject\":true}");
	t0 = tli_mono_ms();
	r = gw_manage(&e, id, "send");
	gw_expect(r, 502, CRED);
	cr_assert(strstr(r.body, "401 M_UNKNOWN_TOKEN") != NULL, "%s", r.body);
	cr_assert_lt(tli_mono_ms() - t0, 3000, "answered at the first refusal");
	gw_resp_free(&r);
	/* the event fails after retry_for_ms, with the same record */
	r = wait_finalised(&e, id, 10000);
	gw_expect_finalised(r, 502, CRED);
	gw_resp_free(&r);
	r = gw_manage(&e, id, "send");
	gw_expect(r, 502, CRED);
	gw_resp_free(&r);
	cr_assert(tt_proc_log_wait(gw_log(&e),
	    "failed: the homeserver answered 401 M_UNKNOWN_TOKEN", 5000));
	cr_assert_eq(log_count(gw_log(&e), "G007"), 1,
	    "the refusal is logged when it begins, not per attempt");
	/* the homeserver takes it again: logged, and events go out */
	hs_post(&e, "/_test/as_token", "{\"reject\":false}");
	r = gw_manage(&e, id2, "send");
	gw_expect(r, 200, NULL);
	gw_resp_free(&r);
	cr_assert(tt_proc_log_wait(gw_log(&e),
	    "accepts the gateway's appservice credentials again", 5000));
	id3 = gw_schedule(&e, "tok_alice", ROOM, "c3", 100, "{\"b\":3}");
	evs = gw_wait_events(&e, 2, 10000);
	cr_assert_eq(json_array_size(evs), 2);
	json_decref(evs);
	free(id);
	free(id2);
	free(id3);
	gw_stop(&e);
}

/* A 403 is the user's (membership, power levels) unless the homeserver
 * refuses the gateway to act as that user (outside the appservice's
 * namespace): whoami as the user tells them apart. */
Test(gwfault, forbidden_is_the_users_or_the_gateways)
{
	gw_env e;
	gw_resp r;
	char *id, *id2;

	gw_start(&e, "gwf-403", false, "retry_for_ms = 500");
	hs_post(&e, "/_test/room",
	    "{\"room_id\":\"!notmine:test\",\"members\":[\"@bob:test\"]}");
	id = gw_schedule(&e, "tok_alice", "!notmine:test", "f1", 600000, "{}");
	id2 = gw_schedule(&e, "tok_alice", ROOM, "f2", 600000, "{}");
	r = gw_manage(&e, id, "send");
	gw_expect(r, 403, "M_FORBIDDEN"); /* alice is not in that room */
	gw_resp_free(&r);
	hs_post(&e, "/_test/as_token", "{\"namespace\":\"@bob:.*\"}");
	r = gw_manage(&e, id2, "send");
	gw_expect(r, 502, CRED);
	gw_resp_free(&r);
	r = wait_finalised(&e, id2, 10000);
	gw_expect_finalised(r, 502, CRED);
	gw_resp_free(&r);
	free(id);
	free(id2);
	gw_stop(&e);
}

/* ---- items 6 and 8: the homeserver down ---- */

/* A `send` action while the homeserver gives no answer: answered within
 * send_wait_ms (default 4 s) with a retryable 503; meanwhile GET shows the
 * event being sent and restart / cancel answer 409; once the homeserver
 * is back the event is sent, once. The outage is logged once when it
 * begins and once when it ends, with a count; not per event and retry. */
Test(gwfault, send_while_the_homeserver_is_down)
{
	gw_env e;
	gw_resp r;
	char *id, *others[3], path[256];
	int64_t t0, took;
	json_t *evs;

	gw_start(&e, "gwf-down", false, NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "d0", 600000, "{\"b\":0}");
	for (int i = 0; i < 3; i++) {
		char txn[16];
		snprintf(txn, sizeof(txn), "d%d", i + 1);
		others[i] = gw_schedule(&e, "tok_alice", ROOM, txn, 300, "{}");
	}
	hs_post(&e, "/_test/down", "{\"seconds\":7}");
	t0 = tli_mono_ms();
	r = gw_manage(&e, id, "send");
	took = tli_mono_ms() - t0;
	gw_expect(r, 503, "M_UNKNOWN");
	cr_assert_lt(
	    took, 5000, "answered within 5 s, took %lld ms", (long long) took);
	cr_assert_geq(took, 3500, "after waiting send_wait_ms");
	cr_assert(
	    json_number_value(json_object_get(r.json, "retry_after_ms")) > 0,
	    "%s", r.body);
	cr_assert(strstr(r.headers, "Retry-After: ") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	/* while it is being sent */
	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	r = gw_req("GET", e.gw, path, "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	cr_assert(
	    json_is_true(json_object_get(r.json, "sending")), "%s", r.body);
	gw_resp_free(&r);
	gw_manage_expect(&e, id, "restart", 409, "ORG.TIMELINE.BEING_SENT");
	gw_manage_expect(&e, id, "cancel", 409, "ORG.TIMELINE.BEING_SENT");
	/* the homeserver comes back: sent, once each */
	evs = gw_wait_events(&e, 4, 20000);
	cr_assert_eq(json_array_size(evs), 4, "all sent once back");
	json_decref(evs);
	gw_manage_expect(&e, id, "send", 200, NULL);
	gw_manage_expect(&e, id, "restart", 404, "M_NOT_FOUND");
	cr_assert(tt_proc_log_wait(gw_log(&e), "G023", 5000));
	cr_assert_eq(log_count(gw_log(&e), "G022"), 1, "one outage, one line");
	cr_assert_eq(log_count(gw_log(&e), "G023"), 1);
	cr_assert(log_count(gw_log(&e), "unreachable") == 1);
	cr_assert(log_count(gw_log(&e), "requests got no answer") == 1);
	cr_assert_eq(
	    log_count(gw_log(&e), "G021"), 0, "no line per event and retry");
	cr_assert_eq(log_count(gw_log(&e), "answered 0"), 0);
	free(id);
	for (int i = 0; i < 3; i++) {
		free(others[i]);
	}
	gw_stop(&e);
}

/* The standalone gateway loses its broker and gets it back: both are
 * logged. */
Test(gwfault, broker_reconnection_is_logged)
{
	gw_env e;

	gw_start(&e, "gwf-broker", true, NULL);
	tt_proc_kill(&e.tl);
	cr_assert(
	    tt_proc_log_wait(&e.gw_proc, "lost", 10000), "the loss is logged");
	gw_start_broker(&e);
	cr_assert(tt_proc_log_wait(
	              &e.gw_proc, "reconnected to the broker after", 15000),
	    "the reconnection is logged");
	free(gw_schedule(&e, "tok_alice", ROOM, "b1", 600000, "{}"));
	gw_stop(&e);
}

/* ---- item 5: Synapse's answers ---- */

/* A room the homeserver does not know: 404 M_NOT_FOUND when scheduling
 * (both forms), nothing stored; a room the user is not in is the
 * homeserver's to refuse when the event is sent. */
Test(gwfault, unknown_room_is_404_at_scheduling)
{
	gw_env e;

	gw_start(&e, "gwf-room", false, "stable = on");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!nowhere:test/send/m.room.message/"
	    "u1?org.matrix.msc4140.delay=60000",
	    "tok_alice", "{}", 404, "M_NOT_FOUND");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!nowhere:test/state/m.room.topic/"
	    "?org.matrix.msc4140.delay=60000",
	    "tok_alice", "{\"topic\":\"t\"}", 404, "M_NOT_FOUND");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!nowhere:test/delayed_event/"
	    "m.room.message/u2",
	    "tok_alice", "{\"delay\":60000,\"content\":{}}", 404,
	    "M_NOT_FOUND");
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 0, "nothing stored");
	hs_post(&e, "/_test/room",
	    "{\"room_id\":\"!notmine:test\",\"members\":[\"@bob:test\"]}");
	free(gw_schedule(&e, "tok_alice", "!notmine:test", "u3", 60000, "{}"));
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 1);
	gw_stop(&e);
}

/* Every endpoint of the gateway asked with another method: 405
 * M_UNRECOGNIZED; a path under its prefixes that is no endpoint: 404
 * M_UNRECOGNIZED; CORS preflights of both forms: answered. */
Test(gwfault, methods_and_unknown_endpoints)
{
	static const char *const wrong[][2] = {
	    {"GET",
	        "/_matrix/client/v3/rooms/!room:test/send/m.t/x"
	        "?org.matrix.msc4140.delay=5"},
	    {"DELETE",
	        "/_matrix/client/v3/rooms/!room:test/state/m.t/k"
	        "?org.matrix.msc4140.delay=5"},
	    {"PUT", UNSTABLE},
	    {"DELETE", UNSTABLE "/abc"},
	    {"GET", UNSTABLE "/abc/cancel"},
	    {"PUT", "/_matrix/client/v1/delayed_events"},
	    {"GET", "/_matrix/client/v1/delayed_events/abc/send"},
	    {"GET", "/_matrix/client/v3/rooms/!room:test/delayed_event/m.t/x"},
	    /* the stable form's GET of one delay_id */
	    {"POST", "/_matrix/client/v1/delayed_events/abc"},
	};
	static const char *const unknown[][2] = {
	    {"POST", UNSTABLE "/abc/send/more"},
	    {"GET", "/_matrix/client/v1/delayed_events/abc/send/more"},
	};
	static const char *const preflight[] = {UNSTABLE "/abc/send",
	    "/_matrix/client/v1/delayed_events/abc/restart",
	    "/_matrix/client/v1/delayed_events",
	    "/_matrix/client/v3/rooms/!room:test/delayed_event/m.t/x"};
	gw_env e;

	gw_start(&e, "gwf-405", false, "stable = on");
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		gw_resp r =
		    gw_req(wrong[i][0], e.gw, wrong[i][1], "tok_alice", NULL);
		gw_expect(r, 405, "M_UNRECOGNIZED");
		cr_assert(strstr(r.headers, "Allow: ") != NULL, "%s %s",
		    wrong[i][0], wrong[i][1]);
		gw_resp_free(&r);
	}
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		gw_req_expect(unknown[i][0], e.gw, unknown[i][1], "tok_alice",
		    NULL, 404, "M_UNRECOGNIZED");
	}
	for (size_t i = 0; i < sizeof(preflight) / sizeof(preflight[0]); i++) {
		gw_resp r = gw_req("OPTIONS", e.gw, preflight[i], NULL, NULL);
		cr_assert_eq(
		    r.status, 200, "OPTIONS %s: %ld", preflight[i], r.status);
		cr_assert(
		    strstr(r.headers, "Access-Control-Allow-Origin") != NULL,
		    "%s", r.headers);
		gw_resp_free(&r);
	}
	{
		static const char *const m[] = {
		    "GET", "PUT", "POST", "DELETE", "OPTIONS"};
		for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
			cr_assert_eq(
			    gw_hs_count(&e, m[i], "/_matrix/client/v1/"), 0,
			    "none of it reached the homeserver");
			cr_assert_eq(
			    gw_hs_count(&e, m[i], "/_matrix/client/unstable/"),
			    0);
		}
	}
	gw_stop(&e);
}
