/*
 * tl-chronos's answers, as the seed's "Public API Definition" gives them:
 * 200 with a Location for POST and PUT, 400 with a Reason for each kind of
 * invalid body and for an id that is not ours, a PUT to an unknown id
 * creating it, an idempotent DELETE, 503 with a Reason while the broker
 * cannot be reached, and the live timers' tags in GET /metrics.
 */
#include "tltest.h"
#include "chronos_util.h"

/* A request's answer must be 400 with a Reason holding `why`. */
static void
expect_400(ck_env *e, const char *method, const char *path, const char *body,
    const char *why)
{
	ck_resp r = ck_req(e, method, path, body);

	cr_expect_eq(
	    r.status, 400, "%s %s %s: %ld", method, path, body, r.status);
	cr_expect(strstr(r.reason, why) != NULL,
	    "%s: Reason \"%s\", want \"%s\"", body, r.reason, why);
	ck_resp_free(&r);
}

Test(api, post_answers_200_with_a_location_and_pops)
{
	ck_env e;
	char json[1024], a[33], b[33];
	ck_hit h;

	ck_start(&e, "ck-post", false, NULL);
	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/ok/a", "hello");
	ck_post(&e, json, a);
	ck_post(&e, json, b);
	/* ids are 128 random bits in hex */
	cr_expect_eq(strlen(a), 32);
	cr_expect_eq(strspn(a, "0123456789abcdef"), 32);
	cr_expect_str_neq(a, b);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/a", 2, 10000), 2);
	cr_assert_eq(ck_hits(&e.recv, "/ok/a", &h, 1), 2);
	cr_expect_str_eq(h.body, "hello");
	cr_expect_eq(h.seq, 1);
	cr_expect_eq(h.clen, 5);
	ck_stop(&e);
}

Test(api, invalid_bodies_get_400_with_a_reason)
{
	ck_env e;
	char ok[512];

	ck_start(&e, "ck-400", true, NULL);
	snprintf(ok, sizeof(ok), "{\"uri\":\"%s/ok/x\",\"opaque\":\"o\"}",
	    e.recv.url);
	static const struct {
		const char *timing, *callback, *more, *why;
	} cases[] = {
	    {NULL, NULL, NULL, "not valid JSON"},
	    {"{}", "OK", "", "timing.interval is required"},
	    {"{\"repeat-for\":5}", "OK", "", "timing.interval is required"},
	    {"{\"interval\":\"5\"}", "OK", "",
	        "timing.interval must be a "
	        "number"},
	    {"{\"interval\":-1}", "OK", "",
	        "timing.interval must not be "
	        "negative"},
	    {"{\"interval\":0}", "OK", "", "timing.interval must be more"},
	    {"{\"interval\":1,\"repeat-for\":-3}", "OK", "",
	        "timing.repeat-for must not be negative"},
	    {"{\"interval\":1,\"repeat-for\":true}", "OK", "",
	        "timing.repeat-for must be a number"},
	    {"{\"interval\":1}", NULL, "", "callback.http is required"},
	    {"{\"interval\":1}", "SMS", "", "only http callbacks"},
	    {"{\"interval\":1}", "NOURI", "", "callback.http.uri must be"},
	    {"{\"interval\":1}", "FTP", "",
	        "callback.http.uri must be an "
	        "http"},
	    {"{\"interval\":1}", "OPAQUE", "",
	        "callback.http.opaque must be "
	        "a string"},
	    {"{\"interval\":1}", "OK",
	        ",\"reliability\":{\"replication-factor\":-2}",
	        "replication-factor must be a positive integer"},
	    {"{\"interval\":1}", "OK",
	        ",\"statistics\":{\"tag-info\":[{\"type\":\"A\",\"count\":0}]}",
	        "count must be a positive integer"},
	    {"{\"interval\":1}", "OK", ",\"statistics\":{\"tag-info\":5}",
	        "tag-info must be an array"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char body[2048], cb[600];
		if (cases[i].timing == NULL) {
			expect_400(&e, "POST", "/timers",
			    "{\"timing\":", cases[i].why);
			continue;
		}
		if (cases[i].callback == NULL) {
			snprintf(cb, sizeof(cb), "%s", "");
		} else if (strcmp(cases[i].callback, "OK") == 0) {
			snprintf(
			    cb, sizeof(cb), ",\"callback\":{\"http\":%s}", ok);
		} else if (strcmp(cases[i].callback, "SMS") == 0) {
			snprintf(cb, sizeof(cb),
			    ",\"callback\":{\"sms\":{\"to\":\"1\"}}");
		} else if (strcmp(cases[i].callback, "NOURI") == 0) {
			snprintf(cb, sizeof(cb),
			    ",\"callback\":{\"http\":{\"opaque\":\"o\"}}");
		} else if (strcmp(cases[i].callback, "FTP") == 0) {
			snprintf(cb, sizeof(cb),
			    ",\"callback\":{\"http\":{\"uri\":\"ftp://x/\","
			    "\"opaque\":\"o\"}}");
		} else {
			snprintf(cb, sizeof(cb),
			    ",\"callback\":{\"http\":{\"uri\":\"%s/ok/x\","
			    "\"opaque\":7}}",
			    e.recv.url);
		}
		snprintf(body, sizeof(body), "{\"timing\":%s%s%s}",
		    cases[i].timing, cb, cases[i].more);
		expect_400(&e, "POST", "/timers", body, cases[i].why);
		expect_400(&e, "PUT",
		    "/timers/0123456789abcdef0123456789abcdef", body,
		    cases[i].why);
	}
	expect_400(&e, "POST", "/timers", "[1,2]", "must be a JSON object");
	/* nothing was stored: nothing pops */
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 0);
	tt_nap_ms(1500);
	cr_expect_eq(ck_hits(&e.recv, "/ok/x", NULL, 0), 0);
	ck_stop(&e);
}

