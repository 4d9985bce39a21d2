/*
 * tl-msc4140: the MSC4140 delayed-event gateway as its own process, in
 * front of a homeserver, against a (local or remote) Timeline broker.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "signals.h"
#include "msc4140.h"

/* The settings: defaults, the -c file, then --broker and --listen. Returns
 * -1 to go on, or the exit status. */
static int
configure(tlg_conf *c, int argc, char **argv)
{
	tli_conf_cli cli;
	char err[1024];
	int rv;

	tlg_conf_defaults(c);
	rv = tli_conf_cmdline(
	    &tlg_conf_table, c, argc, argv, &cli, err, sizeof(err));
	if (rv != TLI_CONF_OK) {
		fprintf(stderr, "tl-msc4140: %s\n", err);
		if (rv == TLI_CONF_EUSAGE) {
			tli_conf_usage(&tlg_conf_table, stderr);
		}
		return rv == TLI_CONF_EUSAGE ? 2 : 1;
	}
	if (cli.action == TLG_CONF_HELP) {
		tli_conf_usage(&tlg_conf_table, stdout);
		return 0;
	}
	if (cli.nfiles == 0) {
		fprintf(stderr,
		    "tl-msc4140: give one configuration file, -c "
		    "FILE\n");
		tli_conf_usage(&tlg_conf_table, stderr);
		return 2;
	}
	if (cli.action == TLG_CONF_PRINT_REGISTRATION) {
		tlg_print_registration(c, stdout);
		return 0;
	}
	if (tlg_conf_verify(c, err, sizeof(err)) != 0) {
		fprintf(stderr, "tl-msc4140: %s\n", err);
		return 1;
	}
	return -1;
}

int
main(int argc, char **argv)
{
	tlg_conf c;
	tlg *g = NULL;
	sigset_t sigs;
	int rv;

	if ((rv = configure(&c, argc, argv)) >= 0) {
		return rv;
	}
	tli_signals_block(&sigs, false);
	if (tlg_start(&g, &c, NULL) != 0) {
		return 1;
	}
	(void) tli_signal_wait(&sigs);
	tlg_stop(g);
	return 0;
}
