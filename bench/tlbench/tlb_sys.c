/*
 * tlb_sys.c: what the drivers of tl-bench share (see driver.h): message
 * bodies that carry their number and due time, clocks, loopback ports,
 * child processes (spawn, wait until the port accepts, stop), the
 * server's resident memory and disk bytes, and a buffered TCP connection
 * on which text protocols are pipelined.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "driver.h"

/* ---- bodies ---- */

void
tlb_body_fill(char *body, size_t len, uint64_t seq, int64_t due_ms)
{
	int n = snprintf(body, len, "%" PRIu64 " %" PRId64 "\n", seq, due_ms);

	if (n > 0 && (size_t) n < len) {
		memset(body + n, 'x', len - (size_t) n);
	}
}

bool
tlb_body_parse(const void *body, size_t len, uint64_t *seq, int64_t *due)
{
	char buf[TLB_BODY_MIN + 1];
	unsigned long long s;
	long long d;

	if (body == NULL || len < TLB_BODY_MIN) {
		return false;
	}
	memcpy(buf, body, TLB_BODY_MIN);
	buf[TLB_BODY_MIN] = '\0';
	if (sscanf(buf, "%llu %lld\n", &s, &d) != 2) {
		return false;
	}
	*seq = s;
	*due = d;
	return true;
}

/* ---- processes and ports ---- */

int
tlb_free_port(void)
{
	return tli_free_port();
}

pid_t
tlb_spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid < 0) {
		perror("fork");
		return -1;
	}
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int nul = open("/dev/null", O_RDONLY);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		if (nul >= 0) {
			dup2(nul, 0);
			close(nul);
		}
		execvp(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

static int
tcp_connect(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t) port);
	if (connect(fd, (struct sockaddr *) &a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
tlb_wait_port(int port, pid_t pid, int deadline_ms, const char *log)
{
	double end = tlb_bench_mono_s() + deadline_ms / 1000.0;
	int st;

	while (tlb_bench_mono_s() < end) {
		int fd = tcp_connect(port);

		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (waitpid(pid, &st, WNOHANG) == pid) {
			fprintf(stderr, "server %d exited (status %d)\n",
			    (int) pid,
			    WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
			tlb_bench_show_log(log);
			return -1;
		}
		tlb_bench_sleep_ms(1);
	}
	fprintf(stderr, "server %d did not accept on port %d in %d ms\n",
	    (int) pid, port, deadline_ms);
	tlb_bench_show_log(log);
	return -1;
}

double
tlb_stop_pid(pid_t pid, int sig, int deadline_ms)
{
	double t0 = tlb_bench_mono_s();
	double end = t0 + deadline_ms / 1000.0;
	int st;

	if (pid <= 0) {
		return 0;
	}
	kill(pid, sig);
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR)) {
			break;
		}
		if (tlb_bench_mono_s() > end) {
			fprintf(stderr, "server %d did not stop: SIGKILL\n",
			    (int) pid);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		tlb_bench_sleep_ms(1);
	}
	return tlb_bench_mono_s() - t0;
}

static _Thread_local uint64_t du_sum;

static int
du_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	const char *name = path + ftw->base;
	size_t n = strlen(name);

	(void) flag;
	if (n > 4 && strcmp(name + n - 4, ".log") == 0) {
		return 0;
	}
	du_sum += (uint64_t) sb->st_blocks * 512u;
	return 0;
}

uint64_t
tlb_dir_bytes(const char *dir)
{
	du_sum = 0;
	nftw(dir, du_one, 16, FTW_PHYS);
	return du_sum;
}

/* ---- the server process ---- */

static tlb_proc *
proc_of(tlb_server *s)
{
	return (tlb_proc *) (void *) s; /* its first member */
}

int
tlb_proc_restart(tlb_server *s)
{
	tlb_proc *p = proc_of(s);
	char *argv[TLB_PROC_ARGS];

	if (p->k->spawn != NULL) {
		return p->k->spawn(s);
	}
	p->k->args(s, argv);
	if ((p->pid = tlb_spawn(argv, p->log)) < 0) {
		return -1;
	}
	if (tlb_wait_port(p->port, p->pid, p->k->start_ms, p->log) != 0) {
		tlb_stop_pid(p->pid, SIGKILL, 1000);
		p->pid = 0;
		return -1;
	}
	return 0;
}

