/*
 * Example consumer: print each message of topic "default" as it comes due,
 * then delete it (the work is done). Stops after 10 messages.
 *   tl-example-consumer [URL]
 */
#include <stdio.h>

#include <timeline/timeline.h>

int
main(int argc, char **argv)
{
	tl_opts *opts;
	tl_client *client;
	tl_consumer *consumer;
	tl_consumer_conf conf = {
	    .topic = "default",
	    .consumer_id = "example-consumer", /* stable: leases come back */
	    .lease_ms = 30000,                 /* time to do the work */
	    .credit = 8,                       /* leases held at once */
	};
	int rv;

	tl_opts_alloc(&opts);
	if (argc > 1) {
		tl_opts_set_url(opts, argv[1]);
	}
	rv = tl_client_open(&client, opts);
	tl_opts_free(opts);
	if (rv != TL_OK ||
	    tl_consumer_open(&consumer, client, &conf) != TL_OK) {
		fprintf(stderr, "cannot consume: %s\n", tl_strerror(rv));
		return 1;
	}

	for (int done = 0; done < 10;) {
		tl_lease *lease;
		size_t n, len;
		if (tl_consumer_poll(consumer, &lease, 1, &n, -1) != TL_OK) {
			break;
		}
		const char *body = tl_lease_body(lease, &len);
		printf("%s: %.*s\n", tl_lease_id(lease), (int) len, body);
		if ((rv = tl_lease_delete(lease)) != TL_OK) {
			fprintf(stderr, "delete: %s\n", tl_strerror(rv));
		}
		tl_lease_free(lease);
		done++;
	}

	tl_consumer_close(consumer);
	tl_client_close(client);
	return 0;
}
