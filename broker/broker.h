/*
 * The broker object, which every module of the daemon is given, and the
 * configuration it runs with. Each module owns its part of the broker and
 * has its own header: server.h (listeners, sessions, the request worker),
 * handlers.h (requests), dispatch.h (the dispatcher), metrics.h (counters
 * and the endpoint), auth.h (credentials), clock.h (timeline time),
 * tlb_log.h (log lines). broker.c starts and stops them in order; each
 * header says its threads and where its locks stand in the lock order.
 */
#ifndef TL_BROKER_H
#define TL_BROKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "frame.h"
#include "metrics.h"
#include "store.h"
#include "tlb_log.h"

/* ---- the broker ---- */

typedef struct tlb_broker tlb_broker;

struct tlb_broker {
	tlb_conf conf;
	tli_store *store;
	tlb_metrics m; /* counted by every module, shown by metrics.c */
	_Atomic bool stopping;

	struct tlb_server *srv;  /* server.c */
	struct tlb_dsp *dsp;     /* dispatch.c */
	struct tlc *cluster;     /* cluster/cluster.c; NULL: a single node */
	struct tlb_mstate *http; /* metrics.c: the endpoint */
	void *msc4140;           /* the in-process MSC4140 gateway (tlg *) */
	void *chronos;           /* the in-process tl-chronos (tlk *) */

	/* authentication (auth.c): the current credentials table (NULL with
	 * auth off) under auth_mtx, and the creates in flight per group */
	pthread_mutex_t auth_mtx;
	struct tlb_auth *auth;
	struct tlb_inflight *inflight;
};

/* Create the configured topics that do not exist (broker.c): at start, or
 * in a cluster when this node takes over as leader. 0, or -1 logged. */
int tlb_create_topics(tlb_broker *b);

#endif
