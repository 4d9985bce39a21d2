/*
 * Crash safety of the store: what was acknowledged survives a SIGKILL. Each
 * round starts tl-crash-child (crash_child.c) on the same directory, reads
 * its journal of intents and acknowledgements for a random 20..300 ms after
 * its first line (every fifth round: 0..150 ms after its start, to hit open
 * and topic creation), kills it with SIGKILL wherever it is (inside an
 * fsync, between a write and its acknowledgement, during open...), reopens
 * the store and checks it against a model of everything acknowledged so
 * far, across all rounds: acknowledged creates present with their body and
 * ts, acknowledged deletes absent, acknowledged leases held, nothing else
 * present, counters exact, the consistency checker clean. The submissions in
 * flight at the kill (intents without acknowledgement) may or may not have
 * landed, but one submission lands whole or not at all (docs/storage.md: one
 * submission is never split across batches, and a batch is one WriteBatch).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testutil.h"
#include "tlcheck.h"

#define CHILD TL_TEST_BINDIR "/tests/tl-crash-child"
#define TOPIC "crash"
#define ROUNDS 20
#define KILL_MIN_MS 20 /* after the child's first line */
#define KILL_MAX_MS 300
#define START_KILL_MS 150 /* every STARTUP_EVERY-th round, from the start */
#define STARTUP_EVERY 5
#define START_MAX_MS 10000
#define MAX_THREADS 16
#define ID_CAP 96
#define WHO_CAP 32
#define BODY_CAP 1024
#define LEASE_MS INT64_C(3600000)

extern char **environ;

/* ---- the model of acknowledged state, across rounds ---- */

typedef struct ment {
	char id[ID_CAP];
	char owner[WHO_CAP];
	char consumer[WHO_CAP]; /* "" when not leased */
	int64_t ts;
	uint64_t version;
	uint32_t deliveries;
	bool live;
} ment;

typedef struct model {
	ment **slots;
	size_t cap; /* power of two */
	size_t n;   /* entries, live or deleted */
	size_t live;
	size_t leased; /* live with a consumer */
	size_t future; /* live, unleased, ts in the future */
} model;

/* ---- one round's journal ---- */

typedef struct jop {
	char op; /* C L D H */
	char id[ID_CAP];
	char who[WHO_CAP];
	int64_t ts;       /* C: intent ts */
	uint64_t version; /* L D H: expected version (0 = any) */
	bool acked;
	int64_t ack_ts;
	uint64_t ack_version;
} jop;

typedef struct group {
	size_t expected; /* from the B line */
	jop *ops;
	size_t nops;
	size_t cap;
	size_t nacked;
} group;

typedef struct journal {
	group *groups[MAX_THREADS];
	size_t ngroups[MAX_THREADS];
	size_t acks;
	size_t errors;
	char first_error[256];
	char fatal[256];
	char bad[256]; /* first line that does not parse */
	size_t lines;
} journal;

static ment **
model_slot(model *m, const char *id)
{
	size_t i = (size_t) tli_hash64(id, strlen(id)) & (m->cap - 1);

	while (m->slots[i] != NULL && strcmp(m->slots[i]->id, id) != 0) {
		i = (i + 1) & (m->cap - 1);
	}
	return &m->slots[i];
}

static ment *
model_find(model *m, const char *id)
{
	return *model_slot(m, id);
}

static void
model_grow(model *m)
{
	ment **old = m->slots;
	size_t ocap = m->cap;

	m->cap = ocap == 0 ? 1024 : ocap * 2;
	m->slots = calloc(m->cap, sizeof(*m->slots));
	cr_assert_not_null(m->slots);
	for (size_t i = 0; i < ocap; i++) {
		if (old[i] != NULL) {
			*model_slot(m, old[i]->id) = old[i];
		}
	}
	free(old);
}

