/*
 * End-to-end, the real broker: a long read (COUNT over a large topic) from
 * one client does not hold up other clients. While one session has COUNTs
 * running (pipelined, a second or more of scanning in all), another
 * session's creates are answered within a bound well under that, and a
 * message it schedules meanwhile is delivered on time. Within the reading
 * session, order is kept: a request sent behind a COUNT is handled after
 * the COUNT's reply is queued, so a DELETE pipelined behind a COUNT does
 * not change what the COUNT saw, and the replies come in request order.
 * The threads that scan run 10 nicer than the broker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tltest.h"
#include "raw_client.h"

RC_SUITE(longread);

/* Messages in the big topic; their count must take a while to scan (the
 * sanitizers slow the fill more than the scan). */
#if defined(__SANITIZE_ADDRESS__)
#define NBIG 100000
#else
#define NBIG 200000
#endif
#define CHUNK 4096
/* The COUNTs side by side must scan for at least this long (ms). */
#define SIDE_MS 3000
#define MAX_SIDE 256
/* Each create of the other session must be answered within this (ms). */
#if defined(__SANITIZE_ADDRESS__)
#define PUT_MS 400
#else
#define PUT_MS 200
#endif
#define SIDE_ID 0x70000000u

static void
enc_topic(tlp_w *w, const void *arg)
{
	tlp_enc_topic_create(w, arg);
}

typedef struct count_arg {
	const char *topic;
} count_arg;

static void
enc_count(tlp_w *w, const void *arg)
{
	const count_arg *a = arg;

	tlp_enc_count(w, TLP_STR(a->topic), 0, (int64_t) 1 << 60);
}

static void
enc_ping(tlp_w *w, const void *arg)
{
	(void) arg;
	tlp_enc_ping(w, 0);
}

static void
enc_batch(tlp_w *w, const void *arg)
{
	tlp_enc_batch(w, arg);
}

/* Send one request frame with the given id without waiting. */
static void
send_req(rc_client *c, uint8_t op, uint32_t id, rc_enc_fn enc, const void *a)
{
	tli_buf b;
	tlp_w w;

	tli_buf_init(&b);
	tlp_frame_begin(&b, &w, op, 0, id);
	enc(&w, a);
	TL_PASS(tlp_frame_end(&b, 0));
	cr_assert_eq(rc_send_raw(c, b.data, b.len), 0);
	tli_buf_fini(&b);
}

/* The next reply (pushes skipped), within timeout_ms. */
static rc_frame *
next_reply(rc_client *c, int timeout_ms)
{
	int64_t end = tli_mono_ms() + timeout_ms;
	rc_frame *f;

	while ((f = rc_next_frame(c, (int) (end - tli_mono_ms()))) != NULL) {
		if (f->h.flags & TLP_F_REPLY) {
			return f;
		}
		rc_frame_free(f);
		if (tli_mono_ms() >= end) {
			break;
		}
	}
	return NULL;
}

/* Decode a COUNT reply: the total, or -(error). */
static int64_t
count_of(rc_frame *f)
{
	tlp_r r;
	uint64_t a, wt, p;
	tlp_str detail;
	size_t nf;
	int rv, err;

	rc_frame_body(f, &r);
	if ((rv = tlp_dec_reply_head(&r, &err, &detail, &nf)) != TL_OK) {
		return -rv;
	}
	if (err != TL_OK) {
		return -err;
	}
	if ((rv = tlp_dec_counts(&r, &a, &wt, &p)) != TL_OK) {
		return -rv;
	}
	return (int64_t) (a + wt + p);
}

/* Start the broker without fsync (the fill is what takes time here). */
static void
start(const char *tag, bool metrics)
{
	rc_broker_init(&B, tag);
	B.durability = "none";
	B.log_level = "info";
	if (metrics) {
		B.metrics_port = tt_free_port();
		cr_assert(B.metrics_port > 0);
	}
	rc_broker_spawn(&B, 20000);
}

/* Fill topic "big" with NBIG messages due in an hour. */
static void
fill_big(rc_client *p)
{
	static tlp_item items[CHUNK];
	tlp_topic t = {.name = TLP_STR("big"),
	    .buckets = 1,
	    .default_lease_ms = 30000,
	    .max_lease_ms = 60000};
	tlp_batch bt;
	uint32_t id0 = 0x10000000u;
	size_t sent = 0, nreq = 0;

	TL_PASS(rc_req(p, TLP_OP_TOPIC_CREATE, enc_topic, &t, NULL, NULL));
	for (size_t i = 0; i < CHUNK; i++) {
		items[i] = (tlp_item){.id = TLP_STR(""),
		    .ts = 3600 * 1000,
		    .rel = true,
		    .body = "x",
		    .body_len = 1};
	}
	bt.topic = TLP_STR("big");
	bt.who = TLP_STR("g");
	bt.items = items;
	/* Pipelined, a few in flight. */
	for (size_t got = 0; got * CHUNK < NBIG;) {
		while (sent < NBIG && nreq - got < 8) {
			bt.n = NBIG - sent < CHUNK ? NBIG - sent : CHUNK;
			send_req(p, TLP_OP_CREATE, id0 + (uint32_t) nreq,
			    enc_batch, &bt);
			sent += bt.n;
			nreq++;
		}
		rc_frame *f = next_reply(p, 20000);
		cr_assert_not_null(f, "a fill batch was not answered");
		rc_frame_free(f);
		got++;
		if (got == nreq && sent >= NBIG) {
			break;
		}
	}
}

