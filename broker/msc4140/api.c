/*
 * The delayed-event endpoints behind the HTTP front (http.c): idempotent
 * transaction ids, scheduling (unstable and stable forms), management
 * (restart, cancel, send), and the lists. Each handler fills a gout with
 * the status and JSON body; http.c sends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "parse.h"

/* The query parameters kept with the event and passed on at send time:
 * all but ours and those only the gateway may set when it acts as the
 * user (user_id, ts, device ids, the caller's access token). */
bool
tlg_extra_query(const char *q, tli_buf *out)
{
	static const char *drop[] = {"access_token", "user_id", "ts",
	    "device_id", "org.matrix.msc3202.device_id", NULL};

	while (*q != '\0') {
		const char *amp = strchr(q, '&');
		size_t len = amp ? (size_t) (amp - q) : strlen(q);
		size_t kl = strcspn(q, "=&");
		bool keep = len > 0 && strncmp(q, "org.matrix.msc4140.", 19);
		for (int i = 0; keep && drop[i] != NULL; i++) {
			if (kl == strlen(drop[i]) &&
			    strncmp(q, drop[i], kl) == 0) {
				keep = false;
			}
		}
		for (size_t i = 0; i < len; i++) {
			if ((unsigned char) q[i] < 0x21) {
				return false;
			}
		}
		if (keep) {
			if (out->len > 0) {
				tli_buf_append(out, "&", 1);
			}
			tli_buf_append(out, q, len);
		}
		q += len + (amp ? 1 : 0);
	}
	return true;
}

/* ---- transaction ids ---- */

void
tlg_txn_key(const greq *r, char kind, char *tid, size_t cap, tli_buf *key)
{
	tli_buf_puts(key, r->user);
	tli_buf_append(key, "\n", 1);
	tli_buf_puts(key, r->device);
	tli_buf_append(key, "\n", 1);
	tli_buf_puts(key, tlh_req_path(r->hr));
	snprintf(tid, cap, "%c%016llx%016llx", kind,
	    (unsigned long long) tli_hash64_mixed(key->data, key->len, 21),
	    (unsigned long long) tli_hash64_mixed(key->data, key->len, 22));
}

/* The delay_id of an earlier request with the same transaction, if any. */
static bool
txn_lookup(tlg *g, const greq *r, char *delay_id, size_t cap)
{
	char tid[64];
	tli_buf key = {0};
	tl_message *m = NULL;
	bool found = false;

	tlg_txn_key(r, 't', tid, sizeof(tid), &key);
	if (!key.oom && tl_get(g->cl, g->t_txn, tid, &m) == TL_OK) {
		const char *b = m->body, *nl = memchr(b, '\n', m->body_len);
		/* the hash names the record; the stored key decides */
		if (nl != NULL && (size_t) (nl - b) < cap &&
		    m->body_len - (size_t) (nl - b) - 1 == key.len &&
		    memcmp(nl + 1, key.data, key.len) == 0 &&
		    m->consumer[0] == '\0' && m->ts > tli_wall_ms()) {
			memcpy(delay_id, b, (size_t) (nl - b));
			delay_id[nl - b] = '\0';
			found = true;
		}
	}
	tl_message_free(m);
	tli_buf_fini(&key);
	return found;
}

static void
txn_record(tlg *g, const greq *r, const char *owner, const char *delay_id)
{
	char tid[64];
	tli_buf key = {0}, body = {0};
	int rv;

	tlg_txn_key(r, 't', tid, sizeof(tid), &key);
	tli_buf_puts(&body, delay_id);
	tli_buf_append(&body, "\n", 1);
	tli_buf_append(&body, key.data, key.len);
	if (!body.oom) {
		rv = tl_put_in(g->cl, g->t_txn, owner, tid, 30 * 60 * 1000,
		    body.data, body.len, NULL);
		if (rv == TL_EEXISTS) {
			/* an expired record not reaped yet */
			tl_delete(g->cl, g->t_txn, owner, tid, 0);
			tl_put_in(g->cl, g->t_txn, owner, tid, 30 * 60 * 1000,
			    body.data, body.len, NULL);
		}
	}
	tli_buf_fini(&key);
	tli_buf_fini(&body);
}

/* ---- scheduling ---- */

bool
tlg_field_ok(const char *s, size_t n)
{
	if (n > 255 || !tlg_utf8_ok(s, n)) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char) s[i] < 0x20 || s[i] == 0x7f) {
			return false;
		}
	}
	return true;
}

static void
delay_too_long(const tlg_conf *c, gout *o)
{
	bool forbid = c->max_delay_forbidden;

	o->status = forbid ? 403 : 400;
	tli_buf_reset(&o->body);
	tli_buf_printf(&o->body,
	    "{\"errcode\":\"%s\",\"error\":\"The requested "
	    "delay exceeds the allowed maximum.\","
	    "\"org.matrix.msc4140.errcode\":\"M_MAX_DELAY_EXCEEDED\","
	    "\"org.matrix.msc4140.max_delay\":%lld}",
	    forbid ? "M_FORBIDDEN" : "M_UNKNOWN", (long long) c->max_delay_ms);
}

/* Path parameters: room, event type and state key (or transaction id). */
bool
tlg_fields_ok(const greq *r, gout *o)
{
	gstr room = tlg_param(r, "room"), v;
	const char *name;

	if (room.n < 2 || room.p[0] != '!') {
		tlg_out_err(o, 400, "M_INVALID_PARAM", "Not a room id");
		return false;
	}
	for (size_t i = 0; (v.p = tlh_req_param_at(r->hr, i, &name, &v.n));
	     i++) {
		if (strcmp(name, "v") != 0 && !tlg_field_ok(v.p, v.n)) {
			tlg_out_err(o, 400, "M_INVALID_PARAM",
			    "Bad room id, event type or state key");
			return false;
		}
	}
	return true;
}

