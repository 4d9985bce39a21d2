/*
 * Metrics in Prometheus text format over HTTP (nng's HTTP server) at
 * /metrics. Counters are atomics updated where things happen; the topic
 * gauges, which need store reads, are refreshed once a second by a small
 * thread so that no RocksDB read runs on nng's threads.
 */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "broker.h"
#include "cluster.h"
#include "dispatch.h"
#include "metrics.h"
#include "server.h"
#include "text.h"

typedef struct tlb_mstate {
	tlb_broker *b;
	nng_http_server *srv;
	pthread_t th;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bool stop;
	tli_buf topics; /* cached topic gauges */
} mstate;

/* The timeline_messages samples of one topic. */
static void
topic_rows(tli_buf *o, const char *t, const tli_counts *c, uint64_t dead)
{
	const struct {
		const char *status;
		uint64_t v;
	} row[] = {{"available", c->available}, {"waiting", c->waiting},
	    {"processing", c->processing}, {"dead", dead}};
	char tn[4 * TL_MAX_NAME_LEN + 1];

	tli_prom_label(tn, sizeof(tn), t);
	for (size_t k = 0; k < sizeof(row) / sizeof(row[0]); k++) {
		tli_buf_printf(o,
		    "timeline_messages{topic=\"%s\",status=\"%s\"} %llu\n", tn,
		    row[k].status, (unsigned long long) row[k].v);
	}
}

static void
refresh_topics(mstate *ms)
{
	tli_topic_info *v;
	size_t n;
	tli_buf o;

	tli_buf_init(&o);
	tli_buf_printf(&o,
	    "# HELP timeline_messages Messages by topic and status.\n"
	    "# TYPE timeline_messages gauge\n");
	if (tli_store_topic_list(ms->b->store, &v, &n) == TL_OK) {
		for (size_t i = 0; i < n; i++) {
			tli_counts c = {0};

			tli_store_totals(ms->b->store, v[i].conf.name, &c);
			topic_rows(&o, v[i].conf.name, &c, v[i].dead);
		}
		tli_free(v);
	}
	pthread_mutex_lock(&ms->mtx);
	tli_buf_fini(&ms->topics);
	ms->topics = o;
	pthread_mutex_unlock(&ms->mtx);
}

static void *
refresh_main(void *arg)
{
	mstate *ms = arg;
	struct timespec ts;

	pthread_mutex_lock(&ms->mtx);
	while (!ms->stop) {
		pthread_mutex_unlock(&ms->mtx);
		refresh_topics(ms);
		pthread_mutex_lock(&ms->mtx);
		tli_deadline(&ts, CLOCK_REALTIME, 1000);
		pthread_cond_timedwait(&ms->cv, &ms->mtx, &ts);
	}
	pthread_mutex_unlock(&ms->mtx);
	return NULL;
}

/* One sample of a tlb_metrics counter: its name, type, HELP (or NULL) and
 * where it is. */
typedef struct counter_row {
	const char *name;
	const char *type;
	const char *help;
	size_t off;
} counter_row;

#define COUNTER(name, type, help, field)                       \
	{                                                      \
		name, type, help, offsetof(tlb_metrics, field) \
	}

static void
counters(tli_buf *o, tlb_metrics *m, const counter_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		_Atomic uint64_t *v =
		    (_Atomic uint64_t *) (void *) ((char *) m + rows[i].off);
		tli_prom_scalar(o, rows[i].name, rows[i].type, rows[i].help,
		    atomic_load(v));
	}
}

/* A counter by request operation. */
static void
per_op(tli_buf *o, const char *name, const char *help, _Atomic uint64_t *v)
{
	tli_buf_printf(
	    o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			tli_buf_printf(o, "%s{op=\"%s\"} %llu\n", name,
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(&v[op]));
		}
	}
}

static void
render_requests(tlb_metrics *m, tli_buf *o)
{
	per_op(o, "timeline_requests_total", "Requests by operation.", m->ops);
	tli_buf_printf(o,
	    "# HELP timeline_items_total Batch items by operation and result.\n"
	    "# TYPE timeline_items_total counter\n");
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			tli_buf_printf(o,
			    "timeline_items_total{op=\"%s\",result=\"ok\"} "
			    "%llu\n"
			    "timeline_items_total{op=\"%s\",result=\"error\"} "
			    "%llu\n",
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(&m->items_ok[op]),
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(
			        &m->items_err[op]));
		}
	}
	per_op(o, "timeline_auth_refusals_total",
	    "Requests refused with TL_ENOTAUTH, by operation.",
	    m->auth_refusals);
	per_op(o, "timeline_quota_refusals_total",
	    "Batches refused by a per-group limit, by operation.",
	    m->quota_refusals);
}

