/*
 * Logging (levels, stable ids, one line each to stderr) and the broker
 * clock: timeline time that follows the wall clock without jumping.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "broker.h"

tlb_level tlb_log_level = TLB_INFO;

static const char *level_names[] = {"error", "warn", "info", "debug"};

void
tlb_log(tlb_level lvl, const char *id, const char *fmt, ...)
{
	char msg[1024], stamp[32];
	struct tm tm;
	time_t t;
	va_list ap;

	if (lvl > tlb_log_level) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	t = time(NULL);
	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(stderr, "%s timelined %s %s %s\n", stamp, level_names[lvl], id,
	    msg);
}

/* ---- the clock ---- */

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
