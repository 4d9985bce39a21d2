/*
 * The broker's life: open the store, create the configured topics, start
 * the dispatcher, the listeners and the metrics endpoint, wait for SIGTERM
 * or SIGINT, then stop in order: stop accepting and reading, let queued
 * requests reach the store, stop the dispatcher, close the store (which
 * finishes every batch in flight and answers it), and free the sessions.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "broker.h"
#include "clock.h"
#include "cluster.h"
#include "dispatch.h"
#include "handlers.h"
#include "metrics.h"
#include "server.h"
#include "signals.h"
#include "chronos.h"
#include "msc4140.h"

int
tlb_create_topics(tlb_broker *b)
{
	for (int i = 0; i < b->conf.ntopics; i++) {
		char name[TL_MAX_NAME_LEN + 16];
		char *colon;
		tli_topic_conf c;
		int rv;

		snprintf(name, sizeof(name), "%s", b->conf.topics[i]);
		colon = strrchr(name, ':');
		if (colon != NULL) {
			*colon = '\0';
		}
		if ((rv = tli_topic_conf_init(&c, name)) != TL_OK) {
			tlb_log(TLB_ERROR, "T010", "bad topic name \"%s\": %s",
			    name, tl_strerror(rv));
			return -1;
		}
		if (colon != NULL) {
			c.buckets = (uint32_t) strtoul(colon + 1, NULL, 10);
		}
		rv = tli_store_topic_create(b->store, &c);
		if (rv == TL_OK) {
			tlb_log(TLB_INFO, "T001",
			    "topic %s created (%u buckets)", name, c.buckets);
		} else if (rv != TL_ETOPICEXISTS) {
			tlb_log(TLB_ERROR, "T010", "cannot create topic %s: %s",
			    name, tl_strerror(rv));
			return -1;
		}
	}
	return 0;
}

static const char *
sync_name(const tlb_conf *c)
{
	switch (c->sync_mode) {
	case TLI_SYNC_ALWAYS:
		return "always (every acknowledged write is fsynced)";
	case TLI_SYNC_INTERVAL:
		return "interval (a power loss can lose the last interval of "
		       "acknowledged writes)";
	default:
		return "none (a power loss can lose acknowledged writes)";
	}
}

/* How far the start got: a failed start and the normal stop undo the same
 * steps, in the same order. */
typedef enum {
	UP_STORE,  /* the store is open */
	UP_AUTH,   /* tlb_auth_start ran (it may have failed) */
	UP_DSP,    /* tlb_dsp_start ran */
	UP_SERVER, /* tlb_server_start ran */
	UP_ALL     /* metrics and the gateway too: the broker ran */
} up_stage;

static void
broker_stop(tlb_broker *b, up_stage up)
{
	if (up >= UP_ALL) {
		tlg_stop(b->msc4140); /* before the broker it talks to */
		tlk_stop(b->chronos);
		atomic_store(&b->stopping, true);
		tlb_metrics_stop(b);
	}
	if (up >= UP_SERVER) {
		tlb_server_stop(b);
	}
	if (up >= UP_DSP) {
		tlb_dsp_stop(b);
	}
	tlc_stop(b); /* later replications answer TL_ENOTLEADER */
	tli_store_close(b->store);
	tlc_free(b);
	if (up >= UP_SERVER) {
		tlb_server_wait(b);
	}
	if (up >= UP_DSP) {
		tlb_dsp_free(b);
	}
	if (up >= UP_AUTH) {
		tlb_auth_stop(b);
	}
}

/* The store's word on a full disk (its writer thread): once when writes
 * stop, once when they resume. */
static void
store_report(void *arg, bool stopped, const char *detail)
{
	tlb_broker *b = arg;

	if (stopped) {
		tlb_log(TLB_ERROR, "B010",
		    "writes stopped: the disk of %s is full (%s); every write "
		    "fails with TL_ENOSPC until space is freed, then they "
		    "resume by themselves",
		    b->conf.data_dir, detail);
	} else {
		tlb_log(
		    TLB_INFO, "B011", "writes resumed in %s", b->conf.data_dir);
	}
}

