/*
 * The Raft node of a replicated broker (cluster.h). libraft 0.15 is single
 * threaded and has no state callback: the raft thread owns it, polls its
 * state every 5 ms, and is handed the writer's entries through a queue.
 * Facts about the library that shape this file: the FSM apply is not told
 * its index (it is raft_last_applied + 1); proposing from inside a failed
 * apply callback crashes 0.15, so proposals come only from the async
 * callback; a new leader appends no entry of its own, so it issues a
 * barrier before it serves; snapshots are single in-memory buffers sent in
 * one message (hence cluster_snapshot_max).
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <raft.h>
#include <raft/uv.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "broker.h"
#include "cluster.h"
#include "clockwatch.h"
#include "snapshot.h"
#include "dispatch.h"
#include "msgs.h"
#include "server.h"

/* A CLUSTER request on its way to, and through, the raft thread. */
typedef struct admin {
	struct admin *next;
	struct tlc *c;
	tlb_session *s; /* held until answered */
	uint32_t reqid;
	tlc_action action;
	uint64_t id;
	char raft[256];
	char url[256];
	/* add: 0 to replicate the URL, 1 to add as a spare, 2 to make it
	 * a voter; remove: 0 to remove, 1 to replicate the URL's removal */
	int step;
	struct raft_transfer transfer;
	struct raft_change change;
	struct raft_apply apply;
} admin;

/* A node's client URL for redirects and status, from the replicated node
 * URL entries (TLI_REPL_NODE; the store keeps them, loaded at start and
 * after a snapshot). A node's cluster_node line wins over it. */
typedef struct extra_node {
	uint64_t id;
	char url[256];
} extra_node;

/* An entry the writer waits for. */
typedef struct prop {
	struct raft_apply req;
	struct prop *next;
	struct tlc *c;
	const void *entry;
	size_t len;
	int rv;
	bool done;
} prop;

struct tlc {
	tlb_broker *b;
	char raft_dir[600];
	tlc_snaps snaps; /* snapshot.h */

	/* the raft thread's own */
	uv_loop_t loop;
	struct raft_uv_transport tr;
	struct raft_io io;
	struct raft_fsm fsm;
	struct raft raft;
	uv_async_t async;
	uv_timer_t tick;
	struct raft_barrier barrier;
	bool barrier_pending;
	/* the read lease: a barrier a majority applied proves that no other
	 * leader can be elected for an election timeout after it was sent */
	struct raft_barrier lease_barrier;
	bool lease_pending;    /* raft thread */
	int64_t lease_sent_ms; /* raft thread: monotonic, when it was sent */
	uint64_t barrier_term;
	/* raft thread: snapshots are taken every cluster_snapshot_entries
	 * entries or cluster_snapshot_bytes bytes of them, whichever first */
	uint64_t tried_at;    /* applied index of the last one tried */
	uint64_t bytes_since; /* bytes of the entries applied since */
	unsigned ticks;
	/* the snapshot being taken (fsm_snapshot to its finalize) */
	uint64_t snap_applied; /* libraft's index for it */
	/* raft thread, leader: a follower that answers but stays behind
	 * (catchup_check); a snapshot is then taken for it at once */
	uint64_t lag_match[TLB_MAX_NODES];
	int64_t lag_since[TLB_MAX_NODES]; /* its match_index unchanged since */
	int64_t lag_heard[TLB_MAX_NODES]; /* it was last heard from */
	bool catchup;                     /* the next fsm_snapshot is taken */
	uint64_t catchup_below;           /* the log kept starts after it */
	int64_t catchup_at;
	struct raft_barrier catchup_barrier;
	bool catchup_barrier_pending;
	/* the store is a seed whose check has not applied: no other entry
	 * may apply before it (store.h, "the seed check") */
	bool seed_pending;
	pthread_t th;
	pthread_t role_th;
	bool role_started;

	pthread_mutex_t mtx;
	pthread_cond_t cv;      /* proposals done, start, role changes */
	prop *q_head, **q_tail; /* proposals not handed to raft yet */
	bool started;           /* the raft thread finished its start */
	int start_rv;
	bool stop;   /* tlc_stop asked */
	bool closed; /* the async handle is closed: no more proposals */
	/* the state seen by the last poll */
	int state;
	bool is_leader;
	uint64_t ready_term; /* leader whose barrier applied, for this term */
	uint64_t tried_term; /* the role thread took over for this term */
	uint64_t term;
	uint64_t leader_id;
	uint64_t seen_term; /* the last term with a known leader */
	uint64_t commit_index;
	uint64_t applied_index;
	char leader_url[256];
	uint64_t elections;
	uint64_t proposed;
	uint64_t proposed_bytes;
	uint64_t snaps_taken;
	uint64_t snaps_installed;
	uint64_t log_entries; /* in libraft's log (memory) */
	uint64_t log_bytes;

	_Atomic bool serving;
	_Atomic int64_t lease_until_ms; /* monotonic; reads are served before */

	admin *a_head, **a_tail; /* CLUSTER requests for the raft thread */
	extra_node extra[TLB_MAX_NODES];
	int nextra;
	/* the leader's view of each server: id and last entry it has */
	uint64_t match_id[TLB_MAX_NODES];
	uint64_t match_index[TLB_MAX_NODES];
	int nmatch;
	uint64_t last_index;

	/* the clock watch: a degraded node hands the leadership over */
	tlc_clock *clock;
	struct raft_transfer transfer;
	bool transfer_pending; /* raft thread */
	uint64_t refused_term; /* raft thread: handed over in this term */
	/* raft thread: stop asked, raft_close waits for an idle loop */
	bool stopping;
	int64_t stop_by_ms;
};

static const char *
state_name(int s)
{
	switch (s) {
	case RAFT_FOLLOWER:
		return "follower";
	case RAFT_CANDIDATE:
		return "candidate";
	case RAFT_LEADER:
		return "leader";
	default:
		return "unavailable";
	}
}

void
tlc_store_path(const tlb_broker *b, char *out, size_t cap)
{
	snprintf(out, cap, "%s/store", b->conf.data_dir);
}

/* A Raft entry frames the store's entry: "TLE1", its length (u32), the
 * entry, zeros up to a multiple of 8 bytes. libraft 0.15 moves entries
 * whose length is not a multiple of 8 wrongly in some paths (seen when a
 * new leader sends a restarted follower a long run of entries): framed,
 * every entry is whole words and its own length says where it ends. */
#define ENTRY_HEAD 8
static const char entry_magic[4] = {'T', 'L', 'E', '1'};

/* ---- proposals (writer thread -> raft thread) ---- */

static void
prop_finish(tlc *c, prop *p, int rv)
{
	pthread_mutex_lock(&c->mtx);
	p->rv = rv;
	p->done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
}

int
tlc_replicate(void *arg, const void *entry, size_t len)
{
	tlb_broker *b = arg;
	tlc *c = b->cluster;
	prop p = {.c = c, .entry = entry, .len = len};

	if (c == NULL) {
		return TL_ENOTLEADER; /* the node is not started yet */
	}
	pthread_mutex_lock(&c->mtx);
	if (c->closed || !c->is_leader) {
		pthread_mutex_unlock(&c->mtx);
		return TL_ENOTLEADER;
	}
	p.req.data = &p;
	*c->q_tail = &p;
	c->q_tail = &p.next;
	uv_async_send(&c->async);
	while (!p.done) {
		pthread_cond_wait(&c->cv, &c->mtx);
	}
	pthread_mutex_unlock(&c->mtx);
	return p.rv;
}

/* The entry is committed and applied here (status 0), or its fate is
 * unknown. Never proposes: 0.15 crashes on a raft_apply from here. */
static void
apply_cb(struct raft_apply *req, int status, void *result)
{
	prop *p = req->data;
	tlc *c = p->c;

	(void) result;
	if (status != 0) {
		tlb_log(TLB_WARN, "R022",
		    "a Raft entry's fate is unknown (%s, term %llu): its "
		    "clients are told TL_ELEADERLOST",
		    raft_strerror(status),
		    (unsigned long long) c->raft.current_term);
		/* the entry may still commit under another leader: the store
		 * must reload before its writer serves again, so this node
		 * takes over afresh if it still leads */
		pthread_mutex_lock(&c->mtx);
		c->tried_term = 0;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mtx);
	}
	prop_finish(c, p, status == 0 ? TL_OK : TL_ELEADERLOST);
}

/* Take the queued proposals; the caller holds the lock. */
static prop *
take_queue(tlc *c)
{
	prop *l = c->q_head;

	c->q_head = NULL;
	c->q_tail = &c->q_head;
	return l;
}

