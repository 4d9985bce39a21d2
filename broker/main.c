/*
 * timelined: the Timeline broker daemon. Thin: configuration, then the
 * broker's start and stop sequence (broker.c).
 */
#include "broker.h"

int tlb_run(int argc, char **argv);

int
main(int argc, char **argv)
{
	return tlb_run(argc, argv);
}
