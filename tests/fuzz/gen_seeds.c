/*
 * Writes the seed corpus of the fuzz targets: valid inputs made with the
 * real encoders (proto/msgs.h, the gateway's tlg_ev_header), so the seeds
 * follow the wire format when it changes. tests/fuzz/run.sh --seeds runs
 * it over tests/fuzz/corpus/ (then commit the files); the run of the
 * targets checks that the committed seeds are what this writes.
 *
 *   fuzz_seeds DIR   writes DIR/<target>/<name> for every target
 */
#include <errno.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "msgs.h"
#include "parse.h"

static const char *outdir;
static int failed;

static void
put(const char *target, const char *name, const void *p, size_t n)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		failed = 1;
		return;
	}
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, target, name);
	if ((f = fopen(path, "wb")) == NULL || fwrite(p, 1, n, f) != n ||
	    fclose(f) != 0) {
		perror(path);
		failed = 1;
	}
}

/* The selector byte of op for the request and reply targets. */
static uint8_t
op_index(int op)
{
	for (size_t i = 0; i < TLF_NOPS; i++) {
		if (tlf_ops[i] == op) {
			return (uint8_t) i;
		}
	}
	abort();
}

typedef void (*body_fn)(tlp_w *w);

/* The selector byte of op, then the body body() writes. */
static void
put_body(const char *target, const char *name, int op, body_fn body)
{
	tli_buf b;
	tlp_w w;
	uint8_t sel = op_index(op);

	tli_buf_init(&b);
	tli_buf_append(&b, &sel, 1);
	tlp_w_init(&w, &b);
	body(&w);
	put(target, name, b.data, b.len);
	tli_buf_fini(&b);
}

/* ---- request bodies ---- */

static void
b_hello(tlp_w *w)
{
	tlp_hello m = {TLP_VERSION, TLP_STR("seed-client"), TLP_STR("producer"),
	    1700000000000, TLP_STR("secret-token")};
	tlp_enc_hello(w, &m);
}

static void
b_ping(tlp_w *w)
{
	tlp_enc_ping(w, 1700000000123);
}

static tlp_topic
topic(void)
{
	tlp_topic t;

	memset(&t, 0, sizeof(t));
	t.name = TLP_STR("orders");
	t.buckets = 16;
	t.max_body = 65536;
	t.default_lease_ms = 30000;
	t.max_lease_ms = 600000;
	t.max_deliveries = 5;
	return t;
}

static void
b_topic_create(tlp_w *w)
{
	tlp_topic t = topic();
	tlp_enc_topic_create(w, &t);
}

static void
b_name(tlp_w *w)
{
	tlp_enc_name(w, TLP_STR("orders"));
}

static void
b_batch(tlp_w *w)
{
	tlp_item it[3] = {
	    {TLP_STR(""), 0, 5000, true, "hello", 5},
	    {TLP_STR("id-1"), 3, 1700000005000, false, NULL, 0},
	    {TLP_STR("id-2"), 0, 0, true, "", 0},
	};
	tlp_batch b = {TLP_STR("orders"), TLP_STR("group-a"), it, 3};
	tlp_enc_batch(w, &b);
}

static void
b_get(tlp_w *w)
{
	tlp_enc_get(w, TLP_STR("orders"), TLP_STR("id-1"));
}

static void
b_list(tlp_w *w)
{
	tlp_list l = {
	    TLP_STR("orders"), TLP_STR("group-a"), 100, false, 0, TLP_STR("")};
	tlp_enc_list(w, &l);
}

static void
b_list_cursor(tlp_w *w)
{
	tlp_list l = {TLP_STR("orders"), TLP_STR("group-a"), 10, true,
	    1700000005000, TLP_STR("id-1")};
	tlp_enc_list(w, &l);
}

static void
b_count(tlp_w *w)
{
	tlp_enc_count(w, TLP_STR("orders"), 0, INT64_MAX);
}

static void
b_sub(tlp_w *w)
{
	tlp_sub s = {TLP_STR("orders"), TLP_STR("worker-1"), 30000, 8};
	tlp_enc_sub(w, &s);
}

static void
b_empty(tlp_w *w)
{
	tlp_w_array(w, 0);
}

