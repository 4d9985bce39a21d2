/*
 * Bad inputs and limits: each gets its Matrix error and changes nothing
 * (no event scheduled, nothing sent to the homeserver): broken JSON, huge
 * bodies (plain and chunked), absurd delays, the maximum delay in both
 * shapes, the per-user limit, scheduling and management rate limits, a
 * storm of guessed delay_ids, our parameters on an endpoint that is not
 * ours.
 */
#include "tltest.h"

#include <sys/socket.h>

#include "gw_util.h"

#define SEND_PATH "/_matrix/client/v3/rooms/!room:test/send/m.room.message/"

/* Nothing was scheduled for alice and nothing reached the room. */
static void
nothing_changed(const gw_env *e)
{
	json_t *evs = gw_hs_events(e);

	cr_assert_eq(gw_list_len(e, "tok_alice"), 0, "nothing scheduled");
	cr_assert_eq(json_array_size(evs), 0, "nothing sent");
	json_decref(evs);
	cr_assert_eq(gw_hs_count(e, "PUT", "/_matrix/client/v3/rooms/"), 0,
	    "nothing forwarded");
}

Test(errors, bad_bodies)
{
	gw_env e;
	gw_resp r;
	char *big;
	size_t n = 70 * 1024;

	gw_start(&e, "gw-badbody", false, NULL);
	gw_req_expect("PUT", e.gw, SEND_PATH "j1?org.matrix.msc4140.delay=100",
	    "tok_alice", "{\"body\": ", 400, "M_NOT_JSON");
	gw_req_expect("PUT", e.gw, SEND_PATH "j2?org.matrix.msc4140.delay=100",
	    "tok_alice", "[1,2]", 400, "M_BAD_JSON");
	gw_req_expect("PUT", e.gw, SEND_PATH "j3?org.matrix.msc4140.delay=100",
	    "tok_alice", "", 400, "M_NOT_JSON");
	gw_req_expect("PUT", e.gw, SEND_PATH "j4?org.matrix.msc4140.delay=100",
	    "tok_alice", "{\"a\":1} trailing", 400, "M_NOT_JSON");
	/* over the 64 KiB event limit, with a length and chunked */
	big = malloc(n + 1);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	r = gw_req_full("PUT", e.gw,
	    SEND_PATH "j5?org.matrix.msc4140.delay=100", "tok_alice", big, n,
	    false);
	gw_expect(r, 413, "M_TOO_LARGE");
	gw_resp_free(&r);
	r = gw_req_full("PUT", e.gw,
	    SEND_PATH "j6?org.matrix.msc4140.delay=100", "tok_alice", big, n,
	    true);
	gw_expect(r, 413, "M_TOO_LARGE");
	gw_resp_free(&r);
	/* a chunked body under the limit is read whole */
	memset(big, ' ', n);
	memcpy(big, "{\"k\":\"", 6);
	memset(big + 6, 'v', 3000);
	memcpy(big + 3006, "\"}", 2);
	r = gw_req_full("PUT", e.gw,
	    SEND_PATH "j7?org.matrix.msc4140.delay=600000", "tok_alice", big,
	    3008, true);
	gw_expect(r, 200, NULL);
	gw_resp_free(&r);
	{
		gw_resp l = gw_req("GET", e.gw, UNSTABLE, "tok_alice", NULL);
		json_t *c = json_object_get(
		    json_array_get(
		        json_object_get(l.json, "delayed_events"), 0),
		    "content");
		cr_assert_eq(
		    strlen(json_string_value(json_object_get(c, "k"))), 3000);
		gw_resp_free(&l);
	}
	free(big);
	gw_stop(&e);
}

/* r refuses a delay over the maximum with this status and errcode, in the
 * shape matrix-js-sdk understands (MSC4140's errcode and the maximum). */
static void
max_delay_refused(const gw_resp *r, int st, const char *code, double max)
{
	gw_expect(*r, st, code);
	cr_assert_str_eq(
	    gw_str(r, "org.matrix.msc4140.errcode"), "M_MAX_DELAY_EXCEEDED");
	cr_assert_eq(json_number_value(json_object_get(
	                 r->json, "org.matrix.msc4140.max_delay")),
	    max);
}

