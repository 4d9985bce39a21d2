/*
 * Secrets and identities of the gateway: the transaction id an event is
 * sent with is HMAC-SHA-256 of its delay_id under the installation's
 * secret, which is made once, kept on the broker (PREFIX.meta) and the
 * same after a crash, so a resend after a crash keeps the transaction
 * id; and two different users never reach each other's events, lists or
 * limits, however their ids are chosen: long ids that differ only at
 * the end, an id that is the name an earlier version gave another user,
 * an event stored under a user's name that says it is someone else's.
 * Events stored by an earlier version under a long id's old name stay
 * the user's.
 */
#include "tltest.h"
#include "gw_util.h"
#include "gw.h"
#include "sha256.h"
#include "timeline/timeline.h"

#define ROOM "!room:test"
#define SEND "/_matrix/client/v3/rooms/!room:test/send/m.room.message/"

/* An SDK client on the test's broker. */
static tl_client *
broker_client(const gw_env *e)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	char url[600];

	snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
	cr_assert_eq(tl_opts_alloc(&o), TL_OK);
	cr_assert_eq(tl_opts_set_url(o, url), TL_OK);
	cr_assert_eq(tl_client_open(&c, o), TL_OK);
	tl_opts_free(o);
	return c;
}

/* The installation's secret as stored ("K1\n" and 64 hex digits). */
static void
read_secret(const gw_env *e, uint8_t key[32])
{
	tl_client *c = broker_client(e);
	tl_message *m = NULL;
	const char *b;

	cr_assert_eq(tl_get(c, "msc4140.meta", "hmac-secret", &m), TL_OK);
	cr_assert_eq(m->body_len, 67);
	b = m->body;
	cr_assert(memcmp(b, "K1\n", 3) == 0);
	for (int i = 0; i < 32; i++) {
		unsigned x;
		cr_assert_eq(sscanf(b + 3 + 2 * i, "%2x", &x), 1);
		key[i] = (uint8_t) x;
	}
	tl_message_free(m);
	tl_client_close(c);
}

/* The transaction ids of the homeserver's send requests, in order. */
static size_t
hs_txns(const gw_env *e, char out[][128], size_t cap)
{
	json_t *reqs = gw_hs_requests(e), *it;
	size_t i, n = 0;

	json_array_foreach(reqs, i, it)
	{
		const char *p = json_string_value(json_object_get(it, "path"));
		const char *q = strstr(p, "/send/m.room.message/");
		if (q != NULL && n < cap &&
		    strcmp(json_string_value(json_object_get(it, "method")),
		        "PUT") == 0) {
			snprintf(out[n++], 128, "%s",
			    q + strlen("/send/m.room.message/"));
		}
	}
	json_decref(reqs);
	return n;
}

static void
expect_hmac_txn(const uint8_t key[32], const char *id, const char *txn)
{
	uint8_t d[TLP_SHA256_LEN];
	char hex[TLP_SHA256_HEX + 1], want[128];

	tlp_hmac_sha256(key, 32, id, strlen(id), d);
	tlp_sha256_hex(d, hex);
	snprintf(want, sizeof(want), "msc4140.%s", hex);
	cr_assert_str_eq(txn, want, "the txnId is HMAC-SHA-256(secret, id)");
	cr_assert_null(strstr(txn, id), "the delay_id is not in the txnId");
}

Test(gwrec_ids, txn_id_is_keyed_and_survives_a_crash)
{
	gw_env e;
	uint8_t k1[32], k2[32];
	char txns[8][128], *id;
	json_t *evs;
	size_t n;

	gw_start(&e, "gw-hmac", false, NULL);
	read_secret(&e, k1);
	/* the homeserver holds the send 4 s: the gateway dies meanwhile */
	gw_req_expect(
	    "POST", e.hs, "/_test/hang", NULL, "{\"seconds\":4}", 200, NULL);
	id = gw_schedule(&e, "tok_alice", ROOM, "h1", 100, "{\"body\":\"h\"}");
	for (int i = 0; i < 500 && hs_txns(&e, txns, 8) == 0; i++) {
		tt_nap_ms(10);
	}
	cr_assert_eq(hs_txns(&e, txns, 8), 1, "the send began");
	gw_restart(&e, SIGKILL);
	read_secret(&e, k2);
	cr_assert(memcmp(k1, k2, 32) == 0, "the secret outlives a crash");
	evs = gw_wait_events(&e, 1, 15000);
	cr_assert_eq(json_array_size(evs), 1);
	json_decref(evs);
	for (int i = 0; i < 500 && hs_txns(&e, txns, 8) < 2; i++) {
		tt_nap_ms(10);
	}
	n = hs_txns(&e, txns, 8);
	cr_assert_geq(n, 2, "sent again after the crash");
	for (size_t i = 0; i < n; i++) {
		expect_hmac_txn(k1, id, txns[i]);
	}
	tt_nap_ms(4000); /* the held first send lands too: one message */
	evs = gw_hs_events(&e);
	cr_assert_eq(json_array_size(evs), 1, "one message, not two");
	json_decref(evs);
	free(id);
	gw_stop(&e);
}

