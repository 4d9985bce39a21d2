/*
 * End-to-end: a client given several URLs (a cluster's nodes) finds the
 * broker that serves it and follows it. Dead entries at the head of the
 * list are skipped; a broker killed under the client is replaced by the
 * next URL without an error reaching the application, and a consumer is
 * subscribed again there. A node that is not the leader (a small mock
 * follower on TCP that answers HELLO and PING and refuses everything else
 * with TL_ENOTLEADER) sends the client to the leader it names, or to the
 * next URL when it names none; TL_ELEADERLOST is retried only for requests
 * that cannot be applied twice: against a cluster that keeps no answers,
 * creates with their own ids; against one that does (HELLO's answers_ms),
 * every write, under its first request id.
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "msgs.h"
#include "sdk_util.h"
#include "tltest.h"

static sb_broker A, B2;

/* ---- a mock follower ---- */

#define MF_MAX_CONNS 32

typedef struct mock_follower {
	int lfd;
	int port;
	char url[64];
	char leader[600]; /* the URL it names; "" for none */
	/* answer TL_ELEADERLOST to this many CREATEs first */
	atomic_int leaderlost;
	atomic_int n_notleader;
	atomic_int n_leaderlost;
	atomic_int n_hello;
	int64_t answers_ms; /* what its HELLO reply says */
	/* the request ids of the CREATEs it got, in order */
	uint32_t create_ids[8];
	atomic_int ncreate;
	pthread_t acc;
	pthread_mutex_t mtx;
	int fds[MF_MAX_CONNS];
	pthread_t thr[MF_MAX_CONNS];
	int nconn;
	atomic_bool stop;
	bool running;
} mock_follower;

typedef struct mf_arg {
	mock_follower *m;
	int fd;
} mf_arg;

static mock_follower MF, MF2;

static bool
mf_reply(int fd, const tlp_hdr *h, int what, const mock_follower *m)
{
	tli_buf b;
	tlp_w w;
	bool ok;

	tli_buf_init(&b);
	tlp_frame_begin(&b, &w, h->op, TLP_F_REPLY, h->reqid);
	if (h->op == TLP_OP_HELLO) {
		tlp_hello_rep rep = {
		    tli_wall_ms(), TLP_STR("mock-follower"), 7, m->answers_ms};
		tlp_enc_hello_rep(&w, &rep);
	} else if (h->op == TLP_OP_PING) {
		tlp_enc_ping_rep(&w, tli_wall_ms());
	} else if (what == TL_ELEADERLOST) {
		tlp_enc_error(&w, TL_ELEADERLOST, "mock: leadership lost");
	} else {
		tlp_enc_error_leader(
		    &w, TL_ENOTLEADER, "mock: a follower", m->leader);
	}
	ok = tlp_frame_end(&b, 0) == TL_OK && tt_send_all(fd, b.data, b.len);
	tli_buf_fini(&b);
	return ok;
}

static void *
mf_conn(void *arg)
{
	mf_arg *a = arg;
	mock_follower *m = a->m;
	int fd = a->fd;
	uint8_t *buf = NULL;

	free(a);
	for (;;) {
		uint8_t len[TLP_LEN_BYTES];
		uint32_t flen;
		tlp_hdr h;
		int what = TL_ENOTLEADER;

		if (!tt_recv_all(fd, len, sizeof(len)) ||
		    tlp_frame_len(len, &flen) != TL_OK ||
		    (buf = realloc(buf, flen)) == NULL ||
		    !tt_recv_all(fd, buf, flen) ||
		    tlp_hdr_decode(&h, buf, flen) != TL_OK) {
			break;
		}
		if (h.op == TLP_OP_CREATE) {
			int i = atomic_fetch_add(&m->ncreate, 1);
			if (i < 8) {
				m->create_ids[i] = h.reqid;
			}
		}
		if (h.op == TLP_OP_HELLO) {
			atomic_fetch_add(&m->n_hello, 1);
		} else if (h.op == TLP_OP_CREATE &&
		    atomic_fetch_sub(&m->leaderlost, 1) > 0) {
			what = TL_ELEADERLOST;
			atomic_fetch_add(&m->n_leaderlost, 1);
		} else if (h.op != TLP_OP_PING) {
			atomic_fetch_add(&m->n_notleader, 1);
		}
		if (!mf_reply(fd, &h, what, m)) {
			break;
		}
	}
	free(buf);
	return NULL;
}

