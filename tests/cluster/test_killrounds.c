/*
 * Twenty leader kills under load, on a cluster of three real timelined
 * processes. A producer (the SDK, given the three URLs) creates messages,
 * half with their own ids and half with generated ones, due within a few
 * seconds; two consumers lease,
 * extend and delete them; meanwhile the leader gets SIGKILL at a random
 * moment, a new one is elected and the killed node starts again, twenty
 * times. Afterwards:
 *  - every acknowledged create was delivered, and none before it was due;
 *  - no message was delivered to a second consumer while the lease of the
 *    first one on it was valid (by the leases' ends, broker time, which on
 *    one machine is the wall clock);
 *  - no message came back after its delete was acknowledged, and no
 *    create made two messages: half the creates carry no id (the broker
 *    makes one), and a create the SDK sent again after a failover
 *    (tl_put.resent) gets its first answer, whatever became of the
 *    message meanwhile (docs/cluster.md, "Requests sent again");
 *  - every node's store passes the consistency check and holds the same
 *    messages as the others.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tltest.h"

#include "cluster_util.h"
#include "sdk_util.h"

#define ROUNDS 20 /* TL_KILL_ROUNDS=N for a longer soak */
#define MAXMSG 100000
#define MAXDEL 8 /* deliveries recorded per message */
#define LEASE_MS 1500

static tc_cluster C;

static void
kr_fini(void)
{
	if (C.dir != NULL) {
		tc_fini(&C);
	}
}

TestSuite(killrounds, .fini = kr_fini, .timeout = 300);

typedef struct delivery {
	int consumer;
	char id[TL_MAX_ID_LEN + 1]; /* the message's id */
	int64_t at_us;              /* wall clock when it arrived */
	int64_t until_ms;           /* its lease's end (broker time) */
	uint64_t version;           /* the lease's, as delivered */
	int64_t due_ms;             /* the delivery's due_ts */
	int64_t pushed_until_ms;    /* the lease's end as delivered */
	int extend_rv, delete_rv;
	int64_t answered_us; /* when the extend was answered */
} delivery;

typedef struct msgrec {
	int64_t due_ms;
	char id[TL_MAX_ID_LEN + 1]; /* its own or the generated one, once
	                             * acknowledged */
	atomic_bool acked;          /* its create was acknowledged */
	atomic_bool resent;  /* ... after an unknown outcome, sent again */
	atomic_bool deleted; /* a delete of it was acknowledged */
	/* a delete of unknown outcome, and the message gone: it landed */
	atomic_bool gone;
	atomic_bool unsure; /* the last delete's outcome is unknown */
	atomic_int_fast64_t deleted_us;
	atomic_int ndel;
	delivery del[MAXDEL];
	atomic_int early;
	atomic_int after_delete;
} msgrec;

static msgrec M[MAXMSG];

/* An operation's answer that leaves its outcome unknown. */
static bool
unknown(int rv)
{
	return rv == TL_ELEADERLOST || rv == TL_ECONN || rv == TL_ETIMEDOUT;
}

/* Every delivery of message i, for a failure's message. */
static void
show(int i)
{
	msgrec *m = &M[i];

	for (int a = 0; a < atomic_load(&m->ndel) && a < MAXDEL; a++) {
		const delivery *d = &m->del[a];

		fprintf(stderr,
		    "k%05d delivery %d: consumer %d at %lld v%llu due %lld "
		    "until %lld (pushed %lld), extend %s answered at %lld, "
		    "delete %s\n",
		    i, a, d->consumer, (long long) (d->at_us / 1000),
		    (unsigned long long) d->version, (long long) d->due_ms,
		    (long long) d->until_ms, (long long) d->pushed_until_ms,
		    tl_errname(d->extend_rv),
		    (long long) (d->answered_us / 1000),
		    tl_errname(d->delete_rv));
	}
	fprintf(stderr, "k%05d (%s) deleted at %lld, create %s\n", i, m->id,
	    (long long) (atomic_load(&m->deleted_us) / 1000),
	    atomic_load(&m->resent) ? "resent" : "sent once");
}
static atomic_int nmade;
static atomic_bool stop_producing;

