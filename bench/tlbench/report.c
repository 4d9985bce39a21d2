/*
 * report.c: the outputs of tl-bench: the table for people (medians per
 * workload and system, and the ratio Timeline / peer of each workload's
 * main figure), the JSON file (the machine, the configuration, every run,
 * the medians and the ratios, the tail: the worst lateness of any run) and
 * the PNG plots drawn by gnuplot (lateness distribution per system, one
 * plot per rate of a --rates sweep; throughput per workload per system;
 * memory and disk per scheduled message).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "tlbench.h"

static bool
is_of(const tlb_result *r, tlb_workload w, int s, uint32_t rate_due)
{
	return r->ran && r->w == w && r->sys == s && r->rate_due == rate_due;
}

double
tlb_median(const tlb_report *rp, tlb_workload w, int s, uint32_t rate_due,
    tlb_field_fn f)
{
	double v[TLB_BENCH_MAX_RUNS];
	int k = 0;

	for (int i = 0; i < rp->nres && k < TLB_BENCH_MAX_RUNS; i++) {
		if (is_of(&rp->res[i], w, s, rate_due)) {
			v[k++] = f(&rp->res[i]);
		}
	}
	return tlb_bench_median(v, k, NAN);
}

/* The largest value over the runs (the tail summary), NAN without runs. */
static double
worst(const tlb_report *rp, tlb_workload w, int s, uint32_t rate_due,
    tlb_field_fn f)
{
	double m = NAN;

	for (int i = 0; i < rp->nres; i++) {
		if (is_of(&rp->res[i], w, s, rate_due)) {
			double v = f(&rp->res[i]);

			m = isnan(m) || v > m ? v : m;
		}
	}
	return m;
}

/* The rates the rows of workload w are of: a --rates sweep's for
 * lateness, else one row (0). */
static int
rates_of(const tlb_report *rp, tlb_workload w, uint32_t *rates)
{
	const tlb_cfg *c = rp->cfg;

	if (w == TLB_W_LATENESS && c->nrates > 0) {
		memcpy(rates, c->rates, sizeof(uint32_t) * (size_t) c->nrates);
		return c->nrates;
	}
	rates[0] = 0;
	return 1;
}

/* A row's name: the system's label, and the rate in a sweep. */
static const char *
row_name(const tlb_report *rp, int s, uint32_t rate_due, char *buf, size_t size)
{
	if (rate_due > 0) {
		snprintf(buf, size, "%s @%u/s", rp->sys[s].label, rate_due);
	} else {
		snprintf(buf, size, "%s", rp->sys[s].label);
	}
	return buf;
}

/* clang-format off */
static double f_rate(const tlb_result *r) { return r->rate; }
static double f_p50(const tlb_result *r) { return r->p50; }
static double f_p90(const tlb_result *r) { return r->p90; }
static double f_p99(const tlb_result *r) { return r->p99; }
static double f_p999(const tlb_result *r) { return r->p999; }
static double f_max(const tlb_result *r) { return r->max; }
static double f_early(const tlb_result *r) { return (double) r->early; }
static double f_lost(const tlb_result *r) { return (double) r->lost; }
static double f_rss(const tlb_result *r) { return (double) r->rss_kb / 1024.0; }
static double f_rss_msg(const tlb_result *r) { return r->rss_per_msg; }
static double f_disk_msg(const tlb_result *r) { return r->disk_per_msg; }
static double f_first(const tlb_result *r) { return r->first_s; }
static double f_first1(const tlb_result *r) { return r->first1_s; }
static double f_first2(const tlb_result *r) { return r->first2_s; }
static double f_acked_kill(const tlb_result *r) { return (double) r->acked_at_kill; }
static double f_resurrected(const tlb_result *r) { return (double) r->resurrected; }
static double f_undeleted(const tlb_result *r) { return (double) r->undeleted; }
static double f_fo_late(const tlb_result *r) { return r->fo_lateness_max; }
static double f_fill_min(const tlb_result *r) { return r->fill_min_rate; }
static double f_rss_max(const tlb_result *r) { return (double) r->rss_max_kb / 1024.0; }
static double f_put99_0(const tlb_result *r) { return r->put_p99[0]; }
static double f_put99_1(const tlb_result *r) { return r->put_p99[1]; }
static double f_putmax_1(const tlb_result *r) { return r->put_max[1]; }
static double f_late99_0(const tlb_result *r) { return r->late_p99[0]; }
static double f_late99_1(const tlb_result *r) { return r->late_p99[1]; }
static double f_latemax_1(const tlb_result *r) { return r->late_max[1]; }
static double f_read_s(const tlb_result *r) { return r->read_s; }
/* clang-format on */

