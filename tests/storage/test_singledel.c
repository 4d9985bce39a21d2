/*
 * Index entries are deleted with SingleDelete (store.c, stage_single_del).
 *
 * What it is for: a lease, its extend and the delete after them put and
 * delete index entries within one memtable; with SingleDelete the put and
 * its delete vanish together when the memtable is flushed, where a
 * Delete's tombstone would go to the tables and be carried down by every
 * compaction. The first test counts what reaches the timeline index's
 * tables after such cycles.
 *
 * What it must never do: leave an older put of a key behind. A key put in
 * an earlier commit, deleted and put again in one commit (a message moved
 * to the time it has, or away and back) must go to RocksDB as a delete and
 * a put, not as the put alone: two puts under one SingleDelete would let
 * the first come back once the second is deleted. The second test makes
 * that happen across a flush and compactions and checks that the message
 * is gone from every index.
 */
#include <criterion/criterion.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)
#define LEASE 30000
#define N 2000

static tt_clock clk;

static const char *cf_names[] = {"default", "msg", "tl", "cons", "own"};
enum { NCF = sizeof(cf_names) / sizeof(cf_names[0]), CF_TL = 2 };

/* Open the closed store's RocksDB directly; with compact, compact every
 * column family. The number of entries and of deletions in the timeline
 * index's tables. */
static void
raw_tl_tables(const char *path, bool compact, long *entries, long *dels)
{
	rocksdb_options_t *o = rocksdb_options_create();
	const rocksdb_options_t *cfo[NCF];
	rocksdb_column_family_handle_t *cf[NCF];
	char *err = NULL, *props, *p;
	rocksdb_t *db;

	for (int i = 0; i < NCF; i++) {
		cfo[i] = o;
	}
	db =
	    rocksdb_open_column_families(o, path, NCF, cf_names, cfo, cf, &err);
	cr_assert_null(err, "open: %s", err);
	if (compact) {
		for (int i = 0; i < NCF; i++) {
			rocksdb_compact_range_cf(db, cf[i], NULL, 0, NULL, 0);
		}
	}
	props = rocksdb_property_value_cf(
	    db, cf[CF_TL], "rocksdb.aggregated-table-properties");
	cr_assert_not_null(props);
	p = strstr(props, "# entries=");
	cr_assert_not_null(p, "%s", props);
	*entries = atol(p + strlen("# entries="));
	p = strstr(props, "# deletions=");
	cr_assert_not_null(p, "%s", props);
	*dels = atol(p + strlen("# deletions="));
	free(props);
	for (int i = 0; i < NCF; i++) {
		rocksdb_column_family_handle_destroy(cf[i]);
	}
	rocksdb_close(db);
	rocksdb_options_destroy(o);
}

static void
id_of(int i, char out[16])
{
	snprintf(out, 16, "m%05d", i);
}

Test(singledel, a_lease_cycle_leaves_nothing_in_the_index_tables)
{
	char *dir = tt_mkdtemp("singledel");
	tli_store *s;
	long entries, dels;
	char id[16];

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 1);
	for (int i = 0; i < N; i++) {
		id_of(i, id);
		TL_PASS(tt_create(s, "t", id, "g", T0, "body", NULL));
		TL_PASS(
		    tt_op(s, TLI_OP_LEASE, "t", id, "c1", T0 + LEASE, 1, NULL));
		TL_PASS(tt_op(
		    s, TLI_OP_EXTEND, "t", id, "c1", T0 + 2 * LEASE, 2, NULL));
		TL_PASS(
		    tt_op(s, TLI_OP_DELETE_LEASED, "t", id, "c1", 0, 3, NULL));
	}
	/* one message left, so that the index has a table to look at */
	TL_PASS(tt_create(s, "t", "kept", "g", T0, "body", NULL));
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s); /* flushes the memtables */
	raw_tl_tables(dir, false, &entries, &dels);
	cr_log_info("timeline index tables after %d cycles: %ld entries, "
	            "%ld deletions",
	    N, entries, dels);
	/* with Delete: three tombstones a message (the create's entry, the
	 * lease's, the extend's) */
	cr_assert_eq(entries, 1, "%ld entries in the index's tables", entries);
	cr_assert_eq(dels, 0, "%ld deletions in the index's tables", dels);
	s = tt_store_open(dir, &clk);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

/* How many messages the timeline of t holds (every bucket is 0). */
static size_t
due_count(tli_store *s)
{
	tli_entry e[8];
	size_t n = 0;
	bool more = false;

	TL_PASS(tli_store_scan_due(
	    s, "t", 0, T0 + 100 * LEASE, NULL, e, 8, &n, &more));
	return n;
}

Test(singledel, a_key_put_again_in_one_commit_does_not_come_back)
{
	char *dir = tt_mkdtemp("singledel");
	tli_store *s;
	tli_op ops[2];
	tli_counts cnt;
	long entries, dels;

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 1);
	TL_PASS(tt_create(s, "t", "same", "g", T0 + LEASE, "body", NULL));
	TL_PASS(tt_create(s, "t", "back", "g", T0 + LEASE, "body", NULL));
	tli_store_close(s); /* both entries in a table now (the first puts) */

	s = tt_store_open(dir, &clk);
	/* to the time it has: its entry deleted and put under one key */
	TL_PASS(tt_op(s, TLI_OP_MOVE, "t", "same", "g", T0 + LEASE, 0, NULL));
	/* away and back in one commit */
	ops[0] = tt_mkop(TLI_OP_MOVE, "t", "back", "g", T0 + 2 * LEASE, 0);
	ops[1] = tt_mkop(TLI_OP_MOVE, "t", "back", "g", T0 + LEASE, 0);
	TL_PASS(tli_store_apply(s, ops, 2));
	TL_PASS(ops[0].err);
	TL_PASS(ops[1].err);
	cr_assert_eq(due_count(s), 2);
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "t", "same", "g", 0, 0, NULL));
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "t", "back", "g", 0, 0, NULL));
	cr_assert_eq(due_count(s), 0);
	/* the flush drops each second put with the delete after it: what
	 * stands for the first put must be in the table it writes */
	tli_store_close(s);
	s = tt_store_open(dir, &clk);
	cr_assert_eq(due_count(s), 0, "a deleted message's entry came back");
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);

	/* and once the tables are compacted */
	raw_tl_tables(dir, true, &entries, &dels);
	cr_log_info(
	    "after the compaction: %ld entries, %ld deletions", entries, dels);
	s = tt_store_open(dir, &clk);
	cr_assert_eq(due_count(s), 0, "a deleted message's entry came back");
	TL_PASS(tli_store_count(s, "t", 0, INT64_MAX, &cnt));
	cr_assert_eq(cnt.waiting + cnt.available + cnt.processing, 0);
	cr_assert_eq(tt_check(s), 0);
	cr_assert_eq(entries, 0, "%ld entries left in the index", entries);
	tli_store_close(s);
	tt_rmtree_free(&dir);
}
