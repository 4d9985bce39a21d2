/*
 * Encoders and strict decoders of the operation bodies (see msgs.h).
 * Reply encoders write the whole array [0, fields...]; reply decoders read
 * the fields after tlp_dec_reply_head has read the array and the code.
 */
#include "msgs.h"

/* ---- small helpers ---- */

static void
w_str(tlp_w *w, tlp_str s)
{
	tlp_w_str(w, s.p != NULL ? s.p : "", s.n);
}

static int
r_str(tlp_r *r, size_t max, tlp_str *s)
{
	return tlp_r_str(r, max, &s->p, &s->n);
}

static int
r_u32(tlp_r *r, uint32_t *v)
{
	uint64_t u = 0;

	if (tlp_r_uint(r, &u) != TL_OK) {
		return r->err;
	}
	if (u > UINT32_MAX) {
		r->err = TL_ERANGE;
		return r->err;
	}
	*v = (uint32_t) u;
	return TL_OK;
}

/* Read an array header that must have exactly n elements. */
static int
r_tuple(tlp_r *r, size_t n)
{
	size_t got;

	if (tlp_r_array(r, n, &got) != TL_OK) {
		return r->err == TL_ETOOLARGE ? (r->err = TL_EPROTO) : r->err;
	}
	if (got != n) {
		r->err = TL_EPROTO;
	}
	return r->err;
}

/* A nil or a value: *has tells which. */
static int
r_opt_int(tlp_r *r, bool *has, int64_t *v)
{
	bool nil;

	if (tlp_r_nil(r, &nil) != TL_OK) {
		return r->err;
	}
	*has = !nil;
	return nil ? TL_OK : tlp_r_int(r, v);
}

/* An array header whose count is checked against max, then an array of
 * that many zeroed elements of elem bytes (one more, so 0 allocates). */
static int
r_alloc_array(tlp_r *r, size_t max, size_t elem, void **arr, size_t *n)
{
	if (tlp_r_array(r, max, n) != TL_OK) {
		return r->err;
	}
	if ((*arr = tli_zalloc(elem * (*n + 1))) == NULL) {
		return TL_ENOMEM;
	}
	return TL_OK;
}

/* [name, name, [element...]]: the head of a batch and of a push. */
static int
r_named_list(
    tlp_r *r, tlp_str *a, tlp_str *b, size_t elem, void **arr, size_t *n)
{
	r_tuple(r, 3);
	r_str(r, TL_MAX_NAME_LEN, a);
	r_str(r, TL_MAX_NAME_LEN, b);
	return r_alloc_array(r, TL_MAX_BATCH, elem, arr, n);
}

/* ---- sessions ---- */

void
tlp_enc_hello(tlp_w *w, const tlp_hello *m)
{
	tlp_w_array(w, 5);
	tlp_w_uint(w, m->proto);
	w_str(w, m->name);
	w_str(w, m->role);
	tlp_w_int(w, m->client_ms);
	w_str(w, m->token);
}

int
tlp_dec_hello(tlp_r *r, tlp_hello *m)
{
	r_tuple(r, 5);
	tlp_r_uint(r, &m->proto);
	r_str(r, TL_MAX_NAME_LEN, &m->name);
	r_str(r, 32, &m->role);
	tlp_r_int(r, &m->client_ms);
	r_str(r, 1024, &m->token);
	return tlp_r_end(r);
}

void
tlp_enc_hello_rep(tlp_w *w, const tlp_hello_rep *m)
{
	tlp_w_array(w, 4);
	tlp_w_uint(w, 0);
	tlp_w_int(w, m->broker_ms);
	w_str(w, m->broker_name);
	tlp_w_uint(w, m->session_id);
}

int
tlp_dec_hello_rep(tlp_r *r, tlp_hello_rep *m)
{
	tlp_r_int(r, &m->broker_ms);
	r_str(r, TL_MAX_NAME_LEN, &m->broker_name);
	tlp_r_uint(r, &m->session_id);
	return tlp_r_end(r);
}

void
tlp_enc_ping(tlp_w *w, int64_t ms)
{
	tlp_w_array(w, 1);
	tlp_w_int(w, ms);
}

