/*
 * msgpack coding (see mp.h): a writer over msgpack-c's packer and
 * a strict, allocation-free reader.
 */
#include "base.h"
#include "mp.h"

static int
w_write(void *data, const char *buf, size_t len)
{
	return tli_buf_append(data, buf, len) == TL_OK ? 0 : -1;
}

void
tlp_w_init(tlp_w *w, tli_buf *b)
{
	w->b = b;
	msgpack_packer_init(&w->pk, b, w_write);
}

/* The writers that hand one value to the packer as it is. */
#define W_PASS(name, type, pack)            \
	void tlp_w_##name(tlp_w *w, type v) \
	{                                   \
		pack(&w->pk, v);            \
	}

W_PASS(array, size_t, msgpack_pack_array)
W_PASS(map, size_t, msgpack_pack_map)
W_PASS(int, int64_t, msgpack_pack_int64)
W_PASS(uint, uint64_t, msgpack_pack_uint64)

void
tlp_w_nil(tlp_w *w)
{
	msgpack_pack_nil(&w->pk);
}

void
tlp_w_bool(tlp_w *w, bool v)
{
	(v ? msgpack_pack_true : msgpack_pack_false)(&w->pk);
}

void
tlp_w_str(tlp_w *w, const char *s, size_t n)
{
	msgpack_pack_str(&w->pk, n);
	msgpack_pack_str_body(&w->pk, s, n);
}

void
tlp_w_cstr(tlp_w *w, const char *s)
{
	tlp_w_str(w, s, s != NULL ? strlen(s) : 0);
}

void
tlp_w_bin(tlp_w *w, const void *p, size_t n)
{
	msgpack_pack_bin(&w->pk, n);
	msgpack_pack_bin_body(&w->pk, p, n);
}

/* ---- reader ---- */

void
tlp_r_init(tlp_r *r, const void *p, size_t n)
{
	r->p = p;
	r->end = r->p + n;
	r->err = TL_OK;
	r->reply_fields = SIZE_MAX;
}

size_t
tlp_r_left(const tlp_r *r)
{
	return (size_t) (r->end - r->p);
}

static int
r_fail(tlp_r *r, int err)
{
	if (r->err == TL_OK) {
		r->err = err;
	}
	return r->err;
}

static int
r_need(tlp_r *r, size_t n)
{
	if (r->err != TL_OK) {
		return r->err;
	}
	return tlp_r_left(r) >= n ? TL_OK : r_fail(r, TL_EPROTO);
}

static uint64_t
r_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		v = (v << 8) | p[i];
	}
	return v;
}

/* Read a big-endian length of n bytes after the type byte. */
static int
r_len(tlp_r *r, size_t n, size_t *len)
{
	if (r_need(r, 1 + n) != TL_OK) {
		return r->err;
	}
	*len = (size_t) r_be(r->p + 1, n);
	r->p += 1 + n;
	return TL_OK;
}

/* How a family of msgpack types (arrays, strings, binaries) gives its
 * length: a fixed form whose low bits hold it, and types followed by a
 * 1-, 2- or 4-byte length (0 where the family has none of that width). */
typedef struct head {
	uint8_t fmask, ftag;
	uint8_t wide[3];
	uint8_t bin[3]; /* binaries, where the caller accepts them */
} head;

static const head arr_head = {0xf0, 0x90, {0, 0xdc, 0xdd}, {0, 0, 0}};
static const head str_head = {0xe0, 0xa0, {0xd9, 0xda, 0xdb}, {0, 0, 0}};
static const head bin_head = {
    0xe0, 0xa0, {0xd9, 0xda, 0xdb}, {0xc4, 0xc5, 0xc6}};

static int
r_head(tlp_r *r, const head *h, size_t *len)
{
	static const size_t width[3] = {1, 2, 4};
	uint8_t t;

	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	t = r->p[0];
	if ((t & h->fmask) == h->ftag) {
		*len = t & (uint8_t) ~h->fmask;
		r->p++;
		return TL_OK;
	}
	for (size_t i = 0; i < 3; i++) {
		if ((h->wide[i] != 0 && t == h->wide[i]) ||
		    (h->bin[i] != 0 && t == h->bin[i])) {
			return r_len(r, width[i], len);
		}
	}
	return r_fail(r, TL_EPROTO);
}

