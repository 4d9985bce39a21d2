/*
 * The replicated broker's process suites (tests/cluster): a cluster of real
 * timelined processes on loopback (free ports, one directory each under one
 * temporary directory), the leader found through the nodes' metrics, and
 * the stores compared after a stop by opening them.
 *
 * Part of the test support library (tltestsupport_cluster), compiled once.
 */
#ifndef TL_TESTS_CLUSTER_UTIL_H
#define TL_TESTS_CLUSTER_UTIL_H

#include "raw_client.h"

#define TC_MAX 4

typedef struct tc_cluster {
	char *dir;
	int n;
	/* nodes 0..members-1 form the cluster (their cluster_node lines name
	 * only them); the others join it (cluster_join) once added. 0: all */
	int members;
	int election_ms;
	int snapshot_entries; /* 0: the broker's default */
	int raft_port[TC_MAX];
	int client_port[TC_MAX];
	int metrics_port[TC_MAX];
	char url[TC_MAX][64];
	char data[TC_MAX][600];
	tt_proc p[TC_MAX];
	bool paused[TC_MAX]; /* SIGSTOPped: its metrics are not asked */
	/* settings of one node, after (so over) the common ones */
	char extra_key[TC_MAX][4][64];
	char extra_val[TC_MAX][4][128];
	int nextra[TC_MAX];
} tc_cluster;

/* Describe n nodes (ports, directories, settings) in a new temporary
 * directory; nothing runs yet. */
void tc_init(tc_cluster *c, int n, const char *tag);
/* A setting of node i alone, written at its every start after the common
 * ones (so it wins over them). */
void tc_node_set(tc_cluster *c, int i, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Start node i (0-based) and wait for its ready file. */
void tc_start(tc_cluster *c, int i);
void tc_start_all(tc_cluster *c);
/* Start node i and return at once (no ready wait: it may refuse to start;
 * tt_proc_wait_exit or tt_proc_wait_ready on c->p[i]). */
void tc_spawn(tc_cluster *c, int i);
/* Stop every running node cleanly (exit 0 asserted), forget the
 * processes, remove the directory unless TL_E2E_KEEP is set. */
void tc_fini(tc_cluster *c);

/* The client URLs of the first n nodes as one comma-separated list. */
void tc_urls(const tc_cluster *c, int n, char *out, size_t cap);

/* SIGSTOP / SIGCONT node i. */
void tc_pause(tc_cluster *c, int i);
void tc_resume(tc_cluster *c, int i);

/* A metric of node i, or -1 when it cannot be read. */
int64_t tc_metric(tc_cluster *c, int i, const char *name);
/* The node that serves as leader (0-based), waiting at most timeout_ms;
 * -1 when none did. Nodes that do not run are skipped. */
int tc_leader(tc_cluster *c, int timeout_ms);
/* Wait until every running node has applied the leader's applied index
 * (at most timeout_ms); false if they did not. */
/* Print each node's Raft gauges and the end of its log to stderr: for a
 * failing test, what the cluster was doing. */
void tc_dump(tc_cluster *c, const char *why);
bool tc_converged(tc_cluster *c, int leader, int timeout_ms);

/* A CREATE of one message `id` (due in an hour) through cl: the error of
 * the request or of the item; on TL_ENOTLEADER the leader's URL named by
 * the reply goes to leader (when not NULL). */
int tc_create(rc_client *cl, const char *id, char *leader, size_t cap);

/* Open node i's store (the node is stopped), check it (no problem) and
 * return it: close with tli_store_close. */
tli_store *tc_open_store(tc_cluster *c, int i);

#endif
