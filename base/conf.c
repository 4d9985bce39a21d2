/*
 * The settings loader (conf.h): one parser per setting type, the file
 * reader, the command-line reader, and the --help and Markdown writers,
 * all driven by a program's table of tli_conf_item.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "conf.h"
#include "timeline/errors.h"

#define LINE_MAX_LEN 4096

/* The spellings of a boolean. */
static const struct {
	const char *word;
	bool v;
} bool_words_v[] = {
    {"on", true},
    {"off", false},
    {"yes", true},
    {"no", false},
    {"true", true},
    {"false", false},
    {"1", true},
    {"0", false},
};

static int fail(char *msg, size_t cap, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
fail(char *msg, size_t cap, int rv, const char *fmt, ...)
{
	va_list ap;

	if (cap > 0) {
		va_start(ap, fmt);
		vsnprintf(msg, cap, fmt, ap);
		va_end(ap);
	}
	return rv;
}

/* Puts "PREFIX" before the message already in msg. */
static int prefix(char *msg, size_t cap, int rv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
prefix(char *msg, size_t cap, int rv, const char *fmt, ...)
{
	char head[600], tail[1024];
	va_list ap;

	if (cap == 0) {
		return rv;
	}
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	snprintf(tail, sizeof(tail), "%s", msg);
	snprintf(msg, cap, "%s%s", head, tail);
	return rv;
}

static const char *
item_name(const tli_conf_item *it)
{
	return it->name != NULL ? it->name : it->flag;
}

/* Stores x (already within the item's bounds) in a field of 1 to 8
 * bytes; the bounds make the value fit its field's type. */
static void
store_int(void *p, size_t size, int64_t x)
{
	switch (size) {
	case 1: {
		uint8_t v = (uint8_t) x;
		memcpy(p, &v, 1);
		break;
	}
	case 2: {
		uint16_t v = (uint16_t) x;
		memcpy(p, &v, 2);
		break;
	}
	case 4: {
		uint32_t v = (uint32_t) x;
		memcpy(p, &v, 4);
		break;
	}
	default:
		memcpy(p, &x, 8);
		break;
	}
}

static int
copy_str(char *dst, size_t size, const char *name, const char *v, char *msg,
    size_t cap)
{
	size_t n = strlen(v);

	if (n >= size) {
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "%s must be at most %zu bytes long, not %zu", name,
		    size - 1, n);
	}
	memcpy(dst, v, n + 1);
	return TLI_CONF_OK;
}

/* The words a boolean's errors and docs use: those of its default. */
static const char *
bool_words(const tli_conf_item *it)
{
	if (it->def != NULL &&
	    (strcmp(it->def, "yes") == 0 || strcmp(it->def, "no") == 0)) {
		return "yes or no";
	}
	if (it->def != NULL &&
	    (strcmp(it->def, "true") == 0 || strcmp(it->def, "false") == 0)) {
		return "true or false";
	}
	return "on or off";
}

static int
parse_int(
    const tli_conf_item *it, const char *v, int64_t *out, char *msg, size_t cap)
{
	char *end;
	long long x;

	if ((it->flags & TLI_CONF_OFF) != 0 && strcmp(v, "off") == 0) {
		*out = 0;
		return TLI_CONF_OK;
	}
	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno == 0 && end != v && *end == '\0' && x >= it->lo &&
	    x <= it->hi) {
		*out = x;
		return TLI_CONF_OK;
	}
	if (it->hi == INT64_MAX) {
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "%s must be a whole number >= %lld%s, not \"%s\"",
		    item_name(it), (long long) it->lo,
		    (it->flags & TLI_CONF_OFF) != 0 ? " or off" : "", v);
	}
	return fail(msg, cap, TLI_CONF_EVALUE,
	    "%s must be a whole number from %lld to %lld%s, not \"%s\"",
	    item_name(it), (long long) it->lo, (long long) it->hi,
	    (it->flags & TLI_CONF_OFF) != 0 ? " or off" : "", v);
}

