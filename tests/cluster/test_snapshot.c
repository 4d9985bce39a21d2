/*
 * The replicated broker's snapshots: a follower whose data directory is
 * deleted rejoins through a snapshot of the leader's store (the log before
 * it is gone), fetching its files from the leader in parts, and ends with
 * the same store as the others; a node keeps only its newest snapshots;
 * SNAPSHOT_READ serves a kept snapshot's files and nothing else.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tltest.h"
#include "auth_util.h"
#include "cluster_util.h"

static tc_cluster C;

static void
fini(void)
{
	tc_fini(&C);
}

TestSuite(snapshot, .fini = fini, .timeout = 120);

static void
create_range(rc_client *cl, int from, int to)
{
	for (int i = from; i < to; i++) {
		char id[16];

		snprintf(id, sizeof(id), "m%06d", i);
		TL_PASS(tc_create(cl, id, NULL, 0), "create %s", id);
	}
}

/* Start the nodes described (tc_init) and find the leader; *follower is
 * another node. */
static void
started(int *leader, int *follower)
{
	tc_start_all(&C);
	*leader = tc_leader(&C, 10000);
	cr_assert(*leader >= 0, "no leader within 10 s");
	*follower = (*leader + 1) % 3;
}

/* n messages with 4 KiB bodies that do not compress, in batches of 16:
 * the store's files outgrow one SNAPSHOT_READ part. */
static void
create_bodies(rc_client *cl, int from, int n)
{
	static uint8_t body[16][4096];
	uint32_t x = 2463534242u;

	for (int i = 0; i < n; i += 16) {
		tlp_item it[16];
		char id[16][16];
		rc_results res;
		int k = n - i < 16 ? n - i : 16;

		memset(it, 0, sizeof(it));
		for (int j = 0; j < k; j++) {
			for (size_t b = 0; b < sizeof(body[j]); b++) {
				x ^= x << 13;
				x ^= x >> 17;
				x ^= x << 5;
				body[j][b] = (uint8_t) x;
			}
			snprintf(id[j], sizeof(id[j]), "b%06d", from + i + j);
			it[j] = (tlp_item){.id = TLP_STR(id[j]),
			    .ts = 3600000,
			    .rel = true,
			    .body = body[j],
			    .body_len = sizeof(body[j])};
		}
		TL_PASS(rc_batch(cl, TLP_OP_CREATE, "t", "app", it, (size_t) k,
		            &res),
		    "create batch at %d", from + i);
		for (size_t j = 0; j < res.n; j++) {
			TL_PASS(res.v[j].err, "create %s", id[j]);
		}
		rc_results_free(&res);
	}
}

/* The snapshots node i keeps (directories ID-INDEX), *part those being
 * fetched. */
static int
kept_snapshots(int i, int *part)
{
	char dir[1000];
	DIR *d;
	struct dirent *e;
	int n = 0;

	*part = 0;
	snprintf(dir, sizeof(dir), "%s/snapshots", C.data[i]);
	cr_assert_not_null(d = opendir(dir), "%s", dir);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.') {
			continue;
		}
		if (strstr(e->d_name, ".part") != NULL) {
			(*part)++;
		} else {
			n++;
		}
	}
	closedir(d);
	return n;
}

/* The bytes the R005 line of node i says were fetched, and from which
 * node; -1 without one. */
static long long
fetched(int i, int *from)
{
	char *log = tli_read_file(C.p[i].log, 64u << 20);
	const char *l;
	long long bytes = -1;

	cr_assert_not_null(log);
	if ((l = strstr(log, "R005 snapshot installed")) != NULL &&
	    (l = strstr(l, " bytes, ")) != NULL &&
	    sscanf(l, " bytes, %lld fetched from node %d", &bytes, from) != 2) {
		bytes = -1;
	}
	tli_free(log);
	return bytes;
}

