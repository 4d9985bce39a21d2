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

#include "frame.h"
#include "metrics.h"
#include "store.h"
#include "tlb_log.h"

/* ---- configuration ---- */

#define TLB_MAX_LISTEN 8
#define TLB_MAX_TOPICS 32

typedef struct tlb_conf {
	char data_dir[512];
	char listen[TLB_MAX_LISTEN][256];
	int nlisten;
	tli_sync_mode sync_mode;
	int sync_interval_ms;
	char topics[TLB_MAX_TOPICS][TL_MAX_NAME_LEN + 16]; /* name[:buckets] */
	int ntopics;
	char metrics[256]; /* "host:port" or "" for none */
	char name[64];
	char ready_file[512];  /* written with the bound URLs when ready */
	int64_t clock_warn_ms; /* warn when a client's clock is this far off */
	int64_t window_ms;     /* the dispatcher's near-future window */
	int64_t idle_ms;       /* close a session silent this long; 0: never */
	char msc4140[512];     /* MSC4140 gateway configuration file, or "" */
	/* authentication and TLS (docs/auth.md) */
	bool auth;             /* auth = on: every session needs a token */
	char credentials[512]; /* the credentials file */
	char tls_cert[512];    /* PEM certificate (chain) of tls+tcp:// */
	char tls_key[512];     /* its PEM private key */
	char tls_ca[512];      /* CAs that sign client certificates */
	int tls_client_auth;   /* 0 none, 1 optional, 2 required */
} tlb_conf;

void tlb_conf_defaults(tlb_conf *c);
/* Apply a config file, then command-line flags. Returns 0, or prints a
 * clear message and returns 2 (usage) / 1 (bad value). */
int tlb_conf_load(tlb_conf *c, int argc, char **argv);
/* Strip blanks and line ends at both ends of s, in place (config files). */
char *tlb_trim(char *s);

/* ---- the broker ---- */

typedef struct tlb_broker tlb_broker;

struct tlb_broker {
	tlb_conf conf;
	tli_store *store;
	tlb_metrics m; /* counted by every module, shown by metrics.c */
	_Atomic bool stopping;

	struct tlb_server *srv;  /* server.c */
	struct tlb_dsp *dsp;     /* dispatch.c */
	struct tlb_mstate *http; /* metrics.c: the endpoint */
	void *msc4140;           /* the in-process MSC4140 gateway (tlg *) */

	/* authentication (auth.c): the current credentials table (NULL with
	 * auth off) under auth_mtx, and the creates in flight per group */
	pthread_mutex_t auth_mtx;
	struct tlb_auth *auth;
	struct tlb_inflight *inflight;
};

#endif
