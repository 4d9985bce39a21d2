/*
 * The credentials file and the permission checks (see auth.h). The file
 * has the broker configuration's "key = value" lines, grouped in one
 * section per principal:
 *
 *   [principal billing]
 *   token_sha256 = <64 hex digits>   (timelined --hash-token makes it)
 *   group = billing                  producer groups it may act as
 *   produce = invoices               topics it may create messages in
 *   consume = invoices:billing-*     topic:consumer-id it may consume as
 *   admin = no                       topic create/delete, dead letters
 *   max_inflight_creates = 1000      per producer group, 0 = no limit
 *   max_scheduled = 1000000          per producer group, 0 = no limit
 *
 * Names in group, produce and consume are exact, "prefix*" or "*". A
 * token hash may appear only once in the file. Nothing here logs a token
 * or a hash.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "broker.h"
#include "base.h"
#include "htab.h"
#include "timeline/errors.h"

/* ---- patterns and checks ---- */

bool
tlb_pat_match(const tlb_pat *p, const char *s, size_t n)
{
	size_t pl = strlen(p->s);

	if (pl > 0 && p->s[pl - 1] == '*') {
		return n >= pl - 1 && memcmp(p->s, s, pl - 1) == 0;
	}
	return n == pl && memcmp(p->s, s, n) == 0;
}

bool
tlb_may_act_as(const tlb_principal *p, const char *group, size_t n)
{
	for (int i = 0; i < p->ngroups; i++) {
		if (tlb_pat_match(&p->groups[i], group, n)) {
			return true;
		}
	}
	return false;
}

bool
tlb_may_produce(const tlb_principal *p, const char *topic)
{
	for (int i = 0; i < p->nproduce; i++) {
		if (tlb_pat_match(&p->produce[i], topic, strlen(topic))) {
			return true;
		}
	}
	return false;
}

bool
tlb_may_consume(
    const tlb_principal *p, const char *topic, const char *consumer, size_t n)
{
	for (int i = 0; i < p->nconsume; i++) {
		if (tlb_pat_match(&p->consume[i].topic, topic, strlen(topic)) &&
		    tlb_pat_match(&p->consume[i].consumer, consumer, n)) {
			return true;
		}
	}
	return false;
}

const tlb_principal *
tlb_auth_find(const tlb_auth *a, const uint8_t *h)
{
	const tlb_principal *found = NULL;

	/* No early exit: the time taken does not depend on which entry (if
	 * any) matched. */
	for (size_t i = 0; a != NULL && i < a->n; i++) {
		if (tlp_ct_equal(a->v[i].hash, h, TLP_SHA256_LEN) &&
		    found == NULL) {
			found = &a->v[i];
		}
	}
	return found;
}

void
tlb_auth_hold(tlb_auth *a)
{
	atomic_fetch_add(&a->refs, 1);
}

void
tlb_auth_rele(tlb_auth *a)
{
	if (a != NULL && atomic_fetch_sub(&a->refs, 1) == 1) {
		tli_free(a->v);
		tli_free(a);
	}
}

/* ---- the file ---- */

typedef struct parser {
	const char *path;
	int line;
	char *err;
	size_t cap;
} parser;

static int perr(parser *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
perr(parser *ps, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(ps->err, ps->cap, "%s:%d: %s", ps->path, ps->line, msg);
	return TL_EINVAL;
}

static int
set_pat(parser *ps, tlb_pat *p, const char *v, size_t n, const char *what)
{
	const char *star = memchr(v, '*', n);

	if (n == 0 || n > TL_MAX_NAME_LEN) {
		return perr(
		    ps, "%s must be 1 to %d characters", what, TL_MAX_NAME_LEN);
	}
	if (star != NULL && star != v + n - 1) {
		return perr(ps, "%s: '*' may only end a name", what);
	}
	memcpy(p->s, v, n);
	p->s[n] = '\0';
	return TL_OK;
}

static int
set_hash(parser *ps, tlb_principal *p, const char *v)
{
	if (strlen(v) != TLP_SHA256_HEX) {
		return perr(ps,
		    "token_sha256 must be %d hex digits (timelined "
		    "--hash-token makes it)",
		    TLP_SHA256_HEX);
	}
	for (int i = 0; i < TLP_SHA256_LEN; i++) {
		unsigned x;
		if (!isxdigit((unsigned char) v[2 * i]) ||
		    !isxdigit((unsigned char) v[2 * i + 1]) ||
		    sscanf(v + 2 * i, "%2x", &x) != 1) {
			return perr(ps, "token_sha256 is not hex");
		}
		p->hash[i] = (uint8_t) x;
	}
	p->has_hash = true;
	return TL_OK;
}

static int
set_u64(parser *ps, uint64_t *dst, const char *v, const char *what)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || v[0] == '-') {
		return perr(
		    ps, "%s must be a number >= 0, not \"%s\"", what, v);
	}
	*dst = x;
	return TL_OK;
}

