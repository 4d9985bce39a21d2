/*
 * Encoders and strict decoders of the operation bodies (see msgs.h).
 * Each message shape is written once, as a table of its fields (wire type
 * and place in the C struct); one writer and one reader walk the tables, so
 * an encoder and its decoder cannot disagree on order or types. Reply
 * encoders write the whole array [0, fields...]; reply decoders read the
 * fields after tlp_dec_reply_head has read the array and the code.
 */
#include <limits.h>
#include <stddef.h>

#include "msgs.h"

/* ---- field tables ---- */

enum fkind {
	F_STR,  /* tlp_str, at most max bytes */
	F_NSTR, /* tlp_str, written as nil when empty (CREATE's ids) */
	F_U64,
	F_U32, /* uint32_t: a larger value on the wire is TL_ERANGE */
	F_I64,
	F_BOOL,
	F_ERR,  /* int error code, written unsigned, read as F_U32 */
	F_BIN,  /* body at off, its size_t length at off2: "" when NULL */
	F_NBIN, /* the same, written as nil when NULL (CREATE's bodies) */
};

typedef struct field {
	uint8_t kind;
	uint16_t off;
	uint16_t off2;
	uint32_t max;
	/* Added after the record's first layout (FIELD_OPT). A record's
	 * optional fields all come after its first layout's, in the order
	 * they were added; see "Records grow at the end" below. */
	uint8_t opt;
} field;

/* A field of kind at member m of struct T; strings and bodies with their
 * limit, bodies with the member that holds their length. */
#define FIELD(kind, T, m)                       \
	{                                       \
		(kind), offsetof(T, m), 0, 0, 0 \
	}
#define FSTR(kind, T, m, lim)                       \
	{                                           \
		(kind), offsetof(T, m), 0, (lim), 0 \
	}
#define FBODY(kind, T, m, len)                                               \
	{                                                                    \
		(kind), offsetof(T, m), offsetof(T, len), TL_MAX_BODY_LEN, 0 \
	}
/* An integer or bool field added to a record after its first layout. */
#define FIELD_OPT(kind, T, m)                   \
	{                                       \
		(kind), offsetof(T, m), 0, 0, 1 \
	}
#define NF(tab) (sizeof(tab) / sizeof((tab)[0]))

#define NAME TL_MAX_NAME_LEN
#define ID TL_MAX_ID_LEN

static const field hello_f[] = {FIELD(F_U64, tlp_hello, proto),
    FSTR(F_STR, tlp_hello, name, NAME), FSTR(F_STR, tlp_hello, role, 32),
    FIELD(F_I64, tlp_hello, client_ms), FSTR(F_STR, tlp_hello, token, 1024),
    FIELD_OPT(F_U64, tlp_hello, client_id)};

static const field hello_rep_f[] = {FIELD(F_I64, tlp_hello_rep, broker_ms),
    FSTR(F_STR, tlp_hello_rep, broker_name, NAME),
    FIELD(F_U64, tlp_hello_rep, session_id),
    FIELD_OPT(F_I64, tlp_hello_rep, answers_ms)};

/* TOPIC_CREATE sends the first six; replies carry all eleven. */
static const field topic_f[] = {FSTR(F_STR, tlp_topic, name, NAME),
    FIELD(F_U32, tlp_topic, buckets), FIELD(F_U32, tlp_topic, max_body),
    FIELD(F_I64, tlp_topic, default_lease_ms),
    FIELD(F_I64, tlp_topic, max_lease_ms),
    FIELD(F_U32, tlp_topic, max_deliveries), FIELD(F_U64, tlp_topic, messages),
    FIELD(F_U64, tlp_topic, available), FIELD(F_U64, tlp_topic, waiting),
    FIELD(F_U64, tlp_topic, processing), FIELD(F_U64, tlp_topic, dead)};
#define TOPIC_CREATE_NF 6

static const field item_f[] = {FSTR(F_NSTR, tlp_item, id, ID),
    FIELD(F_U64, tlp_item, version), FIELD(F_I64, tlp_item, ts),
    FIELD(F_BOOL, tlp_item, rel), FBODY(F_NBIN, tlp_item, body, body_len),
    FIELD_OPT(F_I64, tlp_item, every_ms), FIELD_OPT(F_U32, tlp_item, times),
    FIELD_OPT(F_I64, tlp_item, until), FIELD_OPT(F_BOOL, tlp_item, catch_up)};

