/*
 * tl-msc4140: the MSC4140 delayed-event gateway as its own process, in
 * front of a homeserver, against a (local or remote) Timeline broker.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "msc4140.h"

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tl-msc4140 -c FILE [--broker URL] [--listen HOST:PORT]\n"
	    "       tl-msc4140 -c FILE --print-registration\n"
	    "  -c, --config FILE         the gateway's settings "
	    "(docs/msc4140.md)\n"
	    "      --broker URL          the Timeline broker (overrides "
	    "the file)\n"
	    "      --listen HOST:PORT    the HTTP address (overrides the "
	    "file)\n"
	    "      --print-registration  print the appservice registration "
	    "YAML\n"
	    "  -h, --help\n");
}

int
main(int argc, char **argv)
{
	tlg_conf c;
	tlg *g = NULL;
	const char *file = NULL, *broker = NULL, *listen = NULL;
	bool print_reg = false;
	sigset_t sigs;
	int sig = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool more = i + 1 < argc;
		if ((strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) &&
		    more) {
			file = argv[++i];
		} else if (strcmp(a, "--broker") == 0 && more) {
			broker = argv[++i];
		} else if (strcmp(a, "--listen") == 0 && more) {
			listen = argv[++i];
		} else if (strcmp(a, "--print-registration") == 0) {
			print_reg = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (file == NULL) {
		usage(stderr);
		return 2;
	}
	tlg_conf_defaults(&c);
	if (tlg_conf_file(&c, file) != 0 ||
	    (broker != NULL && tlg_conf_set(&c, "broker", broker) != 0) ||
	    (listen != NULL && tlg_conf_set(&c, "listen", listen) != 0)) {
		return 1;
	}
	if (print_reg) {
		tlg_print_registration(&c, stdout);
		return 0;
	}
	if (tlg_conf_check(&c) != 0) {
		return 1;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (tlg_start(&g, &c, NULL) != 0) {
		return 1;
	}
	while (sig != SIGTERM && sig != SIGINT) {
		if (sigwait(&sigs, &sig) != 0) {
			break;
		}
	}
	tlg_stop(g);
	return 0;
}
