/*
 * tlctl's entry point; the commands live in tlctl.c (see docs/tlctl.md).
 */
#include "tlctl.h"

int
main(int argc, char **argv)
{
	return tlctl_main(argc, argv, stdout, stderr);
}
