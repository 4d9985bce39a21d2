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
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

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
