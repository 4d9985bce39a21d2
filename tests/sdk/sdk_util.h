/*
 * Helpers of the SDK end-to-end suites (header-only: every test_*.c here is
 * its own executable). They run the real broker binary as a child process
 * on an ipc socket in a private temporary directory, wait for it to accept
 * connections with a deadline, kill and restart it on the same data, and
 * open clients with short timeouts and backoff.
 */
#ifndef TL_TESTS_SDK_UTIL_H
#define TL_TESTS_SDK_UTIL_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testutil.h"
#include "timeline/timeline.h"

typedef struct sb_broker {
	char *dir;
	char url[600];
	char sock[256];
	pid_t pid;
} sb_broker;

static inline const char *
sb_broker_path(void)
{
	static char path[1024];
	snprintf(path, sizeof(path), "%s/broker/timelined", TL_TEST_BINDIR);
	return path;
}

static inline void
sb_nap_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Whether a connect() to the broker's socket succeeds now. */
static inline bool
sb_accepts(const sb_broker *b)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	bool ok;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(b->sock) >= sizeof(sa.sun_path)) {
		close(fd);
		return false;
	}
	memcpy(sa.sun_path, b->sock, strlen(b->sock) + 1);
	ok = fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
	if (fd >= 0) {
		close(fd);
	}
	return ok;
}

/* Start the broker on b->dir (which must exist) and wait until it accepts
 * connections: at most 20 s, failing early if the child exits. */
static inline void
sb_spawn(sb_broker *b)
{
	const char *bin = sb_broker_path();
	char logp[600];
	int64_t deadline;

	cr_assert(access(bin, X_OK) == 0,
	    "the broker binary %s is not built: build broker/ first", bin);
	snprintf(logp, sizeof(logp), "%s/broker.log", b->dir);
	b->pid = fork();
	cr_assert(b->pid >= 0, "fork: %s", strerror(errno));
	if (b->pid == 0) {
		/* never outlive a test that timed out */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(bin, bin, "--data", b->dir, "--listen", b->url, "--topic",
		    "default", "--metrics", "off", (char *) NULL);
		_exit(127);
	}
	deadline = tli_mono_ms() + 20000;
	while (!sb_accepts(b)) {
		int st;
		if (waitpid(b->pid, &st, WNOHANG) == b->pid) {
			b->pid = -1;
			cr_assert_fail("the broker exited before accepting "
			               "connections (status %d); see %s",
			    st, logp);
		}
		cr_assert(tli_mono_ms() < deadline,
		    "the broker did not accept connections within 20 s; see %s",
		    logp);
		sb_nap_ms(10);
	}
}

static inline void
sb_start(sb_broker *b, const char *tag)
{
	memset(b, 0, sizeof(*b));
	b->dir = tt_mkdtemp(tag);
	snprintf(b->sock, sizeof(b->sock), "%s/tl.sock", b->dir);
	snprintf(b->url, sizeof(b->url), "ipc://%s", b->sock);
	sb_spawn(b);
}

/* Stop the broker with sig (SIGKILL: a crash) and reap it. */
static inline void
sb_kill(sb_broker *b, int sig)
{
	int st;

	if (b->pid > 0) {
		kill(b->pid, sig);
		waitpid(b->pid, &st, 0);
		b->pid = -1;
	}
}

static inline void
sb_stop(sb_broker *b)
{
	sb_kill(b, SIGTERM);
	if (b->dir != NULL) {
		tt_rmtree(b->dir);
		free(b->dir);
		b->dir = NULL;
	}
}

static inline tl_client *
sb_client(const sb_broker *b)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	int rv;

	cr_assert_eq(tl_opts_alloc(&o), TL_OK);
	cr_assert_eq(tl_opts_set_url(o, b->url), TL_OK);
	cr_assert_eq(tl_opts_set_name(o, "sdk-test"), TL_OK);
	cr_assert_eq(tl_opts_set_timeout(o, 5000), TL_OK);
	cr_assert_eq(tl_opts_set_reconnect(o, 20, 200), TL_OK);
	rv = tl_client_open(&c, o);
	tl_opts_free(o);
	cr_assert_eq(
	    rv, TL_OK, "tl_client_open(%s): %s", b->url, tl_strerror(rv));
	return c;
}

/* Create a topic with the defaults (and an optional lease length). */
static inline void
sb_topic(tl_client *c, const char *name, int64_t lease_ms)
{
	tl_topic_conf conf;
	int rv;

	memset(&conf, 0, sizeof(conf));
	conf.name = name;
	conf.default_lease_ms = lease_ms;
	rv = tl_topic_create(c, &conf);
	cr_assert_eq(
	    rv, TL_OK, "tl_topic_create(%s): %s", name, tl_strerror(rv));
}

#endif