Test(snapshot, wiped_follower_rejoins_through_a_snapshot)
{
	enum { N = 300, B = 480 };
	int leader, follower, from = 0, part;
	long long bytes;
	rc_client *cl;
	tli_topic_info want;
	tli_store *s;

	tc_init(&C, 3, "cluster-e");
	C.snapshot_entries = 32;
	started(&leader, &follower);
	cl = rc_open(C.url[leader], "tester");
	create_range(cl, 0, N / 2);

	tt_proc_kill(&C.p[follower]);
	cr_assert_eq(tli_rmtree(C.data[follower]), 0);
	create_bodies(cl, 0, B);
	create_range(cl, N / 2, N);
	rc_close(cl);
	cr_assert(tc_metric(&C, leader,
	              "timeline_cluster_snapshots_taken_total") > 2);
	/* many taken, the newest two kept: once a take still running (on
	 * libuv's pool, its directory already there) has pruned the older */
	int64_t deadline = tli_mono_ms() + 5000;
	while (kept_snapshots(leader, &part) > 2) {
		cr_assert(tli_mono_ms() < deadline,
		    "the leader keeps more than its two newest snapshots");
		tt_nap_ms(50);
	}

	tc_start(&C, follower);
	cr_assert(
	    tt_proc_log_wait(&C.p[follower], "R005 snapshot installed", 15000),
	    "the follower installed no snapshot");
	cr_assert(
	    tc_converged(&C, leader, 15000), "the follower did not catch up");
	/* the files came from the leader, in more than one part */
	bytes = fetched(follower, &from);
	cr_assert_gt(bytes, (long long) TLP_SNAP_PART,
	    "the follower fetched %lld bytes", bytes);
	cr_assert_eq(from, leader + 1, "fetched from node %d", from);
	/* what it fetched is kept (to send on), nothing half-fetched */
	cr_assert_geq(kept_snapshots(follower, &part), 1);
	cr_assert_eq(part, 0);
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	s = tc_open_store(&C, leader);
	TL_PASS(tli_store_topic_get(s, "t", &want));
	tli_store_close(s);
	cr_assert_eq(want.messages, N + B);
	for (int i = 0; i < 3; i++) {
		tli_topic_info ti;

		s = tc_open_store(&C, i);
		TL_PASS(tli_store_topic_get(s, "t", &ti));
		cr_assert_eq(ti.messages, N + B, "node %d holds %" PRIu64,
		    i + 1, ti.messages);
		for (int k = 0; k < N + B; k += 37) {
			char id[16];
			tli_msg m;

			snprintf(id, sizeof(id), k < N ? "m%06d" : "b%06d",
			    k < N ? k : k - N);
			TL_PASS(tli_store_get(s, "t", id, strlen(id), &m),
			    "node %d: %s", i + 1, id);
			cr_assert_eq(m.body_len, k < N ? 0u : 4096u,
			    "node %d: %s", i + 1, id);
			tli_msg_fini(&m);
		}
		tli_store_close(s);
	}
}

/* Entries of 64 KiB reach cluster_snapshot_bytes long before
 * cluster_snapshot_entries: every node snapshots by bytes, and the log
 * libraft holds in memory (what is applied since the last snapshot and
 * what is kept behind it) stays within twice the setting and one entry.
 * A follower killed meanwhile catches up, and every store ends whole. */