bool
tlg_query_delay(const tlg_conf *c, const char *query, int64_t *delay, gout *o)
{
	char dbuf[64], *end;
	const char *d;
	long long x;

	d = tlh_query_get(
	    query, "org.matrix.msc4140.delay", dbuf, sizeof(dbuf));
	if (d == NULL) {
		tlg_out_err(o, 400, "M_INVALID_PARAM",
		    "org.matrix.msc4140.delay must be a whole number of ms");
		return false;
	}
	errno = 0;
	x = strtoll(d, &end, 10);
	if (*d == '\0' || *end != '\0' || errno != 0 || x < 0 ||
	    !(*d >= '0' && *d <= '9')) {
		if (errno == ERANGE && *d != '-') {
			delay_too_long(c, o);
			return false;
		}
		tlg_out_err(o, 400, "M_INVALID_PARAM",
		    "org.matrix.msc4140.delay must be a whole number of ms");
		return false;
	}
	if (x > c->max_delay_ms) {
		delay_too_long(c, o);
		return false;
	}
	*delay = x;
	return true;
}

/* Checks that need no body. true: go on; false: o is the reply. */
static bool
schedule_head(tlg *g, greq *r, gout *o)
{
	int64_t wait;

	if (r->has_txn) {
		char id[TL_MAX_ID_LEN + 1];
		if (txn_lookup(g, r, id, sizeof(id))) {
			o->status = 200;
			tli_buf_puts(&o->body, "{\"delay_id\":");
			tlh_json_str(&o->body, id, strlen(id));
			tli_buf_puts(&o->body, "}");
			return false;
		}
	}
	/* the stable form has the delay in the body */
	if (!r->stable &&
	    !tlg_query_delay(&g->c, tlh_req_query(r->hr), &r->delay, o)) {
		return false;
	}
	if (!tlg_fields_ok(r, o)) {
		return false;
	}
	if ((wait = tlg_rate_take(
	         g, "sched", r->user, g->c.sched_rate, g->c.sched_burst)) > 0) {
		tlg_out_limited(o, wait);
		return false;
	}
	return true;
}

/* The bytes of a JSON value starting at p (already validated as part of
 * a whole document): its end. */
static const char *
json_skip(const char *p, const char *end)
{
	int depth = 0;

	do {
		while (p < end &&
		    (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' ||
		        *p == ',' || *p == ':')) {
			if (depth == 0 && (*p == ',' || *p == ':')) {
				return p;
			}
			p++;
		}
		if (p >= end) {
			return p;
		}
		if (*p == '"') {
			for (p++; p < end && *p != '"'; p++) {
				if (*p == '\\') {
					p++;
				}
			}
			p++;
		} else if (*p == '{' || *p == '[') {
			depth++;
			p++;
		} else if (*p == '}' || *p == ']') {
			if (depth == 0) {
				return p;
			}
			depth--;
			p++;
		} else {
			/* memchr: strchr matches a NUL byte, which then
			 * stopped this scan where it stood, for ever */
			while (
			    p < end && memchr(",:}] \t\r\n", *p, 8) == NULL) {
				p++;
			}
		}
	} while (depth > 0);
	return p;
}

/* The raw bytes of the top-level member key of a JSON object text. */
bool
tlg_json_member(const char *p, size_t n, const char *key, gstr *out)
{
	const char *end = p + n;
	size_t kl = strlen(key);

	while (p < end && *p != '{') {
		p++;
	}
	p++;
	for (;;) {
		const char *ks, *vs;
		while (p < end && strchr(" \t\r\n,", *p)) {
			p++;
		}
		if (p >= end || *p != '"') {
			return false;
		}
		ks = p + 1;
		p = json_skip(p, end);
		while (p < end && *p != ':') {
			p++;
		}
		p++;
		while (p < end && strchr(" \t\r\n", *p)) {
			p++;
		}
		vs = p;
		p = json_skip(p, end);
		if ((size_t) (p - ks) >= kl + 1 && memcmp(ks, key, kl) == 0 &&
		    ks[kl] == '"') {
			const char *ve = p;
			while (ve > vs && strchr(" \t\r\n", ve[-1])) {
				ve--;
			}
			*out = (gstr){vs, (size_t) (ve - vs)};
			return true;
		}
	}
}

/* The stable form's body: {"delay": ms, "state_key"?: s, "content": {}}. */
static bool
stable_fields(
    const tlg_conf *cf, greq *r, const char *body, size_t n, json_t *j, gout *o)
{
	json_t *d = json_object_get(j, "delay");
	json_t *sk = json_object_get(j, "state_key");
	json_t *c = json_object_get(j, "content");
	double x = json_is_number(d) ? json_number_value(d) : -1;

	/* Whole only checked within the maximum: converting a double out
	 * of int64_t's range ({"delay": 1e30}) is undefined behaviour. */
	if (!json_is_number(d) || x < 1 ||
	    (x <= (double) cf->max_delay_ms && x != (double) (int64_t) x)) {
		tlg_out_err(o, 400, "M_INVALID_PARAM",
		    "delay must be a positive whole number of ms");
		return false;
	}
	if (x > (double) cf->max_delay_ms) {
		o->status = 400;
		tli_buf_printf(&o->body,
		    "{\"errcode\":\"M_MAX_DELAY_EXCEEDED\",\"error\":\"The "
		    "requested delay exceeds the allowed maximum.\","
		    "\"max_delay\":%lld}",
		    (long long) cf->max_delay_ms);
		return false;
	}
	r->delay = (int64_t) x;
	if (!json_is_object(c) ||
	    !tlg_json_member(body, n, "content", &r->content)) {
		tlg_out_err(
		    o, 400, "M_BAD_JSON", "content must be a JSON object");
		return false;
	}
	r->state = sk != NULL;
	if (sk != NULL) {
		if (!json_is_string(sk) ||
		    !tlg_field_ok(
		        json_string_value(sk), json_string_length(sk)) ||
		    (r->skey = strdup(json_string_value(sk))) == NULL) {
			tlg_out_err(o, 400, "M_INVALID_PARAM", "bad state_key");
			return false;
		}
	}
	return true;
}

