/*
 * Tests of the store's rules as docs/storage.md states them: every row of
 * the condition table (each operation's allowed case with its effect, and
 * each refusal with its exact error, in the documented check order), lease
 * expiry, input validation, generated ids and buckets, topic management and
 * the storage format check. Each test runs on its own store in a private
 * temporary directory with a manual clock (nothing sleeps), asserts after
 * every refused operation that nothing changed, and ends with the
 * consistency checker.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <rocksdb/c.h>

#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1700000000000)
#define TOPIC "orders"
#define OWNER "billing"
#define OTHER_OWNER "shipping"
#define CA "worker-a"
#define CB "worker-b"
#define BODY "{\"amount\":42}"
#define LEASE INT64_C(30000)

static char *dir;
static tt_clock clk;
static tli_store *st;
static const char *topic = TOPIC; /* the topic the helpers work on */

/* ---- fixture ---- */

static void
env_open_bare(void)
{
	dir = tt_mkdtemp("cond");
	tt_clock_init(&clk, T0);
	st = tt_store_open(dir, &clk);
	topic = TOPIC;
}

static void
env_open(void)
{
	env_open_bare();
	tt_topic(st, TOPIC, 0);
}

static void
env_close(void)
{
	tli_store_close(st);
	st = NULL;
	tt_rmtree_free(&dir);
}

/* Every test that wrote data ends here. */
static void
env_finish(void)
{
	uint64_t problems = tt_check(st);

	cr_assert_eq(problems, 0,
	    "consistency checker reported %" PRIu64 " problem(s)", problems);
}

TestSuite(conditions, .init = env_open, .fini = env_close);
TestSuite(expiry, .init = env_open, .fini = env_close);
TestSuite(input, .init = env_open, .fini = env_close);
TestSuite(gen_id, .init = env_open, .fini = env_close);
TestSuite(topics, .init = env_open_bare, .fini = env_close);
TestSuite(format, .init = env_open, .fini = env_close);

/* ---- small helpers ---- */

static int64_t
now_ms(void)
{
	return atomic_load(&clk.now);
}

static const char *
op_name(tli_op_type t)
{
	switch (t) {
	case TLI_OP_CREATE:
		return "create";
	case TLI_OP_LEASE:
		return "lease";
	case TLI_OP_EXTEND:
		return "extend";
	case TLI_OP_RELEASE:
		return "release";
	case TLI_OP_DELETE_LEASED:
		return "delete(holder)";
	case TLI_OP_DELETE_OWNED:
		return "delete(owner)";
	case TLI_OP_MOVE:
		return "move";
	case TLI_OP_DLQ_KICK:
		return "dlq-kick";
	}
	return "?";
}

static bool
owner_op(tli_op_type t)
{
	return t == TLI_OP_CREATE || t == TLI_OP_DELETE_OWNED ||
	    t == TLI_OP_MOVE;
}

static tli_op
mkop(tli_op_type type, const char *id, const char *who, int64_t ts,
    uint64_t version)
{
	tli_op op = tt_mkop(type, topic, id, who, ts, version);

	if (type == TLI_OP_CREATE) {
		op.body = BODY;
		op.body_len = strlen(BODY);
	}
	return op;
}

static tli_op
mkrel(tli_op_type type, const char *id, const char *who, int64_t delay,
    uint64_t version)
{
	tli_op op = mkop(type, id, who, delay, version);

	op.ts_mode = TLI_TS_REL;
	return op;
}

static int
run(tli_op *op)
{
	int rv = tli_store_apply(st, op, 1);

	TL_PASS(rv, "tli_store_apply");
	return op->err;
}

static int
run_op(tli_op op, tli_op *out)
{
	int err = run(&op);

	if (out != NULL) {
		*out = op;
	}
	return err;
}

static int
create(const char *id, int64_t ts, tli_op *out)
{
	return run_op(mkop(TLI_OP_CREATE, id, OWNER, ts, 0), out);
}

static int
lease(const char *id, const char *cons, int64_t end, uint64_t ver, tli_op *out)
{
	return run_op(mkop(TLI_OP_LEASE, id, cons, end, ver), out);
}

static int
extend(const char *id, const char *cons, int64_t end, uint64_t ver, tli_op *out)
{
	return run_op(mkop(TLI_OP_EXTEND, id, cons, end, ver), out);
}

static int
release(const char *id, const char *cons, int64_t ts, uint64_t ver, tli_op *out)
{
	return run_op(mkop(TLI_OP_RELEASE, id, cons, ts, ver), out);
}

static int
del_leased(const char *id, const char *cons, uint64_t ver)
{
	return run_op(mkop(TLI_OP_DELETE_LEASED, id, cons, 0, ver), NULL);
}

static int
del_owned(const char *id, const char *owner, uint64_t ver)
{
	return run_op(mkop(TLI_OP_DELETE_OWNED, id, owner, 0, ver), NULL);
}

static int
move(const char *id, const char *owner, int64_t ts, uint64_t ver, tli_op *out)
{
	return run_op(mkop(TLI_OP_MOVE, id, owner, ts, ver), out);
}

/* ---- snapshots: everything a user can observe about one id ---- */

typedef struct snap {
	int err; /* of tli_store_get */
	int64_t ts;
	uint64_t version;
	uint32_t deliveries;
	uint32_t bucket;
	int64_t created_at;
	char owner[TL_MAX_NAME_LEN + 1];
	size_t owner_len;
	char consumer[TL_MAX_NAME_LEN + 1];
	size_t consumer_len;
	char body[64];
	size_t body_len;
	uint64_t body_hash;
	int64_t every; /* the recurrence */
	int64_t start;
	uint32_t seq;
	uint32_t last;
	uint64_t messages;
	uint64_t locked;
	tli_counts totals;
} snap;

static void
snap_take(snap *sn, const char *id, size_t id_len)
{
	tli_msg m;
	tli_topic_info ti;
	int rv;

	memset(sn, 0, sizeof(*sn));
	memset(&m, 0, sizeof(m));
	sn->err = TL_ENOTFOUND;
	if (id_len > 0 && id_len <= TL_MAX_ID_LEN) {
		sn->err = tli_store_get(st, topic, id, id_len, &m);
	}
	if (sn->err == TL_OK) {
		sn->ts = m.ts;
		sn->version = m.version;
		sn->deliveries = m.deliveries;
		sn->bucket = m.bucket;
		sn->created_at = m.created_at;
		sn->owner_len = m.owner_len;
		memcpy(sn->owner, m.owner, m.owner_len);
		sn->consumer_len = m.consumer_len;
		memcpy(sn->consumer, m.consumer, m.consumer_len);
		sn->body_len = m.body_len;
		memcpy(sn->body, m.body,
		    m.body_len < sizeof(sn->body) ? m.body_len
		                                  : sizeof(sn->body));
		sn->body_hash = tli_hash64(m.body, m.body_len);
		sn->every = m.every;
		sn->start = m.start;
		sn->seq = m.seq;
		sn->last = m.last;
		tli_msg_fini(&m);
	}
	rv = tli_store_topic_get(st, topic, &ti);
	TL_PASS(rv, "topic_get(%s)", topic);
	sn->messages = ti.messages;
	sn->locked = ti.locked;
	rv = tli_store_totals(st, topic, &sn->totals);
	TL_PASS(rv, "totals(%s)", topic);
}

static void
snap_same(int line, const char *what, const snap *a, const snap *b)
{
	TL_CODE_EQ(
	    b->err, a->err, "line %d: %s: the lookup changed", line, what);
	cr_assert_eq(a->ts, b->ts,
	    "line %d: %s: ts changed %" PRId64 " -> %" PRId64, line, what,
	    a->ts, b->ts);
	cr_assert_eq(a->version, b->version,
	    "line %d: %s: version changed %" PRIu64 " -> %" PRIu64, line, what,
	    a->version, b->version);
	cr_assert_eq(a->deliveries, b->deliveries,
	    "line %d: %s: deliveries changed", line, what);
	cr_assert(a->consumer_len == b->consumer_len &&
	        memcmp(a->consumer, b->consumer, a->consumer_len) == 0,
	    "line %d: %s: lock changed '%s' -> '%s'", line, what, a->consumer,
	    b->consumer);
	cr_assert(a->owner_len == b->owner_len &&
	        memcmp(a->owner, b->owner, a->owner_len) == 0,
	    "line %d: %s: owner changed", line, what);
	cr_assert(a->body_len == b->body_len && a->body_hash == b->body_hash,
	    "line %d: %s: body changed", line, what);
	cr_assert_eq(
	    a->bucket, b->bucket, "line %d: %s: bucket changed", line, what);
	cr_assert_eq(a->created_at, b->created_at,
	    "line %d: %s: created_at changed", line, what);
	cr_assert(a->every == b->every && a->start == b->start &&
	        a->seq == b->seq && a->last == b->last,
	    "line %d: %s: the recurrence changed", line, what);
	cr_assert_eq(a->messages, b->messages,
	    "line %d: %s: topic messages %" PRIu64 " -> %" PRIu64, line, what,
	    a->messages, b->messages);
	cr_assert_eq(a->locked, b->locked,
	    "line %d: %s: topic locked %" PRIu64 " -> %" PRIu64, line, what,
	    a->locked, b->locked);
	cr_assert(a->totals.available == b->totals.available &&
	        a->totals.waiting == b->totals.waiting &&
	        a->totals.processing == b->totals.processing,
	    "line %d: %s: totals changed", line, what);
}

/* Apply op, expect exactly `want`, and check that neither the op's message
 * nor the topic's counters changed. */
#define EXPECT_FAIL(op, want) expect_fail(__LINE__, (op), (want))

static void
expect_fail(int line, tli_op op, int want)
{
	snap before, after;
	int err;

	snap_take(&before, op.id, op.id_len);
	err = run(&op);
	TL_CODE_EQ(err, want, "line %d: %s of '%.*s' by '%.*s'", line,
	    op_name(op.type), (int) op.id_len, op.id != NULL ? op.id : "",
	    (int) op.who_len, op.who != NULL ? op.who : "");
	snap_take(&after, op.id, op.id_len);
	snap_same(line, op_name(op.type), &before, &after);
}

/* Check a message's state; owner and body must be what create() wrote. */
#define CHECK_MSG(id, ts, ver, cons, deliv) \
	check_msg(__LINE__, (id), (ts), (ver), (cons), (deliv))

static void
check_msg(int line, const char *id, int64_t ts, uint64_t version,
    const char *consumer, uint32_t deliveries)
{
	snap sn;
	tli_topic_info ti;

	snap_take(&sn, id, strlen(id));
	TL_PASS(sn.err, "line %d: get %s", line, id);
	cr_assert_eq(sn.ts, ts,
	    "line %d: %s: ts %" PRId64 ", expected %" PRId64, line, id, sn.ts,
	    ts);
	cr_assert_eq(sn.version, version,
	    "line %d: %s: version %" PRIu64 ", expected %" PRIu64, line, id,
	    sn.version, version);
	cr_assert(sn.consumer_len == strlen(consumer) &&
	        memcmp(sn.consumer, consumer, sn.consumer_len) == 0,
	    "line %d: %s: lock '%s', expected '%s'", line, id, sn.consumer,
	    consumer);
	cr_assert_eq(sn.deliveries, deliveries,
	    "line %d: %s: deliveries %u, "
	    "expected %u",
	    line, id, sn.deliveries, deliveries);
	cr_assert(sn.owner_len == strlen(OWNER) &&
	        memcmp(sn.owner, OWNER, sn.owner_len) == 0,
	    "line %d: %s: owner '%s'", line, id, sn.owner);
	cr_assert(sn.body_len == strlen(BODY) &&
	        memcmp(sn.body, BODY, sn.body_len) == 0,
	    "line %d: %s: body changed", line, id);
	TL_PASS(tli_store_topic_get(st, topic, &ti));
	cr_assert_eq(sn.bucket, tli_bucket_of(id, strlen(id), ti.conf.buckets),
	    "line %d: %s: bucket %u", line, id, sn.bucket);
}

#define CHECK_GONE(id) check_gone(__LINE__, (id))

static void
check_gone(int line, const char *id)
{
	tli_msg m;
	int rv = tli_store_get(st, topic, id, strlen(id), &m);

	if (rv == TL_OK) {
		tli_msg_fini(&m);
	}
	TL_FAIL(rv, TL_ENOTFOUND,
	    "line %d: get %s: %s, expected "
	    "TL_ENOTFOUND",
	    line, id, tl_errname(rv));
}

#define CHECK_COUNTERS(msgs, lck) check_counters(__LINE__, (msgs), (lck))

static void
check_counters(int line, uint64_t messages, uint64_t locked)
{
	tli_topic_info ti;
	int rv = tli_store_topic_get(st, topic, &ti);

	TL_PASS(rv, "line %d: topic_get", line);
	cr_assert_eq(ti.messages, messages,
	    "line %d: messages %" PRIu64 ", expected %" PRIu64, line,
	    ti.messages, messages);
	cr_assert_eq(ti.locked, locked,
	    "line %d: locked %" PRIu64 ", expected %" PRIu64, line, ti.locked,
	    locked);
}

#define CHECK_TOTALS(a, w, p) check_totals(__LINE__, (a), (w), (p))

