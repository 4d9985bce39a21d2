/*
 * Who may do what: the credentials file parsed into a table of principals
 * (token hash, producer groups, topics to produce to, topics and consumer
 * ids to consume with, admin flag, per-group limits), the look-up of a
 * session's token, the permission checks, and the broker-wide counters of
 * creates in flight per producer group.
 *
 * DESIGN. A table is immutable once loaded and reference counted: the
 * broker holds the current one, each authenticated session holds the one
 * its principal came from. SIGHUP loads a new table and swaps it in, and
 * the server closes at once every session whose token the new table lacks
 * (tlb_server_close_revoked); any other session moves to the new table at
 * its next request, resolving its token again (and is closed if it is gone
 * by then). Tokens are never kept: a session keeps the SHA-256 of its
 * token only.
 */
#ifndef TL_BROKER_AUTH_H
#define TL_BROKER_AUTH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "sha256.h"
#include "timeline/limits.h"

#define TLB_AUTH_MAX_LIST 32 /* entries per list and principal */
#define TLB_AUTH_MAX_PRINCIPALS 1024

/* A name pattern: exact, "prefix*", or "*" for any. */
typedef struct tlb_pat {
	char s[TL_MAX_NAME_LEN + 2];
} tlb_pat;

typedef struct tlb_consume {
	tlb_pat topic;
	tlb_pat consumer;
} tlb_consume;

typedef struct tlb_principal {
	char name[TL_MAX_NAME_LEN + 1];
	uint8_t hash[TLP_SHA256_LEN];
	bool has_hash;
	tlb_pat groups[TLB_AUTH_MAX_LIST];
	int ngroups;
	tlb_pat produce[TLB_AUTH_MAX_LIST];
	int nproduce;
	tlb_consume consume[TLB_AUTH_MAX_LIST];
	int nconsume;
	bool admin;
	uint64_t max_inflight_creates; /* per producer group; 0 = no limit */
	uint64_t max_scheduled;        /* per producer group; 0 = no limit */
} tlb_principal;

typedef struct tlb_auth {
	_Atomic int refs;
	tlb_principal *v;
	size_t n;
} tlb_auth;

/* The keys of a principal in the credentials file, once (docs/auth.md's
 * table is generated from it). */
extern const tli_conf_table tlb_creds_table;

/* Load a credentials file. On error returns TL_EINVAL (syntax, with the
 * file and line in err) or TL_EIO, and *out is untouched. */
int tlb_auth_load(const char *path, tlb_auth **out, char *err, size_t cap);
void tlb_auth_hold(tlb_auth *a);
void tlb_auth_rele(tlb_auth *a);
/* The principal whose token hashes to h, or NULL. Every principal is
 * compared, each in constant time. */
const tlb_principal *tlb_auth_find(const tlb_auth *a, const uint8_t *h);

bool tlb_pat_match(const tlb_pat *p, const char *s, size_t n);
bool tlb_may_act_as(const tlb_principal *p, const char *group, size_t n);
bool tlb_may_produce(const tlb_principal *p, const char *topic);
bool tlb_may_consume(
    const tlb_principal *p, const char *topic, const char *consumer, size_t n);

/* `timelined --hash-token`: read a token from stdin (up to the first
 * newline), print its SHA-256 in hex. Returns the exit status. */
int tlb_auth_hash_stdin(void);

/* Creates in flight per producer group (messages submitted to the store
 * and not yet answered). */
typedef struct tlb_inflight tlb_inflight;
int tlb_inflight_init(tlb_inflight **out);
void tlb_inflight_fini(tlb_inflight *f);
/* Add n to group's count unless that would pass limit (0 = no limit);
 * *now gets the count before. Returns whether it was added. */
bool tlb_inflight_add(tlb_inflight *f, const char *group, size_t glen,
    uint64_t n, uint64_t limit, uint64_t *now);
void tlb_inflight_sub(
    tlb_inflight *f, const char *group, size_t glen, uint64_t n);

/* ---- the broker's table ----
 * The current table lives in the broker (b->auth under b->auth_mtx). */

typedef struct tlb_broker tlb_broker;

/* Load the credentials at start (auth on) and make the in-flight table.
 * Logs and returns -1 on a bad file. */
int tlb_auth_start(tlb_broker *b);
/* SIGHUP: load the credentials file again; on success new sessions use
 * it (returns true: the caller then closes the sessions whose token is
 * gone). A bad file keeps the old table (logged). */
bool tlb_auth_reload(tlb_broker *b);
void tlb_auth_stop(tlb_broker *b);
/* The current table, held (release with tlb_auth_rele), or NULL. */
tlb_auth *tlb_auth_current(tlb_broker *b);

#endif
