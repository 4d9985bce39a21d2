/*
 * Tests of the store's read paths and batching: the timeline scan pages
 * through every due message exactly once in (ts, id) order and keeps buckets
 * apart; operations of one submission see each other and form one group
 * commit, while concurrent submitters are grouped; the consumer and owner
 * scans return exactly their own messages; the status counts and totals are
 * exact (also after leases run out and after a reopen); and the consistency
 * checker notices an index entry or a record removed behind the store's back.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <rocksdb/c.h>

#include "testutil.h"
#include "tlcheck.h"

#define NOW0 INT64_C(10000000)
#define LEASE_MS INT64_C(30000)

/* What the test believes about one message. */
typedef struct tmsg {
	char id[TL_MAX_ID_LEN + 1];
	size_t id_len;
	const char *owner;
	const char *consumer; /* lock_consumer, NULL when unlocked */
	int64_t ts;
	uint64_t version;
	uint32_t bucket;
	bool gone;
} tmsg;

/* ---- small helpers ---- */

static size_t *
shuffled(size_t n, uint64_t *rng)
{
	size_t *ix = calloc(n, sizeof(*ix));

	cr_assert_not_null(ix);
	for (size_t i = 0; i < n; i++) {
		ix[i] = i;
	}
	for (size_t i = n; i > 1; i--) {
		size_t j = tt_rng_next(rng) % i;
		size_t t = ix[i - 1];
		ix[i - 1] = ix[j];
		ix[j] = t;
	}
	return ix;
}

/* memcmp order, a shorter prefix first: the order of the raw key bytes. */
static int
id_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	int c = memcmp(a, b, n);

	if (c != 0) {
		return c;
	}
	return (alen > blen) - (alen < blen);
}

static int
tmsg_cmp_ts_id(const void *pa, const void *pb)
{
	const tmsg *a = *(const tmsg *const *) pa;
	const tmsg *b = *(const tmsg *const *) pb;

	if (a->ts != b->ts) {
		return a->ts < b->ts ? -1 : 1;
	}
	return id_cmp(a->id, a->id_len, b->id, b->id_len);
}

static int
tmsg_cmp_id(const void *pa, const void *pb)
{
	const tmsg *a = *(const tmsg *const *) pa;
	const tmsg *b = *(const tmsg *const *) pb;

	return id_cmp(a->id, a->id_len, b->id, b->id_len);
}

static void
tmsg_set_id(tmsg *m, const char *id)
{
	m->id_len = strlen(id);
	memcpy(m->id, id, m->id_len + 1);
}

static void
op_fill(tli_op *op, tli_op_type type, const char *topic, const char *id,
    size_t id_len, const char *who, int64_t ts, uint64_t version)
{
	memset(op, 0, sizeof(*op));
	op->type = type;
	op->topic = topic;
	op->id = id;
	op->id_len = id_len;
	op->who = who;
	op->who_len = who != NULL ? strlen(who) : 0;
	op->ts = ts;
	op->ts_mode = TLI_TS_ABS;
	op->version = version;
}

static void
op_fill_msg(tli_op *op, tli_op_type type, const char *topic, const tmsg *m,
    const char *who, int64_t ts, uint64_t version)
{
	op_fill(op, type, topic, m->id, m->id_len, who, ts, version);
}

static void
apply_ok(tli_store *s, tli_op *ops, size_t n)
{
	int rv = tli_store_apply(s, ops, n);

	TL_PASS(rv, "tli_store_apply");
}

/* Apply one op on a model message and check it succeeds. */
static tli_op
apply_one(tli_store *s, tli_op_type type, const char *topic, const tmsg *m,
    const char *who, int64_t ts, uint64_t version)
{
	tli_op op;

	op_fill_msg(&op, type, topic, m, who, ts, version);
	apply_ok(s, &op, 1);
	TL_PASS(op.err, "op %d on %.*s", (int) type, (int) m->id_len, m->id);
	return op;
}

static uint64_t
stats_batches(tli_store *s)
{
	tli_store_stats st;

	tli_store_get_stats(s, &st);
	return st.batches;
}

static uint64_t
stats_ops(tli_store *s)
{
	tli_store_stats st;

	tli_store_get_stats(s, &st);
	return st.ops;
}

/* Create every model message, in random order, in submissions of up to
 * TL_MAX_BATCH operations (the first one full). */
static void
create_all(tli_store *s, const char *topic, tmsg *m, size_t n, uint32_t buckets,
    uint64_t *rng)
{
	size_t *ix = shuffled(n, rng);
	tli_op *ops = calloc(TL_MAX_BATCH, sizeof(*ops));
	size_t done = 0;
	bool first = true;

	cr_assert_not_null(ops);
	while (done < n) {
		size_t k = first ? TL_MAX_BATCH : 1 + tt_rng_below(rng, 1500);

		first = false;
		if (k > n - done) {
			k = n - done;
		}
		for (size_t i = 0; i < k; i++) {
			tmsg *x = &m[ix[done + i]];

			op_fill_msg(&ops[i], TLI_OP_CREATE, topic, x, x->owner,
			    x->ts, 0);
			ops[i].body = "body";
			ops[i].body_len = 4;
		}
		apply_ok(s, ops, k);
		for (size_t i = 0; i < k; i++) {
			tmsg *x = &m[ix[done + i]];

			TL_PASS(
			    ops[i].err, "create %.*s", (int) x->id_len, x->id);
			cr_assert_eq(ops[i].new_version, 1);
			cr_assert_eq(ops[i].new_ts, x->ts);
			x->version = 1;
			x->bucket = tli_bucket_of(x->id, x->id_len, buckets);
			cr_assert_eq(ops[i].bucket, x->bucket,
			    "create reported bucket %u, tli_bucket_of says %u",
			    ops[i].bucket, x->bucket);
		}
		done += k;
	}
	free(ops);
	free(ix);
}

/* ---- paging through a scan ---- */

enum scan_kind { SCAN_DUE, SCAN_CONSUMER, SCAN_OWNER };