Test(errors, absurd_delays)
{
	gw_env e;
	gw_resp r;
	static const char *bad[] = {
	    "-1", "1.5", "abc", "", "1e3", "%2B5", "0x10", NULL};

	gw_start(&e, "gw-delay", false, NULL);
	for (int i = 0; bad[i] != NULL; i++) {
		char path[256];
		snprintf(path, sizeof(path),
		    SEND_PATH "d%d?org.matrix.msc4140.delay=%s", i, bad[i]);
		gw_req_expect("PUT", e.gw, path, "tok_alice", "{}", 400,
		    "M_INVALID_PARAM");
	}
	/* over the maximum: the shape matrix-js-sdk understands */
	r = gw_req("PUT", e.gw,
	    SEND_PATH "m1?org.matrix.msc4140.delay=86400001", "tok_alice",
	    "{}");
	max_delay_refused(&r, 400, "M_UNKNOWN", 86400000);
	gw_resp_free(&r);
	gw_req_expect("PUT", e.gw,
	    SEND_PATH "m2?org.matrix.msc4140.delay=99999999999999999999999",
	    "tok_alice", "{}", 400, "M_UNKNOWN");
	/* our parameter on an endpoint that is not ours: not forwarded */
	gw_req_expect("GET", e.gw,
	    "/_matrix/client/v3/rooms/!room:test/messages"
	    "?org.matrix.msc4140.delay=5",
	    "tok_alice", NULL, 400, "M_UNRECOGNIZED");
	cr_assert_eq(gw_hs_count(&e, "GET", "/_matrix/client/v3/rooms/"), 0);
	nothing_changed(&e);
	gw_stop(&e);
}

Test(errors, max_delay_forbidden_option)
{
	gw_env e;
	gw_resp r;

	gw_start(&e, "gw-maxd", false,
	    "max_delay_exceeded = forbidden\nmax_delay_ms = 5000");
	r = gw_req("PUT", e.gw, SEND_PATH "m1?org.matrix.msc4140.delay=5001",
	    "tok_alice", "{}");
	max_delay_refused(&r, 403, "M_FORBIDDEN", 5000);
	gw_resp_free(&r);
	nothing_changed(&e);
	gw_stop(&e);
}

Test(errors, per_user_limit)
{
	gw_env e;
	gw_resp r;
	char *ids[5];

	gw_start(&e, "gw-limit", false, "max_scheduled = 5");
	for (int i = 0; i < 5; i++) {
		char txn[16];
		snprintf(txn, sizeof(txn), "u%d", i);
		ids[i] = gw_schedule(
		    &e, "tok_alice", "!room:test", txn, 600000, "{}");
	}
	r = gw_req("PUT", e.gw, SEND_PATH "u5?org.matrix.msc4140.delay=600000",
	    "tok_alice", "{}");
	gw_expect(r, 429, "M_LIMIT_EXCEEDED");
	cr_assert(
	    json_number_value(json_object_get(r.json, "retry_after_ms")) > 0);
	cr_assert(strstr(r.headers, "Retry-After: ") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 5);
	/* another user is not affected; a cancel frees a place */
	free(gw_schedule(&e, "tok_bob", "!room:test", "b1", 600000, "{}"));
	gw_manage_expect(&e, ids[0], "cancel", 200, NULL);
	free(gw_schedule(&e, "tok_alice", "!room:test", "u6", 600000, "{}"));
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 5);
	for (int i = 0; i < 5; i++) {
		free(ids[i]);
	}
	gw_stop(&e);
}

