/*
 * The Futures form of MSC4140 (the proposal's earlier revision), served
 * with `futures = on`: send_future / state_future with future_timeout and
 * future_group_id, the send / cancel / refresh tokens and their
 * unauthenticated POST .../future/{token}, the list of running futures,
 * future groups, and the invalidation of state futures by a new state
 * event sent through the gateway.
 *
 * STORAGE. Two topics beside the gateway's own:
 *  PREFIX.fut    one message per future: id = a random future id, owner =
 *                the user, due = now + future_timeout (a timeout future)
 *                or never (an action future), body = the stored event
 *                form (gw.h, delay = the timeout, 0 for an action future)
 *                plus the lines fgroup, fsend, fcancel, frefresh, furl.
 *                Its consumer fires timeout futures.
 *  PREFIX.fgroup records that are never due: a group ("g" + hex of the
 *                group id, owner = the user who made it), a token ("t" +
 *                token, owner = the user, body = kind and future id), a
 *                state future's index entry ("s" + future id, owner = "s"
 *                + a hash of room, type and state key, checked against
 *                the future on use), a group's member entries ("m" + "t"
 *                or "a" + future id, owner = "m" + hex of the group id:
 *                a group's futures are read without a scan of the
 *                user's), transaction records ("x" + a hash, due when
 *                they expire); and the claims ("c" + hex of the group
 *                id), due at once. Its consumer takes the claims and
 *                deletes whatever else comes due.
 *
 * THE DECISION. A group's outcome is decided by one store operation: the
 * create of its claim, a message with the natural id "c" + hex(group id).
 * The broker creates a natural id once and answers TL_EEXISTS to every
 * later create, so however many triggers race (send tokens, timeouts, the
 * cancel of the last timeout future) exactly one claim exists and the
 * others lose. The claim holds the chosen future's stored form (copied:
 * nothing else is read later) or none (the group was cancelled). A send
 * token first deletes its own future (so that a cancel of the same future
 * and its send cannot both succeed), a firing timeout holds its future's
 * lease, and only then is the claim created. The claim consumer, holding
 * the claim's lease, hands the chosen event to the senders (PREFIX.events
 * with id = the future id: the transaction id and the finalised record
 * follow from it, and a redelivery after a crash finds it there or in
 * PREFIX.final and does not hand it twice), deletes every other future of
 * the group with its tokens, and releases the claim to finalised_keep_ms
 * after it was made: until then the group id answers 409 (its own user)
 * or 405 (another); then the claim and the group record are deleted.
 *
 * Threads and locks: the endpoints run on the HTTP workers (blocking SDK
 * calls), the two consumers on their SDK threads. A scheduling request
 * holds its user's stripe (gw.h) so that the count per user and a
 * repeated transaction hold; the token throttle's mutex is a leaf.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "parse.h"

/* Never due (the last millisecond of year 9999 the broker accepts). */
#define FAR_TS INT64_C(253402300799000)
/* A group id's bytes: "g" / "c" + its hex must fit a message id. */
#define GROUP_MAX 63
#define MISS_SLOTS 1024
#define FUT_UNAVAILABLE "The future store is unavailable"

typedef struct gmiss {
	uint64_t key;
	uint32_t misses;
	int64_t blocked_until;
} gmiss;

struct gfut {
	char t_fut[TL_MAX_NAME_LEN + 1];
	char t_grp[TL_MAX_NAME_LEN + 1];
	tl_consumer *cons_fut, *cons_grp;
	pthread_mutex_t mtx;
	gmiss miss[MISS_SLOTS];
};

/* A stored future. */
typedef struct gfuture {
	gev e; /* the event; e.delay = future_timeout, 0: an action future */
	gstr group, send, cancel, refresh, url;
} gfuture;

static bool
is(gstr k, const char *s)
{
	return k.n == strlen(s) && memcmp(k.p, s, k.n) == 0;
}

static int
fut_parse(gfuture *f, const void *body, size_t len)
{
	const char *p = (const char *) body + 3,
	           *end = (const char *) body + len;

	memset(f, 0, sizeof(*f));
	if (tlg_ev_parse(&f->e, body, len) != 0 || f->e.final) {
		return -1;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t) (end - p)), *tab;
		if (nl == NULL || nl == p) {
			break;
		}
		if ((tab = memchr(p, '\t', (size_t) (nl - p))) != NULL) {
			gstr k = {p, (size_t) (tab - p)};
			gstr v = {tab + 1, (size_t) (nl - tab - 1)};
			if (is(k, "fgroup")) {
				f->group = v;
			} else if (is(k, "fsend")) {
				f->send = v;
			} else if (is(k, "fcancel")) {
				f->cancel = v;
			} else if (is(k, "frefresh")) {
				f->refresh = v;
			} else if (is(k, "furl")) {
				f->url = v;
			}
		}
		p = nl + 1;
	}
	return f->group.n > 0 && f->send.n > 0 && f->cancel.n > 0 ? 0 : -1;
}

/* kind + the hex of a group id (at most GROUP_MAX bytes): a message id
 * that no two group ids share. */
static void
group_key(char *out, char kind, gstr group)
{
	static const char hx[] = "0123456789abcdef";
	size_t o = 0;

	out[o++] = kind;
	for (size_t i = 0; i < group.n && i < GROUP_MAX; i++) {
		out[o++] = hx[(unsigned char) group.p[i] >> 4];
		out[o++] = hx[(unsigned char) group.p[i] & 15];
	}
	out[o] = '\0';
}