bool
tlg_schedule_json(
    const tlg_conf *c, greq *r, const char *rb, size_t rn, gout *o)
{
	json_t *j;
	bool ok = true;

	/* Only validated: the bytes are kept, so big integers and \u0000
	 * are fine here. */
	j = json_loadb(rb, rn,
	    JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL |
	        (r->stable ? JSON_REJECT_DUPLICATES : 0),
	    NULL);
	if (j == NULL) {
		tlg_out_err(o, 400, "M_NOT_JSON", "Content not JSON.");
		return false;
	}
	if (!json_is_object(j)) {
		tlg_out_err(
		    o, 400, "M_BAD_JSON", "Content must be a JSON object.");
		ok = false;
	} else if (r->stable) {
		ok = stable_fields(c, r, rb, rn, j, o);
	} else {
		r->content = (gstr){rb, rn};
	}
	json_decref(j);
	return ok;
}

/* The user's events still stored under the name an earlier version gave
 * a long user id (they count against the limit until they are gone). */
static size_t
legacy_count(tlg *g, const char *user)
{
	char legacy[TL_MAX_NAME_LEN + 1];
	tl_entry *es = NULL;
	size_t n = 0, mine = 0;
	bool more = false;

	if (!tlg_owner_legacy(user, legacy, sizeof(legacy)) ||
	    tl_list(g->cl, g->t_ev, legacy, g->c.max_scheduled, NULL, &es, &n,
	        &more) != TL_OK) {
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		tl_message *m = NULL;
		gev e;
		if (tl_get(g->cl, g->t_ev, es[i].id, &m) == TL_OK &&
		    tlg_ev_parse(&e, m->body, m->body_len) == 0 &&
		    tlg_ev_mine(&e, user)) {
			mine++;
		}
		tl_message_free(m);
	}
	tl_free(es);
	return mine;
}

static void
schedule_body(tlg *g, greq *r, gout *o)
{
	size_t rn;
	const char *rb = tlh_req_body(r->hr, &rn);
	char owner[TL_MAX_NAME_LEN + 1], id[TL_MAX_ID_LEN + 1];
	tli_buf extra = {0}, body = {0};
	tl_entry *es = NULL;
	size_t n = 0;
	bool more = false;
	pthread_mutex_t *um = NULL;
	gev e;
	tl_put p;
	int rv;

	if (tlh_req_body_over(r->hr)) {
		tlg_out_err(
		    o, 413, "M_TOO_LARGE", "Event content is too large");
		return;
	}
	if (!tlg_schedule_json(&g->c, r, rb, rn, o)) {
		return;
	}
	if (!tlg_extra_query(tlh_req_query(r->hr), &extra)) {
		tlg_out_err(o, 400, "M_INVALID_PARAM", "Bad query string");
		goto out;
	}
	tlg_owner(r->user, owner, sizeof(owner));
	/* One user's requests one at a time from here: the limit holds and
	 * a concurrent repeat of the transaction gets the same delay_id. */
	um = &g->user_mtx[tli_hash64_mixed(owner, strlen(owner), 4) %
	    TLG_USER_STRIPES];
	pthread_mutex_lock(um);
	if (r->has_txn && txn_lookup(g, r, id, sizeof(id))) {
		o->status = 200;
		tli_buf_puts(&o->body, "{\"delay_id\":");
		tlh_json_str(&o->body, id, strlen(id));
		tli_buf_puts(&o->body, "}");
		goto out;
	}
	rv = tl_list(
	    g->cl, g->t_ev, owner, g->c.max_scheduled, NULL, &es, &n, &more);
	if (rv == TL_OK) {
		n += legacy_count(g, r->user);
	}
	if (rv != TL_OK) {
		tlg_out_err(o, 503, "M_UNKNOWN",
		    "The delayed-event store is "
		    "unavailable");
		goto out;
	}
	if (n >= g->c.max_scheduled && r->stable) {
		tlg_out_err(o, 400, "M_MAX_DELAYED_EVENTS_EXCEEDED",
		    "The maximum number of delayed events has been reached.");
		goto out;
	}
	if (n >= g->c.max_scheduled) {
		int64_t ms = es[0].ts - tli_wall_ms();
		tlg_out_limited(o, ms > 1000 ? ms : 1000);
		goto out;
	}
	memset(&e, 0, sizeof(e));
	e.user = (gstr){r->user, strlen(r->user)};
	e.room = tlg_param(r, "room");
	e.type = tlg_param(r, "type");
	e.state = r->state;
	if (r->state) {
		e.skey = r->stable ? (gstr){r->skey, strlen(r->skey)}
		                   : tlg_param(r, "skey");
	}
	e.delay = r->delay;
	e.query = (gstr){tli_buf_str(&extra), extra.len};
	tli_buf_puts(&body, "M1\n");
	tlg_ev_header(&body, &e);
	tli_buf_append(&body, "\n", 1);
	tli_buf_append(&body, r->content.p, r->content.n);
	if (body.oom || extra.oom || tlg_delay_id_new(g, id) != 0) {
		tlg_out_err(o, 500, "M_UNKNOWN", "out of memory");
		goto out;
	}
	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = r->delay;
	p.rel = true;
	p.body = body.data;
	p.body_len = body.len;
	rv = tl_put_batch(g->cl, g->t_ev, owner, &p, 1);
	if (rv != TL_OK || p.err != TL_OK) {
		tli_log("msc4140", TLI_LOG_WARN, "G040",
		    "cannot store a delayed event: %s",
		    tl_strerror(rv != TL_OK ? rv : p.err));
		tlg_out_err(o, 503, "M_UNKNOWN",
		    "The delayed-event store is "
		    "unavailable");
		goto out;
	}
	tlg_evc_put(g, id, owner, r->delay);
	if (r->has_txn) {
		txn_record(g, r, owner, id);
	}
	o->status = 200;
	tli_buf_puts(&o->body, "{\"delay_id\":");
	tlh_json_str(&o->body, id, strlen(id));
	tli_buf_puts(&o->body, "}");
out:
	if (um != NULL) {
		pthread_mutex_unlock(um);
	}
	tl_free(es);
	tli_buf_fini(&extra);
	tli_buf_fini(&body);
}

