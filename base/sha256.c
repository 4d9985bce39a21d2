/*
 * SHA-256 as specified by FIPS 180-4 (section 6.2): 64-byte blocks,
 * big-endian words, the message padded with 0x80, zeros and its bit length.
 * Checked against the standard's examples by the sha256 cases in
 * tests/auth/test_creds.c. HMAC (RFC 2104) on top, checked against RFC
 * 4231's cases in tests/base/test_hmac.c.
 */
#include <string.h>

#include "sha256.h"

static const uint32_t k256[64] = {0x428a2f98, 0x71374491, 0xb5c0fbcf,
    0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
    0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e,
    0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c,
    0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee,
    0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void
sha256_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int t = 0; t < 16; t++) {
		w[t] = (uint32_t) p[4 * t] << 24 |
		    (uint32_t) p[4 * t + 1] << 16 |
		    (uint32_t) p[4 * t + 2] << 8 | (uint32_t) p[4 * t + 3];
	}
	for (int t = 16; t < 64; t++) {
		uint32_t s0 =
		    ROTR(w[t - 15], 7) ^ ROTR(w[t - 15], 18) ^ (w[t - 15] >> 3);
		uint32_t s1 =
		    ROTR(w[t - 2], 17) ^ ROTR(w[t - 2], 19) ^ (w[t - 2] >> 10);
		w[t] = w[t - 16] + s0 + w[t - 7] + s1;
	}
	a = h[0];
	b = h[1];
	c = h[2];
	d = h[3];
	e = h[4];
	f = h[5];
	g = h[6];
	hh = h[7];
	for (int t = 0; t < 64; t++) {
		uint32_t t1 = hh + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) +
		    ((e & f) ^ (~e & g)) + k256[t] + w[t];
		uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) +
		    ((a & b) ^ (a & c) ^ (b & c));
		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += hh;
}

void
tlp_sha256_init(tlp_sha256_ctx *s)
{
	static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
	    0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

	memcpy(s->h, h0, sizeof(h0));
	s->total = 0;
	s->nblk = 0;
}

void
tlp_sha256_update(tlp_sha256_ctx *s, const void *p, size_t n)
{
	const uint8_t *in = p;

	s->total += n;
	while (n > 0) {
		size_t take = 64 - s->nblk < n ? 64 - s->nblk : n;
		memcpy(s->blk + s->nblk, in, take);
		s->nblk += take;
		in += take;
		n -= take;
		if (s->nblk == 64) {
			sha256_block(s->h, s->blk);
			s->nblk = 0;
		}
	}
}

void
tlp_sha256_final(tlp_sha256_ctx *s, uint8_t out[TLP_SHA256_LEN])
{
	uint64_t bits = s->total * 8;
	uint8_t pad = 0x80, len[8];

	tlp_sha256_update(s, &pad, 1);
	pad = 0;
	while (s->nblk != 56) {
		tlp_sha256_update(s, &pad, 1);
	}
	for (int i = 0; i < 8; i++) {
		len[i] = (uint8_t) (bits >> (56 - 8 * i));
	}
	tlp_sha256_update(s, len, 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t) (s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t) (s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t) (s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t) s->h[i];
	}
}

void
tlp_sha256(const void *p, size_t n, uint8_t out[TLP_SHA256_LEN])
{
	tlp_sha256_ctx s;

	tlp_sha256_init(&s);
	tlp_sha256_update(&s, p, n);
	tlp_sha256_final(&s, out);
}

void
tlp_sha256_hex(const uint8_t d[TLP_SHA256_LEN], char *out)
{
	static const char hx[] = "0123456789abcdef";

	for (int i = 0; i < TLP_SHA256_LEN; i++) {
		out[2 * i] = hx[d[i] >> 4];
		out[2 * i + 1] = hx[d[i] & 15];
	}
	out[TLP_SHA256_HEX] = '\0';
}

void
tlp_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
    uint8_t out[TLP_SHA256_LEN])
{
	uint8_t k[64] = {0}, pad[64], inner[TLP_SHA256_LEN];
	tlp_sha256_ctx s;

	/* a key longer than a block is hashed first */
	if (klen > sizeof(k)) {
		tlp_sha256(key, klen, k);
	} else if (klen > 0) {
		memcpy(k, key, klen);
	}
	for (size_t i = 0; i < sizeof(pad); i++) {
		pad[i] = (uint8_t) (k[i] ^ 0x36);
	}
	tlp_sha256_init(&s);
	tlp_sha256_update(&s, pad, sizeof(pad));
	tlp_sha256_update(&s, msg, n);
	tlp_sha256_final(&s, inner);
	for (size_t i = 0; i < sizeof(pad); i++) {
		pad[i] = (uint8_t) (k[i] ^ 0x5c);
	}
	tlp_sha256_init(&s);
	tlp_sha256_update(&s, pad, sizeof(pad));
	tlp_sha256_update(&s, inner, sizeof(inner));
	tlp_sha256_final(&s, out);
}

int
tlp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	volatile uint8_t acc = 0;

	for (size_t i = 0; i < n; i++) {
		acc |= (uint8_t) (a[i] ^ b[i]);
	}
	return acc == 0;
}