/* The producer group of the index entries of one state key. */
static void
skey_owner(char *out, size_t cap, const gev *e)
{
	tli_buf b = {0};
	uint64_t h1, h2;

	tli_buf_append(&b, e->room.p, e->room.n);
	tli_buf_append(&b, "\n", 1);
	tli_buf_append(&b, e->type.p, e->type.n);
	tli_buf_append(&b, "\n", 1);
	tli_buf_append(&b, e->skey.p, e->skey.n);
	h1 = tli_hash64_mixed(b.data, b.len, 31);
	h2 = tli_hash64_mixed(b.data, b.len, 32);
	snprintf(out, cap, "s%016llx%016llx", (unsigned long long) h1,
	    (unsigned long long) h2);
	tli_buf_fini(&b);
}

static void
gstr_cpy(char *out, size_t cap, gstr v)
{
	snprintf(out, cap, "%.*s", (int) v.n, v.p);
}

/* ---- the token throttle: N unknown or spent tokens in a row from one
 * IP, then 429 for T ---- */

static gmiss *
miss_slot(struct gfut *fu, const char *ip)
{
	uint64_t h = tli_hash64_mixed(ip, strlen(ip), 41);
	gmiss *m = &fu->miss[h % MISS_SLOTS];

	if (m->key != h) {
		memset(m, 0, sizeof(*m));
		m->key = h;
	}
	return m;
}

static int64_t
miss_blocked(tlg *g, const char *ip)
{
	int64_t now = tli_mono_ms(), left = 0;
	gmiss *m;

	if (!g->c.rate_limits) {
		return 0;
	}
	pthread_mutex_lock(&g->fut->mtx);
	m = miss_slot(g->fut, ip);
	if (m->blocked_until > now) {
		left = m->blocked_until - now;
	}
	pthread_mutex_unlock(&g->fut->mtx);
	return left;
}

static void
miss_count(tlg *g, const char *ip, bool miss)
{
	gmiss *m;

	if (!g->c.rate_limits) {
		return;
	}
	pthread_mutex_lock(&g->fut->mtx);
	m = miss_slot(g->fut, ip);
	if (!miss) {
		m->misses = 0;
	} else if (++m->misses >= g->c.fut_misses) {
		m->blocked_until = tli_mono_ms() + g->c.fut_block_ms;
		m->misses = 0;
	}
	pthread_mutex_unlock(&g->fut->mtx);
}

/* ---- records ---- */

static int
put_one(tlg *g, const char *t, const char *owner, const char *id, int64_t ts,
    bool rel, const void *body, size_t len)
{
	tl_put p;
	int rv;

	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = ts;
	p.rel = rel;
	p.body = body;
	p.body_len = len;
	rv = tl_put_batch(g->cl, t, owner, &p, 1);
	return rv != TL_OK ? rv : p.err;
}

/* Delete what belongs to a future besides itself: its tokens and its
 * state index entry. */
static void
drop_side(tlg *g, const char *owner, const char *fid, const gfuture *f)
{
	const gstr toks[] = {f->send, f->cancel, f->refresh};
	char id[TL_MAX_ID_LEN + 1], so[64];

	for (size_t i = 0; i < 3; i++) {
		if (toks[i].n > 0 && toks[i].n < sizeof(id) - 1) {
			snprintf(id, sizeof(id), "t%.*s", (int) toks[i].n,
			    toks[i].p);
			tl_delete(g->cl, g->fut->t_grp, owner, id, 0);
		}
	}
	if (f->e.state) {
		skey_owner(so, sizeof(so), &f->e);
		snprintf(id, sizeof(id), "s%s", fid);
		tl_delete(g->cl, g->fut->t_grp, so, id, 0);
	}
	if (f->group.n <= GROUP_MAX) {
		char mo[TL_MAX_NAME_LEN + 1];
		group_key(mo, 'm', f->group);
		snprintf(
		    id, sizeof(id), "m%c%s", f->refresh.n > 0 ? 't' : 'a', fid);
		tl_delete(g->cl, g->fut->t_grp, mo, id, 0);
	}
}

/* Calls fn on each entry of owner's index on topic t, a page at a time,
 * until it returns false. TL_OK or the broker's error. */
typedef bool (*entry_fn)(tlg *g, const tl_entry *e, void *arg);

static int
index_each(tlg *g, const char *t, const char *owner, entry_fn fn, void *arg)
{
	tl_entry *es = NULL, last;
	size_t n = 0;
	bool more = true, started = false, go = true;
	int rv = TL_OK;

	while (go && more) {
		rv = tl_list(g->cl, t, owner, 1000, started ? &last : NULL, &es,
		    &n, &more);
		if (rv != TL_OK) {
			break;
		}
		for (size_t i = 0; go && i < n; i++) {
			go = fn(g, &es[i], arg);
		}
		if (n > 0) {
			last = es[n - 1];
			started = true;
		}
		tl_free(es);
		es = NULL;
		if (n == 0) {
			break;
		}
	}
	return rv;
}

/* Calls fn on each future of owner in group until it returns false.
 * TL_OK or the broker's error. */
typedef bool (*each_fn)(tlg *g, tl_message *m, gfuture *f, void *arg);

typedef struct group_walk {
	const char *owner;
	gstr group;
	each_fn fn;
	void *arg;
} group_walk;

static bool
group_member(tlg *g, const tl_entry *e, void *arg)
{
	group_walk *w = arg;
	tl_message *m = NULL;
	gfuture f;
	bool go = true;

	/* a member entry whose future is gone (or not stored yet) is
	 * skipped */
	if (strlen(e->id) < 3 ||
	    tl_get(g->cl, g->fut->t_fut, e->id + 2, &m) != TL_OK) {
		return true;
	}
	if (strcmp(m->owner, w->owner) == 0 &&
	    fut_parse(&f, m->body, m->body_len) == 0 &&
	    f.group.n == w->group.n &&
	    memcmp(f.group.p, w->group.p, w->group.n) == 0) {
		go = w->fn(g, m, &f, w->arg);
	}
	tl_message_free(m);
	return go;
}

