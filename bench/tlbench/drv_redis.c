/*
 * drv_redis.c: the Redis peer of tl-bench, built the way delayed-job
 * libraries build on Redis, spoken in RESP over loopback TCP. A sorted set
 * holds the members by due time (score, UTC ms) and a hash their bodies.
 * A Lua script, run with EVALSHA, reads Redis's own clock (TIME), claims
 * up to `credit` members whose score is due and re-scores each to
 * now + lease, so a claimed member comes back when its lease runs out;
 * when nothing is due it answers how long until the next member is, and
 * the consumer sleeps that long (capped) before it asks again. Extend
 * re-scores the member (ZADD XX); delete is ZREM + HDEL.
 *
 * Puts (HSET then ZADD per message) are pipelined, up to TLB_RD_WINDOW
 * messages in flight on a connection.
 *
 * Modes: "always" runs with appendonly yes, appendfsync always (the AOF is
 * fsynced before replies are sent); "everysec" with appendfsync everysec
 * (Redis's default AOF policy). Both with RDB snapshots off (save "").
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define TLB_RD_WINDOW 256
#define TLB_RD_START_MS 60000
#define TLB_RD_LOAD_MS 600000 /* loading a large AOF at restart */
#define TLB_RD_MAX_SLEEP_MS 20
#define TLB_RD_ZSET "tlb:due"
#define TLB_RD_HASH "tlb:body"

static const char claim_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, "
    "'LIMIT', 0, tonumber(ARGV[1]))\n"
    "if #ids == 0 then\n"
    "  local nx = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
    "  if #nx == 0 then return -1 end\n"
    "  return tonumber(nx[2]) - now\n"
    "end\n"
    "local out = {}\n"
    "for _, id in ipairs(ids) do\n"
    "  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), id)\n"
    "  out[#out + 1] = id\n"
    "  out[#out + 1] = redis.call('HGET', KEYS[2], id)\n"
    "end\n"
    "return out\n";

struct tlb_server {
	tlb_proc p; /* data: the whole directory (AOF) */
	int mode;
};

struct tlb_conn {
	tlb_text_conn t; /* first */
	char sha[48];
};

static void
rd_args(tlb_server *s, char **argv)
{
	char *const v[] = {"redis-server", "--port", s->p.scratch, "--bind",
	    "127.0.0.1", "--dir", s->p.dir, "--appendonly", "yes",
	    "--appendfsync", s->mode == 0 ? "always" : "everysec", "--save", "",
	    "--daemonize", "no", "--logfile", "", NULL};

	snprintf(s->p.scratch, sizeof(s->p.scratch), "%d", s->p.port);
	memcpy(argv, v, sizeof(v));
}

static int
rd_prepare(tlb_server *s, const tlb_server_conf *conf)
{
	s->mode = conf->mode;
	return 0;
}

static const tlb_proc_kind rd_kind = {sizeof(tlb_server), "redis.log", NULL,
    TLB_RD_START_MS, 120000, rd_prepare, rd_args, NULL};

/* ---- RESP ---- */

/* Appends one command of argc bulk strings. */
static int
rd_cmd(tlb_sock *s, int argc, const char *const *argv, const size_t *lens)
{
	if (tlb_sock_printf(s, "*%d\r\n", argc) != 0) {
		return -1;
	}
	for (int i = 0; i < argc; i++) {
		size_t n = lens != NULL ? lens[i] : strlen(argv[i]);

		if (tlb_sock_printf(s, "$%zu\r\n", n) != 0 ||
		    tlb_sock_put(s, argv[i], n) != 0 ||
		    tlb_sock_put(s, "\r\n", 2) != 0) {
			return -1;
		}
	}
	return 0;
}

/* Reads a status or integer reply: 0, 1 for an error reply (said), -1
 * when the connection failed. */
static int
rd_simple(tlb_conn *c, const char *what)
{
	char *line;

	if (tlb_sock_line(&c->t.s, &line) < 0) {
		return -1;
	}
	if (line[0] == '-') {
		fprintf(stderr, "redis %s: %s\n", what, line + 1);
		return 1;
	}
	return 0;
}

