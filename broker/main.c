/*
 * timelined: the Timeline broker daemon. Thin: the configuration (or the
 * --help / --hash-token it asked for), then the broker's start and stop
 * sequence (broker.c). Only here does a bad configuration end the process.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "auth.h"
#include "broker.h"

int tlb_run(const tlb_conf *conf);

int
main(int argc, char **argv)
{
	static tlb_conf conf;
	char err[1024];
	int action, rv;

	rv = tlb_conf_load(&conf, argc, argv, &action, err, sizeof(err));
	if (rv != 0) {
		fprintf(stderr, "timelined: %s\n", err);
		if (rv == 2) {
			tli_conf_usage(&tlb_conf_table, stderr);
		}
		return rv;
	}
	if (action == TLB_CONF_HELP) {
		tli_conf_usage(&tlb_conf_table, stdout);
		return 0;
	}
	if (action == TLB_CONF_HASH_TOKEN) {
		return tlb_auth_hash_stdin();
	}
	tli_log_set_level((tli_log_level) conf.log_level);
	/* Big blocks (RocksDB's memtable arenas, a few MiB; a cluster's
	 * entries, up to a MiB or two, allocated and freed for every entry
	 * on every node) from the heap, and up to 16 MiB kept free at its top
	 * rather than returned at once: returned to the system and taken
	 * again, every page of them costs a page fault (measured on a
	 * three-node cluster under durable creates: 1.5 faults per create
	 * with glibc's defaults, 0.26 with these). Larger blocks (big bodies,
	 * frames) still come from mmap and go back when freed, and a heap
	 * keeps at most 16 MiB it does not use: memory still follows what
	 * clients send (tests/broker/test_input.c, test_prelogin.c). */
	mallopt(M_MMAP_THRESHOLD, 4 << 20);
	mallopt(M_TRIM_THRESHOLD, 16 << 20);
	/* One heap (arena) per core, not glibc's eight: each heap keeps its
	 * own free memory (up to the trim threshold above), and the
	 * broker's threads (writer, dispatcher, nng's, RocksDB's) spread
	 * over eight of them on two cores. A fill of 10M messages an hour
	 * ahead: RSS 158-160 MB with eight, 139-142 MB with two, fill rate
	 * within the noise. MALLOC_ARENA_MAX, when set, decides. */
	if (getenv("MALLOC_ARENA_MAX") == NULL) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		mallopt(M_ARENA_MAX, n < 2 ? 2 : (int) n);
	}
	return tlb_run(&conf);
}
