/*
 * Assertions on Timeline error codes that say what failed: the expression,
 * the code it gave by name and sentence (tl_errname, tl_strerror) and the
 * code that was expected. A bare cr_assert_eq(rv, TL_OK) prints only "The
 * expression (rv) == (TL_OK) is false"; TL_PASS(rv) prints
 *
 *   tl_put(c, ...): got TL_ENOTOPIC (unknown topic), want TL_OK (success)
 *
 * Each takes an optional printf-style context after its arguments:
 * TL_PASS(rv, "create %s", id).
 *
 *   TL_PASS(expr)           expr == TL_OK
 *   TL_FAIL(expr, code)     expr == code, that exact error
 *   TL_CODE_EQ(a, b)        two codes computed by the test are equal
 *   TL_NOT_OK(expr)         expr is some error (which one does not matter)
 *
 * They expand in place, so the failure names the test's file and line.
 */
#ifndef TL_TESTS_TLCHECK_H
#define TL_TESTS_TLCHECK_H

#include <stddef.h>

#include <criterion/criterion.h>

#include "timeline/errors.h"

/* printf into buf (the optional context of the macros below); returns buf,
 * which holds "" when fmt is " " (no context given). */
const char *tt_ctx(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define TT_CODE_CHECK_(got_, want_, gtext_, wtext_, ...)                       \
	do {                                                                   \
		int tt_got_ = (got_);                                          \
		int tt_want_ = (want_);                                        \
		char tt_ctxbuf_[512];                                          \
		if (tt_got_ != tt_want_) {                                     \
			cr_assert_fail("%s: got %s (%s), want %s%s%s (%s)%s",  \
			    gtext_, tl_errname(tt_got_), tl_strerror(tt_got_), \
			    wtext_, *(wtext_) != '\0' ? " = " : "",            \
			    tl_errname(tt_want_), tl_strerror(tt_want_),       \
			    tt_ctx(tt_ctxbuf_, sizeof(tt_ctxbuf_),             \
			        " " __VA_ARGS__));                             \
		}                                                              \
	} while (0)

#define TL_PASS(expr, ...) TT_CODE_CHECK_((expr), TL_OK, #expr, "", __VA_ARGS__)
#define TL_FAIL(expr, code, ...) \
	TT_CODE_CHECK_((expr), (code), #expr, "", __VA_ARGS__)
#define TL_CODE_EQ(a, b, ...) TT_CODE_CHECK_((a), (b), #a, #b, __VA_ARGS__)

#define TL_NOT_OK(expr, ...)                                             \
	do {                                                             \
		char tt_ctxbuf_[512];                                    \
		if ((expr) == TL_OK) {                                   \
			cr_assert_fail("%s: got TL_OK, want an error%s", \
			    #expr,                                       \
			    tt_ctx(tt_ctxbuf_, sizeof(tt_ctxbuf_),       \
			        " " __VA_ARGS__));                       \
		}                                                        \
	} while (0)

#endif