/* A length or count read from the wire: over the caller's limit is
 * TL_ETOOLARGE; more than the bytes left (every element takes at least
 * one byte) is a lie, whatever the limit. */
static int
r_fits(tlp_r *r, size_t len, size_t max)
{
	if (len > max) {
		return r_fail(r, TL_ETOOLARGE);
	}
	return len > tlp_r_left(r) ? r_fail(r, TL_EPROTO) : TL_OK;
}

int
tlp_r_array(tlp_r *r, size_t max, size_t *n)
{
	size_t len = 0;

	if (r_head(r, &arr_head, &len) != TL_OK ||
	    r_fits(r, len, max) != TL_OK) {
		return r->err;
	}
	*n = len;
	return TL_OK;
}

int
tlp_r_nil(tlp_r *r, bool *was_nil)
{
	*was_nil = false;
	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	if (r->p[0] == 0xc0) {
		r->p++;
		*was_nil = true;
	}
	return TL_OK;
}

int
tlp_r_bool(tlp_r *r, bool *v)
{
	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	if (r->p[0] != 0xc2 && r->p[0] != 0xc3) {
		return r_fail(r, TL_EPROTO);
	}
	*v = r->p[0] == 0xc3;
	r->p++;
	return TL_OK;
}

/* Any msgpack integer as a sign and a magnitude. */
static int
r_integer(tlp_r *r, bool *neg, uint64_t *mag)
{
	uint8_t t;
	size_t n = 0;

	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	t = r->p[0];
	*neg = false;
	if (t <= 0x7f) {
		*mag = t;
		r->p++;
		return TL_OK;
	}
	if (t >= 0xe0) {
		*neg = true;
		*mag = (uint64_t) (-(int64_t) (int8_t) t);
		r->p++;
		return TL_OK;
	}
	switch (t) {
	case 0xcc:
	case 0xd0:
		n = 1;
		break;
	case 0xcd:
	case 0xd1:
		n = 2;
		break;
	case 0xce:
	case 0xd2:
		n = 4;
		break;
	case 0xcf:
	case 0xd3:
		n = 8;
		break;
	default:
		return r_fail(r, TL_EPROTO);
	}
	if (r_need(r, 1 + n) != TL_OK) {
		return r->err;
	}
	*mag = r_be(r->p + 1, n);
	if (t >= 0xd0) {
		/* Signed: sign-extend from n bytes. */
		int64_t v;
		if (n == 8) {
			v = (int64_t) *mag;
		} else {
			uint64_t sign = UINT64_C(1) << (n * 8 - 1);
			v = (int64_t) ((*mag ^ sign) - sign);
		}
		if (v < 0) {
			*neg = true;
			*mag = v == INT64_MIN ? (uint64_t) INT64_MAX + 1
			                      : (uint64_t) (-v);
		} else {
			*mag = (uint64_t) v;
		}
	}
	r->p += 1 + n;
	return TL_OK;
}

int
tlp_r_int(tlp_r *r, int64_t *v)
{
	bool neg = false;
	uint64_t mag = 0;

	/* An error already set stays: r_fail keeps the first. */
	if (r_integer(r, &neg, &mag) != TL_OK ||
	    mag > (uint64_t) INT64_MAX + (neg ? 1 : 0)) {
		return r_fail(r, TL_ERANGE);
	}
	*v = neg
	    ? (mag == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) mag)
	    : (int64_t) mag;
	return TL_OK;
}

int
tlp_r_uint(tlp_r *r, uint64_t *v)
{
	bool neg = false;
	uint64_t mag = 0;

	if (r_integer(r, &neg, &mag) != TL_OK || (neg && mag != 0)) {
		return r_fail(r, TL_ERANGE);
	}
	*v = mag;
	return TL_OK;
}

