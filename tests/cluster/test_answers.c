/*
 * Answers kept (docs/cluster.md, "Requests sent again"), on a cluster of
 * real timelined processes: a write request sent again under the client
 * id of its HELLO and its first request id gets its first answer and is
 * not applied twice - on the same leader, after that leader is killed
 * (the new leader has the answer from the log), after the message it
 * created was deleted, a LOCK sent again gets the same lease, a topic
 * created or deleted again gets its first answer; another
 * request under a reused id is refused; a
 * client that names no id, or a single node, gets none of it; and the
 * answers are gone from every store once cluster_answers_ms has passed.
 */
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#include "tltest.h"

#include "cluster_util.h"
#include "store_int.h"

static tc_cluster C;
static rc_broker B;

static void
answers_fini(void)
{
	tc_fini(&C);
	if (B.dir != NULL) {
		rc_broker_stop(&B);
	}
}

TestSuite(answers, .fini = answers_fini, .timeout = 120);

/* A client of node i that names itself `id` (0: no id). */
static rc_client *
named_client(const char *url, uint64_t id, int64_t *answers_ms)
{
	rc_client *c = rc_connect(url, 5000);
	tlp_hello_rep rep;

	cr_assert_not_null(c, "connect %s", url);
	TL_PASS(rc_hello_client(c, "answers", id, &rep));
	if (answers_ms != NULL) {
		*answers_ms = rep.answers_ms;
	}
	return c;
}

/* One batch op of one item under request id reqid: the item's result
 * (err, id, version) into *res, the request's error returned. */
typedef struct one_res {
	int err;
	char id[TL_MAX_ID_LEN + 1];
	uint64_t version;
	int64_t ts;
} one_res;

static int
send_one(rc_client *c, uint32_t reqid, uint8_t op, const char *id,
    const char *body, int64_t ts, one_res *res)
{
	tlp_item it = {.id = TLP_STR(id), .ts = ts, .rel = true};
	rc_results out = {0};
	int rv;

	it.body = body;
	it.body_len = body != NULL ? strlen(body) : 0;
	c->next_id = reqid;
	memset(res, 0, sizeof(*res));
	rv = rc_batch(c, op, "t", "app", &it, 1, &out);
	if (rv == TL_OK) {
		cr_assert_eq(out.n, 1);
		res->err = out.v[0].err;
		snprintf(res->id, sizeof(res->id), "%.*s", (int) out.v[0].id.n,
		    out.v[0].id.p != NULL ? out.v[0].id.p : "");
		res->version = out.v[0].version;
		res->ts = out.v[0].ts;
		rc_results_free(&out);
	}
	return rv;
}

static uint64_t
messages(rc_client *c)
{
	tlp_topic t;

	TL_PASS(rc_topic_get(c, "t", &t));
	return t.messages;
}

static int
leader_now(void)
{
	int l = tc_leader(&C, 15000);

	cr_assert(l >= 0, "no leader within 15 s");
	return l;
}

Test(answers, a_write_sent_again_gets_its_first_answer)
{
	const uint64_t me = 0x5eed0001;
	one_res first, again, del, del2, other;
	rc_client *a, *b, *plain;
	int64_t keep = -1;
	uint64_t base;
	int l;

	tc_init(&C, 3, "cluster-answers");
	tc_start_all(&C);
	l = leader_now();
	a = named_client(C.url[l], me, &keep);
	cr_assert_eq(keep, 30000, "HELLO's answers_ms: %" PRId64, keep);
	base = messages(a);

	/* a create with a generated id, then the same request again on a
	 * new connection (as after a lost one): the same message, once */
	TL_PASS(send_one(a, 100, TLP_OP_CREATE, "", "b1", 3600000, &first));
	TL_PASS(first.err);
	cr_assert(first.id[0] != '\0' && first.version != 0);
	b = named_client(C.url[l], me, NULL);
	TL_PASS(send_one(b, 100, TLP_OP_CREATE, "", "b1", 3600000, &again));
	TL_PASS(again.err);
	cr_assert_str_eq(again.id, first.id);
	cr_assert_eq(again.version, first.version);
	cr_assert_eq(again.ts, first.ts);
	cr_assert_eq(messages(b), base + 1, "the repeat made a second message");

	/* deleted, then the create sent again: still its first answer, and
	 * the message does not come back; the delete sent again answers OK */
	TL_PASS(send_one(a, 101, TLP_OP_DELETE, first.id, NULL, 0, &del));
	TL_PASS(del.err);
	TL_PASS(send_one(b, 100, TLP_OP_CREATE, "", "b1", 3600000, &again));
	cr_assert_eq(again.err, TL_OK);
	cr_assert_str_eq(again.id, first.id);
	TL_PASS(send_one(b, 101, TLP_OP_DELETE, first.id, NULL, 0, &del2));
	cr_assert_eq(del2.err, TL_OK, "the repeated delete answered %s",
	    tl_strerror(del2.err));
	cr_assert_eq(messages(b), base, "the repeat created it again");

	/* another request under a used id: refused, nothing done */
	TL_PASS(send_one(b, 100, TLP_OP_CREATE, "", "b2", 3600000, &other));
	cr_assert_eq(other.err, TL_EINVAL);
	cr_assert_eq(messages(b), base);

	/* another client, the same request id: its own request */
	rc_close(b);
	b = named_client(C.url[l], me + 1, NULL);
	TL_PASS(send_one(b, 100, TLP_OP_CREATE, "", "b1", 3600000, &other));
	TL_PASS(other.err);
	cr_assert_str_neq(other.id, first.id);
	cr_assert_eq(messages(b), base + 1);
	/* the repeats of the create (2), of the delete, and the refused one */
	cr_assert_eq(tc_metric(&C, l, "timeline_answers_replayed_total"), 4);

	/* no client id: nothing kept, a repeat is a second create */
	plain = named_client(C.url[l], 0, &keep);
	cr_assert_eq(keep, 0);
	TL_PASS(send_one(plain, 100, TLP_OP_CREATE, "", "p", 3600000, &first));
	TL_PASS(send_one(plain, 100, TLP_OP_CREATE, "", "p", 3600000, &again));
	TL_PASS(again.err);
	cr_assert_str_neq(again.id, first.id);
	cr_assert_eq(messages(plain), base + 3);
	rc_close(plain);
	rc_close(b);
	rc_close(a);
}

