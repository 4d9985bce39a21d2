/*
 * SHA-256 (FIPS 180-4), used to store and compare credential tokens as
 * hashes: the broker keeps only the hash of each token (`timelined
 * --hash-token` makes one) and compares hashes in constant time. Not for
 * tables or bucket placement: that is base/hash.h.
 */
#ifndef TL_PROTO_SHA256_H
#define TL_PROTO_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TLP_SHA256_LEN 32
#define TLP_SHA256_HEX (2 * TLP_SHA256_LEN)

typedef struct tlp_sha256_ctx {
	uint32_t h[8];
	uint64_t total; /* bytes hashed so far */
	uint8_t blk[64];
	size_t nblk;
} tlp_sha256_ctx;

void tlp_sha256_init(tlp_sha256_ctx *s);
void tlp_sha256_update(tlp_sha256_ctx *s, const void *p, size_t n);
void tlp_sha256_final(tlp_sha256_ctx *s, uint8_t out[TLP_SHA256_LEN]);
/* One call: digest of p[0..n). */
void tlp_sha256(const void *p, size_t n, uint8_t out[TLP_SHA256_LEN]);
/* Lower-case hex of a digest; out has room for TLP_SHA256_HEX + 1. */
void tlp_sha256_hex(const uint8_t d[TLP_SHA256_LEN], char *out);
/* Equality of two n-byte buffers in time independent of their contents. */
int tlp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