Test(snapshot, the_log_in_memory_is_bounded_in_bytes)
{
	enum { B = 480, LIMIT = 256 * 1024, ENTRY = 16 * 4200 };
	int leader, follower;
	rc_client *cl;

	tc_init(&C, 3, "cluster-b");
	C.snapshot_entries = 100000;
	for (int i = 0; i < 3; i++) {
		tc_node_set(&C, i, "cluster_snapshot_bytes", "%d", LIMIT);
	}
	started(&leader, &follower);
	cl = rc_open(C.url[leader], "tester");
	create_bodies(cl, 0, B / 2);
	tt_proc_kill(&C.p[follower]);
	create_bodies(cl, B / 2, B / 2);
	rc_close(cl);
	tc_start(&C, follower);
	cr_assert(
	    tc_converged(&C, leader, 15000), "the follower did not catch up");
	for (int i = 0; i < 3; i++) {
		int64_t bytes, taken, installed, end = tli_mono_ms() + 5000;

		/* 2 MB of entries: up to 7 snapshots by bytes (fewer when
		 * entries pile up while one is taken); the follower takes its
		 * own after its restart (on the thread pool: perhaps only
		 * after it caught up), or installs one */
		for (;;) {
			taken = tc_metric(
			    &C, i, "timeline_cluster_snapshots_taken_total");
			installed = tc_metric(&C, i,
			    "timeline_cluster_snapshots_installed_total");
			if (i != follower || taken + installed >= 1 ||
			    tli_mono_ms() >= end) {
				break;
			}
			tt_nap_ms(20);
		}
		cr_assert(i == follower ? taken + installed >= 1 : taken >= 3,
		    "node %d took %" PRId64 " snapshots", i + 1, taken);
		/* the metrics' log figures are refreshed every 100 ms */
		end = tli_mono_ms() + 5000;
		do {
			bytes = tc_metric(&C, i, "timeline_cluster_log_bytes");
		} while (bytes > 2 * LIMIT + ENTRY && tli_mono_ms() < end &&
		    usleep(20000) == 0);
		cr_assert(bytes >= 0 && bytes <= 2 * LIMIT + ENTRY,
		    "node %d holds %" PRId64 " bytes of log (limit %d)", i + 1,
		    bytes, LIMIT);
	}
	/* the leader keeps entries behind its snapshots (a follower that
	 * just installed one may hold none) */
	cr_assert_gt(tc_metric(&C, leader, "timeline_cluster_log_entries"), 0);
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	for (int i = 0; i < 3; i++) {
		tli_topic_info ti;
		tli_store *s = tc_open_store(&C, i);

		TL_PASS(tli_store_topic_get(s, "t", &ti));
		cr_assert_eq(ti.messages, B, "node %d holds %" PRIu64, i + 1,
		    ti.messages);
		tli_store_close(s);
	}
}

/* Remove every snapshot node i keeps. */
static void
drop_snapshots(int i)
{
	char dir[700], path[1000];
	DIR *d;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "%s/snapshots", C.data[i]);
	cr_assert_not_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			cr_assert_eq(tli_rmtree(path), 0, "%s", path);
		}
	}
	closedir(d);
}

/* The leader sends a snapshot whose files no node keeps any more (its
 * taker died, or removed them): the follower asks the nodes for a later one
 * (SNAPSHOT_LATEST; the leader takes one for it) and installs that instead,
 * at once, and applies what comes after. Before, the install failed and
 * libraft 0.15 had already moved the follower's log past the snapshot: it
 * took the entries that followed and could apply none of them until some
 * node sent it a newer snapshot. */
Test(snapshot, a_snapshot_no_node_can_send_is_replaced_by_a_later_one)
{
	int leader, follower, part;
	int64_t end;
	bool failed;
	rc_client *cl;
	tli_store *s;

	tc_init(&C, 3, "cluster-sf");
	/* the leader's read lease renewals are entries too: a new snapshot
	 * every 64 comes seconds apart when nothing else is written */
	C.snapshot_entries = 64;
	started(&leader, &follower);
	cl = rc_open(C.url[leader], "tester");
	create_range(cl, 0, 200);
	tt_proc_kill(&C.p[follower]);
	cr_assert_eq(tli_rmtree(C.data[follower]), 0);

	/* removed again until the follower fails to fetch the one sent: one
	 * taken meanwhile would be whole */
	tc_spawn(&C, follower);
	end = tli_mono_ms() + 15000;
	do {
		for (int i = 0; i < 3; i++) {
			if (i != follower) {
				drop_snapshots(i);
			}
		}
		failed = tt_proc_log_wait(
		    &C.p[follower], "R023 cannot fetch snapshot", 20);
	} while (!failed && tli_mono_ms() < end);
	cr_assert(failed, "the follower fetched a snapshot no node keeps");

	/* nothing written since: what it installs it asked for */
	cr_assert(
	    tt_proc_log_wait(&C.p[follower], "R005 snapshot installed", 15000),
	    "the follower installed no snapshot");
	cr_assert(tt_proc_log_wait(
	              &C.p[follower], "R023 no node could send snapshot", 100),
	    "the follower did not install a later snapshot instead");
	cr_assert(tt_proc_alive(&C.p[follower]), "the follower died");
	cr_assert_geq(kept_snapshots(follower, &part), 1);
	cr_assert_eq(part, 0, "a half-fetched snapshot was left");
	cr_assert(
	    tc_converged(&C, leader, 15000), "the follower did not catch up");

	/* and it applies what comes after */
	create_range(cl, 200, 300);
	rc_close(cl);
	cr_assert(tc_converged(&C, leader, 15000),
	    "the follower did not apply the entries after the snapshot");
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	for (int i = 0; i < 3; i++) {
		tli_topic_info ti;

		s = tc_open_store(&C, i);
		TL_PASS(tli_store_topic_get(s, "t", &ti));
		cr_assert_eq(ti.messages, 300, "node %d holds %" PRIu64, i + 1,
		    ti.messages);
		tli_store_close(s);
	}
}

