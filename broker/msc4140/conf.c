/*
 * The gateway's settings table (msc4140.h): every setting once, with its
 * default (Synapse-like limits), bounds and help, read by the one loader
 * of base/conf.h; the checks of what the gateway cannot run without; and
 * the appservice registration the homeserver loads. docs/msc4140.md's
 * CONFIGURATION table is generated from the table (gen_settings_md).
 */
#include <stdio.h>
#include <string.h>

#include "gw.h"

#define F(f) TLI_CONF_FIELD(tlg_conf, f)
#define WEEKS_52 (TL_MAX_LEASE_MS * 52)

static const char *const exceeded_names[] = {"400", "forbidden", NULL};
static const char *const as_check_names[] = {"exit", "retry", NULL};

static const tli_conf_item items[] = {
#include "conf.def"
};

#undef F
#undef WEEKS_52

const tli_conf_table tlg_conf_table = {
    .prog = "tl-msc4140",
    .usage = "tl-msc4140 -c FILE [--broker URL] [--listen HOST:PORT]\n"
             "       tl-msc4140 -c FILE --print-registration",
    .noun = "setting",
    .items = items,
    .nitems = sizeof(items) / sizeof(items[0]),
};

void
tlg_conf_defaults(tlg_conf *c)
{
	memset(c, 0, sizeof(*c));
	tli_conf_defaults(&tlg_conf_table, c);
}

int
tlg_conf_read(tlg_conf *c, const char *path, char *err, size_t cap)
{
	return tli_conf_file(&tlg_conf_table, c, path, err, cap) == TLI_CONF_OK
	    ? 0
	    : 1;
}

static int
proxies_verify(const tlg_conf *c, char *err, size_t cap)
{
	tlh_nets *ns = NULL;

	if (tlh_nets_parse(c->trusted_proxies, &ns) != TL_OK) {
		snprintf(err, cap,
		    "trusted_proxies must be addresses or networks "
		    "(ADDR[/BITS], comma-separated), not \"%s\"",
		    c->trusted_proxies);
		return 1;
	}
	tlh_nets_free(ns);
	return 0;
}

int
tlg_conf_verify(const tlg_conf *c, char *err, size_t cap)
{
	if (c->as_token[0] == '\0') {
		snprintf(err, cap,
		    "as_token is required (the appservice token that sends "
		    "the events)");
		return 1;
	}
	if (strncmp(c->homeserver, "http://", 7) != 0 &&
	    strncmp(c->homeserver, "https://", 8) != 0) {
		snprintf(
		    err, cap, "homeserver must be an http:// or https:// URL");
		return 1;
	}
	if (strrchr(c->listen, ':') == NULL) {
		snprintf(err, cap, "listen must be HOST:PORT");
		return 1;
	}
	return proxies_verify(c, err, cap);
}

int
tlg_conf_file(tlg_conf *c, const char *path)
{
	char err[1024];

	if (tlg_conf_read(c, path, err, sizeof(err)) != 0) {
		fprintf(stderr, "tl-msc4140: %s\n", err);
		return 1;
	}
	return 0;
}

int
tlg_conf_check(const tlg_conf *c)
{
	char err[256];

	if (tlg_conf_verify(c, err, sizeof(err)) != 0) {
		fprintf(stderr, "tl-msc4140: %s\n", err);
		return 1;
	}
	return 0;
}

void
tlg_print_registration(const tlg_conf *c, FILE *f)
{
	fprintf(f,
	    "# Appservice registration for the MSC4140 gateway. The gateway\n"
	    "# sends delayed events as their users (user_id masquerading), so\n"
	    "# it claims every local user without being exclusive.\n"
	    "id: \"%s\"\n"
	    "url: null\n"
	    "as_token: \"%s\"\n"
	    "hs_token: \"%s\"\n"
	    "sender_localpart: \"%s\"\n"
	    "rate_limited: false\n"
	    "namespaces:\n"
	    "  users:\n"
	    "    - exclusive: false\n"
	    "      regex: \"@.*\"\n"
	    "  rooms: []\n"
	    "  aliases: []\n",
	    c->as_id, c->as_token,
	    c->hs_token[0] ? c->hs_token : "CHANGE-ME-unused-by-the-gateway",
	    c->sender);
}
