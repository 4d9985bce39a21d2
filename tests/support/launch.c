/*
 * The launcher of the end-to-end suites (see launch.h): fork and exec with
 * the output in a log, ready-file and exit waits with deadlines, signals,
 * and the configuration file written from key/value settings.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "launch.h"

#define TT_DEFAULT_TIMEOUT_MS 20000

const char *
tt_bin_timelined(void)
{
	return TL_TEST_BINDIR "/broker/timelined";
}

const char *
tt_bin_store(void)
{
	return TL_TEST_BINDIR "/storage/tl-store";
}

const char *
tt_bin_msc4140(void)
{
	return TL_TEST_BINDIR "/broker/msc4140/tl-msc4140";
}

const char *
tt_bin_chronos(void)
{
	return TL_TEST_BINDIR "/broker/chronos/tl-chronos";
}

int
tt_run_conf(const char *bin, const char *dir, const char *conf_name,
    const char *conf_text, const char *args, char *out, size_t cap)
{
	char conf[600], cmd[2048];
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/%s", dir, conf_name);
	f = fopen(conf, "w");
	cr_assert(f != NULL, "%s: %s", conf, strerror(errno));
	fputs(conf_text, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s -c %s %s", bin, conf, args);
	return tt_run(cmd, out, cap);
}

int
tt_run(const char *cmd, char *out, size_t cap)
{
	char line[2200];
	FILE *p;
	size_t n;
	int st;

	cr_assert((size_t) snprintf(line, sizeof(line), "%s 2>&1", cmd) <
	    sizeof(line));
	p = popen(line, "r");
	cr_assert(p != NULL);
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void
tt_nap_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

void
tt_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

char *
tt_read_file(const char *path)
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
	if (n < 0 || (buf = malloc((size_t) n + 1)) == NULL) {
		fclose(f);
		return NULL;
	}
	n = (long) fread(buf, 1, (size_t) n, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

int
tt_tcp_connect(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0) {
		return -1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t) port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return tt_connect_or_close(fd, &sa, sizeof(sa));
}

int
tt_connect_or_close(int fd, const void *sa, size_t len)
{
	if (connect(fd, sa, (socklen_t) len) != 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* A free port, and one no other test process holds: the suites run two
 * tests at a time (--jobs 2) and ctest may run suites side by side, each
 * picking ports at random before its nodes bind them, so a port is also
 * claimed with a lock on a file named after it (/tmp/tl-test-ports/N),
 * held until this process exits (the kernel drops it then, however the
 * process ends; the descriptor is not passed to the processes it starts). */
int
tt_free_port(void)
{
	const char *dir = "/tmp/tl-test-ports";

	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		return tli_free_port();
	}
	(void) chmod(dir, 0777);
	for (int tries = 0; tries < 100; tries++) {
		int port = tli_free_port();
		char path[64];
		int fd;

		if (port <= 0) {
			return port;
		}
		snprintf(path, sizeof(path), "%s/%d", dir, port);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
		if (fd < 0) {
			return port; /* no lock to take here: the port as it is
			              */
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			return port; /* fd stays open: the claim lasts */
		}
		close(fd); /* another test process holds it: another port */
	}
	return -1;
}

/* ---- description ---- */

static void
tt_proc_push(tt_proc *p, const char *arg)
{
	cr_assert_lt(
	    p->argc, TT_PROC_MAXARGS, "%s: too many arguments", p->name);
	cr_assert_lt(p->arglen + strlen(arg), sizeof(p->argstore),
	    "%s: arguments too long", p->name);
	p->argv[p->argc] =
	    memcpy(p->argstore + p->arglen, arg, strlen(arg) + 1);
	p->arglen += strlen(arg) + 1;
	p->argv[++p->argc] = NULL;
}

