/*
 * tlctl's commands: argument parsing with getopt_long (global --url and
 * --token, per-command options), the time and duration syntax, and one
 * function per command that calls the public SDK and prints its result.
 * Every failure is one sentence on err with the error's text, its name and
 * what to do; exit codes are 0 (done), 1 (the operation failed) and 2
 * (usage).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timeline/timeline.h"
#include "tlctl.h"

#define MAX_OPTS 16
#define MAX_POS 8

typedef struct opt {
	const char *name;
	const char *val; /* NULL for flags */
} opt;

typedef struct args {
	const char *url;
	const char *token;
	const char *tls_ca;
	const char *tls_server_name;
	const char *tls_cert;
	const char *tls_key;
	bool help;
	opt opts[MAX_OPTS];
	int nopts;
	const char *pos[MAX_POS];
	int npos;
	FILE *out;
	FILE *err;
	tl_client *c; /* connected on first use */
} args;

/* Options that take a value; the rest are flags. */
static const char *const valued[] = {"url", "token", "tls-ca",
    "tls-server-name", "tls-cert", "tls-key", "buckets", "max-body", "lease",
    "max-lease", "max-deliveries", "at", "in", "id", "group", "limit", "from",
    "to", "consumer", "credit", "count", "timeout", "every", "for", "times",
    "create", "hold", NULL};
static const char *const flags[] = {"no-ack", "help", "catch-up", NULL};

static const char usage_text[] =
    "usage: tlctl [--url URL] [--token TOKEN] [--tls-ca FILE]\n"
    "             [--tls-server-name NAME] [--tls-cert FILE --tls-key FILE]\n"
    "             COMMAND ...\n"
    "  topic create NAME [--buckets N] [--max-body B] [--lease MS]\n"
    "                    [--max-lease MS] [--max-deliveries N]\n"
    "  topic list | topic stats NAME | topic delete NAME\n"
    "  put TOPIC [BODY|-] (--at TIME | --in DURATION) [--id ID] [--group G]\n"
    "      [--every DURATION (--for DURATION | --times N) [--catch-up]]\n"
    "  get TOPIC ID\n"
    "  list TOPIC [--group G] [--limit N]\n"
    "  count TOPIC [--from TIME] [--to TIME]\n"
    "  move TOPIC ID (--at TIME | --in DURATION) [--group G]\n"
    "  delete TOPIC ID [--group G]\n"
    "  consume TOPIC [--consumer ID] [--lease MS] [--credit N] [--no-ack]\n"
    "                [--count N] [--timeout DURATION]\n"
    "  dlq list TOPIC | dlq kick TOPIC ID [--in DURATION]\n"
    "  lock TOPIC ID --consumer ID [--lease DURATION] [--create GROUP]\n"
    "               [--timeout DURATION] [--hold DURATION]\n"
    "  cluster status | cluster transfer-leadership [ID]\n"
    "  cluster add ID HOST:PORT URL | cluster remove ID\n"
    "TIME: UTC ms or ISO-8601 (2026-11-22T10:00:00Z); DURATION: 300ms, 5s,\n"
    "2m, 1h. URL defaults to $TIMELINE_URL or tcp://127.0.0.1:7400; a\n"
    "cluster: its nodes' URLs separated by commas.\n";

/* ---- time syntax ---- */

int
tlctl_parse_duration(const char *s, int64_t *ms)
{
	char *end;
	long long v;
	int64_t mul;

	if (s == NULL || !isdigit((unsigned char) *s)) {
		return -1;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || v < 0) {
		return -1;
	}
	if (*end == '\0' || strcmp(end, "ms") == 0) {
		mul = 1;
	} else if (strcmp(end, "s") == 0) {
		mul = 1000;
	} else if (strcmp(end, "m") == 0) {
		mul = 60000;
	} else if (strcmp(end, "h") == 0) {
		mul = 3600000;
	} else if (strcmp(end, "d") == 0) {
		mul = 86400000;
	} else {
		return -1;
	}
	if (v > INT64_MAX / mul) {
		return -1;
	}
	*ms = (int64_t) v * mul;
	return 0;
}

int
tlctl_parse_time(const char *s, int64_t *ms)
{
	struct tm tm;
	int y, mo, d, h, mi, sec, n = 0, frac = 0;
	const char *p;
	int64_t off = 0;
	time_t t;

	if (s == NULL || *s == '\0') {
		return -1;
	}
	for (p = s; isdigit((unsigned char) *p); p++) {
	}
	if (*p == '\0') {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (errno != 0 || v > TL_TS_MAX) {
			return -1;
		}
		*ms = v;
		return 0;
	}
	if (sscanf(s, "%4d-%2d-%2d%*[T ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi,
	        &sec, &n) != 6 ||
	    n == 0) {
		return -1;
	}
	p = s + n;
	if (*p == '.') {
		int digits = 0;
		for (p++; isdigit((unsigned char) *p); p++, digits++) {
			if (digits < 3) {
				frac = frac * 10 + (*p - '0');
			}
		}
		if (digits == 0) {
			return -1;
		}
		for (; digits < 3; digits++) {
			frac *= 10;
		}
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int oh, om;
		if (sscanf(p + 1, "%2d:%2d", &oh, &om) != 2) {
			return -1;
		}
		off = ((int64_t) oh * 60 + om) * 60000 * (*p == '+' ? 1 : -1);
		p += 6;
	} else {
		return -1; /* a time without a zone is ambiguous */
	}
	if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
	    mi > 59 || sec > 60) {
		return -1;
	}
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	*ms = (int64_t) t * 1000 + frac - off;
	return *ms < TL_TS_MIN || *ms > TL_TS_MAX ? -1 : 0;
}

