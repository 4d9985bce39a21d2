/*
 * tlctl: its time and duration syntax, and end to end against the real
 * broker — put --in then consume, exit codes 0 / 1 / 2 and one-sentence
 * errors. The command logic is compiled in from sdk/tlctl/tlctl.c; the
 * installed binary is run too.
 */
#include "tltest.h"
#include "sdk_util.h"

#include "tlctl.h"

Test(tlctl_syntax, durations)
{
	int64_t ms = -1;

	cr_assert_eq(tlctl_parse_duration("300ms", &ms), 0);
	cr_assert_eq(ms, 300);
	cr_assert_eq(tlctl_parse_duration("5s", &ms), 0);
	cr_assert_eq(ms, 5000);
	cr_assert_eq(tlctl_parse_duration("2m", &ms), 0);
	cr_assert_eq(ms, 120000);
	cr_assert_eq(tlctl_parse_duration("1h", &ms), 0);
	cr_assert_eq(ms, 3600000);
	cr_assert_eq(tlctl_parse_duration("42", &ms), 0);
	cr_assert_eq(ms, 42);
	cr_assert_eq(tlctl_parse_duration("5x", &ms), -1);
	cr_assert_eq(tlctl_parse_duration("-5s", &ms), -1);
	cr_assert_eq(tlctl_parse_duration("", &ms), -1);
}

Test(tlctl_syntax, times)
{
	int64_t ms = -1;
	char buf[40];

	cr_assert_eq(tlctl_parse_time("2026-11-22T10:00:00Z", &ms), 0);
	cr_assert_eq(ms, INT64_C(1795341600000));
	cr_assert_eq(tlctl_parse_time("2026-11-22T10:00:00.250Z", &ms), 0);
	cr_assert_eq(ms, INT64_C(1795341600250));
	cr_assert_eq(tlctl_parse_time("2026-11-22T12:00:00+02:00", &ms), 0);
	cr_assert_eq(ms, INT64_C(1795341600000));
	cr_assert_eq(tlctl_parse_time("1795341600000", &ms), 0);
	cr_assert_eq(ms, INT64_C(1795341600000));
	cr_assert_eq(tlctl_parse_time("2026-11-22T10:00:00", &ms), -1);
	cr_assert_eq(tlctl_parse_time("2026-13-22T10:00:00Z", &ms), -1);
	cr_assert_eq(tlctl_parse_time("tomorrow", &ms), -1);
	tlctl_format_time(INT64_C(1795341600250), buf, sizeof(buf));
	cr_assert_str_eq(buf, "2026-11-22T10:00:00.250Z");
}

/* Run tlctl_main in this process; out and err are captured. */
static int
run(char **out, char **err, const char *const *argv)
{
	size_t on = 0, en = 0;
	FILE *o = open_memstream(out, &on);
	FILE *e = open_memstream(err, &en);
	int argc = 0, rv;

	while (argv[argc] != NULL) {
		argc++;
	}
	rv = tlctl_main(argc, (char **) argv, o, e);
	fclose(o);
	fclose(e);
	return rv;
}

Test(tlctl_syntax, usage_errors_exit_2)
{
	char *o = NULL, *e = NULL;
	const char *a1[] = {"tlctl", NULL};
	const char *a2[] = {"tlctl", "put", "default", "x", NULL};
	const char *a3[] = {
	    "tlctl", "put", "default", "x", "--in", "soon", NULL};
	const char *a4[] = {"tlctl", "frobnicate", NULL};
	const char *a5[] = {
	    "tlctl", "get", "default", "x", "--limit", "3", NULL};

	cr_assert_eq(run(&o, &e, a1), TLCTL_USAGE);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, a2), TLCTL_USAGE);
	cr_assert(strstr(e, "--at") != NULL, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, a3), TLCTL_USAGE);
	cr_assert(strstr(e, "duration") != NULL, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, a4), TLCTL_USAGE);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, a5), TLCTL_USAGE);
	free(o), free(e);
}

static sb_broker B;

