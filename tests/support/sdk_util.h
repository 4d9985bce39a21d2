/*
 * Helpers of the SDK end-to-end suites: the real broker on an ipc socket and
 * a loopback TCP port, in a private temporary directory (run by the launcher,
 * launch.h), killed and started again on the same data, and SDK clients with
 * short timeouts and backoff. Part of the test support library
 * (tltestsupport_sdk).
 */
#ifndef TL_TESTS_SDK_UTIL_H
#define TL_TESTS_SDK_UTIL_H

#include <stdint.h>

#include <criterion/criterion.h>

#include "launch.h"
#include "timeline/timeline.h"

typedef struct sb_broker {
	char *dir; /* the data directory; the socket and log live there too */
	char url[600];    /* ipc:// */
	char tcp_url[64]; /* the same broker on loopback TCP */
	char sock[256];
	tt_proc proc;
} sb_broker;

/* Make a private directory and start the broker there (topic "default"),
 * listening on url and tcp_url. */
void sb_start(sb_broker *b, const char *tag);
/* Start the broker again on b->dir and wait for it to be ready. */
void sb_spawn(sb_broker *b);
/* Stop the broker with sig (SIGKILL: a crash) and reap it. */
void sb_kill(sb_broker *b, int sig);
/* SIGTERM, reap, remove the directory. */
void sb_stop(sb_broker *b);

/* A suite whose every test has its own broker B and client C (over TCP,
 * the client's own socket, as most applications connect): defines them,
 * the suite's init and fini, and the TestSuite (timeout 60 s). */
#define SB_SUITE(suite, tag)           \
	static sb_broker B;            \
	static tl_client *C;           \
	static void suite##_init(void) \
	{                              \
		sb_start(&B, tag);     \
		C = sb_client_tcp(&B); \
	}                              \
	static void suite##_fini(void) \
	{                              \
		tl_client_close(C);    \
		sb_stop(&B);           \
	}                              \
	TestSuite(                     \
	    suite, .init = suite##_init, .fini = suite##_fini, .timeout = 60)

/* Poll k until want leases arrived or timeout_ms passed (each poll must
 * succeed); returns the count. */
size_t sb_poll_n(tl_consumer *k, tl_lease **out, size_t want, int timeout_ms);

/* A client of the broker that must open (over ipc; _tcp: over TCP). */
tl_client *sb_client(const sb_broker *b);
tl_client *sb_client_tcp(const sb_broker *b);
/* A client of url (one URL, or a cluster's comma-separated list) with
 * this request timeout and log callback (NULL: none), reconnecting fast. */
tl_client *sb_client_url(const char *url, int timeout_ms, tl_log_fn log);
/* Create a topic with the defaults (and an optional lease length). */
void sb_topic(tl_client *c, const char *name, int64_t lease_ms);

#endif
