/*
 * The standalone tl-msc4140 program's command line: the registration it
 * prints for the homeserver, and clear errors for bad configurations.
 */
#include "tltest.h"
#include "gw_util.h"

static int
run_gw(const char *dir, const char *conf_text, const char *args, char *out,
    size_t cap)
{
	return tt_run_conf(
	    tt_bin_msc4140(), dir, "gw.conf", conf_text, args, out, cap);
}

Test(cli, prints_the_registration)
{
	char *dir = tt_mkdtemp("gw-cli"), out[4096];
	int rv = run_gw(dir,
	    "as_token = secret-as\nhs_token = secret-hs\n"
	    "sender_localpart = delayer\n",
	    "--print-registration", out, sizeof(out));

	cr_assert_eq(rv, 0, "%s", out);
	cr_assert(strstr(out, "as_token: \"secret-as\"") != NULL, "%s", out);
	cr_assert(strstr(out, "hs_token: \"secret-hs\"") != NULL, "%s", out);
	cr_assert(
	    strstr(out, "sender_localpart: \"delayer\"") != NULL, "%s", out);
	cr_assert(strstr(out, "exclusive: false") != NULL, "%s", out);
	cr_assert(strstr(out, "url: null") != NULL, "%s", out);
	tt_rmtree(dir);
	free(dir);
}

Test(cli, bad_configurations_are_refused)
{
	char *dir = tt_mkdtemp("gw-cli"), out[4096];

	cr_assert_eq(
	    run_gw(dir, "as_token = x\nfrobnicate = 1\n", "", out, sizeof(out)),
	    1);
	cr_assert(
	    strstr(out, "unknown setting \"frobnicate\"") != NULL, "%s", out);
	cr_assert_eq(run_gw(dir, "as_token = x\nmax_delay_ms = -5\n", "", out,
	                 sizeof(out)),
	    1);
	cr_assert(strstr(out, "max_delay_ms must be") != NULL, "%s", out);
	cr_assert_eq(run_gw(dir, "homeserver = ftp://x\nas_token = x\n", "",
	                 out, sizeof(out)),
	    1);
	cr_assert(strstr(out, "homeserver must be") != NULL, "%s", out);
	cr_assert_eq(
	    run_gw(dir, "listen = 127.0.0.1:0\n", "", out, sizeof(out)), 1);
	cr_assert(strstr(out, "as_token is required") != NULL, "%s", out);
	cr_assert_eq(
	    run_gw(dir, "as_token = x\n", "--bogus", out, sizeof(out)), 2);
	/* no broker there: a clear error, exit 1 */
	cr_assert_eq(run_gw(dir,
	                 "as_token = x\nlisten = 127.0.0.1:0\n"
	                 "broker = ipc:///nonexistent/tl.sock\n",
	                 "", out, sizeof(out)),
	    1);
	cr_assert(strstr(out, "cannot reach the broker") != NULL, "%s", out);
	tt_rmtree(dir);
	free(dir);
}
