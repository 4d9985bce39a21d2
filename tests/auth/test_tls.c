/*
 * The tls+tcp:// listener end to end: certificates are made at test time
 * with the openssl command (a CA, a broker certificate for "localhost"
 * signed by it, a second CA nobody trusts, client certificates from
 * each); the real broker serves TLS with them and auth on. A client that
 * trusts the CA gets in; a plain-tcp client, a client trusting another CA
 * and a client expecting another server name do not; with client
 * certificates required, only a certificate from the configured CA opens.
 */
#include "tltest.h"
#include "auth_util.h"

static void
start_tls(ab_broker *b, const char *tag, const char *client_auth)
{
	char extra[3000], creds[400];

	ab_init(b, tag);
	snprintf(creds, sizeof(creds),
	    "[principal app]\n"
	    "token_sha256 = %s\n"
	    "group = G\n"
	    "produce = t\n",
	    ab_hash("tok-app"));
	ab_write(b->creds, creds);
	snprintf(extra, sizeof(extra),
	    "listen = tls+tcp://127.0.0.1:0\n"
	    "metrics = off\n"
	    "auth = on\n"
	    "credentials = %s\n"
	    "tls_cert = %s\n"
	    "tls_key = %s\n"
	    "tls_ca = %s\n"
	    "tls_client_auth = %s\n",
	    b->creds, ab_cert.srv_cert, ab_cert.srv_key, ab_cert.ca,
	    client_auth);
	ab_config(b, extra);
	ab_spawn(b);
	cr_assert(strncmp(b->url, "tls+tcp://127.0.0.1:", 20) == 0, "bound %s",
	    b->url);
}

/* Put and read back one message over c. */
static void
roundtrip(tl_client *c, const char *id)
{
	tl_message *m = NULL;

	TL_PASS(tl_put_in(c, "t", "G", id, 60000, "over tls", 8, NULL));
	TL_PASS(tl_get(c, "t", id, &m));
	cr_assert_eq(m->body_len, 8);
	cr_assert(memcmp(m->body, "over tls", 8) == 0);
	tl_message_free(m);
}

TestSuite(tls, .timeout = 60);

Test(tls, the_listener_takes_only_clients_that_trust_it, .init = ab_make_certs,
    .fini = ab_drop_certs)
{
	ab_broker b;
	ab_tls good = {ab_cert.ca, "localhost", NULL, NULL};
	ab_tls untrusting = {ab_cert.other_ca, "localhost", NULL, NULL};
	ab_tls wrong_name = {ab_cert.ca, "not-the-broker.example", NULL, NULL};
	char plain[700];
	tl_client *c = NULL;
	int rv;

	start_tls(&b, "tls-listen", "none");
	rv = ab_open(b.url, "tok-app", &good, &c);
	TL_PASS(rv, "open over TLS");
	roundtrip(c, "m1");
	tl_client_close(c);

	/* Not trusting the broker's CA: refused by the client's check. */
	rv = ab_open(b.url, "tok-app", &untrusting, &c);
	TL_NOT_OK(rv, "a client trusting another CA got in");
	cr_assert_null(c);
	rv = ab_open(b.url, "tok-app", &wrong_name, &c);
	TL_NOT_OK(rv, "a client expecting another name got in");
	/* No CA at all: the SDK refuses to dial TLS unverified. */
	{
		ab_tls none = {NULL, NULL, NULL, NULL};
		TL_FAIL(ab_open(b.url, "tok-app", &none, &c), TL_EINVAL);
	}
	/* Plain tcp to the TLS port: no session. */
	snprintf(plain, sizeof(plain), "tcp://%.600s", b.url + 10);
	rv = ab_open(plain, "tok-app", NULL, &c);
	TL_NOT_OK(rv, "a plain tcp client got in");

	/* The broker is still serving; TLS does not replace the token. */
	TL_FAIL(ab_open(b.url, "wrong", &good, &c), TL_ENOTAUTH);
	rv = ab_open(b.url, "tok-app", &good, &c);
	TL_PASS(rv, "open after refusals");
	roundtrip(c, "m2");
	tl_client_close(c);
	ab_stop(&b);
}

Test(tls, client_certificates_when_required, .init = ab_make_certs,
    .fini = ab_drop_certs)
{
	ab_broker b;
	ab_tls with_cert = {
	    ab_cert.ca, "localhost", ab_cert.cli_cert, ab_cert.cli_key};
	ab_tls no_cert = {ab_cert.ca, "localhost", NULL, NULL};
	ab_tls foreign_cert = {
	    ab_cert.ca, "localhost", ab_cert.bad_cert, ab_cert.bad_key};
	tl_client *c = NULL;
	int rv;

	start_tls(&b, "tls-mtls", "required");
	rv = ab_open(b.url, "tok-app", &no_cert, &c);
	TL_NOT_OK(rv, "a client without a certificate got in");
	rv = ab_open(b.url, "tok-app", &foreign_cert, &c);
	TL_NOT_OK(rv, "a certificate of another CA got in");
	rv = ab_open(b.url, "tok-app", &with_cert, &c);
	TL_PASS(rv, "open with a client certificate");
	roundtrip(c, "m1");
	tl_client_close(c);
	ab_stop(&b);
}

Test(tls, bad_tls_settings_stop_the_broker_at_start)
{
	/* Each configuration (%s: the broker's directory), and what the
	 * broker says about it before it exits with 1. */
	static const struct {
		const char *conf, *says;
	} bad[] = {
	    {"listen = tls+tcp://127.0.0.1:0\nmetrics = off\n",
	        "needs tls_cert and tls_key"},
	    {"listen = tls+tcp://127.0.0.1:0\nmetrics = off\n"
	     "tls_cert = %1$s/missing.pem\ntls_key = %1$s/missing.key\n",
	        "cannot read tls_cert"},
	    {"auth = on\nmetrics = off\n", "auth = on needs credentials"},
	};
	ab_broker b;
	char extra[1000], *log;

	ab_init(&b, "tls-bad");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(extra, sizeof(extra), bad[i].conf, b.dir);
		ab_config(&b, extra);
		cr_assert_eq(ab_run_expect_exit(&b), 1);
		log = ab_read(b.proc.log);
		cr_assert_not_null(strstr(log, bad[i].says), "%s", log);
		free(log);
	}
	ab_stop(&b);
}