/* ---- replies and pushes ---- */

static void
r_error(tlp_w *w)
{
	tlp_enc_error(w, TL_ENOTOPIC, "no such topic");
}

static void
r_ok(tlp_w *w)
{
	tlp_enc_ok(w);
}

static void
r_hello(tlp_w *w)
{
	tlp_hello_rep m = {1700000000000, TLP_STR("broker-1"), 42};
	tlp_enc_hello_rep(w, &m);
}

static void
r_ping(tlp_w *w)
{
	tlp_enc_ping_rep(w, 1700000000456);
}

static void
r_topic(tlp_w *w)
{
	tlp_topic t = topic();

	t.messages = 10;
	t.available = 4;
	t.waiting = 3;
	t.processing = 2;
	t.dead = 1;
	tlp_enc_topic(w, &t);
}

/* TOPIC_LIST's reply: [0, [record...]], each record tlp_enc_topic's
 * without its [0, ...] (as broker/handlers.c writes it). */
static void
r_topic_list(tlp_w *w)
{
	tli_buf tmp;
	tlp_w tw;
	tlp_topic t = topic();

	tlp_w_array(w, 2);
	tlp_w_uint(w, 0);
	tlp_w_array(w, 2);
	for (int i = 0; i < 2; i++) {
		tli_buf_init(&tmp);
		tlp_w_init(&tw, &tmp);
		tlp_enc_topic(&tw, &t);
		tli_buf_append(w->b, tmp.data + 2, tmp.len - 2);
		tli_buf_fini(&tmp);
		t.name = TLP_STR("payments");
	}
}

static void
r_results(tlp_w *w)
{
	tlp_result v[2] = {{TL_OK, TLP_STR("gen-id-0001"), 1, 1700000005000, 0},
	    {TL_EVERSION, TLP_STR("id-1"), 0, 0, 0}};
	tlp_enc_results(w, v, 2);
}

static void
r_msg(tlp_w *w)
{
	tlp_msg m = {TLP_STR("id-1"), 1700000005000, 3, TLP_STR("group-a"),
	    TLP_STR("worker-1"), 7, 1, 1700000000000, "payload", 7};
	tlp_enc_msg(w, &m);
}

static void
r_entries(tlp_w *w)
{
	tlp_entry v[2] = {{TLP_STR("id-1"), 1700000005000, 7, false},
	    {TLP_STR("id-2"), 1700000006000, 2, true}};
	tlp_enc_entries(w, v, 2, true);
}

static void
r_counts(tlp_w *w)
{
	tlp_enc_counts(w, 4, 3, 2);
}

static void
b_lock(tlp_w *w)
{
	tlp_lock m = {TLP_STR("locks"), TLP_STR("worker-1"), TLP_STR("sync-7"),
	    30000, TLP_STR("group-a")};
	tlp_enc_lock(w, &m);
}

static void
b_cluster(tlp_w *w)
{
	tlp_cluster_req m = {TLP_STR("add"), 4, TLP_STR("127.0.0.1:7441"),
	    TLP_STR("tcp://127.0.0.1:7440")};
	tlp_enc_cluster_req(w, &m);
}

static void
r_cluster(tlp_w *w)
{
	tlp_cluster_node n[2] = {
	    {1, TLP_STR("127.0.0.1:7411"), TLP_STR("tcp://127.0.0.1:7400"),
	        TLP_STR("voter"), 40, true, 0},
	    {2, TLP_STR("127.0.0.1:7412"), TLP_STR("tcp://127.0.0.1:7420"),
	        TLP_STR("voter"), 38, true, -3}};
	tlp_cluster_status st = {
	    1, 1, 3, 40, 40, 40, TLP_STR("leader"), true, false, 1, n, 2};
	tlp_enc_cluster_status(w, &st);
}

static void
b_snap_read(tlp_w *w)
{
	tlp_snap_read m = {
	    TLP_STR("1-4096"), TLP_STR("000012.sst"), 1048576, TLP_SNAP_PART};
	tlp_enc_snap_read(w, &m);
}

static void
b_snap_latest(tlp_w *w)
{
	tlp_snap_latest m = {24576};
	tlp_enc_snap_latest(w, &m);
}