static void
enc_cluster(tlp_w *w, const void *arg)
{
	tlp_enc_cluster_req(w, arg);
}

/* A node that installed a snapshot keeps its files and sends them on: with
 * the node that took it gone, a wiped node fetches them from the node that
 * installed it (R023 for the first, gone). */
Test(snapshot, a_snapshot_is_fetched_from_another_node_when_its_taker_is_gone)
{
	tlp_cluster_req q = {TLP_STR("transfer"), 0, {0}, {0}};
	int a, b, c, from = 0;
	int64_t end;
	rc_frame *f = NULL;
	rc_client *cl;
	tlp_r r;

	tc_init(&C, 3, "cluster-so");
	C.snapshot_entries = 128;
	started(&a, &b);
	c = 3 - a - b;
	cl = rc_open(C.url[a], "tester");
	create_range(cl, 0, 300);
	tt_proc_kill(&C.p[b]);
	cr_assert_eq(tli_rmtree(C.data[b]), 0);
	create_range(cl, 300, 600);
	/* b takes no snapshot of its own (each refused): the one it sends is
	 * a's */
	tc_node_set(&C, b, "cluster_snapshot_max", "4096");
	tc_start(&C, b);
	cr_assert(tt_proc_log_wait(&C.p[b], "R005 snapshot installed", 15000),
	    "node %d installed no snapshot", b + 1);
	cr_assert_gt(fetched(b, &from), 0);
	cr_assert_eq(from, a + 1);
	cr_assert(tc_converged(&C, a, 15000));

	/* b leads; a, the taker, is gone; c starts empty */
	q.id = (uint64_t) b + 1;
	TL_PASS(rc_req(cl, TLP_OP_CLUSTER, enc_cluster, &q, &f, &r));
	rc_frame_free(f);
	rc_close(cl);
	end = tli_mono_ms() + 10000;
	while (tc_metric(&C, b, "timeline_cluster_serving") != 1 &&
	    tli_mono_ms() < end) {
		tt_nap_ms(20);
	}
	tt_proc_kill(&C.p[a]);
	tt_proc_kill(&C.p[c]);
	cr_assert_eq(tli_rmtree(C.data[c]), 0);
	tc_start(&C, c);
	cr_assert(tt_proc_log_wait(&C.p[c], "R005 snapshot installed", 20000),
	    "node %d installed no snapshot", c + 1);
	cr_assert_gt(fetched(c, &from), 0);
	cr_assert_eq(from, b + 1, "fetched from node %d", from);
	cr_assert(tt_proc_log_wait(&C.p[c], "R023 cannot fetch snapshot", 100),
	    "node %d did not try the taker first", c + 1);
	cr_assert(tc_converged(&C, b, 15000));
	tt_proc_stop_clean(&C.p[b]);
	tt_proc_stop_clean(&C.p[c]);
	{
		tli_topic_info ti;
		tli_store *s = tc_open_store(&C, c);

		TL_PASS(tli_store_topic_get(s, "t", &ti));
		cr_assert_eq(ti.messages, 600);
		tli_store_close(s);
	}
}

/* A store larger than cluster_snapshot_max: every snapshot is refused
 * (R006) and the log is kept, and nothing else changes. libraft 0.15 takes
 * any error but RAFT_BUSY from the state machine's snapshot call as a
 * failed apply, and a follower then leaves the leader's AppendEntries
 * unanswered: the leader, hearing from no majority, stepped down. */
