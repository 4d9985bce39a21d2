/*
 * The service object: start and stop, the timers' topic, the broker
 * connection, and the statistics of live timers (their tags as the seed's
 * "stateful statistics", their replication factors) with the pop
 * counters, rendered as Prometheus text. The live-timer table is rebuilt
 * at start from the stored timers (tl_list over the group, tl_get of
 * each), then kept by the API (create, replace, delete) and the pops (the
 * last one of a timer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* ---- statistics ---- */

typedef struct tagsum {
	tli_hnode hn;
	uint64_t count;  /* summed over live timers */
	uint64_t timers; /* live timers with the tag */
	char type[TLK_MAX_TAG_LEN + 1];
} tagsum;

typedef struct tstat {
	tli_hnode hn;
	char id[TLK_ID_LEN + 1];
	uint64_t gen;
	int rf;
	int ntags;
	struct {
		tagsum *sum;
		uint64_t count;
	} tags[];
} tstat;

static const double lat_bounds[TLK_LAT_BUCKETS] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000};

static bool
tstat_is(const tli_hnode *n, const void *key)
{
	return strcmp(TLI_CONTAINER(n, tstat, hn)->id, key) == 0;
}

static bool
tagsum_is(const tli_hnode *n, const void *key)
{
	return strcmp(TLI_CONTAINER(n, tagsum, hn)->type, key) == 0;
}

static int
rf_slot(int64_t rf)
{
	return rf >= 8 ? 7 : (int) rf - 1;
}

/* Under the lock. */
static tstat *
stats_find(tlk_stats *st, const char *id)
{
	tli_hnode *n = tli_htab_find(
	    &st->timers, tli_hash64(id, strlen(id)), tstat_is, id);

	return n != NULL ? TLI_CONTAINER(n, tstat, hn) : NULL;
}

/* Under the lock; gen 0: whatever the generation. */
static void
stats_unlink(tlk_stats *st, const char *id, uint64_t gen)
{
	tstat *ts = stats_find(st, id);

	if (ts == NULL || (gen != 0 && ts->gen != gen)) {
		return;
	}
	for (int i = 0; i < ts->ntags; i++) {
		ts->tags[i].sum->count -= ts->tags[i].count;
		ts->tags[i].sum->timers--;
	}
	st->by_rf[rf_slot(ts->rf)]--;
	st->live--;
	tli_htab_remove(&st->timers, &ts->hn);
	free(ts);
}

static tagsum *
tagsum_get(tlk_stats *st, const char *type)
{
	uint64_t h = tli_hash64(type, strlen(type));
	tli_hnode *n = tli_htab_find(&st->tags, h, tagsum_is, type);
	tagsum *s;

	if (n != NULL) {
		return TLI_CONTAINER(n, tagsum, hn);
	}
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		return NULL;
	}
	snprintf(s->type, sizeof(s->type), "%s", type);
	tli_htab_insert(&st->tags, &s->hn, h);
	return s;
}

void
tlk_stats_add(tlk *k, const char *id, const tlk_timer *t)
{
	tlk_stats *st = &k->st;
	tstat *ts =
	    calloc(1, sizeof(*ts) + (size_t) t->ntags * sizeof(ts->tags[0]));

	pthread_mutex_lock(&st->mtx);
	stats_unlink(st, id, 0);
	if (ts == NULL) {
		pthread_mutex_unlock(&st->mtx);
		return;
	}
	snprintf(ts->id, sizeof(ts->id), "%s", id);
	ts->gen = ++st->gen;
	ts->rf = (int) (t->replication > 8 ? 8 : t->replication);
	for (int i = 0; i < t->ntags; i++) {
		tagsum *s = tagsum_get(st, t->tags[i].type);
		if (s == NULL) {
			continue;
		}
		ts->tags[ts->ntags].sum = s;
		ts->tags[ts->ntags].count = t->tags[i].count;
		s->count += t->tags[i].count;
		s->timers++;
		ts->ntags++;
	}
	st->by_rf[rf_slot(ts->rf)]++;
	st->live++;
	tli_htab_insert(&st->timers, &ts->hn, tli_hash64(id, strlen(id)));
	pthread_mutex_unlock(&st->mtx);
}

void
tlk_stats_del(tlk *k, const char *id)
{
	pthread_mutex_lock(&k->st.mtx);
	stats_unlink(&k->st, id, 0);
	pthread_mutex_unlock(&k->st.mtx);
}

uint64_t
tlk_stats_gen(tlk *k, const char *id)
{
	tstat *ts;
	uint64_t gen;

	pthread_mutex_lock(&k->st.mtx);
	ts = stats_find(&k->st, id);
	gen = ts != NULL ? ts->gen : 0;
	pthread_mutex_unlock(&k->st.mtx);
	return gen;
}

