/*
 * What the HTTP front (http.c) and the endpoint handlers (api.c) of the
 * gateway share: a request as routed, a reply being built, and the
 * functions each side calls of the other.
 */
#ifndef TL_MSC4140_API_H
#define TL_MSC4140_API_H

#include <microhttpd.h>

#include "gw.h"

#define PFX "/_matrix/client/"
#define UNSTABLE "/_matrix/client/unstable/org.matrix.msc4140/delayed_events"
#define MAXSEG 12

typedef enum {
	R_PROXY,
	R_VERSIONS,
	R_CAPS,
	R_SCHEDULE,
	R_MANAGE_PATH,
	R_MANAGE_BODY,
	R_LIST,
	R_GET_ONE,
	R_OPTIONS,
	R_BAD_PARAM, /* carries msc4140 parameters but is not ours */
	R_ST_LIST,   /* stable form: GET /v1/delayed_events */
} route;

typedef struct greq {
	char *uri; /* raw, as received */
	char *path;
	char *segbuf;       /* the decoded segments live here */
	const char *query;  /* raw, after '?', or "" */
	char *segs[MAXSEG]; /* decoded path segments */
	size_t seglen[MAXSEG];
	int nseg;
	route rt;
	bool started, responded, too_large;
	/* served off the event loop (http.c) */
	struct MHD_Connection *conn;
	tlg *gw;
	char method[16];
	bool head_deferred; /* the header checks wait for the final call */
	bool failed;        /* no response could be made: close */
	struct MHD_Response *resp; /* made, not yet queued */
	unsigned resp_status;
	struct greq *wnext; /* the worker queue */
	/* management */
	bool checked;      /* storm, id and rate limits were checked */
	bool cached_tried; /* the cached restart was tried */
	uint64_t limit;
	tli_buf body;
	/* schedule */
	bool state, has_txn;
	bool stable;  /* the stable form: delay, state_key, content */
	int idseg;    /* the path segment of the delay_id */
	char *skey;   /* its state key (stable form), owned */
	gstr content; /* the content bytes inside the body */
	int64_t delay;
	/* caller */
	bool authed;
	char user[256];
	char device[256];
	char ip[64];
} greq;

typedef struct gout {
	int status;
	tli_buf body;
	int64_t retry_ms; /* > 0: a Retry-After header */
} gout;

/* ---- replies (http.c) ---- */

void tlg_out_err(gout *o, int status, const char *code, const char *msg);
/* 429 M_LIMIT_EXCEEDED with retry_after_ms and a Retry-After header. */
void tlg_out_limited(gout *o, int64_t ms);
/* Who is calling (whoami, cached): true with r->user set, or false with o
 * holding the reply (401 from the homeserver verbatim, or 401
 * M_MISSING_TOKEN). */
bool tlg_authenticate(tlg *g, struct MHD_Connection *conn, greq *r, gout *o);

/* ---- endpoints (api.c) ---- */

/* Scheduling: checks that need no body (true: read the body; false: o
 * is the reply, a repeated transaction included), then the rest. */
bool tlg_schedule_head(tlg *g, struct MHD_Connection *conn, greq *r, gout *o);
void tlg_schedule_body(tlg *g, greq *r, gout *o);
void tlg_manage_path(tlg *g, greq *r, gout *o);
void tlg_manage_body(tlg *g, greq *r, gout *o);

/* The restart of a cached event without blocking (the path form): either
 * o holds the answer (TLG_FAST_ANSWERED), or tl_move_async was started
 * with done(r, err) (TLG_FAST_STARTED; then tlg_restart_fast_result makes
 * the answer), or the request needs tlg_manage_path (TLG_FAST_NO). */
enum { TLG_FAST_NO = 0, TLG_FAST_ANSWERED, TLG_FAST_STARTED };
int tlg_restart_fast(tlg *g, greq *r, gout *o, tl_done_fn done);
/* false: the long way (tlg_manage_path) decides. */
bool tlg_restart_fast_result(tlg *g, greq *r, int rv, gout *o);
void tlg_list_scheduled(tlg *g, greq *r, gout *o);
void tlg_get_one(tlg *g, greq *r, gout *o);
void tlg_stable_list(tlg *g, greq *r, gout *o);

#endif