/* A frame of whole 8-byte words holding the entry (see ENTRY_HEAD). */
static int
frame_entry(const void *entry, size_t len, struct raft_buffer *buf)
{
	buf->len = (ENTRY_HEAD + len + 7) / 8 * 8;
	buf->base = raft_malloc(buf->len);
	if (buf->base == NULL) {
		return TL_ENOMEM;
	}
	memcpy(buf->base, entry_magic, 4);
	tlc_put_u32((uint8_t *) buf->base + 4, (uint32_t) len);
	memcpy((uint8_t *) buf->base + ENTRY_HEAD, entry, len);
	memset((uint8_t *) buf->base + ENTRY_HEAD + len, 0,
	    buf->len - ENTRY_HEAD - len);
	return TL_OK;
}

/* Hand the queued entries to raft (the only place that proposes). */
static void
propose_all(tlc *c)
{
	prop *l;

	pthread_mutex_lock(&c->mtx);
	l = take_queue(c);
	pthread_mutex_unlock(&c->mtx);
	while (l != NULL) {
		prop *p = l;
		struct raft_buffer buf;
		int rv = RAFT_NOTLEADER;

		l = l->next;
		if (frame_entry(p->entry, p->len, &buf) != TL_OK) {
			prop_finish(c, p, TL_ENOMEM);
			continue;
		}
		if (raft_state(&c->raft) == RAFT_LEADER) {
			rv = raft_apply(&c->raft, &p->req, &buf, 1, apply_cb);
		}
		if (rv != 0) {
			/* libraft 0.15 keeps the buffer when it refuses before
			 * appending (not the leader, a transfer under way) and
			 * frees it when the append fails later: on those rare
			 * errors the buffer is left rather than freed twice */
			if (rv == RAFT_NOTLEADER) {
				raft_free(buf.base);
			}
			prop_finish(c, p, TL_ENOTLEADER);
			continue;
		}
		pthread_mutex_lock(&c->mtx);
		c->proposed++;
		c->proposed_bytes += p->len;
		pthread_mutex_unlock(&c->mtx);
	}
}

/* ---- the state machine (raft thread) ---- */

/* An ordinary entry reached a store whose seed check has not applied: the
 * leader started from another store (store.h, "the seed check"). */
static void
seed_refuse(tlc *c, uint64_t index)
{
	uint64_t id = 0;
	bool pending;

	tli_store_seed_get(c->b->store, &id, &pending);
	tlb_log(TLB_ERROR, "R019",
	    "this node's store is the seed %016llx, not checked yet, but "
	    "Raft entry %llu is not its seed check: the leader started from "
	    "another store (an empty one, or a copy of another backup); "
	    "stopping the node. Every node of a seeded cluster needs a copy "
	    "of the same prepared store (docs/cluster.md, \"Seeding a new "
	    "cluster from a backup\")",
	    (unsigned long long) id, (unsigned long long) index);
	_exit(1);
}

/* The seed check entry: this node's store must be the leader's seed. */
static int
seed_apply(tlc *c, uint64_t index, const uint8_t *entry, size_t len)
{
	uint64_t have = 0, want;
	int rv = tli_store_seed_apply(c->b->store, index, entry, len, &have);

	if (rv != TL_OK) {
		return rv;
	}
	want = tli_get_be64(entry + TLI_REPL_HEADER);
	if (have != want) {
		char mine[64];

		snprintf(mine, sizeof(mine),
		    have == 0 ? "is no seed (an empty store?)"
		              : "is the seed %016llx",
		    (unsigned long long) have);
		tlb_log(TLB_ERROR, "R019",
		    "the leader's store is the seed %016llx (Raft entry %llu) "
		    "but this node's store %s: it is not a copy of the same "
		    "prepared store, and would hold other data than the "
		    "others; stopping the node. Place a copy of the leader's "
		    "seed in its DATA/store (docs/cluster.md, \"Seeding a new "
		    "cluster from a backup\")",
		    (unsigned long long) want, (unsigned long long) index,
		    mine);
		_exit(1);
	}
	c->seed_pending = false;
	return TL_OK;
}

/* The client URL of node id as this node knows it, or "": its
 * cluster_node line first. Raft thread, or with c->mtx. */
static const char *
url_of(tlc *c, uint64_t id)
{
	for (int i = 0; i < c->b->conf.nnodes; i++) {
		if (c->b->conf.nodes[i].id == id) {
			return c->b->conf.nodes[i].url;
		}
	}
	for (int i = 0; i < c->nextra; i++) {
		if (c->extra[i].id == id) {
			return c->extra[i].url;
		}
	}
	return "";
}

/* Set node id's URL in memory ("" forgets it); the caller holds c->mtx. */
static void
extra_set(tlc *c, uint64_t id, const char *url)
{
	int i = 0;

	while (i < c->nextra && c->extra[i].id != id) {
		i++;
	}
	if (url[0] == '\0') {
		if (i < c->nextra) {
			c->extra[i] = c->extra[--c->nextra];
		}
		return;
	}
	if (i == c->nextra) {
		if (c->nextra == TLB_MAX_NODES) {
			return; /* more URLs stored than nodes: stale ones */
		}
		c->nextra++;
	}
	c->extra[i].id = id;
	snprintf(c->extra[i].url, sizeof(c->extra[i].url), "%s", url);
}

static void
extra_load_one(void *arg, uint64_t id, const char *url)
{
	extra_set(arg, id, url);
}

/* Read every node URL the store holds into memory (at start, after a
 * snapshot): the store is what the applied entries left. */
static int
extra_load(tlc *c)
{
	int rv;

	pthread_mutex_lock(&c->mtx);
	c->nextra = 0;
	rv = tli_store_node_urls(c->b->store, extra_load_one, c);
	pthread_mutex_unlock(&c->mtx);
	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R007",
		    "cannot read the nodes' client URLs from the store: %s "
		    "(%s)",
		    tl_strerror(rv), tli_store_last_error(c->b->store));
	}
	return rv;
}

/* A node URL entry. One that does not decode is refused and skipped
 * rather than stopping the node: every node would refuse the same
 * committed entry, and a URL is not worth the group. */
static int
node_apply(tlc *c, uint64_t index, const uint8_t *entry, size_t len)
{
	/* a replay: the store (read at start) holds what came after */
	bool replay = index <= tli_store_applied_index(c->b->store);
	int rv = tli_store_node_apply(c->b->store, index, entry, len);

	if (rv == TL_ECORRUPT) {
		tlb_log(TLB_ERROR, "R021",
		    "Raft entry %llu (a node's client URL, %zu bytes) "
		    "refused: %s; no URL recorded, going on",
		    (unsigned long long) index, len,
		    tli_store_last_error(c->b->store));
		return TL_OK;
	}
	if (rv == TL_OK && !replay) {
		pthread_mutex_lock(&c->mtx);
		extra_set(c, tli_get_be64(entry + TLI_REPL_HEADER),
		    (const char *) entry + TLI_REPL_HEADER + 8);
		pthread_mutex_unlock(&c->mtx);
	}
	return rv;
}

static int
fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result)
{
	tlc *c = fsm->data;
	uint64_t index = raft_last_applied(&c->raft) + 1;
	size_t len = 0;
	bool framed = buf->len >= ENTRY_HEAD &&
	    memcmp(buf->base, entry_magic, 4) == 0 &&
	    (len = tlc_get_u32((const uint8_t *) buf->base + 4)) <=
	        buf->len - ENTRY_HEAD;
	int rv;

	*result = NULL;
	if (!framed) {
		rv = TL_ECORRUPT;
	} else if (len > 1 &&
	    ((const uint8_t *) buf->base)[ENTRY_HEAD + 1] == TLI_REPL_SEED) {
		rv = seed_apply(
		    c, index, (const uint8_t *) buf->base + ENTRY_HEAD, len);
	} else if (len > 1 &&
	    ((const uint8_t *) buf->base)[ENTRY_HEAD + 1] == TLI_REPL_NODE) {
		/* not the store's data: it may come before the seed check */
		rv = node_apply(
		    c, index, (const uint8_t *) buf->base + ENTRY_HEAD, len);
	} else {
		if (c->seed_pending) {
			seed_refuse(c, index);
		}
		rv = tli_store_apply_entry(c->b->store, index,
		    (const uint8_t *) buf->base + ENTRY_HEAD, len);
	}
	if (rv != TL_OK) {
		/* A committed entry cannot be skipped: stop here; the Raft
		 * log replays it at the next start. */
		tlb_log(TLB_ERROR, "R008",
		    "cannot apply Raft entry %llu (%zu bytes) to the store: "
		    "%s (%s); stopping the node",
		    (unsigned long long) index, buf->len, tl_strerror(rv),
		    !framed ? "not an entry of this node's format"
		            : tli_store_last_error(c->b->store));
		_exit(1);
	}
	c->bytes_since += buf->len;
	pthread_mutex_lock(&c->mtx);
	c->applied_index = index;
	pthread_mutex_unlock(&c->mtx);
	return 0;
}