void
tlctl_format_time(int64_t ms, char *buf, size_t cap)
{
	time_t t = (time_t) (ms / 1000);
	struct tm tm;
	size_t n;

	if (ms < 0 || gmtime_r(&t, &tm) == NULL) {
		snprintf(buf, cap, "%" PRId64, ms);
		return;
	}
	n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, cap - n, ".%03dZ", (int) (ms % 1000));
}

/* ---- arguments ---- */

static bool
in_list(const char *const *list, const char *name)
{
	for (; *list != NULL; list++) {
		if (strcmp(*list, name) == 0) {
			return true;
		}
	}
	return false;
}

static int
usage(args *a, const char *fmt, const char *what)
{
	fprintf(a->err, "tlctl: ");
	fprintf(a->err, fmt, what);
	fprintf(a->err, "\n%s", usage_text);
	return TLCTL_USAGE;
}

/* getopt_long's table: every name of valued[] and flags[]. */
static void
longopts_fill(struct option *lo)
{
	size_t n = 0;

	for (const char *const *l = valued; *l != NULL; l++) {
		lo[n++] = (struct option){*l, required_argument, NULL, 0};
	}
	for (const char *const *l = flags; *l != NULL; l++) {
		lo[n++] = (struct option){*l, no_argument, NULL, 0};
	}
	lo[n] = (struct option){NULL, 0, NULL, 0};
}

/* The option as written in argv[i], without "--" and "=value". */
static void
written_name(char *name, size_t cap, const char *arg)
{
	const char *s = strncmp(arg, "--", 2) == 0 ? arg + 2 : arg;

	snprintf(name, cap, "%.*s", (int) strcspn(s, "="), s);
}

/* One option getopt_long recognised: keep it where the commands find it. */
static void
args_keep(args *a, const struct option *o, const char *val)
{
	static const struct {
		const char *name;
		size_t off;
	} globals[] = {
	    {"url", offsetof(args, url)},
	    {"token", offsetof(args, token)},
	    {"tls-ca", offsetof(args, tls_ca)},
	    {"tls-server-name", offsetof(args, tls_server_name)},
	    {"tls-cert", offsetof(args, tls_cert)},
	    {"tls-key", offsetof(args, tls_key)},
	};

	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++) {
		if (strcmp(o->name, globals[i].name) == 0) {
			*(const char **) ((char *) a + globals[i].off) = val;
			return;
		}
	}
	if (strcmp(o->name, "help") == 0) {
		a->help = true;
	} else if (a->nopts < MAX_OPTS) {
		/* o->name is the static name of valued[] or flags[] */
		a->opts[a->nopts].name = o->name;
		a->opts[a->nopts].val = val;
		a->nopts++;
	}
}

/* Options (--name VALUE, --name=VALUE) and arguments in any order. A word
 * that does not start with "--" (such as "-" or "-5") and "--" itself are
 * arguments; option names are never abbreviated. getopt_long's state is
 * global: tlctl_main is not reentrant. */
static int
args_parse(args *a, int argc, char **argv)
{
	struct option lo[sizeof(valued) / sizeof(valued[0]) +
	    sizeof(flags) / sizeof(flags[0])];
	char name[64];
	int o, idx;

	longopts_fill(lo);
	optind = 0; /* glibc: start afresh */
	opterr = 0;
	for (;;) {
		int at = optind == 0 ? 1 : optind; /* the word to read */
		if (at < argc &&
		    (strncmp(argv[at], "--", 2) != 0 || argv[at][2] == '\0')) {
			o = 1; /* an argument, even one getopt would take */
			optarg = argv[at];
			optind = at + 1;
		} else if ((o = getopt_long(argc, argv, "-:", lo, &idx)) ==
		    -1) {
			break;
		}
		if (o == 1) {
			if (a->npos == MAX_POS) {
				return usage(
				    a, "too many arguments (at '%s').", optarg);
			}
			a->pos[a->npos++] = optarg;
			continue;
		}
		written_name(name, sizeof(name), argv[at]);
		if (o == ':') {
			return usage(a, "option --%s needs a value.", name);
		}
		if (o == '?' || strcmp(name, lo[idx].name) != 0) {
			return usage(a, "unknown option --%s.", name);
		}
		args_keep(a, &lo[idx], optarg);
	}
	return TLCTL_OK;
}

static const char *
opt_get(const args *a, const char *name)
{
	for (int i = a->nopts - 1; i >= 0; i--) {
		if (strcmp(a->opts[i].name, name) == 0) {
			return a->opts[i].val != NULL ? a->opts[i].val : "";
		}
	}
	return NULL;
}

/* Refuse options that the command does not take. */
static int
opts_allow(args *a, const char *const *allowed)
{
	for (int i = 0; i < a->nopts; i++) {
		if (!in_list(allowed, a->opts[i].name)) {
			return usage(a,
			    "option --%s does not apply to this "
			    "command.",
			    a->opts[i].name);
		}
	}
	return TLCTL_OK;
}

static int
opt_u64(args *a, const char *name, uint64_t max, uint64_t *v)
{
	const char *s = opt_get(a, name);
	char *end;
	unsigned long long x;

	if (s == NULL) {
		return TLCTL_OK;
	}
	errno = 0;
	x = strtoull(s, &end, 10);
	if (!isdigit((unsigned char) *s) || *end != '\0' || errno != 0 ||
	    x > max) {
		char m[96];
		snprintf(m, sizeof(m), "--%s wants a number up to %llu, not ",
		    name, (unsigned long long) max);
		fprintf(a->err, "tlctl: %s'%s'.\n", m, s);
		return TLCTL_USAGE;
	}
	*v = x;
	return TLCTL_OK;
}