static void
render_delivery(tlb_metrics *m, tli_buf *o)
{
	static const counter_row rows[] = {
	    COUNTER("timeline_leases_total", "counter", NULL, leases),
	    COUNTER(
	        "timeline_lease_failures_total", "counter", NULL, lease_fail),
	    COUNTER(
	        "timeline_dead_lettered_total", "counter", NULL, dead_lettered),
	    COUNTER("timeline_leases_late_total", "counter",
	        "Leases asked for ahead of their due time that were durable "
	        "only after it: pushed late by the store's write.",
	        leases_late),
	    COUNTER("timeline_delivered_total", "counter", NULL, delivered),
	    COUNTER("timeline_leases_lost_total", "counter", NULL, lost),
	    COUNTER("timeline_delivered_early_total", "counter",
	        "Deliveries before their due time (always 0).", early),
	    COUNTER("timeline_push_sends_total", "counter",
	        "Rounds of pushes the push thread sent at their due time.",
	        push_sends),
	    COUNTER("timeline_push_sends_slow_total", "counter",
	        "Push thread send rounds over 0.5 ms: what fell due "
	        "meanwhile waited.",
	        push_sends_slow),
	};
	uint64_t lat[TLB_LAT_BUCKETS + 1];

	counters(o, m, rows, sizeof(rows) / sizeof(rows[0]));
	for (int i = 0; i <= TLB_LAT_BUCKETS; i++) {
		lat[i] = atomic_load(&m->lat_count[i]);
	}
	tli_prom_histogram(o, "timeline_lateness_ms",
	    "Due time to push, milliseconds.", tlb_lat_bounds, lat,
	    TLB_LAT_BUCKETS, (double) atomic_load(&m->lat_sum_us) / 1000.0);
	tli_prom_seconds(o, "timeline_push_send_seconds_total",
	    "Time the push thread spent sending its pushes.",
	    atomic_load(&m->push_send_ns));
}

