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
#include "frame.h"

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
		c->sync_interval_ms = 100; /* the store's default, unused */
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
#include "config.def"
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
	memset(c, 0, sizeof(*c));
	tli_conf_defaults(&tlb_conf_table, c);
	rv = tli_conf_cmdline(&tlb_conf_table, c, argc, argv, &cli, err, cap);
	if (rv != TLI_CONF_OK) {
		return rv == TLI_CONF_EUSAGE ? 2 : 1;
	}
	if ((*action = cli.action) != TLB_CONF_RUN) {
		return 0;
	}
	return check_auth(c, err, cap);
}