static int
rd_connect(tlb_server *s, tlb_conn **out)
{
	const char *argv[] = {"SCRIPT", "LOAD", claim_lua};
	double end = tlb_bench_mono_s() + TLB_RD_LOAD_MS / 1000.0;
	tlb_conn *c = tlb_text_connect(s, sizeof(*c));

	if (c == NULL) {
		return -1;
	}
	/* While Redis loads its AOF it answers -LOADING: wait. */
	for (;;) {
		char *line, *sha;

		if (rd_cmd(&c->t.s, 3, argv, NULL) != 0 ||
		    tlb_sock_flush(&c->t.s) != 0 ||
		    tlb_sock_line(&c->t.s, &line) < 0) {
			break;
		}
		if (strncmp(line, "-LOADING", 8) == 0 &&
		    tlb_bench_mono_s() < end) {
			tlb_bench_sleep_ms(1);
			continue;
		}
		if (line[0] != '$' || atoi(line + 1) <= 0 ||
		    atoi(line + 1) >= (int) sizeof(c->sha) ||
		    tlb_sock_bytes(&c->t.s, (size_t) atoi(line + 1), &sha) !=
		        0) {
			fprintf(stderr, "redis SCRIPT LOAD: %s\n", line);
			break;
		}
		memcpy(c->sha, sha, 40);
		c->sha[40] = '\0';
		*out = c;
		return 0;
	}
	tlb_text_disconnect(c);
	return -1;
}

static int
rd_send(tlb_conn *c, const tlb_item *it, const char *body, size_t len)
{
	char member[32], score[32];
	const char *hset[] = {"HSET", TLB_RD_HASH, member, body};
	const char *zadd[] = {"ZADD", TLB_RD_ZSET, score, member};
	size_t hl[] = {4, strlen(TLB_RD_HASH), 0, len};

	snprintf(member, sizeof(member), "m%" PRIu64, it->seq);
	snprintf(score, sizeof(score), "%" PRId64, it->due_ms);
	hl[2] = strlen(member);
	if (rd_cmd(&c->t.s, 4, hset, hl) != 0) {
		return -1;
	}
	return rd_cmd(&c->t.s, 4, zadd, NULL);
}

static int
rd_reply(tlb_conn *c)
{
	if (rd_simple(c, "HSET") != 0) {
		return -1;
	}
	return rd_simple(c, "ZADD");
}

static const tlb_pipe rd_pipe = {TLB_RD_WINDOW, rd_send, rd_reply};

static int
rd_put(tlb_conn *c, const tlb_item *items, size_t n, size_t body_len,
    tlb_ack_fn ack, void *arg)
{
	return tlb_pipe_put(c, &c->t.s, &rd_pipe, items, n, body_len, ack, arg);
}

/* One claimed member. */
typedef struct rd_claim {
	char member[32];
	uint64_t seq;
} rd_claim;

/* Runs the claim script: the number of members claimed into cl (and
 * *wait_ms 0), or 0 with *wait_ms the time to the next due member (-1:
 * none), or -1 when the connection failed. */
static long
rd_claim_run(tlb_conn *c, const tlb_consume *cc, rd_claim *cl, long *wait_ms)
{
	char credit[16], lease[32];
	const char *argv[] = {
	    "EVALSHA", c->sha, "2", TLB_RD_ZSET, TLB_RD_HASH, credit, lease};
	char *line;
	long n;

	snprintf(credit, sizeof(credit), "%u", cc->credit);
	snprintf(lease, sizeof(lease), "%" PRId64, cc->lease_ms);
	*wait_ms = 0;
	if (rd_cmd(&c->t.s, 7, argv, NULL) != 0 ||
	    tlb_sock_flush(&c->t.s) != 0 || tlb_sock_line(&c->t.s, &line) < 0) {
		return -1;
	}
	if (line[0] == ':') {
		*wait_ms = atol(line + 1);
		return 0;
	}
	if (line[0] != '*' || (n = atol(line + 1)) < 0 || n % 2 != 0 ||
	    n / 2 > (long) cc->credit) {
		fprintf(stderr, "redis claim: %s\n", line);
		return -1;
	}
	for (long i = 0; i < n / 2; i++) {
		char *p;
		int64_t due;
		size_t len;

		/* the member, then its body */
		if (tlb_sock_line(&c->t.s, &line) < 0 || line[0] != '$' ||
		    (len = (size_t) atol(line + 1)) >= sizeof(cl[i].member) ||
		    tlb_sock_bytes(&c->t.s, len, &p) != 0) {
			return -1;
		}
		memcpy(cl[i].member, p, len);
		cl[i].member[len] = '\0';
		if (tlb_sock_line(&c->t.s, &line) < 0 || line[0] != '$' ||
		    atol(line + 1) < 0) {
			fprintf(stderr, "redis claim: a member without body\n");
			return -1;
		}
		len = (size_t) atol(line + 1);
		if (tlb_sock_bytes(&c->t.s, len, &p) != 0) {
			return -1;
		}
		if (!tlb_body_parse(p, len, &cl[i].seq, &due)) {
			fprintf(stderr, "redis claim: a foreign body\n");
			return -1;
		}
		cc->on_msg(cc->arg, cl[i].seq, due);
	}
	return n / 2;
}

