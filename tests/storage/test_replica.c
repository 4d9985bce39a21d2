/*
 * The replicated mode of the store (docs/storage.md, "Replicated mode"),
 * on real RocksDB databases in temporary directories, with the log kept in
 * memory by the test: a "leader" store whose replicate callback appends
 * each entry to the log and applies it, with increasing indexes, to a
 * "follower" store and to the leader itself, as a Raft node would.
 *
 * Compared: everything a user can read (topics, counters, every message
 * through the timeline, consumer, owner and dead-letter scans and lookups,
 * owner counts, totals), dumped to text; and the consistency checker.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

#define NTOPIC 3 /* t0, t1 always; t2 comes and goes */
#define NIDS 16
#define NWHO 3
#define START_MS 1700000000000LL

static const char *topics[NTOPIC] = {"t0", "t1", "t2"};
static const char *owners[NWHO] = {"o", "o1", "oo"};
static const char *consumers[NWHO] = {"c", "c1", "cc"};

/* ---- the log and the nodes ---- */

typedef struct entry {
	uint8_t *p;
	size_t len;
} entry;

static entry *rlog; /* rlog[i] is index i + 1 */
static size_t rlog_n;

typedef struct node {
	char *dir;
	tli_store *s;
	struct node *peer; /* a follower this node's writer feeds */
	_Atomic int fail;  /* replicate answers this when not TL_OK */
	bool lost;         /* ... after the entry is applied all the same */
} node;

static tt_clock clk;

static int
feed(void *arg, const void *e, size_t len)
{
	node *n = arg;
	uint64_t index;
	int rv;

	if (atomic_load(&n->fail) != TL_OK && !n->lost) {
		return atomic_load(&n->fail);
	}
	rlog = realloc(rlog, (rlog_n + 1) * sizeof(*rlog));
	cr_assert_not_null(rlog);
	rlog[rlog_n].p = malloc(len);
	memcpy(rlog[rlog_n].p, e, len);
	rlog[rlog_n].len = len;
	index = ++rlog_n;
	if (n->peer != NULL &&
	    (rv = tli_store_apply_entry(n->peer->s, index, e, len)) != TL_OK) {
		return rv;
	}
	if ((rv = tli_store_apply_entry(n->s, index, e, len)) != TL_OK) {
		return rv;
	}
	/* committed, but the leader could not tell (TL_ELEADERLOST) */
	return n->lost ? atomic_load(&n->fail) : TL_OK;
}

static void
node_open(node *n)
{
	tli_store_opts o;

	tli_store_opts_init(&o);
	o.path = n->dir;
	o.clock = tt_clock_as_tli(&clk);
	o.replicate = feed;
	o.replicate_arg = n;
	TL_PASS(tli_store_open(&n->s, &o), "%s", n->dir);
}

static void
node_init(node *n, const char *tag)
{
	memset(n, 0, sizeof(*n));
	n->dir = tt_mkdtemp(tag);
	node_open(n);
}

static void
node_fini(node *n)
{
	tli_store_close(n->s);
	n->s = NULL;
	tt_rmtree_free(&n->dir);
}

static void
log_free(void)
{
	for (size_t i = 0; i < rlog_n; i++) {
		free(rlog[i].p);
	}
	free(rlog);
	rlog = NULL;
	rlog_n = 0;
}

/* ---- what a user can read, as text ---- */

static void
dump_entries(FILE *f, const char *what, const tli_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "  %s ts=%lld v=%llu push=%lld b=%u l=%d id=", what,
		    (long long) e[i].ts, (unsigned long long) e[i].version,
		    (long long) e[i].push_at, e[i].bucket, e[i].locked);
		for (size_t j = 0; j < e[i].id_len; j++) {
			fprintf(f, "%02x", (uint8_t) e[i].id[j]);
		}
		fputc('\n', f);
	}
}

typedef int (*scan_fn)(tli_store *s, const char *topic, const void *arg,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more);

static int
scan_cons(tli_store *s, const char *topic, const void *arg,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more)
{
	return tli_store_scan_consumer(
	    s, topic, arg, strlen(arg), after, out, max, n, more);
}

static int
scan_own(tli_store *s, const char *topic, const void *arg,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more)
{
	return tli_store_scan_owner(
	    s, topic, arg, strlen(arg), after, out, max, n, more);
}

static int
scan_dead(tli_store *s, const char *topic, const void *arg,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more)
{
	(void) arg;
	return tli_store_scan_dead(s, topic, after, out, max, n, more);
}

static int
scan_due_all(tli_store *s, const char *topic, const void *arg,
    const tli_cursor *after, tli_entry *out, size_t max, size_t *n, bool *more)
{
	return tli_store_scan_due(s, topic, *(const uint32_t *) arg, INT64_MAX,
	    after, out, max, n, more);
}

