/*
 * tl-chronos: the Chronos timer API as its own process, against a (local
 * or remote) Timeline broker.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "signals.h"
#include "chronos.h"

/* The settings: defaults, the -c file, then the flags. Returns -1 to go
 * on, or the exit status. */
static int
configure(tlk_conf *c, int argc, char **argv)
{
	tli_conf_cli cli;
	char err[1024];
	int rv;

	tlk_conf_defaults(c);
	rv = tli_conf_cmdline(
	    &tlk_conf_table, c, argc, argv, &cli, err, sizeof(err));
	if (rv != TLI_CONF_OK) {
		fprintf(stderr, "tl-chronos: %s\n", err);
		if (rv == TLI_CONF_EUSAGE) {
			tli_conf_usage(&tlk_conf_table, stderr);
		}
		return rv == TLI_CONF_EUSAGE ? 2 : 1;
	}
	if (cli.action == TLK_CONF_HELP) {
		tli_conf_usage(&tlk_conf_table, stdout);
		return 0;
	}
	if (tlk_conf_verify(c, err, sizeof(err)) != 0) {
		fprintf(stderr, "tl-chronos: %s\n", err);
		return 1;
	}
	return -1;
}

int
main(int argc, char **argv)
{
	tlk_conf c;
	tlk *k = NULL;
	sigset_t sigs;
	int rv;

	if ((rv = configure(&c, argc, argv)) >= 0) {
		return rv;
	}
	tli_signals_block(&sigs, false);
	if (tlk_start(&k, &c, NULL) != 0) {
		return 1;
	}
	(void) tli_signal_wait(&sigs);
	tlk_stop(k);
	return 0;
}
