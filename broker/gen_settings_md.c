/*
 * Generates the settings references in the docs from the settings tables:
 * between "<!-- BEGIN settings NAME ... -->" and "<!-- END settings NAME
 * -->" in each file it writes the Markdown table of NAME (timelined:
 * broker/config.def, msc4140: broker/msc4140/conf.def, credentials:
 * broker/credentials.def, chronos: broker/chronos/conf.def). With --check it
 * rewrites nothing and fails when a file differs from what it would write, so
 * the docs cannot drift from the tables (the docs_settings_md ctest runs it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "base.h"
#include "buf.h"
#include "chronos.h"
#include "config.h"
#include "msc4140.h"

static const struct {
	const char *name;
	const tli_conf_table *t;
} tables[] = {
    {"timelined", &tlb_conf_table},
    {"msc4140", &tlg_conf_table},
    {"credentials", &tlb_creds_table},
    {"chronos", &tlk_conf_table},
};

static const tli_conf_table *
table_named(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		if (strlen(tables[i].name) == n &&
		    strncmp(tables[i].name, s, n) == 0) {
			return tables[i].t;
		}
	}
	return NULL;
}

/* The file's text with every marked section regenerated, into out.
 * Returns the number of sections, or -1 (message printed). */
static int
regenerate(const char *path, const char *text, tli_buf *out)
{
	static const char begin[] = "<!-- BEGIN settings ";
	const char *p = text, *b;
	int n = 0;

	while ((b = strstr(p, begin)) != NULL) {
		const char *name = b + sizeof(begin) - 1;
		size_t nlen = strcspn(name, " :-");
		const char *eol = strchr(name, '\n'), *end;
		const tli_conf_table *t = table_named(name, nlen);
		char endmark[64];

		snprintf(endmark, sizeof(endmark), "<!-- END settings %.*s -->",
		    (int) nlen, name);
		if (t == NULL || eol == NULL ||
		    (end = strstr(eol, endmark)) == NULL) {
			fprintf(stderr,
			    "gen_settings_md: %s: bad or unclosed marker "
			    "\"%.*s\"\n",
			    path, (int) nlen, name);
			return -1;
		}
		tli_buf_append(out, p, (size_t) (eol + 1 - p));
		tli_buf_puts(out, "\n");
		tli_conf_markdown(t, out);
		tli_buf_puts(out, "\n");
		p = end;
		n++;
	}
	tli_buf_puts(out, p);
	return n;
}

static int
one_file(const char *path, int check)
{
	char *text = tli_read_file(path, 1 << 20);
	tli_buf out = TLI_BUF_INIT;
	FILE *f;
	int n, rv = 0;

	if (text == NULL) {
		fprintf(stderr, "gen_settings_md: cannot read %s\n", path);
		return 1;
	}
	if ((n = regenerate(path, text, &out)) <= 0 || out.oom) {
		fprintf(
		    stderr, "gen_settings_md: %s: no settings marker\n", path);
		rv = 1;
	} else if (check && strcmp(text, tli_buf_str(&out)) != 0) {
		fprintf(stderr,
		    "gen_settings_md: %s is out of date; regenerate it with "
		    "the settings-md target\n",
		    path);
		rv = 1;
	} else if (!check && strcmp(text, tli_buf_str(&out)) != 0) {
		if ((f = fopen(path, "wb")) == NULL ||
		    fwrite(out.data, 1, out.len, f) != out.len ||
		    fclose(f) != 0) {
			fprintf(
			    stderr, "gen_settings_md: cannot write %s\n", path);
			rv = 1;
		}
	}
	tli_buf_fini(&out);
	tli_free(text);
	return rv;
}

int
main(int argc, char **argv)
{
	int check = argc > 1 && strcmp(argv[1], "--check") == 0, rv = 0;

	if (argc < 2 + check) {
		fprintf(stderr, "usage: gen_settings_md [--check] FILE...\n");
		return 2;
	}
	for (int i = 1 + check; i < argc; i++) {
		rv |= one_file(argv[i], check);
	}
	return rv;
}
