/*
 * The body codecs of proto/msgs.h behind one signature (encode from and
 * decode into a struct of the body's shape), and the round-trip property
 * the request and reply targets check on every body that decodes: the
 * encoding of what was decoded decodes again, to the same encoding.
 */
#ifndef TL_FUZZ_CODEC_H
#define TL_FUZZ_CODEC_H

#include "fuzz.h"
#include "msgs.h"

typedef struct tlf_codec {
	void (*enc)(tlp_w *w, const void *m);
	int (*dec)(tlp_r *r, void *m); /* a reply's after its head */
	void (*fini)(void *m);         /* NULL: nothing to free */
	bool reply;                    /* enc writes [0, ...] */
} tlf_codec;

/* Shapes of the bodies whose fields travel as separate arguments. */
typedef struct tlf_i64 {
	int64_t v;
} tlf_i64;
typedef struct tlf_names {
	tlp_str a, b;
} tlf_names;
typedef struct tlf_span {
	tlp_str topic;
	int64_t from, to;
} tlf_span;
typedef struct tlf_list_of {
	void *v;
	size_t n;
	bool more;
} tlf_list_of;
typedef struct tlf_counts {
	uint64_t a, w, p;
} tlf_counts;

#define TLF_STRUCT_CODEC(name, type)                               \
	static inline void tlf_enc_##name(tlp_w *w, const void *m) \
	{                                                          \
		tlp_enc_##name(w, (const type *) m);               \
	}                                                          \
	static inline int tlf_dec_##name(tlp_r *r, void *m)        \
	{                                                          \
		return tlp_dec_##name(r, (type *) m);              \
	}

TLF_STRUCT_CODEC(hello, tlp_hello)
TLF_STRUCT_CODEC(hello_rep, tlp_hello_rep)
TLF_STRUCT_CODEC(topic_create, tlp_topic)
TLF_STRUCT_CODEC(topic, tlp_topic)
TLF_STRUCT_CODEC(batch, tlp_batch)
TLF_STRUCT_CODEC(list, tlp_list)
TLF_STRUCT_CODEC(sub, tlp_sub)
TLF_STRUCT_CODEC(msg, tlp_msg)
TLF_STRUCT_CODEC(deliver, tlp_deliver)
TLF_STRUCT_CODEC(lock, tlp_lock)
TLF_STRUCT_CODEC(lock_rep, tlp_delivery)
TLF_STRUCT_CODEC(cluster_req, tlp_cluster_req)
TLF_STRUCT_CODEC(cluster_status, tlp_cluster_status)
TLF_STRUCT_CODEC(snap_read, tlp_snap_read)
TLF_STRUCT_CODEC(snap_chunk, tlp_snap_chunk)
TLF_STRUCT_CODEC(snap_latest, tlp_snap_latest)

static inline void
tlf_batch_fini(void *m)
{
	tlp_batch_fini(m);
}

static inline void
tlf_deliver_fini(void *m)
{
	tlp_deliver_fini(m);
}

static inline void
tlf_cluster_status_fini(void *m)
{
	tlp_cluster_status_fini(m);
}

static inline void
tlf_list_fini(void *m)
{
	tli_free(((tlf_list_of *) m)->v);
}

static inline void
tlf_enc_ping(tlp_w *w, const void *m)
{
	tlp_enc_ping(w, ((const tlf_i64 *) m)->v);
}

static inline int
tlf_dec_ping(tlp_r *r, void *m)
{
	return tlp_dec_ping(r, &((tlf_i64 *) m)->v);
}

static inline void
tlf_enc_ping_rep(tlp_w *w, const void *m)
{
	tlp_enc_ping_rep(w, ((const tlf_i64 *) m)->v);
}

static inline int
tlf_dec_ping_rep(tlp_r *r, void *m)
{
	return tlp_dec_ping_rep(r, &((tlf_i64 *) m)->v);
}

static inline void
tlf_enc_name(tlp_w *w, const void *m)
{
	tlp_enc_name(w, ((const tlf_names *) m)->a);
}

static inline int
tlf_dec_name(tlp_r *r, void *m)
{
	return tlp_dec_name(r, &((tlf_names *) m)->a);
}

static inline void
tlf_enc_get(tlp_w *w, const void *m)
{
	const tlf_names *q = m;
	tlp_enc_get(w, q->a, q->b);
}

