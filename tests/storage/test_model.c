/*
 * Model-based test of the timeline store. Thousands of random operation
 * sequences (creates, leases, extends, releases, deletes and moves on a small
 * universe of topics, ids, owners and consumers, with random timestamps,
 * versions and clock jumps, some of them backwards) are applied both to the
 * real store and to a small in-memory reference model that implements the
 * rules of docs/storage.md literally: the input, time and state checks in
 * their documented order and the effects on ts, version, lock_consumer and
 * deliveries. Every operation's result is compared with the model's, and the
 * whole state (lookups, scans, counts, counters, the consistency checker) is
 * compared periodically and at the end of each sequence.
 *
 * A failure prints the seed, the operation index and the log of the sequence.
 * To replay one seed in every test: TL_MODEL_SEED=<seed>; to print every
 * operation as it runs: TL_MODEL_TRACE=1.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

#define NTOPIC 2
#define NFIXED 12 /* fixed ids; generated ids are appended per sequence */
#define MAXIDS 40
#define NWHO 3      /* owners, and consumers */
#define MAXBODY 100 /* the largest max_body among the topics */
#define MAXB 24     /* operations per step */
#define MAXSCAN 64
#define RECYCLE_EVERY 25 /* sequences on one database */
#define UNKNOWN_TOPIC "tz-never-created"

enum { ID_EMPTY = -1, ID_LONG = -2 };
enum { W_EMPTY = -1, W_LONG = -2 };
enum { SCAN_DUE, SCAN_CONS, SCAN_OWNER };

static const struct {
	const char *s;
	size_t n;
} fixed_ids[NFIXED] = {
    {"a", 1}, {"aa", 2}, {"ab", 2}, {"b", 1}, {"ba", 2}, {"c", 1}, {"m-01", 4},
    {"m-02", 4}, {"zz", 2}, {"\xff", 1}, {"n\0ul", 4},
    {NULL, TL_MAX_ID_LEN}, /* 128 x: the longest valid id */
};

/* Names that are prefixes of one another, so that a scan of one owner or
 * consumer that ran into another would show. */
static const char *owners[NWHO] = {"o", "o1", "oo"};
static const char *consumers[NWHO] = {"c", "c1", "cc"};

static char long_id[TL_MAX_ID_LEN + 1];    /* 129 bytes: too long */
static char long_who[TL_MAX_NAME_LEN + 1]; /* 129 bytes: too long */

typedef struct mid {
	char s[TL_MAX_ID_LEN + 1];
	size_t len;
} mid;

typedef struct mmsg {
	bool live;
	int owner;
	int cons; /* -1: no lock_consumer */
	int64_t ts;
	int64_t sched; /* where the producer placed it: owner scans' order */
	uint64_t version;
	uint32_t deliveries;
	uint32_t bucket;
	int64_t created_now; /* the store's now when it was created */
	int64_t push_at;     /* a lease taken ahead: its due time, else 0 */
	/* the recurrence (every 0 = none): occurrence seq of 1..last, due on
	 * the grid start + (k - 1) * every */
	int64_t every;
	int64_t start;
	uint32_t seq;
	uint32_t last;
	bool catch_up;
	uint8_t body[MAXBODY];
	size_t body_len;
} mmsg;

typedef struct mtopic {
	const char *name;
	uint32_t buckets;
	int64_t default_lease;
	int64_t max_lease;
	uint32_t max_body;
	int nids;
	mid ids[MAXIDS];
	mmsg msgs[MAXIDS];
} mtopic;

/* One generated operation: what the model needs besides the tli_op. */
typedef struct gop {
	int topic; /* index, or -1 for a topic that does not exist */
	int idx;   /* id index in the topic, ID_EMPTY or ID_LONG */
	int who;   /* owner or consumer index, W_EMPTY or W_LONG */
	uint8_t body[MAXBODY + 2];
} gop;

typedef struct mctx {
	tli_store *s;
	tli_store_opts opts;
	char *dir;
	tt_clock clk;
	int64_t gap;
	uint64_t seed;
	uint64_t rng;
	int opno;
	int step;
	int max_ops;         /* most operations in one step */
	int max_groups;      /* most concurrent submissions in one step */
	int fault_pct;       /* % of empty, and of too long, ids and names */
	bool combine_faults; /* a bad id and a bad name in the same op */
	bool trace;
	mtopic topics[NTOPIC];
	/* Read hints handed to operations: reads of earlier steps, so often
	 * stale; the store must notice and read again. */
	tli_msg hints[NTOPIC][MAXIDS];
	bool hint_ok[NTOPIC][MAXIDS];
	char *log;
	size_t loglen;
	size_t logcap;
} mctx;

/* The test's context, for model_fini to clean up after a failure too. */
static mctx *model_ctx;

/* ---- plumbing: PRNG, log, failures ---- */

static uint64_t
rng_next(mctx *c)
{
	uint64_t z = (c->rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static int64_t
rnd(mctx *c, int64_t n)
{
	return n <= 1 ? 0 : (int64_t) (rng_next(c) % (uint64_t) n);
}

static int64_t
rnd_in(mctx *c, int64_t lo, int64_t hi)
{
	return lo + rnd(c, hi - lo + 1);
}

static int64_t
now_of(mctx *c)
{
	return atomic_load(&c->clk.now);
}

static void
mlog(mctx *c, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	if ((size_t) n >= sizeof(line)) {
		n = sizeof(line) - 1;
	}
	if (c->trace) {
		fprintf(stderr, "[seed %" PRIu64 "] %s", c->seed, line);
	}
	if (c->loglen + (size_t) n + 1 > c->logcap) {
		c->logcap = (c->logcap + (size_t) n + 1) * 2;
		c->log = realloc(c->log, c->logcap);
		cr_assert_not_null(c->log);
	}
	memcpy(c->log + c->loglen, line, (size_t) n + 1);
	c->loglen += (size_t) n;
}

static void
mfail(mctx *c, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr,
	    "---- log of seed %" PRIu64 " (replay: TL_MODEL_SEED=%" PRIu64
	    ") ----\n%s---- end of log ----\n",
	    c->seed, c->seed, c->log != NULL ? c->log : "");
	cr_assert_fail("seed %" PRIu64 ", op %d, step %d, now %" PRId64 ": %s",
	    c->seed, c->opno, c->step, now_of(c), msg);
}

#define MCHECK(c, cond, ...)                     \
	do {                                     \
		if (!(cond)) {                   \
			mfail((c), __VA_ARGS__); \
		}                                \
	} while (0)

static const char *
fmt_bytes(char *out, size_t cap, const char *p, size_t n)
{
	size_t o = 0;

	if (n > 24) {
		snprintf(out, cap, "<%zu bytes %c..>", n, p[0]);
		return out;
	}
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		unsigned char ch = (unsigned char) p[i];
		if (ch >= 0x20 && ch < 0x7f) {
			out[o++] = (char) ch;
		} else {
			o += (size_t) snprintf(out + o, cap - o, "\\x%02x", ch);
		}
	}
	out[o] = '\0';
	return out;
}

static const char *
op_name(tli_op_type t)
{
	switch (t) {
	case TLI_OP_CREATE:
		return "CREATE";
	case TLI_OP_LEASE:
		return "LEASE";
	case TLI_OP_EXTEND:
		return "EXTEND";
	case TLI_OP_RELEASE:
		return "RELEASE";
	case TLI_OP_DELETE_LEASED:
		return "DELETE_LEASED";
	case TLI_OP_DELETE_OWNED:
		return "DELETE_OWNED";
	case TLI_OP_MOVE:
		return "MOVE";
	default:
		break;
	}
	return "?";
}