/* Entry i of libraft's log in memory, or NULL (0.15's struct raft_log, in
 * raft.h: a circular buffer [front, back) of size slots whose first entry
 * has index offset + 1). Raft thread. */
static const struct raft_entry *
log_entry(const struct raft_log *l, uint64_t i)
{
	size_t n = l->front <= l->back ? l->back - l->front
	                               : l->size - l->front + l->back;

	if (n == 0 || i <= l->offset || i > l->offset + n) {
		return NULL;
	}
	return &l->entries[(l->front + (size_t) (i - l->offset - 1)) % l->size];
}

/* How many entries up to index to keep behind a snapshot at index: at
 * most cluster_snapshot_entries, and no more than add up to
 * cluster_snapshot_bytes (at least 1: libuv's 0 means "replace all"). */
static unsigned
trailing_for(tlc *c, uint64_t index)
{
	const tlb_conf *cf = &c->b->conf;
	uint64_t bytes = 0;
	unsigned n = 0;
	const struct raft_entry *e;

	while (n < (uint64_t) cf->cluster_snapshot_entries && index > n &&
	    (e = log_entry(&c->raft.log, index - n)) != NULL &&
	    bytes + e->buf.len <= (uint64_t) cf->cluster_snapshot_bytes) {
		bytes += e->buf.len;
		n++;
	}
	return n > 0 ? n : 1;
}

/* The entries in libraft's log (memory) and their bytes, for the
 * metrics. Raft thread. */
static void
log_size(tlc *c, uint64_t *entries, uint64_t *bytes)
{
	const struct raft_log *l = &c->raft.log;
	const struct raft_entry *e;

	*entries = 0;
	*bytes = 0;
	while ((e = log_entry(l, l->offset + 1 + *entries)) != NULL) {
		*bytes += e->buf.len;
		(*entries)++;
	}
}

/* A snapshot in two steps (raft_fsm version 3). On the Raft thread,
 * fsm_snapshot only decides whether one is wanted; the work is done on
 * libuv's thread pool while the node goes on applying and answering its
 * peers: fsm_snapshot_async takes a RocksDB checkpoint of the store
 * (flushing its memtables first) and gives libraft its manifest
 * (snapshot.h). libraft writes that and calls fsm_snapshot_finalize (Raft
 * thread), which frees it; the checkpoint stays. One snapshot at a time
 * (libraft's pending one).
 *
 * When: libraft asks at every apply once a few entries passed its last
 * snapshot (its threshold is low, node_open); a snapshot is taken once
 * cluster_snapshot_entries entries or cluster_snapshot_bytes bytes of them
 * were applied since the last one tried, so that the log libraft holds in
 * memory stays bounded in bytes whatever the entries' sizes. The log
 * behind it keeps as much again at most (trailing_for). A refused or
 * failed snapshot waits as long as a taken one before the next try.
 * RAFT_BUSY is the one error libraft 0.15 takes as "not now": any other
 * fails the apply that asked, and a follower then leaves the leader's
 * AppendEntries unanswered (the leader steps down).
 *
 * The checkpoint is taken after libraft's snapshot index, so it may hold
 * later entries too: its own applied index, in the manifest, is the one a
 * restore sets, and the entries after the snapshot's index that the store
 * already has are skipped when they are applied again (fsm_apply). It
 * never holds an uncommitted entry: a store applies committed ones only. */
static int
fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	tlc *c = fsm->data;
	const tlb_conf *cf = &c->b->conf;
	uint64_t applied = raft_last_applied(&c->raft);
	uint64_t from = c->raft.log.snapshot.last_index > c->tried_at
	    ? c->raft.log.snapshot.last_index
	    : c->tried_at;

	unsigned trailing;

	*bufs = NULL;
	*n_bufs = 0;
	if (!c->catchup &&
	    applied - from < (uint64_t) cf->cluster_snapshot_entries &&
	    c->bytes_since < (uint64_t) cf->cluster_snapshot_bytes) {
		return RAFT_BUSY;
	}
	trailing = trailing_for(c, applied);
	if (c->catchup) {
		/* for a follower stuck behind (catchup_check): the log kept
		 * starts after where it is stuck, so it is sent this
		 * snapshot */
		uint64_t keep = applied > c->catchup_below + 1
		    ? applied - c->catchup_below - 1
		    : 1;

		if (keep < trailing) {
			trailing = (unsigned) keep;
		}
		c->catchup = false;
	}
	raft_set_snapshot_trailing(&c->raft, trailing);
	c->tried_at = applied;
	c->bytes_since = 0;
	c->snap_applied = applied;
	return 0;
}

/* The checkpoint and its manifest (a thread of libuv's pool). */
static int
fsm_snapshot_async(
    struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	tlc *c = fsm->data;
	int rv;

	*bufs = raft_malloc(sizeof(**bufs));
	if (*bufs == NULL) {
		return RAFT_NOMEM;
	}
	if ((rv = tlc_snaps_take(&c->snaps, c->snap_applied, *bufs)) != 0) {
		raft_free(*bufs);
		*bufs = NULL;
		return rv;
	}
	*n_bufs = 1;
	pthread_mutex_lock(&c->mtx);
	c->snaps_taken++;
	pthread_mutex_unlock(&c->mtx);
	return 0;
}

/* After the snapshot was written (or failed): ours to free. The
 * checkpoint stays (snapshot.h). */
static int
fsm_snapshot_finalize(
    struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	(void) fsm;
	if (*bufs != NULL) {
		for (unsigned i = 0; i < *n_bufs; i++) {
			raft_free((*bufs)[i].base);
		}
		raft_free(*bufs);
	}
	*bufs = NULL;
	*n_bufs = 0;
	return 0;
}

/* Wait ms, or less if the node is asked to stop: whether it is. */
static bool
wait_stop(tlc *c, int64_t ms)
{
	int64_t until = tli_mono_ms() + ms;
	bool stop;

	pthread_mutex_lock(&c->mtx);
	while (!(stop = c->stop) && tli_mono_ms() < until) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->cv, &c->mtx, &ts);
	}
	pthread_mutex_unlock(&c->mtx);
	return stop;
}

/* Install a snapshot, unless the store is already at or past it (a
 * restart: the store is ahead of the last snapshot). Owns buf->base when
 * it succeeds; on failure libraft frees it (installSnapshotCb's and
 * start's error paths in libraft 0.15): freeing it here too was a double
 * free. On
 * the Raft thread, which waits while the files are fetched: this node is
 * behind and has nothing else to do. */
static int
fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf)
{
	tlc *c = fsm->data;
	uint64_t index = 0, have = tli_store_applied_index(c->b->store);
	tlc_snap_source src[2 * TLB_MAX_NODES];
	int nsrc = 0, rv;

	if (!tlc_snaps_index(buf->base, buf->len, &index)) {
		tlb_log(TLB_ERROR, "R009",
		    "cannot install a snapshot of %zu bytes: not one of ours",
		    buf->len);
		return RAFT_IOERR;
	}
	if (index <= have) {
		raft_free(buf->base);
		tlb_log(TLB_INFO, "R005",
		    "snapshot at index %llu not installed: the store is "
		    "already at index %llu",
		    (unsigned long long) index, (unsigned long long) have);
		return 0;
	}
	for (int64_t wait_ms = 1000;;
	     wait_ms = wait_ms * 2 > 10000 ? 10000 : wait_ms * 2) {
		bool started, stop;

		pthread_mutex_lock(&c->mtx);
		nsrc = 0;
		for (int i = 0; i < c->b->conf.nnodes; i++) {
			src[nsrc++] = (tlc_snap_source){
			    c->b->conf.nodes[i].id, c->b->conf.nodes[i].url};
		}
		for (int i = 0; i < c->nextra; i++) {
			src[nsrc++] =
			    (tlc_snap_source){c->extra[i].id, c->extra[i].url};
		}
		pthread_mutex_unlock(&c->mtx);
		rv = tlc_snaps_install(
		    &c->snaps, buf->base, buf->len, src, nsrc);
		pthread_mutex_lock(&c->mtx);
		started = c->started;
		stop = c->stop;
		pthread_mutex_unlock(&c->mtx);
		/* A node sent it: libraft has already replaced this node's
		 * log with the snapshot's position (0.15), so a failure
		 * would leave it taking entries it can never apply. It
		 * tries again instead, as a node that does not answer,
		 * until some node can send this snapshot or a later one
		 * (or the disk has room again). At the start a failure
		 * stops the node (R007). */
		if (rv == TL_OK || !started || stop || wait_stop(c, wait_ms)) {
			break;
		}
	}
	if (rv != TL_OK) {
		return RAFT_IOERR;
	}
	raft_free(buf->base);
	{
		uint64_t id;
		bool pending = false;

		(void) tli_store_seed_get(c->b->store, &id, &pending);
		c->seed_pending = pending;
	}
	(void) extra_load(c);
	pthread_mutex_lock(&c->mtx);
	c->snaps_installed++;
	c->applied_index = index;
	pthread_mutex_unlock(&c->mtx);
	c->bytes_since = 0;
	return 0;
}

