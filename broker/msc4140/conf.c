/*
 * The gateway's configuration: defaults (Synapse-like limits), "key =
 * value" files, and the appservice registration the homeserver loads.
 * docs/msc4140.md lists every key.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

void
tlg_conf_defaults(tlg_conf *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:8009");
	snprintf(c->homeserver, sizeof(c->homeserver), "http://127.0.0.1:8008");
	snprintf(c->as_id, sizeof(c->as_id), "msc4140-gateway");
	snprintf(c->sender, sizeof(c->sender), "msc4140-gateway");
	snprintf(c->broker, sizeof(c->broker), "tcp://127.0.0.1:7400");
	snprintf(c->topic_prefix, sizeof(c->topic_prefix), "msc4140");
	snprintf(c->consumer_id, sizeof(c->consumer_id), "msc4140-gateway");
	c->max_delay_ms = 24 * 3600 * 1000;
	c->max_scheduled = 100;
	c->final_keep_ms = 7LL * 24 * 3600 * 1000;
	c->final_max = 1000;
	c->retry_for_ms = 5 * 60 * 1000;
	c->whoami_cache_ms = 60 * 1000;
	c->send_wait_ms = 30 * 1000;
	c->rate_limits = true;
	/* one restart every 4 s per call member, with bursts */
	c->mgmt_rate = 5;
	c->mgmt_burst = 50;
	c->ip_rate = 200;
	c->ip_burst = 1000;
	c->sched_rate = 10;
	c->sched_burst = 50;
	c->max_body = 65536;
	c->proxy_max_body = 100ULL * 1024 * 1024;
	c->senders = 4;
}

static int
copy(char *dst, size_t cap, const char *k, const char *v)
{
	if (strlen(v) >= cap) {
		fprintf(stderr, "tl-msc4140: %s too long (at most %zu bytes)\n",
		    k, cap - 1);
		return 1;
	}
	snprintf(dst, cap, "%s", v);
	return 0;
}

static int
num(const char *k, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
		fprintf(stderr,
		    "tl-msc4140: %s must be a whole number from %lld to %lld, "
		    "not \"%s\"\n",
		    k, (long long) lo, (long long) hi, v);
		return 1;
	}
	*out = x;
	return 0;
}

static int
dbl(const char *k, const char *v, double *out)
{
	char *end;
	double x = strtod(v, &end);

	if (end == v || *end != '\0' || !(x > 0) || x > 1e9) {
		fprintf(stderr,
		    "tl-msc4140: %s must be a positive number, "
		    "not \"%s\"\n",
		    k, v);
		return 1;
	}
	*out = x;
	return 0;
}

static int
flag(const char *k, const char *v, bool *out)
{
	if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 ||
	    strcmp(v, "yes") == 0) {
		*out = true;
	} else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0 ||
	    strcmp(v, "no") == 0) {
		*out = false;
	} else {
		fprintf(stderr,
		    "tl-msc4140: %s must be on or off, not \"%s\"\n", k, v);
		return 1;
	}
	return 0;
}

