/*
 * tl-msc4140-bench: the MSC4140 gateway's throughput over keep-alive HTTP.
 *
 * It starts a minimal homeserver of its own (libmicrohttpd: whoami for the
 * bench tokens, 200 for anything else), the real timelined from the build
 * directory with the gateway in-process (rate limits off, the configured
 * durability), then drives the gateway from N threads, each with one
 * keep-alive connection:
 *   1. schedules: PUT .../send/m.room.message/TXN?org.matrix.msc4140.delay
 *      = 1 h, spread over 64 users per thread (the per-user limit of 100
 *      stays in force), each answered after the broker stored it;
 *   2. restarts: POST .../delayed_events/ID/restart over the scheduled ids,
 *      as Element Call does for every call member.
 * Each phase prints requests/s and the latency percentiles. With --wrk the
 * restarts are driven by wrk (a lighter client than libcurl threads, which
 * share the machine's cores with the gateway) through a generated Lua
 * script over the same ids.
 *
 * usage: tl-msc4140-bench [--connections N] [--seconds S]
 *                         [--durability always|interval:MS|none] [--wrk]
 *                         [--keep]
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define USERS_PER_THREAD 64
#define MAX_IDS 200000

typedef struct worker {
	int idx;
	const char *gw;
	double until;
	bool restart;
	/* results */
	uint32_t *lat_us;
	size_t nlat, cap;
	uint64_t errors;
	char (*ids)[48];
	size_t nids, idcap;
	pthread_t thr;
} worker;

static double
mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---- the homeserver ---- */