/* One COUNT of "big" on c: its duration in ms. */
static int64_t
count_once(rc_client *c)
{
	count_arg a = {"big"};
	rc_frame *f;
	int64_t t0 = tli_mono_ms(), n;

	TL_PASS(rc_call(c, TLP_OP_COUNT, enc_count, &a, 30000, &f));
	n = count_of(f);
	cr_assert_eq(n, NBIG, "COUNT saw %lld", (long long) n);
	rc_frame_free(f);
	return tli_mono_ms() - t0;
}

/* The value of the metric line starting with name, or -1. */
static int64_t
metric(const char *name)
{
	int status = 0;
	char *body = rc_http_get(B.metrics_port, "/metrics", 2000, &status);
	char *p;
	long long v = -1;

	if (status == 200 && body != NULL) {
		for (p = body; (p = strstr(p, name)) != NULL; p++) {
			if ((p == body || p[-1] == '\n') &&
			    p[strlen(name)] == ' ') {
				sscanf(p + strlen(name), " %lld", &v);
				break;
			}
		}
	}
	free(body);
	return v;
}

/* Wait until RocksDB has no flush or compaction running or pending: the
 * fill leaves some behind, and a write that meets the end of one on a slow
 * disk measures the disk, not the reads. */
static void
settle(void)
{
	static const char *const gauges[] = {
	    "timeline_rocksdb_running_flushes",
	    "timeline_rocksdb_running_compactions",
	    "timeline_rocksdb_immutable_memtables",
	    "timeline_rocksdb_pending_compaction_bytes",
	};
	int64_t deadline = tli_mono_ms() + 30000;
	size_t i = 0;

	while (i < sizeof(gauges) / sizeof(gauges[0])) {
		if (metric(gauges[i]) == 0) {
			i++;
			continue;
		}
		cr_assert(tli_mono_ms() < deadline, "%s still not 0 after 30 s",
		    gauges[i]);
		tt_nap_ms(20);
		i = 0;
	}
}

/* The nice value in a /proc .../stat file, or INT32_MIN. */
static int
stat_nice(const char *path)
{
	char buf[1024], *p;
	FILE *f = fopen(path, "r");
	size_t n;
	int nice = INT32_MIN;

	if (f == NULL) {
		return nice;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* after "(comm)": state is field 3, nice field 19 */
	if ((p = strrchr(buf, ')')) != NULL) {
		p++;
		for (int field = 3; field <= 19 && p != NULL; field++) {
			long v;

			p += strspn(p, " ");
			if (field == 19 && sscanf(p, "%ld", &v) == 1) {
				nice = (int) v;
			}
			p = strchr(p, ' ');
		}
	}
	return nice;
}

/* The nice values of pid's threads named comm (at most max); how many. */
static int
thread_nices(pid_t pid, const char *comm, int *out, int max)
{
	pid_t tids[16];
	int n = tt_threads_named(pid, comm, tids, max < 16 ? max : 16);

	for (int i = 0; i < n; i++) {
		char path[96];

		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int) pid,
		    (int) tids[i]);
		out[i] = stat_nice(path);
	}
	return n;
}

