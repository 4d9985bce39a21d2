/*
 * Metrics in Prometheus text format over HTTP (nng's HTTP server) at
 * /metrics. Counters are atomics updated where things happen; the topic
 * gauges, which need store reads, are refreshed once a second by a small
 * thread so that no RocksDB read runs on nng's threads.
 */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "broker.h"

const double tlb_lat_bounds[TLB_LAT_BUCKETS] = {
    0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 50, 100, 250, 500, 1000};

/* A Prometheus label value: backslash, quote and newline escaped. */
void
tlb_label_escape(char *out, size_t cap, const char *in)
{
	size_t o = 0;

	for (; *in != '\0' && o + 3 < cap; in++) {
		if (*in == '\\' || *in == '"') {
			out[o++] = '\\';
			out[o++] = *in;
		} else if (*in == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *in;
		}
	}
	out[o] = '\0';
}

void
tlb_metrics_lateness(tlb_metrics *m, int64_t late_us)
{
	int i = 0;

	if (late_us < 0) {
		late_us = 0;
	}
	while (i < TLB_LAT_BUCKETS &&
	    (double) late_us > tlb_lat_bounds[i] * 1000) {
		i++;
	}
	atomic_fetch_add(&m->lat_count[i], 1);
	atomic_fetch_add(&m->lat_sum_us, (uint64_t) late_us);
}

typedef struct mstate {
	tlb_broker *b;
	nng_http_server *srv;
	pthread_t th;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bool stop;
	tli_buf topics; /* cached topic gauges */
} mstate;

static void add(tli_buf *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
add(tli_buf *o, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0) {
		tli_buf_append(o, line,
		    (size_t) n < sizeof(line) ? (size_t) n : sizeof(line) - 1);
	}
}

static void
refresh_topics(mstate *ms)
{
	tli_topic_info *v;
	size_t n;
	tli_buf o;

	tli_buf_init(&o);
	add(&o,
	    "# HELP timeline_messages Messages by topic and status.\n"
	    "# TYPE timeline_messages gauge\n");
	if (tli_store_topic_list(ms->b->store, &v, &n) == TL_OK) {
		for (size_t i = 0; i < n; i++) {
			tli_counts c = {0};
			const char *t = v[i].conf.name;
			tli_store_totals(ms->b->store, t, &c);
			add(&o,
			    "timeline_messages{topic=\"%s\",status="
			    "\"available\"} %llu\n",
			    t, (unsigned long long) c.available);
			add(&o,
			    "timeline_messages{topic=\"%s\",status=\"waiting\"}"
			    " %llu\n",
			    t, (unsigned long long) c.waiting);
			add(&o,
			    "timeline_messages{topic=\"%s\",status="
			    "\"processing\"} %llu\n",
			    t, (unsigned long long) c.processing);
			add(&o,
			    "timeline_messages{topic=\"%s\",status=\"dead\"} "
			    "%llu\n",
			    t, (unsigned long long) v[i].dead);
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
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&ms->cv, &ms->mtx, &ts);
	}
	pthread_mutex_unlock(&ms->mtx);
	return NULL;
}