/* One column of a workload's table. */
typedef struct column {
	const char *name;
	tlb_field_fn f;
	const char *fmt;
} column;

/* A workload's columns, and which one the ratio is of. */
typedef struct wtable {
	const char *title;
	column cols[10];
	int ncols;
	int ratio_col;
	const char *ratio_note;
} wtable;

static const wtable tables[TLB_NWORKLOADS] = {
    [TLB_W_PRODUCE] = {"produce (durable puts, msg/s)",
        {{"msg/s", f_rate, "%12.0f"}}, 1, 0, "msg/s: > 1 is faster"},
    [TLB_W_LATENESS] = {"lateness (receive - due, ms; consume msg/s)",
        {{"p50", f_p50, "%9.2f"}, {"p90", f_p90, "%9.2f"},
            {"p99", f_p99, "%9.2f"}, {"p99.9", f_p999, "%9.2f"},
            {"max", f_max, "%9.2f"}, {"early", f_early, "%7.0f"},
            {"lost", f_lost, "%6.0f"}, {"msg/s", f_rate, "%9.0f"}},
        8, 2, "p99: < 1 is less late"},
    [TLB_W_CYCLE] = {"lease-cycle (lease, extend, delete; cycles/s)",
        {{"cycles/s", f_rate, "%12.0f"}}, 1, 0, "cycles/s: > 1 is faster"},
    [TLB_W_SCALE] = {"scale (messages an hour ahead)",
        {{"RSS MB", f_rss, "%9.1f"}, {"RSS max MB", f_rss_max, "%11.1f"},
            {"RSS B/msg", f_rss_msg, "%10.1f"},
            {"disk B/msg", f_disk_msg, "%11.1f"}, {"fill/s", f_rate, "%9.0f"},
            {"fill/s low", f_fill_min, "%11.0f"},
            {"restart s", f_first, "%10.2f"}},
        7, 2, "RSS B/msg: < 1 is smaller"},
    [TLB_W_CRASH] = {"crash (kill -9 during puts, then during deletes)",
        {{"acked", f_acked_kill, "%8.0f"}, {"lost", f_lost, "%6.0f"},
            {"early", f_early, "%6.0f"}, {"redeliv", f_resurrected, "%8.0f"},
            {"undel", f_undeleted, "%6.0f"}, {"first1 s", f_first1, "%9.2f"},
            {"first2 s", f_first2, "%9.2f"}},
        7, 5, "first1: < 1 is sooner"},
    [TLB_W_FAILOVER] = {"failover (kill -9 of the leader during paced puts)",
        {{"acked", f_acked_kill, "%8.0f"}, {"lost", f_lost, "%6.0f"},
            {"early", f_early, "%6.0f"}, {"write s", f_first1, "%9.2f"},
            {"deliver s", f_first2, "%10.2f"},
            {"late max ms", f_fo_late, "%12.0f"}},
        6, 3, "write s: < 1 is sooner"},
    [TLB_W_LONGREAD] = {"long-read (ms, paced puts and their deliveries "
                        "without / with one client counting the backlog)",
        {{"put p99", f_put99_0, "%8.2f"}, {"+read", f_put99_1, "%8.2f"},
            {"put max+r", f_putmax_1, "%10.2f"},
            {"late p99", f_late99_0, "%9.2f"}, {"+read", f_late99_1, "%8.2f"},
            {"late max+r", f_latemax_1, "%11.2f"}, {"early", f_early, "%6.0f"},
            {"lost", f_lost, "%5.0f"}, {"read s", f_read_s, "%7.2f"}},
        9, 1, "put p99 with the read: < 1 is sooner"},
};

static bool
has_runs_at(const tlb_report *rp, tlb_workload w, int s, uint32_t rate_due)
{
	for (int i = 0; i < rp->nres; i++) {
		if (is_of(&rp->res[i], w, s, rate_due)) {
			return true;
		}
	}
	return false;
}

/* Runs of w on s at any rate. */
static bool
has_runs(const tlb_report *rp, tlb_workload w, int s)
{
	for (int i = 0; i < rp->nres; i++) {
		if (rp->res[i].ran && rp->res[i].w == w &&
		    rp->res[i].sys == s) {
			return true;
		}
	}
	return false;
}