/* Open the store (b->conf) with the broker clock; logged when it fails. */
static int
open_store(tlb_broker *b)
{
	tli_store_opts so;
	char bg[64] = "without a limit";
	char nice[48] = "at the broker's priority";
	char path[600];
	int rv;

	tli_store_opts_init(&so);
	so.path = b->conf.data_dir;
	if (b->conf.nnodes > 0) {
		/* a cluster: DATA/store and DATA/raft */
		if (mkdir(b->conf.data_dir, 0755) != 0 && errno != EEXIST) {
			tlb_log(TLB_ERROR, "B001", "cannot create %s: %s",
			    b->conf.data_dir, strerror(errno));
			return -1;
		}
		tlc_store_path(b, path, sizeof(path));
		so.path = path;
		so.replicate = tlc_replicate;
		so.replicate_arg = b;
		so.answers_ms = b->conf.cluster_answers_ms;
	}
	so.sync_mode = b->conf.sync_mode;
	so.sync_interval_ms = b->conf.sync_interval_ms;
	so.fsync_delay_ms = (int) b->conf.fsync_delay_ms;
	so.background_bytes_per_s = (uint64_t) b->conf.background_write_mb
	    << 20;
	so.compaction_nice = (int) b->conf.compaction_nice;
	so.cache_bytes = (size_t) b->conf.block_cache_mb << 20;
	so.clock.now_ms = tlb_clock_now;
	so.report = store_report;
	so.report_arg = b;
	if ((rv = tli_store_open(&b->store, &so)) != TL_OK) {
		tlb_log(TLB_ERROR, "B001",
		    "cannot open the store in %s: %s (%s)", so.path,
		    tl_strerror(rv),
		    rv == TL_EFORMAT ? "written by another version"
		                     : tli_store_last_error(b->store));
		return -1;
	}
	if (b->conf.background_write_mb > 0) {
		snprintf(bg, sizeof(bg), "at most %" PRId64 " MiB/s",
		    b->conf.background_write_mb);
	}
	if (b->conf.compaction_nice > 0) {
		snprintf(nice, sizeof(nice),
		    "%" PRId64 " nicer than the broker",
		    b->conf.compaction_nice);
	}
	tlb_log(TLB_INFO, "B002",
	    "store %s open; durability %s; flushes and compactions write %s; "
	    "compactions run %s; RocksDB %s",
	    so.path,
	    b->conf.nnodes > 0 ? "by the Raft log (an acknowledged write is "
	                         "durable on a majority of the nodes)"
	                       : sync_name(&b->conf),
	    bg, nice,
	    tli_rdb_assertions()
	        ? "built with its assertions on (slower; "
	          "tools/rocksdb-release.sh builds it without them)"
	        : "release build");
	return 0;
}

/* Start every part after the store; *up says how far it got. */
static int
broker_start(tlb_broker *b, up_stage *up)
{
	static const tlb_server_hooks hooks = {
	    .handle = tlb_handle, .closed = tlb_dsp_session_gone};

	*up = UP_AUTH;
	if (tlb_auth_start(b) != 0) {
		return -1;
	}
	*up = UP_DSP;
	/* in a cluster the leader creates the topics when it takes over */
	if ((b->conf.nnodes == 0 && tlb_create_topics(b) != 0) ||
	    tlb_dsp_start(b) != TL_OK) {
		return -1;
	}
	if (b->conf.nnodes > 0 && tlc_start(b) != 0) {
		return -1;
	}
	*up = UP_SERVER;
	if (tlb_server_start(b, &hooks) != 0) {
		return -1;
	}
	*up = UP_ALL;
	if (tlb_metrics_start(b) != 0) {
		tlb_log(TLB_WARN, "B004", "running without metrics");
	}
	/* last: a test or a script that waits for the file may ask for
	 * metrics at once */
	tlb_server_ready(b);
	return 0;
}