/* Every page of a scan; the message behind each timeline entry too. */
static void
dump_scan(FILE *f, tli_store *s, const char *topic, const char *what,
    scan_fn fn, const void *arg, bool msgs)
{
	tli_cursor cur = {0};
	tli_entry e[7];
	size_t n;
	bool more = true;

	while (more) {
		TL_PASS(fn(s, topic, arg, &cur, e, 7, &n, &more), "%s", what);
		dump_entries(f, what, e, n);
		for (size_t i = 0; msgs && i < n; i++) {
			tli_msg m;
			TL_PASS(
			    tli_store_get(s, topic, e[i].id, e[i].id_len, &m));
			fprintf(f,
			    "   msg o=%.*s c=%.*s ts=%lld v=%llu d=%u ca=%lld "
			    "dead=%d sched=%lld every=%lld start=%lld "
			    "seq=%u/%u cu=%d og=%d body=%.*s\n",
			    (int) m.owner_len, m.owner, (int) m.consumer_len,
			    m.consumer, (long long) m.ts,
			    (unsigned long long) m.version, m.deliveries,
			    (long long) m.created_at, m.dead,
			    (long long) m.sched, (long long) m.every,
			    (long long) m.start, m.seq, m.last, m.catch_up,
			    m.off_grid, (int) m.body_len, (char *) m.body);
			tli_msg_fini(&m);
		}
		if (n > 0) {
			tli_cursor_from_entry(&cur, &e[n - 1]);
		}
	}
}

static char *
dump(tli_store *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tli_topic_info *ti;
	size_t nt;

	TL_PASS(tli_store_topic_list(s, &ti, &nt));
	for (size_t i = 0; i < nt; i++) {
		const char *t = ti[i].conf.name;
		tli_counts c;
		fprintf(f,
		    "topic %s id=%u ca=%lld m=%llu l=%llu d=%llu b=%u mb=%u "
		    "dl=%lld ml=%lld md=%u\n",
		    t, ti[i].topic_id, (long long) ti[i].created_at,
		    (unsigned long long) ti[i].messages,
		    (unsigned long long) ti[i].locked,
		    (unsigned long long) ti[i].dead, ti[i].conf.buckets,
		    ti[i].conf.max_body,
		    (long long) ti[i].conf.default_lease_ms,
		    (long long) ti[i].conf.max_lease_ms,
		    ti[i].conf.max_deliveries);
		for (uint32_t b = 0; b < ti[i].conf.buckets; b++) {
			dump_scan(f, s, t, "due", scan_due_all, &b, true);
		}
		dump_scan(f, s, t, "dead", scan_dead, NULL, true);
		for (int w = 0; w < NWHO; w++) {
			uint64_t oc = 0;
			dump_scan(f, s, t, consumers[w], scan_cons,
			    consumers[w], false);
			dump_scan(
			    f, s, t, owners[w], scan_own, owners[w], false);
			TL_PASS(tli_store_owner_count_topic(
			    s, t, owners[w], strlen(owners[w]), &oc));
			fprintf(f, "  count %s %llu\n", owners[w],
			    (unsigned long long) oc);
		}
		TL_PASS(tli_store_totals(s, t, &c));
		fprintf(f, "  totals %llu %llu %llu\n",
		    (unsigned long long) c.available,
		    (unsigned long long) c.waiting,
		    (unsigned long long) c.processing);
	}
	tli_free(ti);
	fclose(f);
	return buf;
}

static void
assert_same(tli_store *a, tli_store *b)
{
	char *da = dump(a), *db = dump(b);
	size_t i = 0;

	while (da[i] != '\0' && da[i] == db[i]) {
		i++;
	}
	if (da[i] != db[i]) {
		size_t from = i > 200 ? i - 200 : 0;
		cr_assert_fail(
		    "the stores differ at byte %zu:\n--- a:\n%.400s\n"
		    "--- b:\n%.400s",
		    i, da + from, db + from);
	}
	cr_assert_gt(strlen(da), 0);
	free(da);
	free(db);
}

/* ---- random work ---- */

typedef struct opbuf {
	char id[8];
	char who[TL_MAX_NAME_LEN + 1];
	char body[400];
} opbuf;

static int64_t
now_ms(void)
{
	return atomic_load(&clk.now);
}