static void *
mf_accept(void *arg)
{
	mock_follower *m = arg;

	while (!atomic_load(&m->stop)) {
		int fd = accept(m->lfd, NULL, NULL);
		if (fd < 0) {
			break;
		}
		pthread_mutex_lock(&m->mtx);
		if (m->nconn == MF_MAX_CONNS || atomic_load(&m->stop)) {
			close(fd);
		} else {
			mf_arg *a = malloc(sizeof(*a));
			cr_assert_not_null(a);
			a->m = m;
			a->fd = fd;
			m->fds[m->nconn] = fd;
			pthread_create(&m->thr[m->nconn], NULL, mf_conn, a);
			m->nconn++;
		}
		pthread_mutex_unlock(&m->mtx);
	}
	return NULL;
}

/* Start a mock on a free port of 127.0.0.1, naming leader ("" none). */
static void
mf_start_on(mock_follower *m, const char *leader)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int one = 1;

	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mtx, NULL);
	snprintf(m->leader, sizeof(m->leader), "%s", leader);
	m->lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(m->lfd >= 0);
	setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(bind(m->lfd, (struct sockaddr *) &sa, sizeof(sa)) == 0);
	cr_assert(listen(m->lfd, 16) == 0);
	cr_assert(getsockname(m->lfd, (struct sockaddr *) &sa, &sl) == 0);
	m->port = ntohs(sa.sin_port);
	snprintf(m->url, sizeof(m->url), "tcp://127.0.0.1:%d", m->port);
	pthread_create(&m->acc, NULL, mf_accept, m);
	m->running = true;
}

static void
mf_start(const char *leader)
{
	mf_start_on(&MF, leader);
}

static void
mf_stop(mock_follower *m)
{
	if (!m->running) {
		return;
	}
	m->running = false;
	atomic_store(&m->stop, true);
	shutdown(m->lfd, SHUT_RDWR);
	pthread_join(m->acc, NULL);
	close(m->lfd);
	for (int i = 0; i < m->nconn; i++) {
		shutdown(m->fds[i], SHUT_RDWR);
		pthread_join(m->thr[i], NULL);
		close(m->fds[i]);
	}
	pthread_mutex_destroy(&m->mtx);
}

/* ---- helpers ---- */

static void
teardown(void)
{
	mf_stop(&MF);
	mf_stop(&MF2);
	if (A.dir != NULL) {
		sb_stop(&A);
	}
	if (B2.dir != NULL) {
		sb_stop(&B2);
	}
}

TestSuite(failover, .fini = teardown, .timeout = 60);

static tl_client *
client_of(const char *urls)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	int rv;

	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, urls), "tl_opts_set_url(%s)", urls);
	TL_PASS(tl_opts_set_timeout(o, 5000));
	TL_PASS(tl_opts_set_reconnect(o, 20, 200));
	rv = tl_client_open(&c, o);
	tl_opts_free(o);
	TL_PASS(rv, "tl_client_open(%s)", urls);
	return c;
}

/* ---- the URL list ---- */

