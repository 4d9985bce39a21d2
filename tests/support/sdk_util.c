/*
 * The SDK suites' broker and clients (see sdk_util.h).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sdk_util.h"
#include "tlcheck.h"
#include "testutil.h"

void
sb_start(sb_broker *b, const char *tag)
{
	memset(b, 0, sizeof(*b));
	b->dir = tt_mkdtemp(tag);
	snprintf(b->sock, sizeof(b->sock), "%s/tl.sock", b->dir);
	snprintf(b->url, sizeof(b->url), "ipc://%s", b->sock);
	snprintf(b->tcp_url, sizeof(b->tcp_url), "tcp://127.0.0.1:%d",
	    tt_free_port());
	tt_proc_timelined(&b->proc, b->dir, "broker");
	tt_proc_args(&b->proc, "--data", b->dir, "--listen", b->url, "--listen",
	    b->tcp_url, "--topic", "default", "--metrics", "off", NULL);
	sb_spawn(b);
}

void
sb_spawn(sb_broker *b)
{
	tt_proc_start(&b->proc);
}

void
sb_kill(sb_broker *b, int sig)
{
	tt_proc_signal(&b->proc, sig, b->proc.timeout_ms);
}

void
sb_stop(sb_broker *b)
{
	sb_kill(b, SIGTERM);
	tt_proc_fini(&b->proc);
	if (b->dir != NULL) {
		tt_rmtree(b->dir);
		free(b->dir);
		b->dir = NULL;
	}
}

tl_client *
sb_client_url(const char *url, int timeout_ms, tl_log_fn log)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	int rv;

	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, url));
	TL_PASS(tl_opts_set_name(o, "sdk-test"));
	TL_PASS(tl_opts_set_timeout(o, timeout_ms));
	TL_PASS(tl_opts_set_reconnect(o, 20, 200));
	if (log != NULL) {
		TL_PASS(tl_opts_set_log(o, log, NULL));
	}
	rv = tl_client_open(&c, o);
	tl_opts_free(o);
	TL_PASS(rv, "tl_client_open(%s)", url);
	return c;
}

tl_client *
sb_client(const sb_broker *b)
{
	return sb_client_url(b->url, 5000, NULL);
}

tl_client *
sb_client_tcp(const sb_broker *b)
{
	return sb_client_url(b->tcp_url, 5000, NULL);
}

void
sb_topic(tl_client *c, const char *name, int64_t lease_ms)
{
	tl_topic_conf conf;

	memset(&conf, 0, sizeof(conf));
	conf.name = name;
	conf.default_lease_ms = lease_ms;
	TL_PASS(tl_topic_create(c, &conf), "tl_topic_create(%s)", name);
}

size_t
sb_poll_n(tl_consumer *k, tl_lease **out, size_t want, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	size_t got = 0;

	while (got < want) {
		int64_t left = deadline - tli_mono_ms();
		size_t n = 0;
		if (left <= 0) {
			break;
		}
		TL_PASS(
		    tl_consumer_poll(k, out + got, want - got, &n, (int) left));
		got += n;
	}
	return got;
}
