/*
 * bench_util.c: the helpers shared by tl-store-bench and tl-broker-bench
 * (see bench_util.h): clocks, sleeps, the due-time mix, rate formatting,
 * the load average, making and removing run directories, medians, the
 * frame of the --json output, option parsing and the workload loop. Every
 * helper prints and returns exactly what the copies it replaces did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "bench_util.h"

double
tlb_bench_mono_s(void)
{
	return (double) tli_mono_ns() / 1e9;
}

int64_t
tlb_bench_wall_us(void)
{
	return tli_wall_us();
}

int64_t
tlb_bench_wall_ms(void)
{
	return tlb_bench_wall_us() / 1000;
}

void
tlb_bench_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

int
tlb_bench_proc_mem(pid_t pid, uint64_t *rss_kb, uint64_t *hwm_kb)
{
	char path[64], line[256];
	FILE *f;
	int want = hwm_kb != NULL ? 2 : 1, got = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
	if ((f = fopen(path, "r")) == NULL) {
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long long v;

		if (sscanf(line, "VmRSS: %llu kB", &v) == 1) {
			*rss_kb = v;
			got++;
		} else if (hwm_kb != NULL &&
		    sscanf(line, "VmHWM: %llu kB", &v) == 1) {
			*hwm_kb = v;
			got++;
		}
	}
	fclose(f);
	return got == want ? 0 : -1;
}

int64_t *
tlb_bench_late_stats(const _Atomic uint8_t *seen, const int64_t *late_us,
    uint64_t total, tlb_bench_late *out, size_t *n)
{
	int64_t *v = malloc(sizeof(*v) * (total + 1));
	double sum = 0;

	*n = 0;
	memset(out, 0, sizeof(*out));
	if (v == NULL) {
		return NULL;
	}
	for (uint64_t i = 0; i < total; i++) {
		if (seen[i]) {
			v[(*n)++] = late_us[i];
			sum += (double) late_us[i];
			out->early += late_us[i] < 0 ? 1 : 0;
		}
	}
	tlb_bench_sort_i64(v, *n);
	out->p50 = tlb_bench_pct_ms(v, *n, 0.50);
	out->p90 = tlb_bench_pct_ms(v, *n, 0.90);
	out->p99 = tlb_bench_pct_ms(v, *n, 0.99);
	out->p999 = tlb_bench_pct_ms(v, *n, 0.999);
	out->max = *n > 0 ? (double) v[*n - 1] / 1000.0 : NAN;
	out->mean = *n > 0 ? sum / (double) *n / 1000.0 : NAN;
	return v;
}

char *
tlb_bench_default_timelined(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0) {
		return strdup("timelined");
	}
	exe[n] = '\0';
	snprintf(
	    path, sizeof(path), "%s/broker/timelined", dirname(dirname(exe)));
	return strdup(path);
}

void
tlb_bench_show_log(const char *path)
{
	char line[1024];
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		return;
	}
	fprintf(stderr, "--- %s ---\n", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		fputs(line, stderr);
	}
	fclose(f);
}

uint64_t
tlb_bench_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	x ^= x >> 33;
	return x;
}

void
tlb_bench_fmt_rate(char *buf, size_t len, double r, int kdigits)
{
	if (r >= 1e6) {
		snprintf(buf, len, "%.2fM", r / 1e6);
	} else if (r >= 1e3) {
		snprintf(buf, len, "%.*fk", kdigits, r / 1e3);
	} else {
		snprintf(buf, len, "%.0f", r);
	}
}

double
tlb_bench_load_avg(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");

	if (f != NULL) {
		if (fscanf(f, "%lf", &l) != 1) {
			l = -1;
		}
		fclose(f);
	}
	return l;
}

/* ---- run directories ---- */

int
tlb_bench_dir_make(
    char *buf, size_t len, const tlb_bench_common *o, const char *prefix)
{
	snprintf(
	    buf, len, "%s/%s-XXXXXX", o->dir != NULL ? o->dir : "/tmp", prefix);
	if (mkdtemp(buf) == NULL) {
		perror(buf);
		return -1;
	}
	return 0;
}

void
tlb_bench_dir_done(const tlb_bench_common *o, const char *path)
{
	if (o->keep) {
		fprintf(stderr, "kept %s\n", path);
	} else {
		(void) tli_rmtree(path);
	}
}

/* ---- medians and JSON ---- */

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