static bool
is_holder_side(tli_op_type t)
{
	return t == TLI_OP_LEASE || t == TLI_OP_EXTEND || t == TLI_OP_RELEASE ||
	    t == TLI_OP_DELETE_LEASED;
}

static bool
has_ts(tli_op_type t)
{
	return t != TLI_OP_DELETE_LEASED && t != TLI_OP_DELETE_OWNED;
}

static int
id_cmp(const mid *a, const mid *b)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int r = memcmp(a->s, b->s, n);

	if (r != 0) {
		return r;
	}
	return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

/* ---- the store: open, close, topics ---- */

static void
store_open(mctx *c)
{
	int rv = tli_store_open(&c->s, &c->opts);

	TL_PASS(rv, "tli_store_open");
}

static void
topic_reset(mctx *c, int ti)
{
	mtopic *tp = &c->topics[ti];
	tli_topic_conf conf;
	int rv;

	rv = tli_store_topic_delete(c->s, tp->name);
	MCHECK(c, rv == TL_OK || rv == TL_ENOTOPIC, "topic_delete(%s): %s",
	    tp->name, tl_errname(rv));
	rv = tli_topic_conf_init(&conf, tp->name);
	MCHECK(c, rv == TL_OK, "topic_conf_init: %s", tl_errname(rv));
	conf.buckets = tp->buckets;
	conf.max_body = tp->max_body;
	conf.default_lease_ms = tp->default_lease;
	conf.max_lease_ms = tp->max_lease;
	/* Never dead-letter: the model leaves dead letters out (docs/storage.md
	 * does not place TL_EDEAD among the lease checks nor say what it does
	 * to version and lock), so every lease follows the table. */
	conf.max_deliveries = 0;
	rv = tli_store_topic_create(c->s, &conf);
	MCHECK(
	    c, rv == TL_OK, "topic_create(%s): %s", tp->name, tl_errname(rv));

	memset(tp->ids, 0, sizeof(tp->ids));
	memset(tp->msgs, 0, sizeof(tp->msgs));
	for (int i = 0; i < NFIXED; i++) {
		if (fixed_ids[i].s != NULL) {
			memcpy(tp->ids[i].s, fixed_ids[i].s, fixed_ids[i].n);
		} else {
			memset(tp->ids[i].s, 'x', fixed_ids[i].n);
		}
		tp->ids[i].len = fixed_ids[i].n;
	}
	tp->nids = NFIXED;
}

static mctx *
ctx_new(const char *tag, int64_t gap, int max_ops, int max_groups)
{
	mctx *c = calloc(1, sizeof(*c));

	cr_assert_not_null(c);
	memset(long_id, 'y', sizeof(long_id) - 1);
	memset(long_who, 'w', sizeof(long_who) - 1);
	c->dir = tt_mkdtemp(tag);
	c->gap = gap;
	c->max_ops = max_ops;
	c->max_groups = max_groups;
	c->fault_pct = 2;
	c->trace = getenv("TL_MODEL_TRACE") != NULL;
	tt_clock_init(&c->clk, INT64_C(1700000000000));
	tli_store_opts_init(&c->opts);
	c->opts.path = c->dir;
	/* Durability is not what this test is about; skipping the fsyncs
	 * keeps thousands of sequences fast. A clean close keeps everything. */
	c->opts.sync_mode = TLI_SYNC_NONE;
	c->opts.min_lease_gap_ms = gap;
	c->opts.clock = tt_clock_as_tli(&c->clk);
	c->opts.no_record_cache = getenv("TL_MODEL_NO_CACHE") != NULL;

	c->topics[0].name = "ta";
	c->topics[0].buckets = 1;
	c->topics[0].default_lease = 1000;
	c->topics[0].max_lease = 5000;
	c->topics[0].max_body = 100;
	c->topics[1].name = "tb";
	c->topics[1].buckets = 4;
	c->topics[1].default_lease = 30000;
	c->topics[1].max_lease = 60000;
	c->topics[1].max_body = 64;
	store_open(c);
	model_ctx = c;
	return c;
}

/* A fresh directory every so many sequences: RocksDB's scans slow down on
 * the tombstones that thousands of deletes leave behind. */
static void
ctx_recycle(mctx *c)
{
	tli_store_close(c->s);
	c->s = NULL;
	tt_rmtree(c->dir);
	free(c->dir);
	c->dir = tt_mkdtemp("model");
	c->opts.path = c->dir;
	/* Every other database without the writer's record cache, so that
	 * read hints (and reads) are used where the cache would answer. */
	c->opts.no_record_cache = !c->opts.no_record_cache;
	store_open(c);
}

static void hints_clear(mctx *c);

static void
ctx_free(mctx *c)
{
	hints_clear(c);
	tli_store_close(c->s);
	tt_rmtree(c->dir);
	free(c->dir);
	free(c->log);
	free(c);
	model_ctx = NULL;
}

static void
model_fini(void)
{
	if (model_ctx != NULL) {
		ctx_free(model_ctx);
	}
}

/* ---- the model ---- */

/* A create's recurrence, as docs/storage.md states it, at resolved ts t. */
static int
model_recur_check(const tli_op *op, int64_t t)
{
	if (op->every_ms == 0) {
		return op->times != 0 || op->until != 0 || op->catch_up
		    ? TL_EINVAL
		    : TL_OK;
	}
	if (op->every_ms < 1) {
		return TL_ERANGE;
	}
	if ((op->times == 0) == (op->until == 0)) {
		return TL_EINVAL;
	}
	if (op->until > TL_TS_MAX) {
		return TL_ERANGE;
	}
	if (op->until != 0 && op->until < t) {
		return TL_EINVAL;
	}
	{
		/* small enough in the generated cases not to overflow */
		int64_t last = op->until != 0
		    ? (op->until - t) / op->every_ms + 1
		    : (int64_t) op->times;
		if (last > UINT32_MAX ||
		    t + (last - 1) * op->every_ms > TL_TS_MAX) {
			return TL_ERANGE;
		}
	}
	return TL_OK;
}

/* The occurrence after m's current one that a holder's delete at now
 * places, or 0: literally the next one with catch_up, else the smallest
 * index > seq whose grid time is after now. */
static uint32_t
model_recur_next(const mmsg *m, int64_t now)
{
	uint32_t j = m->seq + 1;

	while (!m->catch_up && j <= m->last &&
	    m->start + (int64_t) (j - 1) * m->every <= now) {
		j++;
	}
	return j <= m->last ? j : 0;
}

/* The answer docs/storage.md gives for op at `now`; *tres gets the resolved
 * timestamp. Checks run in the documented order: input, time, state. */