/* ---- the poll (raft thread) ---- */

static void
barrier_cb(struct raft_barrier *req, int status)
{
	tlc *c = req->data;

	c->barrier_pending = false;
	if (status != 0 || raft_state(&c->raft) != RAFT_LEADER ||
	    c->raft.current_term != c->barrier_term) {
		return; /* the next poll decides again */
	}
	pthread_mutex_lock(&c->mtx);
	c->ready_term = c->barrier_term;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
}

/* A lease barrier applied: reads may be served for most of an election
 * timeout from when it was sent (a follower that applied it heard from
 * this leader then, and neither it nor the others vote for anybody else
 * before their election timeout passes; 10 % is left for the clocks'
 * rates). */
static void
lease_cb(struct raft_barrier *req, int status)
{
	tlc *c = req->data;

	c->lease_pending = false;
	if (status == 0 && raft_state(&c->raft) == RAFT_LEADER) {
		int64_t until =
		    c->lease_sent_ms + c->b->conf.cluster_election_ms * 9 / 10;

		atomic_store(&c->lease_until_ms, until);
		pthread_mutex_lock(&c->mtx);
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mtx);
	}
}

/* A leader renews its read lease every quarter of an election timeout. */
static void
lease_renew(tlc *c)
{
	int64_t now = tli_mono_ms();

	/* a transfer lets its target be elected at once: no lease meanwhile */
	if (c->raft.transfer != NULL) {
		atomic_store(&c->lease_until_ms, 0);
		return;
	}
	if (c->lease_pending ||
	    now - c->lease_sent_ms < c->b->conf.cluster_election_ms / 4) {
		return;
	}
	c->lease_barrier.data = c;
	c->lease_sent_ms = now;
	if (raft_barrier(&c->raft, &c->lease_barrier, lease_cb) == 0) {
		c->lease_pending = true;
	}
}

static void
transfer_cb(struct raft_transfer *req)
{
	tlc *c = req->data;

	c->transfer_pending = false;
}

/* A leader whose clock is off the majority's hands the leadership to
 * another voter (once a term; the role thread does not serve meanwhile). */
static void
refuse_leadership(tlc *c, uint64_t term)
{
	bool known = false;
	int64_t off = tlc_clock_majority_offset(c->clock, &known);
	int rv;

	if (c->transfer_pending || c->refused_term == term) {
		return;
	}
	c->refused_term = term;
	atomic_store(&c->lease_until_ms, 0);
	c->transfer.data = c;
	rv = raft_transfer(&c->raft, &c->transfer, 0, transfer_cb);
	c->transfer_pending = rv == 0;
	tlb_log(TLB_WARN, "R014",
	    "elected leader (term %llu) with a clock %lld ms off the "
	    "majority's: not serving; %s",
	    (unsigned long long) term, (long long) -off,
	    rv == 0 ? "handing the leadership over"
	            : "no other voter to hand it to");
}

static void close_when_idle(tlc *c);

static void
catchup_barrier_cb(struct raft_barrier *req, int status)
{
	tlc *c = req->data;

	(void) status;
	c->catchup_barrier_pending = false;
}

/* A follower that answers the leader but whose replicated index has not
 * moved for CATCHUP_MS while the commit index is past it is stuck:
 * libraft 0.15 can loop for ever on a follower whose own snapshot is more
 * recent than the leader's (the leader sends its older snapshot, which the
 * follower takes as already had; the leader then sends the entries after
 * it, which the follower refuses: they precede its snapshot). The leader
 * then takes a snapshot at once, keeping no log at or before where the
 * follower is stuck: the follower is sent that snapshot, newer than its
 * own, and installs it. Raft thread, leader; at most every 5 × CATCHUP_MS.
 */
#define CATCHUP_MS 2000

static void
catchup_check(tlc *c)
{
	const struct raft_configuration *cf = &c->raft.configuration;
	int64_t now = tli_mono_ms();
	int64_t silent = 2 * c->b->conf.cluster_election_ms;
	uint64_t below = UINT64_MAX;
	raft_id who = 0;

	for (unsigned i = 0; i < cf->n && i < TLB_MAX_NODES; i++) {
		const struct raft_progress *p =
		    &c->raft.leader_state.progress[i];

		if (cf->servers[i].id == c->raft.id ||
		    cf->servers[i].role == RAFT_SPARE) {
			continue; /* a spare is sent no entries */
		}
		if (p->recent_recv) {
			c->lag_heard[i] = now;
		} else if (now - c->lag_heard[i] > silent) {
			/* not heard from (down, paused, busy installing):
			 * its time behind counts from when it answers again */
			c->lag_since[i] = 0;
			continue;
		}
		if (p->match_index >= c->raft.commit_index ||
		    p->match_index != c->lag_match[i] || c->lag_since[i] == 0) {
			c->lag_match[i] = p->match_index;
			c->lag_since[i] = now;
			continue;
		}
		if (now - c->lag_since[i] >= CATCHUP_MS &&
		    p->match_index < below) {
			below = p->match_index;
			who = cf->servers[i].id;
		}
	}
	if (who == 0 ||
	    (c->catchup_at != 0 && now - c->catchup_at < 5 * CATCHUP_MS)) {
		return;
	}
	c->catchup = true;
	c->catchup_below = below;
	c->catchup_at = now;
	tlb_log(TLB_WARN, "R024",
	    "node %llu answers but has stayed at index %llu for %d ms "
	    "(commit index %llu): a snapshot is taken to send it",
	    (unsigned long long) who, (unsigned long long) below, CATCHUP_MS,
	    (unsigned long long) c->raft.commit_index);
	/* libraft asks for a snapshot when it applies an entry */
	if (!c->catchup_barrier_pending) {
		c->catchup_barrier.data = c;
		if (raft_barrier(&c->raft, &c->catchup_barrier,
		        catchup_barrier_cb) == 0) {
			c->catchup_barrier_pending = true;
		}
	}
}

