/*
 * The broker's settings table (config.h): every setting of timelined once,
 * with its file key, flags, default, bounds and documentation; the one
 * loader of base/conf.h reads the files and the flags through it, prints
 * --help from it, and gen_settings_md writes docs/timelined.md's reference
 * from it. What relates several settings (auth needs credentials, TLS
 * needs a certificate) is checked here after loading.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "config.h"

/* "always", "none" or "interval:MS" (MS > 0). */
static int
set_durability(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	tlb_conf *c = obj;
	char *end;
	long ms;

	(void) it;
	if (strcmp(v, "always") == 0 || strcmp(v, "none") == 0) {
		c->sync_mode = v[0] == 'a' ? TLI_SYNC_ALWAYS : TLI_SYNC_NONE;
		return TLI_CONF_OK;
	}
	if (strncmp(v, "interval:", 9) == 0) {
		errno = 0;
		ms = strtol(v + 9, &end, 10);
		if (errno == 0 && end != v + 9 && *end == '\0' && ms > 0 &&
		    ms <= INT32_MAX) {
			c->sync_mode = TLI_SYNC_INTERVAL;
			c->sync_interval_ms = (int) ms;
			return TLI_CONF_OK;
		}
	}
	snprintf(msg, cap,
	    "durability must be always, interval:MS or none, not \"%s\"", v);
	return TLI_CONF_EVALUE;
}

static const char *const log_levels[] = {
    "error", "warn", "info", "debug", NULL};
static const char *const client_auth_modes[] = {
    "none", "optional", "required", NULL};

#define F(f) TLI_CONF_FIELD(tlb_conf, f)
#define L(f, n) TLI_CONF_LISTOF(tlb_conf, f, n)
#define FOREVER INT64_MAX

