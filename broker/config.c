/*
 * The broker's configuration: defaults, an optional file of "key = value"
 * lines (# starts a comment; list keys may repeat), then command-line
 * flags, which win. docs/timelined.md lists every key.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "broker.h"

void
tlb_conf_defaults(tlb_conf *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->data_dir, sizeof(c->data_dir), "./data");
	c->sync_mode = TLI_SYNC_ALWAYS;
	c->sync_interval_ms = 100;
	snprintf(c->metrics, sizeof(c->metrics), "127.0.0.1:7401");
	snprintf(c->name, sizeof(c->name), "timelined");
	c->clock_warn_ms = 1000;
	c->window_ms = 2000;
	c->idle_ms = 60000;
}

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: timelined [options]\n"
	    "  -c, --config FILE       read settings from FILE first\n"
	    "  -d, --data DIR          data directory (default ./data)\n"
	    "  -l, --listen URL        tcp://, tls+tcp://HOST:PORT or "
	    "ipc:///PATH; "
	    "repeatable\n"
	    "                          (default tcp://127.0.0.1:7400)\n"
	    "      --durability MODE   always (default) | interval:MS | none\n"
	    "  -t, --topic NAME[:N]    create topic NAME with N buckets at "
	    "start "
	    "if missing;\n"
	    "                          repeatable (default: the topic "
	    "\"default\")\n"
	    "      --log-level LEVEL   error | warn | info (default) | debug\n"
	    "      --metrics HOST:PORT Prometheus /metrics (default "
	    "127.0.0.1:7401; \"off\")\n"
	    "      --name NAME         broker name shown to clients\n"
	    "      --ready-file FILE   write the bound addresses there when "
	    "ready\n"
	    "      --clock-warn MS     warn when a client clock is off by "
	    "more\n"
	    "      --window MS         the dispatcher's near-future window\n"
	    "      --idle-timeout MS   close a session that sends nothing for "
	    "MS\n"
	    "                          (default 60000; \"off\")\n"
	    "      --msc4140 FILE      run the MSC4140 gateway configured "
	    "in FILE\n"
	    "      --auth on|off       require a token from every client "
	    "(default off)\n"
	    "      --credentials FILE  principals and token hashes "
	    "(docs/auth.md)\n"
	    "      --tls-cert FILE     PEM certificate of tls+tcp:// "
	    "listeners\n"
	    "      --tls-key FILE      its PEM private key\n"
	    "      --tls-ca FILE       CAs for client certificates\n"
	    "      --tls-client-auth M none (default) | optional | required\n"
	    "      --hash-token        print the SHA-256 of the token read "
	    "on stdin\n"
	    "  -h, --help\n");
}

static int
set_durability(tlb_conf *c, const char *v)
{
	if (strcmp(v, "always") == 0) {
		c->sync_mode = TLI_SYNC_ALWAYS;
	} else if (strcmp(v, "none") == 0) {
		c->sync_mode = TLI_SYNC_NONE;
	} else if (strncmp(v, "interval:", 9) == 0 && atoi(v + 9) > 0) {
		c->sync_mode = TLI_SYNC_INTERVAL;
		c->sync_interval_ms = atoi(v + 9);
	} else {
		fprintf(stderr,
		    "timelined: durability must be always, "
		    "interval:MS or none, not \"%s\"\n",
		    v);
		return 1;
	}
	return 0;
}

static int
set_level(const char *v)
{
	static const char *names[] = {"error", "warn", "info", "debug"};

	for (int i = 0; i < 4; i++) {
		if (strcmp(v, names[i]) == 0) {
			tli_log_set_level((tli_log_level) i);
			return 0;
		}
	}
	fprintf(stderr,
	    "timelined: log level must be error, warn, info or "
	    "debug, not \"%s\"\n",
	    v);
	return 1;
}

static int
copy(char *dst, size_t cap, const char *v, const char *what)
{
	if (strlen(v) >= cap) {
		fprintf(stderr, "timelined: %s too long: %s\n", what, v);
		return 1;
	}
	snprintf(dst, cap, "%s", v);
	return 0;
}

static int
set_ms(int64_t *dst, const char *v, const char *what)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno != 0 || *end != '\0' || x <= 0) {
		fprintf(stderr,
		    "timelined: %s must be a positive number of "
		    "milliseconds, not \"%s\"\n",
		    what, v);
		return 1;
	}
	*dst = x;
	return 0;
}

/* ---- authentication and TLS keys (docs/auth.md) ----
 * Returns -1 when k is not one of them. */