static void
check_totals(int line, uint64_t avail, uint64_t waiting, uint64_t proc)
{
	tli_counts c;
	int rv = tli_store_totals(st, topic, &c);

	TL_PASS(rv, "line %d: totals", line);
	cr_assert(c.available == avail && c.waiting == waiting &&
	        c.processing == proc,
	    "line %d: totals available/waiting/processing = %" PRIu64
	    "/%" PRIu64 "/%" PRIu64 ", expected %" PRIu64 "/%" PRIu64
	    "/%" PRIu64,
	    line, c.available, c.waiting, c.processing, avail, waiting, proc);
	memset(&c, 0, sizeof(c));
	rv = tli_store_count(st, topic, 0, TL_TS_MAX, &c);
	TL_PASS(rv, "line %d: count", line);
	cr_assert(c.available == avail && c.waiting == waiting &&
	        c.processing == proc,
	    "line %d: count available/waiting/processing = %" PRIu64 "/%" PRIu64
	    "/%" PRIu64 ", expected %" PRIu64 "/%" PRIu64 "/%" PRIu64,
	    line, c.available, c.waiting, c.processing, avail, waiting, proc);
}

/* Whether scan_due(up to now) over the id's bucket returns the id; fills
 * *e with its entry when it does. */
static bool
due_has(const char *id, tli_entry *e)
{
	tli_topic_info ti;
	tli_cursor cur;
	tli_entry out[64];
	size_t n = 0;
	bool more = false;
	uint32_t b;
	int rv;

	TL_PASS(tli_store_topic_get(st, topic, &ti));
	b = tli_bucket_of(id, strlen(id), ti.conf.buckets);
	memset(&cur, 0, sizeof(cur));
	rv = tli_store_scan_due(
	    st, topic, b, now_ms(), &cur, out, 64, &n, &more);
	TL_PASS(rv, "scan_due");
	for (size_t i = 0; i < n; i++) {
		if (out[i].id_len == strlen(id) &&
		    memcmp(out[i].id, id, out[i].id_len) == 0) {
			if (e != NULL) {
				*e = out[i];
			}
			return true;
		}
	}
	return false;
}

/* How many leases scan_consumer lists for cons; *e gets the first. */
static size_t
consumer_leases(const char *cons, tli_entry *e)
{
	tli_cursor cur;
	tli_entry out[64];
	size_t n = 0;
	bool more = false;
	int rv;

	memset(&cur, 0, sizeof(cur));
	rv = tli_store_scan_consumer(
	    st, topic, cons, strlen(cons), &cur, out, 64, &n, &more);
	TL_PASS(rv, "scan_consumer");
	if (n > 0 && e != NULL) {
		*e = out[0];
	}
	return n;
}

static void
topic_with(const char *name, uint32_t buckets, uint32_t max_body,
    int64_t default_lease, int64_t max_lease)
{
	tli_topic_conf c;

	TL_PASS(tli_topic_conf_init(&c, name));
	c.buckets = buckets;
	c.max_body = max_body;
	c.default_lease_ms = default_lease;
	c.max_lease_ms = max_lease;
	TL_PASS(tli_store_topic_create(st, &c));
}

/* =================================================================== */
/* create                                                              */
/* =================================================================== */

Test(conditions, create_stores_version_1_unlocked)
{
	tli_op op;
	snap sn;

	TL_PASS(create("m1", T0 + 5000, &op));
	cr_assert_eq(op.new_version, 1);
	cr_assert_eq(op.new_ts, T0 + 5000);
	cr_assert_eq(op.bucket, tli_bucket_of("m1", 2, TL_DEFAULT_BUCKETS));
	CHECK_MSG("m1", T0 + 5000, 1, "", 0);
	snap_take(&sn, "m1", 2);
	cr_assert_eq(sn.created_at, T0, "created_at %" PRId64, sn.created_at);
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(0, 1, 0);
	cr_assert_not(due_has("m1", NULL), "a waiting message is not due");
	env_finish();
}

Test(conditions, create_with_past_or_present_ts_is_available_at_once)
{
	tli_entry e;

	TL_PASS(create("past", T0 - 60000, NULL));
	TL_PASS(create("now", T0, NULL));
	CHECK_TOTALS(2, 0, 0);
	cr_assert(due_has("past", &e));
	cr_assert_eq(e.ts, T0 - 60000);
	cr_assert_eq(e.version, 1);
	cr_assert_not(e.locked);
	cr_assert(due_has("now", NULL));
	TL_PASS(lease("past", CA, T0 + LEASE, 0, NULL));
	TL_PASS(lease("now", CA, T0 + LEASE, 1, NULL));
	env_finish();
}

Test(conditions, create_existing_id_fails_eexists)
{
	tli_op op;

	TL_PASS(create("m1", T0 + 5000, NULL));
	EXPECT_FAIL(mkop(TLI_OP_CREATE, "m1", OWNER, T0 + 5000, 0), TL_EEXISTS);
	op = mkop(TLI_OP_CREATE, "m1", OTHER_OWNER, T0 - 1, 0);
	op.body = "other";
	op.body_len = 5;
	EXPECT_FAIL(op, TL_EEXISTS);
	/* leased, it still exists */
	tt_clock_set(&clk, T0 + 5000);
	TL_PASS(lease("m1", CA, T0 + 5000 + LEASE, 1, NULL));
	EXPECT_FAIL(mkop(TLI_OP_CREATE, "m1", OWNER, T0, 0), TL_EEXISTS);
	CHECK_MSG("m1", T0 + 5000 + LEASE, 2, CA, 1);
	/* once deleted the id is free again, and starts over at version 1 */
	TL_PASS(del_leased("m1", CA, 2));
	TL_PASS(create("m1", T0 + 9000, &op));
	cr_assert_eq(op.new_version, 1);
	CHECK_MSG("m1", T0 + 9000, 1, "", 0);
	CHECK_COUNTERS(1, 0);
	env_finish();
}

/* =================================================================== */
/* lease                                                               */
/* =================================================================== */

Test(conditions, lease_due_message_locks_it_for_the_consumer)
{
	tli_op op;
	tli_entry e;
	snap sn;

	TL_PASS(create("m1", T0, NULL));
	tt_clock_advance(&clk, 250);
	TL_PASS(lease("m1", CA, now_ms() + LEASE, 0, &op));
	cr_assert_eq(op.new_version, 2);
	cr_assert_eq(op.new_ts, T0 + 250 + LEASE);
	cr_assert_eq(op.deliveries, 1);
	CHECK_MSG("m1", T0 + 250 + LEASE, 2, CA, 1);
	snap_take(&sn, "m1", 2);
	cr_assert_eq(sn.created_at, T0, "created_at must not change");
	CHECK_COUNTERS(1, 1);
	CHECK_TOTALS(0, 0, 1);
	cr_assert_not(due_has("m1", NULL), "a leased message is not due");
	cr_assert_eq(consumer_leases(CA, &e), 1);
	cr_assert_eq(e.version, 2);
	cr_assert_eq(e.ts, T0 + 250 + LEASE);
	cr_assert(e.locked);
	cr_assert_eq(consumer_leases(CB, NULL), 0);

	/* the exact version works too, and deliveries count every lease */
	TL_PASS(release("m1", CA, now_ms(), 2, NULL));
	TL_PASS(lease("m1", CB, now_ms() + 1000, 3, &op));
	cr_assert_eq(op.new_version, 4);
	cr_assert_eq(op.deliveries, 2);
	CHECK_MSG("m1", now_ms() + 1000, 4, CB, 2);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	cr_assert_eq(consumer_leases(CB, NULL), 1);
	env_finish();
}

Test(conditions, lease_missing_message_fails_enotfound)
{
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "nope", CA, T0 + LEASE, 0), TL_ENOTFOUND);
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "nope", CA, T0 + LEASE, 1), TL_ENOTFOUND);
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(del_owned("m1", OWNER, 1));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 0), TL_ENOTFOUND);
	CHECK_COUNTERS(0, 0);
	env_finish();
}

Test(conditions, lease_with_other_version_fails_eversion)
{
	TL_PASS(create("m1", T0, NULL));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 2), TL_EVERSION);
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 9), TL_EVERSION);
	/* the version is checked before the lease and the due time */
	TL_PASS(create("w", T0 + 1000, NULL));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "w", CA, T0 + LEASE, 2), TL_EVERSION);
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CB, T0 + LEASE, 1), TL_EVERSION);
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	env_finish();
}

/* The start of many rows: m1 created due at T0 and leased by CA until
 * T0 + LEASE (version 2). */
static void
m1_leased_by_ca(void)
{
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(lease("m1", CA, T0 + LEASE, 0, NULL));
}

Test(conditions, lease_under_active_lease_fails_eleased)
{
	m1_leased_by_ca();
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CB, T0 + LEASE, 0), TL_ELEASED);
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CB, T0 + LEASE, 2), TL_ELEASED);
	/* the holder cannot lease it again either */
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 2), TL_ELEASED);
	/* still active one millisecond before its end */
	tt_clock_set(&clk, T0 + LEASE - 1);
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CB, now_ms() + LEASE, 0), TL_ELEASED);
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	env_finish();
}

Test(conditions, lease_waiting_message_fails_enotdue)
{
	tli_op op;

	TL_PASS(create("m1", T0 + 1000, NULL));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 0), TL_ENOTDUE);
	tt_clock_set(&clk, T0 + 999);
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CA, now_ms() + LEASE, 1), TL_ENOTDUE);
	/* due exactly when ts == now */
	tt_clock_set(&clk, T0 + 1000);
	TL_PASS(lease("m1", CA, now_ms() + LEASE, 1, &op));
	/* released into the future, it is waiting again */
	TL_PASS(release("m1", CA, now_ms() + 500, 2, NULL));
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CB, now_ms() + LEASE, 3), TL_ENOTDUE);
	CHECK_MSG("m1", now_ms() + 500, 3, "", 1);
	env_finish();
}

Test(conditions, lease_ending_too_close_fails_etooclose)
{
	tli_op op;

	TL_PASS(create("m1", T0 - 10, NULL));
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0, 0), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, T0 - 1, 0), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CA, 0, 0), TL_ETOOCLOSE);
	/* time is checked before state */
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "nope", CA, T0, 0), TL_ETOOCLOSE);
	/* now + gap (1 ms) is the shortest lease */
	TL_PASS(lease("m1", CA, T0 + 1, 1, &op));
	cr_assert_eq(op.new_ts, T0 + 1);
	CHECK_MSG("m1", T0 + 1, 2, CA, 1);
	CHECK_TOTALS(0, 0, 1);
	env_finish();
}

Test(conditions, lease_longer_than_topic_max_fails_eleaselimit)
{
	TL_PASS(create("m1", T0, NULL));
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CA, T0 + TL_DEFAULT_MAX_LEASE_MS + 1, 0),
	    TL_ELEASELIMIT);
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "nope", CA, T0 + TL_DEFAULT_MAX_LEASE_MS + 1, 0),
	    TL_ELEASELIMIT);
	TL_PASS(lease("m1", CA, T0 + TL_DEFAULT_MAX_LEASE_MS, 1, NULL));
	CHECK_MSG("m1", T0 + TL_DEFAULT_MAX_LEASE_MS, 2, CA, 1);
	env_finish();

	/* a topic's own, shorter maximum */
	topic_with("short", 0, 0, 1000, 60000);
	topic = "short";
	TL_PASS(create("m1", T0, NULL));
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CA, T0 + 60001, 0), TL_ELEASELIMIT);
	TL_PASS(lease("m1", CA, T0 + 60000, 0, NULL));
	CHECK_MSG("m1", T0 + 60000, 2, CA, 1);
	env_finish();
}

/* =================================================================== */
/* extend, release, delete by the holder                               */
/* =================================================================== */

/* The state refusals shared by extend, release and delete(holder). */
static void
holder_refusals(tli_op_type type)
{
	/* a ts valid for both extend and release at every point below */
#define HOP(id, who, ver) mkop(type, (id), (who), now_ms() + LEASE, (ver))
	EXPECT_FAIL(HOP("nope", CA, 1), TL_ENOTFOUND);

	/* never leased: due, then waiting */
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(create("w", T0 + 100000, NULL));
	EXPECT_FAIL(HOP("m1", CA, 1), TL_ENOTLEASED);
	EXPECT_FAIL(HOP("m1", CA, 9), TL_ENOTLEASED); /* before version */
	EXPECT_FAIL(HOP("w", CA, 1), TL_ENOTLEASED);

	/* leased by CA (version 2) */
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
	EXPECT_FAIL(HOP("m1", CB, 2), TL_ELEASED);
	EXPECT_FAIL(HOP("m1", CB, 7), TL_ELEASED); /* before version */
	/* consumer names match exactly, not by prefix */
	EXPECT_FAIL(HOP("m1", "worker-", 2), TL_ELEASED);
	EXPECT_FAIL(HOP("m1", "worker-aa", 2), TL_ELEASED);
	EXPECT_FAIL(HOP("m1", CA, 1), TL_EVERSION);
	EXPECT_FAIL(HOP("m1", CA, 3), TL_EVERSION);
	EXPECT_FAIL(HOP("m1", CA, 0), TL_EVERSION); /* 0 never matches */

	/* the lease runs out exactly at its end */
	tt_clock_set(&clk, T0 + LEASE);
	EXPECT_FAIL(HOP("m1", CA, 2), TL_ELEASEEXPIRED);
	EXPECT_FAIL(HOP("m1", CA, 1), TL_EVERSION); /* before expiry */
	EXPECT_FAIL(HOP("m1", CB, 2), TL_ELEASED);  /* lock before expiry */
	tt_clock_advance(&clk, 3600000);
	EXPECT_FAIL(HOP("m1", CA, 2), TL_ELEASEEXPIRED);

	/* released: no longer leased */
	TL_PASS(create("m2", now_ms(), NULL));
	TL_PASS(lease("m2", CA, now_ms() + LEASE, 1, NULL));
	TL_PASS(release("m2", CA, now_ms(), 2, NULL));
	EXPECT_FAIL(HOP("m2", CA, 3), TL_ENOTLEASED);
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	CHECK_MSG("m2", now_ms(), 3, "", 1);
	CHECK_COUNTERS(3, 1);
#undef HOP
}