/* ---- owners ---- */

static void
add_user(const gw_env *e, const char *token, const char *user)
{
	json_t *j = json_pack("{ssss}", "token", token, "user_id", user);
	char *s = json_dumps(j, JSON_COMPACT);

	gw_req_expect("POST", e->hs, "/_test/user", NULL, s, 200, NULL);
	free(s);
	json_decref(j);
}

/* Whether id is in token's unstable and stable lists. */
static bool
listed(const gw_env *e, const char *token, const char *id)
{
	gw_resp r = gw_req("GET", e->gw, UNSTABLE, token, NULL);
	bool in = r.body != NULL && strstr(r.body, id) != NULL;

	gw_expect(r, 200, NULL);
	gw_resp_free(&r);
	r = gw_req(
	    "GET", e->gw, "/_matrix/client/v1/delayed_events", token, NULL);
	gw_expect(r, 200, NULL);
	in = in || (r.body != NULL && strstr(r.body, id) != NULL);
	gw_resp_free(&r);
	return in;
}

static long
get_status(const gw_env *e, const char *token, const char *id)
{
	char path[256];
	gw_resp r;
	long st;

	snprintf(path, sizeof(path), UNSTABLE "/%s", id);
	r = gw_req("GET", e->gw, path, token, NULL);
	st = r.status;
	gw_resp_free(&r);
	return st;
}

static long
schedule_status(const gw_env *e, const char *token, const char *txn)
{
	char path[256];
	gw_resp r;
	long st;

	snprintf(
	    path, sizeof(path), SEND "%s?org.matrix.msc4140.delay=600000", txn);
	r = gw_req("PUT", e->gw, path, token, "{}");
	st = r.status;
	gw_resp_free(&r);
	return st;
}

/* a and b (tokens) see nothing of each other's: lists, GET, the limit of
 * 2 scheduled events each; a's own are found. */
static void
apart(const gw_env *e, const char *a, const char *b)
{
	char *ia = gw_schedule(e, a, ROOM, "x1", 600000, "{}");
	char *ib = gw_schedule(e, b, ROOM, "x1", 600000, "{}");

	cr_assert(listed(e, a, ia) && listed(e, b, ib));
	cr_assert(!listed(e, b, ia), "%s sees %s's event", b, a);
	cr_assert(!listed(e, a, ib), "%s sees %s's event", a, b);
	cr_assert_eq(get_status(e, a, ia), 200);
	cr_assert_eq(get_status(e, b, ia), 404);
	cr_assert_eq(get_status(e, a, ib), 404);
	/* the limit is each user's own */
	cr_assert_eq(schedule_status(e, a, "x2"), 200);
	cr_assert_eq(schedule_status(e, a, "x3"), 429, "a's limit");
	cr_assert_eq(schedule_status(e, b, "x2"), 200, "b's own limit");
	/* cancelled: the finalised record is still a's only */
	gw_manage_expect(e, ia, "cancel", 200, NULL);
	cr_assert(!listed(e, b, ia));
	cr_assert_eq(get_status(e, b, ia), 404);
	gw_manage_expect(e, ib, "cancel", 200, NULL);
	free(ia);
	free(ib);
}

#define LONG_ID(c) "@" TL_STR200 c ":test"
#define TL_STR50 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TL_STR200 TL_STR50 TL_STR50 TL_STR50 TL_STR50