int
tlb_proc_start(
    tlb_server **out, const tlb_server_conf *conf, const tlb_proc_kind *k)
{
	tlb_server *s = calloc(1, k->size);
	tlb_proc *p = proc_of(s);

	if (s == NULL) {
		return -1;
	}
	p->k = k;
	snprintf(p->dir, sizeof(p->dir), "%s", conf->dir);
	snprintf(p->log, sizeof(p->log), "%s/%s", conf->dir, k->log);
	snprintf(p->data, sizeof(p->data), "%s%s%s", conf->dir,
	    k->data != NULL ? "/" : "", k->data != NULL ? k->data : "");
	if ((p->port = tlb_free_port()) < 0 ||
	    (k->prepare != NULL && k->prepare(s, conf) != 0) ||
	    tlb_proc_restart(s) != 0) {
		free(s);
		return -1;
	}
	*out = s;
	return 0;
}

double
tlb_proc_stop_only(tlb_server *s)
{
	tlb_proc *p = proc_of(s);
	double t = tlb_stop_pid(p->pid, SIGTERM, p->k->term_ms);

	p->pid = 0;
	return t;
}

void
tlb_proc_stop(tlb_server *s)
{
	if (s != NULL) {
		tlb_proc_stop_only(s);
		free(s);
	}
}

void
tlb_proc_kill9(tlb_server *s)
{
	tlb_stop_pid(proc_of(s)->pid, SIGKILL, 30000);
	proc_of(s)->pid = 0;
}

int
tlb_proc_rss(tlb_server *s, uint64_t *kb)
{
	return tlb_bench_proc_mem(proc_of(s)->pid, kb, NULL);
}

uint64_t
tlb_proc_disk(tlb_server *s)
{
	return tlb_dir_bytes(proc_of(s)->data);
}

/* ---- buffered connections ---- */

int
tlb_sock_open(tlb_sock *s, int port, int timeout_ms)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	int one = 1;

	memset(s, 0, sizeof(*s));
	if ((s->fd = tcp_connect(port)) < 0) {
		return -1;
	}
	setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	s->rcap = 1 << 16;
	s->wcap = 1 << 16;
	s->rbuf = malloc(s->rcap);
	s->wbuf = malloc(s->wcap);
	if (s->rbuf == NULL || s->wbuf == NULL) {
		tlb_sock_close(s);
		return -1;
	}
	return 0;
}

void
tlb_sock_close(tlb_sock *s)
{
	if (s->fd >= 0) {
		close(s->fd);
	}
	free(s->rbuf);
	free(s->wbuf);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

static int
grow(char **buf, size_t *cap, size_t need)
{
	size_t c = *cap;
	char *p;

	if (need <= c) {
		return 0;
	}
	while (c < need) {
		c *= 2;
	}
	if ((p = realloc(*buf, c)) == NULL) {
		return -1;
	}
	*buf = p;
	*cap = c;
	return 0;
}

int
tlb_sock_put(tlb_sock *s, const void *p, size_t n)
{
	if (grow(&s->wbuf, &s->wcap, s->wlen + n) != 0) {
		return -1;
	}
	memcpy(s->wbuf + s->wlen, p, n);
	s->wlen += n;
	return 0;
}

int
tlb_sock_printf(tlb_sock *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = s->wcap - s->wlen;

		va_start(ap, fmt);
		n = vsnprintf(s->wbuf + s->wlen, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			return -1;
		}
		if ((size_t) n < room) {
			s->wlen += (size_t) n;
			return 0;
		}
		if (grow(&s->wbuf, &s->wcap, s->wlen + (size_t) n + 1) != 0) {
			return -1;
		}
	}
}

