/*
 * The writer's record cache: the committed state of recently touched
 * messages, kept encoded in a ring of a few MiB. Whatever the writer finds
 * there must be what RocksDB holds, including once the ring has gone round
 * several times and a message's copy has been written over (then it reads
 * RocksDB). Every operation below checks a version or the message's
 * presence, so a stale copy would show as a wrong answer. (What a node
 * forgets when its store changed under the writer is in test_replica.)
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)
#define LEASE 30000
#define N 30000 /* ~360 bytes a record: about 11 MB through the ring */
#define BATCH 512

static tt_clock clk;

/* A long owner and a 240-byte body, so that each cached record is large */
static const char OWNER[] =
    "an-owner-with-a-long-name-so-that-every-record-takes-room-000";
static char body[241];

static void
id_of(size_t i, char out[16])
{
	snprintf(out, 16, "m%06zu", i);
}

/* Apply one type of operation to messages [0, N) in batches (from the
 * last one created, backwards), the version each must carry being ver;
 * every answer must be want. */
static void
all_in(tli_store *s, tli_op_type type, const char *who, int64_t ts,
    uint64_t ver, int want, bool backwards)
{
	static char ids[BATCH][16];
	tli_op ops[BATCH];

	for (size_t b = 0; b < N; b += BATCH) {
		size_t n = N - b < BATCH ? N - b : BATCH;
		for (size_t i = 0; i < n; i++) {
			id_of(backwards ? N - 1 - (b + i) : b + i, ids[i]);
			ops[i] = tt_mkop(type, "t", ids[i], who, ts, ver);
			if (type == TLI_OP_CREATE) {
				ops[i].body = body;
				ops[i].body_len = sizeof(body) - 1;
			}
		}
		TL_PASS(tli_store_apply(s, ops, n));
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(ops[i].err, want,
			    "op %d on %s: %s, expected %s", (int) type, ids[i],
			    tl_strerror(ops[i].err), tl_strerror(want));
		}
	}
}

static void
all(tli_store *s, tli_op_type type, const char *who, int64_t ts, uint64_t ver,
    int want)
{
	all_in(s, type, who, ts, ver, want, false);
}

static void
lookups(tli_store *s, uint64_t *cached, uint64_t *read)
{
	tli_store_stats st;

	tli_store_get_stats(s, &st);
	*cached = st.records_cached;
	*read = st.records_read;
}

Test(cache, answers_what_the_store_holds_after_the_ring_went_round)
{
	char *dir = tt_mkdtemp("cache");
	tli_store *s;
	uint64_t c0, r0, c1, r1;
	tli_counts cnt;

	memset(body, 'b', sizeof(body) - 1);
	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 4);

	all(s, TLI_OP_CREATE, OWNER, T0, 0, TL_OK);
	lookups(s, &c0, &r0);
	/* Leased from the newest: the first ones are still in the ring, the
	 * oldest copies were written over (RocksDB is read). */
	all_in(s, TLI_OP_LEASE, "c1", T0 + LEASE, 1, TL_OK, true);
	lookups(s, &c1, &r1);
	cr_assert_gt(r1 - r0, N / 2, "read from RocksDB: %" PRIu64, r1 - r0);
	cr_assert_gt(c1 - c0, 1000, "found in the cache: %" PRIu64, c1 - c0);
	cr_assert_eq((c1 - c0) + (r1 - r0), N);

	/* a wrong version is refused, whichever way the record came */
	all(s, TLI_OP_EXTEND, "c1", T0 + 2 * LEASE, 1, TL_EVERSION);
	all(s, TLI_OP_EXTEND, "c1", T0 + 2 * LEASE, 2, TL_OK);
	all(s, TLI_OP_DELETE_LEASED, "c1", 0, 3, TL_OK);
	/* gone, and known gone: deleted again, not found; created again, new */
	all(s, TLI_OP_DELETE_LEASED, "c1", 0, 3, TL_ENOTFOUND);
	all(s, TLI_OP_CREATE, OWNER, T0 + 5000, 0, TL_OK);
	all(s, TLI_OP_CREATE, OWNER, T0 + 5000, 0, TL_EEXISTS);

	TL_PASS(tli_store_count(s, "t", 0, INT64_MAX, &cnt));
	cr_assert_eq(cnt.waiting, N, "waiting: %" PRIu64, cnt.waiting);
	cr_assert_eq(cnt.available + cnt.processing, 0);
	cr_assert_eq(tt_check(s), 0, "the indexes agree");
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