Test(snapshot, a_refused_snapshot_costs_no_leadership)
{
	int leader, n = 0;
	int64_t term, end;
	rc_client *cl;

	tc_init(&C, 3, "cluster-r");
	C.election_ms = 500;
	C.snapshot_entries = 8;
	for (int i = 0; i < 3; i++) {
		/* smaller than any checkpoint: every one is refused */
		tc_node_set(&C, i, "cluster_snapshot_max", "4096");
	}
	tc_start_all(&C);
	leader = tc_leader(&C, 10000);
	cr_assert(leader >= 0, "no leader within 10 s");
	term = tc_metric(&C, leader, "timeline_cluster_term");
	cl = rc_open(C.url[leader], "tester");
	/* back to back for several election timeouts: every AppendEntries
	 * then carries a commit for the followers to apply */
	end = tli_mono_ms() + 4 * C.election_ms;
	while (tli_mono_ms() < end) {
		char id[16];

		snprintf(id, sizeof(id), "m%06d", n++);
		TL_PASS(tc_create(cl, id, NULL, 0), "create %s", id);
	}
	rc_close(cl);
	cr_assert(tt_proc_log_wait(&C.p[leader], "R006 snapshot", 1000),
	    "no snapshot was refused");
	cr_assert_eq(tc_leader(&C, 10000), leader);
	cr_assert_eq(tc_metric(&C, leader, "timeline_cluster_term"), term,
	    "an election happened");
	cr_assert(tc_converged(&C, leader, 15000));
}

static void
enc_snap_read(tlp_w *w, const void *arg)
{
	tlp_enc_snap_read(w, arg);
}

/* SNAPSHOT_READ of name/file from offset: the broker's error; on TL_OK the
 * file's size in *size and its part in buf (at most cap bytes). */
static int
snap_read(rc_client *cl, const char *name, const char *file, uint64_t off,
    uint64_t *size, uint8_t *buf, size_t cap, size_t *got)
{
	tlp_snap_read q = {TLP_STR(name), TLP_STR(file), off, cap};
	tlp_snap_chunk c;
	rc_frame *f = NULL;
	tlp_r r;
	int rv = rc_req(cl, TLP_OP_SNAPSHOT_READ, enc_snap_read, &q, &f, &r);

	if (rv == TL_OK) {
		cr_assert_eq(tlp_dec_snap_chunk(&r, &c), TL_OK);
		cr_assert_leq(c.data_len, cap);
		memcpy(buf, c.data, c.data_len);
		*size = c.size;
		*got = c.data_len;
	}
	rc_frame_free(f);
	return rv;
}

/* The newest snapshot node i keeps (the next ones remove the older), and
 * one table file of it. */
static void
a_kept_file(int i, char *name, size_t ncap, char *file, size_t fcap)
{
	char dir[1000];
	DIR *d;
	struct dirent *e;
	unsigned long long best = 0, id, ix;

	name[0] = file[0] = '\0';
	snprintf(dir, sizeof(dir), "%s/snapshots", C.data[i]);
	cr_assert_not_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL) {
		if (sscanf(e->d_name, "%llu-%llu", &id, &ix) == 2 &&
		    strchr(e->d_name, '.') == NULL && ix > best &&
		    strlen(e->d_name) < ncap) {
			best = ix;
			snprintf(name, ncap, "%s", e->d_name);
		}
	}
	closedir(d);
	cr_assert(name[0] != '\0', "node %d keeps no snapshot", i + 1);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s", C.data[i], name);
	cr_assert_not_null(d = opendir(dir));
	while ((e = readdir(d)) != NULL && file[0] == '\0') {
		if (strstr(e->d_name, ".sst") != NULL) {
			snprintf(file, fcap, "%s", e->d_name);
		}
	}
	closedir(d);
	cr_assert(file[0] != '\0', "snapshot %s has no table file", name);
}

static void
enc_snap_latest(tlp_w *w, const void *arg)
{
	tlp_enc_snap_latest(w, arg);
}

/* SNAPSHOT_LATEST from min: the broker's error; on TL_OK the manifest's
 * snapshot name and store index. */
