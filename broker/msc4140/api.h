/*
 * What the gateway's HTTP front (http.c: the route table, replies, the
 * caller, the pass-through) and its endpoints (api.c) share: the
 * gateway's state of a request, a reply being built, and the endpoints.
 */
#ifndef TL_MSC4140_API_H
#define TL_MSC4140_API_H

#include "gw.h"

/* The gateway's state of one request (tlh_req_state, zeroed at first). */
typedef struct greq {
	tlh_req *hr; /* the HTTP request: method, path, query, body, ip */
	tlg *gw;     /* for an asynchronous completion */
	/* the endpoint (its route's data) */
	bool state, has_txn;
	bool stable; /* the stable form: delay, state_key, content */
	/* management */
	bool checked;      /* storm, id and rate limits were checked */
	bool cached_tried; /* the cached restart was tried */
	/* schedule */
	char *skey;   /* its state key (stable form), owned */
	gstr content; /* the content bytes inside the body */
	int64_t delay;
	/* caller */
	bool authed;
	char user[256];
	char device[256];
} greq;

typedef struct gout {
	int status;
	tli_buf body;
	int64_t retry_ms; /* > 0: a Retry-After header */
} gout;

/* What an endpoint of the table serves (a route's data). */
typedef struct gep {
	void (*fn)(tlg *g, greq *r, gout *o);
	bool state, has_txn;
	bool stable;  /* a stable-form endpoint: only with `stable` set */
	bool futures; /* a Futures-form route: only with `futures` set */
} gep;

/* ---- replies and the caller (http.c) ---- */

void tlg_out_err(gout *o, int status, const char *code, const char *msg);
/* 429 M_LIMIT_EXCEEDED with retry_after_ms and a Retry-After header. */
void tlg_out_limited(gout *o, int64_t ms);
/* A path parameter of the request's route (NUL-terminated). */
gstr tlg_param(const greq *r, const char *name);
/* The path parameters (room id, event type, state key, transaction id)
 * are text a homeserver takes; false with the answer in o. */
bool tlg_fields_ok(const greq *r, gout *o);
/* A request's transaction key (user, device, path) into key, and the id
 * of its record: kind and 32 hex digits of the key's hash. */
void tlg_txn_key(const greq *r, char kind, char *tid, size_t cap, tli_buf *key);

/* ---- endpoints (api.c) ---- */

/* Scheduling (the caller is authenticated): the checks that need no body
 * (a repeated transaction id answers here), then the event. */
void tlg_schedule(tlg *g, greq *r, gout *o);
/* Management by delay_id: the action in the path or in the body. */
void tlg_manage_path(tlg *g, greq *r, gout *o);
void tlg_manage_body(tlg *g, greq *r, gout *o);

/* The restart of a cached event without blocking (the path form): either
 * o holds the answer (TLH_FAST_ANSWERED), or tl_move_async was started
 * with done(r, err) (TLH_FAST_STARTED; then tlg_restart_fast_result makes
 * the answer), or the request needs tlg_manage_path (TLH_FAST_NO). */
int tlg_restart_fast(tlg *g, greq *r, gout *o, tl_done_fn done);
/* false: the long way (tlg_manage_path) decides. */
bool tlg_restart_fast_result(tlg *g, greq *r, int rv, gout *o);
void tlg_list_scheduled(tlg *g, greq *r, gout *o);
void tlg_get_one(tlg *g, greq *r, gout *o);
void tlg_stable_list(tlg *g, greq *r, gout *o);

/* ---- the Futures form (futures.c) ---- */

/* PUT .../send_future/{type}/{txn} and .../state_future/{type}[/{skey}]. */
void tlg_fut_schedule(tlg *g, greq *r, gout *o);
/* POST .../future/{token}: send, cancel or refresh, by the token. */
void tlg_fut_token(tlg *g, greq *r, gout *o);
/* GET .../future: the caller's running futures. */
void tlg_fut_list(tlg *g, greq *r, gout *o);
/* A state event (room, type, state key) reached the homeserver through
 * the gateway: the pending state futures with that key are invalidated. */
void tlg_fut_state_changed(tlg *g, gstr room, gstr type, gstr skey);

#endif