static const field result_f[] = {FIELD(F_ERR, tlp_result, err),
    FSTR(F_STR, tlp_result, id, ID), FIELD(F_U64, tlp_result, version),
    FIELD(F_I64, tlp_result, ts), FIELD(F_U32, tlp_result, deliveries),
    FIELD_OPT(F_U32, tlp_result, seq)};

static const field msg_f[] = {FSTR(F_STR, tlp_msg, id, ID),
    FIELD(F_I64, tlp_msg, ts), FIELD(F_U32, tlp_msg, bucket),
    FSTR(F_STR, tlp_msg, owner, NAME), FSTR(F_STR, tlp_msg, consumer, NAME),
    FIELD(F_U64, tlp_msg, version), FIELD(F_U32, tlp_msg, deliveries),
    FIELD(F_I64, tlp_msg, created_at), FBODY(F_BIN, tlp_msg, body, body_len),
    FIELD_OPT(F_I64, tlp_msg, every_ms), FIELD_OPT(F_I64, tlp_msg, start),
    FIELD_OPT(F_U32, tlp_msg, seq), FIELD_OPT(F_U32, tlp_msg, last),
    FIELD_OPT(F_BOOL, tlp_msg, catch_up)};

/* LIST's head; the cursor that follows is a pair of nils or values. */
static const field list_f[] = {FSTR(F_STR, tlp_list, topic, NAME),
    FSTR(F_STR, tlp_list, owner, NAME), FIELD(F_U32, tlp_list, limit)};

static const field entry_f[] = {FSTR(F_STR, tlp_entry, id, ID),
    FIELD(F_I64, tlp_entry, ts), FIELD(F_U64, tlp_entry, version),
    FIELD(F_BOOL, tlp_entry, locked)};

static const field sub_f[] = {FSTR(F_STR, tlp_sub, topic, NAME),
    FSTR(F_STR, tlp_sub, consumer, NAME), FIELD(F_I64, tlp_sub, lease_ms),
    FIELD(F_U32, tlp_sub, credit)};

static const field delivery_f[] = {FSTR(F_STR, tlp_delivery, id, ID),
    FIELD(F_U64, tlp_delivery, version),
    FIELD(F_I64, tlp_delivery, lease_until), FIELD(F_I64, tlp_delivery, due_ts),
    FIELD(F_U32, tlp_delivery, deliveries),
    FSTR(F_STR, tlp_delivery, owner, NAME),
    FBODY(F_BIN, tlp_delivery, body, body_len),
    FIELD(F_I64, tlp_delivery, placed_at), FIELD_OPT(F_U32, tlp_delivery, seq),
    FIELD_OPT(F_I64, tlp_delivery, every_ms),
    FIELD_OPT(F_I64, tlp_delivery, start),
    FIELD_OPT(F_U32, tlp_delivery, last)};

static const field lock_f[] = {FSTR(F_STR, tlp_lock, topic, NAME),
    FSTR(F_STR, tlp_lock, consumer, NAME), FSTR(F_STR, tlp_lock, id, ID),
    FIELD(F_I64, tlp_lock, lease_ms),
    FSTR(F_NSTR, tlp_lock, create_group, NAME)};

static const field cluster_req_f[] = {FSTR(F_STR, tlp_cluster_req, action, 16),
    FIELD(F_U64, tlp_cluster_req, id), FSTR(F_STR, tlp_cluster_req, raft, 255),
    FSTR(F_STR, tlp_cluster_req, url, 255)};

static const field cluster_node_f[] = {FIELD(F_U64, tlp_cluster_node, id),
    FSTR(F_STR, tlp_cluster_node, raft, 255),
    FSTR(F_STR, tlp_cluster_node, url, 255),
    FSTR(F_STR, tlp_cluster_node, role, 16),
    FIELD(F_U64, tlp_cluster_node, match),
    FIELD(F_BOOL, tlp_cluster_node, clock_known),
    FIELD(F_I64, tlp_cluster_node, clock_offset_ms)};

