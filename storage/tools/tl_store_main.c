/*
 * tl-store: the operator's tool for a Timeline data directory. It checks
 * consistency, lists topics with their counts, creates topics, copies a
 * store as a checkpoint and prepares a copy to seed a new cluster, and runs
 * a small demo of the store (schedule a few messages, lease and delete each
 * one when it comes due). Stop the broker before pointing it at the broker's
 * data directory: RocksDB allows one process per database.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"

static void
usage(void)
{
	fprintf(stderr,
	    "usage: tl-store check DIR           verify every record and "
	    "index\n"
	    "       tl-store topics DIR          list topics and their counts\n"
	    "       tl-store create-topic DIR NAME [BUCKETS]\n"
	    "       tl-store checkpoint SRC DST  copy a stopped store (DST "
	    "must not exist)\n"
	    "       tl-store seed DIR            prepare a copy to seed a new "
	    "cluster\n"
	    "                                    (clears the old group's "
	    "applied index)\n"
	    "       tl-store demo DIR            schedule 5 messages and "
	    "deliver "
	    "them\n");
}

static int
open_store(const char *dir, tli_store **s)
{
	tli_store_opts o;
	int rv;

	tli_store_opts_init(&o);
	o.path = dir;
	if ((rv = tli_store_open(s, &o)) != TL_OK) {
		fprintf(stderr, "tl-store: cannot open %s: %s (%s)\n", dir,
		    tl_strerror(rv), tl_errname(rv));
	}
	return rv;
}

static void
print_problem(void *arg, const char *p)
{
	(void) arg;
	printf("problem: %s\n", p);
}

static int
cmd_check(tli_store *s)
{
	uint64_t problems = 0;
	int rv = tli_store_check(s, print_problem, NULL, &problems);

	if (rv != TL_OK) {
		fprintf(
		    stderr, "tl-store: check failed: %s\n", tl_strerror(rv));
		return 2;
	}
	printf("%llu problem(s)\n", (unsigned long long) problems);
	return problems == 0 ? 0 : 1;
}

static int
cmd_topics(tli_store *s)
{
	tli_topic_info *v;
	size_t n;
	int rv = tli_store_topic_list(s, &v, &n);

	if (rv != TL_OK) {
		fprintf(stderr, "tl-store: %s\n", tl_strerror(rv));
		return 2;
	}
	printf("%-24s %8s %12s %12s %12s %12s\n", "topic", "buckets",
	    "messages", "available", "waiting", "processing");
	for (size_t i = 0; i < n; i++) {
		tli_counts c = {0};
		tli_store_totals(s, v[i].conf.name, &c);
		printf("%-24s %8u %12llu %12llu %12llu %12llu\n",
		    v[i].conf.name, v[i].conf.buckets,
		    (unsigned long long) v[i].messages,
		    (unsigned long long) c.available,
		    (unsigned long long) c.waiting,
		    (unsigned long long) c.processing);
	}
	tli_free(v);
	return 0;
}

static int
cmd_create_topic(tli_store *s, const char *name, const char *buckets)
{
	tli_topic_conf c;
	int rv = tli_topic_conf_init(&c, name);

	if (rv == TL_OK && buckets != NULL) {
		c.buckets = (uint32_t) strtoul(buckets, NULL, 10);
	}
	if (rv == TL_OK) {
		rv = tli_store_topic_create(s, &c);
	}
	if (rv != TL_OK) {
		fprintf(stderr, "tl-store: cannot create topic %s: %s\n", name,
		    tl_strerror(rv));
		return 1;
	}
	printf("created topic %s\n", name);
	return 0;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* An operation of the demo consumer on message e. */
static tli_op
demo_op(tli_op_type type, const tli_entry *e, uint64_t version)
{
	tli_op op;

	memset(&op, 0, sizeof(op));
	op.type = type;
	op.topic = "default";
	op.id = e->id;
	op.id_len = e->id_len;
	op.who = "demo";
	op.who_len = 4;
	op.version = version;
	return op;
}