/* One random operation on s, its strings in b. */
static void
random_op(tli_store *s, uint64_t *rng, tli_op *op, opbuf *b)
{
	const char *topic = topics[tt_rng_below(rng, NTOPIC)];
	uint32_t r = tt_rng_below(rng, 100);
	int64_t now = now_ms();
	int w = (int) tt_rng_below(rng, NWHO);
	tli_msg m;
	bool have;

	snprintf(b->id, sizeof(b->id), "m%u", tt_rng_below(rng, NIDS));
	have = tli_store_get(s, topic, b->id, strlen(b->id), &m) == TL_OK;
	memset(op, 0, sizeof(*op));
	op->topic = topic;
	op->id = b->id;
	op->id_len = strlen(b->id);
	op->version = have && tt_rng_below(rng, 8) != 0 ? m.version
	                                                : tt_rng_below(rng, 3);
	/* the lease holder if any, else the owner or someone */
	if (have && m.consumer_len > 0 && tt_rng_below(rng, 4) != 0) {
		snprintf(b->who, sizeof(b->who), "%.*s", (int) m.consumer_len,
		    m.consumer);
	} else {
		snprintf(b->who, sizeof(b->who), "%s", consumers[w]);
	}
	if (r < 35) {
		op->type = TLI_OP_CREATE;
		snprintf(b->who, sizeof(b->who), "%s", owners[w]);
		op->ts = now + (int64_t) tt_rng_below(rng, 4000) - 1000;
		if (tt_rng_below(rng, 8) == 0) {
			op->id_len = 0; /* a generated id */
		}
		if (tt_rng_below(rng, 6) == 0) {
			op->every_ms = 500;
			op->times = 1 + tt_rng_below(rng, 4);
		}
		op->body_len = (size_t) snprintf(b->body, 64, "%s-%llu", b->id,
		    (unsigned long long) tt_rng_next(rng));
		if (tt_rng_below(rng, 5) == 0) {
			memset(b->body + op->body_len, 'x', 300);
			op->body_len += 300; /* a body under its own key */
			b->body[op->body_len] = '\0';
		}
		op->body = b->body;
	} else if (r < 60) {
		op->type = TLI_OP_LEASE;
		snprintf(b->who, sizeof(b->who), "%s", consumers[w]);
		op->ts = 1000 + tt_rng_below(rng, 5000);
		op->ts_mode = TLI_TS_REL;
	} else if (r < 68) {
		op->type = TLI_OP_EXTEND;
		op->ts = 2000;
		op->ts_mode = TLI_TS_REL;
	} else if (r < 74) {
		op->type = TLI_OP_RELEASE;
		op->ts = tt_rng_below(rng, 3000);
		op->ts_mode = TLI_TS_REL;
	} else if (r < 84) {
		op->type = TLI_OP_DELETE_LEASED;
	} else if (r < 90) {
		op->type = TLI_OP_DELETE_OWNED;
		snprintf(
		    b->who, sizeof(b->who), "%s", have ? m.owner : owners[w]);
	} else if (r < 96) {
		op->type = TLI_OP_MOVE;
		snprintf(
		    b->who, sizeof(b->who), "%s", have ? m.owner : owners[w]);
		op->ts = now + tt_rng_below(rng, 3000);
	} else {
		op->type = TLI_OP_DLQ_KICK;
		op->ts = now;
	}
	op->who = b->who;
	op->who_len = strlen(b->who);
	if (have) {
		tli_msg_fini(&m);
	}
}

typedef struct waitall {
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	int left;
} waitall;

static void
one_done(void *arg)
{
	waitall *w = arg;

	pthread_mutex_lock(&w->mtx);
	w->left--;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mtx);
}

#define MAXSUB 3
#define MAXOPS 6

/* One step on the writer store s: a topic t2 created or deleted, the
 * clock moved, or up to MAXSUB submissions of random operations queued at
 * once (so that they share batches). Counts the operations that worked. */
static void
step(tli_store *s, uint64_t *rng, int *ok)
{
	static tli_op ops[MAXSUB][MAXOPS];
	static opbuf bufs[MAXSUB][MAXOPS];
	uint32_t r = tt_rng_below(rng, 100);
	waitall w = {.left = 0};
	int nsub;

	if (r < 3) {
		tli_topic_conf c;
		tli_topic_info ti;
		tli_topic_conf_init(&c, "t2");
		if (tli_store_topic_get(s, "t2", &ti) == TL_OK) {
			TL_PASS(tli_store_topic_delete(s, "t2"));
		} else {
			c.buckets = 2;
			TL_PASS(tli_store_topic_create(s, &c));
		}
		return;
	}
	if (r < 12) {
		tt_clock_advance(&clk, tt_rng_below(rng, 3000));
		return;
	}
	pthread_mutex_init(&w.mtx, NULL);
	pthread_cond_init(&w.cv, NULL);
	nsub = 1 + (int) tt_rng_below(rng, MAXSUB);
	for (int i = 0; i < nsub; i++) {
		size_t n = 1 + tt_rng_below(rng, MAXOPS);
		for (size_t j = 0; j < n; j++) {
			random_op(s, rng, &ops[i][j], &bufs[i][j]);
		}
		pthread_mutex_lock(&w.mtx);
		w.left++;
		pthread_mutex_unlock(&w.mtx);
		TL_PASS(tli_store_submit(s, ops[i], n, one_done, &w));
	}
	pthread_mutex_lock(&w.mtx);
	while (w.left > 0) {
		pthread_cond_wait(&w.cv, &w.mtx);
	}
	pthread_mutex_unlock(&w.mtx);
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mtx);
	for (int i = 0; i < nsub; i++) {
		for (size_t j = 0; j < MAXOPS; j++) {
			*ok += ops[i][j].err == TL_OK;
		}
	}
}

static void
steps(tli_store *s, uint64_t seed, int n)
{
	uint64_t rng = seed;
	int ok = 0;

	for (int i = 0; i < n; i++) {
		step(s, &rng, &ok);
	}
	/* the mix did something */
	cr_assert_gt(ok, n / 2, "only %d operations worked", ok);
}

/* t0 and t1 (4 buckets, dead letters after 2 deliveries). */
static void
base_topics(tli_store *s)
{
	tli_topic_conf c;

	tt_topic(s, "t0", 0);
	tli_topic_conf_init(&c, "t1");
	c.buckets = 4;
	c.max_deliveries = 2;
	TL_PASS(tli_store_topic_create(s, &c));
}

static void
setup(void)
{
	tt_clock_init(&clk, START_MS);
}

static void
teardown(void)
{
	log_free();
}