static int
model_eval(
    const mctx *c, const gop *g, const tli_op *op, int64_t now, int64_t *tres)
{
	const mtopic *tp;
	const mmsg *m;
	int64_t t = 0;
	/* The instant a lease taken ahead acts at. */
	int64_t base = op->type == TLI_OP_LEASE && op->at > now ? op->at : now;

	*tres = 0;
	if (g->topic < 0) {
		return TL_ENOTOPIC;
	}
	tp = &c->topics[g->topic];
	/* Field by field: the id, then the owner or consumer, then the body. */
	if (g->idx == ID_EMPTY && op->type != TLI_OP_CREATE) {
		return TL_EBADID;
	}
	if (g->idx == ID_LONG) {
		return TL_ETOOLARGE;
	}
	if (g->who == W_EMPTY) {
		return TL_EBADID;
	}
	if (g->who == W_LONG) {
		return TL_ETOOLARGE;
	}
	if (op->type == TLI_OP_CREATE && op->body_len > tp->max_body) {
		return TL_ETOOLARGE;
	}
	if (has_ts(op->type)) {
		t = op->ts_mode == TLI_TS_REL ? base + op->ts : op->ts;
		if (t < TL_TS_MIN || t > TL_TS_MAX) {
			return TL_ERANGE;
		}
	}
	*tres = t;

	switch (op->type) {
	case TLI_OP_LEASE:
		if (op->at > now + TLI_LEASE_AHEAD_MAX) {
			return TL_ERANGE;
		}
		/* FALLTHROUGH */
	case TLI_OP_EXTEND:
		if (t < base + c->gap) {
			return TL_ETOOCLOSE;
		}
		if (t - base > tp->max_lease) {
			return TL_ELEASELIMIT;
		}
		break;
	case TLI_OP_RELEASE:
		if (t < now) {
			return TL_ETOOCLOSE;
		}
		break;
	default:
		break;
	}

	if (op->type == TLI_OP_CREATE) {
		int rv = model_recur_check(op, t);

		if (rv != TL_OK) {
			return rv;
		}
		if (g->idx >= 0 && tp->msgs[g->idx].live) {
			return TL_EEXISTS;
		}
		return TL_OK;
	}
	m = &tp->msgs[g->idx];
	if (!m->live) {
		return TL_ENOTFOUND;
	}
	switch (op->type) {
	case TLI_OP_LEASE:
		if (op->version != 0 && op->version != m->version) {
			return TL_EVERSION;
		}
		if (m->cons >= 0 && m->ts > now) {
			return TL_ELEASED;
		}
		return m->ts > base ? TL_ENOTDUE : TL_OK;
	case TLI_OP_EXTEND:
	case TLI_OP_RELEASE:
	case TLI_OP_DELETE_LEASED:
		if (m->cons < 0) {
			return TL_ENOTLEASED;
		}
		if (m->cons != g->who) {
			return TL_ELEASED;
		}
		if (op->version != m->version) {
			return TL_EVERSION;
		}
		if (m->ts <= now) {
			return TL_ELEASEEXPIRED;
		}
		return TL_OK;
	case TLI_OP_DELETE_OWNED:
	case TLI_OP_MOVE:
		if (m->owner != g->who) {
			return TL_ENOTOWNER;
		}
		if (op->version != 0 && op->version != m->version) {
			return TL_EVERSION;
		}
		if (m->cons >= 0 && m->ts > now) {
			return TL_ELEASED;
		}
		/* A move keeps the series' last grid point in range. */
		if (op->type == TLI_OP_MOVE && m->every > 0 &&
		    t + (int64_t) (m->last - m->seq) * m->every > TL_TS_MAX) {
			return TL_ERANGE;
		}
		return TL_OK;
	default:
		break;
	}
	return TL_EINTERNAL;
}

static bool
crockford(char ch)
{
	return ch != '\0' &&
	    strchr("0123456789ABCDEFGHJKMNPQRSTVWXYZ", ch) != NULL;
}

/* A create without an id succeeded: check the generated id and add it to
 * the topic's universe. */
static int
model_add_gen_id(mctx *c, mtopic *tp, const tli_op *op)
{
	size_t len = strnlen(op->gen_id, sizeof(op->gen_id));
	mid *d;

	MCHECK(c, len == TL_GEN_ID_LEN,
	    "generated id has %zu characters, "
	    "expected %d",
	    len, TL_GEN_ID_LEN);
	for (size_t i = 0; i < len; i++) {
		MCHECK(c, crockford(op->gen_id[i]),
		    "generated id %s is not "
		    "Crockford base32",
		    op->gen_id);
	}
	for (int i = 0; i < tp->nids; i++) {
		MCHECK(c,
		    tp->ids[i].len != len ||
		        memcmp(tp->ids[i].s, op->gen_id, len) != 0,
		    "generated id %s repeats an id already used in %s",
		    op->gen_id, tp->name);
	}
	cr_assert_lt(tp->nids, MAXIDS);
	d = &tp->ids[tp->nids];
	memcpy(d->s, op->gen_id, len);
	d->len = len;
	return tp->nids++;
}

static void
model_apply(mctx *c, const gop *g, const tli_op *op, int64_t now, int64_t t)
{
	mtopic *tp = &c->topics[g->topic];
	int i = g->idx;
	mmsg *m;

	if (op->type == TLI_OP_CREATE) {
		if (i == ID_EMPTY) {
			i = model_add_gen_id(c, tp, op);
		}
		m = &tp->msgs[i];
		memset(m, 0, sizeof(*m));
		m->live = true;
		m->owner = g->who;
		m->cons = -1;
		m->ts = t;
		m->sched = t;
		m->version = 1;
		m->deliveries = 0;
		m->bucket =
		    (uint32_t) (tli_hash64(tp->ids[i].s, tp->ids[i].len) %
		        tp->buckets);
		m->created_now = now;
		memcpy(m->body, op->body, op->body_len);
		m->body_len = op->body_len;
		if (op->every_ms > 0) {
			m->every = op->every_ms;
			m->start = t;
			m->seq = 1;
			m->last = op->until != 0
			    ? (uint32_t) ((op->until - t) / op->every_ms + 1)
			    : op->times;
			m->catch_up = op->catch_up;
		}
		return;
	}
	m = &tp->msgs[i];
	m->push_at = 0;
	switch (op->type) {
	case TLI_OP_LEASE:
		m->push_at = op->at > now ? op->at : 0;
		m->ts = t;
		m->cons = g->who;
		m->version++;
		m->deliveries++;
		break;
	case TLI_OP_EXTEND:
		m->ts = t;
		m->version++;
		break;
	case TLI_OP_RELEASE:
	case TLI_OP_MOVE:
		if (op->type == TLI_OP_MOVE && m->every > 0) {
			m->start = t - (int64_t) (m->seq - 1) * m->every;
		}
		m->ts = t;
		m->sched = t;
		m->cons = -1;
		m->version++;
		break;
	case TLI_OP_DELETE_LEASED: {
		uint32_t j = m->every > 0 ? model_recur_next(m, now) : 0;

		if (j == 0) {
			m->live = false;
			break;
		}
		m->seq = j;
		m->ts = m->start + (int64_t) (j - 1) * m->every;
		m->sched = m->ts;
		m->cons = -1;
		m->deliveries = 0;
		m->version++;
		break;
	}
	case TLI_OP_DELETE_OWNED:
		m->live = false;
		break;
	default:
		break;
	}
}

