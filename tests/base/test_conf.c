/*
 * The settings loader (base/conf.h) on a table of every type: defaults,
 * bounds, enum names, lists and their replacement by flags, sections,
 * files and flags, errors that name file, line and setting, --help and
 * the Markdown reference; and timelined refusing a bad file end to end.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

typedef struct tconf {
	char name[8];
	int64_t ms;
	uint32_t small;
	int32_t neg;
	bool on;
	bool yes;
	double rate;
	int level;
	char list[3][8];
	int nlist;
	int every;
} tconf;

static int
set_every(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	tconf *c = obj;

	(void) it;
	if (strcmp(v, "off") == 0) {
		c->every = 0;
		return TLI_CONF_OK;
	}
	if (strncmp(v, "every:", 6) == 0 && atoi(v + 6) > 0) {
		c->every = atoi(v + 6);
		return TLI_CONF_OK;
	}
	snprintf(msg, cap, "every must be every:N or off, not \"%s\"", v);
	return TLI_CONF_EVALUE;
}

static const char *const levels[] = {"low", "mid", "high", NULL};

#define F(f) TLI_CONF_FIELD(tconf, f)

static const tli_conf_item items[] = {
#include "test_conf.def"
};

static const tli_conf_table table = {
    .prog = "tconf",
    .usage = "tconf [options]",
    .noun = "setting",
    .items = items,
    .nitems = sizeof(items) / sizeof(items[0]),
};

static char files[8][64];
static int nfiles;

/* A temporary file holding text; removed by the fini. */
static const char *
file_with(const char *text)
{
	char *path = files[nfiles++];
	int fd;

	snprintf(path, 64, "/tmp/tl-conf-XXXXXX");
	fd = mkstemp(path);
	cr_assert(fd >= 0, "mkstemp");
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
	close(fd);
	return path;
}

static void
cleanup(void)
{
	for (int i = 0; i < nfiles; i++) {
		unlink(files[i]);
	}
	nfiles = 0;
}

static void
fresh(tconf *c)
{
	memset(c, 0, sizeof(*c));
	tli_conf_defaults(&table, c);
}

/* tli_conf_set expecting failure; msg must contain want. */
static void
bad_value(const char *key, const char *value, const char *want)
{
	tconf c;
	char msg[256] = "";

	fresh(&c);
	cr_assert_eq(tli_conf_set(&table, &c, key, value, msg, sizeof(msg)),
	    TLI_CONF_EVALUE, "%s = %s was taken", key, value);
	cr_assert(strstr(msg, want) != NULL, "%s = %s: \"%s\" lacks \"%s\"",
	    key, value, msg, want);
}

static void
good_value(tconf *c, const char *key, const char *value)
{
	char msg[256] = "";

	cr_assert_eq(tli_conf_set(&table, c, key, value, msg, sizeof(msg)),
	    TLI_CONF_OK, "%s = %s: %s", key, value, msg);
}

TestSuite(conf, .fini = cleanup);

Test(conf, defaults_go_through_the_parsers)
{
	tconf c;

	fresh(&c);
	cr_assert_str_eq(c.name, "dflt");
	cr_assert_eq(c.ms, 500);
	cr_assert_eq(c.small, 7);
	cr_assert_eq(c.neg, -3);
	cr_assert(c.on);
	cr_assert(!c.yes);
	cr_assert_float_eq(c.rate, 2.5, 1e-9);
	cr_assert_eq(c.level, 1);
	cr_assert_eq(c.every, 5);
	cr_assert_eq(c.nlist, 0, "a list's default waits for finish");
	tli_conf_finish(&table, &c);
	cr_assert_eq(c.nlist, 1);
	cr_assert_str_eq(c.list[0], "first");
}

