/*
 * The client's address behind trusted proxies (http/realip.c, used by the
 * gateway's throttles): the networks' syntax, IPv4 and IPv6 prefixes, and
 * the walk of X-Forwarded-For from the right, with the entries a client
 * may put in front; and the gateway's setting refused when it is not a
 * list of networks.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "msc4140.h"
#include "tlhttp.h"

static const char *
client(const char *nets, const char *peer, const char *xff)
{
	static char out[64];
	tlh_nets *ns = NULL;

	cr_assert_eq(tlh_nets_parse(nets, &ns), TL_OK, "%s", nets);
	tlh_client_addr(ns, peer, xff, out, sizeof(out));
	tlh_nets_free(ns);
	return out;
}

Test(gwrec_realip, networks)
{
	static const char *bad[] = {"10.0.0.1/33", "10.0.0", "::1/129",
	    "host.example", "10.0.0.1/", "10.0.0.1/x", "1.2.3.4,,", NULL};
	tlh_nets *ns = NULL;

	cr_assert_eq(tlh_nets_parse("", &ns), TL_OK);
	cr_assert(!tlh_nets_has(ns, "127.0.0.1"));
	tlh_nets_free(ns);
	cr_assert_eq(
	    tlh_nets_parse(" 10.1.0.0/16 ,127.0.0.1, fd00::/8", &ns), TL_OK);
	cr_assert(tlh_nets_has(ns, "10.1.255.3"));
	cr_assert(!tlh_nets_has(ns, "10.2.0.1"));
	cr_assert(tlh_nets_has(ns, "127.0.0.1"));
	cr_assert(!tlh_nets_has(ns, "127.0.0.2"));
	cr_assert(tlh_nets_has(ns, "fd12::1"));
	cr_assert(!tlh_nets_has(ns, "fe80::1"));
	cr_assert(!tlh_nets_has(ns, "not an address"));
	tlh_nets_free(ns);
	cr_assert_eq(tlh_nets_parse("10.0.0.0/9", &ns), TL_OK);
	cr_assert(tlh_nets_has(ns, "10.127.0.1"));
	cr_assert(!tlh_nets_has(ns, "10.128.0.1"));
	tlh_nets_free(ns);
	for (int i = 0; bad[i] != NULL; i++) {
		cr_assert_eq(
		    tlh_nets_parse(bad[i], &ns), TL_EINVAL, "%s", bad[i]);
	}
}

Test(gwrec_realip, the_walk_from_the_right)
{
	const char *t = "127.0.0.1, 10.1.0.0/16";

	/* an untrusted peer is the client, whatever it sends */
	cr_assert_str_eq(client(t, "192.0.2.7", "10.0.0.1"), "192.0.2.7");
	cr_assert_str_eq(client(t, "127.0.0.1", NULL), "127.0.0.1");
	cr_assert_str_eq(client(t, "127.0.0.1", "10.0.0.1"), "10.0.0.1");
	/* entries in front of the client's are the client's own words */
	cr_assert_str_eq(
	    client(t, "127.0.0.1", "6.6.6.6, 10.0.0.1, 10.1.9.9"), "10.0.0.1");
	/* all trusted: the furthest one */
	cr_assert_str_eq(client(t, "127.0.0.1", "10.1.0.5"), "10.1.0.5");
	cr_assert_str_eq(
	    client(t, "127.0.0.1", " 2001:db8::1 "), "2001:db8::1");
	cr_assert_str_eq(client(t, "127.0.0.1", ", ,10.0.0.3"), "10.0.0.3");
	cr_assert_str_eq(client(t, "127.0.0.1", ""), "127.0.0.1");
}

/* A bad trusted_proxies stops the gateway's start with one sentence. */
Test(gwrec_realip, a_bad_setting_is_refused)
{
	tlg_conf c;
	char err[512];

	tlg_conf_defaults(&c);
	snprintf(c.as_token, sizeof(c.as_token), "t");
	snprintf(c.trusted_proxies, sizeof(c.trusted_proxies), "10.0.0.0/8");
	cr_assert_eq(tlg_conf_verify(&c, err, sizeof(err)), 0, "%s", err);
	snprintf(c.trusted_proxies, sizeof(c.trusted_proxies),
	    "10.0.0.0/8, proxy.example");
	cr_assert_eq(tlg_conf_verify(&c, err, sizeof(err)), 1);
	cr_assert(strstr(err, "trusted_proxies") != NULL, "%s", err);
	cr_assert(strstr(err, "proxy.example") != NULL, "%s", err);
}