/* An option read by parse (tlctl_parse_duration or tlctl_parse_time);
 * wants says what it takes when the value does not parse. */
static int
opt_parsed(args *a, const char *name, int (*parse)(const char *, int64_t *),
    const char *wants, int64_t *v)
{
	const char *s = opt_get(a, name);

	if (s != NULL && parse(s, v) != 0) {
		fprintf(a->err, "tlctl: --%s wants %s, not '%s'.\n", name,
		    wants, s);
		return TLCTL_USAGE;
	}
	return TLCTL_OK;
}

static int
opt_dur(args *a, const char *name, int64_t *v)
{
	return opt_parsed(a, name, tlctl_parse_duration,
	    "a duration such as 300ms, 5s, 2m or 1h", v);
}

static int
opt_time(args *a, const char *name, int64_t *v)
{
	return opt_parsed(a, name, tlctl_parse_time,
	    "UTC milliseconds or an ISO-8601 time such as "
	    "2026-11-22T10:00:00Z",
	    v);
}

/* --at TIME or --in DURATION, exactly one. */
static int
opt_when(args *a, int64_t *ts, bool *rel)
{
	bool at = opt_get(a, "at") != NULL, in = opt_get(a, "in") != NULL;

	if (at == in) {
		return usage(a, "%s",
		    "give exactly one of --at TIME and "
		    "--in DURATION.");
	}
	*rel = in;
	return in ? opt_dur(a, "in", ts) : opt_time(a, "at", ts);
}

static int
fail(args *a, int err, const char *what)
{
	fprintf(a->err, "tlctl: %s failed: %s (%s). %s\n", what,
	    tl_strerror(err), tl_errname(err), tl_erradvice(err));
	return TLCTL_FAILED;
}

static int
need_pos(args *a, int n, const char *what)
{
	if (a->npos != n) {
		return usage(a, "%s", what);
	}
	return TLCTL_OK;
}

static int client_connect(args *a, tl_client **out);
/* Connect on first use, after the arguments were checked. */
#define CONNECT(a, c)                                            \
	do {                                                     \
		if ((a)->c == NULL) {                            \
			int crv_ = client_connect((a), &(a)->c); \
			if (crv_ != TLCTL_OK) {                  \
				return crv_;                     \
			}                                        \
		}                                                \
		(c) = (a)->c;                                    \
	} while (0)

/* ---- commands ---- */

static int
cmd_topic(args *a)
{
	tl_client *c = NULL;
	static const char *const create_opts[] = {"buckets", "max-body",
	    "lease", "max-lease", "max-deliveries", NULL};
	static const char *const none[] = {NULL};
	const char *sub = a->npos > 1 ? a->pos[1] : "";
	char what[200];
	int rv;

	if (strcmp(sub, "create") == 0) {
		tl_topic_conf conf;
		uint64_t buckets = 0, max_body = 0, maxdel = 0;
		int64_t lease = 0, max_lease = 0;
		if ((rv = need_pos(a, 3, "topic create wants a NAME.")) != 0 ||
		    (rv = opts_allow(a, create_opts)) != 0 ||
		    (rv = opt_u64(a, "buckets", TL_MAX_BUCKETS, &buckets)) !=
		        0 ||
		    (rv = opt_u64(a, "max-body", TL_MAX_BODY_LEN, &max_body)) !=
		        0 ||
		    (rv = opt_u64(a, "max-deliveries", UINT32_MAX, &maxdel)) !=
		        0 ||
		    (rv = opt_dur(a, "lease", &lease)) != 0 ||
		    (rv = opt_dur(a, "max-lease", &max_lease)) != 0) {
			return rv;
		}
		memset(&conf, 0, sizeof(conf));
		conf.name = a->pos[2];
		conf.buckets = (uint32_t) buckets;
		conf.max_body = (uint32_t) max_body;
		conf.default_lease_ms = lease;
		conf.max_lease_ms = max_lease;
		conf.max_deliveries = (uint32_t) maxdel;
		snprintf(what, sizeof(what), "creating topic '%s'", a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_topic_create(c, &conf)) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "created topic %s\n", a->pos[2]);
		return TLCTL_OK;
	}
	if ((rv = opts_allow(a, none)) != 0) {
		return rv;
	}
	if (strcmp(sub, "list") == 0) {
		tl_topic_info *v = NULL;
		size_t n = 0;
		if ((rv = need_pos(a, 2, "topic list takes no argument.")) !=
		    0) {
			return rv;
		}
		CONNECT(a, c);
		if ((rv = tl_topic_list(c, &v, &n)) != TL_OK) {
			return fail(a, rv, "listing the topics");
		}
		fprintf(a->out, "%-24s %7s %10s %10s %10s %10s %8s\n", "TOPIC",
		    "BUCKETS", "MESSAGES", "AVAILABLE", "WAITING", "PROCESSING",
		    "DEAD");
		for (size_t i = 0; i < n; i++) {
			fprintf(a->out,
			    "%-24s %7u %10" PRIu64 " %10" PRIu64 " %10" PRIu64
			    " %10" PRIu64 " %8" PRIu64 "\n",
			    v[i].name, v[i].buckets, v[i].messages,
			    v[i].available, v[i].waiting, v[i].processing,
			    v[i].dead);
		}
		tl_free(v);
		return TLCTL_OK;
	}
	if (strcmp(sub, "stats") == 0) {
		tl_topic_info t;
		if ((rv = need_pos(a, 3, "topic stats wants a NAME.")) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "reading topic '%s'", a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_topic_get(c, a->pos[2], &t)) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out,
		    "name: %s\nbuckets: %u\nmax_body: %u\ndefault_lease_ms: "
		    "%" PRId64 "\nmax_lease_ms: %" PRId64
		    "\nmax_deliveries: %u\n"
		    "messages: %" PRIu64 "\navailable: %" PRIu64
		    "\nwaiting: %" PRIu64 "\nprocessing: %" PRIu64
		    "\ndead: %" PRIu64 "\n",
		    t.name, t.buckets, t.max_body, t.default_lease_ms,
		    t.max_lease_ms, t.max_deliveries, t.messages, t.available,
		    t.waiting, t.processing, t.dead);
		return TLCTL_OK;
	}
	if (strcmp(sub, "delete") == 0) {
		if ((rv = need_pos(a, 3, "topic delete wants a NAME.")) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "deleting topic '%s'", a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_topic_delete(c, a->pos[2])) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "deleted topic %s\n", a->pos[2]);
		return TLCTL_OK;
	}
	return usage(a, "unknown topic command '%s'.", sub);
}