Test(conf, values_of_every_type)
{
	static const char *on[] = {"on", "yes", "true", "1"};
	static const char *off[] = {"off", "no", "false", "0"};
	tconf c;

	fresh(&c);
	good_value(&c, "name", "1234567");
	cr_assert_str_eq(c.name, "1234567");
	good_value(&c, "name", "off");
	cr_assert_str_eq(c.name, "", "off empties an OFF string");
	good_value(&c, "ms", "86400000");
	cr_assert_eq(c.ms, 86400000);
	good_value(&c, "ms", "off");
	cr_assert_eq(c.ms, 0, "off is 0 for an OFF integer");
	good_value(&c, "small", "4000000000");
	cr_assert_eq(c.small, 4000000000u, "a uint32 field holds it");
	good_value(&c, "neg", "-10");
	cr_assert_eq(c.neg, -10, "an int32 field keeps its sign");
	for (int i = 0; i < 4; i++) {
		good_value(&c, "on", off[i]);
		cr_assert(!c.on, "%s", off[i]);
		good_value(&c, "on", on[i]);
		cr_assert(c.on, "%s", on[i]);
	}
	good_value(&c, "rate", "0.25");
	cr_assert_float_eq(c.rate, 0.25, 1e-9);
	good_value(&c, "level", "high");
	cr_assert_eq(c.level, 2);
	good_value(&c, "level", "low");
	cr_assert_eq(c.level, 0);
	good_value(&c, "every", "every:9");
	cr_assert_eq(c.every, 9, "a custom parser");
	good_value(&c, "every", "off");
	cr_assert_eq(c.every, 0);
	good_value(&c, "millis", "42");
	cr_assert_eq(c.ms, 42, "the alias");
	good_value(&c, "ms-flag", "43");
	cr_assert_eq(c.ms, 43, "the flag's name");
}

Test(conf, bad_values_say_which_setting_and_why)
{
	static const struct {
		const char *key, *value, *want;
	} bad[] = {
	    {"name", "12345678", "name must be at most 7 bytes"},
	    {"ms", "abc",
	        "ms must be a whole number from 1 to 86400000 or off, not "
	        "\"abc\""},
	    {"ms", "0", "from 1 to 86400000"},
	    {"ms", "86400001", "from 1 to 86400000"},
	    {"ms", "5x", "not \"5x\""},
	    {"ms", "", "not \"\""},
	    {"neg", "-11", "neg must be a whole number >= -10, not"},
	    {"small", "99999999999999999999", "small must be"},
	    {"on", "maybe", "on must be on or off, not \"maybe\""},
	    {"yes", "maybe", "yes must be yes or no, not \"maybe\""},
	    {"rate", "0", "rate must be a positive number up to 100"},
	    {"rate", "100.5", "rate must be"},
	    {"rate", "fast", "not \"fast\""},
	    {"level", "max", "level must be low, mid or high, not \"max\""},
	    {"every", "sometimes", "every must be every:N or off"},
	    {"item", "123456789", "item must be at most 7 bytes"},
	    {"colour", "red", "unknown setting \"colour\""},
	    {"help", "x", "unknown setting \"help\""},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bad_value(bad[i].key, bad[i].value, bad[i].want);
	}
}

Test(conf, lists_collect_up_to_their_size)
{
	tconf c;

	fresh(&c);
	good_value(&c, "item", "a");
	good_value(&c, "item", "b");
	good_value(&c, "item", "c");
	cr_assert_eq(c.nlist, 3);
	cr_assert_str_eq(c.list[2], "c");
	cr_assert_eq(
	    tli_conf_set(&table, &c, "item", "d", NULL, 0), TLI_CONF_EVALUE);
	bad_value("item", "123456789", "item must be at most 7 bytes");
	tli_conf_finish(&table, &c);
	cr_assert_eq(c.nlist, 3, "a given list keeps no default");
}

Test(conf, files_comments_blanks_and_spaces)
{
	tconf c;
	char msg[256] = "";
	const char *f = file_with("# a comment\n"
	                          "\n"
	                          "  name =  short  # trailing\n"
	                          "ms=9\r\n"
	                          "item = x\n"
	                          "item = y\n"
	                          "level\t=\thigh\n");

	fresh(&c);
	cr_assert_eq(tli_conf_file(&table, &c, f, msg, sizeof(msg)),
	    TLI_CONF_OK, "%s", msg);
	cr_assert_str_eq(c.name, "short");
	cr_assert_eq(c.ms, 9);
	cr_assert_eq(c.nlist, 2);
	cr_assert_str_eq(c.list[1], "y");
	cr_assert_eq(c.level, 2);
}