Test(gwrec_ids, long_ids_that_differ_only_at_the_end)
{
	gw_env e;

	gw_start(&e, "gw-longid", false, "stable = on\nmax_scheduled = 2");
	add_user(&e, "tok_l1", LONG_ID("1"));
	add_user(&e, "tok_l2", LONG_ID("2"));
	apart(&e, "tok_l1", "tok_l2");
	gw_stop(&e);
}

/* An earlier version named a user id over 128 bytes "#" and 128 bits of
 * FNV, and any shorter id itself: a user whose id is that name shared
 * the owner of the long id's events. */
Test(gwrec_ids, an_id_that_is_another_users_old_name)
{
	gw_env e;
	char old[TL_MAX_NAME_LEN + 1];

	cr_assert(tlg_owner_legacy(LONG_ID("1"), old, sizeof(old)));
	cr_assert_eq(old[0], '#');
	gw_start(&e, "gw-oldname", false, "stable = on\nmax_scheduled = 2");
	add_user(&e, "tok_l1", LONG_ID("1"));
	add_user(&e, "tok_x", old);
	apart(&e, "tok_l1", "tok_x");
	gw_stop(&e);
}

/* Store an event directly as owner, saying it is user's. */
static char *
store_event(tl_client *c, const char *owner, const char *user)
{
	char body[600], *id = malloc(TL_MAX_ID_LEN + 1);

	snprintf(body, sizeof(body),
	    "M1\nuser\t%s\nroom\t%s\ntype\tm.room.message\ndelay\t600000\n\n"
	    "{\"stored\":1}",
	    user, ROOM);
	cr_assert_eq(tl_put_in(c, "msc4140.events", owner, NULL, 600000, body,
	                 strlen(body), id),
	    TL_OK);
	return id;
}

/* A name shared by two ids (a hash collision, stood in for by storing an
 * event of one user under the other's name) still gives neither the
 * other's events: every event holds its full user id, which is checked. */
Test(gwrec_ids, the_full_user_id_is_checked)
{
	gw_env e;
	char name[TL_MAX_NAME_LEN + 1], *id;
	tl_client *c;

	gw_start(&e, "gw-fullid", false, "stable = on");
	add_user(&e, "tok_l1", LONG_ID("1"));
	add_user(&e, "tok_l2", LONG_ID("2"));
	c = broker_client(&e);
	tlg_owner(LONG_ID("2"), name, sizeof(name));
	id = store_event(c, name, LONG_ID("1"));
	cr_assert(!listed(&e, "tok_l2", id), "l2 sees l1's event");
	cr_assert_eq(get_status(&e, "tok_l2", id), 404);
	cr_assert_eq(gw_list_len(&e, "tok_l2"), 0);
	free(id);
	tl_client_close(c);
	gw_stop(&e);
}

/* Events an earlier version stored under a long id's old name are still
 * the user's: listed, found, counted in the limit, managed. */
Test(gwrec_ids, events_under_the_old_name_still_work)
{
	gw_env e;
	char old[TL_MAX_NAME_LEN + 1], *id;
	tl_client *c;

	gw_start(&e, "gw-legacy", false, "stable = on\nmax_scheduled = 2");
	add_user(&e, "tok_l1", LONG_ID("1"));
	add_user(&e, "tok_l2", LONG_ID("2"));
	c = broker_client(&e);
	cr_assert(tlg_owner_legacy(LONG_ID("1"), old, sizeof(old)));
	id = store_event(c, old, LONG_ID("1"));
	cr_assert(listed(&e, "tok_l1", id));
	cr_assert_eq(get_status(&e, "tok_l1", id), 200);
	cr_assert(!listed(&e, "tok_l2", id));
	cr_assert_eq(schedule_status(&e, "tok_l1", "y1"), 200);
	cr_assert_eq(
	    schedule_status(&e, "tok_l1", "y2"), 429, "the old one counts");
	gw_manage_expect(&e, id, "restart", 200, NULL);
	gw_manage_expect(&e, id, "cancel", 200, NULL);
	cr_assert(listed(&e, "tok_l1", id), "its finalised record");
	cr_assert_eq(schedule_status(&e, "tok_l1", "y3"), 200);
	free(id);
	tl_client_close(c);
	gw_stop(&e);
}
