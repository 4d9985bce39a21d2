/*
 * The replicated store under libraft's own in-memory cluster
 * (raft/fixture.h): three stores on real RocksDB databases, each the state
 * machine of one fixture server; a store's writer proposes its batches to
 * its server when that one leads, and the test steps the fixture's
 * simulated time and network itself. So the races that the process tests
 * (test_killrounds, test_faults) meet only by chance happen here on
 * purpose in every run (the writers are real threads: the interleaving
 * still varies a little from run to run): a leader deposed with a batch in
 * flight (committed later by its successor, or dropped), and a follower cut
 * off until only a snapshot (a RocksDB checkpoint, installed with
 * tli_store_restore) can bring it back, and a second topic created and
 * deleted through the log meanwhile. The harness does what the broker's
 * cluster does (broker/cluster/cluster.c): a new leader applies what its
 * term committed (a barrier) and reloads its store, and only then serves
 * (its writer's proposals before that are refused, TL_ENOTLEADER).
 *
 * Checked at the end, once every server has applied everything: each
 * acknowledged create present and each acknowledged delete absent on every
 * store, the stores alike message by message (version, time, holder,
 * counts), and the consistency checker clean on each. And a client that
 * sends a request again after TL_ELEADERLOST, under the same key (answers
 * kept): creates with generated ids, each applied once whether the lost
 * entry was committed by the next leader (its kept answer comes back) or
 * not (applied then), no message twice.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <raft.h>
#include <raft/fixture.h>

#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

#define NODES 3
#define NIDS 48
#define ROUNDS 160
#define MAX_STEPS 200000
#define START_MS 1700000000000LL

/* A writer's entry on its way through the fixture. */
typedef struct prop {
	struct raft_apply req;
	struct node *n;
	void *p;
	size_t len;
	bool posted;
	bool done;
	int rv;
} prop;

typedef struct node {
	unsigned i;
	char *dir;
	tli_store *s;
	struct raft_fsm fsm;
	prop *pend;  /* the writer's proposal, under mtx */
	bool reload; /* a proposal failed: reload before serving */
	unsigned installs;
} node;

static struct raft_fixture fx;
static node nodes[NODES];
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static tt_clock clk;
static char *snapdir;
static unsigned nsnap, nsnaps_taken;

/* ---- the writers' side: replicate blocks until the fixture answers ---- */

static int
replicate(void *arg, const void *e, size_t len)
{
	node *n = arg;
	prop p = {.n = n, .len = len};

	if ((p.p = raft_malloc(len)) == NULL) {
		return TL_ENOMEM;
	}
	memcpy(p.p, e, len);
	pthread_mutex_lock(&mtx);
	n->pend = &p;
	while (!p.done) {
		pthread_cond_wait(&cv, &mtx);
	}
	n->pend = NULL;
	pthread_mutex_unlock(&mtx);
	return p.rv;
}

static void
applied_cb(struct raft_apply *req, int status, void *result)
{
	prop *p = req->data;

	(void) result;
	pthread_mutex_lock(&mtx);
	p->rv = status == 0 ? TL_OK : TL_ELEADERLOST;
	p->n->reload |= status != 0;
	p->done = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mtx);
}

/* The node that serves (leader(): its take-over done) and its term: as
 * the broker's, a leader proposes nothing before it serves. */
static unsigned serving = NODES;
static raft_term serving_term;

/* Test thread: hand the writers' new proposals to their servers. */
static void
post(void)
{
	pthread_mutex_lock(&mtx);
	for (unsigned i = 0; i < NODES; i++) {
		prop *p = nodes[i].pend;
		struct raft *r = raft_fixture_get(&fx, i);

		if (p == NULL || p->posted) {
			continue;
		}
		p->posted = true;
		if (raft_state(r) == RAFT_LEADER && serving == i &&
		    serving_term == r->current_term) {
			struct raft_buffer b = {p->p, p->len};
			p->req.data = p;
			if (raft_apply(r, &p->req, &b, 1, applied_cb) == 0) {
				continue;
			}
		}
		raft_free(p->p);
		p->rv = TL_ENOTLEADER;
		p->done = true;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mtx);
}

