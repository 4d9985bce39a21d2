/*
 * End-to-end, the real broker's Prometheus endpoint, read over plain HTTP:
 * a client whose clock is an hour ahead shows up with that offset; the
 * delivery counters and the per-consumer gauges follow what a consumer
 * does; every group commit is timed in the write+fsync histogram; a lease
 * durable only after its due time is counted; the RocksDB build kind it
 * reports is the library it runs on.
 */
#include <dlfcn.h>

#include "tltest.h"
#include "raw_client.h"

RC_SUITE(metrics);

/* Start the broker with metrics on a free port and wait until /metrics
 * answers 200. */
static void
start_with_metrics_args(const char *tag, const char *const *args)
{
	int64_t deadline;

	rc_broker_init(&B, tag);
	for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
		B.args[i] = args[i];
	}
	B.metrics_port = tt_free_port();
	cr_assert(B.metrics_port > 0);
	rc_broker_spawn(&B, 20000);
	deadline = tli_mono_ms() + 10000;
	for (;;) {
		int status = 0;
		char *body =
		    rc_http_get(B.metrics_port, "/metrics", 2000, &status);
		free(body);
		if (status == 200) {
			break;
		}
		cr_assert(tli_mono_ms() < deadline,
		    "no metrics at 127.0.0.1:%d within 10 s", B.metrics_port);
		tt_nap_ms(20);
	}
}

static void
start_with_metrics(const char *tag)
{
	start_with_metrics_args(tag, NULL);
}

/* The value of the first sample whose line starts with `prefix` (name and
 * labels); false if there is none. */
static bool
sample(const char *text, const char *prefix, double *v)
{
	size_t pl = strlen(prefix);

	for (const char *p = text; p != NULL && *p != '\0';) {
		const char *eol = strchr(p, '\n');
		if (strncmp(p, prefix, pl) == 0 && p[pl] == ' ') {
			*v = strtod(p + pl + 1, NULL);
			return true;
		}
		p = eol != NULL ? eol + 1 : NULL;
	}
	return false;
}

/* Poll /metrics until the sample exists (at most timeout_ms). */
static double
wait_sample(const char *prefix, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	char *last = NULL;

	for (;;) {
		int status = 0;
		double v;
		char *body =
		    rc_http_get(B.metrics_port, "/metrics", 2000, &status);

		if (status == 200 && body != NULL && sample(body, prefix, &v)) {
			free(body);
			free(last);
			return v;
		}
		free(last);
		last = body;
		if (tli_mono_ms() >= deadline) {
			fprintf(stderr, "%s\n", last ? last : "(no metrics)");
			free(last);
			cr_assert_fail(
			    "no sample %s within %d ms", prefix, timeout_ms);
		}
		tt_nap_ms(50);
	}
}

static void
enc_ping(tlp_w *w, const void *arg)
{
	tlp_enc_ping(w, *(const int64_t *) arg);
}

/* The clock offset the broker measured for a session (at most 5 s). */
static double
clock_offset(uint64_t session, const char *client)
{
	char prefix[256];

	snprintf(prefix, sizeof(prefix),
	    "timeline_client_clock_offset_ms{session=\"%llu\",client=\"%s\"}",
	    (unsigned long long) session, client);
	return wait_sample(prefix, 5000);
}

Test(metrics, skewed_client_clock_shows_in_metrics)
{
	rc_client *skewed, *normal;
	tlp_hello_rep hs, hn;
	double off;

	start_with_metrics("e2e-skew");
	skewed = rc_connect(B.url, 10000);
	normal = rc_connect(B.url, 10000);
	cr_assert_not_null(skewed);
	cr_assert_not_null(normal);
	TL_PASS(rc_hello(skewed, "skewed", tli_wall_ms() + 3600000, &hs));
	TL_PASS(rc_hello(normal, "normal", tli_wall_ms(), &hn));
	/* The broker answered with its own clock, which is ours. */
	cr_assert(llabs(hs.broker_ms - tli_wall_ms()) < 5000);

	off = clock_offset(hs.session_id, "skewed");
	cr_assert(off >= 3600000 - 5000 && off <= 3600000 + 5000,
	    "the skewed client's offset reads %.0f ms, expected about 3600000",
	    off);
	off = clock_offset(hn.session_id, "normal");
	cr_assert(off >= -5000 && off <= 5000,
	    "the normal client's offset reads %.0f ms, expected about 0", off);

	/* The clock is measured again on PING: the client fixed its clock. */
	{
		int64_t now = tli_wall_ms();
		rc_frame *f;
		TL_PASS(rc_req(skewed, TLP_OP_PING, enc_ping, &now, &f, NULL));
		rc_frame_free(f);
	}
	off = clock_offset(hs.session_id, "skewed");
	cr_assert(off >= -5000 && off <= 5000,
	    "after a PING with a right clock the offset still reads %.0f ms",
	    off);
	rc_close(skewed);
	rc_close(normal);
}