int
tlb_sock_flush(tlb_sock *s)
{
	size_t off = 0;

	while (off < s->wlen) {
		ssize_t n =
		    send(s->fd, s->wbuf + off, s->wlen - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			return -1;
		}
		off += (size_t) n;
	}
	s->wlen = 0;
	return 0;
}

/* Read more into the buffer (at least one byte); 0 or -1. */
static int
fill(tlb_sock *s)
{
	ssize_t n;

	if (s->rpos > 0 && s->rpos == s->rlen) {
		s->rpos = s->rlen = 0;
	}
	if (s->rlen == s->rcap) {
		if (s->rpos > 0) {
			memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
			s->rlen -= s->rpos;
			s->rpos = 0;
		} else if (grow(&s->rbuf, &s->rcap, s->rcap * 2) != 0) {
			return -1;
		}
	}
	do {
		n = recv(s->fd, s->rbuf + s->rlen, s->rcap - s->rlen, 0);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		return -1;
	}
	s->rlen += (size_t) n;
	return 0;
}

static char *
find_crlf(const tlb_sock *s)
{
	const char *p = s->rbuf + s->rpos;
	size_t n = s->rlen - s->rpos;

	while (n >= 2) {
		const char *r = memchr(p, '\r', n - 1);

		if (r == NULL) {
			return NULL;
		}
		if (r[1] == '\n') {
			return (char *) r;
		}
		n -= (size_t) (r + 1 - p);
		p = r + 1;
	}
	return NULL;
}

bool
tlb_sock_has_line(const tlb_sock *s)
{
	return find_crlf(s) != NULL;
}

long
tlb_sock_line(tlb_sock *s, char **line)
{
	char *e;

	while ((e = find_crlf(s)) == NULL) {
		if (fill(s) != 0) {
			return -1;
		}
	}
	*line = s->rbuf + s->rpos;
	*e = '\0';
	s->rpos = (size_t) (e + 2 - s->rbuf);
	return (long) (e - *line);
}

int
tlb_sock_bytes(tlb_sock *s, size_t n, char **p)
{
	while (s->rlen - s->rpos < n + 2) {
		if (s->rpos > 0) {
			memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
			s->rlen -= s->rpos;
			s->rpos = 0;
		}
		if (grow(&s->rbuf, &s->rcap, n + 3) != 0 || fill(s) != 0) {
			return -1;
		}
	}
	*p = s->rbuf + s->rpos;
	s->rpos += n + 2;
	return 0;
}

int
tlb_pipe_put(tlb_conn *c, tlb_sock *s, const tlb_pipe *pipe,
    const tlb_item *items, size_t n, size_t body_len, tlb_ack_fn ack, void *arg)
{
	char *body = malloc(body_len);
	size_t sent = 0, got = 0;
	int rv = -1;

	if (body == NULL) {
		return -1;
	}
	while (got < n) {
		for (; sent < n && sent - got < pipe->window; sent++) {
			tlb_body_fill(body, body_len, items[sent].seq,
			    items[sent].due_ms);
			if (pipe->send(c, &items[sent], body, body_len) != 0) {
				goto out;
			}
		}
		if (tlb_sock_flush(s) != 0) {
			goto out;
		}
		do {
			if (pipe->reply(c) != 0) {
				goto out;
			}
			ack(arg, items[got++].seq);
		} while (got < sent && tlb_sock_has_line(s));
	}
	rv = 0;
out:
	free(body);
	return rv;
}

tlb_conn *
tlb_text_connect(tlb_server *srv, size_t size)
{
	tlb_text_conn *t = calloc(1, size);

	if (t == NULL) {
		return NULL;
	}
	if (tlb_sock_open(&t->s, proc_of(srv)->port, TLB_SOCK_TIMEOUT_MS) !=
	    0) {
		free(t);
		return NULL;
	}
	t->srv = srv;
	return (tlb_conn *) (void *) t;
}

void
tlb_text_disconnect(tlb_conn *c)
{
	tlb_text_conn *t = (tlb_text_conn *) (void *) c;

	if (t != NULL) {
		tlb_sock_close(&t->s);
		free(t);
	}
}