static char *
read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0, got;
	char *buf = malloc(cap);

	while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			char *nb = n >= TL_MAX_BODY_LEN + 1
			    ? NULL
			    : realloc(buf, cap * 2);
			if (nb == NULL) {
				free(buf);
				return NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	*len = n;
	return buf;
}

/* --every D with --for D2 (occurrences up to D2 after the first) or
 * --times N, and --catch-up: the recurrence of a put. */
static int
opt_recur(args *a, tl_put *p)
{
	bool every = opt_get(a, "every") != NULL;
	bool dfor = opt_get(a, "for") != NULL;
	bool times = opt_get(a, "times") != NULL;
	int64_t span = 0;
	uint64_t n = 0;
	int rv;

	if (!every) {
		if (dfor || times || opt_get(a, "catch-up") != NULL) {
			return usage(a, "%s",
			    "--for, --times and --catch-up need --every.");
		}
		return TLCTL_OK;
	}
	if (dfor == times) {
		return usage(a, "%s",
		    "--every needs exactly one of --for DURATION and --times "
		    "N (an open-ended recurrence is refused).");
	}
	if ((rv = opt_dur(a, "every", &p->every_ms)) != 0 ||
	    (rv = opt_dur(a, "for", &span)) != 0 ||
	    (rv = opt_u64(a, "times", UINT32_MAX, &n)) != 0) {
		return rv;
	}
	if (p->every_ms <= 0) {
		return usage(a, "%s", "--every wants a duration over 0.");
	}
	if (times && n == 0) {
		return usage(a, "%s", "--times wants at least 1.");
	}
	if (dfor) {
		/* The first occurrence and every one up to span after it. */
		n = (uint64_t) (span / p->every_ms) + 1;
		if (n > UINT32_MAX) {
			return usage(a, "%s",
			    "--for over --every makes more than 2^32-1 "
			    "occurrences.");
		}
	}
	p->times = (uint32_t) n;
	p->catch_up = opt_get(a, "catch-up") != NULL;
	return TLCTL_OK;
}

static int
cmd_put(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {"at", "in", "id", "group",
	    "every", "for", "times", "catch-up", NULL};
	const char *group = opt_get(a, "group");
	char id_out[TL_MAX_ID_LEN + 1], due[40], what[200];
	tl_put p;
	char *stdin_body = NULL;
	int rv;

	if (a->npos < 2 || a->npos > 3) {
		return usage(a, "%s", "put wants TOPIC and an optional BODY.");
	}
	memset(&p, 0, sizeof(p));
	if ((rv = opts_allow(a, allowed)) != 0 ||
	    (rv = opt_when(a, &p.ts, &p.rel)) != 0 ||
	    (rv = opt_recur(a, &p)) != 0) {
		return rv;
	}
	if (a->npos == 3 && strcmp(a->pos[2], "-") == 0) {
		if ((stdin_body = read_all(stdin, &p.body_len)) == NULL) {
			fprintf(a->err,
			    "tlctl: could not read the body from "
			    "standard input (out of memory or over "
			    "16 MiB).\n");
			return TLCTL_FAILED;
		}
		p.body = stdin_body;
	} else if (a->npos == 3) {
		p.body = a->pos[2];
		p.body_len = strlen(a->pos[2]);
	}
	p.id = opt_get(a, "id");
	snprintf(
	    what, sizeof(what), "putting a message on topic '%s'", a->pos[1]);
	CONNECT(a, c);
	rv = tl_put_batch(c, a->pos[1], group != NULL ? group : "tlctl", &p, 1);
	free(stdin_body);
	if (rv != TL_OK || (rv = p.err) != TL_OK) {
		return fail(a, rv, what);
	}
	tlctl_format_time(p.due, due, sizeof(due));
	(void) id_out;
	fprintf(a->out, "%s due %s (%" PRId64 ") version %" PRIu64, p.id_out,
	    due, p.due, p.version);
	if (p.every_ms > 0) {
		fprintf(a->out, " every %" PRId64 " ms, %u times%s", p.every_ms,
		    p.times, p.catch_up ? ", catching up" : "");
	}
	fputc('\n', a->out);
	return TLCTL_OK;
}

/* The checks of a command on one message (get, move, delete): TOPIC and
 * ID, only the allowed options; what names the operation for failures
 * ("moving 'ID' in topic 'T'"). */
static int
message_cmd(args *a, const char *name, const char *const *allowed,
    const char *doing, const char *prep, char *what, size_t cap)
{
	char wants[64];
	int rv;

	snprintf(wants, sizeof(wants), "%s wants TOPIC and ID.", name);
	if ((rv = need_pos(a, 3, wants)) != 0 ||
	    (rv = opts_allow(a, allowed)) != 0) {
		return rv;
	}
	snprintf(what, cap, "%s '%s' %s topic '%s'", doing, a->pos[2], prep,
	    a->pos[1]);
	return TLCTL_OK;
}

