/*
 * libFuzzer target: what a client sends the MSC4140 gateway, and what the
 * gateway reads back from the broker. The first input byte picks a
 * parser, the rest is its input:
 *   0  a query string: the unstable form's delay, the parameters kept
 *      for sending, the delay_id filter and tlhttp's tlh_query_get
 *   1  a scheduling body, unstable form (a JSON object, kept as is)
 *   2  a scheduling body, stable form (delay, state_key, content)
 *   3  a management body ({"action": ...})
 *   4  a stored event or finalised record (tlg_ev_parse), written back
 *      with tlg_ev_header
 *   5  a path parameter: room id / event type / state key and delay_id
 *      checks, percent-decoding
 *   6  a client's byte stream through tlhttp's framing guard parser
 *      (http/guard.h): the verdict is the same whether the stream comes
 *      whole or cut into pieces (the cuts come from the input's first
 *      bytes), and a refused stream stays refused
 * The parsers are the gateway's own (broker/msc4140/parse.h); none needs
 * a server or a broker. Properties: what they return points inside the
 * input, and an accepted value keeps the checks the endpoints rely on.
 */
#include <stdbool.h>

#include "fuzz.h"
#include "guard.h"
#include "parse.h"

static tlg_conf conf;

/* No parameter the gateway drops is passed on to the homeserver. */
static void
kept_ok(const char *x)
{
	while (*x != '\0') {
		size_t len = strcspn(x, "&"), kl = strcspn(x, "=&");

		TLF_CHECK(len > 0);
		TLF_CHECK(!(kl == 12 && strncmp(x, "access_token", 12) == 0));
		TLF_CHECK(!(kl == 7 && strncmp(x, "user_id", 7) == 0));
		TLF_CHECK(strncmp(x, "org.matrix.msc4140.", 19) != 0);
		x += len + (x[len] == '&');
	}
}

static void
query(const char *q)
{
	int64_t delay = -1;
	gout o = {0};
	tli_buf extra = {0};
	char v[64];

	if (tlg_query_delay(&conf, q, &delay, &o)) {
		TLF_CHECK(delay >= 0 && delay <= conf.max_delay_ms);
	} else {
		TLF_CHECK(o.status == 400 || o.status == 403);
	}
	if (tlg_extra_query(q, &extra)) {
		TLF_CHECK(extra.len <= strlen(q));
		kept_ok(tli_buf_str(&extra));
	}
	(void) tlg_id_wanted(q, "abc-DEF_123");
	(void) tlh_query_get(q, "status", v, sizeof(v));
	tli_buf_fini(&extra);
	tli_buf_fini(&o.body);
}

static void
schedule(const char *body, size_t n, bool stable)
{
	greq r;
	gout o = {0};

	memset(&r, 0, sizeof(r));
	r.stable = stable;
	if (tlg_schedule_json(&conf, &r, body, n, &o)) {
		TLF_CHECK(r.content.p >= body &&
		    r.content.p + r.content.n <= body + n);
		if (stable) {
			TLF_CHECK(r.delay >= 1 && r.delay <= conf.max_delay_ms);
			TLF_CHECK(r.content.n >= 2 && r.content.p[0] == '{');
			TLF_CHECK(!r.state ||
			    (r.skey != NULL &&
			        tlg_field_ok(r.skey, strlen(r.skey))));
		}
	} else {
		TLF_CHECK(o.status == 400);
	}
	free(r.skey);
	tli_buf_fini(&o.body);
}

static void
manage(const char *body, size_t n)
{
	char action[16];
	gout o = {0};

	if (tlg_manage_action(body, n, action, sizeof(action), &o)) {
		TLF_CHECK(strcmp(action, "cancel") == 0 ||
		    strcmp(action, "restart") == 0 ||
		    strcmp(action, "send") == 0);
	} else {
		TLF_CHECK(o.status == 400);
	}
	tli_buf_fini(&o.body);
}

static bool
inside(gstr s, const char *p, size_t n)
{
	return s.n == 0 || (s.p >= p && s.p + s.n <= p + n);
}

static void
stored(const char *p, size_t n)
{
	gev e;
	tli_buf b = {0};

	if (tlg_ev_parse(&e, p, n) != 0) {
		return;
	}
	TLF_CHECK(inside(e.user, p, n) && inside(e.room, p, n) &&
	    inside(e.type, p, n) && inside(e.skey, p, n) &&
	    inside(e.query, p, n) && inside(e.content, p, n) &&
	    inside(e.outcome, p, n) && inside(e.reason, p, n) &&
	    inside(e.event_id, p, n) && inside(e.err, p, n));
	tlg_ev_header(&b, &e);
	tli_buf_fini(&b);
}

static void
param(const char *p, size_t n)
{
	char *s = tlf_copy(p, n, 1);
	long dn;

	if (tlg_id_ok(p, n)) {
		TLF_CHECK(n > 0 && n <= TL_MAX_ID_LEN && tlg_field_ok(p, n));
	}
	if (tlg_field_ok(p, n)) {
		TLF_CHECK(n <= 255 && tlg_utf8_ok(p, n));
	}
	dn = tlh_url_dec(s, n);
	TLF_CHECK(dn <= (long) n);
	free(s);
}

static void
framing(const char *p, size_t n)
{
	tlh_framing whole, cut;
	int v_whole, v_cut = 0;
	size_t ncut = n > 0 ? (uint8_t) p[0] % 8 : 0, at = 0;
	const uint8_t *cuts = (const uint8_t *) p + (n > 0);

	if (ncut + 1 > n) {
		ncut = 0;
	}
	p += 1 + ncut;
	n -= n > 0 ? 1 + ncut : 0;
	tlh_framing_init(&whole, 1u << 20);
	tlh_framing_init(&cut, 1u << 20);
	v_whole = tlh_framing_feed(&whole, p, n);
	TLF_CHECK(v_whole == 0 || v_whole == 400 || v_whole == 413);
	for (size_t i = 0; i <= ncut && v_cut == 0; i++) {
		size_t len = i < ncut ? cuts[i] % 64 : n - at;

		len = len < n - at ? len : n - at;
		v_cut = tlh_framing_feed(&cut, p + at, len);
		at += len;
	}
	TLF_CHECK(v_cut == v_whole);
	if (v_whole == 0) {
		TLF_CHECK(whole.st == cut.st && whole.left == cut.left);
	} else {
		TLF_CHECK(tlh_framing_feed(&whole, "0\r\n\r\n", 5) != 0);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *) data + 1;
	size_t n = size - 1;
	char *s;

	if (size == 0) {
		return 0;
	}
	if (conf.max_delay_ms == 0) {
		tlg_conf_defaults(&conf);
	}
	switch (data[0] % 7) {
	case 0:
		/* the query string as libmicrohttpd gives it: up to a NUL */
		s = tlf_copy(p, strnlen(p, n), 1);
		query(s);
		free(s);
		break;
	case 1:
	case 2:
		/* the body as tlhttp keeps it: NUL-terminated after n bytes */
		s = tlf_copy(p, n, 1);
		schedule(s, n, data[0] % 7 == 2);
		free(s);
		break;
	case 3:
		s = tlf_copy(p, n, 1);
		manage(s, n);
		free(s);
		break;
	case 4:
		stored(p, n);
		break;
	case 5:
		param(p, n);
		break;
	default:
		framing(p, n);
		break;
	}
	return 0;
}