static int
apply_auth(tlb_conf *c, const char *k, const char *v)
{
	if (strcmp(k, "auth") == 0) {
		if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
			c->auth = strcmp(v, "on") == 0;
			return 0;
		}
		fprintf(stderr,
		    "timelined: auth must be on or off, not \"%s\"\n", v);
		return 1;
	}
	if (strcmp(k, "credentials") == 0) {
		return copy(c->credentials, sizeof(c->credentials), v,
		    "credentials file");
	}
	if (strcmp(k, "tls_cert") == 0 || strcmp(k, "tls-cert") == 0) {
		return copy(c->tls_cert, sizeof(c->tls_cert), v, "tls_cert");
	}
	if (strcmp(k, "tls_key") == 0 || strcmp(k, "tls-key") == 0) {
		return copy(c->tls_key, sizeof(c->tls_key), v, "tls_key");
	}
	if (strcmp(k, "tls_ca") == 0 || strcmp(k, "tls-ca") == 0) {
		return copy(c->tls_ca, sizeof(c->tls_ca), v, "tls_ca");
	}
	if (strcmp(k, "tls_client_auth") == 0 ||
	    strcmp(k, "tls-client-auth") == 0) {
		static const char *modes[] = {"none", "optional", "required"};
		for (int i = 0; i < 3; i++) {
			if (strcmp(v, modes[i]) == 0) {
				c->tls_client_auth = i;
				return 0;
			}
		}
		fprintf(stderr,
		    "timelined: tls_client_auth must be none, optional or "
		    "required, not \"%s\"\n",
		    v);
		return 1;
	}
	return -1;
}

/* The authentication and TLS settings fit together. */
static int
check_auth(const tlb_conf *c)
{
	bool tls = false;

	if (c->auth && c->credentials[0] == '\0') {
		fprintf(
		    stderr, "timelined: auth = on needs credentials = FILE\n");
		return 1;
	}
	for (int i = 0; i < c->nlisten; i++) {
		tls = tls || strncmp(c->listen[i], "tls+tcp://", 10) == 0;
	}
	if (tls && (c->tls_cert[0] == '\0' || c->tls_key[0] == '\0')) {
		fprintf(stderr,
		    "timelined: a tls+tcp:// listener needs tls_cert and "
		    "tls_key\n");
		return 1;
	}
	if (c->tls_client_auth != 0 && c->tls_ca[0] == '\0') {
		fprintf(stderr,
		    "timelined: tls_client_auth = optional or required needs "
		    "tls_ca\n");
		return 1;
	}
	return 0;
}

/* One setting by name; `from_file` only changes the wording of errors. */
static int
apply(tlb_conf *c, const char *k, const char *v)
{
	int arv;

	if ((arv = apply_auth(c, k, v)) >= 0) {
		return arv;
	}
	if (strcmp(k, "data") == 0) {
		return copy(
		    c->data_dir, sizeof(c->data_dir), v, "data directory");
	}
	if (strcmp(k, "listen") == 0) {
		if (c->nlisten == TLB_MAX_LISTEN) {
			fprintf(stderr,
			    "timelined: at most %d listen addresses\n",
			    TLB_MAX_LISTEN);
			return 1;
		}
		return copy(c->listen[c->nlisten++], sizeof(c->listen[0]), v,
		    "listen address");
	}
	if (strcmp(k, "durability") == 0) {
		return set_durability(c, v);
	}
	if (strcmp(k, "topic") == 0) {
		if (c->ntopics == TLB_MAX_TOPICS) {
			fprintf(stderr,
			    "timelined: at most %d topics at start\n",
			    TLB_MAX_TOPICS);
			return 1;
		}
		return copy(
		    c->topics[c->ntopics++], sizeof(c->topics[0]), v, "topic");
	}
	if (strcmp(k, "log_level") == 0 || strcmp(k, "log-level") == 0) {
		return set_level(v);
	}
	if (strcmp(k, "metrics") == 0) {
		return copy(c->metrics, sizeof(c->metrics),
		    strcmp(v, "off") == 0 ? "" : v, "metrics address");
	}
	if (strcmp(k, "name") == 0) {
		return copy(c->name, sizeof(c->name), v, "name");
	}
	if (strcmp(k, "ready_file") == 0 || strcmp(k, "ready-file") == 0) {
		return copy(
		    c->ready_file, sizeof(c->ready_file), v, "ready file");
	}
	if (strcmp(k, "clock_warn_ms") == 0 || strcmp(k, "clock-warn") == 0) {
		return set_ms(&c->clock_warn_ms, v, "clock_warn_ms");
	}
	if (strcmp(k, "idle_timeout_ms") == 0 ||
	    strcmp(k, "idle_timeout") == 0) {
		if (strcmp(v, "off") == 0) {
			c->idle_ms = 0;
			return 0;
		}
		return set_ms(&c->idle_ms, v, "idle_timeout_ms");
	}
	if (strcmp(k, "window_ms") == 0 || strcmp(k, "window") == 0) {
		return set_ms(&c->window_ms, v, "window_ms");
	}
	if (strcmp(k, "msc4140") == 0) {
		return copy(c->msc4140, sizeof(c->msc4140), v, "msc4140 file");
	}
	fprintf(stderr, "timelined: unknown setting \"%s\"\n", k);
	return 1;
}

