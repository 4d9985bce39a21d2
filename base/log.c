/*
 * The logger (log.h).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static _Atomic int log_level = TLI_LOG_INFO;

static const char *level_names[] = {"error", "warn", "info", "debug"};

void
tli_log_set_level(tli_log_level lvl)
{
	atomic_store(&log_level, (int) lvl);
}

tli_log_level
tli_log_get_level(void)
{
	return (tli_log_level) atomic_load(&log_level);
}

bool
tli_log_enabled(tli_log_level lvl)
{
	return (int) lvl <= atomic_load(&log_level);
}

const char *
tli_log_level_name(tli_log_level lvl)
{
	return (unsigned) lvl < 4 ? level_names[lvl] : "?";
}

int
tli_log_level_parse(const char *s, tli_log_level *out)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (tli_log_level) i;
			return 0;
		}
	}
	return -1;
}

/* Copies in to out with every control byte (below 0x20, and 0x7f) and the
 * backslash written as an escape (\n, \r, \t, \\, \xHH), so whatever a
 * client sent that ends up in a message (a name, a topic) stays on its
 * line and cannot forge another; out holds 4 bytes per byte of in. */
static void
log_escape(char *out, size_t cap, const char *in)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (; *in != '\0' && o + 5 <= cap; in++) {
		unsigned char c = (unsigned char) *in;

		if (c == '\\') {
			out[o++] = '\\';
			out[o++] = '\\';
		} else if (c == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (c == '\r') {
			out[o++] = '\\';
			out[o++] = 'r';
		} else if (c == '\t') {
			out[o++] = '\\';
			out[o++] = 't';
		} else if (c < 0x20 || c == 0x7f) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 0xf];
		} else {
			out[o++] = (char) c;
		}
	}
	out[o] = '\0';
}

void
tli_log(
    const char *who, tli_log_level lvl, const char *id, const char *fmt, ...)
{
	char msg[1024], esc[4 * sizeof(msg) + 1], stamp[32];
	struct tm tm;
	time_t t;
	va_list ap;

	if (!tli_log_enabled(lvl)) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_escape(esc, sizeof(esc), msg);
	t = time(NULL);
	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(stderr, "%s %s %s %s %s\n", stamp, who, tli_log_level_name(lvl),
	    id, esc);
}
