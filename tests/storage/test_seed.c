/*
 * Seeding a new Raft group from a store (store.h, "seeding a new group"):
 * the checkpoint copy of a stopped store, its preparation (the old group's
 * applied index removed, the seed mark written: the same id on every copy
 * of one store, another on another store) and the seed check entry, on
 * real RocksDB databases; the refusals leave everything as it was; a store
 * a running timelined holds is refused.
 */
#define _GNU_SOURCE /* asprintf */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"
#include "store.h"
#include "testutil.h"
#include "tlcheck.h"

#define BASE_INDEX 5000 /* the old group's log was that long already */
#define NMSG 20

static char *dir;
static tt_clock clk;

static void
setup(void)
{
	dir = tt_mkdtemp("seed");
	tt_clock_init(&clk, 1700000000000LL);
}

static void
teardown(void)
{
	tt_rmtree_free(&dir);
}

TestSuite(seed, .init = setup, .fini = teardown);

/* A one-node Raft log kept by the test: every entry applies at once, at
 * the next index after BASE_INDEX. */
typedef struct raft1 {
	tli_store *s;
	uint64_t last;
} raft1;

static int
apply_now(void *arg, const void *e, size_t len)
{
	raft1 *r = arg;

	return tli_store_apply_entry(r->s, ++r->last, e, len);
}