/* Extends (when asked) and deletes the k claimed members. */
static int
rd_finish(tlb_conn *c, const tlb_consume *cc, const rd_claim *cl, long k)
{
	if (cc->extend) {
		char score[32];

		snprintf(score, sizeof(score), "%" PRId64,
		    tlb_bench_wall_us() / 1000 + cc->lease_ms);
		for (long i = 0; i < k; i++) {
			const char *zadd[] = {
			    "ZADD", TLB_RD_ZSET, "XX", score, cl[i].member};

			rd_cmd(&c->t.s, 5, zadd, NULL);
		}
		if (tlb_sock_flush(&c->t.s) != 0) {
			return -1;
		}
		for (long i = 0; i < k; i++) {
			if (rd_simple(c, "ZADD XX") < 0) {
				return -1;
			}
		}
	}
	for (long i = 0; i < k; i++) {
		const char *zrem[] = {"ZREM", TLB_RD_ZSET, cl[i].member};
		const char *hdel[] = {"HDEL", TLB_RD_HASH, cl[i].member};

		rd_cmd(&c->t.s, 3, zrem, NULL);
		rd_cmd(&c->t.s, 3, hdel, NULL);
	}
	if (tlb_sock_flush(&c->t.s) != 0) {
		return -1;
	}
	for (long i = 0; i < k; i++) {
		int a, b;

		if ((a = rd_simple(c, "ZREM")) < 0 ||
		    (b = rd_simple(c, "HDEL")) < 0) {
			return -1;
		}
		cc->on_done(cc->arg, cl[i].seq, a | b);
	}
	return 0;
}

static int
rd_consume(tlb_conn *c, const tlb_consume *cc)
{
	rd_claim *cl = calloc(cc->credit > 0 ? cc->credit : 1, sizeof(*cl));
	int rv = -1;

	if (cl == NULL) {
		return -1;
	}
	while (!atomic_load(cc->stop)) {
		long wait_ms, k = rd_claim_run(c, cc, cl, &wait_ms);

		if (k < 0) {
			goto out;
		}
		if (k == 0) {
			long ms = wait_ms < 0 || wait_ms > TLB_RD_MAX_SLEEP_MS
			    ? TLB_RD_MAX_SLEEP_MS
			    : wait_ms;

			tlb_bench_sleep_ms((int) (ms > 0 ? ms : 0));
			continue;
		}
		if (rd_finish(c, cc, cl, k) != 0) {
			goto out;
		}
	}
	rv = 0;
out:
	free(cl);
	return rv;
}

const tlb_driver tlb_drv_redis = {
    .name = "redis",
    .nmodes = 2,
    .mode_name = {"always", "everysec"},
    .lossy = {false, true},
    .mode_desc =
        {
            "redis-server --appendonly yes --appendfsync always --save ''",
            "redis-server --appendonly yes --appendfsync everysec --save ''",
        },
    .scale_mode = 1,
    TLB_DRIVER_OPS(
        &rd_kind, rd_connect, tlb_text_disconnect, rd_put, rd_consume),
};
