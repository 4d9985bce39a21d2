/*
 * bench_util.h: the helpers that tl-store-bench and tl-broker-bench share:
 * clocks and sleeps, the due-time mix, rate formatting, the load average,
 * run directories (made with mkdtemp, removed or kept afterwards),
 * medians, the frame of the --json output, table-driven option parsing
 * (with the options both take: --dir, --keep, --repeat, --json) and the
 * loop that runs each asked-for workload --repeat times. Nothing here
 * depends on the store or the SDK.
 */
#ifndef TL_BENCH_UTIL_H
#define TL_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define TLB_BENCH_MAX_RUNS 64

/* The options both programs take. */
typedef struct tlb_bench_common {
	const char *dir; /* parent of the run directories; NULL: /tmp */
	bool keep;       /* keep the run directories */
	int repeat;      /* runs per workload */
	const char *json;
} tlb_bench_common;

/* Clocks: monotonic seconds, wall microseconds and milliseconds. */
double tlb_bench_mono_s(void);
int64_t tlb_bench_wall_us(void);
int64_t tlb_bench_wall_ms(void);
void tlb_bench_sleep_ms(int ms);
/* VmRSS and (when hwm_kb is not NULL) VmHWM of a process, in kB: 0 when
 * all asked for were read. */
int tlb_bench_proc_mem(pid_t pid, uint64_t *rss_kb, uint64_t *hwm_kb);
/* <builddir>/bench/PROGRAM -> <builddir>/broker/timelined (malloc'd). */
char *tlb_bench_default_timelined(void);
/* Copies a server's log file to stderr, under a line naming it. */
void tlb_bench_show_log(const char *path);

/* A cheap mix so due times spread over the hour without a pattern. */
uint64_t tlb_bench_mix64(uint64_t x);

/* r as "1.23M", "456k" (kdigits decimals) or "789". */
void tlb_bench_fmt_rate(char *buf, size_t len, double r, int kdigits);

/* The 1-minute load average, or -1. */
double tlb_bench_load_avg(void);

/* Makes <parent or /tmp>/<prefix>-XXXXXX in buf; 0, or -1 (reported). */
int tlb_bench_dir_make(
    char *buf, size_t len, const tlb_bench_common *o, const char *prefix);

/* Removes the tree at path, or with --keep says that it kept it. */
void tlb_bench_dir_done(const tlb_bench_common *o, const char *path);

/* Sorts v[k] and returns its median, or none when k is 0. */
double tlb_bench_median(double *v, int k, double none);

/* Sort v[n] ascending; then the nearest-rank percentile p (0..1) of the
 * sorted microseconds v[n], in ms (NAN when n is 0). */
void tlb_bench_sort_i64(int64_t *v, size_t n);
double tlb_bench_pct_ms(const int64_t *v, size_t n, double p);

/* Lateness of the messages seen (by message number), in ms. */
typedef struct tlb_bench_late {
	double p50, p90, p99, p999, max, mean;
	uint64_t early; /* delivered before their due time */
} tlb_bench_late;

/* The statistics of late_us[i] for every seen[i] into out; returns the
 * sorted lateness (*n of them, free it) or NULL when out of memory. */
/* Copies l into a result r that has the same six fields. */
#define TLB_BENCH_LATE_INTO(r, l)                                    \
	((r)->p50 = (l).p50, (r)->p90 = (l).p90, (r)->p99 = (l).p99, \
	    (r)->p999 = (l).p999, (r)->max = (l).max, (r)->mean = (l).mean)
int64_t *tlb_bench_late_stats(const _Atomic uint8_t *seen,
    const int64_t *late_us, uint64_t total, tlb_bench_late *out, size_t *n);

/* The frame of the --json file: open (with the cpus line) or NULL,
 * the start of the runs, the separator after run i of n, the start of
 * the medians, and the end. */
