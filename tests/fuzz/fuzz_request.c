/*
 * libFuzzer target: every request body a client can send. The first
 * input byte picks an operation of ops.def (modulo their number), the
 * rest is its body, decoded by the decoder the broker's handler of that
 * operation uses (broker/handlers.c). Properties: a decoded body keeps
 * the limits the handlers rely on (names, ids, bodies, batch sizes), and
 * its encoding decodes again to the same encoding. The switch names every
 * operation (a new row of ops.def without a case fails the build).
 */
#include "codec.h"

typedef union body {
	tlp_hello hello;
	tlf_i64 i64;
	tlp_topic topic;
	tlf_names names;
	tlp_batch batch;
	tlp_list list;
	tlf_span span;
	tlp_sub sub;
	tlp_lock lock;
	tlp_cluster_req cluster;
	tlp_snap_read snap;
	tlp_snap_latest latest;
} body;

static const tlf_codec c_hello = {tlf_enc_hello, tlf_dec_hello, NULL, 0};
static const tlf_codec c_ping = {tlf_enc_ping, tlf_dec_ping, NULL, 0};
static const tlf_codec c_topic_create = {
    tlf_enc_topic_create, tlf_dec_topic_create, NULL, 0};
static const tlf_codec c_name = {tlf_enc_name, tlf_dec_name, NULL, 0};
static const tlf_codec c_batch = {
    tlf_enc_batch, tlf_dec_batch, tlf_batch_fini, 0};
static const tlf_codec c_get = {tlf_enc_get, tlf_dec_get, NULL, 0};
static const tlf_codec c_list = {tlf_enc_list, tlf_dec_list, NULL, 0};
static const tlf_codec c_count = {tlf_enc_count, tlf_dec_count, NULL, 0};
static const tlf_codec c_sub = {tlf_enc_sub, tlf_dec_sub, NULL, 0};
static const tlf_codec c_lock = {tlf_enc_lock, tlf_dec_lock, NULL, 0};
static const tlf_codec c_cluster = {
    tlf_enc_cluster_req, tlf_dec_cluster_req, NULL, 0};
static const tlf_codec c_snap = {tlf_enc_snap_read, tlf_dec_snap_read, NULL, 0};
static const tlf_codec c_latest = {
    tlf_enc_snap_latest, tlf_dec_snap_latest, NULL, 0};

static void
check_batch(const tlp_batch *b)
{
	TLF_CHECK(b->topic.n <= TL_MAX_NAME_LEN && b->who.n <= TL_MAX_NAME_LEN);
	TLF_CHECK(b->n <= TL_MAX_BATCH && (b->n == 0 || b->items != NULL));
	for (size_t i = 0; i < b->n; i++) {
		TLF_CHECK(b->items[i].id.n <= TL_MAX_ID_LEN);
		TLF_CHECK(b->items[i].body_len <= TL_MAX_BODY_LEN);
	}
}

/* The limits the handler of op relies on after a successful decode. */
static void
check(int op, const body *m)
{
	if (tlp_op_is_batch(op)) {
		check_batch(&m->batch);
		return;
	}
	switch (op) {
	case TLP_OP_HELLO:
		TLF_CHECK(m->hello.name.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->hello.token.n <= 1024);
		break;
	case TLP_OP_TOPIC_CREATE:
		TLF_CHECK(m->topic.name.n <= TL_MAX_NAME_LEN);
		break;
	case TLP_OP_GET:
		TLF_CHECK(m->names.a.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->names.b.n <= TL_MAX_ID_LEN);
		break;
	case TLP_OP_LIST:
	case TLP_OP_DLQ_LIST:
		/* h_list copies the cursor id into a TL_MAX_ID_LEN array */
		TLF_CHECK(m->list.cursor_id.n <= TL_MAX_ID_LEN);
		TLF_CHECK(m->list.topic.n <= TL_MAX_NAME_LEN);
		break;
	case TLP_OP_LOCK:
		/* h_LOCK copies them into fixed-size arrays */
		TLF_CHECK(m->lock.topic.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->lock.consumer.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->lock.id.n <= TL_MAX_ID_LEN);
		TLF_CHECK(m->lock.create_group.n <= TL_MAX_NAME_LEN);
		break;
	case TLP_OP_CLUSTER:
		/* h_CLUSTER copies raft and url into 256-byte arrays */
		TLF_CHECK(m->cluster.action.n <= 16);
		TLF_CHECK(m->cluster.raft.n <= 255 && m->cluster.url.n <= 255);
		break;
	case TLP_OP_SNAPSHOT_READ:
		/* h_SNAPSHOT_READ copies them into 129-byte arrays */
		TLF_CHECK(m->snap.name.n <= 128 && m->snap.file.n <= 128);
		break;
	default:
		break;
	}
}