static void
render_store(tlb_broker *b, tli_buf *o)
{
	tli_store_stats st;

	tli_store_get_stats(b->store, &st);
	tli_prom_scalar(o, "timeline_commit_batches_total", "counter",
	    "Group commits written.", st.batches);
	tli_prom_scalar(
	    o, "timeline_commit_ops_total", "counter", NULL, st.ops);
	tli_prom_seconds(o, "timeline_commit_sync_seconds_total",
	    "Time in the group commits' writes and log syncs.",
	    st.sync_ns_total);
	tli_prom_scalar(
	    o, "timeline_commit_batch_max", "gauge", NULL, st.max_batch);
	tli_prom_scalar(o, "timeline_commit_keys_total", "counter",
	    "Record and index keys written (put or deleted) by group commits.",
	    st.keys_written);
	tli_prom_scalar(o, "timeline_commit_keys_merged_total", "counter",
	    "Keys a later operation of the same group commit replaced, "
	    "written once.",
	    st.keys_merged);
	tli_prom_scalar(o, "timeline_writer_records_cached_total", "counter",
	    "Records the writer found in its cache.", st.records_cached);
	tli_prom_scalar(o, "timeline_writer_records_read_total", "counter",
	    "Records the writer read from RocksDB (neither: a read hint).",
	    st.records_read);
	tli_prom_scalar(o, "timeline_answers_kept_total", "counter",
	    "Write requests whose answer was kept (cluster).", st.answers_kept);
	tli_prom_scalar(o, "timeline_answers_replayed_total", "counter",
	    "Write requests sent again, answered with the kept answer.",
	    st.answers_replayed);
	tli_prom_scalar(o, "timeline_answers_expired_total", "counter",
	    "Kept answers deleted after cluster_answers_ms.",
	    st.answers_expired);
	tli_prom_histogram(o, "timeline_commit_sync_ms",
	    "Duration of one group commit's write and log sync, "
	    "milliseconds.",
	    tli_sync_bounds, st.sync_hist, TLI_SYNC_BUCKETS,
	    (double) st.sync_ns_total / 1e6);
	tli_prom_scalar(o, "timeline_commit_queued_ops", "gauge",
	    "Operations waiting for the writer.", st.queued_ops);
	tli_prom_scalar(o, "timeline_rocksdb_write_stopped", "gauge",
	    "1 while RocksDB stops writes (too many memtables or L0 files).",
	    st.write_stopped);
	tli_prom_scalar(o, "timeline_rocksdb_delayed_write_rate", "gauge",
	    "Bytes/s RocksDB slows writes to; 0 when not slowed.",
	    st.delayed_write_rate);
	tli_prom_scalar(o, "timeline_rocksdb_running_flushes", "gauge", NULL,
	    st.running_flushes);
	tli_prom_scalar(o, "timeline_rocksdb_running_compactions", "gauge",
	    NULL, st.running_compactions);
	tli_prom_scalar(o, "timeline_rocksdb_immutable_memtables", "gauge",
	    "Full memtables waiting for their flush.", st.imm_memtables);
	tli_prom_scalar(
	    o, "timeline_rocksdb_l0_files", "gauge", NULL, st.l0_files);
	tli_prom_scalar(o, "timeline_rocksdb_pending_compaction_bytes", "gauge",
	    NULL, st.pending_compaction_bytes);
	tli_prom_scalar(o, "timeline_rocksdb_memtable_bytes", "gauge",
	    "Memory of every memtable, active and full.", st.mem_memtables);
	tli_prom_scalar(o, "timeline_rocksdb_table_readers_bytes", "gauge",
	    "Memory of the open table files outside the block cache.",
	    st.mem_table_readers);
	tli_prom_scalar(o, "timeline_rocksdb_block_cache_bytes", "gauge",
	    "The block cache's use (index, filter and data blocks).",
	    st.mem_block_cache);
	tli_prom_scalar(o, "timeline_rocksdb_block_cache_capacity_bytes",
	    "gauge", "The block cache's capacity (block_cache_mb).",
	    st.block_cache_capacity);
	tli_prom_scalar(o, "timeline_rocksdb_assertions", "gauge",
	    "1 when RocksDB was built with its assertions on (slower).",
	    tli_rdb_assertions() ? 1 : 0);
	tli_prom_scalar(o, "timeline_store_writable", "gauge",
	    "0 while writes are stopped by a full disk.",
	    tli_store_writable(b->store) ? 1 : 0);
	tli_prom_scalar(o, "timeline_store_write_stops_total", "counter",
	    "Times writes stopped for a full disk.",
	    tli_store_write_stops(b->store));
}

static const counter_row session_rows[] = {
    COUNTER("timeline_sessions", "gauge", NULL, sessions),
    COUNTER("timeline_sessions_total", "counter", NULL, sessions_total),
    COUNTER("timeline_protocol_errors_total", "counter", NULL, proto_errors),
    COUNTER(
        "timeline_pre_hello_refused_total", "counter", NULL, pre_hello_refused),
    COUNTER("timeline_hello_timeouts_total", "counter", NULL, hello_timeouts),
    COUNTER("timeline_input_bytes", "gauge",
        "Input memory in use: frames being read or waiting to be handled.",
        input_bytes),
    COUNTER("timeline_input_stalls_total", "counter",
        "Times a session stopped reading at max_input_bytes.", input_stalls),
    COUNTER("timeline_reads_running", "gauge",
        "Long reads (COUNT, LIST, ...) being scanned on a reader thread.",
        reads_running),
    COUNTER("timeline_reads_total", "counter",
        "Long reads handed to a reader thread.", reads_total),
};

