/*
 * libFuzzer target: the frame envelope. The input is a byte stream as it
 * arrives on a connection; it is cut into frames the way both ends do
 * (the 4-byte length prefix, then the 8-byte header, then the body), and
 * each frame's body is walked value by value. Properties: the length
 * check keeps every frame between a header and TLP_MAX_FRAME; a header
 * that decodes is re-encoded by tlp_frame_begin/tlp_frame_end to the
 * same bytes.
 */
#include "fuzz.h"
#include "msgs.h"

/* One frame of len bytes (header and body), alone in its heap block. */
static void
frame_one(const uint8_t *f, uint32_t len)
{
	tlp_hdr h;
	tlp_r r;
	int rv = tlp_hdr_decode(&h, f, len);

	TLF_CHECK(len >= TLP_HDR_LEN && len <= TLP_MAX_FRAME);
	if (rv != TL_OK) {
		TLF_CHECK(rv == TL_ENOTSUP && f[0] != TLP_VERSION);
		return;
	}
	(void) tlp_op_is_request(h.op);
	if (tlp_op_name(h.op) == NULL) {
		TLF_CHECK(!tlp_op_is_request(h.op));
	}
	/* The body: any number of msgpack values, skipped with the depth
	 * limit. */
	tlp_r_init(&r, f + TLP_HDR_LEN, len - TLP_HDR_LEN);
	while (tlp_r_left(&r) > 0 && tlp_r_skip(&r) == TL_OK) {
	}
	if (f[3] == 0) {
		tli_buf b;
		tlp_w w;

		tli_buf_init(&b);
		tlp_frame_begin(&b, &w, h.op, h.flags, h.reqid);
		tli_buf_append(&b, f + TLP_HDR_LEN, len - TLP_HDR_LEN);
		TLF_CHECK(tlp_frame_end(&b, 0) == TL_OK);
		TLF_CHECK(b.len == TLP_LEN_BYTES + len);
		TLF_CHECK(tli_get_be32(b.data) == len);
		TLF_CHECK(memcmp(b.data + TLP_LEN_BYTES, f, len) == 0);
		tli_buf_fini(&b);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (size - off >= TLP_LEN_BYTES) {
		uint32_t len = 0;
		char *f;
		int rv = tlp_frame_len(data + off, &len);

		if (rv != TL_OK) {
			uint32_t v = tli_get_be32(data + off);
			TLF_CHECK(
			    rv == (v < TLP_HDR_LEN ? TL_EPROTO : TL_ETOOLARGE));
			break;
		}
		off += TLP_LEN_BYTES;
		if (size - off < len) {
			break; /* the rest of the frame is still to come */
		}
		f = tlf_copy(data + off, len, 0);
		frame_one((const uint8_t *) f, len);
		free(f);
		off += len;
	}
	return 0;
}