static int
cmd_get(args *a)
{
	tl_client *c = NULL;
	static const char *const none[] = {NULL};
	tl_message *m = NULL;
	char ts[40], created[40], what[300];
	int rv;

	if ((rv = message_cmd(a, "get", none, "looking up", "in", what,
	         sizeof(what))) != 0) {
		return rv;
	}
	CONNECT(a, c);
	if ((rv = tl_get(c, a->pos[1], a->pos[2], &m)) != TL_OK) {
		return fail(a, rv, what);
	}
	tlctl_format_time(m->ts, ts, sizeof(ts));
	tlctl_format_time(m->created_at, created, sizeof(created));
	fprintf(a->out,
	    "id: %s\nts: %s (%" PRId64 ")\nbucket: %u\nowner: %s\n"
	    "consumer: %s\nversion: %" PRIu64 "\ndeliveries: %u\n"
	    "created_at: %s\n",
	    m->id, ts, m->ts, m->bucket, m->owner, m->consumer, m->version,
	    m->deliveries, created);
	if (m->every_ms > 0) {
		char start[40];
		tlctl_format_time(m->start, start, sizeof(start));
		fprintf(a->out,
		    "every: %" PRId64 " ms\nstart: %s (%" PRId64 ")\n"
		    "occurrence: %u of %u\ncatch_up: %s\n",
		    m->every_ms, start, m->start, m->seq, m->last,
		    m->catch_up ? "yes" : "no");
	}
	fputs("body: ", a->out);
	fwrite(m->body, 1, m->body_len, a->out);
	fputc('\n', a->out);
	tl_message_free(m);
	return TLCTL_OK;
}

/* One page of entries (LIST, DLQ_LIST), then frees it. */
static int
print_entries(args *a, tl_entry *v, size_t n, bool more)
{
	for (size_t i = 0; i < n; i++) {
		char ts[40];
		tlctl_format_time(v[i].ts, ts, sizeof(ts));
		fprintf(a->out, "%s\t%s\tversion %" PRIu64 "%s\n", v[i].id, ts,
		    v[i].version, v[i].leased ? "\tleased" : "");
	}
	if (more) {
		fprintf(a->out, "(more)\n");
	}
	tl_free(v);
	return TLCTL_OK;
}

static int
cmd_list(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {"group", "limit", NULL};
	const char *group = opt_get(a, "group");
	uint64_t limit = 100;
	tl_entry *v = NULL;
	size_t n = 0;
	bool more = false;
	char what[200];
	int rv;

	if ((rv = need_pos(a, 2, "list wants a TOPIC.")) != 0 ||
	    (rv = opts_allow(a, allowed)) != 0 ||
	    (rv = opt_u64(a, "limit", 1000, &limit)) != 0) {
		return rv;
	}
	snprintf(what, sizeof(what), "listing topic '%s'", a->pos[1]);
	CONNECT(a, c);
	rv = tl_list(c, a->pos[1], group != NULL ? group : "tlctl",
	    (uint32_t) limit, NULL, &v, &n, &more);
	if (rv != TL_OK) {
		return fail(a, rv, what);
	}
	return print_entries(a, v, n, more);
}

static int
cmd_count(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {"from", "to", NULL};
	int64_t from = TL_TS_MIN, to = TL_TS_MAX;
	tl_counts k;
	char what[200];
	int rv;

	if ((rv = need_pos(a, 2, "count wants a TOPIC.")) != 0 ||
	    (rv = opts_allow(a, allowed)) != 0 ||
	    (rv = opt_time(a, "from", &from)) != 0 ||
	    (rv = opt_time(a, "to", &to)) != 0) {
		return rv;
	}
	snprintf(what, sizeof(what), "counting topic '%s'", a->pos[1]);
	CONNECT(a, c);
	if ((rv = tl_count(c, a->pos[1], from, to, &k)) != TL_OK) {
		return fail(a, rv, what);
	}
	fprintf(a->out,
	    "available: %" PRIu64 "\nwaiting: %" PRIu64 "\nprocessing: %" PRIu64
	    "\n",
	    k.available, k.waiting, k.processing);
	return TLCTL_OK;
}

static int
cmd_move(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {"at", "in", "group", NULL};
	const char *group = opt_get(a, "group");
	int64_t ts = 0;
	bool rel = false;
	uint64_t ver = 0;
	char what[300];
	int rv;

	if ((rv = message_cmd(a, "move", allowed, "moving", "in", what,
	         sizeof(what))) != 0 ||
	    (rv = opt_when(a, &ts, &rel)) != 0) {
		return rv;
	}
	CONNECT(a, c);
	rv = tl_move(c, a->pos[1], group != NULL ? group : "tlctl", a->pos[2],
	    0, ts, rel, &ver);
	if (rv != TL_OK) {
		return fail(a, rv, what);
	}
	fprintf(a->out, "moved %s, version %" PRIu64 "\n", a->pos[2], ver);
	return TLCTL_OK;
}

static int
cmd_delete(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {"group", NULL};
	const char *group = opt_get(a, "group");
	char what[300];
	int rv;

	if ((rv = message_cmd(a, "delete", allowed, "deleting", "from", what,
	         sizeof(what))) != 0) {
		return rv;
	}
	CONNECT(a, c);
	rv = tl_delete(
	    c, a->pos[1], group != NULL ? group : "tlctl", a->pos[2], 0);
	if (rv != TL_OK) {
		return fail(a, rv, what);
	}
	fprintf(a->out, "deleted %s\n", a->pos[2]);
	return TLCTL_OK;
}