static int
list_room(parser *ps, int n, const char *what)
{
	if (n >= TLB_AUTH_MAX_LIST) {
		return perr(ps, "at most %d %s entries per principal",
		    TLB_AUTH_MAX_LIST, what);
	}
	return TL_OK;
}

static int
apply(parser *ps, tlb_principal *p, const char *k, const char *v)
{
	int rv;

	if (strcmp(k, "token_sha256") == 0) {
		return set_hash(ps, p, v);
	}
	if (strcmp(k, "group") == 0) {
		if ((rv = list_room(ps, p->ngroups, "group")) != TL_OK) {
			return rv;
		}
		return set_pat(
		    ps, &p->groups[p->ngroups++], v, strlen(v), "group");
	}
	if (strcmp(k, "produce") == 0) {
		if ((rv = list_room(ps, p->nproduce, "produce")) != TL_OK) {
			return rv;
		}
		return set_pat(ps, &p->produce[p->nproduce++], v, strlen(v),
		    "produce topic");
	}
	if (strcmp(k, "consume") == 0) {
		const char *colon = strchr(v, ':');
		tlb_consume *c;

		if ((rv = list_room(ps, p->nconsume, "consume")) != TL_OK) {
			return rv;
		}
		if (colon == NULL) {
			return perr(ps,
			    "consume must be TOPIC:CONSUMER_ID (each exact, "
			    "prefix* or *)");
		}
		c = &p->consume[p->nconsume++];
		if ((rv = set_pat(ps, &c->topic, v, (size_t) (colon - v),
		         "consume topic")) != TL_OK) {
			return rv;
		}
		return set_pat(ps, &c->consumer, colon + 1, strlen(colon + 1),
		    "consumer id");
	}
	if (strcmp(k, "admin") == 0) {
		if (strcmp(v, "yes") == 0 || strcmp(v, "true") == 0) {
			p->admin = true;
		} else if (strcmp(v, "no") == 0 || strcmp(v, "false") == 0) {
			p->admin = false;
		} else {
			return perr(ps, "admin must be yes or no");
		}
		return TL_OK;
	}
	if (strcmp(k, "max_inflight_creates") == 0) {
		return set_u64(ps, &p->max_inflight_creates, v, k);
	}
	if (strcmp(k, "max_scheduled") == 0) {
		return set_u64(ps, &p->max_scheduled, v, k);
	}
	return perr(ps, "unknown key \"%s\"", k);
}

/* "[principal NAME]" */
static int
section(parser *ps, tlb_auth *a, size_t *cap, char *s)
{
	size_t n = strlen(s);
	char *name;
	tlb_principal *p;

	if (s[n - 1] != ']' || strncmp(s, "[principal", 10) != 0 ||
	    (s[10] != ' ' && s[10] != '\t')) {
		return perr(ps, "expected [principal NAME]");
	}
	s[n - 1] = '\0';
	name = tlb_trim(s + 10);
	if (*name == '\0' || strlen(name) > TL_MAX_NAME_LEN) {
		return perr(ps,
		    "a principal needs a name of 1 to %d characters",
		    TL_MAX_NAME_LEN);
	}
	for (size_t i = 0; i < a->n; i++) {
		if (strcmp(a->v[i].name, name) == 0) {
			return perr(ps, "principal %s appears twice", name);
		}
	}
	if (a->n == TLB_AUTH_MAX_PRINCIPALS) {
		return perr(
		    ps, "at most %d principals", TLB_AUTH_MAX_PRINCIPALS);
	}
	if (a->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 8;
		tlb_principal *nv = tli_alloc(sizeof(*nv) * nc);
		if (nv == NULL) {
			return TL_ENOMEM;
		}
		if (a->n > 0) {
			memcpy(nv, a->v, sizeof(*nv) * a->n);
		}
		tli_free(a->v);
		a->v = nv;
		*cap = nc;
	}
	p = &a->v[a->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	return TL_OK;
}

/* Every principal has a token, and no two share one. */
static int
check_table(parser *ps, const tlb_auth *a)
{
	for (size_t i = 0; i < a->n; i++) {
		if (!a->v[i].has_hash) {
			return perr(ps, "principal %s has no token_sha256",
			    a->v[i].name);
		}
		for (size_t j = 0; j < i; j++) {
			if (memcmp(a->v[i].hash, a->v[j].hash,
			        TLP_SHA256_LEN) == 0) {
				return perr(ps,
				    "principals %s and %s have the same token",
				    a->v[j].name, a->v[i].name);
			}
		}
	}
	return TL_OK;
}

static int
parse(parser *ps, FILE *f, tlb_auth *a)
{
	char line[1024];
	size_t cap = 0;
	int rv;

	while (fgets(line, sizeof(line), f) != NULL) {
		char *k, *v, *eq, *hash;

		ps->line++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			return perr(ps, "line longer than %d characters",
			    (int) sizeof(line) - 2);
		}
		if ((hash = strchr(line, '#')) != NULL) {
			*hash = '\0';
		}
		k = tlb_trim(line);
		if (*k == '\0') {
			continue;
		}
		if (*k == '[') {
			if ((rv = section(ps, a, &cap, k)) != TL_OK) {
				return rv;
			}
			continue;
		}
		if ((eq = strchr(k, '=')) == NULL) {
			return perr(ps, "expected key = value");
		}
		if (a->n == 0) {
			return perr(
			    ps, "a key before the first [principal NAME]");
		}
		*eq = '\0';
		v = tlb_trim(eq + 1);
		k = tlb_trim(k);
		if ((rv = apply(ps, &a->v[a->n - 1], k, v)) != TL_OK) {
			return rv;
		}
	}
	return check_table(ps, a);
}