static int
group_each(tlg *g, const char *owner, gstr group, each_fn fn, void *arg)
{
	char mo[TL_MAX_NAME_LEN + 1];
	group_walk w = {owner, group, fn, arg};

	group_key(mo, 'm', group);
	return index_each(g, g->fut->t_grp, mo, group_member, &w);
}

/* Delete every member entry of a group (when its claim expires). */
static void
members_drop(tlg *g, gstr group)
{
	char mo[TL_MAX_NAME_LEN + 1];
	tl_entry *es = NULL;
	size_t n = 0;
	bool more = true;

	group_key(mo, 'm', group);
	while (more &&
	    tl_list(g->cl, g->fut->t_grp, mo, 1000, NULL, &es, &n, &more) ==
	        TL_OK &&
	    n > 0) {
		for (size_t i = 0; i < n; i++) {
			tl_delete(g->cl, g->fut->t_grp, mo, es[i].id, 0);
		}
		tl_free(es);
		es = NULL;
	}
	tl_free(es);
}

static bool
find_timeout(tlg *g, tl_message *m, gfuture *f, void *arg)
{
	(void) g;
	(void) m;
	if (f->refresh.n > 0) { /* only timeout futures have one */
		*(bool *) arg = true;
		return false;
	}
	return true;
}

/* Whether the group still has a timeout future (true on a broker error:
 * nothing is decided on a guess). */
static bool
group_has_timeout(tlg *g, const char *owner, gstr group)
{
	bool found = false;

	if (group_each(g, owner, group, find_timeout, &found) != TL_OK) {
		return true;
	}
	return found;
}

/* The claim: the group's outcome, one create. by: "send", "timeout" or
 * "cancel" (fbody NULL). TL_OK: this call decided; TL_EEXISTS: decided
 * before. */
static int
claim(tlg *g, const char *owner, gstr group, const char *by, const char *fid,
    const void *fbody, size_t flen)
{
	char ck[TL_MAX_ID_LEN + 1];
	tli_buf b = {0};
	int rv;

	group_key(ck, 'c', group);
	tli_buf_printf(&b, "C1\nat\t%lld\nby\t%s\nfuture\t%s\ngroup\t",
	    (long long) tli_wall_ms(), by, fid != NULL ? fid : "");
	tli_buf_append(&b, group.p, group.n);
	tli_buf_puts(&b, "\n\n");
	if (fbody != NULL) {
		tli_buf_append(&b, fbody, flen);
	}
	if (b.oom) {
		tli_buf_fini(&b);
		return TL_ENOMEM;
	}
	rv = put_one(g, g->fut->t_grp, owner, ck, 0, true, b.data, b.len);
	tli_buf_fini(&b);
	if (rv != TL_OK && rv != TL_EEXISTS) {
		tli_log("msc4140", TLI_LOG_WARN, "G051",
		    "cannot decide a future group: %s", tl_strerror(rv));
	}
	return rv;
}

/* Whether the group's claim exists and names another future than fid
 * (a future with a short timeout may have claimed its group already). */
static bool
claimed_by_other(tlg *g, gstr group, const char *fid)
{
	char ck[TL_MAX_ID_LEN + 1], line[TL_MAX_ID_LEN + 16];
	tl_message *m = NULL;
	bool other = false;

	group_key(ck, 'c', group);
	if (tl_get(g->cl, g->fut->t_grp, ck, &m) == TL_OK) {
		snprintf(line, sizeof(line), "\nfuture\t%s\n", fid);
		other =
		    memmem(m->body, m->body_len, line, strlen(line)) == NULL;
	}
	tl_message_free(m);
	return other;
}

static bool
claimed(tlg *g, gstr group)
{
	char ck[TL_MAX_ID_LEN + 1];
	tl_message *m = NULL;
	int rv;

	group_key(ck, 'c', group);
	rv = tl_get(g->cl, g->fut->t_grp, ck, &m);
	tl_message_free(m);
	return rv == TL_OK;
}

/* A future is gone (cancelled, invalidated): when it was the group's
 * last timeout future, the group ends with no event. */
static void
after_cancel(tlg *g, const char *owner, const gfuture *f)
{
	if (f->refresh.n > 0 && !group_has_timeout(g, owner, f->group)) {
		claim(g, owner, f->group, "cancel", NULL, NULL, 0);
	}
}

/* ---- the consumers ---- */

/* A timeout future is due: it claims its group. */
static void
on_fut_due(void *arg, tl_lease *l)
{
	tlg *g = arg;
	size_t blen;
	const void *body = tl_lease_body(l, &blen);
	gfuture f;
	int rv;

	if (fut_parse(&f, body, blen) != 0) {
		tli_log("msc4140", TLI_LOG_ERROR, "G020",
		    "a stored future is unreadable; dropped");
		tl_lease_delete(l);
		tl_lease_free(l);
		return;
	}
	rv = claim(g, tl_lease_owner(l), f.group, "timeout", tl_lease_id(l),
	    body, blen);
	if (rv == TL_OK || rv == TL_EEXISTS) {
		/* decided: by this timeout, or before it (then it is void) */
		drop_side(g, tl_lease_owner(l), tl_lease_id(l), &f);
		tl_lease_delete(l);
	} /* else the lease runs out and the timeout fires again */
	tl_lease_free(l);
}

static bool
drop_each(tlg *g, tl_message *m, gfuture *f, void *arg)
{
	(void) arg;
	/* one being fired (leased) finds the claim and drops itself */
	if (tl_delete(g->cl, g->fut->t_fut, m->owner, m->id, 0) == TL_OK) {
		drop_side(g, m->owner, m->id, f);
	}
	return true;
}

/* A claim: hand its event to the senders, end the rest of the group,
 * keep the claim until it expires; an expired claim goes with its group
 * record. */