int
tlp_dec_ping(tlp_r *r, int64_t *ms)
{
	r_tuple(r, 1);
	tlp_r_int(r, ms);
	return tlp_r_end(r);
}

void
tlp_enc_ping_rep(tlp_w *w, int64_t broker_ms)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	tlp_w_int(w, broker_ms);
}

int
tlp_dec_ping_rep(tlp_r *r, int64_t *broker_ms)
{
	tlp_r_int(r, broker_ms);
	return tlp_r_end(r);
}

/* ---- topics ---- */

void
tlp_enc_topic_create(tlp_w *w, const tlp_topic *t)
{
	tlp_w_array(w, 6);
	w_str(w, t->name);
	tlp_w_uint(w, t->buckets);
	tlp_w_uint(w, t->max_body);
	tlp_w_int(w, t->default_lease_ms);
	tlp_w_int(w, t->max_lease_ms);
	tlp_w_uint(w, t->max_deliveries);
}

int
tlp_dec_topic_create(tlp_r *r, tlp_topic *t)
{
	memset(t, 0, sizeof(*t));
	r_tuple(r, 6);
	r_str(r, TL_MAX_NAME_LEN, &t->name);
	r_u32(r, &t->buckets);
	r_u32(r, &t->max_body);
	tlp_r_int(r, &t->default_lease_ms);
	tlp_r_int(r, &t->max_lease_ms);
	r_u32(r, &t->max_deliveries);
	return tlp_r_end(r);
}

void
tlp_enc_name(tlp_w *w, tlp_str name)
{
	tlp_w_array(w, 1);
	w_str(w, name);
}

int
tlp_dec_name(tlp_r *r, tlp_str *name)
{
	r_tuple(r, 1);
	r_str(r, TL_MAX_NAME_LEN, name);
	return tlp_r_end(r);
}

/* The 11-field topic record of replies. */
static void
w_topic(tlp_w *w, const tlp_topic *t)
{
	tlp_w_array(w, 11);
	w_str(w, t->name);
	tlp_w_uint(w, t->buckets);
	tlp_w_uint(w, t->max_body);
	tlp_w_int(w, t->default_lease_ms);
	tlp_w_int(w, t->max_lease_ms);
	tlp_w_uint(w, t->max_deliveries);
	tlp_w_uint(w, t->messages);
	tlp_w_uint(w, t->available);
	tlp_w_uint(w, t->waiting);
	tlp_w_uint(w, t->processing);
	tlp_w_uint(w, t->dead);
}

static int
r_topic(tlp_r *r, tlp_topic *t)
{
	r_tuple(r, 11);
	r_str(r, TL_MAX_NAME_LEN, &t->name);
	r_u32(r, &t->buckets);
	r_u32(r, &t->max_body);
	tlp_r_int(r, &t->default_lease_ms);
	tlp_r_int(r, &t->max_lease_ms);
	r_u32(r, &t->max_deliveries);
	tlp_r_uint(r, &t->messages);
	tlp_r_uint(r, &t->available);
	tlp_r_uint(r, &t->waiting);
	tlp_r_uint(r, &t->processing);
	return tlp_r_uint(r, &t->dead);
}

void
tlp_enc_topic(tlp_w *w, const tlp_topic *t)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	w_topic(w, t);
}

int
tlp_dec_topic(tlp_r *r, tlp_topic *t)
{
	r_topic(r, t);
	return tlp_r_end(r);
}

int
tlp_dec_topic_list(tlp_r *r, tlp_topic **v, size_t *n)
{
	size_t cnt = 0;
	void *arr = NULL;
	tlp_topic *t;
	int rv;

	*v = NULL;
	*n = 0;
	if ((rv = r_alloc_array(r, 65536, sizeof(*t), &arr, &cnt)) != TL_OK) {
		return rv;
	}
	t = arr;
	for (size_t i = 0; i < cnt && r->err == TL_OK; i++) {
		r_topic(r, &t[i]);
	}
	if (tlp_r_end(r) != TL_OK) {
		tli_free(t);
		return r->err;
	}
	*v = t;
	*n = cnt;
	return TL_OK;
}

/* ---- batches ---- */

