/*
 * The pieces under authentication, without a broker: SHA-256 against the
 * examples of FIPS 180-4, the credentials file parser (every error names
 * the file and line; a bad file loads nothing), the name patterns and the
 * permission checks, and the per-group counters of creates in flight.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "auth.h"
#include "sha256.h"
#include "testutil.h"
#include "tlcheck.h"
#include "timeline/errors.h"

static void
hex_of(const char *msg, size_t n, char *out)
{
	uint8_t d[TLP_SHA256_LEN];

	tlp_sha256(msg, n, d);
	tlp_sha256_hex(d, out);
}

Test(sha256, fips_180_4_examples)
{
	char hex[TLP_SHA256_HEX + 1];
	const char *two =
	    "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char *million = malloc(1000000);
	tlp_sha256_ctx s;
	uint8_t d[TLP_SHA256_LEN];

	hex_of("abc", 3, hex);
	cr_assert_str_eq(hex,
	    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	hex_of("", 0, hex);
	cr_assert_str_eq(hex,
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	hex_of(two, strlen(two), hex);
	cr_assert_str_eq(hex,
	    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	memset(million, 'a', 1000000);
	/* In uneven pieces: the block buffering must not matter. */
	tlp_sha256_init(&s);
	for (size_t off = 0; off < 1000000;) {
		size_t k = (off % 97) + 1;
		if (off + k > 1000000) {
			k = 1000000 - off;
		}
		tlp_sha256_update(&s, million + off, k);
		off += k;
	}
	tlp_sha256_final(&s, d);
	tlp_sha256_hex(d, hex);
	cr_assert_str_eq(hex,
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(million);
}

Test(sha256, constant_time_equality)
{
	uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};

	cr_assert(tlp_ct_equal(a, b, 4));
	b[3] = 5;
	cr_assert(!tlp_ct_equal(a, b, 4));
	b[3] = 4;
	b[0] = 0;
	cr_assert(!tlp_ct_equal(a, b, 4));
}

static char *dir;

static void
setup(void)
{
	dir = tt_mkdtemp("creds");
}

static void
teardown(void)
{
	tt_rmtree(dir);
	free(dir);
}

#define H1 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define H2 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Load text as a credentials file: the result, and the error text. */
static int
load(const char *text, tlb_auth **out, char *err, size_t cap)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/creds", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	err[0] = '\0';
	return tlb_auth_load(path, out, err, cap);
}

Test(creds, a_file_loads_into_principals, .init = setup, .fini = teardown)
{
	tlb_auth *a = NULL;
	char err[400];
	uint8_t h[TLP_SHA256_LEN];
	const tlb_principal *p;
	int rv = load("# two principals\n"
	              "[principal billing]\n"
	              "token_sha256 = " H1 "  # tok\n"
	              "group = billing\n"
	              "group = shared-*\n"
	              "produce = invoices\n"
	              "consume = invoices:bill-*\n"
	              "max_inflight_creates = 10\n"
	              "max_scheduled = 1000\n"
	              "\n"
	              "[principal ops]\n"
	              "token_sha256 = " H2 "\n"
	              "admin = yes\n"
	              "consume = *:*\n",
	    &a, err, sizeof(err));

	TL_PASS(rv, "%s", err);
	cr_assert_eq(a->n, 2);
	tlp_sha256("abc", 3, h);
	p = tlb_auth_find(a, h);
	cr_assert_not_null(p);
	cr_assert_str_eq(p->name, "billing");
	cr_assert(!p->admin);
	cr_assert_eq(p->max_inflight_creates, 10);
	cr_assert_eq(p->max_scheduled, 1000);
	cr_assert(tlb_may_act_as(p, "billing", 7));
	cr_assert(!tlb_may_act_as(p, "billin", 6));
	cr_assert(!tlb_may_act_as(p, "billing2", 8));
	cr_assert(tlb_may_act_as(p, "shared-x", 8));
	cr_assert(tlb_may_act_as(p, "shared-", 7));
	cr_assert(!tlb_may_act_as(p, "shared", 6));
	cr_assert(tlb_may_produce(p, "invoices"));
	cr_assert(!tlb_may_produce(p, "other"));
	cr_assert(tlb_may_consume(p, "invoices", "bill-7", 6));
	cr_assert(!tlb_may_consume(p, "invoices", "ops-1", 5));
	cr_assert(!tlb_may_consume(p, "other", "bill-7", 6));
	tlp_sha256("", 0, h);
	p = tlb_auth_find(a, h);
	cr_assert_not_null(p);
	cr_assert(p->admin);
	cr_assert(tlb_may_consume(p, "anything", "anyone", 6));
	cr_assert(!tlb_may_act_as(p, "billing", 7));
	tlp_sha256("abd", 3, h);
	cr_assert_null(tlb_auth_find(a, h));
	tlb_auth_rele(a);
}

