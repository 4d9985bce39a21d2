/*
 * matrix-js-sdk (from the npm registry, installed once into the build
 * directory, never into the source tree) drives the gateway through
 * jssdk_client.mjs: discovery, schedule, restart, send, cancel, list,
 * delayed state and the max-delay error, checked on the test homeserver.
 * matrix-js-sdk 43 declares node >= 22 but runs on node 20 (checked);
 * the test is skipped when no node >= 20 is installed.
 */
#include "tltest.h"
#include "gw_util.h"

#define JSSDK_VERSION "43.0.0"

static int
node_major(void)
{
	FILE *p = popen("node --version 2>/dev/null", "r");
	int major = 0;

	if (p == NULL) {
		return 0;
	}
	if (fscanf(p, "v%d", &major) != 1) {
		major = 0;
	}
	pclose(p);
	return major;
}

static int
run(const char *cmd, const char *log)
{
	char full[8192];
	int st;

	snprintf(full, sizeof(full), "%s > %s 2>&1", cmd, log);
	st = system(full);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
dump(const char *log)
{
	char *text = NULL;
	size_t n = 0;
	FILE *f = fopen(log, "r");

	if (f != NULL) {
		char buf[4096];
		size_t k;
		while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
			char *nt = realloc(text, n + k + 1);
			if (nt == NULL) {
				break;
			}
			text = nt;
			memcpy(text + n, buf, k);
			n += k;
			text[n] = '\0';
		}
		fclose(f);
	}
	fprintf(stderr, "%s\n", text ? text : "(no output)");
	free(text);
}

Test(jssdk, schedule_restart_send_cancel, .timeout = 300)
{
	char dir[600], mod[700], cmd[4096], log[700];
	gw_env e;
	int rv;

	if (node_major() < 20) {
		cr_skip_test("node >= 20 is not installed");
	}
	snprintf(dir, sizeof(dir), "%s/jssdk", TL_TEST_BINDIR);
	snprintf(mod, sizeof(mod), "%s/node_modules/matrix-js-sdk/package.json",
	    dir);
	snprintf(log, sizeof(log), "%s/npm.log", dir);
	mkdir(dir, 0755);
	if (access(mod, R_OK) != 0) {
		snprintf(cmd, sizeof(cmd),
		    "cd '%s' && (test -f package.json || echo "
		    "'{\"name\":\"gw-jssdk-test\",\"private\":true}' > "
		    "package.json) && npm install --no-audit --no-fund "
		    "--loglevel=error matrix-js-sdk@" JSSDK_VERSION,
		    dir);
		rv = run(cmd, log);
		if (rv != 0) {
			dump(log);
		}
		cr_assert_eq(rv, 0, "npm install matrix-js-sdk failed");
	}
	gw_start(&e, "gw-jssdk", false, NULL);
	/* ES modules resolve node_modules next to the script: run a copy */
	snprintf(cmd, sizeof(cmd),
	    "cp '%s/tests/msc4140/jssdk_client.mjs' '%s/' && cd '%s' && "
	    "node jssdk_client.mjs '%s' '%s'",
	    TL_TEST_SRCDIR, dir, dir, e.gw, e.hs);
	snprintf(log, sizeof(log), "%s/jssdk.log", e.dir);
	rv = run(cmd, log);
	if (rv != 0) {
		dump(log);
	}
	cr_assert_eq(rv, 0, "the matrix-js-sdk client reported failures");
	gw_stop(&e);
}
