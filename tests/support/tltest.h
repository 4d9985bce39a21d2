/*
 * The one header of an end-to-end test file: the C library and POSIX
 * headers the suites use, Criterion, and the core of the test support
 * library (temporary directories and clocks, error-code assertions, the
 * launcher). A suite adds the helpers of its component: raw_client.h,
 * sdk_util.h, auth_util.h, gw_util.h or chronos_util.h.
 */
#ifndef TL_TESTS_TLTEST_H
#define TL_TESTS_TLTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "launch.h"
#include "testutil.h"
#include "tlcheck.h"

#endif