/* The room must be one the homeserver knows (404 M_NOT_FOUND at once, as
 * Synapse answers); membership and power levels are the homeserver's to
 * check when the event is sent, as the MSC says. When the homeserver
 * cannot tell, the event is taken (its send will tell). */
static bool
room_check(tlg *g, greq *r, gout *o)
{
	gstr room = tlg_param(r, "room");

	if (tlg_room_known(g, room.p, room.n) == 0) {
		tlg_out_err(o, 404, "M_NOT_FOUND", "Unknown room");
		return false;
	}
	return true;
}

void
tlg_schedule(tlg *g, greq *r, gout *o)
{
	if (schedule_head(g, r, o) && room_check(g, r, o)) {
		schedule_body(g, r, o);
	}
}

/* ---- management ---- */

bool
tlg_id_ok(const char *id, size_t n)
{
	if (n == 0 || n > TL_MAX_ID_LEN) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9') || c == '-' || c == '_')) {
			return false;
		}
	}
	return true;
}

/* Whether id existed: one the gateway made (its MAC), or one made before
 * ids had one that is still stored (scheduled, being sent, or finalised).
 * May block (lookups) unless the MAC decides. */
static bool
id_existed(tlg *g, const char *id, size_t n)
{
	tl_message *m = NULL;
	bool found;

	if (tlg_delay_id_ours(g, id, n)) {
		return true;
	}
	if (!tlg_id_ok(id, n)) {
		return false;
	}
	found = tl_get(g->cl, g->t_ev, id, &m) == TL_OK ||
	    tl_get(g->cl, g->t_final, id, &m) == TL_OK;
	tl_message_free(m);
	return found;
}

/* 404; only an id that never existed counts as a guess of the client's
 * address (ids that were sent or cancelled are asked for by clients that
 * are late, not by guessers). */
static void
not_found(tlg *g, greq *r, gout *o)
{
	gstr id = tlg_param(r, "id");

	if (!id_existed(g, id.p, id.n)) {
		tlg_storm_miss(g, tlh_req_ip(r->hr));
	}
	tlg_out_err(o, 404, "M_NOT_FOUND", "Delayed event not found");
}

/* The guessed-id throttle never refuses an id that exists: one the
 * gateway made (its MAC), or a live one it knows (the restart cache) or
 * finds. false with *later when only a lookup, which may block, can
 * tell. */
static bool
storm_exempt(tlg *g, const char *id, size_t n, bool may_block, bool *later)
{
	char owner[TL_MAX_NAME_LEN + 1];
	tl_message *m = NULL;
	int64_t delay;
	bool found;

	if (tlg_delay_id_ours(g, id, n)) {
		return true;
	}
	if (!tlg_id_ok(id, n)) {
		return false;
	}
	if (tlg_evc_get(g, id, owner, sizeof(owner), &delay)) {
		return true;
	}
	if (!may_block) {
		*later = true;
		return false;
	}
	found = tl_get(g->cl, g->t_ev, id, &m) == TL_OK;
	tl_message_free(m);
	return found;
}

/* The finalised outcome of id, as the answer to a repeated "send". */
static bool
send_outcome(tlg *g, const char *id, gout *o)
{
	tl_message *m = NULL;
	gev e;
	bool done = false;

	if (tl_get(g->cl, g->t_final, id, &m) != TL_OK) {
		return false;
	}
	if (tlg_ev_parse(&e, m->body, m->body_len) == 0 && e.final) {
		if (e.outcome.n == 4 && memcmp(e.outcome.p, "send", 4) == 0) {
			o->status = 200;
			tli_buf_puts(&o->body, "{}");
			done = true;
		} else if (e.reason.n == 5 &&
		    memcmp(e.reason.p, "error", 5) == 0) {
			o->status = e.status;
			tli_buf_append(&o->body, e.err.p, e.err.n);
			done = true;
		}
	}
	tl_message_free(m);
	return done;
}

/* A "send" whose homeserver has not answered within send_wait_ms: the
 * gateway goes on sending it; the client may ask again (the same send). */
static void
still_sending(gout *o)
{
	o->status = 503;
	o->retry_ms = 1000;
	tli_buf_reset(&o->body);
	tli_buf_puts(&o->body,
	    "{\"errcode\":\"M_UNKNOWN\",\"error\":\"The homeserver has not "
	    "answered yet; the event is being sent and will be retried\","
	    "\"retry_after_ms\":1000}");
}

/* A restart or cancel of an event being sent: too late, but not gone. */
static void
being_sent(gout *o)
{
	tlg_out_err(o, 409, TLG_ERR_BEING_SENT,
	    "The delayed event is being sent: it can no longer be restarted "
	    "or cancelled");
}