static void
tick_cb(uv_timer_t *t)
{
	tlc *c = t->data;
	int st;
	raft_id lid = 0;
	const char *laddr = NULL;
	uint64_t term = c->raft.current_term;
	bool changed, sized = c->ticks++ % 20 == 0;
	uint64_t log_entries = 0, log_bytes = 0;

	if (c->stopping) {
		close_when_idle(c);
		return;
	}
	st = raft_state(&c->raft);
	/* libraft 0.15: a follower whose election timer runs out while a
	 * snapshot the leader sent is being written turns candidate, and
	 * the install's completion then answers the leader it names in its
	 * follower state, which the candidate state (a union) has
	 * overwritten: a crash (seen when the leader was killed during an
	 * install). While an install is under way the follower counts as
	 * hearing from its leader; it is short (a manifest), and elections
	 * go on once it is done. */
	if (st == RAFT_FOLLOWER && c->raft.snapshot.put.data != NULL) {
		c->raft.election_timer_start = c->raft.io->time(c->raft.io);
	}

	raft_leader(&c->raft, &lid, &laddr);
	/* the log's size every 100 ms, walked outside the lock that the
	 * writer's proposals take */
	if (sized) {
		log_size(c, &log_entries, &log_bytes);
	}
	pthread_mutex_lock(&c->mtx);
	changed = (st == RAFT_LEADER) != c->is_leader;
	c->state = st;
	c->is_leader = st == RAFT_LEADER;
	if (!c->is_leader) {
		c->ready_term = 0;
	}
	/* every poll: a node URL entry may apply after the election */
	snprintf(c->leader_url, sizeof(c->leader_url), "%s", url_of(c, lid));
	if (lid != c->leader_id || term != c->term) {
		if (lid != 0 && term != c->seen_term) {
			c->seen_term = term;
			c->elections++;
			tlb_log(TLB_INFO, "R003",
			    "node %llu is the leader (term %llu)",
			    (unsigned long long) lid,
			    (unsigned long long) term);
		}
	}
	c->leader_id = lid;
	c->term = term;
	c->commit_index = c->raft.commit_index;
	c->applied_index = raft_last_applied(&c->raft);
	c->last_index = raft_last_index(&c->raft);
	if (sized) {
		c->log_entries = log_entries;
		c->log_bytes = log_bytes;
	}
	c->nmatch = 0;
	if (st == RAFT_LEADER) {
		const struct raft_configuration *cf = &c->raft.configuration;

		for (unsigned i = 0; i < cf->n && i < TLB_MAX_NODES; i++) {
			c->match_id[c->nmatch] = cf->servers[i].id;
			c->match_index[c->nmatch] =
			    cf->servers[i].id == c->raft.id
			    ? c->last_index
			    : c->raft.leader_state.progress[i].match_index;
			c->nmatch++;
		}
	}
	/* the role thread also looks again while a leader waits for its
	 * clock check, and when a serving leader's clock went wrong */
	if (changed ||
	    (c->is_leader && !atomic_load(&c->serving) && c->ready_term != 0 &&
	        c->ready_term != c->tried_term) ||
	    (c->is_leader && tlc_clock_degraded(c->clock) &&
	        atomic_load(&c->serving))) {
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mtx);
	if (st == RAFT_LEADER && tlc_clock_degraded(c->clock)) {
		refuse_leadership(c, term);
	}
	if (st == RAFT_LEADER) {
		lease_renew(c);
		if (sized) {
			catchup_check(c);
		}
	} else {
		atomic_store(&c->lease_until_ms, 0);
		memset(c->lag_since, 0, sizeof(c->lag_since));
		c->catchup = false;
	}
	/* a new leader serves once an entry of its term has applied: every
	 * entry committed before is then in its store */
	if (st == RAFT_LEADER && !c->barrier_pending &&
	    (c->ready_term != term)) {
		c->barrier.data = c;
		c->barrier_term = term;
		if (raft_barrier(&c->raft, &c->barrier, barrier_cb) == 0) {
			c->barrier_pending = true;
		}
	}
}

/* ---- administration (raft thread) ---- */

typedef struct admin_err {
	int err;
	const char *detail;
	const char *leader;
} admin_err;

static void
enc_admin_err(tlp_w *w, const void *arg)
{
	const admin_err *e = arg;

	if (e->err == TL_ENOTLEADER) {
		tlp_enc_error_leader(w, e->err, e->detail, e->leader);
	} else {
		tlp_enc_error(w, e->err, e->detail);
	}
}

static void
enc_admin_ok(tlp_w *w, const void *arg)
{
	(void) arg;
	tlp_enc_ok(w);
}

static void
enc_status(tlp_w *w, const void *arg)
{
	tlp_enc_cluster_status(w, arg);
}

/* Answer and forget a request. */
static void
admin_answer(admin *a, int err, const char *detail)
{
	tlc *c = a->c;

	if (err == TL_OK) {
		tlb_send_frame(a->s, TLP_OP_CLUSTER, TLP_F_REPLY, a->reqid,
		    enc_admin_ok, NULL);
	} else {
		char url[256];
		admin_err e = {err, detail, url};

		tlc_leader_url(c, url, sizeof(url));
		tlb_send_frame(a->s, TLP_OP_CLUSTER, TLP_F_REPLY, a->reqid,
		    enc_admin_err, &e);
	}
	tlb_session_rele(a->s);
	tli_free(a);
}

/* A libraft error of a change, as the client's. */
static void
admin_fail(admin *a, int rv)
{
	char detail[160];
	int err;

	switch (rv) {
	case RAFT_NOTLEADER:
		err = TL_ENOTLEADER;
		break;
	case RAFT_LEADERSHIPLOST:
		err = TL_ELEADERLOST;
		break;
	case RAFT_CANTCHANGE:
		err = TL_EBUSY;
		break;
	case RAFT_BADID:
	case RAFT_NOTFOUND:
		err = TL_ENOTFOUND;
		break;
	case RAFT_NOMEM:
		err = TL_ENOMEM;
		break;
	default:
		err = TL_EINVAL;
		break;
	}
	if (a->action == TLC_ADD && a->step == 0) {
		snprintf(detail, sizeof(detail),
		    "the node's client URL did not commit (%s): not added",
		    raft_strerror(rv));
	} else if (a->action == TLC_REMOVE && a->step == 1) {
		snprintf(detail, sizeof(detail),
		    "node %llu was removed, but the removal of its client URL "
		    "did not commit (%s): run remove again",
		    (unsigned long long) a->id, raft_strerror(rv));
	} else {
		snprintf(detail, sizeof(detail), "%s", raft_strerror(rv));
	}
	admin_answer(a, err, detail);
}

static const char *
role_name(int role)
{
	switch (role) {
	case RAFT_VOTER:
		return "voter";
	case RAFT_STANDBY:
		return "standby";
	default:
		return "spare";
	}
}

static void
admin_status(admin *a)
{
	tlc *c = a->c;
	const struct raft_configuration *cf = &c->raft.configuration;
	tlp_cluster_node nodes[TLB_MAX_NODES + 8];
	tlp_cluster_status st;
	bool known = false;
	raft_id lid = 0;
	const char *laddr = NULL;
	size_t n = 0;

	memset(&st, 0, sizeof(st));
	raft_leader(&c->raft, &lid, &laddr);
	st.self_id = c->raft.id;
	st.leader_id = lid;
	st.term = c->raft.current_term;
	st.commit_index = c->raft.commit_index;
	st.applied_index = raft_last_applied(&c->raft);
	st.last_index = raft_last_index(&c->raft);
	st.state = (tlp_str){state_name(raft_state(&c->raft)),
	    strlen(state_name(raft_state(&c->raft)))};
	st.serving = atomic_load(&c->serving);
	st.degraded = tlc_clock_degraded(c->clock);
	st.majority_offset_ms = tlc_clock_majority_offset(c->clock, &known);
	for (unsigned i = 0; i < cf->n && n < sizeof(nodes) / sizeof(nodes[0]);
	     i++) {
		tlp_cluster_node *o = &nodes[n++];
		const char *url = url_of(c, cf->servers[i].id);
		const char *role = role_name(cf->servers[i].role);

		memset(o, 0, sizeof(*o));
		o->id = cf->servers[i].id;
		o->raft = (tlp_str){
		    cf->servers[i].address, strlen(cf->servers[i].address)};
		o->url = (tlp_str){url, strlen(url)};
		o->role = (tlp_str){role, strlen(role)};
		if (raft_state(&c->raft) == RAFT_LEADER) {
			o->match = o->id == c->raft.id
			    ? st.last_index
			    : c->raft.leader_state.progress[i].match_index;
		}
		if (o->id == c->raft.id) {
			o->clock_known = true;
		} else {
			o->clock_known = tlc_clock_peer(
			    c->clock, o->id, &o->clock_offset_ms);
		}
	}
	st.nodes = nodes;
	st.n = n;
	tlb_send_frame(
	    a->s, TLP_OP_CLUSTER, TLP_F_REPLY, a->reqid, enc_status, &st);
	tlb_session_rele(a->s);
	tli_free(a);
}

static void
admin_transfer_cb(struct raft_transfer *req)
{
	admin *a = req->data;
	tlc *c = a->c;
	raft_id lid = 0;
	const char *laddr = NULL;

	raft_leader(&c->raft, &lid, &laddr);
	if (lid != 0 && lid != c->raft.id && (a->id == 0 || lid == a->id)) {
		tlb_log(TLB_INFO, "R015", "leadership handed to node %llu",
		    (unsigned long long) lid);
		admin_answer(a, TL_OK, NULL);
	} else {
		admin_answer(a, TL_ETIMEDOUT,
		    "the leadership did not move within the election timeout");
	}
}

/* Queue a request for its next step on the raft thread: no libraft call
 * from inside its own callbacks. While the node stops (raft still runs
 * until its loop is idle, the wake-up handle is closed) it waits in the
 * queue, and the raft thread answers it as it ends. */
static void
admin_requeue(tlc *c, admin *a)
{
	bool closed;

	pthread_mutex_lock(&c->mtx);
	a->next = NULL;
	*c->a_tail = a;
	c->a_tail = &a->next;
	closed = c->closed;
	if (!closed) {
		uv_async_send(&c->async);
	}
	pthread_mutex_unlock(&c->mtx);
}