/* The index of Timeline among the systems, or -1. */
static int
timeline_index(const tlb_report *rp)
{
	for (int s = 0; s < rp->nsys; s++) {
		if (rp->sys[s].d == tlb_drivers[0]) {
			return s;
		}
	}
	return -1;
}

static double
ratio_of(const tlb_report *rp, tlb_workload w, int s, uint32_t rate_due)
{
	int t = timeline_index(rp);
	const column *c = &tables[w].cols[tables[w].ratio_col];
	double a, b;

	if (t < 0 || t == s || !has_runs_at(rp, w, t, rate_due)) {
		return NAN;
	}
	a = tlb_median(rp, w, t, rate_due, c->f);
	b = tlb_median(rp, w, s, rate_due, c->f);
	return b != 0 && !isnan(a) && !isnan(b) ? a / b : NAN;
}

static void
table_rows(const tlb_report *rp, tlb_workload w)
{
	const wtable *t = &tables[w];
	uint32_t rates[TLB_MAX_RATES];
	int nr = rates_of(rp, w, rates);
	char name[96];

	for (int k = 0; k < nr; k++) {
		for (int s = 0; s < rp->nsys; s++) {
			double q;

			if (!has_runs_at(rp, w, s, rates[k])) {
				continue;
			}
			printf("%-20s",
			    row_name(rp, s, rates[k], name, sizeof(name)));
			for (int c = 0; c < t->ncols; c++) {
				printf(" ");
				printf(t->cols[c].fmt,
				    tlb_median(
				        rp, w, s, rates[k], t->cols[c].f));
			}
			q = ratio_of(rp, w, s, rates[k]);
			if (!isnan(q)) {
				printf("   %.3g", q);
			}
			printf("\n");
		}
	}
}

/* The tail beside the medians: the worst p99, p99.9 and max lateness of
 * any run (a median of runs hides the one run that stalled). */
static void
tail_table(const tlb_report *rp)
{
	uint32_t rates[TLB_MAX_RATES];
	int nr = rates_of(rp, TLB_W_LATENESS, rates);
	bool head = false;
	char name[96];

	for (int k = 0; k < nr; k++) {
		for (int s = 0; s < rp->nsys; s++) {
			if (!has_runs_at(rp, TLB_W_LATENESS, s, rates[k])) {
				continue;
			}
			if (!head) {
				printf("\nlateness tail: worst of %d run(s), "
				       "ms\n%-20s %9s %9s %9s\n",
				    rp->cfg->com.repeat, "system", "p99",
				    "p99.9", "max");
				head = true;
			}
			printf("%-20s %9.2f %9.2f %9.2f\n",
			    row_name(rp, s, rates[k], name, sizeof(name)),
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_p99),
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_p999),
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_max));
		}
	}
}

void
tlb_report_table(const tlb_report *rp)
{
	printf("\nmedians of %d run(s)\n", rp->cfg->com.repeat);
	for (int w = 0; w < TLB_NWORKLOADS; w++) {
		const wtable *t = &tables[w];
		bool any = false;

		for (int s = 0; s < rp->nsys; s++) {
			any = any || has_runs(rp, (tlb_workload) w, s);
		}
		if (!any) {
			continue;
		}
		printf("\n%s\n%-20s", t->title, "system");
		for (int c = 0; c < t->ncols; c++) {
			int width = atoi(t->cols[c].fmt + 1);

			printf(" %*s", width, t->cols[c].name);
		}
		printf("   timeline/system (%s)\n", t->ratio_note);
		table_rows(rp, (tlb_workload) w);
	}
	tail_table(rp);
	fflush(stdout);
}

/* ---- JSON ---- */

static void
jnum(FILE *f, const char *key, double v, const char *sep)
{
	if (isnan(v) || isinf(v)) {
		fprintf(f, "\"%s\": null%s", key, sep);
	} else {
		fprintf(f, "\"%s\": %.6g%s", key, v, sep);
	}
}

