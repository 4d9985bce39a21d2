/*
 * The request/reply operations of the public API: topic administration,
 * the producer's batches (create, move, delete, split into frames of at
 * most TL_MAX_BATCH items), lookups, lists, counts and the dead-letter
 * list. Each encodes its body with proto/msgs.h, goes through tli_call or
 * tli_submit, and decodes its reply on the connection thread into the
 * caller's memory.
 */
#include "internal.h"

static bool
ops_name_ok(const char *s)
{
	return s != NULL && *s != '\0' && strlen(s) <= TL_MAX_NAME_LEN;
}

static int
ops_name_err(const char *s)
{
	if (s == NULL) {
		return TL_EINVAL;
	}
	return *s == '\0' ? TL_EBADID : TL_ETOOLARGE;
}

/* The checks a request starts with, in this order: a missing argument
 * (TL_EINVAL), the topic name, then the message id where there is one. */
static int
ops_check(bool missing, const char *topic, const char *id)
{
	if (missing) {
		return TL_EINVAL;
	}
	if (!ops_name_ok(topic)) {
		return ops_name_err(topic);
	}
	return id != NULL ? tli_len_check(strlen(id), TL_MAX_ID_LEN) : TL_OK;
}

/* ops_check, then the frame of op started in b. */
static int
ops_start(tli_buf *b, tlp_w *w, uint8_t op, bool missing, const char *topic,
    const char *id)
{
	int rv = ops_check(missing, topic, id);

	if (rv == TL_OK) {
		tli_frame_start(b, w, op);
	}
	return rv;
}

/* A user's array of n (+1, so 0 allocates) elements of usz bytes, each
 * converted by conv from the decoded element ssz bytes apart in src, which
 * is freed; NULL when out of memory. */
static void *
ops_convert(void *src, size_t n, size_t ssz, size_t usz,
    void (*conv)(void *dst, const void *src))
{
	char *v = tli_zalloc(usz * (n + 1));

	for (size_t i = 0; v != NULL && i < n; i++) {
		conv(v + i * usz, (const char *) src + i * ssz);
	}
	tli_free(src);
	return v;
}

/* A reply of exactly want item results. */
static int
ops_dec_results(tlp_r *r, size_t want, tlp_result **res)
{
	size_t n = 0;
	int rv = tlp_dec_results(r, res, &n);

	if (rv == TL_OK && n != want) {
		tli_free(*res);
		*res = NULL;
		rv = TL_EPROTO;
	}
	return rv;
}

/* The completion of an asynchronous call: done runs on the client's
 * callback thread with err, then self (what holds this) is freed. */
typedef struct ops_async {
	tl_done_fn done;
	void *arg;
	int err;
	void *self;
	tli_cb cb;
} ops_async;

static void
ops_async_run(void *arg)
{
	ops_async *a = arg;

	a->done(a->arg, a->err);
	tli_free(a->self);
}

static void
ops_async_post(tl_client *c, ops_async *a, void *self, int err)
{
	a->err = err;
	a->self = self;
	a->cb.fn = ops_async_run;
	a->cb.arg = a;
	tli_cb_post(c, &a->cb);
}

/* ---- topics ---- */

int
tl_topic_create(tl_client *c, const tl_topic_conf *conf)
{
	tli_buf b;
	tlp_w w;
	tlp_topic t;
	int rv;

	if ((rv = ops_start(&b, &w, TLP_OP_TOPIC_CREATE,
	         c == NULL || conf == NULL, conf != NULL ? conf->name : NULL,
	         NULL)) != TL_OK) {
		return rv;
	}
	memset(&t, 0, sizeof(t));
	t.name = TLP_STR(conf->name);
	t.buckets = conf->buckets;
	t.max_body = conf->max_body;
	t.default_lease_ms = conf->default_lease_ms;
	t.max_lease_ms = conf->max_lease_ms;
	t.max_deliveries = conf->max_deliveries;
	tlp_enc_topic_create(&w, &t);
	return tli_call(c, &b, TLP_OP_TOPIC_CREATE, NULL, NULL);
}