Test(failover, dead_first_urls_are_skipped)
{
	char urls[2048];
	tl_client *c;
	tl_message *m = NULL;
	int port = tt_free_port();

	sb_start(&A, "sdk-fo1");
	/* nothing listens on the first two */
	snprintf(urls, sizeof(urls),
	    "ipc://%s/nobody.sock, tcp://127.0.0.1:%d,%s", A.dir, port, A.url);
	c = client_of(urls);
	sb_topic(c, "fo", 0);
	TL_PASS(tl_put_in(c, "fo", "p", "m1", 60000, "x", 1, NULL));
	TL_PASS(tl_get(c, "fo", "m1", &m));
	tl_message_free(m);
	tl_client_close(c);
}

Test(failover, a_list_of_dead_urls_fails_to_open)
{
	char urls[2048];
	tl_opts *o = NULL;
	tl_client *c = NULL;

	sb_start(&A, "sdk-fo2");
	snprintf(urls, sizeof(urls), "ipc://%s/a.sock,ipc://%s/b.sock", A.dir,
	    A.dir);
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, urls));
	TL_FAIL(tl_client_open(&c, o), TL_ECONN);
	cr_assert_null(c);
	/* malformed lists are refused at once */
	TL_FAIL(tl_opts_set_url(o, "tcp://a:1,,tcp://b:2"), TL_EINVAL);
	TL_FAIL(tl_opts_set_url(o, "tcp://a:1,"), TL_EINVAL);
	TL_FAIL(tl_opts_set_url(o, "tcp://a:1,http://b:2"), TL_EINVAL);
	tl_opts_free(o);
}

/* The broker in use is killed: the client moves to the next URL, the
 * application sees no error, and the consumer is subscribed there. */
Test(failover, killed_broker_moves_to_the_next_url)
{
	char urls[2048];
	tl_client *c, *ca, *cb;
	tl_consumer *k = NULL;
	tl_consumer_conf conf = {
	    .topic = "fo", .consumer_id = "keeper", .credit = 4};
	tl_lease *l = NULL;
	tl_message *m = NULL;
	tl_counts cnt;

	sb_start(&A, "sdk-fo3a");
	sb_start(&B2, "sdk-fo3b");
	ca = sb_client(&A);
	cb = sb_client(&B2);
	sb_topic(ca, "fo", 0);
	sb_topic(cb, "fo", 0);
	snprintf(urls, sizeof(urls), "%s,%s", A.url, B2.url);
	c = client_of(urls);
	TL_PASS(tl_consumer_open(&k, c, &conf));
	TL_PASS(tl_put_in(c, "fo", "p", "m1", 0, "one", 3, NULL));
	cr_assert_eq(sb_poll_n(k, &l, 1, 5000), 1);
	cr_assert_str_eq(tl_lease_id(l), "m1");
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	l = NULL;
	TL_FAIL(tl_get(ca, "fo", "m1", &m), TL_ENOTFOUND, "done on A");

	tl_client_close(ca);
	sb_kill(&A, SIGKILL);
	/* no retry loop: the request waits for the next connection */
	TL_PASS(tl_put_in(c, "fo", "p", "m2", 0, "two", 3, NULL),
	    "put after the kill");
	TL_PASS(tl_count(c, "fo", 0, TL_TS_MAX, &cnt));
	/* it is on the second broker, and the consumer gets it there */
	TL_PASS(tl_get(cb, "fo", "m2", &m));
	tl_message_free(m);
	cr_assert_eq(sb_poll_n(k, &l, 1, 5000), 1, "delivered after failover");
	cr_assert_str_eq(tl_lease_id(l), "m2");
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	tl_consumer_close(k);
	tl_client_close(c);
	tl_client_close(cb);
}

/* ---- following the leader ---- */

/* The follower names the leader, a URL the client was not given: every
 * request lands there, consumers included, and none reports
 * TL_ENOTLEADER. */
