/*
 * Generates the operation table of docs/protocol.md (section 7) from
 * ops.def: the lines between the marker comments are replaced, the rest of
 * the file is kept. With "--check FILE" it fails when the table drifted
 * from ops.def (a ctest runs it).
 */
#include "base.h"
#include "buf.h"
#include "gen_md.h"

static void
gen(tli_buf *b)
{
	tli_buf_puts(b, "| code | name | kind | summary |\n");
	tli_buf_puts(b, "| ---: | --- | --- | --- |\n");
#define REQ "request"
#define PUSH "push"
#define TLP_OP(name, code, kind, summary) \
	tli_buf_printf(                   \
	    b, "| %d | %s | %s | %s |\n", code, #name, kind, summary);
#include "timeline/ops.def"
#undef TLP_OP
#undef PUSH
#undef REQ
}

int
main(int argc, char **argv)
{
	static const tlp_md_section sec = {
	    "<!-- generated from ops.def by proto/gen_protocol_md.c: begin -->",
	    "<!-- generated from ops.def: end -->"};

	return tlp_gen_md_main(argc, argv, "gen_protocol_md", gen, &sec,
	    "regenerate it with the protocol-md target");
}
