/*
 * tli_store_get_many: one batched lookup of many messages (the dispatcher
 * reads each lease batch this way). Every kind of answer in one call:
 * inline and separate bodies, missing ids, bad ids, dead letters.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)

Test(getmany, mixed_answers_in_one_call)
{
	char *dir = tt_mkdtemp("getmany");
	tt_clock clk;
	tli_store *s;
	char big[5000];
	const char *ids[6] = {"small", "big", "missing", "", "small", "gone"};
	size_t lens[6];
	tli_msg m[6];
	int rvs[6];

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 0);
	memset(big, 'B', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	TL_PASS(tt_create(s, "t", "small", "g", T0 + 5, "hello", NULL));
	TL_PASS(tt_create(s, "t", "big", "g", T0 + 7, big, NULL));
	TL_PASS(tt_create(s, "t", "gone", "g", T0 + 9, "x", NULL));
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "t", "gone", "g", 0, 0, NULL));
	for (int i = 0; i < 6; i++) {
		lens[i] = strlen(ids[i]);
	}
	TL_PASS(tli_store_get_many(s, "t", 6, ids, lens, m, rvs));
	TL_PASS(rvs[0]);
	cr_assert_eq(m[0].body_len, 5);
	cr_assert_eq(memcmp(m[0].body, "hello", 5), 0);
	cr_assert_eq(m[0].ts, T0 + 5);
	cr_assert_eq(m[0].sched, T0 + 5);
	cr_assert_eq(m[0].version, 1);
	TL_PASS(rvs[1]);
	cr_assert_eq(m[1].body_len, strlen(big), "a body kept apart");
	cr_assert_eq(memcmp(m[1].body, big, strlen(big)), 0);
	TL_FAIL(rvs[2], TL_ENOTFOUND);
	TL_FAIL(rvs[3], TL_EBADID);
	TL_PASS(rvs[4], "the same id twice");
	cr_assert_eq(m[4].body_len, 5);
	TL_FAIL(rvs[5], TL_ENOTFOUND, "deleted");
	cr_assert_neq(m[0].gen, 0, "a generation for read hints");
	tli_msg_fini(&m[0]);
	tli_msg_fini(&m[1]);
	tli_msg_fini(&m[4]);
	TL_FAIL(
	    tli_store_get_many(s, "nope", 6, ids, lens, m, rvs), TL_ENOTOPIC);
	TL_PASS(tli_store_get_many(s, "t", 0, ids, lens, m, rvs));
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}
