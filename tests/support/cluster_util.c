/*
 * A cluster of real timelined processes for the cluster suites
 * (cluster_util.h).
 */
#include <stdarg.h>

#include "tltest.h"
#include "cluster_util.h"

/* A free port that none of the cluster's nodes (up to node i) has yet:
 * two calls in a row may well get the same one from the kernel. */
static int
free_port(const tc_cluster *c, int i)
{
	for (int tries = 0; tries < 100; tries++) {
		int p = tt_free_port();
		bool taken = p <= 0;

		for (int j = 0; j <= i && !taken; j++) {
			taken = c->raft_port[j] == p ||
			    c->client_port[j] == p || c->metrics_port[j] == p;
		}
		if (!taken) {
			return p;
		}
	}
	cr_assert_fail("no free port");
	return -1;
}

void
tc_init(tc_cluster *c, int n, const char *tag)
{
	memset(c, 0, sizeof(*c));
	c->dir = tt_mkdtemp(tag);
	c->n = n;
	c->election_ms = 500;
	for (int i = 0; i < n; i++) {
		char name[16];

		c->raft_port[i] = free_port(c, i);
		c->client_port[i] = free_port(c, i);
		c->metrics_port[i] = free_port(c, i);
		snprintf(c->url[i], sizeof(c->url[i]), "tcp://127.0.0.1:%d",
		    c->client_port[i]);
		snprintf(
		    c->data[i], sizeof(c->data[i]), "%s/node%d", c->dir, i + 1);
		snprintf(name, sizeof(name), "node%d", i + 1);
		tt_proc_timelined(&c->p[i], c->dir, name);
	}
}

/* The settings of node i (written at every start: the test may change
 * them between starts). */
static void
settings(tc_cluster *c, int i)
{
	tt_proc *p = &c->p[i];
	int members = c->members > 0 ? c->members : c->n;

	tt_proc_conf_reset(p);
	tt_proc_set(p, "data", "%s", c->data[i]);
	tt_proc_set(p, "listen", "%s", c->url[i]);
	tt_proc_set(p, "metrics", "127.0.0.1:%d", c->metrics_port[i]);
	tt_proc_set(p, "topic", "t");
	tt_proc_set(p, "log_level", "info");
	tt_proc_set(p, "cluster_id", "%d", i + 1);
	tt_proc_set(p, "cluster_election_ms", "%d", c->election_ms);
	tt_proc_set(p, "cluster_heartbeat_ms", "%d", c->election_ms / 10);
	if (c->snapshot_entries > 0) {
		tt_proc_set(
		    p, "cluster_snapshot_entries", "%d", c->snapshot_entries);
	}
	for (int j = 0; j < (i < members ? members : c->n); j++) {
		tt_proc_set(p, "cluster_node", "%d 127.0.0.1:%d %s", j + 1,
		    c->raft_port[j], c->url[j]);
	}
	if (i >= members) {
		tt_proc_set(p, "cluster_join", "on");
	}
	for (int k = 0; k < c->nextra[i]; k++) {
		tt_proc_set(p, c->extra_key[i][k], "%s", c->extra_val[i][k]);
	}
}

void
tc_node_set(tc_cluster *c, int i, const char *key, const char *fmt, ...)
{
	int k = c->nextra[i]++;
	va_list ap;

	cr_assert(k < 4, "too many settings for node %d", i + 1);
	snprintf(c->extra_key[i][k], sizeof(c->extra_key[i][k]), "%s", key);
	va_start(ap, fmt);
	vsnprintf(c->extra_val[i][k], sizeof(c->extra_val[i][k]), fmt, ap);
	va_end(ap);
}

void
tc_start(tc_cluster *c, int i)
{
	settings(c, i);
	tt_proc_start(&c->p[i]);
}

void
tc_spawn(tc_cluster *c, int i)
{
	settings(c, i);
	tt_proc_spawn(&c->p[i]);
}

void
tc_start_all(tc_cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		settings(c, i);
		tt_proc_spawn(&c->p[i]);
	}
	for (int i = 0; i < c->n; i++) {
		tt_proc_wait_ready(&c->p[i]);
	}
}

void
tc_fini(tc_cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		if (c->paused[i]) {
			tc_resume(c, i);
		}
		if (c->p[i].pid > 0) {
			tt_proc_stop_clean(&c->p[i]);
		}
		tt_proc_check_log(&c->p[i]);
		tt_proc_fini(&c->p[i]);
	}
	if (c->dir != NULL && getenv("TL_E2E_KEEP") != NULL) {
		fprintf(stderr, "kept %s\n", c->dir);
		free(c->dir);
		c->dir = NULL;
	}
	tt_rmtree_free(&c->dir);
}

void
tc_urls(const tc_cluster *c, int n, char *out, size_t cap)
{
	size_t off = 0;

	out[0] = '\0';
	for (int i = 0; i < n && off < cap; i++) {
		off += (size_t) snprintf(
		    out + off, cap - off, "%s%s", i > 0 ? "," : "", c->url[i]);
	}
	cr_assert(off < cap, "the URL list does not fit");
}

void
tc_pause(tc_cluster *c, int i)
{
	tt_proc_pause(&c->p[i]);
	c->paused[i] = true;
}

