/*
 * tl-crash-child: the victim of the crash-safety test (test_crash.c). It
 * opens the store at DIR with the default durability (fsync before every
 * acknowledgement) and the wall clock, makes sure topic "crash" exists, then
 * runs NTHREADS threads that submit batches of 1..50 operations on their own
 * messages for ever, until the test kills the process with SIGKILL.
 *
 * Its stdout is a journal the test replays against the reopened store. Every
 * line is written with one write(2) (atomic on a pipe). Before a batch is
 * submitted, one intent line per operation ("P <tag> ...") names what may
 * become durable; only after tli_store_apply has returned does one
 * acknowledgement line per operation follow ("A <tag> ..."); an operation
 * that failed is reported as "E <tag> ...". <tag> is "<thread>.<batch>" and
 * groups the operations of one submission, announced by "B <tag> <count>":
 *
 *   P <tag> C <id> <owner> <ts>         A <tag> C <id> <owner> <ts> <ver>
 *   P <tag> L <id> <consumer> <ver>     A <tag> L <id> <consumer> <ver> <ts>
 *   P <tag> D <id> <owner> <ver>        A <tag> D <id>
 *   P <tag> H <id> <consumer> <ver>     A <tag> H <id>
 *   E <tag> <op> <id> <error name>      F <reason>   (fatal, then exit)
 *
 * C = create, L = lease (one hour, so still active when verified), D =
 * delete by the owner, H = delete by the lease holder. Ids are
 * "<seed>-<thread>-<n>", unique per run as long as the seed is; bodies are
 * derived from the id (tt_crash_body of the test support library, which
 * test_crash.c checks against). Each thread touches only messages it created
 * and saw acknowledged, so every operation is expected to succeed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "base.h"
#include "store.h"
#include "testutil.h"

#define NTHREADS 3
#define MAX_OPS 50
#define POOL_MAX 2048
#define ID_CAP 96
#define BODY_CAP 1024
#define LEASE_MS INT64_C(3600000)
#define TOPIC "crash"

typedef struct pool_ent {
	char id[ID_CAP];
	uint64_t version;
} pool_ent;

typedef struct worker {
	int index;
	uint64_t rng;
	uint64_t next_id;
	uint64_t batches;
	char owner[32];
	char consumer[32];
	pool_ent due[POOL_MAX]; /* created, due, never leased */
	size_t ndue;
	pool_ent leased[POOL_MAX]; /* leased by this worker's consumer */
	size_t nleased;
	/* the batch being built: ids and bodies must outlive the apply */
	tli_op ops[MAX_OPS];
	char ids[MAX_OPS][ID_CAP];
	char bodies[MAX_OPS][BODY_CAP];
} worker;

static tli_store *store;
static const char *seed;

static void
write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, buf, len);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			_exit(3);
		}
		buf += n;
		len -= (size_t) n;
	}
}

static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
line(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(buf)) {
		_exit(4);
	}
	write_all(buf, (size_t) n);
}

static pool_ent
pool_take(worker *w, pool_ent *pool, size_t *n)
{
	size_t i = (size_t) (tt_rng_next(&w->rng) % *n);
	pool_ent e = pool[i];

	pool[i] = pool[--*n];
	return e;
}

static void
pool_put(pool_ent *pool, size_t *n, const char *id, uint64_t version)
{
	if (*n < POOL_MAX) {
		snprintf(pool[*n].id, ID_CAP, "%s", id);
		pool[*n].version = version;
		(*n)++;
	}
}

static char
op_letter(tli_op_type t)
{
	switch (t) {
	case TLI_OP_CREATE:
		return 'C';
	case TLI_OP_LEASE:
		return 'L';
	case TLI_OP_DELETE_OWNED:
		return 'D';
	case TLI_OP_DELETE_LEASED:
		return 'H';
	default:
		return '?';
	}
}

/* Fill ops[i] with one operation on this worker's own messages and write its
 * intent line. */