Test(errors, rate_limits)
{
	gw_env e;
	gw_resp r;
	char *id;
	int limited = 0;

	gw_start(&e, "gw-rate", false,
	    "schedule_rate = 0.5\nschedule_burst = 3\nmanage_rate = 0.5\n"
	    "manage_burst = 4");
	id = gw_schedule(&e, "tok_bob", "!room:test", "r0", 600000, "{}");
	free(gw_schedule(&e, "tok_bob", "!room:test", "r1", 600000, "{}"));
	free(gw_schedule(&e, "tok_bob", "!room:test", "r2", 600000, "{}"));
	gw_req_expect("PUT", e.gw,
	    SEND_PATH "r3?org.matrix.msc4140.delay=600000", "tok_bob", "{}",
	    429, "M_LIMIT_EXCEEDED");
	cr_assert_eq(gw_list_len(&e, "tok_bob"), 3);
	/* restarts of one delay_id: a burst, then 429 */
	for (int i = 0; i < 6; i++) {
		r = gw_manage(&e, id, "restart");
		cr_assert(r.status == 200 || r.status == 429);
		limited += r.status == 429;
		gw_resp_free(&r);
	}
	cr_assert_eq(limited, 2);
	free(id);
	gw_stop(&e);
}

Test(errors, guessed_id_storm_is_throttled)
{
	gw_env e;
	gw_resp r;
	char *id;

	gw_start(&e, "gw-storm", false, NULL);
	id = gw_schedule(&e, "tok_alice", "!room:test", "s0", 600000, "{}");
	for (int i = 0; i < 5; i++) {
		char guess[64];
		snprintf(guess, sizeof(guess), "guess%027d", i);
		gw_manage_expect(&e, guess, "send", 404, "M_NOT_FOUND");
	}
	/* from this IP, guesses are refused for a while */
	r = gw_manage(&e, "guess000000000000000000000000099", "send");
	gw_expect(r, 429, "M_LIMIT_EXCEEDED");
	cr_assert(
	    strstr(r.headers, "Retry-After: 10") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	/* but never an id that exists (tests/msc4140/test_gwrec_storm.c) */
	gw_manage_expect(&e, id, "restart", 200, NULL);
	cr_assert_eq(
	    gw_list_len(&e, "tok_alice"), 1, "the event is still there");
	free(id);
	gw_stop(&e);
}

Test(errors, bad_room_ids_and_types)
{
	gw_env e;

	gw_start(&e, "gw-badroom", false, NULL);
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/%23alias%3Atest/send/m.room.message/"
	    "a1?org.matrix.msc4140.delay=100",
	    "tok_alice", "{}", 400, "M_INVALID_PARAM");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!room:test/send/m.room%0Amessage/"
	    "a2?org.matrix.msc4140.delay=100",
	    "tok_alice", "{}", 400, "M_INVALID_PARAM");
	gw_req_expect("PUT", e.gw,
	    "/_matrix/client/v3/rooms/!room:test/send/m.room%ZZmessage/"
	    "a3?org.matrix.msc4140.delay=100",
	    "tok_alice", "{}", 400, "M_UNRECOGNIZED");
	nothing_changed(&e);
	/* a room the user is not in: refused by the homeserver when sent
	 * (membership is checked then), and recorded */
	gw_req_expect("POST", e.hs, "/_test/room", NULL,
	    "{\"room_id\":\"!notmine:test\",\"members\":[\"@bob:test\"]}", 200,
	    NULL);
	free(gw_schedule(&e, "tok_alice", "!notmine:test", "a4", 100, "{}"));
	{
		int64_t deadline = tli_mono_ms() + 10000;
		while (
		    gw_hs_count(&e, "PUT", "/_matrix/client/v3/rooms/") == 0 &&
		    tli_mono_ms() < deadline) {
			tt_nap_ms(20);
		}
	}
	json_t *evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 0);
	json_decref(evs);
	gw_stop(&e);
}

