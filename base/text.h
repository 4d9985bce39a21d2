/*
 * Small text pieces two or more programs write: random identifiers from
 * the kernel's generator (getrandom) and the Prometheus text format (a
 * label value, a counter or gauge, a histogram), used by the broker's
 * metrics and by the adapters'.
 */
#ifndef TL_BASE_TEXT_H
#define TL_BASE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* nbytes (at most 48) random bytes as base64url without padding into out
 * (at least 4 * nbytes / 3 + 2 bytes). 0, or -1 when the kernel gave too
 * few. */
int tli_random_b64(char *out, size_t nbytes);
/* nbytes (at most 48) random bytes as lowercase hex into out (at least
 * 2 * nbytes + 1 bytes). 0 or -1. */
int tli_random_hex(char *out, size_t nbytes);

/* A Prometheus label value: backslash, quote and newline escaped, cut to
 * fit cap. */
void tli_prom_label(char *out, size_t cap, const char *in);
/* One sample of a counter or gauge without labels, with its TYPE line
 * (and HELP line when help is not NULL). */
void tli_prom_scalar(tli_buf *o, const char *name, const char *type,
    const char *help, uint64_t v);
/* A counter of seconds, from nanoseconds, with its HELP and TYPE lines. */
void tli_prom_seconds(
    tli_buf *o, const char *name, const char *help, uint64_t ns);
/* A histogram: counts[i] of values up to bounds[i] (counts[n]: the rest),
 * rendered cumulative, with its sum. */
void tli_prom_histogram(tli_buf *o, const char *name, const char *help,
    const double *bounds, const uint64_t *counts, int n, double sum);

#endif
