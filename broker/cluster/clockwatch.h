/*
 * The cluster's clock watch (docs/cluster.md, "Clocks"). The leader's clock
 * positions every message, so a node whose clock is off from the rest of
 * the cluster must not lead. Each node keeps a session with every other
 * node's client address and asks its time once a second (HELLO, then
 * PING): the peer's broker clock minus this node's at the middle of the
 * round trip (half the round trip is the error bound). The node's offset from
 * the majority is the median of its offsets to every node whose clock it knows,
 * itself included at 0; when more than half of the cluster is known and that
 * median is over cluster_clock_bound_ms the node is degraded: it logs so
 * loudly, says so in its metrics, and refuses to become or stay leader
 * (cluster.c hands the leadership over). When fewer nodes answer, or an
 * even number whose two middle clocks disagree by more than the bound
 * (two nodes cannot tell which of them is wrong), the majority is unknown
 * and the state stays as it was; a node leads only once a round has
 * decided (tlc_clock_checked).
 *
 * Threads: its own (tl-clockwatch), which opens the sessions and asks
 * once a second; any thread may ask it. Its lock is a leaf. A peer that
 * does not answer (down, or asking for a token: auth = on) counts as
 * unknown.
 */
#ifndef TL_BROKER_CLUSTER_CLOCKWATCH_H
#define TL_BROKER_CLUSTER_CLOCKWATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

typedef struct tlb_broker tlb_broker;
typedef struct tlc_clock tlc_clock;

/* Start watching the peers of b->conf's cluster. NULL when out of memory
 * or the thread did not start (logged); the node then runs unwatched. */
tlc_clock *tlc_clock_start(tlb_broker *b);
/* Stop the thread and close the sessions. Accepts NULL. */
void tlc_clock_stop(tlc_clock *k);

/* Whether a round has measured more than half of the cluster's clocks
 * (true for NULL): until then a node does not know whether it may lead. */
bool tlc_clock_checked(tlc_clock *k);
/* Whether this node's clock is off from the majority's by more than the
 * bound (false for NULL). */
bool tlc_clock_degraded(tlc_clock *k);
/* This node's offset from the majority (ms; the majority's clock minus
 * ours), and whether a majority is known. */
int64_t tlc_clock_majority_offset(tlc_clock *k, bool *known);

/* The last measured offset of node id (its clock minus ours, ms): false
 * when it did not answer (or k is NULL). */
bool tlc_clock_peer(tlc_clock *k, uint64_t id, int64_t *offset_ms);

/* The clock rows of /metrics. */
void tlc_clock_metrics(tlc_clock *k, tli_buf *o);

#endif
