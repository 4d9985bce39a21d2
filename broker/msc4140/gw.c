/*
 * The gateway object and its sending side: start and stop, the three
 * topics (PREFIX.events: scheduled events, id = delay_id, owner = user,
 * ts = due; PREFIX.final: finalised records, due when they expire;
 * PREFIX.txn: idempotent transaction ids, due after 30 minutes), the
 * consumers, the sender threads and the waiters of "send" actions.
 *
 * A due event is leased by the broker for this gateway's consumer id and
 * sent through the homeserver as an appservice acting as the user, with a
 * transaction id derived from the delay_id (HMAC-SHA-256 under the
 * installation's secret, kept on PREFIX.meta: a retry after a crash cannot
 * send twice) and ts = the due time. 5xx and network errors are retried
 * with backoff for retry_for_ms, extending the lease; a 4xx is recorded.
 * The finalised record is written before the event is deleted, so a crash
 * in between sends again under the same transaction id.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "gw.h"

/* ---- waiters of the "send" action ---- */

gwaiter *
tlg_waiter_add(tlg *g, const char *id)
{
	gwaiter *w = calloc(1, sizeof(*w));

	if (w == NULL) {
		return NULL;
	}
	snprintf(w->id, sizeof(w->id), "%s", id);
	pthread_mutex_lock(&g->w_mtx);
	w->next = g->waiters;
	g->waiters = w;
	pthread_mutex_unlock(&g->w_mtx);
	return w;
}

bool
tlg_waiter_exists(tlg *g, const char *id)
{
	bool found = false;

	pthread_mutex_lock(&g->w_mtx);
	for (gwaiter *w = g->waiters; w != NULL && !found; w = w->next) {
		found = strcmp(w->id, id) == 0;
	}
	pthread_mutex_unlock(&g->w_mtx);
	return found;
}