double
tlb_bench_median(double *v, int k, double none)
{
	if (k == 0) {
		return none;
	}
	qsort(v, (size_t) k, sizeof(v[0]), cmp_double);
	return k % 2 == 1 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

FILE *
tlb_bench_json_open(const tlb_bench_common *o)
{
	FILE *f = fopen(o->json, "w");

	if (f == NULL) {
		perror(o->json);
		return NULL;
	}
	fprintf(f, "{\n  \"cpus\": %ld,\n", sysconf(_SC_NPROCESSORS_ONLN));
	return f;
}

void
tlb_bench_json_runs(FILE *f)
{
	fprintf(f, "  \"runs\": [\n");
}

void
tlb_bench_json_run_end(FILE *f, int i, int n)
{
	fprintf(f, "%s\n", i + 1 < n ? "," : "");
}

void
tlb_bench_json_median(FILE *f)
{
	fprintf(f, "  ],\n  \"median\": {");
}

void
tlb_bench_json_close(FILE *f)
{
	fprintf(f, "}\n}\n");
	fclose(f);
}

/* ---- options ---- */

bool
tlb_bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0 || v < lo ||
	    v > hi) {
		return false;
	}
	*out = v;
	return true;
}

/* Stores the value val of option o; false when it is a bad one. */
static bool
opt_store(
    const tlb_bench_opt *o, const char *val, tlb_bench_opt_fn fn, void *arg)
{
	uint64_t v = 0;

	if (o->type == TLB_BENCH_FLAG) {
		*(bool *) o->out = true;
		return true;
	}
	if (o->type == TLB_BENCH_STR) {
		*(const char **) o->out = val;
		return true;
	}
	if (o->type == TLB_BENCH_FN) {
		return fn(arg, o->c, val);
	}
	if (!tlb_bench_parse_u64(val, o->lo, o->hi, &v)) {
		return false;
	}
	switch (o->type) {
	case TLB_BENCH_INT:
		*(int *) o->out = (int) v;
		break;
	case TLB_BENCH_U32:
		*(uint32_t *) o->out = (uint32_t) v;
		break;
	case TLB_BENCH_U64:
		*(uint64_t *) o->out = v;
		break;
	default:
		*(size_t *) o->out = (size_t) v;
		break;
	}
	return true;
}

int
tlb_bench_getopt(int argc, char **argv, const tlb_bench_opt *opts, size_t n,
    tlb_bench_opt_fn fn, void *arg, void (*usage)(FILE *), const char **operand)
{
	struct option longs[TLB_BENCH_MAX_OPTS + 2];
	int c;

	if (n > TLB_BENCH_MAX_OPTS) {
		fprintf(stderr, "too many options\n");
		return -1;
	}
	memset(longs, 0, sizeof(longs));
	for (size_t k = 0; k < n; k++) {
		longs[k].name = opts[k].name;
		longs[k].has_arg = opts[k].type == TLB_BENCH_FLAG
		    ? no_argument
		    : required_argument;
		longs[k].val = opts[k].c;
	}
	longs[n].name = "help";
	longs[n].has_arg = no_argument;
	longs[n].val = 'h';
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		bool ok = false;

		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		for (size_t k = 0; k < n; k++) {
			if (opts[k].c == c) {
				ok = opt_store(&opts[k], optarg, fn, arg);
				break;
			}
		}
		if (!ok) {
			if (c != '?') {
				fprintf(stderr, "bad value: %s\n",
				    optarg != NULL ? optarg : "");
			}
			return -1;
		}
	}
	if (optind + 1 != argc) {
		return -1;
	}
	*operand = argv[optind];
	return 0;
}

/* ---- running the workloads ---- */

int
tlb_bench_run_all(tlb_bench_driver *d, const char *workload, int repeat)
{
	for (size_t w = 0; w < d->n; w++) {
		if (strcmp(workload, "all") != 0 &&
		    strcmp(workload, d->names[w]) != 0) {
			continue;
		}
		for (int i = 0; i < repeat; i++) {
			void *r = (char *) d->res + (size_t) d->nres * d->size;
			uint64_t f = 0;

			memset(r, 0, d->size);
			if (d->run(d->arg, r, w, i + 1, &f) != 0) {
				fprintf(stderr, "%s: run %d could not run\n",
				    d->names[w], i + 1);
				return -1;
			}
			d->failures += f;
			d->nres++;
		}
		d->done(d->res, d->nres, d->names[w], repeat);
	}
	return 0;
}

int
tlb_bench_exit_status(uint64_t failures)
{
	if (failures > 0) {
		fprintf(stderr, "%llu failed operations or checks\n",
		    (unsigned long long) failures);
		return 1;
	}
	return 0;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

void
tlb_bench_sort_i64(int64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_i64);
}

double
tlb_bench_pct_ms(const int64_t *v, size_t n, double p)
{
	size_t k;

	if (n == 0) {
		return NAN;
	}
	k = (size_t) ceil(p * (double) n);
	k = k == 0 ? 0 : k - 1;
	return (double) v[k < n ? k : n - 1] / 1000.0;
}