int
tlg_conf_set(tlg_conf *c, const char *k, const char *v)
{
	int64_t x;
	int rv;

#define IS(s) (strcmp(k, s) == 0)
	if (IS("listen")) {
		return copy(c->listen, sizeof(c->listen), k, v);
	}
	if (IS("homeserver")) {
		return copy(c->homeserver, sizeof(c->homeserver), k, v);
	}
	if (IS("as_token")) {
		return copy(c->as_token, sizeof(c->as_token), k, v);
	}
	if (IS("hs_token")) {
		return copy(c->hs_token, sizeof(c->hs_token), k, v);
	}
	if (IS("appservice_id")) {
		return copy(c->as_id, sizeof(c->as_id), k, v);
	}
	if (IS("sender_localpart")) {
		return copy(c->sender, sizeof(c->sender), k, v);
	}
	if (IS("broker")) {
		return copy(c->broker, sizeof(c->broker), k, v);
	}
	if (IS("broker_token")) {
		return copy(c->broker_token, sizeof(c->broker_token), k, v);
	}
	if (IS("topic_prefix")) {
		return copy(c->topic_prefix, sizeof(c->topic_prefix), k, v);
	}
	if (IS("consumer_id")) {
		return copy(c->consumer_id, sizeof(c->consumer_id), k, v);
	}
	if (IS("ready_file")) {
		return copy(c->ready_file, sizeof(c->ready_file), k, v);
	}
	if (IS("max_delay_exceeded")) {
		if (strcmp(v, "forbidden") == 0 || strcmp(v, "400") == 0) {
			c->max_delay_forbidden = strcmp(v, "forbidden") == 0;
			return 0;
		}
		fprintf(stderr,
		    "tl-msc4140: max_delay_exceeded must be 400 or "
		    "forbidden\n");
		return 1;
	}
	if (IS("stable")) {
		return flag(k, v, &c->stable);
	}
	if (IS("trust_forwarded")) {
		return flag(k, v, &c->trust_forwarded);
	}
	if (IS("rate_limits")) {
		return flag(k, v, &c->rate_limits);
	}
	if (IS("manage_rate")) {
		return dbl(k, v, &c->mgmt_rate);
	}
	if (IS("manage_burst")) {
		return dbl(k, v, &c->mgmt_burst);
	}
	if (IS("ip_rate")) {
		return dbl(k, v, &c->ip_rate);
	}
	if (IS("ip_burst")) {
		return dbl(k, v, &c->ip_burst);
	}
	if (IS("schedule_rate")) {
		return dbl(k, v, &c->sched_rate);
	}
	if (IS("schedule_burst")) {
		return dbl(k, v, &c->sched_burst);
	}
#define NUM(key, lo, hi, field)                          \
	if (IS(key)) {                                   \
		if ((rv = num(k, v, lo, hi, &x)) == 0) { \
			c->field = x;                    \
		}                                        \
		return rv;                               \
	}
	NUM("max_delay_ms", 1, TL_MAX_LEASE_MS * 52, max_delay_ms);
	NUM("max_scheduled", 1, 1000, max_scheduled);
	NUM("finalised_keep_ms", 1000, TL_MAX_LEASE_MS * 52, final_keep_ms);
	NUM("finalised_max", 1, 1000, final_max);
	NUM("retry_for_ms", 0, 24LL * 3600 * 1000, retry_for_ms);
	NUM("whoami_cache_ms", 0, 3600 * 1000, whoami_cache_ms);
	NUM("send_wait_ms", 100, 600 * 1000, send_wait_ms);
	NUM("max_body", 1024, 16 * 1024 * 1024, max_body);
	NUM("proxy_max_body", 1024, 4LL * 1024 * 1024 * 1024, proxy_max_body);
	NUM("senders", 1, 64, senders);
#undef NUM
#undef IS
	fprintf(stderr, "tl-msc4140: unknown setting \"%s\"\n", k);
	return 1;
}

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t') {
		s++;
	}
	e = s + strlen(s);
	while (e > s &&
	    (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) {
		*--e = '\0';
	}
	return s;
}

int
tlg_conf_file(tlg_conf *c, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[2048];
	int lineno = 0;

	if (f == NULL) {
		fprintf(stderr, "tl-msc4140: cannot read %s: %s\n", path,
		    strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *k, *eq, *hash = strchr(line, '#');
		lineno++;
		if (hash != NULL) {
			*hash = '\0';
		}
		k = trim(line);
		if (*k == '\0') {
			continue;
		}
		if ((eq = strchr(k, '=')) == NULL) {
			fprintf(stderr,
			    "tl-msc4140: %s:%d: expected key = value\n", path,
			    lineno);
			fclose(f);
			return 1;
		}
		*eq = '\0';
		if (tlg_conf_set(c, trim(k), trim(eq + 1)) != 0) {
			fprintf(stderr, "tl-msc4140: (in %s line %d)\n", path,
			    lineno);
			fclose(f);
			return 1;
		}
	}
	fclose(f);
	return 0;
}

int
tlg_conf_check(const tlg_conf *c)
{
	if (c->as_token[0] == '\0') {
		fprintf(stderr,
		    "tl-msc4140: as_token is required (the "
		    "appservice token that sends the events)\n");
		return 1;
	}
	if (strncmp(c->homeserver, "http://", 7) != 0 &&
	    strncmp(c->homeserver, "https://", 8) != 0) {
		fprintf(stderr,
		    "tl-msc4140: homeserver must be an http:// or "
		    "https:// URL\n");
		return 1;
	}
	if (strrchr(c->listen, ':') == NULL) {
		fprintf(stderr, "tl-msc4140: listen must be HOST:PORT\n");
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