/* Answer a node's proposal not yet handed over: TL_ENOTLEADER. */
static void
refuse(node *n)
{
	pthread_mutex_lock(&mtx);
	if (n->pend != NULL && !n->pend->posted) {
		n->pend->posted = true;
		raft_free(n->pend->p);
		n->pend->rv = TL_ENOTLEADER;
		n->pend->done = true;
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mtx);
}

/* ---- the state machine ---- */

static int
fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
	node *n = fsm->data;
	uint64_t index = raft_last_applied(raft_fixture_get(&fx, n->i)) + 1;

	int rv;
	*result = NULL;
	rv = tli_store_apply_entry(n->s, index, buf->base, buf->len);
	return rv == TL_OK ? 0 : RAFT_IOERR;
}

/* A checkpoint of the store; the snapshot names it. */
static int
fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n)
{
	node *sn = fsm->data;
	char path[512];
	uint64_t index;
	size_t len;

	snprintf(path, sizeof(path), "%s/s%u", snapdir, nsnap++);
	/* index: the store's last entry, at most libraft's last applied
	 * (barriers do not reach the state machine) */
	if (tli_store_checkpoint(sn->s, path, &index) != TL_OK ||
	    index > raft_last_applied(raft_fixture_get(&fx, sn->i))) {
		return RAFT_IOERR;
	}
	len = strlen(path) + 1;
	*bufs = raft_malloc(sizeof(**bufs));
	(*bufs)[0].base = raft_malloc(len);
	(*bufs)[0].len = len;
	memcpy((*bufs)[0].base, path, len);
	*n = 1;
	nsnaps_taken++;
	return 0;
}

/* Install a copy of the checkpoint (a node's own files, as if fetched).
 * Owns buf->base when it succeeds. */
static int
fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
	node *n = fsm->data;
	char copy[512], cmd[1200];
	int rv;

	snprintf(copy, sizeof(copy), "%s/r%u", snapdir, nsnap++);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", (char *) buf->base, copy);
	if (system(cmd) != 0) {
		return RAFT_IOERR;
	}
	/* TL_EBUSY: this node's writer is inside a proposal, which a node
	 * that installs a snapshot (no leader) refuses */
	while ((rv = tli_store_restore(n->s, copy)) == TL_EBUSY) {
		struct timespec d = {0, 1000000};
		refuse(n);
		nanosleep(&d, NULL);
	}
	if (rv != TL_OK) {
		return RAFT_IOERR;
	}
	raft_free(buf->base);
	n->installs++;
	return 0;
}

/* ---- driving ---- */

static void
step(void)
{
	post();
	raft_fixture_step(&fx);
}

static bool barrier_done;
static int barrier_status;

static void
barrier_cb(struct raft_barrier *req, int status)
{
	(void) req;
	barrier_done = true;
	barrier_status = status;
}

static void
reload(tli_store *s)
{
	int rv;

	while ((rv = tli_store_reload(s)) == TL_EBUSY) {
		struct timespec d = {0, 1000000};
		post(); /* the writer may be waiting for its proposal */
		nanosleep(&d, NULL);
	}
	TL_PASS(rv);
}

/* The leader, ready to take writes: everything its term committed is
 * applied, and its store reloaded unless it already served in this term
 * with every proposal answered (the broker's take-over); only then does it
 * serve. */
static node *
leader(void)
{

	for (int tries = 0; tries < 50; tries++) {
		struct raft_barrier req;
		struct raft *r;
		unsigned l;
		int steps = 0;

		cr_assert(raft_fixture_step_until_has_leader(&fx, 30000),
		    "no leader elected");
		l = raft_fixture_leader_index(&fx);
		r = raft_fixture_get(&fx, l);
		barrier_done = false;
		if (raft_barrier(r, &req, barrier_cb) != 0) {
			step();
			continue;
		}
		while (!barrier_done && steps++ < MAX_STEPS) {
			step();
		}
		cr_assert(barrier_done, "the barrier never completed");
		if (barrier_status != 0 || raft_state(r) != RAFT_LEADER) {
			continue;
		}
		if (serving != l || serving_term != r->current_term ||
		    nodes[l].reload) {
			reload(nodes[l].s);
			nodes[l].reload = false;
			serving = l;
			serving_term = r->current_term;
		}
		return &nodes[l];
	}
	cr_assert_fail("no leader kept its leadership");
	return NULL;
}