static void
admin_change_cb(struct raft_change *req, int status)
{
	admin *a = req->data;
	tlc *c = a->c;

	if (status != 0) {
		admin_fail(a, status);
		return;
	}
	if (a->action == TLC_ADD && a->step == 1) {
		a->step = 2; /* now a spare: make it a voter */
		admin_requeue(c, a);
		return;
	}
	tlb_log(TLB_INFO, "R016", "node %llu %s", (unsigned long long) a->id,
	    a->action == TLC_ADD ? "added as a voter" : "removed");
	if (a->action == TLC_REMOVE) {
		a->step = 1; /* then its URL */
		admin_requeue(c, a);
		return;
	}
	admin_answer(a, TL_OK, NULL);
}

/* The node URL entry committed (and applied here). */
static void
admin_apply_cb(struct raft_apply *req, int status, void *result)
{
	admin *a = req->data;

	(void) result;
	if (status != 0) {
		admin_fail(a, status);
		return;
	}
	if (a->action == TLC_ADD) {
		a->step = 1; /* every node knows the URL: add the node */
		admin_requeue(a->c, a);
		return;
	}
	admin_answer(a, TL_OK, NULL);
}

/* Propose the entry setting a->id's URL to url ("" removes it). */
static int
admin_propose_url(tlc *c, admin *a, const char *url)
{
	uint8_t e[TLI_REPL_NODE_MAX];
	size_t n = tli_store_node_entry(a->id, url, e);
	struct raft_buffer buf;
	int rv;

	if (n == 0) {
		return RAFT_INVALID; /* the handler checked the URL */
	}
	if (frame_entry(e, n, &buf) != TL_OK) {
		return RAFT_NOMEM;
	}
	a->apply.data = a;
	rv = raft_apply(&c->raft, &a->apply, &buf, 1, admin_apply_cb);
	if (rv == RAFT_NOTLEADER) {
		raft_free(buf.base); /* as in propose_all */
	}
	return rv;
}

static bool
in_config(tlc *c, uint64_t id)
{
	const struct raft_configuration *cf = &c->raft.configuration;

	for (unsigned i = 0; i < cf->n; i++) {
		if (cf->servers[i].id == id) {
			return true;
		}
	}
	return false;
}

static bool
has_extra(tlc *c, uint64_t id)
{
	for (int i = 0; i < c->nextra; i++) {
		if (c->extra[i].id == id) {
			return true;
		}
	}
	return false;
}

/* Add: the URL first, committed, so that every node can name the new node
 * as soon as it may lead. Remove: the URL last, once the node can no
 * longer lead (a removal that fails leaves a member with its URL). */
static void
admin_run(tlc *c, admin *a)
{
	int rv;

	if (a->action == TLC_STATUS) {
		admin_status(a);
		return;
	}
	if (raft_state(&c->raft) != RAFT_LEADER) {
		if (a->step != 0) {
			admin_fail(a, RAFT_NOTLEADER); /* says what is done */
		} else {
			admin_answer(a, TL_ENOTLEADER, "not the leader");
		}
		return;
	}
	a->change.data = a;
	switch (a->action) {
	case TLC_TRANSFER:
		if (a->id == c->raft.id) {
			/* the leadership is where it is sent: a retry after an
			 * election that chose it, or a client that followed a
			 * redirect to it */
			admin_answer(a, TL_OK, NULL);
			return;
		}
		/* its target may be elected at once: no more reads here */
		atomic_store(&c->lease_until_ms, 0);
		a->transfer.data = a;
		rv = raft_transfer(
		    &c->raft, &a->transfer, a->id, admin_transfer_cb);
		break;
	case TLC_ADD:
		if (a->step == 0 && in_config(c, a->id)) {
			/* before its URL would replace the member's */
			admin_answer(a, TL_EINVAL,
			    "a node of this id is in the cluster already");
			return;
		}
		if (a->step == 0) {
			rv = admin_propose_url(c, a, a->url);
		} else if (a->step == 1) {
			rv = raft_add(&c->raft, &a->change, a->id, a->raft,
			    admin_change_cb);
		} else {
			rv = raft_assign(&c->raft, &a->change, a->id,
			    RAFT_VOTER, admin_change_cb);
		}
		break;
	default:
		/* removed before, its URL's removal lost: that is left */
		if (a->step == 0 && !in_config(c, a->id) &&
		    has_extra(c, a->id)) {
			a->step = 1;
		}
		if (a->step == 0) {
			rv = raft_remove(
			    &c->raft, &a->change, a->id, admin_change_cb);
		} else {
			rv = admin_propose_url(c, a, "");
		}
		break;
	}
	if (rv != 0) {
		admin_fail(a, rv);
	}
}

/* Run the queued requests (stopping: refuse them). */
static void
admin_all(tlc *c, bool stop)
{
	admin *l;

	pthread_mutex_lock(&c->mtx);
	l = c->a_head;
	c->a_head = NULL;
	c->a_tail = &c->a_head;
	pthread_mutex_unlock(&c->mtx);
	while (l != NULL) {
		admin *a = l;

		l = l->next;
		if (stop) {
			admin_answer(a, TL_ECLOSED, "the broker is stopping");
		} else {
			admin_run(c, a);
		}
	}
}

tlc_action
tlc_action_of(const char *name, size_t len)
{
	static const struct {
		const char *s;
		tlc_action a;
	} t[] = {{"status", TLC_STATUS}, {"transfer", TLC_TRANSFER},
	    {"add", TLC_ADD}, {"remove", TLC_REMOVE}};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (strlen(t[i].s) == len && memcmp(t[i].s, name, len) == 0) {
			return t[i].a;
		}
	}
	return (tlc_action) 0;
}

void
tlc_admin(tlc *c, tlb_session *s, uint32_t reqid, tlc_action action,
    uint64_t id, const char *raft, const char *url)
{
	admin *a = tli_zalloc(sizeof(*a));
	bool closed;

	if (a == NULL) {
		return; /* the client times out */
	}
	a->c = c;
	a->s = s;
	a->reqid = reqid;
	a->action = action;
	a->id = id;
	snprintf(a->raft, sizeof(a->raft), "%s", raft != NULL ? raft : "");
	snprintf(a->url, sizeof(a->url), "%s", url != NULL ? url : "");
	tlb_session_hold(s);
	pthread_mutex_lock(&c->mtx);
	closed = c->closed;
	if (!closed) {
		*c->a_tail = a;
		c->a_tail = &a->next;
		uv_async_send(&c->async);
	}
	pthread_mutex_unlock(&c->mtx);
	if (closed) {
		admin_answer(a, TL_ECLOSED, "the broker is stopping");
	}
}

static void
close_cb(struct raft *r)
{
	tlc *c = r->data;

	raft_uv_close(&c->io);
	raft_uv_tcp_close(&c->tr);
}

/* Close raft once no request of the loop is in flight. libraft 0.15
 * frees a log truncation's request when it closes while the truncation
 * runs in the thread pool, and the truncation's end then writes through
 * the freed request (a follower that has just dropped a deposed leader's
 * entries, stopped right then). Truncations, segment work and sends are
 * requests of this loop; nothing starts one between this check and
 * raft_close. After 2 s it closes anyway. */
static void
close_when_idle(tlc *c)
{
	if (c->loop.active_reqs.count != 0 && tli_mono_ms() < c->stop_by_ms) {
		return; /* the tick looks again in 5 ms */
	}
	uv_timer_stop(&c->tick);
	uv_close((uv_handle_t *) &c->tick, NULL);
	raft_close(&c->raft, close_cb);
}

static void
async_cb(uv_async_t *a)
{
	tlc *c = a->data;
	bool stop;

	pthread_mutex_lock(&c->mtx);
	stop = c->stop;
	if (stop) {
		c->closed = true; /* no more uv_async_send */
		c->is_leader = false;
	}
	pthread_mutex_unlock(&c->mtx);
	propose_all(c); /* after stop: every one answers TL_ENOTLEADER */
	admin_all(c, stop);
	if (stop) {
		uv_close((uv_handle_t *) &c->async, NULL);
		c->stopping = true;
		c->stop_by_ms = tli_mono_ms() + 2000;
		close_when_idle(c);
	}
}

/* ---- start and stop ---- */

static int
bootstrap(tlc *c)
{
	const tlb_conf *cf = &c->b->conf;
	struct raft_configuration conf;
	int rv = 0;

	if (cf->cluster_join) {
		return 0; /* the leader adds it; its log starts empty */
	}
	raft_configuration_init(&conf);
	for (int i = 0; i < cf->nnodes && rv == 0; i++) {
		rv = raft_configuration_add(
		    &conf, cf->nodes[i].id, cf->nodes[i].raft, RAFT_VOTER);
	}
	if (rv == 0) {
		rv = raft_bootstrap(&c->raft, &conf);
	}
	raft_configuration_close(&conf);
	return rv == RAFT_CANTBOOTSTRAP ? 0 : rv; /* a restart */
}