int
tl_topic_delete(tl_client *c, const char *name)
{
	tli_buf b;
	tlp_w w;
	int rv;

	if ((rv = ops_start(&b, &w, TLP_OP_TOPIC_DELETE, c == NULL, name,
	         NULL)) != TL_OK) {
		return rv;
	}
	tlp_enc_name(&w, TLP_STR(name));
	return tli_call(c, &b, TLP_OP_TOPIC_DELETE, NULL, NULL);
}

static void
ops_topic_info(void *dst, const void *src)
{
	tl_topic_info *o = dst;
	const tlp_topic *t = src;
	size_t n = t->name.n > TL_MAX_NAME_LEN ? TL_MAX_NAME_LEN : t->name.n;

	memset(o, 0, sizeof(*o));
	if (n > 0) {
		memcpy(o->name, t->name.p, n);
	}
	o->buckets = t->buckets;
	o->max_body = t->max_body;
	o->default_lease_ms = t->default_lease_ms;
	o->max_lease_ms = t->max_lease_ms;
	o->max_deliveries = t->max_deliveries;
	o->messages = t->messages;
	o->available = t->available;
	o->waiting = t->waiting;
	o->processing = t->processing;
	o->dead = t->dead;
}

static int
topic_get_dec(void *arg, tlp_r *r)
{
	tlp_topic t;
	int rv;

	memset(&t, 0, sizeof(t));
	if ((rv = tlp_dec_topic(r, &t)) == TL_OK) {
		ops_topic_info(arg, &t);
	}
	return rv;
}

int
tl_topic_get(tl_client *c, const char *name, tl_topic_info *out)
{
	tli_buf b;
	tlp_w w;
	tl_topic_info info;
	int rv;

	if ((rv = ops_start(&b, &w, TLP_OP_TOPIC_GET, c == NULL || out == NULL,
	         name, NULL)) != TL_OK) {
		return rv;
	}
	tlp_enc_name(&w, TLP_STR(name));
	if ((rv = tli_call(c, &b, TLP_OP_TOPIC_GET, topic_get_dec, &info)) ==
	    TL_OK) {
		*out = info;
	}
	return rv;
}

typedef struct topic_list_res {
	tl_topic_info *v;
	size_t n;
} topic_list_res;

static int
topic_list_dec(void *arg, tlp_r *r)
{
	topic_list_res *res = arg;
	tlp_topic *t = NULL;
	int rv = tlp_dec_topic_list(r, &t, &res->n);

	if (rv == TL_OK &&
	    (res->v = ops_convert(t, res->n, sizeof(*t), sizeof(*res->v),
	         ops_topic_info)) == NULL) {
		res->n = 0;
		rv = TL_ENOMEM;
	}
	return rv;
}

int
tl_topic_list(tl_client *c, tl_topic_info **out, size_t *n)
{
	tli_buf b;
	tlp_w w;
	topic_list_res res = {NULL, 0};
	int rv;

	if (c == NULL || out == NULL || n == NULL) {
		return TL_EINVAL;
	}
	tli_frame_start(&b, &w, TLP_OP_TOPIC_LIST);
	tlp_w_array(&w, 0);
	if ((rv = tli_call(c, &b, TLP_OP_TOPIC_LIST, topic_list_dec, &res)) !=
	    TL_OK) {
		tli_free(res.v);
		return rv;
	}
	*out = res.v;
	*n = res.n;
	return TL_OK;
}

void
tl_free(void *p)
{
	tli_free(p);
}

/* ---- owner batches ---- */

/* A batch of puts, possibly cut into several frames (parts). */
typedef struct pbatch {
	tl_client *c;
	tl_put *puts;
	size_t remaining; /* parts not answered yet */
	int err;
	tli_waiter *wait; /* blocking callers: completed inline */
	ops_async as;     /* asynchronous callers */
} pbatch;

typedef struct ppart {
	tli_req q;
	pbatch *pb;
	size_t first;
	size_t n;
} ppart;