int
tlb_auth_load(const char *path, tlb_auth **out, char *err, size_t cap)
{
	parser ps = {path, 0, err, cap};
	tlb_auth *a;
	FILE *f;
	int rv;

	if ((f = fopen(path, "r")) == NULL) {
		snprintf(err, cap, "cannot read %s: %s", path, strerror(errno));
		return TL_EIO;
	}
	if ((a = tli_zalloc(sizeof(*a))) == NULL) {
		fclose(f);
		snprintf(err, cap, "out of memory");
		return TL_ENOMEM;
	}
	rv = parse(&ps, f, a);
	fclose(f);
	if (rv != TL_OK) {
		if (rv == TL_ENOMEM) {
			snprintf(err, cap, "out of memory");
		}
		tli_free(a->v);
		tli_free(a);
		return rv;
	}
	atomic_store(&a->refs, 1);
	*out = a;
	return TL_OK;
}

int
tlb_auth_hash_stdin(void)
{
	char tok[4096];
	uint8_t d[TLP_SHA256_LEN];
	char hex[TLP_SHA256_HEX + 1];
	size_t n;

	if (fgets(tok, sizeof(tok), stdin) == NULL) {
		fprintf(stderr,
		    "timelined: --hash-token reads a token on "
		    "standard input\n");
		return 1;
	}
	n = strlen(tok);
	while (n > 0 && (tok[n - 1] == '\n' || tok[n - 1] == '\r')) {
		tok[--n] = '\0';
	}
	if (n == 0 || n > 1024) {
		fprintf(stderr, "timelined: a token is 1 to 1024 bytes\n");
		return 1;
	}
	tlp_sha256(tok, n, d);
	memset(tok, 0, sizeof(tok));
	tlp_sha256_hex(d, hex);
	printf("%s\n", hex);
	return 0;
}

/* ---- creates in flight per producer group ---- */

typedef struct infl {
	tli_hnode hn; /* in tlb_inflight.t, by group */
	uint64_t n;
	size_t len;
	char group[];
} infl;

struct tlb_inflight {
	pthread_mutex_t mtx;
	tli_htab t;
};

int
tlb_inflight_init(tlb_inflight **out)
{
	tlb_inflight *f = tli_zalloc(sizeof(*f));

	if (f == NULL) {
		return TL_ENOMEM;
	}
	pthread_mutex_init(&f->mtx, NULL);
	tli_htab_init(&f->t);
	*out = f;
	return TL_OK;
}

void
tlb_inflight_fini(tlb_inflight *f)
{
	tli_htab_iter it;
	tli_hnode *n, *nx;

	if (f == NULL) {
		return;
	}
	for (n = tli_htab_first(&f->t, &it); n != NULL; n = nx) {
		nx = tli_htab_next(&f->t, &it, n);
		tli_htab_remove(&f->t, n);
		tli_free(TLI_CONTAINER(n, infl, hn));
	}
	tli_htab_fini(&f->t);
	pthread_mutex_destroy(&f->mtx);
	tli_free(f);
}

typedef struct infl_key {
	const char *p;
	size_t n;
} infl_key;

