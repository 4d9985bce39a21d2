/*
 * What the gateway sends and passes through: event content byte for byte
 * (non-ASCII, big integers, m.room.encrypted), extra query parameters kept
 * and the gateway's own parameters never forwarded, the pass-through of
 * other requests (chunked bodies included), /versions and /capabilities,
 * errors at send time recorded (power levels), 5xx retried, and the
 * whoami cache.
 */
#include "tltest.h"
#include "gw_util.h"

#define ROOM "!room:test"

/* The body the homeserver received in the last request on path prefix. */
static char *
hs_last_body(const gw_env *e, const char *prefix, char *query, size_t qcap)
{
	json_t *a = gw_hs_requests(e), *it;
	size_t i;
	const char *b64 = NULL, *q = "";
	char *out = NULL;

	json_array_foreach(a, i, it)
	{
		const char *p = json_string_value(json_object_get(it, "path"));
		if (strncmp(p, prefix, strlen(prefix)) == 0) {
			b64 =
			    json_string_value(json_object_get(it, "body_b64"));
			q = json_string_value(json_object_get(it, "query"));
		}
	}
	if (b64 != NULL) {
		/* decode with the shell-free way: a tiny base64 decoder */
		static const char tbl[] =
		    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
		    "nopqrstuvwxyz0123456789+/";
		size_t n = strlen(b64), o = 0;
		uint32_t acc = 0;
		int bits = 0;
		out = calloc(1, n + 1);
		for (size_t k = 0; k < n && b64[k] != '='; k++) {
			const char *pos = strchr(tbl, b64[k]);
			acc = (acc << 6) | (uint32_t) (pos - tbl);
			bits += 6;
			if (bits >= 8) {
				bits -= 8;
				out[o++] = (char) ((acc >> bits) & 0xff);
			}
		}
		out[o] = '\0';
		snprintf(query, qcap, "%s", q);
	}
	json_decref(a);
	return out;
}

Test(sending, content_passes_byte_for_byte)
{
	gw_env e;
	char query[1024], *got;
	/* odd spacing, non-ASCII, an integer beyond 2^64, escapes, a float
	 * with many digits: any re-serialisation would change something */
	const char *content =
	    "{ \"algorithm\" : \"m.megolm.v1.aes-sha2\",\n\t\"ciphertext\":"
	    "\"AwgAEn\\u00e9\\/x\", \"n\": 123456789012345678901234567890,"
	    " \"f\": 1.000000000000000000001, \"é\": \"日本語 🎉\", "
	    "\"nested\": {\"a\": [1, 2, {}]} }";

	gw_start(&e, "gw-bytes", false, NULL);
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.encrypted/b1"
	    "?org.matrix.msc4140.delay=300&org.matrix.msc4354.sticky_duration_"
	    "ms=3600000&user_id=%40bob%3Atest&ts=1&access_token=tok_alice",
	    NULL, content, 200, NULL);
	json_decref(gw_wait_events(&e, 1, 10000));
	got = hs_last_body(&e,
	    "/_matrix/client/v3/rooms/%21room%3Atest/send/m.room.encrypted/",
	    query, sizeof(query));
	cr_assert(got != NULL, "the homeserver got the event");
	cr_assert_str_eq(got, content, "the content is unchanged");
	/* the extra parameter is kept; the caller cannot choose the user,
	 * the timestamp or leak its token to the send */
	cr_assert(strstr(query,
	              "org.matrix.msc4354.sticky_duration_ms="
	              "3600000") != NULL,
	    "%s", query);
	cr_assert(
	    strstr(query, "user_id=%40alice%3Atest") != NULL, "%s", query);
	cr_assert(strstr(query, "bob") == NULL, "%s", query);
	cr_assert(strstr(query, "access_token") == NULL, "%s", query);
	{
		/* exactly one ts, the scheduled time (not the caller's 1) */
		int nts = 0;
		char *save = NULL, *q = strdup(query);
		for (char *t = strtok_r(q, "&", &save); t != NULL;
		     t = strtok_r(NULL, "&", &save)) {
			if (strncmp(t, "ts=", 3) == 0) {
				nts++;
				cr_assert_gt(
				    strtoll(t + 3, NULL, 10), 1000000000);
			}
		}
		free(q);
		cr_assert_eq(nts, 1, "%s", query);
	}
	cr_assert(strstr(query, "org.matrix.msc4140") == NULL, "%s", query);
	free(got);
	gw_stop(&e);
}

