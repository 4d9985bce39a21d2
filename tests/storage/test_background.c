/*
 * The store's background work.
 *
 * background_bytes_per_s: RocksDB's flushes (and compactions) write no
 * faster than the store's limit, so that their bursts leave the disk to
 * the log's fsync. The same megabyte of messages is flushed by a store
 * without a limit and by one limited to 256 KiB/s: the limited flush
 * cannot take less than about 4 s on any machine.
 *
 * The due-time index uses universal compaction, earlier versions leveled
 * compaction: a store whose index was compacted level by level (as the
 * old versions left it) opens, reads and takes writes.
 *
 * A store closed in order flushes its memtables, so the next open has no
 * log to replay.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tlcheck.h"

#define T0 INT64_C(1800000000000)
#define NMSG 1000
#define BODY 1000
#define LIMIT (256u << 10)

/* Seconds a checkpoint takes (its flush of NMSG fresh messages) on a new
 * store with the given limit. */
static double
flush_secs(uint64_t limit)
{
	char *dir = tt_mkdtemp("background");
	char cp[700];
	tli_store_opts o;
	tli_store *s = NULL;
	uint64_t index = 0;
	uint32_t x = 12345;
	int64_t t0;
	double secs;

	tli_store_opts_init(&o);
	o.path = dir;
	o.sync_mode = TLI_SYNC_NONE;
	o.background_bytes_per_s = limit;
	TL_PASS(tli_store_open(&s, &o));
	tt_topic(s, "t", 0);
	for (int i = 0; i < NMSG; i++) {
		char id[16], body[BODY + 1];

		/* bytes 1..255 that LZ4 cannot shrink much */
		for (int k = 0; k < BODY; k++) {
			x = x * 1103515245u + 12345u;
			body[k] = (char) (1 + (x >> 16) % 255);
		}
		body[BODY] = '\0';
		snprintf(id, sizeof(id), "m%d", i);
		TL_PASS(tt_create(s, "t", id, "g", T0 + i, body, NULL));
	}
	snprintf(cp, sizeof(cp), "%s.cp", dir);
	t0 = tli_mono_ms();
	TL_PASS(tli_store_checkpoint(s, cp, &index));
	secs = (double) (tli_mono_ms() - t0) / 1000.0;
	tli_store_close(s);
	tt_rmtree(cp);
	tt_rmtree(dir);
	free(dir);
	return secs;
}

Test(background, flushes_write_no_faster_than_the_limit, .timeout = 120)
{
	double free_s = flush_secs(0);
	double limited_s = flush_secs(LIMIT);

	cr_log_info("flush of %d x %d B: %.2f s without a limit, %.2f s at "
	            "%u KiB/s",
	    NMSG, BODY, free_s, limited_s, LIMIT >> 10);
	cr_assert(limited_s >= 2.0,
	    "about 1 MB flushed in %.2f s at a limit of %u KiB/s", limited_s,
	    LIMIT >> 10);
	cr_assert(limited_s > free_s, "the limit made no difference");
}

/* Reopen the store's RocksDB directly with leveled compaction everywhere
 * (the old options) and compact every column family down the levels. */
static void
compact_leveled(const char *path)
{
	static const char *names[] = {"default", "msg", "tl", "cons", "own"};
	enum { N = sizeof(names) / sizeof(names[0]) };
	rocksdb_options_t *o = rocksdb_options_create();
	const rocksdb_options_t *cfo[N];
	rocksdb_column_family_handle_t *cf[N];
	char *err = NULL;
	rocksdb_t *db;

	for (int i = 0; i < N; i++) {
		cfo[i] = o;
	}
	db = rocksdb_open_column_families(o, path, N, names, cfo, cf, &err);
	cr_assert_null(err, "open: %s", err);
	for (int i = 0; i < N; i++) {
		rocksdb_compact_range_cf(db, cf[i], NULL, 0, NULL, 0);
	}
	{
		/* the index's files are in a level below L0 now */
		char *v0 = rocksdb_property_value_cf(
		    db, cf[2], "rocksdb.num-files-at-level0");
		char *v1 = rocksdb_property_value_cf(
		    db, cf[2], "rocksdb.num-files-at-level1");

		cr_assert(v0 != NULL && v1 != NULL);
		cr_log_info("the index after a leveled compaction: %s file(s) "
		            "in L0, %s in L1",
		    v0, v1);
		cr_assert(atoi(v0) == 0 && atoi(v1) >= 1);
		free(v0);
		free(v1);
	}
	for (int i = 0; i < N; i++) {
		rocksdb_column_family_handle_destroy(cf[i]);
	}
	rocksdb_close(db);
	rocksdb_options_destroy(o);
}