Test(conditions, extend_by_holder_moves_the_lease_end)
{
	tli_op op;

	m1_leased_by_ca();
	tt_clock_advance(&clk, 10000);
	TL_PASS(extend("m1", CA, now_ms() + LEASE, 2, &op));
	cr_assert_eq(op.new_version, 3);
	cr_assert_eq(op.new_ts, T0 + 10000 + LEASE);
	CHECK_MSG("m1", T0 + 10000 + LEASE, 3, CA, 1);
	CHECK_COUNTERS(1, 1);
	CHECK_TOTALS(0, 0, 1);
	/* shortening is allowed too; deliveries do not move */
	TL_PASS(extend("m1", CA, now_ms() + 1, 3, &op));
	CHECK_MSG("m1", now_ms() + 1, 4, CA, 1);
	cr_assert_eq(consumer_leases(CA, NULL), 1);
	env_finish();
}

Test(conditions, extend_refusals_follow_the_table)
{
	holder_refusals(TLI_OP_EXTEND);
	env_finish();
}

Test(conditions, extend_time_checks)
{
	m1_leased_by_ca();
	tt_clock_advance(&clk, 100);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "m1", CA, now_ms(), 2), TL_ETOOCLOSE);
	EXPECT_FAIL(
	    mkop(TLI_OP_EXTEND, "m1", CA, now_ms() - 1, 2), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "m1", CA,
	                now_ms() + TL_DEFAULT_MAX_LEASE_MS + 1, 2),
	    TL_ELEASELIMIT);
	/* time before state: not the holder, missing */
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "m1", CB, now_ms(), 2), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "nope", CA, now_ms(), 2), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "nope", CA,
	                now_ms() + TL_DEFAULT_MAX_LEASE_MS + 1, 2),
	    TL_ELEASELIMIT);
	TL_PASS(extend("m1", CA, now_ms() + 1, 2, NULL));
	TL_PASS(extend("m1", CA, now_ms() + TL_DEFAULT_MAX_LEASE_MS, 3, NULL));
	CHECK_MSG("m1", now_ms() + TL_DEFAULT_MAX_LEASE_MS, 4, CA, 1);
	env_finish();
}

Test(conditions, release_by_holder_unlocks_at_new_ts)
{
	tli_op op;

	m1_leased_by_ca();
	tt_clock_advance(&clk, 1000);
	TL_PASS(release("m1", CA, now_ms() + 5000, 2, &op));
	cr_assert_eq(op.new_version, 3);
	cr_assert_eq(op.new_ts, T0 + 6000);
	CHECK_MSG("m1", T0 + 6000, 3, "", 1);
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(0, 1, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CB, now_ms() + LEASE, 0), TL_ENOTDUE);
	tt_clock_set(&clk, T0 + 6000);
	TL_PASS(lease("m1", CB, now_ms() + LEASE, 3, &op));
	cr_assert_eq(op.deliveries, 2);
	env_finish();
}

Test(conditions, release_to_exactly_now_is_available_at_once)
{
	tli_op op;

	m1_leased_by_ca();
	tt_clock_advance(&clk, 42);
	TL_PASS(release("m1", CA, now_ms(), 2, &op));
	cr_assert_eq(op.new_ts, T0 + 42);
	CHECK_MSG("m1", T0 + 42, 3, "", 1);
	CHECK_TOTALS(1, 0, 0);
	cr_assert(due_has("m1", NULL));
	TL_PASS(lease("m1", CB, now_ms() + LEASE, 3, NULL));
	env_finish();
}

Test(conditions, release_time_checks)
{
	m1_leased_by_ca();
	tt_clock_advance(&clk, 100);
	EXPECT_FAIL(
	    mkop(TLI_OP_RELEASE, "m1", CA, now_ms() - 1, 2), TL_ETOOCLOSE);
	EXPECT_FAIL(mkop(TLI_OP_RELEASE, "m1", CA, T0 - 5000, 2), TL_ETOOCLOSE);
	/* time before state */
	EXPECT_FAIL(
	    mkop(TLI_OP_RELEASE, "m1", CB, now_ms() - 1, 2), TL_ETOOCLOSE);
	EXPECT_FAIL(
	    mkop(TLI_OP_RELEASE, "nope", CA, now_ms() - 1, 2), TL_ETOOCLOSE);
	/* a release is a retry delay, not a lease: no lease limit */
	TL_PASS(release(
	    "m1", CA, now_ms() + 10 * TL_DEFAULT_MAX_LEASE_MS, 2, NULL));
	CHECK_MSG("m1", now_ms() + 10 * TL_DEFAULT_MAX_LEASE_MS, 3, "", 1);
	env_finish();
}

Test(conditions, release_refusals_follow_the_table)
{
	holder_refusals(TLI_OP_RELEASE);
	env_finish();
}

Test(conditions, delete_by_holder_removes_the_message)
{
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(create("m2", T0, NULL));
	TL_PASS(lease("m1", CA, T0 + LEASE, 0, NULL));
	tt_clock_advance(&clk, LEASE - 1);
	TL_PASS(del_leased("m1", CA, 2));
	CHECK_GONE("m1");
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(1, 0, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	cr_assert_not(due_has("m1", NULL));
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m1", CA, now_ms() + LEASE, 0), TL_ENOTFOUND);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_LEASED, "m1", CA, 0, 2), TL_ENOTFOUND);
	CHECK_MSG("m2", T0, 1, "", 0);
	env_finish();
}

Test(conditions, delete_by_holder_refusals_follow_the_table)
{
	holder_refusals(TLI_OP_DELETE_LEASED);
	env_finish();
}

/* =================================================================== */
/* delete by owner, move                                               */
/* =================================================================== */

/* The refusals shared by delete(owner) and move. */
static void
owner_refusals(tli_op_type type)
{
	int64_t ts = T0 + 50000;

	EXPECT_FAIL(mkop(type, "nope", OWNER, ts, 0), TL_ENOTFOUND);
	EXPECT_FAIL(mkop(type, "nope", OWNER, ts, 1), TL_ENOTFOUND);
	TL_PASS(create("m1", T0, NULL));
	EXPECT_FAIL(mkop(type, "m1", OTHER_OWNER, ts, 0), TL_ENOTOWNER);
	EXPECT_FAIL(mkop(type, "m1", OTHER_OWNER, ts, 7), TL_ENOTOWNER);
	EXPECT_FAIL(mkop(type, "m1", "billin", ts, 1), TL_ENOTOWNER);
	EXPECT_FAIL(mkop(type, "m1", "billingx", ts, 1), TL_ENOTOWNER);
	EXPECT_FAIL(mkop(type, "m1", OWNER, ts, 2), TL_EVERSION);

	/* under an active lease */
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
	EXPECT_FAIL(mkop(type, "m1", OWNER, ts, 0), TL_ELEASED);
	EXPECT_FAIL(mkop(type, "m1", OWNER, ts, 2), TL_ELEASED);
	EXPECT_FAIL(mkop(type, "m1", OWNER, ts, 1), TL_EVERSION);
	EXPECT_FAIL(mkop(type, "m1", OTHER_OWNER, ts, 2), TL_ENOTOWNER);
	/* the lease holder is not the owner */
	EXPECT_FAIL(mkop(type, "m1", CA, ts, 2), TL_ENOTOWNER);
	tt_clock_set(&clk, T0 + LEASE - 1);
	EXPECT_FAIL(mkop(type, "m1", OWNER, ts, 0), TL_ELEASED);
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	CHECK_COUNTERS(1, 1);
}

Test(conditions, delete_by_owner_removes_unleased_or_run_out)
{
	TL_PASS(create("waiting", T0 + 100000, NULL));
	TL_PASS(create("due", T0, NULL));
	TL_PASS(create("ranout", T0, NULL));
	TL_PASS(lease("ranout", CA, T0 + LEASE, 0, NULL));
	TL_PASS(del_owned("waiting", OWNER, 0));
	TL_PASS(del_owned("due", OWNER, 1));
	CHECK_GONE("waiting");
	CHECK_GONE("due");
	CHECK_COUNTERS(1, 1);
	tt_clock_set(&clk, T0 + LEASE);
	TL_PASS(del_owned("ranout", OWNER, 2));
	CHECK_GONE("ranout");
	CHECK_COUNTERS(0, 0);
	CHECK_TOTALS(0, 0, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "ranout", CA, now_ms() + LEASE, 2),
	    TL_ENOTFOUND);
	EXPECT_FAIL(
	    mkop(TLI_OP_DELETE_OWNED, "due", OWNER, 0, 0), TL_ENOTFOUND);
	env_finish();
}

Test(conditions, delete_by_owner_refusals_follow_the_table)
{
	owner_refusals(TLI_OP_DELETE_OWNED);
	env_finish();
}

