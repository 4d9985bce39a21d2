/*
 * report.c: the outputs of tl-bench: the table for people (medians per
 * workload and system, and the ratio Timeline / peer of each workload's
 * main figure), the JSON file (the machine, the configuration, every run,
 * the medians and the ratios) and the PNG plots drawn by gnuplot
 * (lateness distribution per system, throughput per workload per system,
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

double
tlb_median(const tlb_report *rp, tlb_workload w, int s, tlb_field_fn f)
{
	double v[TLB_BENCH_MAX_RUNS];
	int k = 0;

	for (int i = 0; i < rp->nres && k < TLB_BENCH_MAX_RUNS; i++) {
		const tlb_result *r = &rp->res[i];

		if (r->ran && r->w == w && r->sys == s) {
			v[k++] = f(r);
		}
	}
	return tlb_bench_median(v, k, NAN);
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
        {{"RSS MB", f_rss, "%9.1f"}, {"RSS B/msg", f_rss_msg, "%10.1f"},
            {"disk B/msg", f_disk_msg, "%11.1f"},
            {"restart s", f_first, "%10.2f"}},
        4, 1, "RSS B/msg: < 1 is smaller"},
    [TLB_W_CRASH] = {"crash (kill -9 during puts, then during deletes)",
        {{"acked", f_acked_kill, "%8.0f"}, {"lost", f_lost, "%6.0f"},
            {"early", f_early, "%6.0f"}, {"redeliv", f_resurrected, "%8.0f"},
            {"undel", f_undeleted, "%6.0f"}, {"first1 s", f_first1, "%9.2f"},
            {"first2 s", f_first2, "%9.2f"}},
        7, 5, "first1: < 1 is sooner"},
};

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
ratio_of(const tlb_report *rp, tlb_workload w, int s)
{
	int t = timeline_index(rp);
	const column *c = &tables[w].cols[tables[w].ratio_col];
	double a, b;

	if (t < 0 || t == s || !has_runs(rp, w, t)) {
		return NAN;
	}
	a = tlb_median(rp, w, t, c->f);
	b = tlb_median(rp, w, s, c->f);
	return b != 0 && !isnan(a) && !isnan(b) ? a / b : NAN;
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
		for (int s = 0; s < rp->nsys; s++) {
			double q;

			if (!has_runs(rp, (tlb_workload) w, s)) {
				continue;
			}
			printf("%-20s", rp->sys[s].label);
			for (int c = 0; c < t->ncols; c++) {
				printf(" ");
				printf(t->cols[c].fmt,
				    tlb_median(
				        rp, (tlb_workload) w, s, t->cols[c].f));
			}
			q = ratio_of(rp, (tlb_workload) w, s);
			if (!isnan(q)) {
				printf("   %.3g", q);
			}
			printf("\n");
		}
	}
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

int
tlb_report_json(const tlb_report *rp, const char *path)
{
	const tlb_cfg *c = rp->cfg;
	FILE *f = fopen(path, "w");
	const char *sep = "";

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
	    ", \"crash_lease_ms\": %" PRId64 "},\n",
	    c->quick ? "true" : "false", c->com.repeat, c->body, c->producers,
	    c->consumers, c->credit, c->lease_ms, c->produce_n,
	    c->produce_window_ms, c->late_n, c->late_window_ms, c->cycle_n,
	    c->scale_n, c->crash_n, c->crash_lease_ms);
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
	for (int w = 0; w < TLB_NWORKLOADS; w++) {
		for (int s = 0; s < rp->nsys; s++) {
			const wtable *t = &tables[w];

			if (!has_runs(rp, (tlb_workload) w, s)) {
				continue;
			}
			fprintf(f,
			    "%s\n    {\"workload\": \"%s\", \"system\": "
			    "\"%s\", ",
			    sep, tlb_workload_names[w], rp->sys[s].label);
			for (int k = 0; k < t->ncols; k++) {
				jnum(f, t->cols[k].name,
				    tlb_median(
				        rp, (tlb_workload) w, s, t->cols[k].f),
				    ", ");
			}
			jnum(f, "timeline_over_system",
			    ratio_of(rp, (tlb_workload) w, s), "}");
			sep = ",";
		}
	}
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
cdf_file(const tlb_report *rp, int s, const char *path)
{
	const tlb_result *r = NULL;
	FILE *f;

	for (int i = 0; i < rp->nres; i++) {
		if (rp->res[i].w == TLB_W_LATENESS && rp->res[i].sys == s &&
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
			double v = tlb_median(rp, ws[k], s, fs[k]);

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

/* The plots' data files go unless --keep. */
static void
dat_remove(const tlb_report *rp, const char *dir)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/throughput.dat", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/memory.dat", dir);
	unlink(path);
	for (int s = 0; s < rp->nsys; s++) {
		snprintf(path, sizeof(path), "%s/lateness-%s.dat", dir,
		    rp->sys[s].label);
		unlink(path);
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
	const char *sep = "plot ";
	FILE *g;
	int st, nt, nm;

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
	fprintf(g,
	    "set output '%s/lateness.png'\nset title 'Lateness: receive time "
	    "- due time (quantiles of the last run)'\nset xlabel 'ms late "
	    "(log scale)'\nset ylabel 'fraction of messages'\nset logscale "
	    "x\nset key bottom right\nset grid\n",
	    dir);
	for (int s = 0; s < rp->nsys; s++) {
		snprintf(path, sizeof(path), "%s/lateness-%s.dat", dir,
		    rp->sys[s].label);
		if (cdf_file(rp, s, path)) {
			fprintf(g,
			    "%s'%s' using 2:1 with lines lw 2 title '%s'", sep,
			    path, rp->sys[s].label);
			sep = ", ";
		}
	}
	fprintf(g, "%s", sep[0] == ',' ? "\n" : "set print '-'\nprint ''\n");
	fprintf(g, "unset xlabel\nunset logscale x\nunset grid\n");
	bars_plot(
	    g, nt, dir, "throughput", "Throughput (median)", "per second");
	bars_plot(g, nm, dir, "memory", "Per scheduled message (scale, median)",
	    "bytes");
	st = pclose(g);
	if (!rp->cfg->com.keep) {
		dat_remove(rp, dir);
	}
	if (st != 0) {
		fprintf(stderr, "gnuplot failed (status %d)\n", st);
		return -1;
	}
	printf("plots in %s: lateness.png throughput.png memory.png\n", dir);
	return 0;
}
