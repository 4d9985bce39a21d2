/*
 * The replicated store's snapshots (docs/cluster.md, "Snapshots"): RocksDB
 * checkpoints kept on disk under DATA/snapshots/ID-INDEX (ID the node that
 * took it, INDEX the store's applied index in it). libraft's snapshot is
 * only a manifest: that name, the index, and each file's name and size. A
 * node installing one fetches the files it lacks from the node that took it
 * (or any other node that keeps it), in parts of TLP_SNAP_PART bytes over
 * the client protocol (SNAPSHOT_READ), onto its disk; memory does not grow
 * with the store. It keeps what it fetched (hard links share the table files
 * with its store) so that it can serve the same snapshot in turn.
 *
 * Threads: take runs on libuv's thread pool, install on the Raft thread
 * (libraft never runs both at once), read on the broker's reader threads.
 */
#ifndef TL_BROKER_CLUSTER_SNAPSHOT_H
#define TL_BROKER_CLUSTER_SNAPSHOT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

typedef struct tlb_broker tlb_broker;
struct raft_buffer;

#define TLC_SNAPS_SERVED 8

typedef struct tlc_snaps {
	tlb_broker *b;
	uint64_t self;         /* this node's id */
	char dir[600];         /* DATA/snapshots */
	char restore_dir[600]; /* DATA/restore.tmp */
	pthread_mutex_t mtx;   /* served[] */
	/* one checkpoint at a time (libraft's and those asked for) */
	pthread_mutex_t take_mtx;
	/* snapshots read by other nodes lately: kept while they fetch */
	struct {
		char name[48];
		int64_t ms; /* monotonic, the last read */
	} served[TLC_SNAPS_SERVED];
	/* the last install's figures, for the log */
	uint64_t fetched_bytes;
} tlc_snaps;

/* A node another node may fetch a snapshot from. */
typedef struct tlc_snap_source {
	uint64_t id;
	const char *url;
} tlc_snap_source;

/* Set up s for b (creating DATA/snapshots, removing what an interrupted
 * take or fetch left): 0 or -1 (logged). */
int tlc_snaps_init(tlc_snaps *s, tlb_broker *b);
void tlc_snaps_fini(tlc_snaps *s);

/* Take a checkpoint of the store for libraft's snapshot at raft_index and
 * set *out (raft_malloc) to its manifest. 0, or a libraft error: RAFT_TOOBIG
 * over cluster_snapshot_max (R006), RAFT_IOERR (R010), RAFT_NOMEM. Older
 * snapshots than the last two are removed (unless being fetched). */
int tlc_snaps_take(tlc_snaps *s, uint64_t raft_index, struct raft_buffer *out);

/* The store's applied index in snapshot p (n bytes): false when it is not
 * one of ours. */
bool tlc_snaps_index(const void *p, size_t n, uint64_t *index);

/* Install snapshot p into the store: its files from this node's disk, else
 * fetched from one of the sources (its taker first). TL_OK, or an error
 * (logged, the store unchanged). */
int tlc_snaps_install(tlc_snaps *s, const void *p, size_t n,
    const tlc_snap_source *src, int nsrc);

/* SNAPSHOT_LATEST (cluster.h, tlc_snapshot_latest): append to out the
 * manifest of the newest snapshot kept here if its store index is at least
 * min, else of one taken now if the store is that far; TL_ENOTFOUND when it
 * is not. Any thread. */
int tlc_snaps_latest(tlc_snaps *s, uint64_t min, tli_buf *out);
/* SNAPSHOT_READ (cluster.h, tlc_snapshot_read). */
int tlc_snaps_read(tlc_snaps *s, const char *name, const char *file,
    uint64_t offset, size_t max, tli_buf *out, uint64_t *size);

/* Little-endian integers (the snapshot and entry formats). */
static inline void
tlc_put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t) (v >> (8 * i));
	}
}

static inline void
tlc_put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t) (v >> (8 * i));
	}
}

static inline uint32_t
tlc_get_u32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

static inline uint64_t
tlc_get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

#endif