FILE *tlb_bench_json_open(const tlb_bench_common *o);
void tlb_bench_json_runs(FILE *f);
void tlb_bench_json_run_end(FILE *f, int i, int n);
void tlb_bench_json_median(FILE *f);
void tlb_bench_json_close(FILE *f);

/* Decimal in [lo, hi] into *out; false when it is not. */
bool tlb_bench_parse_u64(
    const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* What an option takes and how its value is stored. */
typedef enum tlb_bench_opt_type {
	TLB_BENCH_FLAG, /* no value: sets the bool out */
	TLB_BENCH_STR,  /* the value itself, as const char * */
	TLB_BENCH_INT,  /* a decimal in [lo, hi] as int */
	TLB_BENCH_U32,  /* ... as uint32_t */
	TLB_BENCH_U64,  /* ... as uint64_t */
	TLB_BENCH_SIZE, /* ... as size_t */
	TLB_BENCH_FN,   /* a value that the program's own function takes */
} tlb_bench_opt_type;

/* One long option: its name, getopt_long's value for it, what it takes
 * and where it goes. */
typedef struct tlb_bench_opt {
	const char *name;
	int c;
	tlb_bench_opt_type type;
	uint64_t lo;
	uint64_t hi;
	void *out;
} tlb_bench_opt;

#define TLB_BENCH_MAX_OPTS 32

/* The options of tlb_bench_common, as rows of a tlb_bench_opt table. */
/* clang-format off */
#define TLB_BENCH_COMMON_OPTS(com)                                             \
	{"dir", 'd', TLB_BENCH_STR, 0, 0, &(com)->dir},                        \
	{"keep", 'K', TLB_BENCH_FLAG, 0, 0, &(com)->keep},                     \
	{"repeat", 'r', TLB_BENCH_INT, 1, TLB_BENCH_MAX_RUNS, &(com)->repeat}, \
	{"json", 'j', TLB_BENCH_STR, 0, 0, &(com)->json}
/* clang-format on */

/* A TLB_BENCH_FN option: stores val and returns true, or false for a bad
 * value. */
typedef bool (*tlb_bench_opt_fn)(void *arg, int c, const char *val);

/* getopt_long over argv with the n options of opts (at most
 * TLB_BENCH_MAX_OPTS) and --help (-h), which prints usage to stdout and
 * exits 0; TLB_BENCH_FN options go to fn(arg, ...). Then the one operand
 * into *operand. Returns 0, or -1 after a bad value (said on stderr), an
 * unknown option or not exactly one operand. */
int tlb_bench_getopt(int argc, char **argv, const tlb_bench_opt *opts, size_t n,
    tlb_bench_opt_fn fn, void *arg, void (*usage)(FILE *),
    const char **operand);

/* One run of workload w into res, zeroed: fills it, sets *failures and
 * returns 0, or -1 when the run could not run. */
typedef int (*tlb_bench_run_fn)(
    void *arg, void *res, size_t w, int run, uint64_t *failures);

/* After the runs of workload `name`, with the nres results in res so far
 * and the runs per workload: prints the medians. */
typedef void (*tlb_bench_done_fn)(
    const void *res, int nres, const char *name, int repeat);

/* The workloads of a program and how to run them. */
typedef struct tlb_bench_driver {
	const char *const *names; /* workload names */
	size_t n;
	void *res;   /* room for n * TLB_BENCH_MAX_RUNS results */
	size_t size; /* bytes of one result */
	tlb_bench_run_fn run;
	tlb_bench_done_fn done;
	void *arg;         /* for run */
	int nres;          /* out: results in res */
	uint64_t failures; /* out: their failures */
} tlb_bench_driver;

/* Runs every workload that `workload` names ("all": each), repeat times
 * each, counting the results and their failures in d. Returns 0, or -1
 * after saying that a run could not run. */
int tlb_bench_run_all(tlb_bench_driver *d, const char *workload, int repeat);

/* The exit status for `failures`, reported when there are any. */
int tlb_bench_exit_status(uint64_t failures);

#endif /* TL_BENCH_UTIL_H */