static void
machine_json(FILE *f)
{
	char line[512], model[256] = "";
	struct utsname u;
	FILE *c = fopen("/proc/cpuinfo", "r");

	if (c != NULL) {
		while (fgets(line, sizeof(line), c) != NULL) {
			char *p = strchr(line, ':');

			if (strncmp(line, "model name", 10) == 0 && p != NULL) {
				snprintf(model, sizeof(model), "%s", p + 2);
				model[strcspn(model, "\n\"\\")] = '\0';
				break;
			}
		}
		fclose(c);
	}
	if (uname(&u) != 0) {
		memset(&u, 0, sizeof(u));
	}
	fprintf(f,
	    "  \"machine\": {\"cpus\": %ld, \"model\": \"%s\", "
	    "\"kernel\": \"%s\"},\n",
	    sysconf(_SC_NPROCESSORS_ONLN), model, u.release);
}

static void
run_json(FILE *f, const tlb_report *rp, const tlb_result *r)
{
	fprintf(f,
	    "    {\"workload\": \"%s\", \"system\": \"%s\", \"run\": %d, "
	    "\"ran\": %s, ",
	    tlb_workload_names[r->w], rp->sys[r->sys].label, r->run,
	    r->ran ? "true" : "false");
	jnum(f, "load1", r->load1, ", ");
	fprintf(f,
	    "\"n\": %" PRIu64 ", \"acked\": %" PRIu64 ", \"failed\": %" PRIu64
	    ", \"lost\": %" PRIu64 ", \"early\": %" PRIu64
	    ", \"dups\": %" PRIu64 ", \"redelivered_after_delete\": %" PRIu64
	    ", \"created_late\": %" PRIu64 ", ",
	    r->n, r->acked, r->failed, r->lost, r->early, r->dups,
	    r->resurrected, r->created_late);
	jnum(f, "seconds", r->secs, ", ");
	jnum(f, "rate", r->rate, ", ");
	if (r->w == TLB_W_LATENESS) {
		jnum(f, "due_per_s",
		    (double) r->n * 1000.0 / (double) rp->cfg->late_window_ms,
		    ", ");
		jnum(f, "p50_ms", r->p50, ", ");
		jnum(f, "p90_ms", r->p90, ", ");
		jnum(f, "p99_ms", r->p99, ", ");
		jnum(f, "p999_ms", r->p999, ", ");
		jnum(f, "max_ms", r->max, ", ");
		jnum(f, "mean_ms", r->mean, ", ");
	}
	if (r->w == TLB_W_SCALE) {
		fprintf(f,
		    "\"rss_empty_kb\": %" PRIu64 ", \"rss_kb\": %" PRIu64
		    ", \"disk_bytes\": %" PRIu64 ", ",
		    r->rss0_kb, r->rss_kb, r->disk_bytes);
		jnum(f, "rss_bytes_per_msg", r->rss_per_msg, ", ");
		jnum(f, "disk_bytes_per_msg", r->disk_per_msg, ", ");
		jnum(f, "stop_s", r->stop_s, ", ");
		jnum(f, "restart_to_first_delivery_s", r->first_s, ", ");
		fprintf(f, "\"rss_max_kb\": %" PRIu64 ", ", r->rss_max_kb);
		jnum(f, "fill_lowest_rate", r->fill_min_rate, ", ");
		fprintf(f, "\"fill_per_s_every_%dms\": [", TLB_FILL_TICK_MS);
		for (int i = 0; r->series != NULL && i < r->nseries; i++) {
			fprintf(f, "%s%.0f", i > 0 ? ", " : "", r->series[i]);
		}
		fprintf(f, "], ");
	}
	if (r->w == TLB_W_LONGREAD) {
		static const char *const ph[2] = {"alone", "reading"};

		for (int p = 0; p < 2; p++) {
			fprintf(f, "\"%s\": {", ph[p]);
			jnum(f, "put_p50_ms", r->put_p50[p], ", ");
			jnum(f, "put_p99_ms", r->put_p99[p], ", ");
			jnum(f, "put_max_ms", r->put_max[p], ", ");
			jnum(f, "late_p50_ms", r->late_p50[p], ", ");
			jnum(f, "late_p99_ms", r->late_p99[p], ", ");
			jnum(f, "late_max_ms", r->late_max[p], "}, ");
		}
		fprintf(f, "\"reads\": %d, \"counted\": %" PRIu64 ", ",
		    r->reads, r->counted);
		jnum(f, "read_median_s", r->read_s, ", ");
		jnum(f, "fill_rate", r->rate, ", ");
	}
	if (r->w == TLB_W_FAILOVER) {
		jnum(f, "kill_to_first_acknowledged_put_s", r->first1_s, ", ");
		jnum(f, "kill_to_first_delivery_due_in_outage_s", r->first2_s,
		    ", ");
		jnum(f, "outage_lateness_max_ms", r->fo_lateness_max, ", ");
		fprintf(f, "\"acks_per_s_every_%dms\": [", TLB_FO_TICK_MS);
		for (int i = 0; r->series != NULL && i < r->nseries; i++) {
			fprintf(f, "%s%.0f", i > 0 ? ", " : "", r->series[i]);
		}
		fprintf(f, "], \"kill_at_s\": %.1f, ",
		    (double) r->kill_tick * TLB_FO_TICK_MS / 1000.0);
	}
	if (r->w == TLB_W_CRASH) {
		fprintf(f,
		    "\"acked_before_kill\": %" PRIu64
		    ", \"deleted_before_kill\": %" PRIu64
		    ", \"not_deleted_at_end\": %" PRIu64 ", ",
		    r->acked_at_kill, r->deleted_at_kill, r->undeleted);
		jnum(f, "first_delivery_after_produce_kill_s", r->first1_s,
		    ", ");
		jnum(f, "first_delivery_after_consume_kill_s", r->first2_s,
		    ", ");
	}
	fprintf(f, "\"ok\": %s}",
	    r->lost == 0 && r->early == 0 && r->failed == 0 ? "true" : "false");
}

