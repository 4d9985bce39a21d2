/*
 * Timeline's wire format. A connection is a byte stream (nng's tcp, ipc or
 * tls+tcp stream transports) carrying frames:
 *
 *   u32 length (big-endian; the bytes after this field, at most
 *               TLP_MAX_FRAME)
 *   u8  protocol version (TLP_VERSION)
 *   u8  operation (ops.def)
 *   u8  flags (TLP_F_REPLY on replies, TLP_F_PUSH on pushes)
 *   u8  reserved, 0
 *   u32 request id (big-endian; chosen by the client, echoed in the reply;
 *       0 on pushes)
 *   ... a msgpack body: one array whose layout each operation defines
 *       (docs/protocol.md), decoded by msgs.c with strict limits.
 *
 * Version: TLP_VERSION is bumped for any incompatible change of a body
 * layout; a broker answers a frame of an unknown version with TL_ENOTSUP
 * and the versions it speaks, then closes. Adding an operation is
 * compatible (an unknown operation gets TL_ENOTSUP).
 */
#ifndef TL_PROTO_FRAME_H
#define TL_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "mp.h"

#define TLP_VERSION 1
#define TLP_VERSION_STR "1" /* keep in step with TLP_VERSION */
#define TLP_LEN_BYTES 4
#define TLP_HDR_LEN 8
/* Largest frame: a batch of bodies; one body alone is at most
 * TL_MAX_BODY_LEN. */
#define TLP_MAX_FRAME (32u * 1024u * 1024u)

#define TLP_F_REPLY 0x01
#define TLP_F_PUSH 0x02

typedef enum tlp_op {
	TLP_OP_NONE = 0,
#define TLP_OP(name, code, kind, summary) TLP_OP_##name = code,
#include "timeline/ops.def"
#undef TLP_OP
	TLP_OP_MAX_ = 64
} tlp_op;

typedef struct tlp_hdr {
	uint8_t version;
	uint8_t op;
	uint8_t flags;
	uint32_t reqid;
} tlp_hdr;

/* The name of an operation ("CREATE"), or NULL for an unknown code. */
const char *tlp_op_name(int op);
/* Whether op is a known operation of kind REQ. */
int tlp_op_is_request(int op);
/* Whether op is a message batch: a tlp_batch request answered by one
 * result per item (CREATE, MOVE, DELETE, EXTEND, RELEASE, ACK, DLQ_KICK);
 * with LOCK, TOPIC_CREATE and TOPIC_DELETE, the writes whose answers a
 * cluster keeps (docs/cluster.md). */
bool tlp_op_is_batch(int op);

/* Start a frame in b: reserve the length field, write the header, and
 * return a writer for the body. Finish with tlp_frame_end. */
void tlp_frame_begin(
    tli_buf *b, tlp_w *w, uint8_t op, uint8_t flags, uint32_t reqid);
/* Fill in the length of the frame started at offset `start` of b. Returns
 * TL_ETOOLARGE when it exceeds TLP_MAX_FRAME, TL_ENOMEM when the buffer ran
 * out of memory. */
int tlp_frame_end(tli_buf *b, size_t start);

/* Decode the 4-byte length prefix; TL_EPROTO when it is smaller than a
 * header, TL_ETOOLARGE over TLP_MAX_FRAME. */
int tlp_frame_len(const uint8_t p[TLP_LEN_BYTES], uint32_t *len);
/* Decode a header from the first TLP_HDR_LEN bytes of a frame. */
int tlp_hdr_decode(tlp_hdr *h, const uint8_t *p, size_t n);

#endif