TestSuite(replica, .init = setup, .fini = teardown);

/* (a) A's writer feeds every entry to B and to A itself. */
Test(replica, follower_equals_leader)
{
	node a, b;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	base_topics(a.s);
	steps(a.s, 0x9e3779b97f4a7c15ull, 400);
	cr_assert_gt(rlog_n, 100);
	cr_assert_eq(tli_store_applied_index(a.s), rlog_n);
	cr_assert_eq(tli_store_applied_index(b.s), rlog_n);
	/* B's writer built none of it: its registry is read again. */
	TL_PASS(tli_store_reload(b.s));
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(a.s), 0);
	cr_assert_eq(tt_check(b.s), 0);
	node_fini(&a);
	node_fini(&b);
}

/* An op applied alone; returns its error. */
static int
one(tli_store *s, tli_op_type type, const char *topic, const char *id,
    const char *who, int64_t ts, uint64_t version, tli_op *out)
{
	return tt_op(s, type, topic, id, who, ts, version, out);
}

/* (b) An index already applied is skipped; the index survives a reopen. */
Test(replica, reapply_skipped_index_kept)
{
	node a, b;
	tli_op op;
	tli_msg m;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	tt_topic(a.s, "t0", 0);                                       /* 1 */
	TL_PASS(tt_create(a.s, "t0", "x", "o", START_MS, "b1", &op)); /* 2 */
	TL_PASS(
	    one(a.s, TLI_OP_DELETE_OWNED, "t0", "x", "o", 0, 0, &op)); /* 3 */
	TL_PASS(tt_create(a.s, "t0", "y", "o", START_MS, "b2", &op));  /* 4 */
	cr_assert_eq(rlog_n, 4);
	cr_assert_eq(tli_store_applied_index(b.s), 4);

	/* x's create again, as index 2 and as index 4: nothing changes */
	TL_PASS(tli_store_apply_entry(b.s, 2, rlog[1].p, rlog[1].len));
	TL_PASS(tli_store_apply_entry(b.s, 4, rlog[1].p, rlog[1].len));
	cr_assert_eq(tli_store_applied_index(b.s), 4);
	TL_PASS(tli_store_reload(b.s));
	TL_FAIL(tli_store_get(b.s, "t0", "x", 1, &m), TL_ENOTFOUND);
	assert_same(a.s, b.s);

	/* closed and opened again: the index is the stored one, and a replay
	 * of the whole log from 1 changes nothing */
	tli_store_close(b.s);
	node_open(&b);
	cr_assert_eq(tli_store_applied_index(b.s), 4);
	for (size_t i = 0; i < rlog_n; i++) {
		TL_PASS(
		    tli_store_apply_entry(b.s, i + 1, rlog[i].p, rlog[i].len));
	}
	cr_assert_eq(tli_store_applied_index(b.s), 4);
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(b.s), 0);

	/* the next index is applied */
	TL_PASS(one(a.s, TLI_OP_DELETE_OWNED, "t0", "y", "o", 0, 0, &op));
	cr_assert_eq(tli_store_applied_index(b.s), 5);
	TL_FAIL(tli_store_get(b.s, "t0", "y", 1, &m), TL_ENOTFOUND);
	TL_PASS(tli_store_reload(b.s)); /* the counters B keeps in memory */
	assert_same(a.s, b.s);

	/* a single-node store keeps no index */
	{
		char *dir = tt_mkdtemp("repl-single");
		tli_store *s = tt_store_open(dir, &clk);
		tt_topic(s, "t0", 0);
		TL_PASS(tt_create(s, "t0", "x", "o", START_MS, "b", &op));
		cr_assert_eq(tli_store_applied_index(s), 0);
		tli_store_close(s);
		tt_rmtree_free(&dir);
	}
	node_fini(&a);
	node_fini(&b);
}

/* Entries that do not decode are refused whole, and nothing is written. */
Test(replica, bad_entries_refused)
{
	node a, b;
	tli_op op;
	uint8_t bad[4096];
	entry e;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	tt_topic(a.s, "t0", 0);
	TL_PASS(tt_create(a.s, "t0", "x", "o", START_MS, "b1", &op));
	a.peer = NULL; /* the next entry is kept from B */
	TL_PASS(tt_create(a.s, "t0", "y", "o", START_MS, "b2", &op));
	e = rlog[rlog_n - 1];
	cr_assert_lt(e.len, sizeof(bad));
	TL_PASS(tli_store_reload(b.s));

	for (int k = 0; k < 6; k++) {
		size_t len = e.len;
		memcpy(bad, e.p, e.len);
		switch (k) {
		case 0:
			bad[0] = TLI_REPL_VERSION + 1;
			break;
		case 1:
			bad[1] = 9; /* a kind nobody knows */
			break;
		case 2:
			bad[2] = TLI_STORE_FORMAT + 1;
			break;
		case 3:
			len -= 3; /* the last record cut short */
			break;
		case 4:
			len =
			    TLI_REPL_HEADER + 5; /* half a WriteBatch header */
			break;
		case 5:
			bad[TLI_REPL_HEADER + 8] += 1; /* the record count */
			break;
		}
		TL_FAIL(tli_store_apply_entry(b.s, 3, bad, len), TL_ECORRUPT,
		    "case %d", k);
		cr_assert_eq(tli_store_applied_index(b.s), 2, "case %d", k);
	}
	TL_FAIL(tli_store_apply_entry(b.s, 3, e.p, 2), TL_ECORRUPT);
	TL_FAIL(tli_store_apply_entry(b.s, 3, NULL, 0), TL_ECORRUPT);
	/* nothing of y on B */
	{
		tli_msg m;
		TL_FAIL(tli_store_get(b.s, "t0", "y", 1, &m), TL_ENOTFOUND);
	}
	cr_assert_eq(tt_check(b.s), 0);
	/* the entry itself is fine */
	TL_PASS(tli_store_apply_entry(b.s, 3, e.p, e.len));
	TL_PASS(tli_store_reload(b.s));
	assert_same(a.s, b.s);
	node_fini(&a);
	node_fini(&b);
}

