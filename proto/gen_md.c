/*
 * Writing and checking generated documentation (see gen_md.h).
 */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "buf.h"
#include "gen_md.h"

#define MD_MAX (1u << 20)

/* The whole file that should be: old with the section's lines replaced. */
static int
md_splice(const char *prog, const char *path, const char *old, const char *text,
    const tlp_md_section *sec, tli_buf *out)
{
	const char *b = strstr(old, sec->begin);
	const char *e = b != NULL ? strstr(b, sec->end) : NULL;

	if (e == NULL) {
		fprintf(stderr, "%s: %s has no lines %s ... %s\n", prog, path,
		    sec->begin, sec->end);
		return 1;
	}
	b += strlen(sec->begin);
	tli_buf_append(out, old, (size_t) (b - old));
	tli_buf_printf(out, "\n%s", text);
	tli_buf_puts(out, e);
	return out->oom ? 1 : 0;
}

static int
md_write(const char *prog, const char *path, const tli_buf *b)
{
	FILE *f = fopen(path, "wb");

	if (f == NULL || fwrite(b->data, 1, b->len, f) != b->len ||
	    fclose(f) != 0) {
		fprintf(stderr, "%s: cannot write %s\n", prog, path);
		return 1;
	}
	return 0;
}

static int
md_run(int argc, char **argv, const char *prog, const char *text,
    const tlp_md_section *sec, const char *hint)
{
	bool check = argc == 3 && strcmp(argv[1], "--check") == 0;
	const char *path = check ? argv[2] : argc == 2 ? argv[1] : NULL;
	char *old = NULL;
	tli_buf want = TLI_BUF_INIT;
	int rv = 0;

	if (path == NULL) {
		fputs(text, stdout);
		return 0;
	}
	if ((check || sec != NULL) &&
	    (old = tli_read_file(path, MD_MAX)) == NULL) {
		fprintf(stderr, "%s: cannot open %s\n", prog, path);
		return 1;
	}
	if (sec != NULL) {
		rv = md_splice(prog, path, old, text, sec, &want);
	} else if (tli_buf_puts(&want, text) != TL_OK) {
		rv = 1;
	}
	if (rv == 0 && check &&
	    (strlen(old) != want.len ||
	        memcmp(old, want.data, want.len) != 0)) {
		fprintf(
		    stderr, "%s: %s is out of date; %s\n", prog, path, hint);
		rv = 1;
	} else if (rv == 0 && !check) {
		rv = md_write(prog, path, &want);
	}
	tli_buf_fini(&want);
	tli_free(old);
	return rv;
}

int
tlp_gen_md_main(int argc, char **argv, const char *prog,
    void (*gen)(tli_buf *b), const tlp_md_section *sec, const char *hint)
{
	tli_buf b = TLI_BUF_INIT;
	int rv = 2;

	gen(&b);
	if (b.oom) {
		fprintf(stderr, "%s: out of memory\n", prog);
	} else {
		rv = md_run(argc, argv, prog, tli_buf_str(&b), sec, hint);
	}
	tli_buf_fini(&b);
	return rv;
}
