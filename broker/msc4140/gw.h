/*
 * Internals of the MSC4140 gateway shared between its files: the gateway
 * object, the stored form of a delayed event and of a finalised record,
 * the homeserver client and rate limits. Logging, buffers, clocks and
 * hashing are tlbase's; the HTTP server is the module tlhttp.
 *
 * DESIGN. Threads: the HTTP module runs a few event-loop threads that
 * never block; a request's blocking work (whoami, SDK calls, proxying)
 * runs on one of its worker threads with the connection suspended, and a
 * restart of a known event is one tl_move_async whose completion resumes
 * it (http.c, tlhttp.h). The
 * SDK's consumer thread hands due events to the sender threads (one queue each,
 * chosen by room so that one room's events keep their order); a sender sends
 * through the homeserver, writes the finalised record, deletes the event and
 * wakes a "send" action waiting for it. Locks: a user's scheduling stripe (held
 * across the broker calls of one scheduling request) comes before the others,
 * which are leaves and never nested: the waiter list, each sender queue, the
 * whoami cache, the rate-limit table, the restart cache (and tlhttp's client
 * pool).
 */
#ifndef TL_MSC4140_GW_H
#define TL_MSC4140_GW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "buf.h"
#include "htab.h"
#include "queue.h"
#include "log.h"
#include "text.h"
#include "msc4140.h"
#include "tlhttp.h"
#include "timeline/timeline.h"

/* ---- small pieces (util.c) ---- */

bool tlg_utf8_ok(const char *s, size_t n);

/* ---- a stored delayed event (body of a message in PREFIX.events) ----
 * "M1\n" then "key\tvalue\n" lines, an empty line, then the content bytes
 * exactly as received. Values never hold control characters (checked at
 * scheduling). A finalised record (PREFIX.final) starts with "F1\n" and
 * adds fin, since, outcome, reason, event_id, status and errlen lines;
 * after the empty line come errlen bytes of the homeserver's error body,
 * then the content. */
typedef struct gstr {
	const char *p;
	size_t n;
} gstr;

typedef struct gev {
	bool final;
	gstr user, room, type, skey, query;
	bool state;
	int64_t delay;
	gstr content;
	/* finalised records */
	int64_t fin, since;
	gstr outcome, reason, event_id, err;
	int status;
} gev;

int tlg_ev_parse(gev *e, const void *body, size_t len);
void tlg_ev_header(tli_buf *b, const gev *e);

/* ---- the homeserver ---- */

/* The homeserver client is tlhttp's (tlh_fetch), with the gateway's
 * abort flag and outcome log. */
typedef tlh_resp hs_resp;
typedef tlh_hdr hs_hdr;

/* One request to url; body may be NULL. Returns 0 with resp filled (also
 * for error statuses) or -1 when no answer came (resp->status 0). */
int tlg_hs_request(tlg *g, const char *method, const char *url,
    const hs_hdr *hdrs, size_t nhdrs, const void *body, size_t len,
    hs_resp *resp);
void tlg_hs_resp_free(hs_resp *r);

/* ---- rate limits ---- */

/* Take one token from the bucket of key. Returns 0 or the ms to wait. */
int64_t tlg_rate_take(
    tlg *g, const char *kind, const char *key, double rate, double burst);
/* Unknown-id storms: count a miss for an IP; true while it is blocked. */
void tlg_storm_miss(tlg *g, const char *ip);
int64_t tlg_storm_blocked(tlg *g, const char *ip);

/* ---- the gateway ---- */

typedef struct gwaiter {
	struct gwaiter *next;
	char id[TL_MAX_ID_LEN + 1];
	bool done;
	int status;
	tli_buf body;
} gwaiter;

typedef struct gqitem {
	tli_qnode qn;
	tl_lease *lease;
} gqitem;

typedef struct gsender {
	tlg *g;
	pthread_t thr;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	tli_queue q; /* of gqitem */
	bool stop;
	bool started;
} gsender;

#define TLG_RATE_SLOTS 4096

typedef struct grate {
	uint64_t key;
	double tokens;
	int64_t at;
	int misses;
	int64_t blocked_until;
} grate;

