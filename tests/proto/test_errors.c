/*
 * The error table: every code has a distinct name, a message and advice,
 * the domain errors exist under their stable numbers, and unknown codes are
 * handled without crashing.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "timeline/errors.h"

Test(errors, domain_errors_keep_their_wire_numbers)
{
	/* These numbers travel on the wire and are stored by clients. */
	cr_assert_eq(TL_ENOTFOUND, 3);
	cr_assert_eq(TL_EEXISTS, 4);
	cr_assert_eq(TL_EVERSION, 5);
	cr_assert_eq(TL_ELEASED, 6);
	cr_assert_eq(TL_ELEASEEXPIRED, 7);
	cr_assert_eq(TL_ENOTOWNER, 8);
	cr_assert_eq(TL_ETOOCLOSE, 9);
	cr_assert_eq(TL_ETOOLARGE, 10);
	cr_assert_eq(TL_ENOTOPIC, 11);
	cr_assert_eq(TL_ESTORAGE, 12);
}

Test(errors, every_code_has_a_unique_name_message_and_advice)
{
	for (int i = 0; i < TL_ERR_LAST_; i++) {
		const char *n = tl_errname(i);
		cr_assert_neq(strcmp(n, "TL_E?"), 0, "code %d has no name", i);
		cr_assert_gt(strlen(tl_strerror(i)), 3, "code %d", i);
		cr_assert_gt(strlen(tl_erradvice(i)), 3, "code %d", i);
		for (int j = 0; j < i; j++) {
			cr_assert_neq(strcmp(n, tl_errname(j)), 0,
			    "codes %d and %d share the name %s", i, j, n);
			cr_assert_neq(strcmp(tl_strerror(i), tl_strerror(j)), 0,
			    "codes %d and %d share a message", i, j);
		}
	}
	cr_assert_str_eq(tl_errname(TL_EVERSION), "TL_EVERSION");
	cr_assert_str_eq(tl_strerror(TL_ELEASEEXPIRED), "lease expired");
}

Test(errors, unknown_codes_are_named_not_crashed_on)
{
	cr_assert_str_eq(tl_errname(-1), "TL_E?");
	cr_assert_str_eq(tl_errname(100000), "TL_E?");
	cr_assert_str_eq(tl_strerror(100000), "unknown error 100000");
	cr_assert_not_null(tl_erradvice(-7));
}
