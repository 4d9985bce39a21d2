/*
 * Disaster recovery: a new three-node cluster seeded from a checkpoint of
 * another group's store (docs/cluster.md, "Upgrades and restores"). An old
 * group (one node: its store has an applied index) stores messages in a
 * topic of their own, some due soon and some far ahead, and is stopped;
 * `tl-store checkpoint` makes a copy for each new node. A node started on
 * a copy not prepared with `tl-store seed` refuses to start (R018) instead
 * of skipping the new group's first entries; once the copies are prepared
 * the cluster starts, every message is there, the due ones are delivered
 * once, new writes work, and all of it survives a leader's kill -9; every
 * node's store ends clean and the same as the others. And when only one
 * node gets the copy (the others start empty), the seed check stops the
 * nodes that do not hold the leader's data (R019) instead of letting the
 * stores part silently.
 */
#include "tltest.h"

#include "cluster_util.h"
#include "sdk_util.h"

#define SOON 8  /* due a second or two after they were stored */
#define FAR 40  /* due in an hour */
#define NEWW 10 /* written by the new cluster, half before the kill */

static tc_cluster O, C; /* the old group, the new one */

static void
fini(void)
{
	if (O.dir != NULL) {
		tc_fini(&O);
	}
	if (C.dir != NULL) {
		tc_fini(&C);
	}
}

TestSuite(seed, .fini = fini, .timeout = 120);

static void
msg_id(char *out, size_t cap, int i)
{
	snprintf(out, cap, "%s%03d", i < SOON ? "soon" : "far", i);
}

/* tl-store ARGS; its output in out, its exit status returned. */
static int tool(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
tool(char *out, size_t cap, const char *fmt, ...)
{
	char args[1800], cmd[2000];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s %s", tt_bin_store(), args);
	return tt_run(cmd, out, cap);
}

/* The old group stores the messages (topic "seeded") and stops; the
 * applied index of its store is returned. */
static uint64_t
old_group(int64_t *soon_due)
{
	tl_client *c;
	tli_store *s;
	uint64_t index;
	int64_t now;

	tc_init(&O, 1, "seed-old");
	tc_start_all(&O);
	cr_assert(tc_leader(&O, 10000) == 0, "the old node does not lead");
	c = sb_client_url(O.url[0], 5000, NULL);
	sb_topic(c, "seeded", 0);
	now = tl_client_broker_now(c);
	*soon_due = now + 1500;
	for (int i = 0; i < SOON + FAR; i++) {
		char id[32];
		int64_t at = i < SOON ? *soon_due : now + 3600000;

		msg_id(id, sizeof(id), i);
		TL_PASS(
		    tl_put_at(c, "seeded", "old", id, at, id, strlen(id), NULL),
		    "put %s", id);
	}
	tl_client_close(c);
	tt_proc_stop_clean(&O.p[0]);
	s = tc_open_store(&O, 0);
	index = tli_store_applied_index(s);
	tli_store_close(s);
	return index;
}

/* Every message the test wrote, through the SDK (served by the leader). */
static void
expect_messages(tl_client *c, bool soon_gone, int nnew)
{
	for (int i = 0; i < SOON + FAR; i++) {
		char id[32];
		tl_message *m = NULL;
		int rv;

		msg_id(id, sizeof(id), i);
		rv = tl_get(c, "seeded", id, &m);
		if (i < SOON && soon_gone) {
			TL_FAIL(rv, TL_ENOTFOUND, "%s was delivered", id);
			continue;
		}
		TL_PASS(rv, "get %s", id);
		cr_assert_eq(m->body_len, strlen(id));
		cr_assert_eq(memcmp(m->body, id, m->body_len), 0);
		tl_message_free(m);
	}
	for (int i = 0; i < nnew; i++) {
		char id[32];
		tl_message *m = NULL;

		snprintf(id, sizeof(id), "new%03d", i);
		TL_PASS(tl_get(c, "seeded", id, &m), "get %s", id);
		tl_message_free(m);
	}
}

static void
put_new(tl_client *c, int from, int to)
{
	for (int i = from; i < to; i++) {
		char id[32];

		snprintf(id, sizeof(id), "new%03d", i);
		TL_PASS(tl_put_in(c, "seeded", "new", id, 3600000, id,
		            strlen(id), NULL),
		    "put %s", id);
	}
}

/* The due messages, each delivered once (and deleted), none early. */
static void
deliver_soon(tl_client *c, int64_t soon_due)
{
	tl_consumer_conf conf = {.topic = "seeded",
	    .consumer_id = "k",
	    .lease_ms = 5000,
	    .credit = 16};
	tl_lease *l[SOON + 1];
	tl_consumer *k;
	int seen[SOON] = {0};
	size_t n;

	TL_PASS(tl_consumer_open(&k, c, &conf));
	n = sb_poll_n(k, l, SOON, 10000);
	cr_assert_eq(n, SOON, "%zu of %d due messages delivered", n, SOON);
	for (size_t i = 0; i < n; i++) {
		const char *id = tl_lease_id(l[i]);

		cr_assert(strncmp(id, "soon", 4) == 0, "%s delivered", id);
		cr_assert_geq(tl_lease_due(l[i]), soon_due);
		seen[atoi(id + 4)]++;
		TL_PASS(tl_lease_delete(l[i]), "delete %s", id);
		tl_lease_free(l[i]);
	}
	for (int i = 0; i < SOON; i++) {
		cr_assert_eq(
		    seen[i], 1, "soon%03d delivered %d times", i, seen[i]);
	}
	/* nothing more comes */
	TL_PASS(tl_consumer_poll(k, l, 1, &n, 700));
	cr_assert_eq(n, 0, "%s delivered again or early",
	    n > 0 ? tl_lease_id(l[0]) : "");
	tl_consumer_close(k);
}

Test(seed, new_cluster_from_a_checkpoint)
{
	char out[4096], ckpt[700], all[256];
	int64_t soon_due;
	uint64_t index = old_group(&soon_due);
	int leader, next;
	tl_client *c;
	tli_topic_info want;

	cr_assert_gt(index, 0, "the old group's store has an applied index");
	snprintf(ckpt, sizeof(ckpt), "%s/backup", O.dir);
	cr_assert_eq(
	    tool(out, sizeof(out), "checkpoint %s/store %s", O.data[0], ckpt),
	    0, "%s", out);

	/* a copy for each new node, in DATA/store */
	tc_init(&C, 3, "seed-new");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mkdir(C.data[i], 0755), 0);
		cr_assert_eq(tool(out, sizeof(out), "checkpoint %s %s/store",
		                 ckpt, C.data[i]),
		    0, "%s", out);
	}

	/* not prepared: the node refuses to start, with the remedy */
	tc_spawn(&C, 0);
	cr_assert_eq(tt_proc_wait_exit(&C.p[0], 15000), 1,
	    "a node on another group's store started");
	cr_assert(tt_proc_log_wait(&C.p[0], "R018", 0), "no R018");
	cr_assert(tt_proc_log_wait(&C.p[0], "tl-store seed", 0));

	for (int i = 0; i < 3; i++) {
		char want_out[64];

		cr_assert_eq(tool(out, sizeof(out), "seed %s/store", C.data[i]),
		    0, "%s", out);
		snprintf(want_out, sizeof(want_out), "applied index %llu",
		    (unsigned long long) index);
		cr_assert(strstr(out, want_out) != NULL, "%s", out);
	}
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	tc_urls(&C, 3, all, sizeof(all));
	c = sb_client_url(all, 10000, NULL);
	cr_assert(tt_proc_log_wait(&C.p[leader], "R020 seed", 5000));
	expect_messages(c, false, 0);
	deliver_soon(c, soon_due);
	put_new(c, 0, NEWW / 2);
	expect_messages(c, true, NEWW / 2);

	/* the leader dies; the data is still there, writes go on */
	cr_assert(tc_converged(&C, leader, 10000));
	tt_proc_kill(&C.p[leader]);
	next = tc_leader(&C, 10000);
	cr_assert(next >= 0 && next != leader, "no new leader");
	expect_messages(c, true, NEWW / 2);
	put_new(c, NEWW / 2, NEWW);
	expect_messages(c, true, NEWW);
	tl_client_close(c);

	/* the killed node catches up; every store the same, and clean */
	tc_start(&C, leader);
	cr_assert(tc_converged(&C, next, 10000), "no catch-up");
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	for (int i = 0; i < 3; i++) {
		tli_store *s = tc_open_store(&C, i);
		tli_topic_info ti;

		TL_PASS(tli_store_topic_get(s, "seeded", &ti));
		if (i == 0) {
			want = ti;
		}
		cr_assert_eq(ti.messages, FAR + NEWW, "node %d holds %" PRIu64,
		    i + 1, ti.messages);
		cr_assert_eq(ti.topic_id, want.topic_id);
		for (int k = SOON; k < SOON + FAR; k++) {
			char id[32];
			tli_msg m;

			msg_id(id, sizeof(id), k);
			TL_PASS(tli_store_get(s, "seeded", id, strlen(id), &m),
			    "node %d: %s", i + 1, id);
			tli_msg_fini(&m);
		}
		tli_store_close(s);
	}
}

