/*
 * The core of the test support library (tltestsupport, linked into every
 * test): private temporary directories, a manual clock that tests move by
 * hand (no sleeping), and a store opened on both. The error-code
 * assertions are in tlcheck.h, the launcher of real programs in launch.h.
 */
#ifndef TL_TESTUTIL_H
#define TL_TESTUTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "store.h"

/* A clock that only moves when a test moves it. */
typedef struct tt_clock {
	_Atomic int64_t now;
} tt_clock;

void tt_clock_init(tt_clock *c, int64_t start_ms);
void tt_clock_set(tt_clock *c, int64_t ms);
void tt_clock_advance(tt_clock *c, int64_t ms);
tli_clock tt_clock_as_tli(tt_clock *c);

/* Make a fresh private directory /tmp/tl-test-<tag>-XXXXXX and return its
 * path, malloc'd: the caller frees it (after tt_rmtree). Aborts the test
 * process on failure. */
char *tt_mkdtemp(const char *tag);

/* rm -rf path (best effort). */
void tt_rmtree(const char *path);
/* rm -rf *dir, free it and set it to NULL; nothing when it is NULL. */
void tt_rmtree_free(char **dir);

/* Open a store at path on the given clock with default options. */
tli_store *tt_store_open(const char *path, tt_clock *clk);

/* Create a topic with the defaults and the given bucket count (0 = default). */
void tt_topic(tli_store *s, const char *name, uint32_t buckets);

/* Run the consistency checker and return the number of problems (printing
 * each to stderr). */
uint64_t tt_check(tli_store *s);

/* The suites' pseudo-random numbers (xorshift64; *s must not be 0): the
 * same seed gives the same run. */
uint64_t tt_rng_next(uint64_t *s);
/* A number in [0, n). */
uint32_t tt_rng_below(uint64_t *s, uint32_t n);

/* The body of message `id` in the crash test (its child writes it, the
 * test checks it): a function of the id only, 1..700 bytes into out. */
size_t tt_crash_body(const char *id, size_t id_len, char *out);

/* An op of the given type with its strings' lengths set (absolute ts, no
 * body). */
tli_op tt_mkop(tli_op_type type, const char *topic, const char *id,
    const char *who, int64_t ts, uint64_t version);

/* One-op helpers: fill an op and apply it alone; return op.err. */
int tt_create(tli_store *s, const char *topic, const char *id,
    const char *owner, int64_t ts, const char *body, tli_op *out);
int tt_op(tli_store *s, tli_op_type type, const char *topic, const char *id,
    const char *who, int64_t ts, uint64_t version, tli_op *out);

#endif
