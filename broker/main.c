/*
 * timelined: the Timeline broker daemon. Thin: configuration, then the
 * broker's start and stop sequence (broker.c).
 */
#include <malloc.h>

#include "broker.h"

int tlb_run(int argc, char **argv);

int
main(int argc, char **argv)
{
	/* RocksDB's memtables come and go in blocks of a few MiB. glibc
	 * raises its mmap threshold past such a block once one is freed, and
	 * later blocks then come from the heap, which rarely shrinks: the
	 * resident size would keep the high-water mark of every memtable
	 * ever flushed. A fixed threshold keeps big blocks in mmap, returned
	 * to the system when freed. */
	mallopt(M_MMAP_THRESHOLD, 512 * 1024);
	return tlb_run(argc, argv);
}
