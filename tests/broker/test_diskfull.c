/*
 * End-to-end, a full disk under the real broker: timelined with its data
 * directory on a small tmpfs, filled by another file until a produce fails
 * with TL_ENOSPC. Reads go on, the client's error says what to do, and
 * once the operator deletes the other file, writes are acknowledged again
 * without a restart; every message acknowledged before and after is
 * delivered, and the broker says "writes stopped" (B010) and "writes
 * resumed" (B011) once each. Mounting needs root (as in CI); elsewhere the
 * test is skipped, saying so.
 */
#include "tltest.h"
#include "raw_client.h"

#include <sys/mount.h>

#define NBEFORE 20
#define MAXFULL 400 /* creates tried on the full disk */
#define NAFTER 10
#define MAXIDS (NBEFORE + MAXFULL + NAFTER)

static tt_proc P;
static char *dir;
static char mnt[600];
static bool mounted;

static void
diskfull_fini(void)
{
	tt_proc_fini(&P);
	if (mounted) {
		umount(mnt);
		mounted = false;
	}
	tt_rmtree_free(&dir);
}

TestSuite(bdiskfull, .fini = diskfull_fini, .timeout = 90);

/* How many times `what` occurs in the broker's log. */
static int
log_count(const char *what)
{
	char *text = tt_read_file(P.log);
	int n = 0;

	cr_assert_not_null(text, "no log %s", P.log);
	for (char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) {
		n++;
	}
	free(text);
	return n;
}

/* One create due now with body; the request's or the item's error. */
static int
create(rc_client *c, const char *id, const char *body)
{
	return rc_one(c, TLP_OP_CREATE, "t", "g", id, 0, 0, true, body, NULL);
}

static char ids[MAXIDS][16];
static bool seen[MAXIDS];

/* Subscribe and take (and acknowledge) deliveries until the n ids of ids[]
 * have all come, at most 20 s. */
static void
deliver_all(rc_client *c, int n)
{
	int got = 0;
	int64_t end = tli_mono_ms() + 20000;

	TL_PASS(rc_subscribe(c, "t", "cons", 30000, 256));
	while (got < n && tli_mono_ms() < end) {
		rc_deliver dv;
		rc_results res;

		if (rc_wait_deliver(c, 1000, &dv) != 1) {
			continue;
		}
		for (size_t k = 0; k < dv.d.n; k++) {
			const tlp_str *id = &dv.d.v[k].id;

			for (int i = 0; i < n; i++) {
				if (!seen[i] && strlen(ids[i]) == id->n &&
				    memcmp(ids[i], id->p, id->n) == 0) {
					seen[i] = true;
					got++;
				}
			}
		}
		TL_PASS(rc_ack_all(c, "t", "cons", &dv, &res));
		rc_results_free(&res);
		rc_deliver_free(&dv);
	}
	for (int i = 0; i < n; i++) {
		cr_assert(seen[i], "acknowledged %s never delivered", ids[i]);
	}
}

Test(bdiskfull, writes_resume_and_nothing_acknowledged_is_lost)
{
	static char body[32 * 1024];
	char filler[700], url[64];
	int n = 0, err = TL_OK, port;
	rc_client *c;
	tlp_msg m;
	rc_frame *f;
	int64_t t0;

	dir = tt_mkdtemp("bdiskfull");
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	cr_assert_eq(mkdir(mnt, 0700), 0, "%s", strerror(errno));
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=8m") != 0) {
		cr_skip_test("cannot mount a tmpfs here (%s): needs root",
		    strerror(errno));
	}
	mounted = true;
	port = tt_free_port();
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	/* the log and ready file stay off the small disk */
	tt_proc_timelined(&P, dir, "b");
	tt_proc_arg(&P, "--data");
	tt_proc_arg(&P, "%s/data", mnt);
	tt_proc_arg(&P, "--listen");
	tt_proc_arg(&P, "%s", url);
	tt_proc_args(&P, "--topic", "t", "--metrics", "off", "--log-level",
	    "info", NULL);
	tt_proc_start(&P);
	c = rc_open(url, "producer");
	memset(body, 'b', sizeof(body) - 1);

	for (; n < NBEFORE; n++) {
		snprintf(ids[n], sizeof(ids[n]), "a%03d", n);
		TL_PASS(create(c, ids[n], "x"), "before the disk filled");
	}

	/* Another program fills the disk: a produce fails, clearly. */
	tt_fill_disk(mnt, filler, sizeof(filler));
	for (int i = 0; i < MAXFULL; i++) {
		snprintf(ids[n], sizeof(ids[n]), "b%03d", i);
		if ((err = create(c, ids[n], body)) != TL_OK) {
			break;
		}
		n++; /* fitted in the last free bytes: acknowledged */
	}
	TL_CODE_EQ(err, TL_ENOSPC, "a produce on a full disk");
	cr_log_info("disk full after %d acknowledged creates; the client "
	            "reads: %s. %s",
	    n, tl_strerror(err), tl_erradvice(err));
	cr_assert_not_null(strstr(tl_erradvice(err), "free space"),
	    "the advice for TL_ENOSPC does not say to free space: %s",
	    tl_erradvice(err));
	cr_assert(tt_proc_log_wait(&P, "B010", 5000), "no B010 logged");

	/* Reads go on; writes keep failing while the disk is full. */
	TL_PASS(rc_get(c, "t", "a000", &m, &f), "a read on a full disk");
	rc_frame_free(f);
	tt_nap_ms(800); /* the store retries, and fails, meanwhile */
	TL_CODE_EQ(create(c, "c000", "x"), TL_ENOSPC, "still full");

	/* The operator deletes the other file: writes are acknowledged
	 * again, same broker. */
	cr_assert_eq(unlink(filler), 0, "%s", strerror(errno));
	t0 = tli_mono_ms();
	while ((err = create(c, "c000", "x")) == TL_ENOSPC &&
	    tli_mono_ms() - t0 < 10000) {
		tt_nap_ms(50);
	}
	TL_PASS(err, "a produce 10 s after space was freed");
	cr_log_info("writes acknowledged again %lld ms after space was freed",
	    (long long) (tli_mono_ms() - t0));
	snprintf(ids[n++], sizeof(ids[0]), "c000");
	for (int i = 1; i < NAFTER; i++) {
		snprintf(ids[n], sizeof(ids[n]), "c%03d", i);
		TL_PASS(create(c, ids[n], "x"), "after space was freed");
		n++;
	}
	cr_assert(tt_proc_log_wait(&P, "B011", 5000), "no B011 logged");

	deliver_all(c, n);
	cr_assert_eq(
	    log_count("B010"), 1, "B010 logged %d times", log_count("B010"));
	cr_assert_eq(
	    log_count("B011"), 1, "B011 logged %d times", log_count("B011"));
	rc_close(c);
	tt_proc_check_log(&P);
	tt_proc_stop_clean(&P);
}
