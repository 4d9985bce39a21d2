/*
 * Certificates for the TLS suites, made at test time with the openssl
 * command in a private temporary directory: a CA, a broker certificate for
 * "localhost" signed by it, a second CA nobody trusts, and a client
 * certificate from each CA (EC P-256 keys, valid two days).
 */
#ifndef TL_TESTS_AUTH_CERTS_H
#define TL_TESTS_AUTH_CERTS_H

#include "auth_util.h"

static char *cert_dir;
static char ca[600], other_ca[600], srv_cert[600], srv_key[600];
static char cli_cert[600], cli_key[600], bad_cert[600], bad_key[600];

static void
ab_make_certs(void)
{
	char cmd[4096];
	int rv;

	cert_dir = tt_mkdtemp("tls");
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
	    cert_dir);
	rv = system(cmd);
	cr_assert_eq(rv, 0,
	    "openssl failed (is it installed?); see %s/openssl.log", cert_dir);
	snprintf(ca, sizeof(ca), "%s/ca.pem", cert_dir);
	snprintf(other_ca, sizeof(other_ca), "%s/other.pem", cert_dir);
	snprintf(srv_cert, sizeof(srv_cert), "%s/srv.pem", cert_dir);
	snprintf(srv_key, sizeof(srv_key), "%s/srv.key", cert_dir);
	snprintf(cli_cert, sizeof(cli_cert), "%s/cli.pem", cert_dir);
	snprintf(cli_key, sizeof(cli_key), "%s/cli.key", cert_dir);
	snprintf(bad_cert, sizeof(bad_cert), "%s/bad.pem", cert_dir);
	snprintf(bad_key, sizeof(bad_key), "%s/bad.key", cert_dir);
}

static void
ab_drop_certs(void)
{
	tt_rmtree(cert_dir);
	free(cert_dir);
}

#endif
