/*
 * The cluster behaves as one store, through failovers. One client (the
 * SDK, given the three URLs) runs a random sequence of the owner's
 * operations of the condition table (create with its own id, move and
 * delete with the expected version or any, get) on a small set of ids,
 * while another thread kills the leader (SIGKILL) every second or so and
 * starts it again. Every call and its result are recorded and checked,
 * one by one, against a model of the store's rules (docs/storage.md):
 * a definite answer must be the model's answer, and a get must show the
 * model's state. A write the SDK sent again after a failover gets its
 * first answer (docs/cluster.md, "Requests sent again"), so it is held to
 * the model like any other: a repeated create that answers TL_EEXISTS
 * for its own message, or a repeated delete that answers TL_ENOTFOUND,
 * fails the test. An answer whose outcome is unknown (TL_ELEADERLOST,
 * TL_ECONN, TL_ETIMEDOUT: the SDK gave up at its timeout) leaves the
 * model with two possible states; the next get must show one of them,
 * which becomes the model's.
 * On a failure the whole history is printed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "tltest.h"

#include "cluster_util.h"
#include "sdk_util.h"

#define NIDS 12
#define NOPS 600
#define KILLS 6

static tc_cluster C;

static void
hist_fini(void)
{
	if (C.dir != NULL) {
		tc_fini(&C);
	}
}

TestSuite(history, .fini = hist_fini, .timeout = 240);

typedef struct state {
	bool exists;
	uint64_t version;
	int64_t ts;
} state;

typedef struct model {
	state s[NIDS];
	bool uncertain[NIDS];
	state alt[NIDS]; /* the other possible state while uncertain */
} model;

static char hist[NOPS * 4][160];
static int nhist;

static void
note(const char *fmt, ...)
{
	va_list ap;

	if (nhist < (int) (sizeof(hist) / sizeof(hist[0]))) {
		va_start(ap, fmt);
		vsnprintf(hist[nhist++], sizeof(hist[0]), fmt, ap);
		va_end(ap);
	}
}

static void
dump(void)
{
	for (int i = 0; i < nhist; i++) {
		fprintf(stderr, "%4d %s\n", i, hist[i]);
	}
}

#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond)) {                        \
			dump();                       \
			cr_assert(cond, __VA_ARGS__); \
		}                                     \
	} while (0)

static bool
unknown_outcome(int rv)
{
	return rv == TL_ELEADERLOST || rv == TL_ECONN || rv == TL_ETIMEDOUT;
}

/* A SIGKILL sent a few milliseconds later, from another thread, so that
 * it lands in the middle of an operation of the main thread. */
typedef struct killer {
	pthread_t t;
	pid_t pid;
	int delay_us;
} killer;

static void *
killer_main(void *arg)
{
	killer *k = arg;

	usleep((useconds_t) k->delay_us);
	kill(k->pid, SIGKILL);
	return NULL;
}

/* GET id until the answer is definite; the state found. */
static state
get_state(tl_client *c, const char *id)
{
	for (;;) {
		tl_message *m = NULL;
		int rv = tl_get(c, "t", id, &m);
		state s = {false, 0, 0};

		if (rv == TL_OK) {
			s.exists = true;
			s.version = m->version;
			s.ts = m->ts;
			tl_message_free(m);
			return s;
		}
		if (rv == TL_ENOTFOUND) {
			return s;
		}
		CHECK(unknown_outcome(rv) || rv == TL_ENOTLEADER, "get %s: %s",
		    id, tl_strerror(rv));
		tt_nap_ms(50);
	}
}

static bool
same(const state *a, const state *b)
{
	return a->exists == b->exists &&
	    (!a->exists || (a->version == b->version && a->ts == b->ts));
}

/* A get settles an uncertain id: the state found must be one of the two. */
static void
check_get(model *md, int i, const char *id, const state *got)
{
	note("get %s -> %s v%llu ts%lld", id, got->exists ? "found" : "none",
	    (unsigned long long) got->version, (long long) got->ts);
	if (md->uncertain[i]) {
		CHECK(same(got, &md->s[i]) || same(got, &md->alt[i]),
		    "%s is in neither possible state", id);
		md->s[i] = *got;
		md->uncertain[i] = false;
		return;
	}
	CHECK(same(got, &md->s[i]),
	    "%s: the cluster has %s v%llu ts%lld, the model %s v%llu ts%lld",
	    id, got->exists ? "it" : "nothing",
	    (unsigned long long) got->version, (long long) got->ts,
	    md->s[i].exists ? "it" : "nothing",
	    (unsigned long long) md->s[i].version, (long long) md->s[i].ts);
}