static int
consume_one(args *a, tl_client *c, tl_lease *l, bool ack)
{
	size_t len = 0;
	const void *body = tl_lease_body(l, &len);
	char due[40], what[300];
	int64_t late = tl_client_broker_now(c) - tl_lease_due(l);
	int rv;

	tlctl_format_time(tl_lease_due(l), due, sizeof(due));
	fprintf(
	    a->out, "%s\t%s\tlate %" PRId64 " ms\t", tl_lease_id(l), due, late);
	fwrite(body, 1, len, a->out);
	fputc('\n', a->out);
	fflush(a->out);
	if (ack && (rv = tl_lease_delete(l)) != TL_OK) {
		snprintf(what, sizeof(what), "deleting '%s' after consuming it",
		    tl_lease_id(l));
		tl_lease_free(l);
		return fail(a, rv, what);
	}
	tl_lease_free(l);
	return TLCTL_OK;
}

static int
cmd_consume(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {
	    "consumer", "lease", "credit", "no-ack", "count", "timeout", NULL};
	tl_consumer_conf conf;
	tl_consumer *k = NULL;
	uint64_t credit = 16, count = 0;
	int64_t lease = 0, timeout = -1;
	const char *cid = opt_get(a, "consumer");
	bool ack = opt_get(a, "no-ack") == NULL;
	char what[200];
	uint64_t seen = 0;
	int64_t start;
	int rv;

	if ((rv = need_pos(a, 2, "consume wants a TOPIC.")) != 0 ||
	    (rv = opts_allow(a, allowed)) != 0 ||
	    (rv = opt_u64(a, "credit", 1u << 20, &credit)) != 0 ||
	    (rv = opt_u64(a, "count", UINT64_MAX, &count)) != 0 ||
	    (rv = opt_dur(a, "lease", &lease)) != 0 ||
	    (rv = opt_dur(a, "timeout", &timeout)) != 0) {
		return rv;
	}
	memset(&conf, 0, sizeof(conf));
	conf.topic = a->pos[1];
	conf.consumer_id = cid != NULL ? cid : "tlctl";
	conf.lease_ms = lease;
	conf.credit = credit == 0 ? 1 : (uint32_t) credit;
	snprintf(what, sizeof(what), "subscribing to topic '%s'", a->pos[1]);
	CONNECT(a, c);
	start = tl_client_broker_now(c);
	if ((rv = tl_consumer_open(&k, c, &conf)) != TL_OK) {
		return fail(a, rv, what);
	}
	while (count == 0 || seen < count) {
		tl_lease *ls[64];
		size_t n = 0, max = 64;
		int wait = 1000;
		if (timeout >= 0) {
			int64_t left =
			    start + timeout - tl_client_broker_now(c);
			if (left <= 0) {
				break;
			}
			wait = left < 1000 ? (int) left : 1000;
		}
		if (count > 0 && count - seen < max) {
			max = (size_t) (count - seen);
		}
		if ((rv = tl_consumer_poll(k, ls, max, &n, wait)) != TL_OK) {
			tl_consumer_close(k);
			return fail(a, rv, "waiting for messages");
		}
		for (size_t i = 0; i < n; i++) {
			if (consume_one(a, c, ls[i], ack) != TLCTL_OK) {
				for (size_t j = i + 1; j < n; j++) {
					tl_lease_free(ls[j]);
				}
				tl_consumer_close(k);
				return TLCTL_FAILED;
			}
			seen++;
		}
	}
	tl_consumer_close(k);
	return TLCTL_OK;
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* Keep a lock for hold ms, extending it every third of its length, then
 * release it (available again at once). */
static int
lock_hold(args *a, tl_client *c, tl_lease *l, int64_t hold)
{
	int64_t len = tl_lease_until(l) - tl_client_broker_now(c);
	int64_t beat, end = mono_ms() + hold;
	int rv;

	len = len < 30 ? 30 : len;
	beat = len / 3;
	while (mono_ms() < end) {
		int64_t left = end - mono_ms();
		sleep_ms(left < beat ? left : beat);
		if (mono_ms() < end &&
		    (rv = tl_lease_extend(l, len)) != TL_OK) {
			tl_lease_free(l);
			return fail(a, rv, "extending the lock");
		}
	}
	if ((rv = tl_lease_release(l, 0, true)) != TL_OK) {
		tl_lease_free(l);
		return fail(a, rv, "releasing the lock");
	}
	fprintf(a->out, "released %s\n", tl_lease_id(l));
	tl_lease_free(l);
	return TLCTL_OK;
}

static int
cmd_lock(args *a)
{
	tl_client *c = NULL;
	static const char *const allowed[] = {
	    "consumer", "lease", "create", "timeout", "hold", NULL};
	tl_lock_conf conf;
	tl_lease *l = NULL;
	int64_t lease = 0, timeout = -1, hold = -1, until = 0;
	char when[40], what[300];
	int rv;

	if ((rv = need_pos(a, 3, "lock wants TOPIC and ID.")) != 0 ||
	    (rv = opts_allow(a, allowed)) != 0 ||
	    (rv = opt_dur(a, "lease", &lease)) != 0 ||
	    (rv = opt_dur(a, "timeout", &timeout)) != 0 ||
	    (rv = opt_dur(a, "hold", &hold)) != 0) {
		return rv;
	}
	if (opt_get(a, "consumer") == NULL) {
		return usage(a, "%s", "lock wants --consumer ID (the holder).");
	}
	memset(&conf, 0, sizeof(conf));
	conf.topic = a->pos[1];
	conf.id = a->pos[2];
	conf.consumer_id = opt_get(a, "consumer");
	conf.lease_ms = lease;
	conf.create_group = opt_get(a, "create");
	snprintf(what, sizeof(what), "locking '%s' in topic '%s'", a->pos[2],
	    a->pos[1]);
	CONNECT(a, c);
	rv = timeout >= 0
	    ? tl_lock(
	          c, &conf, timeout > INT32_MAX ? INT32_MAX : (int) timeout, &l)
	    : tl_lock_try(c, &conf, &l, &until);
	if (rv == TL_ELEASED && until > 0) {
		tlctl_format_time(until, when, sizeof(when));
		fprintf(
		    a->err, "tlctl: '%s' is held until %s.\n", a->pos[2], when);
		return TLCTL_FAILED;
	}
	if (rv != TL_OK) {
		return fail(a, rv, what);
	}
	tlctl_format_time(tl_lease_until(l), when, sizeof(when));
	fprintf(a->out, "locked %s version %" PRIu64 " until %s\n",
	    tl_lease_id(l), tl_lease_version(l), when);
	fflush(a->out);
	if (hold >= 0) {
		return lock_hold(a, c, l, hold);
	}
	tl_lease_free(l); /* held until the lease runs out */
	return TLCTL_OK;
}

static int
cmd_dlq(args *a)
{
	tl_client *c = NULL;
	static const char *const kick_opts[] = {"in", NULL};
	static const char *const none[] = {NULL};
	const char *sub = a->npos > 1 ? a->pos[1] : "";
	char what[300];
	int rv;

	if (strcmp(sub, "list") == 0) {
		tl_entry *v = NULL;
		size_t n = 0;
		bool more = false;
		if ((rv = need_pos(a, 3, "dlq list wants a TOPIC.")) != 0 ||
		    (rv = opts_allow(a, none)) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "listing the dead letters of '%s'",
		    a->pos[2]);
		CONNECT(a, c);
		rv = tl_dlq_list(c, a->pos[2], 1000, NULL, &v, &n, &more);
		if (rv != TL_OK) {
			return fail(a, rv, what);
		}
		return print_entries(a, v, n, more);
	}
	if (strcmp(sub, "kick") == 0) {
		int64_t in = 0;
		if ((rv = need_pos(a, 4, "dlq kick wants TOPIC and ID.")) !=
		        0 ||
		    (rv = opts_allow(a, kick_opts)) != 0 ||
		    (rv = opt_dur(a, "in", &in)) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "kicking '%s' in topic '%s'",
		    a->pos[3], a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_dlq_kick(c, a->pos[2], a->pos[3], in)) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "kicked %s\n", a->pos[3]);
		return TLCTL_OK;
	}
	return usage(a, "unknown dlq command '%s'.", sub);
}