typedef struct scan_spec {
	enum scan_kind kind;
	const char *topic;
	uint32_t bucket;
	int64_t up_to;
	const char *who;
} scan_spec;

static int
scan_page(tli_store *s, const scan_spec *sp, const tli_cursor *cur,
    tli_entry *out, size_t max, size_t *n, bool *more)
{
	switch (sp->kind) {
	case SCAN_DUE:
		return tli_store_scan_due(s, sp->topic, sp->bucket, sp->up_to,
		    cur, out, max, n, more);
	case SCAN_CONSUMER:
		return tli_store_scan_consumer(s, sp->topic, sp->who,
		    strlen(sp->who), cur, out, max, n, more);
	case SCAN_OWNER:
		return tli_store_scan_owner(s, sp->topic, sp->who,
		    strlen(sp->who), cur, out, max, n, more);
	}
	return TL_EINVAL;
}

/* Page through a whole scan with the cursor. Every page but the last must
 * say more, the last must not, and no page may be empty after a "more". At
 * most cap entries are expected; more is a failure. */
static size_t
scan_all(
    tli_store *s, const scan_spec *sp, size_t page, tli_entry *out, size_t cap)
{
	tli_entry *buf = calloc(page, sizeof(*buf));
	tli_cursor cur;
	size_t total = 0;
	size_t pages = 0;

	cr_assert_not_null(buf);
	memset(&cur, 0, sizeof(cur));
	for (;;) {
		size_t n = 0;
		bool more = false;
		int rv = scan_page(s, sp, &cur, buf, page, &n, &more);

		TL_PASS(rv, "scan");
		cr_assert_leq(n, page, "page of %zu entries, max %zu", n, page);
		if (pages > 0) {
			cr_assert_gt(n, 0,
			    "page %zu is empty although the "
			    "previous page said more",
			    pages);
		}
		cr_assert_leq(total + n, cap,
		    "scan returned more than the %zu expected entries", cap);
		memcpy(out + total, buf, n * sizeof(*buf));
		total += n;
		pages++;
		if (!more) {
			break;
		}
		cr_assert_gt(n, 0, "an empty first page says more");
		tli_cursor_from_entry(&cur, &buf[n - 1]);
	}
	free(buf);
	return total;
}

enum { CHK_BUCKET = 1, CHK_LOCKED = 2 };

/* The scan result must be exactly the expected messages, in that order,
 * with their current ts and version (and bucket, locked if asked). */
static void
expect_entries(
    const tli_entry *e, size_t n, tmsg *const *want, size_t nwant, int checks)
{
	cr_assert_eq(
	    n, nwant, "scan returned %zu entries, expected %zu", n, nwant);
	for (size_t i = 0; i < n; i++) {
		const tmsg *w = want[i];

		cr_assert(e[i].id_len == w->id_len &&
		        memcmp(e[i].id, w->id, w->id_len) == 0,
		    "entry %zu: got id '%.*s' ts %lld, expected '%.*s' ts %lld",
		    i, (int) e[i].id_len, e[i].id, (long long) e[i].ts,
		    (int) w->id_len, w->id, (long long) w->ts);
		cr_assert_eq(e[i].ts, w->ts, "entry %zu (%.*s): ts", i,
		    (int) w->id_len, w->id);
		cr_assert_eq(e[i].version, w->version,
		    "entry %zu (%.*s): version %llu, expected %llu", i,
		    (int) w->id_len, w->id, (unsigned long long) e[i].version,
		    (unsigned long long) w->version);
		if (checks & CHK_BUCKET) {
			cr_assert_eq(
			    e[i].bucket, w->bucket, "entry %zu: bucket", i);
		}
		if (checks & CHK_LOCKED) {
			cr_assert_eq(e[i].locked, w->consumer != NULL,
			    "entry %zu (%.*s): locked", i, (int) w->id_len,
			    w->id);
		}
	}
}

/* Pointers to the live model messages that pass `keep`, sorted by cmp. */
static tmsg **
select_sorted(tmsg *m, size_t n, bool (*keep)(const tmsg *, const void *),
    const void *arg, int (*cmp)(const void *, const void *), size_t *nout)
{
	tmsg **p = calloc(n + 1, sizeof(*p));
	size_t k = 0;

	cr_assert_not_null(p);
	for (size_t i = 0; i < n; i++) {
		if (!m[i].gone && (keep == NULL || keep(&m[i], arg))) {
			p[k++] = &m[i];
		}
	}
	qsort(p, k, sizeof(*p), cmp);
	*nout = k;
	return p;
}

static bool
keep_up_to(const tmsg *m, const void *arg)
{
	return m->ts <= *(const int64_t *) arg;
}

static bool
keep_bucket(const tmsg *m, const void *arg)
{
	return m->bucket == *(const uint32_t *) arg;
}

static bool
keep_owner(const tmsg *m, const void *arg)
{
	return strcmp(m->owner, arg) == 0;
}

static bool
keep_consumer(const tmsg *m, const void *arg)
{
	return m->consumer != NULL && strcmp(m->consumer, arg) == 0;
}

/* Check a full scan against the model. */
static void
expect_scan(tli_store *s, const scan_spec *sp, size_t page, tmsg *m, size_t n,
    bool (*keep)(const tmsg *, const void *), const void *arg,
    int (*cmp)(const void *, const void *), int checks)
{
	size_t nwant;
	tmsg **want = select_sorted(m, n, keep, arg, cmp, &nwant);
	tli_entry *got = calloc(nwant + 1, sizeof(*got));
	size_t ngot;

	cr_assert_not_null(got);
	ngot = scan_all(s, sp, page, got, nwant);
	expect_entries(got, ngot, want, nwant, checks);
	free(got);
	free(want);
}

/* ---- fixtures ---- */

typedef struct env {
	char *dir;
	tt_clock clk;
	tli_store *s;
} env;

static void
env_open(env *e, const char *tag, int64_t now)
{
	e->dir = tt_mkdtemp(tag);
	tt_clock_init(&e->clk, now);
	e->s = tt_store_open(e->dir, &e->clk);
}