static void
do_send(tlg *g, greq *r, const char *id, tl_message *m, gout *o)
{
	gwaiter *w = tlg_waiter_add(g, id);
	int rv = TL_OK;

	if (w == NULL) {
		tlg_out_err(o, 500, "M_UNKNOWN", "out of memory");
		return;
	}
	if (m->consumer[0] == '\0') {
		gev e;
		/* the move loses when the delay began: keep it */
		if (tlg_ev_parse(&e, m->body, m->body_len) == 0) {
			tlg_since_keep(
			    g, m->owner, id, tlg_since(g, id, m->ts, e.delay));
		}
		rv = tl_move(
		    g->cl, g->t_ev, m->owner, id, m->version, 0, true, NULL);
	}
	if (rv != TL_OK && rv != TL_ELEASED) {
		tlg_waiter_wait(g, w, 0);
		tli_buf_fini(&w->body);
		free(w);
		if (!send_outcome(g, id, o)) {
			not_found(g, r, o);
		}
		return;
	}
	if (tlg_waiter_wait(g, w, g->c.send_wait_ms)) {
		o->status = w->status;
		tli_buf_append(&o->body, w->body.data, w->body.len);
	} else if (!send_outcome(g, id, o)) {
		still_sending(o);
	}
	tli_buf_fini(&w->body);
	free(w);
}

/* The answer to a restart of a cached event from its move's result; false
 * when the long way must decide. */
static bool
restart_cached_result(tlg *g, greq *r, const char *id, int rv, gout *o)
{
	if (rv == TL_OK) {
		o->status = 200;
		tli_buf_puts(&o->body, "{}");
		return true;
	}
	if (rv == TL_ELEASED) {
		being_sent(o);
		return true;
	}
	if (rv == TL_ENOTFOUND) {
		tlg_evc_del(g, id);
		not_found(g, r, o);
		return true;
	}
	return false; /* the long way decides */
}

/* A restart of a known event: one move, any version; an active lease
 * (being sent) refuses it. true when o holds the answer. */
static bool
restart_cached(tlg *g, greq *r, const char *id, gout *o)
{
	char owner[TL_MAX_NAME_LEN + 1];
	int64_t delay;
	int rv;

	if (tlg_waiter_exists(g, id) ||
	    !tlg_evc_get(g, id, owner, sizeof(owner), &delay)) {
		return false;
	}
	rv = tl_move(g->cl, g->t_ev, owner, id, 0, delay, true, NULL);
	return restart_cached_result(g, r, id, rv, o);
}

/* The checks of every management request (unknown-id storms, the id, the
 * rate limits); false when o holds the answer. Done once per request. */
static bool
manage_check_in(tlg *g, greq *r, const char *id, size_t idlen, bool may_block,
    bool *later, gout *o)
{
	int64_t wait;

	if (r->checked) {
		return true;
	}
	if ((wait = tlg_storm_blocked(g, tlh_req_ip(r->hr))) > 0 &&
	    !storm_exempt(g, id, idlen, may_block, later)) {
		if (*later) {
			return false; /* decided on a worker */
		}
		r->checked = true;
		tlg_out_limited(o, wait);
		return false;
	}
	r->checked = true;
	if (!tlg_id_ok(id, idlen)) {
		not_found(g, r, o);
		return false;
	}
	wait = tlg_rate_take(g, "mgmt", id, g->c.mgmt_rate, g->c.mgmt_burst);
	if (wait == 0) {
		wait = tlg_rate_take(
		    g, "ip", tlh_req_ip(r->hr), g->c.ip_rate, g->c.ip_burst);
	}
	if (wait > 0) {
		tlg_out_limited(o, wait);
		return false;
	}
	return true;
}

static bool
manage_check(tlg *g, greq *r, const char *id, size_t idlen, gout *o)
{
	bool later = false;

	return manage_check_in(g, r, id, idlen, true, &later, o);
}

static void
manage(
    tlg *g, greq *r, const char *id, size_t idlen, const char *action, gout *o)
{
	bool restart = strcmp(action, "restart") == 0;
	bool cancel = strcmp(action, "cancel") == 0;
	bool sendit = strcmp(action, "send") == 0;
	tl_message *m = NULL;
	int rv = TL_OK;

	if (!manage_check(g, r, id, idlen, o)) {
		return;
	}
	if (restart && !r->cached_tried && restart_cached(g, r, id, o)) {
		return;
	}
	for (int tries = 0; tries < 5; tries++) {
		tl_message_free(m);
		m = NULL;
		if ((rv = tl_get(g->cl, g->t_ev, id, &m)) != TL_OK) {
			break;
		}
		if (sendit) {
			do_send(g, r, id, m, o);
			tl_message_free(m);
			return;
		}
		if (m->consumer[0] != '\0' || tlg_waiter_exists(g, id)) {
			rv = TL_ELEASED; /* being sent: too late */
			break;
		}
		if (restart) {
			gev e;
			if (tlg_ev_parse(&e, m->body, m->body_len) != 0) {
				rv = TL_ENOTFOUND;
				break;
			}
			/* Any version, as restart_cached: the store itself
			 * refuses a move under an active lease (being sent),
			 * and concurrent restarts of one event must not turn
			 * into version conflicts (five in a row answered a
			 * live event with 404). */
			rv = tl_move(g->cl, g->t_ev, m->owner, id, 0, e.delay,
			    true, NULL);
			if (rv == TL_OK) {
				tlg_evc_put(g, id, m->owner, e.delay);
			}
		} else if (cancel) {
			rv =
			    tl_delete(g->cl, g->t_ev, m->owner, id, m->version);
			if (rv == TL_OK) {
				tlg_evc_del(g, id);
				gev e;
				if (tlg_ev_parse(&e, m->body, m->body_len) ==
				    0) {
					tlg_finalise(g, m->owner, id, &e,
					    tlg_since(g, id, m->ts, e.delay),
					    "cancel", "action", NULL, 0, NULL,
					    0);
				}
			}
		}
		if (rv != TL_EVERSION) {
			break;
		}
	}
	tl_message_free(m);
	if (rv == TL_OK) {
		o->status = 200;
		tli_buf_puts(&o->body, "{}");
	} else if (rv == TL_ENOTFOUND && sendit && send_outcome(g, id, o)) {
		return;
	} else if (rv == TL_ELEASED) {
		being_sent(o);
	} else if (rv == TL_ENOTFOUND || rv == TL_ENOTOWNER ||
	    rv == TL_EVERSION) {
		not_found(g, r, o);
	} else {
		tlg_out_err(o, 503, "M_UNKNOWN",
		    "The delayed-event store is "
		    "unavailable");
	}
}