/* The status head; its nodes follow as a list. */
static const field cluster_status_f[] = {
    FIELD(F_U64, tlp_cluster_status, self_id),
    FIELD(F_U64, tlp_cluster_status, leader_id),
    FIELD(F_U64, tlp_cluster_status, term),
    FIELD(F_U64, tlp_cluster_status, commit_index),
    FIELD(F_U64, tlp_cluster_status, applied_index),
    FIELD(F_U64, tlp_cluster_status, last_index),
    FSTR(F_STR, tlp_cluster_status, state, 16),
    FIELD(F_BOOL, tlp_cluster_status, serving),
    FIELD(F_BOOL, tlp_cluster_status, degraded),
    FIELD(F_I64, tlp_cluster_status, majority_offset_ms)};

static const field snap_read_f[] = {FSTR(F_STR, tlp_snap_read, name, 128),
    FSTR(F_STR, tlp_snap_read, file, 128), FIELD(F_U64, tlp_snap_read, offset),
    FIELD(F_U64, tlp_snap_read, max)};

static const field snap_latest_f[] = {FIELD(F_U64, tlp_snap_latest, min_index)};
static const field snap_chunk_f[] = {FIELD(F_U64, tlp_snap_chunk, size),
    FBODY(F_BIN, tlp_snap_chunk, data, data_len)};

/* The bodies whose fields travel as separate arguments. */
typedef struct name2 {
	tlp_str a, b;
} name2;
static const field get_f[] = {
    FSTR(F_STR, name2, a, NAME), FSTR(F_STR, name2, b, ID)};
static const field named_f[] = {
    FSTR(F_STR, name2, a, NAME), FSTR(F_STR, name2, b, NAME)};
/* A URL (TL_ENOTLEADER's leader). */
static const field url_f[] = {FSTR(F_STR, name2, a, 1024)};

typedef struct span {
	tlp_str topic;
	int64_t from, to;
} span;
static const field span_f[] = {FSTR(F_STR, span, topic, NAME),
    FIELD(F_I64, span, from), FIELD(F_I64, span, to)};

typedef struct ints {
	uint64_t v[3];
	int64_t i;
} ints;
static const field counts_f[] = {FIELD(F_U64, ints, v[0]),
    FIELD(F_U64, ints, v[1]), FIELD(F_U64, ints, v[2])};
static const field int_f[] = {FIELD(F_I64, ints, i)};

/* ---- the writer ---- */

#define AT(base, off, type) ((type *) (void *) ((char *) (base) + (off)))
#define CAT(base, off, type) \
	((const type *) (const void *) ((const char *) (base) + (off)))

static void
w_str(tlp_w *w, tlp_str s)
{
	tlp_w_str(w, s.p != NULL ? s.p : "", s.n);
}

/* The value of an unsigned or error-code field, widened for the wire. */
static uint64_t
field_uint(const field *f, const void *base)
{
	switch (f->kind) {
	case F_U32:
		return *CAT(base, f->off, uint32_t);
	case F_ERR:
		return (uint64_t) *CAT(base, f->off, int);
	default:
		return *CAT(base, f->off, uint64_t);
	}
}

/* A body: nil for a missing one where the field allows it, else bin. */
static void
w_body(tlp_w *w, const field *f, const void *base)
{
	const void *body = *CAT(base, f->off, const void *);

	if (body == NULL && f->kind == F_NBIN) {
		tlp_w_nil(w);
	} else {
		tlp_w_bin(
		    w, body != NULL ? body : "", *CAT(base, f->off2, size_t));
	}
}

static void
w_field(tlp_w *w, const field *f, const void *base)
{
	const tlp_str *s = CAT(base, f->off, tlp_str);

	if (f->kind == F_STR || (f->kind == F_NSTR && s->n > 0)) {
		w_str(w, *s);
	} else if (f->kind == F_NSTR) {
		tlp_w_nil(w);
	} else if (f->kind == F_I64) {
		tlp_w_int(w, *CAT(base, f->off, int64_t));
	} else if (f->kind == F_BOOL) {
		tlp_w_bool(w, *CAT(base, f->off, bool));
	} else if (f->kind == F_BIN || f->kind == F_NBIN) {
		w_body(w, f, base);
	} else {
		tlp_w_uint(w, field_uint(f, base));
	}
}

