/*
 * A full disk: the store on a small tmpfs is filled until a write fails.
 * The failure must be a clear error (TL_ENOSPC or TL_EIO), never an
 * acknowledgement of something not stored; everything acknowledged before
 * stays readable, and after the operator frees space (the tmpfs grows) the
 * reopened store holds every acknowledged message and passes the checker.
 * Mounting needs root (as in CI); elsewhere the test is skipped, saying so.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "launch.h"
#include "testutil.h"
#include "tlcheck.h"

#define BODY (200 * 1024)
#define MAXMSG 4096

Test(diskfull, full_disk_is_a_clear_error_and_loses_nothing_acknowledged)
{
	char *dir = tt_mkdtemp("diskfull");
	char path[512];
	static char body[BODY];
	static char ids[MAXMSG][32];
	tli_store *s;
	tli_topic_conf c;
	int nack = 0, failure = TL_OK;

	if (mount("tmpfs", dir, "tmpfs", 0, "size=6m") != 0) {
		tt_rmtree(dir);
		cr_skip_test("cannot mount a tmpfs here (%s): needs root",
		    strerror(errno));
	}
	snprintf(path, sizeof(path), "%s/db", dir);
	s = tt_store_open(path, NULL);
	TL_PASS(tli_topic_conf_init(&c, "t"));
	c.max_body = TL_MAX_BODY_LEN;
	TL_PASS(tli_store_topic_create(s, &c));
	memset(body, 'z', sizeof(body));

	for (int i = 0; i < MAXMSG && failure == TL_OK; i++) {
		tli_op op;

		snprintf(ids[i], sizeof(ids[i]), "m%05d", i);
		memset(&op, 0, sizeof(op));
		op.type = TLI_OP_CREATE;
		op.topic = "t";
		op.id = ids[i];
		op.id_len = strlen(ids[i]);
		op.who = "g";
		op.who_len = 1;
		op.ts = TL_TS_MAX;
		op.body = body;
		op.body_len = sizeof(body);
		TL_PASS(tli_store_apply(s, &op, 1));
		if (op.err == TL_OK) {
			nack++;
		} else {
			failure = op.err;
		}
	}
	cr_assert(failure == TL_ENOSPC || failure == TL_EIO,
	    "a 6 MiB disk never filled, or failed with %s",
	    tl_errname(failure));
	cr_assert_gt(nack, 0);
	cr_log_info("disk full after %d acknowledged creates: %s (%s)", nack,
	    tl_errname(failure), tli_store_last_error(s));

	/* Everything acknowledged is still readable. */
	for (int i = 0; i < nack; i++) {
		tli_msg m;
		TL_PASS(tli_store_get(s, "t", ids[i], strlen(ids[i]), &m),
		    "acknowledged %s unreadable", ids[i]);
		cr_assert_eq(m.body_len, sizeof(body));
		tli_msg_fini(&m);
	}
	tli_store_close(s);

	/* The operator frees space; the store reopens with every
	 * acknowledged message and no inconsistency. */
	cr_assert_eq(mount("tmpfs", dir, "tmpfs", MS_REMOUNT, "size=64m"), 0,
	    "%s", strerror(errno));
	s = tt_store_open(path, NULL);
	for (int i = 0; i < nack; i++) {
		tli_msg m;
		TL_PASS(tli_store_get(s, "t", ids[i], strlen(ids[i]), &m),
		    "acknowledged %s lost after reopen", ids[i]);
		tli_msg_fini(&m);
	}
	cr_assert_eq(tt_check(s), 0);
	/* And it takes writes again. */
	{
		tli_op op;
		memset(&op, 0, sizeof(op));
		op.type = TLI_OP_CREATE;
		op.topic = "t";
		op.who = "g";
		op.who_len = 1;
		op.ts = TL_TS_MAX;
		TL_PASS(tli_store_apply(s, &op, 1));
		TL_PASS(op.err);
	}
	tli_store_close(s);
	umount(dir);
	tt_rmtree(dir);
	free(dir);
}

/* ---- writes stop while the disk is full and resume by themselves ---- */

static _Atomic int n_stop, n_resume;

static void
on_report(void *arg, bool stopped, const char *detail)
{
	(void) arg;
	cr_log_info("store report: writes %s %s",
	    stopped ? "stopped" : "resumed", detail);
	atomic_fetch_add(stopped ? &n_stop : &n_resume, 1);
}

/* One create (ts relative: due now) of len bytes; its error. */
static int
create(tli_store *s, const char *id, const void *body, size_t len)
{
	tli_op op;

	memset(&op, 0, sizeof(op));
	op.type = TLI_OP_CREATE;
	op.topic = "t";
	op.id = id;
	op.id_len = strlen(id);
	op.who = "g";
	op.who_len = 1;
	op.ts_mode = TLI_TS_REL;
	op.body = body;
	op.body_len = len;
	if (tli_store_apply(s, &op, 1) != TL_OK) {
		return TL_ESTORAGE;
	}
	return op.err;
}

