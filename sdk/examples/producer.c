/*
 * Example producer: put one message on topic "default", due in 5 seconds.
 *   tl-example-producer [URL]
 */
#include <stdio.h>
#include <string.h>

#include <timeline/timeline.h>

int
main(int argc, char **argv)
{
	tl_opts *opts;
	tl_client *client;
	char id[TL_MAX_ID_LEN + 1];
	const char *body = "hello from the past";
	int rv;

	tl_opts_alloc(&opts);
	if (argc > 1) {
		tl_opts_set_url(opts, argv[1]);
	}
	rv = tl_client_open(&client, opts);
	tl_opts_free(opts);
	if (rv != TL_OK) {
		fprintf(stderr, "connect: %s\n", tl_strerror(rv));
		return 1;
	}

	/* NULL id: the broker makes one. 5000: due 5 s from now. */
	rv = tl_put_in(
	    client, "default", "example", NULL, 5000, body, strlen(body), id);
	if (rv != TL_OK) {
		fprintf(stderr, "put: %s\n", tl_strerror(rv));
	} else {
		printf("put %s, due in 5 s\n", id);
	}

	tl_client_close(client);
	return rv == TL_OK ? 0 : 1;
}