/* Leadership moves from `from` to `to`: from's writer answers
 * TL_ENOTLEADER from now on, to's writer feeds from, and to re-reads what
 * its writer keeps in memory. */
static void
switch_leader(node *from, node *to)
{
	atomic_store(&from->fail, TL_ENOTLEADER);
	from->peer = NULL;
	to->peer = from;
	atomic_store(&to->fail, TL_OK);
	TL_PASS(tli_store_reload(to->s));
}

/* (c) The follower, reloaded, takes the writes over: topics, counters,
 * owner counts, leases taken on the old leader; then back again, the old
 * leader's cached records being stale by then. */
Test(replica, follower_takes_over)
{
	node a, b;
	tli_op op, lx, ly;
	tli_topic_info ti;
	uint64_t oc_a, oc_b;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	base_topics(a.s);
	steps(a.s, 12345, 250);
	TL_PASS(tt_create(a.s, "t0", "lx", "o", START_MS - 10, "held", &op));
	TL_PASS(one(a.s, TLI_OP_LEASE, "t0", "lx", "c", START_MS + 600000,
	    op.new_version, &lx));
	TL_PASS(tt_create(a.s, "t1", "ly", "o1", START_MS - 10, "held", &op));
	TL_PASS(one(a.s, TLI_OP_LEASE, "t1", "ly", "c1", START_MS + 600000,
	    op.new_version, &ly));
	TL_PASS(tli_store_owner_count(a.s, "o", 1, &oc_a));

	switch_leader(&a, &b);
	/* B serves what A wrote */
	TL_PASS(tli_store_owner_count(b.s, "o", 1, &oc_b));
	cr_assert_eq(oc_a, oc_b);
	/* the leases taken on A hold on B, with the versions A gave */
	TL_NOT_OK(one(b.s, TLI_OP_DELETE_LEASED, "t0", "lx", "c1", 0,
	    lx.new_version, &op));
	TL_NOT_OK(one(b.s, TLI_OP_LEASE, "t0", "lx", "c1", START_MS + 1000,
	    lx.new_version, &op));
	TL_PASS(one(b.s, TLI_OP_DELETE_LEASED, "t0", "lx", "c", 0,
	    lx.new_version, &op));
	TL_PASS(one(b.s, TLI_OP_EXTEND, "t1", "ly", "c1", START_MS + 900000,
	    ly.new_version, &op));
	/* a new topic gets the next id, not one A used */
	tt_topic(b.s, "t9", 0);
	TL_PASS(tli_store_topic_get(b.s, "t9", &ti));
	{
		tli_topic_info *all;
		size_t n;
		TL_PASS(tli_store_topic_list(b.s, &all, &n));
		for (size_t i = 0; i < n; i++) {
			if (strcmp(all[i].conf.name, "t9") != 0) {
				cr_assert_lt(all[i].topic_id, ti.topic_id);
			}
		}
		tli_free(all);
	}
	steps(b.s, 777, 250);
	TL_PASS(tli_store_reload(a.s));
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(a.s), 0);
	cr_assert_eq(tt_check(b.s), 0);

	/* back to A, whose record cache is from before B's writes */
	switch_leader(&b, &a);
	steps(a.s, 4242, 250);
	/* B is a follower now: its writer takes nothing */
	TL_FAIL(tt_create(b.s, "t0", "nope", "o", START_MS, "b", &op),
	    TL_ENOTLEADER);
	TL_FAIL(tli_store_topic_delete(b.s, "t0"), TL_ENOTLEADER);
	TL_PASS(tli_store_reload(b.s));
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(a.s), 0);
	cr_assert_eq(tt_check(b.s), 0);
	cr_assert_eq(tli_store_applied_index(a.s), rlog_n);
	cr_assert_eq(tli_store_applied_index(b.s), rlog_n);
	node_fini(&a);
	node_fini(&b);
}

/* (d) A replicate that fails fails the batch's operations with its error
 * and leaves nothing behind: later operations see the state before it. */
