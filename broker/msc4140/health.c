/*
 * What the gateway knows of the homeserver, for its operator and for the
 * answers it gives users:
 *
 * - Outages. Every request's outcome comes here (hs.c); the first request
 *   without an answer logs that the homeserver is unreachable (G022), the
 *   first answer after logs the end of the outage with the count of
 *   requests that got none (G023). Nothing is logged per request between.
 * - The gateway's own credentials. At start, whoami with as_token, as an
 *   appservice checks itself: accepted (G006), refused (G007: the gateway
 *   stops, or with as_check = retry checks again with backoff, logging
 *   each refusal), or no answer (checked again in the background). An
 *   error answer to a send that is about the gateway's token (any 401;
 *   M_UNKNOWN_TOKEN / M_MISSING_TOKEN; a 403 that whoami as the same user
 *   confirms) is the gateway's, never the user's: users get 502
 *   ORG.TIMELINE.GATEWAY_CREDENTIALS with the homeserver's answer quoted.
 * - Rooms. Scheduling looks the room up (the room directory visibility,
 *   which Synapse answers 404 M_NOT_FOUND for a room it does not know and
 *   200 for any room it knows, member or not); known rooms are cached.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"

/* The credentials check's backoff while it is not settled. */
#define CHECK_FIRST_MS 500
#define CHECK_MAX_MS 30000

int
tlg_health_init(tlg *g)
{
	ghealth *h = &g->health;

	pthread_mutex_init(&h->mtx, NULL);
	pthread_cond_init(&h->cv, NULL);
	h->rooms = calloc(TLG_ROOM_SLOTS, sizeof(*h->rooms));
	return h->rooms != NULL ? 0 : -1;
}

void
tlg_health_fini(tlg *g)
{
	ghealth *h = &g->health;

	pthread_mutex_lock(&h->mtx);
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mtx);
	if (h->thr_started) {
		pthread_join(h->thr, NULL);
		h->thr_started = false;
	}
	pthread_mutex_destroy(&h->mtx);
	pthread_cond_destroy(&h->cv);
	free(h->rooms);
	h->rooms = NULL;
}

/* ---- outages ---- */

void
tlg_hs_outcome(tlg *g, long status, const char *why)
{
	ghealth *h = &g->health;
	int64_t now = tli_mono_ms();

	pthread_mutex_lock(&h->mtx);
	if (status == 0 && !h->down) {
		h->down = true;
		h->down_since = now;
		h->down_count = 1;
		tli_log("msc4140", TLI_LOG_WARN, "G022",
		    "homeserver %s unreachable (%s): no answer; delayed events "
		    "wait and are retried",
		    g->c.homeserver, why != NULL ? why : "no answer");
	} else if (status == 0) {
		h->down_count++;
	} else if (h->down) {
		h->down = false;
		tli_log("msc4140", TLI_LOG_INFO, "G023",
		    "homeserver %s reachable again after %lld ms; %llu "
		    "requests got no answer meanwhile",
		    g->c.homeserver, (long long) (now - h->down_since),
		    (unsigned long long) h->down_count);
	}
	pthread_mutex_unlock(&h->mtx);
}

/* ---- credentials ---- */

void
tlg_errcode(const char *body, size_t len, char *out, size_t cap)
{
	json_t *j = json_loadb(body, len, JSON_DECODE_INT_AS_REAL, NULL);
	json_t *c = json_object_get(j, "errcode");

	snprintf(out, cap, "%s", json_is_string(c) ? json_string_value(c) : "");
	json_decref(j);
}

/* A refusal begins (logged each time while checking at start) or ends. */
static void
as_state(tlg *g, bool refused, long status, const char *code, bool loud)
{
	ghealth *h = &g->health;
	bool was;

	pthread_mutex_lock(&h->mtx);
	was = h->as_rejected;
	h->as_rejected = refused;
	pthread_mutex_unlock(&h->mtx);
	if (refused && (loud || !was)) {
		tli_log("msc4140", TLI_LOG_ERROR, "G007",
		    "homeserver %s refuses the gateway's appservice "
		    "credentials (%ld %s): check as_token against the "
		    "registration the homeserver loaded; delayed events cannot "
		    "be sent",
		    g->c.homeserver, status, code[0] ? code : "no errcode");
	} else if (!refused && was) {
		tli_log("msc4140", TLI_LOG_INFO, "G006",
		    "homeserver %s accepts the gateway's appservice "
		    "credentials "
		    "again",
		    g->c.homeserver);
	}
}

