/*
 * Request handling on the worker thread: the frame header checks, the
 * dispatch table expanded from ops.def, and one handler per operation,
 * each split into decode, validate, apply and reply. Writes go to the store
 * asynchronously; their completion (the store's completer) sends the reply
 * and tells the dispatcher what moved on the timeline.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "broker.h"
#include "clock.h"
#include "cluster.h"
#include "dispatch.h"
#include "handlers.h"
#include "server.h"

typedef struct req {
	tlb_broker *b;
	tlb_session *s;
	tlp_hdr h;
	tlp_r r;
	tlb_job *job;
	bool keep_frame; /* ownership of job->frame moved elsewhere */
} req;

typedef void (*handler_fn)(req *q);

/* Copy a wire string into a NUL-terminated name; TL_EBADID when empty,
 * TL_ETOOLARGE when too long, TL_EINVAL on an embedded NUL. */
static int
cname(char *out, size_t cap, tlp_str s)
{
	if (s.n == 0) {
		return TL_EBADID;
	}
	if (s.n >= cap) {
		return TL_ETOOLARGE;
	}
	if (memchr(s.p, '\0', s.n) != NULL) {
		return TL_EINVAL;
	}
	memcpy(out, s.p, s.n);
	out[s.n] = '\0';
	return TL_OK;
}

static void
reply_err(req *q, int err, const char *detail)
{
	if (err == TL_EPROTO || err == TL_ETOOLARGE) {
		atomic_fetch_add(&q->b->m.proto_errors, 1);
	}
	tlb_send_error(q->s, q->h.op, q->h.reqid, err,
	    detail != NULL ? detail : tl_strerror(err));
}

static void
reply(req *q, tlb_enc_fn enc, const void *arg)
{
	tlb_send_frame(q->s, q->h.op, TLP_F_REPLY, q->h.reqid, enc, arg);
}

static void
enc_ok(tlp_w *w, const void *arg)
{
	(void) arg;
	tlp_enc_ok(w);
}

/* The start of a successful reply that carries a list: [0, [n items],
 * ...] with `fields` top-level fields in all (docs/protocol.md). */
static void
enc_list_begin(tlp_w *w, size_t fields, size_t n)
{
	tlp_w_array(w, fields);
	tlp_w_uint(w, 0);
	tlp_w_array(w, n);
}

/* A decode failure: the body did not match the operation's layout. */
static void
reply_decode(req *q, int err)
{
	char detail[96];

	snprintf(detail, sizeof(detail), "%s body does not decode: %s",
	    tlp_op_name(q->h.op), tl_strerror(err));
	reply_err(q,
	    err == TL_ENOMEM          ? TL_ENOMEM
	        : err == TL_ETOOLARGE ? TL_ETOOLARGE
	                              : TL_EPROTO,
	    detail);
}

/* ---- long reads ----
 * A read that scans the store is decoded and checked here, on the worker;
 * the scan and its reply run on a reader thread (tlb_session_read) from a
 * copy of what it needs, since the frame is freed when the handler
 * returns. */

/* What a reader needs to reply. */
typedef struct rd_head {
	uint8_t op;
	uint32_t reqid;
} rd_head;

static rd_head
rd_of(const req *q)
{
	return (rd_head){q->h.op, q->h.reqid};
}

static void
rd_err(tlb_session *s, const rd_head *h, int err)
{
	tlb_send_error(s, h->op, h->reqid, err, tl_strerror(err));
}

static void
rd_reply(tlb_session *s, const rd_head *h, tlb_enc_fn enc, const void *arg)
{
	tlb_send_frame(s, h->op, TLP_F_REPLY, h->reqid, enc, arg);
}

/* Hand the read to a reader; without memory to queue it, run it here. */
static void
read_off(req *q, tlb_read_fn fn, void *arg)
{
	if (tlb_session_read(q->s, fn, arg) != TL_OK) {
		fn(q->b, q->s, arg, true);
	}
}

/* ---- authorisation ----
 * With auth off every check passes. With auth on, prin(q) is the
 * session's principal (tlb_handle refreshed it for this request). */

static bool
auth_on(const req *q)
{
	return q->b->conf.auth;
}

/* The session's principal (NULL with auth off). */
static const tlb_principal *
prin(const req *q)
{
	return tlb_session_principal(q->s);
}