Test(replica, failed_replicate_leaves_nothing)
{
	node a, b;
	tli_op ops[4], op;
	tli_topic_info before, after;
	tli_topic_conf c;
	uint64_t oc;
	tli_msg m;
	char *d0, *d1;
	size_t n0;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	tt_topic(a.s, "t0", 0);
	TL_PASS(tt_create(a.s, "t0", "x", "o", START_MS - 5, "bx", &op));
	TL_PASS(tli_store_topic_get(a.s, "t0", &before));
	d0 = dump(a.s);
	n0 = rlog_n;

	atomic_store(&a.fail, TL_ENOTLEADER);
	ops[0] = tt_mkop(TLI_OP_CREATE, "t0", "y", "o", START_MS, 0);
	ops[0].body = "by";
	ops[0].body_len = 2;
	ops[1] = tt_mkop(TLI_OP_LEASE, "t0", "x", "c", START_MS + 5000, 0);
	ops[2] = tt_mkop(TLI_OP_CREATE, "t0", "z", "o1", START_MS, 0);
	ops[2].body = "bz";
	ops[2].body_len = 2;
	ops[3] = tt_mkop(TLI_OP_DELETE_OWNED, "t0", "x", "o", 0, 0);
	TL_PASS(tli_store_apply(a.s, ops, 3));
	for (int i = 0; i < 3; i++) {
		TL_CODE_EQ(ops[i].err, TL_ENOTLEADER, "op %d", i);
	}
	TL_PASS(tli_store_apply(a.s, &ops[3], 1));
	TL_CODE_EQ(ops[3].err, TL_ENOTLEADER);
	tli_topic_conf_init(&c, "t1");
	TL_FAIL(tli_store_topic_create(a.s, &c), TL_ENOTLEADER);
	TL_FAIL(tli_store_topic_delete(a.s, "t0"), TL_ENOTLEADER);
	atomic_store(&a.fail, TL_ELEADERLOST);
	TL_FAIL(tt_create(a.s, "t0", "w", "o", START_MS, "bw", &op),
	    TL_ELEADERLOST);
	cr_assert_eq(rlog_n, n0);

	/* nothing of it: not the messages, counters, owner counts, leases,
	 * topics or the next topic id */
	atomic_store(&a.fail, TL_OK);
	d1 = dump(a.s);
	cr_assert_str_eq(d0, d1);
	free(d1);
	TL_PASS(tli_store_topic_get(a.s, "t0", &after));
	cr_assert_eq(after.messages, before.messages);
	cr_assert_eq(after.locked, before.locked);
	TL_FAIL(tli_store_topic_get(a.s, "t1", &after), TL_ENOTOPIC);
	TL_PASS(tli_store_owner_count(a.s, "o1", 2, &oc));
	cr_assert_eq(oc, 0);
	TL_FAIL(tli_store_get(a.s, "t0", "y", 1, &m), TL_ENOTFOUND);
	/* x is as it was: leasable with its version, by anyone */
	TL_PASS(tli_store_get(a.s, "t0", "x", 1, &m));
	cr_assert_eq(m.consumer_len, 0);
	TL_PASS(one(a.s, TLI_OP_LEASE, "t0", "x", "c1", START_MS + 5000,
	    m.version, &op));
	tli_msg_fini(&m);
	TL_PASS(tli_store_topic_create(a.s, &c));
	TL_PASS(tli_store_topic_get(a.s, "t1", &after));
	cr_assert_eq(after.topic_id, before.topic_id + 1);
	TL_PASS(tt_create(a.s, "t0", "y", "o", START_MS, "by", &op));
	TL_PASS(tli_store_reload(b.s));
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(a.s), 0);
	cr_assert_eq(tt_check(b.s), 0);
	free(d0);
	node_fini(&a);
	node_fini(&b);
}

/* Readers that run while B's database is swapped under them: any answer
 * will do, a crash (or an ASan report) will not. */
typedef struct reader {
	tli_store *s;
	_Atomic bool *stop;
	long reads;
} reader;

static void *
reader_main(void *arg)
{
	reader *r = arg;
	uint64_t rng = 99 + (uint64_t) (uintptr_t) r;

	while (!atomic_load(r->stop)) {
		const char *t = topics[tt_rng_below(&rng, NTOPIC)];
		tli_entry e[8];
		size_t n;
		bool more;
		tli_msg m;
		tli_counts c;
		tli_store_stats st;
		uint64_t oc;
		char id[8];

		snprintf(id, sizeof(id), "m%u", tt_rng_below(&rng, NIDS));
		if (tli_store_get(r->s, t, id, strlen(id), &m) == TL_OK) {
			tli_msg_fini(&m);
		}
		(void) tli_store_scan_due(
		    r->s, t, 0, INT64_MAX, NULL, e, 8, &n, &more);
		(void) tli_store_scan_owner(
		    r->s, t, "o", 1, NULL, e, 8, &n, &more);
		(void) tli_store_count(r->s, t, 0, INT64_MAX, &c);
		(void) tli_store_totals(r->s, t, &c);
		(void) tli_store_owner_count(r->s, "o", 1, &oc);
		tli_store_get_stats(r->s, &st);
		r->reads++;
	}
	return NULL;
}

/* (e) A checkpoint of A restored into B, which had other data: B is A,
 * with the checkpoint's applied index, while readers keep reading B. */