static const tli_conf_item items[] = {
    {.flag = "config",
        .short_flag = 'c',
        .type = TLI_CONF_INCLUDE,
        .metavar = "FILE",
        .help = "read settings from FILE first",
        .doc = "Read settings from FILE before applying the flags "
               "(`-c FILE`, `-cFILE`, `--config FILE` or "
               "`--config=FILE`). May be given several times; the files "
               "are read in order, before every other flag."},
    {.name = "data",
        .flag = "data",
        .short_flag = 'd',
        .type = TLI_CONF_STR,
        F(data_dir),
        .def = "./data",
        .metavar = "DIR",
        .help = "data directory",
        .doc = "The data directory (the RocksDB database). Created if "
               "missing (its parent must exist). One broker per "
               "directory: RocksDB locks it."},
    {.name = "listen",
        .flag = "listen",
        .short_flag = 'l',
        .type = TLI_CONF_LIST,
        L(listen, nlisten),
        .def = "tcp://127.0.0.1:7400",
        .metavar = "URL",
        .help = "tcp://, tls+tcp://HOST:PORT or ipc:///PATH; repeatable",
        .doc = "An address to listen on: `tcp://HOST:PORT` (port 0 picks "
               "a free port, see `--ready-file`), `tls+tcp://HOST:PORT` "
               "(TLS; needs `tls_cert` and `tls_key`) or `ipc:///PATH`. "
               "Listen flags replace the file's `listen` lines (they do "
               "not add to them)."},
    {.name = "topic",
        .flag = "topic",
        .short_flag = 't',
        .type = TLI_CONF_LIST,
        L(topics, ntopics),
        .def = "default",
        .metavar = "NAME[:N]",
        .help = "create topic NAME with N buckets at start if missing; "
                "repeatable",
        .doc = "Create topic NAME with N buckets at start if it does not "
               "exist (other settings take the defaults: 256 KiB bodies, "
               "30 s default lease, 12 h maximum lease, 16 maximum "
               "deliveries). An existing topic is left as it is, even if "
               "N differs. Topic flags replace the file's `topic` lines. "
               "The text after the **last** `:` is the bucket count (a "
               "non-number or 0 gives 16; over 4096 fails the start). "
               "When no topic is configured at all, the topic `default` "
               "is created."},
    {.name = "durability",
        .flag = "durability",
        .type = TLI_CONF_FUNC,
        .parse = set_durability,
        .def = "always",
        .metavar = "always|interval:MS|none",
        .help = "when acknowledged writes are fsynced",
        .doc = "`always`, `interval:MS` (MS > 0) or `none`; see "
               "DURABILITY."},
    {.name = "log_level",
        .flag = "log-level",
        .type = TLI_CONF_ENUM,
        F(log_level),
        .names = log_levels,
        .def = "info",
        .metavar = "LEVEL",
        .help = "error | warn | info | debug",
        .doc = "The most detailed level logged; see LOGGING."},
    {.name = "metrics",
        .flag = "metrics",
        .type = TLI_CONF_STR,
        .flags = TLI_CONF_OFF,
        F(metrics),
        .def = "127.0.0.1:7401",
        .metavar = "HOST:PORT",
        .help = "Prometheus /metrics; \"off\"",
        .doc = "Serve Prometheus metrics at `http://HOST:PORT/metrics`; "
               "`off` disables them. If the endpoint cannot start, the "
               "daemon logs `M001`/`M002` and `B004` and runs without "
               "metrics."},
    {.name = "name",
        .flag = "name",
        .type = TLI_CONF_STR,
        F(name),
        .def = "timelined",
        .metavar = "NAME",
        .help = "broker name shown to clients",
        .doc = "The broker name returned in HELLO replies."},
    {.name = "ready_file",
        .flag = "ready-file",
        .type = TLI_CONF_STR,
        F(ready_file),
        .metavar = "FILE",
        .help = "write the bound addresses there when ready",
        .doc = "When the listeners are bound, write the bound addresses "
               "there, one URL per line, with the real port for "
               "`tcp://…:0`. Written to `FILE.tmp` and renamed, so a "
               "reader never sees a partial file. Not removed at exit."},
    {.name = "clock_warn_ms",
        .flag = "clock-warn",
        .type = TLI_CONF_INT,
        F(clock_warn_ms),
        .lo = 1,
        .hi = FOREVER,
        .def = "1000",
        .metavar = "MS",
        .help = "warn when a client clock is off by more",
        .doc = "Log `C001` when a client's clock is more than MS off the "
               "broker's."},
    {.name = "msc4140",
        .flag = "msc4140",
        .type = TLI_CONF_STR,
        F(msc4140),
        .metavar = "FILE",
        .help = "run the MSC4140 gateway configured in FILE",
        .doc = "Run the Matrix MSC4140 delayed-event gateway inside the "
               "broker with the gateway configuration in FILE "
               "(docs/msc4140.md). It starts once the listeners are up, "
               "connects through the SDK to the first listen address, "
               "and stops before the broker does; if it cannot start "
               "(bad file, port in use) the broker stops."},
    {.name = "idle_timeout_ms",
        .alias = "idle_timeout",
        .flag = "idle-timeout",
        .type = TLI_CONF_INT,
        .flags = TLI_CONF_OFF,
        F(idle_ms),
        .lo = 1,
        .hi = FOREVER,
        .def = "60000",
        .metavar = "MS",
        .help = "close a session that sends nothing for MS; \"off\"",
        .doc = "Close a session that sends nothing for MS. The SDK pings "
               "every 5 s, so only a dead client or a dead connection "
               "(half-open TCP) is closed; its subscriptions end and "
               "their leases run out as usual."},
    {.name = "window_ms",
        .flag = "window",
        .type = TLI_CONF_INT,
        F(window_ms),
        .lo = 1,
        .hi = FOREVER,
        .def = "2000",
        .metavar = "MS",
        .help = "the dispatcher's near-future window",
        .doc = "How far ahead of now each subscribed topic's timeline is "
               "loaded into memory. A larger window costs memory and "
               "start-up reading; a smaller one costs more store reads."},
    {.name = "auth",
        .flag = "auth",
        .type = TLI_CONF_BOOL,
        F(auth),
        .def = "off",
        .metavar = "on|off",
        .help = "require a token from every client (default off)",
        .doc = "`on`: every session must present a token of the "
               "credentials file in its HELLO, and every operation is "
               "checked against its principal (docs/auth.md). `off`: "
               "anyone may act as anyone (local development; logged as "
               "warning `A001`). Needs `credentials` when `on`."},
    {.name = "credentials",
        .flag = "credentials",
        .type = TLI_CONF_STR,
        F(credentials),
        .metavar = "FILE",
        .help = "principals and token hashes (docs/auth.md)",
        .doc = "The credentials file: principals, their token hashes, "
               "permissions and limits (docs/auth.md). Read at start and "
               "on SIGHUP."},
    {.name = "tls_cert",
        .flag = "tls-cert",
        .type = TLI_CONF_STR,
        F(tls_cert),
        .metavar = "FILE",
        .help = "PEM certificate of tls+tcp:// listeners",
        .doc = "PEM certificate (chain) of the `tls+tcp://` listeners."},
    {.name = "tls_key",
        .flag = "tls-key",
        .type = TLI_CONF_STR,
        F(tls_key),
        .metavar = "FILE",
        .help = "its PEM private key",
        .doc = "PEM private key (unencrypted) of that certificate."},
    {.name = "tls_ca",
        .flag = "tls-ca",
        .type = TLI_CONF_STR,
        F(tls_ca),
        .metavar = "FILE",
        .help = "CAs for client certificates",
        .doc = "PEM CA file that client certificates are verified "
               "against."},
    {.name = "tls_client_auth",
        .flag = "tls-client-auth",
        .type = TLI_CONF_ENUM,
        F(tls_client_auth),
        .names = client_auth_modes,
        .def = "none",
        .metavar = "MODE",
        .help = "none | optional | required",
        .doc = "Whether TLS clients must present a certificate signed by "
               "`tls_ca` (needs `tls_ca` unless `none`)."},
    {.flag = "hash-token",
        .type = TLI_CONF_ACTION,
        .action = TLB_CONF_HASH_TOKEN,
        .help = "print the SHA-256 of the token read on stdin",
        .doc = "Read a token from standard input (one line), print its "
               "SHA-256 in hex for the credentials file, exit 0."},
    {.flag = "help",
        .short_flag = 'h',
        .type = TLI_CONF_ACTION,
        .action = TLB_CONF_HELP,
        .help = "print this and exit",
        .doc = "Print the usage and exit 0."},
};