#define TLG_AUTH_SLOTS 1024

/* What a restart needs of an event (owner and delay never change), so
 * that it is one move on the broker instead of a lookup and a move. */
#define TLG_EVC_SLOTS 32768
#define TLG_USER_STRIPES 64

typedef struct gevc {
	char id[40];
	char owner[TL_MAX_NAME_LEN + 1];
	int64_t delay;
} gevc;

/* What the gateway knows of the homeserver (health.c): an outage (no
 * answer) is logged once when it begins and once when it ends; the
 * appservice credentials are checked at start and their rejection is
 * logged when it begins and ends; rooms the homeserver knows are cached. */
#define TLG_ROOM_SLOTS 4096

typedef struct groom {
	uint64_t h1, h2;
	int64_t until;
} groom;

typedef struct ghealth {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	pthread_t thr; /* the credentials check, while it is not settled */
	bool thr_started;
	bool down;          /* no answer since down_since */
	int64_t down_since; /* tli_mono_ms */
	uint64_t down_count;
	bool as_rejected; /* the last answer to our token refused it */
	groom *rooms;
} ghealth;

typedef struct gauth {
	char *token;
	char *user;
	char *device;
	int64_t until;
} gauth;

struct tlg {
	tlg_conf c;
	tl_client *cl;
	tl_consumer *cons_ev, *cons_final, *cons_txn;
	char t_ev[TL_MAX_NAME_LEN + 1];
	char t_final[TL_MAX_NAME_LEN + 1];
	char t_txn[TL_MAX_NAME_LEN + 1];
	tlh_server *http; /* http.c: the routes, served by tlhttp */
	char url[300];

	pthread_mutex_t w_mtx;
	pthread_cond_t w_cv;
	gwaiter *waiters;

	gsender *senders;
	int nsenders;
	_Atomic bool stopping;

	pthread_mutex_t auth_mtx;
	gauth auth[TLG_AUTH_SLOTS];

	pthread_mutex_t rate_mtx;
	grate rate[TLG_RATE_SLOTS];

	pthread_mutex_t evc_mtx;
	gevc *evc;

	/* scheduling of one user is serialised (limit, transaction) */
	pthread_mutex_t user_mtx[TLG_USER_STRIPES];

	tlh_client *hc; /* the homeserver's connections */

	ghealth health;
	_Atomic int64_t broker_lost_at; /* tli_mono_ms of a loss, or 0 */
	/* PREFIX.meta: the installation's secret (tlg_secret_load) */
	char t_meta[TL_MAX_NAME_LEN + 1];
	uint8_t secret[32];
	struct gfut *fut; /* the Futures form (futures.c); NULL when off */
};

/* ---- pieces ---- */

int tlg_http_start(tlg *g);
void tlg_http_stop(tlg *g);
int tlg_senders_start(tlg *g);
void tlg_senders_stop(tlg *g);
/* The consumer callback of PREFIX.events. */
void tlg_on_due(void *arg, tl_lease *l);
/* The consumer callback of the retention topics: delete when due. */
void tlg_on_expired(void *arg, tl_lease *l);
/* Write a finalised record for e (owner, delay_id). */
int tlg_finalise(tlg *g, const char *owner, const char *id, const gev *e,
    int64_t since, const char *outcome, const char *reason,
    const char *event_id, int status, const char *err, size_t errlen);
/* The waiter registry of "send" actions. */
gwaiter *tlg_waiter_add(tlg *g, const char *id);
bool tlg_waiter_exists(tlg *g, const char *id);
/* Wait until done or the deadline; then unregister. true when done. */
bool tlg_waiter_wait(tlg *g, gwaiter *w, int64_t ms);
void tlg_waiter_wake(
    tlg *g, const char *id, int status, const char *body, size_t len);
/* The restart cache (a direct-mapped table: a collision forgets). */
void tlg_evc_put(tlg *g, const char *id, const char *owner, int64_t delay);
bool tlg_evc_get(
    tlg *g, const char *id, char *owner, size_t cap, int64_t *delay);