/* ---- the work and what the clients learn ---- */

enum { UNSEEN, PRESENT, ABSENT, UNKNOWN };
static int model[NIDS];
static char ids[NIDS][8];

typedef struct sub {
	tli_op ops[4];
	size_t n;
	bool done;
} sub;

static void
sub_done(void *arg)
{
	sub *b = arg;

	pthread_mutex_lock(&mtx);
	b->done = true;
	pthread_mutex_unlock(&mtx);
}

static void
random_op(uint64_t *rng, tli_op *op)
{
	unsigned k = tt_rng_below(rng, NIDS);
	uint32_t r = tt_rng_below(rng, 100);
	int64_t now = atomic_load(&clk.now);
	/* one in five on the topic that comes and goes */
	const char *t = tt_rng_below(rng, 5) == 0 ? "t2" : "t";

	if (r < 40) {
		*op = tt_mkop(TLI_OP_CREATE, t, ids[k], "o",
		    now + (int64_t) tt_rng_below(rng, 3000), 0);
		op->body = ids[k];
		op->body_len = strlen(ids[k]);
	} else if (r < 60) {
		*op = tt_mkop(TLI_OP_DELETE_OWNED, t, ids[k], "o", 0, 0);
	} else if (r < 75) {
		*op = tt_mkop(TLI_OP_LEASE, t, ids[k], "c", 5000, 0);
		op->ts_mode = TLI_TS_REL;
	} else if (r < 85) {
		*op = tt_mkop(TLI_OP_MOVE, t, ids[k], "o",
		    now + (int64_t) tt_rng_below(rng, 3000), 0);
	} else {
		*op = tt_mkop(TLI_OP_RELEASE, t, ids[k], "c", 0, 0);
		op->ts_mode = TLI_TS_REL;
	}
}

static unsigned n_lost, n_notleader;

static void
learn_lost(const sub *b)
{
	for (size_t j = 0; j < b->n; j++) {
		n_lost += b->ops[j].err == TL_ELEADERLOST;
		n_notleader += b->ops[j].err == TL_ENOTLEADER;
	}
}

/* What a finished operation tells about its message. */
static void
learn(const tli_op *op)
{
	int *m = &model[atoi(op->id + 1)];

	n_lost += op->err == TL_ELEADERLOST;
	n_notleader += op->err == TL_ENOTLEADER;
	if (strcmp(op->topic, "t") != 0) {
		return; /* t2's messages: compared between the stores only */
	}
	if (op->err == TL_ELEADERLOST || op->err == TL_ENOTLEADER) {
		/* refused (not the leader): nothing changed; lost: it may
		 * or may not have been applied */
		if (op->err == TL_ELEADERLOST &&
		    (op->type == TLI_OP_CREATE ||
		        op->type == TLI_OP_DELETE_OWNED)) {
			*m = UNKNOWN;
		}
		return;
	}
	if (op->type == TLI_OP_CREATE &&
	    (op->err == TL_OK || op->err == TL_EEXISTS)) {
		*m = PRESENT;
	} else if (op->type == TLI_OP_DELETE_OWNED &&
	    (op->err == TL_OK || op->err == TL_ENOTFOUND)) {
		*m = ABSENT;
	} else if (op->err == TL_ENOTFOUND) {
		*m = ABSENT;
	} else if (op->err == TL_OK) {
		*m = PRESENT;
	}
}

static bool
proposed(node *n)
{
	bool p;

	pthread_mutex_lock(&mtx);
	p = n->pend != NULL && n->pend->posted;
	pthread_mutex_unlock(&mtx);
	return p;
}

/* The faults of a round, its submissions in flight on leader l: a
 * follower cut off (fl.cut) for fl.rounds rounds, the leader deposed. */
typedef struct faults {
	int cut; /* -1: none */
	int rounds;
	unsigned deposed;
} faults;