Test(cache, a_generated_id_is_not_looked_up)
{
	char *dir = tt_mkdtemp("cache");
	tli_store *s;
	uint64_t c0, r0, c1, r1;
	tli_op ops[64];
	tli_counts cnt;
	tli_msg m;

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 1);
	lookups(s, &c0, &r0);
	for (size_t i = 0; i < 64; i++) {
		ops[i] = tt_mkop(TLI_OP_CREATE, "t", NULL, "g", T0 + 1000, 0);
	}
	TL_PASS(tli_store_apply(s, ops, 64));
	lookups(s, &c1, &r1);
	cr_assert_eq(r1 - r0, 0, "records read: %" PRIu64, r1 - r0);
	cr_assert_eq(c1 - c0, 0, "records looked up: %" PRIu64, c1 - c0);
	for (size_t i = 0; i < 64; i++) {
		TL_PASS(ops[i].err);
		TL_PASS(
		    tli_store_get(s, "t", ops[i].gen_id, TL_GEN_ID_LEN, &m));
		cr_assert_eq(m.version, 1);
		tli_msg_fini(&m);
	}
	TL_PASS(tli_store_count(s, "t", 0, INT64_MAX, &cnt));
	cr_assert_eq(cnt.waiting, 64);
	/* a producer's own id is looked up: a second create is refused */
	TL_PASS(tt_create(s, "t", "mine", "g", T0 + 1000, "x", NULL));
	cr_assert_eq(
	    tt_create(s, "t", "mine", "g", T0 + 1000, "x", NULL), TL_EEXISTS);
	lookups(s, &c0, &r0);
	cr_assert_eq((c0 - c1) + (r0 - r1), 2);
	tli_store_close(s);
	tt_rmtree_free(&dir);
}

/* Ids that differ in their last digits (a producer's counter) find their
 * copies: leased, then extended and deleted while the ring still holds
 * them. The cache's slots are taken from the low bits of the ids' hash:
 * taken at random, about one lookup in 15 here meets another id's copy
 * (2 048 ids in 16 384 slots; 411 of the 6 144); with FNV-1a's own low
 * bits such ids met in the same slots far more often (990 here; in the
 * lease cycle a third of the extends and deletes read RocksDB). */
Test(cache, ids_a_few_digits_apart_stay_in_their_slots)
{
	char *dir = tt_mkdtemp("cache");
	static char ids[2048][16];
	static tli_op ops[2048];
	tli_store *s;
	uint64_t c0, r0, c1, r1;

	tt_clock_init(&clk, T0);
	s = tt_store_open(dir, &clk);
	tt_topic(s, "t", 4);
	for (size_t i = 0; i < 2048; i++) {
		snprintf(ids[i], sizeof(ids[i]), "msg-%08zu", 1000000 + i);
		TL_PASS(tt_create(s, "t", ids[i], "p", T0, "x", NULL));
	}
	lookups(s, &c0, &r0);
	for (int step = 0; step < 3; step++) {
		tli_op_type type = step == 0 ? TLI_OP_LEASE
		    : step == 1              ? TLI_OP_EXTEND
		                             : TLI_OP_DELETE_LEASED;
		for (size_t i = 0; i < 2048; i++) {
			ops[i] = tt_mkop(type, "t", ids[i], "c1",
			    T0 + LEASE * (step + 1), (uint64_t) step + 1);
		}
		TL_PASS(tli_store_apply(s, ops, 2048));
		for (size_t i = 0; i < 2048; i++) {
			TL_PASS(ops[i].err, "step %d on %s", step, ids[i]);
		}
	}
	lookups(s, &c1, &r1);
	cr_assert_lt(r1 - r0, 3 * 2048 / 10,
	    "records read from RocksDB: %" PRIu64 " of %d", r1 - r0, 3 * 2048);
	cr_assert_eq((c1 - c0) + (r1 - r0), 3 * 2048);
	cr_assert_eq(tt_check(s), 0, "the indexes agree");
	tli_store_close(s);
	tt_rmtree_free(&dir);
}