static int
parse_bool(
    const tli_conf_item *it, const char *v, bool *out, char *msg, size_t cap)
{
	for (size_t i = 0; i < sizeof(bool_words_v) / sizeof(bool_words_v[0]);
	     i++) {
		if (strcmp(v, bool_words_v[i].word) == 0) {
			*out = bool_words_v[i].v;
			return TLI_CONF_OK;
		}
	}
	return fail(msg, cap, TLI_CONF_EVALUE, "%s must be %s, not \"%s\"",
	    item_name(it), bool_words(it), v);
}

static int
parse_double(
    const tli_conf_item *it, const char *v, double *out, char *msg, size_t cap)
{
	char *end;
	double x = strtod(v, &end);
	bool low_ok = it->dlo == 0 ? x > 0 : x >= it->dlo;

	if (end != v && *end == '\0' && low_ok && x <= it->dhi) {
		*out = x;
		return TLI_CONF_OK;
	}
	if (it->dlo == 0) {
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "%s must be a positive number up to %g, not \"%s\"",
		    item_name(it), it->dhi, v);
	}
	return fail(msg, cap, TLI_CONF_EVALUE,
	    "%s must be a number from %g to %g, not \"%s\"", item_name(it),
	    it->dlo, it->dhi, v);
}

/* "a, b or c" into b. */
static void
names_text(const char *const *names, const char *quote, tli_buf *b)
{
	for (size_t i = 0; names[i] != NULL; i++) {
		if (i > 0) {
			tli_buf_puts(b, names[i + 1] == NULL ? " or " : ", ");
		}
		tli_buf_printf(b, "%s%s%s", quote, names[i], quote);
	}
}

static int
parse_enum(
    const tli_conf_item *it, const char *v, int64_t *out, char *msg, size_t cap)
{
	tli_buf b = TLI_BUF_INIT;

	for (int64_t i = 0; it->names[i] != NULL; i++) {
		if (strcmp(v, it->names[i]) == 0) {
			*out = i;
			return TLI_CONF_OK;
		}
	}
	names_text(it->names, "", &b);
	fail(msg, cap, TLI_CONF_EVALUE, "%s must be %s, not \"%s\"",
	    item_name(it), tli_buf_str(&b), v);
	tli_buf_fini(&b);
	return TLI_CONF_EVALUE;
}

static int
add_list(
    const tli_conf_item *it, void *obj, const char *v, char *msg, size_t cap)
{
	int *count = (int *) ((char *) obj + it->count_off);
	char *slot = (char *) obj + it->off + (size_t) *count * it->size;
	int rv;

	if (*count >= it->max) {
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "%s may be given at most %d times", item_name(it), it->max);
	}
	if ((rv = copy_str(slot, it->size, item_name(it), v, msg, cap)) ==
	    TLI_CONF_OK) {
		(*count)++;
	}
	return rv;
}

/* One value of one item. */
static int
apply(const tli_conf_item *it, void *obj, const char *v, char *msg, size_t cap)
{
	void *field = (char *) obj + it->off;
	int64_t x = 0;
	double d = 0;
	int rv;

	switch (it->type) {
	case TLI_CONF_STR:
		if ((it->flags & TLI_CONF_OFF) != 0 && strcmp(v, "off") == 0) {
			v = "";
		}
		return copy_str(field, it->size, item_name(it), v, msg, cap);
	case TLI_CONF_INT:
		if ((rv = parse_int(it, v, &x, msg, cap)) == TLI_CONF_OK) {
			store_int(field, it->size, x);
		}
		return rv;
	case TLI_CONF_BOOL:
		return parse_bool(it, v, (bool *) field, msg, cap);
	case TLI_CONF_DOUBLE:
		if ((rv = parse_double(it, v, &d, msg, cap)) == TLI_CONF_OK) {
			memcpy(field, &d, sizeof(d));
		}
		return rv;
	case TLI_CONF_ENUM:
		if ((rv = parse_enum(it, v, &x, msg, cap)) == TLI_CONF_OK) {
			store_int(field, it->size, x);
		}
		return rv;
	case TLI_CONF_LIST:
		return add_list(it, obj, v, msg, cap);
	case TLI_CONF_FUNC:
		return it->parse(obj, it, v, msg, cap);
	default:
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "%s is a command-line flag, not a setting", item_name(it));
	}
}

