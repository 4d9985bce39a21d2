/*
 * Helpers of the authentication suites: a credentials file and a broker
 * configuration in a private temporary directory, the real broker run with
 * it (`timelined -c FILE`, through the launcher, launch.h) with its bound
 * address read from the ready file, SDK clients with a token and TLS
 * options, and test certificates made with the openssl command. Part of
 * the test support library (tltestsupport_sdk).
 */
#ifndef TL_TESTS_AUTH_UTIL_H
#define TL_TESTS_AUTH_UTIL_H

#include <stdbool.h>

#include "launch.h"
#include "timeline/timeline.h"

typedef struct ab_broker {
	char *dir;
	char creds[600];
	char url[700]; /* the first bound address (from the ready file) */
	tt_proc proc;  /* its configuration is proc.conf, its log proc.log */
} ab_broker;

/* Write text to path (fails the test when it cannot). */
#define ab_write tt_write_file
/* The whole file (malloc'd), or NULL. */
#define ab_read tt_read_file

/* The hex SHA-256 of a token, as `timelined --hash-token` prints it (one
 * of four rotating static buffers). */
const char *ab_hash(const char *token);

/* Make the directory and fill in the paths (no process yet). */
void ab_init(ab_broker *b, const char *tag);
/* The configuration: data dir, ready file, topic "t", debug logs, then
 * `extra` (listen, auth, tls keys ...). Replaces an earlier one. */
void ab_config(ab_broker *b, const char *extra);
/* Start the broker with its configuration and wait (20 s at most) for its
 * ready file; b->url gets the first address it lists. */
void ab_spawn(ab_broker *b);
/* Run the broker and wait for it to exit (it must refuse to start): its
 * exit status; its log holds only this run. */
int ab_run_expect_exit(ab_broker *b);
/* Whether the broker's log contains `what`, waiting at most timeout_ms. */
bool ab_log_wait(const ab_broker *b, const char *what, int timeout_ms);
/* SIGTERM; the broker must exit cleanly (status 0) within 20 s, else it is
 * killed and the test fails. Removes the directory either way. */
void ab_stop(ab_broker *b);

typedef struct ab_tls {
	const char *ca;
	const char *server_name;
	const char *cert;
	const char *key;
} ab_tls;

/* Open a client with a token (NULL: none) and TLS options (NULL: none);
 * returns the tl_client_open result, *out set on TL_OK. */
int ab_open(
    const char *url, const char *token, const ab_tls *tls, tl_client **out);
/* A client that must open. */
tl_client *ab_client(const char *url, const char *token);

/* Certificates made at test time: a CA, a broker certificate for
 * "localhost" signed by it, a second CA nobody trusts, and a client
 * certificate from each CA (EC P-256 keys, valid two days). */
typedef struct ab_certs {
	char *dir;
	char ca[600], other_ca[600], srv_cert[600], srv_key[600];
	char cli_cert[600], cli_key[600], bad_cert[600], bad_key[600];
} ab_certs;

extern ab_certs ab_cert;

/* Make ab_cert (a suite's .init) and remove it (its .fini). */
void ab_make_certs(void);
void ab_drop_certs(void);

#endif