static void
on_claim(void *arg, tl_lease *l)
{
	tlg *g = arg;
	size_t blen;
	const char *p = tl_lease_body(l, &blen), *end = p + blen;
	const char *owner = tl_lease_owner(l);
	char fid[TL_MAX_ID_LEN + 1] = "", gk[TL_MAX_ID_LEN + 1];
	gstr by = {"", 0}, group = {"", 0};
	int64_t at = 0;
	gfuture f;

	if (blen < 3 || memcmp(p, "C1\n", 3) != 0) {
		tl_lease_delete(l); /* nothing else there is ever due */
		tl_lease_free(l);
		return;
	}
	for (p += 3; p < end;) {
		const char *nl = memchr(p, '\n', (size_t) (end - p)), *tab;
		if (nl == NULL) {
			p = end;
			break;
		}
		if (nl == p) {
			p++;
			break;
		}
		if ((tab = memchr(p, '\t', (size_t) (nl - p))) != NULL) {
			gstr k = {p, (size_t) (tab - p)};
			gstr v = {tab + 1, (size_t) (nl - tab - 1)};
			if (is(k, "at")) {
				at = strtoll(v.p, NULL, 10);
			} else if (is(k, "by")) {
				by = v;
			} else if (is(k, "future")) {
				gstr_cpy(fid, sizeof(fid), v);
			} else if (is(k, "group")) {
				group = v;
			}
		}
		p = nl + 1;
	}
	if (tl_lease_placed_at(l) >= at + g->c.final_keep_ms) {
		group_key(gk, 'g', group);
		tl_delete(g->cl, g->fut->t_grp, owner, gk, 0);
		members_drop(g, group);
		tl_lease_delete(l);
		tl_lease_free(l);
		return;
	}
	if (!is(by, "cancel") && fut_parse(&f, p, (size_t) (end - p)) == 0) {
		tl_message *m = NULL;
		int rv = TL_OK;
		if (tl_get(g->cl, g->t_ev, fid, &m) != TL_OK &&
		    tl_get(g->cl, g->t_final, fid, &m) != TL_OK) {
			rv = put_one(g, g->t_ev, owner, fid, 0, true, p,
			    (size_t) (end - p));
		}
		tl_message_free(m);
		if (rv != TL_OK && rv != TL_EEXISTS) {
			tli_log("msc4140", TLI_LOG_WARN, "G051",
			    "cannot hand a future to the senders: %s",
			    tl_strerror(rv));
			tl_lease_free(l); /* runs out: tried again */
			return;
		}
	}
	group_each(g, owner, group, drop_each, NULL);
	tl_lease_release(l, at + g->c.final_keep_ms, false);
	tl_lease_free(l);
}

int
tlg_fut_start(tlg *g)
{
	struct gfut *fu = calloc(1, sizeof(*fu));

	if (fu == NULL) {
		return -1;
	}
	pthread_mutex_init(&fu->mtx, NULL);
	snprintf(fu->t_fut, sizeof(fu->t_fut), "%s.fut", g->c.topic_prefix);
	snprintf(fu->t_grp, sizeof(fu->t_grp), "%s.fgroup", g->c.topic_prefix);
	g->fut = fu;
	if (tlg_topic_make(g, fu->t_fut) != 0 ||
	    tlg_topic_make(g, fu->t_grp) != 0 ||
	    tlg_consume(g, &fu->cons_fut, fu->t_fut, ".fut", on_fut_due, 16) ||
	    tlg_consume(g, &fu->cons_grp, fu->t_grp, ".fgroup", on_claim, 16)) {
		return -1;
	}
	return 0;
}

void
tlg_fut_stop(tlg *g)
{
	if (g->fut == NULL) {
		return;
	}
	tl_consumer_close(g->fut->cons_fut);
	tl_consumer_close(g->fut->cons_grp);
	pthread_mutex_destroy(&g->fut->mtx);
	free(g->fut);
	g->fut = NULL;
}

/* ---- scheduling ---- */

/* Whether the raw query string has parameter name (with or without a
 * value). */
static bool
has_param(const char *q, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = q; (p = strstr(p, name)) != NULL; p++) {
		if ((p == q || p[-1] == '&') &&
		    (p[n] == '=' || p[n] == '&' || p[n] == '\0')) {
			return true;
		}
	}
	return false;
}

/* The query parameters kept with the event: tlg_extra_query's, less
 * ours. */
static bool
fut_extra(const char *q, tli_buf *out)
{
	tli_buf all = {0};
	const char *p;
	bool ok = tlg_extra_query(q, &all);

	for (p = tli_buf_str(&all); ok && *p != '\0';) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t) (amp - p) : strlen(p);
		if (strncmp(p, "future_timeout", 14) != 0 &&
		    strncmp(p, "future_group_id", 15) != 0) {
			if (out->len > 0) {
				tli_buf_append(out, "&", 1);
			}
			tli_buf_append(out, p, len);
		}
		p += len + (amp ? 1 : 0);
	}
	ok = ok && !all.oom;
	tli_buf_fini(&all);
	return ok;
}

static void
timeout_too_long(const tlg_conf *c, gout *o)
{
	o->status = 400;
	tli_buf_reset(&o->body);
	tli_buf_printf(&o->body,
	    "{\"errcode\":\"M_INVALID_PARAM\",\"error\":\"future_timeout "
	    "exceeds the maximum of %lld ms\",\"max_future_timeout\":%lld}",
	    (long long) c->fut_max_timeout, (long long) c->fut_max_timeout);
}

/* The query: future_timeout (-1: none) and future_group_id (group, "":
 * none). false when o holds the answer. */
