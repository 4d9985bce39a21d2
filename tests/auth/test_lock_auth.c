/*
 * Named leases under authentication (auth = on): LOCK is allowed only as a
 * consumer id of the principal (its consume table), and a create on demand
 * only as one of its producer groups; a lock's lease is extended, released
 * and deleted only by a principal allowed its consumer id.
 */
#include "tltest.h"
#include "raw_client.h"

#include "auth_util.h"

/* alpha: group A, consumers alpha-*; beta: group B, consumers beta-*;
 * lim: group L, consumers lim-*, at most one stored message. */
static void
start(ab_broker *b, const char *tag)
{
	char text[1024], extra[1200];

	ab_init(b, tag);
	snprintf(text, sizeof(text),
	    "[principal alpha]\n"
	    "token_sha256 = %s\n"
	    "group = A\n"
	    "produce = t\n"
	    "consume = t:alpha-*\n"
	    "\n"
	    "[principal beta]\n"
	    "token_sha256 = %s\n"
	    "group = B\n"
	    "produce = t\n"
	    "consume = t:beta-*\n"
	    "\n"
	    "[principal lim]\n"
	    "token_sha256 = %s\n"
	    "group = L\n"
	    "produce = t\n"
	    "consume = t:lim-*\n"
	    "max_scheduled = 1\n",
	    ab_hash("tok-a"), ab_hash("tok-b"), ab_hash("tok-lim"));
	ab_write(b->creds, text);
	snprintf(extra, sizeof(extra),
	    "listen = ipc://%s/tl.sock\n"
	    "metrics = off\n"
	    "auth = on\n"
	    "credentials = %s\n",
	    b->dir, b->creds);
	ab_config(b, extra);
	ab_spawn(b);
}

static void
enc_hello_tok(tlp_w *w, const void *arg)
{
	tlp_enc_hello(w, arg);
}

/* A raw session authenticated with token. */
static rc_client *
raw_open(const char *url, const char *token)
{
	rc_client *rc = rc_connect(url, 3000);
	tlp_hello h;

	cr_assert_not_null(rc);
	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR("raw");
	h.role = TLP_STR("");
	h.client_ms = tli_wall_ms();
	h.token = TLP_STR(token);
	TL_PASS(rc_req(rc, TLP_OP_HELLO, enc_hello_tok, &h, NULL, NULL));
	return rc;
}

static tl_lock_conf
lconf(const char *who, const char *group)
{
	tl_lock_conf c;

	memset(&c, 0, sizeof(c));
	c.topic = "t";
	c.id = "L";
	c.consumer_id = who;
	c.lease_ms = 30000;
	c.create_group = group;
	return c;
}

TestSuite(lockauth, .timeout = 60);

Test(lockauth, only_a_principal_allowed_the_consumer_id_takes_the_lock)
{
	ab_broker b;
	tl_client *a, *bc;
	tl_lock_conf conf;
	tl_lease *l = NULL, *l2 = NULL;
	tl_message *m = NULL;
	rc_client *rb;
	tlp_result res;

	start(&b, "lock-auth");
	a = ab_client(b.url, "tok-a");
	bc = ab_client(b.url, "tok-b");

	/* Another principal's consumer id, or another principal's group to
	 * create as: refused, and nothing is created. */
	conf = lconf("beta-1", "A");
	TL_FAIL(tl_lock_try(a, &conf, &l, NULL), TL_ENOTAUTH);
	conf = lconf("alpha-1", "B");
	TL_FAIL(tl_lock_try(a, &conf, &l, NULL), TL_ENOTAUTH);
	TL_FAIL(tl_get(a, "t", "L", &m), TL_ENOTFOUND);

	/* Its own consumer id and group: taken. */
	conf = lconf("alpha-1", "A");
	TL_PASS(tl_lock_try(a, &conf, &l, NULL));

	/* beta knows the id and the version, and may not touch the lease
	 * as alpha-1. */
	rb = raw_open(b.url, "tok-b");
	TL_FAIL(rc_one(rb, TLP_OP_EXTEND, "t", "alpha-1", "L",
	            tl_lease_version(l), 5000, true, NULL, &res),
	    TL_ENOTAUTH);
	TL_FAIL(rc_one(rb, TLP_OP_RELEASE, "t", "alpha-1", "L",
	            tl_lease_version(l), 0, true, NULL, &res),
	    TL_ENOTAUTH);
	TL_FAIL(rc_one(rb, TLP_OP_ACK, "t", "alpha-1", "L", tl_lease_version(l),
	            0, false, NULL, &res),
	    TL_ENOTAUTH);
	rc_close(rb);
	/* As its own consumer id, beta is told it is held. */
	conf = lconf("beta-1", NULL);
	TL_FAIL(tl_lock_try(bc, &conf, &l2, NULL), TL_ELEASED);
	cr_assert_null(l2);

	/* alpha's lease is intact: extend, release, and beta takes it. */
	TL_PASS(tl_lease_extend(l, 30000));
	TL_PASS(tl_lease_release(l, 0, true));
	tl_lease_free(l);
	l = NULL;
	TL_PASS(tl_lock_try(bc, &conf, &l, NULL));
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	tl_client_close(a);
	tl_client_close(bc);
	ab_stop(&b);
}

/* A lock's create on demand counts against the group's max_scheduled like
 * any create; taking a lock that exists creates nothing and always fits. */
Test(lockauth, a_locks_create_counts_against_the_groups_limits)
{
	ab_broker b;
	tl_client *c;
	tl_lock_conf conf = lconf("lim-1", "L");
	tl_lease *l = NULL;
	tl_message *m = NULL;

	start(&b, "lock-quota");
	c = ab_client(b.url, "tok-lim");
	conf.id = "L1";
	TL_PASS(tl_lock_try(c, &conf, &l, NULL));
	TL_PASS(tl_lease_release(l, 0, true));
	tl_lease_free(l);
	conf.id = "L2";
	TL_FAIL(tl_lock_try(c, &conf, &l, NULL), TL_EQUOTA);
	TL_FAIL(tl_get(c, "t", "L2", &m), TL_ENOTFOUND);
	conf.id = "L1";
	TL_PASS(tl_lock_try(c, &conf, &l, NULL));
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	conf.id = "L2"; /* L1 is gone: room for one again */
	TL_PASS(tl_lock_try(c, &conf, &l, NULL));
	tl_lease_free(l);
	tl_client_close(c);
	ab_stop(&b);
}