static void
enc_lock(tlp_w *w, const void *arg)
{
	tlp_enc_lock(w, arg);
}

/* LOCK of message `id` (created by group app if missing) for consumer
 * "holder" under request id reqid: the broker's error, the lease in *d. */
static int
send_lock(rc_client *c, uint32_t reqid, const char *id, tlp_delivery *d)
{
	tlp_lock m = {
	    TLP_STR("t"), TLP_STR("holder"), TLP_STR(id), 5000, TLP_STR("app")};
	rc_frame *f = NULL;
	tlp_r r;
	int rv;

	c->next_id = reqid;
	memset(d, 0, sizeof(*d));
	rv = rc_req(c, TLP_OP_LOCK, enc_lock, &m, &f, &r);
	if (rv == TL_OK) {
		TL_PASS(tlp_dec_lock_rep(&r, d));
		d->id = (tlp_str){NULL, 0}; /* points into f */
		d->owner = d->id;
		d->body = NULL;
	}
	rc_frame_free(f);
	return rv;
}

Test(answers, a_lock_sent_again_is_the_same_lease)
{
	const uint64_t me = 0x5eed0005;
	tlp_delivery first, again, other;
	rc_client *a, *b;
	int l;

	tc_init(&C, 3, "cluster-answers-lock");
	tc_start_all(&C);
	l = leader_now();
	a = named_client(C.url[l], me, NULL);
	TL_PASS(send_lock(a, 40, "L1", &first));
	cr_assert(first.version != 0 && first.lease_until != 0);
	/* the same LOCK again (a lost answer): the same lease, not a
	 * refusal of a lock its sender holds without knowing it */
	b = named_client(C.url[l], me, NULL);
	TL_PASS(send_lock(b, 40, "L1", &again));
	cr_assert_eq(again.version, first.version);
	cr_assert_eq(again.lease_until, first.lease_until);
	cr_assert_eq(again.deliveries, first.deliveries);
	/* a new LOCK of it is refused: held */
	TL_FAIL(send_lock(b, 41, "L1", &other), TL_ELEASED);
	rc_close(b);
	rc_close(a);
}

static void
enc_name(tlp_w *w, const void *arg)
{
	tlp_enc_name(w, TLP_STR((const char *) arg));
}

static int
topic_delete(rc_client *c, uint32_t reqid, const char *name)
{
	c->next_id = reqid;
	return rc_req(c, TLP_OP_TOPIC_DELETE, enc_name, name, NULL, NULL);
}

static int
topic_create(rc_client *c, uint32_t reqid, const char *name)
{
	c->next_id = reqid;
	return rc_topic_create(c, name, 0);
}

