/*
 * End-to-end: producer and admin operations of libtimeline against the
 * real broker — topics, put/get/list/count/move/delete round trips, the
 * precise errors, large batches split into frames, and async puts.
 */
#include "tltest.h"
#include "sdk_util.h"

SB_SUITE(roundtrip, "sdk-rt");

Test(roundtrip, topics)
{
	tl_topic_info t, *v = NULL;
	size_t n = 0;
	tl_topic_conf conf = {.name = "t1", .buckets = 4, .max_deliveries = 3};
	bool found = false;

	TL_PASS(tl_topic_create(C, &conf));
	TL_FAIL(tl_topic_create(C, &conf), TL_ETOPICEXISTS);
	TL_PASS(tl_topic_get(C, "t1", &t));
	cr_assert_str_eq(t.name, "t1");
	cr_assert_eq(t.buckets, 4);
	cr_assert_eq(t.max_deliveries, 3);
	cr_assert_eq(t.messages, 0);
	TL_PASS(tl_topic_list(C, &v, &n));
	for (size_t i = 0; i < n; i++) {
		found |= strcmp(v[i].name, "t1") == 0;
	}
	tl_free(v);
	cr_assert(found);
	TL_PASS(tl_topic_delete(C, "t1"));
	TL_FAIL(tl_topic_get(C, "t1", &t), TL_ENOTOPIC);
	TL_FAIL(tl_topic_delete(C, "t1"), TL_ENOTOPIC);
	TL_FAIL(tl_topic_get(C, "", &t), TL_EBADID);
}

Test(roundtrip, put_get_list_count_move_delete)
{
	char id[TL_MAX_ID_LEN + 1];
	tl_message *m = NULL;
	tl_entry *e = NULL;
	size_t n = 0;
	bool more = true;
	tl_counts k;
	uint64_t ver = 0;
	int64_t now = tl_client_broker_now(C);
	int64_t at = now + 3600000;

	sb_topic(C, "rt", 0);
	TL_PASS(tl_put_at(C, "rt", "g1", "natural-1", at, "abc", 3, id));
	cr_assert_str_eq(id, "natural-1");
	TL_FAIL(tl_put_at(C, "rt", "g1", "natural-1", at, "abc", 3, NULL),
	    TL_EEXISTS);
	TL_PASS(tl_put_in(C, "rt", "g1", NULL, 7200000, "xy", 2, id));
	cr_assert_eq(strlen(id), TL_GEN_ID_LEN, "generated id '%s'", id);

	TL_PASS(tl_get(C, "rt", "natural-1", &m));
	cr_assert_str_eq(m->id, "natural-1");
	cr_assert_eq(m->ts, at);
	cr_assert_str_eq(m->owner, "g1");
	cr_assert_str_eq(m->consumer, "");
	cr_assert_eq(m->version, 1);
	cr_assert_eq(m->body_len, 3);
	cr_assert_eq(memcmp(m->body, "abc", 3), 0);
	tl_message_free(m);
	TL_FAIL(tl_get(C, "rt", "nope", &m), TL_ENOTFOUND);
	TL_FAIL(tl_get(C, "nosuch", "nope", &m), TL_ENOTOPIC);

	TL_PASS(tl_list(C, "rt", "g1", 10, NULL, &e, &n, &more));
	cr_assert_eq(n, 2);
	cr_assert(!more);
	cr_assert_str_eq(e[0].id, "natural-1");
	cr_assert_str_eq(e[1].id, id);
	cr_assert(e[0].ts < e[1].ts);
	/* the next page after the first entry */
	{
		tl_entry *e2 = NULL;
		size_t n2 = 0;
		TL_PASS(tl_list(C, "rt", "g1", 10, &e[0], &e2, &n2, &more));
		cr_assert_eq(n2, 1);
		cr_assert_str_eq(e2[0].id, id);
		tl_free(e2);
	}
	tl_free(e);
	TL_PASS(tl_list(C, "rt", "other", 10, NULL, &e, &n, NULL));
	cr_assert_eq(n, 0);
	tl_free(e);

	TL_PASS(tl_count(C, "rt", 0, TL_TS_MAX, &k));
	cr_assert_eq(k.waiting, 2);
	cr_assert_eq(k.available + k.processing, 0);

	TL_FAIL(tl_move(C, "rt", "g2", "natural-1", 0, 5, true, &ver),
	    TL_ENOTOWNER);
	TL_FAIL(tl_move(C, "rt", "g1", "natural-1", 7, at, false, &ver),
	    TL_EVERSION);
	TL_PASS(
	    tl_move(C, "rt", "g1", "natural-1", 1, now - 1000, false, &ver));
	cr_assert_eq(ver, 2);
	TL_PASS(tl_count(C, "rt", 0, TL_TS_MAX, &k));
	cr_assert_eq(k.available, 1);
	cr_assert_eq(k.waiting, 1);

	TL_PASS(tl_delete(C, "rt", "g1", "natural-1", 0));
	TL_FAIL(tl_delete(C, "rt", "g1", "natural-1", 0), TL_ENOTFOUND);
	TL_PASS(tl_delete(C, "rt", "g1", id, 0));
	TL_PASS(tl_count(C, "rt", 0, TL_TS_MAX, &k));
	cr_assert_eq(k.available + k.waiting + k.processing, 0);
}