Test(conditions, move_changes_ts_and_unlocks)
{
	tli_op op;

	TL_PASS(create("m1", T0 + 100000, NULL));
	TL_PASS(move("m1", OWNER, T0 + 200000, 0, &op));
	cr_assert_eq(op.new_version, 2);
	cr_assert_eq(op.new_ts, T0 + 200000);
	CHECK_MSG("m1", T0 + 200000, 2, "", 0);
	CHECK_TOTALS(0, 1, 0);
	/* into the past: available at once */
	TL_PASS(move("m1", OWNER, T0 - 1000, 2, &op));
	CHECK_MSG("m1", T0 - 1000, 3, "", 0);
	CHECK_TOTALS(1, 0, 0);
	cr_assert(due_has("m1", NULL));
	/* a run-out lease is cleared, deliveries stay */
	TL_PASS(lease("m1", CA, T0 + LEASE, 3, NULL));
	tt_clock_set(&clk, T0 + LEASE + 1);
	TL_PASS(move("m1", OWNER, now_ms() + 5000, 0, &op));
	cr_assert_eq(op.new_version, 5);
	CHECK_MSG("m1", now_ms() + 5000, 5, "", 1);
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(0, 1, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	env_finish();
}

Test(conditions, move_refusals_follow_the_table)
{
	owner_refusals(TLI_OP_MOVE);
	env_finish();
}

/* =================================================================== */
/* relative timestamps and submissions                                 */
/* =================================================================== */

Test(conditions, relative_timestamps_are_added_to_store_now)
{
	tli_op op;

	tt_clock_set(&clk, T0 + 777);
	TL_PASS(run_op(mkrel(TLI_OP_CREATE, "later", OWNER, 5000, 0), &op));
	cr_assert_eq(op.new_ts, T0 + 777 + 5000);
	CHECK_MSG("later", T0 + 777 + 5000, 1, "", 0);
	TL_PASS(run_op(mkrel(TLI_OP_CREATE, "m1", OWNER, 0, 0), &op));
	CHECK_MSG("m1", T0 + 777, 1, "", 0);

	tt_clock_advance(&clk, 23); /* T0 + 800 */
	TL_PASS(run_op(mkrel(TLI_OP_LEASE, "m1", CA, LEASE, 1), &op));
	cr_assert_eq(op.new_ts, T0 + 800 + LEASE);
	CHECK_MSG("m1", T0 + 800 + LEASE, 2, CA, 1);
	tt_clock_advance(&clk, 1000);
	TL_PASS(run_op(mkrel(TLI_OP_EXTEND, "m1", CA, LEASE, 2), &op));
	cr_assert_eq(op.new_ts, T0 + 1800 + LEASE);
	CHECK_MSG("m1", T0 + 1800 + LEASE, 3, CA, 1);
	TL_PASS(run_op(mkrel(TLI_OP_RELEASE, "m1", CA, 0, 3), &op));
	cr_assert_eq(op.new_ts, T0 + 1800);
	CHECK_MSG("m1", T0 + 1800, 4, "", 1);
	TL_PASS(run_op(mkrel(TLI_OP_LEASE, "m1", CB, 1, 4), &op));
	cr_assert_eq(op.new_ts, T0 + 1801);
	TL_PASS(run_op(mkrel(TLI_OP_RELEASE, "m1", CB, 2000, 5), &op));
	CHECK_MSG("m1", T0 + 3800, 6, "", 2);
	TL_PASS(run_op(mkrel(TLI_OP_MOVE, "m1", OWNER, -5000, 6), &op));
	CHECK_MSG("m1", T0 + 1800 - 5000, 7, "", 2);
	CHECK_TOTALS(1, 1, 0);
	env_finish();
}

Test(conditions, relative_timestamps_obey_the_time_checks)
{
	TL_PASS(create("m1", T0, NULL));
	EXPECT_FAIL(mkrel(TLI_OP_LEASE, "m1", CA, 0, 0), TL_ETOOCLOSE);
	EXPECT_FAIL(mkrel(TLI_OP_LEASE, "m1", CA, -1, 0), TL_ETOOCLOSE);
	EXPECT_FAIL(
	    mkrel(TLI_OP_LEASE, "m1", CA, TL_DEFAULT_MAX_LEASE_MS + 1, 0),
	    TL_ELEASELIMIT);
	TL_PASS(run_op(
	    mkrel(TLI_OP_LEASE, "m1", CA, TL_DEFAULT_MAX_LEASE_MS, 0), NULL));
	EXPECT_FAIL(mkrel(TLI_OP_EXTEND, "m1", CA, 0, 2), TL_ETOOCLOSE);
	EXPECT_FAIL(
	    mkrel(TLI_OP_EXTEND, "m1", CA, TL_DEFAULT_MAX_LEASE_MS + 1, 2),
	    TL_ELEASELIMIT);
	EXPECT_FAIL(mkrel(TLI_OP_RELEASE, "m1", CA, -1, 2), TL_ETOOCLOSE);
	CHECK_MSG("m1", T0 + TL_DEFAULT_MAX_LEASE_MS, 2, CA, 1);
	env_finish();
}

Test(conditions, later_ops_of_one_submission_see_earlier_ones)
{
	tli_op ops[6];

	ops[0] = mkop(TLI_OP_CREATE, "m1", OWNER, T0, 0);
	ops[1] = mkop(TLI_OP_LEASE, "m1", CA, T0 + LEASE, 0);
	ops[2] = mkop(TLI_OP_LEASE, "m1", CB, T0 + LEASE, 0);
	ops[3] = mkop(TLI_OP_EXTEND, "m1", CA, T0 + 2 * LEASE, 2);
	ops[4] = mkop(TLI_OP_CREATE, "m1", OWNER, T0, 0);
	ops[5] = mkop(TLI_OP_DELETE_OWNED, "m1", OWNER, 0, 0);
	TL_PASS(tli_store_apply(st, ops, 6));
	TL_PASS(ops[0].err);
	TL_PASS(ops[1].err);
	TL_FAIL(ops[2].err, TL_ELEASED);
	TL_PASS(ops[3].err);
	TL_FAIL(ops[4].err, TL_EEXISTS);
	TL_FAIL(ops[5].err, TL_ELEASED);
	cr_assert_eq(ops[3].new_version, 3);
	CHECK_MSG("m1", T0 + 2 * LEASE, 3, CA, 1);
	CHECK_COUNTERS(1, 1);
	env_finish();
}

/* =================================================================== */
/* lease expiry                                                        */
/* =================================================================== */

Test(expiry, run_out_lease_makes_message_available_to_others)
{
	tli_op op;
	tli_entry e;

	m1_leased_by_ca();
	CHECK_TOTALS(0, 0, 1);
	cr_assert_not(due_has("m1", NULL));

	/* active exactly while ts > now */
	tt_clock_set(&clk, T0 + LEASE - 1);
	CHECK_TOTALS(0, 0, 1);
	cr_assert_not(due_has("m1", NULL));
	tt_clock_set(&clk, T0 + LEASE);
	CHECK_TOTALS(1, 0, 0);
	cr_assert(due_has("m1", &e), "a run-out lease must be due");
	cr_assert_eq(e.version, 2);
	cr_assert_eq(e.ts, T0 + LEASE);
	cr_assert(e.locked);
	CHECK_COUNTERS(1, 1); /* the lock stays until someone acts */

	/* the old holder has lost it */
	tt_clock_advance(&clk, 5000);
	EXPECT_FAIL(mkop(TLI_OP_EXTEND, "m1", CA, now_ms() + LEASE, 2),
	    TL_ELEASEEXPIRED);
	EXPECT_FAIL(
	    mkop(TLI_OP_RELEASE, "m1", CA, now_ms() + 10, 2), TL_ELEASEEXPIRED);
	EXPECT_FAIL(
	    mkop(TLI_OP_DELETE_LEASED, "m1", CA, 0, 2), TL_ELEASEEXPIRED);

	/* another consumer takes it */
	TL_PASS(lease("m1", CB, now_ms() + LEASE, 2, &op));
	cr_assert_eq(op.new_version, 3);
	cr_assert_eq(op.deliveries, 2);
	CHECK_MSG("m1", now_ms() + LEASE, 3, CB, 2);
	CHECK_TOTALS(0, 0, 1);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	cr_assert_eq(consumer_leases(CB, &e), 1);
	cr_assert_eq(e.version, 3);

	/* now the old holder meets someone else's lease */
	EXPECT_FAIL(
	    mkop(TLI_OP_EXTEND, "m1", CA, now_ms() + LEASE, 2), TL_ELEASED);
	EXPECT_FAIL(
	    mkop(TLI_OP_EXTEND, "m1", CA, now_ms() + LEASE, 3), TL_ELEASED);
	EXPECT_FAIL(mkop(TLI_OP_RELEASE, "m1", CA, now_ms(), 3), TL_ELEASED);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_LEASED, "m1", CA, 0, 3), TL_ELEASED);

	/* the owner waits for B's lease */
	EXPECT_FAIL(mkop(TLI_OP_DELETE_OWNED, "m1", OWNER, 0, 0), TL_ELEASED);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_OWNED, "m1", OWNER, 0, 3), TL_ELEASED);
	tt_clock_advance(&clk, LEASE);
	TL_PASS(del_owned("m1", OWNER, 0));
	CHECK_GONE("m1");
	CHECK_COUNTERS(0, 0);
	CHECK_TOTALS(0, 0, 0);
	cr_assert_eq(consumer_leases(CB, NULL), 0);
	env_finish();
}

Test(expiry, holder_may_lease_again_after_running_out)
{
	tli_op op;

	m1_leased_by_ca();
	tt_clock_set(&clk, T0 + LEASE);
	TL_PASS(lease("m1", CA, now_ms() + LEASE, 2, &op));
	cr_assert_eq(op.deliveries, 2);
	TL_PASS(extend("m1", CA, now_ms() + 2 * LEASE, 3, NULL));
	CHECK_MSG("m1", now_ms() + 2 * LEASE, 4, CA, 2);
	CHECK_COUNTERS(1, 1);
	cr_assert_eq(consumer_leases(CA, NULL), 1);
	env_finish();
}

Test(expiry, owner_move_clears_a_run_out_lease)
{
	tli_op op;

	m1_leased_by_ca();
	/* moving under the active lease is refused */
	EXPECT_FAIL(mkop(TLI_OP_MOVE, "m1", OWNER, T0 + 5000, 0), TL_ELEASED);
	tt_clock_set(&clk, T0 + LEASE + 10);
	TL_PASS(move("m1", OWNER, now_ms() + 5000, 0, &op));
	cr_assert_eq(op.new_version, 3);
	CHECK_MSG("m1", now_ms() + 5000, 3, "", 1);
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(0, 1, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	EXPECT_FAIL(
	    mkop(TLI_OP_EXTEND, "m1", CA, now_ms() + LEASE, 3), TL_ENOTLEASED);
	EXPECT_FAIL(mkop(TLI_OP_RELEASE, "m1", CA, now_ms(), 3), TL_ENOTLEASED);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_LEASED, "m1", CA, 0, 3), TL_ENOTLEASED);
	env_finish();
}

/* =================================================================== */
/* bad input                                                           */
/* =================================================================== */

static const tli_op_type all_types[] = {TLI_OP_CREATE, TLI_OP_LEASE,
    TLI_OP_EXTEND, TLI_OP_RELEASE, TLI_OP_DELETE_LEASED, TLI_OP_DELETE_OWNED,
    TLI_OP_MOVE};
#define NTYPES (sizeof(all_types) / sizeof(all_types[0]))

/* An op that would be valid on "m1" (created and leased by CA at version
 * 2 by input_setup) but for what the test changes. */
static tli_op
sample_op(tli_op_type type, const char *id)
{
	int64_t ts = 0;

	switch (type) {
	case TLI_OP_CREATE:
		ts = T0 + 1000;
		break;
	case TLI_OP_LEASE:
	case TLI_OP_EXTEND:
		ts = now_ms() + LEASE;
		break;
	case TLI_OP_RELEASE:
		ts = now_ms();
		break;
	case TLI_OP_MOVE:
		ts = T0 + 2000;
		break;
	default:
		break;
	}
	return mkop(type, id, owner_op(type) ? OWNER : CA, ts,
	    type == TLI_OP_CREATE ? 0 : 2);
}

static void
input_setup(void)
{
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
}

/* After a refused op: still exactly one message, unchanged. */
static void
input_unchanged(void)
{
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	CHECK_COUNTERS(1, 1);
	env_finish();
}

/* Long inputs live in static buffers so that a failed assertion (which
 * leaves the test early) leaks nothing. */
static char long_buf[(TL_MAX_ID_LEN > TL_MAX_NAME_LEN ? TL_MAX_ID_LEN
                                                      : TL_MAX_NAME_LEN) +
    2];
static char body_buf[TL_DEFAULT_MAX_BODY + 1];

static char *
long_str(char c, size_t n)
{
	cr_assert_lt(n, sizeof(long_buf));
	memset(long_buf, c, n);
	long_buf[n] = '\0';
	return long_buf;
}

static char *
big_body(void)
{
	memset(body_buf, 'b', sizeof(body_buf));
	return body_buf;
}

Test(input, unknown_topic_fails_enotopic)
{
	tli_msg m;

	input_setup();
	for (size_t i = 0; i < NTYPES; i++) {
		tli_op op = sample_op(all_types[i], "m1");

		op.topic = "nosuch";
		EXPECT_FAIL(op, TL_ENOTOPIC);
		/* the topic is checked first */
		op.id_len = 0;
		op.who_len = 0;
		op.ts = -1;
		EXPECT_FAIL(op, TL_ENOTOPIC);
	}
	TL_FAIL(tli_store_get(st, "nosuch", "m1", 2, &m), TL_ENOTOPIC);
	/* a topic name differing only in case is another topic */
	TL_FAIL(tli_store_get(st, "Orders", "m1", 2, &m), TL_ENOTOPIC);
	input_unchanged();
}

Test(input, empty_id_fails_ebadid)
{
	input_setup();
	for (size_t i = 0; i < NTYPES; i++) {
		tli_op op = sample_op(all_types[i], "");

		if (all_types[i] == TLI_OP_CREATE) {
			continue;
		}
		EXPECT_FAIL(op, TL_EBADID);
		op.id = NULL;
		EXPECT_FAIL(op, TL_EBADID);
	}
	input_unchanged();
}

Test(input, empty_owner_or_consumer_fails_ebadid)
{
	input_setup();
	for (size_t i = 0; i < NTYPES; i++) {
		tli_op op = sample_op(
		    all_types[i], all_types[i] == TLI_OP_CREATE ? "n1" : "m1");

		op.who = "";
		op.who_len = 0;
		EXPECT_FAIL(op, TL_EBADID);
		CHECK_GONE("n1");
	}
	/* a create with a generated id needs an owner too */
	EXPECT_FAIL(mkop(TLI_OP_CREATE, NULL, "", T0, 0), TL_EBADID);
	input_unchanged();
}

Test(input, oversized_id_fails_etoolarge)
{
	char *big = long_str('x', TL_MAX_ID_LEN + 1);
	tli_msg m;
	int rv;

	input_setup();
	for (size_t i = 0; i < NTYPES; i++) {
		EXPECT_FAIL(sample_op(all_types[i], big), TL_ETOOLARGE);
	}
	rv = tli_store_get(st, topic, big, TL_MAX_ID_LEN + 1, &m);
	if (rv == TL_OK) {
		tli_msg_fini(&m);
	}
	TL_NOT_OK(rv, "an oversized id must not be stored");
	/* nothing was stored under the 128-byte prefix either */
	big[TL_MAX_ID_LEN] = '\0';
	CHECK_GONE(big);
	input_unchanged();

	/* exactly TL_MAX_ID_LEN is fine */
	TL_PASS(create(big, T0, NULL));
	TL_PASS(lease(big, CA, T0 + LEASE, 1, NULL));
	CHECK_MSG(big, T0 + LEASE, 2, CA, 1);
	env_finish();
}

Test(input, oversized_owner_or_consumer_fails_etoolarge)
{
	char *big = long_str('w', TL_MAX_NAME_LEN + 1);
	tli_op op;
	snap sn;

	input_setup();
	for (size_t i = 0; i < NTYPES; i++) {
		op = sample_op(
		    all_types[i], all_types[i] == TLI_OP_CREATE ? "n1" : "m1");
		op.who = big;
		op.who_len = TL_MAX_NAME_LEN + 1;
		EXPECT_FAIL(op, TL_ETOOLARGE);
		CHECK_GONE("n1");
	}
	input_unchanged();

	/* exactly TL_MAX_NAME_LEN is fine for an owner and a consumer */
	big[TL_MAX_NAME_LEN] = '\0';
	TL_PASS(run_op(mkop(TLI_OP_CREATE, "n1", big, T0, 0), NULL));
	TL_PASS(lease("n1", big, T0 + LEASE, 1, NULL));
	snap_take(&sn, "n1", 2);
	TL_PASS(sn.err);
	cr_assert_eq(sn.owner_len, TL_MAX_NAME_LEN);
	cr_assert_eq(memcmp(sn.owner, big, TL_MAX_NAME_LEN), 0);
	cr_assert_eq(sn.consumer_len, TL_MAX_NAME_LEN);
	cr_assert_eq(memcmp(sn.consumer, big, TL_MAX_NAME_LEN), 0);
	TL_PASS(del_leased("n1", big, 2));
	env_finish();
}