Test(history, a_random_history_through_failovers_is_a_store_history)
{
	model md;
	killer k;
	int kills = 0, killed = -1, restart_at = 0, next_kill = 50;
	tl_client *c;
	char all[256];
	int ops = 0, unknown = 0;
	int64_t base = tli_wall_ms() + 3600000;

	memset(&md, 0, sizeof(md));
	srand((unsigned) tli_wall_ms());
	tc_init(&C, 3, "history");
	C.election_ms = 400;
	tc_start_all(&C);
	cr_assert(tc_leader(&C, 10000) >= 0, "no leader");
	tc_urls(&C, 3, all, sizeof(all));
	c = sb_client_url(all, 15000, NULL);
	while (ops < NOPS || kills < KILLS || killed >= 0) {
		int i = rand() % NIDS, what = rand() % 4, rv;
		char id[8];
		state *s = &md.s[i];
		int64_t ts = base + rand() % 100000;
		uint64_t v = 0, nv = 0;

		snprintf(id, sizeof(id), "h%02d", i);
		ops++;
		if (killed < 0 && kills < KILLS && ops >= next_kill) {
			/* the leader dies during one of the next operations */
			killed = tc_leader(&C, 10000);
			cr_assert(killed >= 0, "no leader to kill");
			note("-- kill node %d", killed + 1);
			k.pid = C.p[killed].pid;
			k.delay_us = rand() % 3000;
			cr_assert_eq(
			    pthread_create(&k.t, NULL, killer_main, &k), 0);
			restart_at = ops + 20 + rand() % 40;
			kills++;
		} else if (killed >= 0 && ops >= restart_at) {
			pthread_join(k.t, NULL);
			tt_proc_wait_exit(&C.p[killed], 10000);
			tc_start(&C, killed);
			note("-- restarted node %d", killed + 1);
			killed = -1;
			next_kill = ops + 30 + rand() % 60;
		}
		if (md.uncertain[i]) {
			state got = get_state(c, id);
			check_get(&md, i, id, &got);
			continue;
		}
		switch (what) {
		case 0: {
			tl_put p;

			memset(&p, 0, sizeof(p));
			p.id = id;
			p.ts = ts;
			rv = tl_put_batch(c, "t", "hist", &p, 1);
			rv = rv == TL_OK ? p.err : rv;
			note("create %s ts%lld -> %s", id, (long long) ts,
			    tl_errname(rv));
			if (unknown_outcome(rv)) {
				/* the create may have landed */
				md.uncertain[i] = true;
				md.alt[i] = *s;
				s->exists = true;
				s->version = 1;
				s->ts = ts;
				if (md.alt[i].exists) {
					md.uncertain[i] = false;
					*s = md.alt[i];
				}
				unknown++;
				break;
			}
			CHECK(rv == (s->exists ? TL_EEXISTS : TL_OK),
			    "create %s: %s", id, tl_errname(rv));
			if (rv == TL_OK) {
				s->exists = true;
				s->version = p.version;
				s->ts = ts;
				CHECK(p.version == 1,
				    "a new message has version %llu",
				    (unsigned long long) p.version);
			}
			break;
		}
		case 1:
		case 2: {
			bool any = rand() % 2 == 0;

			v = any ? 0 : s->version + (uint64_t) (rand() % 3 == 0);
			if (what == 1) {
				rv = tl_move(
				    c, "t", "hist", id, v, ts, false, &nv);
			} else {
				rv = tl_delete(c, "t", "hist", id, v);
			}
			note("%s %s v%llu -> %s", what == 1 ? "move" : "delete",
			    id, (unsigned long long) v, tl_errname(rv));
			if (unknown_outcome(rv)) {
				md.uncertain[i] = true;
				md.alt[i] = *s;
				if (s->exists && (v == 0 || v == s->version)) {
					if (what == 1) {
						s->version++;
						s->ts = ts;
					} else {
						s->exists = false;
					}
				} else {
					md.uncertain[i] = false;
				}
				unknown++;
				break;
			}
			if (!s->exists) {
				CHECK(rv == TL_ENOTFOUND,
				    "%s of a missing %s: %s",
				    what == 1 ? "move" : "delete", id,
				    tl_errname(rv));
			} else if (v != 0 && v != s->version) {
				CHECK(rv == TL_EVERSION,
				    "stale version on %s: %s", id,
				    tl_errname(rv));
			} else if (what == 1) {
				CHECK(rv == TL_OK, "move %s: %s", id,
				    tl_errname(rv));
				CHECK(nv == s->version + 1,
				    "move %s gave v%llu", id,
				    (unsigned long long) nv);
				s->version = nv;
				s->ts = ts;
			} else {
				CHECK(rv == TL_OK, "delete %s: %s", id,
				    tl_errname(rv));
				s->exists = false;
			}
			break;
		}
		default: {
			state got = get_state(c, id);
			check_get(&md, i, id, &got);
			break;
		}
		}
	}
	/* the end: every id as the model says */
	for (int i = 0; i < NIDS; i++) {
		char id[8];
		state got;

		snprintf(id, sizeof(id), "h%02d", i);
		got = get_state(c, id);
		check_get(&md, i, id, &got);
	}
	tl_client_close(c);
	fprintf(stderr, "history: %d operations, %d of unknown outcome\n", ops,
	    unknown);
}