static void
teardown(void)
{
	sb_stop(&B);
}

TestSuite(tlctl, .fini = teardown, .timeout = 60);

Test(tlctl, put_in_then_consume)
{
	char *o = NULL, *e = NULL;
	char id[TL_MAX_ID_LEN + 1] = "";

	sb_start(&B, "sdk-ctl");
	const char *put[] = {"tlctl", "--url", B.url, "put", "default",
	    "hello world", "--in", "300ms", NULL};
	const char *consume[] = {"tlctl", "--url", B.url, "consume", "default",
	    "--count", "1", "--timeout", "10s", NULL};
	const char *count[] = {
	    "tlctl", "--url", B.url, "count", "default", NULL};

	cr_assert_eq(run(&o, &e, put), TLCTL_OK, "%s", e);
	cr_assert_eq(sscanf(o, "%128s due", id), 1, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, consume), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, id) != NULL, "output: %s", o);
	cr_assert(strstr(o, "hello world") != NULL, "output: %s", o);
	cr_assert(strstr(o, "late ") != NULL, "output: %s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, count), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "available: 0\nwaiting: 0\nprocessing: 0") != NULL,
	    "consume deleted the message: %s", o);
	free(o), free(e);
}

Test(tlctl, commands_and_binary_exit_codes)
{
	char *o = NULL, *e = NULL;
	char cmd[2048], line[1024], all[8192] = "";
	FILE *p;
	int st;

	sb_start(&B, "sdk-ctl2");
	const char *mk[] = {"tlctl", "--url", B.url, "topic", "create", "t2",
	    "--buckets", "4", "--lease", "5s", NULL};
	const char *stats[] = {
	    "tlctl", "--url", B.url, "topic", "stats", "t2", NULL};
	const char *put[] = {"tlctl", "--url", B.url, "put", "t2", "b", "--at",
	    "2099-01-01T00:00:00Z", "--id", "x1", "--group", "g", NULL};
	const char *list[] = {
	    "tlctl", "--url", B.url, "list", "t2", "--group", "g", NULL};
	const char *get[] = {"tlctl", "--url", B.url, "get", "t2", "x1", NULL};
	const char *mv[] = {"tlctl", "--url", B.url, "move", "t2", "x1", "--in",
	    "1h", "--group", "g", NULL};
	const char *del[] = {"tlctl", "--url", B.url, "delete", "t2", "x1",
	    "--group", "g", NULL};
	const char *dlq[] = {
	    "tlctl", "--url", B.url, "dlq", "list", "t2", NULL};

	cr_assert_eq(run(&o, &e, mk), TLCTL_OK, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, stats), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "buckets: 4") != NULL, "%s", o);
	cr_assert(strstr(o, "default_lease_ms: 5000") != NULL, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, put), TLCTL_OK, "%s", e);
	cr_assert(
	    strncmp(o, "x1 due 2099-01-01T00:00:00.000Z", 31) == 0, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, list), TLCTL_OK, "%s", e);
	cr_assert(strncmp(o, "x1\t2099-01-01T00:00:00.000Z", 27) == 0, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, get), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "owner: g\n") != NULL, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, mv), TLCTL_OK, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, del), TLCTL_OK, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, del), TLCTL_FAILED);
	cr_assert(
	    strstr(e, "message not found (TL_ENOTFOUND)") != NULL, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, dlq), TLCTL_OK, "%s", e);
	free(o), free(e);

	/* the installed binary: a failed operation exits 1 with one sentence */
	snprintf(cmd, sizeof(cmd),
	    "%s/sdk/tlctl --url %s put nosuch x --in 1s "
	    "2>&1",
	    TL_TEST_BINDIR, B.url);
	cr_assert_not_null(p = popen(cmd, "r"));
	while (fgets(line, sizeof(line), p) != NULL) {
		strncat(all, line, sizeof(all) - strlen(all) - 1);
	}
	st = pclose(p);
	cr_assert(
	    WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, all);
	cr_assert(
	    strstr(all, "unknown topic (TL_ENOTOPIC)") != NULL, "%s", all);
	snprintf(cmd, sizeof(cmd),
	    "%s/sdk/tlctl --url ipc:///nonexistent/x.sock "
	    "topic list >/dev/null 2>&1",
	    TL_TEST_BINDIR);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	snprintf(cmd, sizeof(cmd), "%s/sdk/tlctl put >/dev/null 2>&1",
	    TL_TEST_BINDIR);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
}