/* Wait for SIGTERM or SIGINT; SIGHUP reloads the credentials. */
static int
wait_signals(tlb_broker *b, const sigset_t *sigs, int sig)
{
	while (sig != SIGTERM && sig != SIGINT) {
		sig = tli_signal_wait(sigs);
		if (sig == SIGHUP && tlb_auth_reload(b)) {
			tlb_server_close_revoked(b);
		}
	}
	return sig;
}

/* The broker URL of the in-process gateways: this node's first listener;
 * in a cluster followed by every other node's client URL (its
 * cluster_node line), so that the SDK reaches the leader wherever it is
 * and follows it through a failover. */
static const char *
gateway_url(tlb_broker *b, char *buf, size_t cap)
{
	size_t len;

	len = (size_t) snprintf(buf, cap, "%s", tlb_server_url(b, 0));
	for (int i = 0; i < b->conf.nnodes && len < cap; i++) {
		if (i != b->conf.self && b->conf.nodes[i].url[0] != '\0') {
			len += (size_t) snprintf(
			    buf + len, cap - len, ",%s", b->conf.nodes[i].url);
		}
	}
	return buf;
}

int tlb_run(const tlb_conf *conf);

int
tlb_run(const tlb_conf *conf)
{
	tlb_broker *b = tli_zalloc(sizeof(*b));
	up_stage up;
	sigset_t sigs;
	char gw_url[TLB_MAX_NODES * 260];
	int rv, sig = 0;

	if (b == NULL) {
		return 1;
	}
	b->conf = *conf;
	/* Every thread started from here on inherits the blocked signals;
	 * the main thread waits for them. */
	tli_signals_block(&sigs, true);
	tlb_clock_init();
	if (b->conf.clock_offset_ms != 0) {
		tlb_clock_set_offset(b->conf.clock_offset_ms);
		tlb_log(TLB_WARN, "K002",
		    "the broker clock runs %lld ms off the wall clock "
		    "(clock_offset_ms, for tests)",
		    (long long) b->conf.clock_offset_ms);
	}

	if (open_store(b) != 0) {
		tli_free(b);
		return 1;
	}
	if (broker_start(b, &up) != 0) {
		broker_stop(b, up);
		tli_free(b);
		return 1;
	}
	/* The MSC4140 gateway, a client of this broker's first listener (and
	 * of the other nodes of its cluster). */
	gateway_url(b, gw_url, sizeof(gw_url));
	if (b->conf.msc4140[0] != '\0' &&
	    (b->msc4140 = tlg_start_file(b->conf.msc4140, gw_url)) == NULL) {
		tlb_log(TLB_ERROR, "B009", "the MSC4140 gateway did not start");
		sig = SIGTERM;
	}
	/* tl-chronos, the same way. */
	if (sig == 0 && b->conf.chronos[0] != '\0' &&
	    (b->chronos = tlk_start_file(b->conf.chronos, gw_url)) == NULL) {
		tlb_log(TLB_ERROR, "B012", "tl-chronos did not start");
		sig = SIGTERM;
	}
	tlb_log(TLB_INFO, "B005", "%s ready", b->conf.name);
	sig = wait_signals(b, &sigs, sig);
	tlb_log(TLB_INFO, "B007", "stopping (signal %d)", sig);
	broker_stop(b, UP_ALL);
	/* a gateway that was asked for and did not start fails the run */
	rv = (b->conf.msc4140[0] != '\0' && b->msc4140 == NULL) ||
	    (b->conf.chronos[0] != '\0' && b->chronos == NULL);
	tlb_log(TLB_INFO, "B008", "stopped cleanly");
	tli_free(b);
	return rv;
}
