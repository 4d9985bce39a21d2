/*
 * Generates docs/errors.md from the error table. With "--check FILE" it
 * compares FILE with what it would generate and fails when they differ, so
 * the documentation cannot drift from the code (a ctest runs it).
 */
#include "base.h"
#include "buf.h"
#include "gen_md.h"
#include "timeline/errors.h"

static void
gen(tli_buf *b)
{
	tli_buf_puts(b, "# Error codes\n\n");
	tli_buf_puts(b,
	    "Generated from `proto/include/timeline/errors.def` by "
	    "`proto/gen_errors_md.c`; do not edit by hand.\n\n");
	tli_buf_puts(b,
	    "Every fallible Timeline function returns one of these codes, and "
	    "the same numbers travel on the wire. Numbers are stable: rows are "
	    "only ever added.\n\n");
	tli_buf_puts(
	    b, "| code | name | meaning | what a client should do |\n");
	tli_buf_puts(b, "| ---: | --- | --- | --- |\n");
	tli_buf_puts(b, "| 0 | `TL_OK` | success | — |\n");
#define TL_ERR(name, num, msg, advice) \
	tli_buf_printf(b, "| %d | `%s` | %s | %s |\n", num, #name, msg, advice);
#include "timeline/errors.def"
#undef TL_ERR
}

int
main(int argc, char **argv)
{
	return tlp_gen_md_main(argc, argv, "gen_errors_md", gen, NULL,
	    "regenerate it with the errors-md target");
}