static void
env_reopen(env *e)
{
	tli_store_close(e->s);
	e->s = tt_store_open(e->dir, &e->clk);
}

static void
env_fini(env *e)
{
	tli_store_close(e->s);
	tt_rmtree(e->dir);
	free(e->dir);
}

/* 5000 messages with ids of varied lengths (prefixes of each other, some
 * starting with a byte above 0x7f) and ts drawn from 200 distinct values. */
#define NBIG 5000

static tmsg *
make_big(uint64_t *rng)
{
	tmsg *m = calloc(NBIG, sizeof(*m));

	cr_assert_not_null(m);
	for (size_t i = 0; i < NBIG; i++) {
		char id[32];

		snprintf(
		    id, sizeof(id), "%cm%zu", i % 7 == 3 ? '\xc3' : 'm', i);
		tmsg_set_id(&m[i], id);
		m[i].owner = "g";
		m[i].ts = 1000 + 37 * (int64_t) tt_rng_below(rng, 200);
	}
	return m;
}

static int64_t
max_ts(const tmsg *m, size_t n)
{
	int64_t mx = INT64_MIN;

	for (size_t i = 0; i < n; i++) {
		if (m[i].ts > mx) {
			mx = m[i].ts;
		}
	}
	return mx;
}

/* ---- 1. timeline order ---- */

Test(scan, due_pages_return_every_message_once_in_ts_then_id_order)
{
	uint64_t rng = 0x5eed0001;
	env e;
	tmsg *m = make_big(&rng);
	int64_t top = max_ts(m, NBIG);
	scan_spec sp = {SCAN_DUE, "t", 0, top, NULL};
	tli_entry *got = calloc(NBIG, sizeof(*got));
	size_t n;

	env_open(&e, "scan-order", NOW0);
	tt_topic(e.s, "t", 1);
	create_all(e.s, "t", m, NBIG, 1, &rng);

	n = scan_all(e.s, &sp, 97, got, NBIG);
	cr_assert_eq(n, NBIG, "scan returned %zu of %d messages", n, NBIG);
	for (size_t i = 1; i < n; i++) {
		cr_assert(got[i - 1].ts < got[i].ts ||
		        (got[i - 1].ts == got[i].ts &&
		            id_cmp(got[i - 1].id, got[i - 1].id_len, got[i].id,
		                got[i].id_len) < 0),
		    "entries %zu and %zu out of (ts, id) order", i - 1, i);
	}
	/* Strictly increasing (ts, id) plus the exact list: each exactly once.
	 */
	expect_scan(e.s, &sp, 97, m, NBIG, NULL, NULL, tmsg_cmp_ts_id,
	    CHK_BUCKET | CHK_LOCKED);
	/* One page holding everything says there is nothing more. */
	expect_scan(e.s, &sp, NBIG, m, NBIG, NULL, NULL, tmsg_cmp_ts_id, 0);

	free(got);
	free(m);
	env_fini(&e);
}

Test(scan, due_stops_at_up_to_inclusive)
{
	uint64_t rng = 0x5eed0002;
	env e;
	tmsg *m = make_big(&rng);
	int64_t lo = INT64_MAX;
	int64_t cuts[6];

	for (size_t i = 0; i < NBIG; i++) {
		lo = m[i].ts < lo ? m[i].ts : lo;
	}
	env_open(&e, "scan-upto", NOW0);
	tt_topic(e.s, "t", 1);
	create_all(e.s, "t", m, NBIG, 1, &rng);

	cuts[0] = lo - 1;              /* nothing */
	cuts[1] = lo;                  /* the first timestamp only */
	cuts[2] = m[NBIG / 2].ts;      /* an existing ts: all of it */
	cuts[3] = m[NBIG / 2].ts - 1;  /* just before it */
	cuts[4] = 1000 + 37 * 100 + 5; /* between two timestamps */
	cuts[5] = max_ts(m, NBIG) - 1;
	for (size_t c = 0; c < 6; c++) {
		scan_spec sp = {SCAN_DUE, "t", 0, cuts[c], NULL};

		expect_scan(e.s, &sp, 97, m, NBIG, keep_up_to, &cuts[c],
		    tmsg_cmp_ts_id, CHK_BUCKET);
	}

	free(m);
	env_fini(&e);
}

Test(scan, due_scan_of_a_bucket_holds_only_that_buckets_messages)
{
	uint64_t rng = 0x5eed0003;
	env e;
	tmsg *m = make_big(&rng);
	tli_entry *got = calloc(NBIG, sizeof(*got));
	size_t total = 0;

	env_open(&e, "scan-buckets", NOW0);
	tt_topic(e.s, "t8", 8);
	create_all(e.s, "t8", m, NBIG, 8, &rng);

	for (uint32_t b = 0; b < 8; b++) {
		scan_spec sp = {SCAN_DUE, "t8", b, TL_TS_MAX, NULL};
		size_t nwant;
		tmsg **want = select_sorted(
		    m, NBIG, keep_bucket, &b, tmsg_cmp_ts_id, &nwant);
		size_t n = scan_all(e.s, &sp, 97, got, NBIG);

		cr_assert_gt(nwant, 0, "bucket %u should not be empty", b);
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(tli_bucket_of(got[i].id, got[i].id_len, 8),
			    b, "message %.*s of bucket %u found in bucket %u",
			    (int) got[i].id_len, got[i].id,
			    tli_bucket_of(got[i].id, got[i].id_len, 8), b);
		}
		expect_entries(got, n, want, nwant, CHK_BUCKET);
		total += n;
		free(want);
	}
	cr_assert_eq(
	    total, NBIG, "the buckets together hold %zu of %d", total, NBIG);

	free(got);
	free(m);
	env_fini(&e);
}

/* ---- 2. batches ---- */

static void
get_ok(tli_store *s, const char *topic, const char *id, tli_msg *out)
{
	int rv = tli_store_get(s, topic, id, strlen(id), out);

	TL_PASS(rv, "get %s", id);
}