/* Compare one completed operation with the model, then apply it. */
static void
check_op(mctx *c, const gop *g, const tli_op *op, int64_t now)
{
	char idb[64];
	int64_t t;
	int exp = model_eval(c, g, op, now, &t);
	const mmsg *m = NULL;

	mlog(c,
	    "op %d now=%" PRId64 " %s %s id=%s who=%s ts=%s%" PRId64
	    " v=%" PRIu64 " body=%zu -> expect %s, got %s\n",
	    c->opno, now, op_name(op->type), op->topic,
	    fmt_bytes(idb, sizeof(idb), op->id, op->id_len),
	    op->who_len > 24 ? "<long>" : op->who,
	    op->ts_mode == TLI_TS_REL ? "+" : "", op->ts, op->version,
	    op->body_len, tl_errname(exp), tl_errname(op->err));
	MCHECK(c, op->err == exp, "%s %s id=%s: expected %s, got %s",
	    op_name(op->type), op->topic, idb, tl_errname(exp),
	    tl_errname(op->err));
	if (exp != TL_OK) {
		c->opno++;
		return;
	}
	if (op->type != TLI_OP_CREATE) {
		m = &c->topics[g->topic].msgs[g->idx];
	}
	switch (op->type) {
	case TLI_OP_CREATE:
		MCHECK(c, op->new_version == 1,
		    "create: new_version %" PRIu64 ", expected 1",
		    op->new_version);
		MCHECK(c, op->new_ts == t,
		    "create: new_ts %" PRId64 ", expected %" PRId64, op->new_ts,
		    t);
		break;
	case TLI_OP_LEASE:
		MCHECK(c, op->deliveries == m->deliveries + 1,
		    "lease: "
		    "deliveries %" PRIu32 ", expected %" PRIu32,
		    op->deliveries, m->deliveries + 1);
		/* FALLTHROUGH */
	case TLI_OP_EXTEND:
	case TLI_OP_RELEASE:
	case TLI_OP_MOVE:
		MCHECK(c, op->new_version == m->version + 1,
		    "%s: new_version %" PRIu64 ", expected %" PRIu64,
		    op_name(op->type), op->new_version, m->version + 1);
		MCHECK(c, op->new_ts == t,
		    "%s: new_ts %" PRId64 ", expected %" PRId64,
		    op_name(op->type), op->new_ts, t);
		break;
	default:
		break;
	}
	model_apply(c, g, op, now, t);
	if (op->type != TLI_OP_CREATE) {
		const mmsg *a = &c->topics[g->topic].msgs[g->idx];

		MCHECK(c, op->seq == (a->live ? a->seq : 0),
		    "%s: seq %" PRIu32 ", expected %" PRIu32, op_name(op->type),
		    op->seq, a->live ? a->seq : 0);
		if (op->type == TLI_OP_DELETE_LEASED) {
			MCHECK(c,
			    op->new_version == (a->live ? a->version : 0) &&
			        op->new_ts == (a->live ? a->ts : 0),
			    "delete(holder): new version %" PRIu64
			    " ts %" PRId64 ", expected %" PRIu64 " %" PRId64,
			    op->new_version, op->new_ts,
			    a->live ? a->version : 0, a->live ? a->ts : 0);
		}
	}
	if (op->type == TLI_OP_CREATE) {
		const mtopic *tp = &c->topics[g->topic];
		int i = g->idx >= 0 ? g->idx : tp->nids - 1;
		MCHECK(c, op->bucket == tp->msgs[i].bucket,
		    "create: bucket %" PRIu32 ", expected %" PRIu32, op->bucket,
		    tp->msgs[i].bucket);
	}
	c->opno++;
}

/* ---- full state comparison ---- */

static void
compare_msg(mctx *c, int ti, int i)
{
	mtopic *tp = &c->topics[ti];
	mmsg *m = &tp->msgs[i];
	const mid *d = &tp->ids[i];
	char idb[64];
	tli_msg got;
	int rv;

	memset(&got, 0, sizeof(got));
	fmt_bytes(idb, sizeof(idb), d->s, d->len);
	rv = tli_store_get(c->s, tp->name, d->s, d->len, &got);
	if (!m->live) {
		MCHECK(c, rv == TL_ENOTFOUND,
		    "get %s/%s: expected TL_ENOTFOUND"
		    ", got %s",
		    tp->name, idb, tl_errname(rv));
		return;
	}
	MCHECK(c, rv == TL_OK, "get %s/%s: expected TL_OK, got %s", tp->name,
	    idb, tl_errname(rv));
	MCHECK(c, got.id_len == d->len && memcmp(got.id, d->s, d->len) == 0,
	    "get %s/%s: wrong id", tp->name, idb);
	MCHECK(c, got.ts == m->ts,
	    "get %s/%s: ts %" PRId64 ", expected %" PRId64, tp->name, idb,
	    got.ts, m->ts);
	MCHECK(c, got.version == m->version,
	    "get %s/%s: version %" PRIu64 ", expected %" PRIu64, tp->name, idb,
	    got.version, m->version);
	MCHECK(c, got.deliveries == m->deliveries,
	    "get %s/%s: deliveries %" PRIu32 ", expected %" PRIu32, tp->name,
	    idb, got.deliveries, m->deliveries);
	MCHECK(c, got.bucket == m->bucket,
	    "get %s/%s: bucket %" PRIu32 ", expected %" PRIu32, tp->name, idb,
	    got.bucket, m->bucket);
	MCHECK(c, got.bucket == tli_bucket_of(d->s, d->len, tp->buckets),
	    "get %s/%s: bucket %" PRIu32 " differs from tli_bucket_of",
	    tp->name, idb, got.bucket);
	MCHECK(c,
	    got.owner_len == strlen(owners[m->owner]) &&
	        memcmp(got.owner, owners[m->owner], got.owner_len) == 0,
	    "get %s/%s: owner '%.*s', expected '%s'", tp->name, idb,
	    (int) got.owner_len, got.owner, owners[m->owner]);
	if (m->cons < 0) {
		MCHECK(c, got.consumer_len == 0,
		    "get %s/%s: lock_consumer "
		    "'%.*s', expected none",
		    tp->name, idb, (int) got.consumer_len, got.consumer);
	} else {
		MCHECK(c,
		    got.consumer_len == strlen(consumers[m->cons]) &&
		        memcmp(got.consumer, consumers[m->cons],
		            got.consumer_len) == 0,
		    "get %s/%s: lock_consumer '%.*s',"
		    " expected '%s'",
		    tp->name, idb, (int) got.consumer_len, got.consumer,
		    consumers[m->cons]);
	}
	MCHECK(c, !got.dead,
	    "get %s/%s: a dead letter, but the topic never "
	    "dead-letters",
	    tp->name, idb);
	MCHECK(c,
	    got.every == m->every && got.start == m->start &&
	        got.seq == m->seq && got.last == m->last &&
	        got.catch_up == m->catch_up,
	    "get %s/%s: recurrence every %" PRId64 " start %" PRId64
	    " seq %" PRIu32 " last %" PRIu32 " catch_up %d, expected %" PRId64
	    " %" PRId64 " %" PRIu32 " %" PRIu32 " %d",
	    tp->name, idb, got.every, got.start, got.seq, got.last,
	    got.catch_up, m->every, m->start, m->seq, m->last, m->catch_up);
	MCHECK(c, got.created_at == m->created_now,
	    "get %s/%s: created_at %" PRId64
	    ", expected the store's now at creation %" PRId64,
	    tp->name, idb, got.created_at, m->created_now);
	MCHECK(c,
	    got.body_len == m->body_len &&
	        (m->body_len == 0 ||
	            memcmp(got.body, m->body, m->body_len) == 0),
	    "get %s/%s: body differs (%zu bytes, expected %zu)", tp->name, idb,
	    got.body_len, m->body_len);
	tli_msg_fini(&got);
}

