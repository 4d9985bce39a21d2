/*
 * tl-chronos, the Chronos timer API on Timeline: the interface used by its
 * standalone binary (tl-chronos) and by timelined, which can run it
 * in-process (chronos = FILE). Like the MSC4140 gateway it talks to the
 * broker only through the public SDK.
 */
#ifndef TL_CHRONOS_H
#define TL_CHRONOS_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"

typedef struct tlk_conf {
	char listen[256]; /* HTTP "HOST:PORT" (port 0: any free port) */
	char broker[512]; /* broker URL (standalone) */
	char broker_token[512];
	char topic[128];             /* the timers' topic */
	char group[128];             /* the producer group of the timers */
	char consumer_id[128];       /* the popper's consumer id */
	char ready_file[512];        /* written with the HTTP URL when ready */
	int64_t callback_timeout_ms; /* a callback's answer (2 s) */
	int64_t retry_for_ms;        /* retries of a failed pop, from its due */
	int64_t retry_min_ms;        /* the first retry's delay */
	int64_t retry_max_ms;        /* the longest delay between retries */
	int64_t lease_ms;            /* a pop's lease on the broker */
	uint32_t workers;            /* callbacks in flight at once */
	uint32_t max_body;           /* a timer's JSON */
	int64_t max_interval_ms;     /* interval and repeat-for */
} tlk_conf;

#define TLK_CONF_HELP 1

/* Every setting of tl-chronos, once (and its flags). */
extern const tli_conf_table tlk_conf_table;

void tlk_conf_defaults(tlk_conf *c);
/* Checks what the service cannot run with. 0, or 1 with the reason. */
int tlk_conf_verify(const tlk_conf *c, char *err, size_t cap);

typedef struct tlk tlk;

/* Connect to the broker (broker_url, or the configuration's when NULL),
 * create the topic, count the stored timers, start popping and serving.
 * 0, or logs why and returns -1. */
int tlk_start(tlk **out, const tlk_conf *c, const char *broker_url);
/* The HTTP base URL served. */
const char *tlk_url(const tlk *k);
/* Stop serving and popping, close the broker connection. NULL ok. */
void tlk_stop(tlk *k);

/* The in-process form used by timelined: read the configuration file and
 * start against broker_url. NULL on failure (logged). */
tlk *tlk_start_file(const char *conf_path, const char *broker_url);

#endif