void
tlp_enc_batch(tlp_w *w, const tlp_batch *b)
{
	tlp_w_array(w, 3);
	w_str(w, b->topic);
	w_str(w, b->who);
	tlp_w_array(w, b->n);
	for (size_t i = 0; i < b->n; i++) {
		const tlp_item *it = &b->items[i];
		tlp_w_array(w, 5);
		if (it->id.n > 0) {
			w_str(w, it->id);
		} else {
			tlp_w_nil(w);
		}
		tlp_w_uint(w, it->version);
		tlp_w_int(w, it->ts);
		tlp_w_bool(w, it->rel);
		if (it->body != NULL) {
			tlp_w_bin(w, it->body, it->body_len);
		} else {
			tlp_w_nil(w);
		}
	}
}

int
tlp_dec_batch(tlp_r *r, tlp_batch *b)
{
	void *arr = NULL;
	int rv;

	memset(b, 0, sizeof(*b));
	rv = r_named_list(r, &b->topic, &b->who, sizeof(tlp_item), &arr, &b->n);
	if (rv != TL_OK) {
		return rv;
	}
	b->items = arr;
	for (size_t i = 0; i < b->n && r->err == TL_OK; i++) {
		tlp_item *it = &b->items[i];
		r_tuple(r, 5);
		r_str(r, TL_MAX_ID_LEN, &it->id);
		tlp_r_uint(r, &it->version);
		tlp_r_int(r, &it->ts);
		tlp_r_bool(r, &it->rel);
		tlp_r_bin(r, TL_MAX_BODY_LEN, &it->body, &it->body_len);
	}
	if (tlp_r_end(r) != TL_OK) {
		tlp_batch_fini(b);
		return r->err;
	}
	return TL_OK;
}

void
tlp_batch_fini(tlp_batch *b)
{
	tli_free(b->items);
	b->items = NULL;
	b->n = 0;
}

void
tlp_enc_results(tlp_w *w, const tlp_result *v, size_t n)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	tlp_w_array(w, n);
	for (size_t i = 0; i < n; i++) {
		tlp_w_array(w, 5);
		tlp_w_uint(w, (uint64_t) v[i].err);
		w_str(w, v[i].id);
		tlp_w_uint(w, v[i].version);
		tlp_w_int(w, v[i].ts);
		tlp_w_uint(w, v[i].deliveries);
	}
}

int
tlp_dec_results(tlp_r *r, tlp_result **v, size_t *n)
{
	size_t cnt = 0;
	void *arr = NULL;
	tlp_result *res;
	int rv;

	*v = NULL;
	*n = 0;
	if ((rv = r_alloc_array(r, TL_MAX_BATCH, sizeof(*res), &arr, &cnt)) !=
	    TL_OK) {
		return rv;
	}
	res = arr;
	for (size_t i = 0; i < cnt && r->err == TL_OK; i++) {
		uint32_t err = 0;
		r_tuple(r, 5);
		r_u32(r, &err);
		res[i].err = (int) err;
		r_str(r, TL_MAX_ID_LEN, &res[i].id);
		tlp_r_uint(r, &res[i].version);
		tlp_r_int(r, &res[i].ts);
		r_u32(r, &res[i].deliveries);
	}
	if (tlp_r_end(r) != TL_OK) {
		tli_free(res);
		return r->err;
	}
	*v = res;
	*n = cnt;
	return TL_OK;
}

/* ---- reads ---- */

void
tlp_enc_get(tlp_w *w, tlp_str topic, tlp_str id)
{
	tlp_w_array(w, 2);
	w_str(w, topic);
	w_str(w, id);
}

int
tlp_dec_get(tlp_r *r, tlp_str *topic, tlp_str *id)
{
	r_tuple(r, 2);
	r_str(r, TL_MAX_NAME_LEN, topic);
	r_str(r, TL_MAX_ID_LEN, id);
	return tlp_r_end(r);
}

static void
w_msg(tlp_w *w, const tlp_msg *m)
{
	tlp_w_array(w, 9);
	w_str(w, m->id);
	tlp_w_int(w, m->ts);
	tlp_w_uint(w, m->bucket);
	w_str(w, m->owner);
	w_str(w, m->consumer);
	tlp_w_uint(w, m->version);
	tlp_w_uint(w, m->deliveries);
	tlp_w_int(w, m->created_at);
	tlp_w_bin(w, m->body != NULL ? m->body : "", m->body_len);
}