static void
w_fields(tlp_w *w, const field *f, size_t nf, const void *base)
{
	for (size_t i = 0; i < nf; i++) {
		w_field(w, &f[i], base);
	}
}

/*
 * Records grow at the end. A field added to a record after its first
 * layout is optional (FIELD_OPT): a writer leaves out the optional fields
 * at the end of a record that hold zero (false, 0), and a reader takes
 * any record from the first layout's length up, zero for the fields it
 * did not get, skipping the fields after the ones it knows. So a peer
 * built before a field was added and one built after it understand each
 * other, as long as the new field is not used (docs/protocol.md,
 * "Compatibility").
 */
static bool
field_zero(const field *f, const void *base)
{
	switch (f->kind) {
	case F_BOOL:
		return !*CAT(base, f->off, bool);
	case F_I64:
		return *CAT(base, f->off, int64_t) == 0;
	default:
		return field_uint(f, base) == 0;
	}
}

/* [fields...], without the zero optional fields at its end. */
static void
w_record(tlp_w *w, const field *f, size_t nf, const void *base)
{
	while (nf > 0 && f[nf - 1].opt && field_zero(&f[nf - 1], base)) {
		nf--;
	}
	tlp_w_array(w, nf);
	w_fields(w, f, nf, base);
}

/* [record...] of n records elem bytes apart. */
static void
w_records(
    tlp_w *w, const field *f, size_t nf, const void *v, size_t elem, size_t n)
{
	tlp_w_array(w, n);
	for (size_t i = 0; i < n; i++) {
		w_record(w, f, nf, (const char *) v + i * elem);
	}
}

/* [0, fields...]: a successful reply. */
static void
w_reply(tlp_w *w, const field *f, size_t nf, const void *base)
{
	/* an optional field at the end only when set (HELLO's answers_ms):
	 * a client of the first layout reads every reply it can get */
	while (nf > 0 && f[nf - 1].opt && field_zero(&f[nf - 1], base)) {
		nf--;
	}
	tlp_w_array(w, nf + 1);
	tlp_w_uint(w, 0);
	w_fields(w, f, nf, base);
}

/* [0, [fields...]]: a successful reply that carries one record. */
static void
w_reply_record(tlp_w *w, const field *f, size_t nf, const void *base)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	w_record(w, f, nf, base);
}

/* [a, b, [record...]]: a batch and a push. */
static void
w_named_records(tlp_w *w, const name2 *h, const field *f, size_t nf,
    const void *v, size_t elem, size_t n)
{
	tlp_w_array(w, 3);
	w_fields(w, named_f, NF(named_f), h);
	w_records(w, f, nf, v, elem, n);
}

/* ---- the reader ---- */

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

/* An error code: unsigned on the wire, and an int (errors.def) here; a
 * larger one is TL_ERANGE, not a negative code. */
static int
r_err(tlp_r *r, int *v)
{
	uint32_t u = 0;

	if (r_u32(r, &u) != TL_OK) {
		return r->err;
	}
	if (u > INT_MAX) {
		r->err = TL_ERANGE;
		return r->err;
	}
	*v = (int) u;
	return TL_OK;
}

static int
r_field(tlp_r *r, const field *f, void *base)
{
	switch (f->kind) {
	case F_STR:
	case F_NSTR:
		return r_str(r, f->max, AT(base, f->off, tlp_str));
	case F_U64:
		return tlp_r_uint(r, AT(base, f->off, uint64_t));
	case F_U32:
		return r_u32(r, AT(base, f->off, uint32_t));
	case F_I64:
		return tlp_r_int(r, AT(base, f->off, int64_t));
	case F_BOOL:
		return tlp_r_bool(r, AT(base, f->off, bool));
	case F_ERR:
		return r_err(r, AT(base, f->off, int));
	default:
		return tlp_r_bin(r, f->max, AT(base, f->off, const void *),
		    AT(base, f->off2, size_t));
	}
}

