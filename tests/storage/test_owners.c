/*
 * Per-owner counts: how many messages a producer group has stored, the
 * figure the broker's per-group limits rely on. Exact through creates,
 * deletes by owner and by lease holder, dead letters, kicks, topic deletion,
 * a reopen, and the migration of a format-1 database that had no counts.
 */
#include <criterion/criterion.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)

static uint64_t
owned(tli_store *s, const char *topic, const char *owner)
{
	uint64_t n = UINT64_MAX;
	int rv = topic != NULL
	    ? tli_store_owner_count_topic(s, topic, owner, strlen(owner), &n)
	    : tli_store_owner_count(s, owner, strlen(owner), &n);

	TL_PASS(rv, "owner count %s", owner);
	return n;
}

static void
populate(tli_store *s)
{
	char id[16];

	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "a%d", i);
		TL_PASS(tt_create(s, "t1", id, "alice", T0 + 10, "x", NULL));
	}
	for (int i = 0; i < 3; i++) {
		snprintf(id, sizeof(id), "b%d", i);
		TL_PASS(tt_create(s, "t1", id, "bob", T0 + 10, "y", NULL));
	}
	TL_PASS(tt_create(s, "t2", "c0", "alice", T0 + 10, "z", NULL));
}

Test(owners, counts_follow_every_operation)
{
	char *dir = tt_mkdtemp("owners");
	tt_clock clk;
	tli_store *s;
	tli_topic_conf c;
	tli_op op;

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	TL_PASS(tli_topic_conf_init(&c, "t1"));
	c.max_deliveries = 1;
	TL_PASS(tli_store_topic_create(s, &c));
	tt_topic(s, "t2", 0);
	populate(s);
	cr_assert_eq(owned(s, "t1", "alice"), 5);
	cr_assert_eq(owned(s, "t1", "bob"), 3);
	cr_assert_eq(owned(s, "t2", "alice"), 1);
	cr_assert_eq(owned(s, NULL, "alice"), 6);
	cr_assert_eq(owned(s, NULL, "nobody"), 0);
	/* A refused create changes nothing. */
	TL_FAIL(
	    tt_create(s, "t1", "a0", "alice", T0 + 10, "x", NULL), TL_EEXISTS);
	cr_assert_eq(owned(s, "t1", "alice"), 5);

	/* Delete by owner; delete by the lease holder. */
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "t1", "a0", "alice", 0, 0, NULL));
	tt_clock_advance(&clk, 20);
	TL_PASS(tt_op(s, TLI_OP_LEASE, "t1", "b0", "w", T0 + 5000, 0, &op));
	TL_PASS(tt_op(
	    s, TLI_OP_DELETE_LEASED, "t1", "b0", "w", 0, op.new_version, NULL));
	cr_assert_eq(owned(s, "t1", "alice"), 4);
	cr_assert_eq(owned(s, "t1", "bob"), 2);

	/* A dead letter still occupies its owner's share; a kick keeps it. */
	TL_PASS(tt_op(s, TLI_OP_LEASE, "t1", "b1", "w", T0 + 1000, 0, &op));
	tt_clock_advance(&clk, 1000);
	TL_FAIL(tt_op(s, TLI_OP_LEASE, "t1", "b1", "w",
	            atomic_load(&clk.now) + 1000, 0, &op),
	    TL_EDEAD);
	cr_assert_eq(owned(s, "t1", "bob"), 2);
	TL_PASS(tt_op(s, TLI_OP_DLQ_KICK, "t1", "b1", "bob",
	    atomic_load(&clk.now) + 100, 0, NULL));
	cr_assert_eq(owned(s, "t1", "bob"), 2);

	/* Deleting a topic takes its counts with it; a reopen keeps them. */
	TL_PASS(tli_store_topic_delete(s, "t2"));
	cr_assert_eq(owned(s, NULL, "alice"), 4);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	s = tt_store_open(dir, &clk);
	cr_assert_eq(owned(s, NULL, "alice"), 4);
	cr_assert_eq(owned(s, "t1", "bob"), 2);
	tt_topic(s, "t2", 0);
	cr_assert_eq(owned(s, "t2", "alice"), 0, "a new topic starts empty");
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}

Test(owners, bad_names_and_unknown_topics_are_refused)
{
	char *dir = tt_mkdtemp("owners-bad");
	tt_clock clk;
	tli_store *s;
	uint64_t n = 7;
	char big[TL_MAX_NAME_LEN + 2];

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t1", 0);
	memset(big, 'x', sizeof(big));
	TL_FAIL(tli_store_owner_count(s, "", 0, &n), TL_EBADID);
	TL_FAIL(tli_store_owner_count(s, big, sizeof(big), &n), TL_EBADID);
	TL_FAIL(
	    tli_store_owner_count_topic(s, "nope", "a", 1, &n), TL_ENOTOPIC);
	cr_assert_eq(n, 7, "nothing written on failure");
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}

/* Turn the database back into format 1: no counts, format number 1. */
static void
downgrade(const char *dir)
{
	const char *names[] = {"default", "msg", "tl", "cons", "own"};
	const rocksdb_options_t *cfo[5];
	rocksdb_column_family_handle_t *cf[5];
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	char *err = NULL;
	uint8_t v[4] = {0, 0, 0, 1};
	rocksdb_t *db;

	for (int i = 0; i < 5; i++) {
		cfo[i] = o;
	}
	db = rocksdb_open_column_families(o, dir, 5, names, cfo, cf, &err);
	cr_assert_null(err, "open: %s", err);
	rocksdb_writebatch_delete_range_cf(wb, cf[0], "O", 1, "P", 1);
	rocksdb_writebatch_put_cf(wb, cf[0], "F", 1, (char *) v, 4);
	rocksdb_write(db, wo, wb, &err);
	cr_assert_null(err, "write: %s", err);
	rocksdb_writebatch_destroy(wb);
	for (int i = 0; i < 5; i++) {
		rocksdb_column_family_handle_destroy(cf[i]);
	}
	rocksdb_close(db);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_options_destroy(o);
}

Test(owners, a_format_1_database_is_migrated_at_open)
{
	char *dir = tt_mkdtemp("owners-mig");
	tt_clock clk;
	tli_store *s;

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t1", 0);
	tt_topic(s, "t2", 0);
	populate(s);
	tli_store_close(s);
	downgrade(dir);

	s = tt_store_open(dir, &clk);
	cr_assert_eq(owned(s, "t1", "alice"), 5);
	cr_assert_eq(owned(s, "t1", "bob"), 3);
	cr_assert_eq(owned(s, NULL, "alice"), 6);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}