static void
cut_set(int i, bool cut)
{
	for (unsigned j = 0; j < NODES; j++) {
		if (j != (unsigned) i) {
			if (cut) {
				raft_fixture_saturate(&fx, (unsigned) i, j);
				raft_fixture_saturate(&fx, j, (unsigned) i);
			} else {
				raft_fixture_desaturate(&fx, (unsigned) i, j);
				raft_fixture_desaturate(&fx, j, (unsigned) i);
			}
		}
	}
}

static void
faults_inject(uint64_t *rng, node *l, faults *fl)
{
	if (fl->cut < 0 && tt_rng_below(rng, 10) == 0) {
		/* a follower cut off for a while: it falls behind the
		 * leader's log, which snapshots truncate */
		fl->cut = (int) ((l->i + 1 + tt_rng_below(rng, 2)) % NODES);
		fl->rounds = 10 + (int) tt_rng_below(rng, 20);
		cut_set(fl->cut, true);
	}
	if (tt_rng_below(rng, 6) == 0) {
		/* the leader deposed with the round in flight: once its
		 * writer has proposed (or as it does), a few steps later */
		for (int k = 0; k < 1000 && !proposed(l); k++) {
			step();
		}
		for (uint32_t k = tt_rng_below(rng, 4); k > 0; k--) {
			step();
		}
		if (raft_fixture_leader_index(&fx) < NODES) {
			raft_fixture_depose(&fx);
			fl->deposed++;
		}
	}
}

/* The end of a round: a cut follower back when its time is up. */
static void
faults_heal(faults *fl, bool all)
{
	if (fl->cut >= 0 && (all || --fl->rounds <= 0)) {
		cut_set(fl->cut, false);
		fl->cut = -1;
	}
}

/* Step until every submission of v is answered. */
static void
wait_subs(sub *const *v, unsigned n)
{
	int steps = 0;
	bool all = false;

	while (!all && steps++ < MAX_STEPS) {
		step();
		pthread_mutex_lock(&mtx);
		all = true;
		for (unsigned i = 0; i < n; i++) {
			all = all && v[i]->done;
		}
		pthread_mutex_unlock(&mtx);
	}
	if (!all) {
		for (unsigned i = 0; i < NODES; i++) {
			struct raft *r = raft_fixture_get(&fx, i);
			prop *p = nodes[i].pend;
			fprintf(stderr,
			    "node %u: state %d term %llu, proposal %s%s\n", i,
			    raft_state(r), (unsigned long long) r->current_term,
			    p == NULL ? "none" : "pending",
			    p != NULL && p->posted ? " (posted)" : "");
		}
	}
	cr_assert(all, "a submission was never answered");
}

static int topic_op(const char *name, bool create, uint64_t *rng, faults *fl);
static unsigned t2_ops;

/* One round: up to three submissions at once to the leader, faults while
 * they are in flight; now and then the second topic created or deleted
 * (faults and all) instead. */
static void
round_run(uint64_t *rng, faults *fl)
{
	static sub subs[3];
	sub *v[3] = {&subs[0], &subs[1], &subs[2]};
	unsigned nsub = 1 + tt_rng_below(rng, 3);
	node *l;

	if (tt_rng_below(rng, 10) == 0) {
		tli_topic_info ti;
		/* created if absent, deleted if present (as the leader
		 * knows it) */
		bool create =
		    tli_store_topic_get(leader()->s, "t2", &ti) == TL_ENOTOPIC;
		int rv = topic_op("t2", create, rng, fl);
		cr_assert(rv == TL_OK || rv == TL_ELEADERLOST ||
		        rv == TL_ENOTLEADER || rv == TL_ETOPICEXISTS ||
		        rv == TL_ENOTOPIC,
		    "topic t2: %s", tl_errname(rv));
		t2_ops += rv == TL_OK;
		faults_heal(fl, false);
		return;
	}
	l = leader();

	for (unsigned i = 0; i < nsub; i++) {
		subs[i].n = 1 + tt_rng_below(rng, 4);
		subs[i].done = false;
		for (size_t j = 0; j < subs[i].n; j++) {
			random_op(rng, &subs[i].ops[j]);
		}
		TL_PASS(tli_store_submit(
		    l->s, subs[i].ops, subs[i].n, sub_done, &subs[i]));
	}
	faults_inject(rng, l, fl);
	wait_subs(v, nsub);
	for (unsigned i = 0; i < nsub; i++) {
		for (size_t j = 0; j < subs[i].n; j++) {
			learn(&subs[i].ops[j]);
		}
	}
	faults_heal(fl, false);
	tt_clock_advance(&clk, tt_rng_below(rng, 400));
}