void
tli_conf_defaults(const tli_conf_table *t, void *obj)
{
	char msg[256];

	for (size_t i = 0; i < t->nitems; i++) {
		const tli_conf_item *it = &t->items[i];
		if (it->def != NULL && it->type != TLI_CONF_LIST &&
		    it->type != TLI_CONF_INCLUDE &&
		    it->type != TLI_CONF_ACTION) {
			int rv = apply(it, obj, it->def, msg, sizeof(msg));
			TLI_ASSERT(rv == TLI_CONF_OK);
			(void) rv;
		}
	}
}

void
tli_conf_finish(const tli_conf_table *t, void *obj)
{
	char msg[256];

	for (size_t i = 0; i < t->nitems; i++) {
		const tli_conf_item *it = &t->items[i];
		if (it->type == TLI_CONF_LIST && it->def != NULL &&
		    *(int *) ((char *) obj + it->count_off) == 0) {
			int rv = add_list(it, obj, it->def, msg, sizeof(msg));
			TLI_ASSERT(rv == TLI_CONF_OK);
			(void) rv;
		}
	}
}

/* The item a file key names: its name, its alias or its flag's name. */
static const tli_conf_item *
find_key(const tli_conf_table *t, const char *k)
{
	for (size_t i = 0; i < t->nitems; i++) {
		const tli_conf_item *it = &t->items[i];
		if (it->type == TLI_CONF_INCLUDE ||
		    it->type == TLI_CONF_ACTION) {
			continue;
		}
		if ((it->name != NULL && strcmp(it->name, k) == 0) ||
		    (it->alias != NULL && strcmp(it->alias, k) == 0) ||
		    (it->flag != NULL && strcmp(it->flag, k) == 0)) {
			return it;
		}
	}
	return NULL;
}

int
tli_conf_set(const tli_conf_table *t, void *obj, const char *key,
    const char *value, char *msg, size_t cap)
{
	const tli_conf_item *it = find_key(t, key);

	if (it == NULL) {
		return fail(msg, cap, TLI_CONF_EVALUE, "unknown %s \"%s\"",
		    t->noun != NULL ? t->noun : "setting", key);
	}
	return apply(it, obj, value, msg, cap);
}

/* ---- files ---- */

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t') {
		s++;
	}
	e = s + strlen(s);
	while (e > s &&
	    (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) {
		*--e = '\0';
	}
	return s;
}

/* "[SECTION NAME]": a new section object becomes the current one. */
static int
section(const tli_conf_table *t, void *ctx, char *s, void **cur, char *msg,
    size_t cap)
{
	size_t n = strlen(s), w = strlen(t->section);
	int rv;

	if (s[n - 1] != ']' || strncmp(s + 1, t->section, w) != 0 ||
	    (s[1 + w] != ' ' && s[1 + w] != '\t')) {
		return fail(msg, cap, TLI_CONF_EVALUE, "expected [%s NAME]",
		    t->section);
	}
	s[n - 1] = '\0';
	if ((rv = t->section_start(ctx, trim(s + 1 + w), cur, msg, cap)) ==
	    TLI_CONF_OK) {
		tli_conf_defaults(t, *cur);
	}
	return rv;
}

/* One line, comment and blanks already stripped. */
static int
file_line(const tli_conf_table *t, void *ctx, char *k, void **cur, char *msg,
    size_t cap)
{
	char *eq;

	if (*k == '[' && t->section != NULL) {
		return section(t, ctx, k, cur, msg, cap);
	}
	if ((eq = strchr(k, '=')) == NULL) {
		return fail(msg, cap, TLI_CONF_EVALUE, "expected key = value");
	}
	if (*cur == NULL) {
		return fail(msg, cap, TLI_CONF_EVALUE,
		    "a key before the first [%s NAME]", t->section);
	}
	*eq = '\0';
	return tli_conf_set(t, *cur, trim(k), trim(eq + 1), msg, cap);
}

