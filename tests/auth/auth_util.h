/*
 * Helpers of the authentication suites (header-only: every test_*.c here
 * is its own executable). They write a credentials file and a broker
 * configuration into a private temporary directory, run the real broker
 * binary with it (`timelined -c FILE`), wait for its ready file with a
 * deadline, read the bound address from it, and open SDK clients with a
 * token and TLS options.
 */
#ifndef TL_TESTS_AUTH_UTIL_H
#define TL_TESTS_AUTH_UTIL_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "sha256.h"
#include "testutil.h"
#include "timeline/timeline.h"

typedef struct ab_broker {
	char *dir;
	char conf[600];
	char creds[600];
	char ready[600];
	char log[600];
	char url[700]; /* the first bound address (from the ready file) */
	pid_t pid;
} ab_broker;

static inline void
ab_nap_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static inline void
ab_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

/* The whole file (malloc'd), or NULL. */
static inline char *
ab_read(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (f == NULL) {
		return NULL;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t) n + 1);
	n = (long) fread(buf, 1, (size_t) n, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* "token_sha256 = <hex>" for a token, as timelined --hash-token makes. */
static inline const char *
ab_hash(const char *token)
{
	static char hex[4][TLP_SHA256_HEX + 1];
	static int k;
	uint8_t d[TLP_SHA256_LEN];
	char *out = hex[k++ % 4];

	tlp_sha256(token, strlen(token), d);
	tlp_sha256_hex(d, out);
	return out;
}

static inline void
ab_init(ab_broker *b, const char *tag)
{
	memset(b, 0, sizeof(*b));
	b->dir = tt_mkdtemp(tag);
	snprintf(b->conf, sizeof(b->conf), "%s/timelined.conf", b->dir);
	snprintf(b->creds, sizeof(b->creds), "%s/credentials", b->dir);
	snprintf(b->ready, sizeof(b->ready), "%s/ready", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/broker.log", b->dir);
	b->pid = -1;
}

/* Write the configuration: data dir, ready file, topic "t", debug logs,
 * then `extra` (listen, auth, tls keys ...). */
static inline void
ab_config(ab_broker *b, const char *extra)
{
	char text[4096];

	snprintf(text, sizeof(text),
	    "data = %s/data\n"
	    "ready_file = %s\n"
	    "topic = t\n"
	    "log_level = debug\n"
	    "%s",
	    b->dir, b->ready, extra);
	ab_write(b->conf, text);
}

/* Run `timelined -c b->conf` as a child with its output appended to (or,
 * with trunc, written over) b->log. The child is killed when the test
 * process dies, so a failed assertion never leaves a broker behind. */
static inline pid_t
ab_exec(ab_broker *b, bool trunc)
{
	char bin[1024];
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/broker/timelined", TL_TEST_BINDIR);
	cr_assert(access(bin, X_OK) == 0, "the broker %s is not built", bin);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open(b->log,
		    O_WRONLY | O_CREAT | (trunc ? O_TRUNC : O_APPEND), 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(bin, bin, "-c", b->conf, (char *) NULL);
		_exit(127);
	}
	return pid;
}

/* Start the broker with b->conf and wait (20 s at most) for its ready
 * file; b->url gets the first address it lists. */
static inline void
ab_spawn(ab_broker *b)
{
	int64_t deadline;
	char *txt;

	unlink(b->ready);
	b->pid = ab_exec(b, false);
	deadline = tli_mono_ms() + 20000;
	while (access(b->ready, R_OK) != 0) {
		int st;
		if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
			b->pid = -1;
			txt = ab_read(b->log);
			cr_assert_fail("the broker exited (status %d):\n%s", st,
			    txt != NULL ? txt : "");
		}
		cr_assert(tli_mono_ms() < deadline,
		    "the broker was not ready within 20 s; see %s", b->log);
		ab_nap_ms(5);
	}
	txt = ab_read(b->ready);
	cr_assert_not_null(txt);
	txt[strcspn(txt, "\n")] = '\0';
	snprintf(b->url, sizeof(b->url), "%s", txt);
	free(txt);
}

/* Run the broker with this configuration and wait for it to exit (it
 * must refuse to start): returns its exit status and keeps its log. */
static inline int
ab_run_expect_exit(ab_broker *b)
{
	int st = -1;

	b->pid = ab_exec(b, true);
	waitpid(b->pid, &st, 0);
	b->pid = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether the broker's log contains `what`, waiting at most timeout_ms. */
static inline bool
ab_log_wait(const ab_broker *b, const char *what, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	for (;;) {
		char *txt = ab_read(b->log);
		bool found = txt != NULL && strstr(txt, what) != NULL;
		free(txt);
		if (found) {
			return true;
		}
		if (tli_mono_ms() > deadline) {
			return false;
		}
		ab_nap_ms(5);
	}
}

/* SIGTERM; the broker must exit cleanly (status 0) within 20 s, else it
 * is killed and the test fails. Removes the directory either way. */
static inline void
ab_stop(ab_broker *b)
{
	int st = 0;
	bool stopped = true;

	if (b->pid > 0) {
		int64_t deadline = tli_mono_ms() + 20000;

		kill(b->pid, SIGTERM);
		while (waitpid(b->pid, &st, WNOHANG) != b->pid) {
			if (tli_mono_ms() > deadline) {
				kill(b->pid, SIGKILL);
				waitpid(b->pid, &st, 0);
				stopped = false;
				break;
			}
			ab_nap_ms(5);
		}
		b->pid = -1;
	}
	if (b->dir != NULL) {
		tt_rmtree(b->dir);
		free(b->dir);
		b->dir = NULL;
	}
	cr_assert(stopped, "the broker did not stop within 20 s of SIGTERM");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "the broker did not exit cleanly (wait status %d)", st);
}

typedef struct ab_tls {
	const char *ca;
	const char *server_name;
	const char *cert;
	const char *key;
} ab_tls;

/* Open a client with a token (NULL: none) and TLS options (NULL: none);
 * returns the tl_client_open result, *out set on TL_OK. */
static inline int
ab_open(const char *url, const char *token, const ab_tls *tls, tl_client **out)
{
	tl_opts *o = NULL;
	int rv;

	*out = NULL;
	cr_assert_eq(tl_opts_alloc(&o), TL_OK);
	cr_assert_eq(tl_opts_set_url(o, url), TL_OK);
	cr_assert_eq(tl_opts_set_name(o, "auth-test"), TL_OK);
	cr_assert_eq(tl_opts_set_timeout(o, 3000), TL_OK);
	cr_assert_eq(tl_opts_set_reconnect(o, 20, 200), TL_OK);
	cr_assert_eq(tl_opts_set_token(o, token), TL_OK);
	if (tls != NULL) {
		cr_assert_eq(tl_opts_set_tls_ca(o, tls->ca), TL_OK);
		cr_assert_eq(
		    tl_opts_set_tls_server_name(o, tls->server_name), TL_OK);
		cr_assert_eq(
		    tl_opts_set_tls_cert(o, tls->cert, tls->key), TL_OK);
	}
	rv = tl_client_open(out, o);
	tl_opts_free(o);
	return rv;
}

/* A client that must open. */
static inline tl_client *
ab_client(const char *url, const char *token)
{
	tl_client *c;
	int rv = ab_open(url, token, NULL, &c);

	cr_assert_eq(rv, TL_OK, "open %s with token %s: %s", url,
	    token != NULL ? token : "(none)", tl_strerror(rv));
	return c;
}

#endif