/* ---- requests sent again after a lost leader (answers kept) ---- */

#define KOPS 3

/* A client's keyed request of creates with generated ids, sent again
 * with the same key until its outcome is known. */
typedef struct kreq {
	sub sb;
	tli_reqkey key;
	int64_t ts;
	char body[KOPS][24];
	char id[KOPS][TL_GEN_ID_LEN + 1];
	bool known;
	bool replayed; /* the outcome came from the kept answer */
} kreq;

static void
kreq_send(node *l, kreq *k)
{
	k->sb.done = false;
	for (size_t j = 0; j < k->sb.n; j++) {
		tli_op *op = &k->sb.ops[j];
		*op = tt_mkop(TLI_OP_CREATE, "t", "", "o", k->ts, 0);
		op->body = k->body[j];
		op->body_len = strlen(k->body[j]);
	}
	TL_PASS(tli_store_submit_keyed(
	    l->s, k->sb.ops, k->sb.n, &k->key, sub_done, &k->sb));
}

/* After an answer: known (every create done, its id noted) or to send
 * again (nothing, or not all, is known). */
static void
kreq_answer(kreq *k)
{
	bool lost = false;

	for (size_t j = 0; j < k->sb.n; j++) {
		int err = k->sb.ops[j].err;
		lost |= err == TL_ELEADERLOST || err == TL_ENOTLEADER;
		cr_assert(err == TL_OK || err == TL_ELEADERLOST ||
		        err == TL_ENOTLEADER,
		    "request %u op %zu: %s", k->key.reqid, j, tl_errname(err));
	}
	if (lost) {
		return;
	}
	for (size_t j = 0; j < k->sb.n; j++) {
		snprintf(k->id[j], sizeof(k->id[j]), "%s", k->sb.ops[j].gen_id);
		k->replayed |= k->sb.ops[j].replayed;
	}
	k->known = true;
}

#define KROUNDS 120
#define KMAX (KROUNDS * 3)
static kreq kreqs[KMAX];
static unsigned nkreq;

/* One round: up to three new requests at once, faults while they are in
 * flight, then each sent again (faults and all) until its outcome is
 * known. */
static void
kround_run(uint64_t *rng, faults *fl)
{
	unsigned first = nkreq, n = 1 + tt_rng_below(rng, 3);
	int64_t now = atomic_load(&clk.now);
	sub *v[3];
	bool open = true;

	for (unsigned i = 0; i < n; i++) {
		kreq *k = &kreqs[nkreq++];
		memset(k, 0, sizeof(*k));
		v[i] = &k->sb; /* answered once known: done stays set */
		k->key.client = 7;
		k->key.reqid = nkreq;
		k->key.digest = 0x9e3779b97f4a7c15u * nkreq + 1;
		k->ts = now + 60000;
		k->sb.n = 1 + tt_rng_below(rng, KOPS);
		for (size_t j = 0; j < k->sb.n; j++) {
			snprintf(k->body[j], sizeof(k->body[j]), "r%u-%zu",
			    nkreq, j);
		}
	}
	for (int tries = 0; open; tries++) {
		node *l = leader();

		cr_assert_lt(tries, 20, "requests still unknown");
		for (unsigned i = first; i < nkreq; i++) {
			if (!kreqs[i].known) {
				kreq_send(l, &kreqs[i]);
			}
		}
		faults_inject(rng, l, fl);
		wait_subs(v, nkreq - first);
		open = false;
		for (unsigned i = first; i < nkreq; i++) {
			if (!kreqs[i].known) {
				learn_lost(&kreqs[i].sb);
				kreq_answer(&kreqs[i]);
				open |= !kreqs[i].known;
			}
		}
		faults_heal(fl, false);
	}
	tt_clock_advance(&clk, tt_rng_below(rng, 400));
}

