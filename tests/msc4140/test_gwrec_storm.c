/*
 * The guessed-id throttle (5 unknown delay_ids within 10 s from one
 * client: 429 for 10 s): only ids that never existed count, so clients
 * that restart or cancel ids already sent or cancelled (late heartbeats
 * through one address) are never throttled; a restart of a live id is
 * never refused by it, also for ids made before ids carried their MAC;
 * and behind trusted reverse proxies the client is the one named by
 * X-Forwarded-For, which an untrusted peer cannot choose.
 */
#include "tltest.h"
#include "gw_util.h"
#include "timeline/timeline.h"

#define ROOM "!room:test"

/* POST UNSTABLE/id/action with an X-Forwarded-For (NULL: none). */
static long
manage_from(const gw_env *e, const char *id, const char *action,
    const char *token, const char *xff)
{
	char url[512], h[256], a[128];
	struct curl_slist *hs = NULL;
	CURL *c = curl_easy_init();
	gw_resp r = {0};
	long st = 0;

	snprintf(url, sizeof(url), "%s" UNSTABLE "/%s/%s", e->gw, id, action);
	if (xff != NULL) {
		snprintf(h, sizeof(h), "X-Forwarded-For: %s", xff);
		hs = curl_slist_append(hs, h);
	}
	if (token != NULL) {
		snprintf(a, sizeof(a), "Authorization: Bearer %s", token);
		hs = curl_slist_append(hs, a);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gw_on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	cr_assert_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_slist_free_all(hs);
	curl_easy_cleanup(c);
	free(r.body);
	return st;
}

/* An id of the right form that no gateway made. */
static void
made_up(char *out, int i)
{
	snprintf(out, 40, "GuessGuessGuessGuessGuessGues%03d", i);
}

Test(gwrec_storm, ids_that_existed_are_not_guesses)
{
	gw_env e;
	char *a, *b, *live, *sent;
	json_t *evs;

	gw_start(&e, "gw-existed", false, NULL);
	a = gw_schedule(&e, "tok_alice", ROOM, "e1", 600000, "{}");
	b = gw_schedule(&e, "tok_alice", ROOM, "e2", 600000, "{}");
	live = gw_schedule(&e, "tok_alice", ROOM, "e3", 600000, "{}");
	sent = gw_schedule(&e, "tok_alice", ROOM, "e4", 50, "{}");
	evs = gw_wait_events(&e, 1, 10000);
	cr_assert_eq(json_array_size(evs), 1);
	json_decref(evs);
	gw_manage_expect(&e, a, "cancel", 200, NULL);
	gw_manage_expect(&e, b, "cancel", 200, NULL);
	/* late heartbeats: far more than 5 "unknown" ids from one address */
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(manage_from(&e, a, "restart", NULL, NULL), 404);
		cr_assert_eq(manage_from(&e, b, "cancel", NULL, NULL), 404);
		cr_assert_eq(manage_from(&e, sent, "restart", NULL, NULL), 404);
	}
	cr_assert_eq(manage_from(&e, live, "restart", NULL, NULL), 200);
	cr_assert_eq(manage_from(&e, live, "restart", "tok_alice", NULL), 200);
	free(a);
	free(b);
	free(live);
	free(sent);
	gw_stop(&e);
}

/* An event stored as the gateway stored them before delay_ids carried a
 * MAC (32 random base64url characters). */
static void
store_old_id(const gw_env *e, const char *id)
{
	const char *body = "M1\nuser\t@alice:test\nroom\t!room:test\n"
	                   "type\tm.room.message\ndelay\t600000\n\n{}";
	tl_opts *o = NULL;
	tl_client *c = NULL;
	char url[600];

	snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
	cr_assert_eq(tl_opts_alloc(&o), TL_OK);
	cr_assert_eq(tl_opts_set_url(o, url), TL_OK);
	cr_assert_eq(tl_client_open(&c, o), TL_OK);
	cr_assert_eq(tl_put_in(c, "msc4140.events", "@alice:test", id, 600000,
	                 body, strlen(body), NULL),
	    TL_OK);
	tl_opts_free(o);
	tl_client_close(c);
}

Test(gwrec_storm, guesses_block_but_never_a_live_id)
{
	gw_env e;
	char *live, guess[40];
	const char *old = "0ldStyleId0ldStyleId0ldStyleId00";

	gw_start(&e, "gw-guess", false, NULL);
	live = gw_schedule(&e, "tok_alice", ROOM, "g1", 600000, "{}");
	store_old_id(&e, old);
	for (int i = 0; i < 5; i++) {
		made_up(guess, i);
		cr_assert_eq(
		    manage_from(&e, guess, "restart", NULL, NULL), 404);
	}
	made_up(guess, 5);
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, NULL), 429,
	    "guesses are throttled");
	cr_assert_eq(manage_from(&e, "short", "cancel", NULL, NULL), 429);
	/* the owner's heartbeat goes on, with a token or without */
	cr_assert_eq(manage_from(&e, live, "restart", NULL, NULL), 200);
	cr_assert_eq(manage_from(&e, live, "restart", "tok_alice", NULL), 200);
	/* so does one of an id made before ids carried a MAC */
	cr_assert_eq(manage_from(&e, old, "restart", NULL, NULL), 200);
	cr_assert_eq(manage_from(&e, old, "restart", "tok_alice", NULL), 200);
	gw_manage_expect(&e, live, "cancel", 200, NULL);
	made_up(guess, 6);
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, NULL), 429);
	free(live);
	gw_stop(&e);
}

/* Five guesses from the client named by xff (NULL: none). */
static void
five_guesses(const gw_env *e, const char *xff, int from)
{
	char guess[40];

	for (int i = 0; i < 5; i++) {
		made_up(guess, from + i);
		cr_assert_eq(
		    manage_from(e, guess, "restart", NULL, xff), 404, "%d", i);
	}
}

Test(gwrec_storm, the_client_behind_trusted_proxies)
{
	gw_env e;
	char guess[40];

	gw_start(
	    &e, "gw-proxy", false, "trusted_proxies = 10.1.0.0/16, 127.0.0.1");
	made_up(guess, 100);
	five_guesses(&e, "10.0.0.1", 0);
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, "10.0.0.1"), 429);
	/* another client behind the same proxy is not blocked */
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, "10.0.0.2"), 404);
	/* through two trusted proxies, and with an entry of the client's
	 * own in front: the first untrusted address from the right */
	cr_assert_eq(manage_from(&e, guess, "restart", NULL,
	                 "10.0.0.2, 10.0.0.1, 10.1.2.3"),
	    429);
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, NULL), 404,
	    "the proxy's own requests are the proxy's");
	gw_stop(&e);

	/* a peer that is not a trusted proxy is the client, whatever it
	 * says it forwards */
	gw_start(&e, "gw-noproxy", false, "trusted_proxies = 10.9.9.9");
	for (int i = 0; i < 5; i++) {
		char xff[32];
		snprintf(xff, sizeof(xff), "10.0.0.%d", i + 1);
		made_up(guess, i);
		cr_assert_eq(manage_from(&e, guess, "restart", NULL, xff), 404);
	}
	made_up(guess, 5);
	cr_assert_eq(manage_from(&e, guess, "restart", NULL, "10.0.0.99"), 429);
	gw_stop(&e);
}
