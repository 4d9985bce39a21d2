/*
 * The one hash function for non-secret use: 64-bit FNV-1a, with a seed so
 * that one input can give several independent values, and a finaliser that
 * spreads close inputs over a table. Every value it gives is stable across
 * versions: bucket placement (tli_hash64) and the gateway's stored owner
 * names (tli_hash64_mixed) depend on it. Secrets need SHA-256 (sha256.h).
 */
#ifndef TL_BASE_HASH_H
#define TL_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a starting from the offset basis XOR seed. */
static inline uint64_t
tli_hash64_seed(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = UINT64_C(14695981039346656037) ^ seed;
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= UINT64_C(1099511628211);
	}
	return h;
}

/* Plain FNV-1a (seed 0); it places messages in buckets. */
static inline uint64_t
tli_hash64(const void *data, size_t len)
{
	return tli_hash64_seed(data, len, 0);
}

/* The finaliser of MurmurHash3's 64-bit mix: every input bit reaches every
 * output bit. */
static inline uint64_t
tli_mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	return h;
}

/* Seeded FNV-1a, then mixed: for table slots and derived names. */
static inline uint64_t
tli_hash64_mixed(const void *data, size_t len, uint64_t seed)
{
	return tli_mix64(tli_hash64_seed(data, len, seed));
}

#endif