Test(answers, topic_create_and_delete_sent_again)
{
	const uint64_t me = 0x5eed0006;
	rc_client *a, *b;
	tlp_topic t;
	int l;

	tc_init(&C, 3, "cluster-answers-topic");
	tc_start_all(&C);
	l = leader_now();
	a = named_client(C.url[l], me, NULL);
	b = named_client(C.url[l], me, NULL);
	TL_PASS(topic_create(a, 60, "tx"));
	/* the same create again: its answer, not TL_ETOPICEXISTS */
	TL_PASS(topic_create(b, 60, "tx"));
	TL_FAIL(topic_create(b, 62, "tx"), TL_ETOPICEXISTS);
	TL_PASS(topic_delete(a, 61, "tx"));
	/* the delete again: its answer, not TL_ENOTOPIC; the create again
	 * after the delete: its answer, and the topic is not made again */
	TL_PASS(topic_delete(b, 61, "tx"));
	TL_PASS(topic_create(b, 60, "tx"));
	TL_FAIL(rc_topic_get(b, "tx", &t), TL_ENOTOPIC);
	rc_close(b);
	rc_close(a);
}

Test(answers, the_new_leader_has_the_answer)
{
	const uint64_t me = 0x5eed0002;
	one_res first, again;
	rc_client *a;
	uint64_t base;
	int l, n;

	tc_init(&C, 3, "cluster-answers-kill");
	tc_start_all(&C);
	l = leader_now();
	a = named_client(C.url[l], me, NULL);
	base = messages(a);
	TL_PASS(send_one(a, 7, TLP_OP_CREATE, "", "k", 3600000, &first));
	TL_PASS(first.err);
	rc_close(a);

	/* the leader dies right after answering; the client, not knowing
	 * (its connection lost), sends the create again to the next one */
	cr_assert_eq(kill(C.p[l].pid, SIGKILL), 0);
	tt_proc_wait_exit(&C.p[l], 5000);
	n = leader_now();
	cr_assert_neq(n, l);
	a = named_client(C.url[n], me, NULL);
	TL_PASS(send_one(a, 7, TLP_OP_CREATE, "", "k", 3600000, &again));
	TL_PASS(again.err);
	cr_assert_str_eq(again.id, first.id);
	cr_assert_eq(again.version, first.version);
	cr_assert_eq(
	    messages(a), base + 1, "created twice across the failover");
	rc_close(a);
	tc_start(&C, l);
}

/* How many kept answers ('R' keys) and age keys ('Q') node i's store has
 * (the node stopped). */
static void
count_kept(int i, int *nr, int *nq)
{
	tli_store *s = tc_open_store(&C, i);
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_iterator_t *it =
	    rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_DEFAULT]);

	*nr = *nq = 0;
	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl;
		const char *k = rocksdb_iter_key(it, &kl);
		*nr += k[0] == 'R' && kl == 13;
		*nq += k[0] == 'Q' && kl == 21;
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	tli_store_close(s);
}

Test(answers, kept_for_cluster_answers_ms_then_gone_everywhere)
{
	const uint64_t me = 0x5eed0003;
	one_res first, again, x;
	rc_client *a;
	int l, nr, nq;

	tc_init(&C, 3, "cluster-answers-expire");
	for (int i = 0; i < 3; i++) {
		tc_node_set(&C, i, "cluster_answers_ms", "1000");
	}
	tc_start_all(&C);
	l = leader_now();
	a = named_client(C.url[l], me, NULL);
	for (uint32_t r = 1; r <= 50; r++) {
		TL_PASS(send_one(a, r, TLP_OP_CREATE, "", "e", 3600000, &x));
		TL_PASS(x.err);
		if (r == 1) {
			first = x;
		}
	}
	TL_PASS(send_one(a, 1, TLP_OP_CREATE, "", "e", 3600000, &again));
	cr_assert_str_eq(again.id, first.id, "forgotten within the window");

	/* past the window, the next write deletes what expired; the old
	 * request id is then a new request */
	tt_nap_ms(1500);
	TL_PASS(send_one(a, 51, TLP_OP_CREATE, "", "e", 3600000, &x));
	TL_PASS(send_one(a, 1, TLP_OP_CREATE, "", "e", 3600000, &again));
	TL_PASS(again.err);
	cr_assert_str_neq(again.id, first.id, "kept past cluster_answers_ms");
	cr_assert(tc_converged(&C, l, 10000));
	rc_close(a);
	cr_assert_eq(tc_metric(&C, l, "timeline_answers_expired_total"), 50);
	cr_assert_eq(tc_metric(&C, l, "timeline_answers_kept_total"), 52);

	/* every store holds the two answers of the last second, no more */
	for (int i = 0; i < 3; i++) {
		tt_proc_stop_clean(&C.p[i]);
	}
	for (int i = 0; i < 3; i++) {
		count_kept(i, &nr, &nq);
		cr_assert(nr == 2 && nq == 2,
		    "node %d keeps %d answers and %d age keys, not 2", i + 1,
		    nr, nq);
	}
}

Test(answers, a_single_node_keeps_none)
{
	rc_client *c;
	int64_t keep = -1;

	rc_broker_start(&B, "answers-single");
	c = named_client(B.url, 0x5eed0004, &keep);
	cr_assert_eq(keep, 0, "a single node said it keeps answers");
	rc_close(c);
}