Test(input, body_over_topic_max_body_fails_etoolarge)
{
	char *body = big_body();
	tli_op op;
	tli_msg m;

	topic_with("small", 0, 64, 0, 0);
	topic = "small";
	op = mkop(TLI_OP_CREATE, "n1", OWNER, T0, 0);
	op.body = body;
	op.body_len = 65;
	EXPECT_FAIL(op, TL_ETOOLARGE);
	op.id_len = 0; /* generated id: same check */
	EXPECT_FAIL(op, TL_ETOOLARGE);
	CHECK_COUNTERS(0, 0);
	body[10] = 'X';
	op.id_len = 2;
	op.body_len = 64;
	TL_PASS(run(&op));
	TL_PASS(tli_store_get(st, topic, "n1", 2, &m));
	cr_assert_eq(m.body_len, 64);
	cr_assert_eq(memcmp(m.body, body, 64), 0, "body must round-trip");
	tli_msg_fini(&m);
	CHECK_COUNTERS(1, 0);
	env_finish();

	/* the default topic's limit is TL_DEFAULT_MAX_BODY */
	topic = TOPIC;
	op.topic = TOPIC;
	op.body_len = TL_DEFAULT_MAX_BODY + 1;
	EXPECT_FAIL(op, TL_ETOOLARGE);
	op.body_len = TL_DEFAULT_MAX_BODY;
	TL_PASS(run(&op));
	TL_PASS(tli_store_get(st, topic, "n1", 2, &m));
	cr_assert_eq(m.body_len, TL_DEFAULT_MAX_BODY);
	cr_assert_eq(memcmp(m.body, body, TL_DEFAULT_MAX_BODY), 0);
	tli_msg_fini(&m);
	env_finish();
}

Test(input, timestamps_out_of_range_fail_erange)
{
	static const int64_t bad[] = {-1, TL_TS_MAX + 1, INT64_MIN, INT64_MAX};
	tli_op op;

	input_setup();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_FAIL(
		    mkop(TLI_OP_CREATE, "n1", OWNER, bad[i], 0), TL_ERANGE);
		EXPECT_FAIL(
		    mkop(TLI_OP_CREATE, NULL, OWNER, bad[i], 0), TL_ERANGE);
		/* the range is checked before the time checks and state */
		EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", CB, bad[i], 0), TL_ERANGE);
		EXPECT_FAIL(
		    mkop(TLI_OP_EXTEND, "m1", CA, bad[i], 2), TL_ERANGE);
		EXPECT_FAIL(
		    mkop(TLI_OP_RELEASE, "m1", CA, bad[i], 2), TL_ERANGE);
		EXPECT_FAIL(
		    mkop(TLI_OP_MOVE, "m1", OWNER, bad[i], 2), TL_ERANGE);
		CHECK_GONE("n1");
	}
	/* relative timestamps are checked once resolved */
	EXPECT_FAIL(mkrel(TLI_OP_CREATE, "n1", OWNER, TL_TS_MAX - T0 + 1, 0),
	    TL_ERANGE);
	EXPECT_FAIL(mkrel(TLI_OP_CREATE, "n1", OWNER, -T0 - 1, 0), TL_ERANGE);
	EXPECT_FAIL(
	    mkrel(TLI_OP_MOVE, "m1", OWNER, TL_TS_MAX - T0 + 1, 0), TL_ERANGE);
	EXPECT_FAIL(
	    mkrel(TLI_OP_RELEASE, "m1", CA, TL_TS_MAX - T0 + 1, 2), TL_ERANGE);
	CHECK_GONE("n1");
	input_unchanged();

	/* the ends of the range are accepted */
	TL_PASS(create("max", TL_TS_MAX, &op));
	cr_assert_eq(op.new_ts, TL_TS_MAX);
	TL_PASS(create("zero", 0, NULL));
	TL_PASS(run_op(
	    mkrel(TLI_OP_CREATE, "relmax", OWNER, TL_TS_MAX - T0, 0), &op));
	cr_assert_eq(op.new_ts, TL_TS_MAX);
	TL_PASS(run_op(mkrel(TLI_OP_CREATE, "relzero", OWNER, -T0, 0), &op));
	cr_assert_eq(op.new_ts, 0);
	CHECK_MSG("max", TL_TS_MAX, 1, "", 0);
	CHECK_MSG("zero", 0, 1, "", 0);
	TL_PASS(move("zero", OWNER, TL_TS_MAX, 1, NULL));
	CHECK_MSG("zero", TL_TS_MAX, 2, "", 0);
	TL_PASS(release("m1", CA, TL_TS_MAX, 2, NULL));
	CHECK_MSG("m1", TL_TS_MAX, 3, "", 1);
	env_finish();
}

Test(input, checks_come_in_the_documented_order)
{
	char *big = long_str('x', TL_MAX_ID_LEN + 1);
	char *body = big_body();
	tli_op op;

	input_setup();
	/* EBADID before ETOOLARGE */
	op = mkop(TLI_OP_LEASE, "", big, now_ms() + LEASE, 0);
	EXPECT_FAIL(op, TL_EBADID);
	op = mkop(TLI_OP_CREATE, "n1", "", T0, 0);
	op.body = body;
	op.body_len = TL_DEFAULT_MAX_BODY + 1;
	EXPECT_FAIL(op, TL_EBADID);
	/* ETOOLARGE before ERANGE */
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "m1", big, -1, 0), TL_ETOOLARGE);
	EXPECT_FAIL(mkop(TLI_OP_MOVE, big, OWNER, -1, 0), TL_ETOOLARGE);
	op = mkop(TLI_OP_CREATE, "n1", OWNER, -1, 0);
	op.body = body;
	op.body_len = TL_DEFAULT_MAX_BODY + 1;
	EXPECT_FAIL(op, TL_ETOOLARGE);
	/* ERANGE before the time checks, time before state */
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "nope", CA, -1, 0), TL_ERANGE);
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "nope", CA, now_ms(), 0), TL_ETOOCLOSE);
	EXPECT_FAIL(
	    mkop(TLI_OP_RELEASE, "nope", CA, now_ms() - 1, 1), TL_ETOOCLOSE);
	CHECK_GONE("n1");
	CHECK_GONE("nope");
	input_unchanged();
}

/* Step 1 lists the empty checks (EBADID) before the size checks
 * (ETOOLARGE), whichever field they concern. */
/* Inputs are checked field by field (docs/storage.md): the id fully, then
 * the owner or consumer. */
Test(input, oversized_id_is_reported_before_empty_consumer)
{
	char *big = long_str('x', TL_MAX_ID_LEN + 1);

	input_setup();
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, big, "", now_ms() + LEASE, 0), TL_ETOOLARGE);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_OWNED, big, "", 0, 0), TL_ETOOLARGE);
	EXPECT_FAIL(mkop(TLI_OP_DELETE_OWNED, "", big, 0, 0), TL_EBADID);
	input_unchanged();
}

/* =================================================================== */
/* generated ids and buckets                                           */
/* =================================================================== */

static bool
crockford(const char *s, size_t n)
{
	static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	                               "abcdefghjkmnpqrstvwxyz";

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\0' || strchr(alphabet, s[i]) == NULL) {
			return false;
		}
	}
	return true;
}

Test(gen_id, create_without_id_generates_a_26_char_id)
{
	tli_op op;
	snap sn;

	op = mkop(TLI_OP_CREATE, NULL, OWNER, T0 + 10, 0);
	TL_PASS(run(&op));
	cr_assert_eq(
	    strlen(op.gen_id), TL_GEN_ID_LEN, "gen_id '%s'", op.gen_id);
	cr_assert(crockford(op.gen_id, TL_GEN_ID_LEN),
	    "gen_id '%s' is not Crockford base32", op.gen_id);
	cr_assert_eq(op.new_version, 1);
	cr_assert_eq(op.bucket,
	    tli_bucket_of(op.gen_id, TL_GEN_ID_LEN, TL_DEFAULT_BUCKETS));
	CHECK_MSG(op.gen_id, T0 + 10, 1, "", 0);
	snap_take(&sn, op.gen_id, TL_GEN_ID_LEN);
	cr_assert_eq(sn.created_at, T0);
	/* a non-NULL empty id means the same */
	op = mkop(TLI_OP_CREATE, "", OWNER, T0, 0);
	TL_PASS(run(&op));
	cr_assert_eq(strlen(op.gen_id), TL_GEN_ID_LEN);
	CHECK_MSG(op.gen_id, T0, 1, "", 0);
	/* usable like any id */
	TL_PASS(lease(op.gen_id, CA, T0 + LEASE, 1, NULL));
	CHECK_COUNTERS(2, 1);
	env_finish();
}

Test(gen_id, later_ids_sort_after_earlier_ones_even_in_one_ms)
{
	char prev[TL_GEN_ID_LEN + 1] = "";
	tli_op ops[20];
	tli_op op;
	unsigned total = 0;

	for (int i = 0; i < 30; i++) {
		op = mkop(TLI_OP_CREATE, NULL, OWNER, T0, 0);
		TL_PASS(run(&op));
		cr_assert_gt(strcmp(op.gen_id, prev), 0,
		    "id #%d '%s' does not sort after '%s' (same ms)", i,
		    op.gen_id, prev);
		memcpy(prev, op.gen_id, sizeof(prev));
		total++;
	}
	/* many in one submission, same ms */
	for (int i = 0; i < 20; i++) {
		ops[i] = mkop(TLI_OP_CREATE, NULL, OWNER, T0, 0);
	}
	TL_PASS(tli_store_apply(st, ops, 20));
	for (int i = 0; i < 20; i++) {
		TL_PASS(ops[i].err);
		cr_assert_gt(strcmp(ops[i].gen_id, prev), 0,
		    "batched id #%d '%s' does not sort after '%s'", i,
		    ops[i].gen_id, prev);
		memcpy(prev, ops[i].gen_id, sizeof(prev));
		total++;
	}
	/* and across milliseconds */
	for (int i = 0; i < 5; i++) {
		tt_clock_advance(&clk, i == 4 ? 86400000 : 1);
		op = mkop(TLI_OP_CREATE, NULL, OWNER, T0, 0);
		TL_PASS(run(&op));
		cr_assert_gt(strcmp(op.gen_id, prev), 0,
		    "id '%s' (later ms) does not sort after '%s'", op.gen_id,
		    prev);
		memcpy(prev, op.gen_id, sizeof(prev));
		total++;
	}
	CHECK_COUNTERS(total, 0);
	env_finish();
}

Test(gen_id, tli_gen_id_sorts_by_time)
{
	char a[TL_GEN_ID_LEN + 1], b[TL_GEN_ID_LEN + 1];
	char c[TL_GEN_ID_LEN + 1];

	tli_gen_id(a, T0);
	tli_gen_id(b, T0 + 1);
	tli_gen_id(c, TL_TS_MAX);
	cr_assert_eq(strlen(a), TL_GEN_ID_LEN);
	cr_assert(crockford(a, TL_GEN_ID_LEN), "'%s'", a);
	cr_assert_gt(strcmp(b, a), 0, "'%s' !> '%s'", b, a);
	cr_assert_gt(strcmp(c, b), 0, "'%s' !> '%s'", c, b);
}

Test(gen_id, retried_create_fails_eexists_in_the_same_bucket)
{
	static const char id[] = "order-2024-000017";
	uint64_t h = tli_hash64(id, strlen(id));
	tli_op op;
	tli_entry e;

	/* FNV-1a 64, stable: known values */
	cr_assert_eq(tli_bucket_of("a", 1, 4096),
	    (uint32_t) (UINT64_C(0xaf63dc4c8601ec8c) % 4096));
	cr_assert_eq(tli_bucket_of("foobar", 6, 16),
	    (uint32_t) (UINT64_C(0x85944171f73967e8) % 16));
	cr_assert_eq(tli_bucket_of(id, strlen(id), 7), (uint32_t) (h % 7));

	topic_with("seven", 7, 0, 0, 0);
	topic = "seven";
	TL_PASS(create(id, T0, &op));
	cr_assert_eq(op.bucket, (uint32_t) (h % 7));
	EXPECT_FAIL(mkop(TLI_OP_CREATE, id, OWNER, T0 + 99, 0), TL_EEXISTS);
	EXPECT_FAIL(mkop(TLI_OP_CREATE, id, OWNER, T0, 0), TL_EEXISTS);
	CHECK_MSG(id, T0, 1, "", 0); /* also checks its bucket */
	cr_assert(due_has(id, &e), "not found in its bucket");
	cr_assert_eq(e.bucket, (uint32_t) (h % 7));
	for (uint32_t b = 0; b < 7; b++) {
		size_t n = 0;
		bool more;
		tli_cursor cur;
		tli_entry out[4];

		memset(&cur, 0, sizeof(cur));
		TL_PASS(tli_store_scan_due(
		    st, topic, b, now_ms(), &cur, out, 4, &n, &more));
		cr_assert_eq(
		    n, b == h % 7 ? 1u : 0u, "bucket %u has %zu", b, n);
	}
	CHECK_COUNTERS(1, 0);
	env_finish();
}

/* =================================================================== */
/* topics                                                              */
/* =================================================================== */

static void
check_conf(const tli_topic_conf *got, const tli_topic_conf *want)
{
	cr_assert_str_eq(got->name, want->name);
	cr_assert_eq(got->buckets, want->buckets, "%s: buckets %u", got->name,
	    got->buckets);
	cr_assert_eq(got->max_body, want->max_body, "%s: max_body %u",
	    got->name, got->max_body);
	cr_assert_eq(got->default_lease_ms, want->default_lease_ms,
	    "%s: default_lease_ms %" PRId64, got->name, got->default_lease_ms);
	cr_assert_eq(got->max_lease_ms, want->max_lease_ms,
	    "%s: max_lease_ms %" PRId64, got->name, got->max_lease_ms);
	cr_assert_eq(got->max_deliveries, want->max_deliveries,
	    "%s: max_deliveries %u", got->name, got->max_deliveries);
}

static void
check_list(const char *const *names, size_t n)
{
	tli_topic_info *list = NULL;
	size_t got = 0;

	TL_PASS(tli_store_topic_list(st, &list, &got));
	cr_assert_eq(got, n, "%zu topics, expected %zu", got, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_str_eq(list[i].conf.name, names[i],
		    "topic #%zu is '%s', expected '%s'", i, list[i].conf.name,
		    names[i]);
	}
	tli_free(list);
}