int
tli_conf_file(
    const tli_conf_table *t, void *obj, const char *path, char *msg, size_t cap)
{
	FILE *f = fopen(path, "r");
	char line[LINE_MAX_LEN];
	void *cur = t->section != NULL ? NULL : obj;
	int lineno = 0, rv = TLI_CONF_OK;

	if (f == NULL) {
		return fail(msg, cap, TLI_CONF_EIO, "cannot read %s: %s", path,
		    strerror(errno));
	}
	while (rv == TLI_CONF_OK && fgets(line, sizeof(line), f) != NULL) {
		char *k, *hash;

		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			rv = fail(msg, cap, TLI_CONF_EVALUE,
			    "line longer than %d characters",
			    (int) sizeof(line) - 2);
			break;
		}
		if ((hash = strchr(line, '#')) != NULL) {
			*hash = '\0';
		}
		if (*(k = trim(line)) != '\0') {
			rv = file_line(t, obj, k, &cur, msg, cap);
		}
	}
	fclose(f);
	if (rv == TLI_CONF_EVALUE) {
		prefix(msg, cap, rv, "%s:%d: ", path, lineno);
	}
	return rv;
}

/* ---- the command line ---- */

typedef struct cl_flag {
	const tli_conf_item *it;
	const char *val; /* NULL for ACTION */
	const char *as;  /* the flag as written, for messages */
	char buf[64];
} cl_flag;

static const tli_conf_item *
find_flag(const tli_conf_table *t, const char *name, size_t n, char c)
{
	for (size_t i = 0; i < t->nitems; i++) {
		const tli_conf_item *it = &t->items[i];
		if (c != 0 ? it->short_flag == c
		           : (it->flag != NULL && strlen(it->flag) == n &&
		                 strncmp(it->flag, name, n) == 0)) {
			return it;
		}
	}
	return NULL;
}

/* The flag at argv[*i] (and its value, which may be the next word). */
static int
next_flag(const tli_conf_table *t, int argc, char **argv, int *i, cl_flag *fl,
    char *msg, size_t cap)
{
	const char *a = argv[*i], *eq = NULL, *attached = NULL;

	if (a[0] != '-' || a[1] == '\0' || strcmp(a, "--") == 0) {
		return fail(
		    msg, cap, TLI_CONF_EUSAGE, "unexpected argument \"%s\"", a);
	}
	if (a[1] == '-') {
		size_t n = (eq = strchr(a, '=')) != NULL ? (size_t) (eq - a - 2)
		                                         : strlen(a + 2);
		fl->it = find_flag(t, a + 2, n, 0);
		snprintf(fl->buf, sizeof(fl->buf), "--%.*s", (int) n, a + 2);
		attached = eq != NULL ? eq + 1 : NULL;
	} else {
		fl->it = find_flag(t, NULL, 0, a[1]);
		snprintf(fl->buf, sizeof(fl->buf), "-%c", a[1]);
		attached = a[2] != '\0' ? a + 2 : NULL;
	}
	fl->as = fl->buf;
	if (fl->it == NULL) {
		return fail(
		    msg, cap, TLI_CONF_EUSAGE, "unknown option %s", fl->as);
	}
	if (fl->it->type == TLI_CONF_ACTION) {
		fl->val = NULL;
		return attached == NULL
		    ? TLI_CONF_OK
		    : fail(msg, cap, TLI_CONF_EUSAGE,
		          "option %s takes no value", fl->as);
	}
	if (attached != NULL) {
		fl->val = attached;
	} else if (*i + 1 < argc) {
		fl->val = argv[++*i];
	} else {
		return fail(msg, cap, TLI_CONF_EUSAGE,
		    "option %s needs a value", fl->as);
	}
	return TLI_CONF_OK;
}

/* Pass one: the configuration files, in order. */
static int
cmdline_files(const tli_conf_table *t, void *obj, int argc, char **argv,
    tli_conf_cli *cli, char *msg, size_t cap)
{
	cl_flag fl;
	int rv;

	for (int i = 1; i < argc; i++) {
		if ((rv = next_flag(t, argc, argv, &i, &fl, msg, cap)) !=
		    TLI_CONF_OK) {
			return rv;
		}
		if (fl.it->type == TLI_CONF_INCLUDE) {
			if ((rv = tli_conf_file(t, obj, fl.val, msg, cap)) !=
			    TLI_CONF_OK) {
				return rv;
			}
			cli->nfiles++;
		}
	}
	return TLI_CONF_OK;
}

