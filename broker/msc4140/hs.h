/*
 * The homeserver client's streamed requests (hs.c), for the pass-through:
 * the body comes from a callback as the client sends it and the answer
 * goes to callbacks as the homeserver sends it; nothing is held whole.
 * (The requests whose answer is held, tlg_hs_request, are in gw.h.)
 */
#ifndef TL_MSC4140_HS_H
#define TL_MSC4140_HS_H

#include <stdbool.h>
#include <stdint.h>

#include "gw.h"

/* A streamed request: its body comes from read, its answer goes to head
 * (status, raw "Name: value\r\n" header lines, the body's length or -1,
 * once, before any body byte) and write. Callbacks return 0 (read: the
 * bytes, 0 at the end) or -1 to abort; they run on the calling thread and
 * may wait. */
typedef struct hs_stream {
	const hs_hdr *hdrs;
	size_t nhdrs;
	int64_t len; /* the request body's length; -1: unknown; 0: none */
	long (*read)(void *arg, char *buf, size_t cap);
	int (*head)(void *arg, long status, const char *headers, int64_t len);
	int (*write)(void *arg, const char *p, size_t n);
	void *arg;
	bool headed; /* out: head was called */
} hs_stream;

/* One streamed request to url: 0 when the whole answer was passed on, or
 * -1 (st->headed says whether the answer had begun). */
int tlg_hs_stream(tlg *g, const char *method, const char *url, hs_stream *st);

#endif
