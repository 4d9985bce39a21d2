/*
 * tl-chronos's settings table (chronos.h): every setting once, with its
 * default, bounds and help, read by the one loader of base/conf.h, and the
 * checks of what the service cannot run with. docs/chronos.md's
 * CONFIGURATION table is generated from the table (gen_settings_md).
 */
#include <stdio.h>
#include <string.h>

#include "chronos.h"

#define F(f) TLI_CONF_FIELD(tlk_conf, f)

static const tli_conf_item items[] = {
#include "conf.def"
};

#undef F

const tli_conf_table tlk_conf_table = {
    .prog = "tl-chronos",
    .usage = "tl-chronos --listen HOST:PORT --url BROKER_URL [-c FILE]",
    .noun = "setting",
    .items = items,
    .nitems = sizeof(items) / sizeof(items[0]),
};

void
tlk_conf_defaults(tlk_conf *c)
{
	memset(c, 0, sizeof(*c));
	tli_conf_defaults(&tlk_conf_table, c);
}

int
tlk_conf_verify(const tlk_conf *c, char *err, size_t cap)
{
	if (strrchr(c->listen, ':') == NULL) {
		snprintf(err, cap, "listen must be HOST:PORT");
		return 1;
	}
	if (c->topic[0] == '\0' || c->group[0] == '\0' ||
	    c->consumer_id[0] == '\0') {
		snprintf(err, cap, "topic, group and consumer_id must be set");
		return 1;
	}
	if (c->retry_min_ms > c->retry_max_ms) {
		snprintf(err, cap, "retry_min_ms must not exceed retry_max_ms");
		return 1;
	}
	if (c->lease_ms < 2 * c->callback_timeout_ms) {
		snprintf(err, cap,
		    "lease_ms must be at least twice callback_timeout_ms");
		return 1;
	}
	return 0;
}