/* Strip blanks and line ends at both ends, in place. */
char *
tlb_trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t') {
		s++;
	}
	e = s + strlen(s);
	while (e > s &&
	    (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) {
		*--e = '\0';
	}
	return s;
}

static int
load_file(tlb_conf *c, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int lineno = 0;

	if (f == NULL) {
		fprintf(stderr, "timelined: cannot read config %s: %s\n", path,
		    strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *k, *v, *eq, *hash = strchr(line, '#');
		lineno++;
		if (hash != NULL) {
			*hash = '\0';
		}
		k = tlb_trim(line);
		if (*k == '\0') {
			continue;
		}
		if ((eq = strchr(k, '=')) == NULL) {
			fprintf(stderr,
			    "timelined: %s:%d: expected key = value\n", path,
			    lineno);
			fclose(f);
			return 1;
		}
		*eq = '\0';
		v = tlb_trim(eq + 1);
		k = tlb_trim(k);
		if (apply(c, k, v) != 0) {
			fprintf(stderr, "timelined: (in %s line %d)\n", path,
			    lineno);
			fclose(f);
			return 1;
		}
	}
	fclose(f);
	return 0;
}

int
tlb_conf_load(tlb_conf *c, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"data", required_argument, NULL, 'd'},
	    {"listen", required_argument, NULL, 'l'},
	    {"topic", required_argument, NULL, 't'},
	    {"durability", required_argument, NULL, 1},
	    {"log-level", required_argument, NULL, 2},
	    {"metrics", required_argument, NULL, 3},
	    {"name", required_argument, NULL, 4},
	    {"ready-file", required_argument, NULL, 5},
	    {"clock-warn", required_argument, NULL, 6},
	    {"window", required_argument, NULL, 7},
	    {"idle-timeout", required_argument, NULL, 8},
	    {"auth", required_argument, NULL, 20},
	    {"credentials", required_argument, NULL, 21},
	    {"tls-cert", required_argument, NULL, 22},
	    {"tls-key", required_argument, NULL, 23},
	    {"tls-ca", required_argument, NULL, 24},
	    {"tls-client-auth", required_argument, NULL, 25},
	    {"hash-token", no_argument, NULL, 26},
	    {"msc4140", required_argument, NULL, 40},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	static const char *keys[] = {[1] = "durability",
	    [2] = "log_level",
	    [3] = "metrics",
	    [4] = "name",
	    [5] = "ready_file",
	    [6] = "clock_warn_ms",
	    [7] = "window_ms",
	    [8] = "idle_timeout_ms",
	    [40] = "msc4140",
	    [20] = "auth",
	    [21] = "credentials",
	    [22] = "tls_cert",
	    [23] = "tls_key",
	    [24] = "tls_ca",
	    [25] = "tls_client_auth"};
	bool flag_listen = false, flag_topic = false;
	int o, rv = 0;

	/* The config file first, so flags override it. */
	for (int i = 1; i < argc; i++) {
		const char *file = NULL;

		if ((strcmp(argv[i], "-c") == 0 ||
		        strcmp(argv[i], "--config") == 0) &&
		    i + 1 < argc) {
			file = argv[i + 1];
		} else if (strncmp(argv[i], "--config=", 9) == 0) {
			file = argv[i] + 9;
		} else if (strncmp(argv[i], "-c", 2) == 0 &&
		    argv[i][2] != '\0') {
			file = argv[i] + 2;
		}
		if (file != NULL && load_file(c, file) != 0) {
			return 1;
		}
	}
	optind = 1;
	while (rv == 0 &&
	    (o = getopt_long(argc, argv, "c:d:l:t:h", longopts, NULL)) != -1) {
		switch (o) {
		case 'c':
			break;
		case 'd':
			rv = apply(c, "data", optarg);
			break;
		case 'l':
			if (!flag_listen) {
				c->nlisten = 0; /* flags replace the file's */
				flag_listen = true;
			}
			rv = apply(c, "listen", optarg);
			break;
		case 't':
			if (!flag_topic) {
				c->ntopics = 0;
				flag_topic = true;
			}
			rv = apply(c, "topic", optarg);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 26:
			exit(tlb_auth_hash_stdin());
		case '?':
			usage(stderr);
			return 2;
		default:
			rv = apply(c, keys[o], optarg);
			break;
		}
	}
	if (rv != 0) {
		return rv;
	}
	if (optind < argc) {
		fprintf(stderr, "timelined: unexpected argument \"%s\"\n",
		    argv[optind]);
		usage(stderr);
		return 2;
	}
	if (c->nlisten == 0) {
		snprintf(
		    c->listen[0], sizeof(c->listen[0]), "tcp://127.0.0.1:7400");
		c->nlisten = 1;
	}
	if (c->ntopics == 0) {
		snprintf(c->topics[0], sizeof(c->topics[0]), "default");
		c->ntopics = 1;
	}
	return check_auth(c);
}