Test(metrics, delivery_counters_follow_a_consumer)
{
	rc_client *p, *c;
	tlp_item items[3];
	const char *ids[3] = {"a", "b", "c"};
	rc_results res;
	rc_deliver dv;
	size_t n = 0;
	uint64_t ver[3];
	char idb[3][8];

	start_with_metrics("e2e-counters");
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w1", 30000, 8));
	memset(items, 0, sizeof(items));
	for (int i = 0; i < 3; i++) {
		items[i].id = TLP_STR(ids[i]);
		items[i].rel = true;
		items[i].ts = 100;
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, 3, &res));
	rc_results_free(&res);
	while (n < 3) {
		cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1);
		for (size_t i = 0; i < dv.d.n; i++, n++) {
			snprintf(idb[n], sizeof(idb[n]), "%.*s",
			    (int) dv.d.v[i].id.n, dv.d.v[i].id.p);
			ver[n] = dv.d.v[i].version;
		}
		rc_deliver_free(&dv);
	}
	cr_assert_eq(wait_sample("timeline_consumer_held{topic=\"t\",consumer="
	                         "\"w1\"}",
	                 5000),
	    3);
	cr_assert_eq(wait_sample("timeline_delivered_total", 5000), 3);
	cr_assert_eq(wait_sample("timeline_delivered_early_total", 5000), 0);
	cr_assert_eq(wait_sample("timeline_lateness_ms_count", 5000), 3);
	for (int i = 0; i < 3; i++) {
		tlp_result r;
		TL_PASS(rc_one(c, TLP_OP_ACK, "t", "w1", idb[i], ver[i], 0,
		    false, NULL, &r));
	}
	cr_assert_eq(wait_sample("timeline_consumer_held{topic=\"t\",consumer="
	                         "\"w1\"}",
	                 5000),
	    0);
	/* Every group commit (the creates, the lease, the acks) is timed
	 * once in the write+fsync histogram; nothing waits for the writer
	 * and RocksDB is not stalling writes at rest. */
	double batches = wait_sample("timeline_commit_batches_total", 5000);
	cr_assert_geq(batches, 3);
	cr_assert_eq(
	    wait_sample("timeline_commit_sync_ms_count", 5000), batches);
	cr_assert_eq(
	    wait_sample("timeline_commit_sync_ms_bucket{le=\"+Inf\"}", 5000),
	    batches);
	cr_assert_eq(wait_sample("timeline_commit_queued_ops", 5000), 0);
	cr_assert_eq(wait_sample("timeline_rocksdb_write_stopped", 5000), 0);
	/* RocksDB's memory: the memtables hold the creates (none was
	 * flushed yet), the block cache stays within its 32 MiB */
	cr_assert_gt(wait_sample("timeline_rocksdb_memtable_bytes", 5000), 0);
	cr_assert_geq(
	    wait_sample("timeline_rocksdb_table_readers_bytes", 5000), 0);
	cr_assert_eq(
	    wait_sample("timeline_rocksdb_block_cache_capacity_bytes", 5000),
	    32.0 * 1024 * 1024, "the default block_cache_mb");
	cr_assert_leq(wait_sample("timeline_rocksdb_block_cache_bytes", 5000),
	    32.0 * 1024 * 1024);
	rc_close(p);
	rc_close(c);
}

/* The only message of the next DELIVER: its id must be `id`; when it
 * arrived (wall ms) and its version. */
static int64_t
take_one(rc_client *c, const char *id, uint64_t *version)
{
	rc_deliver dv;
	int64_t rx;

	cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1, "%s did not come", id);
	cr_assert_eq(dv.d.n, 1);
	cr_assert_eq(dv.d.v[0].id.n, strlen(id));
	cr_assert_eq(memcmp(dv.d.v[0].id.p, id, dv.d.v[0].id.n), 0);
	rx = dv.f->rx_ms;
	*version = dv.d.v[0].version;
	rc_deliver_free(&dv);
	return rx;
}

/* Every group commit takes 1.5 s and leases are taken 1 s ahead: a lease
 * asked for before its message's due time becomes durable at least 0.5 s
 * after it, and is counted in timeline_leases_late_total (lease_ahead_ms
 * is shorter than the store's commits); a message that was already due
 * when it was leased is late too, but not counted there. (Wide margins:
 * the dispatcher asks a second ahead, however slow the machine.) */
