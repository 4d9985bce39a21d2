/*
 * Dead letters: a message leased more than its topic's max_deliveries times
 * leaves the timeline for the dead-letter list, where it can be listed,
 * deleted by its owner, or kicked back onto the timeline.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)

static tli_store *
setup(char **dir, tt_clock *clk, uint32_t max_deliveries)
{
	tli_topic_conf c;
	tli_store *s;

	*dir = tt_mkdtemp("dead");
	tt_clock_init(clk, T0);
	s = tt_store_open(*dir, clk);
	TL_PASS(tli_topic_conf_init(&c, "jobs"));
	c.max_deliveries = max_deliveries;
	TL_PASS(tli_store_topic_create(s, &c));
	return s;
}

/* Lease the message `n` times, letting each 1 s lease run out. Returns the
 * error of the last lease. */
static int
lease_n(tli_store *s, tt_clock *clk, const char *id, int n, tli_op *last)
{
	int rv = TL_OK;

	for (int i = 0; i < n && rv == TL_OK; i++) {
		tli_msg m;

		TL_PASS(tli_store_get(s, "jobs", id, strlen(id), &m));
		tli_msg_fini(&m);
		rv = tt_op(s, TLI_OP_LEASE, "jobs", id, "w",
		    atomic_load(&clk->now) + 1000, m.version, last);
		tt_clock_advance(clk, 1001);
	}
	return rv;
}

Test(dead, lease_past_max_deliveries_dead_letters_the_message)
{
	tt_clock clk;
	char *dir;
	tli_store *s = setup(&dir, &clk, 3);
	tli_topic_info ti;
	tli_entry e[4];
	size_t n;
	bool more;
	tli_op last;
	tli_msg m;
	tli_counts c;

	TL_PASS(tt_create(s, "jobs", "poison", "g", T0, "x", NULL));
	/* Three deliveries are allowed; each lease needs the clock at the
	 * message's ts, so move time forward between them. */
	for (int i = 0; i < 3; i++) {
		TL_PASS(tli_store_get(s, "jobs", "poison", 6, &m));
		tli_msg_fini(&m);
		TL_PASS(tt_op(s, TLI_OP_LEASE, "jobs", "poison", "w",
		            atomic_load(&clk.now) + 1000, m.version, &last),
		    "lease %d", i + 1);
		cr_assert_eq(last.deliveries, (uint32_t) i + 1);
		tt_clock_advance(&clk, 1001);
	}
	TL_PASS(tli_store_get(s, "jobs", "poison", 6, &m));
	tli_msg_fini(&m);
	TL_FAIL(tt_op(s, TLI_OP_LEASE, "jobs", "poison", "w",
	            atomic_load(&clk.now) + 1000, m.version, &last),
	    TL_EDEAD, "%s", tl_errname(last.err));

	/* Off the timeline: not due, not counted, not leasable. */
	TL_PASS(tli_store_scan_due(
	    s, "jobs", last.bucket, TL_TS_MAX, NULL, e, 4, &n, &more));
	cr_assert_eq(n, 0);
	TL_PASS(tli_store_topic_get(s, "jobs", &ti));
	cr_assert_eq(ti.messages, 0);
	cr_assert_eq(ti.dead, 1);
	cr_assert_eq(ti.locked, 0);
	TL_PASS(tli_store_totals(s, "jobs", &c));
	cr_assert_eq(c.available + c.waiting + c.processing, 0);
	TL_FAIL(tt_op(s, TLI_OP_LEASE, "jobs", "poison", "w",
	            atomic_load(&clk.now) + 1000, 0, NULL),
	    TL_ENOTFOUND);
	TL_FAIL(tt_op(s, TLI_OP_MOVE, "jobs", "poison", "g",
	            atomic_load(&clk.now), 0, NULL),
	    TL_ENOTFOUND);
	/* Still known: a create with the same id is refused, get shows it. */
	TL_FAIL(tt_create(s, "jobs", "poison", "g", T0, "y", NULL), TL_EEXISTS);
	TL_PASS(tli_store_get(s, "jobs", "poison", 6, &m));
	cr_assert(m.dead);
	cr_assert_eq(m.body_len, 1);
	tli_msg_fini(&m);

	/* Listed in the dead-letter list. */
	TL_PASS(tli_store_scan_dead(s, "jobs", NULL, e, 4, &n, &more));
	cr_assert_eq(n, 1);
	cr_assert_str_eq(e[0].id, "poison");
	cr_assert_eq(tt_check(s), 0);

	/* Kicked back: on the timeline again with deliveries reset. */
	TL_PASS(tt_op(s, TLI_OP_DLQ_KICK, "jobs", "poison", "ops",
	    atomic_load(&clk.now) + 50, 0, &last));
	TL_PASS(tli_store_get(s, "jobs", "poison", 6, &m));
	cr_assert(!m.dead);
	cr_assert_eq(m.deliveries, 0);
	cr_assert_eq(m.ts, atomic_load(&clk.now) + 50);
	tli_msg_fini(&m);
	TL_PASS(tli_store_scan_dead(s, "jobs", NULL, e, 4, &n, &more));
	cr_assert_eq(n, 0);
	TL_PASS(tli_store_topic_get(s, "jobs", &ti));
	cr_assert_eq(ti.messages, 1);
	cr_assert_eq(ti.dead, 0);
	cr_assert_eq(tt_check(s), 0);

	/* A second kick of a live message: not a dead letter. */
	TL_FAIL(tt_op(s, TLI_OP_DLQ_KICK, "jobs", "poison", "ops",
	            atomic_load(&clk.now) + 50, 0, NULL),
	    TL_ENOTFOUND);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}

Test(dead, owner_deletes_a_dead_letter_and_counters_survive_reopen)
{
	tt_clock clk;
	char *dir;
	tli_store *s = setup(&dir, &clk, 1);
	tli_topic_info ti;
	tli_op last;

	TL_PASS(tt_create(s, "jobs", "a", "g", T0, "x", NULL));
	TL_PASS(tt_create(s, "jobs", "b", "g", T0, "x", NULL));
	TL_FAIL(lease_n(s, &clk, "a", 2, &last), TL_EDEAD);
	TL_FAIL(lease_n(s, &clk, "b", 2, &last), TL_EDEAD);
	tli_store_close(s);
	s = tt_store_open(dir, &clk);
	TL_PASS(tli_store_topic_get(s, "jobs", &ti));
	cr_assert_eq(ti.dead, 2);
	TL_FAIL(tt_op(s, TLI_OP_DELETE_OWNED, "jobs", "a", "other", 0, 0, NULL),
	    TL_ENOTOWNER);
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "jobs", "a", "g", 0, 0, NULL));
	TL_PASS(tli_store_topic_get(s, "jobs", &ti));
	cr_assert_eq(ti.dead, 1);
	cr_assert_eq(ti.messages, 0);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}

Test(dead, max_deliveries_zero_never_dead_letters)
{
	tt_clock clk;
	char *dir;
	tli_store *s = setup(&dir, &clk, 0);
	tli_op last;

	TL_PASS(tt_create(s, "jobs", "a", "g", T0, "x", NULL));
	TL_PASS(lease_n(s, &clk, "a", 40, &last));
	cr_assert_eq(last.deliveries, 40);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}