bool
tlg_waiter_wait(tlg *g, gwaiter *w, int64_t ms)
{
	struct timespec dl;
	bool done;

	tli_deadline(&dl, CLOCK_REALTIME, ms);
	pthread_mutex_lock(&g->w_mtx);
	while (!w->done && !atomic_load(&g->stopping)) {
		if (pthread_cond_timedwait(&g->w_cv, &g->w_mtx, &dl) != 0) {
			break;
		}
	}
	done = w->done;
	for (gwaiter **pp = &g->waiters; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	pthread_mutex_unlock(&g->w_mtx);
	return done;
}

void
tlg_waiter_wake(
    tlg *g, const char *id, int status, const char *body, size_t len)
{
	bool any = false;

	pthread_mutex_lock(&g->w_mtx);
	for (gwaiter *w = g->waiters; w != NULL; w = w->next) {
		if (!w->done && strcmp(w->id, id) == 0) {
			w->done = true;
			w->status = status;
			tli_buf_append(&w->body, body, len);
			any = true;
		}
	}
	if (any) {
		pthread_cond_broadcast(&g->w_cv);
	}
	pthread_mutex_unlock(&g->w_mtx);
}

/* ---- the restart cache ---- */

static gevc *
evc_slot(tlg *g, const char *id)
{
	return &g->evc[tli_hash64_mixed(id, strlen(id), 9) % TLG_EVC_SLOTS];
}

void
tlg_evc_put(tlg *g, const char *id, const char *owner, int64_t delay)
{
	gevc *s;

	if (g->evc == NULL || strlen(id) >= sizeof(s->id)) {
		return;
	}
	pthread_mutex_lock(&g->evc_mtx);
	s = evc_slot(g, id);
	snprintf(s->id, sizeof(s->id), "%s", id);
	snprintf(s->owner, sizeof(s->owner), "%s", owner);
	s->delay = delay;
	pthread_mutex_unlock(&g->evc_mtx);
}

bool
tlg_evc_get(tlg *g, const char *id, char *owner, size_t cap, int64_t *delay)
{
	bool hit = false;
	gevc *s;

	if (g->evc == NULL) {
		return false;
	}
	pthread_mutex_lock(&g->evc_mtx);
	s = evc_slot(g, id);
	if (strcmp(s->id, id) == 0 && strlen(s->owner) < cap) {
		memcpy(owner, s->owner, strlen(s->owner) + 1);
		*delay = s->delay;
		hit = true;
	}
	pthread_mutex_unlock(&g->evc_mtx);
	return hit;
}

void
tlg_evc_del(tlg *g, const char *id)
{
	gevc *s;

	if (g->evc == NULL) {
		return;
	}
	pthread_mutex_lock(&g->evc_mtx);
	s = evc_slot(g, id);
	if (strcmp(s->id, id) == 0) {
		s->id[0] = '\0';
	}
	pthread_mutex_unlock(&g->evc_mtx);
}

/* ---- when the current delay began ----
 *
 * Scheduling and a restart place the message at start + delay, and the
 * broker keeps that placement (its owner index: tl_list, and a lease's
 * tl_lease_placed_at; tl_get's ts while nobody holds it); the delay never
 * changes, so the start is stored exactly, with no second write on the
 * restart path. A send action places the message at now, which would
 * lose the start: it stores the start first, as "s.DELAY_ID" on
 * PREFIX.txn ("SINCE ACTION_TIME"), which the sender and GET read. */

#define SINCE_KEEP_MS (3600 * 1000)

void
tlg_since_keep(tlg *g, const char *owner, const char *id, int64_t since)
{
	char sid[TL_MAX_ID_LEN + 1], body[64];
	int64_t keep = g->c.retry_for_ms + g->c.send_wait_ms + SINCE_KEEP_MS;
	int n, rv;

	if ((size_t) snprintf(sid, sizeof(sid), "s.%s", id) >= sizeof(sid)) {
		return;
	}
	n = snprintf(body, sizeof(body), "%lld %lld", (long long) since,
	    (long long) tl_client_broker_now(g->cl));
	rv = tl_put_in(
	    g->cl, g->t_txn, owner, sid, keep, body, (size_t) n, NULL);
	if (rv == TL_EEXISTS) { /* an earlier send action's */
		tl_delete(g->cl, g->t_txn, owner, sid, 0);
		tl_put_in(
		    g->cl, g->t_txn, owner, sid, keep, body, (size_t) n, NULL);
	}
}

int64_t
tlg_since(tlg *g, const char *id, int64_t placed, int64_t delay)
{
	char sid[TL_MAX_ID_LEN + 1];
	tl_message *m = NULL;
	long long since, at;
	char tmp[64];

	/* only a due placement can be a send action's */
	if (placed > tl_client_broker_now(g->cl) ||
	    (size_t) snprintf(sid, sizeof(sid), "s.%s", id) >= sizeof(sid) ||
	    tl_get(g->cl, g->t_txn, sid, &m) != TL_OK) {
		return placed - delay;
	}
	snprintf(tmp, sizeof(tmp), "%.*s",
	    (int) (m->body_len < sizeof(tmp) ? m->body_len : 0),
	    (const char *) m->body);
	tl_message_free(m);
	/* A restart after the action (when its move failed) placed the
	 * message at least a delay after it: the record is stale then. */
	if (sscanf(tmp, "%lld %lld", &since, &at) == 2 && placed - delay < at) {
		return since;
	}
	return placed - delay;
}

/* ---- finalised records ---- */

#define MAX_ERR_KEPT 16384

static void final_trim(tlg *g, const char *owner);

int
tlg_finalise(tlg *g, const char *owner, const char *id, const gev *e,
    int64_t since, const char *outcome, const char *reason,
    const char *event_id, int status, const char *err, size_t errlen)
{
	tli_buf b = {0};
	int64_t now = tli_wall_ms();
	tl_put p;
	int rv;

	if (errlen > MAX_ERR_KEPT) {
		errlen = MAX_ERR_KEPT;
	}
	tli_buf_puts(&b, "F1\n");
	tli_buf_printf(
	    &b, "fin\t%lld\nsince\t%lld\n", (long long) now, (long long) since);
	tli_buf_printf(&b, "outcome\t%s\nreason\t%s\n", outcome, reason);
	if (event_id != NULL && event_id[0] != '\0') {
		tli_buf_printf(&b, "event_id\t%s\n", event_id);
	}
	tli_buf_printf(&b, "status\t%d\nerrlen\t%zu\n", status, errlen);
	tlg_ev_header(&b, e);
	tli_buf_append(&b, "\n", 1);
	tli_buf_append(&b, err, errlen);
	tli_buf_append(&b, e->content.p, e->content.n);
	if (b.oom) {
		tli_buf_fini(&b);
		return TL_ENOMEM;
	}
	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = g->c.final_keep_ms;
	p.rel = true;
	p.body = b.data;
	p.body_len = b.len;
	rv = tl_put_batch(g->cl, g->t_final, owner, &p, 1);
	if (rv == TL_OK) {
		rv = p.err == TL_EEXISTS ? TL_OK : p.err;
	}
	tli_buf_fini(&b);
	if (rv != TL_OK) {
		tli_log("msc4140", TLI_LOG_WARN, "G030",
		    "cannot write a finalised record: %s", tl_strerror(rv));
	} else {
		final_trim(g, owner);
	}
	return rv;
}

/* Keep at most final_max records per user: drop the oldest. */
static void
final_trim(tlg *g, const char *owner)
{
	tl_entry *es = NULL;
	size_t n = 0;
	bool more = false;

	if (tl_list(g->cl, g->t_final, owner, 1000, NULL, &es, &n, &more) !=
	    TL_OK) {
		return;
	}
	/* one record is added at a time: with more than a page, dropping
	 * the oldest keeps the count where it was */
	size_t have = n + (more ? 1 : 0);
	for (size_t i = 0;
	     have > g->c.final_max && i < have - g->c.final_max && i < n; i++) {
		tl_delete(g->cl, g->t_final, owner, es[i].id, 0);
	}
	tl_free(es);
}

/* ---- sending ---- */

static void
nap_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void
event_url(tlg *g, tli_buf *u, const gev *e, const char *id, int64_t ts)
{
	char txn[80];

	tli_buf_puts(u, g->c.homeserver);
	tli_buf_puts(u, "/_matrix/client/v3/rooms/");
	tlh_url_enc(u, e->room.p, e->room.n);
	if (e->state) {
		tli_buf_puts(u, "/state/");
		tlh_url_enc(u, e->type.p, e->type.n);
		tli_buf_puts(u, "/");
		tlh_url_enc(u, e->skey.p, e->skey.n);
	} else {
		/* The delay_id itself is a secret: the txnId is its keyed
		 * hash, which reveals nothing of it. */
		tlg_txn_id(g, id, txn, sizeof(txn));
		tli_buf_puts(u, "/send/");
		tlh_url_enc(u, e->type.p, e->type.n);
		tli_buf_puts(u, "/");
		tli_buf_puts(u, txn);
	}
	tli_buf_puts(u, "?user_id=");
	tlh_url_enc(u, e->user.p, e->user.n);
	tli_buf_printf(u, "&ts=%lld", (long long) ts);
	if (e->query.n > 0) {
		tli_buf_puts(u, "&");
		tli_buf_append(u, e->query.p, e->query.n);
	}
}

/* Send one due event; ends with the lease deleted (or left to run out
 * when the gateway stops). */
static void
send_one(tlg *g, tl_lease *l)
{
	const char *id = tl_lease_id(l);
	size_t blen;
	const void *body = tl_lease_body(l, &blen);
	/* Where the event was placed (schedule, restart, send): the same on a
	 * redelivery after a crash mid-send, when tl_lease_due would be the
	 * end of the lost lease. */
	int64_t due = tl_lease_placed_at(l), start = tli_mono_ms(),
	        backoff = 100;
	char auth[600], event_id[256] = "";
	bool by_action = tlg_waiter_exists(g, id), cred = false, warned = false;
	hs_resp r = {0};
	tli_buf url = {0}, ne = {0};
	gev e;

	if (tlg_ev_parse(&e, body, blen) != 0 || e.user.n == 0) {
		tli_log("msc4140", TLI_LOG_ERROR, "G020",
		    "a stored event is unreadable; dropped");
		tl_lease_delete(l);
		return;
	}
	/* It may have waited in the queue: keep the lease well ahead, or
	 * leave the event to whoever holds it now. */
	if (tl_lease_until(l) - tli_wall_ms() < 30000 &&
	    tl_lease_extend(l, 60000) != TL_OK) {
		return;
	}
	event_url(g, &url, &e, id, due);
	snprintf(auth, sizeof(auth), "Bearer %s", g->c.as_token);
	hs_hdr h[] = {
	    {"Authorization", auth}, {"Content-Type", "application/json"}};
	for (;;) {
		tlg_hs_request(g, "PUT", tli_buf_str(&url), h, 2, e.content.p,
		    e.content.n, &r);
		/* An answer about the gateway's own token is not the
		 * event's fault: retried as an outage, never the user's. */
		cred = tlg_as_refused(
		    g, r.status, tli_buf_str(&r.body), r.body.len, &e.user);
		if (!cred && r.status >= 200 && r.status < 500) {
			tlg_as_accepted(g);
			break;
		}
		if (cred) {
			/* a waiting "send" action learns it now */
			tli_buf_reset(&ne);
			tlg_as_error_body(
			    &ne, r.status, tli_buf_str(&r.body), r.body.len);
			tlg_waiter_wake(g, id, 502, tli_buf_str(&ne), ne.len);
		}
		if (atomic_load(&g->stopping)) {
			goto out; /* the lease runs out; sent after restart */
		}
		if (tli_mono_ms() - start >= g->c.retry_for_ms) {
			break;
		}
		/* No answer is the outage log's (G022/G023); an error answer
		 * is logged once per event. */
		if (r.status != 0 && !cred && !warned) {
			char code[64];
			tlg_errcode(tli_buf_str(&r.body), r.body.len, code,
			    sizeof(code));
			tli_log("msc4140", TLI_LOG_WARN, "G021",
			    "homeserver answered %ld %s to a delayed event of "
			    "%.*s in %.*s; retrying for up to %lld ms",
			    r.status, code, (int) e.user.n, e.user.p,
			    (int) e.room.n, e.room.p,
			    (long long) g->c.retry_for_ms);
			warned = true;
		}
		tlg_hs_resp_free(&r);
		if (tl_lease_until(l) - tli_wall_ms() < backoff + 10000) {
			tl_lease_extend(l, backoff + 30000);
		}
		nap_ms(backoff);
		backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
	}
	if (r.status >= 200 && r.status < 300) {
		json_t *j =
		    json_loadb(tli_buf_str(&r.body), r.body.len, 0, NULL);
		json_t *ev = j != NULL ? json_object_get(j, "event_id") : NULL;
		if (json_is_string(ev)) {
			snprintf(event_id, sizeof(event_id), "%s",
			    json_string_value(ev));
		}
		json_decref(j);
		tlg_finalise(g, tl_lease_owner(l), id, &e,
		    tlg_since(g, id, due, e.delay), "send",
		    by_action ? "action" : "delay", event_id, (int) r.status,
		    NULL, 0);
	} else {
		const char *err = tli_buf_str(&r.body);
		size_t elen = r.body.len;
		char code[64];
		json_t *ej =
		    json_loadb(err, elen, JSON_DECODE_INT_AS_REAL, NULL);
		tlg_errcode(err, elen, code, sizeof(code));
		if (r.status == 0) {
			tli_log("msc4140", TLI_LOG_WARN, "G024",
			    "a delayed event of %.*s in %.*s failed: no answer "
			    "from the homeserver for %lld ms",
			    (int) e.user.n, e.user.p, (int) e.room.n, e.room.p,
			    (long long) g->c.retry_for_ms);
		} else {
			tli_log("msc4140", TLI_LOG_WARN, "G024",
			    "a delayed event of %.*s in %.*s failed: the "
			    "homeserver answered %ld %s%s",
			    (int) e.user.n, e.user.p, (int) e.room.n, e.room.p,
			    r.status, code[0] ? code : "(no errcode)",
			    cred ? " (the gateway's own credentials)" : "");
		}
		tli_buf_reset(&ne);
		if (cred) {
			tlg_as_error_body(&ne, r.status, err, elen);
		} else if (r.status == 0) {
			tli_buf_puts(&ne,
			    "{\"errcode\":\"M_UNKNOWN\",\"error\":"
			    "\"the homeserver did not answer\"}");
		} else if (!json_is_object(ej)) {
			/* not a Matrix error (a proxy's page): keep it as text
			 */
			tli_buf_puts(
			    &ne, "{\"errcode\":\"M_UNKNOWN\",\"error\":");
			tlh_json_str(&ne, err, elen > 1024 ? 1024 : elen);
			tli_buf_puts(&ne, "}");
		}
		json_decref(ej);
		if (ne.len > 0) {
			err = tli_buf_str(&ne);
			elen = ne.len;
		}
		tlg_finalise(g, tl_lease_owner(l), id, &e,
		    tlg_since(g, id, due, e.delay), "cancel", "error", NULL,
		    r.status && !cred ? (int) r.status : 502, err, elen);
	}
	tl_lease_delete(l);
	tlg_evc_del(g, id);
	if (r.status >= 200 && r.status < 300) {
		tlg_waiter_wake(g, id, 200, "{}", 2);
	} else if (cred) {
		tlg_waiter_wake(g, id, 502, tli_buf_str(&ne), ne.len);
	} else if (r.status == 0) {
		tlg_waiter_wake(g, id, 502, "{\"errcode\":\"M_UNKNOWN\"}", 22);
	} else {
		tlg_waiter_wake(
		    g, id, (int) r.status, tli_buf_str(&r.body), r.body.len);
	}
out:
	tlg_hs_resp_free(&r);
	tli_buf_fini(&url);
	tli_buf_fini(&ne);
}

static void *
sender_main(void *arg)
{
	gsender *s = arg;

	for (;;) {
		tli_qnode *n;
		gqitem *it;
		pthread_mutex_lock(&s->mtx);
		while (s->q.head == NULL && !s->stop) {
			pthread_cond_wait(&s->cv, &s->mtx);
		}
		n = tli_queue_pop(&s->q);
		pthread_mutex_unlock(&s->mtx);
		if (n == NULL) {
			break;
		}
		it = TLI_CONTAINER(n, gqitem, qn);
		if (!atomic_load(&s->g->stopping)) {
			send_one(s->g, it->lease);
		}
		tl_lease_free(it->lease);
		free(it);
	}
	return NULL;
}

void
tlg_on_due(void *arg, tl_lease *l)
{
	tlg *g = arg;
	size_t blen;
	const void *body = tl_lease_body(l, &blen);
	gev e;
	gsender *s;
	gqitem *it = calloc(1, sizeof(*it));

	if (it == NULL) {
		tl_lease_free(l); /* runs out and comes back */
		return;
	}
	/* One room's events go to one sender, in due order. */
	if (tlg_ev_parse(&e, body, blen) == 0) {
		s = &g->senders[tli_hash64_mixed(e.room.p, e.room.n, 3) %
		    (uint64_t) g->nsenders];
	} else {
		s = &g->senders[0];
	}
	it->lease = l;
	pthread_mutex_lock(&s->mtx);
	tli_queue_push(&s->q, &it->qn);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mtx);
}

