/*
 * timelined: the Timeline broker daemon. Thin: the configuration (or the
 * --help / --hash-token it asked for), then the broker's start and stop
 * sequence (broker.c). Only here does a bad configuration end the process.
 */
#include <malloc.h>
#include <stdio.h>

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
	 * on every node) from the heap, and the heap kept when they are
	 * freed: returned to the system and taken again, every page of them
	 * costs a page fault (measured on a three-node cluster under durable
	 * creates: 1.5 faults and ~55 us of CPU per create with glibc's
	 * defaults or a small threshold, 1.0 and ~44 us with these; a single
	 * broker: ten times fewer faults). The price is a resident size that
	 * keeps the high-water mark of those blocks, up to 64 MiB free at
	 * the top of a heap: 2M messages an hour ahead end at 100 MB instead
	 * of 74 MB (tl-bench scale). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	mallopt(M_TOP_PAD, 32 << 20);
	return tlb_run(&conf);
}
