/*
 * Helpers of the tl-chronos suites. Each test gets a private directory
 * with the real timelined, running tl-chronos in-process (chronos = FILE)
 * or beside it as the standalone tl-chronos, both run by the launcher
 * (launch.h); a callback receiver that is a real HTTP server in the test
 * process (tlhttp) and records every pop; and an HTTP client (tlhttp's)
 * for the timer API. Every wait is for a condition with a deadline. Part
 * of the test support library (tltestsupport_chronos).
 */
#ifndef TL_TESTS_CHRONOS_UTIL_H
#define TL_TESTS_CHRONOS_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "launch.h"
#include "tlhttp.h"

/* ---- the callback receiver ----
 * It answers by the first segment of the path: /ok/... 200, /fail/...
 * 500, /slow/... 200 after 3 s (over the 2 s a callback has). */

#define CK_MAX_HITS 2048

typedef struct ck_hit {
	char path[128];
	int64_t at;     /* wall ms when it came */
	long seq;       /* X-Sequence-Number, -1 when absent */
	long clen;      /* Content-Length, -1 when absent */
	bool ctype;     /* a Content-Type came */
	char body[256]; /* the opaque data (cut) */
} ck_hit;

typedef struct ck_recv {
	tlh_server *srv;
	char url[128]; /* http://127.0.0.1:PORT */
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	ck_hit hits[CK_MAX_HITS];
	size_t n;
} ck_recv;

void ck_recv_start(ck_recv *r);
void ck_recv_stop(ck_recv *r);
/* The hits on path so far, copied into out (up to cap); their number. */
size_t ck_hits(ck_recv *r, const char *path, ck_hit *out, size_t cap);
/* Wait until path has at least n hits (at most ms); their number. */
size_t ck_wait_hits(ck_recv *r, const char *path, size_t n, int ms);

/* ---- the service ---- */

typedef struct ck_env {
	char *dir;
	char api[128]; /* tl-chronos's base URL */
	tt_proc tl;    /* timelined (with tl-chronos unless standalone) */
	tt_proc k;     /* the standalone tl-chronos */
	bool standalone;
	ck_recv recv;
	tlh_client *hc;
} ck_env;

/* Start the receiver, timelined and tl-chronos; extra: more tl-chronos
 * settings ("key = value" lines) or NULL. */
void ck_start(ck_env *e, const char *tag, bool standalone, const char *extra);
/* Stop everything, fail on a sanitizer report in a log, remove the
 * directory. */
void ck_stop(ck_env *e);
/* Stop (sig) and start again tl-chronos (standalone) or timelined. */
void ck_restart_service(ck_env *e, int sig);
/* Stop (sig) and start again timelined only (standalone). */
void ck_restart_broker(ck_env *e, int sig);

/* ---- the API ---- */

typedef struct ck_resp {
	long status;
	char location[128]; /* the Location header, or "" */
	char reason[512];   /* the Reason header, or "" */
	char *body;         /* NUL-terminated (malloc'd) */
} ck_resp;

/* One request to the API; body may be NULL. */
ck_resp ck_req(
    ck_env *e, const char *method, const char *path, const char *body);
void ck_resp_free(ck_resp *r);
/* A timer's JSON: interval and repeat-for in seconds (repeat < 0: none),
 * the callback at the receiver's path. Into out. */
void ck_timer_json(const ck_env *e, char *out, size_t cap, double interval,
    double repeat, const char *path, const char *opaque);
/* POST a timer; asserts 200 and returns its id (the Location's last
 * segment) into id (33 bytes). */
void ck_post(ck_env *e, const char *json, char *id);
/* The value of a metric sample line "NAME VALUE" in GET /metrics (name
 * with its labels), or -1 when absent. */
double ck_metric(ck_env *e, const char *name);
/* Wait (at most ms) until that metric has value v; its last value. */
double ck_metric_wait(ck_env *e, const char *name, double v, int ms);

#endif