static int
snap_latest(rc_client *cl, uint64_t min, char *name, size_t cap, uint64_t *ix)
{
	tlp_snap_latest q = {min};
	tlp_snap_chunk c;
	rc_frame *f = NULL;
	tlp_r r;
	int rv =
	    rc_req(cl, TLP_OP_SNAPSHOT_LATEST, enc_snap_latest, &q, &f, &r);

	if (rv == TL_OK) {
		const uint8_t *p;
		uint32_t nl = 0;

		cr_assert_eq(tlp_dec_snap_chunk(&r, &c), TL_OK);
		p = c.data;
		cr_assert_geq(c.data_len, 32u);
		cr_assert_eq(memcmp(p, "TLSNAP02", 8), 0, "not a manifest");
		*ix = 0;
		for (int i = 7; i >= 0; i--) {
			*ix = (*ix << 8) | p[8 + i];
		}
		for (int i = 3; i >= 0; i--) {
			nl = (nl << 8) | p[24 + i];
		}
		cr_assert(nl < cap && 28 + nl <= c.data_len);
		memcpy(name, p + 28, nl);
		name[nl] = '\0';
	}
	rc_frame_free(f);
	return rv;
}

/* Any node serves the snapshots it keeps, byte for byte, and no other file:
 * names that are paths, hidden files and snapshots it does not keep are
 * refused. */
Test(snapshot, snapshot_read_serves_kept_files_and_nothing_else)
{
	static uint8_t want[1u << 20], got[1u << 20];
	char name[256], file[256], path[1200];
	uint64_t size = 0;
	size_t n = 0, have = 0;
	int leader, follower, fd;
	rc_client *cl;
	ssize_t k;

	tc_init(&C, 3, "cluster-sr");
	C.snapshot_entries = 32;
	started(&leader, &follower);
	cl = rc_open(C.url[leader], "tester");
	create_bodies(cl, 0, 64);
	create_range(cl, 0, 80);
	rc_close(cl);
	cr_assert(tc_metric(&C, leader,
	              "timeline_cluster_snapshots_taken_total") > 0);

	/* a follower serves its own (not only the leader) */
	for (int i = 0; i < 3; i++) {
		if (i == leader) {
			continue;
		}
		a_kept_file(i, name, sizeof(name), file, sizeof(file));
		snprintf(path, sizeof(path), "%s/snapshots/%s/%s", C.data[i],
		    name, file);
		cr_assert_geq(fd = open(path, O_RDONLY), 0, "%s", path);
		k = read(fd, want, sizeof(want));
		close(fd);
		cr_assert_gt(k, 0);
		cl = rc_open(C.url[i], "tester");
		/* in two parts: the first 100 bytes, then from 100 on */
		TL_PASS(snap_read(cl, name, file, 0, &size, got, 100, &n));
		cr_assert_eq(n, 100);
		TL_PASS(snap_read(cl, name, file, 100, &size, got + 100,
		    sizeof(got) - 100, &have));
		cr_assert_eq(size, (uint64_t) k, "the file's size");
		cr_assert_eq(100 + have, (size_t) k);
		cr_assert_eq(memcmp(got, want, (size_t) k), 0,
		    "node %d sent other bytes than %s holds", i + 1, path);
		/* at the end: the size, no bytes */
		TL_PASS(snap_read(
		    cl, name, file, size, &size, got, sizeof(got), &n));
		cr_assert_eq(n, 0);

		cr_assert_eq(snap_read(cl, "../store", "CURRENT", 0, &size, got,
		                 100, &n),
		    TL_EINVAL);
		cr_assert_eq(snap_read(cl, name, "../../store/CURRENT", 0,
		                 &size, got, 100, &n),
		    TL_EINVAL);
		cr_assert_eq(
		    snap_read(cl, name, ".hidden", 0, &size, got, 100, &n),
		    TL_EINVAL);
		cr_assert_eq(
		    snap_read(cl, name, "", 0, &size, got, 100, &n), TL_EINVAL);
		cr_assert_eq(snap_read(cl, "take.tmp", "CURRENT", 0, &size, got,
		                 100, &n),
		    TL_EINVAL);
		cr_assert_eq(snap_read(cl, "9-999999", "CURRENT", 0, &size, got,
		                 100, &n),
		    TL_ENOTFOUND);
		cr_assert_eq(
		    snap_read(cl, name, "NOSUCH.sst", 0, &size, got, 100, &n),
		    TL_ENOTFOUND);
		/* still serving */
		TL_PASS(snap_read(cl, name, file, 0, &size, got, 10, &n));

		/* SNAPSHOT_LATEST: the newest kept, at the index its name
		 * gives; none that far; one taken for a later index */
		{
			char latest[256], dir[1200];
			unsigned long long nid, nix;
			uint64_t ix = 0, past;
			struct stat st;

			TL_PASS(
			    snap_latest(cl, 0, latest, sizeof(latest), &ix));
			a_kept_file(i, name, sizeof(name), file, sizeof(file));
			cr_assert_str_eq(latest, name);
			cr_assert_eq(sscanf(name, "%llu-%llu", &nid, &nix), 2);
			cr_assert_eq(ix, (uint64_t) nix);
			cr_assert_eq(snap_latest(cl, UINT64_C(1) << 60, latest,
			                 sizeof(latest), &ix),
			    TL_ENOTFOUND);
			/* one more entry: the store is past the newest */
			{
				rc_client *lc =
				    rc_open(C.url[leader], "tester");
				char id[16];

				snprintf(id, sizeof(id), "x%d", i);
				TL_PASS(tc_create(lc, id, NULL, 0));
				rc_close(lc);
				cr_assert(tc_converged(&C, leader, 10000));
			}
			past = nix + 1;
			TL_PASS(
			    snap_latest(cl, past, latest, sizeof(latest), &ix));
			cr_assert_geq(ix, past);
			snprintf(dir, sizeof(dir), "%s/snapshots/%s", C.data[i],
			    latest);
			cr_assert_eq(stat(dir, &st), 0,
			    "node %d sent %s, which it does not keep", i + 1,
			    latest);
		}
		rc_close(cl);
	}
}

