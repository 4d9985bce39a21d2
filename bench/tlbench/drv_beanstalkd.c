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
	pid_t pid;
	int port;
	int mode;
	int64_t ttr_s;
	char dir[PATH_MAX];
	char binlog[PATH_MAX + 16];
	char log[PATH_MAX + 16];
};

struct tlb_conn {
	tlb_server *srv;
	tlb_sock s;
};

static int
bs_spawn(tlb_server *s)
{
	char port[16];
	char *argv[12];
	int argc = 0;

	snprintf(port, sizeof(port), "%d", s->port);
	argv[argc++] = "beanstalkd";
	argv[argc++] = "-l";
	argv[argc++] = "127.0.0.1";
	argv[argc++] = "-p";
	argv[argc++] = port;
	argv[argc++] = "-b";
	argv[argc++] = s->binlog;
	if (s->mode == 0) {
		argv[argc++] = "-f";
		argv[argc++] = "0";
	}
	argv[argc] = NULL;
	if ((s->pid = tlb_spawn(argv, s->log)) < 0) {
		return -1;
	}
	if (tlb_wait_port(s->port, s->pid, TLB_BS_START_MS, s->log) != 0) {
		tlb_stop_pid(s->pid, SIGKILL, 1000);
		s->pid = 0;
		return -1;
	}
	return 0;
}

static int
bs_start(tlb_server **out, const tlb_server_conf *conf)
{
	tlb_server *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		return -1;
	}
	s->mode = conf->mode;
	s->ttr_s = conf->lease_ms < 1000 ? 1 : conf->lease_ms / 1000;
	snprintf(s->dir, sizeof(s->dir), "%s", conf->dir);
	snprintf(s->binlog, sizeof(s->binlog), "%s/binlog", conf->dir);
	snprintf(s->log, sizeof(s->log), "%s/beanstalkd.log", conf->dir);
	if (mkdir(s->binlog, 0755) != 0 || (s->port = tlb_free_port()) < 0 ||
	    bs_spawn(s) != 0) {
		free(s);
		return -1;
	}
	*out = s;
	return 0;
}

static double
bs_stop_only(tlb_server *s)
{
	double t = tlb_stop_pid(s->pid, SIGTERM, 30000);

	s->pid = 0;
	return t;
}

static void
bs_stop(tlb_server *s)
{
	if (s == NULL) {
		return;
	}
	bs_stop_only(s);
	free(s);
}

static void
bs_kill9(tlb_server *s)
{
	tlb_stop_pid(s->pid, SIGKILL, 30000);
	s->pid = 0;
}

static int
bs_restart(tlb_server *s)
{
	return bs_spawn(s);
}

static int
bs_rss(tlb_server *s, uint64_t *kb)
{
	return tlb_proc_rss(s->pid, kb);
}

static uint64_t
bs_disk(tlb_server *s)
{
	return tlb_dir_bytes(s->binlog);
}

static int
bs_connect(tlb_server *s, tlb_conn **out)
{
	tlb_conn *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		return -1;
	}
	if (tlb_sock_open(&c->s, s->port, TLB_SOCK_TIMEOUT_MS) != 0) {
		free(c);
		return -1;
	}
	c->srv = s;
	*out = c;
	return 0;
}

static void
bs_disconnect(tlb_conn *c)
{
	if (c != NULL) {
		tlb_sock_close(&c->s);
		free(c);
	}
}

/* Seconds of delay so that the job is ready no earlier than due_ms. */
static long long
bs_delay(int64_t due_ms)
{
	int64_t left = due_ms * 1000 - tlb_bench_wall_us();

	return left <= 0 ? 0 : (long long) ((left + 999999) / 1000000);
}

static int
bs_put(tlb_conn *c, const tlb_item *items, size_t n, size_t body_len,
    tlb_ack_fn ack, void *arg)
{
	char *body = malloc(body_len);
	size_t sent = 0, got = 0;
	int rv = -1;

	if (body == NULL) {
		return -1;
	}
	while (got < n) {
		while (sent < n && sent - got < TLB_BS_WINDOW) {
			tlb_body_fill(body, body_len, items[sent].seq,
			    items[sent].due_ms);
			if (tlb_sock_printf(&c->s, "put 0 %lld %lld %zu\r\n",
			        bs_delay(items[sent].due_ms),
			        (long long) c->srv->ttr_s, body_len) != 0 ||
			    tlb_sock_put(&c->s, body, body_len) != 0 ||
			    tlb_sock_put(&c->s, "\r\n", 2) != 0) {
				goto out;
			}
			sent++;
		}
		if (tlb_sock_flush(&c->s) != 0) {
			goto out;
		}
		do {
			char *line;

			if (tlb_sock_line(&c->s, &line) < 0) {
				goto out;
			}
			if (strncmp(line, "INSERTED ", 9) != 0) {
				fprintf(stderr, "beanstalkd put: %s\n", line);
				goto out;
			}
			ack(arg, items[got].seq);
			got++;
		} while (got < sent && tlb_sock_has_line(&c->s));
	}
	rv = 0;
out:
	free(body);
	return rv;
}

/* Reads the reply to a touch or delete; true when it is `want`. */
static int
bs_expect(tlb_conn *c, const char *want)
{
	char *line;

	if (tlb_sock_line(&c->s, &line) < 0) {
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
				tlb_sock_printf(&c->s, "touch %llu\r\n", held);
			}
			tlb_sock_printf(&c->s, "delete %llu\r\n", held);
		}
		if (!stop) {
			tlb_sock_printf(&c->s, "reserve-with-timeout 1\r\n");
		}
		if (tlb_sock_flush(&c->s) != 0) {
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
		if (tlb_sock_line(&c->s, &line) < 0) {
			return -1;
		}
		if (sscanf(line, "RESERVED %llu %zu", &id, &bytes) == 2) {
			char *body;
			int64_t due;

			if (tlb_sock_bytes(&c->s, bytes, &body) != 0) {
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
    .mode_desc =
        {
            "beanstalkd -b DIR -f 0: fsync on every binlog write",
            "beanstalkd -b DIR: default fsync at most every 50 ms, "
            "replies before the fsync",
        },
    .scale_mode = 1,
    .start = bs_start,
    .stop = bs_stop,
    .kill9 = bs_kill9,
    .restart = bs_restart,
    .stop_only = bs_stop_only,
    .rss_kb = bs_rss,
    .disk_bytes = bs_disk,
    .connect = bs_connect,
    .disconnect = bs_disconnect,
    .put = bs_put,
    .consume = bs_consume,
};