/* TOPIC_LIST takes no fields: nothing, or an empty array (h_TOPIC_LIST),
 * in any of msgpack's array encodings (array16 / array32 of 0 are valid
 * msgpack too). */
static void
topic_list(const uint8_t *p, size_t n)
{
	tlp_r r;
	size_t cnt = 1;

	tlp_r_init(&r, p, n);
	if (tlp_r_end(&r) == TL_OK) {
		TLF_CHECK(n == 0);
		return;
	}
	tlp_r_init(&r, p, n);
	if (tlp_r_array(&r, 0, &cnt) == TL_OK && tlp_r_end(&r) == TL_OK) {
		TLF_CHECK(cnt == 0);
	}
}

/* The decoder broker/handlers.c runs for op; NULL when it reads none. */
static const tlf_codec *
codec_of(int op)
{
	if (tlp_op_is_batch(op)) {
		return &c_batch;
	}
	switch ((tlp_op) op) {
	case TLP_OP_HELLO:
		return &c_hello;
	case TLP_OP_PING:
		return &c_ping;
	case TLP_OP_TOPIC_CREATE:
		return &c_topic_create;
	case TLP_OP_TOPIC_DELETE:
	case TLP_OP_TOPIC_GET:
		return &c_name;
	case TLP_OP_GET:
		return &c_get;
	case TLP_OP_LIST:
	case TLP_OP_DLQ_LIST:
		return &c_list;
	case TLP_OP_COUNT:
		return &c_count;
	case TLP_OP_SUBSCRIBE:
	case TLP_OP_UNSUBSCRIBE:
		return &c_sub;
	case TLP_OP_LOCK:
		return &c_lock;
	case TLP_OP_CLUSTER:
		return &c_cluster;
	case TLP_OP_SNAPSHOT_READ:
		return &c_snap;
	case TLP_OP_SNAPSHOT_LATEST:
		return &c_latest;
	case TLP_OP_TOPIC_LIST: /* an empty body: topic_list() */
	case TLP_OP_DELIVER:    /* pushes: refused unread */
	case TLP_OP_LEASE_LOST:
	case TLP_OP_NONE:
	case TLP_OP_MAX_:
		return NULL;
	}
	return NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const tlf_codec *c;
	body m, tmp;
	tlp_r r;
	int op;

	if (size == 0) {
		return 0;
	}
	op = tlf_ops[data[0] % TLF_NOPS];
	TLF_CHECK(tlp_op_name(op) != NULL);
	if (op == TLP_OP_TOPIC_LIST) {
		topic_list(data + 1, size - 1);
		return 0;
	}
	if ((c = codec_of(op)) == NULL) {
		TLF_CHECK(!tlp_op_is_request(op));
		return 0;
	}
	TLF_CHECK(tlp_op_is_request(op));
	memset(&m, 0, sizeof(m));
	tlp_r_init(&r, data + 1, size - 1);
	if (c->dec(&r, &m) != TL_OK) {
		/* nothing is kept from a failed batch */
		TLF_CHECK(op != TLP_OP_CREATE ||
		    (m.batch.items == NULL && m.batch.n == 0));
		return 0;
	}
	check(op, &m);
	memset(&tmp, 0, sizeof(tmp));
	tlf_roundtrip(c, &m, &tmp);
	if (c->fini != NULL) {
		c->fini(&m);
	}
	return 0;
}