Test(errors, junk_on_the_socket_does_not_hurt)
{
	gw_env e;
	static const char *junk[] = {
	    "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\r\n\r\n",
	    "GET /"
	    "%%%%%%%% HTTP/1.1\r\nHost: x\r\n\r\n",
	    "PUT /_matrix/client/v3/rooms/!room:test/send/m.room.message/x?"
	    "org.matrix.msc4140.delay=5 HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 99999999999999999999\r\n\r\n{}",
	    "POST " UNSTABLE "/abc HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
	    NULL};
	int port;

	gw_start(&e, "gw-junk", false, NULL);
	cr_assert(sscanf(e.gw, "http://127.0.0.1:%d", &port) == 1);
	for (int i = 0; junk[i] != NULL; i++) {
		char buf[512];
		int fd = tt_tcp_connect(port);
		cr_assert(
		    fd >= 0, "connect to port %d: %s", port, strerror(errno));
		cr_assert(write(fd, junk[i], strlen(junk[i])) > 0);
		shutdown(fd, SHUT_WR);
		while (read(fd, buf, sizeof(buf)) > 0) {
		}
		close(fd);
	}
	/* a long header and a long path */
	{
		char *big = malloc(100000);
		memset(big, 'a', 99999);
		big[99999] = '\0';
		memcpy(big, "/x", 2);
		CURL *c = curl_easy_init();
		char url[100200];
		snprintf(url, sizeof(url), "%s%s", e.gw, big);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
		curl_easy_perform(c);
		curl_easy_cleanup(c);
		free(big);
	}
	gw_req_expect("GET", e.gw, UNSTABLE, "tok_alice", NULL, 200, NULL);
	nothing_changed(&e);
	gw_stop(&e);
}

Test(errors, a_bad_gateway_configuration_stops_timelined)
{
	char *dir = tt_mkdtemp("gw-badconf");
	tt_proc p;
	int code;

	tt_proc_init(&p, tt_bin_timelined(), dir, "timelined");
	tt_proc_arg(&p, "--data");
	tt_proc_arg(&p, "%s/data", dir);
	tt_proc_arg(&p, "--listen");
	tt_proc_arg(&p, "ipc://%s/tl.sock", dir);
	tt_proc_args(&p, "--metrics", "off", NULL);
	p.conf_flag = "--msc4140";
	tt_proc_set(&p, "listen", "127.0.0.1:0");
	tt_proc_set(&p, "homeserver", "http://127.0.0.1:1"); /* no as_token */
	tt_proc_spawn(&p);
	code = tt_proc_wait_exit(&p, p.timeout_ms);
	cr_assert_eq(code, 1, "exit code %d", code);
	tt_proc_fini(&p);
	tt_rmtree(dir);
	free(dir);
}

typedef struct par_arg {
	const gw_env *e;
	char txn[16];
	long status;
	char id[64];
} par_arg;

static void *
par_schedule(void *a)
{
	par_arg *p = a;
	char path[256];
	gw_resp r;

	snprintf(path, sizeof(path),
	    SEND_PATH "%s?org.matrix.msc4140.delay=600000", p->txn);
	r = gw_req("PUT", p->e->gw, path, "tok_alice", "{}");
	p->status = r.status;
	snprintf(p->id, sizeof(p->id), "%s", gw_str(&r, "delay_id"));
	gw_resp_free(&r);
	return NULL;
}

/* Concurrent requests of one user: the limit holds exactly, and repeats
 * of one transaction all get the same delay_id. */
Test(errors, concurrent_requests_keep_the_limit_and_the_transaction)
{
	gw_env e;
	par_arg args[10];
	pthread_t t[10];
	int ok = 0;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	gw_start(&e, "gw-par", false, "max_scheduled = 5");
	for (int i = 0; i < 10; i++) {
		args[i].e = &e;
		snprintf(args[i].txn, sizeof(args[i].txn), "same");
		pthread_create(&t[i], NULL, par_schedule, &args[i]);
	}
	for (int i = 0; i < 10; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(args[i].status, 200);
		cr_assert_str_eq(args[i].id, args[0].id, "one delay_id");
	}
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 1);
	for (int i = 0; i < 10; i++) {
		snprintf(args[i].txn, sizeof(args[i].txn), "p%d", i);
		pthread_create(&t[i], NULL, par_schedule, &args[i]);
	}
	for (int i = 0; i < 10; i++) {
		pthread_join(t[i], NULL);
		cr_assert(args[i].status == 200 || args[i].status == 429);
		ok += args[i].status == 200;
	}
	cr_assert_eq(ok, 4, "the limit of 5 holds (1 + 4)");
	cr_assert_eq(gw_list_len(&e, "tok_alice"), 5);
	gw_stop(&e);
}