static void
r_snap_chunk(tlp_w *w)
{
	tlp_snap_chunk c = {1048600, "table bytes", 11};
	tlp_enc_snap_chunk(w, &c);
}

static void
r_lock(tlp_w *w)
{
	tlp_delivery d = {TLP_STR("sync-7"), 4, 1700000035000, 1700000005000, 2,
	    1700000000000, TLP_STR("group-a"), "", 0};
	tlp_enc_lock_rep(w, &d);
}

static void
r_lock_held(tlp_w *w)
{
	tlp_enc_error_until(w, TL_ELEASED,
	    "held until 2023-11-14T22:13:55.000Z", 1700000035000);
}

static void
r_deliver(tlp_w *w)
{
	tlp_delivery v[2] = {
	    {TLP_STR("id-1"), 8, 1700000035000, 1700000005000, 1, 1700000000000,
	        TLP_STR("group-a"), "payload", 7},
	    {TLP_STR("id-2"), 3, 1700000036000, 1700000006000, 2, 1700000000500,
	        TLP_STR("group-b"), "", 0},
	};
	tlp_deliver d = {TLP_STR("orders"), TLP_STR("worker-1"), v, 2};
	tlp_enc_deliver(w, &d);
}

static void
requests(void)
{
	put_body("request", "hello", TLP_OP_HELLO, b_hello);
	put_body("request", "ping", TLP_OP_PING, b_ping);
	put_body(
	    "request", "topic_create", TLP_OP_TOPIC_CREATE, b_topic_create);
	put_body("request", "topic_delete", TLP_OP_TOPIC_DELETE, b_name);
	put_body("request", "topic_get", TLP_OP_TOPIC_GET, b_name);
	put_body("request", "topic_list", TLP_OP_TOPIC_LIST, b_empty);
	put_body("request", "create", TLP_OP_CREATE, b_batch);
	put_body("request", "ack", TLP_OP_ACK, b_batch);
	put_body("request", "get", TLP_OP_GET, b_get);
	put_body("request", "list", TLP_OP_LIST, b_list);
	put_body("request", "dlq_list_cursor", TLP_OP_DLQ_LIST, b_list_cursor);
	put_body("request", "count", TLP_OP_COUNT, b_count);
	put_body("request", "subscribe", TLP_OP_SUBSCRIBE, b_sub);
	put_body("request", "lock", TLP_OP_LOCK, b_lock);
	put_body("request", "cluster", TLP_OP_CLUSTER, b_cluster);
	put_body("request", "snapshot_read", TLP_OP_SNAPSHOT_READ, b_snap_read);
	put_body("request", "snapshot_latest", TLP_OP_SNAPSHOT_LATEST,
	    b_snap_latest);
}

static void
replies(void)
{
	put_body("reply", "error", TLP_OP_GET, r_error);
	put_body("reply", "topic_create", TLP_OP_TOPIC_CREATE, r_ok);
	put_body("reply", "hello", TLP_OP_HELLO, r_hello);
	put_body("reply", "ping", TLP_OP_PING, r_ping);
	put_body("reply", "topic_get", TLP_OP_TOPIC_GET, r_topic);
	put_body("reply", "topic_list", TLP_OP_TOPIC_LIST, r_topic_list);
	put_body("reply", "create", TLP_OP_CREATE, r_results);
	put_body("reply", "get", TLP_OP_GET, r_msg);
	put_body("reply", "list", TLP_OP_LIST, r_entries);
	put_body("reply", "count", TLP_OP_COUNT, r_counts);
	put_body("reply", "deliver", TLP_OP_DELIVER, r_deliver);
	put_body("reply", "lock", TLP_OP_LOCK, r_lock);
	put_body("reply", "lock_held", TLP_OP_LOCK, r_lock_held);
	put_body("reply", "cluster", TLP_OP_CLUSTER, r_cluster);
	put_body("reply", "snapshot_read", TLP_OP_SNAPSHOT_READ, r_snap_chunk);
}

/* ---- frame streams ---- */

static void
frame(tli_buf *b, uint8_t op, uint8_t flags, uint32_t reqid, body_fn body)
{
	size_t start = b->len;
	tlp_w w;

	tlp_frame_begin(b, &w, op, flags, reqid);
	body(&w);
	if (tlp_frame_end(b, start) != TL_OK) {
		abort();
	}
}

