/*
 * Linearizable reads on a cluster of real timelined processes: a leader
 * paused past the election timeout is replaced and a message is created
 * on the new leader; a GET for it that reached the old leader while it
 * was paused is answered, after it resumes, either with the message or
 * with TL_ENOTLEADER, never with a stale "not found": the old leader's
 * read lease ran out while it slept, and it cannot renew it.
 */
#include <pthread.h>

#include "tltest.h"
#include "cluster_util.h"

static tc_cluster C;

static void
reads_fini(void)
{
	tc_fini(&C);
}

TestSuite(reads, .fini = reads_fini, .timeout = 90);

typedef struct stale_get {
	rc_client *c;
	int rv;
} stale_get;

static void *
get_main(void *arg)
{
	stale_get *g = arg;
	tlp_msg m;
	rc_frame *f = NULL;

	g->rv = rc_get(g->c, "t", "on-new-leader", &m, &f);
	rc_frame_free(f);
	return NULL;
}

Test(reads, a_replaced_leader_does_not_answer_a_stale_read)
{
	stale_get g = {0};
	pthread_t th;
	rc_client *nc;
	int leader, next;

	tc_init(&C, 3, "cluster-reads");
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	g.c = rc_open(C.url[leader], "reader");
	TL_PASS(tc_create(g.c, "before", NULL, 0));

	tc_pause(&C, leader);
	next = tc_leader(&C, 10000);
	cr_assert(next >= 0 && next != leader, "no new leader");
	nc = rc_open(C.url[next], "writer");
	TL_PASS(tc_create(nc, "on-new-leader", NULL, 0));
	rc_close(nc);

	/* the read waits in the paused leader's socket */
	cr_assert_eq(pthread_create(&th, NULL, get_main, &g), 0);
	tt_nap_ms(100);
	tc_resume(&C, leader);
	pthread_join(th, NULL);
	rc_close(g.c);
	cr_assert(g.rv == TL_OK || g.rv == TL_ENOTLEADER,
	    "the replaced leader answered the read with %s", tl_strerror(g.rv));
}