void
tc_resume(tc_cluster *c, int i)
{
	tt_proc_resume(&c->p[i]);
	c->paused[i] = false;
}

int64_t
tc_metric(tc_cluster *c, int i, const char *name)
{
	int status = 0;
	char *body, *at, key[128];
	int64_t v = -1;

	if (c->p[i].pid <= 0 || c->paused[i]) {
		return -1;
	}
	body = rc_http_get(c->metrics_port[i], "/metrics", 1000, &status);
	if (body == NULL) {
		return -1;
	}
	snprintf(key, sizeof(key), "\n%s ", name);
	if (status == 200 && (at = strstr(body, key)) != NULL) {
		v = strtoll(at + strlen(key), NULL, 10);
	}
	free(body);
	return v;
}

int
tc_leader(tc_cluster *c, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	do {
		for (int i = 0; i < c->n; i++) {
			if (tc_metric(c, i, "timeline_cluster_serving") == 1) {
				return i;
			}
		}
		tt_nap_ms(20);
	} while (tli_mono_ms() < deadline);
	return -1;
}

void
tc_dump(tc_cluster *c, const char *why)
{
	static const char *const gauges[] = {"timeline_cluster_term",
	    "timeline_cluster_leader_id", "timeline_cluster_serving",
	    "timeline_cluster_commit_index", "timeline_cluster_applied_index",
	    "timeline_cluster_snapshots_taken_total",
	    "timeline_cluster_snapshots_installed_total"};

	fprintf(stderr, "== the cluster (%s)\n", why);
	for (int i = 0; i < c->n; i++) {
		char cmd[TT_PATH + 32];

		fprintf(stderr, "node %d: pid %d%s", i + 1, (int) c->p[i].pid,
		    c->paused[i] ? " (paused)" : "");
		for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]);
		     g++) {
			fprintf(stderr, " %s=%lld",
			    gauges[g] + strlen("timeline_cluster_"),
			    (long long) tc_metric(c, i, gauges[g]));
		}
		fprintf(stderr, "\n");
		/* the end of its log, for what it did last */
		snprintf(cmd, sizeof(cmd), "tail -n 25 '%s' >&2", c->p[i].log);
		if (system(cmd) != 0) {
			fprintf(stderr, "(no log)\n");
		}
	}
}

bool
tc_converged(tc_cluster *c, int leader, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	const char *m = "timeline_cluster_applied_index";

	do {
		int64_t want = tc_metric(c, leader, m);
		bool all = want > 0;

		for (int i = 0; i < c->n && all; i++) {
			all = c->p[i].pid <= 0 || c->paused[i] ||
			    tc_metric(c, i, m) >= want;
		}
		if (all) {
			return true;
		}
		tt_nap_ms(20);
	} while (tli_mono_ms() < deadline);
	tc_dump(c, "did not converge");
	return false;
}

static void
enc_create(tlp_w *w, const void *arg)
{
	tlp_enc_batch(w, arg);
}

int
tc_create(rc_client *cl, const char *id, char *leader, size_t cap)
{
	tlp_item it = {.id = TLP_STR(id), .ts = 3600000, .rel = true};
	tlp_batch bt = {TLP_STR("t"), TLP_STR("app"), &it, 1};
	rc_frame *f = NULL;
	tlp_r r;
	tlp_str detail, url;
	size_t nf = 0;
	int rv, err;
	tlp_result *res = NULL;
	size_t nres = 0;

	if (leader != NULL && cap > 0) {
		leader[0] = '\0';
	}
	rv = rc_call(cl, TLP_OP_CREATE, enc_create, &bt, 10000, &f);
	if (rv != TL_OK) {
		return rv;
	}
	rc_frame_body(f, &r);
	if ((rv = tlp_dec_reply_head(&r, &err, &detail, &nf)) != TL_OK) {
		rc_frame_free(f);
		return rv;
	}
	if (err != TL_OK) {
		if (err == TL_ENOTLEADER && nf >= 1 && leader != NULL &&
		    tlp_dec_error_leader(&r, &url) == TL_OK) {
			snprintf(leader, cap, "%.*s", (int) url.n, url.p);
		}
		rc_frame_free(f);
		return err;
	}
	rv = tlp_dec_results(&r, &res, &nres);
	if (rv == TL_OK) {
		rv = nres == 1 ? res[0].err : TL_EPROTO;
	}
	tli_free(res);
	rc_frame_free(f);
	return rv;
}

static void
report(void *arg, const char *problem)
{
	fprintf(stderr, "%s: %s\n", (const char *) arg, problem);
}

tli_store *
tc_open_store(tc_cluster *c, int i)
{
	tli_store_opts o;
	tli_store *s = NULL;
	char path[700];
	uint64_t problems = 0;

	snprintf(path, sizeof(path), "%s/store", c->data[i]);
	tli_store_opts_init(&o);
	o.path = path;
	TL_PASS(tli_store_open(&s, &o), "open %s", path);
	TL_PASS(tli_store_check(s, report, path, &problems));
	cr_assert_eq(problems, 0, "%s: %" PRIu64 " problems", path, problems);
	return s;
}
