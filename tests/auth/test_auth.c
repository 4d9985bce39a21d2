/*
 * Authenticated sessions end to end, with the real broker (auth = on) on
 * an ipc socket: the hello is refused without a known token and nothing
 * after it is handled; producers act only as their own groups; lease
 * operations only by a principal allowed the lease holder's consumer id;
 * admin operations only by admins; SIGHUP reloads the credentials; the
 * per-group limits refuse a whole batch.
 */
#include "tltest.h"
#include "raw_client.h"

#include "auth_util.h"

/* Principals: admin (topics, dead letters), alpha (group A, consumers
 * alpha-*), beta (group B, consumers beta-*), lim (group L with limits). */
static void
write_creds(ab_broker *b, bool with_alpha)
{
	char text[4096];

	snprintf(text, sizeof(text),
	    "# test principals\n"
	    "[principal admin]\n"
	    "token_sha256 = %s\n"
	    "admin = yes\n"
	    "\n"
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
	    "produce = *\n"
	    "max_inflight_creates = 2\n"
	    "max_scheduled = 3\n",
	    ab_hash("tok-admin"), ab_hash(with_alpha ? "tok-a" : "tok-a2"),
	    ab_hash("tok-b"), ab_hash("tok-lim"));
	ab_write(b->creds, text);
}

static int metrics_port;

static void
start(ab_broker *b, const char *tag)
{
	char extra[1200];

	ab_init(b, tag);
	write_creds(b, true);
	metrics_port = tt_free_port();
	snprintf(extra, sizeof(extra),
	    "listen = ipc://%s/tl.sock\n"
	    "metrics = 127.0.0.1:%d\n"
	    "auth = on\n"
	    "credentials = %s\n",
	    b->dir, metrics_port, b->creds);
	ab_config(b, extra);
	ab_spawn(b);
}

/* The value of one metrics line (name with labels), or -1. */
static long long
metric(const char *line)
{
	int status = 0;
	char *body = rc_http_get(metrics_port, "/metrics", 3000, &status);
	char *p;
	long long v = -1;

	cr_assert_not_null(body, "metrics endpoint did not answer");
	if ((p = strstr(body, line)) != NULL) {
		v = atoll(p + strlen(line) + 1);
	}
	free(body);
	return v;
}

static size_t
count_group(tl_client *c, const char *group)
{
	tl_entry *v = NULL;
	size_t n = 0;
	bool more = false;
	int rv = tl_list(c, "t", group, 1000, NULL, &v, &n, &more);

	TL_PASS(rv, "list %s", group);
	tl_free(v);
	return n;
}

TestSuite(auth, .timeout = 60);

Test(auth, hello_without_a_known_token_is_refused)
{
	ab_broker b;
	tl_client *c = NULL;

	start(&b, "auth-hello");
	TL_FAIL(ab_open(b.url, NULL, NULL, &c), TL_ENOTAUTH);
	cr_assert_null(c);
	TL_FAIL(ab_open(b.url, "not-a-token", NULL, &c), TL_ENOTAUTH);
	TL_FAIL(ab_open(b.url, "tok-a ", NULL, &c), TL_ENOTAUTH);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"HELLO\"}"), 3);
	/* The right token opens. */
	c = ab_client(b.url, "tok-a");
	tl_client_close(c);
	cr_assert(!ab_log_wait(&b, "tok-a", 0), "a token reached the log");
	ab_stop(&b);
}

static void
enc_hello_tok(tlp_w *w, const void *arg)
{
	tlp_enc_hello(w, arg);
}

/* A HELLO with an unknown token followed at once (same write) by a
 * CREATE and a TOPIC_CREATE: one reply, TL_ENOTAUTH, then the
 * broker hangs up, and nothing was created. */