/* A client given the three URLs. */
static tl_client *
cluster_client(void)
{
	char all[256];

	tc_urls(&C, 3, all, sizeof(all));
	return sb_client_url(all, 15000, NULL);
}

static void *
producer_main(void *arg)
{
	tl_client *c = arg;

	while (!atomic_load(&stop_producing)) {
		int i = atomic_load(&nmade);
		char id[16];
		tl_put p;
		int rv;

		if (i >= MAXMSG) {
			break;
		}
		snprintf(id, sizeof(id), "k%05d", i);
		M[i].due_ms = tli_wall_ms() + 200 + rand() % 2000;
		memset(&p, 0, sizeof(p));
		p.id = i % 2 == 0 ? id : NULL; /* odd ones: a generated id */
		p.ts = M[i].due_ms;
		p.body = id;
		p.body_len = strlen(id);
		rv = tl_put_batch(c, "t", "kr", &p, 1);
		if (rv == TL_OK) {
			rv = p.err;
		}
		/* a create with its own id resent after a failover, whose
		 * answer the cluster did not keep: EEXISTS (not expected) */
		if (rv == TL_OK || rv == TL_EEXISTS) {
			snprintf(M[i].id, sizeof(M[i].id), "%s", p.id_out);
			atomic_store(&M[i].resent, p.resent);
			atomic_store(&M[i].acked, true);
		}
		atomic_fetch_add(&nmade, 1);
		tt_nap_ms(2);
	}
	return NULL;
}

typedef struct consumer {
	int index;
	tl_client *c;
	tl_consumer *k;
} consumer;

static void
on_message(void *arg, tl_lease *l)
{
	consumer *k = arg;
	size_t blen = 0;
	const char *body = tl_lease_body(l, &blen);
	char tag[16];
	msgrec *m;
	int i, n, rv;

	/* the body names the producer's message: k00042 */
	snprintf(tag, sizeof(tag), "%.*s", (int) (blen < 15 ? blen : 15),
	    body != NULL ? body : "");
	i = atoi(tag + 1);
	cr_assert(tag[0] == 'k' && i >= 0 && i < MAXMSG, "body %s", tag);
	m = &M[i];

	if (atomic_load(&m->deleted)) {
		atomic_fetch_add(&m->after_delete, 1);
	}
	if (tli_wall_ms() < m->due_ms) {
		atomic_fetch_add(&m->early, 1);
	}
	n = atomic_fetch_add(&m->ndel, 1);
	if (n < MAXDEL) {
		m->del[n].consumer = k->index;
		snprintf(
		    m->del[n].id, sizeof(m->del[n].id), "%s", tl_lease_id(l));
		m->del[n].at_us = tli_wall_us();
		m->del[n].until_ms = tl_lease_until(l);
		m->del[n].version = tl_lease_version(l);
		m->del[n].due_ms = tl_lease_due(l);
		m->del[n].pushed_until_ms = m->del[n].until_ms;
	}
	rv = tl_lease_extend(l, LEASE_MS);
	if (n < MAXDEL) {
		m->del[n].extend_rv = rv;
		m->del[n].answered_us = tli_wall_us();
		/* the lease now ends later; when the extend's outcome is
		 * unknown (a failover), assume it was applied as late as
		 * its answer came */
		int64_t until = rv == TL_OK ? tl_lease_until(l)
		    : !unknown(rv)          ? m->del[n].until_ms
		                            : tli_wall_ms() + LEASE_MS;

		if (until > m->del[n].until_ms) {
			m->del[n].until_ms = until;
		}
	}
	if (rv == TL_OK) {
		rv = tl_lease_delete(l);
		if (n < MAXDEL) {
			m->del[n].delete_rv = rv;
		}
	}
	if (rv == TL_OK) {
		atomic_store(&m->deleted_us, tli_wall_us());
		atomic_store(&m->deleted, true);
	} else if (rv == TL_ELEADERLOST || rv == TL_ECONN ||
	    rv == TL_ETIMEDOUT) {
		atomic_store(&m->unsure, true);
	}
	tl_lease_free(l);
}