static int
r_fields(tlp_r *r, const field *f, size_t nf, void *base)
{
	for (size_t i = 0; i < nf && r->err == TL_OK; i++) {
		r_field(r, &f[i], base);
	}
	return r->err;
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

/* The most elements a record may have: the fields we know and those a
 * newer peer added after them (skipped). */
#define RECORD_MAX 64

/* [fields...]: from the first layout's fields (the ones before the first
 * optional field) up to RECORD_MAX; fields not on the wire stay as the
 * caller zeroed them, fields after nf are skipped. */
static int
r_record(tlp_r *r, const field *f, size_t nf, void *base)
{
	size_t got = 0, min = 0;

	while (min < nf && !f[min].opt) {
		min++;
	}
	if (tlp_r_array(r, RECORD_MAX, &got) != TL_OK) {
		return r->err == TL_ETOOLARGE ? (r->err = TL_EPROTO) : r->err;
	}
	if (got < min) {
		r->err = TL_EPROTO;
		return r->err;
	}
	r_fields(r, f, got < nf ? got : nf, base);
	for (size_t i = nf; i < got && r->err == TL_OK; i++) {
		tlp_r_skip(r);
	}
	return r->err;
}

/* A request body that is one record and nothing else. */
static int
r_body(tlp_r *r, const field *f, size_t nf, void *base)
{
	r_record(r, f, nf, base);
	return tlp_r_end(r);
}

/* The end of a reply whose first `used` fields were read: the fields a
 * newer peer added after those known here are skipped (a reply grows at
 * its end, as a record does), then nothing may follow the array. */
static int
r_reply_end(tlp_r *r, size_t used)
{
	for (size_t i = used; r->reply_fields != SIZE_MAX &&
	     i < r->reply_fields && r->err == TL_OK;
	     i++) {
		tlp_r_skip(r);
	}
	return tlp_r_end(r);
}

/* The fields of a successful reply (optional ones may be left out: 0),
 * then its end. */
static int
r_reply(tlp_r *r, const field *f, size_t nf, void *base)
{
	size_t i;

	for (i = 0; i < nf && r->err == TL_OK; i++) {
		if (r->reply_fields != SIZE_MAX && i >= r->reply_fields) {
			if (!f[i].opt) {
				r->err = TL_EPROTO;
			}
			break;
		}
		if (f[i].opt && r->p == r->end) {
			break; /* left out: 0 */
		}
		r_field(r, &f[i], base);
	}
	return r->err != TL_OK ? r->err : r_reply_end(r, i);
}

/* [record...] with at most max records, into an array of that many zeroed
 * elements of elem bytes (one more, so 0 allocates); freed on failure. */
static int
r_records(tlp_r *r, size_t max, const field *f, size_t nf, size_t elem,
    void **arr, size_t *n)
{
	char *v;

	*arr = NULL;
	*n = 0;
	if (tlp_r_array(r, max, n) != TL_OK) {
		return r->err;
	}
	if ((v = tli_zalloc(elem * (*n + 1))) == NULL) {
		*n = 0;
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < *n && r->err == TL_OK; i++) {
		r_record(r, f, nf, v + i * elem);
	}
	*arr = v;
	return r->err;
}

/* [a, b, [record...]]: the body of a batch and of a push; freed (and
 * nothing kept) when anything is wrong, trailing bytes included. */
static int
r_named_records(tlp_r *r, name2 *h, const field *f, size_t nf, size_t elem,
    void **arr, size_t *n)
{
	int rv;

	r_tuple(r, 3);
	r_fields(r, named_f, NF(named_f), h);
	rv = r_records(r, TL_MAX_BATCH, f, nf, elem, arr, n);
	if (rv == TL_ENOMEM || tlp_r_end(r) != TL_OK) {
		tli_free(*arr);
		*arr = NULL;
		*n = 0;
		return rv == TL_ENOMEM ? rv : r->err;
	}
	return TL_OK;
}

/* A reply that is `used` fields read by the caller, [record...] and what
 * follows it (more, for LIST); the caller's out-pointers are set only on
 * success. */
static int
r_reply_records(tlp_r *r, size_t used, size_t max, const field *f, size_t nf,
    size_t elem, void **arr, size_t *n, bool *more)
{
	void *v = NULL;
	size_t cnt = 0;
	int rv;

	*arr = NULL;
	*n = 0;
	rv = r_records(r, max, f, nf, elem, &v, &cnt);
	if (rv != TL_ENOMEM && more != NULL) {
		tlp_r_bool(r, more);
	}
	if (rv == TL_ENOMEM || r->err != TL_OK ||
	    r_reply_end(r, used + 1 + (more != NULL)) != TL_OK) {
		tli_free(v);
		return rv == TL_ENOMEM ? rv : r->err;
	}
	*arr = v;
	*n = cnt;
	return TL_OK;
}

/* ---- the codecs ---- */

/* The encoder and the decoder of a body that is one record: its table says
 * everything else. Every field of such a record is on the wire, except
 * TOPIC_CREATE's (which sends the first six): the decoder zeroes the rest. */
#define RECORD_CODEC(name, type, tab, nf, wr, rd)    \
	void tlp_enc_##name(tlp_w *w, const type *m) \
	{                                            \
		wr(w, tab, nf, m);                   \
	}                                            \
	int tlp_dec_##name(tlp_r *r, type *m)        \
	{                                            \
		memset(m, 0, sizeof(*m));            \
		return rd(r, tab, nf, m);            \
	}

/* The decoder of a reply [0, [record...]]. */
#define LIST_DECODER(name, type, max, tab)                                 \
	int tlp_dec_##name(tlp_r *r, type **v, size_t *n)                  \
	{                                                                  \
		void *arr = NULL;                                          \
		int rv = r_reply_records(                                  \
		    r, 0, max, tab, NF(tab), sizeof(type), &arr, n, NULL); \
		*v = arr;                                                  \
		return rv;                                                 \
	}

RECORD_CODEC(hello, tlp_hello, hello_f, NF(hello_f), w_record, r_body)
RECORD_CODEC(
    hello_rep, tlp_hello_rep, hello_rep_f, NF(hello_rep_f), w_reply, r_reply)
RECORD_CODEC(
    topic_create, tlp_topic, topic_f, TOPIC_CREATE_NF, w_record, r_body)
RECORD_CODEC(topic, tlp_topic, topic_f, NF(topic_f), w_reply_record, r_body)
LIST_DECODER(topic_list, tlp_topic, 65536, topic_f)
RECORD_CODEC(msg, tlp_msg, msg_f, NF(msg_f), w_reply_record, r_body)
RECORD_CODEC(sub, tlp_sub, sub_f, NF(sub_f), w_record, r_body)
LIST_DECODER(results, tlp_result, TL_MAX_BATCH, result_f)
RECORD_CODEC(lock, tlp_lock, lock_f, NF(lock_f), w_record, r_body)
RECORD_CODEC(
    lock_rep, tlp_delivery, delivery_f, NF(delivery_f), w_reply_record, r_body)

/* PING's and its reply's single integer. */
#define INT_CODEC(name, wr, rd)                       \
	void tlp_enc_##name(tlp_w *w, int64_t v)      \
	{                                             \
		ints q = {.i = v};                    \
		wr(w, int_f, NF(int_f), &q);          \
	}                                             \
	int tlp_dec_##name(tlp_r *r, int64_t *v)      \
	{                                             \
		ints q = {.i = 0};                    \
		int rv = rd(r, int_f, NF(int_f), &q); \
		*v = q.i;                             \
		return rv;                            \
	}

/* A body [a, b, [record...]] (a batch, a push) with its records in m->elems
 * and their count in m->n; its _fini frees the records. */
#define NAMED_CODEC(name, type, first, second, elems, etype, tab)        \
	void tlp_enc_##name(tlp_w *w, const type *m)                     \
	{                                                                \
		name2 h = {m->first, m->second};                         \
		w_named_records(                                         \
		    w, &h, tab, NF(tab), m->elems, sizeof(etype), m->n); \
	}                                                                \
	int tlp_dec_##name(tlp_r *r, type *m)                            \
	{                                                                \
		name2 h = {{NULL, 0}, {NULL, 0}};                        \
		void *arr = NULL;                                        \
		int rv;                                                  \
		memset(m, 0, sizeof(*m));                                \
		rv = r_named_records(                                    \
		    r, &h, tab, NF(tab), sizeof(etype), &arr, &m->n);    \
		m->first = h.a;                                          \
		m->second = h.b;                                         \
		m->elems = arr;                                          \
		return rv;                                               \
	}                                                                \
	void tlp_##name##_fini(type *m)                                  \
	{                                                                \
		tli_free(m->elems);                                      \
		m->elems = NULL;                                         \
		m->n = 0;                                                \
	}

INT_CODEC(ping, w_record, r_body)
INT_CODEC(ping_rep, w_reply, r_reply)
NAMED_CODEC(batch, tlp_batch, topic, who, items, tlp_item, item_f)
NAMED_CODEC(deliver, tlp_deliver, topic, consumer, v, tlp_delivery, delivery_f)

void
tlp_enc_name(tlp_w *w, tlp_str name)
{
	name2 q = {.a = name};

	w_record(w, named_f, 1, &q);
}

int
tlp_dec_name(tlp_r *r, tlp_str *name)
{
	name2 q = {.a = {NULL, 0}};
	int rv = r_body(r, named_f, 1, &q);

	*name = q.a;
	return rv;
}

void
tlp_enc_results(tlp_w *w, const tlp_result *v, size_t n)
{
	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	w_records(w, result_f, NF(result_f), v, sizeof(*v), n);
}

void
tlp_enc_get(tlp_w *w, tlp_str topic, tlp_str id)
{
	name2 q = {topic, id};

	w_record(w, get_f, NF(get_f), &q);
}

int
tlp_dec_get(tlp_r *r, tlp_str *topic, tlp_str *id)
{
	name2 q = {{NULL, 0}, {NULL, 0}};
	int rv = r_body(r, get_f, NF(get_f), &q);

	*topic = q.a;
	*id = q.b;
	return rv;
}

void
tlp_enc_list(tlp_w *w, const tlp_list *l)
{
	tlp_w_array(w, NF(list_f) + 2);
	w_fields(w, list_f, NF(list_f), l);
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
	bool nil = true;

	memset(l, 0, sizeof(*l));
	r_tuple(r, NF(list_f) + 2);
	r_fields(r, list_f, NF(list_f), l);
	if (tlp_r_nil(r, &nil) == TL_OK && !nil) {
		l->has_cursor = true;
		tlp_r_int(r, &l->cursor_ts);
	}
	r_str(r, TL_MAX_ID_LEN, &l->cursor_id);
	return tlp_r_end(r);
}

void
tlp_enc_entries(tlp_w *w, const tlp_entry *v, size_t n, bool more)
{
	tlp_w_array(w, 3);
	tlp_w_uint(w, 0);
	w_records(w, entry_f, NF(entry_f), v, sizeof(*v), n);
	tlp_w_bool(w, more);
}

int
tlp_dec_entries(tlp_r *r, tlp_entry **v, size_t *n, bool *more)
{
	void *arr = NULL;
	int rv = r_reply_records(r, 0, TL_MAX_BATCH, entry_f, NF(entry_f),
	    sizeof(**v), &arr, n, more);

	*v = arr;
	return rv;
}

void
tlp_enc_count(tlp_w *w, tlp_str topic, int64_t from, int64_t to)
{
	span q = {topic, from, to};

	w_record(w, span_f, NF(span_f), &q);
}

int
tlp_dec_count(tlp_r *r, tlp_str *topic, int64_t *from, int64_t *to)
{
	span q = {{NULL, 0}, 0, 0};
	int rv = r_body(r, span_f, NF(span_f), &q);

	*topic = q.topic;
	*from = q.from;
	*to = q.to;
	return rv;
}

void
tlp_enc_counts(tlp_w *w, uint64_t a, uint64_t wt, uint64_t p)
{
	ints q = {{a, wt, p}, 0};

	w_reply(w, counts_f, NF(counts_f), &q);
}

int
tlp_dec_counts(tlp_r *r, uint64_t *a, uint64_t *wt, uint64_t *p)
{
	ints q = {{0, 0, 0}, 0};
	int rv = r_reply(r, counts_f, NF(counts_f), &q);

	*a = q.v[0];
	*wt = q.v[1];
	*p = q.v[2];
	return rv;
}

/* ---- cluster administration ---- */

RECORD_CODEC(cluster_req, tlp_cluster_req, cluster_req_f, NF(cluster_req_f),
    w_record, r_body)
RECORD_CODEC(
    snap_read, tlp_snap_read, snap_read_f, NF(snap_read_f), w_record, r_body)
RECORD_CODEC(snap_latest, tlp_snap_latest, snap_latest_f, NF(snap_latest_f),
    w_record, r_body)
RECORD_CODEC(snap_chunk, tlp_snap_chunk, snap_chunk_f, NF(snap_chunk_f),
    w_reply, r_reply)

void
tlp_enc_cluster_status(tlp_w *w, const tlp_cluster_status *m)
{
	tlp_w_array(w, NF(cluster_status_f) + 2);
	tlp_w_uint(w, 0);
	w_fields(w, cluster_status_f, NF(cluster_status_f), m);
	w_records(w, cluster_node_f, NF(cluster_node_f), m->nodes,
	    sizeof(*m->nodes), m->n);
}

int
tlp_dec_cluster_status(tlp_r *r, tlp_cluster_status *m)
{
	void *arr = NULL;
	int rv;

	memset(m, 0, sizeof(*m));
	r_fields(r, cluster_status_f, NF(cluster_status_f), m);
	rv = r_reply_records(r, NF(cluster_status_f), 64, cluster_node_f,
	    NF(cluster_node_f), sizeof(*m->nodes), &arr, &m->n, NULL);
	m->nodes = arr;
	return rv;
}

void
tlp_cluster_status_fini(tlp_cluster_status *m)
{
	tli_free(m->nodes);
	m->nodes = NULL;
	m->n = 0;
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
tlp_enc_error_until(tlp_w *w, int err, const char *detail, int64_t until)
{
	tlp_w_array(w, 3);
	tlp_w_uint(w, (uint64_t) err);
	tlp_w_cstr(w, detail != NULL ? detail : "");
	tlp_w_int(w, until);
}

int
tlp_dec_error_until(tlp_r *r, int64_t *until)
{
	ints q = {.i = 0};
	int rv = r_reply(r, int_f, NF(int_f), &q);

	if (rv == TL_OK) {
		*until = q.i;
	}
	return rv;
}

void
tlp_enc_error_leader(tlp_w *w, int err, const char *detail, const char *leader)
{
	tlp_w_array(w, 3);
	tlp_w_uint(w, (uint64_t) err);
	tlp_w_cstr(w, detail != NULL ? detail : "");
	tlp_w_cstr(w, leader != NULL ? leader : "");
}

int
tlp_dec_error_leader(tlp_r *r, tlp_str *leader)
{
	name2 q = {{NULL, 0}, {NULL, 0}};
	int rv = r_reply(r, url_f, NF(url_f), &q);

	*leader = rv == TL_OK ? q.a : (tlp_str){NULL, 0};
	return rv;
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
	int code = 0;

	detail->p = NULL;
	detail->n = 0;
	if (tlp_r_array(r, 64, &n) != TL_OK || n == 0) {
		return r->err != TL_OK ? r->err : TL_EPROTO;
	}
	if (r_err(r, &code) != TL_OK) {
		return r->err;
	}
	*err = code;
	*nfields = n - 1;
	if (code != TL_OK && n >= 2) {
		if (r_str(r, 4096, detail) != TL_OK) {
			return r->err;
		}
		*nfields = n - 2;
	}
	r->reply_fields = *nfields;
	return TL_OK;
}

bool
tlp_url_scheme_ok(const char *url, size_t n)
{
	static const char *const schemes[] = {
	    "tcp://", "ipc://", "tls+tcp://", "tcp4://", "tcp6://"};

	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		size_t k = strlen(schemes[i]);
		if (n > k && strncmp(url, schemes[i], k) == 0) {
			return true;
		}
	}
	return false;
}
