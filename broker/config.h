/*
 * The broker's configuration: the tlb_conf struct and its settings table
 * (config.c), read from defaults, then the -c files, then the flags, by
 * the one loader of base/conf.h. docs/timelined.md's settings reference
 * is generated from the table (gen_settings_md).
 */
#ifndef TL_BROKER_CONFIG_H
#define TL_BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "store.h"
#include "timeline/limits.h"

#define TLB_MAX_LISTEN 8
#define TLB_MAX_TOPICS 32
#define TLB_MAX_NODES 7 /* nodes of a cluster */
/* lease_ahead_ms = auto: on a single broker, and in a cluster */
#define TLB_LEASE_AHEAD_MS 50
#define TLB_LEASE_AHEAD_CLUSTER_MS 250

/* One `cluster_node` line, parsed. */
typedef struct tlb_node {
	uint64_t id;
	char raft[256]; /* HOST:PORT of its Raft transport */
	char url[256];  /* its client URL, named in redirects */
} tlb_node;

typedef struct tlb_conf {
	char data_dir[512];
	char listen[TLB_MAX_LISTEN][256];
	int nlisten;
	tli_sync_mode sync_mode;
	int sync_interval_ms;
	char topics[TLB_MAX_TOPICS][TL_MAX_NAME_LEN + 16]; /* name[:buckets] */
	int ntopics;
	int log_level;     /* a tli_log_level; main applies it */
	char metrics[256]; /* "host:port" or "" for none */
	char name[64];
	char ready_file[512];  /* written with the bound URLs when ready */
	int64_t clock_warn_ms; /* warn when a client's clock is this far off */
	int64_t window_ms;     /* the dispatcher's near-future window */
	int64_t background_write_mb; /* RocksDB flush+compaction MiB/s; 0 */
	int64_t compaction_nice; /* RocksDB compactions this much nicer; 0 */
	int64_t block_cache_mb;  /* RocksDB's block cache, MiB */
	int64_t lease_ahead_ms; /* leases taken this long before the due time */
	int64_t push_priority;  /* SCHED_FIFO priority of tl-push; 0: off; -1:
	                           auto */
	int64_t idle_ms;        /* close a session silent this long; 0: never */
	int64_t hello_ms;       /* close a session without HELLO; 0: never */
	int64_t max_sessions;   /* refuse connections beyond; 0: no limit */
	int64_t max_sessions_per_ip; /* the same per client address */
	int64_t max_unauth_sessions; /* the same for sessions before HELLO */
	int64_t max_hello_bytes;     /* the longest frame before HELLO */
	int64_t max_input_bytes;     /* frames read or queued; 0: no bound */
	char msc4140[512]; /* MSC4140 gateway configuration file, or "" */
	char chronos[512]; /* tl-chronos configuration file, or "" */
	/* authentication and TLS (docs/auth.md) */
	bool auth;             /* auth = on: every session needs a token */
	char credentials[512]; /* the credentials file */
	char tls_cert[512];    /* PEM certificate (chain) of tls+tcp:// */
	char tls_key[512];     /* its PEM private key */
	char tls_ca[512];      /* CAs that sign client certificates */
	int tls_client_auth;   /* 0 none, 1 optional, 2 required */
	/* the cluster (docs/cluster.md); nnodes 0: a single node */
	int64_t cluster_id;
	char cluster_nodes[TLB_MAX_NODES][600]; /* the lines as given */
	int ncluster_nodes;
	int64_t cluster_election_ms;
	int64_t cluster_heartbeat_ms;
	int64_t cluster_snapshot_entries;
	int64_t cluster_snapshot_bytes;
	int64_t cluster_snapshot_max;
	int64_t cluster_clock_bound_ms; /* clockwatch.h */
	int64_t cluster_answers_ms;     /* store.h, "answers kept" */
	bool cluster_join;              /* a fresh node waits to be added */
	char cluster_token[256];        /* the clock watch's HELLO token */
	int64_t clock_offset_ms;        /* tests: the broker clock's offset */
	int64_t fsync_delay_ms;         /* tests: every group commit waits */
	tlb_node nodes[TLB_MAX_NODES];  /* parsed from cluster_nodes */
	int nnodes;
	int self; /* nodes[self] is this node */
} tlb_conf;

/* What the command line asked for besides running the broker. */
#define TLB_CONF_RUN 0
#define TLB_CONF_HELP 1       /* -h, --help: print the usage */
#define TLB_CONF_HASH_TOKEN 2 /* --hash-token: tlb_auth_hash_stdin */

/* Every setting of timelined, once. */
extern const tli_conf_table tlb_conf_table;

/* The defaults, the configuration files (-c), then the flags; then the
 * checks that relate settings. *action gets TLB_CONF_RUN, _HELP or
 * _HASH_TOKEN. Returns 0, or the exit status with one sentence in err
 * (naming file, line and setting): 1 for a bad file or value, 2 for a bad
 * command line (print the usage too). */
int tlb_conf_load(
    tlb_conf *c, int argc, char **argv, int *action, char *err, size_t cap);

#endif
