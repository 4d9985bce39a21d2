/*
 * The small base every Timeline component shares: allocation through
 * wrappers that tests can count and fail, big-endian integer coding for keys
 * and records, and the two clocks (timeline time in UTC ms, monotonic time
 * for timeouts).
 */
#ifndef TL_BASE_BASE_H
#define TL_BASE_BASE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "timeline/errors.h"
#include "timeline/limits.h"

#include "debug.h"
#include "hash.h"

void *tli_alloc(size_t n);
void *tli_zalloc(size_t n);
void *tli_realloc(void *p, size_t n);
void tli_free(void *p);
char *tli_strndup(const char *s, size_t n);
/* A whole file of at most max bytes, NUL-terminated (free with tli_free);
 * NULL with errno set when it cannot be opened or read, or is larger
 * (EFBIG). */
char *tli_read_file(const char *path, size_t max);
/* rm -rf path: 0, or -1 with errno (what could be removed is gone). */
int tli_rmtree(const char *path);

/* Test hook: after `n` more successful allocations every allocation fails
 * (n < 0 disables the hook). Returns the count of allocations so far. */
void tli_alloc_fail_after(long n);
unsigned long tli_alloc_count(void);

/* Wall clock in UTC milliseconds, and a monotonic clock in milliseconds and
 * nanoseconds. */
int64_t tli_wall_ms(void);
/* The wall clock in microseconds, for measuring how late a due time was
 * met; tli_wall_ms is this divided by 1000. */
int64_t tli_wall_us(void);
int64_t tli_mono_ms(void);
int64_t tli_mono_ns(void);
/* A loopback TCP port nothing listens on now, below the kernel's
 * ephemeral range (ip_local_port_range), so that no outgoing connection
 * or port-0 bind takes it before the process it is meant for binds it;
 * -1 if none is found. For tests and benchmarks that start servers. */
int tli_free_port(void);
/* *ts = ms (>= 0) from now on clock clk: the deadline of a
 * pthread_cond_timedwait on a condition variable that uses clk. */
void tli_deadline(struct timespec *ts, clockid_t clk, int64_t ms);
/* Stop a thread that waits on cv under mtx until *stop is set: set it
 * under mtx, wake the thread, wait for it to end. */
void tli_thread_stop(
    pthread_t th, pthread_mutex_t *mtx, pthread_cond_t *cv, bool *stop);

/* A replaceable clock: all code that positions messages reads "now" through
 * one of these, so tests move time without sleeping. */
typedef struct tli_clock {
	int64_t (*now_ms)(void *arg);
	void *arg;
} tli_clock;

static inline int64_t
tli_clock_now(const tli_clock *c)
{
	return c->now_ms != NULL ? c->now_ms(c->arg) : tli_wall_ms();
}

static inline void
tli_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t) (v >> 24);
	p[1] = (uint8_t) (v >> 16);
	p[2] = (uint8_t) (v >> 8);
	p[3] = (uint8_t) v;
}

static inline uint32_t
tli_get_be32(const uint8_t *p)
{
	return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) |
	    ((uint32_t) p[2] << 8) | (uint32_t) p[3];
}

static inline void
tli_put_be64(uint8_t *p, uint64_t v)
{
	tli_put_be32(p, (uint32_t) (v >> 32));
	tli_put_be32(p + 4, (uint32_t) v);
}

static inline uint64_t
tli_get_be64(const uint8_t *p)
{
	return ((uint64_t) tli_get_be32(p) << 32) | tli_get_be32(p + 4);
}

#endif