static int
ppart_decode(ppart *p, tlp_r *r)
{
	tlp_result *res = NULL;
	int rv;

	if ((rv = ops_dec_results(r, p->n, &res)) != TL_OK) {
		return rv;
	}
	for (size_t i = 0; i < p->n; i++) {
		tl_put *u = &p->pb->puts[p->first + i];
		size_t idn =
		    res[i].id.n > TL_MAX_ID_LEN ? TL_MAX_ID_LEN : res[i].id.n;
		u->err = res[i].err;
		if (idn > 0) {
			memcpy(u->id_out, res[i].id.p, idn);
		}
		u->id_out[idn] = '\0';
		u->version = res[i].version;
		u->due = res[i].ts;
	}
	tli_free(res);
	return TL_OK;
}

static void
ppart_reply(tli_req *q, int err, tlp_r *r)
{
	ppart *p = (ppart *) q;
	pbatch *pb = p->pb;
	tl_client *c = q->c;
	/* parked after an unknown outcome, then sent again */
	bool resent = q->park_err == TL_ELEADERLOST || q->park_err == TL_ECONN;
	bool last;

	if (err == TL_OK) {
		err = ppart_decode(p, r);
	}
	for (size_t i = 0; i < p->n; i++) {
		pb->puts[p->first + i].resent = resent;
	}
	if (err != TL_OK) {
		for (size_t i = 0; i < p->n; i++) {
			pb->puts[p->first + i].err = err;
		}
	}
	tli_free(p);
	pthread_mutex_lock(&c->mtx);
	if (err != TL_OK && pb->err == TL_OK) {
		pb->err = err;
	}
	TLI_ASSERT(pb->remaining > 0);
	last = --pb->remaining == 0;
	pthread_mutex_unlock(&c->mtx);
	if (!last) {
		return;
	}
	if (pb->wait != NULL) {
		tli_wait_done(c, pb->wait, pb->err);
		tli_free(pb);
	} else {
		ops_async_post(c, &pb->as, pb, pb->err);
	}
}

static int
put_check(const tl_put *u, size_t *idlen)
{
	size_t n = 0;
	int rv;

	if (u->id != NULL) {
		n = u->id_len != 0 ? u->id_len : strlen(u->id);
		if ((rv = tli_len_check(n, TL_MAX_ID_LEN)) != TL_OK) {
			return rv;
		}
	}
	if (u->body_len > TL_MAX_BODY_LEN) {
		return TL_ETOOLARGE;
	}
	if (u->body == NULL && u->body_len > 0) {
		return TL_EINVAL;
	}
	*idlen = n;
	return TL_OK;
}

/* Encode puts[first..first+n) as one CREATE frame. */
static ppart *
ppart_make(
    pbatch *pb, const char *topic, const char *group, size_t first, size_t n)
{
	ppart *p = tli_zalloc(sizeof(*p));
	tlp_item *items = tli_zalloc(sizeof(*items) * (n + 1));
	tlp_batch bt;
	tlp_w w;

	if (p == NULL || items == NULL) {
		tli_free(p);
		tli_free(items);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const tl_put *u = &pb->puts[first + i];
		size_t idn = 0;
		put_check(u, &idn);
		items[i].id.p = u->id;
		items[i].id.n = idn;
		items[i].ts = u->ts;
		items[i].rel = u->rel;
		items[i].body = u->body != NULL ? u->body : "";
		items[i].body_len = u->body_len;
		items[i].every_ms = u->every_ms;
		items[i].times = u->times;
		items[i].until = u->until;
		items[i].catch_up = u->catch_up;
	}
	bt.topic = TLP_STR(topic);
	bt.who = TLP_STR(group);
	bt.items = items;
	bt.n = n;
	p->q.op = TLP_OP_CREATE;
	p->q.on_reply = ppart_reply;
	/* Sent again after an unknown outcome only when no message gets a
	 * generated id: a repeat then answers TL_EEXISTS rather than making a
	 * second message. */
	p->q.idem = true;
	for (size_t i = 0; i < n; i++) {
		p->q.idem = p->q.idem && items[i].id.n > 0;
	}
	p->pb = pb;
	p->first = first;
	p->n = n;
	tli_frame_start(&p->q.frame, &w, TLP_OP_CREATE);
	tlp_enc_batch(&w, &bt);
	tli_free(items);
	return p;
}

