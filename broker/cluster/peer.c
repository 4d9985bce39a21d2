/*
 * A session with another node's client address (peer.h).
 */
#include <string.h>

#include "broker.h"
#include "msgs.h"
#include "peer.h"

static int
io_wait(nng_aio *aio)
{
	nng_aio_wait(aio);
	return nng_aio_result(aio);
}

static int
send_all(nng_aio *aio, nng_stream *st, const uint8_t *p, size_t n)
{
	while (n > 0) {
		nng_iov iov = {(void *) p, n};
		size_t done;

		nng_aio_set_iov(aio, 1, &iov);
		nng_stream_send(st, aio);
		if (io_wait(aio) != 0) {
			return -1;
		}
		done = nng_aio_count(aio);
		p += done;
		n -= done;
	}
	return 0;
}

static int
recv_all(nng_aio *aio, nng_stream *st, uint8_t *p, size_t n)
{
	while (n > 0) {
		nng_iov iov = {p, n};
		size_t done;

		nng_aio_set_iov(aio, 1, &iov);
		nng_stream_recv(st, aio);
		if (io_wait(aio) != 0 || (done = nng_aio_count(aio)) == 0) {
			return -1;
		}
		p += done;
		n -= done;
	}
	return 0;
}

int
tlc_peer_dial(nng_aio *aio, const char *url, nng_stream **out)
{
	nng_stream_dialer *d = NULL;

	*out = NULL;
	if (nng_stream_dialer_alloc(&d, url) != 0) {
		return -1;
	}
	nng_stream_dialer_dial(d, aio);
	if (io_wait(aio) == 0) {
		*out = nng_aio_get_output(aio, 0);
	}
	nng_stream_dialer_free(d);
	return *out != NULL ? 0 : -1;
}

void
tlc_peer_close(nng_stream **st)
{
	if (*st != NULL) {
		nng_stream_close(*st);
		nng_stream_free(*st);
		*st = NULL;
	}
}

void
tlc_peer_hello(tli_buf *b, const tlb_broker *br, uint32_t reqid,
    const char *role, int64_t client_ms)
{
	tlp_hello m;
	tlp_w w;

	tlp_frame_begin(b, &w, TLP_OP_HELLO, 0, reqid);
	memset(&m, 0, sizeof(m));
	m.proto = TLP_VERSION;
	m.name = (tlp_str){br->conf.name, strlen(br->conf.name)};
	m.role = (tlp_str){role, strlen(role)};
	m.client_ms = client_ms;
	m.token =
	    (tlp_str){br->conf.cluster_token, strlen(br->conf.cluster_token)};
	tlp_enc_hello(&w, &m);
}

int
tlc_peer_call(nng_aio *aio, nng_stream *st, const tli_buf *b, uint32_t reqid,
    uint8_t *reply, size_t cap, tlp_r *r)
{
	uint8_t lenb[TLP_LEN_BYTES];
	uint32_t len = 0;
	tlp_hdr h;

	if (send_all(aio, st, b->data, b->len) != 0 ||
	    recv_all(aio, st, lenb, sizeof(lenb)) != 0 ||
	    tlp_frame_len(lenb, &len) != TL_OK || len > cap ||
	    recv_all(aio, st, reply, len) != 0 ||
	    tlp_hdr_decode(&h, reply, len) != TL_OK || h.reqid != reqid) {
		return -1;
	}
	tlp_r_init(r, reply + TLP_HDR_LEN, len - TLP_HDR_LEN);
	return 0;
}