/* Whether the store belongs to another Raft group (logged): it has
 * applied entries although this node's log holds nothing past the
 * bootstrap configuration (a copy of another group's store, not prepared
 * with `tl-store seed`). Started, it would skip the new log's first
 * entries as applied: every write of the new group up to the old index
 * lost on this node. Only a fresh log is judged: a leader may apply an
 * entry its followers stored before its own write of it ends, so a node
 * killed then restarts with its store some entries past its log, which
 * is harmless (the others hold them) and must not stop it. */
static bool
store_foreign(tlc *c)
{
	uint64_t have = tli_store_applied_index(c->b->store);
	uint64_t last = raft_last_index(&c->raft);
	char path[600];

	if (last > 1 || have <= last) {
		return false;
	}
	tlc_store_path(c->b, path, sizeof(path));
	tlb_log(TLB_ERROR, "R018",
	    "the store in %s has applied Raft entries up to index %llu, but "
	    "this node's Raft log in %s holds nothing past index %llu: the "
	    "store comes from another Raft group and would skip the new "
	    "group's entries up to that index; not starting. To seed a new "
	    "cluster from this copy, run `tl-store seed %s` on it (on every "
	    "node's copy) first",
	    path, (unsigned long long) have, c->raft_dir,
	    (unsigned long long) last, path);
	return true;
}

/* Read whether the store is a seed whose check has not applied (logged
 * when the store cannot tell). */
static int
seed_state(tlc *c)
{
	uint64_t id = 0;
	bool pending = false;
	int rv = tli_store_seed_get(c->b->store, &id, &pending);

	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R007",
		    "cannot read the store's seed mark: %s", tl_strerror(rv));
		return -1;
	}
	c->seed_pending = pending;
	return 0;
}

/* Everything up to raft_start, on the raft thread. */
static int
node_open(tlc *c)
{
	const tlb_conf *cf = &c->b->conf;
	const tlb_node *me = &cf->nodes[cf->self];
	unsigned n = (unsigned) cf->cluster_snapshot_entries;
	int rv;

	/* the URLs of nodes added at run time, before any redirect */
	if (extra_load(c) != TL_OK) {
		return -1;
	}
	if (mkdir(c->raft_dir, 0755) != 0 && errno != EEXIST) {
		tlb_log(TLB_ERROR, "R007", "cannot create %s: %s", c->raft_dir,
		    strerror(errno));
		return -1;
	}
	if ((rv = raft_uv_tcp_init(&c->tr, &c->loop)) != 0) {
		tlb_log(
		    TLB_ERROR, "R007", "Raft transport: %s", raft_strerror(rv));
		return -1;
	}
	if ((rv = raft_uv_init(&c->io, &c->loop, c->raft_dir, &c->tr)) != 0) {
		tlb_log(TLB_ERROR, "R007", "Raft log in %s: %s (%s)",
		    c->raft_dir, raft_strerror(rv), c->io.errmsg);
		raft_uv_tcp_close(&c->tr);
		return -1;
	}
	raft_uv_set_connect_retry_delay(&c->io, 100);
	/* libuv's raft_io has async_work (the thread pool) in 0.15 but still
	 * says version 1, and raft_init refuses asynchronous snapshots with
	 * a version 1 io; later libraft versions say 2. */
	if (c->io.version < 2 && c->io.async_work != NULL) {
		c->io.version = 2;
	}
	c->fsm.version = 3;
	c->fsm.data = c;
	c->fsm.apply = fsm_apply;
	c->fsm.snapshot = fsm_snapshot;
	c->fsm.restore = fsm_restore;
	c->fsm.snapshot_finalize = fsm_snapshot_finalize;
	c->fsm.snapshot_async = fsm_snapshot_async;
	if ((rv = raft_init(&c->raft, &c->io, &c->fsm, me->id, me->raft)) !=
	    0) {
		tlb_log(TLB_ERROR, "R007", "Raft node: %s", raft_strerror(rv));
		raft_uv_close(&c->io);
		raft_uv_tcp_close(&c->tr);
		return -1;
	}
	c->raft.data = c;
	raft_set_election_timeout(&c->raft, (unsigned) cf->cluster_election_ms);
	raft_set_heartbeat_timeout(
	    &c->raft, (unsigned) cf->cluster_heartbeat_ms);
	raft_set_pre_vote(&c->raft, true);
	/* libraft asks from a few entries on; fsm_snapshot decides */
	raft_set_snapshot_threshold(&c->raft, n < 8 ? n : 8);
	raft_set_snapshot_trailing(&c->raft, n);
	raft_set_install_snapshot_timeout(&c->raft, 3000);
	if ((rv = bootstrap(c)) != 0 || (rv = raft_start(&c->raft)) != 0) {
		tlb_log(TLB_ERROR, "R007",
		    "cannot start the Raft node %llu (%s) in %s: %s (%s)",
		    (unsigned long long) me->id, me->raft, c->raft_dir,
		    raft_strerror(rv), raft_errmsg(&c->raft));
		raft_close(&c->raft, close_cb);
		return -1;
	}
	if (store_foreign(c) || seed_state(c) != 0) {
		raft_close(&c->raft, close_cb);
		return -1;
	}
	uv_async_init(&c->loop, &c->async, async_cb);
	c->async.data = c;
	uv_timer_init(&c->loop, &c->tick);
	c->tick.data = c;
	uv_timer_start(&c->tick, tick_cb, 0, 5);
	tlb_log(TLB_INFO, "R000",
	    "Raft node %llu of %d at %s (log %s, election timeout %lld ms, "
	    "leases taken %lld ms ahead)",
	    (unsigned long long) me->id, cf->nnodes, me->raft, c->raft_dir,
	    (long long) cf->cluster_election_ms,
	    (long long) cf->lease_ahead_ms);
	return 0;
}

