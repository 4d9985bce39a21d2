/*
 * The broker's counters and its Prometheus endpoint. tlb_metrics is a set
 * of atomics embedded in the broker object: the module where a thing
 * happens counts it (handlers, the dispatcher, the server), with no lock
 * and no call into this module. metrics.c owns the HTTP endpoint (nng's
 * HTTP server, /metrics) and a thread that refreshes the topic gauges once
 * a second, so no store read runs on nng's threads; a scrape also asks the
 * server for a per-session summary and the dispatcher for its per-topic and
 * per-subscription figures. Lock order: the endpoint's own lock is a leaf;
 * the snapshots are taken one at a time, never nested.
 */
#ifndef TL_BROKER_METRICS_H
#define TL_BROKER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "frame.h"

typedef struct tlb_broker tlb_broker;

/* Upper bounds (ms) of the lateness histogram's buckets; one more bucket
 * holds the rest. */
#define TLB_LAT_BUCKETS 18
static const double tlb_lat_bounds[TLB_LAT_BUCKETS] = {0.05, 0.1, 0.2, 0.3, 0.5,
    1, 2, 3, 5, 7.5, 10, 15, 20, 50, 100, 250, 500, 1000};

typedef struct tlb_metrics {
	_Atomic uint64_t ops[TLP_OP_MAX_];      /* requests by operation */
	_Atomic uint64_t items_ok[TLP_OP_MAX_]; /* items that succeeded */
	_Atomic uint64_t items_err[TLP_OP_MAX_];
	_Atomic uint64_t leases;
	_Atomic uint64_t lease_fail;
	_Atomic uint64_t dead_lettered;
	_Atomic uint64_t leases_late; /* asked ahead, durable after due */
	_Atomic uint64_t delivered;
	_Atomic uint64_t lost; /* LEASE_LOST notices */
	_Atomic uint64_t lat_count[TLB_LAT_BUCKETS + 1];
	_Atomic uint64_t lat_sum_us;
	_Atomic uint64_t early;           /* must stay 0 */
	_Atomic uint64_t push_sends;      /* the push thread's send rounds */
	_Atomic uint64_t push_send_ns;    /* time in them */
	_Atomic uint64_t push_sends_slow; /* over TLB_PUSH_SEND_SLOW_NS */
	_Atomic uint64_t sessions;
	_Atomic uint64_t sessions_total;
	_Atomic uint64_t proto_errors;
	_Atomic uint64_t pre_hello_refused; /* first frame over the limit */
	_Atomic uint64_t hello_timeouts;    /* no HELLO in hello_timeout_ms */
	_Atomic uint64_t refused_max_sessions; /* at accept: max_sessions */
	_Atomic uint64_t refused_per_ip; /* at accept: max_sessions_per_ip */
	_Atomic uint64_t refused_unauth; /* at accept: max_unauth_sessions */
	_Atomic uint64_t input_bytes;  /* gauge: reserved of max_input_bytes */
	_Atomic uint64_t input_stalls; /* reads stopped by max_input_bytes */
	_Atomic uint64_t
	    reads_running;            /* gauge: long reads on reader threads */
	_Atomic uint64_t reads_total; /* long reads handed to readers */
	_Atomic uint64_t auth_refusals[TLP_OP_MAX_];  /* TL_ENOTAUTH */
	_Atomic uint64_t quota_refusals[TLP_OP_MAX_]; /* per-group limits */
	_Atomic uint64_t not_leader; /* cluster: TL_ENOTLEADER answers */
} tlb_metrics;

/* A push late_us microseconds after its due time (negative counts as 0). */
static inline void
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

/* A send round of the push thread slower than this holds up the pushes
 * that fall due meanwhile. */
#define TLB_PUSH_SEND_SLOW_NS 500000

/* The push thread sent what it pushed in ns nanoseconds. */
static inline void
tlb_metrics_push_send(tlb_metrics *m, int64_t ns)
{
	atomic_fetch_add(&m->push_sends, 1);
	atomic_fetch_add(&m->push_send_ns, (uint64_t) (ns < 0 ? 0 : ns));
	if (ns > TLB_PUSH_SEND_SLOW_NS) {
		atomic_fetch_add(&m->push_sends_slow, 1);
	}
}

/* Serve /metrics on conf.metrics (nothing when it is ""). Returns -1 when
 * the address cannot be served (logged). */
int tlb_metrics_start(tlb_broker *b);
void tlb_metrics_stop(tlb_broker *b);

#endif
