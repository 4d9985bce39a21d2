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
} node;

static tt_clock clk;

static int
feed(void *arg, const void *e, size_t len)
{
	node *n = arg;
	uint64_t index;
	int rv;

	if (atomic_load(&n->fail) != TL_OK) {
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
	return tli_store_apply_entry(n->s, index, e, len);
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