void
tlk_stats_del_gen(tlk *k, const char *id, uint64_t gen)
{
	if (gen == 0) {
		return; /* not counted (a timer stored by another instance) */
	}
	pthread_mutex_lock(&k->st.mtx);
	stats_unlink(&k->st, id, gen);
	pthread_mutex_unlock(&k->st.mtx);
}

void
tlk_stats_latency(tlk *k, int64_t us)
{
	int i = 0;

	while (i < TLK_LAT_BUCKETS && (double) us > lat_bounds[i] * 1000.0) {
		i++;
	}
	atomic_fetch_add(&k->st.lat[i], 1);
	atomic_fetch_add(&k->st.lat_sum_us, (uint64_t) (us > 0 ? us : 0));
}

static void
render_live(tlk_stats *st, tli_buf *o)
{
	tli_htab_iter it;

	tli_prom_scalar(o, "chronos_timers", "gauge", "Live timers.", st->live);
	tli_buf_puts(o,
	    "# HELP chronos_tag_count Live timers' tag-info counts, summed "
	    "per type.\n# TYPE chronos_tag_count gauge\n");
	for (tli_hnode *n = tli_htab_first(&st->tags, &it); n != NULL;
	     n = tli_htab_next(&st->tags, &it, n)) {
		tagsum *s = TLI_CONTAINER(n, tagsum, hn);
		char lab[2 * TLK_MAX_TAG_LEN + 4];
		tli_prom_label(lab, sizeof(lab), s->type);
		tli_buf_printf(o, "chronos_tag_count{type=\"%s\"} %llu\n", lab,
		    (unsigned long long) s->count);
	}
	tli_buf_puts(o,
	    "# HELP chronos_timers_by_replication_factor Live timers by the "
	    "replication-factor they were given (stored, not applied).\n"
	    "# TYPE chronos_timers_by_replication_factor gauge\n");
	for (int i = 0; i < 8; i++) {
		tli_buf_printf(o,
		    "chronos_timers_by_replication_factor{factor=\"%d%s\"} "
		    "%llu\n",
		    i + 1, i == 7 ? "+" : "",
		    (unsigned long long) st->by_rf[i]);
	}
}

void
tlk_stats_render(tlk *k, tli_buf *o)
{
	tlk_stats *st = &k->st;
	uint64_t lat[TLK_LAT_BUCKETS + 1];

	pthread_mutex_lock(&st->mtx);
	render_live(st, o);
	pthread_mutex_unlock(&st->mtx);
	tli_prom_scalar(o, "chronos_pops_total", "counter",
	    "Pops delivered (callbacks answered 2xx).", atomic_load(&st->pops));
	tli_prom_scalar(o, "chronos_callback_attempts_total", "counter",
	    "Callbacks made.", atomic_load(&st->attempts));
	tli_prom_scalar(o, "chronos_callback_retries_total", "counter",
	    "Failed callbacks retried later.", atomic_load(&st->retries));
	tli_prom_scalar(o, "chronos_callback_failures_total", "counter",
	    "Pops given up on after retry_for_ms (log C020).",
	    atomic_load(&st->failures));
	for (int i = 0; i <= TLK_LAT_BUCKETS; i++) {
		lat[i] = atomic_load(&st->lat[i]);
	}
	tli_prom_histogram(o, "chronos_callback_latency_ms",
	    "Callback request to answer (or failure), milliseconds.",
	    lat_bounds, lat, TLK_LAT_BUCKETS,
	    (double) atomic_load(&st->lat_sum_us) / 1000.0);
}

static void
stats_init(tlk_stats *st)
{
	pthread_mutex_init(&st->mtx, NULL);
	tli_htab_init(&st->timers);
	tli_htab_init(&st->tags);
}

static void
stats_fini(tlk_stats *st)
{
	tli_htab_iter it;
	tli_hnode *n, *nx;

	for (n = tli_htab_first(&st->timers, &it); n != NULL; n = nx) {
		nx = tli_htab_next(&st->timers, &it, n);
		free(TLI_CONTAINER(n, tstat, hn));
	}
	for (n = tli_htab_first(&st->tags, &it); n != NULL; n = nx) {
		nx = tli_htab_next(&st->tags, &it, n);
		free(TLI_CONTAINER(n, tagsum, hn));
	}
	tli_htab_fini(&st->timers);
	tli_htab_fini(&st->tags);
	pthread_mutex_destroy(&st->mtx);
}