static bool
infl_is(const tli_hnode *n, const void *key)
{
	const infl *e = TLI_CONTAINER(n, infl, hn);
	const infl_key *g = key;

	return e->len == g->n && memcmp(e->group, g->p, g->n) == 0;
}

/* The group's entry, or NULL. With f->mtx held. */
static infl *
infl_find(tlb_inflight *f, const char *g, size_t n)
{
	infl_key key = {g, n};
	tli_hnode *hn = tli_htab_find(&f->t, tli_hash64(g, n), infl_is, &key);

	return hn != NULL ? TLI_CONTAINER(hn, infl, hn) : NULL;
}

bool
tlb_inflight_add(tlb_inflight *f, const char *group, size_t glen, uint64_t n,
    uint64_t limit, uint64_t *now)
{
	infl *e;
	bool ok = false;

	pthread_mutex_lock(&f->mtx);
	e = infl_find(f, group, glen);
	*now = e != NULL ? e->n : 0;
	if (limit != 0 && *now + n > limit) {
		goto out;
	}
	if (e == NULL) {
		if ((e = tli_zalloc(sizeof(*e) + glen + 1)) == NULL) {
			goto out;
		}
		memcpy(e->group, group, glen);
		e->len = glen;
		if (tli_htab_insert(&f->t, &e->hn, tli_hash64(group, glen)) !=
		    TL_OK) {
			tli_free(e);
			goto out;
		}
	}
	e->n += n;
	ok = true;
out:
	pthread_mutex_unlock(&f->mtx);
	return ok;
}

void
tlb_inflight_sub(tlb_inflight *f, const char *group, size_t glen, uint64_t n)
{
	infl *e;

	pthread_mutex_lock(&f->mtx);
	e = infl_find(f, group, glen);
	/* only what tlb_inflight_add counted is taken back */
	TLI_ASSERT(e != NULL && e->n >= n);
	if (e != NULL) {
		e->n = e->n > n ? e->n - n : 0;
		if (e->n == 0) {
			tli_htab_remove(&f->t, &e->hn);
			tli_free(e);
		}
	}
	pthread_mutex_unlock(&f->mtx);
}

/* ---- the broker's table ---- */

int
tlb_auth_start(tlb_broker *b)
{
	char err[400];
	int rv;

	pthread_mutex_init(&b->auth_mtx, NULL);
	if (tlb_inflight_init(&b->inflight) != TL_OK) {
		return -1;
	}
	if (!b->conf.auth) {
		tlb_log(TLB_WARN, "A001",
		    "authentication is off: any client may act as any "
		    "producer group or consumer and administer topics (local "
		    "development only; set auth = on in production)");
		return 0;
	}
	if ((rv = tlb_auth_load(
	         b->conf.credentials, &b->auth, err, sizeof(err))) != TL_OK) {
		tlb_log(TLB_ERROR, "A002", "credentials: %s", err);
		return -1;
	}
	tlb_log(TLB_INFO, "A003",
	    "authentication is on: %zu principal(s) from %s", b->auth->n,
	    b->conf.credentials);
	return 0;
}

tlb_auth *
tlb_auth_current(tlb_broker *b)
{
	tlb_auth *a;

	pthread_mutex_lock(&b->auth_mtx);
	if ((a = b->auth) != NULL) {
		tlb_auth_hold(a);
	}
	pthread_mutex_unlock(&b->auth_mtx);
	return a;
}

bool
tlb_auth_reload(tlb_broker *b)
{
	char err[400];
	tlb_auth *a, *old;

	if (!b->conf.auth) {
		tlb_log(TLB_INFO, "A004",
		    "SIGHUP: authentication is off, nothing to reload");
		return false;
	}
	if (tlb_auth_load(b->conf.credentials, &a, err, sizeof(err)) != TL_OK) {
		tlb_log(TLB_ERROR, "A005",
		    "SIGHUP: credentials not reloaded, the previous ones stay "
		    "in force: %s",
		    err);
		return false;
	}
	pthread_mutex_lock(&b->auth_mtx);
	old = b->auth;
	b->auth = a;
	pthread_mutex_unlock(&b->auth_mtx);
	tlb_auth_rele(old);
	tlb_log(TLB_INFO, "A006", "SIGHUP: %zu principal(s) loaded from %s",
	    a->n, b->conf.credentials);
	return true;
}

void
tlb_auth_stop(tlb_broker *b)
{
	tlb_auth_rele(b->auth);
	b->auth = NULL;
	tlb_inflight_fini(b->inflight);
	b->inflight = NULL;
	pthread_mutex_destroy(&b->auth_mtx);
}