static void refuse(req *q, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* TL_ENOTAUTH naming the operation; counted; nothing was changed. */
static void
refuse(req *q, const char *fmt, ...)
{
	char what[200], detail[260];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(detail, sizeof(detail), "not authorised: %s %s",
	    tlp_op_name(q->h.op) != NULL ? tlp_op_name(q->h.op) : "?", what);
	atomic_fetch_add(&q->b->m.auth_refusals[q->h.op], 1);
	tlb_log(TLB_DEBUG, "A010", "session %llu (principal %s): %s",
	    (unsigned long long) tlb_session_id(q->s),
	    prin(q) != NULL ? prin(q)->name : "-", detail);
	reply_err(q, TL_ENOTAUTH, detail);
}

/* Admin operations: topic create/delete, dead-letter list/kick. */
static bool
may_admin(req *q)
{
	if (!auth_on(q) || prin(q)->admin) {
		return true;
	}
	refuse(q, "needs an admin principal (%s is not one)", prin(q)->name);
	return false;
}

static bool
may_group(req *q, const char *g, size_t n)
{
	if (g == NULL) {
		g = "";
	}
	if (!auth_on(q) || tlb_may_act_as(prin(q), g, n)) {
		return true;
	}
	refuse(q, "as producer group \"%.*s\" (principal %s)", (int) n, g,
	    prin(q)->name);
	return false;
}

static bool
may_produce(req *q, const char *topic, const char *g, size_t n)
{
	if (!may_group(q, g, n)) {
		return false;
	}
	if (!auth_on(q) || tlb_may_produce(prin(q), topic)) {
		return true;
	}
	refuse(q, "on topic \"%s\" (principal %s may not produce to it)", topic,
	    prin(q)->name);
	return false;
}

static bool
may_consume(req *q, const char *topic, const char *consumer, size_t n)
{
	if (consumer == NULL) {
		consumer = "";
	}
	if (!auth_on(q) || tlb_may_consume(prin(q), topic, consumer, n)) {
		return true;
	}
	refuse(q, "as consumer \"%.*s\" on topic \"%s\" (principal %s)",
	    (int) n, consumer, topic, prin(q)->name);
	return false;
}

/* ---- sessions ---- */

static void
enc_hello_rep(tlp_w *w, const void *arg)
{
	tlp_enc_hello_rep(w, arg);
}

static void
note_clock(req *q, int64_t client_ms)
{
	int64_t off = client_ms - tlb_clock_now(NULL);
	int64_t prev = tlb_session_clock_offset_swap(q->s, off);
	int64_t lim = q->b->conf.clock_warn_ms;

	if ((off > lim || off < -lim) && (prev <= lim && prev >= -lim)) {
		tlb_log(TLB_WARN, "C001",
		    "client %s (session %llu) clock is %lld ms %s the broker's",
		    tlb_session_name(q->s),
		    (unsigned long long) tlb_session_id(q->s),
		    (long long) (off < 0 ? -off : off),
		    off < 0 ? "behind" : "ahead of");
	}
}

/* Auth on: the token names the session's principal, or the session
 * ends here (nothing after a refused HELLO is handled: hello stays false). */
static bool
hello_auth(req *q, const tlp_hello *m)
{
	tlb_session *s = q->s;
	tlb_auth *a = tlb_auth_current(q->b);
	const tlb_principal *p = NULL;
	uint8_t h[TLP_SHA256_LEN];

	if (m->token.n > 0 && m->token.n <= 1024) {
		tlp_sha256(m->token.p, m->token.n, h);
		p = tlb_auth_find(a, h);
	}
	if (p == NULL) {
		tlb_session_set_principal(s, a, NULL, NULL);
		refuse(q, "%s",
		    m->token.n == 0
		        ? "without a token (this broker has auth on)"
		        : "with an unknown token");
		tlb_log(TLB_INFO, "A011",
		    "session %llu: hello refused (%s token)",
		    (unsigned long long) tlb_session_id(s),
		    m->token.n == 0 ? "no" : "unknown");
		tlb_session_close_after_reply(s, "not authorised");
		return false;
	}
	tlb_session_set_principal(s, a, p, h);
	tlb_log(TLB_INFO, "A012", "session %llu authenticated as principal %s",
	    (unsigned long long) tlb_session_id(s), p->name);
	return true;
}

static void
h_HELLO(req *q)
{
	tlp_hello m;
	tlp_hello_rep rep;
	int rv;

	if ((rv = tlp_dec_hello(&q->r, &m)) != TL_OK) {
		reply_decode(q, rv);
		tlb_session_close_after_reply(q->s, "bad hello");
		return;
	}
	if (m.proto != TLP_VERSION) {
		reply_err(q, TL_ENOTSUP,
		    "protocol version not supported; this broker "
		    "speaks " TLP_VERSION_STR);
		tlb_session_close_after_reply(q->s, "protocol version");
		return;
	}
	if (auth_on(q) && !hello_auth(q, &m)) {
		return;
	}
	tlb_session_greet(q->s, m.name.p, m.name.n);
	tlb_session_clock_offset_swap(q->s, 0);
	note_clock(q, m.client_ms);
	memset(&rep, 0, sizeof(rep));
	rep.broker_ms = tlb_clock_now(NULL);
	rep.broker_name = TLP_STR(q->b->conf.name);
	rep.session_id = tlb_session_id(q->s);
	/* answers are kept in a cluster only; a client that names itself
	 * learns for how long (one that does not gets the first layout) */
	tlb_session_set_client(q->s, m.client_id);
	if (m.client_id != 0 && q->b->conf.nnodes > 0) {
		rep.answers_ms = q->b->conf.cluster_answers_ms;
	}
	tlb_log(TLB_DEBUG, "S011", "session %llu is %s",
	    (unsigned long long) tlb_session_id(q->s), tlb_session_name(q->s));
	reply(q, enc_hello_rep, &rep);
}

static void
enc_ping_rep(tlp_w *w, const void *arg)
{
	tlp_enc_ping_rep(w, *(const int64_t *) arg);
}

static void
h_PING(req *q)
{
	int64_t ms, now;
	int rv;

	if ((rv = tlp_dec_ping(&q->r, &ms)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	note_clock(q, ms);
	now = tlb_clock_now(NULL);
	reply(q, enc_ping_rep, &now);
}

/* ---- topics ---- */

/* The key under which the request's answer is kept (store.h, "answers
 * kept"): its client's id, its request id, and its body's digest. */
static tli_reqkey
req_key(req *q)
{
	tli_reqkey k = {tlb_session_client(q->s), q->h.reqid, 0};

	if (q->b->conf.nnodes == 0 || q->b->conf.cluster_answers_ms == 0) {
		k.client = 0; /* nothing kept: no digest to compute */
	} else if (k.client != 0) {
		k.digest = tli_hash64_seed(
		    q->r.p, (size_t) (q->r.end - q->r.p), q->h.op);
	}
	return k;
}

static void
h_TOPIC_CREATE(req *q)
{
	tli_reqkey key = req_key(q);
	tlp_topic t;
	tli_topic_conf c;
	char name[TL_MAX_NAME_LEN + 1];
	int rv;

	if ((rv = tlp_dec_topic_create(&q->r, &t)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if (!may_admin(q)) {
		return;
	}
	if ((rv = cname(name, sizeof(name), t.name)) != TL_OK ||
	    (rv = tli_topic_conf_init(&c, name)) != TL_OK) {
		reply_err(q, rv, "bad topic name");
		return;
	}
	c.buckets = t.buckets;
	c.max_body = t.max_body;
	c.default_lease_ms = t.default_lease_ms;
	c.max_lease_ms = t.max_lease_ms;
	c.max_deliveries = t.max_deliveries;
	if ((rv = tli_store_topic_create_keyed(q->b->store, &c, &key)) !=
	    TL_OK) {
		reply_err(q, rv, NULL);
		return;
	}
	tlb_log(TLB_INFO, "T001", "topic %s created (%u buckets)", name,
	    c.buckets ? c.buckets : TL_DEFAULT_BUCKETS);
	reply(q, enc_ok, NULL);
}

static void
h_TOPIC_DELETE(req *q)
{
	tli_reqkey key = req_key(q);
	char name[TL_MAX_NAME_LEN + 1];
	tlp_str n;
	int rv;

	if ((rv = tlp_dec_name(&q->r, &n)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if (!may_admin(q)) {
		return;
	}
	if ((rv = cname(name, sizeof(name), n)) != TL_OK) {
		reply_err(q, rv == TL_EBADID ? TL_ENOTOPIC : rv, NULL);
		return;
	}
	if ((rv = tli_store_topic_delete_keyed(q->b->store, name, &key)) !=
	    TL_OK) {
		reply_err(q, rv, NULL);
		return;
	}
	tlb_dsp_topic_gone(q->b, name);
	tlb_log(TLB_INFO, "T002", "topic %s deleted", name);
	reply(q, enc_ok, NULL);
}

static int
topic_fill(tlb_broker *b, const tli_topic_info *ti, tlp_topic *t)
{
	tli_counts c;
	int rv = tli_store_totals(b->store, ti->conf.name, &c);

	memset(t, 0, sizeof(*t));
	t->name = TLP_STR(ti->conf.name);
	t->buckets = ti->conf.buckets;
	t->max_body = ti->conf.max_body;
	t->default_lease_ms = ti->conf.default_lease_ms;
	t->max_lease_ms = ti->conf.max_lease_ms;
	t->max_deliveries = ti->conf.max_deliveries;
	t->messages = ti->messages;
	t->dead = ti->dead;
	if (rv == TL_OK) {
		t->available = c.available;
		t->waiting = c.waiting;
		t->processing = c.processing;
	}
	return rv;
}

static void
enc_topic(tlp_w *w, const void *arg)
{
	tlp_enc_topic(w, arg);
}

typedef struct rd_topic {
	rd_head h;
	char name[TL_MAX_NAME_LEN + 1];
} rd_topic;

/* TOPIC_GET's counts scan the due part of the topic: on a reader. */
static void
topic_get_run(tlb_broker *b, tlb_session *s, void *arg, bool run)
{
	rd_topic *g = arg;
	tli_topic_info ti;
	tlp_topic t;
	int rv;

	if (!run) {
		/* closed meanwhile */
	} else if ((rv = tli_store_topic_get(b->store, g->name, &ti)) !=
	        TL_OK ||
	    (rv = topic_fill(b, &ti, &t)) != TL_OK) {
		rd_err(s, &g->h, rv == TL_EBADID ? TL_ENOTOPIC : rv);
	} else {
		rd_reply(s, &g->h, enc_topic, &t);
	}
	tli_free(g);
}

static void
h_TOPIC_GET(req *q)
{
	char name[TL_MAX_NAME_LEN + 1];
	rd_topic *g;
	tlp_str n;
	int rv;

	if ((rv = tlp_dec_name(&q->r, &n)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if ((rv = cname(name, sizeof(name), n)) != TL_OK) {
		reply_err(q, rv == TL_EBADID ? TL_ENOTOPIC : rv, NULL);
		return;
	}
	if ((g = tli_alloc(sizeof(*g))) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	g->h = rd_of(q);
	memcpy(g->name, name, sizeof(name));
	read_off(q, topic_get_run, g);
}

typedef struct topic_list {
	tlp_topic *v;
	size_t n;
} topic_list;

static void
enc_topic_list(tlp_w *w, const void *arg)
{
	const topic_list *l = arg;

	enc_list_begin(w, 2, l->n);
	for (size_t i = 0; i < l->n; i++) {
		/* Each element is the 11-field record of tlp_enc_topic. */
		tli_buf tmp;
		tlp_w tw;
		tli_buf_init(&tmp);
		tlp_w_init(&tw, &tmp);
		tlp_enc_topic(&tw, &l->v[i]);
		/* Skip the [0, ...] wrapper: array header (1) and 0 (1). */
		tli_buf_append(w->b, tmp.data + 2, tmp.len - 2);
		tli_buf_fini(&tmp);
	}
}

/* TOPIC_LIST, on a reader: every topic's counts. */
static void
topic_list_run(tlb_broker *b, tlb_session *s, void *arg, bool run)
{
	rd_head *h = arg;
	tli_topic_info *v;
	topic_list l = {NULL, 0};
	size_t n;
	int rv;

	if (!run) {
		tli_free(h);
		return;
	}
	if ((rv = tli_store_topic_list(b->store, &v, &n)) != TL_OK) {
		rd_err(s, h, rv);
		tli_free(h);
		return;
	}
	if ((l.v = tli_zalloc(sizeof(tlp_topic) * (n + 1))) == NULL) {
		tli_free(v);
		rd_err(s, h, TL_ENOMEM);
		tli_free(h);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		topic_fill(b, &v[i], &l.v[i]);
	}
	l.n = n;
	rd_reply(s, h, enc_topic_list, &l);
	tli_free(l.v);
	tli_free(v);
	tli_free(h);
}

static void
h_TOPIC_LIST(req *q)
{
	rd_head *h;
	int rv;

	if ((rv = tlp_r_end(&q->r)) != TL_OK) {
		/* An empty array is the only valid body. */
		size_t cnt;
		tlp_r_init(&q->r, q->job->frame + TLP_HDR_LEN,
		    q->job->len - TLP_HDR_LEN);
		if (tlp_r_array(&q->r, 0, &cnt) != TL_OK ||
		    tlp_r_end(&q->r) != TL_OK) {
			reply_decode(q, TL_EPROTO);
			return;
		}
	}
	if ((h = tli_alloc(sizeof(*h))) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	*h = rd_of(q);
	read_off(q, topic_list_run, h);
}

/* ---- message batches ---- */

typedef struct pending {
	tlb_broker *b;
	tlb_session *s;
	tlp_hdr h;
	uint8_t *frame; /* the request: ops point into it */
	char topic[TL_MAX_NAME_LEN + 1];
	char who[TL_MAX_NAME_LEN + 1];
	uint64_t inflight; /* creates counted in b->inflight for who */
	size_t n;
	tli_op ops[];
} pending;

static void
enc_results(tlp_w *w, const void *arg)
{
	const pending *p = arg;

	enc_list_begin(w, 2, p->n);
	for (size_t i = 0; i < p->n; i++) {
		const tli_op *o = &p->ops[i];
		/* tlp_result's layout; seq is optional (proto/msgs.c, "Records
		 * grow at the end"): left out when 0, so a client of the first
		 * layout reads the result of any non-recurring message */
		tlp_w_array(w, o->seq != 0 ? 6 : 5);
		tlp_w_uint(w, (uint64_t) o->err);
		if (o->gen_id[0] != '\0') {
			tlp_w_str(w, o->gen_id, TL_GEN_ID_LEN);
		} else {
			tlp_w_str(w, o->id != NULL ? o->id : "", o->id_len);
		}
		tlp_w_uint(w, o->new_version);
		tlp_w_int(w, o->new_ts);
		tlp_w_uint(w, o->deliveries);
		if (o->seq != 0) {
			tlp_w_uint(w, o->seq);
		}
	}
}

/* Whether a batch op ends its leases (their credit comes back). */
static bool
ends_lease(int op)
{
	return op == TLP_OP_ACK || op == TLP_OP_RELEASE;
}

/* Tell the dispatcher what the batch changed. */
static void
batch_effects(pending *p)
{
	tlb_broker *b = p->b;
	bool locked = false;

	for (size_t i = 0; i < p->n; i++) {
		tli_op *o = &p->ops[i];
		const char *id = o->gen_id[0] ? o->gen_id : o->id;
		size_t idl = o->gen_id[0] ? TL_GEN_ID_LEN : o->id_len;

		if (!locked) {
			/* One lock for the whole batch: the dispatcher waits
			 * once, not once per item. */
			tlb_dsp_lock(b);
			locked = true;
		}
		if (o->err != TL_OK) {
			atomic_fetch_add(&b->m.items_err[p->h.op], 1);
			if (ends_lease(p->h.op)) {
				/* its credit came back on arrival */
				tlb_dsp_ack_failed_locked(b, p->topic, p->who,
				    strlen(p->who), id, idl);
			}
			continue;
		}
		atomic_fetch_add(&b->m.items_ok[p->h.op], 1);
		switch (p->h.op) {
		case TLP_OP_EXTEND:
		case TLP_OP_RELEASE:
		case TLP_OP_ACK:
			tlb_dsp_lease_done_locked(b, p->topic, p->who,
			    strlen(p->who), id, idl, p->h.op, o->new_ts,
			    o->new_version);
			break;
		default:
			break;
		}
		/* An ACK that placed a recurring message's next occurrence
		 * (new_version set) is a placement like a create's. A kept
		 * answer placed nothing now: the dispatcher heard of it from
		 * the first attempt, or loaded it when this node took over. */
		if (!o->replayed &&
		    (p->h.op != TLP_OP_ACK || o->new_version != 0) &&
		    p->h.op != TLP_OP_DELETE) {
			tlb_dsp_note_locked(b, p->topic, o->bucket, o->new_ts,
			    p->h.op == TLP_OP_EXTEND, id, idl, o->new_version);
		}
	}
	if (locked) {
		tlb_dsp_unlock(b);
	}
}

/* An ACK or RELEASE batch is about to be submitted (arrived): its leases'
 * credit comes back now, not when the commit is done (batch_effects
 * counts a refused one again), so the consumer's next leases can be taken
 * in the same group commit as its ACKs instead of the one after. Not
 * submitted after all (!arrived): it counts again. */
static void
batch_credit(pending *p, bool arrived)
{
	tlb_dsp_lock(p->b);
	for (size_t i = 0; i < p->n; i++) {
		const tli_op *o = &p->ops[i];
		if (arrived) {
			tlb_dsp_ack_arrived_locked(p->b, p->topic, p->who,
			    strlen(p->who), o->id, o->id_len, o->version);
		} else {
			tlb_dsp_ack_failed_locked(p->b, p->topic, p->who,
			    strlen(p->who), o->id, o->id_len);
		}
	}
	tlb_dsp_unlock(p->b);
}

static void
batch_done(void *arg)
{
	pending *p = arg;

	/* Effects first: once the client has its answer, the dispatcher
	 * already knows (the credit of an acked lease is back). */
	batch_effects(p);
	if (p->inflight > 0) {
		tlb_inflight_sub(
		    p->b->inflight, p->who, strlen(p->who), p->inflight);
	}
	tlb_send_frame(p->s, p->h.op, TLP_F_REPLY, p->h.reqid, enc_results, p);
	tlb_session_rele(p->s);
	tli_free(p->frame);
	tli_free(p);
}

static tli_op_type
batch_op_type(int op)
{
	switch (op) {
	case TLP_OP_CREATE:
		return TLI_OP_CREATE;
	case TLP_OP_MOVE:
		return TLI_OP_MOVE;
	case TLP_OP_DELETE:
		return TLI_OP_DELETE_OWNED;
	case TLP_OP_EXTEND:
		return TLI_OP_EXTEND;
	case TLP_OP_RELEASE:
		return TLI_OP_RELEASE;
	case TLP_OP_ACK:
		return TLI_OP_DELETE_LEASED;
	default:
		return TLI_OP_DLQ_KICK;
	}
}

/* The session's principal may do this batch's operation as p->who. */
static bool
batch_allowed(req *q, pending *p)
{
	size_t wl = strlen(p->who);

	switch (q->h.op) {
	case TLP_OP_CREATE:
	case TLP_OP_MOVE:
	case TLP_OP_DELETE:
		return may_produce(q, p->topic, p->who, wl);
	case TLP_OP_EXTEND:
	case TLP_OP_RELEASE:
	case TLP_OP_ACK:
		return may_consume(q, p->topic, p->who, wl);
	default:
		return may_admin(q);
	}
}

static void quota(req *q, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
quota(req *q, int err, const char *fmt, ...)
{
	char detail[260];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&q->b->m.quota_refusals[q->h.op], 1);
	reply_err(q, err, detail);
}

/* The principal's per-group limits on a create batch of n messages: all
 * of it fits, or none of it is submitted. On success the batch counts in
 * the group's creates in flight until batch_done. */
static bool
batch_limits(req *q, pending *p, size_t n)
{
	const tlb_principal *pr = prin(q);
	size_t wl = strlen(p->who);
	uint64_t now = 0;

	/* Counted for every principal (the group's count is shared by all
	 * sessions acting as it); refused only against this one's limits. */
	if (!auth_on(q) || n == 0) {
		return true;
	}
	if (!tlb_inflight_add(q->b->inflight, p->who, wl, n,
	        pr->max_inflight_creates, &now)) {
		quota(q, TL_EBUSY,
		    "producer group \"%s\" has %llu creates in flight; %zu "
		    "more would pass max_inflight_creates %llu",
		    p->who, (unsigned long long) now, n,
		    (unsigned long long) pr->max_inflight_creates);
		return false;
	}
	p->inflight = n;
	if (pr->max_scheduled != 0) {
		uint64_t stored = 0;
		int rv =
		    tli_store_owner_count(q->b->store, p->who, wl, &stored);

		if (rv != TL_OK || stored + now + n > pr->max_scheduled) {
			tlb_inflight_sub(q->b->inflight, p->who, wl, n);
			p->inflight = 0;
			if (rv != TL_OK) {
				reply_err(q, rv, NULL);
			} else {
				quota(q, TL_EQUOTA,
				    "producer group \"%s\" has %llu messages "
				    "(%llu being created); %zu more would pass "
				    "max_scheduled %llu",
				    p->who, (unsigned long long) (stored + now),
				    (unsigned long long) now, n,
				    (unsigned long long) pr->max_scheduled);
			}
			return false;
		}
	}
	return true;
}

static void
h_batch(req *q)
{
	tli_reqkey key = req_key(q);
	tlp_batch bt;
	pending *p;
	int rv;

	if ((rv = tlp_dec_batch(&q->r, &bt)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	p = tli_zalloc(sizeof(*p) + sizeof(tli_op) * (bt.n + 1));
	if (p == NULL) {
		tlp_batch_fini(&bt);
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	if ((rv = cname(p->topic, sizeof(p->topic), bt.topic)) != TL_OK) {
		rv = rv == TL_EBADID ? TL_ENOTOPIC : rv;
	} else if (q->h.op != TLP_OP_DLQ_KICK &&
	    (rv = cname(p->who, sizeof(p->who), bt.who)) != TL_OK) {
		/* reported below */
	}
	if (q->h.op == TLP_OP_DLQ_KICK) {
		snprintf(p->who, sizeof(p->who), "%s", "dlq-kick");
	}
	if (rv != TL_OK) {
		tlp_batch_fini(&bt);
		tli_free(p);
		reply_err(q, rv,
		    rv == TL_ENOTOPIC ? NULL
		                      : "bad producer group or consumer id");
		return;
	}
	if (!batch_allowed(q, p) ||
	    (q->h.op == TLP_OP_CREATE && !batch_limits(q, p, bt.n))) {
		tlp_batch_fini(&bt);
		tli_free(p);
		return;
	}
	p->b = q->b;
	p->s = q->s;
	p->h = q->h;
	p->n = bt.n;
	for (size_t i = 0; i < bt.n; i++) {
		const tlp_item *it = &bt.items[i];
		tli_op *o = &p->ops[i];

		o->type = batch_op_type(q->h.op);
		o->topic = p->topic;
		o->id = it->id.p;
		o->id_len = it->id.n;
		o->who = p->who;
		o->who_len = strlen(p->who);
		o->ts = it->ts;
		o->ts_mode = it->rel ? TLI_TS_REL : TLI_TS_ABS;
		o->version = it->version;
		o->body = it->body;
		o->body_len = it->body_len;
		o->every_ms = it->every_ms;
		o->times = it->times;
		o->until = it->until;
		o->catch_up = it->catch_up;
	}
	tlp_batch_fini(&bt);
	if (ends_lease(q->h.op)) {
		batch_credit(p, true);
	}
	tlb_session_hold(q->s);
	p->frame = q->job->frame;
	q->keep_frame = true;
	if ((rv = tli_store_submit_keyed(
	         q->b->store, p->ops, p->n, &key, batch_done, p)) != TL_OK) {
		if (p->inflight > 0) {
			tlb_inflight_sub(q->b->inflight, p->who, strlen(p->who),
			    p->inflight);
		}
		if (ends_lease(q->h.op)) {
			batch_credit(p, false);
		}
		q->keep_frame = false;
		tlb_session_rele(q->s);
		tli_free(p);
		reply_err(q, rv, NULL);
	}
}

/* Every batch operation shares one handler. */
#define h_CREATE h_batch
#define h_MOVE h_batch
#define h_DELETE h_batch
#define h_EXTEND h_batch
#define h_RELEASE h_batch
#define h_ACK h_batch
#define h_DLQ_KICK h_batch

/* ---- named leases ----
 * LOCK takes the lease on one message by its id, now: the store's LEASE
 * (any version), behind a CREATE at now in the same submission when the
 * caller names a producer group, so that both land in one group commit.
 * The message is read first (on this worker) as the writer's read hint and
 * for the reply's owner, body and placement; the completion runs on the
 * store's completer thread. */

typedef struct lockreq {
	tlb_broker *b;
	tlb_session *s;
	tlp_hdr h;
	char topic[TL_MAX_NAME_LEN + 1];
	char consumer[TL_MAX_NAME_LEN + 1];
	char group[TL_MAX_NAME_LEN + 1];
	char id[TL_MAX_ID_LEN];
	size_t id_len;
	bool has_hint; /* hint holds the message as read before the submit */
	bool inflight; /* the create counts in b->inflight for group */
	tli_msg hint;
	size_t n;
	tli_op ops[2]; /* [CREATE,] LEASE */
} lockreq;

typedef struct lock_fail {
	int err;
	const char *detail;
	int64_t until;
} lock_fail;

static void
enc_lock_fail(tlp_w *w, const void *arg)
{
	const lock_fail *f = arg;

	tlp_enc_error_until(w, f->err, f->detail, f->until);
}

static void
enc_lock_rep(tlp_w *w, const void *arg)
{
	tlp_enc_lock_rep(w, arg);
}

/* A timeline time as UTC text, for error details. */
static void
ts_text(char *out, size_t cap, int64_t ms)
{
	time_t t = (time_t) (ms / 1000);
	struct tm tm;
	size_t n;

	if (ms < 0 || gmtime_r(&t, &tm) == NULL) {
		snprintf(out, cap, "%lld", (long long) ms);
		return;
	}
	n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, cap - n, ".%03dZ", (int) (ms % 1000));
}

/* A lease that failed: the held and not-due cases carry the time to try
 * again, never the holder. */
static void
lock_refused(lockreq *k, const tli_op *o)
{
	char when[64], detail[192];
	lock_fail f = {o->err, detail, o->new_ts};

	if (o->err == TL_ELEASED || o->err == TL_ENOTDUE) {
		ts_text(when, sizeof(when), o->new_ts);
		snprintf(detail, sizeof(detail),
		    o->err == TL_ELEASED ? "held until %s (%lld)"
		                         : "placed at %s (%lld): not due yet",
		    when, (long long) o->new_ts);
		tlb_send_frame(
		    k->s, k->h.op, TLP_F_REPLY, k->h.reqid, enc_lock_fail, &f);
		return;
	}
	if (o->err == TL_ENOTFOUND && k->has_hint && k->hint.dead) {
		tlb_send_error(k->s, k->h.op, k->h.reqid, TL_EDEAD,
		    "the message is a dead letter");
		return;
	}
	tlb_send_error(k->s, k->h.op, k->h.reqid, o->err,
	    o->err == TL_ENOTFOUND && k->n == 1
	        ? "no such message (give a producer group to create it)"
	        : tl_strerror(o->err));
}

/* The taken lease as DELIVER gives it. The hint is exact when the lease
 * followed it directly (version + 1); a message created by this request
 * is empty; otherwise (changed between the read and the write) it is read
 * again here, and shown only if nothing changed it since the lease. */
static void
lock_granted(lockreq *k, const tli_op *o)
{
	const tli_op *cr = k->n == 2 ? &k->ops[0] : NULL;
	tlp_delivery dv;
	tli_msg m;
	bool fresh = false;

	memset(&dv, 0, sizeof(dv));
	dv.id = (tlp_str){k->id, k->id_len};
	dv.version = o->new_version;
	dv.lease_until = o->new_ts;
	dv.deliveries = o->deliveries;
	if (cr != NULL && cr->err == TL_OK) {
		dv.due_ts = cr->new_ts;
		dv.placed_at = cr->new_ts;
		dv.owner = TLP_STR(k->group);
	} else if (k->has_hint && k->hint.version + 1 == o->new_version) {
		dv.due_ts = k->hint.ts;
		dv.placed_at = k->hint.sched;
		dv.owner = (tlp_str){k->hint.owner, k->hint.owner_len};
		dv.body = k->hint.body;
		dv.body_len = k->hint.body_len;
	} else if (tli_store_get(k->b->store, k->topic, k->id, k->id_len, &m) ==
	    TL_OK) {
		fresh = true;
		/* Only as this lease left it: a later batch's change may not
		 * be durable yet (a completion's reads do not wait). */
		if (m.version == o->new_version) {
			dv.due_ts = m.sched;
			dv.placed_at = m.sched;
			dv.owner = (tlp_str){m.owner, m.owner_len};
			dv.body = m.body;
			dv.body_len = m.body_len;
		}
	}
	tlb_send_frame(
	    k->s, k->h.op, TLP_F_REPLY, k->h.reqid, enc_lock_rep, &dv);
	if (fresh) {
		tli_msg_fini(&m);
	}
}

/* Drop what a LOCK request holds: its create in flight, the hint, the
 * session. */
static void
lock_unref(lockreq *k)
{
	if (k->inflight) {
		tlb_inflight_sub(k->b->inflight, k->group, strlen(k->group), 1);
	}
	if (k->has_hint) {
		tli_msg_fini(&k->hint);
	}
	tlb_session_rele(k->s);
	tli_free(k);
}

/* Auth on: a create on demand counts against the group's limits as a
 * CREATE of one message does (batch_limits); the reply is sent when it
 * does not fit. */
static bool
lock_limits(req *q, lockreq *k)
{
	const tlb_principal *pr = prin(q);
	size_t gl = strlen(k->group);
	uint64_t now = 0, stored = 0;
	int rv;

	if (!tlb_inflight_add(q->b->inflight, k->group, gl, 1,
	        pr->max_inflight_creates, &now)) {
		quota(q, TL_EBUSY,
		    "producer group \"%s\" has %llu creates in flight; one "
		    "more would pass max_inflight_creates %llu",
		    k->group, (unsigned long long) now,
		    (unsigned long long) pr->max_inflight_creates);
		return false;
	}
	k->inflight = true;
	if (pr->max_scheduled == 0) {
		return true;
	}
	rv = tli_store_owner_count(q->b->store, k->group, gl, &stored);
	if (rv == TL_OK && stored + now + 1 <= pr->max_scheduled) {
		return true;
	}
	if (rv != TL_OK) {
		reply_err(q, rv, NULL);
	} else {
		quota(q, TL_EQUOTA,
		    "producer group \"%s\" has %llu messages; the lock's "
		    "create would pass max_scheduled %llu",
		    k->group, (unsigned long long) (stored + now),
		    (unsigned long long) pr->max_scheduled);
	}
	return false;
}

static void
lock_done(void *arg)
{
	lockreq *k = arg;
	tli_op *o = &k->ops[k->n - 1];

	if (o->err == TL_OK) {
		atomic_fetch_add(&k->b->m.items_ok[k->h.op], 1);
		/* The lease's end is the message's place: when it runs out a
		 * subscriber of the topic may get it. A kept answer took
		 * nothing now (see batch_effects). */
		if (!o->replayed) {
			tlb_dsp_lock_taken(k->b, k->topic, k->consumer,
			    strlen(k->consumer), k->id, k->id_len,
			    o->new_version, o->new_ts);
			tlb_dsp_note(k->b, k->topic, o->bucket, o->new_ts, true,
			    k->id, k->id_len, o->new_version);
		}
		lock_granted(k, o);
	} else {
		atomic_fetch_add(&k->b->m.items_err[k->h.op], 1);
		lock_refused(k, o);
	}
	lock_unref(k);
}

/* Names, id and lease length; the reply is sent on failure. */
/* The next operation of the lock's submission, on its message, by who. */
static tli_op *
lock_op(lockreq *k, tli_op_type type, const char *who)
{
	tli_op *o = &k->ops[k->n++];

	o->type = type;
	o->topic = k->topic;
	o->id = k->id;
	o->id_len = k->id_len;
	o->who = who;
	o->who_len = strlen(who);
	return o;
}

static bool
lock_check(req *q, const tlp_lock *m, lockreq *k, int64_t *lease_ms)
{
	tli_topic_info ti;
	int rv;

	if ((rv = cname(k->topic, sizeof(k->topic), m->topic)) != TL_OK) {
		reply_err(q, rv == TL_EBADID ? TL_ENOTOPIC : rv, NULL);
		return false;
	}
	if ((rv = cname(k->consumer, sizeof(k->consumer), m->consumer)) !=
	    TL_OK) {
		reply_err(q, rv, "bad consumer id");
		return false;
	}
	if (m->create_group.n > 0 &&
	    (rv = cname(k->group, sizeof(k->group), m->create_group)) !=
	        TL_OK) {
		reply_err(q, rv, "bad producer group");
		return false;
	}
	if (m->id.n == 0) {
		reply_err(q, TL_EBADID, "empty message id");
		return false;
	}
	if (m->lease_ms < 0) {
		reply_err(q, TL_EINVAL, "negative lease_ms");
		return false;
	}
	if (!may_consume(q, k->topic, k->consumer, strlen(k->consumer)) ||
	    (m->create_group.n > 0 &&
	        !may_produce(q, k->topic, k->group, strlen(k->group)))) {
		return false;
	}
	if (tli_store_topic_get(q->b->store, k->topic, &ti) != TL_OK) {
		reply_err(q, TL_ENOTOPIC, NULL);
		return false;
	}
	*lease_ms = m->lease_ms > 0 ? m->lease_ms : ti.conf.default_lease_ms;
	if (*lease_ms > ti.conf.max_lease_ms) {
		char detail[96];
		snprintf(detail, sizeof(detail),
		    "lease_ms over the topic's max_lease_ms (%lld)",
		    (long long) ti.conf.max_lease_ms);
		reply_err(q, TL_ELEASELIMIT, detail);
		return false;
	}
	return true;
}

static void
h_LOCK(req *q)
{
	tli_reqkey key = req_key(q);
	tlp_lock m;
	lockreq *k;
	int64_t lease_ms = 0;
	tli_op *o;
	int rv;

	if ((rv = tlp_dec_lock(&q->r, &m)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if ((k = tli_zalloc(sizeof(*k))) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	if (!lock_check(q, &m, k, &lease_ms)) {
		tli_free(k);
		return;
	}
	k->b = q->b;
	k->s = q->s;
	k->h = q->h;
	memcpy(k->id, m.id.p, m.id.n);
	k->id_len = m.id.n;
	k->has_hint = tli_store_get(q->b->store, k->topic, k->id, k->id_len,
	                  &k->hint) == TL_OK;
	tlb_session_hold(q->s);
	if (k->group[0] != '\0' && !k->has_hint && auth_on(q) &&
	    !lock_limits(q, k)) {
		lock_unref(k);
		return;
	}
	if (k->group[0] != '\0') {
		o = lock_op(k, TLI_OP_CREATE, k->group);
		o->ts_mode = TLI_TS_REL; /* now */
	}
	o = lock_op(k, TLI_OP_LEASE, k->consumer);
	o->ts = lease_ms;
	o->ts_mode = TLI_TS_REL;
	o->no_dead_letter = true;
	o->hint = k->has_hint ? &k->hint : NULL;
	if ((rv = tli_store_submit_keyed(
	         q->b->store, k->ops, k->n, &key, lock_done, k)) != TL_OK) {
		lock_unref(k);
		reply_err(q, rv, NULL);
	}
}

/* ---- reads ---- */

static void
enc_msg(tlp_w *w, const void *arg)
{
	tlp_enc_msg(w, arg);
}

static void
h_GET(req *q)
{
	char topic[TL_MAX_NAME_LEN + 1];
	tlp_str t, id;
	tli_msg m;
	tlp_msg out;
	int rv;

	if ((rv = tlp_dec_get(&q->r, &t, &id)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if ((rv = cname(topic, sizeof(topic), t)) != TL_OK) {
		reply_err(q, TL_ENOTOPIC, NULL);
		return;
	}
	if ((rv = tli_store_get(q->b->store, topic, id.p, id.n, &m)) != TL_OK) {
		reply_err(q, rv, NULL);
		return;
	}
	if (auth_on(q) && !tlb_may_act_as(prin(q), m.owner, m.owner_len) &&
	    !(m.consumer_len > 0 &&
	        tlb_may_consume(prin(q), topic, m.consumer, m.consumer_len))) {
		/* Only the owner's principal, or the lease holder's. */
		tli_msg_fini(&m);
		refuse(q,
		    "of a message of another producer group (principal %s)",
		    prin(q)->name);
		return;
	}
	if (m.dead) {
		/* Off the timeline: DLQ_LIST shows it, DLQ_KICK brings it
		 * back, the owner may DELETE it. */
		tli_msg_fini(&m);
		reply_err(q, TL_EDEAD, NULL);
		return;
	}
	out.id = (tlp_str){m.id, m.id_len};
	out.ts = m.ts;
	out.bucket = m.bucket;
	out.owner = (tlp_str){m.owner, m.owner_len};
	out.consumer = (tlp_str){m.consumer, m.consumer_len};
	out.version = m.version;
	out.deliveries = m.deliveries;
	out.created_at = m.created_at;
	out.every_ms = m.every;
	out.start = m.start;
	out.seq = m.seq;
	out.last = m.last;
	out.catch_up = m.catch_up;
	out.body = m.body;
	out.body_len = m.body_len;
	reply(q, enc_msg, &out);
	tli_msg_fini(&m);
}

typedef struct entries {
	tli_entry *v;
	size_t n;
	bool more;
} entries;

static void
enc_entries(tlp_w *w, const void *arg)
{
	const entries *e = arg;

	enc_list_begin(w, 3, e->n);
	for (size_t i = 0; i < e->n; i++) {
		tlp_w_array(w, 4);
		tlp_w_str(w, e->v[i].id, e->v[i].id_len);
		tlp_w_int(w, e->v[i].ts);
		tlp_w_uint(w, e->v[i].version);
		tlp_w_bool(w, e->v[i].locked);
	}
	tlp_w_bool(w, e->more);
}

#define TLB_MAX_LIST 1000u

typedef struct rd_list {
	rd_head h;
	bool dead;
	char topic[TL_MAX_NAME_LEN + 1];
	tli_cursor cur;
	uint32_t lim;
	size_t owner_len;
	char owner[]; /* owner_len bytes */
} rd_list;

/* LIST or DLQ_LIST, on a reader. */
static void
list_run(tlb_broker *b, tlb_session *s, void *arg, bool run)
{
	rd_list *l = arg;
	entries e = {NULL, 0, false};
	int rv;

	if (!run) {
		tli_free(l);
		return;
	}
	if ((e.v = tli_alloc(sizeof(tli_entry) * l->lim)) == NULL) {
		rd_err(s, &l->h, TL_ENOMEM);
		tli_free(l);
		return;
	}
	if (l->dead) {
		rv = tli_store_scan_dead(
		    b->store, l->topic, &l->cur, e.v, l->lim, &e.n, &e.more);
	} else {
		rv = tli_store_scan_owner(b->store, l->topic, l->owner,
		    l->owner_len, &l->cur, e.v, l->lim, &e.n, &e.more);
	}
	if (rv != TL_OK) {
		rd_err(s, &l->h, rv);
	} else {
		rd_reply(s, &l->h, enc_entries, &e);
	}
	tli_free(e.v);
	tli_free(l);
}

/* LIST and DLQ_LIST share their request layout and reply. */
static void
h_list(req *q, bool dead)
{
	char topic[TL_MAX_NAME_LEN + 1];
	tlp_list l;
	tli_cursor cur;
	rd_list *rl;
	uint32_t lim;
	int rv;

	if ((rv = tlp_dec_list(&q->r, &l)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if (cname(topic, sizeof(topic), l.topic) != TL_OK) {
		reply_err(q, TL_ENOTOPIC, NULL);
		return;
	}
	if (dead ? !may_admin(q) : !may_group(q, l.owner.p, l.owner.n)) {
		return;
	}
	lim = l.limit == 0 || l.limit > TLB_MAX_LIST ? TLB_MAX_LIST : l.limit;
	memset(&cur, 0, sizeof(cur));
	if (l.has_cursor) {
		cur.valid = true;
		cur.ts = l.cursor_ts;
		cur.id_len = (uint8_t) l.cursor_id.n;
		memcpy(cur.id, l.cursor_id.p, l.cursor_id.n);
	}
	if ((rl = tli_alloc(sizeof(*rl) + l.owner.n + 1)) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	rl->h = rd_of(q);
	rl->dead = dead;
	memcpy(rl->topic, topic, sizeof(topic));
	rl->cur = cur;
	rl->lim = lim;
	rl->owner_len = l.owner.n;
	if (l.owner.n > 0) {
		memcpy(rl->owner, l.owner.p, l.owner.n);
	}
	rl->owner[l.owner.n] = '\0';
	read_off(q, list_run, rl);
}

static void
h_LIST(req *q)
{
	h_list(q, false);
}

static void
h_DLQ_LIST(req *q)
{
	h_list(q, true);
}

static void
enc_counts(tlp_w *w, const void *arg)
{
	const tli_counts *c = arg;
	tlp_enc_counts(w, c->available, c->waiting, c->processing);
}

typedef struct rd_count {
	rd_head h;
	char topic[TL_MAX_NAME_LEN + 1];
	int64_t from;
	int64_t to;
} rd_count;

/* COUNT, on a reader: scans every bucket over the range. */
static void
count_run(tlb_broker *b, tlb_session *s, void *arg, bool run)
{
	rd_count *k = arg;
	tli_counts c;
	int rv;

	if (!run) {
		/* closed meanwhile */
	} else if ((rv = tli_store_count(
	                b->store, k->topic, k->from, k->to, &c)) != TL_OK) {
		rd_err(s, &k->h, rv);
	} else {
		rd_reply(s, &k->h, enc_counts, &c);
	}
	tli_free(k);
}

static void
h_COUNT(req *q)
{
	char topic[TL_MAX_NAME_LEN + 1];
	tlp_str t;
	int64_t from, to;
	rd_count *k;
	int rv;

	if ((rv = tlp_dec_count(&q->r, &t, &from, &to)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if (cname(topic, sizeof(topic), t) != TL_OK) {
		reply_err(q, TL_ENOTOPIC, NULL);
		return;
	}
	if ((k = tli_alloc(sizeof(*k))) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return;
	}
	k->h = rd_of(q);
	memcpy(k->topic, topic, sizeof(topic));
	k->from = from;
	k->to = to;
	read_off(q, count_run, k);
}

/* ---- consumers ---- */

static bool
sub_allowed(req *q, const tlp_sub *sub)
{
	char topic[TL_MAX_NAME_LEN + 1];
	int rv;

	if (!auth_on(q)) {
		return true;
	}
	if ((rv = cname(topic, sizeof(topic), sub->topic)) != TL_OK) {
		reply_err(q, rv == TL_EBADID ? TL_ENOTOPIC : rv, NULL);
		return false;
	}
	return may_consume(q, topic, sub->consumer.p, sub->consumer.n);
}

/* Decode a SUBSCRIBE or UNSUBSCRIBE body and check the principal may
 * consume as it; false when refused (the reply is sent). */
static bool
sub_decode(req *q, tlp_sub *sub)
{
	int rv;

	if ((rv = tlp_dec_sub(&q->r, sub)) != TL_OK) {
		reply_decode(q, rv);
		return false;
	}
	return sub_allowed(q, sub);
}

static void
h_SUBSCRIBE(req *q)
{
	tlp_sub sub;
	int rv;

	if (!sub_decode(q, &sub)) {
		return;
	}
	/* The dispatcher answers (before it re-delivers the consumer's
	 * active leases) or returns the error. */
	if ((rv = tlb_dsp_subscribe(q->b, q->s, &sub, q->h.reqid)) != TL_OK) {
		reply_err(q, rv, NULL);
	}
}

static void
h_UNSUBSCRIBE(req *q)
{
	tlp_sub sub;
	int rv;

	if (!sub_decode(q, &sub)) {
		return;
	}
	if ((rv = tlb_dsp_unsubscribe(q->b, q->s, &sub)) != TL_OK) {
		reply_err(q, rv, NULL);
		return;
	}
	reply(q, enc_ok, NULL);
}

static void
push_only(req *q)
{
	reply_err(q, TL_EPROTO, "this operation is sent by the broker only");
}

/* Pushes: the broker sends them, a client may not. */
#define h_DELIVER push_only
#define h_LEASE_LOST push_only

/* ---- cluster administration ---- */

/* CLUSTER: status on any node (any session); transfer, add and remove on
 * the leader, by an admin principal. The cluster code answers. */
static void
h_CLUSTER(req *q)
{
	tlp_cluster_req m;
	tlc_action a;
	char raft[256], url[256];
	int rv;

	if ((rv = tlp_dec_cluster_req(&q->r, &m)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if (q->b->cluster == NULL) {
		reply_err(q, TL_ENOTSUP, "this broker is not in a cluster");
		return;
	}
	if ((a = tlc_action_of(m.action.p, m.action.n)) == 0) {
		reply_err(q, TL_EINVAL,
		    "unknown action: status, transfer, add or remove");
		return;
	}
	if (a != TLC_STATUS && !may_admin(q)) {
		return;
	}
	if ((a == TLC_ADD || a == TLC_REMOVE) && m.id == 0) {
		reply_err(q, TL_EINVAL, "a node id is 1 or more");
		return;
	}
	if (a == TLC_ADD &&
	    (m.raft.n == 0 || m.raft.n >= sizeof(raft) ||
	        memchr(m.raft.p, '\0', m.raft.n) != NULL ||
	        memchr(m.raft.p, ':', m.raft.n) == NULL ||
	        memchr(m.url.p != NULL ? m.url.p : "", '\0', m.url.n) !=
	            NULL)) {
		reply_err(q, TL_EINVAL,
		    "add needs the node's Raft address HOST:PORT");
		return;
	}
	/* the URL is replicated and handed to clients as the leader's */
	if (a == TLC_ADD &&
	    (m.url.n == 0 || m.url.n >= sizeof(url) ||
	        !tlp_url_scheme_ok(m.url.p, m.url.n) ||
	        memchr(m.url.p, ',', m.url.n) != NULL ||
	        memchr(m.url.p, ' ', m.url.n) != NULL)) {
		reply_err(q, TL_EINVAL,
		    "add needs the node's client URL, one of tcp://HOST:PORT, "
		    "tls+tcp://HOST:PORT or ipc://PATH, under 256 bytes");
		return;
	}
	snprintf(raft, sizeof(raft), "%.*s", (int) m.raft.n,
	    m.raft.p != NULL ? m.raft.p : "");
	snprintf(url, sizeof(url), "%.*s", (int) m.url.n,
	    m.url.p != NULL ? m.url.p : "");
	tlc_admin(q->b->cluster, q->s, q->h.reqid, a, m.id, raft, url);
}

/* SNAPSHOT_READ and SNAPSHOT_LATEST, on a reader: a part of a snapshot's
 * file, or the manifest of a snapshot at a store index or later (taken now
 * if none kept is that far), for another node installing one
 * (docs/cluster.md, "Snapshots"). */
typedef struct rd_snap {
	rd_head h;
	bool latest; /* SNAPSHOT_LATEST: offset is the index */
	char name[129];
	char file[129];
	uint64_t offset;
	size_t max;
} rd_snap;

static void
enc_snap_chunk(tlp_w *w, const void *arg)
{
	tlp_enc_snap_chunk(w, arg);
}

static void
snap_run(tlb_broker *b, tlb_session *s, void *arg, bool run)
{
	rd_snap *k = arg;
	tlp_snap_chunk m = {0};
	tli_buf o;
	int rv;

	tli_buf_init(&o);
	if (!run) {
		/* closed meanwhile */
	} else if ((rv = k->latest
	                   ? tlc_snapshot_latest(b->cluster, k->offset, &o)
	                   : tlc_snapshot_read(b->cluster, k->name, k->file,
	                         k->offset, k->max, &o, &m.size)) != TL_OK) {
		rd_err(s, &k->h, rv);
	} else {
		if (k->latest) {
			m.size = o.len;
		}
		m.data = o.data;
		m.data_len = o.len;
		rd_reply(s, &k->h, enc_snap_chunk, &m);
	}
	tli_buf_fini(&o);
	tli_free(k);
}

/* What both share: a cluster, and an admin principal (a snapshot is the
 * whole store: the nodes' own, cluster_token, is one). The reader's
 * arguments, or NULL (answered). */
static rd_snap *
snap_req(req *q)
{
	rd_snap *k;

	if (q->b->cluster == NULL) {
		reply_err(q, TL_ENOTSUP, "this broker is not in a cluster");
		return NULL;
	}
	if (!may_admin(q)) {
		return NULL;
	}
	if ((k = tli_zalloc(sizeof(*k))) == NULL) {
		reply_err(q, TL_ENOMEM, NULL);
		return NULL;
	}
	k->h = rd_of(q);
	return k;
}

static void
h_SNAPSHOT_READ(req *q)
{
	tlp_snap_read m;
	rd_snap *k;
	int rv;

	if ((rv = tlp_dec_snap_read(&q->r, &m)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if ((k = snap_req(q)) == NULL) {
		return;
	}
	memcpy(k->name, m.name.p != NULL ? m.name.p : "", m.name.n);
	k->name[m.name.n] = '\0';
	memcpy(k->file, m.file.p != NULL ? m.file.p : "", m.file.n);
	k->file[m.file.n] = '\0';
	k->offset = m.offset;
	k->max = m.max > TLP_SNAP_PART ? TLP_SNAP_PART : (size_t) m.max;
	read_off(q, snap_run, k);
}

static void
h_SNAPSHOT_LATEST(req *q)
{
	tlp_snap_latest m;
	rd_snap *k;
	int rv;

	if ((rv = tlp_dec_snap_latest(&q->r, &m)) != TL_OK) {
		reply_decode(q, rv);
		return;
	}
	if ((k = snap_req(q)) == NULL) {
		return;
	}
	k->latest = true;
	k->offset = m.min_index;
	read_off(q, snap_run, k);
}

/* ---- dispatch ---- */

typedef struct not_leader_arg {
	const char *url;
} not_leader_arg;

static void
enc_not_leader(tlp_w *w, const void *arg)
{
	const not_leader_arg *a = arg;

	tlp_enc_error_leader(w, TL_ENOTLEADER, "not the leader", a->url);
}

/* The operations that only read the store. */
static bool
is_read(int op)
{
	return op == TLP_OP_GET || op == TLP_OP_LIST || op == TLP_OP_COUNT ||
	    op == TLP_OP_TOPIC_GET || op == TLP_OP_TOPIC_LIST ||
	    op == TLP_OP_DLQ_LIST;
}

/* In a cluster only the serving leader handles requests (HELLO and PING
 * excepted); the others are told which node leads. */
static bool
leader_only(req *q)
{
	char url[256];
	not_leader_arg a = {url};

	if (q->b->cluster == NULL || q->h.op == TLP_OP_HELLO ||
	    q->h.op == TLP_OP_PING || q->h.op == TLP_OP_CLUSTER ||
	    q->h.op == TLP_OP_SNAPSHOT_READ ||
	    q->h.op == TLP_OP_SNAPSHOT_LATEST) {
		return false;
	}
	/* a write proves the leadership by its commit; a read needs the
	 * leader's read lease (linearizable reads) */
	if (tlc_serving(q->b->cluster) &&
	    (!is_read(q->h.op) || tlc_read_fence(q->b->cluster) == TL_OK)) {
		return false;
	}
	tlc_leader_url(q->b->cluster, url, sizeof(url));
	atomic_fetch_add(&q->b->m.not_leader, 1);
	tlb_send_frame(
	    q->s, q->h.op, TLP_F_REPLY, q->h.reqid, enc_not_leader, &a);
	return true;
}

static const handler_fn handlers[TLP_OP_MAX_] = {
#define TLP_OP(name, code, kind, summary) [code] = h_##name,
#include "timeline/ops.def"
#undef TLP_OP
};

void
tlb_handle(tlb_broker *b, tlb_job *j)
{
	req q = {.b = b, .s = j->s, .job = j};
	int rv = tlp_hdr_decode(&q.h, j->frame, j->len);
	char detail[96];

	if (tlb_session_ending(q.s)) {
		goto done; /* closed, or closing after an error reply */
	}
	if (rv == TL_ENOTSUP) {
		q.h.op = 0;
		reply_err(&q, TL_ENOTSUP,
		    "protocol version not supported; this broker "
		    "speaks " TLP_VERSION_STR);
		tlb_session_close_after_reply(q.s, "protocol version");
		goto done;
	}
	if (q.h.flags != 0) {
		reply_err(&q, TL_EPROTO, "clients send requests only");
		goto done;
	}
	if (q.h.op >= TLP_OP_MAX_ || handlers[q.h.op] == NULL) {
		snprintf(
		    detail, sizeof(detail), "unknown operation %u", q.h.op);
		reply_err(&q, TL_ENOTSUP, detail);
		goto done;
	}
	if (!tlb_session_greeted(q.s) && q.h.op != TLP_OP_HELLO) {
		reply_err(&q, TL_EPROTO, "the first frame must be HELLO");
		tlb_session_close_after_reply(q.s, "no hello");
		goto done;
	}
	if (b->conf.auth && q.h.op != TLP_OP_HELLO &&
	    !tlb_session_auth_refresh(q.s, tlb_auth_current(b))) {
		refuse(&q, "%s", "(the session's token was revoked)");
		tlb_session_close_after_reply(q.s, "credentials revoked");
		goto done;
	}
	atomic_fetch_add(&b->m.ops[q.h.op], 1);
	if (leader_only(&q)) {
		goto done;
	}
	tlp_r_init(&q.r, j->frame + TLP_HDR_LEN, j->len - TLP_HDR_LEN);
	handlers[q.h.op](&q);
done:
	if (!q.keep_frame) {
		tli_free(j->frame);
	}
	tlb_session_rele(j->s);
	tli_free(j);
}
