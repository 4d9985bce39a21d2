/*
 * The broker's settings table (config.h): every setting of timelined once,
 * with its file key, flags, default, bounds and documentation; the one
 * loader of base/conf.h reads the files and the flags through it, prints
 * --help from it, and gen_settings_md writes docs/timelined.md's reference
 * from it. What relates several settings (auth needs credentials, TLS
 * needs a certificate) is checked here after loading.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "config.h"
#include "frame.h"

/* A whole number of milliseconds in [lo, hi], the whole of v. */
static bool
parse_ms(const char *v, long lo, long hi, long *out)
{
	char *end;
	long ms;

	errno = 0;
	ms = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || ms < lo || ms > hi) {
		return false;
	}
	*out = ms;
	return true;
}

/* A setting that takes auto (-1), off (0) when off_ok, or a whole number
 * from lo to hi, into *out. */
static int
auto_or_number(const char *name, const char *v, long lo, long hi, bool off_ok,
    int64_t *out, char *msg, size_t cap)
{
	long n;

	if (strcmp(v, "auto") == 0 || (off_ok && strcmp(v, "off") == 0)) {
		*out = v[0] == 'a' ? -1 : 0;
		return TLI_CONF_OK;
	}
	if (parse_ms(v, lo, hi, &n)) {
		*out = n;
		return TLI_CONF_OK;
	}
	snprintf(msg, cap,
	    "%s must be auto%s or a whole number from %ld to %ld, not \"%s\"",
	    name, off_ok ? ", off" : "", lo, hi, v);
	return TLI_CONF_EVALUE;
}

/* lease_ahead_ms: MS, or auto (-1 until tlb_conf_load resolves it). */
static int
set_lease_ahead(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	(void) it;
	return auto_or_number("lease_ahead_ms", v, 0, 10000, false,
	    &((tlb_conf *) obj)->lease_ahead_ms, msg, cap);
}

/* push_priority: 1..99, off (0), or auto (-1: 1 where allowed). */
static int
set_push_priority(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	(void) it;
	return auto_or_number("push_priority", v, 1, 99, true,
	    &((tlb_conf *) obj)->push_priority, msg, cap);
}

/* durability: "always", "none" or "interval:MS" (MS > 0). */
static int
set_durability(
    void *obj, const tli_conf_item *it, const char *v, char *msg, size_t cap)
{
	tlb_conf *c = obj;
	long ms;

	(void) it;
	if (strcmp(v, "always") == 0 || strcmp(v, "none") == 0) {
		c->sync_mode = v[0] == 'a' ? TLI_SYNC_ALWAYS : TLI_SYNC_NONE;
		c->sync_interval_ms = 100; /* the store's default, unused */
		return TLI_CONF_OK;
	}
	if (strncmp(v, "interval:", 9) == 0 &&
	    parse_ms(v + 9, 1, INT32_MAX, &ms)) {
		c->sync_mode = TLI_SYNC_INTERVAL;
		c->sync_interval_ms = (int) ms;
		return TLI_CONF_OK;
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

/* One `cluster_node` line: "ID HOST:PORT URL". */
static int
parse_node(const char *line, tlb_node *n, char *err, size_t cap)
{
	char id[32], raft[256], url[256], extra[8];
	const char *colon;
	char *end;
	unsigned long long v;
	long port;
	int k = sscanf(line, "%31s %255s %255s %7s", id, raft, url, extra);

	if (k != 3) {
		snprintf(err, cap,
		    "cluster_node \"%s\": expected ID HOST:PORT URL", line);
		return 1;
	}
	errno = 0;
	v = strtoull(id, &end, 10);
	if (errno != 0 || *end != '\0' || id[0] == '-' || v == 0 ||
	    v > INT32_MAX) {
		snprintf(err, cap,
		    "cluster_node \"%s\": the id must be a number >= 1", line);
		return 1;
	}
	colon = strrchr(raft, ':');
	port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
	if (colon == NULL || colon == raft || colon[1] == '\0' ||
	    *end != '\0' || port < 1 || port > 65535) {
		snprintf(err, cap,
		    "cluster_node \"%s\": the Raft address must be "
		    "HOST:PORT",
		    line);
		return 1;
	}
	if (strstr(url, "://") == NULL) {
		snprintf(err, cap,
		    "cluster_node \"%s\": the client URL must look like "
		    "tcp://HOST:PORT",
		    line);
		return 1;
	}
	n->id = v;
	snprintf(n->raft, sizeof(n->raft), "%s", raft);
	snprintf(n->url, sizeof(n->url), "%s", url);
	return 0;
}

/* The cluster_* settings: well-formed lines, distinct ids and addresses,
 * this node among them. */
static int
check_cluster(tlb_conf *c, char *err, size_t cap)
{
	c->nnodes = 0;
	c->self = -1;
	if (c->ncluster_nodes == 0) {
		return 0;
	}
	for (int i = 0; i < c->ncluster_nodes; i++) {
		tlb_node *n = &c->nodes[i];

		if (parse_node(c->cluster_nodes[i], n, err, cap) != 0) {
			return 1;
		}
		for (int j = 0; j < i; j++) {
			if (c->nodes[j].id == n->id) {
				snprintf(err, cap,
				    "cluster_node: id %llu is given twice",
				    (unsigned long long) n->id);
				return 1;
			}
			if (strcmp(c->nodes[j].raft, n->raft) == 0) {
				snprintf(err, cap,
				    "cluster_node: Raft address %s is given "
				    "twice",
				    n->raft);
				return 1;
			}
		}
		if ((int64_t) n->id == c->cluster_id) {
			c->self = i;
		}
		c->nnodes++;
	}
	if (c->cluster_id == 0) {
		snprintf(err, cap,
		    "cluster_node lines need cluster_id = this node's id "
		    "(1 or more)");
		return 1;
	}
	if (c->self < 0) {
		snprintf(err, cap,
		    "cluster_id %lld is not among the cluster_node ids",
		    (long long) c->cluster_id);
		return 1;
	}
	if (c->cluster_heartbeat_ms >= c->cluster_election_ms) {
		snprintf(err, cap,
		    "cluster_heartbeat_ms (%lld) must be below "
		    "cluster_election_ms (%lld)",
		    (long long) c->cluster_heartbeat_ms,
		    (long long) c->cluster_election_ms);
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
	if ((rv = check_auth(c, err, cap)) != 0 ||
	    (rv = check_cluster(c, err, cap)) != 0) {
		return rv;
	}
	if (c->lease_ahead_ms < 0) { /* auto */
		c->lease_ahead_ms = c->nnodes > 0 ? TLB_LEASE_AHEAD_CLUSTER_MS
		                                  : TLB_LEASE_AHEAD_MS;
	}
	return 0;
}
