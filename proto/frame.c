/*
 * Frames: the length prefix and the header (see frame.h), and the
 * operation names expanded from ops.def.
 */
#include "frame.h"

typedef struct op_row {
	const char *name;
	int request;
} op_row;

#define REQ 1
#define PUSH 0
static const op_row op_rows[TLP_OP_MAX_] = {
#define TLP_OP(name, code, kind, summary) [code] = {#name, kind},
#include "timeline/ops.def"
#undef TLP_OP
};
#undef REQ
#undef PUSH

const char *
tlp_op_name(int op)
{
	return op > 0 && op < TLP_OP_MAX_ ? op_rows[op].name : NULL;
}

int
tlp_op_is_request(int op)
{
	return tlp_op_name(op) != NULL && op_rows[op].request;
}

bool
tlp_op_is_batch(int op)
{
	switch (op) {
	case TLP_OP_CREATE:
	case TLP_OP_MOVE:
	case TLP_OP_DELETE:
	case TLP_OP_EXTEND:
	case TLP_OP_RELEASE:
	case TLP_OP_ACK:
	case TLP_OP_DLQ_KICK:
		return true;
	default:
		return false;
	}
}

void
tlp_frame_begin(tli_buf *b, tlp_w *w, uint8_t op, uint8_t flags, uint32_t reqid)
{
	uint8_t h[TLP_LEN_BYTES + TLP_HDR_LEN] = {0};

	h[4] = TLP_VERSION;
	h[5] = op;
	h[6] = flags;
	tli_put_be32(h + 8, reqid);
	tli_buf_append(b, h, sizeof(h));
	tlp_w_init(w, b);
}

int
tlp_frame_end(tli_buf *b, size_t start)
{
	size_t len;

	if (b->oom) {
		return TL_ENOMEM;
	}
	len = b->len - start - TLP_LEN_BYTES;
	if (len > TLP_MAX_FRAME) {
		return TL_ETOOLARGE;
	}
	tli_put_be32(b->data + start, (uint32_t) len);
	return TL_OK;
}

int
tlp_frame_len(const uint8_t p[TLP_LEN_BYTES], uint32_t *len)
{
	uint32_t v = tli_get_be32(p);

	if (v < TLP_HDR_LEN) {
		return TL_EPROTO;
	}
	if (v > TLP_MAX_FRAME) {
		return TL_ETOOLARGE;
	}
	*len = v;
	return TL_OK;
}

int
tlp_hdr_decode(tlp_hdr *h, const uint8_t *p, size_t n)
{
	if (n < TLP_HDR_LEN) {
		return TL_EPROTO;
	}
	h->version = p[0];
	h->op = p[1];
	h->flags = p[2];
	h->reqid = tli_get_be32(p + 4);
	if (h->version != TLP_VERSION) {
		return TL_ENOTSUP;
	}
	return TL_OK;
}