/* A file with one bad line: the error and its text. */
static void
bad_file(const char *text, int want_rv, const char *want)
{
	tconf c;
	char msg[512] = "", full[600];
	const char *f = file_with(text);

	fresh(&c);
	cr_assert_eq(tli_conf_file(&table, &c, f, msg, sizeof(msg)), want_rv,
	    "\"%s\" -> %s", text, msg);
	snprintf(full, sizeof(full), "%s%s", want[0] == ':' ? f : "", want);
	cr_assert(strstr(msg, full) != NULL, "\"%s\" lacks \"%s\"", msg, full);
}

Test(conf, file_errors_name_file_line_and_setting)
{
	bad_file("name = a\nms = abc\n", TLI_CONF_EVALUE,
	    ":2: ms must be a whole number from 1 to 86400000 or off, not "
	    "\"abc\"");
	bad_file("\n\nwords without equals\n", TLI_CONF_EVALUE,
	    ":3: expected key = value");
	bad_file("colour = red\n", TLI_CONF_EVALUE,
	    ":1: unknown setting \"colour\"");
	bad_file("[section x]\n", TLI_CONF_EVALUE, ":1: expected key = value");
	bad_file("item=a\nitem=b\nitem=c\nitem=d\n", TLI_CONF_EVALUE,
	    ":4: item may be given at most 3 times");
}

Test(conf, long_lines_and_missing_files)
{
	tconf c;
	char msg[256] = "", *big = malloc(5000);

	memset(big, 'a', 4999);
	big[4999] = '\0';
	bad_file(big, TLI_CONF_EVALUE, ":1: line longer than");
	free(big);
	fresh(&c);
	cr_assert_eq(
	    tli_conf_file(&table, &c, "/nonexistent/x.conf", msg, sizeof(msg)),
	    TLI_CONF_EIO);
	cr_assert(
	    strstr(msg, "cannot read /nonexistent/x.conf") != NULL, "%s", msg);
}

/* ---- sections ---- */

typedef struct sect_ctx {
	tconf v[4];
	char names[4][16];
	int n;
} sect_ctx;

static int
sect_start(void *ctx, const char *name, void **obj, char *msg, size_t cap)
{
	sect_ctx *s = ctx;

	for (int i = 0; i < s->n; i++) {
		if (strcmp(s->names[i], name) == 0) {
			snprintf(msg, cap, "thing %s appears twice", name);
			return TLI_CONF_EVALUE;
		}
	}
	snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name);
	memset(&s->v[s->n], 0, sizeof(s->v[0]));
	*obj = &s->v[s->n++];
	return TLI_CONF_OK;
}

static const tli_conf_table sect_table = {
    .prog = "tconf",
    .noun = "key",
    .section = "thing",
    .section_doc = "Starts a thing.",
    .section_start = sect_start,
    .items = items,
    .nitems = sizeof(items) / sizeof(items[0]),
};

Test(conf, sections_get_their_own_objects_with_defaults)
{
	sect_ctx s = {.n = 0};
	char msg[256] = "";
	const char *f = file_with("[thing a]\nms = 10\n"
	                          "[thing   b  ]\nname = bee\n");

	cr_assert_eq(tli_conf_file(&sect_table, &s, f, msg, sizeof(msg)),
	    TLI_CONF_OK, "%s", msg);
	cr_assert_eq(s.n, 2);
	cr_assert_str_eq(s.names[1], "b");
	cr_assert_eq(s.v[0].ms, 10);
	cr_assert_str_eq(s.v[0].name, "dflt", "defaults per section");
	cr_assert_eq(s.v[1].ms, 500);
	cr_assert_str_eq(s.v[1].name, "bee");
}

