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
	/* RocksDB's memtables come and go in blocks of a few MiB. glibc
	 * raises its mmap threshold past such a block once one is freed, and
	 * later blocks then come from the heap, which rarely shrinks: the
	 * resident size would keep the high-water mark of every memtable
	 * ever flushed. A fixed threshold keeps big blocks in mmap, returned
	 * to the system when freed. */
	mallopt(M_MMAP_THRESHOLD, 512 * 1024);
	return tlb_run(&conf);
}
