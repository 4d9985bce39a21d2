/*
 * Internals of tl-chronos shared between its files: the service object,
 * a timer as parsed from a request and as stored, the live-timer
 * statistics and the pop workers.
 *
 * DESIGN. Every timer is one Timeline message on the topic (id = the timer
 * id, owner = the group, body = the timer in JSON), with the broker's
 * recurrence: due at creation + interval, then every interval, `times`
 * occurrences in all, catch_up on so that every pop missed during an
 * outage is delivered, in order. The broker does the scheduling and the
 * durability; this service only translates. Threads: tlhttp's event loops
 * and workers run the API (blocking SDK calls on the workers); the SDK's
 * consumer thread hands each lease to a queue that `workers` threads take
 * from, each making one callback at a time. Locks: the queue's and the
 * statistics' are leaves, never nested.
 */
#ifndef TL_CHRONOS_KT_H
#define TL_CHRONOS_KT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "buf.h"
#include "chronos.h"
#include "htab.h"
#include "log.h"
#include "queue.h"
#include "text.h"
#include "timeline/timeline.h"
#include "tlhttp.h"

/* A timer id: 128 random bits as 32 lowercase hex digits. */
#define TLK_ID_LEN 32
#define TLK_MAX_TAGS 16
#define TLK_MAX_TAG_LEN 128

typedef struct tlk_tag {
	char type[TLK_MAX_TAG_LEN + 1];
	uint64_t count;
} tlk_tag;

/* A timer (api.c parses requests into it, pop.c reads the stored JSON). */
typedef struct tlk_timer {
	int64_t interval_ms;
	int64_t repeat_for_ms; /* -1: none (one pop) */
	char *uri;             /* owned */
	char *opaque;          /* owned */
	size_t opaque_len;
	int64_t replication; /* stored and reported */
	tlk_tag tags[TLK_MAX_TAGS];
	int ntags;
} tlk_timer;

/* Parses a request body (or a stored one); interval and repeat-for up to
 * max_ms. 0, or -1 with the reason for a 400 in err. */
int tlk_timer_parse(tlk_timer *t, const char *body, size_t len, int64_t max_ms,
    char *err, size_t cap);
/* The stored form (JSON). */
void tlk_timer_json(const tlk_timer *t, tli_buf *out);
void tlk_timer_fini(tlk_timer *t);
/* How many pops: floor(repeat-for / interval), 1 without repeat-for. */
uint64_t tlk_timer_pops(const tlk_timer *t);

/* ---- statistics (service.c) ---- */

#define TLK_LAT_BUCKETS 11

typedef struct tlk_stats {
	pthread_mutex_t mtx;
	tli_htab timers; /* of tstat: the live timers' tags */
	tli_htab tags;   /* of tagsum: summed counts per tag type */
	uint64_t live;
	uint64_t gen;          /* the last entry's generation */
	uint64_t by_rf[8];     /* live timers by replication factor 1..7, 8+ */
	_Atomic uint64_t pops; /* callbacks answered 2xx */
	_Atomic uint64_t attempts; /* callbacks made */
	_Atomic uint64_t failures; /* pops given up on */
	_Atomic uint64_t retries;  /* failed attempts retried later */
	_Atomic uint64_t lat[TLK_LAT_BUCKETS + 1];
	_Atomic uint64_t lat_sum_us;
} tlk_stats;

/* A timer is live with these tags (replacing what id had). */
void tlk_stats_add(tlk *k, const char *id, const tlk_timer *t);
/* A timer is gone (deleted, replaced by nothing, or popped its last). */
void tlk_stats_del(tlk *k, const char *id);
/* The generation of id's entry (0: none): a pop takes it while it holds
 * the lease, and removes after its last pop only that generation
 * (tlk_stats_del_gen), not a timer a PUT made meanwhile. */
uint64_t tlk_stats_gen(tlk *k, const char *id);
void tlk_stats_del_gen(tlk *k, const char *id, uint64_t gen);
void tlk_stats_latency(tlk *k, int64_t us);
void tlk_stats_render(tlk *k, tli_buf *o);

/* ---- pops (pop.c) ---- */

typedef struct kjob {
	tli_qnode qn;
	tl_lease *lease;
} kjob;

int tlk_pop_start(tlk *k);
void tlk_pop_stop(tlk *k);

/* ---- the service ---- */

struct tlk {
	tlk_conf c;
	tl_client *cl;
	tl_consumer *cons;
	tlh_server *http;
	tlh_client *hc; /* the callbacks' connections */
	char url[300];
	_Atomic bool stopping;
	tlk_stats st;

	pthread_mutex_t q_mtx;
	pthread_cond_t q_cv;
	tli_queue q; /* of kjob */
	bool q_stop;
	pthread_t *workers;
	uint32_t nworkers;
};

int tlk_http_start(tlk *k);
void tlk_http_stop(tlk *k);
/* Whether s[0..n) is a timer id of ours (32 hex digits). */
bool tlk_id_ok(const char *s, size_t n);
/* Whether an SDK error means the broker cannot be reached (503). */
bool tlk_broker_down(int err);

#endif
