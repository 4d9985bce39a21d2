/*
 * tlctl, the command-line client of Timeline: its whole logic behind one
 * entry point so that main.c stays a line and tests can call the parsers.
 */
#ifndef TL_TLCTL_H
#define TL_TLCTL_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes. */
#define TLCTL_OK 0
#define TLCTL_FAILED 1
#define TLCTL_USAGE 2

/* Run one tlctl command line; writes results to out and messages to err.
 * Returns an exit code. */
int tlctl_main(int argc, char **argv, FILE *out, FILE *err);

/* "1767225600000" (UTC ms) or ISO-8601 "2026-11-22T10:00:00Z" (optionally
 * with .mmm and a +hh:mm / -hh:mm offset). Returns 0 or -1. */
int tlctl_parse_time(const char *s, int64_t *ms);
/* "300ms", "5s", "2m", "1h", "1d", or a plain number of ms. Returns 0 or
 * -1. */
int tlctl_parse_duration(const char *s, int64_t *ms);
/* UTC ms as "2026-11-22T10:00:00.000Z" into buf (at least 32 bytes). */
void tlctl_format_time(int64_t ms, char *buf, size_t cap);

#endif