Test(sending, passthrough_of_other_requests)
{
	gw_env e;
	gw_resp r;
	char big[5000];

	gw_start(&e, "gw-pass", false, NULL);
	/* versions and capabilities keep the homeserver's answer and add
	 * ours */
	r = gw_req("GET", e.gw, "/_matrix/client/versions", NULL, NULL);
	gw_expect(r, 200, NULL);
	cr_assert(json_is_true(
	    json_object_get(json_object_get(r.json, "unstable_features"),
	        "org.matrix.msc4140")));
	cr_assert(json_is_true(json_object_get(
	    json_object_get(r.json, "unstable_features"), "x.other")));
	gw_resp_free(&r);
	r = gw_req(
	    "GET", e.gw, "/_matrix/client/v3/capabilities", "tok_alice", NULL);
	gw_expect(r, 200, NULL);
	{
		json_t *caps = json_object_get(r.json, "capabilities");
		json_t *d =
		    json_object_get(caps, "org.matrix.msc4140.delayed_events");
		cr_assert(json_object_get(caps, "m.change_password") != NULL);
		cr_assert_eq(
		    json_number_value(json_object_get(d, "max_delay_ms")),
		    86400000);
		cr_assert_eq(
		    json_number_value(json_object_get(d, "max_scheduled")),
		    100);
	}
	gw_resp_free(&r);
	/* an ordinary send goes through as it is, with its answer */
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.message/plain1",
	    "tok_bob", "{\"body\":\"direct\"}");
	gw_expect(r, 200, NULL);
	cr_assert_str_eq(gw_str(&r, "event_id"), "$ev1");
	cr_assert(strstr(r.headers, "X-Fake-HS: yes") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	/* an error status and body come back verbatim */
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!nope:test/send/m.room.message/p2",
	    "tok_bob", "{}", 403, "M_FORBIDDEN");
	/* a chunked body arrives whole */
	memset(big, 'x', sizeof(big));
	r = gw_req_full("POST", e.gw, "/_matrix/client/v3/echo?a=%2F&b=1", NULL,
	    big, sizeof(big), true);
	gw_expect(r, 200, NULL);
	cr_assert_eq(
	    json_number_value(json_object_get(r.json, "len")), sizeof(big));
	cr_assert_str_eq(
	    gw_str(&r, "query"), "/_matrix/client/v3/echo?a=%2F&b=1");
	gw_resp_free(&r);
	gw_stop(&e);
}

Test(sending, forbidden_at_send_time_is_recorded)
{
	gw_env e;
	gw_resp r;
	char path[256], *id;

	gw_start(&e, "gw-403", false, NULL);
	gw_req_expect("POST", e.hs, "/_test/room", NULL,
	    "{\"room_id\":\"!pl:test\",\"enforce\":true,\"power\":{\"users\":"
	    "{\"@alice:test\":100},\"users_default\":0,\"state_default\":50,"
	    "\"events_default\":0,\"events\":{}}}",
	    200, NULL);
	/* bob may schedule, but has no power to set state when it is sent */
	r = gw_req("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!pl:test/state/m.room.topic/"
	    "?org.matrix.msc4140.delay=60000",
	    "tok_bob", "{\"topic\":\"t\"}");
	gw_expect(r, 200, NULL);
	id = strdup(gw_str(&r, "delay_id"));
	gw_resp_free(&r);
	r = gw_manage(&e, id, "send");
	gw_expect(r, 403, "M_FORBIDDEN");
	cr_assert(strstr(r.body, "user_level (0) < send_level (50)") != NULL);
	gw_resp_free(&r);
	/* sending again answers the same error */
	gw_manage_expect(&e, id, "send", 403, "M_FORBIDDEN");
	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	r = gw_req("GET", e.gw, path, "tok_bob", NULL);
	gw_expect(r, 200, NULL);
	gw_expect_finalised(r, 403, "M_FORBIDDEN");
	gw_resp_free(&r);
	cr_assert_eq(gw_list_len(&e, "tok_bob"), 0);
	free(id);
	gw_stop(&e);
}

