/*
 * The MSC4140 delayed-event gateway: the interface used by its standalone
 * binary (tl-msc4140) and by timelined, which can run it in-process. The
 * gateway talks to the broker only through the public SDK.
 */
#ifndef TL_MSC4140_H
#define TL_MSC4140_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "conf.h"

typedef struct tlg_conf {
	char listen[256];     /* HTTP "HOST:PORT" (port 0: any free port) */
	char homeserver[512]; /* the homeserver's base URL */
	char as_token[512];   /* appservice token (sending as the user) */
	char hs_token[512];   /* for the registration file only */
	char as_id[128];      /* registration id */
	char sender[128];     /* registration sender_localpart */
	char broker[512];     /* broker URL (standalone) */
	char broker_token[512];
	char topic_prefix[64]; /* topics PREFIX.events / .final / .txn */
	char consumer_id[128];
	char ready_file[512]; /* written with the HTTP URL when ready */
	int64_t max_delay_ms;
	uint32_t max_scheduled; /* per user */
	int64_t final_keep_ms;
	uint32_t final_max; /* finalised records kept per user */
	int64_t retry_for_ms;
	int64_t whoami_cache_ms;
	int64_t send_wait_ms;     /* how long a "send" action waits */
	bool max_delay_forbidden; /* 403 M_FORBIDDEN instead of 400 */
	bool stable;              /* also serve the stable endpoints */
	bool rate_limits;
	bool trust_forwarded;           /* client IP from X-Forwarded-For */
	char trusted_proxies[512];      /* "ADDR[/BITS],..." (tlhttp) */
	double mgmt_rate, mgmt_burst;   /* per user / delay_id */
	double ip_rate, ip_burst;       /* unauthenticated, per IP */
	double sched_rate, sched_burst; /* scheduling, per user */
	uint32_t max_body;              /* event content limit */
	uint64_t proxy_max_body;        /* other requests */
	int senders;                    /* sending threads */
	int as_check; /* as_token refused at start: 0 exit, 1 retry */
	bool futures; /* also serve the Futures form */
	int64_t fut_max_timeout; /* the longest future_timeout */
	uint32_t fut_misses;     /* bad tokens in a row before 429 */
	int64_t fut_block_ms;    /* then 429 for this long */
} tlg_conf;

/* What tl-msc4140's command line asked for besides serving. */
#define TLG_CONF_HELP 1
#define TLG_CONF_PRINT_REGISTRATION 2

/* Every setting of the gateway, once (and tl-msc4140's flags). */
extern const tli_conf_table tlg_conf_table;

void tlg_conf_defaults(tlg_conf *c);
/* "key = value" lines; # starts a comment. Returns 0, or 1 with one
 * sentence in err naming file, line and setting. */
int tlg_conf_read(tlg_conf *c, const char *path, char *err, size_t cap);
/* Checks what the gateway cannot run without. Returns 0, or 1 with the
 * reason in err. */
int tlg_conf_verify(const tlg_conf *c, char *err, size_t cap);
/* tlg_conf_read and tlg_conf_verify that print the reason on stderr. */
int tlg_conf_file(tlg_conf *c, const char *path);
int tlg_conf_check(const tlg_conf *c);
/* The appservice registration YAML the homeserver must load. */
void tlg_print_registration(const tlg_conf *c, FILE *f);

typedef struct tlg tlg;

/* Connect to the broker (broker_url, or the configuration's when NULL),
 * create the gateway's topics, start the senders and the HTTP server.
 * Returns 0, or logs why and returns -1. */
int tlg_start(tlg **out, const tlg_conf *c, const char *broker_url);
/* The HTTP base URL the gateway listens on. */
const char *tlg_url(const tlg *g);
/* Stop serving, stop the senders, close the broker connection. NULL ok. */
void tlg_stop(tlg *g);

/* The in-process form used by timelined: read the configuration file and
 * start against broker_url. NULL on failure (logged). */
tlg *tlg_start_file(const char *conf_path, const char *broker_url);

#endif
