/*
 * What a group commit writes to RocksDB.
 *
 * Each key goes into a commit's WriteBatch once, as the last operation of
 * the commit left it: a message leased, extended and deleted in one commit
 * touches its timeline entry three times. An extend leaves the consumer
 * entry as the lease wrote it; the consumer scan reads the lease as it is
 * from the record. The merged batch must leave the
 * store exactly as the operations one by one would, across a reopen (what
 * RocksDB holds, not a cache), with every index consistent (tli_store_check).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)
#define LEASE 30000
#define CONS "c1"

static tt_clock clk;

static tli_store *
open_at(const char *dir)
{
	tt_clock_init(&clk, T0);
	return tt_store_open(dir, &clk);
}

static void
keys(tli_store *s, uint64_t *written, uint64_t *merged)
{
	tli_store_stats st;

	tli_store_get_stats(s, &st);
	*written = st.keys_written;
	*merged = st.keys_merged;
}

static size_t
leases_of(tli_store *s, const char *cons, tli_entry *out, size_t max)
{
	size_t n = 0;
	bool more = false;

	TL_PASS(tli_store_scan_consumer(
	    s, "t", cons, strlen(cons), NULL, out, max, &n, &more));
	return n;
}

Test(writes, an_extend_writes_the_record_and_the_timeline_entry_only)
{
	char *dir = tt_mkdtemp("writes");
	tli_store *s = open_at(dir);
	uint64_t w0, m0, w1, m1;
	tli_entry e[4];
	tli_msg m;

	tt_topic(s, "t", 1);
	TL_PASS(tt_create(s, "t", "m1", "g", T0, "body", NULL));
	TL_PASS(tt_op(s, TLI_OP_LEASE, "t", "m1", CONS, T0 + LEASE, 1, NULL));
	keys(s, &w0, &m0);
	TL_PASS(
	    tt_op(s, TLI_OP_EXTEND, "t", "m1", CONS, T0 + 2 * LEASE, 2, NULL));
	keys(s, &w1, &m1);
	/* the record, the timeline entry out and in; not the consumer
	 * entry */
	cr_assert_eq(w1 - w0, 3, "an extend wrote %" PRIu64 " keys", w1 - w0);
	cr_assert_eq(m1 - m0, 0, "an extend merged %" PRIu64 " keys", m1 - m0);

	tli_store_close(s);
	s = open_at(dir);
	cr_assert_eq(tt_check(s), 0, "the indexes agree after a reopen");
	TL_PASS(tli_store_get(s, "t", "m1", 2, &m));
	cr_assert_eq(m.ts, T0 + 2 * LEASE);
	cr_assert_eq(m.version, 3);
	cr_assert_str_eq(m.consumer, CONS);
	tli_msg_fini(&m);
	cr_assert_eq(
	    leases_of(s, CONS, e, 4), 1, "the consumer entry is there once");
	cr_assert_eq(e[0].ts, T0 + 2 * LEASE, "and lists the new lease end");
	cr_assert_eq(e[0].version, 3);
	/* a second extend, after the reopen: the scan follows the record */
	TL_PASS(
	    tt_op(s, TLI_OP_EXTEND, "t", "m1", CONS, T0 + 3 * LEASE, 3, NULL));
	cr_assert_eq(leases_of(s, CONS, e, 4), 1);
	cr_assert_eq(e[0].ts, T0 + 3 * LEASE);
	cr_assert_eq(e[0].version, 4);
	cr_assert_eq(tt_check(s), 0, "the checker takes the entry as it is");
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