/* Cut the puts into parts of at most TL_MAX_BATCH items and
 * TLI_BATCH_BYTES of bodies. */
static size_t
put_parts(const tl_put *puts, size_t n, size_t *starts, size_t max)
{
	size_t k = 0, cnt = 0, bytes = 0;

	for (size_t i = 0; i < n; i++) {
		size_t sz = puts[i].body_len + 256;
		if (cnt == 0 || cnt == TL_MAX_BATCH ||
		    bytes + sz > TLI_BATCH_BYTES) {
			if (k == max) {
				return 0;
			}
			starts[k++] = i;
			cnt = 0;
			bytes = 0;
		}
		cnt++;
		bytes += sz;
	}
	return k;
}

static int
put_start(tl_client *c, const char *topic, const char *group, tl_put *puts,
    size_t n, pbatch *pb)
{
	size_t nparts, *starts;
	ppart **parts;
	int rv = TL_OK;

	if ((starts = tli_alloc(sizeof(size_t) * (n + 1))) == NULL) {
		return TL_ENOMEM;
	}
	nparts = put_parts(puts, n, starts, n);
	if ((parts = tli_zalloc(sizeof(*parts) * (nparts + 1))) == NULL) {
		tli_free(starts);
		return TL_ENOMEM;
	}
	starts[nparts] = n;
	for (size_t i = 0; i < nparts && rv == TL_OK; i++) {
		parts[i] = ppart_make(
		    pb, topic, group, starts[i], starts[i + 1] - starts[i]);
		if (parts[i] == NULL) {
			rv = TL_ENOMEM;
		}
	}
	pb->remaining = nparts;
	if (rv == TL_OK) {
		rv = tli_submit(c, (tli_req **) parts, nparts);
	}
	if (rv != TL_OK) {
		for (size_t i = 0; i < nparts; i++) {
			if (parts[i] != NULL) {
				tli_buf_fini(&parts[i]->q.frame);
				tli_free(parts[i]);
			}
		}
	}
	tli_free(parts);
	tli_free(starts);
	return rv;
}

static int
put_validate(
    tl_client *c, const char *topic, const char *group, tl_put *puts, size_t n)
{
	if (c == NULL || puts == NULL || n == 0) {
		return TL_EINVAL;
	}
	if (!ops_name_ok(topic)) {
		return ops_name_err(topic);
	}
	if (!ops_name_ok(group)) {
		return ops_name_err(group);
	}
	for (size_t i = 0; i < n; i++) {
		size_t idn;
		int rv;
		if ((rv = put_check(&puts[i], &idn)) != TL_OK) {
			return rv;
		}
		puts[i].err = TL_OK;
		puts[i].id_out[0] = '\0';
	}
	return TL_OK;
}

/* A blocking caller passes wait, an asynchronous one done and arg. */
static int
put_run(tl_client *c, const char *topic, const char *group, tl_put *puts,
    size_t n, tli_waiter *wait, tl_done_fn done, void *arg)
{
	pbatch *pb;
	int rv;

	if ((rv = put_validate(c, topic, group, puts, n)) != TL_OK) {
		return rv;
	}
	if ((pb = tli_zalloc(sizeof(*pb))) == NULL) {
		return TL_ENOMEM;
	}
	pb->c = c;
	pb->puts = puts;
	pb->wait = wait;
	pb->as.done = done;
	pb->as.arg = arg;
	if ((rv = put_start(c, topic, group, puts, n, pb)) != TL_OK) {
		tli_free(pb);
	}
	return rv;
}

int
tl_put_batch(
    tl_client *c, const char *topic, const char *group, tl_put *puts, size_t n)
{
	tli_waiter wt;
	int rv;

	if ((rv = tli_may_block(c)) != TL_OK) {
		return rv;
	}
	tli_waiter_init(&wt);
	if ((rv = put_run(c, topic, group, puts, n, &wt, NULL, NULL)) !=
	    TL_OK) {
		tli_waiter_fini(&wt);
		return rv;
	}
	return tli_wait(c, &wt);
}