static ment *
model_add(model *m, const char *id)
{
	ment **slot;

	if ((m->n + 1) * 2 > m->cap) {
		model_grow(m);
	}
	slot = model_slot(m, id);
	cr_assert_null(*slot, "id %s created twice by the child", id);
	*slot = calloc(1, sizeof(**slot));
	cr_assert_not_null(*slot);
	snprintf((*slot)->id, ID_CAP, "%s", id);
	m->n++;
	return *slot;
}

static void
model_free(model *m)
{
	for (size_t i = 0; i < m->cap; i++) {
		free(m->slots[i]);
	}
	free(m->slots);
}

static void
model_recount(model *m, int64_t now)
{
	m->live = m->leased = m->future = 0;
	for (size_t i = 0; i < m->cap; i++) {
		ment *e = m->slots[i];
		if (e == NULL || !e->live) {
			continue;
		}
		m->live++;
		if (e->consumer[0] != '\0') {
			m->leased++;
		} else if (e->ts > now) {
			m->future++;
		}
	}
}

/* ---- reading the journal ---- */

static group *
journal_group(journal *j, const char *tag, bool create)
{
	unsigned t;
	size_t b;
	char end;

	if (sscanf(tag, "%u.%zu%c", &t, &b, &end) != 2 || t >= MAX_THREADS) {
		return NULL;
	}
	if (b >= j->ngroups[t]) {
		if (!create) {
			return NULL;
		}
		j->groups[t] = realloc(j->groups[t], (b + 1) * sizeof(group));
		cr_assert_not_null(j->groups[t]);
		memset(&j->groups[t][j->ngroups[t]], 0,
		    (b + 1 - j->ngroups[t]) * sizeof(group));
		j->ngroups[t] = b + 1;
	}
	return &j->groups[t][b];
}

static jop *
group_find(group *g, char op, const char *id)
{
	for (size_t i = 0; i < g->nops; i++) {
		if (g->ops[i].op == op && strcmp(g->ops[i].id, id) == 0) {
			return &g->ops[i];
		}
	}
	return NULL;
}

static bool
journal_intent(journal *j, const char *l)
{
	char tag[32], id[ID_CAP], who[WHO_CAP], op;
	int64_t v;
	group *g;
	jop *o;

	if (sscanf(l, "P %31s %c %95s %31s %" SCNd64, tag, &op, id, who, &v) !=
	        5 ||
	    strchr("CLDH", op) == NULL ||
	    (g = journal_group(j, tag, true)) == NULL) {
		return false;
	}
	if (g->nops == g->cap) {
		g->cap = g->cap == 0 ? 8 : g->cap * 2;
		g->ops = realloc(g->ops, g->cap * sizeof(jop));
		cr_assert_not_null(g->ops);
	}
	o = &g->ops[g->nops++];
	memset(o, 0, sizeof(*o));
	o->op = op;
	snprintf(o->id, ID_CAP, "%s", id);
	snprintf(o->who, WHO_CAP, "%s", who);
	if (op == 'C') {
		o->ts = v;
	} else {
		o->version = (uint64_t) v;
	}
	return true;
}

static bool
journal_ack(journal *j, const char *l)
{
	char tag[32], id[ID_CAP], who[WHO_CAP], op;
	int64_t a = 0, b = 0;
	int n = sscanf(l, "A %31s %c %95s %31s %" SCNd64 " %" SCNd64, tag, &op,
	    id, who, &a, &b);
	group *g;
	jop *o;

	if (n < 3 || (g = journal_group(j, tag, false)) == NULL ||
	    (o = group_find(g, op, id)) == NULL || o->acked) {
		return false;
	}
	if (op == 'C') {
		if (n != 6) {
			return false;
		}
		o->ack_ts = a;
		o->ack_version = (uint64_t) b;
	} else if (op == 'L') {
		if (n != 6) {
			return false;
		}
		o->ack_version = (uint64_t) a;
		o->ack_ts = b;
	}
	o->acked = true;
	g->nacked++;
	j->acks++;
	return true;
}