Test(scan, batch_lease_sees_create_of_the_same_batch)
{
	env e;
	tli_op ops[2];
	tli_msg msg;
	uint64_t b0, o0;

	env_open(&e, "scan-b1", NOW0);
	tt_topic(e.s, "t", 0);
	b0 = stats_batches(e.s);
	o0 = stats_ops(e.s);
	/* ts == now: due at once. */
	op_fill(&ops[0], TLI_OP_CREATE, "t", "x", 1, "g", NOW0, 0);
	op_fill(&ops[1], TLI_OP_LEASE, "t", "x", 1, "c", NOW0 + LEASE_MS, 1);
	apply_ok(e.s, ops, 2);
	TL_PASS(ops[0].err);
	cr_assert_eq(ops[0].new_version, 1);
	TL_PASS(ops[1].err);
	cr_assert_eq(ops[1].new_version, 2);
	cr_assert_eq(ops[1].new_ts, NOW0 + LEASE_MS);
	cr_assert_eq(ops[1].deliveries, 1);
	cr_assert_eq(stats_batches(e.s) - b0, 1,
	    "one submission was split over several batches");
	cr_assert_eq(stats_ops(e.s) - o0, 2);

	get_ok(e.s, "t", "x", &msg);
	cr_assert_eq(msg.version, 2);
	cr_assert_eq(msg.ts, NOW0 + LEASE_MS);
	cr_assert_eq(msg.deliveries, 1);
	cr_assert_str_eq(msg.consumer, "c");
	tli_msg_fini(&msg);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

Test(scan, batch_second_create_of_the_same_id_is_eexists)
{
	env e;
	tli_op ops[2];
	tli_msg msg;
	tli_topic_info ti;
	uint64_t b0;

	env_open(&e, "scan-b2", NOW0);
	tt_topic(e.s, "t", 0);
	b0 = stats_batches(e.s);
	op_fill(&ops[0], TLI_OP_CREATE, "t", "x", 1, "g", NOW0 + 50, 0);
	ops[0].body = "one";
	ops[0].body_len = 3;
	op_fill(&ops[1], TLI_OP_CREATE, "t", "x", 1, "g", NOW0 + 90, 0);
	ops[1].body = "two!";
	ops[1].body_len = 4;
	apply_ok(e.s, ops, 2);
	TL_PASS(ops[0].err);
	TL_FAIL(ops[1].err, TL_EEXISTS);
	cr_assert_eq(stats_batches(e.s) - b0, 1);

	get_ok(e.s, "t", "x", &msg);
	cr_assert_eq(msg.version, 1);
	cr_assert_eq(msg.ts, NOW0 + 50);
	cr_assert_eq(msg.body_len, 3);
	cr_assert_eq(memcmp(msg.body, "one", 3), 0);
	tli_msg_fini(&msg);
	TL_PASS(tli_store_topic_get(e.s, "t", &ti));
	cr_assert_eq(ti.messages, 1);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

Test(scan, batch_create_then_owner_delete_leaves_nothing)
{
	env e;
	tli_op ops[4];
	tli_msg msg;
	tli_topic_info ti;
	tli_counts tot;
	tli_entry ent[4];
	tli_cursor cur;
	size_t n = 99;
	bool more = true;
	uint64_t b0;

	env_open(&e, "scan-b3", NOW0);
	tt_topic(e.s, "t", 1);
	b0 = stats_batches(e.s);
	op_fill(&ops[0], TLI_OP_CREATE, "t", "x", 1, "g", NOW0 - 5, 0);
	op_fill(&ops[1], TLI_OP_DELETE_OWNED, "t", "x", 1, "g", 0, 0);
	op_fill(&ops[2], TLI_OP_CREATE, "t", "y", 1, "g", NOW0 + 5, 0);
	op_fill(&ops[3], TLI_OP_DELETE_OWNED, "t", "y", 1, "g", 0, 1);
	apply_ok(e.s, ops, 4);
	for (int i = 0; i < 4; i++) {
		TL_PASS(ops[i].err, "op %d", i);
	}
	cr_assert_eq(stats_batches(e.s) - b0, 1);

	TL_FAIL(tli_store_get(e.s, "t", "x", 1, &msg), TL_ENOTFOUND);
	TL_FAIL(tli_store_get(e.s, "t", "y", 1, &msg), TL_ENOTFOUND);
	memset(&cur, 0, sizeof(cur));
	TL_PASS(tli_store_scan_due(
	    e.s, "t", 0, TL_TS_MAX, &cur, ent, 4, &n, &more));
	cr_assert_eq(n, 0, "deleted messages still on the timeline");
	cr_assert_not(more);
	TL_PASS(tli_store_totals(e.s, "t", &tot));
	cr_assert_eq(tot.available + tot.waiting + tot.processing, 0);
	TL_PASS(tli_store_topic_get(e.s, "t", &ti));
	cr_assert_eq(ti.messages, 0);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

Test(scan, batch_second_lease_of_the_same_message_fails)
{
	env e;
	tli_op ops[2];
	tli_msg msg;
	uint64_t b0;

	env_open(&e, "scan-b4", NOW0);
	tt_topic(e.s, "t", 0);
	TL_PASS(tt_create(e.s, "t", "x", "g", NOW0 - 10, "b", NULL));
	TL_PASS(tt_create(e.s, "t", "y", "g", NOW0 - 10, "b", NULL));

	/* With the version: the first lease made it 2, so the second sees
	 * TL_EVERSION (checked before the lease state). */
	b0 = stats_batches(e.s);
	op_fill(&ops[0], TLI_OP_LEASE, "t", "x", 1, "c1", NOW0 + LEASE_MS, 1);
	op_fill(&ops[1], TLI_OP_LEASE, "t", "x", 1, "c2", NOW0 + LEASE_MS, 1);
	apply_ok(e.s, ops, 2);
	TL_PASS(ops[0].err);
	TL_FAIL(ops[1].err, TL_EVERSION);
	cr_assert_eq(stats_batches(e.s) - b0, 1);

	/* With "any version": the second meets an active lease. */
	b0 = stats_batches(e.s);
	op_fill(&ops[0], TLI_OP_LEASE, "t", "y", 1, "c1", NOW0 + LEASE_MS, 0);
	op_fill(&ops[1], TLI_OP_LEASE, "t", "y", 1, "c2", NOW0 + LEASE_MS, 0);
	apply_ok(e.s, ops, 2);
	TL_PASS(ops[0].err);
	TL_FAIL(ops[1].err, TL_ELEASED);
	cr_assert_eq(stats_batches(e.s) - b0, 1);

	get_ok(e.s, "t", "x", &msg);
	cr_assert_str_eq(msg.consumer, "c1");
	cr_assert_eq(msg.version, 2);
	cr_assert_eq(msg.deliveries, 1);
	tli_msg_fini(&msg);
	get_ok(e.s, "t", "y", &msg);
	cr_assert_str_eq(msg.consumer, "c1");
	cr_assert_eq(msg.version, 2);
	cr_assert_eq(msg.deliveries, 1);
	tli_msg_fini(&msg);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

Test(scan, batch_failed_op_changes_nothing_later_ops_see)
{
	env e;
	tli_op ops[4];
	tli_msg msg;

	env_open(&e, "scan-b5", NOW0);
	tt_topic(e.s, "t", 0);

	/* The failed create did not touch the version the lease expects. */
	op_fill(&ops[0], TLI_OP_CREATE, "t", "a", 1, "g", NOW0 - 1, 0);
	op_fill(&ops[1], TLI_OP_CREATE, "t", "a", 1, "g", NOW0 - 1, 0);
	op_fill(&ops[2], TLI_OP_LEASE, "t", "a", 1, "c", NOW0 + LEASE_MS, 1);
	apply_ok(e.s, ops, 3);
	TL_PASS(ops[0].err);
	TL_FAIL(ops[1].err, TL_EEXISTS);
	TL_PASS(ops[2].err);
	cr_assert_eq(ops[2].new_version, 2);

	/* A message created in the future is not due for a lease in the
	 * same batch. */
	op_fill(&ops[0], TLI_OP_CREATE, "t", "f", 1, "g", NOW0 + 5000, 0);
	op_fill(&ops[1], TLI_OP_LEASE, "t", "f", 1, "c", NOW0 + LEASE_MS, 1);
	apply_ok(e.s, ops, 2);
	TL_PASS(ops[0].err);
	TL_FAIL(ops[1].err, TL_ENOTDUE);

	/* A chain of holder operations, each on the previous one's version. */
	op_fill(&ops[0], TLI_OP_CREATE, "t", "h", 1, "g", NOW0, 0);
	op_fill(&ops[1], TLI_OP_LEASE, "t", "h", 1, "c", NOW0 + 100, 1);
	op_fill(&ops[2], TLI_OP_EXTEND, "t", "h", 1, "c", NOW0 + 200, 2);
	op_fill(&ops[3], TLI_OP_RELEASE, "t", "h", 1, "c", NOW0 + 300, 3);
	apply_ok(e.s, ops, 4);
	for (int i = 0; i < 4; i++) {
		TL_PASS(ops[i].err, "op %d", i);
		cr_assert_eq(ops[i].new_version, (uint64_t) i + 1);
	}
	get_ok(e.s, "t", "h", &msg);
	cr_assert_eq(msg.version, 4);
	cr_assert_eq(msg.ts, NOW0 + 300);
	cr_assert_eq(msg.consumer_len, 0, "released message still locked");
	tli_msg_fini(&msg);
	get_ok(e.s, "t", "f", &msg);
	cr_assert_eq(msg.version, 1);
	cr_assert_eq(msg.deliveries, 0);
	cr_assert_eq(msg.consumer_len, 0);
	tli_msg_fini(&msg);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

#define NTHREADS 4
#define PER_THREAD 200

typedef struct submitter {
	tli_store *s;
	int idx;
	int failures;
	int last_err;
} submitter;

static void *
submitter_main(void *arg)
{
	submitter *w = arg;

	for (int i = 0; i < PER_THREAD; i++) {
		char id[32];
		int rv;

		snprintf(id, sizeof(id), "w%d-%03d", w->idx, i);
		rv = tt_create(w->s, "t", id, "g", NOW0 - 1, "b", NULL);
		if (rv != TL_OK) {
			w->failures++;
			w->last_err = rv;
		}
	}
	return NULL;
}

Test(scan, concurrent_submitters_are_grouped_into_fewer_batches)
{
	env e;
	pthread_t th[NTHREADS];
	submitter w[NTHREADS];
	tli_store_stats st0, st1;
	tli_counts tot;

	env_open(&e, "scan-group", NOW0);
	tt_topic(e.s, "t", 0);
	tli_store_get_stats(e.s, &st0);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (submitter){e.s, i, 0, TL_OK};
		cr_assert_eq(
		    pthread_create(&th[i], NULL, submitter_main, &w[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
	}
	tli_store_get_stats(e.s, &st1);
	for (int i = 0; i < NTHREADS; i++) {
		cr_assert_eq(w[i].failures, 0,
		    "thread %d: %d creates failed "
		    "(last %s)",
		    i, w[i].failures, tl_errname(w[i].last_err));
	}
	cr_assert_eq(st1.ops - st0.ops, NTHREADS * PER_THREAD);
	cr_assert_lt(st1.batches - st0.batches, NTHREADS * PER_THREAD,
	    "%llu batches for %d concurrent ops: no group commit",
	    (unsigned long long) (st1.batches - st0.batches),
	    NTHREADS * PER_THREAD);
	cr_assert_geq(st1.max_batch, 2);

	for (int t = 0; t < NTHREADS; t++) {
		for (int i = 0; i < PER_THREAD; i++) {
			char id[32];
			tli_msg msg;

			snprintf(id, sizeof(id), "w%d-%03d", t, i);
			get_ok(e.s, "t", id, &msg);
			cr_assert_eq(msg.version, 1);
			tli_msg_fini(&msg);
		}
	}
	TL_PASS(tli_store_totals(e.s, "t", &tot));
	cr_assert_eq(tot.available, NTHREADS * PER_THREAD);
	cr_assert_eq(tot.waiting + tot.processing, 0);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

/* ---- 3. consumer scan ---- */

#define NCONS 40

Test(scan, consumer_scan_returns_exactly_that_consumers_leases)
{
	static const char *A = "c1", *B = "c10";
	env e;
	tmsg m[NCONS];
	scan_spec sa = {SCAN_CONSUMER, "t", 0, 0, "c1"};
	scan_spec sb = {SCAN_CONSUMER, "t", 0, 0, "c10"};
	scan_spec sc = {SCAN_CONSUMER, "t", 0, 0, "c"};
	tli_entry none[2];
	tli_msg msg;
	tli_op op;
	int64_t now;

	memset(m, 0, sizeof(m));
	env_open(&e, "scan-cons", NOW0);
	tt_topic(e.s, "t", 4);
	for (int i = 0; i < NCONS; i++) {
		char id[16];

		snprintf(id, sizeof(id), "k%d", i);
		tmsg_set_id(&m[i], id);
		m[i].owner = "g";
		m[i].ts = NOW0 - 100 - i;
		TL_PASS(tt_create(e.s, "t", id, "g", m[i].ts, "b", NULL));
		m[i].version = 1;
	}
	/* A leases every third message, B the next ones; k3's lease is short
	 * and will run out. */
	for (int i = 0; i < NCONS; i++) {
		const char *who = i % 3 == 0 ? A : i % 3 == 1 ? B : NULL;
		int64_t end = i == 3 ? NOW0 + 5 : NOW0 + LEASE_MS + i;

		if (who == NULL) {
			continue;
		}
		op = apply_one(e.s, TLI_OP_LEASE, "t", &m[i], who, end, 1);
		cr_assert_eq(op.new_version, 2);
		m[i].ts = end;
		m[i].version = 2;
		m[i].consumer = who;
	}
	tt_clock_advance(&e.clk, 10);
	now = NOW0 + 10;
	get_ok(e.s, "t", "k3", &msg);
	cr_assert_str_eq(msg.consumer, A, "a run-out lease keeps its lock");
	cr_assert_leq(msg.ts, now);
	tli_msg_fini(&msg);

	expect_scan(e.s, &sa, 4, m, NCONS, keep_consumer, A, tmsg_cmp_id, 0);
	expect_scan(e.s, &sb, 4, m, NCONS, keep_consumer, B, tmsg_cmp_id, 0);
	cr_assert_eq(
	    scan_all(e.s, &sc, 2, none, 0), 0, "consumer \"c\" holds nothing");

	/* A deletes k0 and releases k6; B takes over the run-out k3. */
	apply_one(e.s, TLI_OP_DELETE_LEASED, "t", &m[0], A, 0, 2);
	m[0].gone = true;
	apply_one(e.s, TLI_OP_RELEASE, "t", &m[6], A, now, 2);
	m[6].consumer = NULL;
	m[6].ts = now;
	m[6].version = 3;
	op = apply_one(e.s, TLI_OP_LEASE, "t", &m[3], B, now + LEASE_MS, 2);
	cr_assert_eq(op.new_version, 3);
	m[3].consumer = B;
	m[3].ts = now + LEASE_MS;
	m[3].version = 3;

	expect_scan(e.s, &sa, 4, m, NCONS, keep_consumer, A, tmsg_cmp_id, 0);
	expect_scan(e.s, &sb, 4, m, NCONS, keep_consumer, B, tmsg_cmp_id, 0);
	cr_assert_eq(tt_check(e.s), 0);
	env_fini(&e);
}

/* ---- 4. owner scan ---- */

#define NOWN 300

Test(scan, owner_scan_returns_only_that_owners_messages_in_order)
{
	static const char *owners[3] = {"g1", "g2", "g10"};
	uint64_t rng = 0x5eed0004;
	env e;
	tmsg *m = calloc(NOWN, sizeof(*m));
	scan_spec sp = {SCAN_OWNER, "t", 0, 0, NULL};
	tli_entry none[2];

	cr_assert_not_null(m);
	for (size_t i = 0; i < NOWN; i++) {
		char id[16];

		snprintf(id, sizeof(id), "o%zu", i);
		tmsg_set_id(&m[i], id);
		m[i].owner = owners[tt_rng_below(&rng, 3)];
		m[i].ts = NOW0 - 1000 + 10 * (int64_t) tt_rng_below(&rng, 40);
	}
	env_open(&e, "scan-owner", NOW0);
	tt_topic(e.s, "t", 4);
	create_all(e.s, "t", m, NOWN, 4, &rng);

	/* A lease does not move a message on its owner's timeline: the owner
	 * sees it where it was placed, with the lease's version and lock. A
	 * release to another time places it anew. */
	for (size_t i = 0; i < NOWN; i += 4) {
		int64_t end =
		    NOW0 + 1000 + 10 * (int64_t) tt_rng_below(&rng, 20);

		apply_one(e.s, TLI_OP_LEASE, "t", &m[i], "c", end, 1);
		m[i].version = 2;
		m[i].consumer = "c";
		if (i % 8 == 4) {
			int64_t at =
			    NOW0 + 10 * (int64_t) tt_rng_below(&rng, 60);
			apply_one(e.s, TLI_OP_RELEASE, "t", &m[i], "c", at, 2);
			m[i].ts = at;
			m[i].version = 3;
			m[i].consumer = NULL;
		}
	}

	for (int o = 0; o < 3; o++) {
		sp.who = owners[o];
		expect_scan(e.s, &sp, 7, m, NOWN, keep_owner, owners[o],
		    tmsg_cmp_ts_id, CHK_LOCKED);
	}
	sp.who = "g";
	cr_assert_eq(
	    scan_all(e.s, &sp, 2, none, 0), 0, "owner \"g\" has no messages");

	free(m);
	env_fini(&e);
}

/* ---- 5. counts ---- */

static tli_counts
model_count(const tmsg *m, size_t n, int64_t now, int64_t from, int64_t to)
{
	tli_counts c = {0, 0, 0};

	for (size_t i = 0; i < n; i++) {
		if (m[i].gone || m[i].ts < from || m[i].ts >= to) {
			continue;
		}
		if (m[i].ts <= now) {
			c.available++;
		} else if (m[i].consumer != NULL) {
			c.processing++;
		} else {
			c.waiting++;
		}
	}
	return c;
}

static void
expect_counts(const char *what, tli_counts got, tli_counts want)
{
	cr_assert(got.available == want.available &&
	        got.waiting == want.waiting &&
	        got.processing == want.processing,
	    "%s: got available %llu waiting %llu processing %llu, expected "
	    "%llu %llu %llu",
	    what, (unsigned long long) got.available,
	    (unsigned long long) got.waiting,
	    (unsigned long long) got.processing,
	    (unsigned long long) want.available,
	    (unsigned long long) want.waiting,
	    (unsigned long long) want.processing);
}

#define NCOUNT 400

static void
check_all_counts(tli_store *s, const tmsg *m, int64_t now, uint64_t *rng)
{
	int64_t fixed[][2] = {
	    {0, TL_TS_MAX + 1},
	    {now, now + 1},
	    {now + 1, now + 100000},
	    {0, now},
	    {0, now + 1},
	    {now - 2500, now + 2500},
	    {now + 7, now + 7},
	};
	char what[96];
	tli_counts got, tot;
	uint64_t live = 0, locked = 0;
	tli_topic_info ti;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		int rv =
		    tli_store_count(s, "t", fixed[i][0], fixed[i][1], &got);

		TL_PASS(rv, "count");
		snprintf(what, sizeof(what), "count [%lld, %lld) at now %lld",
		    (long long) fixed[i][0], (long long) fixed[i][1],
		    (long long) now);
		expect_counts(what, got,
		    model_count(m, NCOUNT, now, fixed[i][0], fixed[i][1]));
	}
	for (int k = 0; k < 60; k++) {
		int64_t a = NOW0 - 6000 + (int64_t) tt_rng_below(rng, 40000);
		int64_t b = a + (int64_t) tt_rng_below(rng, 8000);
		int rv = tli_store_count(s, "t", a, b, &got);

		TL_PASS(rv, "count");
		snprintf(what, sizeof(what), "count [%lld, %lld) at now %lld",
		    (long long) a, (long long) b, (long long) now);
		expect_counts(what, got, model_count(m, NCOUNT, now, a, b));
	}
	TL_PASS(tli_store_totals(s, "t", &tot));
	expect_counts(
	    "totals", tot, model_count(m, NCOUNT, now, INT64_MIN, INT64_MAX));

	for (size_t i = 0; i < NCOUNT; i++) {
		live += !m[i].gone;
		locked += !m[i].gone && m[i].consumer != NULL;
	}
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	cr_assert_eq(ti.messages, live);
	cr_assert_eq(ti.locked, locked, "locked counter %llu, expected %llu",
	    (unsigned long long) ti.locked, (unsigned long long) locked);
}

Test(scan, counts_and_totals_are_exact_by_status)
{
	uint64_t rng = 0x5eed0005;
	env e;
	tmsg *m = calloc(NCOUNT, sizeof(*m));
	tli_op *ops = calloc(NCOUNT, sizeof(*ops));
	size_t k, ran_out = 0;
	int64_t now = NOW0;
	tli_counts before, after;

	cr_assert_not_null(m);
	cr_assert_not_null(ops);
	for (size_t i = 0; i < NCOUNT; i++) {
		char id[16];

		snprintf(id, sizeof(id), "n%zu", i);
		tmsg_set_id(&m[i], id);
		m[i].owner = "g";
		m[i].ts = i % 25 == 0
		    ? NOW0
		    : NOW0 - 5000 + (int64_t) tt_rng_below(&rng, 10001);
	}
	env_open(&e, "scan-count", NOW0);
	tt_topic(e.s, "t", 8);
	create_all(e.s, "t", m, NCOUNT, 8, &rng);
	check_all_counts(e.s, m, now, &rng);

	/* Lease a third of the due messages, some for less than 10 s. */
	k = 0;
	for (size_t i = 0; i < NCOUNT; i++) {
		if (i % 3 == 0 && m[i].ts <= now) {
			int64_t end =
			    now + 1 + (int64_t) tt_rng_below(&rng, 20000);

			op_fill_msg(
			    &ops[k++], TLI_OP_LEASE, "t", &m[i], "c", end, 1);
			m[i].ts = end;
			m[i].version = 2;
			m[i].consumer = "c";
		}
	}
	apply_ok(e.s, ops, k);
	for (size_t i = 0; i < k; i++) {
		TL_PASS(ops[i].err, "lease");
	}
	/* Release some leases, to now (available) or later (waiting), and
	 * delete a few messages. */
	k = 0;
	for (size_t i = 0; i < NCOUNT; i++) {
		if (m[i].consumer != NULL && i % 2 == 0) {
			int64_t to =
			    now + (int64_t) tt_rng_below(&rng, 3) * 1500;

			op_fill_msg(
			    &ops[k++], TLI_OP_RELEASE, "t", &m[i], "c", to, 2);
			m[i].ts = to;
			m[i].version = 3;
			m[i].consumer = NULL;
		} else if (m[i].consumer == NULL && i % 17 == 1) {
			op_fill_msg(&ops[k++], TLI_OP_DELETE_OWNED, "t", &m[i],
			    "g", 0, 0);
			m[i].gone = true;
		}
	}
	apply_ok(e.s, ops, k);
	for (size_t i = 0; i < k; i++) {
		TL_PASS(ops[i].err, "op %zu", i);
	}
	check_all_counts(e.s, m, now, &rng);
	before = model_count(m, NCOUNT, now, INT64_MIN, INT64_MAX);
	cr_assert_gt(before.processing, 0);
	cr_assert_gt(before.waiting, 0);

	/* Let time pass: leases that end by then run out and count as
	 * available (their lock stays). */
	tt_clock_advance(&e.clk, 10000);
	now += 10000;
	for (size_t i = 0; i < NCOUNT; i++) {
		ran_out +=
		    !m[i].gone && m[i].consumer != NULL && m[i].ts <= now;
	}
	cr_assert_gt(ran_out, 0, "the test should let some leases run out");
	check_all_counts(e.s, m, now, &rng);
	after = model_count(m, NCOUNT, now, INT64_MIN, INT64_MAX);
	cr_assert_lt(after.processing, before.processing);

	/* The counters survive a reopen and keep counting. */
	env_reopen(&e);
	check_all_counts(e.s, m, now, &rng);
	for (size_t i = 0; i < NCOUNT; i++) {
		if (!m[i].gone && m[i].consumer == NULL) {
			apply_one(
			    e.s, TLI_OP_DELETE_OWNED, "t", &m[i], "g", 0, 0);
			m[i].gone = true;
			break;
		}
	}
	check_all_counts(e.s, m, now, &rng);
	cr_assert_eq(tt_check(e.s), 0);

	free(ops);
	free(m);
	env_fini(&e);
}

/* ---- 6. the consistency checker ---- */

static const char *cf_names[5] = {"default", "msg", "tl", "cons", "own"};

/* Open the closed store's RocksDB directly and delete, in one column family,
 * either its first key (suffix NULL) or every key ending in suffix (all the
 * keys of one message, whatever tags the layout puts before the id). cf NULL
 * changes nothing. Returns the number of keys deleted. */
static int
raw_delete(const char *path, const char *cf, const char *suffix)
{
	rocksdb_options_t *opts = rocksdb_options_create();
	const rocksdb_options_t *cfopts[5];
	rocksdb_column_family_handle_t *h[5];
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	rocksdb_t *db;
	char *err = NULL;
	int idx = -1;
	int deleted = 0;

	for (int i = 0; i < 5; i++) {
		cfopts[i] = opts;
		if (cf != NULL && strcmp(cf, cf_names[i]) == 0) {
			idx = i;
		}
	}
	db = rocksdb_open_column_families(
	    opts, path, 5, cf_names, cfopts, h, &err);
	cr_assert_null(err, "raw open of %s: %s", path, err);
	if (idx >= 0) {
		rocksdb_iterator_t *it =
		    rocksdb_create_iterator_cf(db, ro, h[idx]);
		size_t slen = suffix != NULL ? strlen(suffix) : 0;

		for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
		     rocksdb_iter_next(it)) {
			size_t klen;
			const char *key = rocksdb_iter_key(it, &klen);

			if (suffix != NULL &&
			    (klen < slen ||
			        memcmp(key + klen - slen, suffix, slen) != 0)) {
				continue;
			}
			rocksdb_writebatch_delete_cf(wb, h[idx], key, klen);
			deleted++;
			if (suffix == NULL) {
				break;
			}
		}
		rocksdb_iter_destroy(it);
		rocksdb_writeoptions_set_sync(wo, 1);
		rocksdb_write(db, wo, wb, &err);
		cr_assert_null(err, "raw delete: %s", err);
		cr_assert_gt(deleted, 0, "nothing to delete in %s", cf);
	}
	for (int i = 0; i < 5; i++) {
		rocksdb_column_family_handle_destroy(h[i]);
	}
	rocksdb_close(db);
	rocksdb_writebatch_destroy(wb);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_readoptions_destroy(ro);
	rocksdb_options_destroy(opts);
	return deleted;
}

static void
count_report(void *arg, const char *problem)
{
	(*(uint64_t *) arg)++;
	fprintf(stderr, "consistency: %s\n", problem);
}

/* Fill a store (some messages leased), check it is clean, close it, damage
 * it, reopen it and return what the checker says. */
static uint64_t
damage_and_check(const char *tag, const char *cf, const char *suffix)
{
	env e;
	uint64_t problems = UINT64_MAX, reports = 0;
	int rv;

	env_open(&e, tag, NOW0);
	tt_topic(e.s, "t", 4);
	for (int i = 0; i < 20; i++) {
		char id[16];

		snprintf(id, sizeof(id), "d%02d", i);
		TL_PASS(tt_create(e.s, "t", id, i % 2 ? "g1" : "g2",
		    NOW0 - 100 + i, "body", NULL));
		if (i % 4 == 0) {
			TL_PASS(tt_op(e.s, TLI_OP_LEASE, "t", id, "c",
			    NOW0 + LEASE_MS, 1, NULL));
		}
	}
	cr_assert_eq(tt_check(e.s), 0, "the undamaged store is not clean");
	tli_store_close(e.s);

	raw_delete(e.dir, cf, suffix);

	e.s = tt_store_open(e.dir, &e.clk);
	rv = tli_store_check(e.s, count_report, &reports, &problems);
	TL_PASS(rv, "check");
	cr_assert_eq(reports, problems, "%llu reports for %llu problems",
	    (unsigned long long) reports, (unsigned long long) problems);
	env_fini(&e);
	return problems;
}

Test(scan, check_is_clean_after_a_raw_open_that_changes_nothing)
{
	cr_assert_eq(damage_and_check("scan-chk0", NULL, NULL), 0);
}

Test(scan, check_finds_a_missing_timeline_entry)
{
	cr_assert_geq(damage_and_check("scan-chk-tl", "tl", NULL), 1);
}

/* Every msg key of d04 (a leased message): its tl, own and cons entries
 * then point at nothing, and each of them is a problem. */
Test(scan, check_finds_a_missing_record)
{
	cr_assert_geq(damage_and_check("scan-chk-msg", "msg", "d04"), 3);
}

Test(scan, check_finds_a_missing_first_msg_key)
{
	cr_assert_geq(damage_and_check("scan-chk-msg1", "msg", NULL), 1);
}

Test(scan, check_finds_a_missing_consumer_entry)
{
	cr_assert_geq(damage_and_check("scan-chk-cons", "cons", NULL), 1);
}

Test(scan, check_finds_a_missing_owner_entry)
{
	cr_assert_geq(damage_and_check("scan-chk-own", "own", NULL), 1);
}