/* A new store with topic t and 2000 messages due between T0 + 1 s and
 * T0 + 6 s, in an order that is not the due times'. */
static tli_store *
filled(const char *dir, tt_clock *clk)
{
	tli_store *s;

	tt_clock_init(clk, T0);
	s = tt_store_open(dir, clk);
	tt_topic(s, "t", 4);
	for (int i = 0; i < 2000; i++) {
		char id[16];

		snprintf(id, sizeof(id), "m%d", i);
		TL_PASS(tt_create(s, "t", id, "g",
		    T0 + 1000 + (i * 7919) % 5000, "body", NULL));
	}
	return s;
}

/* Reopened, the store holds the 2000 messages filled() put in. */
static tli_store *
reopened(const char *dir, tt_clock *clk)
{
	tli_store *s = tt_store_open(dir, clk);
	tli_counts k;

	TL_PASS(tli_store_count(s, "t", 0, T0 + 10000, &k));
	cr_assert_eq(k.waiting, 2000, "%llu of 2000 after the reopen",
	    (unsigned long long) k.waiting);
	return s;
}

Test(background, an_index_compacted_by_levels_opens_and_works)
{
	char *dir = tt_mkdtemp("leveled");
	tt_clock clk;
	tli_store *s = filled(dir, &clk);
	tli_counts k;

	tli_store_close(s);
	compact_leveled(dir);

	s = reopened(dir, &clk);
	TL_PASS(tt_op(s, TLI_OP_DELETE_OWNED, "t", "m5", "g", 0, 0, NULL));
	TL_PASS(tt_create(s, "t", "new", "g", T0 + 2, "body", NULL));
	TL_PASS(tli_store_count(s, "t", 0, T0 + 10000, &k));
	cr_assert_eq(k.waiting, 2000, "one deleted, one created");
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}

/* Bytes in the store's write-ahead log files (*.log). */
static uint64_t
log_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t total = 0;

	cr_assert_not_null(d, "opendir %s", dir);
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		char path[1024];
		struct stat st;

		if (n < 4 || strcmp(de->d_name + n - 4, ".log") != 0) {
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (stat(path, &st) == 0) {
			total += (uint64_t) st.st_size;
		}
	}
	closedir(d);
	return total;
}

/* A store closed in order leaves nothing in its log: the next open (a
 * planned restart) replays nothing, however large the backlog. Every
 * message is still there, from the tables. */
Test(background, a_closed_store_leaves_no_log_to_replay)
{
	char *dir = tt_mkdtemp("closed");
	tt_clock clk;
	tli_store *s = filled(dir, &clk);
	uint64_t before = log_bytes(dir);

	cr_assert_gt(before, 100000,
	    "the log holds the creates while open (%llu B)",
	    (unsigned long long) before);
	tli_store_close(s);
	cr_assert_lt(log_bytes(dir), 1024,
	    "%llu B of log left after the close (%llu B before)",
	    (unsigned long long) log_bytes(dir), (unsigned long long) before);

	s = reopened(dir, &clk);
	cr_assert_eq(tt_check(s), 0);
	tli_store_close(s);
	tt_rmtree(dir);
	free(dir);
}