Test(api, put_to_an_unknown_id_creates_it)
{
	ck_env e;
	char json[1024];
	ck_resp r;

	ck_start(&e, "ck-put", true, NULL);
	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/ok/put", "p1");
	r = ck_req(&e, "PUT", "/timers/00112233445566778899AABBCCDDEEFF", json);
	cr_assert_eq(r.status, 200, "%ld %s", r.status, r.reason);
	cr_expect_str_eq(
	    r.location, "/timers/00112233445566778899aabbccddeeff");
	ck_resp_free(&r);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/put", 1, 10000), 1);
	/* a PUT replaces: the new one pops, once */
	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/ok/put2", "p2");
	r = ck_req(&e, "PUT", "/timers/00112233445566778899aabbccddeeff", json);
	cr_assert_eq(r.status, 200);
	ck_resp_free(&r);
	ck_timer_json(&e, json, sizeof(json), 0.3, -1, "/ok/put3", "p3");
	r = ck_req(&e, "PUT", "/timers/00112233445566778899aabbccddeeff", json);
	cr_assert_eq(r.status, 200);
	ck_resp_free(&r);
	cr_assert_eq(ck_wait_hits(&e.recv, "/ok/put3", 1, 10000), 1);
	tt_nap_ms(700);
	cr_expect_eq(ck_hits(&e.recv, "/ok/put2", NULL, 0), 0);
	cr_expect_eq(ck_hits(&e.recv, "/ok/put3", NULL, 0), 1);
	cr_expect_eq(ck_hits(&e.recv, "/ok/put", NULL, 0), 1);
	/* ids not of our form */
	expect_400(&e, "PUT", "/timers/xyz", json, "32 hex digits");
	expect_400(&e, "PUT", "/timers/00112233445566778899aabbccddeefg", json,
	    "32 hex digits");
	expect_400(&e, "DELETE", "/timers/short", NULL, "32 hex digits");
	ck_stop(&e);
}