static void
consumer_open(consumer *k, int index)
{
	tl_consumer_conf conf;
	char name[16];

	k->index = index;
	k->c = cluster_client();
	snprintf(name, sizeof(name), "kc%d", index);
	memset(&conf, 0, sizeof(conf));
	conf.topic = "t";
	conf.consumer_id = name;
	conf.lease_ms = LEASE_MS;
	conf.credit = 16;
	conf.on_message = on_message;
	conf.arg = k;
	TL_PASS(tl_consumer_open(&k->k, k->c, &conf));
}

/* Whether message i is done: its delete acknowledged, or a delete of
 * unknown outcome that landed (the message is gone; it is not delivered
 * again, so nothing else would tell). */
static bool
done_with(tl_client *c, int i)
{
	msgrec *m = &M[i];
	tl_message *msg = NULL;

	if (!atomic_load(&m->acked) || atomic_load(&m->deleted) ||
	    atomic_load(&m->gone)) {
		return true;
	}
	if (!atomic_load(&m->unsure)) {
		return false;
	}
	if (tl_get(c, "t", m->id, &msg) == TL_ENOTFOUND) {
		atomic_store(&m->gone, true);
		return true;
	}
	tl_message_free(msg);
	return false;
}

/* Every acknowledged message deleted, or the deadline. */
static bool
all_deleted(tl_client *c, int64_t deadline_ms)
{
	do {
		bool all = true;
		int n = atomic_load(&nmade);

		for (int i = 0; i < n && all; i++) {
			all = done_with(c, i);
		}
		if (all) {
			return true;
		}
		tt_nap_ms(100);
	} while (tli_mono_ms() < deadline_ms);
	return false;
}