#undef F
#undef L
#undef FOREVER

const tli_conf_table tlb_conf_table = {
    .prog = "timelined",
    .usage = "timelined [options]",
    .noun = "setting",
    .items = items,
    .nitems = sizeof(items) / sizeof(items[0]),
};

void
tlb_conf_defaults(tlb_conf *c)
{
	memset(c, 0, sizeof(*c));
	tli_conf_defaults(&tlb_conf_table, c);
}

void
tlb_conf_help(FILE *f)
{
	tli_buf b = TLI_BUF_INIT;

	tli_conf_help(&tlb_conf_table, &b);
	fputs(tli_buf_str(&b), f);
	tli_buf_fini(&b);
}

/* The authentication and TLS settings fit together. */
static int
check_auth(const tlb_conf *c, char *err, size_t cap)
{
	bool tls = false;

	if (c->auth && c->credentials[0] == '\0') {
		snprintf(err, cap, "auth = on needs credentials = FILE");
		return 1;
	}
	for (int i = 0; i < c->nlisten; i++) {
		tls = tls || strncmp(c->listen[i], "tls+tcp://", 10) == 0;
	}
	if (tls && (c->tls_cert[0] == '\0' || c->tls_key[0] == '\0')) {
		snprintf(err, cap,
		    "a tls+tcp:// listener needs tls_cert and tls_key");
		return 1;
	}
	if (c->tls_client_auth != 0 && c->tls_ca[0] == '\0') {
		snprintf(err, cap,
		    "tls_client_auth = optional or required needs tls_ca");
		return 1;
	}
	return 0;
}

int
tlb_conf_load(
    tlb_conf *c, int argc, char **argv, int *action, char *err, size_t cap)
{
	tli_conf_cli cli;
	int rv;

	*action = TLB_CONF_RUN;
	tlb_conf_defaults(c);
	rv = tli_conf_cmdline(&tlb_conf_table, c, argc, argv, &cli, err, cap);
	if (rv != TLI_CONF_OK) {
		return rv == TLI_CONF_EUSAGE ? 2 : 1;
	}
	if ((*action = cli.action) != TLB_CONF_RUN) {
		return 0;
	}
	return check_auth(c, err, cap);
}