Test(longread, a_long_count_does_not_hold_up_other_sessions)
{
	rc_client *p, *side, *c;
	count_arg a = {"big"};
	int64_t one, t0, worst = 0, due = 0, late, queue_ms, held;
	int k, puts = 0, slow = 0;
	rc_deliver dv;

	start("longread", true);
	p = rc_open(B.url, "producer");
	side = rc_open(B.url, "reader");
	c = rc_open(B.url, "consumer");
	fill_big(p);
	settle();
	one = count_once(side);
	one = one < 1 ? 1 : one;
	k = (int) ((SIDE_MS + one - 1) / one);
	k = k > MAX_SIDE ? MAX_SIDE : k;
	queue_ms = one * k;
	cr_log_info("one COUNT of %d messages: %lld ms; %d side by side", NBIG,
	    (long long) one, k);
	cr_assert(queue_ms >= 2000,
	    "the COUNTs would scan for %lld ms only: too short to show "
	    "anything",
	    (long long) queue_ms);
	/* A create or delivery held up behind the COUNTs waits for most of
	 * their queue; one that is not is answered in milliseconds. The line
	 * between the two is far from both, so that a stall of this shared
	 * machine's disk is not taken for one. */
	held = queue_ms / 3;
	TL_PASS(rc_subscribe(c, "t", "w", 30000, 10));

	/* The reading session queues k COUNTs at once. */
	t0 = tli_mono_ms();
	for (int i = 0; i < k; i++) {
		send_req(
		    side, TLP_OP_COUNT, SIDE_ID + (uint32_t) i, enc_count, &a);
	}
	tt_nap_ms(50); /* the first COUNT is being scanned */
	/* ... by threads that yield the CPU to the rest of the broker */
	{
		char path[64];
		int nices[8], nr, base;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int) B.proc.pid);
		base = stat_nice(path);
		nr = thread_nices(B.proc.pid, "tl-reader", nices, 8);
		cr_assert(base != INT32_MIN && nr >= 1,
		    "no reader thread found (broker nice %d)", base);
		for (int i = 0; i < nr; i++) {
			cr_assert_eq(nices[i], base + 10 > 19 ? 19 : base + 10,
			    "a reader thread runs at nice %d, the broker at %d",
			    nices[i], base);
		}
	}
	/* Meanwhile: one message due 300 ms ahead, then creates. */
	{
		tlp_result r;
		int64_t s0 = tli_mono_ms();

		due = tli_wall_ms() + 300;
		TL_PASS(rc_one(p, TLP_OP_CREATE, "t", "g", "due1", 0, due,
		    false, "b", &r));
		worst = tli_mono_ms() - s0;
		slow += worst >= PUT_MS;
	}
	while (tli_mono_ms() - t0 < queue_ms / 2 && puts < 50) {
		char id[16];
		int64_t s0 = tli_mono_ms(), d;

		snprintf(id, sizeof(id), "p%d", puts++);
		TL_PASS(rc_one(p, TLP_OP_CREATE, "t", "g", id, 0, 3600 * 1000,
		    true, "b", NULL));
		d = tli_mono_ms() - s0;
		worst = d > worst ? d : worst;
		slow += d >= PUT_MS;
		tt_nap_ms(20);
	}
	cr_log_info("%d creates while the COUNTs ran, the slowest %lld ms, "
	            "%d over %d ms",
	    puts + 1, (long long) worst, slow, PUT_MS);
	cr_assert(puts >= 5, "only %d creates while %lld ms of COUNTs ran",
	    puts + 1, (long long) queue_ms);
	cr_assert(worst < held,
	    "a create took %lld ms while another session's COUNTs ran "
	    "(%d COUNTs of %lld ms each)",
	    (long long) worst, k, (long long) one);
	cr_assert(slow <= 1,
	    "%d of %d creates took %d ms or more while another session's "
	    "COUNTs ran (one COUNT: %lld ms)",
	    slow, puts + 1, PUT_MS, (long long) one);

	/* The message due meanwhile was delivered, never early, and not
	 * after the COUNTs. */
	cr_assert_eq(rc_wait_deliver(c, 10000, &dv), 1, "due1 not delivered");
	late = dv.f->rx_ms - due;
	cr_assert_eq(dv.d.n, 1);
	cr_assert(late >= 0 && late < held,
	    "due1 delivered %lld ms after its due time (%d COUNTs of %lld ms "
	    "each)",
	    (long long) late, k, (long long) one);
	if (late >= PUT_MS) {
		cr_log_warn("due1 delivered %lld ms late", (long long) late);
	}
	rc_deliver_free(&dv);

	/* Every COUNT is answered, in order, with the whole topic. */
	for (int i = 0; i < k; i++) {
		rc_frame *f = next_reply(side, 30000);

		cr_assert_not_null(f, "COUNT %d not answered", i);
		cr_assert_eq(f->h.reqid, SIDE_ID + (uint32_t) i);
		cr_assert_eq(count_of(f), NBIG);
		rc_frame_free(f);
	}
	rc_close(c);
	rc_close(side);
	rc_close(p);
}

