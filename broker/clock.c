/*
 * The broker clock (clock.h): an anchor (monotonic time, timeline time)
 * that moves towards the wall clock once a second by a bounded step.
 */
#include <pthread.h>

#include "base.h"
#include "clock.h"
#include "tlb_log.h"

static pthread_mutex_t clk_mtx = PTHREAD_MUTEX_INITIALIZER;
static int64_t clk_base_mono_ns; /* monotonic time at the last anchor */
static int64_t clk_base_ms;      /* timeline time at that moment */
static int64_t clk_last;         /* never go backwards */

void
tlb_clock_init(void)
{
	pthread_mutex_lock(&clk_mtx);
	clk_base_mono_ns = tli_mono_ns();
	clk_base_ms = tli_wall_ms();
	clk_last = clk_base_ms;
	pthread_mutex_unlock(&clk_mtx);
}

/* now = anchor + monotonic elapsed; once a second the anchor moves toward
 * the wall clock by at most TLB_SLEW_PER_S ms. */
int64_t
tlb_clock_now(void *arg)
{
	int64_t mono, now, wall, diff;

	(void) arg;
	pthread_mutex_lock(&clk_mtx);
	mono = tli_mono_ns();
	now = clk_base_ms + (mono - clk_base_mono_ns) / 1000000;
	if (mono - clk_base_mono_ns >= 1000000000) {
		wall = tli_wall_ms();
		diff = wall - now;
		if (diff > 1000 || diff < -1000) {
			static int64_t warned;
			if (mono - warned > INT64_C(60000000000)) {
				warned = mono;
				tlb_log(TLB_WARN, "K001",
				    "wall clock stepped by "
				    "%lld ms; following it at %d ms per second",
				    (long long) diff, TLB_SLEW_PER_S);
			}
		}
		if (diff > TLB_SLEW_PER_S) {
			diff = TLB_SLEW_PER_S;
		} else if (diff < -TLB_SLEW_PER_S) {
			diff = -TLB_SLEW_PER_S;
		}
		clk_base_ms = now + diff;
		clk_base_mono_ns = mono;
		now = clk_base_ms;
	}
	if (now < clk_last) {
		now = clk_last; /* slewing back: stand still instead */
	}
	clk_last = now;
	pthread_mutex_unlock(&clk_mtx);
	return now;
}