static void
batch_add(worker *w, size_t i, const char *tag, int64_t now)
{
	tli_op *op = &w->ops[i];
	char *id = w->ids[i];
	unsigned r = (unsigned) (tt_rng_next(&w->rng) % 100);
	pool_ent e;

	memset(op, 0, sizeof(*op));
	op->topic = TOPIC;
	op->id = id;
	if (r < 25 && w->ndue > 0) {
		e = pool_take(w, w->due, &w->ndue);
		op->type = TLI_OP_LEASE;
		op->who = w->consumer;
		op->ts = LEASE_MS;
		op->ts_mode = TLI_TS_REL;
		/* lease may say "any version" (0) or the exact one */
		op->version = (tt_rng_next(&w->rng) & 1) ? e.version : 0;
	} else if (r < 40 && w->ndue > 0) {
		e = pool_take(w, w->due, &w->ndue);
		op->type = TLI_OP_DELETE_OWNED;
		op->who = w->owner;
		op->version = (tt_rng_next(&w->rng) & 1) ? e.version : 0;
	} else if (r < 50 && w->nleased > 0) {
		e = pool_take(w, w->leased, &w->nleased);
		op->type = TLI_OP_DELETE_LEASED;
		op->who = w->consumer;
		op->version = e.version;
	} else {
		snprintf(e.id, ID_CAP, "%s-%d-%" PRIu64, seed, w->index,
		    w->next_id++);
		e.version = 0;
		op->type = TLI_OP_CREATE;
		op->who = w->owner;
		/* mostly due at once (so they can be leased), some a day out */
		if (tt_rng_next(&w->rng) % 100 < 85) {
			op->ts = now - 1000 -
			    (int64_t) (tt_rng_next(&w->rng) % 100000);
		} else {
			op->ts = now + 86400000 +
			    (int64_t) (tt_rng_next(&w->rng) % 1000);
		}
	}
	snprintf(id, ID_CAP, "%s", e.id);
	op->id_len = strlen(id);
	op->who_len = strlen(op->who);
	if (op->type == TLI_OP_CREATE) {
		op->body = w->bodies[i];
		op->body_len = tt_crash_body(id, op->id_len, w->bodies[i]);
		line("P %s C %s %s %" PRId64 "\n", tag, id, op->who, op->ts);
	} else {
		line("P %s %c %s %s %" PRIu64 "\n", tag, op_letter(op->type),
		    id, op->who, op->version);
	}
}

/* After the apply returned: acknowledge each operation and feed the pools. */
static void
batch_ack(worker *w, size_t n, const char *tag, int64_t now)
{
	for (size_t i = 0; i < n; i++) {
		tli_op *op = &w->ops[i];
		const char *id = w->ids[i];
		char c = op_letter(op->type);

		if (op->err != TL_OK) {
			line(
			    "E %s %c %s %s\n", tag, c, id, tl_errname(op->err));
			continue;
		}
		switch (op->type) {
		case TLI_OP_CREATE:
			line("A %s C %s %s %" PRId64 " %" PRIu64 "\n", tag, id,
			    op->who, op->new_ts, op->new_version);
			if (op->new_ts <= now) {
				pool_put(w->due, &w->ndue, id, op->new_version);
			}
			break;
		case TLI_OP_LEASE:
			line("A %s L %s %s %" PRIu64 " %" PRId64 "\n", tag, id,
			    op->who, op->new_version, op->new_ts);
			pool_put(w->leased, &w->nleased, id, op->new_version);
			break;
		default:
			line("A %s %c %s\n", tag, c, id);
			break;
		}
	}
}

static void *
worker_main(void *arg)
{
	worker *w = arg;
	char tag[32];

	for (;;) {
		size_t n = 1 + (size_t) (tt_rng_next(&w->rng) % MAX_OPS);
		int64_t now = tli_wall_ms();
		int rv;

		snprintf(
		    tag, sizeof(tag), "%d.%" PRIu64, w->index, w->batches++);
		line("B %s %zu\n", tag, n);
		for (size_t i = 0; i < n; i++) {
			batch_add(w, i, tag, now);
		}
		rv = tli_store_apply(store, w->ops, n);
		if (rv != TL_OK) {
			line("F apply %s\n", tl_errname(rv));
			_exit(5);
		}
		batch_ack(w, n, tag, tli_wall_ms());
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	static worker workers[NTHREADS];
	pthread_t th[NTHREADS];
	tli_store_opts o;
	tli_topic_conf c;
	char seedbuf[64];
	int rv;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s DIR [seed]\n", argv[0]);
		return 2;
	}
#ifdef __linux__
	/* never outlive the test that drives us */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1) {
		return 2;
	}
#endif
	if (argc == 3) {
		seed = argv[2];
	} else {
		snprintf(seedbuf, sizeof(seedbuf), "%ld.%ld", (long) getpid(),
		    (long) time(NULL));
		seed = seedbuf;
	}
	if (strlen(seed) == 0 || strlen(seed) > 40 ||
	    strchr(seed, ' ') != NULL) {
		fprintf(stderr, "seed must be 1..40 characters, no spaces\n");
		return 2;
	}

	tli_store_opts_init(&o);
	o.path = argv[1];
	if ((rv = tli_store_open(&store, &o)) != TL_OK) {
		line("F open %s\n", tl_errname(rv));
		return 1;
	}
	if ((rv = tli_topic_conf_init(&c, TOPIC)) == TL_OK) {
		rv = tli_store_topic_create(store, &c);
	}
	if (rv != TL_OK && rv != TL_ETOPICEXISTS) {
		line("F topic %s\n", tl_errname(rv));
		return 1;
	}

	for (int i = 0; i < NTHREADS; i++) {
		worker *w = &workers[i];

		w->index = i;
		w->rng = tli_hash64(seed, strlen(seed)) ^
		    (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t) (i + 1));
		if (w->rng == 0) {
			w->rng = 1;
		}
		snprintf(w->owner, sizeof(w->owner), "producer-%d", i);
		snprintf(w->consumer, sizeof(w->consumer), "consumer-%d", i);
		if (pthread_create(&th[i], NULL, worker_main, w) != 0) {
			line("F pthread_create\n");
			return 1;
		}
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
	}
	tli_store_close(store);
	return 0;
}
