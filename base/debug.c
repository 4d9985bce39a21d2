/*
 * Assertion failures (debug.h): say what failed where, then abort.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "debug.h"

#ifdef TL_DEBUG_ASSERTS
void
tli_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	fprintf(stderr, "assertion failed: %s (%s:%d, %s)\n", expr, file, line,
	    func);
	fflush(stderr);
	abort();
}

int
tli_mutex_is_locked(void *m)
{
	pthread_mutex_t *mtx = m;

	if (pthread_mutex_trylock(mtx) == 0) {
		pthread_mutex_unlock(mtx);
		return 0;
	}
	return 1;
}
#endif
