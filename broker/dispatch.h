/*
 * The dispatcher: for every topic with subscribers a near-future window of
 * due entries, leases taken through the store for due messages and pushed
 * to consumers with credit, the leases handed out (credit comes back on
 * ack, release or expiry) and the LEASE_LOST notices for those lost.
 *
 * Threads: its own thread (tl-dispatch) does the window's reads and takes
 * the leases; the request worker calls in for SUBSCRIBE and UNSUBSCRIBE,
 * the store's writer thread for a batch's effects and a lease batch's
 * completion, any thread that closes a session for tlb_dsp_session_gone.
 * Lock order: the dispatcher's lock before a session's lock (it sends
 * pushes under it); never held across a store call that waits for the
 * writer.
 */
#ifndef TL_BROKER_DISPATCH_H
#define TL_BROKER_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msgs.h"
#include "server.h"

typedef struct tlb_dsp tlb_dsp;

int tlb_dsp_start(tlb_broker *b);
/* Stop the thread (before the store is closed) ... */
void tlb_dsp_stop(tlb_broker *b);
/* ... and free the state once the store is closed (no completion can run
 * any more). Both accept a dispatcher that never started. */
void tlb_dsp_free(tlb_broker *b);

/* A message got timestamp ts (create, move, release, extend, kick): put it
 * in the window if the window already covers ts. locked: ts is the end of
 * a lease (extend), which is not leased again before it. */
void tlb_dsp_note(tlb_broker *b, const char *topic, uint32_t bucket, int64_t ts,
    bool locked, const char *id, size_t id_len, uint64_t version);
/* A lease op finished: ACK/RELEASE end the lease (credit back), EXTEND
 * moves its expiry. */
void tlb_dsp_lease_done(tlb_broker *b, const char *topic, const char *consumer,
    size_t consumer_len, const char *id, size_t id_len, int op, int64_t new_ts,
    uint64_t new_version);
/* A LOCK took a lease for consumer: a subscription of that consumer id
 * does not get it pushed (SUBSCRIBE's recovery) while it is the current
 * lease; its EXTEND, RELEASE and ACK reach it through lease_done. */
void tlb_dsp_lock_taken(tlb_broker *b, const char *topic, const char *consumer,
    size_t clen, const char *id, size_t idl, uint64_t version, int64_t until);
/* The same two under one lock held by the caller (a batch's effects). */
void tlb_dsp_lock(tlb_broker *b);
void tlb_dsp_unlock(tlb_broker *b);
void tlb_dsp_note_locked(tlb_broker *b, const char *topic, uint32_t bucket,
    int64_t ts, bool locked, const char *id, size_t id_len, uint64_t version);
void tlb_dsp_lease_done_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len,
    int op, int64_t new_ts, uint64_t new_version);
/* An ACK or RELEASE of consumer's lease `version` on id arrived, before
 * the store applies it: the subscription's credit for it comes back now.
 * If the store then refuses it, ack_failed counts it again. */
void tlb_dsp_ack_arrived_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len,
    uint64_t version);
void tlb_dsp_ack_failed_locked(tlb_broker *b, const char *topic,
    const char *consumer, size_t consumer_len, const char *id, size_t id_len);

/* Consumer bookkeeping. subscribe answers the request itself (before it
 * delivers again the leases the consumer still holds) or returns the
 * error for the caller to send. */
int tlb_dsp_subscribe(
    tlb_broker *b, tlb_session *s, const tlp_sub *sub, uint32_t reqid);
int tlb_dsp_unsubscribe(tlb_broker *b, tlb_session *s, const tlp_sub *sub);
/* The session closed: drop its subscriptions (their leases run out). */
void tlb_dsp_session_gone(tlb_broker *b, tlb_session *s);
void tlb_dsp_topic_gone(tlb_broker *b, const char *topic);
/* This node stopped being the cluster's leader: close every session that
 * has a subscription (its consumer reconnects and is redirected), after
 * dropping its subscriptions. */
void tlb_dsp_close_subscribers(tlb_broker *b);

/* A copy of the dispatcher's figures for the metrics: a row per topic
 * (consumer "") followed by a row per subscription of that topic. */
typedef struct tlb_dsp_stat {
	char topic[TL_MAX_NAME_LEN + 1];
	char consumer[TL_MAX_NAME_LEN + 1];
	uint64_t consumers; /* a topic: its subscriptions */
	uint64_t window;    /* a topic: entries in its window */
	uint64_t credit;    /* a subscription */
	uint64_t held;      /* a subscription: leases held */
	uint64_t delivered; /* a subscription */
} tlb_dsp_stat;

/* The rows (free with tli_free); TL_ENOMEM, or TL_OK with *out NULL and
 * *n 0 when there are none. */
int tlb_dsp_stats(tlb_broker *b, tlb_dsp_stat **out, size_t *n);

#endif