int
tl_put_batch_async(tl_client *c, const char *topic, const char *group,
    tl_put *puts, size_t n, tl_done_fn done, void *arg)
{
	if (done == NULL) {
		return TL_EINVAL;
	}
	return put_run(c, topic, group, puts, n, NULL, done, arg);
}

static int
put_one(tl_client *c, const char *topic, const char *group, const char *id,
    int64_t ts, bool rel, const void *body, size_t len, char *id_out)
{
	tl_put p;
	int rv;

	memset(&p, 0, sizeof(p));
	p.id = id;
	p.ts = ts;
	p.rel = rel;
	p.body = body;
	p.body_len = len;
	if ((rv = tl_put_batch(c, topic, group, &p, 1)) != TL_OK) {
		return rv;
	}
	if (p.err == TL_OK && id_out != NULL) {
		memcpy(id_out, p.id_out, strlen(p.id_out) + 1);
	}
	return p.err;
}

int
tl_put_at(tl_client *c, const char *topic, const char *group, const char *id,
    int64_t at, const void *body, size_t len, char *id_out)
{
	return put_one(c, topic, group, id, at, false, body, len, id_out);
}

int
tl_put_in(tl_client *c, const char *topic, const char *group, const char *id,
    int64_t in_ms, const void *body, size_t len, char *id_out)
{
	return put_one(c, topic, group, id, in_ms, true, body, len, id_out);
}

/* One item of MOVE, DELETE or DLQ_KICK; the item's own result. */
typedef struct one_res {
	int err;
	uint64_t version;
	int64_t ts;
} one_res;

static int
one_dec(void *arg, tlp_r *r)
{
	one_res *o = arg;
	tlp_result *res = NULL;
	int rv = ops_dec_results(r, 1, &res);

	if (rv == TL_OK) {
		o->err = res[0].err;
		o->version = res[0].version;
		o->ts = res[0].ts;
	}
	tli_free(res);
	return rv;
}

/* Check and encode one item of MOVE, DELETE or DLQ_KICK into b. */
static int
one_encode(tli_buf *b, uint8_t op, const char *topic, const char *who,
    const char *id, uint64_t version, int64_t ts, bool rel)
{
	tlp_w w;
	tlp_item it;
	tlp_batch bt;

	int rv;

	if ((rv = ops_start(b, &w, op, id == NULL || who == NULL, topic, id)) !=
	    TL_OK) {
		return rv;
	}
	memset(&it, 0, sizeof(it));
	it.id = TLP_STR(id);
	it.version = version;
	it.ts = ts;
	it.rel = rel;
	bt.topic = TLP_STR(topic);
	bt.who = TLP_STR(who);
	bt.items = &it;
	bt.n = 1;
	tlp_enc_batch(&w, &bt);
	return TL_OK;
}

static int
one_call(tl_client *c, uint8_t op, const char *topic, const char *who,
    const char *id, uint64_t version, int64_t ts, bool rel, one_res *o)
{
	tli_buf b;
	int rv;

	if (c == NULL) {
		return TL_EINVAL;
	}
	if ((rv = one_encode(&b, op, topic, who, id, version, ts, rel)) !=
	    TL_OK) {
		return rv;
	}
	memset(o, 0, sizeof(o[0]));
	if ((rv = tli_call(c, &b, op, one_dec, o)) != TL_OK) {
		return rv;
	}
	return o->err;
}

/* An asynchronous one-item request: the reply is decoded on the reader
 * thread, the user's done runs on the callback thread. */
typedef struct one_async {
	tli_req q;
	ops_async as;
} one_async;

static void
one_async_reply(tli_req *q, int err, tlp_r *r)
{
	one_async *k = (one_async *) q;
	one_res o;

	if (err == TL_OK) {
		memset(&o, 0, sizeof(o));
		err = one_dec(&o, r);
		if (err == TL_OK) {
			err = o.err;
		}
	}
	ops_async_post(q->c, &k->as, k, err);
}