Test(failover, not_leader_redirects_to_the_named_leader)
{
	tl_client *c, *ca;
	tl_consumer *k = NULL;
	tl_consumer_conf conf = {.topic = "fo", .consumer_id = "k1"};
	tl_lease *l = NULL;
	tl_message *m = NULL;

	sb_start(&A, "sdk-fo4");
	mf_start(A.url);
	c = client_of(MF.url);
	sb_topic(c, "fo", 0);
	TL_PASS(tl_put_in(c, "fo", "p", "m1", 0, "one", 3, NULL));
	TL_PASS(tl_consumer_open(&k, c, &conf));
	cr_assert_eq(sb_poll_n(k, &l, 1, 5000), 1);
	cr_assert_str_eq(tl_lease_id(l), "m1");
	TL_PASS(tl_lease_delete(l));
	tl_lease_free(l);
	cr_assert_geq(atomic_load(&MF.n_notleader), 1);
	/* the writes are on the leader */
	ca = sb_client(&A);
	TL_FAIL(tl_get(ca, "fo", "m1", &m), TL_ENOTFOUND);
	TL_PASS(tl_put_in(c, "fo", "p", "m2", 60000, "", 0, NULL));
	TL_PASS(tl_get(ca, "fo", "m2", &m));
	tl_message_free(m);
	tl_consumer_close(k);
	tl_client_close(c);
	tl_client_close(ca);
}

/* A follower that knows no leader (an election): the client tries the
 * next URL after a short pause. */
Test(failover, not_leader_without_a_name_tries_the_next_url)
{
	char urls[2048];
	tl_client *c;
	tl_message *m = NULL;

	sb_start(&A, "sdk-fo5");
	mf_start("");
	snprintf(urls, sizeof(urls), "%s,%s", MF.url, A.url);
	c = client_of(urls);
	cr_assert_eq(atomic_load(&MF.n_hello), 1, "connected to the mock");
	sb_topic(c, "fo", 0);
	TL_PASS(tl_put_in(c, "fo", "p", "m1", 60000, "x", 1, NULL));
	TL_PASS(tl_get(c, "fo", "m1", &m));
	tl_message_free(m);
	cr_assert_geq(atomic_load(&MF.n_notleader), 1);
	tl_client_close(c);
}

/* Only a follower, whose leader never answers: the request fails when
 * its timeout passes, with TL_ENOTLEADER (nothing was applied). */
Test(failover, not_leader_until_the_timeout)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	tl_topic_conf tc = {.name = "fo"};
	int64_t t0;

	mf_start("");
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, MF.url));
	TL_PASS(tl_opts_set_timeout(o, 800));
	TL_PASS(tl_opts_set_reconnect(o, 20, 100));
	TL_PASS(tl_client_open(&c, o));
	tl_opts_free(o);
	t0 = tli_mono_ms();
	TL_FAIL(tl_topic_create(c, &tc), TL_ENOTLEADER);
	cr_assert_geq(tli_mono_ms() - t0, 700, "retried until the timeout");
	tl_client_close(c);
}

/* TL_ELEADERLOST (outcome unknown): a batch whose messages all carry
 * their own ids is sent again (on the leader the node then names); one
 * with a generated id is not, and the application hears the unknown
 * outcome. */
Test(failover, leader_lost_retries_only_explicit_ids)
{
	tl_client *c, *ca;
	tl_put p[2];
	tl_message *m = NULL;
	char id[TL_MAX_ID_LEN + 1];

	sb_start(&A, "sdk-fo6");
	ca = sb_client(&A);
	sb_topic(ca, "fo", 0);
	mf_start(A.url);
	atomic_store(&MF.leaderlost, 1);
	c = client_of(MF.url);
	memset(p, 0, sizeof(p));
	p[0].id = "e1";
	p[0].ts = 60000;
	p[0].rel = true;
	p[1].id = "e2";
	p[1].ts = 60000;
	p[1].rel = true;
	TL_PASS(tl_put_batch(c, "fo", "p", p, 2));
	TL_PASS(p[0].err);
	TL_PASS(p[1].err);
	cr_assert_eq(atomic_load(&MF.n_leaderlost), 1);
	TL_PASS(tl_get(ca, "fo", "e2", &m));
	tl_message_free(m);
	tl_client_close(c);

	/* a generated id: not sent again */
	atomic_store(&MF.leaderlost, 1);
	c = client_of(MF.url);
	TL_FAIL(
	    tl_put_in(c, "fo", "p", NULL, 60000, "", 0, id), TL_ELEADERLOST);
	cr_assert_eq(atomic_load(&MF.n_leaderlost), 2);
	tl_client_close(c);
	tl_client_close(ca);
}