/* str (want_bin false) or str/bin (want_bin true), or nil. */
static int
r_bytes(tlp_r *r, size_t max, bool want_bin, const void **p, size_t *n)
{
	size_t len = 0;

	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	if (r->p[0] == 0xc0) {
		r->p++;
		*p = NULL;
		*n = 0;
		return TL_OK;
	}
	if (r_head(r, want_bin ? &bin_head : &str_head, &len) != TL_OK ||
	    r_fits(r, len, max) != TL_OK) {
		return r->err;
	}
	*p = r->p;
	*n = len;
	r->p += len;
	return TL_OK;
}

int
tlp_r_str(tlp_r *r, size_t max, const char **p, size_t *n)
{
	const void *v;
	int rv = r_bytes(r, max, false, &v, n);

	if (rv == TL_OK) {
		*p = v;
	}
	return rv;
}

int
tlp_r_bin(tlp_r *r, size_t max, const void **p, size_t *n)
{
	return r_bytes(r, max, true, p, n);
}

static int
r_skip_depth(tlp_r *r, int depth)
{
	uint8_t t;
	size_t n = 0, skip = 0;

	if (depth > TLP_MAX_DEPTH) {
		return r_fail(r, TL_EPROTO);
	}
	if (r_need(r, 1) != TL_OK) {
		return r->err;
	}
	t = r->p[0];
	if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
		r->p++;
		return TL_OK;
	}
	if ((t & 0xf0) == 0x80 || t == 0xde || t == 0xdf) { /* map */
		if ((t & 0xf0) == 0x80) {
			n = t & 0x0f;
			r->p++;
		} else if (r_len(r, t == 0xde ? 2 : 4, &n) != TL_OK) {
			return r->err;
		}
		if (n > tlp_r_left(r) / 2) {
			return r_fail(r, TL_EPROTO);
		}
		for (size_t i = 0; i < 2 * n && r->err == TL_OK; i++) {
			r_skip_depth(r, depth + 1);
		}
		return r->err;
	}
	if ((t & 0xf0) == 0x90 || t == 0xdc || t == 0xdd) {
		if (tlp_r_array(r, SIZE_MAX, &n) != TL_OK) {
			return r->err;
		}
		for (size_t i = 0; i < n && r->err == TL_OK; i++) {
			r_skip_depth(r, depth + 1);
		}
		return r->err;
	}
	if ((t & 0xe0) == 0xa0 || t == 0xd9 || t == 0xda || t == 0xdb ||
	    t == 0xc4 || t == 0xc5 || t == 0xc6) {
		const void *p;
		return r_bytes(r, SIZE_MAX, true, &p, &n);
	}
	switch (t) {
	case 0xcc:
	case 0xd0:
		skip = 2;
		break;
	case 0xcd:
	case 0xd1:
		skip = 3;
		break;
	case 0xca:
	case 0xce:
	case 0xd2:
		skip = 5;
		break;
	case 0xcb:
	case 0xcf:
	case 0xd3:
		skip = 9;
		break;
	case 0xd4:
		skip = 3;
		break;
	case 0xd5:
		skip = 4;
		break;
	case 0xd6:
		skip = 6;
		break;
	case 0xd7:
		skip = 10;
		break;
	case 0xd8:
		skip = 18;
		break;
	case 0xc7:
	case 0xc8:
	case 0xc9: {
		size_t lb = t == 0xc7 ? 1 : t == 0xc8 ? 2 : 4;
		if (r_len(r, lb, &n) != TL_OK) {
			return r->err;
		}
		if (r_need(r, n + 1) != TL_OK) {
			return r->err;
		}
		r->p += n + 1;
		return TL_OK;
	}
	default:
		return r_fail(r, TL_EPROTO);
	}
	if (r_need(r, skip) != TL_OK) {
		return r->err;
	}
	r->p += skip;
	return TL_OK;
}

int
tlp_r_skip(tlp_r *r)
{
	return r_skip_depth(r, 0);
}

int
tlp_r_end(tlp_r *r)
{
	if (r->err != TL_OK) {
		return r->err;
	}
	return r->p == r->end ? TL_OK : r_fail(r, TL_EPROTO);
}