Test(auth, nothing_after_a_refused_hello_is_handled)
{
	ab_broker b;
	rc_client *rc;
	tli_buf buf;
	tlp_w w;
	tlp_hello h;
	tlp_item it;
	tlp_batch bt;
	tlp_topic tp;
	rc_frame *f;
	tlp_r r;
	tlp_str detail;
	size_t nf, start2, start3;
	int err = 0;
	tl_client *adm;
	tl_topic_info ti;

	start(&b, "auth-pipe");
	rc = rc_connect(b.url, 3000);
	cr_assert_not_null(rc);
	tli_buf_init(&buf);
	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR("intruder");
	h.role = TLP_STR("");
	h.client_ms = tli_wall_ms();
	h.token = TLP_STR("guess");
	tlp_frame_begin(&buf, &w, TLP_OP_HELLO, 0, 1);
	enc_hello_tok(&w, &h);
	TL_PASS(tlp_frame_end(&buf, 0));
	start2 = buf.len;
	memset(&it, 0, sizeof(it));
	it.ts = 1000;
	it.rel = true;
	it.id = TLP_STR("x1");
	it.body = "b";
	it.body_len = 1;
	bt.topic = TLP_STR("t");
	bt.who = TLP_STR("A");
	bt.items = &it;
	bt.n = 1;
	tlp_frame_begin(&buf, &w, TLP_OP_CREATE, 0, 2);
	tlp_enc_batch(&w, &bt);
	TL_PASS(tlp_frame_end(&buf, start2));
	start3 = buf.len;
	memset(&tp, 0, sizeof(tp));
	tp.name = TLP_STR("sneaky");
	tlp_frame_begin(&buf, &w, TLP_OP_TOPIC_CREATE, 0, 3);
	tlp_enc_topic_create(&w, &tp);
	TL_PASS(tlp_frame_end(&buf, start3));
	cr_assert_eq(rc_send_raw(rc, buf.data, buf.len), 0);
	tli_buf_fini(&buf);

	f = rc_next_frame(rc, 3000);
	cr_assert_not_null(f, "no reply to the HELLO");
	cr_assert_eq(f->h.op, TLP_OP_HELLO);
	rc_frame_body(f, &r);
	TL_PASS(tlp_dec_reply_head(&r, &err, &detail, &nf));
	TL_FAIL(err, TL_ENOTAUTH, "HELLO answered");
	cr_assert(detail.n > 0 && memmem(detail.p, detail.n, "HELLO", 5),
	    "the refusal names the operation: %.*s", (int) detail.n, detail.p);
	rc_frame_free(f);
	cr_assert(rc_wait_eof(rc, 3000), "the broker kept the connection");
	f = rc_next_frame(rc, 0);
	cr_assert_null(f, "a second frame (op %d) after the refused HELLO",
	    f != NULL ? f->h.op : 0);
	rc_close(rc);

	adm = ab_client(b.url, "tok-admin");
	TL_FAIL(tl_topic_get(adm, "sneaky", &ti), TL_ENOTOPIC);
	TL_PASS(tl_topic_get(adm, "t", &ti));
	cr_assert_eq(ti.available + ti.waiting + ti.processing, 0);
	tl_client_close(adm);
	ab_stop(&b);
}

Test(auth, a_producer_acts_only_as_its_own_groups)
{
	ab_broker b;
	tl_client *a, *bb;
	tl_message *m = NULL;
	char ida[TL_MAX_ID_LEN + 1], idb[TL_MAX_ID_LEN + 1];
	uint64_t nv = 0, vb;

	start(&b, "auth-owner");
	a = ab_client(b.url, "tok-a");
	bb = ab_client(b.url, "tok-b");
	TL_PASS(tl_put_in(a, "t", "A", "a1", 60000, "x", 1, ida));
	TL_PASS(tl_put_in(bb, "t", "B", "b1", 60000, "y", 1, idb));
	TL_PASS(tl_get(bb, "t", "b1", &m));
	vb = m->version;
	tl_message_free(m);

	/* A on B's message: refused, knowing its id and version. */
	TL_FAIL(tl_get(a, "t", "b1", &m), TL_ENOTAUTH);
	TL_FAIL(tl_move(a, "t", "B", "b1", vb, 5000, true, &nv), TL_ENOTAUTH);
	TL_FAIL(tl_delete(a, "t", "B", "b1", vb), TL_ENOTAUTH);
	/* ... and claiming its own group does not help: the store checks
	 * the owner. */
	TL_FAIL(tl_delete(a, "t", "A", "b1", vb), TL_ENOTOWNER);
	TL_FAIL(tl_move(a, "t", "A", "b1", vb, 5000, true, &nv), TL_ENOTOWNER);
	/* Nor can A create or list as B. */
	TL_FAIL(
	    tl_put_in(a, "t", "B", "forged", 60000, "z", 1, NULL), TL_ENOTAUTH);
	{
		tl_entry *v = NULL;
		size_t n = 0;
		bool more;
		TL_FAIL(
		    tl_list(a, "t", "B", 10, NULL, &v, &n, &more), TL_ENOTAUTH);
	}
	/* B's message is untouched. */
	TL_PASS(tl_get(bb, "t", "b1", &m));
	cr_assert_eq(m->version, vb);
	cr_assert_str_eq(m->owner, "B");
	tl_message_free(m);
	cr_assert_eq(count_group(bb, "B"), 1);

	/* A on its own message: get, move, delete. */
	TL_PASS(tl_get(a, "t", "a1", &m));
	cr_assert_str_eq(m->owner, "A");
	tl_message_free(m);
	TL_PASS(tl_move(a, "t", "A", "a1", 0, 90000, true, &nv));
	TL_PASS(tl_delete(a, "t", "A", "a1", nv));
	TL_FAIL(tl_get(a, "t", "a1", &m), TL_ENOTFOUND);

	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"GET\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"MOVE\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"DELETE\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"CREATE\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"LIST\"}"), 1);
	tl_client_close(a);
	tl_client_close(bb);
	ab_stop(&b);
}