Test(replica, checkpoint_restore)
{
	node a, b;
	char *tmp = tt_mkdtemp("repl-cp"), cp[512];
	_Atomic bool stop = false;
	reader rd[3];
	pthread_t th[3];
	uint64_t index = 0;
	tli_op op;

	node_init(&a, "repl-a");
	base_topics(a.s);
	steps(a.s, 31337, 200);
	/* B: a store of its own, with a longer log of other data */
	node_init(&b, "repl-b");
	tt_topic(b.s, "other", 0);
	for (int i = 0; i < 300; i++) {
		char id[16];
		snprintf(id, sizeof(id), "b%d", i);
		TL_PASS(tt_create(b.s, "other", id, "o", START_MS, "x", &op));
	}
	cr_assert_gt(tli_store_applied_index(b.s), 300);
	for (int i = 0; i < 3; i++) {
		rd[i] = (reader){.s = b.s, .stop = &stop};
		cr_assert_eq(
		    pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
	}
	for (int round = 0; round < 3; round++) {
		int ok = 0;
		uint64_t rng = 5 + (uint64_t) round;
		for (int i = 0; i < 40; i++) {
			step(a.s, &rng, &ok);
		}
		snprintf(cp, sizeof(cp), "%s/cp%d", tmp, round);
		TL_PASS(tli_store_checkpoint(a.s, cp, &index));
		cr_assert_eq(index, tli_store_applied_index(a.s));
		TL_PASS(tli_store_restore(b.s, cp), "%s",
		    tli_store_last_error(b.s));
		cr_assert_eq(tli_store_applied_index(b.s), index);
		assert_same(a.s, b.s);
		/* the checkpoint was moved in, the old database removed */
		cr_assert_neq(access(cp, F_OK), 0);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		cr_assert_gt(rd[i].reads, 0);
	}
	cr_assert_eq(tt_check(b.s), 0);
	{
		char old[600];
		snprintf(old, sizeof(old), "%s.old", b.dir);
		cr_assert_neq(access(old, F_OK), 0);
	}
	/* B goes on as a follower of A, and survives a reopen */
	a.peer = &b;
	steps(a.s, 8, 100);
	tli_store_close(b.s);
	node_open(&b);
	cr_assert_eq(tli_store_applied_index(b.s), rlog_n);
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(b.s), 0);
	node_fini(&a);
	node_fini(&b);
	tt_rmtree_free(&tmp);
}

/* A restore that cannot work leaves the store as it was, and says why. */
Test(replica, restore_failure_keeps_store)
{
	node b;
	char *tmp = tt_mkdtemp("repl-cp"), dir[512];
	char *d0, *d1;
	tli_op op;
	FILE *f;

	node_init(&b, "repl-b");
	tt_topic(b.s, "t0", 0);
	TL_PASS(tt_create(b.s, "t0", "m1", "o", START_MS, "x", &op));
	d0 = dump(b.s);

	/* no such directory; a directory without a database */
	snprintf(dir, sizeof(dir), "%s/none", tmp);
	TL_FAIL(tli_store_restore(b.s, dir), TL_ESTORAGE);
	cr_assert(strstr(tli_store_last_error(b.s), "none") != NULL, "%s",
	    tli_store_last_error(b.s));
	TL_FAIL(tli_store_restore(b.s, tmp), TL_ESTORAGE);
	/* a database RocksDB cannot open: put back where it was */
	snprintf(dir, sizeof(dir), "%s/junk", tmp);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/junk/CURRENT", tmp);
	f = fopen(dir, "w");
	fputs("MANIFEST-000404\n", f);
	fclose(f);
	snprintf(dir, sizeof(dir), "%s/junk", tmp);
	TL_NOT_OK(tli_store_restore(b.s, dir));
	cr_assert_gt(strlen(tli_store_last_error(b.s)), 0);
	cr_assert_eq(access(dir, F_OK), 0);

	d1 = dump(b.s);
	cr_assert_str_eq(d0, d1);
	TL_PASS(tt_create(b.s, "t0", "m2", "o", START_MS, "y", &op));
	cr_assert_eq(tt_check(b.s), 0);
	free(d0);
	free(d1);
	node_fini(&b);
	tt_rmtree_free(&tmp);
}

/* A replicate that waits for the test's word, as one waiting for a Raft
 * thread would. */
static _Atomic int gate; /* 0 open, 1 closed, 2 a batch waits at it */

static int
gated(void *arg, const void *e, size_t len)
{
	int one = 1;

	if (atomic_compare_exchange_strong(&gate, &one, 2)) {
		while (atomic_load(&gate) == 2) {
			usleep(1000);
		}
	}
	return feed(arg, e, len);
}

static void *
create_main(void *arg)
{
	tli_op op;

	return (void *) (intptr_t) tt_create(
	    arg, "t0", "g", "o", START_MS, "g", &op);
}

/* Reload and restore while the writer is inside replicate: refused with
 * TL_EBUSY rather than waiting for a writer that may wait for them. */
