/*
 * libFuzzer target: a hostile broker. The first input byte picks an
 * operation of ops.def, the rest is what the SDK receives for it: a
 * reply to that request (sdk/client.c reads its head, then the
 * operation's reply decoder of sdk/ops.c or sdk/consumer.c runs on a
 * success), or a push (DELIVER, LEASE_LOST: sdk/consumer.c). Properties:
 * a decoded reply keeps the limits the SDK copies into its fixed-size
 * fields, and its encoding decodes again to the same encoding.
 */
#include "codec.h"

typedef union body {
	tlp_hello_rep hello_rep;
	tlf_i64 i64;
	tlp_topic topic;
	tlp_msg msg;
	tlf_list_of list;
	tlf_counts counts;
	tlp_deliver deliver;
	tlp_delivery lease;
	tlp_cluster_status cluster;
	tlp_snap_chunk snap;
} body;

static const tlf_codec c_hello_rep = {
    tlf_enc_hello_rep, tlf_dec_hello_rep, NULL, 1};
static const tlf_codec c_ping_rep = {
    tlf_enc_ping_rep, tlf_dec_ping_rep, NULL, 1};
static const tlf_codec c_topic = {tlf_enc_topic, tlf_dec_topic, NULL, 1};
static const tlf_codec c_topic_list = {
    tlf_enc_topic_list, tlf_dec_topic_list, tlf_list_fini, 1};
static const tlf_codec c_results = {
    tlf_enc_results, tlf_dec_results, tlf_list_fini, 1};
static const tlf_codec c_msg = {tlf_enc_msg, tlf_dec_msg, NULL, 1};
static const tlf_codec c_entries = {
    tlf_enc_entries, tlf_dec_entries, tlf_list_fini, 1};
static const tlf_codec c_counts = {tlf_enc_counts, tlf_dec_counts, NULL, 1};
static const tlf_codec c_lock_rep = {
    tlf_enc_lock_rep, tlf_dec_lock_rep, NULL, 1};
static const tlf_codec c_deliver = {
    tlf_enc_deliver, tlf_dec_deliver, tlf_deliver_fini, 0};
static const tlf_codec c_cluster = {
    tlf_enc_cluster_status, tlf_dec_cluster_status, tlf_cluster_status_fini, 1};
static const tlf_codec c_snap = {
    tlf_enc_snap_chunk, tlf_dec_snap_chunk, NULL, 1};

/* The decoder the SDK runs on a successful reply to op (or on a push);
 * NULL when it reads nothing after the head. */
static const tlf_codec *
codec_of(int op)
{
	if (tlp_op_is_batch(op)) {
		return &c_results;
	}
	switch ((tlp_op) op) {
	case TLP_OP_HELLO:
		return &c_hello_rep;
	case TLP_OP_PING:
		return &c_ping_rep;
	case TLP_OP_TOPIC_GET:
		return &c_topic;
	case TLP_OP_TOPIC_LIST:
		return &c_topic_list;
	case TLP_OP_GET:
		return &c_msg;
	case TLP_OP_LIST:
	case TLP_OP_DLQ_LIST:
		return &c_entries;
	case TLP_OP_COUNT:
		return &c_counts;
	case TLP_OP_DELIVER:
	case TLP_OP_LEASE_LOST:
		return &c_deliver;
	case TLP_OP_LOCK:
		return &c_lock_rep;
	case TLP_OP_CLUSTER:
		return &c_cluster;
	case TLP_OP_SNAPSHOT_READ: /* a node installing a snapshot */
	case TLP_OP_SNAPSHOT_LATEST:
		return &c_snap;
	case TLP_OP_TOPIC_CREATE: /* [0] */
	case TLP_OP_TOPIC_DELETE:
	case TLP_OP_SUBSCRIBE:
	case TLP_OP_UNSUBSCRIBE:
	case TLP_OP_NONE:
	case TLP_OP_MAX_:
		return NULL;
	}
	return NULL;
}

/* What the SDK copies into fixed-size fields or trusts as counts. */
static void
check(const tlf_codec *c, const body *m)
{
	if (c == &c_topic) {
		TLF_CHECK(m->topic.name.n <= TL_MAX_NAME_LEN);
	} else if (c == &c_msg) {
		TLF_CHECK(m->msg.id.n <= TL_MAX_ID_LEN);
		TLF_CHECK(m->msg.owner.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->msg.consumer.n <= TL_MAX_NAME_LEN);
		TLF_CHECK(m->msg.body_len <= TL_MAX_BODY_LEN);
	} else if (c == &c_results || c == &c_entries) {
		TLF_CHECK(m->list.n <= TL_MAX_BATCH);
		TLF_CHECK(m->list.v != NULL);
	} else if (c == &c_lock_rep) {
		TLF_CHECK(m->lease.id.n <= TL_MAX_ID_LEN);
		TLF_CHECK(m->lease.owner.n <= TL_MAX_NAME_LEN);
	} else if (c == &c_cluster) {
		/* sdk/cluster.c copies them into fixed-size fields */
		TLF_CHECK(m->cluster.n <= 64 &&
		    (m->cluster.n == 0 || m->cluster.nodes != NULL));
		TLF_CHECK(m->cluster.state.n <= 16);
		for (size_t i = 0; i < m->cluster.n; i++) {
			TLF_CHECK(m->cluster.nodes[i].raft.n <= 255);
			TLF_CHECK(m->cluster.nodes[i].url.n <= 255);
			TLF_CHECK(m->cluster.nodes[i].role.n <= 16);
		}
	} else if (c == &c_snap) {
		/* snapshot.c writes data_len bytes from data */
		TLF_CHECK(m->snap.data_len <= TL_MAX_BODY_LEN);
		TLF_CHECK(m->snap.data_len == 0 || m->snap.data != NULL);
	} else if (c == &c_deliver) {
		TLF_CHECK(m->deliver.n <= TL_MAX_BATCH);
		for (size_t i = 0; i < m->deliver.n; i++) {
			TLF_CHECK(m->deliver.v[i].id.n <= TL_MAX_ID_LEN);
			TLF_CHECK(m->deliver.v[i].owner.n <= TL_MAX_NAME_LEN);
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const tlf_codec *c;
	body m, tmp;
	tlp_r r;
	int op, err = -1;

	if (size == 0) {
		return 0;
	}
	op = tlf_ops[data[0] % TLF_NOPS];
	c = codec_of(op);
	tlp_r_init(&r, data + 1, size - 1);
	memset(&m, 0, sizeof(m));
	if (c == NULL || c->reply) {
		tlp_str detail;
		size_t nf = 0;

		if (tlp_dec_reply_head(&r, &err, &detail, &nf) != TL_OK) {
			return 0;
		}
		TLF_CHECK(detail.n <= 4096 && nf < 64);
		if (err != TL_OK || c == NULL) {
			return 0; /* the SDK reports err with detail */
		}
	}
	if (c->dec(&r, &m) != TL_OK) {
		return 0;
	}
	check(c, &m);
	memset(&tmp, 0, sizeof(tmp));
	tlf_roundtrip(c, &m, &tmp);
	if (c->fini != NULL) {
		c->fini(&m);
	}
	return 0;
}
