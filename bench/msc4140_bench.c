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
 * With --events N it measures instead what the scheduled events cost the
 * timelined process: N events with a delay of 23 h (none falls due during
 * the run), K per user (--per-user, default 50, under the limit of 100),
 * over the keep-alive connections; it reports the process's CPU time
 * (utime+stime) per event while scheduling, its resident memory
 * (VmRSS, VmHWM) before, at each tenth of the events and after, the disk
 * used by its data directory (blocks, as du) after the events are in,
 * after a clean stop and after a restart, and the memory of the restarted
 * process with the N events stored. With --restarts it also restarts
 * the scheduled ids for S seconds before the stop (more ids than the
 * gateway's restart cache holds), which changes the disk figures after it.
 *
 * usage: tl-msc4140-bench [--connections N] [--seconds S]
 *                         [--durability always|interval:MS|none] [--wrk]
 *                         [--events N [--per-user K] [--restarts]] [--keep]
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
/* --events: 23 h, under the gateway's default max_delay_ms of 24 h */
#define EVENTS_DELAY_MS 82800000LL

/* events scheduled so far (--events), for the samples along the way */
static atomic_size_t events_done;
static atomic_int events_workers; /* workers still scheduling */

typedef struct worker {
	int idx;
	const char *gw;
	double until;
	bool restart;
	size_t count; /* --events: this many schedules, then stop */
	int per_user; /* --events: consecutive schedules per user */
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
	while (w->count > 0 ? seq < w->count : mono_s() < w->until) {
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
			if (w->count > 0) {
				snprintf(url, sizeof(url),
				    "%s/_matrix/client/v3/rooms/!bench:bench/"
				    "send/m.room.message/e%d-%llu?"
				    "org.matrix.msc4140.delay=%lld",
				    w->gw, w->idx, (unsigned long long) seq,
				    EVENTS_DELAY_MS);
				snprintf(auth, sizeof(auth),
				    "Authorization: Bearer bench-e%d-%llu",
				    w->idx,
				    (unsigned long long) (seq /
				        (uint64_t) w->per_user));
			} else {
				snprintf(url, sizeof(url),
				    "%s/_matrix/client/v3/rooms/!bench:bench/"
				    "send/m.room.message/t%d-%llu?"
				    "org.matrix.msc4140.delay=3600000",
				    w->gw, w->idx, (unsigned long long) seq);
				snprintf(auth, sizeof(auth),
				    "Authorization: Bearer bench-%d-%llu",
				    w->idx,
				    (unsigned long long) (seq %
				        USERS_PER_THREAD));
			}
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
		if (status == 200 && w->count > 0) {
			atomic_fetch_add(&events_done, 1);
		}
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
	if (w->count > 0) {
		atomic_fetch_sub(&events_workers, 1);
	}
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

/* ---- what the timelined process costs (--events) ---- */

typedef struct psample {
	double cpu_s;             /* utime + stime */
	long long rss_kb, hwm_kb; /* VmRSS, VmHWM */
} psample;

static psample
proc_sample(pid_t pid)
{
	psample ps = {0, -1, -1};
	char path[64], buf[4096], *p;
	unsigned long long ut = 0, st = 0;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	if ((f = fopen(path, "r")) != NULL) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		fclose(f);
		/* after the ")" closing comm: fields 3.. ; utime is 14th */
		if ((p = strrchr(buf, ')')) != NULL &&
		    sscanf(p + 2,
		        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu "
		        "%llu",
		        &ut, &st) == 2) {
			ps.cpu_s =
			    (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
		}
	}
	snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
	if ((f = fopen(path, "r")) != NULL) {
		while (fgets(buf, sizeof(buf), f) != NULL) {
			sscanf(buf, "VmRSS: %lld", &ps.rss_kb);
			sscanf(buf, "VmHWM: %lld", &ps.hwm_kb);
		}
		fclose(f);
	}
	return ps;
}

static unsigned long long du_blocks, du_bytes;

static int
du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) path;
	(void) ftw;
	if (flag == FTW_F) {
		du_blocks += (unsigned long long) st->st_blocks * 512;
		du_bytes += (unsigned long long) st->st_size;
	}
	return 0;
}

/* The disk used under dir (allocated blocks, as du) and the files' size. */
static void
du(const char *dir, unsigned long long *blocks, unsigned long long *bytes)
{
	du_blocks = du_bytes = 0;
	nftw(dir, du_one, 16, FTW_PHYS);
	*blocks = du_blocks;
	*bytes = du_bytes;
}

typedef struct gwproc {
	char bin[600], data[300], listen[300], conf[300], ready[300], logp[300];
	const char *durability;
	pid_t pid;
	char *url;
} gwproc;

/* Start timelined with the gateway; 0 once it serves. */
static int
gw_start(gwproc *p)
{
	unlink(p->ready);
	free(p->url);
	p->url = NULL;
	p->pid = fork();
	if (p->pid == 0) {
		FILE *lf = freopen(p->logp, "a", stderr);
		(void) lf;
		execl(p->bin, p->bin, "--data", p->data, "--listen", p->listen,
		    "--metrics", "off", "--durability", p->durability,
		    "--msc4140", p->conf, (char *) NULL);
		_exit(127);
	}
	for (int i = 0; i < 6000 && (p->url = read_line(p->ready)) == NULL;
	     i++) {
		usleep(10000);
	}
	if (p->url == NULL) {
		fprintf(stderr,
		    "tl-msc4140-bench: the gateway did not start; "
		    "see %s\n",
		    p->logp);
		kill(p->pid, SIGTERM);
		waitpid(p->pid, NULL, 0);
		p->pid = 0;
		return -1;
	}
	return 0;
}

static void
gw_stop(gwproc *p)
{
	kill(p->pid, SIGTERM);
	waitpid(p->pid, NULL, 0);
	p->pid = 0;
}

static void
print_sample(const char *what, psample s)
{
	printf("  %-26s VmRSS %8.1f MiB   VmHWM %8.1f MiB   CPU %7.2f s\n",
	    what, s.rss_kb / 1024.0, s.hwm_kb / 1024.0, s.cpu_s);
}

static void
print_du(const char *what, const char *data, size_t n,
    unsigned long long base_blocks, unsigned long long base_bytes)
{
	unsigned long long blocks, bytes;

	du(data, &blocks, &bytes);
	printf("  disk %-20s %7.1f MiB (%+6.1f bytes/event), files %7.1f "
	       "MiB (%+6.1f bytes/event)\n",
	    what, blocks / 1048576.0,
	    ((double) blocks - (double) base_blocks) / (double) n,
	    bytes / 1048576.0,
	    ((double) bytes - (double) base_bytes) / (double) n);
}

/* --events: N schedules over the workers, the process sampled at each
 * tenth, then the disk, a clean stop and a restart. 0 when every
 * schedule was answered 200. */
static int
events_run(
    worker *ws, int conns, gwproc *p, size_t n, int per_user, int restart_secs)
{
	psample s0, s1, tenth[11];
	unsigned long long base_blocks, base_bytes;
	uint64_t errors = 0;
	size_t next = 1, users = 0;
	double t0, el, t_stop, t_start;
	int rv = 0;

	sleep(1); /* the start's own work done */
	du(p->data, &base_blocks, &base_bytes);
	s0 = proc_sample(p->pid);
	atomic_store(&events_done, 0);
	atomic_store(&events_workers, conns);
	t0 = mono_s();
	for (int i = 0; i < conns; i++) {
		ws[i].gw = p->url;
		ws[i].count =
		    n / (size_t) conns + ((size_t) i < n % (size_t) conns);
		ws[i].per_user = per_user;
		ws[i].restart = false;
		ws[i].errors = 0;
		ws[i].nlat = 0;
		users +=
		    (ws[i].count + (size_t) per_user - 1) / (size_t) per_user;
		pthread_create(&ws[i].thr, NULL, work, &ws[i]);
	}
	/* a sample at each tenth of the events */
	while (next <= 10) {
		size_t done = atomic_load(&events_done);
		if (done >= n * next / 10) {
			tenth[next++] = proc_sample(p->pid);
			continue;
		}
		if (atomic_load(&events_workers) == 0) {
			break; /* errors: fewer than n */
		}
		usleep(5000);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(ws[i].thr, NULL);
		errors += ws[i].errors;
	}
	el = mono_s() - t0;
	s1 = proc_sample(p->pid);
	if (next <= 10) {
		next = 11;
	}
	printf("scheduled %zu events (%zu users, %d each, delay %lld ms, "
	       "body 35 bytes) in %.2f s = %.0f/s, errors %llu\n",
	    n, users, per_user, EVENTS_DELAY_MS, el, (double) n / el,
	    (unsigned long long) errors);
	printf("timelined (pid %d), CPU while scheduling: %.2f s = %.1f us "
	       "per event\n",
	    (int) p->pid, s1.cpu_s - s0.cpu_s,
	    (s1.cpu_s - s0.cpu_s) * 1e6 / (double) n);
	print_sample("before", s0);
	for (size_t k = 1; k <= 10 && k < next; k++) {
		char what[64];
		snprintf(what, sizeof(what), "after %zu", n * k / 10);
		print_sample(what, tenth[k]);
	}
	print_sample("after all", s1);
	printf("  memory growth: VmRSS %+.1f bytes/event, VmHWM %+.1f "
	       "bytes/event\n",
	    (double) (s1.rss_kb - s0.rss_kb) * 1024.0 / (double) n,
	    (double) (s1.hwm_kb - s0.hwm_kb) * 1024.0 / (double) n);
	sleep(3);
	print_sample("idle 3 s later", proc_sample(p->pid));
	printf("  disk before the events: %.1f MiB, files %.1f MiB\n",
	    base_blocks / 1048576.0, base_bytes / 1048576.0);
	print_du("with the events in", p->data, n, base_blocks, base_bytes);
	if (restart_secs > 0) {
		size_t ids = 0;
		for (int i = 0; i < conns; i++) {
			ws[i].count = 0;
			ids += ws[i].nids;
		}
		printf("restarts over the %zu scheduled ids, in order:\n", ids);
		phase("restart", ws, conns, p->url, restart_secs, true);
	}
	t_stop = mono_s();
	gw_stop(p);
	printf("  clean stop in %.2f s\n", mono_s() - t_stop);
	print_du("after the stop", p->data, n, base_blocks, base_bytes);
	t_start = mono_s();
	if (gw_start(p) != 0) {
		return -1;
	}
	printf("  restart: serving in %.2f s\n", mono_s() - t_start);
	sleep(3);
	print_sample("restarted, 3 s later", proc_sample(p->pid));
	print_du("restarted", p->data, n, base_blocks, base_bytes);
	if (errors > 0) {
		rv = -1;
	}
	return rv;
}

int
main(int argc, char **argv)
{
	int conns = 16, secs = 5, per_user = 50;
	long long events = 0;
	const char *durability = "always";
	bool keep = false, use_wrk = false, restarts = false;
	char dir[] = "/tmp/tl-msc4140-bench-XXXXXX";
	struct MHD_Daemon *hs;
	const union MHD_DaemonInfo *di;
	gwproc gp = {0};
	worker *ws;
	int rv = 0;
	FILE *f;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--connections") == 0 && i + 1 < argc) {
			conns = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			secs = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--durability") == 0 &&
		    i + 1 < argc) {
			durability = argv[++i];
		} else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
			events = atoll(argv[++i]);
		} else if (strcmp(argv[i], "--per-user") == 0 && i + 1 < argc) {
			per_user = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--restarts") == 0) {
			restarts = true;
		} else if (strcmp(argv[i], "--keep") == 0) {
			keep = true;
		} else if (strcmp(argv[i], "--wrk") == 0) {
			use_wrk = true;
		} else {
			fprintf(stderr,
			    "usage: tl-msc4140-bench [--connections N] "
			    "[--seconds S] [--durability MODE] [--wrk] "
			    "[--events N [--per-user K] [--restarts]] "
			    "[--keep]\n");
			return 2;
		}
	}
	if (conns < 1 || conns > 1024 || secs < 1 || events < 0 ||
	    events > 100000000 || per_user < 1 || per_user > 100 ||
	    mkdtemp(dir) == NULL) {
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
	snprintf(gp.conf, sizeof(gp.conf), "%s/gw.conf", dir);
	snprintf(gp.ready, sizeof(gp.ready), "%s/gw.url", dir);
	snprintf(gp.data, sizeof(gp.data), "%s/data", dir);
	snprintf(gp.listen, sizeof(gp.listen), "ipc://%s/tl.sock", dir);
	snprintf(gp.logp, sizeof(gp.logp), "%s/timelined.log", dir);
	snprintf(
	    gp.bin, sizeof(gp.bin), "%s/broker/timelined", TL_BENCH_BINDIR);
	gp.durability = durability;
	f = fopen(gp.conf, "w");
	if (f == NULL) {
		return 1;
	}
	fprintf(f,
	    "listen = 127.0.0.1:0\nhomeserver = http://127.0.0.1:%u\n"
	    "as_token = bench\nready_file = %s\nrate_limits = off\n",
	    (unsigned) di->port, gp.ready);
	fclose(f);
	if (gw_start(&gp) != 0) {
		return 1;
	}
	ws = calloc((size_t) conns, sizeof(*ws));
	for (int i = 0; i < conns; i++) {
		ws[i].idx = i;
		if (events > 0 && !restarts) {
			continue; /* the ids are not kept */
		}
		ws[i].idcap = events > 0 ? (size_t) events / (size_t) conns + 1
		                         : MAX_IDS / (size_t) conns + 1;
		ws[i].ids = calloc(ws[i].idcap, sizeof(ws[i].ids[0]));
		if (ws[i].ids == NULL) {
			return 1;
		}
	}
	if (events > 0) {
		printf("gateway %s, durability %s, %d keep-alive connections, "
		       "%lld events\n",
		    gp.url, durability, conns, events);
		rv = events_run(ws, conns, &gp, (size_t) events, per_user,
		         restarts ? secs : 0) == 0
		    ? 0
		    : 1;
	} else {
		printf("gateway %s, durability %s, %d keep-alive connections, "
		       "%d s per phase\n",
		    gp.url, durability, conns, secs);
		/* the per-user limit bounds how many one thread can
		 * schedule */
		phase("schedule", ws, conns, gp.url, secs, false);
		if (use_wrk) {
			wrk_restarts(ws, conns, gp.url, secs, dir);
		} else {
			phase("restart", ws, conns, gp.url, secs, true);
		}
	}
	if (gp.pid > 0) {
		gw_stop(&gp);
	}
	MHD_stop_daemon(hs);
	for (int i = 0; i < conns; i++) {
		free(ws[i].lat_us);
		free(ws[i].ids);
	}
	free(ws);
	free(gp.url);
	if (!keep) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0) {
			fprintf(stderr, "could not remove %s\n", dir);
		}
	} else {
		printf("kept %s\n", dir);
	}
	return rv;
}
