/*
 * msgpack coding for Timeline's wire format. Encoding goes through
 * msgpack-c's packer into a growable buffer. Decoding is our own strict
 * cursor: it never allocates, checks every length and count against the
 * bytes that remain and against the caller's named limit before the caller
 * allocates anything, and refuses nesting deeper than TLP_MAX_DEPTH when it
 * skips values. Decoded strings and binaries point into the input buffer.
 */
#ifndef TL_PROTO_MP_H
#define TL_PROTO_MP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "buf.h"

#define TLP_MAX_DEPTH 8

/* A msgpack writer over a tli_buf. */
typedef struct tlp_w {
	msgpack_packer pk;
	tli_buf *b;
} tlp_w;

void tlp_w_init(tlp_w *w, tli_buf *b);
void tlp_w_array(tlp_w *w, size_t n);
void tlp_w_map(tlp_w *w, size_t n);
void tlp_w_nil(tlp_w *w);
void tlp_w_bool(tlp_w *w, bool v);
void tlp_w_int(tlp_w *w, int64_t v);
void tlp_w_uint(tlp_w *w, uint64_t v);
void tlp_w_str(tlp_w *w, const char *s, size_t n);
void tlp_w_cstr(tlp_w *w, const char *s);
void tlp_w_bin(tlp_w *w, const void *p, size_t n);

/* A strict reader. Every getter returns TL_OK or TL_EPROTO (wrong type,
 * truncated) or TL_ETOOLARGE (over the given limit); after an error the
 * reader stays failed and every later call fails too. */
typedef struct tlp_r {
	const uint8_t *p;
	const uint8_t *end;
	int err;
	/* the elements of a reply's array after its code (and detail), once
	 * tlp_dec_reply_head has read them; SIZE_MAX before */
	size_t reply_fields;
} tlp_r;

void tlp_r_init(tlp_r *r, const void *p, size_t n);
int tlp_r_array(tlp_r *r, size_t max, size_t *n);
int tlp_r_nil(tlp_r *r, bool *was_nil); /* consumes a nil if next */
int tlp_r_bool(tlp_r *r, bool *v);
int tlp_r_int(tlp_r *r, int64_t *v);
int tlp_r_uint(tlp_r *r, uint64_t *v);
/* A str (or nil, giving len 0 and *p NULL). */
int tlp_r_str(tlp_r *r, size_t max, const char **p, size_t *n);
/* A bin or str (or nil). */
int tlp_r_bin(tlp_r *r, size_t max, const void **p, size_t *n);
/* Skip one value of any type (depth-limited). */
int tlp_r_skip(tlp_r *r);
/* TL_OK when every byte was consumed, TL_EPROTO on trailing bytes. */
int tlp_r_end(tlp_r *r);
size_t tlp_r_left(const tlp_r *r);

#endif