void
tt_proc_init(tt_proc *p, const char *bin, const char *dir, const char *name)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->bin, sizeof(p->bin), "%s", bin);
	snprintf(p->log, sizeof(p->log), "%s/%s.log", dir, name);
	snprintf(p->ready, sizeof(p->ready), "%s/%s.ready", dir, name);
	snprintf(p->conf, sizeof(p->conf), "%s/%s.conf", dir, name);
	p->conf_flag = "-c";
	p->timeout_ms = TT_DEFAULT_TIMEOUT_MS;
	p->pid = -1;
	tt_proc_push(p, bin);
}

void
tt_proc_timelined(tt_proc *p, const char *dir, const char *name)
{
	tt_proc_init(p, tt_bin_timelined(), dir, name);
	tt_proc_args(p, "--ready-file", p->ready, NULL);
}

void
tt_proc_fini(tt_proc *p)
{
	if (p->pid > 0) {
		tt_proc_kill(p);
	}
	p->argc = 0;
	p->argv[0] = NULL;
	p->arglen = 0;
	p->settings_len = 0;
}

void
tt_proc_arg(tt_proc *p, const char *fmt, ...)
{
	char arg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(arg, sizeof(arg), fmt, ap);
	va_end(ap);
	tt_proc_push(p, arg);
}

void
tt_proc_args(tt_proc *p, ...)
{
	const char *a;
	va_list ap;

	va_start(ap, p);
	while ((a = va_arg(ap, const char *)) != NULL) {
		tt_proc_push(p, a);
	}
	va_end(ap);
}

void
tt_proc_set(tt_proc *p, const char *key, const char *fmt, ...)
{
	char val[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	tt_proc_conf_text(p, key);
	tt_proc_conf_text(p, " = ");
	tt_proc_conf_text(p, val);
	tt_proc_conf_text(p, "\n");
}

void
tt_proc_conf_text(tt_proc *p, const char *text)
{
	size_t n = strlen(text);

	cr_assert_lt(p->settings_len + n, sizeof(p->settings),
	    "%s: settings too long", p->name);
	memcpy(p->settings + p->settings_len, text, n + 1);
	p->settings_len += n;
}

void
tt_proc_conf_reset(tt_proc *p)
{
	p->settings_len = 0;
	p->settings[0] = '\0';
}

/* ---- running ---- */

void
tt_proc_spawn(tt_proc *p)
{
	char *argv[TT_PROC_MAXARGS + 3];
	int argc = 0, logflags;

	cr_assert_leq(
	    p->pid, 0, "%s already runs (pid %d)", p->name, (int) p->pid);
	if (strchr(p->bin, '/') != NULL) {
		cr_assert(access(p->bin, X_OK) == 0,
		    "%s is not built (%s): build it first", p->name, p->bin);
	}
	for (int i = 0; i < p->argc; i++) {
		argv[argc++] = p->argv[i];
	}
	if (p->settings_len > 0) {
		tt_write_file(p->conf, p->settings);
		if (p->conf_flag != NULL) {
			argv[argc++] = (char *) p->conf_flag;
			argv[argc++] = p->conf;
		}
	}
	argv[argc] = NULL;
	unlink(p->ready);
	p->addr[0] = '\0';
	logflags = O_WRONLY | O_CREAT | (p->trunc_log ? O_TRUNC : O_APPEND);
	p->trunc_log = false;
	p->pid = fork();
	cr_assert(p->pid >= 0, "fork: %s", strerror(errno));
	if (p->pid == 0) {
		int fd = open(p->log, logflags, 0644);

		/* Never outlive a test that failed or timed out. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
}

bool
tt_proc_alive(tt_proc *p)
{
	int st;

	if (p->pid <= 0) {
		return false;
	}
	if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
		p->pid = -1;
		return false;
	}
	return true;
}

static bool
tt_ready_present(const tt_proc *p)
{
	struct stat st;

	return stat(p->ready, &st) == 0 && st.st_size > 0;
}

void
tt_proc_wait_ready(tt_proc *p)
{
	int64_t deadline = tli_mono_ms() + p->timeout_ms;
	char *txt;

	while (!tt_ready_present(p)) {
		int st;

		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			p->pid = -1;
			tt_proc_dump_log(p);
			cr_assert_fail("%s exited before it was ready (wait "
			               "status 0x%x); log %s",
			    p->name, st, p->log);
		}
		if (tli_mono_ms() >= deadline) {
			tt_proc_dump_log(p);
			cr_assert_fail("%s did not write %s within %d ms",
			    p->name, p->ready, p->timeout_ms);
		}
		tt_nap_ms(5);
	}
	txt = tt_read_file(p->ready);
	cr_assert_not_null(txt, "%s: cannot read %s", p->name, p->ready);
	txt[strcspn(txt, "\r\n")] = '\0';
	snprintf(p->addr, sizeof(p->addr), "%s", txt);
	free(txt);
}

void
tt_proc_start(tt_proc *p)
{
	tt_proc_spawn(p);
	tt_proc_wait_ready(p);
}

int
tt_proc_signal(tt_proc *p, int sig, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	int st = -1;

	if (p->pid <= 0) {
		return -1;
	}
	kill(p->pid, sig);
	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);

		if (r == p->pid || (r < 0 && errno != EINTR)) {
			break;
		}
		if (tli_mono_ms() >= deadline) {
			/* It did not stop: say so through the status. */
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			st = -2;
			break;
		}
		tt_nap_ms(5);
	}
	p->pid = -1;
	return st;
}

