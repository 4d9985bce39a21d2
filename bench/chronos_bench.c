/*
 * tl-chronos-bench: tl-chronos's POST and PUT throughput and latency over
 * keep-alive HTTP (docs/chronos.md).
 *
 * It starts the real timelined from the build directory with tl-chronos
 * in-process (`--chronos FILE`, the configured durability), then drives
 * the API from N threads, each request over the kept-alive connections of
 * tlhttp's client (one per thread):
 *   1. POST /timers for S seconds: timers with an interval of 1 h (none
 *      pops during the run), each answered after the broker stored it;
 *   2. PUT /timers/<id> for S seconds over the ids the POSTs made (each
 *      is a delete and a create on the broker).
 * Each phase prints requests/s and the latency percentiles.
 *
 * usage: tl-chronos-bench [--connections N] [--seconds S]
 *                         [--durability always|interval:MS|none] [--keep]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "tlhttp.h"

#define MAX_IDS 400000
#define MAX_LAT 2000000

static const char *timer_json =
    "{\"timing\":{\"interval\":3600,\"repeat-for\":7200},\"callback\":{"
    "\"http\":{\"uri\":\"http://127.0.0.1:9/pop\",\"opaque\":\"REGISTER "
    "sip:alice@example.com refresh\"}},\"statistics\":{\"tag-info\":[{"
    "\"type\":\"REG\",\"count\":1}]}}";

typedef struct run {
	tlh_client *hc;
	const char *base;
	double until;
	bool put;
	_Atomic size_t nids;
	char (*ids)[33];
	_Atomic size_t nlat;
	int64_t *lat_us;
	_Atomic uint64_t errors;
	_Atomic size_t put_next;
} run;

static void
one_request(run *r)
{
	char path[64];
	const char *method = "POST";
	tlh_resp resp;
	char url[256];
	int64_t t0, dt;
	size_t k;

	if (r->put) {
		size_t n = atomic_load(&r->nids);
		size_t i = atomic_fetch_add(&r->put_next, 1) % n;
		snprintf(path, sizeof(path), "/timers/%s", r->ids[i]);
		method = "PUT";
	} else {
		snprintf(path, sizeof(path), "/timers");
	}
	snprintf(url, sizeof(url), "%s%s", r->base, path);
	t0 = tlb_bench_wall_us();
	tlh_fetch(r->hc, method, url, NULL, 0, timer_json, strlen(timer_json),
	    NULL, &resp);
	dt = tlb_bench_wall_us() - t0;
	if (resp.status != 200) {
		atomic_fetch_add(&r->errors, 1);
	} else if (!r->put) {
		const char *loc =
		    strstr(tli_buf_str(&resp.headers), "Location: /timers/");
		if (loc != NULL &&
		    (k = atomic_fetch_add(&r->nids, 1)) < MAX_IDS) {
			memcpy(r->ids[k], loc + 18, 32);
			r->ids[k][32] = '\0';
		}
	}
	if ((k = atomic_fetch_add(&r->nlat, 1)) < MAX_LAT) {
		r->lat_us[k] = dt;
	}
	tlh_resp_free(&resp);
}

static void *
worker(void *arg)
{
	run *r = arg;

	while (tlb_bench_mono_s() < r->until) {
		one_request(r);
	}
	return NULL;
}

static void
phase(run *r, const char *name, int conns, int seconds)
{
	pthread_t th[256];
	double t0 = tlb_bench_mono_s(), el;
	size_t n;
	char rate[32];

	atomic_store(&r->nlat, 0);
	atomic_store(&r->errors, 0);
	r->until = t0 + seconds;
	for (int i = 0; i < conns; i++) {
		pthread_create(&th[i], NULL, worker, r);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(th[i], NULL);
	}
	el = tlb_bench_mono_s() - t0;
	n = atomic_load(&r->nlat);
	n = n > MAX_LAT ? MAX_LAT : n;
	tlb_bench_sort_i64(r->lat_us, n);
	tlb_bench_fmt_rate(rate, sizeof(rate), (double) n / el, 1);
	printf("%-5s %8zu requests in %.1f s: %s/s   p50 %.2f ms   p99 %.2f "
	       "ms   p99.9 %.2f ms   max %.2f ms   errors %llu\n",
	    name, n, el, rate, tlb_bench_pct_ms(r->lat_us, n, 0.50),
	    tlb_bench_pct_ms(r->lat_us, n, 0.99),
	    tlb_bench_pct_ms(r->lat_us, n, 0.999),
	    tlb_bench_pct_ms(r->lat_us, n, 1.0),
	    (unsigned long long) atomic_load(&r->errors));
}

static char *
read_line(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[512];
	char *nl;

	if (f == NULL) {
		return NULL;
	}
	if (fgets(buf, sizeof(buf), f) == NULL) {
		fclose(f);
		return NULL;
	}
	fclose(f);
	if ((nl = strchr(buf, '\n')) == NULL) {
		return NULL;
	}
	*nl = '\0';
	return strdup(buf);
}

int
main(int argc, char **argv)
{
	int conns = 16, seconds = 10;
	const char *durability = "always";
	tlb_bench_common o = {0};
	char dir[400], conf[600], ready[600], logp[600], data[600], lis[700];
	char *bin = tlb_bench_default_timelined(), *url = NULL;
	run r;
	FILE *f;
	pid_t pid;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--connections") == 0 && i + 1 < argc) {
			conns = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			seconds = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--durability") == 0 &&
		    i + 1 < argc) {
			durability = argv[++i];
		} else if (strcmp(argv[i], "--keep") == 0) {
			o.keep = true;
		} else {
			fprintf(stderr,
			    "usage: tl-chronos-bench [--connections N] "
			    "[--seconds S] [--durability always|interval:MS|"
			    "none] [--keep]\n");
			return 2;
		}
	}
	if (conns < 1 || conns > 256 || seconds < 1) {
		fprintf(stderr,
		    "tl-chronos-bench: connections 1..256, seconds "
		    ">= 1\n");
		return 2;
	}
	if (tlb_bench_dir_make(dir, sizeof(dir), &o, "tl-chronos-bench") != 0) {
		return 1;
	}
	snprintf(conf, sizeof(conf), "%s/chronos.conf", dir);
	snprintf(ready, sizeof(ready), "%s/chronos.url", dir);
	snprintf(logp, sizeof(logp), "%s/timelined.log", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(lis, sizeof(lis), "ipc://%s/tl.sock", dir);
	f = fopen(conf, "w");
	if (f == NULL) {
		perror(conf);
		return 1;
	}
	fprintf(f, "listen = 127.0.0.1:0\nready_file = %s\n", ready);
	fclose(f);
	if ((pid = fork()) == 0) {
		FILE *lf = freopen(logp, "a", stderr);
		(void) lf;
		execl(bin, bin, "--data", data, "--listen", lis, "--metrics",
		    "off", "--durability", durability, "--chronos", conf,
		    (char *) NULL);
		_exit(127);
	}
	for (int i = 0; i < 6000 && (url = read_line(ready)) == NULL; i++) {
		usleep(10000);
	}
	if (url == NULL) {
		fprintf(stderr, "tl-chronos-bench: tl-chronos did not start\n");
		tlb_bench_show_log(logp);
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return 1;
	}
	memset(&r, 0, sizeof(r));
	r.base = url;
	r.ids = calloc(MAX_IDS, sizeof(*r.ids));
	r.lat_us = calloc(MAX_LAT, sizeof(*r.lat_us));
	if (r.ids == NULL || r.lat_us == NULL ||
	    tlh_client_alloc(&r.hc, (unsigned) conns) != TL_OK) {
		return 1;
	}
	printf("tl-chronos-bench: %d connections, %d s per phase, durability "
	       "%s, load %.2f\n",
	    conns, seconds, durability, tlb_bench_load_avg());
	phase(&r, "POST", conns, seconds);
	if (atomic_load(&r.nids) > 0) {
		if (atomic_load(&r.nids) > MAX_IDS) {
			atomic_store(&r.nids, MAX_IDS);
		}
		r.put = true;
		phase(&r, "PUT", conns, seconds);
	}
	tlh_client_free(r.hc);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	tlb_bench_dir_done(&o, dir);
	free(r.ids);
	free(r.lat_us);
	free(url);
	free(bin);
	return 0;
}
