/*
 * When a delayed event's current delay began (delayed_since_ts and
 * running_since): at scheduling, moved by a restart, the same after the
 * gateway crashed, while the event is being sent and in its finalised
 * record after a send action; and the finalised records of sent,
 * cancelled and failed events, alike by GET of the id in both forms and
 * in the stable list.
 */
#include "tltest.h"
#include "gw_util.h"

#define ROOM "!room:test"
#define STABLE_DE "/_matrix/client/v1/delayed_events"

static gw_resp
get_one(const gw_env *e, const char *base, const char *token, const char *id)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", base, id);
	return gw_req("GET", e->gw, path, token, NULL);
}

static int64_t
num(json_t *j, const char *key)
{
	json_t *v = json_object_get(j, key);

	cr_assert(json_is_number(v), "%s is a number", key);
	return (int64_t) json_number_value(v);
}

static int64_t
since_of(const gw_env *e, const char *id)
{
	gw_resp r = get_one(e, UNSTABLE, "tok_alice", id);
	int64_t s;

	gw_expect(r, 200, NULL);
	s = num(r.json, "delayed_since_ts");
	gw_resp_free(&r);
	return s;
}

/* The stable list's item of id (scheduled or finalised), owned. */
static json_t *
stable_item(const gw_env *e, const char *which, const char *id)
{
	char path[256];
	gw_resp r;
	json_t *it, *out = NULL;
	size_t i;

	snprintf(
	    path, sizeof(path), STABLE_DE "?status=%s&delay_id=%s", which, id);
	r = gw_req("GET", e->gw, path, "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	json_array_foreach(json_object_get(r.json, which), i, it)
	{
		out = json_incref(it);
	}
	gw_resp_free(&r);
	return out;
}

typedef struct send_arg {
	const gw_env *e;
	const char *id;
	long status;
} send_arg;

static void *
send_thread(void *p)
{
	send_arg *a = p;
	gw_resp r = gw_manage(a->e, a->id, "send");

	a->status = r.status;
	gw_resp_free(&r);
	return NULL;
}

static size_t
hs_sends(const gw_env *e)
{
	return gw_hs_count(e, "PUT", "/_matrix/client/v3/rooms/");
}

Test(gwrec_final, since_through_restart_crash_and_send)
{
	gw_env e;
	int64_t t0, t1, since, s2;
	char *id;
	json_t *it;
	pthread_t th;
	send_arg a;
	gw_resp r;

	gw_start(&e, "gw-since", false, "stable = on");
	t0 = tli_wall_ms();
	id = gw_schedule(&e, "tok_alice", ROOM, "s1", 8000, "{\"body\":\"s\"}");
	t1 = tli_wall_ms();
	since = since_of(&e, id);
	cr_assert(since >= t0 - 2 && since <= t1 + 2, "scheduled at %lld",
	    (long long) since);
	tt_nap_ms(300);
	t0 = tli_wall_ms();
	gw_manage_expect(&e, id, "restart", 200, NULL);
	t1 = tli_wall_ms();
	since = since_of(&e, id);
	cr_assert(since >= t0 - 2 && since <= t1 + 2, "restarted at %lld",
	    (long long) since);
	it = stable_item(&e, "scheduled", id);
	cr_assert_eq(num(it, "running_since"), since);
	json_decref(it);

	gw_restart(&e, SIGKILL);
	cr_assert_eq(since_of(&e, id), since, "the same after a crash");

	/* the homeserver holds the send: the event is being sent */
	gw_req_expect(
	    "POST", e.hs, "/_test/hang", NULL, "{\"seconds\":3}", 200, NULL);
	a = (send_arg){&e, id, 0};
	cr_assert_eq(pthread_create(&th, NULL, send_thread, &a), 0);
	for (int i = 0; i < 500 && hs_sends(&e) == 0; i++) {
		tt_nap_ms(10);
	}
	cr_assert_eq(hs_sends(&e), 1, "being sent");
	s2 = since_of(&e, id);
	cr_assert_eq(s2, since, "while it is sent: %lld, not %lld",
	    (long long) s2, (long long) since);
	pthread_join(th, NULL);
	cr_assert_eq(a.status, 200);

	r = get_one(&e, UNSTABLE, "tok_alice", id);
	gw_expect(r, 200, NULL);
	cr_assert_eq(num(r.json, "delayed_since_ts"), since, "after the send");
	cr_assert_str_eq(json_string_value(json_object_get(
	                     json_object_get(r.json, "finalised"), "reason")),
	    "action");
	gw_resp_free(&r);
	it = stable_item(&e, "finalised", id);
	cr_assert_eq(
	    num(json_object_get(it, "delayed_event"), "running_since"), since);
	json_decref(it);
	free(id);
	gw_stop(&e);
}

/* GET of id in both forms: 200 with the same finalised object, which is
 * the stable list's item but its delayed_event. Returns it (owned). */
static json_t *
finalised_alike(const gw_env *e, const char *id)
{
	gw_resp u = get_one(e, UNSTABLE, "tok_alice", id);
	gw_resp s = get_one(e, STABLE_DE, "tok_alice", id);
	json_t *item = stable_item(e, "finalised", id), *f;

	gw_expect(u, 200, NULL);
	gw_expect(s, 200, NULL);
	f = json_object_get(u.json, "finalised");
	cr_assert(json_is_object(f), "a finalised record: %s", u.body);
	cr_assert(json_equal(f, json_object_get(s.json, "finalised")),
	    "both forms alike: %s / %s", u.body, s.body);
	cr_assert_not_null(item, "listed");
	cr_assert(json_is_object(json_object_get(item, "delayed_event")));
	json_object_del(item, "delayed_event");
	cr_assert(json_equal(f, item), "as listed");
	cr_assert(json_is_number(json_object_get(f, "origin_server_ts")));
	cr_assert_str_eq(gw_str(&u, "delay_id"), id);
	json_incref(f);
	gw_resp_free(&u);
	gw_resp_free(&s);
	json_decref(item);
	/* never another user's */
	u = get_one(e, UNSTABLE, "tok_bob", id);
	gw_expect(u, 404, "M_NOT_FOUND");
	gw_resp_free(&u);
	u = get_one(e, STABLE_DE, "tok_bob", id);
	gw_expect(u, 404, "M_NOT_FOUND");
	gw_resp_free(&u);
	return f;
}

static const char *
fstr(json_t *f, const char *key)
{
	json_t *v = json_object_get(f, key);

	return json_is_string(v) ? json_string_value(v) : "";
}

Test(gwrec_final, finalised_records_in_both_forms)
{
	gw_env e;
	char *failed, *sent, *cancelled;
	json_t *f, *evs;

	gw_start(&e, "gw-final", false, "stable = on");
	gw_req_expect("POST", e.hs, "/_test/fail", NULL, "{\"statuses\":[403]}",
	    200, NULL);
	failed = gw_schedule(&e, "tok_alice", ROOM, "f1", 50, "{}");
	for (int i = 0; i < 500 && hs_sends(&e) == 0; i++) {
		tt_nap_ms(10);
	}
	sent = gw_schedule(&e, "tok_alice", ROOM, "f2", 50, "{}");
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	json_decref(evs);
	cancelled = gw_schedule(&e, "tok_alice", ROOM, "f3", 600000, "{}");
	gw_manage_expect(&e, cancelled, "cancel", 200, NULL);
	/* a finalised record is written just before the event goes */
	for (int i = 0; i < 500; i++) {
		gw_resp r = get_one(&e, UNSTABLE, "tok_alice", sent);
		bool fin = json_object_get(r.json, "finalised") != NULL;
		gw_resp_free(&r);
		if (fin) {
			break;
		}
		tt_nap_ms(10);
	}

	f = finalised_alike(&e, sent);
	cr_assert_str_eq(fstr(f, "outcome"), "send");
	cr_assert_str_eq(fstr(f, "reason"), "delay");
	cr_assert_str_eq(fstr(f, "event_id"), "$ev1");
	cr_assert_null(json_object_get(f, "error"));
	json_decref(f);

	f = finalised_alike(&e, cancelled);
	cr_assert_str_eq(fstr(f, "outcome"), "cancel");
	cr_assert_str_eq(fstr(f, "reason"), "action");
	cr_assert_null(json_object_get(f, "event_id"));
	cr_assert_null(json_object_get(f, "error"));
	json_decref(f);

	f = finalised_alike(&e, failed);
	cr_assert_str_eq(fstr(f, "outcome"), "cancel");
	cr_assert_str_eq(fstr(f, "reason"), "error");
	cr_assert_eq(json_number_value(json_object_get(f, "status")), 403);
	cr_assert_str_eq(
	    fstr(json_object_get(f, "error"), "errcode"), "M_UNKNOWN");
	json_decref(f);
	free(failed);
	free(sent);
	free(cancelled);
	gw_stop(&e);
}