Test(topics, create_get_list_delete)
{
	static const char *const sorted[] = {
	    "Zulu", "alpha", "alphabet", "beta"};
	static const char *const after[] = {"Zulu", "alpha", "alphabet"};
	tli_topic_conf beta;
	tli_topic_info ti, ti2;
	tli_msg m;
	tli_op op;

	TL_PASS(tli_topic_conf_init(&beta, "beta"));
	beta.buckets = 8;
	beta.max_body = 1024;
	beta.default_lease_ms = 5000;
	beta.max_lease_ms = 60000;
	beta.max_deliveries = 3;
	tt_clock_set(&clk, T0 + 5);
	TL_PASS(tli_store_topic_create(st, &beta));
	tt_topic(st, "alphabet", 1);
	tt_topic(st, "Zulu", 0);
	tt_topic(st, "alpha", 0);

	TL_PASS(tli_store_topic_get(st, "beta", &ti));
	check_conf(&ti.conf, &beta);
	cr_assert_eq(ti.created_at, T0 + 5);
	cr_assert_eq(ti.messages, 0);
	cr_assert_eq(ti.locked, 0);
	TL_PASS(tli_store_topic_get(st, "alpha", &ti2));
	cr_assert_neq(ti.topic_id, ti2.topic_id);
	TL_FAIL(tli_store_topic_get(st, "alph", &ti2), TL_ENOTOPIC);
	check_list(sorted, 4);

	/* messages of one topic are not seen from another */
	topic = "beta";
	TL_PASS(create("m1", T0, &op));
	cr_assert_lt(op.bucket, 8);
	TL_FAIL(tli_store_get(st, "alpha", "m1", 2, &m), TL_ENOTFOUND);

	TL_PASS(tli_store_topic_delete(st, "beta"));
	TL_FAIL(tli_store_topic_get(st, "beta", &ti), TL_ENOTOPIC);
	TL_FAIL(tli_store_topic_delete(st, "beta"), TL_ENOTOPIC);
	TL_FAIL(tli_store_get(st, "beta", "m1", 2, &m), TL_ENOTOPIC);
	op = mkop(TLI_OP_LEASE, "m1", CA, now_ms() + LEASE, 0);
	TL_FAIL(run(&op), TL_ENOTOPIC);
	check_list(after, 3);
	topic = "alpha";
	env_finish();
}

Test(topics, duplicate_name_fails_etopicexists)
{
	tli_topic_conf c;
	tli_topic_info ti;
	static const char *const one[] = {"t"};

	tt_topic(st, "t", 4);
	TL_PASS(tli_topic_conf_init(&c, "t"));
	c.buckets = 8;
	TL_FAIL(tli_store_topic_create(st, &c), TL_ETOPICEXISTS);
	TL_PASS(tli_store_topic_get(st, "t", &ti));
	cr_assert_eq(ti.conf.buckets, 4, "the first topic's settings stay");
	check_list(one, 1);
	env_finish();
}

Test(topics, zero_settings_mean_the_defaults)
{
	tli_topic_conf c, want;
	tli_topic_info ti;

	TL_PASS(tli_topic_conf_init(&c, "zero"));
	cr_assert_str_eq(c.name, "zero");
	c.buckets = 0;
	c.max_body = 0;
	c.default_lease_ms = 0;
	c.max_lease_ms = 0;
	c.max_deliveries = 0; /* never dead-letter, not "default" */
	TL_PASS(tli_store_topic_create(st, &c));
	memset(&want, 0, sizeof(want));
	strcpy(want.name, "zero");
	want.buckets = TL_DEFAULT_BUCKETS;
	want.max_body = TL_DEFAULT_MAX_BODY;
	want.default_lease_ms = TL_DEFAULT_LEASE_MS;
	want.max_lease_ms = TL_DEFAULT_MAX_LEASE_MS;
	want.max_deliveries = 0;
	TL_PASS(tli_store_topic_get(st, "zero", &ti));
	check_conf(&ti.conf, &want);

	/* conf_init alone gives every documented default */
	TL_PASS(tli_topic_conf_init(&c, "plain"));
	TL_PASS(tli_store_topic_create(st, &c));
	strcpy(want.name, "plain");
	want.max_deliveries = TL_DEFAULT_MAX_DELIVERIES;
	TL_PASS(tli_store_topic_get(st, "plain", &ti));
	check_conf(&ti.conf, &want);
	env_finish();
}

/* Create a topic from c expecting `want`; when refused, it must not exist. */
#define TRY_TOPIC(c, want) try_topic(__LINE__, (c), (want))

static void
try_topic(int line, const tli_topic_conf *c, int want)
{
	tli_topic_info ti;
	int rv = tli_store_topic_create(st, c);

	cr_assert_eq(rv, want, "line %d: topic '%s': expected %s, got %s", line,
	    c->name, tl_errname(want), tl_errname(rv));
	if (want != TL_OK) {
		rv = tli_store_topic_get(st, c->name, &ti);
		TL_FAIL(rv, TL_ENOTOPIC,
		    "line %d: refused topic '%s' "
		    "exists (%s)",
		    line, c->name, tl_errname(rv));
	}
}

Test(topics, out_of_range_settings_fail_einval)
{
	tli_topic_conf c;
	tli_topic_info ti;

	TL_PASS(tli_topic_conf_init(&c, "b"));
	c.buckets = TL_MAX_BUCKETS + 1;
	TRY_TOPIC(&c, TL_EINVAL);
	c.buckets = TL_MAX_BUCKETS;
	TRY_TOPIC(&c, TL_OK);
	TL_PASS(tli_store_topic_get(st, "b", &ti));
	cr_assert_eq(ti.conf.buckets, TL_MAX_BUCKETS);

	TL_PASS(tli_topic_conf_init(&c, "body"));
	c.max_body = TL_MAX_BODY_LEN + 1;
	TRY_TOPIC(&c, TL_EINVAL);
	c.max_body = TL_MAX_BODY_LEN;
	TRY_TOPIC(&c, TL_OK);

	TL_PASS(tli_topic_conf_init(&c, "lease"));
	c.max_lease_ms = TL_MAX_LEASE_MS + 1;
	TRY_TOPIC(&c, TL_EINVAL);
	c.max_lease_ms = -1;
	TRY_TOPIC(&c, TL_EINVAL);
	c.max_lease_ms = 1000;
	c.default_lease_ms = 1001;
	TRY_TOPIC(&c, TL_EINVAL);
	c.default_lease_ms = -5;
	TRY_TOPIC(&c, TL_EINVAL);
	c.default_lease_ms = 1000;
	TRY_TOPIC(&c, TL_OK);
	TL_PASS(tli_topic_conf_init(&c, "lease7d"));
	c.max_lease_ms = TL_MAX_LEASE_MS;
	TRY_TOPIC(&c, TL_OK);
	env_finish();
}

Test(topics, bad_names_fail)
{
	tli_topic_conf c;
	char *name = long_str('n', TL_MAX_NAME_LEN + 1);
	tli_topic_info *list = NULL;
	size_t n = 0;

	TL_FAIL(tli_topic_conf_init(&c, ""), TL_EBADID);
	TL_FAIL(tli_topic_conf_init(&c, name), TL_ETOOLARGE);
	/* a configuration with an empty name is refused by create too */
	TL_PASS(tli_topic_conf_init(&c, "x"));
	c.name[0] = '\0';
	TL_FAIL(tli_store_topic_create(st, &c), TL_EBADID);
	TL_PASS(tli_store_topic_list(st, &list, &n));
	cr_assert_eq(n, 0);
	tli_free(list);
	name[TL_MAX_NAME_LEN] = '\0';
	TL_PASS(tli_topic_conf_init(&c, name));
	TL_PASS(tli_store_topic_create(st, &c));
	topic = name;
	TL_PASS(create("m1", T0, NULL));
	CHECK_COUNTERS(1, 0);
	env_finish();
	topic = TOPIC;
}

Test(topics, delete_removes_its_messages)
{
	tli_topic_info old, fresh;
	tli_cursor cur;
	tli_entry out[8];
	size_t n;
	bool more;
	uint64_t total = 0;

	tt_topic(st, "t", 4);
	topic = "t";
	TL_PASS(create("waiting", T0 + 100000, NULL));
	TL_PASS(create("due", T0 - 5, NULL));
	TL_PASS(create("leased", T0, NULL));
	TL_PASS(lease("leased", CA, T0 + LEASE, 1, NULL));
	TL_PASS(tli_store_topic_get(st, "t", &old));
	cr_assert_eq(old.messages, 3);
	TL_PASS(tli_store_topic_delete(st, "t"));
	env_finish();

	tt_topic(st, "t", 4);
	TL_PASS(tli_store_topic_get(st, "t", &fresh));
	cr_assert_neq(
	    fresh.topic_id, old.topic_id, "a topic id must never be reused");
	cr_assert_eq(fresh.messages, 0);
	cr_assert_eq(fresh.locked, 0);
	CHECK_GONE("waiting");
	CHECK_GONE("due");
	CHECK_GONE("leased");
	CHECK_TOTALS(0, 0, 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	for (uint32_t b = 0; b < 4; b++) {
		memset(&cur, 0, sizeof(cur));
		TL_PASS(tli_store_scan_due(
		    st, "t", b, TL_TS_MAX, &cur, out, 8, &n, &more));
		total += n;
	}
	cr_assert_eq(total, 0, "old entries resurfaced in the timeline");
	/* the old ids are free */
	TL_PASS(create("leased", T0, NULL));
	CHECK_MSG("leased", T0, 1, "", 0);
	CHECK_COUNTERS(1, 0);
	env_finish();
}

Test(topics, topics_and_messages_persist_across_reopen)
{
	static const char *const names[] = {"a", "b"};
	tli_topic_conf ca;
	tli_topic_info ia, ib, igone, ic, ra, rb;
	snap before[4], after[4];
	static const char *const ids[] = {"m1", "m2", "m3", "gen"};
	char gen[TL_GEN_ID_LEN + 1];
	tli_op op;

	TL_PASS(tli_topic_conf_init(&ca, "a"));
	ca.buckets = 4;
	ca.max_body = 100;
	ca.default_lease_ms = 2000;
	ca.max_lease_ms = 90000;
	ca.max_deliveries = 5;
	TL_PASS(tli_store_topic_create(st, &ca));
	tt_topic(st, "gone", 0);
	tt_topic(st, "b", 0);
	TL_PASS(tli_store_topic_get(st, "gone", &igone));
	TL_PASS(tli_store_topic_delete(st, "gone"));

	topic = "a";
	TL_PASS(create("m1", T0 + 100000, NULL));
	TL_PASS(create("m2", T0, NULL));
	TL_PASS(lease("m2", CA, T0 + LEASE, 1, NULL));
	TL_PASS(create("m3", T0, NULL));
	TL_PASS(lease("m3", CB, T0 + LEASE, 1, NULL));
	TL_PASS(release("m3", CB, T0 + 7, 2, NULL));
	op = mkop(TLI_OP_CREATE, NULL, OWNER, T0, 0);
	TL_PASS(run(&op));
	memcpy(gen, op.gen_id, sizeof(gen));
	topic = "b";
	TL_PASS(create("m1", T0 + 1, NULL));
	topic = "a";
	TL_PASS(tli_store_topic_get(st, "a", &ia));
	TL_PASS(tli_store_topic_get(st, "b", &ib));
	for (int i = 0; i < 4; i++) {
		const char *id = i == 3 ? gen : ids[i];
		snap_take(&before[i], id, strlen(id));
	}

	tli_store_close(st);
	st = NULL;
	st = tt_store_open(dir, &clk);

	check_list(names, 2);
	TL_FAIL(tli_store_topic_get(st, "gone", &ic), TL_ENOTOPIC);
	TL_PASS(tli_store_topic_get(st, "a", &ra));
	TL_PASS(tli_store_topic_get(st, "b", &rb));
	check_conf(&ra.conf, &ca);
	cr_assert_eq(ra.topic_id, ia.topic_id);
	cr_assert_eq(ra.created_at, ia.created_at);
	cr_assert_eq(ra.messages, 4);
	cr_assert_eq(ra.locked, 1);
	cr_assert_eq(rb.topic_id, ib.topic_id);
	cr_assert_eq(rb.messages, 1);
	for (int i = 0; i < 4; i++) {
		const char *id = i == 3 ? gen : ids[i];
		snap_take(&after[i], id, strlen(id));
		TL_PASS(after[i].err, "%s lost", id);
		snap_same(__LINE__, id, &before[i], &after[i]);
	}
	CHECK_MSG("m2", T0 + LEASE, 2, CA, 1);
	/* the lease is still in force */
	EXPECT_FAIL(
	    mkop(TLI_OP_LEASE, "m2", CB, now_ms() + LEASE, 0), TL_ELEASED);
	TL_PASS(extend("m2", CA, now_ms() + LEASE + 5, 2, NULL));
	/* topic ids are not reused after a reopen either */
	tt_topic(st, "c", 0);
	TL_PASS(tli_store_topic_get(st, "c", &ic));
	cr_assert(ic.topic_id != ia.topic_id && ic.topic_id != ib.topic_id &&
	        ic.topic_id != igone.topic_id,
	    "topic id %u reused", ic.topic_id);
	env_finish();
}

/* =================================================================== */
/* format version                                                      */
/* =================================================================== */

typedef struct rawdb {
	rocksdb_options_t *opts;
	rocksdb_t *db;
	char **names;
	size_t ncf;
	rocksdb_column_family_handle_t *cf[16];
} rawdb;

static void
raw_open(rawdb *r, const char *path)
{
	const rocksdb_options_t *cfopts[16];
	static const char *const want[] = {
	    "default", "msg", "tl", "cons", "own"};
	char *err = NULL;

	memset(r, 0, sizeof(*r));
	r->opts = rocksdb_options_create();
	r->names = rocksdb_list_column_families(r->opts, path, &r->ncf, &err);
	cr_assert_null(err, "list column families: %s", err);
	cr_assert(r->ncf > 0 && r->ncf <= 16, "%zu column families", r->ncf);
	for (size_t i = 0; i < 5; i++) {
		bool found = false;
		for (size_t j = 0; j < r->ncf; j++) {
			found = found || strcmp(r->names[j], want[i]) == 0;
		}
		cr_assert(found, "column family %s is missing", want[i]);
	}
	for (size_t i = 0; i < r->ncf; i++) {
		cfopts[i] = r->opts;
	}
	r->db = rocksdb_open_column_families(r->opts, path, (int) r->ncf,
	    (const char *const *) r->names, cfopts, r->cf, &err);
	cr_assert_null(err, "raw open: %s", err);
}

static void
raw_close(rawdb *r)
{
	for (size_t i = 0; i < r->ncf; i++) {
		rocksdb_column_family_handle_destroy(r->cf[i]);
	}
	rocksdb_close(r->db);
	rocksdb_list_column_families_destroy(r->names, r->ncf);
	rocksdb_options_destroy(r->opts);
}

static rocksdb_column_family_handle_t *
raw_default(rawdb *r)
{
	for (size_t i = 0; i < r->ncf; i++) {
		if (strcmp(r->names[i], "default") == 0) {
			return r->cf[i];
		}
	}
	cr_assert_fail("no default column family");
	return NULL;
}

static void
raw_put_f(rawdb *r, const void *v, size_t len)
{
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char *err = NULL;

	rocksdb_writeoptions_set_sync(wo, 1);
	rocksdb_put_cf(r->db, wo, raw_default(r), "F", 1, v, len, &err);
	rocksdb_writeoptions_destroy(wo);
	cr_assert_null(err, "raw put: %s", err);
}

/* *len = 0 when missing; the value is copied into out (up to 16 bytes). */
static void
raw_get_f(rawdb *r, uint8_t out[16], size_t *len)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	char *err = NULL;
	char *v;

	v = rocksdb_get_cf(r->db, ro, raw_default(r), "F", 1, len, &err);
	rocksdb_readoptions_destroy(ro);
	cr_assert_null(err, "raw get: %s", err);
	if (v == NULL) {
		*len = 0;
		return;
	}
	memcpy(out, v, *len < 16 ? *len : 16);
	rocksdb_free(v);
}