void
tlg_as_accepted(tlg *g)
{
	bool was;

	pthread_mutex_lock(&g->health.mtx);
	was = g->health.as_rejected;
	pthread_mutex_unlock(&g->health.mtx);
	if (was) {
		as_state(g, false, 200, "", false);
	}
}

/* whoami with as_token (as user when given): its status, 0 for none;
 * the errcode into code. */
static long
as_whoami(
    tlg *g, const gstr *user, char *code, size_t cap, char *uid, size_t ucap)
{
	char auth[600];
	tli_buf url = {0};
	hs_resp r = {0};
	long st;

	snprintf(auth, sizeof(auth), "Bearer %s", g->c.as_token);
	hs_hdr hd[] = {{"Authorization", auth}};
	tli_buf_puts(&url, g->c.homeserver);
	tli_buf_puts(&url, "/_matrix/client/v3/account/whoami");
	if (user != NULL) {
		tli_buf_puts(&url, "?user_id=");
		tlh_url_enc(&url, user->p, user->n);
	}
	code[0] = '\0';
	if (uid != NULL) {
		uid[0] = '\0';
	}
	if (url.oom ||
	    tlg_hs_request(g, "GET", tli_buf_str(&url), hd, 1, NULL, 0, &r) !=
	        0) {
		tli_buf_fini(&url);
		tlg_hs_resp_free(&r);
		return 0;
	}
	tli_buf_fini(&url);
	st = r.status;
	tlg_errcode(tli_buf_str(&r.body), r.body.len, code, cap);
	if (st == 200 && uid != NULL) {
		json_t *j =
		    json_loadb(tli_buf_str(&r.body), r.body.len, 0, NULL);
		json_t *u = json_object_get(j, "user_id");
		snprintf(uid, ucap, "%s",
		    json_is_string(u) ? json_string_value(u) : "");
		json_decref(j);
	}
	tlg_hs_resp_free(&r);
	return st;
}

bool
tlg_as_refused(
    tlg *g, long status, const char *body, size_t len, const gstr *user)
{
	char code[64];
	bool ours = false;

	if (status != 401 && status != 403) {
		return false;
	}
	tlg_errcode(body, len, code, sizeof(code));
	if (status == 401 || strcmp(code, "M_UNKNOWN_TOKEN") == 0 ||
	    strcmp(code, "M_MISSING_TOKEN") == 0) {
		ours = true;
	} else if (user != NULL) {
		/* 403 M_FORBIDDEN: the user's (power levels, membership) or
		 * ours (a user outside the appservice's namespace, a token the
		 * homeserver refuses as 403): whoami as that user tells. */
		char wcode[64];
		long st = as_whoami(g, user, wcode, sizeof(wcode), NULL, 0);
		ours = st == 401 || st == 403;
	}
	if (ours) {
		as_state(g, true, status, code, false);
	}
	return ours;
}

void
tlg_as_error_body(tli_buf *o, long status, const char *body, size_t len)
{
	char code[64], msg[160];

	tlg_errcode(body, len, code, sizeof(code));
	snprintf(msg, sizeof(msg),
	    "The homeserver refused the gateway's own credentials (%ld %s); "
	    "the gateway's operator must fix them",
	    status, code[0] ? code : "no errcode");
	tli_buf_reset(o);
	tli_buf_puts(o, "{\"errcode\":\"" TLG_ERR_CREDENTIALS "\",\"error\":");
	tlh_json_str(o, msg, strlen(msg));
	tli_buf_printf(o, ",\"homeserver_status\":%ld}", status);
}

