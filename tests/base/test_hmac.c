/*
 * HMAC-SHA-256 (base/sha256.h) against RFC 4231's test cases: a short key,
 * a key shorter than the digest, a key longer than a block (hashed first),
 * and a key of exactly one block with an empty message (the last from
 * Python's hmac module).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "sha256.h"

static void
hmac_hex(const void *key, size_t klen, const char *msg, char *out)
{
	uint8_t d[TLP_SHA256_LEN];

	tlp_hmac_sha256(key, klen, msg, strlen(msg), d);
	tlp_sha256_hex(d, out);
}

Test(hmac, rfc4231)
{
	char hex[TLP_SHA256_HEX + 1];
	uint8_t k[131];

	memset(k, 0x0b, 20);
	hmac_hex(k, 20, "Hi There", hex);
	cr_assert_str_eq(hex,
	    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	hmac_hex("Jefe", 4, "what do ya want for nothing?", hex);
	cr_assert_str_eq(hex,
	    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, sizeof(k));
	hmac_hex(k, sizeof(k),
	    "Test Using Larger Than Block-Size Key - Hash Key First", hex);
	cr_assert_str_eq(hex,
	    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	memset(k, 'k', 64);
	hmac_hex(k, 64, "", hex);
	cr_assert_str_eq(hex,
	    "83026a325aaee70e36cfe607536aa1054104ad1077c36134810d4ccded1ccd3b");
}