static inline int
tlf_dec_get(tlp_r *r, void *m)
{
	tlf_names *q = m;
	return tlp_dec_get(r, &q->a, &q->b);
}

static inline void
tlf_enc_count(tlp_w *w, const void *m)
{
	const tlf_span *q = m;
	tlp_enc_count(w, q->topic, q->from, q->to);
}

static inline int
tlf_dec_count(tlp_r *r, void *m)
{
	tlf_span *q = m;
	return tlp_dec_count(r, &q->topic, &q->from, &q->to);
}

static inline void
tlf_enc_counts(tlp_w *w, const void *m)
{
	const tlf_counts *q = m;
	tlp_enc_counts(w, q->a, q->w, q->p);
}

static inline int
tlf_dec_counts(tlp_r *r, void *m)
{
	tlf_counts *q = m;
	return tlp_dec_counts(r, &q->a, &q->w, &q->p);
}

static inline void
tlf_enc_results(tlp_w *w, const void *m)
{
	const tlf_list_of *q = m;
	tlp_enc_results(w, q->v, q->n);
}

static inline int
tlf_dec_results(tlp_r *r, void *m)
{
	tlf_list_of *q = m;
	tlp_result *v = NULL;
	int rv = tlp_dec_results(r, &v, &q->n);

	q->v = v;
	return rv;
}

static inline void
tlf_enc_entries(tlp_w *w, const void *m)
{
	const tlf_list_of *q = m;
	tlp_enc_entries(w, q->v, q->n, q->more);
}

static inline int
tlf_dec_entries(tlp_r *r, void *m)
{
	tlf_list_of *q = m;
	tlp_entry *v = NULL;
	int rv = tlp_dec_entries(r, &v, &q->n, &q->more);

	q->v = v;
	return rv;
}

/* TOPIC_LIST's reply: [0, [topic...]]; the broker writes each topic as
 * tlp_enc_topic's record without its [0, ...] wrapper. */
static inline void
tlf_enc_topic_list(tlp_w *w, const void *m)
{
	const tlf_list_of *q = m;
	const tlp_topic *t = q->v;

	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	tlp_w_array(w, q->n);
	for (size_t i = 0; i < q->n; i++) {
		tli_buf tmp;
		tlp_w tw;

		tli_buf_init(&tmp);
		tlp_w_init(&tw, &tmp);
		tlp_enc_topic(&tw, &t[i]);
		tli_buf_append(w->b, tmp.data + 2, tmp.len - 2);
		tli_buf_fini(&tmp);
	}
}

static inline int
tlf_dec_topic_list(tlp_r *r, void *m)
{
	tlf_list_of *q = m;
	tlp_topic *v = NULL;
	int rv = tlp_dec_topic_list(r, &v, &q->n);

	q->v = v;
	return rv;
}

/* Decode b as c says (a reply: its head first, which must say 0). */
static inline int
tlf_decode(const tlf_codec *c, const tli_buf *b, void *m)
{
	tlp_r r;

	tlp_r_init(&r, b->data, b->len);
	if (c->reply) {
		int err = -1;
		tlp_str detail;
		size_t nf;
		if (tlp_dec_reply_head(&r, &err, &detail, &nf) != TL_OK ||
		    err != TL_OK) {
			return TL_EPROTO;
		}
	}
	return c->dec(&r, m);
}

/* m was decoded with c: its encoding decodes, and encodes the same. */
static inline void
tlf_roundtrip(const tlf_codec *c, const void *m, void *tmp)
{
	tli_buf b1, b2;
	tlp_w w;

	tli_buf_init(&b1);
	tli_buf_init(&b2);
	tlp_w_init(&w, &b1);
	c->enc(&w, m);
	TLF_CHECK(!b1.oom);
	TLF_CHECK(tlf_decode(c, &b1, tmp) == TL_OK);
	tlp_w_init(&w, &b2);
	c->enc(&w, tmp);
	TLF_CHECK(b1.len == b2.len && memcmp(b1.data, b2.data, b1.len) == 0);
	if (c->fini != NULL) {
		c->fini(tmp);
	}
	tli_buf_fini(&b1);
	tli_buf_fini(&b2);
}

#endif
