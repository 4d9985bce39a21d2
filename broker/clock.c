/*
 * The broker clock (clock.h): an anchor (monotonic time, timeline time in
 * µs) that moves towards the wall clock once a second by a bounded step.
 */
#include <pthread.h>

#include "base.h"
#include "clock.h"
#include "tlb_log.h"

#define SLEW_US ((int64_t) TLB_SLEW_PER_S * 1000)

static pthread_mutex_t clk_mtx = PTHREAD_MUTEX_INITIALIZER;
static int64_t clk_base_mono_ns; /* monotonic time at the last anchor */
static int64_t clk_base_us;      /* timeline time at that moment */
static int64_t clk_last_us;      /* never go backwards */
static int64_t clk_offset_us;    /* tests: a wrong clock */

void
tlb_clock_set_offset(int64_t ms)
{
	pthread_mutex_lock(&clk_mtx);
	clk_offset_us = ms * 1000;
	clk_base_us += clk_offset_us;
	clk_last_us = clk_base_us;
	pthread_mutex_unlock(&clk_mtx);
}

void
tlb_clock_init(void)
{
	pthread_mutex_lock(&clk_mtx);
	clk_base_us = tli_wall_us();
	clk_base_mono_ns = tli_mono_ns(); /* after: the clock errs behind */
	clk_last_us = clk_base_us;
	pthread_mutex_unlock(&clk_mtx);
}

static void
clock_warn_step(int64_t mono, int64_t diff_us)
{
	static int64_t warned;

	if (mono - warned > INT64_C(60000000000)) {
		warned = mono;
		tlb_log(TLB_WARN, "K001",
		    "wall clock stepped by %lld ms; following it at %d ms per "
		    "second",
		    (long long) (diff_us / 1000), TLB_SLEW_PER_S);
	}
}

/* now = anchor + monotonic elapsed; once a second the anchor moves toward
 * the wall clock by at most TLB_SLEW_PER_S ms. Both clocks are read in µs:
 * an anchor taken from a ms reading would put the clock up to 1 ms behind
 * the wall clock, and every delivery that late. */
int64_t
tlb_clock_now_us(void)
{
	int64_t mono, now, wall, diff;

	pthread_mutex_lock(&clk_mtx);
	mono = tli_mono_ns();
	if (mono - clk_base_mono_ns >= 1000000000) {
		/* Wall first, then monotonic: the new anchor is behind the
		 * wall clock by the time between the two reads, never ahead
		 * (a delivery is never early by it). */
		wall = tli_wall_us() + clk_offset_us;
		mono = tli_mono_ns();
		now = clk_base_us + (mono - clk_base_mono_ns) / 1000;
		diff = wall - now;
		if (diff > 1000000 || diff < -1000000) {
			clock_warn_step(mono, diff);
		}
		if (diff > SLEW_US) {
			diff = SLEW_US;
		} else if (diff < -SLEW_US) {
			diff = -SLEW_US;
		}
		clk_base_us = now + diff;
		clk_base_mono_ns = mono;
		now = clk_base_us;
	} else {
		now = clk_base_us + (mono - clk_base_mono_ns) / 1000;
	}
	if (now < clk_last_us) {
		now = clk_last_us; /* slewing back: stand still instead */
	}
	clk_last_us = now;
	pthread_mutex_unlock(&clk_mtx);
	return now;
}

int64_t
tlb_clock_now(void *arg)
{
	int64_t us = tlb_clock_now_us();

	(void) arg;
	/* Round down (timeline time is after 1970: us >= 0). */
	return us / 1000;
}
