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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "broker.h"
#include "base.h"
#include "conf.h"
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

/* What the loader holds while a file is read: the table being filled. */
typedef struct creds_load {
	tlb_auth *a;
	size_t cap;
} creds_load;

static int
set_pat(tlb_pat *p, const char *v, size_t n, const char *what, char *msg,
    size_t cap)
{
	const char *star = memchr(v, '*', n);

	if (n == 0 || n > TL_MAX_NAME_LEN) {
		snprintf(msg, cap, "%s must be 1 to %d characters", what,
		    TL_MAX_NAME_LEN);
		return TLI_CONF_EVALUE;
	}
	if (star != NULL && star != v + n - 1) {
		snprintf(msg, cap, "%s: '*' may only end a name", what);
		return TLI_CONF_EVALUE;
	}
	memcpy(p->s, v, n);
	p->s[n] = '\0';
	return TLI_CONF_OK;
}

static int
set_hash(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	tlb_principal *p = obj;

	(void) it;
	if (strlen(v) != TLP_SHA256_HEX) {
		snprintf(msg, cap,
		    "token_sha256 must be %d hex digits (timelined "
		    "--hash-token makes it)",
		    TLP_SHA256_HEX);
		return TLI_CONF_EVALUE;
	}
	for (int i = 0; i < TLP_SHA256_LEN; i++) {
		unsigned x;
		if (!isxdigit((unsigned char) v[2 * i]) ||
		    !isxdigit((unsigned char) v[2 * i + 1]) ||
		    sscanf(v + 2 * i, "%2x", &x) != 1) {
			snprintf(msg, cap, "token_sha256 is not hex");
			return TLI_CONF_EVALUE;
		}
		p->hash[i] = (uint8_t) x;
	}
	p->has_hash = true;
	return TLI_CONF_OK;
}

/* A repeatable pattern key: room for one more entry in *n? */
static int
list_room(const tli_conf_item *it, int n, char *msg, size_t cap)
{
	if (n >= it->max) {
		snprintf(msg, cap, "at most %d %s entries per principal",
		    it->max, it->name);
		return TLI_CONF_EVALUE;
	}
	return TLI_CONF_OK;
}

/* group and produce: one more pattern in the item's list. */
static int
add_pattern(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	int *n = (int *) ((char *) obj + it->count_off);
	tlb_pat *pats = (tlb_pat *) ((char *) obj + it->off);
	int rv;

	if ((rv = list_room(it, *n, msg, cap)) == TLI_CONF_OK &&
	    (rv = set_pat(&pats[*n], v, strlen(v), it->name, msg, cap)) ==
	        TLI_CONF_OK) {
		(*n)++;
	}
	return rv;
}

/* "TOPIC:CONSUMER_ID" */
static int
add_consume(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	tlb_principal *p = obj;
	const char *colon = strchr(v, ':');
	tlb_consume *c = &p->consume[p->nconsume];
	int rv;

	if ((rv = list_room(it, p->nconsume, msg, cap)) != TLI_CONF_OK) {
		return rv;
	}
	if (colon == NULL) {
		snprintf(msg, cap,
		    "consume must be TOPIC:CONSUMER_ID (each exact, prefix* or "
		    "*)");
		return TLI_CONF_EVALUE;
	}
	if ((rv = set_pat(&c->topic, v, (size_t) (colon - v), "consume topic",
	         msg, cap)) == TLI_CONF_OK &&
	    (rv = set_pat(&c->consumer, colon + 1, strlen(colon + 1),
	         "consumer id", msg, cap)) == TLI_CONF_OK) {
		p->nconsume++;
	}
	return rv;
}

/* "[principal NAME]": a new principal, unique by name. */
static int
principal_start(void *ctx, const char *name, void **obj, char *msg, size_t cap)
{
	creds_load *ld = ctx;
	tlb_auth *a = ld->a;
	tlb_principal *p;

	if (*name == '\0' || strlen(name) > TL_MAX_NAME_LEN) {
		snprintf(msg, cap,
		    "a principal needs a name of 1 to %d characters",
		    TL_MAX_NAME_LEN);
		return TLI_CONF_EVALUE;
	}
	for (size_t i = 0; i < a->n; i++) {
		if (strcmp(a->v[i].name, name) == 0) {
			snprintf(msg, cap, "principal %s appears twice", name);
			return TLI_CONF_EVALUE;
		}
	}
	if (a->n == TLB_AUTH_MAX_PRINCIPALS) {
		snprintf(
		    msg, cap, "at most %d principals", TLB_AUTH_MAX_PRINCIPALS);
		return TLI_CONF_EVALUE;
	}
	if (a->n == ld->cap) {
		size_t nc = ld->cap ? ld->cap * 2 : 8;
		tlb_principal *nv = tli_realloc(a->v, sizeof(*nv) * nc);
		if (nv == NULL) {
			return TLI_CONF_ENOMEM;
		}
		a->v = nv;
		ld->cap = nc;
	}
	p = &a->v[a->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	*obj = p;
	return TLI_CONF_OK;
}

#define F(f) TLI_CONF_FIELD(tlb_principal, f)

static const tli_conf_item creds_items[] = {
#include "credentials.def"
};

#undef F

const tli_conf_table tlb_creds_table = {
    .prog = "timelined",
    .noun = "key",
    .section = "principal",
    .section_doc = "Starts a principal. NAME (1–128 bytes) appears in "
                   "logs and refusals; it is not a secret. Unique in the "
                   "file.",
    .section_start = principal_start,
    .items = creds_items,
    .nitems = sizeof(creds_items) / sizeof(creds_items[0]),
};

/* Every principal has a token, and no two share one. */
static int
check_table(const tlb_auth *a, const char *path, char *err, size_t cap)
{
	for (size_t i = 0; i < a->n; i++) {
		if (!a->v[i].has_hash) {
			snprintf(err, cap,
			    "%s: principal %s has no token_sha256", path,
			    a->v[i].name);
			return TL_EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (memcmp(a->v[i].hash, a->v[j].hash,
			        TLP_SHA256_LEN) == 0) {
				snprintf(err, cap,
				    "%s: principals %s and %s have the same "
				    "token",
				    path, a->v[j].name, a->v[i].name);
				return TL_EINVAL;
			}
		}
	}
	return TL_OK;
}

int
tlb_auth_load(const char *path, tlb_auth **out, char *err, size_t cap)
{
	creds_load ld = {NULL, 0};
	int rv;

	if ((ld.a = tli_zalloc(sizeof(*ld.a))) == NULL) {
		snprintf(err, cap, "out of memory");
		return TL_ENOMEM;
	}
	switch (tli_conf_file(&tlb_creds_table, &ld, path, err, cap)) {
	case TLI_CONF_OK:
		rv = check_table(ld.a, path, err, cap);
		break;
	case TLI_CONF_EIO:
		rv = TL_EIO;
		break;
	case TLI_CONF_ENOMEM:
		snprintf(err, cap, "out of memory");
		rv = TL_ENOMEM;
		break;
	default:
		rv = TL_EINVAL;
		break;
	}
	if (rv != TL_OK) {
		tli_free(ld.a->v);
		tli_free(ld.a);
		return rv;
	}
	atomic_store(&ld.a->refs, 1);
	*out = ld.a;
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
