/*
 * The broker's life: open the store, create the configured topics, start
 * the dispatcher, the listeners and the metrics endpoint, wait for SIGTERM
 * or SIGINT, then stop in order: stop accepting and reading, let queued
 * requests reach the store, stop the dispatcher, close the store (which
 * finishes every batch in flight and answers it), and free the sessions.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "msc4140.h"

static int
create_topics(tlb_broker *b)
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

int tlb_run(const tlb_conf *conf);

int
tlb_run(const tlb_conf *conf)
{
	tlb_broker *b = tli_zalloc(sizeof(*b));
	tli_store_opts so;
	sigset_t sigs;
	int rv, sig = 0;

	if (b == NULL) {
		return 1;
	}
	b->conf = *conf;
	/* Every thread started from here on inherits the blocked signals;
	 * the main thread waits for them. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	tlb_clock_init();

	tli_store_opts_init(&so);
	so.path = b->conf.data_dir;
	so.sync_mode = b->conf.sync_mode;
	so.sync_interval_ms = b->conf.sync_interval_ms;
	so.clock.now_ms = tlb_clock_now;
	if ((rv = tli_store_open(&b->store, &so)) != TL_OK) {
		tlb_log(TLB_ERROR, "B001",
		    "cannot open the store in %s: %s (%s)", b->conf.data_dir,
		    tl_strerror(rv),
		    rv == TL_EFORMAT ? "written by another version"
		                     : tli_store_last_error(b->store));
		tli_free(b);
		return 1;
	}
	tlb_log(TLB_INFO, "B002", "store %s open; durability %s",
	    b->conf.data_dir, sync_name(&b->conf));
	if (tlb_auth_start(b) != 0) {
		tli_store_close(b->store);
		tlb_auth_stop(b);
		tli_free(b);
		return 1;
	}
	if (create_topics(b) != 0 || tlb_dsp_start(b) != TL_OK) {
		tlb_dsp_stop(b);
		tli_store_close(b->store);
		tlb_dsp_free(b);
		tlb_auth_stop(b);
		tli_free(b);
		return 1;
	}
	if (tlb_server_start(b) != 0) {
		tlb_server_stop(b);
		tlb_dsp_stop(b);
		tli_store_close(b->store);
		tlb_server_wait(b);
		tlb_dsp_free(b);
		tlb_auth_stop(b);
		tli_free(b);
		return 1;
	}
	if (tlb_metrics_start(b) != 0) {
		tlb_log(TLB_WARN, "B004", "running without metrics");
	}
	/* The MSC4140 gateway, a client of this broker's first listener. */
	if (b->conf.msc4140[0] != '\0' &&
	    (b->msc4140 = tlg_start_file(b->conf.msc4140, b->bound[0])) ==
	        NULL) {
		tlb_log(TLB_ERROR, "B009", "the MSC4140 gateway did not start");
		sig = SIGTERM;
	}
	tlb_log(TLB_INFO, "B005", "%s ready", b->conf.name);

	while (sig != SIGTERM && sig != SIGINT) {
		if (sigwait(&sigs, &sig) != 0) {
			break;
		}
		if (sig == SIGHUP) {
			tlb_auth_reload(b);
		}
	}
	tlb_log(TLB_INFO, "B007", "stopping (signal %d)", sig);
	tlg_stop(b->msc4140); /* before the broker it talks to */
	atomic_store(&b->stopping, true);
	tlb_metrics_stop(b);
	tlb_server_stop(b);
	tlb_dsp_stop(b);
	tli_store_close(b->store);
	tlb_server_wait(b);
	tlb_dsp_free(b);
	tlb_auth_stop(b);
	/* a gateway that was asked for and did not start fails the run */
	rv = b->conf.msc4140[0] != '\0' && b->msc4140 == NULL;
	tlb_log(TLB_INFO, "B008", "stopped cleanly");
	tli_free(b);
	return rv;
}
