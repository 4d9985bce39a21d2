/*
 * The broker clock: timeline time that follows the wall clock but never
 * jumps. It advances with the monotonic clock and is slewed towards the
 * wall clock by at most TLB_SLEW_PER_S ms per second, so an NTP step does
 * not fire a backlog at once. It keeps microseconds: a message due at ms T
 * is due when tlb_clock_now_us() reaches T * 1000, the instant the wall
 * clock reads T.000 (the clock is anchored at a microsecond wall reading,
 * so it is neither ahead of the wall clock by the fraction of a millisecond
 * nor behind it). Any thread may read it; its state is under a lock of its
 * own, a leaf of every lock order.
 */
#ifndef TL_BROKER_CLOCK_H
#define TL_BROKER_CLOCK_H

#include <stdint.h>

#define TLB_SLEW_PER_S 100

/* Anchor the clock at the wall clock (once, before any thread reads it). */
void tlb_clock_init(void);
/* For tests: run the clock off the wall clock by ms (before any thread
 * reads it), as a machine with a wrong clock would. */
void tlb_clock_set_offset(int64_t ms);
/* Timeline time now, in UTC µs; never goes backwards. */
int64_t tlb_clock_now_us(void);
/* Timeline time now, in UTC ms: tlb_clock_now_us() / 1000 rounded down, so
 * `ts <= tlb_clock_now()` holds exactly when the µs clock has reached
 * ts * 1000. arg is unused (the signature of tli_clock.now_ms, which the
 * store is given). */
int64_t tlb_clock_now(void *arg);

#endif