/* A node id: a whole number of at least 1. */
static int
pos_id(args *a, const char *s, uint64_t *id)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(s, &end, 10);
	if (!isdigit((unsigned char) *s) || *end != '\0' || errno != 0 ||
	    x == 0) {
		fprintf(a->err,
		    "tlctl: a node id is a number of at least 1, "
		    "not '%s'.\n",
		    s);
		return TLCTL_USAGE;
	}
	*id = x;
	return TLCTL_OK;
}

static int
print_cluster(args *a, const tl_cluster_info *st)
{
	fprintf(a->out,
	    "node %llu: %s%s, term %llu, leader %llu; log: last %llu, "
	    "committed %llu, applied %llu\n",
	    (unsigned long long) st->self_id, st->state,
	    st->serving ? " (serving)" : "", (unsigned long long) st->term,
	    (unsigned long long) st->leader_id,
	    (unsigned long long) st->last_index,
	    (unsigned long long) st->commit_index,
	    (unsigned long long) st->applied_index);
	fprintf(a->out, "clock: %lld ms from the majority%s\n",
	    (long long) -st->majority_offset_ms,
	    st->degraded ? " (DEGRADED: over the bound, it will not lead)"
	                 : "");
	fprintf(a->out, "%-4s %-8s %-22s %-28s %10s %10s\n", "ID", "ROLE",
	    "RAFT", "URL", "LAG", "CLOCK ms");
	for (size_t i = 0; i < st->n; i++) {
		const tl_cluster_node *n = &st->nodes[i];
		char lag[24] = "-", clk[24] = "?";

		if (st->serving) {
			snprintf(lag, sizeof(lag), "%llu",
			    (unsigned long long) (st->last_index -
			        n->match_index));
		}
		if (n->clock_known) {
			snprintf(clk, sizeof(clk), "%+lld",
			    (long long) n->clock_offset_ms);
		}
		fprintf(a->out, "%-4llu %-8s %-22s %-28s %10s %10s%s\n",
		    (unsigned long long) n->id, n->role, n->raft,
		    n->url[0] != '\0' ? n->url : "?", lag, clk,
		    n->id == st->leader_id ? "  leader" : "");
	}
	return TLCTL_OK;
}