/* The stored timers into the statistics. */
static int
stats_load(tlk *k)
{
	tl_entry *page = NULL, last;
	size_t n = 0;
	bool more = true, first = true;
	int rv = TL_OK;

	while (more && rv == TL_OK) {
		rv = tl_list(k->cl, k->c.topic, k->c.group, 1000,
		    first ? NULL : &last, &page, &n, &more);
		first = false;
		for (size_t i = 0; rv == TL_OK && i < n; i++) {
			tl_message *m = NULL;
			tlk_timer t;
			char err[300];
			if (tl_get(k->cl, k->c.topic, page[i].id, &m) !=
			    TL_OK) {
				continue; /* gone meanwhile */
			}
			if (tlk_timer_parse(&t, m->body, m->body_len,
			        INT64_MAX / 4, err, sizeof(err)) == 0) {
				tlk_stats_add(k, page[i].id, &t);
				tlk_timer_fini(&t);
			}
			tl_message_free(m);
		}
		if (rv == TL_OK && n > 0) {
			last = page[n - 1];
		}
		more = more && n > 0;
		tl_free(page);
		page = NULL;
	}
	if (rv != TL_OK) {
		tli_log("chronos", TLI_LOG_ERROR, "C002",
		    "cannot list the stored timers: %s", tl_strerror(rv));
		return -1;
	}
	return 0;
}

/* ---- start and stop ---- */

static int
topic_make(tlk *k)
{
	tl_topic_conf tc;
	int rv;

	memset(&tc, 0, sizeof(tc));
	tc.name = k->c.topic;
	tc.max_deliveries = 0; /* a timer is never dead-lettered */
	rv = tl_topic_create(k->cl, &tc);
	if (rv != TL_OK && rv != TL_ETOPICEXISTS) {
		tli_log("chronos", TLI_LOG_ERROR, "C002",
		    "cannot create topic %s: %s", k->c.topic, tl_strerror(rv));
		return -1;
	}
	return 0;
}

static void
sdk_log(void *arg, tl_log_level level, const char *msg)
{
	(void) arg;
	if (level <= TL_LOG_WARN) {
		/* the SDK's levels are numbered as the logger's */
		tli_log(
		    "chronos", (tli_log_level) level, "C090", "sdk: %s", msg);
	}
}

static int
broker_open(tlk *k, const char *url)
{
	tl_opts *o = NULL;
	int rv;

	if (tl_opts_alloc(&o) != TL_OK || tl_opts_set_url(o, url) != TL_OK ||
	    tl_opts_set_name(o, "tl-chronos") != TL_OK ||
	    tl_opts_set_log(o, sdk_log, k) != TL_OK ||
	    (k->c.broker_token[0] &&
	        tl_opts_set_token(o, k->c.broker_token) != TL_OK)) {
		tli_log(
		    "chronos", TLI_LOG_ERROR, "C007", "bad broker URL %s", url);
		tl_opts_free(o);
		return -1;
	}
	tl_opts_set_reconnect(o, 50, 1000);
	tl_opts_set_timeout(o, 5000);
	rv = tl_client_open(&k->cl, o);
	tl_opts_free(o);
	if (rv != TL_OK) {
		tli_log("chronos", TLI_LOG_ERROR, "C007",
		    "cannot reach the broker at %s: %s", url, tl_strerror(rv));
		return -1;
	}
	return 0;
}

int
tlk_start(tlk **out, const tlk_conf *c, const char *broker_url)
{
	tlk *k = calloc(1, sizeof(*k));

	if (k == NULL) {
		return -1;
	}
	k->c = *c;
	stats_init(&k->st);
	if (tlh_client_alloc(&k->hc, 0) != TL_OK ||
	    broker_open(k, broker_url ? broker_url : c->broker) != 0 ||
	    topic_make(k) != 0 || stats_load(k) != 0 || tlk_pop_start(k) != 0 ||
	    tlk_http_start(k) != 0) {
		tlk_stop(k);
		return -1;
	}
	tli_log("chronos", TLI_LOG_INFO, "C005",
	    "serving on %s (%llu timers stored)", k->url,
	    (unsigned long long) k->st.live);
	*out = k;
	return 0;
}

const char *
tlk_url(const tlk *k)
{
	return k->url;
}

void
tlk_stop(tlk *k)
{
	if (k == NULL) {
		return;
	}
	atomic_store(&k->stopping, true);
	tlk_http_stop(k);
	tlk_pop_stop(k);
	tl_client_close(k->cl);
	tlh_client_free(k->hc);
	stats_fini(&k->st);
	tli_log("chronos", TLI_LOG_INFO, "C008", "stopped");
	free(k);
}

tlk *
tlk_start_file(const char *conf_path, const char *broker_url)
{
	tlk_conf c;
	tlk *k = NULL;
	char err[1024];

	tlk_conf_defaults(&c);
	if (tli_conf_file(&tlk_conf_table, &c, conf_path, err, sizeof(err)) !=
	        TLI_CONF_OK ||
	    tlk_conf_verify(&c, err, sizeof(err)) != 0) {
		tli_log("chronos", TLI_LOG_ERROR, "C006", "%s", err);
		return NULL;
	}
	if (tlk_start(&k, &c, broker_url) != 0) {
		return NULL;
	}
	return k;
}