/* With auth = on the nodes fetch a snapshot as cluster_token's principal,
 * an admin one; a session of another principal reads no snapshot. */
Test(snapshot, with_auth_on_nodes_fetch_with_the_cluster_token)
{
	char creds[700], text[1024], name[256], file[256];
	uint8_t buf[64];
	uint64_t size = 0;
	size_t n = 0;
	int leader, follower, from = 0;
	rc_client *cl;

	tc_init(&C, 3, "cluster-sa");
	C.snapshot_entries = 16;
	snprintf(creds, sizeof(creds), "%s/credentials", C.dir);
	snprintf(text, sizeof(text),
	    "[principal nodes]\ntoken_sha256 = %s\nadmin = yes\n"
	    "group = *\nproduce = *\nconsume = *:*\n\n"
	    "[principal app]\ntoken_sha256 = %s\ngroup = app\n"
	    "produce = t\n",
	    ab_hash("node-secret"), ab_hash("app-secret"));
	tt_write_file(creds, text);
	for (int i = 0; i < 3; i++) {
		tc_node_set(&C, i, "auth", "on");
		tc_node_set(&C, i, "credentials", "%s", creds);
		tc_node_set(&C, i, "cluster_token", "node-secret");
	}
	started(&leader, &follower);
	cr_assert_not_null(cl = rc_connect(C.url[leader], 10000));
	TL_PASS(
	    rc_hello_token(cl, "tester", "app-secret", tli_wall_ms(), NULL));
	create_range(cl, 0, 100);
	/* not an admin: no snapshot for it */
	a_kept_file(leader, name, sizeof(name), file, sizeof(file));
	cr_assert_eq(snap_read(cl, name, file, 0, &size, buf, sizeof(buf), &n),
	    TL_ENOTAUTH);

	tt_proc_kill(&C.p[follower]);
	cr_assert_eq(tli_rmtree(C.data[follower]), 0);
	create_range(cl, 100, 200);
	rc_close(cl);
	tc_start(&C, follower);
	cr_assert(
	    tt_proc_log_wait(&C.p[follower], "R005 snapshot installed", 15000),
	    "the follower installed no snapshot");
	cr_assert_gt(fetched(follower, &from), 0);
	cr_assert_eq(from, leader + 1);
	cr_assert(
	    tc_converged(&C, leader, 15000), "the follower did not catch up");
}
