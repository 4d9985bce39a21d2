/*
 * Shared test helpers (see testutil.h).
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

void
tt_clock_init(tt_clock *c, int64_t start_ms)
{
	atomic_store(&c->now, start_ms);
}

void
tt_clock_set(tt_clock *c, int64_t ms)
{
	atomic_store(&c->now, ms);
}

void
tt_clock_advance(tt_clock *c, int64_t ms)
{
	atomic_fetch_add(&c->now, ms);
}

static int64_t
tt_clock_read(void *arg)
{
	return atomic_load(&((tt_clock *) arg)->now);
}

tli_clock
tt_clock_as_tli(tt_clock *c)
{
	tli_clock k = {tt_clock_read, c};
	return k;
}

char *
tt_mkdtemp(const char *tag)
{
	char tmpl[256];
	char *p;

	snprintf(tmpl, sizeof(tmpl), "/tmp/tl-test-%s-XXXXXX", tag);
	p = mkdtemp(tmpl);
	if (p == NULL) {
		perror("mkdtemp");
		abort();
	}
	return strdup(p);
}

void
tt_rmtree(const char *path)
{
	if (path != NULL) {
		(void) tli_rmtree(path);
	}
}

tli_store *
tt_store_open(const char *path, tt_clock *clk)
{
	tli_store_opts o;
	tli_store *s = NULL;
	int rv;

	tli_store_opts_init(&o);
	o.path = path;
	if (clk != NULL) {
		o.clock = tt_clock_as_tli(clk);
	}
	rv = tli_store_open(&s, &o);
	if (rv != TL_OK) {
		fprintf(
		    stderr, "tt_store_open(%s): %s\n", path, tl_strerror(rv));
		abort();
	}
	return s;
}

void
tt_topic(tli_store *s, const char *name, uint32_t buckets)
{
	tli_topic_conf c;
	int rv = tli_topic_conf_init(&c, name);

	if (rv == TL_OK) {
		c.buckets = buckets;
		rv = tli_store_topic_create(s, &c);
	}
	if (rv != TL_OK) {
		fprintf(stderr, "tt_topic(%s): %s\n", name, tl_strerror(rv));
		abort();
	}
}

static void
tt_report(void *arg, const char *problem)
{
	(void) arg;
	fprintf(stderr, "consistency: %s\n", problem);
}

uint64_t
tt_check(tli_store *s)
{
	uint64_t problems = 0;
	int rv = tli_store_check(s, tt_report, NULL, &problems);

	if (rv != TL_OK) {
		fprintf(stderr, "tt_check: %s\n", tl_strerror(rv));
		return UINT64_MAX;
	}
	return problems;
}

tli_op
tt_mkop(tli_op_type type, const char *topic, const char *id, const char *who,
    int64_t ts, uint64_t version)
{
	tli_op op;

	memset(&op, 0, sizeof(op));
	op.type = type;
	op.topic = topic;
	op.id = id;
	op.id_len = id != NULL ? strlen(id) : 0;
	op.who = who;
	op.who_len = who != NULL ? strlen(who) : 0;
	op.ts = ts;
	op.ts_mode = TLI_TS_ABS;
	op.version = version;
	return op;
}

/* Apply op alone (the store must take it); op.err is the outcome. */
static int
tt_apply_one(tli_store *s, tli_op *op, tli_op *out)
{
	if (tli_store_apply(s, op, 1) != TL_OK) {
		abort();
	}
	if (out != NULL) {
		*out = *op;
	}
	return op->err;
}

int
tt_create(tli_store *s, const char *topic, const char *id, const char *owner,
    int64_t ts, const char *body, tli_op *out)
{
	tli_op op = tt_mkop(TLI_OP_CREATE, topic, id, owner, ts, 0);

	op.body = body;
	op.body_len = body != NULL ? strlen(body) : 0;
	return tt_apply_one(s, &op, out);
}

int
tt_op(tli_store *s, tli_op_type type, const char *topic, const char *id,
    const char *who, int64_t ts, uint64_t version, tli_op *out)
{
	tli_op op = tt_mkop(type, topic, id, who, ts, version);

	return tt_apply_one(s, &op, out);
}

uint64_t
tt_rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

uint32_t
tt_rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t) (tt_rng_next(s) % n);
}

size_t
tt_crash_body(const char *id, size_t id_len, char *out)
{
	size_t len = 1 + (size_t) (tli_hash64(id, id_len) % 700);

	for (size_t i = 0; i < len; i++) {
		size_t k = i % (id_len + 1);
		out[i] = k == id_len ? '|' : id[k];
	}
	return len;
}

void
tt_rmtree_free(char **dir)
{
	if (*dir != NULL) {
		tt_rmtree(*dir);
		free(*dir);
		*dir = NULL;
	}
}