/* A raw session authenticated with a token. */
static rc_client *
raw_open(const char *url, const char *token)
{
	rc_client *rc = rc_connect(url, 3000);
	tlp_hello h;
	int rv;

	cr_assert_not_null(rc);
	memset(&h, 0, sizeof(h));
	h.proto = TLP_VERSION;
	h.name = TLP_STR("raw");
	h.role = TLP_STR("");
	h.client_ms = tli_wall_ms();
	h.token = TLP_STR(token);
	rv = rc_req(rc, TLP_OP_HELLO, enc_hello_tok, &h, NULL, NULL);
	TL_PASS(rv, "HELLO");
	return rc;
}

Test(auth, only_the_lease_holders_principal_touches_a_lease)
{
	ab_broker b;
	tl_client *a;
	tl_consumer *k;
	tl_consumer_conf kc;
	tl_lease *l = NULL;
	rc_client *rb;
	tlp_result res;
	char id[TL_MAX_ID_LEN + 1];
	uint64_t ver;
	size_t nl = 0;
	int rv;

	start(&b, "auth-lease");
	a = ab_client(b.url, "tok-a");
	TL_PASS(tl_put_in(a, "t", "A", "m1", 0, "x", 1, NULL));
	memset(&kc, 0, sizeof(kc));
	kc.topic = "t";
	kc.consumer_id = "alpha-1";
	kc.lease_ms = 60000;
	TL_PASS(tl_consumer_open(&k, a, &kc));
	rv = tl_consumer_poll(k, &l, 1, &nl, 5000);
	TL_PASS(rv, "poll");
	cr_assert_eq(nl, 1, "no delivery");
	snprintf(
	    id, sizeof(id), "%.*s", (int) tl_lease_id_len(l), tl_lease_id(l));
	ver = tl_lease_version(l);

	/* beta knows the id and the version. */
	rb = raw_open(b.url, "tok-b");
	TL_FAIL(rc_one(rb, TLP_OP_EXTEND, "t", "alpha-1", id, ver, 5000, true,
	            NULL, &res),
	    TL_ENOTAUTH);
	TL_FAIL(rc_one(rb, TLP_OP_RELEASE, "t", "alpha-1", id, ver, 0, true,
	            NULL, &res),
	    TL_ENOTAUTH);
	TL_FAIL(rc_one(rb, TLP_OP_ACK, "t", "alpha-1", id, ver, 0, false, NULL,
	            &res),
	    TL_ENOTAUTH);
	TL_FAIL(rc_subscribe(rb, "t", "alpha-1", 1000, 1), TL_ENOTAUTH);
	/* As one of its own consumer ids, the store says who holds it. */
	TL_FAIL(rc_one(rb, TLP_OP_ACK, "t", "beta-1", id, ver, 0, false, NULL,
	            &res),
	    TL_ELEASED);
	/* Nor does the owner's group get to delete it under the lease. */
	TL_FAIL(tl_delete(a, "t", "A", "m1", 0), TL_ELEASED);
	rc_close(rb);

	/* The lease is intact: its holder extends and deletes it. */
	cr_assert_eq(tl_lease_version(l), ver);
	TL_PASS(tl_lease_extend(l, 30000));
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	tl_consumer_close(k);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"EXTEND\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"RELEASE\"}"), 1);
	cr_assert_eq(metric("timeline_auth_refusals_total{op=\"ACK\"}"), 1);
	cr_assert_eq(
	    metric("timeline_auth_refusals_total{op=\"SUBSCRIBE\"}"), 1);
	tl_client_close(a);
	ab_stop(&b);
}