static bool
fut_query(tlg *g, greq *r, int64_t *timeout, char *group, size_t cap, gout *o)
{
	const char *q = tlh_req_query(r->hr), *t, *gi;
	char tb[32], *end;
	long long x;

	*timeout = -1;
	group[0] = '\0';
	if (has_param(q, "future_timeout")) {
		t = tlh_query_get(q, "future_timeout", tb, sizeof(tb));
		if (t == NULL || !(*t >= '0' && *t <= '9')) {
			tlg_out_err(o, 400, "M_INVALID_PARAM",
			    "future_timeout must be a whole number of ms");
			return false;
		}
		x = strtoll(t, &end, 10);
		if (*end != '\0') {
			tlg_out_err(o, 400, "M_INVALID_PARAM",
			    "future_timeout must be a whole number of ms");
			return false;
		}
		if (x > g->c.fut_max_timeout || strlen(t) > 18) {
			timeout_too_long(&g->c, o);
			return false;
		}
		*timeout = x;
	}
	if (has_param(q, "future_group_id")) {
		gi = tlh_query_get(q, "future_group_id", group, cap);
		if (gi == NULL || *gi == '\0' || strlen(gi) > GROUP_MAX ||
		    !tlg_field_ok(gi, strlen(gi))) {
			tlg_out_err(o, 400, "M_INVALID_PARAM",
			    "future_group_id must be 1 to 63 bytes of text");
			return false;
		}
	}
	if (*timeout < 0 && group[0] == '\0') {
		tlg_out_err(o, 400, "M_INVALID_PARAM",
		    "future_timeout or future_group_id is required");
		return false;
	}
	return true;
}

/* The group: made (a timeout future with a new id) or joined. false when
 * o holds the answer (405 another user's, 409 resolved or without a
 * timeout future, 503). */
static bool
group_join(tlg *g, const char *owner, gstr group, bool timeout, gout *o)
{
	char gk[TL_MAX_ID_LEN + 1];
	tli_buf b = {0};
	tl_message *m = NULL;
	int rv;

	group_key(gk, 'g', group);
	rv = tl_get(g->cl, g->fut->t_grp, gk, &m);
	if (rv == TL_ENOTFOUND && timeout) {
		tli_buf_puts(&b, "G1\ngroup\t");
		tli_buf_append(&b, group.p, group.n);
		tli_buf_puts(&b, "\n");
		rv = b.oom ? TL_ENOMEM
		           : put_one(g, g->fut->t_grp, owner, gk, FAR_TS, false,
		                 b.data, b.len);
		tli_buf_fini(&b);
		if (rv == TL_EEXISTS) { /* made at the same time */
			rv = tl_get(g->cl, g->fut->t_grp, gk, &m);
		}
	}
	if (rv == TL_OK && m != NULL && strcmp(m->owner, owner) != 0) {
		tl_message_free(m);
		tlg_out_err(o, 405, "M_FORBIDDEN",
		    "The future group belongs to another user");
		return false;
	}
	tl_message_free(m);
	if (rv == TL_ENOTFOUND) {
		tlg_out_err(o, 409, "M_UNKNOWN",
		    "No timeout future in this future group");
		return false;
	}
	if (rv != TL_OK) {
		tlg_out_err(o, 503, "M_UNKNOWN", FUT_UNAVAILABLE);
		return false;
	}
	if (claimed(g, group)) {
		tlg_out_err(
		    o, 409, "M_UNKNOWN", "The future group has already ended");
		return false;
	}
	if (!timeout && !group_has_timeout(g, owner, group)) {
		tlg_out_err(o, 409, "M_UNKNOWN",
		    "No timeout future in this future group");
		return false;
	}
	return true;
}

/* The future's stored form; tokens made here. */
static int
fut_body(tlg *g, greq *r, int64_t timeout, gstr group, const char *extra,
    char toks[3][40], tli_buf *b)
{
	gev e;

	memset(&e, 0, sizeof(e));
	e.user = (gstr){r->user, strlen(r->user)};
	e.room = tlg_param(r, "room");
	e.type = tlg_param(r, "type");
	e.state = r->state;
	if (r->state) {
		e.skey = tlg_param(r, "skey");
	}
	e.delay = timeout > 0 ? timeout : 0;
	e.query = (gstr){extra, strlen(extra)};
	if (tli_random_b64(toks[0], 24) || tli_random_b64(toks[1], 24) ||
	    (timeout >= 0 && tli_random_b64(toks[2], 24))) {
		return -1;
	}
	tli_buf_puts(b, "M1\n");
	tlg_ev_header(b, &e);
	tli_buf_puts(b, "fgroup\t");
	tli_buf_append(b, group.p, group.n);
	tli_buf_printf(b, "\nfsend\t%s\nfcancel\t%s\n", toks[0], toks[1]);
	if (timeout >= 0) {
		tli_buf_printf(b, "frefresh\t%s\n", toks[2]);
	}
	tli_buf_puts(b, "furl\t");
	tli_buf_puts(b, tlh_req_path(r->hr));
	tli_buf_puts(b, "?");
	if (timeout >= 0) {
		tli_buf_printf(b, "future_timeout=%lld&", (long long) timeout);
	}
	tli_buf_puts(b, "future_group_id=");
	tlh_url_enc(b, group.p, group.n);
	tli_buf_puts(b, "\n\n");
	tli_buf_append(b, r->content.p, r->content.n);
	return b->oom ? -1 : 0;
}

static void
fut_reply(gout *o, char toks[3][40], gstr group, bool timeout)
{
	o->status = 200;
	tli_buf_reset(&o->body);
	tli_buf_printf(&o->body,
	    "{\"send_token\":\"%s\",\"cancel_token\":\"%s\","
	    "\"future_group_id\":",
	    toks[0], toks[1]);
	tlh_json_str(&o->body, group.p, group.n);
	if (timeout) {
		tli_buf_printf(&o->body, ",\"refresh_token\":\"%s\"", toks[2]);
	}
	tli_buf_puts(&o->body, "}");
}