static void
render_sessions(tlb_broker *b, tli_buf *o)
{
	tlb_metrics *m = &b->m;
	tlb_session_info *v;
	size_t n = 0;

	counters(
	    o, m, session_rows, sizeof(session_rows) / sizeof(session_rows[0]));
	tli_buf_printf(o,
	    "# TYPE timeline_sessions_refused_total counter\n"
	    "timeline_sessions_refused_total{reason=\"max_sessions\"} %llu\n"
	    "timeline_sessions_refused_total{reason=\"max_sessions_per_ip\"} "
	    "%llu\n"
	    "timeline_sessions_refused_total{reason=\"unauth\"} %llu\n",
	    (unsigned long long) atomic_load(&m->refused_max_sessions),
	    (unsigned long long) atomic_load(&m->refused_per_ip),
	    (unsigned long long) atomic_load(&m->refused_unauth));
	tli_buf_printf(o,
	    "# HELP timeline_client_clock_offset_ms Client clock minus the "
	    "broker's.\n# TYPE timeline_client_clock_offset_ms gauge\n");
	v = tlb_sessions_info(b, &n);
	for (size_t i = 0; i < n; i++) {
		char name[4 * TL_MAX_NAME_LEN + 1];
		tli_prom_label(name, sizeof(name), v[i].name);
		tli_buf_printf(o,
		    "timeline_client_clock_offset_ms{session=\"%llu\","
		    "client=\"%s\"} %lld\n",
		    (unsigned long long) v[i].id, name,
		    (long long) v[i].clock_offset_ms);
	}
	tli_free(v);
}

/* The dispatcher's figures: one family per column of its rows, per
 * subscription (credit, held, delivered) or per topic (consumers,
 * window). */
typedef enum {
	DSP_CREDIT,
	DSP_HELD,
	DSP_DELIVERED,
	DSP_CONSUMERS,
	DSP_WINDOW
} dsp_col;

static void
dsp_family(tli_buf *o, const tlb_dsp_stat *v, size_t n, const char *name,
    const char *type, dsp_col col)
{
	bool per_topic = col == DSP_CONSUMERS || col == DSP_WINDOW;

	tli_buf_printf(o, "# TYPE %s %s\n", name, type);
	for (size_t i = 0; i < n; i++) {
		char tn[4 * TL_MAX_NAME_LEN + 1], cn[4 * TL_MAX_NAME_LEN + 1];
		bool topic_row = v[i].consumer[0] == '\0';

		if (topic_row != per_topic) {
			continue;
		}
		tli_prom_label(tn, sizeof(tn), v[i].topic);
		if (per_topic) {
			tli_buf_printf(o, "%s{topic=\"%s\"} %llu\n", name, tn,
			    (unsigned long long) (col == DSP_CONSUMERS
			            ? v[i].consumers
			            : v[i].window));
			continue;
		}
		tli_prom_label(cn, sizeof(cn), v[i].consumer);
		tli_buf_printf(o, "%s{topic=\"%s\",consumer=\"%s\"} %llu\n",
		    name, tn, cn,
		    (unsigned long long) (col == DSP_CREDIT ? v[i].credit
		            : col == DSP_HELD               ? v[i].held
		                                            : v[i].delivered));
	}
}

static void
render_dispatcher(tlb_broker *b, tli_buf *o)
{
	tlb_dsp_stat *v = NULL;
	size_t n = 0;

	if (tlb_dsp_stats(b, &v, &n) != TL_OK) {
		return;
	}
	dsp_family(o, v, n, "timeline_consumer_credit", "gauge", DSP_CREDIT);
	dsp_family(o, v, n, "timeline_consumer_held", "gauge", DSP_HELD);
	dsp_family(o, v, n, "timeline_consumer_delivered_total", "counter",
	    DSP_DELIVERED);
	dsp_family(o, v, n, "timeline_consumers", "gauge", DSP_CONSUMERS);
	dsp_family(o, v, n, "timeline_window_entries", "gauge", DSP_WINDOW);
	tli_free(v);
}

