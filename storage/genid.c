/*
 * Generated message ids and bucket placement. A generated id is 26
 * characters of Crockford base32: 48 bits of creation time in milliseconds,
 * then 80 random bits. Ids made later sort after earlier ones, also within
 * one millisecond (the random part is incremented), so an id tells when a
 * message was first created.
 */
#include <pthread.h>
#include <sys/random.h>

#include "store.h"

static const char b32[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static pthread_mutex_t gen_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t gen_last_ms = -1;
static uint16_t gen_hi; /* top 16 of the 80 random bits */
static uint64_t gen_lo; /* low 64 */

static void
gen_fresh_random(void)
{
	uint8_t r[10];
	size_t got = 0;

	while (got < sizeof(r)) {
		ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
		if (n > 0) {
			got += (size_t) n;
		}
	}
	gen_hi = (uint16_t) ((r[0] << 8) | r[1]);
	gen_lo = tli_get_be64(r + 2);
	/* Leave head-room so increments within a millisecond never wrap. */
	gen_hi &= 0x7fff;
}

void
tli_gen_id(char out[TL_GEN_ID_LEN + 1], int64_t now_ms)
{
	uint64_t t;
	uint16_t hi;
	uint64_t lo;

	pthread_mutex_lock(&gen_lock);
	if (now_ms > gen_last_ms) {
		gen_last_ms = now_ms;
		gen_fresh_random();
	} else {
		if (++gen_lo == 0) {
			gen_hi++;
		}
	}
	t = (uint64_t) gen_last_ms & ((UINT64_C(1) << 48) - 1);
	hi = gen_hi;
	lo = gen_lo;
	pthread_mutex_unlock(&gen_lock);

	/* 48 bits of time in 10 characters (the first carries 3 bits). */
	for (int i = 9; i >= 0; i--) {
		out[i] = b32[t & 31];
		t >>= 5;
	}
	/* 80 random bits in 16 characters. */
	for (int i = 25; i >= 10; i--) {
		out[i] = b32[lo & 31];
		lo = (lo >> 5) | ((uint64_t) (hi & 31) << 59);
		hi >>= 5;
	}
	out[TL_GEN_ID_LEN] = '\0';
}

uint32_t
tli_bucket_of(const char *id, size_t id_len, uint32_t buckets)
{
	return buckets <= 1 ? 0 : (uint32_t) (tli_hash64(id, id_len) % buckets);
}
