/*
 * The replicated broker (docs/cluster.md): one Raft node (libraft 0.15 on
 * libuv) inside timelined, started when the configuration has cluster_node
 * lines. Every node applies the committed entries (the store writer's
 * batches) to its store; only the elected leader serves requests.
 *
 * Threads: the raft thread owns the uv loop and is the only one that
 * touches libraft: it proposes the writer's entries (handed over through a
 * queue and a uv_async), runs the state machine (apply into the store,
 * snapshots, restores) and polls the Raft state every 5 ms. The role
 * thread does what a change of leadership needs and may wait for the store
 * (a new leader's reload and topic creation; closing the subscribers'
 * sessions of a leader that stepped down). The store's writer thread calls
 * tlc_replicate and blocks until its entry is applied here. Lock order:
 * the cluster's lock is a leaf.
 */
#ifndef TL_BROKER_CLUSTER_H
#define TL_BROKER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tlb_broker tlb_broker;
typedef struct tlc tlc;

/* The store's directory in cluster mode (DATA/store), into out. */
void tlc_store_path(const tlb_broker *b, char *out, size_t cap);

/* Start the Raft node of b->conf (the store is open): bootstrap a fresh
 * raft directory with the configured nodes, load the log (committed
 * entries are applied to the store) and start both threads. 0, or -1
 * logged. */
int tlc_start(tlb_broker *b);
/* Stop both threads and close the node; later tlc_replicate calls answer
 * TL_ENOTLEADER. Accepts a broker without a cluster, and a second call. */
void tlc_stop(tlb_broker *b);
/* Free it once the store is closed (no replicate call can run). */
void tlc_free(tlb_broker *b);

/* Whether this node is the leader and serves requests (after its
 * barrier, the store reload and the configured topics). */
bool tlc_serving(const tlc *c);
/* Before a read (GET, LIST, COUNT, topics, dead letters): TL_OK when this
 * node serves and holds its read lease, i.e. a majority confirmed it as
 * leader less than 90 % of an election timeout ago, so no other leader
 * can have acknowledged a write since (docs/cluster.md, "Reads"). Waits
 * up to an election timeout for a renewal; TL_ENOTLEADER otherwise. */
int tlc_read_fence(tlc *c);
/* The known leader's client URL into out ("" when none is known). */
void tlc_leader_url(tlc *c, char *out, size_t cap);

/* The store's replicate hook (writer thread), arg the broker: propose entry as
 * one Raft entry and wait until it is applied here. TL_OK; TL_ENOTLEADER
 * (nothing proposed); TL_ELEADERLOST (proposed, leadership lost: outcome
 * unknown). */
int tlc_replicate(void *arg, const void *entry, size_t len);

/* ---- administration (the CLUSTER operation) ---- */

typedef enum tlc_action {
	TLC_STATUS = 1, /* this node's view (every node answers) */
	TLC_TRANSFER,   /* the leadership to node id (0: any voter) */
	TLC_ADD,        /* node id at raft, client url, as a voter */
	TLC_REMOVE,     /* node id */
} tlc_action;

/* The action name's code, or 0. */
tlc_action tlc_action_of(const char *name, size_t len);

/* Carry out a CLUSTER request and answer it on session s (held here until
 * the answer is sent; the caller keeps its own reference) with request id
 * reqid. Status answers at once; a transfer when the leadership moved (or
 * the election timeout passed); an add once the node is a voter; a remove
 * once the change is committed. Not the leader (for the changes):
 * TL_ENOTLEADER naming it. */
struct tlb_session;
void tlc_admin(tlc *c, struct tlb_session *s, uint32_t reqid, tlc_action action,
    uint64_t id, const char *raft, const char *url);

/* The figures of /metrics. */
typedef struct tlc_stats {
	const char *role; /* follower, candidate, leader, unavailable */
	bool serving;
	uint64_t term;
	uint64_t commit_index;
	uint64_t applied_index;
	uint64_t leader_id; /* 0: none known */
	uint64_t elections; /* terms seen with a leader */
	uint64_t proposed;  /* entries proposed by this node */
	uint64_t proposed_bytes;
	uint64_t snapshots_taken;
	uint64_t snapshots_installed;
} tlc_stats;
void tlc_get_stats(tlc *c, tlc_stats *st);
/* More rows of /metrics: each follower's lag (on the leader) and the
 * clock watch's (clockwatch.h). */
struct tli_buf;
void tlc_render_more(tlc *c, struct tli_buf *o);

/* ---- snapshots served to other nodes (SNAPSHOT_READ, SNAPSHOT_LATEST) ---- */

/* Append to out at most max bytes (at most TLP_SNAP_PART) of file of the
 * snapshot name that this node keeps (DATA/snapshots/NAME/FILE), from
 * offset; *size is the file's size. TL_EINVAL: a name or file that is a
 * path or hidden; TL_ENOTFOUND: no such snapshot or file here (taken or
 * installed too long ago: it was removed); TL_EIO. Any thread. */
int tlc_snapshot_read(tlc *c, const char *name, const char *file,
    uint64_t offset, size_t max, struct tli_buf *out, uint64_t *size);
/* Append to out the manifest of a snapshot whose store index is min or
 * later (the SNAPSHOT_LATEST operation): the newest this node keeps, or one
 * taken now (R004). TL_ENOTFOUND: the store is not that far yet; TL_EIO.
 * Any thread. */
int tlc_snapshot_latest(tlc *c, uint64_t min, struct tli_buf *out);

#endif
