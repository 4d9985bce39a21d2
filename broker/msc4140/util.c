/*
 * Small pieces of the gateway: UTF-8 checks, random delay ids, the owner
 * name of a user, transaction ids keyed with the installation's secret
 * (HMAC-SHA-256), the stored event format (see gw.h) and the token-bucket
 * rate limits. Logging, buffers, clocks and hashing come from tlbase, URL
 * and JSON string encoding from the HTTP module.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "gw.h"
#include "sha256.h"

bool
tlg_utf8_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *) s;
	size_t i = 0;

	while (i < n) {
		unsigned char c = p[i];
		size_t k;
		uint32_t cp;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (i + k >= n) {
			return false;
		}
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xc0) != 0x80) {
				return false;
			}
			cp = (cp << 6) | (p[i + j] & 0x3f);
		}
		if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
			return false;
		}
		i += k + 1;
	}
	return true;
}

/* A Matrix user id (it starts with '@') up to a producer group's length
 * is its own owner name; any other (Matrix allows 255 bytes) is named by
 * "#sha256:" and the hex SHA-256 of the id. The two kinds cannot meet, a
 * collision of SHA-256 is not in reach, and every stored event also holds
 * the full user id, which lists and lookups check (tlg_ev_mine). */
void
tlg_owner(const char *user, char *out, size_t cap)
{
	size_t n = strlen(user);
	uint8_t d[TLP_SHA256_LEN];
	char hex[TLP_SHA256_HEX + 1];

	if (user[0] == '@' && n <= TL_MAX_NAME_LEN && n < cap) {
		memcpy(out, user, n + 1);
		return;
	}
	tlp_sha256(user, n, d);
	tlp_sha256_hex(d, hex);
	snprintf(out, cap, "#sha256:%s", hex);
}

bool
tlg_owner_legacy(const char *user, char *out, size_t cap)
{
	size_t n = strlen(user);

	if (user[0] == '@' && n <= TL_MAX_NAME_LEN) {
		return false; /* the same name then as now */
	}
	if (n <= TL_MAX_NAME_LEN && n < cap) {
		memcpy(out, user, n + 1);
		return true;
	}
	snprintf(out, cap, "#%016llx%016llx",
	    (unsigned long long) tli_hash64_mixed(user, n, 1),
	    (unsigned long long) tli_hash64_mixed(user, n, 2));
	return true;
}

bool
tlg_ev_mine(const gev *e, const char *user)
{
	return e->user.n == strlen(user) &&
	    memcmp(e->user.p, user, e->user.n) == 0;
}

/* ---- keyed names ---- */

/* The MAC of a delay_id: 6 bytes of HMAC-SHA-256 of its random part,
 * as 8 base64url characters. */
#define ID_RANDOM 24 /* characters: 18 random bytes */
#define ID_LEN (ID_RANDOM + 8)

static void
id_mac(const tlg *g, const char *rnd, char out[9])
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
	    "vwxyz0123456789-_";
	uint8_t d[TLP_SHA256_LEN], msg[10 + ID_RANDOM];

	memcpy(msg, "delay_id:", 9);
	memcpy(msg + 9, rnd, ID_RANDOM);
	tlp_hmac_sha256(g->secret, sizeof(g->secret), msg, 9 + ID_RANDOM, d);
	for (int i = 0; i < 2; i++) { /* 3 bytes, 4 characters */
		uint32_t v = (uint32_t) d[3 * i] << 16 |
		    (uint32_t) d[3 * i + 1] << 8 | d[3 * i + 2];
		for (int k = 0; k < 4; k++) {
			out[4 * i + k] = b64[(v >> (18 - 6 * k)) & 63];
		}
	}
	out[8] = '\0';
}

int
tlg_delay_id_new(const tlg *g, char *out)
{
	if (tli_random_b64(out, ID_RANDOM * 3 / 4) != 0) {
		return -1;
	}
	id_mac(g, out, out + ID_RANDOM);
	return 0;
}

bool
tlg_delay_id_ours(const tlg *g, const char *id, size_t n)
{
	char mac[9];

	if (n != ID_LEN) {
		return false;
	}
	id_mac(g, id, mac);
	return tlp_ct_equal(
	    (const uint8_t *) mac, (const uint8_t *) id + ID_RANDOM, 8);
}

void
tlg_txn_id(const tlg *g, const char *delay_id, char *out, size_t cap)
{
	uint8_t d[TLP_SHA256_LEN];
	char hex[TLP_SHA256_HEX + 1];

	tlp_hmac_sha256(
	    g->secret, sizeof(g->secret), delay_id, strlen(delay_id), d);
	tlp_sha256_hex(d, hex);
	snprintf(out, cap, "msc4140.%s", hex);
}

/* ---- the stored event ---- */

static int64_t
to_i64(gstr v)
{
	char tmp[32];

	if (v.n == 0 || v.n >= sizeof(tmp)) {
		return 0;
	}
	memcpy(tmp, v.p, v.n);
	tmp[v.n] = '\0';
	return strtoll(tmp, NULL, 10);
}

/* The lines of the stored form: where each value goes. */
#define EV_STR(name, f)                     \
	{                                   \
		name, offsetof(gev, f), 's' \
	}
#define EV_NUM(name, f)                     \
	{                                   \
		name, offsetof(gev, f), 'n' \
	}
static const struct {
	const char *name;
	size_t off;
	char kind; /* 's' a gstr, 'n' an int64_t, 'i' an int */
} ev_fields[] = {
    EV_STR("user", user),
    EV_STR("room", room),
    EV_STR("type", type),
    EV_STR("skey", skey),
    EV_STR("query", query),
    EV_NUM("delay", delay),
    EV_NUM("fin", fin),
    EV_NUM("since", since),
    EV_STR("outcome", outcome),
    EV_STR("reason", reason),
    EV_STR("event_id", event_id),
    {"status", offsetof(gev, status), 'i'},
};