static char *
sub(const char *name)
{
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

/* A replicated store at path holding NMSG messages of topic "t"; returns
 * its applied index. */
static uint64_t
make_group_store(const char *path)
{
	raft1 r = {.last = BASE_INDEX};
	tli_store_opts o;

	tli_store_opts_init(&o);
	o.path = path;
	o.clock = tt_clock_as_tli(&clk);
	o.replicate = apply_now;
	o.replicate_arg = &r;
	TL_PASS(tli_store_open(&r.s, &o));
	tt_topic(r.s, "t", 4);
	for (int i = 0; i < NMSG; i++) {
		char id[16];
		tli_op op;

		snprintf(id, sizeof(id), "m%03d", i);
		op = tt_mkop(TLI_OP_CREATE, "t", id, "app",
		    1700000000000LL + 1000 * i, 0);
		op.body = id;
		op.body_len = strlen(id);
		TL_PASS(tli_store_apply(r.s, &op, 1));
		TL_PASS(op.err, "create %s", id);
	}
	cr_assert_eq(tli_store_applied_index(r.s), r.last);
	tli_store_close(r.s);
	return r.last;
}

/* Open path in plain mode: its applied index, every message there, no
 * problem. */
static uint64_t
open_and_verify(const char *path)
{
	tli_store *s = tt_store_open(path, &clk);
	tli_topic_info ti;
	uint64_t index = tli_store_applied_index(s);

	TL_PASS(tli_store_topic_get(s, "t", &ti), "%s", path);
	cr_assert_eq(ti.messages, NMSG, "%s: %llu messages", path,
	    (unsigned long long) ti.messages);
	for (int i = 0; i < NMSG; i++) {
		char id[16];
		tli_msg m;

		snprintf(id, sizeof(id), "m%03d", i);
		TL_PASS(tli_store_get(s, "t", id, strlen(id), &m), "%s", id);
		cr_assert_eq(m.body_len, strlen(id));
		cr_assert_eq(memcmp(m.body, id, m.body_len), 0);
		tli_msg_fini(&m);
	}
	cr_assert_eq(tt_check(s), 0, "%s: problems", path);
	tli_store_close(s);
	return index;
}

static uint64_t
seed_of(const char *path, bool *pending)
{
	tli_store *s = tt_store_open(path, &clk);
	uint64_t id = 99;

	TL_PASS(tli_store_seed_get(s, &id, pending));
	tli_store_close(s);
	return id;
}

Test(seed, copy_keeps_everything_and_seed_clears_the_index)
{
	char *src = sub("src"), *dst = sub("copy"), why[256] = "";
	uint64_t index = 0, was = 0, id = 0, id2 = 0;
	uint64_t want = make_group_store(src);
	bool pending = true;

	cr_assert_gt(want, BASE_INDEX);
	TL_PASS(tli_store_copy(src, dst, &index, why, sizeof(why)), "%s", why);
	cr_assert_eq(index, want);
	cr_assert_eq(open_and_verify(dst), want, "the copy holds the index");
	cr_assert_eq(open_and_verify(src), want, "the source is unchanged");
	cr_assert_eq(seed_of(dst, &pending), 0, "no seed mark yet");
	cr_assert_not(pending);

	TL_PASS(tli_store_seed(dst, &was, &id, why, sizeof(why)), "%s", why);
	cr_assert_eq(was, want);
	cr_assert_neq(id, 0);
	cr_assert_eq(open_and_verify(dst), 0, "the index is gone for good");
	cr_assert_eq(open_and_verify(src), want, "only the copy changed");
	cr_assert_eq(seed_of(dst, &pending), id);
	cr_assert(pending);

	/* twice: the same seed */
	TL_PASS(tli_store_seed(dst, &was, &id2, why, sizeof(why)), "%s", why);
	cr_assert_eq(was, 0);
	cr_assert_eq(id2, id);
	free(src);
	free(dst);
}

Test(seed, copies_of_one_store_share_the_seed_id)
{
	char *src = sub("src"), *a = sub("a"), *b = sub("b"), *other = sub("o");
	char why[256] = "";
	uint64_t index, was, ida = 0, idb = 0, ido = 0;

	make_group_store(src);
	TL_PASS(tli_store_copy(src, a, &index, why, sizeof(why)), "%s", why);
	TL_PASS(tli_store_copy(src, b, &index, why, sizeof(why)), "%s", why);
	TL_PASS(tli_store_seed(a, &was, &ida, why, sizeof(why)), "%s", why);
	TL_PASS(tli_store_seed(b, &was, &idb, why, sizeof(why)), "%s", why);
	cr_assert_eq(ida, idb, "one store, prepared twice: one seed");

	/* the same store one message later: another seed */
	{
		tli_store *s = tt_store_open(src, &clk);
		tli_op op = tt_mkop(TLI_OP_CREATE, "t", "late", "app",
		    1700000000000LL + 99999, 0);

		TL_PASS(tli_store_apply(s, &op, 1));
		TL_PASS(op.err);
		tli_store_close(s);
	}
	TL_PASS(
	    tli_store_copy(src, other, &index, why, sizeof(why)), "%s", why);
	TL_PASS(tli_store_seed(other, &was, &ido, why, sizeof(why)), "%s", why);
	cr_assert_neq(ido, ida);
	free(src);
	free(a);
	free(b);
	free(other);
}

Test(seed, seed_check_entry)
{
	char *src = sub("src"), *a = sub("a"), *e = sub("empty"), why[256];
	uint8_t entry[TLI_REPL_SEED_LEN], bad[TLI_REPL_SEED_LEN];
	uint64_t index, was, id = 0, have = 7;
	bool pending;
	tli_store *s;

	make_group_store(src);
	TL_PASS(tli_store_copy(src, a, &index, why, sizeof(why)), "%s", why);
	TL_PASS(tli_store_seed(a, &was, &id, why, sizeof(why)), "%s", why);
	tli_store_seed_entry(id, entry);

	/* another seed's check: refused, nothing written */
	s = tt_store_open(a, &clk);
	tli_store_seed_entry(id + 1, bad);
	TL_PASS(tli_store_seed_apply(s, 2, bad, sizeof(bad), &have));
	cr_assert_eq(have, id, "the check tells this store's seed");
	cr_assert_eq(tli_store_applied_index(s), 0);
	TL_PASS(tli_store_seed_get(s, &have, &pending));
	cr_assert(pending);
	/* not a seed check entry; an ordinary store refuses this one */
	bad[1] = TLI_REPL_OPS;
	TL_FAIL(
	    tli_store_seed_apply(s, 2, bad, sizeof(bad), &have), TL_ECORRUPT);
	TL_FAIL(tli_store_apply_entry(s, 2, entry, sizeof(entry)), TL_ECORRUPT);

	/* its own: confirmed, at the entry's index */
	TL_PASS(tli_store_seed_apply(s, 2, entry, sizeof(entry), &have));
	cr_assert_eq(have, id);
	cr_assert_eq(tli_store_applied_index(s), 2);
	TL_PASS(tli_store_seed_get(s, &have, &pending));
	cr_assert_eq(have, id);
	cr_assert_not(pending);
	tli_store_close(s);
	cr_assert_eq(open_and_verify(a), 2, "confirmed for good");

	/* a replay after a restart passes; an empty store has no seed */
	s = tt_store_open(a, &clk);
	TL_PASS(tli_store_seed_apply(s, 2, entry, sizeof(entry), &have));
	cr_assert_eq(have, id);
	tli_store_close(s);
	s = tt_store_open(e, &clk);
	TL_PASS(tli_store_seed_apply(s, 2, entry, sizeof(entry), &have));
	cr_assert_eq(have, 0);
	cr_assert_eq(tli_store_applied_index(s), 0);
	tli_store_close(s);
	free(src);
	free(a);
	free(e);
}

Test(seed, refusals_change_nothing)
{
	char *src = sub("src"), *dst = sub("copy"), *none = sub("none");
	char *node = sub("node1"), *nstore = sub("node1/store");
	char why[256] = "";
	uint64_t index = 77, was = 77, id = 77, want = make_group_store(src);
	struct stat st;

	/* a destination that exists, even empty */
	cr_assert_eq(mkdir(dst, 0755), 0);
	TL_FAIL(tli_store_copy(src, dst, &index, why, sizeof(why)), TL_EINVAL);
	cr_assert(strstr(why, "exists") != NULL, "%s", why);
	cr_assert_eq(index, 77, "untouched on failure");
	cr_assert_eq(rmdir(dst), 0, "the destination is still empty");

	/* a source without a store: none is created there */
	TL_FAIL(tli_store_copy(none, dst, &index, why, sizeof(why)), TL_EINVAL);
	cr_assert(strstr(why, "holds no store") != NULL, "%s", why);
	cr_assert_neq(stat(none, &st), 0);
	cr_assert_neq(stat(dst, &st), 0);
	TL_FAIL(tli_store_seed(none, &was, &id, why, sizeof(why)), TL_EINVAL);
	cr_assert_neq(stat(none, &st), 0);
	cr_assert_eq(was, 77);
	cr_assert_eq(id, 77);

	/* a cluster node's data directory: the message names its store */
	cr_assert_eq(mkdir(node, 0755), 0);
	cr_assert_eq(rename(src, nstore), 0);
	TL_FAIL(tli_store_seed(node, &was, &id, why, sizeof(why)), TL_EINVAL);
	cr_assert(strstr(why, "/node1/store") != NULL, "%s", why);
	cr_assert_eq(open_and_verify(nstore), want);
	free(src);
	free(dst);
	free(none);
	free(node);
	free(nstore);
}

Test(seed, store_of_a_running_broker_is_refused, .timeout = 60)
{
	char *data = sub("data"), *dst = sub("copy"), why[256] = "", pid[32];
	uint64_t index = 0, was = 0, id = 0;
	struct stat st;
	tt_proc p;

	/* a single broker: its store is its data directory */
	tt_proc_timelined(&p, dir, "broker");
	tt_proc_set(&p, "data", "%s", data);
	tt_proc_set(&p, "listen", "tcp://127.0.0.1:0");
	tt_proc_set(&p, "topic", "t");
	tt_proc_start(&p);
	snprintf(pid, sizeof(pid), "process %ld", (long) p.pid);

	TL_FAIL(tli_store_seed(data, &was, &id, why, sizeof(why)), TL_EBUSY);
	cr_assert(strstr(why, pid) != NULL, "%s (want %s)", why, pid);
	TL_FAIL(tli_store_copy(data, dst, &index, why, sizeof(why)), TL_EBUSY);
	cr_assert(strstr(why, pid) != NULL, "%s", why);
	cr_assert_neq(stat(dst, &st), 0, "no copy begun");

	tt_proc_stop_clean(&p);
	tt_proc_fini(&p);
	TL_PASS(tli_store_copy(data, dst, &index, why, sizeof(why)), "%s", why);
	cr_assert_eq(index, 0, "a single broker applies no Raft entry");
	TL_PASS(tli_store_seed(dst, &was, &id, why, sizeof(why)), "%s", why);
	cr_assert_eq(was, 0);
	cr_assert_neq(id, 0, "a single broker's store seeds a cluster too");
	free(data);
	free(dst);
}
