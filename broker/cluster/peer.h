/*
 * A session with another node's client address, as the cluster's own
 * threads use it (the clock watch, a snapshot's fetch): raw frames over an
 * nng stream, one request at a time, on the calling thread. The aio is the
 * caller's, with its timeout set (every send and receive waits on it).
 */
#ifndef TL_BROKER_CLUSTER_PEER_H
#define TL_BROKER_CLUSTER_PEER_H

#include <stdint.h>

#include <nng/nng.h>

#include "buf.h"
#include "frame.h"

typedef struct tlb_broker tlb_broker;

/* Connect to url: 0 and *out, or -1. */
int tlc_peer_dial(nng_aio *aio, const char *url, nng_stream **out);
/* Close and free *st; accepts NULL. */
void tlc_peer_close(nng_stream **st);

/* Begin a HELLO frame in b (request id reqid) as this node, in role, with
 * the cluster_token, its clock reading client_ms; finish with
 * tlp_frame_end. */
void tlc_peer_hello(tli_buf *b, const tlb_broker *br, uint32_t reqid,
    const char *role, int64_t client_ms);

/* Send the finished frame in b and read the reply to request reqid into
 * reply (cap bytes): 0 with *r at the reply's body, positioned for
 * tlp_dec_reply_head; -1 on an I/O error, a timeout, a reply over cap or
 * of another request (the session is then unusable: close it). */
int tlc_peer_call(nng_aio *aio, nng_stream *st, const tli_buf *b,
    uint32_t reqid, uint8_t *reply, size_t cap, tlp_r *r);

#endif