Test(diskfull, writes_resume_without_a_restart_once_space_is_freed,
    .timeout = 60)
{
	char *dir = tt_mkdtemp("diskfull2");
	char path[512], filler[512], id[32];
	static char body[32 * 1024];
	tli_store_opts o;
	tli_store *s = NULL;
	tli_topic_conf c;
	int nack = 0, err = TL_OK, tries;
	int64_t t0;

	if (mount("tmpfs", dir, "tmpfs", 0, "size=8m") != 0) {
		tt_rmtree(dir);
		cr_skip_test("cannot mount a tmpfs here (%s): needs root",
		    strerror(errno));
	}
	snprintf(path, sizeof(path), "%s/db", dir);
	tli_store_opts_init(&o);
	o.path = path;
	o.report = on_report;
	TL_PASS(tli_store_open(&s, &o));
	TL_PASS(tli_topic_conf_init(&c, "t"));
	TL_PASS(tli_store_topic_create(s, &c));
	memset(body, 'b', sizeof(body));
	for (; nack < 20; nack++) {
		snprintf(id, sizeof(id), "a%03d", nack);
		TL_PASS(create(s, id, body, 100));
	}
	cr_assert(tli_store_writable(s));

	/* The disk fills up (another program's file): a write fails. */
	tt_fill_disk(dir, filler, sizeof(filler));
	for (tries = 0; tries < 200 && err == TL_OK; tries++) {
		snprintf(id, sizeof(id), "b%03d", tries);
		if ((err = create(s, id, body, sizeof(body))) == TL_OK) {
			nack++; /* fitted in the last free bytes */
		}
	}
	TL_FAIL(err, TL_ENOSPC, "writes on a full disk");
	cr_assert(!tli_store_writable(s));
	cr_assert_eq(tli_store_write_stops(s), 1);
	/* Reads go on; writes keep failing clearly while it is full. */
	{
		tli_msg m;
		TL_PASS(tli_store_get(s, "t", "a000", 4, &m));
		tli_msg_fini(&m);
	}
	usleep(800 * 1000); /* the store retries, and fails, meanwhile */
	TL_FAIL(create(s, "c0", "x", 1), TL_ENOSPC);
	TL_FAIL(create(s, "c0", "x", 1), TL_ENOSPC);

	/* The operator frees space: writes and leases resume, no restart. */
	cr_assert_eq(unlink(filler), 0);
	t0 = tli_mono_ms();
	while ((err = create(s, "c1", "x", 1)) != TL_OK &&
	    tli_mono_ms() - t0 < 5000) {
		cr_assert_eq(err, TL_ENOSPC, "%s", tl_errname(err));
		usleep(50 * 1000);
	}
	TL_PASS(err, "writes did not resume within 5 s of freeing space (%s)",
	    tli_store_last_error(s));
	cr_log_info("writes resumed %lld ms after space was freed",
	    (long long) (tli_mono_ms() - t0));
	cr_assert(tli_store_writable(s));
	{
		tli_msg m;
		tli_op op;
		TL_PASS(tli_store_get(s, "t", "a001", 4, &m));
		memset(&op, 0, sizeof(op));
		op.type = TLI_OP_LEASE;
		op.topic = "t";
		op.id = "a001";
		op.id_len = 4;
		op.who = "w";
		op.who_len = 1;
		op.ts_mode = TLI_TS_REL;
		op.ts = 30000;
		op.version = m.version;
		TL_PASS(tli_store_apply(s, &op, 1));
		TL_PASS(op.err, "a lease after space was freed");
		tli_msg_fini(&m);
	}
	cr_assert_eq(atomic_load(&n_stop), 1, "writes-stopped reports");
	cr_assert_eq(atomic_load(&n_resume), 1, "writes-resumed reports");
	cr_assert_eq(tli_store_write_stops(s), 1);

	/* Everything acknowledged is there, now and after a reopen. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 20; i++) {
			tli_msg m;
			snprintf(id, sizeof(id), "a%03d", i);
			TL_PASS(tli_store_get(s, "t", id, strlen(id), &m),
			    "acknowledged %s lost", id);
			tli_msg_fini(&m);
		}
		for (int i = 0; i < tries - 1; i++) {
			tli_msg m;
			snprintf(id, sizeof(id), "b%03d", i);
			TL_PASS(tli_store_get(s, "t", id, strlen(id), &m),
			    "acknowledged %s lost", id);
			tli_msg_fini(&m);
		}
		cr_assert_eq(tt_check(s), 0);
		if (pass == 0) {
			tli_store_close(s);
			s = tt_store_open(path, NULL);
		}
	}
	tli_store_close(s);
	umount(dir);
	tt_rmtree(dir);
	free(dir);
}