static int
one_call_async(tl_client *c, uint8_t op, const char *topic, const char *who,
    const char *id, uint64_t version, int64_t ts, bool rel, tl_done_fn done,
    void *arg)
{
	one_async *k;
	tli_req *q;
	int rv;

	if (c == NULL || done == NULL) {
		return TL_EINVAL;
	}
	if ((k = tli_zalloc(sizeof(*k))) == NULL) {
		return TL_ENOMEM;
	}
	if ((rv = one_encode(
	         &k->q.frame, op, topic, who, id, version, ts, rel)) != TL_OK) {
		tli_free(k);
		return rv;
	}
	k->q.op = op;
	k->q.on_reply = one_async_reply;
	k->as.done = done;
	k->as.arg = arg;
	q = &k->q;
	if ((rv = tli_submit(c, &q, 1)) != TL_OK) {
		tli_free(k);
	}
	return rv;
}

int
tl_move(tl_client *c, const char *topic, const char *group, const char *id,
    uint64_t version, int64_t ts, bool rel, uint64_t *new_version)
{
	one_res o;
	int rv;

	if (!ops_name_ok(group)) {
		return ops_name_err(group);
	}
	rv = one_call(c, TLP_OP_MOVE, topic, group, id, version, ts, rel, &o);
	if (rv == TL_OK && new_version != NULL) {
		*new_version = o.version;
	}
	return rv;
}

int
tl_move_async(tl_client *c, const char *topic, const char *group,
    const char *id, uint64_t version, int64_t ts, bool rel, tl_done_fn done,
    void *arg)
{
	if (!ops_name_ok(group)) {
		return ops_name_err(group);
	}
	return one_call_async(
	    c, TLP_OP_MOVE, topic, group, id, version, ts, rel, done, arg);
}

int
tl_delete(tl_client *c, const char *topic, const char *group, const char *id,
    uint64_t version)
{
	one_res o;

	if (!ops_name_ok(group)) {
		return ops_name_err(group);
	}
	return one_call(
	    c, TLP_OP_DELETE, topic, group, id, version, 0, false, &o);
}

/* ---- reads ---- */

static void
ops_copy_str(char *dst, size_t cap, tlp_str s)
{
	size_t n = s.n >= cap ? cap - 1 : s.n;

	if (n > 0) {
		memcpy(dst, s.p, n);
	}
	dst[n] = '\0';
}

static int
get_dec(void *arg, tlp_r *r)
{
	tl_message **out = arg;
	tlp_msg m;
	tl_message *msg;
	int rv;

	memset(&m, 0, sizeof(m));
	if ((rv = tlp_dec_msg(r, &m)) != TL_OK) {
		return rv;
	}
	if ((msg = tli_zalloc(sizeof(*msg) + m.body_len + 1)) == NULL) {
		return TL_ENOMEM;
	}
	ops_copy_str(msg->id, sizeof(msg->id), m.id);
	msg->id_len = m.id.n;
	msg->ts = m.ts;
	msg->bucket = m.bucket;
	ops_copy_str(msg->owner, sizeof(msg->owner), m.owner);
	ops_copy_str(msg->consumer, sizeof(msg->consumer), m.consumer);
	msg->version = m.version;
	msg->deliveries = m.deliveries;
	msg->created_at = m.created_at;
	msg->every_ms = m.every_ms;
	msg->start = m.start;
	msg->seq = m.seq;
	msg->last = m.last;
	msg->catch_up = m.catch_up;
	msg->body = (uint8_t *) (msg + 1);
	msg->body_len = m.body_len;
	if (m.body_len > 0) {
		memcpy(msg->body, m.body, m.body_len);
	}
	*out = msg;
	return TL_OK;
}

int
tl_get(tl_client *c, const char *topic, const char *id, tl_message **out)
{
	tli_buf b;
	tlp_w w;
	tl_message *m = NULL;
	int rv;

	if ((rv = ops_start(&b, &w, TLP_OP_GET,
	         c == NULL || id == NULL || out == NULL, topic, id)) != TL_OK) {
		return rv;
	}
	tlp_enc_get(&w, TLP_STR(topic), TLP_STR(id));
	if ((rv = tli_call(c, &b, TLP_OP_GET, get_dec, &m)) == TL_OK) {
		*out = m;
	} else {
		tli_free(m);
	}
	return rv;
}