Test(killrounds, twenty_leader_kills_lose_nothing_and_never_double_lease)
{
	pthread_t prod;
	tl_client *pc;
	consumer ks[2];
	tli_store *st[3];
	int n, rounds, missing = 0, nacked = 0, resent = 0;

	srand((unsigned) tli_wall_ms());
	tc_init(&C, 3, "killrounds");
	C.election_ms = 400;
	tc_start_all(&C);
	cr_assert(tc_leader(&C, 10000) >= 0, "no leader");
	pc = cluster_client();
	consumer_open(&ks[0], 0);
	consumer_open(&ks[1], 1);
	cr_assert_eq(pthread_create(&prod, NULL, producer_main, pc), 0);

	rounds = getenv("TL_KILL_ROUNDS") != NULL
	    ? atoi(getenv("TL_KILL_ROUNDS"))
	    : ROUNDS;
	for (int r = 0; r < rounds; r++) {
		int leader;

		tt_nap_ms(200 + rand() % 600);
		leader = tc_leader(&C, 10000);
		cr_assert(leader >= 0, "round %d: no leader", r);
		tt_proc_kill(&C.p[leader]);
		cr_assert(
		    tc_leader(&C, 10000) >= 0, "round %d: no new leader", r);
		tc_start(&C, leader);
	}
	atomic_store(&stop_producing, true);
	pthread_join(prod, NULL);
	n = atomic_load(&nmade);
	if (!all_deleted(pc, tli_mono_ms() + 30000)) {
		int shown = 0, left = 0;

		for (int i = 0; i < n; i++) {
			tl_message *m = NULL;
			int rv;

			if (done_with(pc, i)) {
				continue;
			}
			left++;
			if (shown++ >= 5) {
				continue;
			}
			rv = tl_get(pc, "t", M[i].id, &m);
			fprintf(stderr,
			    "k%05d (%s): due %lld, %d deliveries; the cluster: "
			    "%s ts %lld consumer '%s' v%llu deliveries %u\n",
			    i, M[i].id, (long long) M[i].due_ms,
			    atomic_load(&M[i].ndel), tl_errname(rv),
			    rv == TL_OK ? (long long) m->ts : 0LL,
			    rv == TL_OK ? m->consumer : "",
			    rv == TL_OK ? (unsigned long long) m->version
			                : 0ULL,
			    rv == TL_OK ? m->deliveries : 0);
			tl_message_free(m);
		}
		cr_assert_fail("%d acknowledged messages were not all "
		               "delivered and deleted (now %lld)",
		    left, (long long) tli_wall_ms());
	}
	for (int k = 0; k < 2; k++) {
		tl_consumer_close(ks[k].k);
		tl_client_close(ks[k].c);
	}
	tl_client_close(pc);

	for (int i = 0; i < n; i++) {
		msgrec *m = &M[i];
		int nd = atomic_load(&m->ndel);

		if (atomic_load(&m->acked) && nd == 0) {
			missing++;
		}
		nacked += atomic_load(&m->acked) ? 1 : 0;
		cr_assert_eq(atomic_load(&m->early), 0, "k%05d came early", i);
		resent += atomic_load(&m->resent) ? 1 : 0;
		if (atomic_load(&m->after_delete) != 0) {
			show(i);
		}
		cr_assert_eq(atomic_load(&m->after_delete), 0,
		    "k%05d came back after its delete was acknowledged", i);
		for (int a = 0; a < nd && a < MAXDEL; a++) {
			if (strcmp(m->del[a].id, m->del[0].id) != 0 ||
			    (atomic_load(&m->acked) &&
			        strcmp(m->del[a].id, m->id) != 0)) {
				show(i);
			}
			cr_assert_str_eq(m->del[a].id, m->del[0].id,
			    "k%05d was created twice", i);
			if (atomic_load(&m->acked)) {
				cr_assert_str_eq(m->del[a].id, m->id,
				    "k%05d delivered under another id", i);
			}
		}
		for (int a = 0; a < nd && a < MAXDEL; a++) {
			for (int b = a + 1; b < nd && b < MAXDEL; b++) {
				const delivery *x = &m->del[a], *y = &m->del[b];
				const delivery *first =
				    x->at_us <= y->at_us ? x : y;
				const delivery *second = first == x ? y : x;

				int64_t until = first->until_ms;

				if (first->consumer == second->consumer) {
					continue;
				}
				/* An extend of unknown outcome counted as
				 * applied when it was answered; the next
				 * lease's version tells: one more than the
				 * first's, and nothing (no extend) came in
				 * between: the lease ended where it was pushed
				 * to. */
				if (unknown(first->extend_rv) &&
				    second->version == first->version + 1) {
					until = first->pushed_until_ms;
				}
				/* 2 ms for the clocks of one machine */
				if (second->at_us / 1000 + 2 < until) {
					show(i);
				}
				cr_assert(second->at_us / 1000 + 2 >= until,
				    "k%05d: consumer %d got it at %lld while "
				    "consumer %d held it until %lld",
				    i, second->consumer,
				    (long long) (second->at_us / 1000),
				    first->consumer, (long long) until);
			}
		}
	}
	cr_assert_eq(
	    missing, 0, "%d acknowledged creates never delivered", missing);
	cr_assert(n > rounds * 20, "only %d creates in %d rounds", n, rounds);
	cr_log_info("%d acknowledged creates, every one delivered once, in %d "
	            "leader kills (%d of them sent again by the SDK)",
	    nacked, rounds, resent);

	/* the stores, once every node applied what the leader has: checked
	 * clean (tc_open_store) and alike */
	{
		int leader = tc_leader(&C, 10000);

		cr_assert(leader >= 0, "no leader at the end");
		cr_assert(tc_converged(&C, leader, 20000),
		    "the nodes did not catch up with the leader");
	}
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	for (int i = 0; i < 3; i++) {
		st[i] = tc_open_store(&C, i);
	}
	for (int i = 0; i < n; i++) {
		const char *id = M[i].id;
		int found = 0;

		if (id[0] == '\0') {
			continue; /* not acknowledged: its id is not known */
		}
		for (int s = 0; s < 3; s++) {
			tli_msg m;

			if (tli_store_get(st[s], "t", id, strlen(id), &m) ==
			    TL_OK) {
				found++;
				tli_msg_fini(&m);
			}
		}
		cr_assert(found == 0 || found == 3,
		    "%s is on %d of the 3 stores", id, found);
	}
	for (int i = 0; i < 3; i++) {
		tli_store_close(st[i]);
	}
}