void
tlg_on_expired(void *arg, tl_lease *l)
{
	(void) arg;
	tl_lease_delete(l);
	tl_lease_free(l);
}

int
tlg_senders_start(tlg *g)
{
	g->nsenders = g->c.senders;
	g->senders = calloc((size_t) g->nsenders, sizeof(*g->senders));
	if (g->senders == NULL) {
		return -1;
	}
	for (int i = 0; i < g->nsenders; i++) {
		gsender *s = &g->senders[i];
		s->g = g;
		tli_queue_init(&s->q);
		pthread_mutex_init(&s->mtx, NULL);
		pthread_cond_init(&s->cv, NULL);
		if (pthread_create(&s->thr, NULL, sender_main, s) != 0) {
			return -1;
		}
		s->started = true;
	}
	return 0;
}

void
tlg_senders_stop(tlg *g)
{
	for (int i = 0; g->senders != NULL && i < g->nsenders; i++) {
		gsender *s = &g->senders[i];
		pthread_mutex_lock(&s->mtx);
		s->stop = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mtx);
	}
	for (int i = 0; g->senders != NULL && i < g->nsenders; i++) {
		gsender *s = &g->senders[i];
		if (s->started) {
			pthread_join(s->thr, NULL);
		}
		pthread_mutex_destroy(&s->mtx);
		pthread_cond_destroy(&s->cv);
	}
	free(g->senders);
	g->senders = NULL;
}

