/*
 * What the libFuzzer targets of tests/fuzz/ share: the operations of
 * ops.def in one array (a target picks one with the first input byte),
 * the check that aborts on a broken property (libFuzzer then saves the
 * input), and exact-size heap copies so the address sanitizer sees any
 * read past the end of what a decoder was given.
 */
#ifndef TL_FUZZ_H
#define TL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every operation of the protocol, in the order of ops.def. */
static const uint8_t tlf_ops[] = {
#define TLP_OP(name, code, kind, summary) code,
#include "timeline/ops.def"
#undef TLP_OP
};
#define TLF_NOPS (sizeof(tlf_ops) / sizeof(tlf_ops[0]))

#define TLF_CHECK(cond)                                                 \
	do {                                                            \
		if (!(cond)) {                                          \
			fprintf(stderr, "%s:%d: property broken: %s\n", \
			    __FILE__, __LINE__, #cond);                 \
			abort();                                        \
		}                                                       \
	} while (0)

/* n bytes of p in a heap block of exactly n bytes (one when n is 0),
 * plus a NUL when nul is set (for the text parsers). */
static inline char *
tlf_copy(const void *p, size_t n, int nul)
{
	char *c = malloc(n + (nul ? 1 : 0) + (n == 0 && !nul ? 1 : 0));

	if (c == NULL) {
		abort();
	}
	if (n > 0) {
		memcpy(c, p, n);
	}
	if (nul) {
		c[n] = '\0';
	}
	return c;
}

#endif