/* Deliver the demo's due messages: lease, print, delete. */
static int
demo_deliver(tli_store *s, tli_topic_info *ti, int *left)
{
	for (uint32_t b = 0; b < ti->conf.buckets; b++) {
		tli_entry e[16];
		size_t n;
		bool more;
		int64_t now = tli_wall_ms();

		if (tli_store_scan_due(s, "default", b, now, NULL, e, 16, &n,
		        &more) != TL_OK) {
			return -1;
		}
		for (size_t i = 0; i < n; i++) {
			tli_op op[2] = {
			    demo_op(TLI_OP_LEASE, &e[i], e[i].version),
			    demo_op(
			        TLI_OP_DELETE_LEASED, &e[i], e[i].version + 1)};

			op[0].ts = 30000;
			op[0].ts_mode = TLI_TS_REL;
			tli_store_apply(s, op, 2);
			if (op[0].err == TL_OK && op[1].err == TL_OK) {
				printf("delivered %.*s due %lld, late by %lld "
				       "ms\n",
				    (int) e[i].id_len, e[i].id,
				    (long long) e[i].ts,
				    (long long) (now - e[i].ts));
				(*left)--;
			}
		}
	}
	return 0;
}

static int
cmd_demo(tli_store *s)
{
	tli_topic_conf c;
	tli_topic_info ti;
	int left = 5;

	tli_topic_conf_init(&c, "default");
	if (tli_store_topic_get(s, "default", &ti) != TL_OK) {
		tli_store_topic_create(s, &c);
		tli_store_topic_get(s, "default", &ti);
	}
	for (int i = 0; i < 5; i++) {
		tli_op op;
		char body[32];

		snprintf(body, sizeof(body), "demo message %d", i + 1);
		memset(&op, 0, sizeof(op));
		op.type = TLI_OP_CREATE;
		op.topic = "default";
		op.who = "demo";
		op.who_len = 4;
		op.ts = 500 * (i + 1);
		op.ts_mode = TLI_TS_REL;
		op.body = body;
		op.body_len = strlen(body);
		tli_store_apply(s, &op, 1);
		if (op.err != TL_OK) {
			fprintf(stderr, "tl-store: create: %s\n",
			    tl_strerror(op.err));
			return 1;
		}
		printf("scheduled %s at %lld (in %d ms), durable\n", op.gen_id,
		    (long long) op.new_ts, 500 * (i + 1));
	}
	while (left > 0) {
		if (demo_deliver(s, &ti, &left) != 0) {
			return 1;
		}
		sleep_ms(5);
	}
	return cmd_check(s);
}

static int
cmd_checkpoint(const char *src, const char *dst)
{
	char why[512];
	uint64_t index = 0;
	int rv = tli_store_copy(src, dst, &index, why, sizeof(why));

	if (rv != TL_OK) {
		fprintf(stderr, "tl-store: %s (%s)\n", why, tl_errname(rv));
		return rv == TL_EBUSY || rv == TL_EINVAL ? 2 : 1;
	}
	printf("checkpoint of %s in %s (applied index %llu)\n", src, dst,
	    (unsigned long long) index);
	return 0;
}

static int
cmd_seed(const char *dir)
{
	char why[512];
	uint64_t was = 0, id = 0;
	int rv = tli_store_seed(dir, &was, &id, why, sizeof(why));

	if (rv != TL_OK) {
		fprintf(stderr, "tl-store: %s (%s)\n", why, tl_errname(rv));
		return rv == TL_EBUSY || rv == TL_EINVAL ? 2 : 1;
	}
	if (was != 0) {
		printf("%s: applied index %llu of its old Raft group cleared\n",
		    dir, (unsigned long long) was);
	}
	printf("%s is seed %016llx: ready to seed a new cluster (place "
	       "copies of this prepared store in every node's DATA/store, "
	       "with no DATA/raft)\n",
	    dir, (unsigned long long) id);
	return 0;
}

int
main(int argc, char **argv)
{
	tli_store *s = NULL;
	int rc;

	if (argc < 3) {
		usage();
		return 2;
	}
	/* these open (or copy) the store themselves */
	if (strcmp(argv[1], "checkpoint") == 0) {
		if (argc != 4) {
			usage();
			return 2;
		}
		return cmd_checkpoint(argv[2], argv[3]);
	}
	if (strcmp(argv[1], "seed") == 0) {
		if (argc != 3) {
			usage();
			return 2;
		}
		return cmd_seed(argv[2]);
	}
	if (open_store(argv[2], &s) != TL_OK) {
		return 2;
	}
	if (strcmp(argv[1], "check") == 0) {
		rc = cmd_check(s);
	} else if (strcmp(argv[1], "topics") == 0) {
		rc = cmd_topics(s);
	} else if (strcmp(argv[1], "create-topic") == 0 && argc >= 4) {
		rc = cmd_create_topic(s, argv[3], argc > 4 ? argv[4] : NULL);
	} else if (strcmp(argv[1], "demo") == 0) {
		rc = cmd_demo(s);
	} else {
		usage();
		rc = 2;
	}
	tli_store_close(s);
	return rc;
}