/* ---- the installation's secret ---- */

#define SECRET_ID "hmac-secret"

static int
hexval(char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "K1\n" and 64 hex digits. */
static bool
secret_parse(tlg *g, const tl_message *m)
{
	const char *b = m->body;

	if (m->body_len != 3 + 2 * sizeof(g->secret) ||
	    memcmp(b, "K1\n", 3) != 0) {
		return false;
	}
	for (size_t i = 0; i < sizeof(g->secret); i++) {
		int hi = hexval(b[3 + 2 * i]), lo = hexval(b[4 + 2 * i]);
		if (hi < 0 || lo < 0) {
			return false;
		}
		g->secret[i] = (uint8_t) (hi << 4 | lo);
	}
	return true;
}

/* The secret lives on the broker, as the gateway's other state: every
 * gateway on the same topics (a restart, a second instance, the
 * standalone binary on another host) sends an event under the same
 * transaction id. Two first starts at once: the put of one fails with
 * TL_EEXISTS and it reads the other's. */
int
tlg_secret_load(tlg *g)
{
	char body[3 + 2 * sizeof(g->secret) + 1];
	tl_message *m = NULL;
	int rv;

	for (int tries = 0; tries < 2; tries++) {
		if ((rv = tl_get(g->cl, g->t_meta, SECRET_ID, &m)) == TL_OK) {
			bool ok = secret_parse(g, m);
			tl_message_free(m);
			if (ok) {
				return 0;
			}
			tli_log("msc4140", TLI_LOG_ERROR, "G010",
			    "the secret on %s is unreadable", g->t_meta);
			return -1;
		}
		if (rv != TL_ENOTFOUND ||
		    getrandom(g->secret, sizeof(g->secret), 0) !=
		        (ssize_t) sizeof(g->secret)) {
			break;
		}
		memcpy(body, "K1\n", 3);
		for (size_t i = 0; i < sizeof(g->secret); i++) {
			snprintf(body + 3 + 2 * i, 3, "%02x", g->secret[i]);
		}
		/* never due: PREFIX.meta has no consumer */
		rv = tl_put_at(g->cl, g->t_meta, "msc4140-gateway", SECRET_ID,
		    TL_TS_MAX, body, sizeof(body) - 1, NULL);
		if (rv == TL_OK) {
			tli_log("msc4140", TLI_LOG_INFO, "G011",
			    "made the installation's secret (on %s)",
			    g->t_meta);
			return 0;
		}
		if (rv != TL_EEXISTS) {
			break;
		}
	}
	tli_log("msc4140", TLI_LOG_ERROR, "G010",
	    "cannot read or store the secret on %s: %s", g->t_meta,
	    tl_strerror(rv));
	return -1;
}

/* ---- start and stop ---- */

static int
topic(tlg *g, const char *name)
{
	tl_topic_conf tc;
	int rv;

	memset(&tc, 0, sizeof(tc));
	tc.name = name;
	tc.max_body = g->c.max_body + 64 * 1024;
	tc.default_lease_ms = 60000;
	tc.max_deliveries = 0; /* never dead-letter a user's event */
	rv = tl_topic_create(g->cl, &tc);
	if (rv != TL_OK && rv != TL_ETOPICEXISTS) {
		tli_log("msc4140", TLI_LOG_ERROR, "G002",
		    "cannot create topic %s: %s", name, tl_strerror(rv));
		return -1;
	}
	return 0;
}

static int
consume(tlg *g, tl_consumer **out, const char *t, const char *suffix,
    tl_deliver_fn fn, uint32_t credit)
{
	tl_consumer_conf cc;
	char cid[TL_MAX_NAME_LEN + 1];
	int rv;

	if ((size_t) snprintf(cid, sizeof(cid), "%s%s", g->c.consumer_id,
	        suffix) >= sizeof(cid)) {
		tli_log("msc4140", TLI_LOG_ERROR, "G003",
		    "cannot consume %s: %s", t, "consumer_id too long");
		return -1;
	}
	memset(&cc, 0, sizeof(cc));
	cc.topic = t;
	cc.consumer_id = cid;
	cc.lease_ms = 60000;
	cc.credit = credit;
	cc.on_message = fn;
	cc.arg = g;
	if ((rv = tl_consumer_open(out, g->cl, &cc)) != TL_OK) {
		tli_log("msc4140", TLI_LOG_ERROR, "G003",
		    "cannot consume %s: %s", t, tl_strerror(rv));
		return -1;
	}
	return 0;
}

/* The broker connection's loss (the SDK's warning, G090) and its return,
 * which the SDK tells at info level: logged with the time it took. */
static void
broker_link(tlg *g, const char *msg)
{
	int64_t now = tli_mono_ms(), lost;

	if (strncmp(msg, "connection to ", 14) == 0 &&
	    strstr(msg, " lost") != NULL) {
		atomic_store(&g->broker_lost_at, now);
	} else if (strncmp(msg, "reconnected to ", 15) == 0) {
		lost = atomic_exchange(&g->broker_lost_at, 0);
		tli_log("msc4140", TLI_LOG_INFO, "G091",
		    "reconnected to the broker after %lld ms without it",
		    (long long) (lost > 0 ? now - lost : 0));
	}
}

int
tlg_topic_make(tlg *g, const char *name)
{
	return topic(g, name);
}

int
tlg_consume(tlg *g, tl_consumer **out, const char *t, const char *suffix,
    tl_deliver_fn fn, uint32_t credit)
{
	return consume(g, out, t, suffix, fn, credit);
}

static void
gw_log(void *arg, tl_log_level level, const char *msg)
{
	tlg *g = arg;

	if (level <= TL_LOG_WARN) {
		/* the SDK's levels are numbered as the logger's */
		tli_log(
		    "msc4140", (tli_log_level) level, "G090", "sdk: %s", msg);
	}
	broker_link(g, msg);
}

int
tlg_start(tlg **out, const tlg_conf *c, const char *broker_url)
{
	tlg *g = calloc(1, sizeof(*g));
	tl_opts *o = NULL;
	int rv;

	if (g == NULL) {
		return -1;
	}
	g->c = *c;
	if (tlg_health_init(g) != 0) {
		tlg_health_fini(g);
		free(g);
		return -1;
	}
	pthread_mutex_init(&g->w_mtx, NULL);
	pthread_cond_init(&g->w_cv, NULL);
	pthread_mutex_init(&g->auth_mtx, NULL);
	pthread_mutex_init(&g->rate_mtx, NULL);
	pthread_mutex_init(&g->evc_mtx, NULL);
	for (int i = 0; i < TLG_USER_STRIPES; i++) {
		pthread_mutex_init(&g->user_mtx[i], NULL);
	}
	g->evc = calloc(TLG_EVC_SLOTS, sizeof(*g->evc));
	snprintf(g->t_ev, sizeof(g->t_ev), "%s.events", c->topic_prefix);
	snprintf(g->t_final, sizeof(g->t_final), "%s.final", c->topic_prefix);
	snprintf(g->t_txn, sizeof(g->t_txn), "%s.txn", c->topic_prefix);
	snprintf(g->t_meta, sizeof(g->t_meta), "%s.meta", c->topic_prefix);
	if (tlh_client_alloc(&g->hc, 64) != TL_OK) {
		goto fail;
	}
	if (tlg_as_check_start(g) != 0) {
		goto fail;
	}
	if (tl_opts_alloc(&o) != TL_OK ||
	    tl_opts_set_url(o, broker_url ? broker_url : c->broker) != TL_OK ||
	    tl_opts_set_name(o, "msc4140-gateway") != TL_OK ||
	    tl_opts_set_log(o, gw_log, g) != TL_OK ||
	    (c->broker_token[0] &&
	        tl_opts_set_token(o, c->broker_token) != TL_OK)) {
		tli_log("msc4140", TLI_LOG_ERROR, "G001", "bad broker URL %s",
		    broker_url ? broker_url : c->broker);
		goto fail;
	}
	tl_opts_set_reconnect(o, 50, 2000);
	if ((rv = tl_client_open(&g->cl, o)) != TL_OK) {
		tli_log("msc4140", TLI_LOG_ERROR, "G001",
		    "cannot reach the broker at %s: %s",
		    broker_url ? broker_url : c->broker, tl_strerror(rv));
		goto fail;
	}
	if (topic(g, g->t_ev) || topic(g, g->t_final) || topic(g, g->t_txn) ||
	    topic(g, g->t_meta) || tlg_secret_load(g) != 0 ||
	    tlg_senders_start(g) != 0 ||
	    consume(g, &g->cons_ev, g->t_ev, "", tlg_on_due, 64) ||
	    consume(
	        g, &g->cons_final, g->t_final, ".final", tlg_on_expired, 16) ||
	    consume(g, &g->cons_txn, g->t_txn, ".txn", tlg_on_expired, 16) ||
	    (c->futures && tlg_fut_start(g) != 0) || tlg_http_start(g) != 0) {
		goto fail;
	}
	tl_opts_free(o);
	tli_log("msc4140", TLI_LOG_INFO, "G005", "serving on %s for %s", g->url,
	    g->c.homeserver);
	*out = g;
	return 0;
fail:
	tl_opts_free(o);
	tlg_stop(g);
	return -1;
}

const char *
tlg_url(const tlg *g)
{
	return g->url;
}

void
tlg_stop(tlg *g)
{
	if (g == NULL) {
		return;
	}
	atomic_store(&g->stopping, true);
	pthread_mutex_lock(&g->w_mtx);
	pthread_cond_broadcast(&g->w_cv);
	pthread_mutex_unlock(&g->w_mtx);
	tlg_http_stop(g);
	tl_consumer_close(g->cons_ev);
	tl_consumer_close(g->cons_final);
	tl_consumer_close(g->cons_txn);
	tlg_fut_stop(g);
	tlg_senders_stop(g);
	tlg_health_fini(g);
	tl_client_close(g->cl);
	tlh_client_free(g->hc);
	for (int i = 0; i < TLG_AUTH_SLOTS; i++) {
		free(g->auth[i].token);
		free(g->auth[i].user);
		free(g->auth[i].device);
	}
	pthread_mutex_destroy(&g->w_mtx);
	pthread_cond_destroy(&g->w_cv);
	pthread_mutex_destroy(&g->auth_mtx);
	pthread_mutex_destroy(&g->rate_mtx);
	pthread_mutex_destroy(&g->evc_mtx);
	for (int i = 0; i < TLG_USER_STRIPES; i++) {
		pthread_mutex_destroy(&g->user_mtx[i]);
	}
	free(g->evc);
	tli_log("msc4140", TLI_LOG_INFO, "G008", "stopped");
	free(g);
}

tlg *
tlg_start_file(const char *conf_path, const char *broker_url)
{
	tlg_conf c;
	tlg *g = NULL;

	tlg_conf_defaults(&c);
	if (tlg_conf_file(&c, conf_path) != 0 || tlg_conf_check(&c) != 0 ||
	    tlg_start(&g, &c, broker_url) != 0) {
		return NULL;
	}
	return g;
}
