/*
 * The one settings table and loader. A program declares each of its
 * settings once, in a table of tli_conf_item (file key, flags, type,
 * where it lives in the program's configuration struct, default, bounds,
 * help); the same table then reads "key = value" files (with optional
 * "[section NAME]" headers), reads the command line (flags win over the
 * files; a list given by flags replaces the files' list), writes the
 * --help text and writes the Markdown reference of the settings, so the
 * file, the flags, the usage and the docs cannot disagree. Model: redis's
 * `standardConfig static_configs[]`.
 *
 * Nothing here prints or exits: a failed load returns a TLI_CONF_E* code
 * and leaves one sentence in the caller's buffer that names the file, the
 * line and the setting ("broker.conf:12: window_ms must be a whole number
 * >= 1, not \"abc\""); the program's main prints it and picks the exit
 * status.
 */
#ifndef TL_BASE_CONF_H
#define TL_BASE_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"

/* Loader results. */
#define TLI_CONF_OK 0
#define TLI_CONF_EVALUE (-1)  /* a bad line or value (exit status 1) */
#define TLI_CONF_EUSAGE (-2)  /* an unknown flag or stray argument (2) */
#define TLI_CONF_EIO (-3)     /* a file cannot be read */
#define TLI_CONF_ENOMEM (-4)  /* out of memory (section objects) */
#define TLI_CONF_MAX_ITEMS 64 /* settings per table */

typedef enum {
	TLI_CONF_STR = 1, /* a NUL-terminated string in char[size] */
	TLI_CONF_INT,     /* an integer field of size 1, 2, 4 or 8, lo..hi */
	TLI_CONF_BOOL,    /* bool: on/off, yes/no, true/false, 1/0 */
	TLI_CONF_DOUBLE,  /* double, lo..hi (lo excluded when lo == 0) */
	TLI_CONF_ENUM,    /* an integer field: the index of the name */
	TLI_CONF_LIST,    /* char[max][size] and an int count: repeatable */
	TLI_CONF_FUNC,    /* the item's parse function does it all */
	TLI_CONF_INCLUDE, /* flag only: a file read before the other flags */
	TLI_CONF_ACTION,  /* flag only, no value: ends the load with action */
} tli_conf_type;

/* Item flags. */
#define TLI_CONF_OFF 0x1    /* the value "off" means 0 / the empty string */
#define TLI_CONF_REPEAT 0x2 /* a FUNC item that collects a list (docs) */

typedef struct tli_conf_item tli_conf_item;

/* Sets *it from text v in obj. Returns TLI_CONF_OK, or TLI_CONF_EVALUE
 * with a sentence in msg that starts with the setting's name (the loader
 * puts "FILE:LINE: " before it), or TLI_CONF_ENOMEM. */
typedef int (*tli_conf_parse_fn)(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap);

struct tli_conf_item {
	const char *name;  /* file key; NULL for a flag-only item */
	const char *alias; /* another file key accepted (older spelling) */
	const char *flag;  /* long flag without "--"; also accepted as key */
	char short_flag;   /* 'd' for -d, or 0 */
	tli_conf_type type;
	unsigned flags;   /* TLI_CONF_OFF, TLI_CONF_REPEAT */
	size_t off;       /* offset of the field in the struct */
	size_t size;      /* field size; for LIST the size of one entry */
	size_t count_off; /* LIST: offset of its int count */
	int max;          /* LIST: most entries (docs for REPEAT) */
	int64_t lo, hi;   /* INT bounds */
	double dlo, dhi;  /* DOUBLE bounds */
	const char *const *names; /* ENUM: value names, NULL-terminated */
	tli_conf_parse_fn parse;  /* FUNC */
	int action;               /* ACTION: the code the load reports */
	const char *def;          /* default as text, applied by the parser */
	const char *metavar;      /* "MS", "FILE"; "" for none */
	const char *help;         /* one line for --help */
	const char *doc;          /* Markdown for the reference, or NULL */
};

typedef struct tli_conf_table {
	const char *prog;        /* "timelined" */
	const char *usage;       /* lines after "usage: " in --help */
	const char *noun;        /* "setting" (unknown setting "x") or "key" */
	const char *section;     /* "principal": "[principal NAME]" headers */
	const char *section_doc; /* Markdown on the section header */
	/* A section starts: make its object (defaults are applied to it
	 * afterwards). ctx is the object given to the loader. Returns
	 * TLI_CONF_OK, TLI_CONF_EVALUE with msg, or TLI_CONF_ENOMEM. */
	int (*section_start)(
	    void *ctx, const char *name, void **obj, char *msg, size_t cap);
	const tli_conf_item *items;
	size_t nitems;
} tli_conf_table;

/* What a command line asked for besides settings. */
typedef struct tli_conf_cli {
	int action; /* an ACTION flag's code (the first given), or 0 */
	int nfiles; /* configuration files read */
} tli_conf_cli;

/* Helpers for tables: where field f of struct T is (designated, so they go
 * anywhere in an item's initializer); for a LIST, its array f and count n. */
#define TLI_CONF_FIELD(T, f) .off = offsetof(T, f), .size = sizeof(((T *) 0)->f)
#define TLI_CONF_LISTOF(T, f, n)                                \
	.off = offsetof(T, f), .size = sizeof(((T *) 0)->f[0]), \
	.count_off = offsetof(T, n),                            \
	.max = (int) (sizeof(((T *) 0)->f) / sizeof(((T *) 0)->f[0]))

/* Applies every default (lists excepted: see tli_conf_finish). Tables'
 * defaults are valid, so this cannot fail. */
void tli_conf_defaults(const tli_conf_table *t, void *obj);
/* Fills each empty list with its default. */
void tli_conf_finish(const tli_conf_table *t, void *obj);
/* One setting by file key (or flag name). On error msg has the reason. */
int tli_conf_set(const tli_conf_table *t, void *obj, const char *key,
    const char *value, char *msg, size_t cap);
/* Reads a file of "key = value" lines ('#' starts a comment; blank lines;
 * "[SECTION NAME]" headers when the table has sections, obj then being
 * the section_start context). On error msg names file, line, setting. */
int tli_conf_file(const tli_conf_table *t, void *obj, const char *path,
    char *msg, size_t cap);
/* The command line: first every INCLUDE file in order, then the other
 * flags in order (a LIST flag replaces the files' list), then
 * tli_conf_finish. An ACTION flag ends the flags with cli->action set.
 * "--flag value", "--flag=value", "-f value" and "-fvalue" work. */
int tli_conf_cmdline(const tli_conf_table *t, void *obj, int argc, char **argv,
    tli_conf_cli *cli, char *msg, size_t cap);

/* "usage: ..." and one line per flag. TL_OK or TL_ENOMEM. */
int tli_conf_help(const tli_conf_table *t, tli_buf *b);
/* tli_conf_help written to f (stdout for --help, stderr after a usage
 * error). */
void tli_conf_usage(const tli_conf_table *t, FILE *f);
/* The Markdown reference table of the settings. TL_OK or TL_ENOMEM. */
int tli_conf_markdown(const tli_conf_table *t, tli_buf *b);

#endif