Test(metrics, a_lease_durable_after_its_due_time_is_counted_late)
{
	static const char *const args[] = {
	    "--fsync-delay", "1500", "--lease-ahead", "1000", NULL};
	rc_client *p, *c;
	tlp_result res;
	uint64_t v;
	int64_t due, rx;

	start_with_metrics_args("e2e-late-leases", args);
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w1", 30000, 8));
	due = tli_wall_ms() + 4000;
	TL_PASS(rc_one(
	    p, TLP_OP_CREATE, "t", "app", "ahead", 0, due, false, "x", &res));
	rx = take_one(c, "ahead", &v);
	cr_assert_geq(rx, due + 400,
	    "pushed %lld ms after its due time, before its lease could be "
	    "durable",
	    (long long) (rx - due));
	cr_assert_eq(wait_sample("timeline_leases_late_total", 5000), 1);
	TL_PASS(
	    rc_one(c, TLP_OP_ACK, "t", "w1", "ahead", v, 0, false, NULL, &res));
	TL_PASS(
	    rc_one(p, TLP_OP_CREATE, "t", "app", "now", 0, 0, true, "x", &res));
	take_one(c, "now", &v);
	cr_assert_eq(wait_sample("timeline_leases_late_total", 5000), 1);
	cr_assert_eq(wait_sample("timeline_delivered_early_total", 5000), 0);
	rc_close(p);
	rc_close(c);
}

/* A lease taken a second ahead is durable long before its due time: the
 * push thread sends the message at that time, and counts the send (one
 * round, its time); a message already due when leased is pushed on the
 * lease's completion instead, not by the push thread. */
Test(metrics, a_push_at_its_due_time_counts_as_a_push_thread_send)
{
	static const char *const args[] = {"--lease-ahead", "1000", NULL};
	rc_client *p, *c;
	tlp_result res;
	uint64_t v;
	int64_t due;

	start_with_metrics_args("e2e-push-sends", args);
	p = rc_open(B.url, "producer");
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "w1", 30000, 8));
	TL_PASS(
	    rc_one(p, TLP_OP_CREATE, "t", "app", "now", 0, 0, true, "x", &res));
	take_one(c, "now", &v);
	TL_PASS(
	    rc_one(c, TLP_OP_ACK, "t", "w1", "now", v, 0, false, NULL, &res));
	cr_assert_eq(wait_sample("timeline_push_sends_total", 5000), 0,
	    "a message due when leased went through the push thread");
	due = tli_wall_ms() + 3000;
	TL_PASS(rc_one(
	    p, TLP_OP_CREATE, "t", "app", "later", 0, due, false, "x", &res));
	take_one(c, "later", &v);
	cr_assert_eq(wait_sample("timeline_delivered_early_total", 5000), 0);
	cr_assert_eq(wait_sample("timeline_push_sends_total", 5000), 1);
	cr_assert_gt(wait_sample("timeline_push_send_seconds_total", 5000), 0);
	cr_assert_leq(wait_sample("timeline_push_sends_slow_total", 5000), 1);
	cr_assert_eq(wait_sample("timeline_leases_late_total", 5000), 0);
	rc_close(p);
	rc_close(c);
}

/* The path of the librocksdb the broker process has mapped. */
static bool
mapped_rocksdb(pid_t pid, char *out, size_t cap)
{
	char path[64], line[1024];
	FILE *f;
	bool found = false;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int) pid);
	cr_assert_not_null(f = fopen(path, "r"));
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		char *p = strchr(line, '/');
		if (p != NULL && strstr(p, "/librocksdb.so") != NULL) {
			p[strcspn(p, "\n")] = '\0';
			snprintf(out, cap, "%s", p);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* An operator reading the broker's start line or metrics learns whether
 * its RocksDB runs its assertions (Debian's does: slower; README, "Build
 * options"). Checked against the library the process really mapped: only
 * a build without NDEBUG has RocksDB's test sync points. */
Test(metrics, rocksdb_build_kind_is_that_of_the_mapped_library)
{
	char lib[512];
	void *h;
	bool asserts;

	start_with_metrics("rdbkind");
	cr_assert(mapped_rocksdb(B.proc.pid, lib, sizeof(lib)),
	    "timelined has no librocksdb mapped");
	cr_assert_not_null(
	    h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL), "%s: %s", lib, dlerror());
	asserts = dlsym(h, "_ZN7rocksdb9SyncPoint11GetInstanceEv") != NULL;
	dlclose(h);
	cr_assert_eq(wait_sample("timeline_rocksdb_assertions", 5000),
	    asserts ? 1 : 0, "%s", lib);
	cr_assert(tt_proc_log_wait(&B.proc,
	              asserts ? "RocksDB built with its assertions on"
	                      : "RocksDB release build",
	              5000),
	    "the B002 line does not say what %s is", lib);
}

/* An operator who bounds the broker's memory sets the block cache's share
 * of it: the capacity RocksDB runs with is the one asked for. */
Test(metrics, the_block_cache_is_the_size_asked_for)
{
	static const char *const args[] = {"--block-cache", "8", NULL};

	start_with_metrics_args("bcache", args);
	cr_assert_eq(
	    wait_sample("timeline_rocksdb_block_cache_capacity_bytes", 5000),
	    8.0 * 1024 * 1024);
	cr_assert_leq(wait_sample("timeline_rocksdb_block_cache_bytes", 5000),
	    8.0 * 1024 * 1024);
}