static long
manage_from(const gw_env *e, const char *id, const char *xff)
{
	char url[512], hdr[128];
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();
	long status = 0;

	snprintf(url, sizeof(url), "%s" UNSTABLE "/%s/restart", e->gw, id);
	snprintf(hdr, sizeof(hdr), "X-Forwarded-For: 203.0.113.9, %s", xff);
	h = curl_slist_append(h, hdr);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gw_on_body);
	{
		gw_resp sink;
		memset(&sink, 0, sizeof(sink));
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
		cr_assert_eq(curl_easy_perform(c), CURLE_OK);
		free(sink.body);
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return status;
}

Test(errors, storms_are_per_forwarded_client_behind_a_proxy)
{
	gw_env e;
	char *id;

	gw_start(&e, "gw-xff", false, "trust_forwarded = on");
	id = gw_schedule(&e, "tok_alice", "!room:test", "x0", 600000, "{}");
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(
		    manage_from(&e, "guessguessguessguess", "10.0.0.1"), 404);
	}
	cr_assert_eq(manage_from(&e, "guessguessguessguess", "10.0.0.1"), 429,
	    "the guesser waits");
	cr_assert_eq(manage_from(&e, "guessguessguessguess", "10.0.0.2"), 404,
	    "others do not");
	cr_assert_eq(
	    manage_from(&e, id, "10.0.0.1"), 200, "a live id is never refused");
	free(id);
	gw_stop(&e);
}

/* Targets that are not a path ("@host/...", an absolute URL) would point
 * the pass-through at another host: refused. */
Test(errors, only_paths_are_passed_through)
{
	static const char *reqs[] = {
	    "GET @127.0.0.1:1/x HTTP/1.1\r\nHost: x\r\n\r\n",
	    "GET http://127.0.0.1:1/x HTTP/1.1\r\nHost: x\r\n\r\n", NULL};
	gw_env e;
	int port;

	gw_start(&e, "gw-target", false, NULL);
	cr_assert(sscanf(e.gw, "http://127.0.0.1:%d", &port) == 1);
	for (int i = 0; reqs[i] != NULL; i++) {
		char buf[512];
		ssize_t n;
		int fd = tt_tcp_connect(port);
		cr_assert(
		    fd >= 0, "connect to port %d: %s", port, strerror(errno));
		cr_assert(write(fd, reqs[i], strlen(reqs[i])) > 0);
		struct timeval tv = {5, 0};
		size_t got = 0;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		buf[0] = '\0';
		while (strstr(buf, "M_UNRECOGNIZED") == NULL &&
		    (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0) {
			got += (size_t) n;
			buf[got] = '\0';
		}
		cr_assert(strncmp(buf, "HTTP/1.1 400", 12) == 0, "%s", buf);
		cr_assert(strstr(buf, "M_UNRECOGNIZED") != NULL, "%s", buf);
		close(fd);
	}
	gw_stop(&e);
}

Test(errors, another_method_on_our_endpoints_is_405)
{
	gw_env e;
	gw_resp r;

	gw_start(&e, "gw-405", false, NULL);
	r = gw_req("GET", e.gw, UNSTABLE "/AAAAAAAA/cancel", "tok_alice", NULL);
	gw_expect(r, 405, "M_UNRECOGNIZED");
	cr_assert(
	    strstr(r.headers, "Allow: POST\r\n") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	r = gw_req("DELETE", e.gw, UNSTABLE "/AAAAAAAA", "tok_alice", NULL);
	gw_expect(r, 405, "M_UNRECOGNIZED");
	cr_assert(
	    strstr(r.headers, "Allow: GET, POST\r\n") != NULL, "%s", r.headers);
	gw_resp_free(&r);
	nothing_changed(&e);
	gw_stop(&e);
}