static void
ev_field(gev *e, gstr k, gstr v, int64_t *errlen)
{
	char *base = (char *) e;

	if (k.n == 6 && memcmp(k.p, "errlen", 6) == 0) {
		*errlen = to_i64(v);
		return;
	}
	for (size_t i = 0; i < sizeof(ev_fields) / sizeof(ev_fields[0]); i++) {
		const char *f = ev_fields[i].name;
		if (strlen(f) != k.n || memcmp(k.p, f, k.n) != 0) {
			continue;
		}
		if (ev_fields[i].kind == 's') {
			memcpy(base + ev_fields[i].off, &v, sizeof(v));
		} else if (ev_fields[i].kind == 'n') {
			int64_t x = to_i64(v);
			memcpy(base + ev_fields[i].off, &x, sizeof(x));
		} else {
			int x = (int) to_i64(v);
			memcpy(base + ev_fields[i].off, &x, sizeof(x));
		}
		e->state = e->state || ev_fields[i].off == offsetof(gev, skey);
		return;
	}
}

int
tlg_ev_parse(gev *e, const void *body, size_t len)
{
	const char *p = body, *end = p + len;
	int64_t errlen = 0;

	memset(e, 0, sizeof(*e));
	if (len < 3 || (memcmp(p, "M1\n", 3) != 0 && memcmp(p, "F1\n", 3))) {
		return -1;
	}
	e->final = p[0] == 'F';
	p += 3;
	for (;;) {
		const char *nl = memchr(p, '\n', (size_t) (end - p));
		const char *tab;
		gstr k, v;
		if (nl == NULL) {
			return -1;
		}
		if (nl == p) {
			p++;
			break;
		}
		if ((tab = memchr(p, '\t', (size_t) (nl - p))) == NULL) {
			return -1;
		}
		k = (gstr){p, (size_t) (tab - p)};
		v = (gstr){tab + 1, (size_t) (nl - tab - 1)};
		ev_field(e, k, v, &errlen);
		p = nl + 1;
	}
	if (errlen < 0 || errlen > end - p) {
		return -1;
	}
	e->err = (gstr){p, (size_t) errlen};
	p += errlen;
	e->content = (gstr){p, (size_t) (end - p)};
	return 0;
}

static void
line(tli_buf *b, const char *k, gstr v)
{
	tli_buf_puts(b, k);
	tli_buf_append(b, "\t", 1);
	tli_buf_append(b, v.p, v.n);
	tli_buf_append(b, "\n", 1);
}

/* The event lines (no magic, no terminating empty line). */
void
tlg_ev_header(tli_buf *b, const gev *e)
{
	line(b, "user", e->user);
	line(b, "room", e->room);
	line(b, "type", e->type);
	if (e->state) {
		line(b, "skey", e->skey);
	}
	tli_buf_printf(b, "delay\t%lld\n", (long long) e->delay);
	if (e->query.n > 0) {
		line(b, "query", e->query);
	}
}

/* ---- rate limits ---- */

static grate *
rate_slot(tlg *g, const char *kind, const char *key)
{
	uint64_t h =
	    tli_hash64_mixed(key, strlen(key), tli_hash64_mixed(kind, 1, 7));
	grate *r = &g->rate[h % TLG_RATE_SLOTS];

	/* A collision takes the slot over: the table forgets, never blocks
	 * a stranger for long. */
	if (r->key != h) {
		memset(r, 0, sizeof(*r));
		r->key = h;
		r->tokens = -1;
	}
	return r;
}

int64_t
tlg_rate_take(
    tlg *g, const char *kind, const char *key, double rate, double burst)
{
	int64_t now = tli_mono_ms(), wait = 0;
	grate *r;

	if (!g->c.rate_limits) {
		return 0;
	}
	pthread_mutex_lock(&g->rate_mtx);
	r = rate_slot(g, kind, key);
	if (r->tokens < 0) {
		r->tokens = burst;
		r->at = now;
	}
	r->tokens += (double) (now - r->at) * rate / 1000.0;
	if (r->tokens > burst) {
		r->tokens = burst;
	}
	r->at = now;
	if (r->tokens >= 1.0) {
		r->tokens -= 1.0;
	} else {
		wait = (int64_t) ((1.0 - r->tokens) * 1000.0 / rate) + 1;
	}
	pthread_mutex_unlock(&g->rate_mtx);
	return wait;
}

#define STORM_MISSES 5
#define STORM_BLOCK_MS 10000

void
tlg_storm_miss(tlg *g, const char *ip)
{
	int64_t now = tli_mono_ms();
	grate *r;

	if (!g->c.rate_limits) {
		return;
	}
	pthread_mutex_lock(&g->rate_mtx);
	r = rate_slot(g, "storm", ip);
	if (r->at + STORM_BLOCK_MS < now) {
		r->misses = 0; /* misses older than the window are forgotten */
	}
	r->at = now;
	if (++r->misses >= STORM_MISSES) {
		r->blocked_until = now + STORM_BLOCK_MS;
		r->misses = 0;
	}
	pthread_mutex_unlock(&g->rate_mtx);
}

int64_t
tlg_storm_blocked(tlg *g, const char *ip)
{
	int64_t now = tli_mono_ms(), left = 0;
	grate *r;

	if (!g->c.rate_limits) {
		return 0;
	}
	pthread_mutex_lock(&g->rate_mtx);
	r = rate_slot(g, "storm", ip);
	if (r->blocked_until > now) {
		left = r->blocked_until - now;
	}
	pthread_mutex_unlock(&g->rate_mtx);
	return left;
}