void
tlp_enc_msg(tlp_w *w, const tlp_msg *m)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	w_msg(w, m);
}

int
tlp_dec_msg(tlp_r *r, tlp_msg *m)
{
	r_tuple(r, 9);
	r_str(r, TL_MAX_ID_LEN, &m->id);
	tlp_r_int(r, &m->ts);
	r_u32(r, &m->bucket);
	r_str(r, TL_MAX_NAME_LEN, &m->owner);
	r_str(r, TL_MAX_NAME_LEN, &m->consumer);
	tlp_r_uint(r, &m->version);
	r_u32(r, &m->deliveries);
	tlp_r_int(r, &m->created_at);
	tlp_r_bin(r, TL_MAX_BODY_LEN, &m->body, &m->body_len);
	return tlp_r_end(r);
}

void
tlp_enc_list(tlp_w *w, const tlp_list *l)
{
	tlp_w_array(w, 5);
	w_str(w, l->topic);
	w_str(w, l->owner);
	tlp_w_uint(w, l->limit);
	if (l->has_cursor) {
		tlp_w_int(w, l->cursor_ts);
		w_str(w, l->cursor_id);
	} else {
		tlp_w_nil(w);
		tlp_w_nil(w);
	}
}

int
tlp_dec_list(tlp_r *r, tlp_list *l)
{
	memset(l, 0, sizeof(*l));
	r_tuple(r, 5);
	r_str(r, TL_MAX_NAME_LEN, &l->topic);
	r_str(r, TL_MAX_NAME_LEN, &l->owner);
	r_u32(r, &l->limit);
	r_opt_int(r, &l->has_cursor, &l->cursor_ts);
	r_str(r, TL_MAX_ID_LEN, &l->cursor_id);
	return tlp_r_end(r);
}

void
tlp_enc_entries(tlp_w *w, const tlp_entry *v, size_t n, bool more)
{
	tlp_w_array(w, 3);
	tlp_w_uint(w, 0);
	tlp_w_array(w, n);
	for (size_t i = 0; i < n; i++) {
		tlp_w_array(w, 4);
		w_str(w, v[i].id);
		tlp_w_int(w, v[i].ts);
		tlp_w_uint(w, v[i].version);
		tlp_w_bool(w, v[i].locked);
	}
	tlp_w_bool(w, more);
}

int
tlp_dec_entries(tlp_r *r, tlp_entry **v, size_t *n, bool *more)
{
	size_t cnt = 0;
	void *arr = NULL;
	tlp_entry *e;
	int rv;

	*v = NULL;
	*n = 0;
	if ((rv = r_alloc_array(r, TL_MAX_BATCH, sizeof(*e), &arr, &cnt)) !=
	    TL_OK) {
		return rv;
	}
	e = arr;
	for (size_t i = 0; i < cnt && r->err == TL_OK; i++) {
		r_tuple(r, 4);
		r_str(r, TL_MAX_ID_LEN, &e[i].id);
		tlp_r_int(r, &e[i].ts);
		tlp_r_uint(r, &e[i].version);
		tlp_r_bool(r, &e[i].locked);
	}
	tlp_r_bool(r, more);
	if (tlp_r_end(r) != TL_OK) {
		tli_free(e);
		return r->err;
	}
	*v = e;
	*n = cnt;
	return TL_OK;
}

void
tlp_enc_count(tlp_w *w, tlp_str topic, int64_t from, int64_t to)
{
	tlp_w_array(w, 3);
	w_str(w, topic);
	tlp_w_int(w, from);
	tlp_w_int(w, to);
}

int
tlp_dec_count(tlp_r *r, tlp_str *topic, int64_t *from, int64_t *to)
{
	r_tuple(r, 3);
	r_str(r, TL_MAX_NAME_LEN, topic);
	tlp_r_int(r, from);
	tlp_r_int(r, to);
	return tlp_r_end(r);
}

void
tlp_enc_counts(tlp_w *w, uint64_t a, uint64_t wt, uint64_t p)
{
	tlp_w_array(w, 4);
	tlp_w_uint(w, 0);
	tlp_w_uint(w, a);
	tlp_w_uint(w, wt);
	tlp_w_uint(w, p);
}