/* The prepared backup of the old group, in O.dir/backup. */
static void
prepared_backup(char *ckpt, size_t cap)
{
	char out[4096];
	int64_t soon_due;

	old_group(&soon_due);
	snprintf(ckpt, cap, "%s/backup", O.dir);
	cr_assert_eq(
	    tool(out, sizeof(out), "checkpoint %s/store %s", O.data[0], ckpt),
	    0, "%s", out);
	cr_assert_eq(tool(out, sizeof(out), "seed %s", ckpt), 0, "%s", out);
}

Test(seed, a_node_without_the_copy_stops)
{
	char out[4096], ckpt[700];
	int stopped = -1;
	int64_t deadline;

	prepared_backup(ckpt, sizeof(ckpt));
	tc_init(&C, 3, "seed-one");
	cr_assert_eq(mkdir(C.data[0], 0755), 0);
	cr_assert_eq(
	    tool(out, sizeof(out), "checkpoint %s %s/store", ckpt, C.data[0]),
	    0, "%s", out);
	/* nodes 2 and 3 start empty */
	tc_start_all(&C);
	deadline = tli_mono_ms() + 15000;
	while (stopped < 0 && tli_mono_ms() < deadline) {
		for (int i = 0; i < 3 && stopped < 0; i++) {
			if (tt_proc_log_wait(&C.p[i], "R019", 0)) {
				stopped = i;
			}
		}
		tt_nap_ms(20);
	}
	cr_assert(stopped >= 0, "every node runs on, holding other data");
	cr_assert_eq(tt_proc_wait_exit(&C.p[stopped], 5000), 1);
	/* the seeded node stops when an empty one leads; the empty ones
	 * stop when the seeded one leads */
	cr_assert(tt_proc_log_wait(&C.p[stopped],
	              stopped == 0 ? "is not its seed check" : "is no seed", 0),
	    "node %d stopped for the wrong reason", stopped + 1);
	for (int i = 0; i < 3; i++) {
		if (C.p[i].pid > 0) {
			tt_proc_kill(&C.p[i]);
		}
	}
}