Test(api, delete_is_idempotent_and_the_timer_never_pops)
{
	ck_env e;
	char json[1024], id[33], path[64];
	ck_resp r;

	ck_start(&e, "ck-del", true, NULL);
	ck_timer_json(&e, json, sizeof(json), 1, -1, "/ok/del", "d");
	ck_post(&e, json, id);
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 1);
	snprintf(path, sizeof(path), "/timers/%s", id);
	for (int i = 0; i < 2; i++) {
		r = ck_req(&e, "DELETE", path, NULL);
		cr_expect_eq(r.status, 200, "DELETE #%d: %ld", i, r.status);
		ck_resp_free(&r);
	}
	r = ck_req(
	    &e, "DELETE", "/timers/ffffffffffffffffffffffffffffffff", NULL);
	cr_expect_eq(r.status, 200);
	ck_resp_free(&r);
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 0);
	tt_nap_ms(1800);
	cr_expect_eq(ck_hits(&e.recv, "/ok/del", NULL, 0), 0);
	ck_stop(&e);
}

Test(api, broker_down_is_503_with_a_reason)
{
	ck_env e;
	char json[1024];
	ck_resp r;

	ck_start(&e, "ck-503", true, NULL);
	ck_timer_json(&e, json, sizeof(json), 1, -1, "/ok/x", "x");
	tt_proc_kill(&e.tl);
	r = ck_req(&e, "POST", "/timers", json);
	cr_expect_eq(r.status, 503, "%ld", r.status);
	cr_expect(
	    strstr(r.reason, "broker") != NULL, "Reason \"%s\"", r.reason);
	ck_resp_free(&r);
	r = ck_req(
	    &e, "DELETE", "/timers/ffffffffffffffffffffffffffffffff", NULL);
	cr_expect_eq(r.status, 503, "%ld", r.status);
	ck_resp_free(&r);
	/* and it serves again once the broker is back */
	tt_proc_start(&e.tl);
	for (int i = 0; i < 100; i++) {
		r = ck_req(&e, "POST", "/timers", json);
		if (r.status == 200) {
			break;
		}
		ck_resp_free(&r);
		tt_nap_ms(100);
	}
	cr_expect_eq(r.status, 200, "%ld %s", r.status, r.reason);
	ck_resp_free(&r);
	ck_stop(&e);
}

Test(api, metrics_count_live_timers_by_tag)
{
	ck_env e;
	char json[1024], id[33], path[64];
	ck_resp r;

	ck_start(&e, "ck-metrics", false, NULL);
	snprintf(json, sizeof(json),
	    "{\"timing\":{\"interval\":100},\"callback\":{\"http\":{\"uri\":"
	    "\"%s/ok/m\",\"opaque\":\"m\"}},\"reliability\":{\"replication-"
	    "factor\":3},\"statistics\":{\"tag-info\":[{\"type\":\"REG\","
	    "\"count\":2},{\"type\":\"CALL\"}]}}",
	    e.recv.url);
	ck_post(&e, json, id);
	ck_post(&e, json, id);
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 2);
	cr_expect_eq(ck_metric(&e, "chronos_tag_count{type=\"REG\"}"), 4);
	cr_expect_eq(ck_metric(&e, "chronos_tag_count{type=\"CALL\"}"), 2);
	cr_expect_eq(
	    ck_metric(&e, "chronos_timers_by_replication_factor{factor=\"3\"}"),
	    2);
	snprintf(path, sizeof(path), "/timers/%s", id);
	r = ck_req(&e, "DELETE", path, NULL);
	cr_expect_eq(r.status, 200);
	ck_resp_free(&r);
	cr_expect_eq(ck_metric(&e, "chronos_tag_count{type=\"REG\"}"), 2);
	/* rebuilt from the stored timers at start */
	ck_restart_service(&e, SIGKILL);
	cr_expect_eq(ck_metric(&e, "chronos_timers"), 1);
	cr_expect_eq(ck_metric(&e, "chronos_tag_count{type=\"REG\"}"), 2);
	cr_expect_eq(ck_metric(&e, "chronos_tag_count{type=\"CALL\"}"), 1);
	ck_stop(&e);
}
