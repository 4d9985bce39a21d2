/*
 * drv_beanstalkd.c: the beanstalkd peer of tl-bench, spoken in its text
 * protocol over loopback TCP. The mapping: a due time is a put delay, a
 * lease is the job's TTR, extend is touch (which restarts the TTR), delete
 * is delete. beanstalkd delays are whole seconds, so a delay is the time
 * left to the due time rounded UP: a job can never be ready before its
 * due time, and is typically up to a second late by construction.
 *
 * Puts are pipelined (up to TLB_BS_WINDOW in flight on a connection); a
 * consumer sends the touch and delete of the job it holds together with
 * the next reserve, so each job costs one round trip.
 *
 * Modes: "fsync" runs `beanstalkd -b DIR -f 0` (fsync on every binlog
 * write, before the reply); "default" runs `beanstalkd -b DIR`, whose
 * default fsyncs at most every 50 ms and replies before the fsync.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "driver.h"

#define TLB_BS_WINDOW 256
#define TLB_BS_START_MS 60000

struct tlb_server {
	tlb_proc p; /* data: the binlog directory */
	int mode;
	int64_t ttr_s;
};

struct tlb_conn {
	tlb_text_conn t; /* first */
};

static void
bs_args(tlb_server *s, char **argv)
{
	char *const v[] = {"beanstalkd", "-l", "127.0.0.1", "-p", s->p.scratch,
	    "-b", s->p.data, s->mode == 0 ? "-f" : NULL, "0", NULL};

	snprintf(s->p.scratch, sizeof(s->p.scratch), "%d", s->p.port);
	memcpy(argv, v, sizeof(v));
}

static int
bs_prepare(tlb_server *s, const tlb_server_conf *conf)
{
	s->mode = conf->mode;
	s->ttr_s = conf->lease_ms < 1000 ? 1 : conf->lease_ms / 1000;
	return mkdir(s->p.data, 0755);
}

static const tlb_proc_kind bs_kind = {sizeof(tlb_server), "beanstalkd.log",
    "binlog", TLB_BS_START_MS, 30000, bs_prepare, bs_args, NULL};

static int
bs_connect(tlb_server *s, tlb_conn **out)
{
	return (*out = tlb_text_connect(s, sizeof(tlb_conn))) != NULL ? 0 : -1;
}

/* Seconds of delay so that the job is ready no earlier than due_ms. */
static long long
bs_delay(int64_t due_ms)
{
	int64_t left = due_ms * 1000 - tlb_bench_wall_us();

	return left <= 0 ? 0 : (long long) ((left + 999999) / 1000000);
}

static int
bs_send(tlb_conn *c, const tlb_item *it, const char *body, size_t len)
{
	if (tlb_sock_printf(&c->t.s, "put 0 %lld %lld %zu\r\n",
	        bs_delay(it->due_ms), (long long) c->t.srv->ttr_s, len) != 0 ||
	    tlb_sock_put(&c->t.s, body, len) != 0) {
		return -1;
	}
	return tlb_sock_put(&c->t.s, "\r\n", 2);
}

static int
bs_reply(tlb_conn *c)
{
	char *line;

	if (tlb_sock_line(&c->t.s, &line) < 0) {
		return -1;
	}
	if (strncmp(line, "INSERTED ", 9) != 0) {
		fprintf(stderr, "beanstalkd put: %s\n", line);
		return -1;
	}
	return 0;
}

static const tlb_pipe bs_pipe = {TLB_BS_WINDOW, bs_send, bs_reply};

static int
bs_put(tlb_conn *c, const tlb_item *items, size_t n, size_t body_len,
    tlb_ack_fn ack, void *arg)
{
	return tlb_pipe_put(c, &c->t.s, &bs_pipe, items, n, body_len, ack, arg);
}

/* Reads the reply to a touch or delete; true when it is `want`. */
static int
bs_expect(tlb_conn *c, const char *want)
{
	char *line;

	if (tlb_sock_line(&c->t.s, &line) < 0) {
		return -1;
	}
	if (strcmp(line, want) != 0) {
		fprintf(stderr, "beanstalkd: %s, expected %s\n", line, want);
		return 1;
	}
	return 0;
}

static int
bs_consume(tlb_conn *c, const tlb_consume *cc)
{
	unsigned long long held = 0; /* job id held, 0: none */
	uint64_t seq = 0;

	for (;;) {
		bool stop = atomic_load(cc->stop);
		char *line;
		unsigned long long id;
		size_t bytes;
		int e;

		if (held != 0) {
			if (cc->extend) {
				tlb_sock_printf(
				    &c->t.s, "touch %llu\r\n", held);
			}
			tlb_sock_printf(&c->t.s, "delete %llu\r\n", held);
		}
		if (!stop) {
			tlb_sock_printf(&c->t.s, "reserve-with-timeout 1\r\n");
		}
		if (tlb_sock_flush(&c->t.s) != 0) {
			return -1;
		}
		if (held != 0) {
			if (cc->extend && bs_expect(c, "TOUCHED") < 0) {
				return -1;
			}
			if ((e = bs_expect(c, "DELETED")) < 0) {
				return -1;
			}
			cc->on_done(cc->arg, seq, e);
			held = 0;
		}
		if (stop) {
			return 0;
		}
		if (tlb_sock_line(&c->t.s, &line) < 0) {
			return -1;
		}
		if (sscanf(line, "RESERVED %llu %zu", &id, &bytes) == 2) {
			char *body;
			int64_t due;

			if (tlb_sock_bytes(&c->t.s, bytes, &body) != 0) {
				return -1;
			}
			if (!tlb_body_parse(body, bytes, &seq, &due)) {
				fprintf(stderr, "beanstalkd: a foreign job\n");
				return -1;
			}
			cc->on_msg(cc->arg, seq, due);
			held = id;
		} else if (strcmp(line, "TIMED_OUT") != 0 &&
		    strcmp(line, "DEADLINE_SOON") != 0) {
			fprintf(stderr, "beanstalkd reserve: %s\n", line);
			return -1;
		}
	}
}

const tlb_driver tlb_drv_beanstalkd = {
    .name = "beanstalkd",
    .nmodes = 2,
    .mode_name = {"fsync", "default"},
    .lossy = {false, true},
    .mode_desc =
        {
            "beanstalkd -b DIR -f 0: fsync on every binlog write",
            "beanstalkd -b DIR: default fsync at most every 50 ms, "
            "replies before the fsync",
        },
    .scale_mode = 1,
    TLB_DRIVER_OPS(
        &bs_kind, bs_connect, tlb_text_disconnect, bs_put, bs_consume),
};
