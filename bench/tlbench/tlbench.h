/*
 * tlbench.h: what the workloads of tl-bench (tl_bench.c) hand to its
 * reports (report.c): the configuration, the systems under test (a driver
 * in one of its modes) and one result per run of a workload on a system.
 */
#ifndef TLB_TLBENCH_H
#define TLB_TLBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench_util.h"
#include "driver.h"

#define TLB_MAX_SYSTEMS 16
#define TLB_MAX_RESULTS 1024
#define TLB_CDF_POINTS 1000
#define TLB_MAX_RATES 8

typedef enum tlb_workload {
	TLB_W_PRODUCE,
	TLB_W_LATENESS,
	TLB_W_CYCLE,
	TLB_W_SCALE,
	TLB_W_CRASH,
	TLB_W_FAILOVER,
	TLB_W_LONGREAD,
	TLB_NWORKLOADS,
} tlb_workload;

extern const char *const tlb_workload_names[TLB_NWORKLOADS];

typedef struct tlb_cfg {
	tlb_bench_common com; /* --dir, --keep, --repeat, --json */
	const char *timelined;
	const char *systems; /* comma list of labels or driver names */
	const char *plots;   /* directory for PNG plots */
	bool quick;
	bool ipc;                  /* Timeline's clients over ipc:// */
	bool tl_thread_delivery;   /* Timeline's consumers: callbacks on the
	                            * consumer's thread, not inline */
	const char *tl_durability; /* --timeline-durability (always) */
	bool workload_on[TLB_NWORKLOADS];
	size_t body;
	int producers;
	int consumers;
	uint32_t credit;
	int64_t lease_ms;
	uint64_t produce_n;
	int64_t produce_window_ms;
	uint64_t late_n;
	int64_t late_window_ms;
	/* --rates: lateness runs at each of these (messages falling due per
	 * second over late_window_ms) instead of once with late_n */
	uint32_t rates[TLB_MAX_RATES];
	int nrates;
	int64_t lead_ms; /* 0: automatic */
	int64_t grace_ms;
	uint64_t cycle_n;
	uint64_t scale_n;
	uint64_t crash_n;
	int64_t crash_lease_ms;
	uint32_t failover_rate; /* puts per second, paced */
	uint32_t failover_s;    /* seconds of puts; the kill at a third */
	uint64_t read_n;        /* long-read: messages an hour ahead */
	uint32_t read_rate;     /* long-read: paced puts per second */
	uint32_t read_s;        /* long-read: seconds of each phase */
} tlb_cfg;

/* A system under test: a driver in one of its modes. */
typedef struct tlb_system {
	const tlb_driver *d;
	int mode;
	char label[64];
} tlb_system;

/* One run of one workload on one system; the fields used depend on the
 * workload. Rates are per second, times in ms unless said. */
typedef struct tlb_result {
	tlb_workload w;
	int sys;
	int run;
	uint32_t rate_due; /* lateness of a --rates sweep: its rate, else 0 */
	bool ran;
	double load1;
	uint64_t n;
	uint64_t acked;
	uint64_t failed;       /* put or delete errors, missing deliveries */
	uint64_t lost;         /* acknowledged, never delivered / deleted */
	uint64_t early;        /* deliveries before the due time */
	uint64_t dups;         /* deliveries after the first */
	uint64_t resurrected;  /* delivered after an acknowledged delete */
	uint64_t created_late; /* acknowledged after its due time */
	double secs;
	double rate;
	double p50, p90, p99, p999, max, mean;
	uint64_t rss0_kb, rss_kb, disk_bytes;
	double rss_per_msg, disk_per_msg;
	double stop_s;
	double first_s;  /* scale: restart to first delivery */
	double first1_s; /* crash: after the kill during produce */
	double first2_s; /* crash: after the kill during consume */
	uint64_t acked_at_kill, deleted_at_kill;
	uint64_t undeleted; /* crash: delivered, never deleted */
	float *cdf; /* lateness: TLB_CDF_POINTS quantiles (ms) or NULL */
	/* failover: acknowledged puts per TLB_FO_TICK_MS from the first put
	 * (nseries ticks), and the kill's tick */
	float *series;
	int nseries;
	int kill_tick;
	double fo_lateness_max; /* ms, of the messages due in the outage */
	/* scale: the fill's acknowledged puts per TLB_FILL_TICK_MS in
	 * series, the lowest rate over TLB_FILL_WINDOW_S, the highest RSS
	 * seen during the fill */
	double fill_min_rate;
	uint64_t rss_max_kb;
	/* long-read: [0] without the reader, [1] while one client reads the
	 * whole backlog over and over (ms; put latency from the planned
	 * send time to the acknowledgement) */
	double put_p50[2], put_p99[2], put_max[2];
	double late_p50[2], late_p99[2], late_max[2];
	int reads;        /* whole reads done in the reading phase */
	double read_s;    /* the median one's duration */
	uint64_t counted; /* messages the last one counted */
} tlb_result;

#define TLB_FO_TICK_MS 100
#define TLB_FILL_TICK_MS 1000
#define TLB_FILL_WINDOW_S 5

typedef struct tlb_report {
	const tlb_cfg *cfg;
	const tlb_system *sys;
	int nsys;
	tlb_result *res;
	int nres;
} tlb_report;

/* The median over the runs of workload w on system s (at the sweep's rate
 * rate_due, 0 outside a --rates sweep) of a field. */
typedef double (*tlb_field_fn)(const tlb_result *r);
double tlb_median(const tlb_report *rp, tlb_workload w, int s,
    uint32_t rate_due, tlb_field_fn f);

void tlb_report_table(const tlb_report *rp);
int tlb_report_json(const tlb_report *rp, const char *path);
int tlb_report_plots(const tlb_report *rp, const char *dir);

#endif /* TLB_TLBENCH_H */