Test(roundtrip, large_batch_is_split)
{
	size_t n = TL_MAX_BATCH + 904;
	tl_put *p = calloc(n, sizeof(*p));
	tl_counts k;

	sb_topic(C, "big", 0);
	for (size_t i = 0; i < n; i++) {
		p[i].ts = 3600000 + (int64_t) i;
		p[i].rel = true;
		p[i].body = "b";
		p[i].body_len = 1;
	}
	TL_PASS(tl_put_batch(C, "big", "g", p, n));
	for (size_t i = 0; i < n; i++) {
		TL_PASS(p[i].err, "item %zu", i);
		cr_assert_eq(p[i].version, 1);
		cr_assert(p[i].id_out[0] != '\0');
	}
	TL_PASS(tl_count(C, "big", 0, TL_TS_MAX, &k));
	cr_assert_eq(k.waiting, n);
	free(p);
}

typedef struct async_done {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int calls;
	int err;
} async_done;

static void
on_done(void *arg, int err)
{
	async_done *d = arg;
	pthread_mutex_lock(&d->m);
	d->calls++;
	d->err = err;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->m);
}

Test(roundtrip, async_put)
{
	tl_put p[3];
	async_done d = {
	    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, -1};

	sb_topic(C, "as", 0);
	memset(p, 0, sizeof(p));
	for (int i = 0; i < 3; i++) {
		p[i].ts = 60000;
		p[i].rel = true;
	}
	p[1].id = "dup";
	p[2].id = "dup";
	TL_PASS(tl_put_batch_async(C, "as", "g", p, 3, on_done, &d));
	pthread_mutex_lock(&d.m);
	while (d.calls == 0) {
		pthread_cond_wait(&d.cv, &d.m);
	}
	pthread_mutex_unlock(&d.m);
	cr_assert_eq(d.calls, 1);
	TL_PASS(d.err);
	TL_PASS(p[0].err);
	TL_PASS(p[1].err);
	TL_FAIL(p[2].err, TL_EEXISTS);
	TL_FAIL(
	    tl_put_batch_async(C, "nosuch", "g", p, 1, NULL, NULL), TL_EINVAL);
}

Test(roundtrip, clock_and_bad_input)
{
	int64_t off = tl_client_clock_offset(C);
	tl_client *c2 = NULL;
	tl_opts *o = NULL;

	/* the broker runs on this machine */
	cr_assert(off > -1000 && off < 1000, "offset %lld", (long long) off);
	int rv = tl_put_in(C, "nosuch", "g", NULL, 10, "", 0, NULL);
	TL_FAIL(rv, TL_ENOTOPIC);
	TL_FAIL(tl_put_in(C, "default", "", NULL, 10, "", 0, NULL), TL_EBADID);
	tl_opts_alloc(&o);
	TL_FAIL(tl_opts_set_url(o, "http://x"), TL_EINVAL);
	TL_PASS(tl_opts_set_url(o, "ipc:///nonexistent/dir/sock"));
	TL_FAIL(tl_client_open(&c2, o), TL_ECONN);
	cr_assert_null(c2);
	tl_opts_free(o);
	tl_client_close(NULL);
	tl_opts_free(NULL);
}