static enum MHD_Result
hs_answer(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *data, size_t *len,
    void **state)
{
	static int first;
	char body[256];
	struct MHD_Response *r;
	enum MHD_Result rv;
	const char *auth;

	(void) cls;
	(void) method;
	(void) version;
	(void) data;
	if (*state == NULL) {
		*state = &first;
		return MHD_YES;
	}
	if (*len > 0) {
		*len = 0;
		return MHD_YES;
	}
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (strstr(url, "/account/whoami") != NULL) {
		if (auth != NULL && strcmp(auth, "Bearer bench") == 0) {
			/* the gateway checks its appservice token */
			snprintf(body, sizeof(body),
			    "{\"user_id\":\"@gateway:bench\"}");
		} else if (auth == NULL ||
		    strncmp(auth, "Bearer bench-", 13) != 0) {
			snprintf(body, sizeof(body),
			    "{\"errcode\":\"M_UNKNOWN_TOKEN\",\"error\":"
			    "\"no\"}");
		} else {
			snprintf(body, sizeof(body),
			    "{\"user_id\":\"@%s:bench\",\"device_id\":\"D\"}",
			    auth + 7);
		}
	} else {
		snprintf(body, sizeof(body), "{\"event_id\":\"$bench\"}");
	}
	r = MHD_create_response_from_buffer(
	    strlen(body), body, MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(r, "Content-Type", "application/json");
	rv = MHD_queue_response(
	    c, strstr(body, "M_UNKNOWN_TOKEN") ? 401u : 200u, r);
	MHD_destroy_response(r);
	return rv;
}

/* ---- the client ---- */

static size_t
collect(char *p, size_t size, size_t n, void *arg)
{
	char *buf = arg;
	size_t have = strlen(buf), k = size * n;

	if (have + k < 512) {
		memcpy(buf + have, p, k);
		buf[have + k] = '\0';
	}
	return k;
}

static void
lat_add(worker *w, uint32_t us)
{
	if (w->nlat == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 65536;
		uint32_t *n = realloc(w->lat_us, cap * sizeof(*n));
		if (n == NULL) {
			return;
		}
		w->lat_us = n;
		w->cap = cap;
	}
	w->lat_us[w->nlat++] = us;
}

static void *
work(void *arg)
{
	worker *w = arg;
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char url[512], auth[128], resp[512];
	uint64_t seq = 0;

	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	while (mono_s() < w->until) {
		struct curl_slist *hh = NULL;
		double t0;
		long status = 0;
		resp[0] = '\0';
		if (w->restart) {
			if (w->nids == 0) {
				break;
			}
			snprintf(url, sizeof(url),
			    "%s/_matrix/client/unstable/org.matrix.msc4140/"
			    "delayed_events/%s/restart",
			    w->gw, w->ids[seq % w->nids]);
			curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
		} else {
			snprintf(url, sizeof(url),
			    "%s/_matrix/client/v3/rooms/!bench:bench/send/"
			    "m.room.message/t%d-%llu?org.matrix.msc4140.delay="
			    "3600000",
			    w->gw, w->idx, (unsigned long long) seq);
			snprintf(auth, sizeof(auth),
			    "Authorization: Bearer bench-%d-%llu", w->idx,
			    (unsigned long long) (seq % USERS_PER_THREAD));
			hh = curl_slist_append(NULL, auth);
			hh = curl_slist_append(
			    hh, "Content-Type: application/json");
			hh = curl_slist_append(hh, "Expect:");
			curl_easy_setopt(c, CURLOPT_HTTPHEADER, hh);
			curl_easy_setopt(c, CURLOPT_POSTFIELDS,
			    "{\"msgtype\":\"m.text\",\"body\":\"bench\"}");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, -1L);
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
		}
		curl_easy_setopt(c, CURLOPT_URL, url);
		t0 = mono_s();
		if (curl_easy_perform(c) == CURLE_OK) {
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		}
		lat_add(w, (uint32_t) ((mono_s() - t0) * 1e6));
		curl_slist_free_all(hh);
		if (status != 200) {
			w->errors++;
		} else if (!w->restart && w->nids < w->idcap) {
			char *p = strstr(resp, "\"delay_id\":\"");
			if (p != NULL) {
				p += 12;
				size_t n = strcspn(p, "\"");
				if (n < sizeof(w->ids[0])) {
					memcpy(w->ids[w->nids], p, n);
					w->ids[w->nids++][n] = '\0';
				}
			}
		}
		seq++;
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return NULL;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
	return x < y ? -1 : x > y;
}

static void
phase(const char *name, worker *ws, int n, const char *gw, double secs,
    bool restart)
{
	size_t total = 0, k = 0;
	uint64_t errors = 0;
	uint32_t *all;
	double t0 = mono_s(), el;

	for (int i = 0; i < n; i++) {
		ws[i].gw = gw;
		ws[i].until = t0 + secs;
		ws[i].restart = restart;
		ws[i].nlat = 0;
		ws[i].errors = 0;
		pthread_create(&ws[i].thr, NULL, work, &ws[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(ws[i].thr, NULL);
		total += ws[i].nlat;
		errors += ws[i].errors;
	}
	el = mono_s() - t0;
	all = malloc((total ? total : 1) * sizeof(*all));
	for (int i = 0; i < n; i++) {
		memcpy(all + k, ws[i].lat_us, ws[i].nlat * sizeof(*all));
		k += ws[i].nlat;
	}
	qsort(all, total, sizeof(*all), cmp_u32);
	if (total == 0) {
		printf("%-10s no requests\n", name);
	} else {
		printf(
		    "%-10s %8zu requests in %.2f s = %8.0f/s   p50 %6.2f ms   "
		    "p99 %6.2f ms   max %7.2f ms   errors %llu\n",
		    name, total, el, (double) total / el,
		    all[total / 2] / 1000.0,
		    all[(size_t) (total * 0.99)] / 1000.0,
		    all[total - 1] / 1000.0, (unsigned long long) errors);
	}
	fflush(stdout);
	free(all);
}

/* The restarts through wrk: the ids go into a Lua script that cycles
 * over them. */
static void
wrk_restarts(worker *ws, int n, const char *gw, int secs, const char *dir)
{
	char lua[300], cmd[1024];
	FILE *f;

	snprintf(lua, sizeof(lua), "%s/restart.lua", dir);
	if ((f = fopen(lua, "w")) == NULL) {
		return;
	}
	fprintf(f, "ids = {\n");
	for (int i = 0; i < n; i++) {
		for (size_t k = 0; k < ws[i].nids; k++) {
			fprintf(f, "\"%s\",\n", ws[i].ids[k]);
		}
	}
	fprintf(f,
	    "}\ncounter = 0\n"
	    "request = function()\n"
	    "  counter = counter + 1\n"
	    "  local id = ids[(counter %% #ids) + 1]\n"
	    "  return wrk.format(\"POST\", "
	    "\"/_matrix/client/unstable/org.matrix.msc4140/delayed_events/\" "
	    ".. id .. \"/restart\", nil, \"\")\n"
	    "end\n");
	fclose(f);
	snprintf(cmd, sizeof(cmd),
	    "wrk -t2 -c%d -d%ds --latency -s '%s' '%s' | grep -E "
	    "'Requests/sec|requests in|Non-2xx|^ +(50|99)%%'",
	    n, secs, lua, gw);
	printf("restart (wrk, %d connections):\n", n);
	fflush(stdout);
	if (system(cmd) != 0) {
		fprintf(stderr,
		    "tl-msc4140-bench: wrk failed (is it "
		    "installed?)\n");
	}
}

static char *
read_line(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[256];

	if (f == NULL || fgets(buf, sizeof(buf), f) == NULL) {
		if (f != NULL) {
			fclose(f);
		}
		return NULL;
	}
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
	return strdup(buf);
}

int
main(int argc, char **argv)
{
	int conns = 16, secs = 5;
	const char *durability = "always";
	bool keep = false, use_wrk = false;
	char dir[] = "/tmp/tl-msc4140-bench-XXXXXX", conf[300], ready[300],
	     bin[600], data[300], listen[300], logp[300], *gw = NULL;
	struct MHD_Daemon *hs;
	const union MHD_DaemonInfo *di;
	worker *ws;
	pid_t pid;
	FILE *f;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--connections") == 0 && i + 1 < argc) {
			conns = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			secs = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--durability") == 0 &&
		    i + 1 < argc) {
			durability = argv[++i];
		} else if (strcmp(argv[i], "--keep") == 0) {
			keep = true;
		} else if (strcmp(argv[i], "--wrk") == 0) {
			use_wrk = true;
		} else {
			fprintf(stderr,
			    "usage: tl-msc4140-bench [--connections N] "
			    "[--seconds S] [--durability MODE] [--wrk] "
			    "[--keep]\n");
			return 2;
		}
	}
	if (conns < 1 || conns > 1024 || secs < 1 || mkdtemp(dir) == NULL) {
		fprintf(stderr, "tl-msc4140-bench: bad arguments\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	hs = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL,
	    0, NULL, NULL, hs_answer, NULL, MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned) 2, MHD_OPTION_END);
	if (hs == NULL) {
		fprintf(
		    stderr, "tl-msc4140-bench: cannot start the homeserver\n");
		return 1;
	}
	di = MHD_get_daemon_info(hs, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(conf, sizeof(conf), "%s/gw.conf", dir);
	snprintf(ready, sizeof(ready), "%s/gw.url", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	snprintf(listen, sizeof(listen), "ipc://%s/tl.sock", dir);
	snprintf(logp, sizeof(logp), "%s/timelined.log", dir);
	f = fopen(conf, "w");
	if (f == NULL) {
		return 1;
	}
	fprintf(f,
	    "listen = 127.0.0.1:0\nhomeserver = http://127.0.0.1:%u\n"
	    "as_token = bench\nready_file = %s\nrate_limits = off\n",
	    (unsigned) di->port, ready);
	fclose(f);
	snprintf(bin, sizeof(bin), "%s/broker/timelined", TL_BENCH_BINDIR);
	pid = fork();
	if (pid == 0) {
		FILE *lf = freopen(logp, "a", stderr);
		(void) lf;
		execl(bin, bin, "--data", data, "--listen", listen, "--metrics",
		    "off", "--durability", durability, "--msc4140", conf,
		    (char *) NULL);
		_exit(127);
	}
	for (int i = 0; i < 2000 && (gw = read_line(ready)) == NULL; i++) {
		usleep(10000);
	}
	if (gw == NULL) {
		fprintf(stderr,
		    "tl-msc4140-bench: the gateway did not start; "
		    "see %s\n",
		    logp);
		kill(pid, SIGTERM);
		return 1;
	}
	printf("gateway %s, durability %s, %d keep-alive connections, %d s "
	       "per phase\n",
	    gw, durability, conns, secs);
	ws = calloc((size_t) conns, sizeof(*ws));
	for (int i = 0; i < conns; i++) {
		ws[i].idx = i;
		ws[i].idcap = MAX_IDS / (size_t) conns + 1;
		ws[i].ids = calloc(ws[i].idcap, sizeof(ws[i].ids[0]));
		if (ws[i].ids == NULL) {
			return 1;
		}
	}
	/* the per-user limit bounds how many one thread can schedule */
	phase("schedule", ws, conns, gw, secs, false);
	if (use_wrk) {
		wrk_restarts(ws, conns, gw, secs, dir);
	} else {
		phase("restart", ws, conns, gw, secs, true);
	}
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	MHD_stop_daemon(hs);
	for (int i = 0; i < conns; i++) {
		free(ws[i].lat_us);
		free(ws[i].ids);
	}
	free(ws);
	free(gw);
	if (!keep) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0) {
			fprintf(stderr, "could not remove %s\n", dir);
		}
	} else {
		printf("kept %s\n", dir);
	}
	return 0;
}