/* Store the future: its tokens and index entry, then itself. */
static int
fut_store(tlg *g, const char *owner, const char *fid, int64_t timeout,
    char toks[3][40], const tli_buf *body)
{
	static const char *const kinds[] = {"send", "cancel", "refresh"};
	char ids[4][TL_MAX_ID_LEN + 1], tb[3][200], so[64];
	tl_put p[3];
	size_t n = 0;
	gfuture f;
	int rv;

	memset(p, 0, sizeof(p));
	for (int i = 0; i < 3; i++) {
		if (i == 2 && timeout < 0) {
			break;
		}
		snprintf(ids[i], sizeof(ids[i]), "t%s", toks[i]);
		snprintf(tb[i], sizeof(tb[i]), "T1\nkind\t%s\nfuture\t%s\n",
		    kinds[i], fid);
		p[n].id = ids[i];
		p[n].ts = FAR_TS;
		p[n].body = tb[i];
		p[n].body_len = strlen(tb[i]);
		n++;
	}
	rv = tl_put_batch(g->cl, g->fut->t_grp, owner, p, n);
	for (size_t i = 0; rv == TL_OK && i < n; i++) {
		rv = p[i].err;
	}
	if (rv == TL_OK && fut_parse(&f, body->data, body->len) != 0) {
		rv = TL_EINVAL;
	}
	if (rv == TL_OK) { /* the group's member entry */
		char mo[TL_MAX_NAME_LEN + 1];
		group_key(mo, 'm', f.group);
		snprintf(ids[3], sizeof(ids[3]), "m%c%s",
		    timeout >= 0 ? 't' : 'a', fid);
		rv = put_one(g, g->fut->t_grp, mo, ids[3], FAR_TS, false, fid,
		    strlen(fid));
	}
	if (rv == TL_OK && f.e.state) {
		skey_owner(so, sizeof(so), &f.e);
		snprintf(ids[3], sizeof(ids[3]), "s%s", fid);
		rv = put_one(g, g->fut->t_grp, so, ids[3], FAR_TS, false, fid,
		    strlen(fid));
	}
	if (rv == TL_OK) {
		rv = put_one(g, g->fut->t_fut, owner, fid,
		    timeout >= 0 ? timeout : FAR_TS, timeout >= 0, body->data,
		    body->len);
	}
	return rv;
}

/* ---- transaction ids of send_future: a repeat within 30 minutes (same
 * path, user and device) gets the first answer. The record is in
 * PREFIX.fgroup ("x" + a hash of the key; the stored key decides), due
 * when it expires, when on_claim deletes it. ---- */

#define TXN_KEEP_MS (30 * 60 * 1000)

/* The first answer to this transaction, into o; false when none. */
static bool
txn_answer(tlg *g, const greq *r, gout *o)
{
	char id[64];
	tli_buf key = {0};
	tl_message *m = NULL;
	bool found = false;

	tlg_txn_key(r, 'x', id, sizeof(id), &key);
	if (!key.oom && tl_get(g->cl, g->fut->t_grp, id, &m) == TL_OK &&
	    m->body_len > key.len + 4 && memcmp(m->body, "X1\n", 3) == 0 &&
	    memcmp((char *) m->body + 3, key.data, key.len) == 0 &&
	    ((char *) m->body)[3 + key.len] == '\0' && m->consumer[0] == '\0' &&
	    m->ts > tli_wall_ms()) {
		o->status = 200;
		tli_buf_reset(&o->body);
		tli_buf_append(&o->body, (char *) m->body + 4 + key.len,
		    m->body_len - 4 - key.len);
		found = true;
	}
	tl_message_free(m);
	tli_buf_fini(&key);
	return found;
}

static void
txn_keep(tlg *g, const greq *r, const char *owner, const gout *o)
{
	char id[64];
	tli_buf key = {0}, b = {0};

	tlg_txn_key(r, 'x', id, sizeof(id), &key);
	tli_buf_puts(&b, "X1\n");
	tli_buf_append(&b, key.data, key.len);
	tli_buf_append(&b, "", 1);
	tli_buf_append(&b, o->body.data, o->body.len);
	if (!b.oom &&
	    put_one(g, g->fut->t_grp, owner, id, TXN_KEEP_MS, true, b.data,
	        b.len) == TL_EEXISTS) {
		/* an expired record not reaped yet */
		tl_delete(g->cl, g->fut->t_grp, owner, id, 0);
		put_one(g, g->fut->t_grp, owner, id, TXN_KEEP_MS, true, b.data,
		    b.len);
	}
	tli_buf_fini(&key);
	tli_buf_fini(&b);
}

static void
fut_schedule_body(tlg *g, greq *r, int64_t timeout, gstr group, gout *o)
{
	char owner[TL_MAX_NAME_LEN + 1], fid[40], toks[3][40];
	tli_buf extra = {0}, body = {0};
	tl_entry *es = NULL;
	size_t n = 0;
	bool more = false;
	pthread_mutex_t *um;
	gfuture f;
	int rv;

	if (!fut_extra(tlh_req_query(r->hr), &extra)) {
		tlg_out_err(o, 400, "M_INVALID_PARAM", "Bad query string");
		tli_buf_fini(&extra);
		return;
	}
	tlg_owner(r->user, owner, sizeof(owner));
	um = &g->user_mtx[tli_hash64_mixed(owner, strlen(owner), 4) %
	    TLG_USER_STRIPES];
	pthread_mutex_lock(um);
	if (r->has_txn && txn_answer(g, r, o)) {
		goto out;
	}
	rv = tl_list(g->cl, g->fut->t_fut, owner, g->c.max_scheduled, NULL, &es,
	    &n, &more);
	if (rv != TL_OK) {
		tlg_out_err(o, 503, "M_UNKNOWN", FUT_UNAVAILABLE);
		goto out;
	}
	if (n >= g->c.max_scheduled) {
		tlg_out_limited(o, 1000);
		goto out;
	}
	if (!group_join(g, owner, group, timeout >= 0, o)) {
		goto out;
	}
	if (tli_random_b64(fid, 24) != 0 ||
	    fut_body(g, r, timeout, group, tli_buf_str(&extra), toks, &body) !=
	        0) {
		tlg_out_err(o, 500, "M_UNKNOWN", "out of memory");
		goto out;
	}
	if ((rv = fut_store(g, owner, fid, timeout, toks, &body)) != TL_OK) {
		tli_log("msc4140", TLI_LOG_WARN, "G050",
		    "cannot store a future: %s", tl_strerror(rv));
		tlg_out_err(o, 503, "M_UNKNOWN", FUT_UNAVAILABLE);
		goto out;
	}
	/* A claim made since the checks did not see this future: it must
	 * not outlive its group. */
	if (claimed_by_other(g, group, fid)) {
		if (fut_parse(&f, body.data, body.len) == 0) {
			tl_delete(g->cl, g->fut->t_fut, owner, fid, 0);
			drop_side(g, owner, fid, &f);
		}
		tlg_out_err(
		    o, 409, "M_UNKNOWN", "The future group has already ended");
		goto out;
	}
	fut_reply(o, toks, group, timeout >= 0);
	if (r->has_txn) {
		txn_keep(g, r, owner, o);
	}
out:
	pthread_mutex_unlock(um);
	tl_free(es);
	tli_buf_fini(&extra);
	tli_buf_fini(&body);
}

