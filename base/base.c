/*
 * Allocation wrappers with a failure-injection hook, the clocks, and the
 * file helpers.
 */
#define _GNU_SOURCE /* nftw */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "signals.h"

static atomic_long alloc_fail_at = -1;
static atomic_ulong alloc_n;

static int
alloc_should_fail(void)
{
	long lim = atomic_load_explicit(&alloc_fail_at, memory_order_relaxed);
	unsigned long n = atomic_fetch_add(&alloc_n, 1);
	return lim >= 0 && n >= (unsigned long) lim;
}

void
tli_alloc_fail_after(long n)
{
	atomic_store(&alloc_n, 0);
	atomic_store(&alloc_fail_at, n);
}

unsigned long
tli_alloc_count(void)
{
	return atomic_load(&alloc_n);
}

void *
tli_alloc(size_t n)
{
	return alloc_should_fail() ? NULL : malloc(n == 0 ? 1 : n);
}

void *
tli_zalloc(size_t n)
{
	return alloc_should_fail() ? NULL : calloc(1, n == 0 ? 1 : n);
}

void *
tli_realloc(void *p, size_t n)
{
	return alloc_should_fail() ? NULL : realloc(p, n == 0 ? 1 : n);
}

void
tli_free(void *p)
{
	free(p);
}

char *
tli_strndup(const char *s, size_t n)
{
	char *d = tli_alloc(n + 1);
	if (d != NULL) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

int64_t
tli_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
tli_wall_ms(void)
{
	return tli_wall_us() / 1000;
}

int64_t
tli_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t
tli_mono_ms(void)
{
	return tli_mono_ns() / 1000000;
}

void
tli_deadline(struct timespec *ts, clockid_t clk, int64_t ms)
{
	clock_gettime(clk, ts);
	ts->tv_sec += (time_t) (ms / 1000);
	ts->tv_nsec += (long) (ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

void
tli_thread_stop(
    pthread_t th, pthread_mutex_t *mtx, pthread_cond_t *cv, bool *stop)
{
	pthread_mutex_lock(mtx);
	*stop = true;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(mtx);
	pthread_join(th, NULL);
}

char *
tli_read_file(const char *path, size_t max)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	long n;

	if (f == NULL) {
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	if ((size_t) n > max) {
		fclose(f);
		errno = EFBIG;
		return NULL;
	}
	if ((buf = tli_alloc((size_t) n + 1)) == NULL ||
	    fread(buf, 1, (size_t) n, f) != (size_t) n) {
		tli_free(buf);
		fclose(f);
		errno = buf == NULL ? ENOMEM : EIO;
		return NULL;
	}
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int
rmtree_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void) sb;
	(void) flag;
	(void) ftw;
	return remove(path);
}

int
tli_rmtree(const char *path)
{
	return nftw(path, rmtree_one, 16, FTW_DEPTH | FTW_PHYS);
}

void
tli_signals_block(sigset_t *sigs, bool hup)
{
	sigemptyset(sigs);
	sigaddset(sigs, SIGTERM);
	sigaddset(sigs, SIGINT);
	if (hup) {
		sigaddset(sigs, SIGHUP);
	}
	pthread_sigmask(SIG_BLOCK, sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int
tli_signal_wait(const sigset_t *sigs)
{
	int sig;

	return sigwait(sigs, &sig) == 0 ? sig : SIGTERM;
}

int
tli_free_port(void)
{
	int lo = 32768;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f != NULL) {
		if (fscanf(f, "%d", &lo) != 1) {
			lo = 32768;
		}
		fclose(f);
	}
	if (lo < 11000 || lo > 65535) {
		lo = 60000; /* an odd range: any port the bind finds free */
	}
	for (int tries = 0; tries < 200; tries++) {
		uint32_t r = 0;
		struct sockaddr_in sa;
		int fd, port, ok;

		if (getrandom(&r, sizeof(r), 0) != (ssize_t) sizeof(r)) {
			r = (uint32_t) tli_mono_ns() ^ (uint32_t) getpid();
		}
		port = 10000 + (int) (r % (uint32_t) (lo - 10000));
		if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
			return -1;
		}
		memset(&sa, 0, sizeof(sa));
		sa.sin_family = AF_INET;
		sa.sin_port = htons((uint16_t) port);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ok = bind(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
		close(fd);
		if (ok) {
			return port;
		}
	}
	return -1;
}