static void *
raft_main(void *arg)
{
	tlc *c = arg;
	int rv;

	pthread_setname_np(pthread_self(), "tl-raft");
	tli_store_thread_setup();
	uv_loop_init(&c->loop);
	rv = node_open(c);
	pthread_mutex_lock(&c->mtx);
	c->start_rv = rv;
	c->started = true;
	if (rv != 0) {
		c->closed = true;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	uv_loop_close(&c->loop);
	/* whatever arrived after the close answers TL_ENOTLEADER */
	pthread_mutex_lock(&c->mtx);
	c->closed = true;
	c->is_leader = false;
	for (prop *p = take_queue(c); p != NULL; p = p->next) {
		p->rv = TL_ENOTLEADER;
		p->done = true;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	admin_all(c, true); /* what came in before closed was set */
	return NULL;
}

/* Take over as leader: reload the store (the writer's caches), create the
 * configured topics, then serve. */
/* Whether this node still leads term `term` and is not stopping. */
static bool
still_leader(tlc *c, uint64_t term)
{
	bool yes;

	pthread_mutex_lock(&c->mtx);
	yes = c->is_leader && c->ready_term == term && !c->stop;
	pthread_mutex_unlock(&c->mtx);
	return yes;
}

/* A seeded group's first leader: the seed check before any entry of its
 * own (store.h, "the seed check"). */
static int
seed_check(tlc *c, uint64_t term)
{
	uint8_t entry[TLI_REPL_SEED_LEN];
	uint64_t id = 0;
	bool pending = false;
	int rv = tli_store_seed_get(c->b->store, &id, &pending);

	if (rv == TL_OK && pending) {
		tli_store_seed_entry(id, entry);
		rv = tlc_replicate(c->b, entry, sizeof(entry));
		if (rv == TL_OK) {
			tlb_log(TLB_INFO, "R020",
			    "seed %016llx checked: this group starts from "
			    "that store",
			    (unsigned long long) id);
		}
	}
	if (rv != TL_OK) {
		tlb_log(TLB_WARN, "R011",
		    "leader of term %llu but the seed check failed: %s; not "
		    "serving",
		    (unsigned long long) term, tl_strerror(rv));
	}
	return rv;
}

static void
take_over(tlc *c, uint64_t term)
{
	int rv = tli_store_reload(c->b->store);

	/* TL_EBUSY: the writer is still inside a replicate of the past
	 * (answered soon, as that entry commits or fails) */
	for (int i = 0; rv == TL_EBUSY && i < 1000 && still_leader(c, term);
	     i++) {
		struct timespec ts = {0, 5 * 1000 * 1000};

		nanosleep(&ts, NULL);
		rv = tli_store_reload(c->b->store);
	}

	if (rv != TL_OK) {
		tlb_log(TLB_ERROR, "R011",
		    "leader of term %llu but the store did not reload: %s",
		    (unsigned long long) term, tl_strerror(rv));
		return;
	}
	if (seed_check(c, term) != TL_OK) {
		return;
	}
	if (tlb_create_topics(c->b) != 0) {
		tlb_log(TLB_WARN, "R011",
		    "leader of term %llu but the configured topics could not "
		    "be created; not serving",
		    (unsigned long long) term);
		return;
	}
	pthread_mutex_lock(&c->mtx);
	if (c->is_leader && c->ready_term == term && !c->stop &&
	    tlc_clock_checked(c->clock) && !tlc_clock_degraded(c->clock)) {
		atomic_store(&c->serving, true);
		tlb_log(TLB_INFO, "R001",
		    "leader elected: this node serves (term %llu)",
		    (unsigned long long) term);
	}
	pthread_mutex_unlock(&c->mtx);
}

static void *
role_main(void *arg)
{
	tlc *c = arg;

	pthread_setname_np(pthread_self(), "tl-raft-role");
	pthread_mutex_lock(&c->mtx);
	for (;;) {
		bool serving = atomic_load(&c->serving);
		bool skewed = tlc_clock_degraded(c->clock);
		bool lost = serving &&
		    (!c->is_leader || c->ready_term == 0 ||
		        c->ready_term != c->tried_term || skewed);
		bool won = c->is_leader && c->ready_term != 0 &&
		    c->ready_term != c->tried_term && !skewed &&
		    tlc_clock_checked(c->clock);

		if (c->stop) {
			break;
		}
		if (lost) {
			/* stop serving first, then drop the subscribers: their
			 * consumers reconnect and are redirected */
			uint64_t term = c->term;

			atomic_store(&c->serving, false);
			pthread_mutex_unlock(&c->mtx);
			tlb_log(TLB_INFO, "R002",
			    "stepped down: not serving as the leader any more "
			    "(term %llu)",
			    (unsigned long long) term);
			tlb_dsp_close_subscribers(c->b);
			pthread_mutex_lock(&c->mtx);
			continue;
		}
		if (won) {
			uint64_t term = c->ready_term;

			c->tried_term = term;
			pthread_mutex_unlock(&c->mtx);
			take_over(c, term);
			pthread_mutex_lock(&c->mtx);
			continue;
		}
		pthread_cond_wait(&c->cv, &c->mtx);
	}
	atomic_store(&c->serving, false);
	pthread_mutex_unlock(&c->mtx);
	return NULL;
}

int
tlc_start(tlb_broker *b)
{
	tlc *c = tli_zalloc(sizeof(*c));
	int rv;

	if (c == NULL) {
		return -1;
	}
	c->b = b;
	snprintf(c->raft_dir, sizeof(c->raft_dir), "%s/raft", b->conf.data_dir);
	c->q_tail = &c->q_head;
	c->a_tail = &c->a_head;
	c->state = RAFT_UNAVAILABLE;
	if (tlc_snaps_init(&c->snaps, b) != 0) {
		tli_free(c);
		return -1;
	}
	pthread_mutex_init(&c->mtx, NULL);
	pthread_cond_init(&c->cv, NULL);
	/* before the threads that ask it: a node leads only once its clock
	 * was checked against the majority's */
	if (b->conf.nnodes > 1 && (c->clock = tlc_clock_start(b)) == NULL) {
		tlc_snaps_fini(&c->snaps);
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mtx);
		tli_free(c);
		return -1;
	}
	if (pthread_create(&c->th, NULL, raft_main, c) != 0) {
		tlc_clock_stop(c->clock);
		tlc_snaps_fini(&c->snaps);
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mtx);
		tli_free(c);
		return -1;
	}
	pthread_mutex_lock(&c->mtx);
	while (!c->started) {
		pthread_cond_wait(&c->cv, &c->mtx);
	}
	rv = c->start_rv;
	pthread_mutex_unlock(&c->mtx);
	b->cluster = c;
	if (rv == 0 && pthread_create(&c->role_th, NULL, role_main, c) == 0) {
		c->role_started = true;
		return 0;
	}
	tlc_stop(b);
	return -1;
}

void
tlc_free(tlb_broker *b)
{
	tlc *c = b->cluster;

	if (c == NULL) {
		return;
	}
	b->cluster = NULL;
	tlc_snaps_fini(&c->snaps);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mtx);
	tli_free(c);
}

void
tlc_stop(tlb_broker *b)
{
	tlc *c = b->cluster;

	if (c == NULL) {
		return;
	}
	pthread_mutex_lock(&c->mtx);
	if (c->stop) {
		pthread_mutex_unlock(&c->mtx);
		return; /* stopped already */
	}
	c->stop = true;
	if (!c->closed) {
		uv_async_send(&c->async);
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	pthread_join(c->th, NULL);
	if (c->role_started) {
		pthread_join(c->role_th, NULL);
		c->role_started = false;
	}
	tlc_clock_stop(c->clock); /* nothing reads it any more */
	c->clock = NULL;
}

bool
tlc_serving(const tlc *c)
{
	return atomic_load(&c->serving);
}

void
tlc_leader_url(tlc *c, char *out, size_t cap)
{
	pthread_mutex_lock(&c->mtx);
	snprintf(out, cap, "%s", c->leader_url);
	pthread_mutex_unlock(&c->mtx);
}

void
tlc_get_stats(tlc *c, tlc_stats *st)
{
	pthread_mutex_lock(&c->mtx);
	st->role = state_name(c->state);
	st->serving = atomic_load(&c->serving);
	st->term = c->term;
	st->commit_index = c->commit_index;
	st->applied_index = c->applied_index;
	st->leader_id = c->leader_id;
	st->elections = c->elections;
	st->proposed = c->proposed;
	st->proposed_bytes = c->proposed_bytes;
	st->snapshots_taken = c->snaps_taken;
	st->snapshots_installed = c->snaps_installed;
	pthread_mutex_unlock(&c->mtx);
}

void
tlc_render_more(tlc *c, tli_buf *o)
{
	pthread_mutex_lock(&c->mtx);
	tli_buf_printf(o,
	    "# HELP timeline_cluster_follower_lag entries a node lacks of the "
	    "leader's log (on the leader only)\n"
	    "# TYPE timeline_cluster_follower_lag gauge\n");
	for (int i = 0; i < c->nmatch; i++) {
		if (c->match_id[i] != c->raft.id) {
			tli_buf_printf(o,
			    "timeline_cluster_follower_lag{node=\"%llu\"} "
			    "%llu\n",
			    (unsigned long long) c->match_id[i],
			    (unsigned long long) (c->last_index -
			        c->match_index[i]));
		}
	}
	tli_buf_printf(o,
	    "# HELP timeline_cluster_last_index the last entry of this node's "
	    "Raft log\n# TYPE timeline_cluster_last_index gauge\n"
	    "timeline_cluster_last_index %llu\n"
	    "# HELP timeline_cluster_log_entries entries of the Raft log held "
	    "in memory (since the last snapshot and the ones kept behind it)\n"
	    "# TYPE timeline_cluster_log_entries gauge\n"
	    "timeline_cluster_log_entries %llu\n"
	    "# HELP timeline_cluster_log_bytes bytes of those entries\n"
	    "# TYPE timeline_cluster_log_bytes gauge\n"
	    "timeline_cluster_log_bytes %llu\n",
	    (unsigned long long) c->last_index,
	    (unsigned long long) c->log_entries,
	    (unsigned long long) c->log_bytes);
	pthread_mutex_unlock(&c->mtx);
	tlc_clock_metrics(c->clock, o);
}

int
tlc_read_fence(tlc *c)
{
	int64_t deadline = tli_mono_ms() + c->b->conf.cluster_election_ms;

	pthread_mutex_lock(&c->mtx);
	while (atomic_load(&c->serving) &&
	    tli_mono_ms() >= atomic_load(&c->lease_until_ms) &&
	    tli_mono_ms() < deadline) {
		struct timespec ts;

		tli_deadline(&ts, CLOCK_REALTIME, 5);
		pthread_cond_timedwait(&c->cv, &c->mtx, &ts);
	}
	pthread_mutex_unlock(&c->mtx);
	return atomic_load(&c->serving) &&
	        tli_mono_ms() < atomic_load(&c->lease_until_ms)
	    ? TL_OK
	    : TL_ENOTLEADER;
}

int
tlc_snapshot_read(tlc *c, const char *name, const char *file, uint64_t offset,
    size_t max, tli_buf *out, uint64_t *size)
{
	return tlc_snaps_read(&c->snaps, name, file, offset, max, out, size);
}

int
tlc_snapshot_latest(tlc *c, uint64_t min, tli_buf *out)
{
	return tlc_snaps_latest(&c->snaps, min, out);
}