/* The model's entries of a scan, in the order the scan must return them. */
static int
model_list(const mctx *c, int ti, int kind, int who, uint32_t bucket,
    int64_t up_to, int *out)
{
	const mtopic *tp = &c->topics[ti];
	int n = 0;

	for (int i = 0; i < tp->nids; i++) {
		const mmsg *m = &tp->msgs[i];
		bool in;

		if (!m->live) {
			continue;
		}
		switch (kind) {
		case SCAN_DUE:
			in = m->bucket == bucket && m->ts <= up_to;
			break;
		case SCAN_CONS:
			in = m->cons == who;
			break;
		default:
			in = m->owner == who;
			break;
		}
		if (in) {
			out[n++] = i;
		}
	}
	/* Insertion sort: (ts, id) for due and owner scans, id for the
	 * consumer scan. */
	for (int a = 1; a < n; a++) {
		int v = out[a];
		int b = a - 1;
		while (b >= 0) {
			const mmsg *x = &tp->msgs[out[b]];
			const mmsg *y = &tp->msgs[v];
			int r;
			int64_t xt = kind == SCAN_OWNER ? x->sched : x->ts;
			int64_t yt = kind == SCAN_OWNER ? y->sched : y->ts;
			if (kind != SCAN_CONS && xt != yt) {
				r = xt < yt ? -1 : 1;
			} else {
				r = id_cmp(&tp->ids[out[b]], &tp->ids[v]);
			}
			if (r <= 0) {
				break;
			}
			out[b + 1] = out[b];
			b--;
		}
		out[b + 1] = v;
	}
	return n;
}

static int
store_scan(mctx *c, int ti, int kind, int who, uint32_t bucket, int64_t up_to,
    const tli_cursor *cur, tli_entry *out, size_t max, size_t *n, bool *more)
{
	const char *topic = c->topics[ti].name;

	switch (kind) {
	case SCAN_DUE:
		return tli_store_scan_due(
		    c->s, topic, bucket, up_to, cur, out, max, n, more);
	case SCAN_CONS:
		return tli_store_scan_consumer(c->s, topic, consumers[who],
		    strlen(consumers[who]), cur, out, max, n, more);
	default:
		return tli_store_scan_owner(c->s, topic, owners[who],
		    strlen(owners[who]), cur, out, max, n, more);
	}
}

/* Run a scan page by page and compare it with the model, entry by entry,
 * including `more` on every page. */
static void
compare_scan(mctx *c, int ti, int kind, int who, uint32_t bucket, int64_t up_to)
{
	static const char *kinds[] = {
	    "scan_due", "scan_consumer", "scan_owner"};
	const mtopic *tp = &c->topics[ti];
	int want[MAXIDS];
	int nw = model_list(c, ti, kind, who, bucket, up_to, want);
	static const size_t pages[] = {1, 2, 3, MAXSCAN};
	size_t page = pages[rnd(c, 4)];
	tli_entry got[MAXSCAN];
	tli_cursor cur;
	size_t total = 0;
	char desc[96];

	snprintf(desc, sizeof(desc),
	    "%s %s %s bucket %" PRIu32 " up_to %" PRId64 " page %zu",
	    kinds[kind], tp->name,
	    kind == SCAN_CONS        ? consumers[who]
	        : kind == SCAN_OWNER ? owners[who]
	                             : "-",
	    bucket, up_to, page);
	memset(&cur, 0, sizeof(cur));
	for (int round = 0;; round++) {
		size_t n = 0;
		bool more = false;
		int rv;

		MCHECK(c, round <= MAXIDS + 1, "%s: does not end", desc);
		rv = store_scan(c, ti, kind, who, bucket, up_to, &cur, got,
		    page, &n, &more);
		MCHECK(c, rv == TL_OK, "%s: %s", desc, tl_errname(rv));
		MCHECK(c, n <= page, "%s: %zu entries on a page of %zu", desc,
		    n, page);
		MCHECK(c, total + n <= (size_t) nw,
		    "%s: more than the %d "
		    "expected entries",
		    desc, nw);
		for (size_t k = 0; k < n; k++) {
			const tli_entry *e = &got[k];
			const mid *d = &tp->ids[want[total + k]];
			const mmsg *m = &tp->msgs[want[total + k]];
			char idb[64];

			fmt_bytes(idb, sizeof(idb), d->s, d->len);
			MCHECK(c,
			    e->id_len == d->len &&
			        memcmp(e->id, d->s, d->len) == 0,
			    "%s: entry %zu "
			    "is not %s",
			    desc, total + k, idb);
			int64_t wts = kind == SCAN_OWNER ? m->sched : m->ts;
			MCHECK(c, e->ts == wts,
			    "%s: %s ts %" PRId64 ", expected %" PRId64, desc,
			    idb, e->ts, wts);
			MCHECK(c, e->version == m->version,
			    "%s: %s version %" PRIu64 ", expected %" PRIu64,
			    desc, idb, e->version, m->version);
			MCHECK(c,
			    e->push_at == (kind == SCAN_CONS ? m->push_at : 0),
			    "%s: %s push_at %" PRId64 ", expected %" PRId64,
			    desc, idb, e->push_at, m->push_at);
			if (kind != SCAN_CONS) {
				MCHECK(c, e->locked == (m->cons >= 0),
				    "%s: %s "
				    "locked %d, expected %d",
				    desc, idb, e->locked, m->cons >= 0);
			}
			if (kind == SCAN_DUE) {
				MCHECK(c, e->bucket == m->bucket,
				    "%s: %s "
				    "bucket %" PRIu32,
				    desc, idb, e->bucket);
			}
		}
		total += n;
		MCHECK(c, more == (total < (size_t) nw),
		    "%s: more=%d after %zu"
		    " of %d entries",
		    desc, more, total, nw);
		if (!more) {
			break;
		}
		MCHECK(c, n > 0, "%s: empty page with more=1", desc);
		tli_cursor_from_entry(&cur, &got[n - 1]);
	}
	MCHECK(c, total == (size_t) nw, "%s: %zu entries, expected %d", desc,
	    total, nw);
}

static void
model_counts(const mctx *c, int ti, int64_t from, int64_t to, int64_t now,
    tli_counts *out)
{
	const mtopic *tp = &c->topics[ti];

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < tp->nids; i++) {
		const mmsg *m = &tp->msgs[i];
		if (!m->live || m->ts < from || m->ts >= to) {
			continue;
		}
		if (m->ts <= now) {
			out->available++;
		} else if (m->cons < 0) {
			out->waiting++;
		} else {
			out->processing++;
		}
	}
}

static void
compare_counts(
    mctx *c, const char *what, const tli_counts *got, const tli_counts *want)
{
	MCHECK(c,
	    got->available == want->available &&
	        got->waiting == want->waiting &&
	        got->processing == want->processing,
	    "%s: available/waiting/"
	    "processing %" PRIu64 "/%" PRIu64 "/%" PRIu64 ", expected %" PRIu64
	    "/%" PRIu64 "/%" PRIu64,
	    what, got->available, got->waiting, got->processing,
	    want->available, want->waiting, want->processing);
}

