/*
 * The logger (base/log.h): a message carrying control bytes, as a client
 * name or a topic can, stays on one line with every control byte and the
 * backslash escaped, so nothing a client sends can forge a log line.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Runs tli_log with the message "%s" of s and returns what it wrote to
 * stderr (a temporary file stands in for it). */
static char *
log_capture(const char *s)
{
	FILE *f = tmpfile();
	int saved;
	long n;
	char *out;

	cr_assert_not_null(f);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	cr_assert(saved >= 0);
	cr_assert(dup2(fileno(f), STDERR_FILENO) >= 0);
	tli_log("timelined", TLI_LOG_ERROR, "X001", "name %s end", s);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = ftell(f);
	cr_assert(n > 0);
	out = calloc(1, (size_t) n + 1);
	cr_assert_not_null(out);
	rewind(f);
	cr_assert_eq(fread(out, 1, (size_t) n, f), (size_t) n);
	fclose(f);
	return out;
}

/* The text after "STAMP timelined error X001 ", checking the prefix and
 * that the line is the only one. */
static const char *
log_text(const char *line)
{
	const char *nl = strchr(line, '\n');

	cr_assert_not_null(nl, "no newline in %s", line);
	cr_assert_eq(nl[1], '\0', "more than one line: %s", line);
	cr_assert_eq(strlen(line) > 42 && line[4] == '-' && line[19] == 'Z',
	    true, "no stamp: %s", line);
	cr_assert_eq(
	    strncmp(line + 21, "timelined error X001 ", 21), 0, "%s", line);
	return line + 42;
}

Test(log, forged_line_stays_on_its_line)
{
	char *out = log_capture(
	    "bob\n2026-01-01T00:00:00Z timelined error B001 forged");

	cr_assert_str_eq(log_text(out),
	    "name bob\\n2026-01-01T00:00:00Z timelined error B001 forged "
	    "end\n");
	free(out);
}

Test(log, every_control_byte_and_backslash_escaped)
{
	char *out = log_capture("a\rb\tc\\d\x01"
	                        "e\x1b[31mf\x7fg\x1fh");

	cr_assert_str_eq(log_text(out),
	    "name a\\rb\\tc\\\\d\\x01e\\x1b[31mf\\x7fg\\x1fh end\n");
	free(out);
}

Test(log, plain_text_and_utf8_unchanged)
{
	char *out = log_capture("topic-1 caf\xc3\xa9 \"quoted\" 100%");

	cr_assert_str_eq(
	    log_text(out), "name topic-1 caf\xc3\xa9 \"quoted\" 100% end\n");
	free(out);
}