/* One check: 1 accepted, 0 refused, -1 no telling. */
static int
as_check_once(tlg *g, bool loud)
{
	char code[64], uid[256];
	long st = as_whoami(g, NULL, code, sizeof(code), uid, sizeof(uid));

	if (st == 200) {
		bool was;
		pthread_mutex_lock(&g->health.mtx);
		was = g->health.as_rejected;
		g->health.as_rejected = false;
		pthread_mutex_unlock(&g->health.mtx);
		tli_log("msc4140", TLI_LOG_INFO, "G006",
		    "homeserver %s accepts the gateway's appservice "
		    "credentials%s (as %s)",
		    g->c.homeserver, was ? " again" : "", uid);
		return 1;
	}
	if (st == 401 || st == 403) {
		as_state(g, true, st, code, loud);
		return 0;
	}
	if (st != 0) {
		tli_log("msc4140", TLI_LOG_WARN, "G009",
		    "homeserver %s answered %ld %s to the gateway's "
		    "credentials "
		    "check; checking again",
		    g->c.homeserver, st, code[0] ? code : "");
	}
	return -1;
}

static void *
check_main(void *arg)
{
	tlg *g = arg;
	ghealth *h = &g->health;
	int64_t wait = CHECK_FIRST_MS;

	for (;;) {
		struct timespec dl;
		tli_deadline(&dl, CLOCK_REALTIME, wait);
		pthread_mutex_lock(&h->mtx);
		while (!atomic_load(&g->stopping) &&
		    pthread_cond_timedwait(&h->cv, &h->mtx, &dl) == 0) {
		}
		pthread_mutex_unlock(&h->mtx);
		if (atomic_load(&g->stopping) || as_check_once(g, true) == 1) {
			break;
		}
		wait = wait * 2 > CHECK_MAX_MS ? CHECK_MAX_MS : wait * 2;
	}
	return NULL;
}

int
tlg_as_check_start(tlg *g)
{
	int rv = as_check_once(g, true);

	if (rv == 1) {
		return 0;
	}
	if (rv == 0 && g->c.as_check == 0) {
		tli_log("msc4140", TLI_LOG_ERROR, "G007",
		    "not starting: the homeserver refuses as_token (set "
		    "as_check = retry to serve and check again)");
		return -1;
	}
	if (pthread_create(&g->health.thr, NULL, check_main, g) == 0) {
		g->health.thr_started = true;
	}
	return 0;
}

/* ---- rooms ---- */

int
tlg_room_known(tlg *g, const char *room, size_t n)
{
	ghealth *h = &g->health;
	uint64_t h1 = tli_hash64_mixed(room, n, 31);
	uint64_t h2 = tli_hash64_mixed(room, n, 32);
	groom *s = &h->rooms[h1 % TLG_ROOM_SLOTS];
	int64_t now = tli_mono_ms();
	tli_buf url = {0};
	hs_resp r = {0};
	char code[64];
	int known = -1;

	pthread_mutex_lock(&h->mtx);
	if (s->h1 == h1 && s->h2 == h2 && s->until > now) {
		known = 1;
	}
	pthread_mutex_unlock(&h->mtx);
	if (known == 1) {
		return 1;
	}
	/* Synapse answers this without authentication, for any room it
	 * knows, whoever asks. */
	tli_buf_puts(&url, g->c.homeserver);
	tli_buf_puts(&url, "/_matrix/client/v3/directory/list/room/");
	tlh_url_enc(&url, room, n);
	if (url.oom ||
	    tlg_hs_request(g, "GET", tli_buf_str(&url), NULL, 0, NULL, 0, &r) !=
	        0) {
		tli_buf_fini(&url);
		tlg_hs_resp_free(&r);
		return -1;
	}
	tli_buf_fini(&url);
	tlg_errcode(tli_buf_str(&r.body), r.body.len, code, sizeof(code));
	if (r.status == 200) {
		known = 1;
	} else if (r.status == 404 && strcmp(code, "M_NOT_FOUND") == 0) {
		known = 0;
	}
	tlg_hs_resp_free(&r);
	if (known == 1 && g->c.whoami_cache_ms > 0) {
		pthread_mutex_lock(&h->mtx);
		s->h1 = h1;
		s->h2 = h2;
		s->until = now + g->c.whoami_cache_ms;
		pthread_mutex_unlock(&h->mtx);
	}
	return known;
}
