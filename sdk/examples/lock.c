/*
 * Example lock: a sync loop that at most one process runs at a time, in
 * the manner of a per-topic sync lock with a heartbeat. Each round takes
 * the lock "sync-lock" of topic "default" (created on first use), does its
 * work in steps while extending the lease on a heartbeat, and releases the
 * lock so that the next process gets it at once. If the process dies, the
 * lock runs out after the lease (3 s) and another process takes it.
 *   tl-example-lock [URL [NAME [ROUNDS]]]
 * Run two copies with different names to see them take turns:
 *   tl-example-lock tcp://127.0.0.1:7400 alice & \
 *   tl-example-lock tcp://127.0.0.1:7400 bob
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <timeline/timeline.h>

#define LEASE_MS 3000
#define STEPS 10    /* steps of work per round */
#define STEP_MS 150 /* one step */

static void
nap(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* One round's work; false when the lock was lost on the way. */
static bool
sync_round(tl_client *client, tl_lease *lock, const char *name)
{
	for (int step = 0; step < STEPS; step++) {
		int rv;

		nap(STEP_MS); /* the work: fetch, apply, record progress */
		/* Heartbeat: extend when less than half the lease is left. */
		if (tl_lease_until(lock) - tl_client_broker_now(client) <
		        LEASE_MS / 2 &&
		    (rv = tl_lease_extend(lock, LEASE_MS)) != TL_OK) {
			fprintf(stderr, "%s: lost the lock: %s\n", name,
			    tl_strerror(rv));
			return false;
		}
	}
	return true;
}

int
main(int argc, char **argv)
{
	const char *name = argc > 2 ? argv[2] : "example-lock";
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	tl_opts *opts;
	tl_client *client;
	tl_lock_conf conf = {
	    .topic = "default",
	    .id = "sync-lock",     /* the lock's name */
	    .consumer_id = name,   /* the holder: one per process */
	    .lease_ms = LEASE_MS,  /* how long a dead holder keeps it */
	    .create_group = "sync" /* create the lock message on first use */
	};
	int rv;

	tl_opts_alloc(&opts);
	if (argc > 1) {
		tl_opts_set_url(opts, argv[1]);
	}
	rv = tl_client_open(&client, opts);
	tl_opts_free(opts);
	if (rv != TL_OK) {
		fprintf(stderr, "cannot connect: %s\n", tl_strerror(rv));
		return 1;
	}

	for (int round = 1; round <= rounds; round++) {
		tl_lease *lock;

		/* Wait for the lock as long as a holder might keep it. */
		if ((rv = tl_lock(client, &conf, 60000, &lock)) != TL_OK) {
			fprintf(
			    stderr, "%s: no lock: %s\n", name, tl_strerror(rv));
			break;
		}
		printf("%s: round %d: took the lock (version %llu)\n", name,
		    round, (unsigned long long) tl_lease_version(lock));
		fflush(stdout);
		if (sync_round(client, lock, name)) {
			/* Available to the next process at once. */
			rv = tl_lease_release(lock, 0, true);
			printf("%s: round %d: done, released (%s)\n", name,
			    round, tl_strerror(rv));
			fflush(stdout);
		}
		tl_lease_free(lock);
		/* The next sync is due later. A waiting process polls at
		 * least once a second (tl_lock), so it gets its turn now. */
		nap(1200);
	}
	tl_client_close(client);
	return 0;
}
