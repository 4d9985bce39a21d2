/*
 * tlctl against a broker with auth on and a TLS listener: --token,
 * --tls-ca and --tls-server-name reach the session (the tlctl binary of
 * the build is run as a user would); without the token or the CA it fails
 * with exit code 1 and a sentence that says what to pass.
 */
#include "tltest.h"

#include <stdarg.h>
#include "auth_util.h"

/* Run a shell command; its stdout+stderr into *out (malloc'd). Returns
 * the exit code. */
static int
sh(char **out, const char *cmd)
{
	char full[4096], buf[1024];
	size_t n = 0, cap = 1;
	FILE *p;
	int st;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	p = popen(full, "r");
	cr_assert_not_null(p);
	*out = calloc(1, 1);
	while (fgets(buf, sizeof(buf), p) != NULL) {
		size_t k = strlen(buf);
		cap = n + k + 1;
		*out = realloc(*out, cap);
		memcpy(*out + n, buf, k + 1);
		n += k;
	}
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TestSuite(tlctl_auth, .timeout = 60);

/* Run cmd: it must exit with `code` and print each of the strings that
 * follow (up to a NULL). */
static void
sh_expect(const char *cmd, int code, ...)
{
	const char *want;
	va_list ap;
	char *o;
	int rc = sh(&o, cmd);

	cr_assert_eq(rc, code, "%s", o);
	va_start(ap, code);
	while ((want = va_arg(ap, const char *)) != NULL) {
		cr_assert_not_null(strstr(o, want), "%s", o);
	}
	va_end(ap);
	free(o);
}

Test(tlctl_auth, token_and_tls_options, .init = ab_make_certs,
    .fini = ab_drop_certs)
{
	ab_broker b;
	char extra[3000], creds[400], cmd[3000], tlctl[1024];

	ab_init(&b, "tlctl-auth");
	snprintf(creds, sizeof(creds),
	    "[principal ops]\ntoken_sha256 = %s\nadmin = yes\n"
	    "group = g\nproduce = *\n",
	    ab_hash("s3cret"));
	ab_write(b.creds, creds);
	snprintf(extra, sizeof(extra),
	    "listen = tls+tcp://127.0.0.1:0\nmetrics = off\nauth = on\n"
	    "credentials = %s\ntls_cert = %s\ntls_key = %s\n",
	    b.creds, ab_cert.srv_cert, ab_cert.srv_key);
	ab_config(&b, extra);
	ab_spawn(&b);
	snprintf(tlctl, sizeof(tlctl), "%s/sdk/tlctl", TL_TEST_BINDIR);

	snprintf(cmd, sizeof(cmd),
	    "TIMELINE_TOKEN= TIMELINE_TLS_CA= %s --url %s --token s3cret "
	    "--tls-ca %s --tls-server-name localhost topic create t2",
	    tlctl, b.url, ab_cert.ca);
	sh_expect(cmd, 0, NULL);
	/* The token from the environment works the same. */
	snprintf(cmd, sizeof(cmd),
	    "TIMELINE_TOKEN=s3cret TIMELINE_TLS_CA=%s %s --url %s "
	    "--tls-server-name localhost put t2 hello --in 1h --group g",
	    ab_cert.ca, tlctl, b.url);
	sh_expect(cmd, 0, "due", NULL);

	snprintf(cmd, sizeof(cmd),
	    "TIMELINE_TOKEN= %s --url %s --tls-ca %s --tls-server-name "
	    "localhost topic list",
	    tlctl, b.url, ab_cert.ca);
	sh_expect(cmd, 1, "not authorised", "--token", NULL);

	snprintf(cmd, sizeof(cmd),
	    "TIMELINE_TOKEN= TIMELINE_TLS_CA= %s --url %s --token s3cret "
	    "topic list",
	    tlctl, b.url);
	sh_expect(cmd, 1, NULL);
	ab_stop(&b);
}