static void
render(mstate *ms, tli_buf *o)
{
	tlb_broker *b = ms->b;
	tlb_metrics *m = &b->m;
	tli_store_stats st;
	uint64_t cum = 0;

	pthread_mutex_lock(&ms->mtx);
	tli_buf_append(o, ms->topics.data, ms->topics.len);
	pthread_mutex_unlock(&ms->mtx);

	add(o,
	    "# HELP timeline_requests_total Requests by operation.\n"
	    "# TYPE timeline_requests_total counter\n");
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			add(o, "timeline_requests_total{op=\"%s\"} %llu\n",
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(&m->ops[op]));
		}
	}
	add(o,
	    "# HELP timeline_items_total Batch items by operation and result.\n"
	    "# TYPE timeline_items_total counter\n");
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			add(o,
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
	add(o,
	    "# HELP timeline_auth_refusals_total Requests refused with "
	    "TL_ENOTAUTH, by operation.\n"
	    "# TYPE timeline_auth_refusals_total counter\n");
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			add(o, "timeline_auth_refusals_total{op=\"%s\"} %llu\n",
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(
			        &m->auth_refusals[op]));
		}
	}
	add(o,
	    "# HELP timeline_quota_refusals_total Batches refused by a "
	    "per-group limit, by operation.\n"
	    "# TYPE timeline_quota_refusals_total counter\n");
	for (int op = 1; op < TLP_OP_MAX_; op++) {
		if (tlp_op_is_request(op)) {
			add(o,
			    "timeline_quota_refusals_total{op=\"%s\"} %llu\n",
			    tlp_op_name(op),
			    (unsigned long long) atomic_load(
			        &m->quota_refusals[op]));
		}
	}
	add(o,
	    "# TYPE timeline_leases_total counter\n"
	    "timeline_leases_total %llu\n",
	    (unsigned long long) atomic_load(&m->leases));
	add(o,
	    "# TYPE timeline_lease_failures_total counter\n"
	    "timeline_lease_failures_total %llu\n",
	    (unsigned long long) atomic_load(&m->lease_fail));
	add(o,
	    "# TYPE timeline_dead_lettered_total counter\n"
	    "timeline_dead_lettered_total %llu\n",
	    (unsigned long long) atomic_load(&m->dead_lettered));
	add(o,
	    "# TYPE timeline_delivered_total counter\n"
	    "timeline_delivered_total %llu\n",
	    (unsigned long long) atomic_load(&m->delivered));
	add(o,
	    "# TYPE timeline_leases_lost_total counter\n"
	    "timeline_leases_lost_total %llu\n",
	    (unsigned long long) atomic_load(&m->lost));
	add(o,
	    "# HELP timeline_delivered_early_total Deliveries before their "
	    "due time (always 0).\n# TYPE timeline_delivered_early_total "
	    "counter\ntimeline_delivered_early_total %llu\n",
	    (unsigned long long) atomic_load(&m->early));
	add(o,
	    "# HELP timeline_lateness_ms Due time to push, milliseconds.\n"
	    "# TYPE timeline_lateness_ms histogram\n");
	for (int i = 0; i < TLB_LAT_BUCKETS; i++) {
		cum += atomic_load(&m->lat_count[i]);
		add(o, "timeline_lateness_ms_bucket{le=\"%g\"} %llu\n",
		    tlb_lat_bounds[i], (unsigned long long) cum);
	}
	cum += atomic_load(&m->lat_count[TLB_LAT_BUCKETS]);
	add(o, "timeline_lateness_ms_bucket{le=\"+Inf\"} %llu\n",
	    (unsigned long long) cum);
	add(o,
	    "timeline_lateness_ms_sum %.3f\ntimeline_lateness_ms_count %llu\n",
	    (double) atomic_load(&m->lat_sum_us) / 1000.0,
	    (unsigned long long) cum);

	tli_store_get_stats(b->store, &st);
	add(o,
	    "# HELP timeline_commit_batches_total Group commits written.\n"
	    "# TYPE timeline_commit_batches_total counter\n"
	    "timeline_commit_batches_total %llu\n",
	    (unsigned long long) st.batches);
	add(o,
	    "# TYPE timeline_commit_ops_total counter\n"
	    "timeline_commit_ops_total %llu\n",
	    (unsigned long long) st.ops);
	add(o,
	    "# HELP timeline_commit_sync_seconds_total Time in write+fsync.\n"
	    "# TYPE timeline_commit_sync_seconds_total counter\n"
	    "timeline_commit_sync_seconds_total %.6f\n",
	    (double) st.sync_ns_total / 1e9);
	add(o,
	    "# TYPE timeline_commit_batch_max gauge\n"
	    "timeline_commit_batch_max %llu\n",
	    (unsigned long long) st.max_batch);

	add(o, "# TYPE timeline_sessions gauge\ntimeline_sessions %llu\n",
	    (unsigned long long) atomic_load(&m->sessions));
	add(o,
	    "# TYPE timeline_sessions_total counter\n"
	    "timeline_sessions_total %llu\n",
	    (unsigned long long) atomic_load(&m->sessions_total));
	add(o,
	    "# TYPE timeline_protocol_errors_total counter\n"
	    "timeline_protocol_errors_total %llu\n",
	    (unsigned long long) atomic_load(&m->proto_errors));
	add(o,
	    "# HELP timeline_client_clock_offset_ms Client clock minus the "
	    "broker's.\n# TYPE timeline_client_clock_offset_ms gauge\n");
	pthread_mutex_lock(&b->sess_mtx);
	for (tlb_session *s = b->sessions; s != NULL; s = s->next) {
		if (s->hello) {
			char name[4 * TL_MAX_NAME_LEN + 1];
			tlb_label_escape(name, sizeof(name), s->name);
			add(o,
			    "timeline_client_clock_offset_ms{session=\"%llu\","
			    "client=\"%s\"} %lld\n",
			    (unsigned long long) s->id, name,
			    (long long) atomic_load(&s->clock_offset_ms));
		}
	}
	pthread_mutex_unlock(&b->sess_mtx);
	tlb_dsp_metrics(b, o);
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
	pthread_mutex_lock(&ms->mtx);
	ms->stop = true;
	pthread_cond_signal(&ms->cv);
	pthread_mutex_unlock(&ms->mtx);
	pthread_join(ms->th, NULL);
	nng_http_server_stop(ms->srv);
	nng_http_server_release(ms->srv);
	tli_buf_fini(&ms->topics);
	tli_free(ms);
	b->http = NULL;
}