void
tt_proc_kill(tt_proc *p)
{
	tt_proc_signal(p, SIGKILL, p->timeout_ms);
}

/* Send sig and wait until the child reports the state it leads to
 * (stopped, or continued): the caller's next step sees it in effect. */
static void
tt_proc_jobctl(tt_proc *p, int sig, int flag, const char *what)
{
	int st;

	cr_assert_gt(p->pid, 0, "%s does not run", p->name);
	kill(p->pid, sig);
	for (;;) {
		pid_t r = waitpid(p->pid, &st, flag);

		if (r < 0 && errno == EINTR) {
			continue;
		}
		cr_assert_eq(
		    r, p->pid, "%s: waitpid: %s", p->name, strerror(errno));
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			p->pid = -1;
			tt_proc_dump_log(p);
			cr_assert_fail("%s ended (wait status 0x%x) instead of "
			               "being %s",
			    p->name, st, what);
		}
		if ((flag == WUNTRACED && WIFSTOPPED(st)) ||
		    (flag == WCONTINUED && WIFCONTINUED(st))) {
			return;
		}
	}
}

void
tt_proc_pause(tt_proc *p)
{
	tt_proc_jobctl(p, SIGSTOP, WUNTRACED, "stopped");
}

void
tt_proc_resume(tt_proc *p)
{
	tt_proc_jobctl(p, SIGCONT, WCONTINUED, "continued");
}

int
tt_proc_stop(tt_proc *p)
{
	int st = tt_proc_signal(p, SIGTERM, p->timeout_ms);

	/* Whoever checks the status, an unclean end shows its log. */
	if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		tt_proc_dump_log(p);
	}
	return st;
}

void
tt_proc_stop_clean(tt_proc *p)
{
	int st;

	if (p->pid <= 0) {
		return;
	}
	st = tt_proc_stop(p);
	if (st == -2) {
		cr_assert_fail("%s did not stop within %d ms of SIGTERM",
		    p->name, p->timeout_ms);
	}
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		cr_assert_fail(
		    "%s did not exit cleanly (wait status %d)", p->name, st);
	}
}

void
tt_proc_restart(tt_proc *p, int sig)
{
	tt_proc_signal(p, sig, p->timeout_ms);
	tt_proc_start(p);
}