static void
bad_sections(const char *text, const char *want)
{
	sect_ctx s = {.n = 0};
	char msg[256] = "";
	const char *f = file_with(text);

	cr_assert_eq(tli_conf_file(&sect_table, &s, f, msg, sizeof(msg)),
	    TLI_CONF_EVALUE, "\"%s\" loaded", text);
	cr_assert(strstr(msg, want) != NULL, "\"%s\" lacks \"%s\"", msg, want);
}

Test(conf, section_errors)
{
	bad_sections("ms = 1\n", ":1: a key before the first [thing NAME]");
	bad_sections("[other a]\n", ":1: expected [thing NAME]");
	bad_sections("[thing a]\n[thing a]\n", ":2: thing a appears twice");
	bad_sections("[thing a]\ncolour = red\n", ":2: unknown key \"colour\"");
}

/* ---- the command line ---- */

static int
cmdline(tconf *c, tli_conf_cli *cli, char *msg, size_t cap, ...)
{
	char *argv[16] = {"tconf"};
	int argc = 1;
	va_list ap;
	char *a;

	va_start(ap, cap);
	while ((a = va_arg(ap, char *)) != NULL) {
		argv[argc++] = a;
	}
	va_end(ap);
	fresh(c);
	return tli_conf_cmdline(&table, c, argc, argv, cli, msg, cap);
}

Test(conf, flags_override_the_file_in_every_form)
{
	tconf c;
	tli_conf_cli cli;
	char msg[256] = "";
	const char *f = file_with("name = file\nms = 100\nlevel = low\n");
	int rv = cmdline(&c, &cli, msg, sizeof(msg), "--name", "flag",
	    "--ms-flag=200", "-c", f, "--level", "high", NULL);

	cr_assert_eq(rv, TLI_CONF_OK, "%s", msg);
	cr_assert_eq(cli.nfiles, 1);
	cr_assert_eq(cli.action, 0);
	cr_assert_str_eq(c.name, "flag", "a flag before -c still wins");
	cr_assert_eq(c.ms, 200);
	cr_assert_eq(c.level, 2);
	rv = cmdline(&c, &cli, msg, sizeof(msg), "-nshort", "-c", f, NULL);
	cr_assert_eq(rv, TLI_CONF_OK, "%s", msg);
	cr_assert_str_eq(c.name, "short");
	rv = cmdline(&c, &cli, msg, sizeof(msg), "--config=", NULL);
	cr_assert_eq(rv, TLI_CONF_EIO);
}

Test(conf, list_flags_replace_the_files_list)
{
	tconf c;
	tli_conf_cli cli;
	char msg[256] = "";
	const char *f = file_with("item = f1\nitem = f2\n");
	const char *g = file_with("item = g1\n");

	cr_assert_eq(
	    cmdline(&c, &cli, msg, sizeof(msg), "-c", f, "-c", g, NULL),
	    TLI_CONF_OK, "%s", msg);
	cr_assert_eq(cli.nfiles, 2);
	cr_assert_eq(c.nlist, 3, "files add to each other");
	cr_assert_str_eq(c.list[2], "g1");
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "-c", f, "-i", "x1",
	                 "--item", "x2", NULL),
	    TLI_CONF_OK, "%s", msg);
	cr_assert_eq(c.nlist, 2, "flags replace the file's list");
	cr_assert_str_eq(c.list[0], "x1");
	cr_assert_str_eq(c.list[1], "x2");
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), NULL), TLI_CONF_OK);
	cr_assert_eq(c.nlist, 1, "the default when nothing is given");
	cr_assert_str_eq(c.list[0], "first");
}