int
tli_conf_cmdline(const tli_conf_table *t, void *obj, int argc, char **argv,
    tli_conf_cli *cli, char *msg, size_t cap)
{
	bool replaced[TLI_CONF_MAX_ITEMS] = {false};
	cl_flag fl;
	int rv;

	TLI_ASSERT(t->nitems <= TLI_CONF_MAX_ITEMS);
	memset(cli, 0, sizeof(*cli));
	if ((rv = cmdline_files(t, obj, argc, argv, cli, msg, cap)) !=
	    TLI_CONF_OK) {
		return rv;
	}
	for (int i = 1; i < argc && cli->action == 0; i++) {
		size_t idx;

		if ((rv = next_flag(t, argc, argv, &i, &fl, msg, cap)) !=
		    TLI_CONF_OK) {
			return rv;
		}
		idx = (size_t) (fl.it - t->items);
		if (fl.it->type == TLI_CONF_ACTION) {
			cli->action = fl.it->action;
		} else if (fl.it->type == TLI_CONF_LIST && !replaced[idx]) {
			/* flags replace the files' list */
			*(int *) ((char *) obj + fl.it->count_off) = 0;
			replaced[idx] = true;
		}
		if (fl.it->type != TLI_CONF_ACTION &&
		    fl.it->type != TLI_CONF_INCLUDE &&
		    (rv = apply(fl.it, obj, fl.val, msg, cap)) != TLI_CONF_OK) {
			return prefix(msg, cap, rv, "%s: ", fl.as);
		}
	}
	tli_conf_finish(t, obj);
	return TLI_CONF_OK;
}

/* ---- --help and the Markdown reference ---- */

static void
flag_text(const tli_conf_item *it, const char *tick, tli_buf *b)
{
	const char *mv = it->metavar != NULL ? it->metavar : "";

	if (it->short_flag != 0) {
		tli_buf_printf(b, "%s-%c%s, ", tick, it->short_flag, tick);
	}
	tli_buf_printf(
	    b, "%s--%s%s%s%s", tick, it->flag, *mv ? " " : "", mv, tick);
}

int
tli_conf_help(const tli_conf_table *t, tli_buf *b)
{
	tli_buf_printf(b, "usage: %s\n", t->usage);
	for (size_t i = 0; i < t->nitems; i++) {
		const tli_conf_item *it = &t->items[i];
		size_t start = b->len;

		if (it->flag == NULL) {
			continue;
		}
		tli_buf_puts(b, it->short_flag != 0 ? "  " : "      ");
		flag_text(it, "", b);
		if (b->len - start >= 28) {
			tli_buf_printf(b, "\n%28s", "");
		} else {
			tli_buf_printf(
			    b, "%*s", (int) (28 - (b->len - start)), "");
		}
		tli_buf_puts(b, it->help);
		if (it->def != NULL && it->def[0] != '\0' &&
		    it->type != TLI_CONF_BOOL) {
			tli_buf_printf(b, " (default %s)", it->def);
		}
		tli_buf_puts(b, "\n");
	}
	return b->oom ? TL_ENOMEM : TL_OK;
}

void
tli_conf_usage(const tli_conf_table *t, FILE *f)
{
	tli_buf b = TLI_BUF_INIT;

	tli_conf_help(t, &b);
	fputs(tli_buf_str(&b), f);
	tli_buf_fini(&b);
}

/* Text for a Markdown cell: '|' escaped. */
static void
md(tli_buf *b, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '|') {
			tli_buf_puts(b, "\\|");
		} else {
			tli_buf_append(b, s, 1);
		}
	}
}