/* Each known request's messages once on every store, and nothing else. */
static void
kcheck(unsigned *replayed)
{
	uint64_t want = 0;

	for (unsigned i = 0; i < NODES; i++) {
		reload(nodes[i].s);
	}
	*replayed = 0;
	for (unsigned r = 0; r < nkreq; r++) {
		kreq *k = &kreqs[r];
		*replayed += k->replayed;
		for (size_t j = 0; j < k->sb.n; j++) {
			want++;
			for (unsigned i = 0; i < NODES; i++) {
				tli_msg m;
				TL_PASS(tli_store_get(nodes[i].s, "t", k->id[j],
				            strlen(k->id[j]), &m),
				    "node %u, request %u's %s", i, r, k->id[j]);
				cr_assert(m.body_len == strlen(k->body[j]) &&
				        memcmp(m.body, k->body[j],
				            m.body_len) == 0,
				    "node %u: %s holds another body", i,
				    k->id[j]);
				tli_msg_fini(&m);
			}
		}
	}
	for (unsigned i = 0; i < NODES; i++) {
		tli_topic_info ti;
		TL_PASS(tli_store_topic_get(nodes[i].s, "t", &ti));
		cr_assert_eq(ti.messages, want,
		    "node %u holds %llu messages, %llu acknowledged once", i,
		    (unsigned long long) ti.messages,
		    (unsigned long long) want);
		cr_assert_eq(
		    tt_check(nodes[i].s), 0, "node %u inconsistent", i);
	}
}

/* ---- setup ---- */

static void
cluster_start(int64_t answers_ms)
{
	struct raft_configuration conf;

	tt_clock_init(&clk, START_MS);
	snapdir = tt_mkdtemp("fixture-snaps");
	TL_PASS(raft_fixture_initialize(&fx) == 0 ? TL_OK : TL_ESTORAGE);
	for (unsigned i = 0; i < NODES; i++) {
		node *n = &nodes[i];
		tli_store_opts o;
		char tag[16];

		memset(n, 0, sizeof(*n));
		n->i = i;
		snprintf(tag, sizeof(tag), "fixture-%u", i);
		n->dir = tt_mkdtemp(tag);
		tli_store_opts_init(&o);
		o.path = n->dir;
		o.clock = tt_clock_as_tli(&clk);
		o.replicate = replicate;
		o.replicate_arg = n;
		o.answers_ms = answers_ms;
		TL_PASS(tli_store_open(&n->s, &o), "%s", n->dir);
		n->fsm.version = 1;
		n->fsm.data = n;
		n->fsm.apply = fsm_apply;
		n->fsm.snapshot = fsm_snapshot;
		n->fsm.restore = fsm_restore;
		cr_assert_eq(raft_fixture_grow(&fx, &n->fsm), 0);
		raft_set_snapshot_threshold(raft_fixture_get(&fx, i), 24);
		raft_set_snapshot_trailing(raft_fixture_get(&fx, i), 4);
	}
	raft_configuration_init(&conf);
	cr_assert_eq(raft_fixture_configuration(&fx, NODES, &conf), 0);
	cr_assert_eq(raft_fixture_bootstrap(&fx, &conf), 0);
	raft_configuration_close(&conf);
	cr_assert_eq(raft_fixture_start(&fx), 0);
	for (unsigned k = 0; k < NIDS; k++) {
		snprintf(ids[k], sizeof(ids[k]), "m%u", k);
		model[k] = UNSEEN;
	}
}

static void
cluster_stop(void)
{
	raft_fixture_close(&fx);
	for (unsigned i = 0; i < NODES; i++) {
		tli_store_close(nodes[i].s);
		tt_rmtree_free(&nodes[i].dir);
	}
	tt_rmtree_free(&snapdir);
}

/* A topic created or deleted through the log: the writer waits inside
 * replicate while this thread steps the fixture, so the call runs on a
 * thread of its own. */
