/*
 * Generates docs/errors.md from the error table. With "--check FILE" it
 * compares FILE with what it would generate and fails when they differ, so
 * the documentation cannot drift from the code (a ctest runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeline/errors.h"

static size_t
gen(char *buf, size_t cap)
{
	size_t n = 0;

#define OUT(...)                                                           \
	do {                                                               \
		int w_ =                                                   \
		    snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__); \
		n += (size_t) (w_ > 0 ? w_ : 0);                           \
	} while (0)

	OUT("# Error codes\n\n");
	OUT("Generated from `proto/include/timeline/errors.def` by "
	    "`proto/gen_errors_md.c`; do not edit by hand.\n\n");
	OUT("Every fallible Timeline function returns one of these codes, and "
	    "the same numbers travel on the wire. Numbers are stable: rows are "
	    "only ever added.\n\n");
	OUT("| code | name | meaning | what a client should do |\n");
	OUT("| ---: | --- | --- | --- |\n");
	OUT("| 0 | `TL_OK` | success | — |\n");
#define TL_ERR(name, num, msg, advice) \
	OUT("| %d | `%s` | %s | %s |\n", num, #name, msg, advice);
#include "timeline/errors.def"
#undef TL_ERR
#undef OUT
	return n;
}

int
main(int argc, char **argv)
{
	static char out[65536];
	size_t n = gen(out, sizeof(out));

	if (n >= sizeof(out)) {
		fprintf(stderr, "gen_errors_md: table too large\n");
		return 2;
	}
	if (argc == 3 && strcmp(argv[1], "--check") == 0) {
		static char have[65536];
		FILE *f = fopen(argv[2], "rb");
		size_t got;

		if (f == NULL) {
			fprintf(
			    stderr, "gen_errors_md: cannot open %s\n", argv[2]);
			return 1;
		}
		got = fread(have, 1, sizeof(have), f);
		fclose(f);
		if (got != n || memcmp(have, out, n) != 0) {
			fprintf(stderr,
			    "gen_errors_md: %s is out of date; "
			    "regenerate it with the errors-md target\n",
			    argv[2]);
			return 1;
		}
		return 0;
	}
	if (argc == 2) {
		FILE *f = fopen(argv[1], "wb");
		if (f == NULL || fwrite(out, 1, n, f) != n || fclose(f) != 0) {
			fprintf(stderr, "gen_errors_md: cannot write %s\n",
			    argv[1]);
			return 1;
		}
		return 0;
	}
	fwrite(out, 1, n, stdout);
	return 0;
}