static void
journal_line(journal *j, const char *l)
{
	char tag[32];
	size_t n;
	group *g;
	bool ok = false;

	j->lines++;
	switch (l[0]) {
	case 'B':
		ok = sscanf(l, "B %31s %zu", tag, &n) == 2 &&
		    (g = journal_group(j, tag, true)) != NULL;
		if (ok) {
			g->expected = n;
		}
		break;
	case 'P':
		ok = journal_intent(j, l);
		break;
	case 'A':
		ok = journal_ack(j, l);
		break;
	case 'E':
		ok = true;
		if (j->errors++ == 0) {
			snprintf(
			    j->first_error, sizeof(j->first_error), "%s", l);
		}
		break;
	case 'F':
		ok = true;
		snprintf(j->fatal, sizeof(j->fatal), "%s", l);
		break;
	}
	if (!ok && j->bad[0] == '\0') {
		snprintf(j->bad, sizeof(j->bad), "%s", l);
	}
}

static void
journal_free(journal *j)
{
	for (int t = 0; t < MAX_THREADS; t++) {
		for (size_t b = 0; b < j->ngroups[t]; b++) {
			free(j->groups[t][b].ops);
		}
		free(j->groups[t]);
	}
	memset(j, 0, sizeof(*j));
}

/* Feed the complete lines of buf[0..*len) to the journal and keep the
 * trailing partial line. */
static void
journal_feed(journal *j, char *buf, size_t *len)
{
	size_t start = 0;

	for (size_t i = 0; i < *len; i++) {
		if (buf[i] == '\n') {
			buf[i] = '\0';
			journal_line(j, buf + start);
			start = i + 1;
		}
	}
	memmove(buf, buf + start, *len - start);
	*len -= start;
}

/* ---- running the child ---- */

/* Read one chunk from fd into buf; returns false at EOF. */
static bool
pipe_read(int fd, journal *j, char *buf, size_t *len, size_t cap)
{
	ssize_t n;

	do {
		n = read(fd, buf + *len, cap - *len);
	} while (n < 0 && errno == EINTR);
	if (n <= 0) {
		return false;
	}
	*len += (size_t) n;
	journal_feed(j, buf, len);
	if (*len == cap) {
		/* a line longer than any the child writes: drop it */
		*len = 0;
		snprintf(j->bad, sizeof(j->bad), "overlong line");
	}
	return true;
}

/* Start the child on dir, read its journal, SIGKILL it run_ms after its
 * start (from_start) or after its first line (once the store is open and the
 * topic exists), reap it and read what it wrote before dying. Nothing here
 * asserts while the child is alive. Returns the wait status; *spawn_err is
 * posix_spawn's error. */