Test(writes, a_message_leased_extended_and_deleted_in_one_commit_is_gone)
{
	char *dir = tt_mkdtemp("writes");
	tli_store *s = open_at(dir);
	tli_op ops[3];
	tli_topic_info ti;
	tli_entry e[4];
	tli_msg m;
	uint64_t w0, m0, w1, m1;

	tt_topic(s, "t", 1);
	TL_PASS(tt_create(s, "t", "m1", "g", T0, "body", NULL));
	TL_PASS(tt_create(s, "t", "m2", "g", T0, "body", NULL));
	ops[0] = tt_mkop(TLI_OP_LEASE, "t", "m1", CONS, T0 + LEASE, 1);
	ops[1] = tt_mkop(TLI_OP_EXTEND, "t", "m1", CONS, T0 + 2 * LEASE, 2);
	ops[2] = tt_mkop(TLI_OP_DELETE_LEASED, "t", "m1", CONS, 0, 3);
	keys(s, &w0, &m0);
	TL_PASS(tli_store_apply(s, ops, 3));
	for (int i = 0; i < 3; i++) {
		TL_PASS(ops[i].err, "op %d of the commit", i);
	}
	keys(s, &w1, &m1);
	cr_assert_gt(m1 - m0, 0, "the commit merged keys");
	cr_assert_lt(w1 - w0, 13 - (m1 - m0) + 1);

	tli_store_close(s);
	s = open_at(dir);
	cr_assert_eq(tt_check(s), 0, "the indexes agree after a reopen");
	cr_assert_eq(tli_store_get(s, "t", "m1", 2, &m), TL_ENOTFOUND,
	    "the message leased and deleted in one commit is gone");
	cr_assert_eq(leases_of(s, CONS, e, 4), 0, "and holds no lease");
	TL_PASS(tli_store_get(s, "t", "m2", 2, &m), "the other stays");
	cr_assert_eq(m.version, 1);
	tli_msg_fini(&m);
	TL_PASS(tli_store_topic_get(s, "t", &ti));
	cr_assert_eq(ti.messages, 1, "messages %" PRIu64, ti.messages);
	cr_assert_eq(ti.locked, 0, "locked %" PRIu64, ti.locked);
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

Test(writes, a_message_created_and_moved_in_one_commit_is_where_it_moved)
{
	char *dir = tt_mkdtemp("writes");
	tli_store *s = open_at(dir);
	tli_op ops[3];
	tli_entry e[4];
	size_t n = 0;
	bool more = false;
	tli_msg m;

	tt_topic(s, "t", 1);
	ops[0] = tt_mkop(TLI_OP_CREATE, "t", "m1", "g", T0 + 1000, 0);
	ops[0].body = "b";
	ops[0].body_len = 1;
	ops[1] = tt_mkop(TLI_OP_MOVE, "t", "m1", "g", T0 + 5000, 1);
	ops[2] = tt_mkop(TLI_OP_MOVE, "t", "m1", "g", T0 + 3000, 2);
	TL_PASS(tli_store_apply(s, ops, 3));
	for (int i = 0; i < 3; i++) {
		TL_PASS(ops[i].err, "op %d of the commit", i);
	}
	tli_store_close(s);
	s = open_at(dir);
	cr_assert_eq(tt_check(s), 0, "the indexes agree after a reopen");
	TL_PASS(tli_store_get(s, "t", "m1", 2, &m));
	cr_assert_eq(m.ts, T0 + 3000);
	cr_assert_eq(m.version, 3);
	tli_msg_fini(&m);
	/* one owner entry, at the last place */
	TL_PASS(tli_store_scan_owner(s, "t", "g", 1, NULL, e, 4, &n, &more));
	cr_assert_eq(n, 1, "owner entries: %zu", n);
	cr_assert_eq(e[0].ts, T0 + 3000);
	/* and due there, not before */
	tt_clock_set(&clk, T0 + 2999);
	TL_PASS(
	    tli_store_scan_due(s, "t", 0, T0 + 2999, NULL, e, 4, &n, &more));
	cr_assert_eq(n, 0, "due entries before its time: %zu", n);
	TL_PASS(
	    tli_store_scan_due(s, "t", 0, T0 + 3000, NULL, e, 4, &n, &more));
	cr_assert_eq(n, 1, "due entries at its time: %zu", n);
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

/* A commit of many operations over two topics: the staged keys are sorted
 * in runs and merged, and every key touched twice in the commit (a create
 * then a move of the same message, half the batch apart) goes in once, as
 * the move left it. */
Test(writes, a_large_commit_writes_each_key_once_as_its_last_operation_left_it)
{
	enum { N = 120 };
	char *dir = tt_mkdtemp("writes");
	tli_store *s = open_at(dir);
	static tli_op ops[2 * N];
	static char ids[N][16];
	const char *topic[2] = {"t", "u"};
	tli_entry e[N + 1];
	size_t n = 0;
	bool more = false;
	uint64_t w0, m0, w1, m1;
	tli_msg m;

	tt_topic(s, "t", 1);
	tt_topic(s, "u", 1);
	for (int i = 0; i < N; i++) {
		/* ids and due times out of order, so the sort has work */
		snprintf(ids[i], sizeof(ids[i]), "m%03d", (i * 37) % N);
		ops[i] = tt_mkop(TLI_OP_CREATE, topic[i % 2], ids[i], "g",
		    T0 + 1000 + (i * 53) % 997, 0);
		ops[i].body = "b";
		ops[i].body_len = 1;
		ops[N + i] = tt_mkop(TLI_OP_MOVE, topic[i % 2], ids[i], "g",
		    T0 + 5000 + (i * 61) % 1009, 1);
	}
	keys(s, &w0, &m0);
	TL_PASS(tli_store_apply(s, ops, 2 * N));
	for (int i = 0; i < 2 * N; i++) {
		TL_PASS(ops[i].err, "op %d of the commit", i);
	}
	keys(s, &w1, &m1);
	/* per message: the record put twice, the timeline and the owner
	 * entries of the create put and then deleted by the move */
	cr_assert_geq(m1 - m0, 3 * N, "merged %" PRIu64 " keys, expected %d",
	    m1 - m0, 3 * N);

	tli_store_close(s);
	s = open_at(dir);
	cr_assert_eq(tt_check(s), 0, "the indexes agree after a reopen");
	for (int i = 0; i < N; i++) {
		TL_PASS(
		    tli_store_get(s, topic[i % 2], ids[i], strlen(ids[i]), &m));
		cr_assert_eq(m.ts, T0 + 5000 + (i * 61) % 1009, "%s", ids[i]);
		cr_assert_eq(m.version, 2);
		tli_msg_fini(&m);
	}
	for (int k = 0; k < 2; k++) {
		TL_PASS(tli_store_scan_due(
		    s, topic[k], 0, T0 + 4999, NULL, e, N + 1, &n, &more));
		cr_assert_eq(
		    n, 0, "%s: due where it was created: %zu", topic[k], n);
		TL_PASS(tli_store_scan_owner(
		    s, topic[k], "g", 1, NULL, e, N + 1, &n, &more));
		cr_assert_eq(n, N / 2, "%s: owner entries %zu", topic[k], n);
		for (size_t j = 1; j < n; j++) {
			cr_assert_leq(e[j - 1].ts, e[j].ts, "in due order");
		}
	}
	tli_store_close(s);
	tt_rmtree_free(&dir);
}
