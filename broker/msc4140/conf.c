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

static const tli_conf_item items[] = {
    {.flag = "config",
        .short_flag = 'c',
        .type = TLI_CONF_INCLUDE,
        .metavar = "FILE",
        .help = "the gateway's settings (required)",
        .doc = "The gateway's configuration file (required). Flags given "
               "with it override the file."},
    {.name = "listen",
        .flag = "listen",
        .type = TLI_CONF_STR,
        F(listen),
        .def = "127.0.0.1:8009",
        .metavar = "HOST:PORT",
        .help = "the HTTP address",
        .doc = "HTTP address, `HOST:PORT` (`[::1]:PORT` for IPv6; port 0 "
               "picks one, see `ready_file`)."},
    {.name = "homeserver",
        .type = TLI_CONF_STR,
        F(homeserver),
        .def = "http://127.0.0.1:8008",
        .metavar = "URL",
        .help = "the homeserver's client-server API base URL"},
    {.name = "as_token",
        .type = TLI_CONF_STR,
        F(as_token),
        .help = "the appservice token the gateway sends events with "
                "(required)"},
    {.name = "hs_token",
        .type = TLI_CONF_STR,
        F(hs_token),
        .help = "only for the printed registration"},
    {.name = "appservice_id",
        .type = TLI_CONF_STR,
        F(as_id),
        .def = "msc4140-gateway",
        .help = "the registration's id (printed registration only)"},
    {.name = "sender_localpart",
        .type = TLI_CONF_STR,
        F(sender),
        .def = "msc4140-gateway",
        .help = "the registration's sender_localpart (printed "
                "registration only)"},
    {.name = "broker",
        .flag = "broker",
        .type = TLI_CONF_STR,
        F(broker),
        .def = "tcp://127.0.0.1:7400",
        .metavar = "URL",
        .help = "the Timeline broker",
        .doc = "The broker (standalone; inside timelined its first "
               "listener)."},
    {.name = "broker_token",
        .type = TLI_CONF_STR,
        F(broker_token),
        .help = "the token for a broker with authentication on"},
    {.name = "topic_prefix",
        .type = TLI_CONF_STR,
        F(topic_prefix),
        .def = "msc4140",
        .help = "topics PREFIX.events, PREFIX.final, PREFIX.txn (created "
                "when missing)"},
    {.name = "consumer_id",
        .type = TLI_CONF_STR,
        F(consumer_id),
        .def = "msc4140-gateway",
        .help = "the consumer id; its leases come back after a restart"},
    {.name = "ready_file",
        .type = TLI_CONF_STR,
        F(ready_file),
        .help = "written with the HTTP URL once the gateway serves"},
    {.name = "max_delay_ms",
        .type = TLI_CONF_INT,
        F(max_delay_ms),
        .lo = 1,
        .hi = WEEKS_52,
        .def = "86400000",
        .help = "the longest delay"},
    {.name = "max_delay_exceeded",
        .type = TLI_CONF_ENUM,
        F(max_delay_forbidden),
        .names = exceeded_names,
        .def = "400",
        .help = "400 (matrix-js-sdk shape) or forbidden (403)"},
    {.name = "max_scheduled",
        .type = TLI_CONF_INT,
        F(max_scheduled),
        .lo = 1,
        .hi = 1000,
        .def = "100",
        .help = "scheduled events per user"},
    {.name = "finalised_keep_ms",
        .type = TLI_CONF_INT,
        F(final_keep_ms),
        .lo = 1000,
        .hi = WEEKS_52,
        .def = "604800000",
        .help = "how long finalised records are kept"},
    {.name = "finalised_max",
        .type = TLI_CONF_INT,
        F(final_max),
        .lo = 1,
        .hi = 1000,
        .def = "1000",
        .help = "finalised records per user"},
    {.name = "retry_for_ms",
        .type = TLI_CONF_INT,
        F(retry_for_ms),
        .lo = 0,
        .hi = 24LL * 3600 * 1000,
        .def = "300000",
        .help = "how long 5xx / network errors are retried"},
    {.name = "whoami_cache_ms",
        .type = TLI_CONF_INT,
        F(whoami_cache_ms),
        .lo = 0,
        .hi = 3600 * 1000,
        .def = "60000",
        .help = "how long a token's user is cached (0: ask every time)"},
    {.name = "send_wait_ms",
        .type = TLI_CONF_INT,
        F(send_wait_ms),
        .lo = 100,
        .hi = 600 * 1000,
        .def = "30000",
        .help = "how long a `send` action waits for the homeserver's "
                "answer"},
    {.name = "max_body",
        .type = TLI_CONF_INT,
        F(max_body),
        .lo = 1024,
        .hi = 16 * 1024 * 1024,
        .def = "65536",
        .help = "request body limit of event content"},
    {.name = "proxy_max_body",
        .type = TLI_CONF_INT,
        F(proxy_max_body),
        .lo = 1024,
        .hi = 4LL * 1024 * 1024 * 1024,
        .def = "104857600",
        .help = "request body limit of passed-through requests"},
    {.name = "rate_limits",
        .type = TLI_CONF_BOOL,
        F(rate_limits),
        .def = "on",
        .help = "off disables every rate limit (benchmarks)"},
    {.name = "schedule_rate",
        .type = TLI_CONF_DOUBLE,
        F(sched_rate),
        .dhi = 1e9,
        .def = "10",
        .help = "schedulings per second, per user"},
    {.name = "schedule_burst",
        .type = TLI_CONF_DOUBLE,
        F(sched_burst),
        .dhi = 1e9,
        .def = "50",
        .help = "their burst, per user"},
    /* one restart every 4 s per call member, with bursts */
    {.name = "manage_rate",
        .type = TLI_CONF_DOUBLE,
        F(mgmt_rate),
        .dhi = 1e9,
        .def = "5",
        .help = "management requests per second, per delay_id (x4 per "
                "user with a token)"},
    {.name = "manage_burst",
        .type = TLI_CONF_DOUBLE,
        F(mgmt_burst),
        .dhi = 1e9,
        .def = "50",
        .help = "their burst"},
    {.name = "ip_rate",
        .type = TLI_CONF_DOUBLE,
        F(ip_rate),
        .dhi = 1e9,
        .def = "200",
        .help = "management requests without a token per second, per "
                "client IP"},
    {.name = "ip_burst",
        .type = TLI_CONF_DOUBLE,
        F(ip_burst),
        .dhi = 1e9,
        .def = "1000",
        .help = "their burst"},
    {.name = "trust_forwarded",
        .type = TLI_CONF_BOOL,
        F(trust_forwarded),
        .def = "off",
        .help = "take the client IP from the last X-Forwarded-For entry "
                "(behind your own reverse proxy only)"},
    {.name = "stable",
        .type = TLI_CONF_BOOL,
        F(stable),
        .def = "off",
        .help = "also serve the stable endpoints"},
    {.name = "senders",
        .type = TLI_CONF_INT,
        F(senders),
        .lo = 1,
        .hi = 64,
        .def = "4",
        .help = "sender threads (rooms are spread over them)"},
    {.flag = "print-registration",
        .type = TLI_CONF_ACTION,
        .action = TLG_CONF_PRINT_REGISTRATION,
        .help = "print the appservice registration YAML",
        .doc = "Print the appservice registration YAML the homeserver "
               "loads (see THE APPSERVICE REGISTRATION) and exit 0."},
    {.flag = "help",
        .short_flag = 'h',
        .type = TLI_CONF_ACTION,
        .action = TLG_CONF_HELP,
        .help = "print this and exit",
        .doc = "Print the usage and exit 0."},
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
	return 0;
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