void
tlg_fut_schedule(tlg *g, greq *r, gout *o)
{
	char group[4 * GROUP_MAX], gen[40];
	size_t rn;
	const char *rb = tlh_req_body(r->hr, &rn);
	int64_t timeout, wait;
	gstr gs;

	if (!fut_query(g, r, &timeout, group, sizeof(group), o) ||
	    !tlg_fields_ok(r, o)) {
		return;
	}
	if (r->has_txn && txn_answer(g, r, o)) {
		return; /* a repeat may come without its body */
	}
	if ((wait = tlg_rate_take(
	         g, "sched", r->user, g->c.sched_rate, g->c.sched_burst)) > 0) {
		tlg_out_limited(o, wait);
		return;
	}
	if (tlh_req_body_over(r->hr)) {
		tlg_out_err(
		    o, 413, "M_TOO_LARGE", "Event content is too large");
		return;
	}
	if (!tlg_schedule_json(&g->c, r, rb, rn, o)) {
		return;
	}
	if (group[0] == '\0') { /* a timeout future in a new group */
		if (tli_random_b64(gen, 18) != 0) {
			tlg_out_err(o, 500, "M_UNKNOWN", "no randomness");
			return;
		}
		gs = (gstr){gen, strlen(gen)};
	} else {
		gs = (gstr){group, strlen(group)};
	}
	fut_schedule_body(g, r, timeout, gs, o);
}

/* ---- tokens ---- */

static void
gone(tlg *g, greq *r, gout *o)
{
	miss_count(g, tlh_req_ip(r->hr), true);
	tlg_out_err(o, 410, "M_NOT_FOUND", "Unknown or spent future token");
}

/* The token's kind and future id; TL_ENOTFOUND or the broker's error. */
static int
token_lookup(tlg *g, gstr tok, char *kind, size_t kcap, char *fid, size_t fcap)
{
	char id[TL_MAX_ID_LEN + 1];
	tl_message *m = NULL;
	int rv;

	if (!tlg_id_ok(tok.p, tok.n) || tok.n > 64) {
		return TL_ENOTFOUND;
	}
	snprintf(id, sizeof(id), "t%.*s", (int) tok.n, tok.p);
	if ((rv = tl_get(g->cl, g->fut->t_grp, id, &m)) != TL_OK) {
		return rv;
	}
	rv = TL_ENOTFOUND;
	if (m->body_len > 3 && memcmp(m->body, "T1\n", 3) == 0) {
		const char *b = m->body, *end = b + m->body_len;
		const char *k = memmem(b, m->body_len, "\nkind\t", 6);
		const char *f = memmem(b, m->body_len, "\nfuture\t", 8);
		const char *kn, *fn;
		if (k != NULL && f != NULL &&
		    (kn = memchr(k + 6, '\n', (size_t) (end - k - 6))) &&
		    (fn = memchr(f + 8, '\n', (size_t) (end - f - 8)))) {
			gstr_cpy(
			    kind, kcap, (gstr){k + 6, (size_t) (kn - k - 6)});
			gstr_cpy(
			    fid, fcap, (gstr){f + 8, (size_t) (fn - f - 8)});
			rv = TL_OK;
		}
	}
	tl_message_free(m);
	return rv;
}

/* The action of a token on its future m; 0 or an HTTP error status. */
static int
token_act(tlg *g, const char *kind, tl_message *m, gfuture *f)
{
	int rv;

	if (claimed(g, f->group)) {
		return 410;
	}
	if (strcmp(kind, "refresh") == 0) {
		rv = tl_move(g->cl, g->fut->t_fut, m->owner, m->id, 0,
		    f->e.delay, true, NULL);
		return rv == TL_OK                           ? 0
		    : rv == TL_ENOTFOUND || rv == TL_ELEASED ? 410
		                                             : 503;
	}
	/* send or cancel: whichever deletes the future has it */
	rv = tl_delete(g->cl, g->fut->t_fut, m->owner, m->id, 0);
	if (rv == TL_ENOTFOUND || rv == TL_ELEASED) {
		return 410; /* gone, or its timeout is firing */
	}
	if (rv != TL_OK) {
		return 503;
	}
	if (strcmp(kind, "cancel") == 0) {
		drop_side(g, m->owner, m->id, f);
		after_cancel(g, m->owner, f);
		return 0;
	}
	rv = claim(g, m->owner, f->group, "send", m->id, m->body, m->body_len);
	if (rv == TL_OK || rv == TL_EEXISTS) {
		drop_side(g, m->owner, m->id, f);
		return rv == TL_OK ? 0 : 410; /* 410: decided before */
	}
	/* undecided: the future goes back where it was, with its tokens */
	put_one(g, g->fut->t_fut, m->owner, m->id, m->ts, false, m->body,
	    m->body_len);
	return 503;
}