void tlg_evc_del(tlg *g, const char *id);
/* ---- the homeserver's health (health.c) ---- */

/* The errcode of an answer about the gateway's own credentials (502). */
#define TLG_ERR_CREDENTIALS "ORG.TIMELINE.GATEWAY_CREDENTIALS"
/* The errcode of a restart or cancel of an event being sent (409). */
#define TLG_ERR_BEING_SENT "ORG.TIMELINE.BEING_SENT"

int tlg_health_init(tlg *g);
/* Check the appservice credentials (whoami with as_token): -1 when the
 * gateway must not start; a background check goes on while unsettled. */
int tlg_as_check_start(tlg *g);
void tlg_health_fini(tlg *g);
/* Every homeserver request's outcome: status 0 (why: curl's reason) is no
 * answer. */
void tlg_hs_outcome(tlg *g, long status, const char *why);
/* Whether an error answer to a request made with as_token (as user, or
 * NULL) is about the gateway's own credentials; logs the change. */
bool tlg_as_refused(
    tlg *g, long status, const char *body, size_t len, const gstr *user);
/* A successful answer to a request made with as_token. */
void tlg_as_accepted(tlg *g);
/* The error body of such an answer, for a user (o: JSON). */
void tlg_as_error_body(tli_buf *o, long status, const char *body, size_t len);
/* The errcode of a Matrix error body into out ("" when none). */
void tlg_errcode(const char *body, size_t len, char *out, size_t cap);
/* Whether the homeserver knows the room: 1, 0 (404 M_NOT_FOUND), or -1
 * (no telling: no answer, another error). Known rooms are cached. */
int tlg_room_known(tlg *g, const char *room, size_t n);

/* Create a topic of the gateway (its settings), and consume one as
 * consumer_id + suffix; 0, or -1 logged (G002, G003). */
int tlg_topic_make(tlg *g, const char *name);
int tlg_consume(tlg *g, tl_consumer **out, const char *t, const char *suffix,
    tl_deliver_fn fn, uint32_t credit);
/* The Futures form's topics, consumers and token throttle (futures.c):
 * started when `futures` is on; stop accepts a gateway without them. */
int tlg_fut_start(tlg *g);
void tlg_fut_stop(tlg *g);
/* The owner (producer group) of a Matrix user's messages: the user id
 * itself, or "#sha256:" and the hex SHA-256 of a long one. */
void tlg_owner(const char *user, char *out, size_t cap);
/* The name an earlier version gave the user when it differs from
 * tlg_owner's (a long id: "#" and 128 bits of FNV): true with out set.
 * Events stored under it are still the user's when they say so. */
bool tlg_owner_legacy(const char *user, char *out, size_t cap);
/* Whether a stored event (or record) is user's: its full user id. */
bool tlg_ev_mine(const gev *e, const char *user);
/* The transaction id an event is sent with: "msc4140." and the hex
 * HMAC-SHA-256 of the delay_id under the installation's secret. */
void tlg_txn_id(const tlg *g, const char *delay_id, char *out, size_t cap);
/* When the current delay of id began (scheduling or the last restart),
 * from where the broker placed it (tl_get's ts while unleased, a lease's
 * tl_lease_placed_at, a tl_list entry's ts) and its delay, or from what
 * a send action kept (tlg_since_keep). */
int64_t tlg_since(tlg *g, const char *id, int64_t placed, int64_t delay);
/* A send action is about to place id at now: keep when its delay began. */
void tlg_since_keep(tlg *g, const char *owner, const char *id, int64_t since);
/* A new delay_id: 18 random bytes and a 48-bit MAC of them under the
 * installation's secret, 32 base64url characters; out has 33 bytes. */
int tlg_delay_id_new(const tlg *g, char *out);
/* Whether id[0..n) is one tlg_delay_id_new made (here or on any gateway
 * with this secret): an id that existed, never a guess. */
bool tlg_delay_id_ours(const tlg *g, const char *id, size_t n);
/* Read the installation's secret from PREFIX.meta, or make and store it
 * on the first start. 0, or -1 (logged). */
int tlg_secret_load(tlg *g);

#endif