/* With a token, the rate limit is the user's too; false when o holds
 * the answer. */
static bool
manage_user_limit(tlg *g, greq *r, gout *o)
{
	int64_t wait;

	if (r->authed &&
	    (wait = tlg_rate_take(g, "user", r->user, g->c.mgmt_rate * 4,
	         g->c.mgmt_burst * 4)) > 0) {
		tlg_out_limited(o, wait);
		return false;
	}
	return true;
}

void
tlg_manage_path(tlg *g, greq *r, gout *o)
{
	const char *a = tlg_param(r, "action").p;
	gstr id = tlg_param(r, "id");

	if (!manage_user_limit(g, r, o)) {
		return;
	}
	if (strcmp(a, "cancel") && strcmp(a, "restart") && strcmp(a, "send")) {
		tlg_out_err(o, 404, "M_UNRECOGNIZED", "Unrecognized request");
		return;
	}
	manage(g, r, id.p, id.n, a, o);
}

int
tlg_restart_fast(tlg *g, greq *r, gout *o, tl_done_fn done)
{
	gstr id = tlg_param(r, "id");
	char owner[TL_MAX_NAME_LEN + 1];
	int64_t delay;
	bool later = false;

	if (strcmp(tlg_param(r, "action").p, "restart") != 0) {
		return TLH_FAST_NO;
	}
	if (!manage_check_in(g, r, id.p, id.n, false, &later, o)) {
		return later ? TLH_FAST_NO : TLH_FAST_ANSWERED;
	}
	if (tlg_waiter_exists(g, id.p) ||
	    !tlg_evc_get(g, id.p, owner, sizeof(owner), &delay)) {
		return TLH_FAST_NO;
	}
	r->cached_tried = true;
	if (tl_move_async(g->cl, g->t_ev, owner, id.p, 0, delay, true, done,
	        r) != TL_OK) {
		return TLH_FAST_NO;
	}
	return TLH_FAST_STARTED;
}

bool
tlg_restart_fast_result(tlg *g, greq *r, int rv, gout *o)
{
	return restart_cached_result(g, r, tlg_param(r, "id").p, rv, o);
}

bool
tlg_manage_action(const char *body, size_t n, char *action, size_t cap, gout *o)
{
	json_t *j = json_loadb(body, n, 0, NULL), *a;

	if (!json_is_object(j)) {
		json_decref(j);
		tlg_out_err(o, 400, "M_NOT_JSON", "Content not JSON.");
		return false;
	}
	a = json_object_get(j, "action");
	if (a == NULL) {
		json_decref(j);
		tlg_out_err(o, 400, "M_MISSING_PARAM", "'action' is missing");
		return false;
	}
	if (!json_is_string(a) ||
	    (strcmp(json_string_value(a), "cancel") &&
	        strcmp(json_string_value(a), "restart") &&
	        strcmp(json_string_value(a), "send"))) {
		json_decref(j);
		tlg_out_err(o, 400, "M_INVALID_PARAM",
		    "'action' must be cancel, restart or send");
		return false;
	}
	snprintf(action, cap, "%s", json_string_value(a));
	json_decref(j);
	return true;
}

void
tlg_manage_body(tlg *g, greq *r, gout *o)
{
	char action[16];
	const char *body;
	size_t n;
	gstr id;

	if (!manage_user_limit(g, r, o)) {
		return;
	}
	if (tlh_req_body_over(r->hr)) {
		tlg_out_err(o, 413, "M_TOO_LARGE", "Request too large");
		return;
	}
	body = tlh_req_body(r->hr, &n);
	if (!tlg_manage_action(body, n, action, sizeof(action), o)) {
		return;
	}
	id = tlg_param(r, "id");
	manage(g, r, id.p, id.n, action, o);
}

/* ---- listing ---- */

static void
ev_json(tli_buf *b, const char *id, const gev *e, int64_t since, bool one)
{
	tli_buf_puts(b, "{\"delay_id\":");
	tlh_json_str(b, id, strlen(id));
	tli_buf_puts(b, ",\"room_id\":");
	tlh_json_str(b, e->room.p, e->room.n);
	tli_buf_puts(b, ",\"type\":");
	tlh_json_str(b, e->type.p, e->type.n);
	if (e->state) {
		tli_buf_puts(b, ",\"state_key\":");
		tlh_json_str(b, e->skey.p, e->skey.n);
	}
	if (one) {
		tli_buf_printf(b,
		    ",\"delay_ms\":%lld,\"delayed_since_ts\":%lld",
		    (long long) e->delay, (long long) since);
	} else {
		tli_buf_printf(b, ",\"delay\":%lld,\"running_since\":%lld",
		    (long long) e->delay, (long long) since);
	}
	tli_buf_puts(b, ",\"content\":");
	tli_buf_append(b, e->content.p, e->content.n);
}

static int owner_entries(
    tlg *g, const char *t, const char *user, tl_entry **out, size_t *nout);