typedef struct tc_arg {
	tli_store *s;
	tli_topic_conf c;
	bool create;
	int rv;
	bool done;
} tc_arg;

static void *
tc_main(void *arg)
{
	tc_arg *a = arg;
	int rv = a->create ? tli_store_topic_create(a->s, &a->c)
	                   : tli_store_topic_delete(a->s, a->c.name);

	pthread_mutex_lock(&mtx);
	a->rv = rv;
	a->done = true;
	pthread_mutex_unlock(&mtx);
	return NULL;
}

/* One attempt on the leader, with faults while it is in flight when fl is
 * given. Returns its result. */
static int
topic_op(const char *name, bool create, uint64_t *rng, faults *fl)
{
	tc_arg a = {.create = create};
	pthread_t th;
	node *l = leader();
	bool done = false;
	int steps = 0;

	a.s = l->s;
	tli_topic_conf_init(&a.c, name);
	a.c.buckets = 2;
	cr_assert_eq(pthread_create(&th, NULL, tc_main, &a), 0);
	if (fl != NULL) {
		faults_inject(rng, l, fl);
	}
	while (!done && steps++ < MAX_STEPS) {
		step();
		pthread_mutex_lock(&mtx);
		done = a.done;
		pthread_mutex_unlock(&mtx);
	}
	pthread_join(th, NULL);
	cr_assert(done, "a topic %s was never answered",
	    create ? "creation" : "deletion");
	return a.rv;
}

static void
topic_create(void)
{
	int rv = TL_ENOTLEADER;

	for (int tries = 0; rv != TL_OK && tries < 10; tries++) {
		rv = topic_op("t", true, NULL, NULL);
	}
	TL_PASS(rv);
}

/* Every store alike: each message's state, the topic's counts (as
 * stored: a follower's writer reads them back when it takes over). */
static void
compare(void)
{
	tli_topic_info t0;

	for (unsigned i = 0; i < NODES; i++) {
		reload(nodes[i].s);
	}
	TL_PASS(tli_store_topic_get(nodes[0].s, "t", &t0));
	{
		tli_topic_info a, b;
		int rva = tli_store_topic_get(nodes[0].s, "t2", &a);

		for (unsigned i = 1; i < NODES; i++) {
			int rvb = tli_store_topic_get(nodes[i].s, "t2", &b);
			cr_assert_eq(rvb, rva, "t2 on node %u: %s, node 0: %s",
			    i, tl_errname(rvb), tl_errname(rva));
			cr_assert(rva != TL_OK ||
			        (a.messages == b.messages &&
			            a.topic_id == b.topic_id),
			    "t2 differs on node %u", i);
		}
	}
	for (unsigned i = 1; i < NODES; i++) {
		tli_topic_info ti;
		TL_PASS(tli_store_topic_get(nodes[i].s, "t", &ti));
		cr_assert_eq(ti.messages, t0.messages,
		    "node %u: %llu messages, "
		    "node 0: %llu",
		    i, (unsigned long long) ti.messages,
		    (unsigned long long) t0.messages);
		cr_assert_eq(ti.locked, t0.locked, "node %u: locked", i);
	}
	for (unsigned k = 0; k < NIDS; k++) {
		tli_msg m0;
		int rv0 =
		    tli_store_get(nodes[0].s, "t", ids[k], strlen(ids[k]), &m0);

		cr_assert(rv0 == TL_OK || rv0 == TL_ENOTFOUND);
		if (model[k] == PRESENT) {
			cr_assert_eq(
			    rv0, TL_OK, "%s acknowledged, not stored", ids[k]);
		} else if (model[k] == ABSENT || model[k] == UNSEEN) {
			cr_assert_eq(rv0, TL_ENOTFOUND,
			    "%s deleted (or never created), stored", ids[k]);
		}
		for (unsigned i = 1; i < NODES; i++) {
			tli_msg m;
			int rv = tli_store_get(
			    nodes[i].s, "t", ids[k], strlen(ids[k]), &m);
			cr_assert_eq(rv, rv0, "%s: node %u %s, node 0 %s",
			    ids[k], i, tl_errname(rv), tl_errname(rv0));
			if (rv == TL_OK) {
				cr_assert_eq(m.version, m0.version,
				    "%s: version %llu on node %u, %llu on 0",
				    ids[k], (unsigned long long) m.version, i,
				    (unsigned long long) m0.version);
				cr_assert_eq(m.ts, m0.ts, "%s: ts", ids[k]);
				cr_assert_eq(m.consumer_len, m0.consumer_len);
				tli_msg_fini(&m);
			}
		}
		if (rv0 == TL_OK) {
			tli_msg_fini(&m0);
		}
	}
	for (unsigned i = 0; i < NODES; i++) {
		cr_assert_eq(
		    tt_check(nodes[i].s), 0, "node %u inconsistent", i);
	}
}

