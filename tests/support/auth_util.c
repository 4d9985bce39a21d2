/*
 * The authentication suites' broker, clients and certificates (see
 * auth_util.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "auth_util.h"
#include "sha256.h"
#include "testutil.h"
#include "tlcheck.h"

ab_certs ab_cert;

const char *
ab_hash(const char *token)
{
	static char hex[4][TLP_SHA256_HEX + 1];
	static int k;
	uint8_t d[TLP_SHA256_LEN];
	char *out = hex[k++ % 4];

	tlp_sha256(token, strlen(token), d);
	tlp_sha256_hex(d, out);
	return out;
}

void
ab_init(ab_broker *b, const char *tag)
{
	memset(b, 0, sizeof(*b));
	b->dir = tt_mkdtemp(tag);
	snprintf(b->creds, sizeof(b->creds), "%s/credentials", b->dir);
	tt_proc_init(&b->proc, tt_bin_timelined(), b->dir, "broker");
}

void
ab_config(ab_broker *b, const char *extra)
{
	tt_proc_conf_reset(&b->proc);
	tt_proc_set(&b->proc, "data", "%s/data", b->dir);
	tt_proc_set(&b->proc, "ready_file", "%s", b->proc.ready);
	tt_proc_set(&b->proc, "topic", "t");
	tt_proc_set(&b->proc, "log_level", "debug");
	tt_proc_conf_text(&b->proc, extra);
}

void
ab_spawn(ab_broker *b)
{
	tt_proc_start(&b->proc);
	snprintf(b->url, sizeof(b->url), "%s", b->proc.addr);
}

int
ab_run_expect_exit(ab_broker *b)
{
	b->proc.trunc_log = true;
	tt_proc_spawn(&b->proc);
	return tt_proc_wait_exit(&b->proc, b->proc.timeout_ms);
}

bool
ab_log_wait(const ab_broker *b, const char *what, int timeout_ms)
{
	return tt_proc_log_wait(&b->proc, what, timeout_ms);
}

void
ab_stop(ab_broker *b)
{
	int st = tt_proc_stop(&b->proc);

	tt_proc_fini(&b->proc);
	if (b->dir != NULL) {
		tt_rmtree(b->dir);
		free(b->dir);
		b->dir = NULL;
	}
	cr_assert_neq(st, -2, "the broker did not stop within 20 s of SIGTERM");
	cr_assert(st == -1 || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
	    "the broker did not exit cleanly (wait status %d)", st);
}

int
ab_open(const char *url, const char *token, const ab_tls *tls, tl_client **out)
{
	tl_opts *o = NULL;
	int rv;

	*out = NULL;
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, url));
	TL_PASS(tl_opts_set_name(o, "auth-test"));
	TL_PASS(tl_opts_set_timeout(o, 3000));
	TL_PASS(tl_opts_set_reconnect(o, 20, 200));
	TL_PASS(tl_opts_set_token(o, token));
	if (tls != NULL) {
		TL_PASS(tl_opts_set_tls_ca(o, tls->ca));
		TL_PASS(tl_opts_set_tls_server_name(o, tls->server_name));
		TL_PASS(tl_opts_set_tls_cert(o, tls->cert, tls->key));
	}
	rv = tl_client_open(out, o);
	tl_opts_free(o);
	return rv;
}

tl_client *
ab_client(const char *url, const char *token)
{
	tl_client *c;

	TL_PASS(ab_open(url, token, NULL, &c), "open %s with token %s", url,
	    token != NULL ? token : "(none)");
	return c;
}

void
ab_make_certs(void)
{
	ab_certs *k = &ab_cert;
	char cmd[4096];
	int rv;

	k->dir = tt_mkdtemp("tls");
	snprintf(cmd, sizeof(cmd),
	    "set -e; cd '%s'; exec >openssl.log 2>&1;"
	    "ec='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
	    "printf 'subjectAltName=DNS:localhost\\n' > san.ext;"
	    "openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2"
	    "  -subj /CN=timeline-test-ca;"
	    "openssl req -x509 $ec -keyout other.key -out other.pem -days 2"
	    "  -subj /CN=timeline-other-ca;"
	    "openssl req $ec -keyout srv.key -out srv.csr -subj /CN=localhost;"
	    "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key"
	    "  -CAcreateserial -out srv.pem -days 2 -extfile san.ext;"
	    "openssl req $ec -keyout cli.key -out cli.csr -subj /CN=client;"
	    "openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key"
	    "  -CAcreateserial -out cli.pem -days 2;"
	    "openssl req $ec -keyout bad.key -out bad.csr -subj /CN=client;"
	    "openssl x509 -req -in bad.csr -CA other.pem -CAkey other.key"
	    "  -CAcreateserial -out bad.pem -days 2",
	    k->dir);
	rv = system(cmd);
	cr_assert_eq(rv, 0,
	    "openssl failed (is it installed?); see %s/openssl.log", k->dir);
	snprintf(k->ca, sizeof(k->ca), "%s/ca.pem", k->dir);
	snprintf(k->other_ca, sizeof(k->other_ca), "%s/other.pem", k->dir);
	snprintf(k->srv_cert, sizeof(k->srv_cert), "%s/srv.pem", k->dir);
	snprintf(k->srv_key, sizeof(k->srv_key), "%s/srv.key", k->dir);
	snprintf(k->cli_cert, sizeof(k->cli_cert), "%s/cli.pem", k->dir);
	snprintf(k->cli_key, sizeof(k->cli_key), "%s/cli.key", k->dir);
	snprintf(k->bad_cert, sizeof(k->bad_cert), "%s/bad.pem", k->dir);
	snprintf(k->bad_key, sizeof(k->bad_key), "%s/bad.key", k->dir);
}

void
ab_drop_certs(void)
{
	tt_rmtree(ab_cert.dir);
	free(ab_cert.dir);
	ab_cert.dir = NULL;
}
