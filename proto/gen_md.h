/*
 * What the documentation generators share (gen_errors_md, gen_protocol_md):
 * a generated text either is a whole Markdown file or replaces the part of
 * one between two marker comments, and the same program writes it or, with
 * --check, fails when the file differs, so a ctest pins the docs to the
 * table they are generated from.
 */
#ifndef TL_PROTO_GEN_MD_H
#define TL_PROTO_GEN_MD_H

#include "buf.h"

/* Where the generated text goes inside a hand-written file; NULL for a
 * file that is generated whole. */
typedef struct tlp_md_section {
	const char *begin; /* a line of its own, kept */
	const char *end;   /* a line of its own, kept */
} tlp_md_section;

/* The main of a generator whose gen appends the text to b: "FILE" writes
 * it, "--check FILE" exits 1 when FILE is not what would be written (hint
 * says how to regenerate it), no argument prints the text. prog names the
 * program in messages. */
int tlp_gen_md_main(int argc, char **argv, const char *prog,
    void (*gen)(tli_buf *b), const tlp_md_section *sec, const char *hint);

#endif
