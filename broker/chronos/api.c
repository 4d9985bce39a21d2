/*
 * The timer API (the seed's "Public API Definition"): POST /timers,
 * PUT /timers/<id>, DELETE /timers/<id>, and GET /metrics, on tlhttp's
 * route table; the parsing and checks of a timer's JSON; the stored form.
 *
 * Answers: 200 with a Location header (/timers/<id>) for a stored timer,
 * 200 for a DELETE of a valid id (stored or not: idempotent), 400 with the
 * reason in a Reason header for an invalid body or an id that is not of
 * our form (32 hex digits; the seed answers 400 to an invalid request),
 * 503 with a Reason when the broker cannot be reached. A PUT replaces:
 * the owner's delete of the stored timer, then a create under the same
 * id (an unknown id is created). A timer that can never pop (repeat-for
 * below the interval) is answered 200 and nothing is stored.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* ---- a timer's JSON ---- */

/* A number of seconds into ms: -1 with err when it is not a non-negative
 * number up to max_ms. */
static int64_t
seconds_ms(
    const json_t *v, const char *what, int64_t max_ms, char *err, size_t cap)
{
	double s;

	if (!json_is_number(v)) {
		snprintf(err, cap, "%s must be a number (seconds)", what);
		return -1;
	}
	s = json_number_value(v);
	if (!(s >= 0)) {
		snprintf(err, cap, "%s must not be negative", what);
		return -1;
	}
	if (s * 1000.0 > (double) max_ms) {
		snprintf(err, cap, "%s must be at most %lld seconds", what,
		    (long long) (max_ms / 1000));
		return -1;
	}
	return (int64_t) (s * 1000.0 + 0.5);
}

static int
parse_timing(
    tlk_timer *t, const json_t *o, int64_t max_ms, char *err, size_t cap)
{
	const json_t *tm = json_object_get(o, "timing"), *v;

	if (tm == NULL) {
		snprintf(err, cap, "timing.interval is required");
		return -1;
	}
	if (!json_is_object(tm)) {
		snprintf(err, cap, "timing must be an object");
		return -1;
	}
	if ((v = json_object_get(tm, "interval")) == NULL) {
		snprintf(err, cap, "timing.interval is required");
		return -1;
	}
	if ((t->interval_ms =
	            seconds_ms(v, "timing.interval", max_ms, err, cap)) < 0) {
		return -1;
	}
	if (t->interval_ms == 0) {
		snprintf(err, cap, "timing.interval must be more than 0");
		return -1;
	}
	t->repeat_for_ms = -1;
	if ((v = json_object_get(tm, "repeat-for")) != NULL &&
	    (t->repeat_for_ms =
	            seconds_ms(v, "timing.repeat-for", max_ms, err, cap)) < 0) {
		return -1;
	}
	if (tlk_timer_pops(t) > UINT32_MAX) {
		snprintf(err, cap,
		    "timing.repeat-for / timing.interval is too "
		    "many pops");
		return -1;
	}
	return 0;
}

static int
parse_callback(tlk_timer *t, const json_t *o, char *err, size_t cap)
{
	const json_t *cb = json_object_get(o, "callback"), *h, *uri, *op;

	if (!json_is_object(cb)) {
		snprintf(err, cap, "callback.http is required");
		return -1;
	}
	if (json_object_size(cb) != 1 ||
	    (h = json_object_get(cb, "http")) == NULL) {
		snprintf(err, cap, "only http callbacks are supported");
		return -1;
	}
	if (!json_is_object(h)) {
		snprintf(err, cap, "callback.http must be an object");
		return -1;
	}
	uri = json_object_get(h, "uri");
	if (!json_is_string(uri)) {
		snprintf(err, cap, "callback.http.uri must be a string");
		return -1;
	}
	if (strncmp(json_string_value(uri), "http://", 7) != 0 &&
	    strncmp(json_string_value(uri), "https://", 8) != 0) {
		snprintf(err, cap,
		    "callback.http.uri must be an http:// or "
		    "https:// URI");
		return -1;
	}
	op = json_object_get(h, "opaque");
	if (!json_is_string(op)) {
		snprintf(err, cap, "callback.http.opaque must be a string");
		return -1;
	}
	t->uri = strdup(json_string_value(uri));
	t->opaque_len = json_string_length(op);
	t->opaque = malloc(t->opaque_len + 1);
	if (t->uri == NULL || t->opaque == NULL) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	memcpy(t->opaque, json_string_value(op), t->opaque_len + 1);
	return 0;
}

