/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for secrets: the broker
 * keeps only the hash of each credential token (`timelined --hash-token`
 * makes one) and compares hashes in constant time; the MSC4140 gateway
 * derives public transaction ids and owner names with them. In tlbase so
 * that adapters, which never link proto/, have them too; the names keep
 * their tlp_ prefix from when they lived there. Not for tables or bucket
 * placement: that is base/hash.h.
 */
#ifndef TL_BASE_SHA256_H
#define TL_BASE_SHA256_H

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
/* HMAC-SHA-256 of msg[0..n) under key[0..klen) (any length). */
void tlp_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n,
    uint8_t out[TLP_SHA256_LEN]);
/* Equality of two n-byte buffers in time independent of their contents. */
int tlp_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
