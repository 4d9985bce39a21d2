/*
 * Helpers of the MSC4140 gateway suites. Each test gets a private
 * directory with the test homeserver (fake_hs.py), the real timelined
 * running the gateway in-process (or timelined plus the standalone
 * tl-msc4140), all run by the launcher (launch.h), and an HTTP client
 * (libcurl) that speaks to the gateway and reads the homeserver's record.
 * Every wait is for a condition with a deadline. Part of the test support
 * library (tltestsupport_gw).
 */
#ifndef TL_TESTS_GW_UTIL_H
#define TL_TESTS_GW_UTIL_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "launch.h"

#define UNSTABLE "/_matrix/client/unstable/org.matrix.msc4140/delayed_events"

typedef struct gw_env {
	char *dir;
	char hs[128];    /* the homeserver's base URL */
	char gw[128];    /* the gateway's base URL */
	tt_proc hs_proc; /* the test homeserver */
	tt_proc tl;      /* timelined (with the gateway unless standalone) */
	tt_proc gw_proc; /* the standalone tl-msc4140 */
	bool standalone;
} gw_env;

typedef struct gw_resp {
	long status;
	char *body;
	size_t len;
	char headers[4096];
	json_t *json;
} gw_resp;

/* Start the homeserver and the gateway; extra: more gateway settings. */
void gw_start(gw_env *e, const char *tag, bool standalone, const char *extra);
/* Start timelined (and the standalone gateway) again on the same data,
 * after it was stopped. */
void gw_start_broker(gw_env *e);
/* Stop (sig) and start again the gateway, on the same data. */
void gw_restart(gw_env *e, int sig);
/* Stop everything, fail on a sanitizer report in a log, remove the
 * directory. */
void gw_stop(gw_env *e);

/* ---- HTTP ---- */

/* libcurl write callback appending to a gw_resp's body. */
size_t gw_on_body(char *p, size_t size, size_t n, void *arg);
/* One request to base+path. token may be NULL; body may be NULL;
 * chunked sends the body with Transfer-Encoding: chunked. */
gw_resp gw_req_full(const char *method, const char *base, const char *path,
    const char *token, const char *body, size_t len, bool chunked);
gw_resp gw_req(const char *method, const char *base, const char *path,
    const char *token, const char *body);
void gw_resp_free(gw_resp *r);
/* A string member of the JSON body, or "". */
const char *gw_str(const gw_resp *r, const char *key);

/* Assert status and (when errcode != NULL) the Matrix errcode. */
#define gw_expect(r, st, code)                                            \
	do {                                                              \
		cr_assert_eq((r).status, (st), "status %ld, want %d: %s", \
		    (r).status, (st), (r).body ? (r).body : "");          \
		if ((code) != NULL) {                                     \
			cr_assert_str_eq(gw_str(&(r), "errcode"),         \
			    (const char *) (code), "body %s",             \
			    (r).body ? (r).body : "");                    \
		}                                                         \
	} while (0)

/* One request whose answer is only checked: status and errcode (NULL: not
 * checked), as gw_expect. Macros, so that a failure names the test's line. */
#define gw_req_expect(method, base, path, token, body, st, code)      \
	do {                                                          \
		gw_resp r_ = gw_req(method, base, path, token, body); \
		gw_expect(r_, st, code);                              \
		gw_resp_free(&r_);                                    \
	} while (0)
#define gw_manage_expect(e, id, action, st, code)      \
	do {                                           \
		gw_resp r_ = gw_manage(e, id, action); \
		gw_expect(r_, st, code);               \
		gw_resp_free(&r_);                     \
	} while (0)

/* A delayed event's record (r) says it finished with this HTTP status and
 * Matrix errcode from the homeserver. */
#define gw_expect_finalised(r, st, code)                                   \
	do {                                                               \
		json_t *f_ = json_object_get((r).json, "finalised");       \
		cr_assert_eq(                                              \
		    json_number_value(json_object_get(f_, "status")), st); \
		cr_assert_str_eq(                                          \
		    json_string_value(json_object_get(                     \
		        json_object_get(f_, "error"), "errcode")),         \
		    code);                                                 \
	} while (0)

/* Schedule a delayed message; returns the delay_id (malloc'd). */
char *gw_schedule(const gw_env *e, const char *token, const char *room,
    const char *txn, int64_t delay, const char *content);
/* POST a management action (cancel, restart, send) on a delay_id. */
gw_resp gw_manage(const gw_env *e, const char *id, const char *action);
/* The events the homeserver accepted so far (a JSON array, owned). */
json_t *gw_hs_events(const gw_env *e);
/* The requests the homeserver saw (a JSON array, owned). */
json_t *gw_hs_requests(const gw_env *e);
/* Wait until the homeserver has at least n events (at most ms). */
json_t *gw_wait_events(const gw_env *e, size_t n, int ms);
/* How many requests with this method and path prefix the homeserver saw. */
size_t gw_hs_count(const gw_env *e, const char *method, const char *prefix);
/* The number of scheduled events in token's list. */
size_t gw_list_len(const gw_env *e, const char *token);

#endif