static void
compare_topic(mctx *c, int ti)
{
	mtopic *tp = &c->topics[ti];
	int64_t now = now_of(c);
	tli_topic_info info;
	tli_counts got, want;
	uint64_t live = 0, locked = 0;
	int64_t ranges[5][2];
	char what[96];
	int rv;

	for (int i = 0; i < tp->nids; i++) {
		compare_msg(c, ti, i);
		if (tp->msgs[i].live) {
			live++;
			locked += tp->msgs[i].cons >= 0;
		}
	}

	rv = tli_store_topic_get(c->s, tp->name, &info);
	MCHECK(c, rv == TL_OK, "topic_get %s: %s", tp->name, tl_errname(rv));
	MCHECK(c, info.messages == live,
	    "topic %s: messages %" PRIu64 ", expected %" PRIu64, tp->name,
	    info.messages, live);
	MCHECK(c, info.locked == locked,
	    "topic %s: locked %" PRIu64 ", expected %" PRIu64, tp->name,
	    info.locked, locked);
	MCHECK(c, info.dead == 0,
	    "topic %s: %" PRIu64 " dead letters, "
	    "expected none",
	    tp->name, info.dead);

	rv = tli_store_totals(c->s, tp->name, &got);
	MCHECK(c, rv == TL_OK, "totals %s: %s", tp->name, tl_errname(rv));
	model_counts(c, ti, INT64_MIN, INT64_MAX, now, &want);
	snprintf(what, sizeof(what), "totals %s", tp->name);
	compare_counts(c, what, &got, &want);

	ranges[0][0] = 0;
	ranges[0][1] = TL_TS_MAX;
	ranges[1][0] = now - 2000;
	ranges[1][1] = now + 1;
	ranges[2][0] = now;
	ranges[2][1] = now + 5000;
	ranges[3][0] = now + rnd_in(c, -3000, 3000);
	ranges[3][1] = ranges[3][0] + 1;
	ranges[4][0] = now + rnd_in(c, -3000, 3000);
	ranges[4][1] = ranges[4][0] + rnd_in(c, 0, 6000);
	/* Point ranges on a live message's ts hit the bounds exactly. */
	for (int k = 0; k < tp->nids; k++) {
		int i = (int) rnd(c, tp->nids);
		if (tp->msgs[i].live && tp->msgs[i].ts < TL_TS_MAX) {
			ranges[3][0] = tp->msgs[i].ts;
			ranges[3][1] = tp->msgs[i].ts + 1;
			ranges[4][0] = tp->msgs[i].ts + rnd_in(c, 0, 1);
			break;
		}
	}
	for (int r = 0; r < 5; r++) {
		rv = tli_store_count(
		    c->s, tp->name, ranges[r][0], ranges[r][1], &got);
		MCHECK(
		    c, rv == TL_OK, "count %s: %s", tp->name, tl_errname(rv));
		model_counts(c, ti, ranges[r][0], ranges[r][1], now, &want);
		snprintf(what, sizeof(what),
		    "count %s [%" PRId64 ", %" PRId64 ")", tp->name,
		    ranges[r][0], ranges[r][1]);
		compare_counts(c, what, &got, &want);
	}

	for (uint32_t b = 0; b < tp->buckets; b++) {
		compare_scan(c, ti, SCAN_DUE, 0, b, now);
		compare_scan(
		    c, ti, SCAN_DUE, 0, b, now + rnd_in(c, -100, 70000));
	}
	for (int w = 0; w < NWHO; w++) {
		uint64_t n = 0, want_n = 0;
		compare_scan(c, ti, SCAN_CONS, w, 0, 0);
		compare_scan(c, ti, SCAN_OWNER, w, 0, 0);
		for (int i = 0; i < tp->nids; i++) {
			want_n += tp->msgs[i].live && tp->msgs[i].owner == w;
		}
		rv = tli_store_owner_count_topic(
		    c->s, tp->name, owners[w], strlen(owners[w]), &n);
		MCHECK(c, rv == TL_OK && n == want_n,
		    "owner count %s/%s: %s %" PRIu64 ", expected %" PRIu64,
		    tp->name, owners[w], tl_errname(rv), n, want_n);
	}
}

static void
compare_all(mctx *c, const char *when)
{
	tli_msg m;
	uint64_t problems;
	int rv;

	mlog(c, "compare (%s) at now=%" PRId64 "\n", when, now_of(c));
	for (int ti = 0; ti < NTOPIC; ti++) {
		compare_topic(c, ti);
	}
	rv = tli_store_get(c->s, UNKNOWN_TOPIC, "a", 1, &m);
	MCHECK(c, rv == TL_ENOTOPIC, "get on an unknown topic: %s",
	    tl_errname(rv));
	problems = tt_check(c->s);
	MCHECK(c, problems == 0, "consistency checker: %" PRIu64 " problems",
	    problems);
}

/* ---- generating operations ---- */

static tli_op_type
gen_type(mctx *c)
{
	int r = (int) rnd(c, 100);

	if (r < 22) {
		return TLI_OP_CREATE;
	}
	if (r < 48) {
		return TLI_OP_LEASE;
	}
	if (r < 60) {
		return TLI_OP_EXTEND;
	}
	if (r < 72) {
		return TLI_OP_RELEASE;
	}
	if (r < 80) {
		return TLI_OP_DELETE_LEASED;
	}
	if (r < 88) {
		return TLI_OP_DELETE_OWNED;
	}
	return TLI_OP_MOVE;
}

/* A timestamp near now (absolute or relative), sometimes on a boundary
 * (now, now + gap, now + max_lease), sometimes out of range. */
static void
gen_ts(mctx *c, tli_op *op, int64_t now, int64_t max_lease)
{
	tli_op_type type = op->type;
	int r = (int) rnd(c, 100);
	int64_t d;

	if (r < 4) {
		switch (rnd(c, 6)) {
		case 0:
			op->ts = -1 - rnd(c, 1000);
			op->ts_mode = TLI_TS_ABS;
			break;
		case 1:
			op->ts = TL_TS_MAX + 1 + rnd(c, 2);
			op->ts_mode = TLI_TS_ABS;
			break;
		case 2:
			op->ts = -now - 1; /* resolves to -1 */
			op->ts_mode = TLI_TS_REL;
			break;
		case 3:
			op->ts =
			    TL_TS_MAX - now + 1; /* resolves past the end */
			op->ts_mode = TLI_TS_REL;
			break;
		case 4:
			op->ts = TL_TS_MAX; /* the last valid time */
			op->ts_mode = TLI_TS_ABS;
			break;
		default:
			op->ts = 0; /* the first valid time */
			op->ts_mode = TLI_TS_ABS;
			break;
		}
		return;
	}
	if ((type == TLI_OP_LEASE || type == TLI_OP_EXTEND) &&
	    rnd(c, 100) < 50) {
		d = rnd(c, 2) ? rnd_in(c, c->gap, max_lease)
		              : rnd_in(c, c->gap, 3000);
	} else if (r < 14) {
		d = -rnd_in(c, 1, 3000);
	} else if (r < 22) {
		d = 0;
	} else if (r < 30) {
		d = c->gap - rnd(c, 2);
	} else if (r < 36) {
		d = max_lease + rnd(c, 2);
	} else if (r < 46) {
		d = rnd_in(c, 3000, 70000);
	} else {
		d = rnd_in(c, 1, 3000);
	}
	if (rnd(c, 100) < 30) {
		op->ts = d;
		op->ts_mode = TLI_TS_REL;
	} else {
		op->ts = now + d;
		op->ts_mode = TLI_TS_ABS;
	}
}

enum { PICK_ANY, PICK_LIVE, PICK_DUE, PICK_LOCKED, PICK_ACTIVE };

/* A random id of the topic, preferably one in the wanted state so that
 * operations succeed often enough to move the state along. */
static int
pick_id(mctx *c, const mtopic *tp, int n, int want, int64_t now)
{
	int start = (int) rnd(c, n);

	if (want == PICK_ANY) {
		return start;
	}
	for (int k = 0; k < n; k++) {
		int i = (start + k) % n;
		const mmsg *m = &tp->msgs[i];
		bool ok;

		switch (want) {
		case PICK_DUE:
			ok = m->live && m->ts <= now;
			break;
		case PICK_LOCKED:
			ok = m->live && m->cons >= 0;
			break;
		case PICK_ACTIVE:
			ok = m->live && m->cons >= 0 && m->ts > now;
			break;
		default:
			ok = m->live;
			break;
		}
		if (ok) {
			return i;
		}
	}
	switch (want) {
	case PICK_ACTIVE:
		return pick_id(c, tp, n, PICK_LOCKED, now);
	case PICK_LIVE:
		return start;
	default:
		return pick_id(c, tp, n, PICK_LIVE, now);
	}
}