int
tt_proc_wait_exit(tt_proc *p, int timeout_ms)
{
	int st = tt_proc_signal(p, 0, timeout_ms);

	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the log ---- */

void
tt_proc_dump_log(const tt_proc *p)
{
	char *txt = tt_read_file(p->log);

	if (txt == NULL) {
		return;
	}
	fprintf(stderr, "---- %s (%s) ----\n%s---- end of %s ----\n", p->name,
	    p->log, txt, p->name);
	free(txt);
}

bool
tt_proc_log_wait(const tt_proc *p, const char *what, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;

	for (;;) {
		char *txt = tt_read_file(p->log);
		bool found = txt != NULL && strstr(txt, what) != NULL;

		free(txt);
		if (found) {
			return true;
		}
		if (tli_mono_ms() > deadline) {
			return false;
		}
		tt_nap_ms(5);
	}
}

void
tt_proc_check_log(const tt_proc *p)
{
	static const char *bad[] = {"ERROR: AddressSanitizer",
	    "ERROR: LeakSanitizer", "runtime error:", NULL};
	char *txt = tt_read_file(p->log);

	if (txt == NULL) {
		return;
	}
	for (int i = 0; bad[i] != NULL; i++) {
		if (strstr(txt, bad[i]) != NULL) {
			fprintf(stderr, "%s\n", txt);
			free(txt);
			cr_assert_fail("%s in %s", bad[i], p->log);
		}
	}
	free(txt);
}

int
tt_tcp_open(int port, int timeout_s)
{
	struct timeval tv = {timeout_s, 0};
	int fd = tt_tcp_connect(port);

	cr_assert(fd >= 0, "connect to port %d: %s", port, strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* All n bytes sent (out) or received; false on close, error or timeout. */
static bool
xfer_all(int fd, uint8_t *b, size_t n, bool out)
{
	while (n > 0) {
		ssize_t k =
		    out ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);

		if (k <= 0) {
			return false;
		}
		b += k;
		n -= (size_t) k;
	}
	return true;
}

bool
tt_send_all(int fd, const void *p, size_t n)
{
	return xfer_all(fd, (uint8_t *) (uintptr_t) p, n, true);
}

bool
tt_recv_all(int fd, void *p, size_t n)
{
	return xfer_all(fd, p, n, false);
}

bool
tt_closed_within(int fd, int timeout_ms)
{
	int64_t end = tli_mono_ms() + timeout_ms;
	uint8_t buf[4096];

	for (;;) {
		int64_t left = end - tli_mono_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (left <= 0 || poll(&pfd, 1, (int) left) <= 0) {
			return false;
		}
		if (recv(fd, buf, sizeof(buf), 0) <= 0) {
			return true;
		}
	}
}

long
tt_proc_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
	cr_assert_not_null(f = fopen(path, "r"), "%s", path);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	cr_assert(v >= 0, "no %s in %s", key, path);
	return v;
}

void
tt_fill_disk(const char *dir, char *path, size_t plen)
{
	static char chunk[64 * 1024];
	FILE *f;

	snprintf(path, plen, "%s/filler", dir);
	cr_assert_not_null(f = fopen(path, "w"), "%s", path);
	memset(chunk, 'f', sizeof(chunk));
	while (fwrite(chunk, 1, sizeof(chunk), f) == sizeof(chunk)) {
	}
	/* the last partial chunk, byte by byte to the last free page */
	while (fwrite(chunk, 1, 1, f) == 1 && fflush(f) == 0) {
	}
	fclose(f);
}

int
tt_threads_named(pid_t pid, const char *comm, pid_t *out, int max)
{
	char path[128];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
	if ((d = opendir(path)) == NULL) {
		return 0;
	}
	while (n < max && (e = readdir(d)) != NULL) {
		char cpath[512], name[64];
		FILE *f;

		if (e->d_name[0] == '.') {
			continue;
		}
		snprintf(cpath, sizeof(cpath), "%s/%s/comm", path, e->d_name);
		if ((f = fopen(cpath, "r")) == NULL) {
			continue;
		}
		if (fgets(name, sizeof(name), f) != NULL) {
			name[strcspn(name, "\n")] = '\0';
			if (strcmp(name, comm) == 0) {
				out[n++] = (pid_t) atoi(e->d_name);
			}
		}
		fclose(f);
	}
	closedir(d);
	return n;
}
