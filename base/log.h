/*
 * The one logger: one line per event on stderr,
 * "2026-01-02T03:04:05Z PROGRAM LEVEL ID text", with a level filter and a
 * stable id per message (every id is listed in docs/timelined.md; a test
 * checks). Thread-safe; a line is written with one call, so lines from
 * several threads do not interleave.
 */
#ifndef TL_BASE_LOG_H
#define TL_BASE_LOG_H

#include <stdbool.h>

typedef enum {
	TLI_LOG_ERROR,
	TLI_LOG_WARN,
	TLI_LOG_INFO,
	TLI_LOG_DEBUG,
} tli_log_level;

/* Messages above this level are dropped (default TLI_LOG_INFO). */
void tli_log_set_level(tli_log_level lvl);
tli_log_level tli_log_get_level(void);
bool tli_log_enabled(tli_log_level lvl);
/* "error", "warn", "info", "debug". */
const char *tli_log_level_name(tli_log_level lvl);
/* Parses a level name; 0, or -1 when unknown. */
int tli_log_level_parse(const char *s, tli_log_level *out);

/* One line: who is the component ("timelined", "msc4140"), id its stable
 * message id ("S010"). */
void tli_log(const char *who, tli_log_level lvl, const char *id,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