Test(auth, only_admins_administer_topics)
{
	ab_broker b;
	tl_client *a, *adm;
	tl_topic_conf tc;
	tl_topic_info ti;

	start(&b, "auth-admin");
	a = ab_client(b.url, "tok-a");
	adm = ab_client(b.url, "tok-admin");
	memset(&tc, 0, sizeof(tc));
	tc.name = "u";
	TL_FAIL(tl_topic_create(a, &tc), TL_ENOTAUTH);
	TL_FAIL(tl_topic_get(adm, "u", &ti), TL_ENOTOPIC);
	TL_PASS(tl_put_in(a, "t", "A", "keep", 60000, "x", 1, NULL));
	TL_FAIL(tl_topic_delete(a, "t"), TL_ENOTAUTH);
	TL_PASS(tl_topic_get(adm, "t", &ti));
	cr_assert_eq(ti.waiting, 1, "the topic kept its message");
	TL_FAIL(tl_dlq_kick(a, "t", "keep", 0), TL_ENOTAUTH);
	{
		tl_entry *v = NULL;
		size_t n = 0;
		bool more;
		TL_FAIL(
		    tl_dlq_list(a, "t", 10, NULL, &v, &n, &more), TL_ENOTAUTH);
	}
	/* The admin may; it is not a producer, though. */
	TL_PASS(tl_topic_create(adm, &tc));
	TL_PASS(tl_topic_delete(adm, "u"));
	TL_FAIL(
	    tl_put_in(adm, "t", "A", "adm", 60000, "x", 1, NULL), TL_ENOTAUTH);
	cr_assert_eq(
	    metric("timeline_auth_refusals_total{op=\"TOPIC_CREATE\"}"), 1);
	cr_assert_eq(
	    metric("timeline_auth_refusals_total{op=\"TOPIC_DELETE\"}"), 1);
	tl_client_close(a);
	tl_client_close(adm);
	ab_stop(&b);
}

Test(auth, sighup_reloads_the_credentials)
{
	ab_broker b;
	tl_client *a, *bb, *c = NULL;
	int64_t deadline;
	int rv;

	start(&b, "auth-hup");
	a = ab_client(b.url, "tok-a");
	bb = ab_client(b.url, "tok-b");
	/* alpha's token changes to tok-a2. */
	write_creds(&b, false);
	kill(b.proc.pid, SIGHUP);
	cr_assert(ab_log_wait(&b, "SIGHUP: 4 principal(s) loaded", 5000));
	TL_FAIL(ab_open(b.url, "tok-a", NULL, &c), TL_ENOTAUTH);
	c = ab_client(b.url, "tok-a2");
	TL_PASS(tl_put_in(c, "t", "A", "n1", 60000, "x", 1, NULL));
	tl_client_close(c);
	/* The open session of the revoked token was closed, and cannot come
	 * back: its requests fail. */
	cr_assert(ab_log_wait(&b, "credentials revoked", 5000));
	deadline = tli_mono_ms() + 5000;
	do {
		rv = tl_put_in(a, "t", "A", "n2", 60000, "x", 1, NULL);
	} while (rv == TL_OK && tli_mono_ms() < deadline);
	TL_NOT_OK(rv);
	/* beta's token is unchanged: its session goes on. */
	TL_PASS(tl_put_in(bb, "t", "B", "n3", 60000, "y", 1, NULL));

	/* A broken file is not loaded: the previous table stays. */
	ab_write(b.creds, "[principal x]\ntoken_sha256 = nothex\n");
	kill(b.proc.pid, SIGHUP);
	cr_assert(ab_log_wait(&b, "credentials not reloaded", 5000));
	c = ab_client(b.url, "tok-a2");
	tl_client_close(c);
	tl_client_close(a);
	tl_client_close(bb);
	ab_stop(&b);
}

/* n creates of the body "x", due in a minute, ids chosen by the broker. */
static void
one_byte_puts(tl_put *p, int n)
{
	memset(p, 0, sizeof(*p) * (size_t) n);
	for (int i = 0; i < n; i++) {
		p[i].ts = 60000;
		p[i].rel = true;
		p[i].body = "x";
		p[i].body_len = 1;
	}
}

Test(auth, per_group_limits_refuse_a_whole_batch)
{
	ab_broker b;
	tl_client *l;
	tl_put p[3];
	int rv;

	start(&b, "auth-limit");
	l = ab_client(b.url, "tok-lim");
	one_byte_puts(p, 3);
	/* Three creates at once pass max_inflight_creates = 2: none is
	 * stored. */
	rv = tl_put_batch(l, "t", "L", p, 3);
	TL_FAIL(rv, TL_EBUSY, "batch of 3");
	cr_assert_eq(count_group(l, "L"), 0);
	TL_PASS(tl_put_batch(l, "t", "L", p, 2));
	TL_PASS(p[0].err);
	TL_PASS(p[1].err);
	cr_assert_eq(count_group(l, "L"), 2);
	cr_assert_eq(metric("timeline_quota_refusals_total{op=\"CREATE\"}"), 1);
	/* max_scheduled = 3: two more would make 4; none is stored. */
	one_byte_puts(p, 2);
	rv = tl_put_batch(l, "t", "L", p, 2);
	TL_FAIL(rv, TL_EQUOTA, "batch over max_scheduled");
	cr_assert_eq(count_group(l, "L"), 2);
	TL_PASS(tl_put_batch(l, "t", "L", p, 1));
	cr_assert_eq(count_group(l, "L"), 3);
	TL_FAIL(tl_put_in(l, "t", "L", NULL, 60000, "x", 1, NULL), TL_EQUOTA);
	tl_client_close(l);
	ab_stop(&b);
}