/* A digest of every key and value of every column family. */
static uint64_t
raw_digest(rawdb *r, uint64_t *entries)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	uint64_t h = 0;

	*entries = 0;
	for (size_t i = 0; i < r->ncf; i++) {
		rocksdb_iterator_t *it =
		    rocksdb_create_iterator_cf(r->db, ro, r->cf[i]);

		h = h * 31 + tli_hash64(r->names[i], strlen(r->names[i]));
		for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
		     rocksdb_iter_next(it)) {
			size_t kl, vl;
			const char *k = rocksdb_iter_key(it, &kl);
			const char *v = rocksdb_iter_value(it, &vl);

			h = h * 31 + tli_hash64(k, kl);
			h = h * 31 + tli_hash64(v, vl) + vl;
			(*entries)++;
		}
		rocksdb_iter_destroy(it);
	}
	rocksdb_readoptions_destroy(ro);
	return h;
}

Test(format, other_format_version_is_refused_and_untouched)
{
	rawdb r;
	uint8_t orig[16], cur[16], bad[4];
	size_t orig_len, cur_len;
	uint64_t d1, d2, n1, n2;
	tli_store_opts o;
	tli_store *s2;
	static char sentinel;
	int rv;

	TL_PASS(create("m1", T0, NULL));
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
	tli_store_close(st);
	st = NULL;

	raw_open(&r, dir);
	raw_get_f(&r, orig, &orig_len);
	cr_assert_eq(orig_len, 4, "F is %zu bytes, expected 4", orig_len);
	cr_assert_eq(tli_get_be32(orig), TLI_STORE_FORMAT);
	tli_put_be32(bad, 999);
	raw_put_f(&r, bad, 4);
	d1 = raw_digest(&r, &n1);
	raw_close(&r);
	cr_assert_gt(n1, 1);

	tli_store_opts_init(&o);
	o.path = dir;
	o.clock = tt_clock_as_tli(&clk);
	s2 = (tli_store *) &sentinel;
	rv = tli_store_open(&s2, &o);
	if (rv == TL_OK) {
		tli_store_close(s2);
	}
	TL_FAIL(rv, TL_EFORMAT);
	cr_assert_eq(
	    s2, (tli_store *) &sentinel, "*out must be untouched on failure");

	/* nothing was written, and the database was let go */
	raw_open(&r, dir);
	d2 = raw_digest(&r, &n2);
	raw_get_f(&r, cur, &cur_len);
	cr_assert_eq(cur_len, 4);
	cr_assert_eq(tli_get_be32(cur), 999);
	cr_assert_eq(n2, n1, "entries %" PRIu64 " -> %" PRIu64, n1, n2);
	cr_assert_eq(d2, d1, "the refused open modified the database");
	raw_put_f(&r, orig, orig_len);
	raw_close(&r);

	st = tt_store_open(dir, &clk);
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	CHECK_COUNTERS(1, 1);
	env_finish();
}

/* Rewrite every message record as format 2 wrote it (a record without a
 * recurrence is the same but for its first byte) and F as 2. */
static void
raw_make_format_2(rawdb *r)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_column_family_handle_t *msg = NULL;
	rocksdb_iterator_t *it;
	uint8_t f[4], v[1024];
	size_t recs = 0;
	char *err = NULL;

	for (size_t i = 0; i < r->ncf; i++) {
		if (strcmp(r->names[i], "msg") == 0) {
			msg = r->cf[i];
		}
	}
	cr_assert_not_null(msg);
	it = rocksdb_create_iterator_cf(r->db, ro, msg);
	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *val = rocksdb_iter_value(it, &vl);

		if (kl < 5 || k[4] != 'm') {
			continue;
		}
		cr_assert(vl <= sizeof(v) && val[0] == 3 && !(val[1] & 0x04),
		    "a format 3 record without a recurrence");
		memcpy(v, val, vl);
		v[0] = 2;
		rocksdb_put_cf(r->db, wo, msg, k, kl, (char *) v, vl, &err);
		cr_assert_null(err, "raw put: %s", err);
		recs++;
	}
	rocksdb_iter_destroy(it);
	cr_assert_gt(recs, 0);
	tli_put_be32(f, 2);
	raw_put_f(r, f, 4);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_readoptions_destroy(ro);
}

Test(format, a_format_2_database_is_migrated_at_open)
{
	rawdb r;
	uint8_t cur[16];
	size_t cur_len;
	tli_op op;

	TL_PASS(create("m1", T0, NULL));
	TL_PASS(create("m2", T0 + 5000, NULL));
	TL_PASS(lease("m1", CA, T0 + LEASE, 1, NULL));
	tli_store_close(st);
	st = NULL;
	raw_open(&r, dir);
	raw_make_format_2(&r);
	raw_close(&r);

	st = tt_store_open(dir, &clk);
	/* the old records read as messages without a recurrence */
	CHECK_MSG("m1", T0 + LEASE, 2, CA, 1);
	CHECK_MSG("m2", T0 + 5000, 1, "", 0);
	CHECK_COUNTERS(2, 1);
	env_finish();
	/* they work as before, and recurring ones can be created */
	TL_PASS(del_leased("m1", CA, 2));
	CHECK_GONE("m1");
	TL_PASS(move("m2", OWNER, T0 + 6000, 1, NULL));
	op = mkop(TLI_OP_CREATE, "r", OWNER, T0, 0);
	op.every_ms = 1000;
	op.times = 2;
	TL_PASS(run(&op));
	env_finish();
	tli_store_close(st);
	st = NULL;

	raw_open(&r, dir);
	raw_get_f(&r, cur, &cur_len);
	raw_close(&r);
	cr_assert_eq(cur_len, 4);
	cr_assert_eq(tli_get_be32(cur), 3, "F is %u after the migration",
	    tli_get_be32(cur));
	st = tt_store_open(dir, &clk);
	CHECK_MSG("m2", T0 + 6000, 2, "", 0);
	env_finish();
}

/* Change the recurring record of id at byte offset off (4 bytes, big-endian)
 * behind the store's back. */
static void
raw_poke_record(rawdb *r, const char *id, size_t off, uint32_t val)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_column_family_handle_t *msg = NULL;
	uint8_t k[5 + TL_MAX_ID_LEN], v[1024];
	size_t vl = 0;
	char *err = NULL, *got;

	for (size_t i = 0; i < r->ncf; i++) {
		if (strcmp(r->names[i], "msg") == 0) {
			msg = r->cf[i];
		}
	}
	cr_assert_not_null(msg);
	tli_put_be32(k, 1); /* the first topic's id */
	k[4] = 'm';
	memcpy(k + 5, id, strlen(id));
	got = rocksdb_get_cf(
	    r->db, ro, msg, (char *) k, 5 + strlen(id), &vl, &err);
	cr_assert(
	    err == NULL && got != NULL && vl <= sizeof(v) && vl >= off + 4);
	memcpy(v, got, vl);
	rocksdb_free(got);
	tli_put_be32(v + off, val);
	rocksdb_put_cf(
	    r->db, wo, msg, (char *) k, 5 + strlen(id), (char *) v, vl, &err);
	cr_assert_null(err);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_readoptions_destroy(ro);
}

Test(format, the_checker_verifies_the_recurrence)
{
	/* format(1) flags(1) ts sched version created_at (8 each)
	 * deliveries bucket body_len (4 each), every(8) start(8): seq */
	const size_t seq_at = 2 + 44 + 16;
	rawdb r;
	tli_op op = mkop(TLI_OP_CREATE, "r", OWNER, T0, 0);

	op.every_ms = 1000;
	op.times = 3;
	TL_PASS(run(&op));
	cr_assert_eq(tt_check(st), 0);
	tli_store_close(st);
	st = NULL;

	raw_open(&r, dir);
	raw_poke_record(&r, "r", seq_at, 4); /* seq past last */
	raw_close(&r);
	st = tt_store_open(dir, &clk);
	cr_assert_eq(tt_check(st), 1);
	tli_store_close(st);
	st = NULL;

	raw_open(&r, dir);
	raw_poke_record(&r, "r", seq_at, 2); /* occurrence 2 at 1's time */
	raw_close(&r);
	st = tt_store_open(dir, &clk);
	cr_assert_eq(tt_check(st), 1);
	tli_store_close(st);
	st = NULL;

	raw_open(&r, dir);
	raw_poke_record(&r, "r", seq_at, 1);
	raw_close(&r);
	st = tt_store_open(dir, &clk);
	env_finish();
}

/* ---- a lease taken ahead of its due time ---- */

TestSuite(ahead, .init = env_open, .fini = env_close);

static tli_op
mkahead(const char *id, const char *cons, int64_t at, uint64_t ver)
{
	tli_op op = mkrel(TLI_OP_LEASE, id, cons, LEASE, ver);

	op.at = at;
	return op;
}

Test(ahead, lease_before_the_due_time_counts_from_it_and_is_remembered)
{
	tli_op op;
	tli_entry e;

	TL_PASS(create("m1", T0 + 50, NULL));
	TL_PASS(run_op(mkahead("m1", CA, T0 + 50, 1), &op));
	/* the lease runs from the due time, not from now */
	cr_assert_eq(op.new_ts, T0 + 50 + LEASE);
	CHECK_MSG("m1", T0 + 50 + LEASE, 2, CA, 1);
	cr_assert_eq(consumer_leases(CA, &e), 1);
	cr_assert_eq(e.push_at, T0 + 50, "push_at %" PRId64, e.push_at);
	/* once pushed, an extend forgets the due time */
	tt_clock_set(&clk, T0 + 60);
	TL_PASS(extend("m1", CA, now_ms() + LEASE, 2, NULL));
	cr_assert_eq(consumer_leases(CA, &e), 1);
	cr_assert_eq(e.push_at, 0);
	env_finish();
}

Test(ahead, lease_at_or_after_now_is_an_ordinary_lease)
{
	tli_op op;
	tli_entry e;

	TL_PASS(create("m1", T0 - 10, NULL));
	TL_PASS(run_op(mkahead("m1", CA, T0 - 10, 1), &op));
	cr_assert_eq(op.new_ts, T0 + LEASE);
	cr_assert_eq(consumer_leases(CA, &e), 1);
	cr_assert_eq(e.push_at, 0);
	env_finish();
}

Test(ahead, not_due_by_then_or_too_far_ahead_is_refused)
{
	TL_PASS(create("m1", T0 + 100, NULL));
	EXPECT_FAIL(mkahead("m1", CA, T0 + 99, 1), TL_ENOTDUE);
	EXPECT_FAIL(
	    mkahead("m1", CA, T0 + TLI_LEASE_AHEAD_MAX + 1, 1), TL_ERANGE);
	CHECK_MSG("m1", T0 + 100, 1, "", 0);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	env_finish();
}