/* The median rows: one per workload and system (and rate in a sweep). */
static void
median_json(FILE *f, const tlb_report *rp)
{
	const char *sep = "";

	for (int w = 0; w < TLB_NWORKLOADS; w++) {
		const wtable *t = &tables[w];
		uint32_t rates[TLB_MAX_RATES];
		int nr = rates_of(rp, (tlb_workload) w, rates);

		for (int k = 0; k < nr; k++) {
			for (int s = 0; s < rp->nsys; s++) {
				if (!has_runs_at(
				        rp, (tlb_workload) w, s, rates[k])) {
					continue;
				}
				fprintf(f,
				    "%s\n    {\"workload\": \"%s\", "
				    "\"system\": \"%s\", ",
				    sep, tlb_workload_names[w],
				    rp->sys[s].label);
				if (rates[k] > 0) {
					fprintf(
					    f, "\"due_per_s\": %u, ", rates[k]);
				}
				for (int c = 0; c < t->ncols; c++) {
					jnum(f, t->cols[c].name,
					    tlb_median(rp, (tlb_workload) w, s,
					        rates[k], t->cols[c].f),
					    ", ");
				}
				jnum(f, "timeline_over_system",
				    ratio_of(rp, (tlb_workload) w, s, rates[k]),
				    "}");
				sep = ",";
			}
		}
	}
}

/* The tail rows: per system (and rate), the worst lateness of any run. */
static void
tail_json(FILE *f, const tlb_report *rp)
{
	uint32_t rates[TLB_MAX_RATES];
	int nr = rates_of(rp, TLB_W_LATENESS, rates);
	const char *sep = "";

	for (int k = 0; k < nr; k++) {
		for (int s = 0; s < rp->nsys; s++) {
			int runs = 0;

			for (int i = 0; i < rp->nres; i++) {
				runs += is_of(
				    &rp->res[i], TLB_W_LATENESS, s, rates[k]);
			}
			if (runs == 0) {
				continue;
			}
			fprintf(f,
			    "%s\n    {\"workload\": \"lateness\", "
			    "\"system\": \"%s\", ",
			    sep, rp->sys[s].label);
			if (rates[k] > 0) {
				fprintf(f, "\"due_per_s\": %u, ", rates[k]);
			}
			fprintf(f, "\"runs\": %d, ", runs);
			jnum(f, "worst_p99_ms",
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_p99),
			    ", ");
			jnum(f, "worst_p999_ms",
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_p999),
			    ", ");
			jnum(f, "worst_max_ms",
			    worst(rp, TLB_W_LATENESS, s, rates[k], f_max), "}");
			sep = ",";
		}
	}
}