static void
md_values(const tli_conf_item *it, tli_buf *b)
{
	const char *off = (it->flags & TLI_CONF_OFF) != 0 ? " or `off`" : "";

	switch (it->type) {
	case TLI_CONF_STR:
		tli_buf_printf(b, "text, at most %zu bytes%s%s", it->size - 1,
		    *off != '\0' ? "," : "", off);
		break;
	case TLI_CONF_INT:
		if (it->hi == INT64_MAX) {
			tli_buf_printf(b, "whole number ≥ %lld%s",
			    (long long) it->lo, off);
		} else {
			tli_buf_printf(b, "whole number, %lld to %lld%s",
			    (long long) it->lo, (long long) it->hi, off);
		}
		break;
	case TLI_CONF_BOOL:
		tli_buf_printf(b, "`%.*s` or `%s`",
		    (int) (strchr(bool_words(it), ' ') - bool_words(it)),
		    bool_words(it), strrchr(bool_words(it), ' ') + 1);
		break;
	case TLI_CONF_DOUBLE:
		if (it->dlo == 0) {
			tli_buf_printf(b, "number > 0, up to %g", it->dhi);
		} else {
			tli_buf_printf(b, "number, %g to %g", it->dlo, it->dhi);
		}
		break;
	case TLI_CONF_ENUM:
		names_text(it->names, "`", b);
		break;
	case TLI_CONF_LIST:
		tli_buf_printf(b,
		    "text, at most %zu bytes; repeatable, at most %d",
		    it->size - 1, it->max);
		break;
	case TLI_CONF_FUNC:
		tli_buf_puts(b, "`");
		md(b, it->metavar);
		tli_buf_puts(b, "`");
		if ((it->flags & TLI_CONF_REPEAT) != 0) {
			tli_buf_printf(b, "; repeatable, at most %d", it->max);
		}
		break;
	case TLI_CONF_INCLUDE:
		tli_buf_puts(b, "file; repeatable");
		break;
	default:
		tli_buf_puts(b, "—");
		break;
	}
}

/* "`name` (or `alias`, `flag-name`)" */
static void
md_key(const tli_conf_item *it, tli_buf *b)
{
	bool other = false;

	if (it->name == NULL) {
		tli_buf_puts(b, "—");
		return;
	}
	tli_buf_printf(b, "`%s`", it->name);
	if (it->flag != NULL && strcmp(it->flag, it->name) != 0) {
		tli_buf_printf(b, " (or `%s`", it->flag);
		other = true;
	}
	if (it->alias != NULL) {
		tli_buf_printf(b, "%s`%s`", other ? ", " : " (or ", it->alias);
		other = true;
	}
	if (other) {
		tli_buf_puts(b, ")");
	}
}

static bool
has_flags(const tli_conf_table *t)
{
	for (size_t i = 0; i < t->nitems; i++) {
		if (t->items[i].flag != NULL) {
			return true;
		}
	}
	return false;
}

static void
md_row(const tli_conf_item *it, bool flags, tli_buf *b)
{
	tli_buf_puts(b, "| ");
	if (flags) {
		if (it->flag != NULL) {
			tli_buf f = TLI_BUF_INIT;
			flag_text(it, "`", &f);
			md(b, tli_buf_str(&f));
			b->oom = b->oom || f.oom;
			tli_buf_fini(&f);
		} else {
			tli_buf_puts(b, "—");
		}
		tli_buf_puts(b, " | ");
	}
	md_key(it, b);
	tli_buf_puts(b, " | ");
	if (it->def == NULL || it->def[0] == '\0') {
		tli_buf_puts(b,
		    it->type == TLI_CONF_ACTION || it->type == TLI_CONF_INCLUDE
		        ? "—"
		        : "none");
	} else {
		tli_buf_puts(b, "`");
		md(b, it->def);
		tli_buf_puts(b, "`");
	}
	tli_buf_puts(b, " | ");
	md_values(it, b);
	tli_buf_puts(b, " | ");
	md(b, it->doc != NULL ? it->doc : it->help);
	tli_buf_puts(b, " |\n");
}

int
tli_conf_markdown(const tli_conf_table *t, tli_buf *b)
{
	bool flags = has_flags(t);

	tli_buf_puts(b,
	    flags ? "| flag | file key | default | values | "
	            "meaning |\n| --- | --- | --- | --- | --- |\n"
	          : "| key | default | values | meaning |\n"
	            "| --- | --- | --- | --- |\n");
	if (t->section != NULL) {
		tli_buf_printf(b, "| `[%s NAME]` | — | — | ", t->section);
		md(b, t->section_doc != NULL ? t->section_doc : "");
		tli_buf_puts(b, " |\n");
	}
	for (size_t i = 0; i < t->nitems; i++) {
		md_row(&t->items[i], flags, b);
	}
	return b->oom ? TL_ENOMEM : TL_OK;
}