Test(creds, every_error_names_its_line, .init = setup, .fini = teardown)
{
	static const struct {
		const char *text;
		const char *want;
	} bad[] = {
	    {"group = a\n", ":1: a key before the first [principal NAME]"},
	    {"[principal a]\n", "principal a has no token_sha256"},
	    {"[principal a]\ntoken_sha256 = abc\n", ":2: token_sha256 must be"},
	    {"[principal a]\ntoken_sha256 = " H1 "\n[principal b]\n"
	     "token_sha256 = " H1 "\n",
	        "principals a and b have the same token"},
	    {"[principal a]\n[principal a]\n", ":2: principal a appears twice"},
	    {"[principal a]\ncolour = red\n", ":2: unknown key \"colour\""},
	    {"[principal a]\ngroup = a*b\n", ":2: group: '*' may only end"},
	    {"[principal a]\nconsume = t\n", ":2: consume must be TOPIC:"},
	    {"[principal a]\nadmin = maybe\n", ":2: admin must be yes or no"},
	    {"[principal a]\nmax_scheduled = -1\n", ":2: max_scheduled must"},
	    {"[principal a]\nmax_scheduled = 10x\n", ":2: max_scheduled must"},
	    {"[group a]\n", ":1: expected [principal NAME]"},
	    {"[principal a]\njust words\n", ":2: expected key = value"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tlb_auth *a = NULL;
		char err[400];
		int rv = load(bad[i].text, &a, err, sizeof(err));

		TL_FAIL(rv, TL_EINVAL, "case %zu loaded", i);
		cr_assert_null(a, "case %zu", i);
		cr_assert_not_null(strstr(err, bad[i].want),
		    "case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].want);
	}
}

Test(creds, a_missing_file_is_an_io_error, .init = setup, .fini = teardown)
{
	tlb_auth *a = NULL;
	char err[400], path[600];

	snprintf(path, sizeof(path), "%s/none", dir);
	TL_FAIL(tlb_auth_load(path, &a, err, sizeof(err)), TL_EIO);
	cr_assert_null(a);
	cr_assert_not_null(strstr(err, "cannot read"));
}

Test(inflight, counts_per_group_within_the_limit)
{
	tlb_inflight *f;
	uint64_t now;

	TL_PASS(tlb_inflight_init(&f));
	cr_assert(tlb_inflight_add(f, "g", 1, 2, 3, &now));
	cr_assert_eq(now, 0);
	cr_assert(!tlb_inflight_add(f, "g", 1, 2, 3, &now));
	cr_assert_eq(now, 2);
	cr_assert(tlb_inflight_add(f, "h", 1, 3, 3, &now), "groups apart");
	cr_assert(tlb_inflight_add(f, "g", 1, 1, 3, &now));
	tlb_inflight_sub(f, "g", 1, 3);
	cr_assert(tlb_inflight_add(f, "g", 1, 3, 3, &now));
	cr_assert_eq(now, 0);
	cr_assert(tlb_inflight_add(f, "g", 1, 100, 0, &now), "0 = no limit");
	tlb_inflight_fini(f);
}

/* The output of `printf ARG | timelined --hash-token` (first line). */
static int
hash_cli(const char *input, char *out, size_t cap)
{
	char cmd[2048];
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd),
	    "printf '%s' | %s/broker/timelined --hash-token 2>&1", input,
	    TL_TEST_BINDIR);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	out[0] = '\0';
	if (fgets(out, (int) cap, p) != NULL) {
		out[strcspn(out, "\n")] = '\0';
	}
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(creds, timelined_hash_token)
{
	char out[200];

	cr_assert_eq(hash_cli("abc", out, sizeof(out)), 0, "%s", out);
	cr_assert_str_eq(out, H1);
	/* The line's newline is not part of the token. */
	cr_assert_eq(hash_cli("abc\\n", out, sizeof(out)), 0, "%s", out);
	cr_assert_str_eq(out, H1);
	cr_assert_eq(hash_cli("", out, sizeof(out)), 1);
	cr_assert_not_null(strstr(out, "standard input"), "%s", out);
}
