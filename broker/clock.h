/*
 * The broker clock: timeline time that follows the wall clock but never
 * jumps. It advances with the monotonic clock and is slewed towards the
 * wall clock by at most TLB_SLEW_PER_S ms per second, so an NTP step does
 * not fire a backlog at once. Any thread may read it; its state is under a
 * lock of its own, a leaf of every lock order.
 */
#ifndef TL_BROKER_CLOCK_H
#define TL_BROKER_CLOCK_H

#include <stdint.h>

#define TLB_SLEW_PER_S 100

/* Anchor the clock at the wall clock (once, before any thread reads it). */
void tlb_clock_init(void);
/* Timeline time now, in UTC ms; never goes backwards. arg is unused (the
 * signature of tli_clock.now_ms, which the store is given). */
int64_t tlb_clock_now(void *arg);

#endif