/* Every server has applied everything the leader has. */
static void
settle_all(faults *fl)
{
	struct raft *r;

	faults_heal(fl, true);
	r = raft_fixture_get(&fx, leader()->i);
	cr_assert(raft_fixture_step_until_applied(
	              &fx, NODES, raft_last_applied(r), 60000),
	    "the followers never applied index %llu",
	    (unsigned long long) raft_last_applied(r));
}

static unsigned
installs_all(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < NODES; i++) {
		n += nodes[i].installs;
	}
	return n;
}

static void
run(uint64_t rng)
{
	faults fl = {.cut = -1};
	unsigned present = 0, unknown = 0, installs;

	cluster_start(0);
	topic_create();
	for (int i = 0; i < ROUNDS; i++) {
		round_run(&rng, &fl);
	}
	settle_all(&fl);
	compare();
	installs = installs_all();
	for (unsigned k = 0; k < NIDS; k++) {
		present += model[k] == PRESENT;
		unknown += model[k] == UNKNOWN;
	}
	/* the run did what it is for */
	cr_assert_gt(fl.deposed, 5, "leaders deposed: %u", fl.deposed);
	cr_assert_gt(nsnaps_taken, 5, "snapshots taken: %u", nsnaps_taken);
	cr_assert_gt(installs, 0, "no snapshot installed");
	cr_assert_gt(present, 5);
	cr_assert_gt(n_lost, 0, "no proposal was lost with its leader");
	cr_assert_gt(t2_ops, 4, "t2 created or deleted %u times", t2_ops);
	fprintf(stderr,
	    "fixture: %d rounds, %u leaders deposed, %u snapshots, %u "
	    "installed, %u messages present, %u of unknown outcome; "
	    "operations answered TL_ELEADERLOST %u, TL_ENOTLEADER %u; t2 "
	    "created or deleted %u times\n",
	    ROUNDS, fl.deposed, nsnaps_taken, installs, present, unknown,
	    n_lost, n_notleader, t2_ops);
	cluster_stop();
}

Test(fixture, deposed_leaders_and_snapshots, .timeout = 600)
{
	run(0x5eed0fc1u);
}

Test(fixture, deposed_leaders_and_snapshots_2, .timeout = 600)
{
	run(0x2b992ddfa23249d6u);
}

Test(fixture, deposed_leaders_and_snapshots_3, .timeout = 600)
{
	run(0x9e3779b97f4a7c15u);
}

Test(fixture, requests_sent_again_apply_once, .timeout = 600)
{
	uint64_t rng = 0x7ab1e5eedu;
	faults fl = {.cut = -1};
	unsigned replayed;

	cluster_start(3600000);
	topic_create();
	for (int i = 0; i < KROUNDS; i++) {
		kround_run(&rng, &fl);
	}
	settle_all(&fl);
	kcheck(&replayed);
	cr_assert_gt(fl.deposed, 5, "leaders deposed: %u", fl.deposed);
	cr_assert_gt(n_lost, 0, "no proposal was lost with its leader");
	cr_assert_gt(replayed, 0, "no committed lost entry was sent again");
	fprintf(stderr,
	    "fixture: %u requests, %u leaders deposed, %u snapshots "
	    "installed, operations answered TL_ELEADERLOST %u, "
	    "TL_ENOTLEADER %u; %u requests known from their kept answer\n",
	    nkreq, fl.deposed, installs_all(), n_lost, n_notleader, replayed);
	cluster_stop();
}
