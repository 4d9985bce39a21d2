/*
 * End-to-end, a subscription's credit: the lease of an ACK or RELEASE
 * stops counting when the request arrives, not when its group commit is
 * done, so a consumer of credit 1 gets its next message in the commit
 * that holds its ACK instead of the one after; and an ACK the store
 * refuses leaves its lease counted.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(credit);

/* Every group commit of the broker takes this long (fsync_delay_ms). */
#define COMMIT_MS 300
#define COMMIT_ARG "300"

static void
create_due_now(rc_client *p, const char *const *ids, size_t n)
{
	tlp_item items[8];
	rc_results res;

	cr_assert(n <= 8);
	memset(items, 0, sizeof(items));
	for (size_t i = 0; i < n; i++) {
		items[i].id = TLP_STR(ids[i]);
		items[i].rel = true;
		items[i].ts = 0;
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, n, &res));
	for (size_t i = 0; i < res.n; i++) {
		TL_PASS(res.v[i].err);
	}
	rc_results_free(&res);
}

/* The next DELIVER's only message: its id into id, its version. */
static uint64_t
next_one(rc_client *c, char *id, size_t cap, int64_t *rx_ms, int timeout_ms)
{
	rc_deliver dv;
	uint64_t v;

	cr_assert_eq(rc_wait_deliver(c, timeout_ms, &dv), 1,
	    "no message within %d ms", timeout_ms);
	cr_assert_eq(
	    dv.d.n, 1, "credit 1, but %zu messages in one push", dv.d.n);
	snprintf(id, cap, "%.*s", (int) dv.d.v[0].id.n, dv.d.v[0].id.p);
	v = dv.d.v[0].version;
	if (rx_ms != NULL) {
		*rx_ms = dv.f->rx_ms;
	}
	rc_deliver_free(&dv);
	return v;
}

/* Producers keeping the writer busy: every commit has something in it,
 * so a request arriving during one goes into the next. */
typedef struct busy {
	rc_client *c;
	char prefix;
	_Atomic bool stop;
} busy;

static void *
busy_main(void *arg)
{
	busy *b = arg;
	tlp_result res;
	char id[32];

	for (int i = 0; !b->stop; i++) {
		snprintf(id, sizeof(id), "%c%06d", b->prefix, i);
		if (rc_one(b->c, TLP_OP_CREATE, "t", "bg", id, 0, 3600000, true,
		        NULL, &res) == TL_ECLOSED) {
			break;
		}
	}
	return NULL;
}

Test(credit, the_next_message_comes_in_the_commit_of_the_ack)
{
	const char *ids[] = {"m1", "m2", "m3"};
	busy bg[2] = {{.prefix = 'x'}, {.prefix = 'y'}};
	pthread_t th[2];
	rc_client *p, *c;
	tlp_result res;
	char id[32];
	uint64_t v;
	int64_t acked, next;

	rc_broker_init(&B, "credit");
	B.args[0] = "--fsync-delay";
	B.args[1] = COMMIT_ARG;
	rc_broker_spawn(&B, 20000);
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w", 30000, 1));
	create_due_now(p, ids, 3);
	v = next_one(c, id, sizeof(id), NULL, 10000);
	for (int i = 0; i < 2; i++) {
		bg[i].c = rc_open(B.url, "busy");
		cr_assert_eq(
		    pthread_create(&th[i], NULL, busy_main, &bg[i]), 0);
	}
	tt_nap_ms(2 * COMMIT_MS); /* the producers' commits follow each other */

	for (int round = 0; round < 2; round++) {
		/* Into a commit under way: right after a push (the answers
		 * go out after the sync) the writer may be waiting for the
		 * producers' next requests and would take the ACK alone. */
		tt_nap_ms(COMMIT_MS / 3);
		TL_PASS(rc_one(
		    c, TLP_OP_ACK, "t", "w", id, v, 0, false, NULL, &res));
		acked = tli_wall_ms();
		v = next_one(c, id, sizeof(id), &next, 10000);
		/* One commit holds the ACK and the next lease: the push comes
		 * with the ACK's answer, not a whole commit after it. */
		cr_assert_lt(next - acked, COMMIT_MS / 2,
		    "round %d: the next message came %lld ms after the ACK's "
		    "answer (a commit takes %d ms)",
		    round, (long long) (next - acked), COMMIT_MS);
	}
	TL_PASS(rc_one(c, TLP_OP_ACK, "t", "w", id, v, 0, false, NULL, &res));

	for (int i = 0; i < 2; i++) {
		bg[i].stop = true;
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		rc_close(bg[i].c);
	}
	rc_close(c);
	rc_close(p);
}

Test(credit, a_refused_ack_or_release_leaves_its_lease_counted)
{
	const char *ids[] = {"m1", "m2", "m3"};
	rc_client *p, *c;
	tlp_result res;
	rc_deliver dv;
	char id[32], held[32];
	uint64_t v, held_v;
	int64_t deadline;
	int more = 0;

	rc_broker_start(&B, "credit");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w", 30000, 1));
	create_due_now(p, ids, 3);
	held_v = next_one(c, held, sizeof(held), NULL, 10000);

	/* An ACK of another version is not this lease's: refused, and its
	 * credit never came back. */
	TL_FAIL(rc_one(c, TLP_OP_ACK, "t", "w", held, held_v + 1, 0, false,
	            NULL, &res),
	    TL_EVERSION);
	cr_assert_eq(rc_wait_deliver(c, 300, &dv), 0,
	    "a message came while the consumer (credit 1) still held one");

	/* A RELEASE of this lease to a time in the past: refused by the
	 * store after its credit came back on arrival, so one more message
	 * may have been leased meanwhile; the refusal counts the lease again,
	 * and then the consumer holds its credit and gets nothing more, even
	 * after it acks that one. */
	TL_FAIL(rc_one(c, TLP_OP_RELEASE, "t", "w", held, held_v, 1, false,
	            NULL, &res),
	    TL_ETOOCLOSE);
	deadline = tli_mono_ms() + 1500;
	while (tli_mono_ms() < deadline) {
		rc_results r;
		int rv = rc_wait_deliver(c, 100, &dv);

		cr_assert(rv >= 0);
		if (rv == 0) {
			continue;
		}
		more += (int) dv.d.n;
		cr_assert_leq(more, 1,
		    "%d messages after the refused RELEASE, with credit 1 and "
		    "the refused lease still held",
		    more);
		TL_PASS(rc_ack_all(c, "t", "w", &dv, &r));
		TL_PASS(r.v[0].err);
		rc_results_free(&r);
		rc_deliver_free(&dv);
	}

	/* The right ACK: now the rest comes. */
	TL_PASS(rc_one(
	    c, TLP_OP_ACK, "t", "w", held, held_v, 0, false, NULL, &res));
	for (int left = 2 - more; left > 0; left--) {
		v = next_one(c, id, sizeof(id), NULL, 10000);
		TL_PASS(rc_one(
		    c, TLP_OP_ACK, "t", "w", id, v, 0, false, NULL, &res));
	}
	rc_close(c);
	rc_close(p);
}