/* A cluster that keeps answers (HELLO's answers_ms): a create with a
 * generated id whose outcome was unknown is sent again, under the same
 * request id (the key its answer is kept under), and lands once. */
Test(failover, leader_lost_resends_every_write_when_answers_are_kept)
{
	tl_client *c, *ca;
	tl_counts cnt;
	char id[TL_MAX_ID_LEN + 1];

	sb_start(&A, "sdk-fo8");
	ca = sb_client(&A);
	sb_topic(ca, "fo", 0);
	mf_start(A.url);
	MF.answers_ms = 30000;
	atomic_store(&MF.leaderlost, 1);
	c = client_of(MF.url);
	TL_PASS(tl_put_in(c, "fo", "p", NULL, 60000, "g", 1, id));
	cr_assert(id[0] != '\0');
	/* TL_ELEADERLOST, then the same request again (TL_ENOTLEADER,
	 * naming A, where it is applied) */
	cr_assert_eq(atomic_load(&MF.n_leaderlost), 1);
	cr_assert_eq(atomic_load(&MF.ncreate), 2);
	cr_assert_eq(MF.create_ids[1], MF.create_ids[0],
	    "sent again under another request id (%u, then %u)",
	    MF.create_ids[0], MF.create_ids[1]);
	TL_PASS(tl_count(ca, "fo", 0, TL_TS_MAX, &cnt));
	cr_assert_eq(cnt.available + cnt.waiting + cnt.processing, 1);
	tl_client_close(c);
	tl_client_close(ca);
}

/* Two nodes that name each other as the leader (they disagree during an
 * election): the client goes back and forth with a growing pause, not in
 * a tight loop, and the request ends at its timeout with TL_ENOTLEADER
 * (the last answer, when the deadline finds it waiting between sessions)
 * or TL_ETIMEDOUT (when it finds it sent and not yet answered: its
 * outcome unknown). */
Test(failover, nodes_that_name_each_other_are_not_hammered)
{
	tl_opts *o = NULL;
	tl_client *c = NULL;
	tl_topic_conf tc = {.name = "fo"};
	int hellos, rv;
	int64_t t0, took;

	mf_start_on(&MF, "");
	mf_start_on(&MF2, MF.url);
	snprintf(MF.leader, sizeof(MF.leader), "%s", MF2.url);
	TL_PASS(tl_opts_alloc(&o));
	TL_PASS(tl_opts_set_url(o, MF.url));
	TL_PASS(tl_opts_set_timeout(o, 1500));
	TL_PASS(tl_opts_set_reconnect(o, 20, 100));
	TL_PASS(tl_client_open(&c, o));
	tl_opts_free(o);
	t0 = tli_mono_ms();
	rv = tl_topic_create(c, &tc);
	took = tli_mono_ms() - t0;
	cr_assert(rv == TL_ENOTLEADER || rv == TL_ETIMEDOUT, "got %s",
	    tl_strerror(rv));
	cr_assert(took >= 1450 && took < 3000, "ended after %lld ms",
	    (long long) took);
	tl_client_close(c);
	hellos = atomic_load(&MF.n_hello) + atomic_load(&MF2.n_hello);
	/* pauses of 20, 40, 80 ... 1000 ms: a handful of sessions */
	cr_assert(hellos >= 3 && hellos <= 12, "%d sessions in 1.5 s", hellos);
}
