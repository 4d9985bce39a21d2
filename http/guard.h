/*
 * The framing guard of the HTTP server (internal to tlhttp): a relay
 * between every client connection and libmicrohttpd that reads the
 * request framing as the bytes pass, so that a request whose framing is
 * broken is refused at once, before libmicrohttpd waits for a body that
 * will never come. libmicrohttpd reads a chunk size of up to 2^64 - 1 and
 * then waits for that many bytes, and tells nobody the size it read.
 *
 * The guard owns the listening socket. Each accepted connection gets a
 * socket pair: one end goes to the server (hand: libmicrohttpd's
 * MHD_add_connection, with the client's own address), the guard keeps the
 * other and copies bytes both ways through two small buffers, with
 * back-pressure (a full buffer stops reading its side). The client's bytes
 * go through a request-framing parser (request line, headers, a body by
 * Content-Length or chunks, trailers, the next request on the same
 * connection). It refuses with 400, then closes:
 *   - a chunk size that is not hex, has more than 16 significant digits or
 *     is 2^63 or more, a chunk size line longer than 4 KiB, a chunk not
 *     followed by its line end;
 *   - Transfer-Encoding whose last coding is not chunked, or with
 *     Content-Length (RFC 9112 6.1, 6.3: a request smuggling risk);
 *   - a Content-Length that is not a number, or two that differ;
 *   - a Content-Length or Transfer-Encoding line folded, or longer than
 *     TLH_F_KEEP - 2 bytes;
 * and with 413 a chunk larger than chunk_max. The refusal is written after
 * whatever the server has already answered, with "Connection: close"; the
 * server's side of the pair is closed at once. What the guard lets pass is
 * left to the server as before (the Host header, header sizes, timeouts).
 */
#ifndef TL_HTTP_GUARD_H
#define TL_HTTP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tlhttp.h"

typedef struct tlh_guard tlh_guard;

typedef struct tlh_guard_cfg {
	int lfd;            /* listening, non-blocking; the guard closes it */
	unsigned threads;   /* relay threads */
	uint64_t chunk_max; /* a larger chunk: 413 at its size line */
	/* hands the server's end of a pair, with the client's address;
	 * false when the server refused it (and closed fd) */
	bool (*hand)(
	    void *arg, int fd, const struct sockaddr *sa, socklen_t len);
	/* the JSON body of a refusal (400 or 413) */
	void (*body)(void *arg, tlh_error e, tli_buf *out);
	const char *const *headers; /* added to a refusal: name, value, ... */
	void *arg;
} tlh_guard_cfg;

/* Starts the relay threads. TL_OK or TL_ENOMEM (lfd is closed). */
int tlh_guard_start(tlh_guard **out, const tlh_guard_cfg *cfg);
/* Accepts no more connections (the ones accepted go on). */
void tlh_guard_close(tlh_guard *g);
/* Stops the threads, closes every connection, frees. NULL is fine. */
void tlh_guard_free(tlh_guard *g);

/* ---- the parser (exposed for tests) ---- */

typedef enum tlh_fstate {
	TLH_F_LINE,     /* before a request line (blank lines skipped) */
	TLH_F_HEAD,     /* header lines */
	TLH_F_BODY,     /* Content-Length bytes */
	TLH_F_SIZE,     /* a chunk size line */
	TLH_F_DATA,     /* chunk bytes */
	TLH_F_DATA_END, /* the line end after a chunk */
	TLH_F_TRAILER,  /* trailer lines */
} tlh_fstate;

#define TLH_F_KEEP 128 /* bytes of a line kept to read it */

typedef struct tlh_framing {
	tlh_fstate st;
	char line[TLH_F_KEEP];
	size_t llen; /* bytes of the line so far (may be over TLH_F_KEEP) */
	uint64_t left;
	uint64_t cl;
	bool have_cl, te, te_chunked, last_framing;
	uint64_t chunk_max;
} tlh_framing;

/* A parser at the start of a connection. */
void tlh_framing_init(tlh_framing *f, uint64_t chunk_max);
/* Reads n bytes of the client's stream: 0, or the status of the refusal
 * (400 or 413; the parser then stays refused). */
int tlh_framing_feed(tlh_framing *f, const char *p, size_t n);

#endif