Test(replica, busy_writer_refuses_swap, .timeout = 30)
{
	node a;
	tli_store_opts o;
	pthread_t th;
	void *res;
	char *tmp = tt_mkdtemp("repl-cp"), cp[512];
	uint64_t index;

	memset(&a, 0, sizeof(a));
	a.dir = tt_mkdtemp("repl-a");
	tli_store_opts_init(&o);
	o.path = a.dir;
	o.clock = tt_clock_as_tli(&clk);
	o.replicate = gated;
	o.replicate_arg = &a;
	TL_PASS(tli_store_open(&a.s, &o));
	tt_topic(a.s, "t0", 0);
	snprintf(cp, sizeof(cp), "%s/cp", tmp);
	TL_PASS(tli_store_checkpoint(a.s, cp, &index));

	atomic_store(&gate, 1);
	cr_assert_eq(pthread_create(&th, NULL, create_main, a.s), 0);
	while (atomic_load(&gate) != 2) {
		usleep(1000);
	}
	TL_FAIL(tli_store_reload(a.s), TL_EBUSY);
	TL_FAIL(tli_store_restore(a.s, cp), TL_EBUSY);
	cr_assert_eq(access(cp, F_OK), 0); /* untouched */
	atomic_store(&gate, 0);
	pthread_join(th, &res);
	TL_CODE_EQ((int) (intptr_t) res, TL_OK);
	TL_PASS(tli_store_reload(a.s));
	{
		tli_msg m;
		TL_PASS(tli_store_get(a.s, "t0", "g", 1, &m));
		tli_msg_fini(&m);
	}
	node_fini(&a);
	tt_rmtree_free(&tmp);
}

/* A batch whose outcome the leader could not learn (TL_ELEADERLOST) but
 * which was committed: once reloaded, the store has it, like the
 * follower, and every count agrees. */
Test(replica, leadership_lost_but_applied)
{
	node a, b;
	tli_op op, ops[3];
	tli_msg m;

	node_init(&a, "repl-a");
	node_init(&b, "repl-b");
	a.peer = &b;
	base_topics(a.s);
	steps(a.s, 606, 100);
	TL_PASS(tt_create(a.s, "t0", "x", "o", now_ms() - 5, "bx", &op));
	atomic_store(&a.fail, TL_ELEADERLOST);
	a.lost = true;
	ops[0] = tt_mkop(TLI_OP_LEASE, "t0", "x", "c", 5000, 0);
	ops[0].ts_mode = TLI_TS_REL;
	ops[1] = tt_mkop(TLI_OP_CREATE, "t0", "y", "o", now_ms(), 0);
	ops[1].body = "by";
	ops[1].body_len = 2;
	ops[2] = tt_mkop(TLI_OP_DELETE_OWNED, "t1", "m1", "o", 0, 0);
	TL_PASS(tli_store_apply(a.s, ops, 3));
	TL_CODE_EQ(ops[0].err, TL_ELEADERLOST);
	TL_CODE_EQ(ops[1].err, TL_ELEADERLOST);
	atomic_store(&a.fail, TL_OK);
	a.lost = false;
	TL_PASS(tli_store_reload(a.s));
	TL_PASS(tli_store_get(a.s, "t0", "x", 1, &m));
	cr_assert_eq(m.consumer_len, 1);
	tli_msg_fini(&m);
	TL_PASS(tli_store_get(a.s, "t0", "y", 1, &m));
	tli_msg_fini(&m);
	steps(a.s, 607, 100);
	TL_PASS(tli_store_reload(b.s));
	assert_same(a.s, b.s);
	cr_assert_eq(tt_check(a.s), 0);
	cr_assert_eq(tt_check(b.s), 0);
	node_fini(&a);
	node_fini(&b);
}

typedef struct applier {
	tli_store *s;
	_Atomic size_t done;
} applier;

static void *
applier_main(void *arg)
{
	applier *ap = arg;

	for (size_t i = 0; i < rlog_n; i++) {
		cr_assert_eq(
		    tli_store_apply_entry(ap->s, i + 1, rlog[i].p, rlog[i].len),
		    TL_OK);
		atomic_store(&ap->done, i + 1);
	}
	return NULL;
}

/* A checkpoint taken while entries are being applied holds exactly the
 * entries up to the index it reports. */
Test(replica, checkpoint_index_consistent)
{
	node a, b;
	applier ap;
	pthread_t th;
	char *tmp = tt_mkdtemp("repl-cp"), cp[16][512];
	uint64_t idx[16];
	int ncp = 0;

	node_init(&a, "repl-a");
	base_topics(a.s);
	steps(a.s, 2024, 400);
	node_init(&b, "repl-b");
	ap = (applier){.s = b.s};
	cr_assert_eq(pthread_create(&th, NULL, applier_main, &ap), 0);
	/* at least two (a checkpoint flushes first, and may outlast the
	 * applier on a fast disk) */
	while (ncp < 16 && (ncp < 2 || atomic_load(&ap.done) < rlog_n)) {
		snprintf(cp[ncp], sizeof(cp[ncp]), "%s/cp%d", tmp, ncp);
		TL_PASS(tli_store_checkpoint(b.s, cp[ncp], &idx[ncp]));
		ncp++;
		usleep(2000);
	}
	pthread_join(th, NULL);
	cr_assert_gt(ncp, 1);
	for (int i = 0; i < ncp; i++) {
		tli_store *c = tt_store_open(cp[i], &clk);
		cr_assert_eq(
		    tli_store_applied_index(c), idx[i], "checkpoint %d", i);
		cr_assert_eq(tt_check(c), 0);
		tli_store_close(c);
	}
	node_fini(&a);
	node_fini(&b);
	tt_rmtree_free(&tmp);
}