static int
parse_reliability(tlk_timer *t, const json_t *o, char *err, size_t cap)
{
	const json_t *r = json_object_get(o, "reliability"), *v;

	t->replication = 2; /* the seed's default */
	if (r == NULL) {
		return 0;
	}
	if (!json_is_object(r)) {
		snprintf(err, cap, "reliability must be an object");
		return -1;
	}
	if ((v = json_object_get(r, "replication-factor")) == NULL) {
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > 1000) {
		snprintf(err, cap,
		    "reliability.replication-factor must be a "
		    "positive integer");
		return -1;
	}
	t->replication = json_integer_value(v);
	return 0;
}

static int
parse_tag(tlk_tag *tag, const json_t *e, char *err, size_t cap)
{
	const json_t *ty = json_object_get(e, "type");
	const json_t *n = json_object_get(e, "count");

	if (!json_is_object(e) || !json_is_string(ty) ||
	    json_string_length(ty) == 0 ||
	    json_string_length(ty) > TLK_MAX_TAG_LEN ||
	    strlen(json_string_value(ty)) != json_string_length(ty)) {
		snprintf(err, cap,
		    "statistics.tag-info entries need a type (a string of 1 "
		    "to %d bytes)",
		    TLK_MAX_TAG_LEN);
		return -1;
	}
	if (n != NULL && (!json_is_integer(n) || json_integer_value(n) < 1)) {
		snprintf(err, cap,
		    "statistics.tag-info count must be a positive integer");
		return -1;
	}
	snprintf(tag->type, sizeof(tag->type), "%s", json_string_value(ty));
	tag->count = n != NULL ? (uint64_t) json_integer_value(n) : 1;
	return 0;
}

static int
parse_statistics(tlk_timer *t, const json_t *o, char *err, size_t cap)
{
	const json_t *s = json_object_get(o, "statistics"), *ti, *e;
	size_t i;

	if (s == NULL) {
		return 0;
	}
	if (!json_is_object(s)) {
		snprintf(err, cap, "statistics must be an object");
		return -1;
	}
	if ((ti = json_object_get(s, "tag-info")) == NULL) {
		return 0;
	}
	if (!json_is_array(ti) || json_array_size(ti) > TLK_MAX_TAGS) {
		snprintf(err, cap,
		    "statistics.tag-info must be an array of up to %d tags",
		    TLK_MAX_TAGS);
		return -1;
	}
	json_array_foreach(ti, i, e)
	{
		if (parse_tag(&t->tags[t->ntags], e, err, cap) != 0) {
			return -1;
		}
		t->ntags++;
	}
	return 0;
}

int
tlk_timer_parse(tlk_timer *t, const char *body, size_t len, int64_t max_ms,
    char *err, size_t cap)
{
	json_error_t je;
	json_t *o;
	int rv = -1;

	memset(t, 0, sizeof(*t));
	if ((o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je)) == NULL) {
		snprintf(err, cap, "the body is not valid JSON: %s", je.text);
		return -1;
	}
	if (!json_is_object(o)) {
		snprintf(err, cap, "the body must be a JSON object");
	} else if (parse_timing(t, o, max_ms, err, cap) == 0 &&
	    parse_callback(t, o, err, cap) == 0 &&
	    parse_reliability(t, o, err, cap) == 0 &&
	    parse_statistics(t, o, err, cap) == 0) {
		rv = 0;
	}
	json_decref(o);
	if (rv != 0) {
		tlk_timer_fini(t);
	}
	return rv;
}

void
tlk_timer_fini(tlk_timer *t)
{
	free(t->uri);
	free(t->opaque);
	t->uri = t->opaque = NULL;
}

uint64_t
tlk_timer_pops(const tlk_timer *t)
{
	if (t->repeat_for_ms < 0) {
		return 1;
	}
	return (uint64_t) (t->repeat_for_ms / t->interval_ms);
}

/* The stored form is the request's shape, normalised (defaults filled),
 * so that the same parser reads it back. */
void
tlk_timer_json(const tlk_timer *t, tli_buf *out)
{
	tli_buf_printf(out, "{\"timing\":{\"interval\":%.3f",
	    (double) t->interval_ms / 1000.0);
	if (t->repeat_for_ms >= 0) {
		tli_buf_printf(out, ",\"repeat-for\":%.3f",
		    (double) t->repeat_for_ms / 1000.0);
	}
	tli_buf_puts(out, "},\"callback\":{\"http\":{\"uri\":");
	tlh_json_str(out, t->uri, strlen(t->uri));
	tli_buf_puts(out, ",\"opaque\":");
	tlh_json_str(out, t->opaque, t->opaque_len);
	tli_buf_printf(out,
	    "}},\"reliability\":{\"replication-factor\":%lld},"
	    "\"statistics\":{\"tag-info\":[",
	    (long long) t->replication);
	for (int i = 0; i < t->ntags; i++) {
		tli_buf_puts(out, i > 0 ? ",{\"type\":" : "{\"type\":");
		tlh_json_str(out, t->tags[i].type, strlen(t->tags[i].type));
		tli_buf_printf(out, ",\"count\":%llu}",
		    (unsigned long long) t->tags[i].count);
	}
	tli_buf_puts(out, "]}}");
}