/* Sometimes read the message now (a fresh hint), sometimes hand over the
 * read of an earlier step (maybe stale), else none. */
static void
hint_pick(mctx *c, int ti, int idx, tli_op *op)
{
	tli_msg *h = &c->hints[ti][idx];
	int r = (int) rnd(c, 100);

	if (r < 25) {
		if (c->hint_ok[ti][idx]) {
			tli_msg_fini(h);
			c->hint_ok[ti][idx] = false;
		}
		if (tli_store_get(c->s, c->topics[ti].name,
		        c->topics[ti].ids[idx].s, c->topics[ti].ids[idx].len,
		        h) == TL_OK) {
			c->hint_ok[ti][idx] = true;
		}
	}
	if (r < 60 && c->hint_ok[ti][idx]) {
		op->hint = h;
	}
}

static void
hints_clear(mctx *c)
{
	for (int t = 0; t < NTOPIC; t++) {
		for (int i = 0; i < MAXIDS; i++) {
			if (c->hint_ok[t][i]) {
				tli_msg_fini(&c->hints[t][i]);
				c->hint_ok[t][i] = false;
			}
		}
	}
}

/* A create's recurrence: none mostly; a short valid one often; now and
 * then one of the refused shapes. */
static void
gen_recur(mctx *c, tli_op *op, int64_t now)
{
	int64_t ts = op->ts_mode == TLI_TS_REL ? now + op->ts : op->ts;
	int r = (int) rnd(c, 100);

	if (r < 55) {
		return;
	}
	op->every_ms = rnd_in(c, 1, 2500);
	op->catch_up = rnd(c, 2) == 0;
	if (r < 75) {
		op->times = (uint32_t) rnd_in(c, 1, 5);
	} else if (r < 92) {
		op->until = ts + rnd_in(c, 0, 8000);
	} else {
		switch (rnd(c, 6)) {
		case 0: /* no end */
			break;
		case 1: /* two ends */
			op->times = 2;
			op->until = ts + 5000;
			break;
		case 2: /* an end without an interval */
			op->every_ms = 0;
			op->times = 3;
			break;
		case 3: /* until before the first occurrence */
			op->until = ts - 1;
			break;
		case 4: /* a negative interval */
			op->every_ms = -op->every_ms;
			op->times = 2;
			break;
		default: /* a grid past the end of time */
			op->times = 3;
			op->every_ms = TL_TS_MAX / 2 + 1;
			break;
		}
		if (op->until < 0) {
			op->until = 0;
		}
	}
}

static void
gen_op(mctx *c, gop *g, tli_op *op, int64_t now, int *pending_gen)
{
	const mtopic *tp;
	const mmsg *m = NULL;
	int r;

	memset(op, 0, sizeof(*op));
	op->type = gen_type(c);
	if (op->type == TLI_OP_LEASE && rnd(c, 100) < 30) {
		/* Ahead of now (the dispatcher's lease before the due time),
		 * sometimes too far, sometimes already past. */
		op->at = now + rnd_in(c, -5, TLI_LEASE_AHEAD_MAX + 5);
	}
	g->topic = rnd(c, 100) < 2 ? -1 : (int) rnd(c, NTOPIC);
	tp = &c->topics[g->topic < 0 ? 0 : g->topic];
	op->topic = g->topic < 0 ? UNKNOWN_TOPIC : tp->name;

	/* The id: mostly a known one (live ones preferred), sometimes empty
	 * (a generated id for a create) or too long. */
	r = (int) rnd(c, 100);
	if (r < (op->type == TLI_OP_CREATE ? 10 : c->fault_pct)) {
		g->idx = ID_EMPTY;
		if (op->type == TLI_OP_CREATE && g->topic >= 0) {
			if (tp->nids + *pending_gen >= MAXIDS) {
				g->idx = (int) rnd(c, NFIXED);
			} else {
				(*pending_gen)++;
			}
		}
	} else if (r < (op->type == TLI_OP_CREATE ? 10 + c->fault_pct
	                                          : 2 * c->fault_pct)) {
		g->idx = ID_LONG;
	} else {
		int n = g->topic < 0 ? NFIXED : tp->nids;
		int want = PICK_ANY;

		r = (int) rnd(c, 100);
		if (op->type == TLI_OP_CREATE || g->topic < 0) {
			want = PICK_ANY;
		} else if (op->type == TLI_OP_LEASE && r < 70) {
			want = PICK_DUE;
		} else if (is_holder_side(op->type) &&
		    op->type != TLI_OP_LEASE && r < 80) {
			want = r < 60 ? PICK_ACTIVE : PICK_LOCKED;
		} else if (r < 90) {
			want = PICK_LIVE;
		}
		g->idx = pick_id(c, tp, n, want, now);
	}
	if (g->idx >= 0) {
		op->id = tp->ids[g->idx].s;
		op->id_len = tp->ids[g->idx].len;
		if (g->topic >= 0 && tp->msgs[g->idx].live) {
			m = &tp->msgs[g->idx];
		}
		if (g->topic >= 0) {
			hint_pick(c, g->topic, g->idx, op);
		}
	} else if (g->idx == ID_LONG) {
		op->id = long_id;
		op->id_len = TL_MAX_ID_LEN + 1;
	} else {
		op->id = "";
		op->id_len = 0;
	}

	/* Who: mostly the one the state calls for. Unless combine_faults is
	 * set, a bad id comes with a good name, so that one input fault is
	 * the only one. */
	r = (int) rnd(c, 100);
	if (!c->combine_faults &&
	    (g->idx == ID_LONG ||
	        (g->idx == ID_EMPTY && op->type != TLI_OP_CREATE))) {
		r = 100;
	}
	if (r < c->fault_pct) {
		g->who = W_EMPTY;
	} else if (r < 2 * c->fault_pct) {
		g->who = W_LONG;
	} else if (m != NULL && is_holder_side(op->type) && m->cons >= 0 &&
	    rnd(c, 100) < 75) {
		g->who = m->cons;
	} else if (m != NULL && !is_holder_side(op->type) && rnd(c, 100) < 80) {
		g->who = m->owner;
	} else {
		g->who = (int) rnd(c, NWHO);
	}
	if (g->who >= 0) {
		op->who = is_holder_side(op->type) ? consumers[g->who]
		                                   : owners[g->who];
		op->who_len = strlen(op->who);
	} else if (g->who == W_LONG) {
		op->who = long_who;
		op->who_len = TL_MAX_NAME_LEN + 1;
	} else {
		op->who = "";
		op->who_len = 0;
	}

	if (has_ts(op->type)) {
		gen_ts(c, op, now, tp->max_lease);
	}

	/* The version: mostly the current one. */
	r = (int) rnd(c, 100);
	if (op->type == TLI_OP_CREATE) {
		op->version = 0;
	} else if (m == NULL) {
		op->version = (uint64_t) rnd(c, 4);
	} else if (r < 70) {
		op->version = m->version;
	} else if (r < 80) {
		op->version = 0;
	} else if (r < 88) {
		op->version = m->version - 1;
	} else if (r < 95) {
		op->version = m->version + 1;
	} else {
		op->version = (uint64_t) rnd_in(c, 1, 3);
	}

	if (op->type == TLI_OP_CREATE) {
		size_t len;
		r = (int) rnd(c, 100);
		if (r < 5) {
			len = tp->max_body;
		} else if (r < 8) {
			len = tp->max_body + 1;
		} else if (r < 15) {
			len = 0;
		} else {
			len = (size_t) rnd_in(c, 1, 16);
		}
		for (size_t k = 0; k < len; k++) {
			g->body[k] = (uint8_t) rng_next(c);
		}
		op->body = g->body;
		op->body_len = len;
		gen_recur(c, op, now);
	}
}