void
tl_message_free(tl_message *m)
{
	tli_free(m);
}

typedef struct list_res {
	tl_entry *v;
	size_t n;
	bool more;
} list_res;

static void
list_entry(void *dst, const void *src)
{
	tl_entry *o = dst;
	const tlp_entry *e = src;

	ops_copy_str(o->id, sizeof(o->id), e->id);
	o->ts = e->ts;
	o->version = e->version;
	o->leased = e->locked;
}

static int
list_dec(void *arg, tlp_r *r)
{
	list_res *res = arg;
	tlp_entry *e = NULL;
	int rv = tlp_dec_entries(r, &e, &res->n, &res->more);

	if (rv == TL_OK &&
	    (res->v = ops_convert(
	         e, res->n, sizeof(*e), sizeof(*res->v), list_entry)) == NULL) {
		res->n = 0;
		rv = TL_ENOMEM;
	}
	return rv;
}

static int
list_call(tl_client *c, uint8_t op, const char *topic, const char *owner,
    uint32_t limit, const tl_entry *after, tl_entry **out, size_t *n,
    bool *more)
{
	tli_buf b;
	tlp_w w;
	tlp_list l;
	list_res res = {NULL, 0, false};
	int rv;

	if ((rv = ops_start(&b, &w, op, c == NULL || out == NULL || n == NULL,
	         topic, NULL)) != TL_OK) {
		return rv;
	}
	if (limit == 0 || limit > 1000) {
		limit = limit == 0 ? 100 : 1000;
	}
	memset(&l, 0, sizeof(l));
	l.topic = TLP_STR(topic);
	l.owner = TLP_STR(owner);
	l.limit = limit;
	if (after != NULL) {
		l.has_cursor = true;
		l.cursor_ts = after->ts;
		l.cursor_id = TLP_STR(after->id);
	}
	tlp_enc_list(&w, &l);
	if ((rv = tli_call(c, &b, op, list_dec, &res)) != TL_OK) {
		tli_free(res.v);
		return rv;
	}
	*out = res.v;
	*n = res.n;
	if (more != NULL) {
		*more = res.more;
	}
	return TL_OK;
}

int
tl_list(tl_client *c, const char *topic, const char *group, uint32_t limit,
    const tl_entry *after, tl_entry **out, size_t *n, bool *more)
{
	if (!ops_name_ok(group)) {
		return ops_name_err(group);
	}
	return list_call(
	    c, TLP_OP_LIST, topic, group, limit, after, out, n, more);
}

typedef struct count_res {
	tl_counts k;
} count_res;

static int
count_dec(void *arg, tlp_r *r)
{
	tl_counts *k = arg;
	return tlp_dec_counts(r, &k->available, &k->waiting, &k->processing);
}

int
tl_count(
    tl_client *c, const char *topic, int64_t from, int64_t to, tl_counts *out)
{
	tli_buf b;
	tlp_w w;
	tl_counts k;
	int rv;

	if ((rv = ops_start(&b, &w, TLP_OP_COUNT, c == NULL || out == NULL,
	         topic, NULL)) != TL_OK) {
		return rv;
	}
	memset(&k, 0, sizeof(k));
	tlp_enc_count(&w, TLP_STR(topic), from, to);
	if ((rv = tli_call(c, &b, TLP_OP_COUNT, count_dec, &k)) == TL_OK) {
		*out = k;
	}
	return rv;
}

/* ---- dead letters ---- */

int
tl_dlq_list(tl_client *c, const char *topic, uint32_t limit,
    const tl_entry *after, tl_entry **out, size_t *n, bool *more)
{
	return list_call(
	    c, TLP_OP_DLQ_LIST, topic, "", limit, after, out, n, more);
}

int
tl_dlq_kick(tl_client *c, const char *topic, const char *id, int64_t in_ms)
{
	one_res o;

	if (in_ms < 0) {
		return TL_EINVAL;
	}
	return one_call(c, TLP_OP_DLQ_KICK, topic, "", id, 0, in_ms, true, &o);
}