static int
cmd_cluster(args *a)
{
	static const char *const none[] = {NULL};
	const char *sub = a->npos > 1 ? a->pos[1] : "";
	tl_client *c = NULL;
	uint64_t id = 0;
	char what[300];
	int rv;

	if ((rv = opts_allow(a, none)) != 0) {
		return rv;
	}
	if (strcmp(sub, "status") == 0) {
		tl_cluster_info st;

		if ((rv = need_pos(
		         a, 2, "cluster status wants nothing more.")) != 0) {
			return rv;
		}
		CONNECT(a, c);
		if ((rv = tl_cluster_status(c, &st)) != TL_OK) {
			return fail(a, rv, "asking the cluster's status");
		}
		rv = print_cluster(a, &st);
		tl_cluster_info_free(&st);
		return rv;
	}
	if (strcmp(sub, "transfer-leadership") == 0) {
		if (a->npos > 3) {
			return usage(a, "%s",
			    "cluster transfer-leadership wants at most an ID.");
		}
		if (a->npos > 2 && (rv = pos_id(a, a->pos[2], &id)) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "handing the leadership to %s",
		    id == 0 ? "another node" : a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_cluster_transfer(c, id)) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "leadership handed over\n");
		return TLCTL_OK;
	}
	if (strcmp(sub, "add") == 0) {
		if ((rv = need_pos(a, 5,
		         "cluster add wants ID, HOST:PORT and the node's "
		         "client URL.")) != 0 ||
		    (rv = pos_id(a, a->pos[2], &id)) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "adding node %s at %s", a->pos[2],
		    a->pos[3]);
		CONNECT(a, c);
		if ((rv = tl_cluster_add(c, id, a->pos[3], a->pos[4])) !=
		    TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "node %s added as a voter\n", a->pos[2]);
		return TLCTL_OK;
	}
	if (strcmp(sub, "remove") == 0) {
		if ((rv = need_pos(a, 3, "cluster remove wants an ID.")) != 0 ||
		    (rv = pos_id(a, a->pos[2], &id)) != 0) {
			return rv;
		}
		snprintf(what, sizeof(what), "removing node %s", a->pos[2]);
		CONNECT(a, c);
		if ((rv = tl_cluster_remove(c, id)) != TL_OK) {
			return fail(a, rv, what);
		}
		fprintf(a->out, "node %s removed\n", a->pos[2]);
		return TLCTL_OK;
	}
	return usage(a, "unknown cluster command '%s'.", sub);
}

typedef struct command {
	const char *name;
	int (*fn)(args *a);
} command;

static const command commands[] = {
    {"topic", cmd_topic},
    {"put", cmd_put},
    {"get", cmd_get},
    {"list", cmd_list},
    {"count", cmd_count},
    {"move", cmd_move},
    {"delete", cmd_delete},
    {"consume", cmd_consume},
    {"dlq", cmd_dlq},
    {"lock", cmd_lock},
    {"cluster", cmd_cluster},
    {NULL, NULL},
};

static int
client_connect(args *a, tl_client **out)
{
	tl_opts *o = NULL;
	int rv;

	if ((rv = tl_opts_alloc(&o)) != TL_OK) {
		return fail(a, rv, "allocating the client options");
	}
	tl_opts_set_name(o, "tlctl");
	if (a->url != NULL && (rv = tl_opts_set_url(o, a->url)) != TL_OK) {
		tl_opts_free(o);
		fprintf(a->err,
		    "tlctl: the URL '%s' is not usable: it must look "
		    "like tcp://HOST:PORT, tls+tcp://HOST:PORT or "
		    "ipc:///PATH, or be a comma-separated list of such "
		    "URLs (a cluster's nodes).\n",
		    a->url);
		return TLCTL_USAGE;
	}
	if (a->token != NULL) {
		tl_opts_set_token(o, a->token);
	}
	if ((a->tls_cert != NULL) != (a->tls_key != NULL)) {
		tl_opts_free(o);
		fprintf(
		    a->err, "tlctl: --tls-cert and --tls-key go together.\n");
		return TLCTL_USAGE;
	}
	if ((a->tls_ca != NULL && tl_opts_set_tls_ca(o, a->tls_ca) != TL_OK) ||
	    (a->tls_server_name != NULL &&
	        tl_opts_set_tls_server_name(o, a->tls_server_name) != TL_OK) ||
	    (a->tls_cert != NULL &&
	        tl_opts_set_tls_cert(o, a->tls_cert, a->tls_key) != TL_OK)) {
		tl_opts_free(o);
		fprintf(a->err, "tlctl: a TLS option is not usable.\n");
		return TLCTL_USAGE;
	}
	rv = tl_client_open(out, o);
	if (rv != TL_OK) {
		const char *url =
		    a->url != NULL ? a->url : getenv("TIMELINE_URL");
		fprintf(a->err,
		    "tlctl: cannot open a session with the broker at "
		    "%s: %s (%s). %s %s\n",
		    url != NULL ? url : "tcp://127.0.0.1:7400", tl_strerror(rv),
		    tl_errname(rv), tl_erradvice(rv),
		    rv == TL_ENOTAUTH
		        ? "The broker has auth on: pass --token or set "
		          "TIMELINE_TOKEN."
		        : "Check that timelined runs there, or pass --url "
		          "(and --tls-ca for tls+tcp://).");
		tl_opts_free(o);
		return TLCTL_FAILED;
	}
	tl_opts_free(o);
	return TLCTL_OK;
}

int
tlctl_main(int argc, char **argv, FILE *out, FILE *err)
{
	args a;
	const command *cmd;
	int rv;

	memset(&a, 0, sizeof(a));
	a.out = out;
	a.err = err;
	if ((rv = args_parse(&a, argc, argv)) != TLCTL_OK) {
		return rv;
	}
	if (a.help) {
		fputs(usage_text, out);
		return TLCTL_OK;
	}
	if (a.npos == 0) {
		return usage(&a, "%s", "no command given.");
	}
	for (cmd = commands; cmd->name != NULL; cmd++) {
		if (strcmp(cmd->name, a.pos[0]) == 0) {
			break;
		}
	}
	if (cmd->name == NULL) {
		return usage(&a, "unknown command '%s'.", a.pos[0]);
	}
	rv = cmd->fn(&a);
	tl_client_close(a.c);
	return rv;
}