/* ---- steps and sequences ---- */

typedef struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int pending;
} waiter;

static void
waiter_done(void *arg)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	w->pending--;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* One step: n operations, as one apply or as several submissions in flight
 * at once (queued in order, so the store applies them in that order). The
 * clock does not move while they run. */
static void
run_step(mctx *c, int n, int groups)
{
	static gop g[MAXB];
	static tli_op ops[MAXB];
	int64_t now = now_of(c);
	int pending_gen = 0;
	int rv;

	for (int i = 0; i < n; i++) {
		gen_op(c, &g[i], &ops[i], now, &pending_gen);
	}
	if (groups <= 1) {
		mlog(c, "step %d: apply %d op(s)\n", c->step, n);
		rv = tli_store_apply(c->s, ops, (size_t) n);
		MCHECK(c, rv == TL_OK, "apply: %s", tl_errname(rv));
	} else {
		waiter w;
		int at = 0;

		pthread_mutex_init(&w.mu, NULL);
		pthread_cond_init(&w.cv, NULL);
		w.pending = groups;
		mlog(c, "step %d: %d op(s) in %d concurrent submissions\n",
		    c->step, n, groups);
		for (int k = 0; k < groups; k++) {
			int cnt =
			    k == groups - 1 ? n - at : (n - at) / (groups - k);
			if (cnt < 1) {
				cnt = 1;
			}
			rv = tli_store_submit(
			    c->s, &ops[at], (size_t) cnt, waiter_done, &w);
			MCHECK(c, rv == TL_OK, "submit: %s", tl_errname(rv));
			at += cnt;
		}
		pthread_mutex_lock(&w.mu);
		while (w.pending > 0) {
			pthread_cond_wait(&w.cv, &w.mu);
		}
		pthread_mutex_unlock(&w.mu);
		pthread_mutex_destroy(&w.mu);
		pthread_cond_destroy(&w.cv);
	}
	for (int i = 0; i < n; i++) {
		check_op(c, &g[i], &ops[i], now);
	}
}

/* A random clock move between steps: none, a tick, a little, past lease
 * lengths, exactly onto a message's ts (or just before it), or a few ms
 * backwards as an NTP step would. */
static void
jump_clock(mctx *c)
{
	int64_t now = now_of(c);
	int r = (int) rnd(c, 100);
	int64_t to = now;

	if (r < 28) {
		to = now;
	} else if (r < 43) {
		to = now + 1;
	} else if (r < 62) {
		to = now + rnd_in(c, 2, 200);
	} else if (r < 75) {
		to = now + rnd_in(c, 200, 4000);
	} else if (r < 85) {
		to = now + rnd_in(c, 4000, 70000);
	} else if (r < 91) {
		to = now - rnd_in(c, 1, 5);
	} else {
		mtopic *tp = &c->topics[rnd(c, NTOPIC)];
		int i = (int) rnd(c, tp->nids);
		const mmsg *m = &tp->msgs[i];
		if (m->live && m->ts >= now - 5 && m->ts <= now + 100000) {
			to = m->ts - rnd(c, 2);
		}
	}
	if (to != now) {
		tt_clock_set(&c->clk, to);
		mlog(c, "clock %+" PRId64 " -> %" PRId64 "\n", to - now, to);
	}
}

static void
reopen(mctx *c)
{
	mlog(c, "close and reopen the store\n");
	tli_store_close(c->s);
	c->s = NULL;
	if (rnd(c, 2)) {
		tt_clock_advance(&c->clk, rnd_in(c, 0, 3000));
	}
	store_open(c);
	compare_all(c, "after reopen");
}

static void
run_sequence(mctx *c, uint64_t seed, int nops, bool with_reopen)
{
	int reopen_at;
	bool reopened = false;

	c->seed = seed;
	c->rng = seed * UINT64_C(0x2545f4914f6cdd1d) + 1;
	c->opno = 0;
	c->step = 0;
	c->loglen = 0;
	if (c->log != NULL) {
		c->log[0] = '\0';
	}
	reopen_at = with_reopen ? (int) rnd_in(c, nops / 4, 3 * nops / 4) : -1;
	tt_clock_set(&c->clk,
	    INT64_C(1700000000000) + (int64_t) rnd(c, INT64_C(1) << 40));
	for (int ti = 0; ti < NTOPIC; ti++) {
		topic_reset(c, ti);
	}
	compare_all(c, "start");
	while (c->opno < nops) {
		int n, groups = 1;
		int r = (int) rnd(c, 100);

		if (c->step > 0) {
			jump_clock(c);
		}
		if (!reopened && reopen_at >= 0 && c->opno >= reopen_at) {
			reopen(c);
			reopened = true;
		}
		if (r < 45) {
			n = 1;
		} else {
			n = (int) rnd_in(c, 2, c->max_ops);
			if (c->max_groups > 1 && rnd(c, 100) < 30) {
				groups = (int) rnd_in(c, 2, c->max_groups);
				if (groups > n) {
					groups = n;
				}
			}
		}
		run_step(c, n, groups);
		c->step++;
		if (c->step % 8 == 0) {
			compare_all(c, "periodic");
		}
	}
	compare_all(c, "end");
}

/* Run seeds [first, first + count), or only TL_MODEL_SEED if set. */
static void
run_seeds(mctx *c, uint64_t first, int count, int nops, bool with_reopen)
{
	const char *only = getenv("TL_MODEL_SEED");

	if (only != NULL) {
		run_sequence(c, strtoull(only, NULL, 10), nops, with_reopen);
	} else {
		for (int k = 0; k < count; k++) {
			if (k > 0 && k % RECYCLE_EVERY == 0) {
				ctx_recycle(c);
			}
			run_sequence(
			    c, first + (uint64_t) k, nops, with_reopen);
		}
	}
}

Test(store_model, single_and_small_batched_ops_follow_the_rules,
    .fini = model_fini)
{
	mctx *c = ctx_new("model-a", 1, 6, 1);

	run_seeds(c, 1, 800, 60, false);
}

Test(store_model, large_batches_and_concurrent_submissions_follow_the_rules,
    .fini = model_fini)
{
	mctx *c = ctx_new("model-b", 1, MAXB, 4);

	run_seeds(c, 100001, 500, 80, false);
}

Test(store_model, a_wider_lease_gap_follows_the_rules, .fini = model_fini)
{
	mctx *c = ctx_new("model-c", 25, 6, 3);

	run_seeds(c, 200001, 650, 50, false);
}

Test(store_model, state_survives_a_reopen_mid_sequence, .fini = model_fini)
{
	mctx *c = ctx_new("model-d", 1, 6, 3);

	run_seeds(c, 300001, 100, 60, true);
}

/* docs/storage.md checks the input field by field: the topic, the id (empty,
 * too long), the owner or consumer (empty, too long), the body, the
 * timestamp's range; an op with several input faults gets the first. */
Test(store_model, combined_input_faults_follow_the_documented_order,
    .fini = model_fini)
{
	mctx *c = ctx_new("model-e", 1, 6, 3);

	c->fault_pct = 8;
	c->combine_faults = true;
	run_seeds(c, 400001, 200, 40, false);
}