void
tlg_fut_token(tlg *g, greq *r, gout *o)
{
	gstr tok = tlg_param(r, "token");
	const char *ip = tlh_req_ip(r->hr);
	char kind[16], fid[TL_MAX_ID_LEN + 1];
	tl_message *m = NULL;
	gfuture f;
	int64_t wait;
	int rv, st;

	if ((wait = miss_blocked(g, ip)) > 0 ||
	    (wait = tlg_rate_take(g, "ip", ip, g->c.ip_rate, g->c.ip_burst)) >
	        0) {
		tlg_out_limited(o, wait);
		return;
	}
	rv = token_lookup(g, tok, kind, sizeof(kind), fid, sizeof(fid));
	if (rv == TL_OK) {
		rv = tl_get(g->cl, g->fut->t_fut, fid, &m);
	}
	if (rv == TL_ENOTFOUND ||
	    (rv == TL_OK && fut_parse(&f, m->body, m->body_len) != 0)) {
		tl_message_free(m);
		gone(g, r, o);
		return;
	}
	if (rv != TL_OK) {
		tlg_out_err(o, 503, "M_UNKNOWN", FUT_UNAVAILABLE);
		return;
	}
	st = token_act(g, kind, m, &f);
	tl_message_free(m);
	if (st == 410) {
		gone(g, r, o);
	} else if (st != 0) {
		tlg_out_err(o, st, "M_UNKNOWN", FUT_UNAVAILABLE);
	} else {
		miss_count(g, ip, false);
		o->status = 200;
		tli_buf_puts(&o->body, "{}");
	}
}

/* ---- the list ---- */

/* One running future of the list. */
static bool
list_one(tlg *g, const tl_entry *e, void *arg)
{
	gout *o = arg;
	tl_message *m = NULL;
	gfuture f;

	if (e->leased || tl_get(g->cl, g->fut->t_fut, e->id, &m) != TL_OK) {
		return true;
	}
	/* one whose group was decided is no longer running, though the
	 * claim consumer may not have dropped it */
	if (fut_parse(&f, m->body, m->body_len) == 0 && !claimed(g, f.group)) {
		tli_buf_puts(&o->body, o->body.len > 1 ? "," : "");
		tli_buf_puts(&o->body, "{\"url\":");
		tlh_json_str(&o->body, f.url.p, f.url.n);
		tli_buf_puts(&o->body, ",\"body\":");
		tli_buf_append(&o->body, f.e.content.p, f.e.content.n);
		tli_buf_puts(&o->body, ",\"response\":{\"send_token\":");
		tlh_json_str(&o->body, f.send.p, f.send.n);
		tli_buf_puts(&o->body, ",\"cancel_token\":");
		tlh_json_str(&o->body, f.cancel.p, f.cancel.n);
		tli_buf_puts(&o->body, ",\"future_group_id\":");
		tlh_json_str(&o->body, f.group.p, f.group.n);
		if (f.refresh.n > 0) {
			tli_buf_puts(&o->body, ",\"refresh_token\":");
			tlh_json_str(&o->body, f.refresh.p, f.refresh.n);
		}
		tli_buf_puts(&o->body, "}}");
	}
	tl_message_free(m);
	return true;
}

void
tlg_fut_list(tlg *g, greq *r, gout *o)
{
	char owner[TL_MAX_NAME_LEN + 1];

	tlg_owner(r->user, owner, sizeof(owner));
	tli_buf_reset(&o->body);
	tli_buf_puts(&o->body, "[");
	if (index_each(g, g->fut->t_fut, owner, list_one, o) != TL_OK) {
		tli_buf_reset(&o->body);
		tlg_out_err(o, 503, "M_UNKNOWN", FUT_UNAVAILABLE);
		return;
	}
	tli_buf_puts(&o->body, "]");
	o->status = 200;
}

/* ---- a new state event ---- */

void
tlg_fut_state_changed(tlg *g, gstr room, gstr type, gstr skey)
{
	char so[64];
	gev key;
	tl_entry *es = NULL, last;
	size_t n = 0;
	bool more = true, started = false;

	if (g->fut == NULL) {
		return;
	}
	memset(&key, 0, sizeof(key));
	key.room = room;
	key.type = type;
	key.skey = skey;
	skey_owner(so, sizeof(so), &key);
	while (more &&
	    tl_list(g->cl, g->fut->t_grp, so, 1000, started ? &last : NULL, &es,
	        &n, &more) == TL_OK) {
		for (size_t i = 0; i < n; i++) {
			tl_message *m = NULL;
			gfuture f;
			const char *fid = es[i].id + 1;
			int rv = tl_get(g->cl, g->fut->t_fut, fid, &m);
			if (rv == TL_ENOTFOUND) { /* a stale entry */
				tl_delete(
				    g->cl, g->fut->t_grp, so, es[i].id, 0);
			}
			if (rv == TL_OK &&
			    fut_parse(&f, m->body, m->body_len) == 0 &&
			    f.e.state && f.e.room.n == room.n &&
			    memcmp(f.e.room.p, room.p, room.n) == 0 &&
			    f.e.type.n == type.n &&
			    memcmp(f.e.type.p, type.p, type.n) == 0 &&
			    f.e.skey.n == skey.n &&
			    memcmp(f.e.skey.p, skey.p, skey.n) == 0 &&
			    tl_delete(g->cl, g->fut->t_fut, m->owner, fid, 0) ==
			        TL_OK) {
				drop_side(g, m->owner, fid, &f);
				after_cancel(g, m->owner, &f);
			}
			tl_message_free(m);
		}
		if (n > 0) {
			last = es[n - 1];
			started = true;
		}
		tl_free(es);
		es = NULL;
		if (n == 0) {
			break;
		}
	}
}