int
tlb_report_json(const tlb_report *rp, const char *path)
{
	const tlb_cfg *c = rp->cfg;
	FILE *f = fopen(path, "w");

	if (f == NULL) {
		perror(path);
		return -1;
	}
	fprintf(f, "{\n");
	machine_json(f);
	fprintf(f,
	    "  \"config\": {\"quick\": %s, \"repeat\": %d, \"body\": %zu, "
	    "\"producers\": %d, \"consumers\": %d, \"credit\": %u, "
	    "\"lease_ms\": %" PRId64 ", \"produce_n\": %" PRIu64
	    ", \"produce_window_ms\": %" PRId64 ", \"lateness_n\": %" PRIu64
	    ", \"lateness_window_ms\": %" PRId64 ", \"cycle_n\": %" PRIu64
	    ", \"scale_n\": %" PRIu64 ", \"crash_n\": %" PRIu64
	    ", \"crash_lease_ms\": %" PRId64 ", \"read_n\": %" PRIu64
	    ", \"read_rate\": %u, \"read_s\": %u, \"lateness_rates\": [",
	    c->quick ? "true" : "false", c->com.repeat, c->body, c->producers,
	    c->consumers, c->credit, c->lease_ms, c->produce_n,
	    c->produce_window_ms, c->late_n, c->late_window_ms, c->cycle_n,
	    c->scale_n, c->crash_n, c->crash_lease_ms, c->read_n, c->read_rate,
	    c->read_s);
	for (int k = 0; k < c->nrates; k++) {
		fprintf(f, "%s%u", k > 0 ? ", " : "", c->rates[k]);
	}
	fprintf(f,
	    "], \"timeline_durability\": \"%s\", "
	    "\"timeline_delivery\": \"%s\"},\n",
	    c->tl_durability != NULL ? c->tl_durability : "always",
	    c->tl_thread_delivery ? "thread" : "inline");
	fprintf(f, "  \"systems\": [\n");
	for (int s = 0; s < rp->nsys; s++) {
		fprintf(f, "    {\"label\": \"%s\", \"how\": \"%s\"}%s\n",
		    rp->sys[s].label, rp->sys[s].d->mode_desc[rp->sys[s].mode],
		    s + 1 < rp->nsys ? "," : "");
	}
	fprintf(f, "  ],\n  \"runs\": [\n");
	for (int i = 0; i < rp->nres; i++) {
		run_json(f, rp, &rp->res[i]);
		fprintf(f, "%s\n", i + 1 < rp->nres ? "," : "");
	}
	fprintf(f, "  ],\n  \"median\": [");
	median_json(f, rp);
	fprintf(f, "\n  ],\n  \"tail\": [");
	tail_json(f, rp);
	fprintf(f, "\n  ]\n}\n");
	if (fclose(f) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

/* ---- plots ---- */

/* The lateness quantiles of the last run of system s, as "fraction ms"
 * lines; false when there are none. */
static bool
cdf_file(const tlb_report *rp, int s, uint32_t rate_due, const char *path)
{
	const tlb_result *r = NULL;
	FILE *f;

	for (int i = 0; i < rp->nres; i++) {
		if (is_of(&rp->res[i], TLB_W_LATENESS, s, rate_due) &&
		    rp->res[i].cdf != NULL) {
			r = &rp->res[i];
		}
	}
	if (r == NULL || (f = fopen(path, "w")) == NULL) {
		return false;
	}
	for (int k = 0; k < TLB_CDF_POINTS; k++) {
		/* log scale: 0 and below (never early, but the clock) at
		 * 0.01 ms */
		double ms = r->cdf[k] > 0.01f ? (double) r->cdf[k] : 0.01;

		fprintf(
		    f, "%.6f %.4f\n", (double) k / (TLB_CDF_POINTS - 1), ms);
	}
	fclose(f);
	return true;
}

/* A table of rows (workloads or metrics) by systems (those with a
 * figure) for a clustered histogram, "?" where one is missing; the
 * number of systems, or -1. */
static int
bars_file(const tlb_report *rp, const char *path, const tlb_workload *ws,
    const tlb_field_fn *fs, const char *const *names, int nrows)
{
	bool on[TLB_MAX_SYSTEMS];
	int n = 0;
	FILE *f = fopen(path, "w");

	if (f == NULL) {
		return -1;
	}
	fprintf(f, "what");
	for (int s = 0; s < rp->nsys; s++) {
		on[s] = false;
		for (int k = 0; k < nrows; k++) {
			on[s] = on[s] || has_runs(rp, ws[k], s);
		}
		if (on[s]) {
			fprintf(f, " %s", rp->sys[s].label);
			n++;
		}
	}
	fprintf(f, "\n");
	for (int k = 0; k < nrows; k++) {
		fprintf(f, "%s", names[k]);
		for (int s = 0; s < rp->nsys; s++) {
			double v = tlb_median(rp, ws[k], s, 0, fs[k]);

			if (!on[s]) {
				continue;
			}
			if (isnan(v) || v <= 0) {
				fprintf(f, " ?");
			} else {
				fprintf(f, " %.6g", v);
			}
		}
		fprintf(f, "\n");
	}
	fclose(f);
	return n;
}

static void
bars_plot(FILE *g, int nsys, const char *dir, const char *name,
    const char *title, const char *ylabel)
{
	if (nsys == 0) {
		return;
	}
	fprintf(g,
	    "set output '%s/%s.png'\nset title '%s'\nset ylabel '%s'\n"
	    "set logscale y\nunset logscale x\nset style data histogram\n"
	    "set style histogram clustered gap 1\nset style fill solid 0.8 "
	    "border -1\nset boxwidth 0.9\nset key top right\nset xtics "
	    "nomirror\nset grid ytics\nset datafile missing '?'\n"
	    "plot for [i=2:%d] '%s/%s.dat' using i:xtic(1) title "
	    "columnheader(i)\n",
	    dir, name, title, ylabel, nsys + 1, dir, name);
}

/* The data file of system s's lateness quantiles (at a sweep's rate). */
static void
cdf_path(const tlb_report *rp, const char *dir, int s, uint32_t rate_due,
    char *path, size_t size)
{
	if (rate_due > 0) {
		snprintf(path, size, "%s/lateness-%u-%s.dat", dir, rate_due,
		    rp->sys[s].label);
	} else {
		snprintf(
		    path, size, "%s/lateness-%s.dat", dir, rp->sys[s].label);
	}
}

/* One lateness CDF (log-scale ms axis), one curve per system; the
 * sweep's rates each get their own plot, lateness-RATE.png. */
static void
cdf_plot(FILE *g, const tlb_report *rp, const char *dir, uint32_t rate_due)
{
	char path[4096], title[64] = "";
	const char *sep = "plot ";

	if (rate_due > 0) {
		snprintf(
		    path, sizeof(path), "%s/lateness-%u.png", dir, rate_due);
		snprintf(title, sizeof(title), ", %u due/s", rate_due);
	} else {
		snprintf(path, sizeof(path), "%s/lateness.png", dir);
	}
	fprintf(g,
	    "set output '%s'\nset title 'Lateness: receive time - due time "
	    "(quantiles of the last run%s)'\nset xlabel 'ms late (log "
	    "scale)'\nset ylabel 'fraction of messages'\nset logscale x\n"
	    "set key bottom right\nset grid\n",
	    path, title);
	for (int s = 0; s < rp->nsys; s++) {
		cdf_path(rp, dir, s, rate_due, path, sizeof(path));
		if (cdf_file(rp, s, rate_due, path)) {
			fprintf(g,
			    "%s'%s' using 2:1 with lines lw 2 title '%s'", sep,
			    path, rp->sys[s].label);
			sep = ", ";
		}
	}
	fprintf(g, "%s", sep[0] == ',' ? "\n" : "set print '-'\nprint ''\n");
	fprintf(g, "unset xlabel\nunset logscale x\nunset grid\n");
}

/* A rate over time, per second: one curve per system (the last run of w
 * that has a series, one point per tick_ms), into NAME.png; a failover's
 * kill is marked. False when no run has one. */
static bool
series_plot(FILE *g, const tlb_report *rp, const char *dir, tlb_workload w,
    const char *name, const char *title, int tick_ms)
{
	char path[4096];
	const char *sep = "plot ";
	double kill_s = -1;

	for (int s = 0; s < rp->nsys; s++) {
		const tlb_result *r = NULL;
		FILE *f;

		for (int i = 0; i < rp->nres; i++) {
			if (is_of(&rp->res[i], w, s, 0) &&
			    rp->res[i].series != NULL) {
				r = &rp->res[i];
			}
		}
		snprintf(path, sizeof(path), "%s/%s-%s.dat", dir, name,
		    rp->sys[s].label);
		if (r == NULL || (f = fopen(path, "w")) == NULL) {
			continue;
		}
		for (int i = 0; i < r->nseries; i++) {
			fprintf(f, "%.2f %.0f\n", (double) i * tick_ms / 1000.0,
			    r->series[i]);
		}
		fclose(f);
		if (sep[0] == 'p') {
			fprintf(g,
			    "set output '%s/%s.png'\nset title '%s'\nset "
			    "xlabel 's from the first put'\nset ylabel "
			    "'acknowledged puts/s'\nunset logscale\nset style "
			    "data lines\nset grid\nset key top right\n",
			    dir, name, title);
			if (w == TLB_W_FAILOVER) {
				kill_s =
				    (double) r->kill_tick * tick_ms / 1000.0;
				fprintf(g,
				    "set arrow 1 from %.2f, graph 0 to %.2f, "
				    "graph 1 nohead dt 2\n",
				    kill_s, kill_s);
			}
		}
		fprintf(g, "%s'%s' using 1:2 with lines lw 2 title '%s'", sep,
		    path, rp->sys[s].label);
		sep = ", ";
	}
	if (sep[0] == ',') {
		fprintf(g, "\nunset arrow 1\nunset xlabel\nunset grid\n");
	}
	return sep[0] == ',';
}

/* The plots' data files go unless --keep. */
static void
dat_remove(const tlb_report *rp, const char *dir)
{
	char path[4096];
	uint32_t rates[TLB_MAX_RATES];
	int nr = rates_of(rp, TLB_W_LATENESS, rates);

	snprintf(path, sizeof(path), "%s/throughput.dat", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/memory.dat", dir);
	unlink(path);
	for (int s = 0; s < rp->nsys; s++) {
		snprintf(path, sizeof(path), "%s/failover-%s.dat", dir,
		    rp->sys[s].label);
		unlink(path);
		snprintf(path, sizeof(path), "%s/fill-%s.dat", dir,
		    rp->sys[s].label);
		unlink(path);
	}
	for (int k = 0; k < nr; k++) {
		for (int s = 0; s < rp->nsys; s++) {
			cdf_path(rp, dir, s, rates[k], path, sizeof(path));
			unlink(path);
		}
	}
}

int
tlb_report_plots(const tlb_report *rp, const char *dir)
{
	static const tlb_workload tw[] = {TLB_W_PRODUCE, TLB_W_CYCLE};
	static const tlb_field_fn tf[] = {f_rate, f_rate};
	static const char *const tn[] = {"produce_msg/s", "lease-cycle/s"};
	static const tlb_workload mw[] = {TLB_W_SCALE, TLB_W_SCALE};
	static const tlb_field_fn mf[] = {f_rss_msg, f_disk_msg};
	static const char *const mn[] = {"RSS_B/msg", "disk_B/msg"};
	char path[4096];
	uint32_t rates[TLB_MAX_RATES];
	FILE *g;
	int st, nt, nm, nr;
	bool fo, fill;

	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/throughput.dat", dir);
	if ((nt = bars_file(rp, path, tw, tf, tn, 2)) < 0) {
		perror(path);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/memory.dat", dir);
	if ((nm = bars_file(rp, path, mw, mf, mn, 2)) < 0) {
		perror(path);
		return -1;
	}
	if ((g = popen("gnuplot", "w")) == NULL) {
		perror("gnuplot");
		return -1;
	}
	fprintf(g, "set terminal pngcairo size 720,420 font ',9' noenhanced\n");
	nr = rates_of(rp, TLB_W_LATENESS, rates);
	for (int k = 0; k < nr; k++) {
		cdf_plot(g, rp, dir, rates[k]);
	}
	bars_plot(
	    g, nt, dir, "throughput", "Throughput (median)", "per second");
	bars_plot(g, nm, dir, "memory", "Per scheduled message (scale, median)",
	    "bytes");
	fo = series_plot(g, rp, dir, TLB_W_FAILOVER, "failover",
	    "Acknowledged puts across a leader kill -9 (dashed)",
	    TLB_FO_TICK_MS);
	fill = series_plot(g, rp, dir, TLB_W_SCALE, "fill",
	    "Filling the scale backlog: acknowledged puts per second",
	    TLB_FILL_TICK_MS);
	st = pclose(g);
	if (!rp->cfg->com.keep) {
		dat_remove(rp, dir);
	}
	if (st != 0) {
		fprintf(stderr, "gnuplot failed (status %d)\n", st);
		return -1;
	}
	printf("plots in %s: lateness%s.png%s%s%s%s\n", dir,
	    nr > 1 || rates[0] > 0 ? "-RATE" : "",
	    nt > 0 ? " throughput.png" : "", nm > 0 ? " memory.png" : "",
	    fo ? " failover.png" : "", fill ? " fill.png" : "");
	return 0;
}
