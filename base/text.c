/*
 * Random identifiers and the Prometheus text format (text.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/random.h>

#include "text.h"

static int
random_fill(unsigned char *raw, size_t nbytes)
{
	size_t got = 0;

	if (nbytes > 48) {
		return -1;
	}
	while (got < nbytes) {
		ssize_t k = getrandom(raw + got, nbytes - got, 0);
		if (k <= 0) {
			return -1;
		}
		got += (size_t) k;
	}
	return 0;
}

int
tli_random_b64(char *out, size_t nbytes)
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
	    "vwxyz0123456789-_";
	unsigned char raw[48];
	size_t o = 0;
	uint32_t acc = 0;
	int bits = 0;

	if (random_fill(raw, nbytes) != 0) {
		return -1;
	}
	for (size_t i = 0; i < nbytes; i++) {
		acc = (acc << 8) | raw[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			out[o++] = b64[(acc >> bits) & 63];
		}
	}
	if (bits > 0) {
		out[o++] = b64[(acc << (6 - bits)) & 63];
	}
	out[o] = '\0';
	return 0;
}

int
tli_random_hex(char *out, size_t nbytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[48];

	if (random_fill(raw, nbytes) != 0) {
		return -1;
	}
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[2 * nbytes] = '\0';
	return 0;
}

void
tli_prom_label(char *out, size_t cap, const char *in)
{
	size_t o = 0;

	for (; *in != '\0' && o + 3 < cap; in++) {
		if (*in == '\\' || *in == '"') {
			out[o++] = '\\';
			out[o++] = *in;
		} else if (*in == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *in;
		}
	}
	out[o] = '\0';
}

void
tli_prom_scalar(tli_buf *o, const char *name, const char *type,
    const char *help, uint64_t v)
{
	if (help != NULL) {
		tli_buf_printf(o, "# HELP %s %s\n", name, help);
	}
	tli_buf_printf(o, "# TYPE %s %s\n%s %llu\n", name, type, name,
	    (unsigned long long) v);
}

void
tli_prom_seconds(tli_buf *o, const char *name, const char *help, uint64_t ns)
{
	tli_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %.6f\n", name,
	    help, name, name, (double) ns / 1e9);
}

void
tli_prom_histogram(tli_buf *o, const char *name, const char *help,
    const double *bounds, const uint64_t *counts, int n, double sum)
{
	uint64_t cum = 0;

	tli_buf_printf(
	    o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int i = 0; i <= n; i++) {
		char le[32];
		cum += counts[i];
		if (i < n) {
			snprintf(le, sizeof(le), "%g", bounds[i]);
		} else {
			snprintf(le, sizeof(le), "+Inf");
		}
		tli_buf_printf(o, "%s_bucket{le=\"%s\"} %llu\n", name, le,
		    (unsigned long long) cum);
	}
	tli_buf_printf(o, "%s_sum %.3f\n%s_count %llu\n", name, sum, name,
	    (unsigned long long) cum);
}
