/*
 * The standalone tl-chronos's command line: its usage, and clear errors
 * (exit 1) for bad settings and an unreachable broker.
 */
#include "tltest.h"
#include "chronos_util.h"

static int
run_k(const char *dir, const char *conf_text, const char *args, char *out,
    size_t cap)
{
	return tt_run_conf(
	    tt_bin_chronos(), dir, "k.conf", conf_text, args, out, cap);
}

Test(cli, usage_and_bad_settings)
{
	char *dir = tt_mkdtemp("ck-cli"), out[8192];

	cr_assert_eq(run_k(dir, "", "--help", out, sizeof(out)), 0, "%s", out);
	cr_expect(strstr(out, "--url") != NULL, "%s", out);
	cr_expect(strstr(out, "--listen") != NULL, "%s", out);
	cr_expect_eq(run_k(dir, "frobnicate = 1\n", "", out, sizeof(out)), 1);
	cr_expect(
	    strstr(out, "unknown setting \"frobnicate\"") != NULL, "%s", out);
	cr_expect_eq(
	    run_k(dir, "workers = 0\n", "", out, sizeof(out)), 1, "%s", out);
	cr_expect(strstr(out, "workers must be") != NULL, "%s", out);
	cr_expect_eq(run_k(dir, "retry_min_ms = 5000\nretry_max_ms = 100\n", "",
	                 out, sizeof(out)),
	    1);
	cr_expect(
	    strstr(out, "retry_min_ms must not exceed") != NULL, "%s", out);
	cr_expect_eq(run_k(dir, "", "--bogus", out, sizeof(out)), 2);
	cr_expect_eq(run_k(dir, "listen = 127.0.0.1:0\n",
	                 "--url ipc:///nonexistent/tl.sock", out, sizeof(out)),
	    1);
	cr_expect(strstr(out, "cannot reach the broker") != NULL, "%s", out);
	tt_rmtree(dir);
	free(dir);
}

Test(cli, timelined_stops_when_its_chronos_cannot_start)
{
	char *dir = tt_mkdtemp("ck-cli-tl"), cmd[2048], out[8192];
	FILE *p;
	size_t n;
	int st;

	/* a setting the service refuses: the broker logs why and stops */
	snprintf(cmd, sizeof(cmd), "%s/k.conf", dir);
	tt_write_file(cmd, "workers = 0\n");
	snprintf(cmd, sizeof(cmd),
	    "%s --data %s/data --listen ipc://%s/tl.sock --metrics off "
	    "--chronos %s/k.conf 2>&1",
	    tt_bin_timelined(), dir, dir, dir);
	p = popen(cmd, "r");
	cr_assert(p != NULL);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	st = pclose(p);
	cr_expect(
	    WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, out);
	cr_expect(strstr(out, "C006") != NULL, "%s", out);
	cr_expect(strstr(out, "workers must be") != NULL, "%s", out);
	cr_expect(strstr(out, "B012") != NULL, "%s", out);
	cr_expect(strstr(out, "Sanitizer") == NULL, "%s", out);
	tt_rmtree(dir);
	free(dir);
}