static void
frames(void)
{
	tli_buf b;

	tli_buf_init(&b);
	frame(&b, TLP_OP_HELLO, 0, 1, b_hello);
	frame(&b, TLP_OP_CREATE, 0, 2, b_batch);
	frame(&b, TLP_OP_PING, 0, 3, b_ping);
	put("frame", "client_stream", b.data, b.len);
	tli_buf_reset(&b);
	frame(&b, TLP_OP_HELLO, TLP_F_REPLY, 1, r_hello);
	frame(&b, TLP_OP_DELIVER, TLP_F_PUSH, 0, r_deliver);
	frame(&b, TLP_OP_GET, TLP_F_REPLY, 9, r_error);
	put("frame", "broker_stream", b.data, b.len);
	/* a stream cut inside its second frame */
	put("frame", "cut_stream", b.data, b.len - 5);
	tli_buf_fini(&b);
}

/* ---- the gateway ---- */

static void
put_text(const char *name, uint8_t sel, const char *text, size_t n)
{
	tli_buf b;

	tli_buf_init(&b);
	tli_buf_append(&b, &sel, 1);
	tli_buf_append(&b, text, n);
	put("gateway", name, b.data, b.len);
	tli_buf_fini(&b);
}

#define TEXT(name, sel, s) put_text(name, sel, s, sizeof(s) - 1)

static void
gateway(void)
{
	static const char content[] =
	    "{\"msgtype\":\"m.text\",\"body\":\"hi\"}";
	gev e;
	tli_buf b;

	TEXT("query", 0,
	    "org.matrix.msc4140.delay=1500&foo=bar%20baz&access_token=x"
	    "&delay_id=abc-DEF_123&status=scheduled&user_id=%40u%3Ahs");
	TEXT("schedule", 1, "{\"msgtype\":\"m.text\",\"body\":\"hi\"}");
	TEXT("schedule_stable", 2,
	    "{\"delay\": 1500, \"state_key\": \"sk\", \"content\": "
	    "{\"a\": [1, 2.5, {\"b\": \"c\\\"d\"}], \"e\": null}}");
	TEXT("manage", 3, "{\"action\":\"restart\"}");
	TEXT("param", 5, "!room%3Aexample.org");
	/* three cuts, then two pipelined requests, the second chunked */
	TEXT("framing", 6,
	    "\3\5\41\7POST /x HTTP/1.1\r\nHost: h\r\n"
	    "Content-Length: 5\r\n\r\nhelloPUT /y HTTP/1.1\r\nHost: h\r\n"
	    "Transfer-Encoding: gzip, chunked\r\n\r\n"
	    "5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n");

	memset(&e, 0, sizeof(e));
	e.user = (gstr){"@alice:example.org", 18};
	e.room = (gstr){"!room:example.org", 17};
	e.type = (gstr){"m.room.message", 14};
	e.state = true;
	e.skey = (gstr){"sk", 2};
	e.delay = 1500;
	e.query = (gstr){"foo=bar", 7};
	tli_buf_init(&b);
	tli_buf_append(&b, "\4M1\n", 4);
	tlg_ev_header(&b, &e);
	tli_buf_append(&b, "\n", 1);
	tli_buf_puts(&b, content);
	put("gateway", "stored_event", b.data, b.len);
	/* a finalised record as tlg_finalise (gw.c) writes it */
	tli_buf_reset(&b);
	tli_buf_append(&b, "\4F1\n", 4);
	tli_buf_puts(&b,
	    "fin\t1700000001500\nsince\t1700000000000\n"
	    "outcome\tcancel\nreason\terror\nstatus\t403\n"
	    "errlen\t24\n");
	tlg_ev_header(&b, &e);
	tli_buf_append(&b, "\n", 1);
	tli_buf_puts(&b, "{\"errcode\":\"M_FORBIDDEN\"}");
	tli_buf_puts(&b, content);
	put("gateway", "stored_final", b.data, b.len);
	tli_buf_fini(&b);
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	outdir = argv[1];
	requests();
	replies();
	frames();
	gateway();
	return failed;
}