static int
child_run(const char *dir, const char *seed, bool from_start, int run_ms,
    journal *j, int *spawn_err)
{
	char *argv[] = {(char *) CHILD, (char *) dir, (char *) seed, NULL};
	posix_spawn_file_actions_t fa;
	char buf[8192];
	size_t len = 0;
	int fds[2];
	pid_t pid;
	int status = 0;
	bool eof = false;
	int64_t deadline;

	*spawn_err = 0;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		*spawn_err = errno;
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	*spawn_err = posix_spawn(&pid, CHILD, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (*spawn_err != 0) {
		close(fds[0]);
		return -1;
	}

	deadline = tli_mono_ms() + (from_start ? run_ms : START_MAX_MS);
	while (!eof) {
		int64_t left = deadline - tli_mono_ms();
		struct pollfd p = {.fd = fds[0], .events = POLLIN};
		int rv;

		if (left <= 0) {
			break;
		}
		rv = poll(&p, 1, (int) left);
		if (rv < 0 && errno != EINTR) {
			break;
		}
		if (rv > 0) {
			eof = !pipe_read(fds[0], j, buf, &len, sizeof(buf));
			if (!from_start && j->lines > 0) {
				deadline = tli_mono_ms() + run_ms;
				from_start = true;
			}
		}
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	/* Every line written before the kill counts; a final partial line
	 * (no '\n') is dropped. */
	while (!eof) {
		eof = !pipe_read(fds[0], j, buf, &len, sizeof(buf));
	}
	close(fds[0]);
	return status;
}

/* ---- checking the store ---- */

static void
check_msg(tli_store *s, const ment *e, int64_t now)
{
	char body[BODY_CAP];
	size_t blen = tt_crash_body(e->id, strlen(e->id), body);
	tli_msg m;
	int rv;

	memset(&m, 0, sizeof(m));
	rv = tli_store_get(s, TOPIC, e->id, strlen(e->id), &m);
	TL_PASS(rv, "acknowledged message %s lost", e->id);
	cr_assert_eq(m.ts, e->ts, "%s: ts %" PRId64 ", acknowledged %" PRId64,
	    e->id, m.ts, e->ts);
	cr_assert_eq(m.version, e->version,
	    "%s: version %" PRIu64 ", acknowledged %" PRIu64, e->id, m.version,
	    e->version);
	cr_assert_str_eq(m.owner, e->owner, "%s: owner", e->id);
	cr_assert_str_eq(m.consumer, e->consumer,
	    "%s: lock_consumer '%s', "
	    "acknowledged '%s'",
	    e->id, m.consumer, e->consumer);
	cr_assert_eq(m.deliveries, e->deliveries, "%s: deliveries %u, want %u",
	    e->id, m.deliveries, e->deliveries);
	cr_assert(!m.dead, "%s: a dead letter after %u deliveries", e->id,
	    m.deliveries);
	if (e->consumer[0] != '\0') {
		cr_assert_gt(m.ts, now,
		    "%s: acknowledged lease no longer "
		    "active",
		    e->id);
	}
	cr_assert_eq(m.body_len, blen, "%s: body length %zu, want %zu", e->id,
	    m.body_len, blen);
	cr_assert_arr_eq(m.body, body, blen, "%s: body differs", e->id);
	tli_msg_fini(&m);
}

static bool
msg_present(tli_store *s, const char *id, tli_msg *m)
{
	int rv;

	memset(m, 0, sizeof(*m));
	rv = tli_store_get(s, TOPIC, id, strlen(id), m);
	cr_assert(rv == TL_OK || rv == TL_ENOTFOUND, "get %s: %s", id,
	    tl_errname(rv));
	return rv == TL_OK;
}

/* Did this in-flight operation land? Checks that the store holds exactly
 * the state before or exactly the state after it. */
static bool
op_landed(tli_store *s, model *md, const jop *o, int64_t now)
{
	const ment *prev = o->op == 'C' ? NULL : model_find(md, o->id);
	tli_msg m;
	bool present, landed;

	if (o->op == 'C') {
		cr_assert_null(model_find(md, o->id), "id %s reused", o->id);
	} else {
		cr_assert(prev != NULL && prev->live,
		    "%s: the child touched "
		    "a message it did not have",
		    o->id);
	}
	present = msg_present(s, o->id, &m);
	switch (o->op) {
	case 'C':
		landed = present;
		if (present) {
			ment want = {.ts = o->ts, .version = 1, .live = true};
			snprintf(want.id, ID_CAP, "%s", o->id);
			snprintf(want.owner, WHO_CAP, "%s", o->who);
			check_msg(s, &want, now);
		}
		break;
	case 'L':
		cr_assert(present, "%s: unacknowledged lease lost the message",
		    o->id);
		landed = m.consumer_len > 0;
		if (landed) {
			cr_assert_str_eq(m.consumer, o->who, "%s", o->id);
			cr_assert_eq(m.version, prev->version + 1, "%s", o->id);
			cr_assert_eq(
			    m.deliveries, prev->deliveries + 1, "%s", o->id);
			cr_assert(m.ts > now && m.ts <= now + LEASE_MS,
			    "%s: leased until %" PRId64 ", now %" PRId64, o->id,
			    m.ts, now);
		} else {
			check_msg(s, prev, now);
		}
		break;
	default: /* D, H */
		landed = !present;
		if (present) {
			check_msg(s, prev, now);
		}
		break;
	}
	if (present) {
		tli_msg_fini(&m);
	}
	return landed;
}

static void
model_apply(model *md, const jop *o, int64_t ts, uint64_t version)
{
	ment *e;

	switch (o->op) {
	case 'C':
		e = model_add(md, o->id);
		snprintf(e->owner, WHO_CAP, "%s", o->who);
		e->ts = ts;
		e->version = version;
		e->live = true;
		break;
	case 'L':
		e = model_find(md, o->id);
		snprintf(e->consumer, WHO_CAP, "%s", o->who);
		e->ts = ts;
		e->version = version;
		e->deliveries++;
		break;
	default:
		e = model_find(md, o->id);
		e->live = false;
		break;
	}
}

/* Apply one acknowledged operation: the store's answer must follow the
 * rules before it enters the model. */
static void
apply_acked(model *md, const jop *o)
{
	const ment *prev = o->op == 'C' ? NULL : model_find(md, o->id);

	if (o->op != 'C') {
		cr_assert(prev != NULL && prev->live,
		    "%s: the child touched "
		    "a message it did not have",
		    o->id);
	}
	switch (o->op) {
	case 'C':
		cr_assert_eq(o->ack_version, 1,
		    "%s: created with version %" PRIu64, o->id, o->ack_version);
		cr_assert_eq(o->ack_ts, o->ts,
		    "%s: created at %" PRId64 ", asked %" PRId64, o->id,
		    o->ack_ts, o->ts);
		model_apply(md, o, o->ack_ts, o->ack_version);
		break;
	case 'L':
		cr_assert_eq(o->ack_version, prev->version + 1,
		    "%s: leased "
		    "as version %" PRIu64 " from %" PRIu64,
		    o->id, o->ack_version, prev->version);
		model_apply(md, o, o->ack_ts, o->ack_version);
		break;
	default:
		model_apply(md, o, 0, 0);
		break;
	}
}

/* A submission that was in flight at the kill: it landed whole or not at
 * all, and whole if any of it was acknowledged. */
static bool
resolve_group(
    tli_store *s, model *md, const group *g, const char *tag, int64_t now)
{
	bool landed = op_landed(s, md, &g->ops[0], now);
	tli_msg m;

	for (size_t i = 1; i < g->nops; i++) {
		cr_assert_eq(op_landed(s, md, &g->ops[i], now), landed,
		    "submission %s split by the crash: op 0 (%c %s) %s, op %zu "
		    "(%c %s) %s",
		    tag, g->ops[0].op, g->ops[0].id,
		    landed ? "applied" : "lost", i, g->ops[i].op, g->ops[i].id,
		    landed ? "lost" : "applied");
	}
	if (g->nacked > 0) {
		cr_assert(landed,
		    "submission %s acknowledged (%zu of %zu ops) "
		    "but lost",
		    tag, g->nacked, g->nops);
	}
	if (g->nops < g->expected) {
		cr_assert(!landed,
		    "submission %s applied before it was "
		    "complete",
		    tag);
	}
	if (!landed) {
		return false;
	}
	for (size_t i = 0; i < g->nops; i++) {
		const jop *o = &g->ops[i];

		if (o->op == 'C') {
			if (o->acked) {
				cr_assert_eq(o->ack_version, 1, "%s", o->id);
				cr_assert_eq(o->ack_ts, o->ts, "%s", o->id);
			}
			model_apply(md, o, o->ts, 1);
		} else if (o->op == 'L') {
			cr_assert(msg_present(s, o->id, &m));
			if (o->acked) {
				cr_assert_eq(m.ts, o->ack_ts, "%s", o->id);
				cr_assert_eq(
				    m.version, o->ack_version, "%s", o->id);
			}
			model_apply(md, o, m.ts, m.version);
			tli_msg_fini(&m);
		} else {
			model_apply(md, o, 0, 0);
		}
	}
	return true;
}

/* Count every message of the topic through the timeline index and check
 * each against the model. */
static uint64_t
scan_all(tli_store *s, model *md, uint32_t buckets)
{
	static tli_entry ents[256];
	uint64_t count = 0;

	for (uint32_t b = 0; b < buckets; b++) {
		tli_cursor cur;
		bool more = true;

		memset(&cur, 0, sizeof(cur));
		while (more) {
			size_t n = 0;
			int rv = tli_store_scan_due(
			    s, TOPIC, b, TL_TS_MAX, &cur, ents, 256, &n, &more);

			TL_PASS(rv, "scan_due");
			for (size_t i = 0; i < n; i++) {
				tli_entry *e = &ents[i];
				char id[TL_MAX_ID_LEN + 1];
				ment *me;

				memcpy(id, e->id, e->id_len);
				id[e->id_len] = '\0';
				me = model_find(md, id);
				cr_assert(me != NULL && me->live,
				    "message %s "
				    "in the store was never acknowledged (or "
				    "was deleted)",
				    id);
				cr_assert_eq(e->ts, me->ts, "%s: index ts", id);
				cr_assert_eq(e->version, me->version,
				    "%s: index version", id);
				cr_assert_eq(e->locked, me->consumer[0] != '\0',
				    "%s: index lock", id);
				cr_assert_eq(e->bucket, b, "%s: bucket", id);
			}
			count += n;
			if (n > 0) {
				tli_cursor_from_entry(&cur, &ents[n - 1]);
			} else {
				cr_assert(!more,
				    "scan_due: empty page with "
				    "more");
			}
		}
	}
	return count;
}

static void
verify_store(tli_store *s, model *md)
{
	int64_t now = tli_wall_ms();
	tli_topic_info info;
	tli_counts tot;
	uint64_t seen;
	size_t checked = 0;
	int rv;

	model_recount(md, now);
	rv = tli_store_topic_get(s, TOPIC, &info);
	if (rv == TL_ENOTOPIC && md->n == 0) {
		return; /* killed before the topic was acknowledged */
	}
	TL_PASS(rv, "topic_get");

	for (size_t i = 0; i < md->cap; i++) {
		ment *e = md->slots[i];
		tli_msg m;

		if (e == NULL) {
			continue;
		}
		if (e->live) {
			check_msg(s, e, now);
		} else {
			cr_assert(!msg_present(s, e->id, &m),
			    "acknowledged "
			    "delete of %s came back",
			    e->id);
		}
		checked++;
	}
	cr_assert_eq(checked, md->n);

	seen = scan_all(s, md, info.conf.buckets);
	cr_assert_eq(seen, md->live,
	    "timeline holds %" PRIu64 " messages, "
	    "model %zu",
	    seen, md->live);
	cr_assert_eq(info.messages, seen,
	    "messages counter %" PRIu64 ", present %" PRIu64, info.messages,
	    seen);
	cr_assert_eq(info.locked, md->leased,
	    "locked counter %" PRIu64 ", leased %zu", info.locked, md->leased);
	cr_assert_eq(info.dead, 0,
	    "dead counter %" PRIu64 ", no message was "
	    "leased twice",
	    info.dead);

	rv = tli_store_totals(s, TOPIC, &tot);
	TL_PASS(rv, "totals");
	cr_assert_eq(tot.processing, md->leased,
	    "processing %" PRIu64 ", want %zu", tot.processing, md->leased);
	cr_assert_eq(tot.waiting, md->future, "waiting %" PRIu64 ", want %zu",
	    tot.waiting, md->future);
	cr_assert_eq(tot.available, md->live - md->leased - md->future,
	    "available %" PRIu64 ", want %zu", tot.available,
	    md->live - md->leased - md->future);

	cr_assert_eq(tt_check(s), 0, "consistency checker found problems");
}

/* Replay one round's journal into the model: acknowledged submissions
 * directly, the one in flight per thread against the store. Returns the
 * number of in-flight submissions that landed. */
static size_t
replay(tli_store *s, model *md, journal *j, size_t *inflight)
{
	int64_t now = tli_wall_ms();
	size_t landed = 0;
	char tag[32];

	*inflight = 0;
	for (int t = 0; t < MAX_THREADS; t++) {
		for (size_t b = 0; b < j->ngroups[t]; b++) {
			group *g = &j->groups[t][b];
			bool last = b + 1 == j->ngroups[t];

			snprintf(tag, sizeof(tag), "%d.%zu", t, b);
			cr_assert(g->nops > 0 || last,
			    "batch %s announced "
			    "nothing",
			    tag);
			if (g->nops == g->expected && g->nacked == g->nops) {
				for (size_t i = 0; i < g->nops; i++) {
					apply_acked(md, &g->ops[i]);
				}
				continue;
			}
			cr_assert(last,
			    "batch %s not acknowledged but the "
			    "thread went on",
			    tag);
			if (g->nops == 0) {
				continue;
			}
			(*inflight)++;
			if (resolve_group(s, md, g, tag, now)) {
				landed++;
			}
		}
	}
	return landed;
}

Test(crash, acknowledged_operations_survive_sigkill, .timeout = 600)
{
	char *dir = tt_mkdtemp("crash");
	unsigned seed = (unsigned) time(NULL) ^ ((unsigned) getpid() << 16);
	model md;
	size_t total_acks = 0, rounds_acked = 0;

	memset(&md, 0, sizeof(md));
	model_grow(&md);
	srand(seed);
	cr_log_info("crash: seed %u, dir %s", seed, dir);
	fprintf(stderr, "crash: seed %u, dir %s\n", seed, dir);

	for (int r = 0; r < ROUNDS; r++) {
		/* Mostly kill while the workers run; sometimes during open and
		 * topic creation. */
		bool startup = r % STARTUP_EVERY == STARTUP_EVERY - 1;
		int run_ms = startup
		    ? rand() % (START_KILL_MS + 1)
		    : KILL_MIN_MS + rand() % (KILL_MAX_MS - KILL_MIN_MS + 1);
		char cseed[40];
		journal j;
		int status, err;
		size_t inflight, landed;
		tli_store *s;

		memset(&j, 0, sizeof(j));
		snprintf(cseed, sizeof(cseed), "%x-%d", seed, r);
		status = child_run(dir, cseed, startup, run_ms, &j, &err);
		cr_assert_eq(err, 0, "spawn %s: %s", CHILD, strerror(err));
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		    "round %d: the child ended on its own (status 0x%x) %s", r,
		    (unsigned) status, j.fatal);
		cr_assert_eq(
		    j.bad[0], '\0', "round %d: bad journal line: %s", r, j.bad);
		cr_assert_eq(j.errors, 0,
		    "round %d: %zu operations on known "
		    "state failed, first: %s",
		    r, j.errors, j.first_error);

		s = tt_store_open(dir, NULL);
		landed = replay(s, &md, &j, &inflight);
		verify_store(s, &md);
		tli_store_close(s);

		fprintf(stderr,
		    "crash: round %d: killed %d ms after %s, %zu "
		    "lines, %zu acknowledged, %zu/%zu in-flight submissions "
		    "landed, %zu live, %zu leased\n",
		    r, run_ms, startup ? "start" : "first line", j.lines,
		    j.acks, landed, inflight, md.live, md.leased);
		total_acks += j.acks;
		if (j.acks > 0) {
			rounds_acked++;
		}
		journal_free(&j);
	}
	fprintf(stderr,
	    "crash: %zu acknowledged operations in %d rounds "
	    "(%zu rounds with acknowledgements)\n",
	    total_acks, ROUNDS, rounds_acked);
	cr_assert_gt(total_acks, 1000,
	    "only %zu acknowledged operations: "
	    "the test proved little",
	    total_acks);
	cr_assert_geq(rounds_acked, ROUNDS / 2,
	    "only %zu of %d rounds got "
	    "any acknowledgement",
	    rounds_acked, ROUNDS);

	model_free(&md);
	tt_rmtree(dir);
	free(dir);
}