/* The Raft node of a cluster (nothing for a single node). */
static void
render_cluster(tlb_broker *b, tli_buf *o)
{
	static const char *const roles[] = {
	    "follower", "candidate", "leader", "unavailable"};
	tlc_stats st;

	if (b->cluster == NULL) {
		return;
	}
	tlc_get_stats(b->cluster, &st);
	tli_buf_printf(o,
	    "# HELP timeline_cluster_role 1 for this node's Raft role\n"
	    "# TYPE timeline_cluster_role gauge\n");
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		tli_buf_printf(o, "timeline_cluster_role{role=\"%s\"} %d\n",
		    roles[i], strcmp(st.role, roles[i]) == 0);
	}
	tli_prom_scalar(o, "timeline_cluster_serving", "gauge",
	    "1 while this node is the leader and serves requests", st.serving);
	tli_prom_scalar(o, "timeline_cluster_term", "gauge", NULL, st.term);
	tli_prom_scalar(
	    o, "timeline_cluster_commit_index", "gauge", NULL, st.commit_index);
	tli_prom_scalar(o, "timeline_cluster_applied_index", "gauge", NULL,
	    st.applied_index);
	tli_prom_scalar(o, "timeline_cluster_leader_id", "gauge",
	    "the known leader's node id, 0 when none", st.leader_id);
	tli_prom_scalar(o, "timeline_cluster_elections_total", "counter",
	    "terms seen with a leader", st.elections);
	tli_prom_scalar(o, "timeline_cluster_entries_proposed_total", "counter",
	    NULL, st.proposed);
	tli_prom_scalar(o, "timeline_cluster_entry_bytes_total", "counter",
	    NULL, st.proposed_bytes);
	tli_prom_scalar(o, "timeline_cluster_snapshots_taken_total", "counter",
	    NULL, st.snapshots_taken);
	tli_prom_scalar(o, "timeline_cluster_snapshots_installed_total",
	    "counter", NULL, st.snapshots_installed);
	tli_prom_scalar(o, "timeline_cluster_not_leader_total", "counter",
	    "requests answered TL_ENOTLEADER", atomic_load(&b->m.not_leader));
	tlc_render_more(b->cluster, o);
}

static void
render(mstate *ms, tli_buf *o)
{
	pthread_mutex_lock(&ms->mtx);
	tli_buf_append(o, ms->topics.data, ms->topics.len);
	pthread_mutex_unlock(&ms->mtx);
	render_requests(&ms->b->m, o);
	render_delivery(&ms->b->m, o);
	render_store(ms->b, o);
	render_sessions(ms->b, o);
	render_dispatcher(ms->b, o);
	render_cluster(ms->b, o);
}

static void
http_cb(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	mstate *ms = nng_http_handler_get_data(h);
	nng_http_res *res;
	tli_buf o;

	if (nng_http_res_alloc(&res) != 0) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	tli_buf_init(&o);
	render(ms, &o);
	nng_http_res_set_header(
	    res, "Content-Type", "text/plain; version=0.0.4");
	nng_http_res_copy_data(res, o.data, o.len);
	tli_buf_fini(&o);
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

int
tlb_metrics_start(tlb_broker *b)
{
	mstate *ms;
	nng_url *url;
	nng_http_handler *h;
	char u[300];
	int rv;

	if (b->conf.metrics[0] == '\0') {
		return 0;
	}
	if ((ms = tli_zalloc(sizeof(*ms))) == NULL) {
		return -1;
	}
	ms->b = b;
	pthread_mutex_init(&ms->mtx, NULL);
	pthread_cond_init(&ms->cv, NULL);
	snprintf(u, sizeof(u), "http://%s", b->conf.metrics);
	if ((rv = nng_url_parse(&url, u)) != 0 ||
	    (rv = nng_http_server_hold(&ms->srv, url)) != 0) {
		tlb_log(TLB_ERROR, "M001", "metrics address %s: %s",
		    b->conf.metrics, nng_strerror(rv));
		tli_free(ms);
		return -1;
	}
	nng_url_free(url);
	if ((rv = nng_http_handler_alloc(&h, "/metrics", http_cb)) != 0 ||
	    (rv = nng_http_handler_set_data(h, ms, NULL)) != 0 ||
	    (rv = nng_http_server_add_handler(ms->srv, h)) != 0 ||
	    (rv = nng_http_server_start(ms->srv)) != 0) {
		tlb_log(TLB_ERROR, "M002", "cannot serve metrics on %s: %s",
		    b->conf.metrics, nng_strerror(rv));
		nng_http_server_release(ms->srv);
		tli_free(ms);
		return -1;
	}
	refresh_topics(ms);
	pthread_create(&ms->th, NULL, refresh_main, ms);
	b->http = ms;
	tlb_log(
	    TLB_INFO, "M003", "metrics on http://%s/metrics", b->conf.metrics);
	return 0;
}

void
tlb_metrics_stop(tlb_broker *b)
{
	mstate *ms = b->http;

	if (ms == NULL) {
		return;
	}
	tli_thread_stop(ms->th, &ms->mtx, &ms->cv, &ms->stop);
	nng_http_server_stop(ms->srv);
	nng_http_server_release(ms->srv);
	tli_buf_fini(&ms->topics);
	tli_free(ms);
	b->http = NULL;
}