Test(sending, server_errors_are_retried)
{
	gw_env e;
	json_t *evs;

	gw_start(&e, "gw-5xx", false, NULL);
	gw_req_expect("POST", e.hs, "/_test/fail", NULL,
	    "{\"statuses\":[500,502,503]}", 200, NULL);
	free(gw_schedule(&e, "tok_alice", ROOM, "f1", 200, "{\"body\":\"f\"}"));
	evs = gw_wait_events(&e, 1, 15000);
	cr_assert_eq(json_array_size(evs), 1, "sent after three failures");
	json_decref(evs);
	cr_assert_eq(gw_hs_count(&e, "PUT",
	                 "/_matrix/client/v3/rooms/%21room%3Atest/send/"),
	    4);
	gw_stop(&e);
}

Test(sending, whoami_is_cached)
{
	gw_env e;
	size_t before;

	gw_start(&e, "gw-whoami", false, NULL);
	/* the gateway's check of its own token at start is one more */
	before = gw_hs_count(&e, "GET", "/_matrix/client/v3/account/whoami");
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(gw_list_len(&e, "tok_alice"), 0);
	}
	cr_assert_eq(
	    gw_hs_count(&e, "GET", "/_matrix/client/v3/account/whoami"),
	    before + 1);
	/* a guest is a user like any other */
	free(gw_schedule(&e, "tok_guest", ROOM, "g1", 60000, "{}"));
	cr_assert_eq(gw_list_len(&e, "tok_guest"), 1);
	gw_stop(&e);
}

Test(sending, retries_are_bounded)
{
	gw_env e;
	gw_resp r;
	char *id, path[256];
	int64_t deadline;

	gw_start(&e, "gw-giveup", false, "retry_for_ms = 500");
	gw_req_expect("POST", e.hs, "/_test/fail", NULL,
	    "{\"statuses\":[502,502,502,502,502,502,502,502,502,502]}", 200,
	    NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "g1", 100, "{}");
	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	deadline = tli_mono_ms() + 10000;
	for (;;) {
		r = gw_req("GET", e.gw, path, "tok_alice", NULL);
		if (json_object_get(r.json, "finalised") != NULL) {
			break;
		}
		gw_resp_free(&r);
		cr_assert(tli_mono_ms() < deadline, "given up and recorded");
		tt_nap_ms(50);
	}
	gw_expect_finalised(r, 502, "M_UNKNOWN");
	gw_resp_free(&r);
	cr_assert_lt(gw_hs_count(&e, "PUT", "/_matrix/client/v3/rooms/"), 10,
	    "it stopped trying");
	free(id);
	gw_stop(&e);
}

Test(sending, cors_preflights_of_ours_are_answered)
{
	gw_env e;
	gw_resp r;

	gw_start(&e, "gw-cors", false, NULL);
	r = gw_req("OPTIONS", e.gw,
	    "/_matrix/client/v3/rooms/" ROOM "/send/m.room.message/c1"
	    "?org.matrix.msc4140.delay=1000",
	    NULL, NULL);
	gw_expect(r, 200, NULL);
	cr_assert(strstr(r.headers, "Access-Control-Allow-Origin: *") != NULL,
	    "%s", r.headers);
	gw_resp_free(&r);
	r = gw_req("OPTIONS", e.gw, UNSTABLE "/abc/restart", NULL, NULL);
	gw_expect(r, 200, NULL);
	cr_assert(strstr(r.headers, "Access-Control-Allow-Headers: ") != NULL);
	gw_resp_free(&r);
	cr_assert_eq(gw_hs_count(&e, "OPTIONS", "/"), 0, "not forwarded");
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 0);
	gw_stop(&e);
}