Test(longread, a_session_keeps_its_order_behind_a_long_read)
{
	rc_client *p, *side;
	count_arg a = {"big"};
	tlp_item it = {.id = TLP_STR("m1"), .ts = 3600 * 1000, .rel = true};
	tlp_batch bt = {
	    .topic = TLP_STR("big"), .who = TLP_STR("g"), .items = &it, .n = 1};
	rc_results res;
	rc_frame *f;
	tlp_r r;
	int err = -1;
	tlp_str detail;
	size_t nf;

	start("longorder", false);
	p = rc_open(B.url, "producer");
	side = rc_open(B.url, "reader");
	fill_big(p);
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "big", "g", &it, 1, &res));
	rc_results_free(&res);

	/* A COUNT, then a DELETE of m1 sent right behind it: the COUNT
	 * still sees m1 (the DELETE is handled after it) and is answered
	 * first. */
	send_req(side, TLP_OP_COUNT, 1, enc_count, &a);
	send_req(side, TLP_OP_DELETE, 2, enc_batch, &bt);
	f = next_reply(side, 30000);
	cr_assert_not_null(f);
	cr_assert_eq(f->h.reqid, 1, "the reply to %u came before the COUNT's",
	    f->h.reqid);
	cr_assert_eq(count_of(f), NBIG + 1, "the COUNT saw %lld",
	    (long long) count_of(f));
	rc_frame_free(f);
	f = next_reply(side, 30000);
	cr_assert_not_null(f);
	cr_assert_eq(f->h.reqid, 2);
	rc_frame_body(f, &r);
	TL_PASS(tlp_dec_reply_head(&r, &err, &detail, &nf));
	TL_PASS(err, "the DELETE of m1");
	rc_frame_free(f);

	/* A COUNT, then a GET of the deleted m1: the GET (a quick read) is
	 * answered after the COUNT. */
	send_req(side, TLP_OP_COUNT, 3, enc_count, &a);
	{
		tli_buf b;
		tlp_w w;

		tli_buf_init(&b);
		tlp_frame_begin(&b, &w, TLP_OP_GET, 0, 4);
		tlp_enc_get(&w, TLP_STR("big"), TLP_STR("m1"));
		TL_PASS(tlp_frame_end(&b, 0));
		cr_assert_eq(rc_send_raw(side, b.data, b.len), 0);
		tli_buf_fini(&b);
	}
	f = next_reply(side, 30000);
	cr_assert_not_null(f);
	cr_assert_eq(f->h.reqid, 3, "the GET was answered before the COUNT");
	cr_assert_eq(count_of(f), NBIG);
	rc_frame_free(f);
	f = next_reply(side, 30000);
	cr_assert_not_null(f);
	cr_assert_eq(f->h.reqid, 4);
	rc_frame_body(f, &r);
	cr_assert_eq(tlp_dec_reply_head(&r, &err, &detail, &nf), TL_OK);
	cr_assert_eq(
	    err, TL_ENOTFOUND, "GET after DELETE: %s", tl_errname(err));
	rc_frame_free(f);
	rc_close(side);
	rc_close(p);
}

Test(longread, a_read_outlived_by_its_session_or_the_broker)
{
	rc_client *p, *side, *other;
	count_arg a = {"big"};
	rc_frame *f;
	int64_t deadline, one;
	int k;

	start("longclose", true);
	p = rc_open(B.url, "producer");
	fill_big(p);

	/* A session that sends COUNTs and goes away: the broker drops the
	 * replies, frees what they held and goes on. */
	side = rc_open(B.url, "leaver");
	for (int i = 0; i < 3; i++) {
		send_req(
		    side, TLP_OP_COUNT, SIDE_ID + (uint32_t) i, enc_count, &a);
	}
	tt_nap_ms(50);
	rc_close(side);
	one = count_once(p);
	one = one < 1 ? 1 : one;
	k = (int) ((2000 + one - 1) / one);
	k = k > MAX_SIDE ? MAX_SIDE : k;
	deadline = tli_mono_ms() + 10000;
	while (metric("timeline_reads_running") != 0) {
		cr_assert(tli_mono_ms() < deadline,
		    "reads still running 10 s after their session closed");
		tt_nap_ms(20);
	}
	cr_assert_geq(metric("timeline_reads_total"), 2);

	/* SIGTERM while a COUNT is scanning and others (about 2 s of
	 * scanning in all) wait behind it: the
	 * broker still stops cleanly (and, in the sanitizer build, without
	 * a leak). */
	other = rc_open(B.url, "reader");
	for (int i = 0; i < k; i++) {
		send_req(
		    other, TLP_OP_COUNT, SIDE_ID + (uint32_t) i, enc_count, &a);
	}
	send_req(other, TLP_OP_PING, SIDE_ID + (uint32_t) k, enc_ping, NULL);
	/* The reader thread runs niced: on a busy machine its first scan
	 * may start well after the request arrives. */
	deadline = tli_mono_ms() + 10000;
	while (metric("timeline_reads_running") != 1) {
		cr_assert(tli_mono_ms() < deadline,
		    "no COUNT scanning 10 s after %d were sent", k);
		tt_nap_ms(5);
	}
	tt_proc_stop_clean(&B.proc);
	while ((f = rc_next_frame(other, 100)) != NULL) {
		rc_frame_free(f);
	}
	rc_close(other);
	rc_close(p);
}