Test(ahead, an_active_lease_that_ends_before_then_is_not_taken)
{
	tli_op op;

	/* CA holds m1 until T0 + 40; a lease for CB due at T0 + 50 must wait
	 * for it to run out: CA may still extend or delete until then. */
	TL_PASS(create("m1", T0, NULL));
	TL_PASS(lease("m1", CA, T0 + 40, 1, &op));
	EXPECT_FAIL(mkahead("m1", CB, T0 + 50, 2), TL_ELEASED);
	tt_clock_set(&clk, T0 + 40);
	TL_PASS(run_op(mkahead("m1", CB, T0 + 50, 2), &op));
	cr_assert_eq(op.new_ts, T0 + 50 + LEASE);
	CHECK_MSG("m1", T0 + 50 + LEASE, 3, CB, 2);
	env_finish();
}

Test(ahead, the_owner_meets_a_lease_in_the_interval)
{
	/* Between the lease and the due time the message is processing, as
	 * it would be a moment later: the owner gets TL_ELEASED. */
	TL_PASS(create("m1", T0 + 50, NULL));
	TL_PASS(run_op(mkahead("m1", CA, T0 + 50, 1), NULL));
	EXPECT_FAIL(mkop(TLI_OP_DELETE_OWNED, "m1", OWNER, 0, 0), TL_ELEASED);
	EXPECT_FAIL(mkop(TLI_OP_MOVE, "m1", OWNER, T0 + 9000, 0), TL_ELEASED);
	CHECK_MSG("m1", T0 + 50 + LEASE, 2, CA, 1);
	env_finish();
}

/* =================================================================== */
/* recurring messages                                                  */
/* =================================================================== */

TestSuite(recur, .init = env_open, .fini = env_close);

static tli_op
mkrecur(const char *id, int64_t ts, int64_t every, uint32_t times,
    int64_t until, bool catch_up)
{
	tli_op op = mkop(TLI_OP_CREATE, id, OWNER, ts, 0);

	op.every_ms = every;
	op.times = times;
	op.until = until;
	op.catch_up = catch_up;
	return op;
}

#define CHECK_RECUR(id, every, start, seq, last) \
	check_recur(__LINE__, (id), (every), (start), (seq), (last))

static void
check_recur(int line, const char *id, int64_t every, int64_t start,
    uint32_t seq, uint32_t last)
{
	snap sn;

	snap_take(&sn, id, strlen(id));
	TL_PASS(sn.err, "line %d: get %s", line, id);
	cr_assert(sn.every == every && sn.start == start && sn.seq == seq &&
	        sn.last == last,
	    "line %d: %s: every %" PRId64 " start %" PRId64
	    " seq %u last %u, expected %" PRId64 " %" PRId64 " %u %u",
	    line, id, sn.every, sn.start, sn.seq, sn.last, every, start, seq,
	    last);
}

/* Lease the message now and delete it as its holder: the ACK. */
static tli_op
ack_now(const char *id)
{
	tli_op l, d;

	TL_PASS(lease(id, CA, now_ms() + LEASE, 0, &l));
	d = mkop(TLI_OP_DELETE_LEASED, id, CA, 0, l.new_version);
	TL_PASS(run(&d), "ack %s", id);
	return d;
}

/* The owner index lists the message at ts (and only there). */
static void
check_owner_at(int line, const char *id, int64_t ts)
{
	tli_cursor cur;
	tli_entry out[8];
	size_t n = 0;
	bool more = false;

	memset(&cur, 0, sizeof(cur));
	TL_PASS(tli_store_scan_owner(
	    st, topic, OWNER, strlen(OWNER), &cur, out, 8, &n, &more));
	cr_assert_eq(n, 1, "line %d: owner entries %zu", line, n);
	cr_assert(out[0].id_len == strlen(id) &&
	        memcmp(out[0].id, id, out[0].id_len) == 0 && out[0].ts == ts,
	    "line %d: owner entry at %" PRId64 ", expected %" PRId64, line,
	    out[0].ts, ts);
}

Test(recur, create_refusals_follow_the_table)
{
	/* no end, two ends, an end without an interval */
	EXPECT_FAIL(mkrecur("r", T0, 1000, 0, 0, false), TL_EINVAL);
	EXPECT_FAIL(mkrecur("r", T0, 1000, 3, T0 + 5000, false), TL_EINVAL);
	EXPECT_FAIL(mkrecur("r", T0, 0, 3, 0, false), TL_EINVAL);
	EXPECT_FAIL(mkrecur("r", T0, 0, 0, T0 + 5000, false), TL_EINVAL);
	EXPECT_FAIL(mkrecur("r", T0, 0, 0, 0, true), TL_EINVAL);
	/* until before the first occurrence */
	EXPECT_FAIL(mkrecur("r", T0, 1000, 0, T0 - 1, false), TL_EINVAL);
	/* a negative interval; a grid that leaves the timestamp range */
	EXPECT_FAIL(mkrecur("r", T0, -5, 3, 0, false), TL_ERANGE);
	EXPECT_FAIL(mkrecur("r", TL_TS_MAX - 10, 5, 4, 0, false), TL_ERANGE);
	EXPECT_FAIL(mkrecur("r", T0, 1000, 0, TL_TS_MAX + 1, false), TL_ERANGE);
	/* more occurrences than a seq can count */
	EXPECT_FAIL(mkrecur("r", 0, 1, 0, TL_TS_MAX, false), TL_ERANGE);
	CHECK_GONE("r");
	CHECK_COUNTERS(0, 0);
	/* the last grid point exactly at the end of the range is fine */
	TL_PASS(run_op(mkrecur("r", TL_TS_MAX - 10, 5, 3, 0, false), NULL));
	CHECK_RECUR("r", 5, TL_TS_MAX - 10, 1, 3);
	env_finish();
}

Test(recur, until_becomes_the_last_grid_point_at_or_before_it)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("a", T0, 1000, 0, T0 + 4500, false), &op));
	cr_assert_eq(op.seq, 1);
	CHECK_RECUR("a", 1000, T0, 1, 5);
	TL_PASS(run_op(mkrecur("b", T0, 1000, 0, T0 + 4000, false), NULL));
	CHECK_RECUR("b", 1000, T0, 1, 5);
	TL_PASS(run_op(mkrecur("c", T0, 1000, 0, T0, false), NULL));
	CHECK_RECUR("c", 1000, T0, 1, 1);
	/* a plain create has none */
	TL_PASS(create("d", T0, NULL));
	CHECK_RECUR("d", 0, 0, 0, 0);
	env_finish();
}

Test(recur, holder_delete_places_the_next_occurrence_until_the_last)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 3, 0, false), NULL));
	op = ack_now("r");
	cr_assert_eq(op.seq, 2, "seq %u", op.seq);
	cr_assert_eq(op.new_ts, T0 + 1000);
	cr_assert_eq(op.new_version, 3);
	CHECK_MSG("r", T0 + 1000, 3, "", 0);
	CHECK_RECUR("r", 1000, T0, 2, 3);
	CHECK_COUNTERS(1, 0);
	CHECK_TOTALS(0, 1, 0);
	check_owner_at(__LINE__, "r", T0 + 1000);
	cr_assert_eq(consumer_leases(CA, NULL), 0);
	env_finish();

	/* not due yet: the next occurrence is not leased early */
	EXPECT_FAIL(mkop(TLI_OP_LEASE, "r", CA, T0 + LEASE, 0), TL_ENOTDUE);
	tt_clock_set(&clk, T0 + 1000);
	op = ack_now("r");
	cr_assert_eq(op.seq, 3);
	CHECK_MSG("r", T0 + 2000, 5, "", 0);
	tt_clock_set(&clk, T0 + 2000);
	op = ack_now("r");
	cr_assert_eq(op.seq, 0, "the last occurrence's delete ends it");
	cr_assert_eq(op.new_version, 0);
	CHECK_GONE("r");
	CHECK_COUNTERS(0, 0);
	env_finish();
}

Test(recur, missed_occurrences_are_skipped_by_default)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 10, 0, false), NULL));
	/* an outage: grid points 2, 3 and 4 passed; 3 exactly now */
	tt_clock_set(&clk, T0 + 2000);
	op = ack_now("r");
	cr_assert_eq(op.seq, 4, "seq %u", op.seq);
	CHECK_MSG("r", T0 + 3000, 3, "", 0);
	check_owner_at(__LINE__, "r", T0 + 3000);
	tt_clock_set(&clk, T0 + 7500);
	op = ack_now("r");
	cr_assert_eq(op.seq, 9);
	CHECK_RECUR("r", 1000, T0, 9, 10);
	/* past the last grid point: the series is over */
	tt_clock_set(&clk, T0 + 20000);
	op = ack_now("r");
	cr_assert_eq(op.seq, 0);
	CHECK_GONE("r");
	env_finish();
}

Test(recur, catch_up_places_every_missed_occurrence)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 4, 0, true), NULL));
	tt_clock_set(&clk, T0 + 10000);
	for (uint32_t k = 2; k <= 4; k++) {
		op = ack_now("r");
		cr_assert_eq(op.seq, k);
		cr_assert_eq(op.new_ts, T0 + (k - 1) * 1000);
	}
	op = ack_now("r");
	cr_assert_eq(op.seq, 0);
	CHECK_GONE("r");
	env_finish();
}

Test(recur, runout_and_release_keep_the_occurrence)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 3, 0, false), NULL));
	TL_PASS(lease("r", CA, T0 + 100, 1, &op));
	tt_clock_set(&clk, T0 + 100); /* the lease ran out */
	TL_PASS(lease("r", CB, T0 + 200, 0, &op));
	cr_assert_eq(op.seq, 1);
	cr_assert_eq(op.deliveries, 2);
	/* the holder releases it to a time of its own: still occurrence 1 */
	TL_PASS(release("r", CB, T0 + 150, op.new_version, &op));
	CHECK_RECUR("r", 1000, T0, 1, 3);
	check_owner_at(__LINE__, "r", T0 + 150);
	env_finish();
	tt_clock_set(&clk, T0 + 150);
	op = ack_now("r");
	/* back on the grid, deliveries counted afresh */
	cr_assert_eq(op.seq, 2);
	CHECK_MSG("r", T0 + 1000, op.new_version, "", 0);
	check_owner_at(__LINE__, "r", T0 + 1000);
	env_finish();
}

Test(recur, owner_move_shifts_and_owner_delete_ends_the_series)
{
	tli_op op;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 5, 0, false), NULL));
	ack_now("r"); /* seq 2 at T0 + 1000 */
	TL_PASS(move("r", OWNER, T0 + 10000, 0, &op));
	cr_assert_eq(op.seq, 2);
	CHECK_RECUR("r", 1000, T0 + 9000, 2, 5);
	check_owner_at(__LINE__, "r", T0 + 10000);
	/* a move that would put the last occurrence out of range */
	EXPECT_FAIL(
	    mkop(TLI_OP_MOVE, "r", OWNER, TL_TS_MAX - 2000, 0), TL_ERANGE);
	TL_PASS(move("r", OWNER, TL_TS_MAX - 3000, 0, NULL));
	TL_PASS(move("r", OWNER, T0 + 10000, 0, NULL));
	tt_clock_set(&clk, T0 + 10000);
	op = ack_now("r");
	cr_assert_eq(op.seq, 3);
	cr_assert_eq(op.new_ts, T0 + 11000);
	env_finish();
	TL_PASS(del_owned("r", OWNER, 0));
	CHECK_GONE("r");
	CHECK_COUNTERS(0, 0);
	env_finish();
}

Test(recur, the_next_occurrence_is_seen_by_later_ops_of_the_batch)
{
	tli_op ops[3], l;

	TL_PASS(run_op(mkrecur("r", T0, 1000, 3, 0, true), NULL));
	tt_clock_set(&clk, T0 + 5000);
	TL_PASS(lease("r", CA, now_ms() + LEASE, 1, &l));
	ops[0] = mkop(TLI_OP_DELETE_LEASED, "r", CA, 0, l.new_version);
	ops[1] = mkop(TLI_OP_LEASE, "r", CB, now_ms() + LEASE, 0);
	ops[2] = mkop(TLI_OP_DELETE_LEASED, "r", CB, 0, l.new_version + 2);
	TL_PASS(tli_store_apply(st, ops, 3));
	TL_PASS(ops[0].err);
	TL_PASS(ops[1].err, "occurrence 2 is due at once with catch_up");
	cr_assert_eq(ops[1].seq, 2);
	TL_PASS(ops[2].err);
	cr_assert_eq(ops[2].seq, 3);
	CHECK_MSG("r", T0 + 2000, l.new_version + 3, "", 0);
	env_finish();
}

Test(recur, deliveries_count_per_occurrence_and_a_kick_keeps_seq)
{
	tli_topic_conf c;
	tli_op op, k;

	TL_PASS(tli_topic_conf_init(&c, "once"));
	c.max_deliveries = 1;
	TL_PASS(tli_store_topic_create(st, &c));
	topic = "once";
	TL_PASS(run_op(mkrecur("r", T0, 1000, 3, 0, false), NULL));
	op = ack_now("r"); /* one delivery of occurrence 1 */
	tt_clock_set(&clk, T0 + 1000);
	TL_PASS(lease("r", CA, T0 + 1100, 0, &op)); /* occurrence 2 */
	cr_assert_eq(op.deliveries, 1);
	tt_clock_set(&clk, T0 + 1100);
	TL_FAIL(lease("r", CA, T0 + 1200, 0, &op), TL_EDEAD);
	k = mkop(TLI_OP_DLQ_KICK, "r", "op", T0 + 1500, 0);
	TL_PASS(run(&k));
	cr_assert_eq(k.seq, 2);
	CHECK_RECUR("r", 1000, T0, 2, 3);
	env_finish();
	tt_clock_set(&clk, T0 + 1500);
	op = ack_now("r");
	cr_assert_eq(op.seq, 3);
	env_finish();
}
