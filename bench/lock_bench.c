/*
 * tl-lock-bench: named-lease (LOCK) round trips through the public SDK
 * against a real broker. Starts its own timelined (--broker PATH, default
 * <builddir>/broker/timelined) on a temporary directory and ipc socket, or
 * uses --url. Three workloads, each for --seconds (default 5):
 *
 *  - single:    one client takes and releases one name in a loop
 *               (tl_lock_try, then tl_lease_release(l, 0, true));
 *  - distinct:  --clients clients (default 4), each its own tl_client
 *               and thread, on its own name;
 *  - contended: the same clients on one name; an attempt that finds it
 *               held sleeps 1 ms and tries again.
 *
 * A cycle is one successful take plus its release: two requests, each
 * answered after a durable group commit. Prints cycles/s, attempts/s and
 * the median / p99 cycle time, and the load average.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timeline/timeline.h"

#include "bench_util.h"

#define MAX_CLIENTS 64
#define LEASE_MS 5000

typedef struct worker {
	pthread_t th;
	tl_client *c;
	char name[32]; /* the lock's id */
	char who[32];  /* the consumer id */
	double until;  /* monotonic s */
	uint64_t cycles, attempts;
	int64_t *lat_us; /* cycle times */
	size_t nlat, cap;
	int err;
} worker;

static const char *url;

static tl_client *
client_open(void)
{
	tl_opts *o;
	tl_client *c = NULL;

	tl_opts_alloc(&o);
	tl_opts_set_url(o, url);
	for (int i = 0; i < 100 && tl_client_open(&c, o) != TL_OK; i++) {
		tlb_bench_sleep_ms(50);
	}
	tl_opts_free(o);
	return c;
}

static void *
worker_main(void *arg)
{
	worker *w = arg;
	tl_lock_conf conf;

	memset(&conf, 0, sizeof(conf));
	conf.topic = "locks";
	conf.id = w->name;
	conf.consumer_id = w->who;
	conf.lease_ms = LEASE_MS;
	conf.create_group = "bench";
	while (tlb_bench_mono_s() < w->until) {
		int64_t t0 = tlb_bench_wall_us();
		tl_lease *l = NULL;
		int rv = tl_lock_try(w->c, &conf, &l, NULL);

		w->attempts++;
		if (rv == TL_ELEASED) {
			tlb_bench_sleep_ms(1);
			continue;
		}
		if (rv == TL_OK) {
			rv = tl_lease_release(l, 0, true);
			tl_lease_free(l);
		}
		if (rv != TL_OK) {
			w->err = rv;
			return NULL;
		}
		w->cycles++;
		if (w->nlat == w->cap) {
			size_t nc = w->cap ? w->cap * 2 : 4096;
			int64_t *nv = realloc(w->lat_us, nc * sizeof(*nv));
			if (nv == NULL) {
				continue;
			}
			w->lat_us = nv;
			w->cap = nc;
		}
		w->lat_us[w->nlat++] = tlb_bench_wall_us() - t0;
	}
	return NULL;
}

static int
run(const char *mode, int nclients, bool shared, double secs)
{
	worker *w = calloc((size_t) nclients, sizeof(*w));
	uint64_t cycles = 0, attempts = 0;
	int64_t *all;
	size_t n = 0;
	double t0, el;
	int rv = 0;

	for (int i = 0; i < nclients; i++) {
		if ((w[i].c = client_open()) == NULL) {
			fprintf(stderr, "cannot connect to %s\n", url);
			return 1;
		}
		snprintf(w[i].name, sizeof(w[i].name), "%s-%d", mode,
		    shared ? 0 : i);
		snprintf(w[i].who, sizeof(w[i].who), "worker-%d", i);
	}
	t0 = tlb_bench_mono_s();
	for (int i = 0; i < nclients; i++) {
		w[i].until = t0 + secs;
		pthread_create(&w[i].th, NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < nclients; i++) {
		pthread_join(w[i].th, NULL);
		cycles += w[i].cycles;
		attempts += w[i].attempts;
		n += w[i].nlat;
		if (w[i].err != TL_OK) {
			fprintf(stderr, "%s: client %d: %s\n", mode, i,
			    tl_strerror(w[i].err));
			rv = 1;
		}
	}
	el = tlb_bench_mono_s() - t0;
	all = malloc((n + 1) * sizeof(*all));
	n = 0;
	for (int i = 0; i < nclients; i++) {
		memcpy(all + n, w[i].lat_us, w[i].nlat * sizeof(*all));
		n += w[i].nlat;
		free(w[i].lat_us);
		tl_client_close(w[i].c);
	}
	tlb_bench_sort_i64(all, n);
	printf("%-9s clients %2d  cycles/s %8.0f  attempts/s %8.0f  cycle "
	       "p50 %.2f ms  p99 %.2f ms  (load %.2f)\n",
	    mode, nclients, (double) cycles / el, (double) attempts / el,
	    tlb_bench_pct_ms(all, n, 0.5), tlb_bench_pct_ms(all, n, 0.99),
	    tlb_bench_load_avg());
	fflush(stdout);
	free(all);
	free(w);
	return rv;
}

static pid_t
broker_start(const char *bin, const char *dir)
{
	char data[600], listen[600];
	pid_t pid;

	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(listen, sizeof(listen), "ipc://%s/tl.sock", dir);
	if ((pid = fork()) == 0) {
		char log[600];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(log, sizeof(log), "%s/timelined.log", dir);
		if (freopen(log, "a", stdout) == NULL ||
		    freopen(log, "a", stderr) == NULL) {
			_exit(127);
		}
		execl(bin, bin, "-d", data, "-l", listen, "--metrics", "off",
		    "-t", "locks", (char *) NULL);
		_exit(127);
	}
	return pid;
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {{"url", 1, NULL, 'u'},
	    {"broker", 1, NULL, 'b'}, {"seconds", 1, NULL, 's'},
	    {"clients", 1, NULL, 'c'}, {"dir", 1, NULL, 'd'}, {0, 0, 0, 0}};
	tlb_bench_common com = {.dir = NULL, .repeat = 1};
	const char *bin = NULL;
	char dir[512], ubuf[700];
	double secs = 5;
	int clients = 4, o, rv = 0;
	pid_t pid = 0;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'u':
			url = optarg;
			break;
		case 'b':
			bin = optarg;
			break;
		case 's':
			secs = atof(optarg);
			break;
		case 'c':
			clients = atoi(optarg);
			break;
		case 'd':
			com.dir = optarg;
			break;
		default:
			fprintf(stderr,
			    "usage: tl-lock-bench [--url URL | --broker PATH "
			    "[--dir DIR]] [--seconds S] [--clients N]\n");
			return 2;
		}
	}
	if (clients < 1 || clients > MAX_CLIENTS || secs <= 0) {
		fprintf(
		    stderr, "--clients 1..%d, --seconds > 0\n", MAX_CLIENTS);
		return 2;
	}
	if (url == NULL) {
		if (tlb_bench_dir_make(dir, sizeof(dir), &com, "tl-lock") !=
		    0) {
			return 1;
		}
		pid = broker_start(
		    bin != NULL ? bin : tlb_bench_default_timelined(), dir);
		snprintf(ubuf, sizeof(ubuf), "ipc://%s/tl.sock", dir);
		url = ubuf;
	}
	rv |= run("single", 1, false, secs);
	rv |= run("distinct", clients, false, secs);
	rv |= run("contended", clients, true, secs);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		tlb_bench_dir_done(&com, dir);
	}
	return rv;
}