/* ---- ids and broker errors ---- */

bool
tlk_id_ok(const char *s, size_t n)
{
	if (n != TLK_ID_LEN) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		        (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

bool
tlk_broker_down(int err)
{
	return err == TL_ECONN || err == TL_ETIMEDOUT || err == TL_ECLOSED;
}

/* ---- the broker side of the operations ---- */

/* The owner's delete of id; a pop in flight holds its lease for at most a
 * callback's time, so a leased timer is tried again until then. TL_OK
 * also when there was nothing. */
static int
timer_remove(tlk *k, const char *id)
{
	int64_t until = tli_mono_ms() + 2 * k->c.callback_timeout_ms + 3000;
	int rv;

	for (;;) {
		rv = tl_delete(k->cl, k->c.topic, k->c.group, id, 0);
		if (rv == TL_ENOTFOUND) {
			rv = TL_OK;
		}
		if (rv != TL_ELEASED || tli_mono_ms() > until) {
			return rv;
		}
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static int
timer_store(tlk *k, const char *id, const tlk_timer *t)
{
	uint64_t pops = tlk_timer_pops(t);
	tli_buf body = {0};
	tl_put p;
	int rv;

	if (pops == 0) {
		tlk_stats_del(k, id); /* it never pops: nothing is stored */
		return TL_OK;
	}
	tlk_timer_json(t, &body);
	if (body.oom) {
		tli_buf_fini(&body);
		return TL_ENOMEM;
	}
	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = t->interval_ms; /* the first pop: creation + interval */
	p.rel = true;
	p.body = body.data;
	p.body_len = body.len;
	/* a recurrence also for one pop: its occurrence (due time, sequence
	 * number 1) stays fixed while a failing callback is retried */
	p.every_ms = t->interval_ms;
	p.times = (uint32_t) pops;
	p.catch_up = true; /* pops missed in an outage are all sent */
	rv = tl_put_batch(k->cl, k->c.topic, k->c.group, &p, 1);
	if (rv == TL_OK) {
		rv = p.err;
	}
	tli_buf_fini(&body);
	if (rv == TL_OK) {
		tlk_stats_add(k, id, t);
	}
	return rv;
}

/* ---- answers ---- */

static void
reply_reason(tlh_req *req, int status, const char *reason)
{
	char clean[512];
	size_t i;

	/* a header value holds no control characters */
	for (i = 0; reason[i] != '\0' && i + 1 < sizeof(clean); i++) {
		clean[i] = (unsigned char) reason[i] < 0x20 ? ' ' : reason[i];
	}
	clean[i] = '\0';
	tlh_reply(req, status, NULL, "", 0, 0);
	tlh_reply_header(req, "Reason", clean);
}

static void
reply_broker_error(tlh_req *req, int rv)
{
	char why[256];

	snprintf(why, sizeof(why), "%s: %s",
	    tlk_broker_down(rv) ? "the broker cannot be reached"
	                        : "the broker refused",
	    tl_strerror(rv));
	reply_reason(req, 503, why);
}

static void
reply_stored(tlh_req *req, const char *id)
{
	char loc[64];

	snprintf(loc, sizeof(loc), "/timers/%s", id);
	tlh_reply(req, 200, NULL, "", 0, 0);
	tlh_reply_header(req, "Location", loc);
}

/* The body as a timer, or a 400 made. */
static bool
req_timer(tlk *k, tlh_req *req, tlk_timer *t)
{
	char err[300];
	size_t len;
	const char *body = tlh_req_body(req, &len);

	if (tlh_req_body_over(req)) {
		reply_reason(req, 413, "the timer is too large");
		return false;
	}
	if (tlk_timer_parse(
	        t, body, len, k->c.max_interval_ms, err, sizeof(err)) != 0) {
		reply_reason(req, 400, err);
		return false;
	}
	return true;
}

/* The id of /timers/{id}, lowercase, or a 400 made. */
static bool
req_id(tlh_req *req, char id[TLK_ID_LEN + 1])
{
	size_t n = 0;
	const char *p = tlh_req_param(req, "id", &n);

	if (p == NULL || n != TLK_ID_LEN) {
		reply_reason(req, 400, "a timer id is 32 hex digits");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		id[i] =
		    (p[i] >= 'A' && p[i] <= 'F') ? (char) (p[i] + 32) : p[i];
	}
	id[n] = '\0';
	if (!tlk_id_ok(id, n)) {
		reply_reason(req, 400, "a timer id is 32 hex digits");
		return false;
	}
	return true;
}

static void
on_post(tlh_req *req, void *arg)
{
	tlk *k = arg;
	tlk_timer t;
	char id[TLK_ID_LEN + 1];
	int rv;

	if (!req_timer(k, req, &t)) {
		return;
	}
	if (tli_random_hex(id, TLK_ID_LEN / 2) != 0) {
		reply_reason(req, 503, "no random id could be made");
	} else if ((rv = timer_store(k, id, &t)) != TL_OK) {
		reply_broker_error(req, rv);
	} else {
		reply_stored(req, id);
	}
	tlk_timer_fini(&t);
}

static void
on_put(tlh_req *req, void *arg)
{
	tlk *k = arg;
	tlk_timer t;
	char id[TLK_ID_LEN + 1];
	int rv = TL_OK;

	if (!req_id(req, id) || !req_timer(k, req, &t)) {
		return;
	}
	/* a PUT racing another PUT of the same id may find it re-created */
	for (int i = 0; i < 3; i++) {
		if ((rv = timer_remove(k, id)) != TL_OK ||
		    (rv = timer_store(k, id, &t)) != TL_EEXISTS) {
			break;
		}
	}
	if (rv != TL_OK) {
		reply_broker_error(req, rv);
	} else {
		reply_stored(req, id);
	}
	tlk_timer_fini(&t);
}

static void
on_delete(tlh_req *req, void *arg)
{
	tlk *k = arg;
	char id[TLK_ID_LEN + 1];
	int rv;

	if (!req_id(req, id)) {
		return;
	}
	if ((rv = timer_remove(k, id)) != TL_OK) {
		reply_broker_error(req, rv);
		return;
	}
	tlk_stats_del(k, id);
	tlh_reply(req, 200, NULL, "", 0, 0);
}

static void
on_metrics(tlh_req *req, void *arg)
{
	tlk *k = arg;
	tli_buf o = {0};

	tlk_stats_render(k, &o);
	if (o.oom) {
		reply_reason(req, 503, "out of memory");
	} else {
		tlh_reply(
		    req, 200, "text/plain; version=0.0.4", o.data, o.len, 0);
	}
	tli_buf_fini(&o);
}

static void
on_error(tlh_req *req, tlh_error e, void *arg)
{
	static const struct {
		int status;
		const char *reason;
	} map[] = {
	    [TLH_E_TARGET] = {400, "bad request target"},
	    [TLH_E_METHOD] = {405, "method not allowed"},
	    [TLH_E_TOO_LARGE] = {413, "the timer is too large"},
	    [TLH_E_STOPPING] = {503, "the service is stopping"},
	    [TLH_E_NO_REPLY] = {500, "no reply"},
	    [TLH_E_NOT_FOUND] = {404, "no such resource"},
	    [TLH_E_BAD_REQUEST] = {400, "malformed request"},
	};

	(void) arg;
	reply_reason(req, map[e].status, map[e].reason);
}

static const tlh_route routes[] = {
    {.methods = "POST", .pattern = "/timers", .handler = on_post},
    {.methods = "PUT", .pattern = "/timers/{id}", .handler = on_put},
    {.methods = "DELETE", .pattern = "/timers/{id}", .handler = on_delete},
    {.methods = "GET", .pattern = "/metrics", .handler = on_metrics},
};

static void
ready_file_write(const tlk *k)
{
	char tmp[600];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", k->c.ready_file);
	if ((f = fopen(tmp, "w")) != NULL) {
		fprintf(f, "%s\n", k->url);
		fclose(f);
		rename(tmp, k->c.ready_file);
	}
}

int
tlk_http_start(tlk *k)
{
	tlh_config cfg = {
	    .listen = k->c.listen,
	    .body_max = k->c.max_body,
	    .error = on_error,
	    .arg = k,
	};
	int rv;

	if (tlh_server_alloc(&k->http, &cfg) != TL_OK) {
		return -1;
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (tlh_route_add(k->http, &routes[i]) != TL_OK) {
			return -1;
		}
	}
	if ((rv = tlh_server_start(k->http)) != TL_OK) {
		tli_log("chronos", TLI_LOG_ERROR, "C004", "%s %s",
		    rv == TL_EINVAL ? "bad listen address" : "cannot listen on",
		    k->c.listen);
		return -1;
	}
	snprintf(k->url, sizeof(k->url), "%s", tlh_server_url(k->http));
	if (k->c.ready_file[0] != '\0') {
		ready_file_write(k);
	}
	return 0;
}

void
tlk_http_stop(tlk *k)
{
	tlh_server_free(k->http);
	k->http = NULL;
}