void
tlg_list_scheduled(tlg *g, greq *r, gout *o)
{
	tl_entry *es = NULL;
	size_t n = 0;
	bool first = true;

	if (owner_entries(g, g->t_ev, r->user, &es, &n) != TL_OK) {
		tlg_out_err(o, 503, "M_UNKNOWN",
		    "The delayed-event store is "
		    "unavailable");
		return;
	}
	tli_buf_puts(&o->body, "{\"delayed_events\":[");
	for (size_t i = 0; i < n; i++) {
		tl_message *m = NULL;
		gev e;
		if (es[i].leased ||
		    tl_get(g->cl, g->t_ev, es[i].id, &m) != TL_OK) {
			continue;
		}
		if (m->consumer[0] == '\0' &&
		    tlg_ev_parse(&e, m->body, m->body_len) == 0 &&
		    tlg_ev_mine(&e, r->user)) {
			if (!first) {
				tli_buf_append(&o->body, ",", 1);
			}
			first = false;
			ev_json(&o->body, es[i].id, &e,
			    tlg_since(g, es[i].id, m->ts, e.delay), false);
			tli_buf_puts(&o->body, "}");
		}
		tl_message_free(m);
	}
	free(es);
	tli_buf_puts(&o->body, "]}");
	o->status = 200;
}

/* What a finalised record says: the fields of an item of the stable
 * list's "finalised" but its delayed_event, and the status of a failure
 * (one writer, so both forms and GET of one id say it alike). */
static void
final_fields(tli_buf *b, const gev *e)
{
	tli_buf_puts(b, "\"outcome\":");
	tlh_json_str(b, e->outcome.p, e->outcome.n);
	tli_buf_puts(b, ",\"reason\":");
	tlh_json_str(b, e->reason.p, e->reason.n);
	if (e->event_id.n > 0) {
		tli_buf_puts(b, ",\"event_id\":");
		tlh_json_str(b, e->event_id.p, e->event_id.n);
	}
	if (e->reason.n == 5 && memcmp(e->reason.p, "error", 5) == 0) {
		tli_buf_printf(b, ",\"status\":%d,\"error\":", e->status);
		if (e->err.n > 0) {
			tli_buf_append(b, e->err.p, e->err.n);
		} else {
			tli_buf_puts(b, "{}");
		}
	}
	tli_buf_printf(b, ",\"origin_server_ts\":%lld", (long long) e->fin);
}

static int list_all(
    tlg *g, const char *t, const char *owner, tl_entry **out, size_t *nout);

/* Where the broker placed id (a leased event: tl_get's ts is the lease's
 * end then). */
static bool
placed_of(tlg *g, const char *owner, const char *id, int64_t *placed)
{
	tl_entry *es = NULL;
	size_t n = 0;
	bool found = false;

	if (list_all(g, g->t_ev, owner, &es, &n) != TL_OK) {
		return false;
	}
	for (size_t i = 0; i < n && !found; i++) {
		if (strcmp(es[i].id, id) == 0) {
			*placed = es[i].ts;
			found = true;
		}
	}
	free(es);
	return found;
}

/* Whether a message of topic t named id is user's; e is its event. */
static bool
get_mine(tlg *g, const char *t, const char *id, const char *user,
    tl_message **m, gev *e)
{
	char owner[TL_MAX_NAME_LEN + 1], legacy[TL_MAX_NAME_LEN + 1] = "";

	tlg_owner(user, owner, sizeof(owner));
	tlg_owner_legacy(user, legacy, sizeof(legacy));
	if (tl_get(g->cl, t, id, m) != TL_OK) {
		*m = NULL;
		return false;
	}
	return (strcmp((*m)->owner, owner) == 0 ||
	           strcmp((*m)->owner, legacy) == 0) &&
	    tlg_ev_parse(e, (*m)->body, (*m)->body_len) == 0 &&
	    tlg_ev_mine(e, user);
}

void
tlg_get_one(tlg *g, greq *r, gout *o)
{
	gstr idp = tlg_param(r, "id");
	const char *id = idp.p;
	tl_message *m = NULL;
	int64_t placed;
	gev e;

	if (!tlg_id_ok(id, idp.n)) {
		not_found(g, r, o);
		return;
	}
	if (get_mine(g, g->t_ev, id, r->user, &m, &e)) {
		placed = m->ts;
		/* being sent: ts is the lease's end, not the placement */
		if (m->consumer[0] != '\0' &&
		    !placed_of(g, m->owner, id, &placed)) {
			placed = m->ts;
		}
		ev_json(
		    &o->body, id, &e, tlg_since(g, id, placed, e.delay), true);
		if (m->consumer[0] != '\0' || tlg_waiter_exists(g, id)) {
			tli_buf_puts(&o->body, ",\"sending\":true");
		}
		tli_buf_puts(&o->body, "}");
		o->status = 200;
		tl_message_free(m);
		return;
	}
	tl_message_free(m);
	if (get_mine(g, g->t_final, id, r->user, &m, &e) && e.final) {
		ev_json(&o->body, id, &e, e.since, true);
		tli_buf_puts(&o->body, ",\"finalised\":{");
		final_fields(&o->body, &e);
		tli_buf_puts(&o->body, "}}");
		o->status = 200;
		tl_message_free(m);
		return;
	}
	tl_message_free(m);
	not_found(g, r, o);
}

/* Whether id is asked for by the delay_id parameters (all when none). */
bool
tlg_id_wanted(const char *q, const char *id)
{
	bool any = false;

	while (*q != '\0') {
		const char *amp = strchr(q, '&');
		size_t len = amp ? (size_t) (amp - q) : strlen(q);
		if (len > 9 && strncmp(q, "delay_id=", 9) == 0) {
			char v[TL_MAX_ID_LEN * 3 + 1];
			long n;
			any = true;
			if (len - 9 < sizeof(v)) {
				memcpy(v, q + 9, len - 9);
				n = tlh_url_dec(v, len - 9);
				if (n >= 0 && strcmp(v, id) == 0) {
					return true;
				}
			}
		}
		q += len + (amp ? 1 : 0);
	}
	return !any;
}