Test(conf, command_line_errors)
{
	tconf c;
	tli_conf_cli cli;
	char msg[256] = "";
	const char *f = file_with("ms = zero\n");

	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "--bogus", NULL),
	    TLI_CONF_EUSAGE);
	cr_assert(strstr(msg, "unknown option --bogus") != NULL, "%s", msg);
	cr_assert_eq(
	    cmdline(&c, &cli, msg, sizeof(msg), "-z", NULL), TLI_CONF_EUSAGE);
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "--name", NULL),
	    TLI_CONF_EUSAGE);
	cr_assert(
	    strstr(msg, "option --name needs a value") != NULL, "%s", msg);
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "stray", NULL),
	    TLI_CONF_EUSAGE);
	cr_assert(
	    strstr(msg, "unexpected argument \"stray\"") != NULL, "%s", msg);
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "--help=1", NULL),
	    TLI_CONF_EUSAGE);
	cr_assert_eq(
	    cmdline(&c, &cli, msg, sizeof(msg), "--ms-flag", "0", NULL),
	    TLI_CONF_EVALUE);
	cr_assert(strstr(msg, "--ms-flag: ms must be a whole number") != NULL,
	    "%s", msg);
	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "-c", f, NULL),
	    TLI_CONF_EVALUE);
	cr_assert(strstr(msg, ":1: ms must be") != NULL, "%s", msg);
}

Test(conf, action_flags_end_the_command_line)
{
	tconf c;
	tli_conf_cli cli;
	char msg[256] = "";

	cr_assert_eq(cmdline(&c, &cli, msg, sizeof(msg), "--name", "a", "-h",
	                 "--name", "b", NULL),
	    TLI_CONF_OK, "%s", msg);
	cr_assert_eq(cli.action, 7);
	cr_assert_str_eq(c.name, "a", "nothing after the action is applied");
}

/* ---- help and docs ---- */

Test(conf, help_and_markdown_show_every_setting)
{
	tli_buf h = TLI_BUF_INIT, m = TLI_BUF_INIT;

	cr_assert_eq(tli_conf_help(&table, &h), 0);
	cr_assert_eq(tli_conf_markdown(&sect_table, &m), 0);
	cr_assert(strstr(tli_buf_str(&h), "usage: tconf [options]\n") != NULL);
	cr_assert(strstr(tli_buf_str(&m), "| `[thing NAME]` |") != NULL, "%s",
	    tli_buf_str(&m));
	for (size_t i = 0; i < table.nitems; i++) {
		const tli_conf_item *it = &items[i];
		char want[64];

		if (it->flag != NULL) {
			snprintf(want, sizeof(want), "--%s", it->flag);
			cr_assert(strstr(tli_buf_str(&h), want) != NULL,
			    "help lacks %s", want);
		}
		if (it->name != NULL) {
			snprintf(want, sizeof(want), "| `%s`", it->name);
			cr_assert(strstr(tli_buf_str(&m), want) != NULL,
			    "docs lack %s:\n%s", want, tli_buf_str(&m));
		}
	}
	cr_assert(strstr(tli_buf_str(&h), "-n, --name NAME") != NULL);
	cr_assert(strstr(tli_buf_str(&h), "(default dflt)") != NULL);
	cr_assert(strstr(tli_buf_str(&m), "`every:N\\|off`") != NULL,
	    "pipes escaped: %s", tli_buf_str(&m));
	cr_assert(strstr(tli_buf_str(&m), "`low`, `mid` or `high`") != NULL);
	cr_assert(strstr(tli_buf_str(&m),
	              "whole number, 1 to 86400000 or `off`") != NULL);
	cr_assert(strstr(tli_buf_str(&m), "A custom *syntax*.") != NULL);
	tli_buf_fini(&h);
	tli_buf_fini(&m);
}

/* ---- end to end: timelined refuses a bad file ---- */

Test(conf, timelined_names_file_line_and_setting)
{
	const char *f = file_with("data = /nonexistent\n"
	                          "window_ms = soon\n");
	char cmd[512], out[2048], want[128];
	size_t n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "%s/broker/timelined -c %s 2>&1",
	    TL_TEST_BINDIR, f);
	p = popen(cmd, "r");
	cr_assert(p != NULL);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	st = pclose(p);
	cr_assert(
	    WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, out);
	snprintf(want, sizeof(want), "timelined: %s:2: window_ms must be", f);
	cr_assert(strstr(out, want) != NULL, "\"%s\" lacks \"%s\"", out, want);
}