Test(tlctl_syntax, a_recurrence_needs_an_interval_and_one_end)
{
	char *o = NULL, *e = NULL;
	const char *open_ended[] = {"tlctl", "put", "default", "x", "--in",
	    "1s", "--every", "5m", NULL};
	const char *two_ends[] = {"tlctl", "put", "default", "x", "--in", "1s",
	    "--every", "5m", "--for", "1h", "--times", "3", NULL};
	const char *no_every[] = {
	    "tlctl", "put", "default", "x", "--in", "1s", "--times", "3", NULL};
	const char *zero[] = {"tlctl", "put", "default", "x", "--in", "1s",
	    "--every", "0s", "--times", "3", NULL};

	cr_assert_eq(run(&o, &e, open_ended), TLCTL_USAGE);
	cr_assert(strstr(e, "open-ended") != NULL, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, two_ends), TLCTL_USAGE);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, no_every), TLCTL_USAGE);
	cr_assert(strstr(e, "need --every") != NULL, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, zero), TLCTL_USAGE);
	free(o), free(e);
}

Test(tlctl, put_every_for_and_times_shown_by_get)
{
	char *o = NULL, *e = NULL;

	sb_start(&B, "sdk-ctl3");
	const char *put1[] = {"tlctl", "--url", B.url, "put", "default", "b",
	    "--in", "1h", "--id", "r1", "--every", "5m", "--for", "1h", NULL};
	const char *put2[] = {"tlctl", "--url", B.url, "put", "default", "b",
	    "--in", "1h", "--id", "r2", "--every", "10s", "--times", "4",
	    "--catch-up", NULL};
	const char *get1[] = {
	    "tlctl", "--url", B.url, "get", "default", "r1", NULL};
	const char *get2[] = {
	    "tlctl", "--url", B.url, "get", "default", "r2", NULL};

	cr_assert_eq(run(&o, &e, put1), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "every 300000 ms, 13 times") != NULL, "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, put2), TLCTL_OK, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, get1), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "every: 300000 ms\n") != NULL, "%s", o);
	cr_assert(
	    strstr(o, "occurrence: 1 of 13\ncatch_up: no\nbody: b\n") != NULL,
	    "%s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, get2), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "every: 10000 ms\n") != NULL, "%s", o);
	cr_assert(
	    strstr(o, "occurrence: 1 of 4\ncatch_up: yes\n") != NULL, "%s", o);
	free(o), free(e);
}

/* --url takes a cluster's list: a dead first node is skipped. */
Test(tlctl, url_list_skips_a_dead_node)
{
	char *o = NULL, *e = NULL;
	char urls[1400];

	sb_start(&B, "sdk-ctl-list");
	snprintf(urls, sizeof(urls), "ipc://%s/dead.sock,%s", B.dir, B.url);
	const char *put[] = {"tlctl", "--url", urls, "put", "default", "x",
	    "--in", "1h", "--id", "via-list", NULL};
	const char *get[] = {
	    "tlctl", "--url", urls, "get", "default", "via-list", NULL};
	const char *bad[] = {
	    "tlctl", "--url", "tcp://127.0.0.1:1,,", "count", "default", NULL};

	cr_assert_eq(run(&o, &e, put), TLCTL_OK, "%s", e);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, get), TLCTL_OK, "%s", e);
	cr_assert(strstr(o, "via-list") != NULL, "output: %s", o);
	free(o), free(e);
	cr_assert_eq(run(&o, &e, bad), TLCTL_USAGE);
	cr_assert(strstr(e, "comma-separated") != NULL, "%s", e);
	free(o), free(e);
}
