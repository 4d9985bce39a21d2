/*
 * Assertions for our own invariants (reference counts, locks held, state
 * transitions): checked in Debug and sanitizer builds (TL_DEBUG_ASSERTS is
 * defined by the build then), compiled out otherwise. Anything a client or
 * the disk can cause is an error code, never an assertion.
 */
#ifndef TL_BASE_DEBUG_H
#define TL_BASE_DEBUG_H

#ifdef TL_DEBUG_ASSERTS
void tli_assert_fail(const char *expr, const char *file, int line,
    const char *func) __attribute__((noreturn));
#define TLI_ASSERT(x) \
	((x) ? (void) 0 : tli_assert_fail(#x, __FILE__, __LINE__, __func__))
/* The mutex is locked (by someone: a normal mutex cannot say by whom, so
 * this catches a forgotten lock, not a lock held by another thread). */
int tli_mutex_is_locked(void *pthread_mutex);
#define TLI_ASSERT_LOCKED(m) TLI_ASSERT(tli_mutex_is_locked(m))
#else
#define TLI_ASSERT(x) ((void) sizeof(!(x)))
#define TLI_ASSERT_LOCKED(m) ((void) (m))
#endif

#endif
