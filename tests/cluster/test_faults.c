/*
 * The replicated broker under faults, three real timelined processes:
 * with two nodes of three gone a write fails with a clear error within a
 * bounded time and nothing is acknowledged, and writes work again once a
 * node is back; a leader paused past the election timeout is replaced and,
 * resumed, steps down without acknowledging the write it was sent.
 */
#include "tltest.h"
#include "cluster_util.h"

static tc_cluster C;

static void
fini(void)
{
	tc_fini(&C);
}

TestSuite(faults, .fini = fini, .timeout = 120);

Test(faults, two_of_three_down_no_ack_then_back)
{
	int leader, next;
	int64_t t0, took;
	rc_client *cl;
	int rv;

	tc_init(&C, 3, "cluster-d");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	cl = rc_open(C.url[leader], "tester");
	TL_PASS(tc_create(cl, "before", NULL, 0));
	for (int i = 0; i < 3; i++) {
		if (i != leader) {
			tt_proc_kill(&C.p[i]);
		}
	}
	/* the survivor cannot commit: a clear error, in bounded time */
	t0 = tli_mono_ms();
	rv = tc_create(cl, "alone", NULL, 0);
	took = tli_mono_ms() - t0;
	cr_assert(rv == TL_ENOTLEADER || rv == TL_ELEADERLOST,
	    "create on the survivor: %s", tl_strerror(rv));
	cr_assert(took <= 4 * C.election_ms + 1000,
	    "the create took %" PRId64 " ms to fail", took);
	/* it knows: the next one is refused at once, nothing applied */
	t0 = tli_mono_ms();
	TL_FAIL(tc_create(cl, "alone2", NULL, 0), TL_ENOTLEADER);
	cr_assert(tli_mono_ms() - t0 < 1000);
	rc_close(cl);

	/* one node back: a majority again */
	tc_start(&C, (leader + 1) % 3);
	next = tc_leader(&C, 10000);
	cr_assert(next >= 0, "no leader after the restart");
	cl = rc_open(C.url[next], "tester");
	TL_PASS(tc_create(cl, "after", NULL, 0));
	{
		tlp_msg m;
		rc_frame *f = NULL;

		TL_PASS(rc_get(cl, "t", "before", &m, &f));
		rc_frame_free(f);
		f = NULL;
		TL_FAIL(rc_get(cl, "t", "alone2", &m, &f), TL_ENOTFOUND);
		rc_frame_free(f);
	}
	rc_close(cl);
}

typedef struct late {
	rc_client *c;
	int rv;
} late;

static void *
late_main(void *arg)
{
	late *l = arg;

	l->rv = tc_create(l->c, "paused", NULL, 0);
	return NULL;
}

Test(faults, paused_leader_is_replaced_and_gives_no_false_ack)
{
	int leader, next;
	late L = {0};
	pthread_t th;
	rc_client *nc;
	tlp_msg m;
	rc_frame *f = NULL;
	int64_t t0;

	tc_init(&C, 3, "cluster-f");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	L.c = rc_open(C.url[leader], "tester");
	TL_PASS(tc_create(L.c, "before", NULL, 0));

	tc_pause(&C, leader);
	/* a create the paused leader reads only after it resumes */
	cr_assert_eq(pthread_create(&th, NULL, late_main, &L), 0);
	next = tc_leader(&C, 10000);
	cr_assert(next >= 0 && next != leader, "no new leader");
	nc = rc_open(C.url[next], "tester");
	TL_PASS(tc_create(nc, "on-new-leader", NULL, 0));

	tc_resume(&C, leader);
	pthread_join(th, NULL);
	rc_close(L.c);
	cr_assert(L.rv == TL_ENOTLEADER || L.rv == TL_ELEADERLOST,
	    "the resumed leader answered %s", tl_strerror(L.rv));
	if (L.rv == TL_ENOTLEADER) {
		TL_FAIL(rc_get(nc, "t", "paused", &m, &f), TL_ENOTFOUND);
		rc_frame_free(f);
		f = NULL;
	}
	/* it steps down and follows */
	t0 = tli_mono_ms();
	while (tc_metric(&C, leader, "timeline_cluster_serving") != 0 &&
	    tli_mono_ms() - t0 < 5000) {
		tt_nap_ms(20);
	}
	cr_assert_eq(tc_metric(&C, leader, "timeline_cluster_serving"), 0);
	cr_assert(tt_proc_log_wait(&C.p[leader], "R002 stepped down", 5000));
	cr_assert(tc_converged(&C, next, 10000));
	TL_PASS(rc_get(nc, "t", "on-new-leader", &m, &f));
	rc_frame_free(f);
	rc_close(nc);
}
