/*
 * End-to-end, the real broker: a client whose name (HELLO) and topic name
 * carry a newline followed by the text of a log line cannot forge one.
 * The name reaches the log through C001 (clock warning), S020 (session
 * closed) and the topic through T001; the broker's log afterwards holds
 * only lines of the shape "STAMP timelined LEVEL ID text" and none that
 * starts with the forged text. A topic name cannot forge a metrics sample
 * either.
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(logforge);

#define FORGED "2026-01-01T00:00:00Z timelined error B001 forged"

/* Whether line is "YYYY-MM-DDTHH:MM:SSZ timelined LEVEL ID ...". */
static bool
line_shape(const char *line, size_t n)
{
	static const char *levels[] = {"error ", "warn ", "info ", "debug "};
	const char *p = line + 21;
	size_t rest;

	if (n < 21 || line[4] != '-' || line[7] != '-' || line[10] != 'T' ||
	    line[13] != ':' || line[16] != ':' || line[19] != 'Z' ||
	    line[20] != ' ' || strncmp(p, "timelined ", 10) != 0) {
		return false;
	}
	p += 10;
	rest = n - 31;
	for (size_t i = 0; i < 4; i++) {
		size_t k = strlen(levels[i]);

		if (rest > k + 4 && strncmp(p, levels[i], k) == 0) {
			p += k;
			/* an id: an upper-case letter, three digits, a space */
			return p[0] >= 'A' && p[0] <= 'Z' && p[1] >= '0' &&
			    p[1] <= '9' && p[2] >= '0' && p[2] <= '9' &&
			    p[3] >= '0' && p[3] <= '9' && p[4] == ' ';
		}
	}
	return false;
}

Test(logforge, client_and_topic_names_cannot_forge_lines)
{
	const char *name = "bob\n" FORGED;
	const char *topic = "t\n" FORGED "\r\n" FORGED;
	char *log, *line, *nl;
	int lines = 0, rv;
	rc_client *c;

	rc_broker_start(&B, "logforge");
	c = rc_connect(B.url, 10000);
	cr_assert_not_null(c);
	/* an hour behind: the broker warns (C001) naming the client */
	TL_PASS(rc_hello(c, name, tli_wall_ms() - 3600 * 1000, NULL));
	/* created or refused as a bad name: either way nothing forged */
	rv = rc_topic_create(c, topic, 0);
	rc_close(c);
	/* S020 names the client when the session closes */
	cr_assert(tt_proc_log_wait(&B.proc, "forged) closed", 10000));
	cr_assert(tt_proc_log_wait(&B.proc, "C001", 1000));
	if (rv == TL_OK) {
		cr_assert(tt_proc_log_wait(&B.proc, "T001", 1000));
	}

	log = tt_read_file(B.proc.log);
	cr_assert_not_null(log);
	for (line = log; *line != '\0'; line = nl + 1) {
		nl = strchr(line, '\n');
		if (nl == NULL) {
			nl = line + strlen(line) - 1;
		}
		lines++;
		cr_assert(strncmp(line, FORGED, strlen(FORGED)) != 0,
		    "forged line %d in the log:\n%s", lines, log);
		cr_assert(line_shape(line, (size_t) (nl - line)),
		    "line %d is not a log line: %.*s\nlog:\n%s", lines,
		    (int) (nl - line), line, log);
	}
	cr_assert(lines > 0);
	/* the name is still there, escaped, for whoever reads the log */
	cr_assert_not_null(strstr(log, "bob\\n" FORGED), "%s", log);
	free(log);
}

/* The same for the metrics: a topic name with a quote, a backslash and a
 * newline stays inside its label value, escaped as the Prometheus text
 * format wants, and forges no sample. */
Test(logforge, topic_name_cannot_forge_metrics)
{
	const char *topic = "q\"\\\nforged_metric 1";
	const char *want =
	    "timeline_messages{topic=\"q\\\"\\\\\\nforged_metric "
	    "1\",status=\"available\"} 0";
	int64_t deadline;
	char *body = NULL;
	rc_client *c;

	rc_broker_init(&B, "logforge-m");
	B.metrics_port = tt_free_port();
	cr_assert(B.metrics_port > 0);
	rc_broker_spawn(&B, 20000);
	c = rc_open(B.url, "m");
	cr_assert_not_null(c);
	TL_PASS(rc_topic_create(c, topic, 0));
	rc_close(c);
	/* the topic gauges are refreshed once a second */
	deadline = tli_mono_ms() + 10000;
	for (;;) {
		int status = 0;

		free(body);
		body = rc_http_get(B.metrics_port, "/metrics", 2000, &status);
		if (status == 200 && body != NULL &&
		    strstr(body, "\"q\\\"") != NULL) {
			break;
		}
		cr_assert(tli_mono_ms() < deadline, "no topic row: %s",
		    body ? body : "(none)");
		tt_nap_ms(50);
	}
	cr_assert_null(strstr(body, "\nforged_metric"), "%s", body);
	cr_assert_not_null(strstr(body, want), "%s", body);
	free(body);
}
