/*
 * The launcher itself (tests/support/launch.h), as the cluster suites will
 * use it: three brokers at once in one directory, each on its own data and
 * socket; one paused (SIGSTOP) answers nothing until it goes on
 * (SIGCONT); one killed with SIGKILL and started again on the same data
 * still has what it acknowledged; all stop cleanly (exit status 0).
 */
#include "tltest.h"
#include "raw_client.h"

#define NB 3

static char *dir;
static tt_proc procs[NB];

static void
fini(void)
{
	for (int i = 0; i < NB; i++) {
		tt_proc_fini(&procs[i]);
	}
	tt_rmtree_free(&dir);
}

TestSuite(launch, .fini = fini, .timeout = 60);

static void
enc_topic_name(tlp_w *w, const void *arg)
{
	tlp_enc_name(w, TLP_STR((const char *) arg));
}

Test(launch, three_brokers_paused_killed_restarted)
{
	char url[NB][TT_PATH];
	rc_client *c[NB];
	rc_frame *f = NULL;
	tlp_result res;
	tlp_topic t;
	tlp_msg m;

	dir = tt_mkdtemp("launch");
	for (int i = 0; i < NB; i++) {
		char name[16];

		snprintf(name, sizeof(name), "b%d", i);
		snprintf(url[i], sizeof(url[i]), "ipc://%s/%s.sock", dir, name);
		tt_proc_timelined(&procs[i], dir, name);
		tt_proc_arg(&procs[i], "--data");
		tt_proc_arg(&procs[i], "%s/%s.data", dir, name);
		tt_proc_args(&procs[i], "--listen", url[i], "--topic", "t",
		    "--metrics", "off", NULL);
		tt_proc_start(&procs[i]);
		cr_assert(tt_proc_alive(&procs[i]));
		cr_assert_neq(procs[i].addr[0], '\0', "%s: empty ready file",
		    procs[i].name);
	}
	for (int i = 0; i < NB; i++) {
		c[i] = rc_open(url[i], "launch");
		TL_PASS(rc_one(c[i], TLP_OP_CREATE, "t", "app", "m", 0, 600000,
		            true, "kept", &res),
		    "create on b%d", i);
	}

	/* Paused: no answer in time; going on, it answers again. */
	tt_proc_pause(&procs[1]);
	TL_FAIL(rc_call(c[1], TLP_OP_TOPIC_GET, enc_topic_name, "t", 300, &f),
	    TL_ETIMEDOUT, "a paused broker answered");
	tt_proc_resume(&procs[1]);
	TL_PASS(rc_topic_get(c[1], "t", &t), "after SIGCONT");
	cr_assert_eq(t.messages, 1);

	/* Killed and started again on its data: the create is there. */
	rc_close(c[2]);
	tt_proc_restart(&procs[2], SIGKILL);
	c[2] = rc_open(url[2], "launch");
	TL_PASS(rc_get(c[2], "t", "m", &m, &f), "after the restart");
	cr_assert(m.body_len == 4 && memcmp(m.body, "kept", 4) == 0);
	rc_frame_free(f);

	/* The others never noticed. */
	TL_PASS(rc_topic_get(c[0], "t", &t));
	cr_assert_eq(t.messages, 1);
	for (int i = 0; i < NB; i++) {
		rc_close(c[i]);
		tt_proc_stop_clean(&procs[i]);
	}
}