int
tlp_dec_counts(tlp_r *r, uint64_t *a, uint64_t *wt, uint64_t *p)
{
	tlp_r_uint(r, a);
	tlp_r_uint(r, wt);
	tlp_r_uint(r, p);
	return tlp_r_end(r);
}

/* ---- consumers ---- */

void
tlp_enc_sub(tlp_w *w, const tlp_sub *s)
{
	tlp_w_array(w, 4);
	w_str(w, s->topic);
	w_str(w, s->consumer);
	tlp_w_int(w, s->lease_ms);
	tlp_w_uint(w, s->credit);
}

int
tlp_dec_sub(tlp_r *r, tlp_sub *s)
{
	r_tuple(r, 4);
	r_str(r, TL_MAX_NAME_LEN, &s->topic);
	r_str(r, TL_MAX_NAME_LEN, &s->consumer);
	tlp_r_int(r, &s->lease_ms);
	r_u32(r, &s->credit);
	return tlp_r_end(r);
}

void
tlp_enc_deliver(tlp_w *w, const tlp_deliver *d)
{
	tlp_w_array(w, 3);
	w_str(w, d->topic);
	w_str(w, d->consumer);
	tlp_w_array(w, d->n);
	for (size_t i = 0; i < d->n; i++) {
		const tlp_delivery *m = &d->v[i];
		tlp_w_array(w, 8);
		w_str(w, m->id);
		tlp_w_uint(w, m->version);
		tlp_w_int(w, m->lease_until);
		tlp_w_int(w, m->due_ts);
		tlp_w_uint(w, m->deliveries);
		w_str(w, m->owner);
		tlp_w_bin(w, m->body != NULL ? m->body : "", m->body_len);
		tlp_w_int(w, m->placed_at);
	}
}

int
tlp_dec_deliver(tlp_r *r, tlp_deliver *d)
{
	void *arr = NULL;
	int rv;

	memset(d, 0, sizeof(*d));
	rv = r_named_list(
	    r, &d->topic, &d->consumer, sizeof(tlp_delivery), &arr, &d->n);
	if (rv != TL_OK) {
		return rv;
	}
	d->v = arr;
	for (size_t i = 0; i < d->n && r->err == TL_OK; i++) {
		tlp_delivery *m = &d->v[i];
		r_tuple(r, 8);
		r_str(r, TL_MAX_ID_LEN, &m->id);
		tlp_r_uint(r, &m->version);
		tlp_r_int(r, &m->lease_until);
		tlp_r_int(r, &m->due_ts);
		r_u32(r, &m->deliveries);
		r_str(r, TL_MAX_NAME_LEN, &m->owner);
		tlp_r_bin(r, TL_MAX_BODY_LEN, &m->body, &m->body_len);
		tlp_r_int(r, &m->placed_at);
	}
	if (tlp_r_end(r) != TL_OK) {
		tlp_deliver_fini(d);
		return r->err;
	}
	return TL_OK;
}

void
tlp_deliver_fini(tlp_deliver *d)
{
	tli_free(d->v);
	d->v = NULL;
	d->n = 0;
}

/* ---- replies ---- */

void
tlp_enc_error(tlp_w *w, int err, const char *detail)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, (uint64_t) err);
	tlp_w_cstr(w, detail != NULL ? detail : "");
}

void
tlp_enc_ok(tlp_w *w)
{
	tlp_w_array(w, 1);
	tlp_w_uint(w, 0);
}

int
tlp_dec_reply_head(tlp_r *r, int *err, tlp_str *detail, size_t *nfields)
{
	size_t n = 0;
	uint32_t code = 0;

	detail->p = NULL;
	detail->n = 0;
	if (tlp_r_array(r, 64, &n) != TL_OK || n == 0) {
		return r->err != TL_OK ? r->err : TL_EPROTO;
	}
	if (r_u32(r, &code) != TL_OK) {
		return r->err;
	}
	*err = (int) code;
	*nfields = n - 1;
	if (code != TL_OK && n >= 2) {
		if (r_str(r, 4096, detail) != TL_OK) {
			return r->err;
		}
		*nfields = n - 2;
	}
	return TL_OK;
}