/* Every entry of owner in topic t, in timeline order (free with tl_free). */
static int
list_all(tlg *g, const char *t, const char *owner, tl_entry **out, size_t *nout)
{
	tl_entry *all = NULL, *es = NULL;
	size_t n = 0, total = 0;
	bool more = true;
	int rv = TL_OK;

	while (more && rv == TL_OK) {
		rv = tl_list(g->cl, t, owner, 1000,
		    total ? &all[total - 1] : NULL, &es, &n, &more);
		if (rv == TL_OK && n > 0) {
			tl_entry *na = realloc(all, (total + n) * sizeof(*all));
			if (na == NULL) {
				rv = TL_ENOMEM;
			} else {
				all = na;
				memcpy(all + total, es, n * sizeof(*es));
				total += n;
			}
		}
		tl_free(es);
		es = NULL;
		if (n == 0) {
			break;
		}
	}
	if (rv != TL_OK) {
		free(all);
		return rv;
	}
	*out = all;
	*nout = total;
	return TL_OK;
}

static int
entry_cmp(const void *a, const void *b)
{
	const tl_entry *x = a, *y = b;

	if (x->ts != y->ts) {
		return x->ts < y->ts ? -1 : 1;
	}
	return strcmp(x->id, y->id);
}

/* Every entry of user in topic t, in timeline order: under its owner name
 * and, for a long id, the name an earlier version gave it. Each event
 * read from them must still say it is the user's (tlg_ev_mine). */
static int
owner_entries(
    tlg *g, const char *t, const char *user, tl_entry **out, size_t *nout)
{
	char owner[TL_MAX_NAME_LEN + 1];
	tl_entry *es = NULL, *old = NULL, *all;
	size_t n = 0, nold = 0;
	int rv;

	tlg_owner(user, owner, sizeof(owner));
	if ((rv = list_all(g, t, owner, &es, &n)) != TL_OK) {
		return rv;
	}
	if (!tlg_owner_legacy(user, owner, sizeof(owner)) ||
	    list_all(g, t, owner, &old, &nold) != TL_OK || nold == 0) {
		free(old);
		*out = es;
		*nout = n;
		return TL_OK;
	}
	if ((all = realloc(es, (n + nold) * sizeof(*es))) == NULL) {
		free(es);
		free(old);
		return TL_ENOMEM;
	}
	memcpy(all + n, old, nold * sizeof(*old));
	free(old);
	qsort(all, n + nold, sizeof(*all), entry_cmp);
	*out = all;
	*nout = n + nold;
	return TL_OK;
}

void
tlg_stable_list(tlg *g, greq *r, gout *o)
{
	char st[32];
	const char *status =
	    tlh_query_get(tlh_req_query(r->hr), "status", st, sizeof(st));
	bool sched = true, fin = true, first = true;
	tl_entry *es = NULL;
	size_t n = 0;

	if (status != NULL) {
		sched = strcmp(status, "scheduled") == 0;
		fin = strcmp(status, "finalised") == 0;
		if (!sched && !fin) {
			tlg_out_err(o, 400, "M_UNKNOWN",
			    "status must be scheduled or finalised");
			return;
		}
	}
	tli_buf_puts(&o->body, "{");
	if (sched) {
		if (owner_entries(g, g->t_ev, r->user, &es, &n) != TL_OK) {
			goto unavailable;
		}
		tli_buf_puts(&o->body, "\"scheduled\":[");
		for (size_t i = 0; i < n; i++) {
			tl_message *m = NULL;
			gev e;
			if (es[i].leased ||
			    !tlg_id_wanted(tlh_req_query(r->hr), es[i].id) ||
			    tl_get(g->cl, g->t_ev, es[i].id, &m) != TL_OK) {
				continue;
			}
			if (m->consumer[0] == '\0' &&
			    tlg_ev_parse(&e, m->body, m->body_len) == 0 &&
			    tlg_ev_mine(&e, r->user)) {
				tli_buf_puts(&o->body, first ? "" : ",");
				first = false;
				ev_json(&o->body, es[i].id, &e,
				    tlg_since(g, es[i].id, m->ts, e.delay),
				    false);
				tli_buf_puts(&o->body, "}");
			}
			tl_message_free(m);
		}
		tli_buf_puts(&o->body, "]");
		free(es);
		es = NULL;
	}
	if (fin) {
		if (owner_entries(g, g->t_final, r->user, &es, &n) != TL_OK) {
			goto unavailable;
		}
		tli_buf_puts(
		    &o->body, sched ? ",\"finalised\":[" : "\"finalised\":[");
		first = true;
		for (size_t i = n; i-- > 0;) { /* latest first */
			tl_message *m = NULL;
			gev e;
			if (!tlg_id_wanted(tlh_req_query(r->hr), es[i].id) ||
			    tl_get(g->cl, g->t_final, es[i].id, &m) != TL_OK) {
				continue;
			}
			if (tlg_ev_parse(&e, m->body, m->body_len) == 0 &&
			    e.final && tlg_ev_mine(&e, r->user)) {
				tli_buf_puts(&o->body, first ? "{" : ",{");
				first = false;
				tli_buf_puts(&o->body, "\"delayed_event\":");
				ev_json(&o->body, es[i].id, &e, e.since, false);
				tli_buf_puts(&o->body, "},");
				final_fields(&o->body, &e);
				tli_buf_puts(&o->body, "}");
			}
			tl_message_free(m);
		}
		tli_buf_puts(&o->body, "]");
		free(es);
	}
	tli_buf_puts(&o->body, "}");
	o->status = 200;
	return;
unavailable:
	tlg_out_err(
	    o, 503, "M_UNKNOWN", "The delayed-event store is unavailable");
}
