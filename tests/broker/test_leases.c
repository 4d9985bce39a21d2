/*
 * End-to-end, the real broker over its wire protocol: leases. A consumer
 * that dies without acking loses its messages to another consumer once the
 * lease runs out, and its late ACK is refused; extend keeps a message past
 * its first lease and release puts it back at the chosen time; the owner
 * cannot delete or move a message under an active lease, and can once it
 * ran out; a consumer taken over hands its leases to the new connection, as
 * they are (an extended one with its new end).
 */
#include "tltest.h"
#include "raw_client.h"

RC_SUITE(leases);

typedef struct got {
	char id[16];
	uint64_t version;
	int64_t lease_until;
	int64_t due_ts;
	int64_t placed_at;
	uint32_t deliveries;
	int64_t rx_us;
} got;

/* Collect `want` leases from c (at most timeout_ms); returns the count. */
static size_t
collect(rc_client *c, got *out, size_t want, int timeout_ms)
{
	int64_t deadline = tli_mono_ms() + timeout_ms;
	size_t n = 0;

	while (n < want) {
		int64_t left = deadline - tli_mono_ms();
		rc_deliver dv;
		int rv;

		if (left <= 0) {
			break;
		}
		rv = rc_wait_deliver(c, (int) left, &dv);
		cr_assert(rv >= 0, "a DELIVER push did not decode");
		if (rv == 0) {
			break;
		}
		for (size_t i = 0; i < dv.d.n && n < want; i++, n++) {
			const tlp_delivery *d = &dv.d.v[i];
			snprintf(out[n].id, sizeof(out[n].id), "%.*s",
			    (int) d->id.n, d->id.p);
			out[n].version = d->version;
			out[n].lease_until = d->lease_until;
			out[n].due_ts = d->due_ts;
			out[n].placed_at = d->placed_at;
			out[n].deliveries = d->deliveries;
			out[n].rx_us = dv.f->rx_us;
		}
		rc_deliver_free(&dv);
	}
	return n;
}

static const got *
find(const got *v, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i].id, id) == 0) {
			return &v[i];
		}
	}
	return NULL;
}

static void
create_due_now(rc_client *p, const char **ids, size_t n)
{
	tlp_item items[8];
	rc_results res;

	memset(items, 0, sizeof(items));
	for (size_t i = 0; i < n; i++) {
		items[i].id = TLP_STR(ids[i]);
		items[i].rel = true; /* a delay of 0: due now */
	}
	TL_PASS(rc_batch(p, TLP_OP_CREATE, "t", "app", items, n, &res));
	for (size_t i = 0; i < n; i++) {
		TL_PASS(res.v[i].err, "create %s", ids[i]);
	}
	rc_results_free(&res);
}

/* A broker whose producer (*p) created ids, all due now, and a consumer
 * "alpha" that subscribed with lease_ms and got all of them into out. */
static rc_client *
leased_by_alpha(const char *tag, rc_client **p, const char **ids, size_t n,
    int64_t lease_ms, got *out)
{
	rc_client *ca;

	rc_broker_start(&B, tag);
	*p = rc_open(B.url, "producer");
	create_due_now(*p, ids, n);
	ca = rc_open(B.url, "alpha");
	TL_PASS(rc_subscribe(ca, "t", "alpha", lease_ms, 10));
	cr_assert_eq(
	    collect(ca, out, n, 10000), n, "alpha did not get all %zu", n);
	return ca;
}

Test(leases, dead_consumer_messages_return_to_another)
{
	const char *ids[3] = {"k1", "k2", "k3"};
	got a[3], b[3];
	rc_client *p, *ca, *cb, *ca2;
	tlp_result r;
	tlp_topic t;

	ca = leased_by_alpha("e2e-dead", &p, ids, 3, 300, a);
	/* alpha dies without acking. */
	rc_close(ca);

	cb = rc_open(B.url, "beta");
	TL_PASS(rc_subscribe(cb, "t", "beta", 30000, 10));
	cr_assert_eq(collect(cb, b, 3, 10000), 3,
	    "alpha's messages did not come back to beta within 10 s");
	for (int i = 0; i < 3; i++) {
		const got *ga = find(a, 3, ids[i]), *gb = find(b, 3, ids[i]);
		cr_assert_not_null(ga);
		cr_assert_not_null(gb, "%s never came back", ids[i]);
		cr_assert(gb->rx_us >= ga->lease_until * 1000,
		    "%s came back %lld us before alpha's lease ran out", ids[i],
		    (long long) (ga->lease_until * 1000 - gb->rx_us));
		cr_assert_eq(gb->due_ts, ga->lease_until,
		    "%s: due again at %lld, alpha's lease ended at %lld",
		    ids[i], (long long) gb->due_ts,
		    (long long) ga->lease_until);
		cr_assert_eq(gb->deliveries, 2);
		cr_assert(gb->version > ga->version);
		/* The original due time travels with every delivery. */
		cr_assert_eq(ga->placed_at, ga->due_ts,
		    "%s: first delivery placed at %lld, due %lld", ids[i],
		    (long long) ga->placed_at, (long long) ga->due_ts);
		cr_assert_eq(gb->placed_at, ga->placed_at,
		    "%s: redelivery placed at %lld, first at %lld", ids[i],
		    (long long) gb->placed_at, (long long) ga->placed_at);
	}
	cr_assert_null(rc_wait_push(cb, TLP_OP_DELIVER, 200),
	    "beta got more than the three messages");

	/* alpha comes back (new connection) and acks with its old lease:
	 * beta holds the message now. */
	ca2 = rc_open(B.url, "alpha-again");
	TL_FAIL(rc_one(ca2, TLP_OP_ACK, "t", "alpha", "k1",
	            find(a, 3, "k1")->version, 0, false, NULL, &r),
	    TL_ELEASED, "alpha's late ACK: %s", tl_strerror(r.err));
	TL_FAIL(rc_one(ca2, TLP_OP_ACK, "t", "alpha", "k2",
	            find(b, 3, "k2")->version, 0, false, NULL, &r),
	    TL_ELEASED, "alpha may not ack beta's lease even with its version");

	for (int i = 0; i < 3; i++) {
		TL_PASS(rc_one(cb, TLP_OP_ACK, "t", "beta", ids[i],
		            find(b, 3, ids[i])->version, 0, false, NULL, &r),
		    "beta's ACK of %s", ids[i]);
	}
	TL_PASS(rc_topic_get(p, "t", &t));
	cr_assert_eq(t.messages, 0);
	rc_close(ca2);
	rc_close(cb);
	rc_close(p);
}

Test(leases, extend_keeps_and_release_brings_back_at_time)
{
	const char *ids[1] = {"x"};
	rc_client *p, *ca, *cb, *both[2];
	got a;
	tlp_result ext, rel;
	tlp_msg m;
	rc_frame *f, *push;
	int64_t t0, t1, until, at;
	size_t which = 0;
	rc_deliver dv;
	tlp_r r;

	ca = leased_by_alpha("e2e-extend", &p, ids, 1, 500, &a);

	/* Extend by 1.5 s from now. */
	t0 = tli_wall_ms();
	TL_PASS(rc_one(ca, TLP_OP_EXTEND, "t", "alpha", "x", a.version, 1500,
	            true, NULL, &ext),
	    "extend: %s", tl_strerror(ext.err));
	t1 = tli_wall_ms();
	cr_assert(ext.ts >= t0 + 1500 - 5 && ext.ts <= t1 + 1500 + 5,
	    "the extended lease ends at %lld, expected %lld..%lld",
	    (long long) ext.ts, (long long) (t0 + 1500),
	    (long long) (t1 + 1500));
	cr_assert(ext.ts > a.lease_until);
	cr_assert(ext.version > a.version);
	TL_PASS(rc_get(p, "t", "x", &m, &f));
	cr_assert_eq(m.ts, ext.ts, "the message sits at %lld, extend said %lld",
	    (long long) m.ts, (long long) ext.ts);
	cr_assert_eq(m.version, ext.version);
	cr_assert(m.consumer.n == 5 && memcmp(m.consumer.p, "alpha", 5) == 0);
	rc_frame_free(f);

	/* Another consumer is ready: nothing reaches it (or alpha again)
	 * until well past the first lease's end. */
	cb = rc_open(B.url, "beta");
	TL_PASS(rc_subscribe(cb, "t", "beta", 30000, 10));
	both[0] = ca;
	both[1] = cb;
	until = a.lease_until + 400 - tli_wall_ms();
	if (until > 0) {
		push = rc_wait_push_any(both, 2, 0, (int) until, &which);
		cr_assert_null(push,
		    "a %s push reached %s during the extended "
		    "lease",
		    push ? tlp_op_name(push->h.op) : "",
		    which ? "beta" : "alpha");
	}
	cr_assert(
	    tli_wall_ms() < ext.ts, "the machine is too slow for this test");

	/* Release to a point 700 ms ahead: back on the timeline there. */
	at = tli_wall_ms() + 700;
	TL_PASS(rc_one(ca, TLP_OP_RELEASE, "t", "alpha", "x", ext.version, at,
	            false, NULL, &rel),
	    "release: %s", tl_strerror(rel.err));
	cr_assert_eq(rel.ts, at);
	push = rc_wait_push_any(both, 2, TLP_OP_DELIVER, 10000, &which);
	cr_assert_not_null(
	    push, "the released message was not delivered again");
	memset(&dv, 0, sizeof(dv));
	dv.f = push;
	rc_frame_body(push, &r);
	TL_PASS(tlp_dec_deliver(&r, &dv.d));
	cr_assert_eq(dv.d.n, 1);
	cr_assert(dv.d.v[0].id.n == 1 && dv.d.v[0].id.p[0] == 'x');
	cr_assert(push->rx_us >= at * 1000,
	    "redelivered %lld us before the release time",
	    (long long) (at * 1000 - push->rx_us));
	cr_assert_eq(dv.d.v[0].due_ts, at);
	cr_assert_eq(dv.d.v[0].deliveries, 2);
	cr_assert(dv.d.v[0].version > rel.version);
	rc_deliver_free(&dv);
	rc_close(ca);
	rc_close(cb);
	rc_close(p);
}

Test(leases, owner_cannot_delete_or_move_under_active_lease)
{
	const char *ids[2] = {"d1", "d2"};
	got g[2];
	rc_client *p, *c;
	tlp_result r;
	tlp_msg m;
	rc_frame *f;
	int64_t lease_end, deadline;
	int rv, tries = 0;

	rc_broker_start(&B, "e2e-owner");
	p = rc_open(B.url, "producer");
	create_due_now(p, ids, 2);
	c = rc_open(B.url, "consumer");
	TL_PASS(rc_subscribe(c, "t", "worker", 800, 10));
	cr_assert_eq(collect(c, g, 2, 10000), 2);
	lease_end = g[0].lease_until > g[1].lease_until ? g[0].lease_until
	                                                : g[1].lease_until;
	/* The consumer goes away so that nobody leases them again. */
	rc_close(c);

	TL_FAIL(
	    rc_one(p, TLP_OP_DELETE, "t", "app", "d1", 0, 0, false, NULL, &r),
	    TL_ELEASED, "owner delete under lease: %s", tl_strerror(r.err));
	TL_FAIL(
	    rc_one(p, TLP_OP_MOVE, "t", "app", "d2", 0, 60000, true, NULL, &r),
	    TL_ELEASED, "owner move under lease: %s", tl_strerror(r.err));
	TL_FAIL(rc_one(p, TLP_OP_DELETE, "t", "intruder", "d1", 0, 0, false,
	            NULL, &r),
	    TL_ENOTOWNER);
	cr_assert(tli_wall_ms() < lease_end,
	    "the machine is too slow for this "
	    "test");

	/* Poll: refused while the lease runs, accepted once it ran out. */
	deadline = tli_mono_ms() + 10000;
	for (;;) {
		int64_t before = tli_wall_ms();
		rv = rc_one(
		    p, TLP_OP_DELETE, "t", "app", "d1", 0, 0, false, NULL, &r);
		if (rv == TL_OK) {
			cr_assert(tli_wall_ms() >= lease_end,
			    "the owner deleted d1 before the lease ended");
			break;
		}
		TL_FAIL(rv, TL_ELEASED, "delete d1");
		cr_assert(before < lease_end + 1000,
		    "d1 still counts as leased 1 s after its lease ended");
		cr_assert(tli_mono_ms() < deadline);
		tries++;
		tt_nap_ms(20);
	}
	cr_assert(tries > 0);
	TL_PASS(
	    rc_one(p, TLP_OP_MOVE, "t", "app", "d2", 0, 60000, true, NULL, &r),
	    "owner move after the lease ran out: %s", tl_strerror(r.err));
	cr_assert(r.ts >= lease_end + 60000);
	TL_PASS(rc_get(p, "t", "d2", &m, &f));
	cr_assert_eq(m.ts, r.ts);
	cr_assert_eq(m.consumer.n, 0,
	    "the moved message still names a "
	    "lease holder");
	rc_frame_free(f);
	TL_FAIL(rc_get(p, "t", "d1", &m, &f), TL_ENOTFOUND);
	rc_close(p);
}

/* A consumer id subscribed again from another connection takes the
 * subscription over: the old connection is told (LEASE_LOST) that each
 * lease it held is no longer its to work on, and the new one gets them. */
Test(leases, takeover_tells_the_old_connection)
{
	const char *ids[3] = {"o1", "o2", "o3"};
	got a[3], b[3];
	rc_client *p, *c1, *c2;
	rc_frame *f;
	tlp_deliver lost;
	tlp_r r;
	bool seen[3] = {false, false, false};

	rc_broker_start(&B, "e2e-takeover");
	p = rc_open(B.url, "producer");
	create_due_now(p, ids, 3);
	c1 = rc_open(B.url, "first");
	TL_PASS(rc_subscribe(c1, "t", "w", 30000, 10));
	cr_assert_eq(collect(c1, a, 3, 10000), 3, "first did not get all 3");

	c2 = rc_open(B.url, "second");
	TL_PASS(rc_subscribe(c2, "t", "w", 30000, 10));
	f = rc_wait_push(c1, TLP_OP_LEASE_LOST, 5000);
	cr_assert_not_null(f, "the displaced connection got no LEASE_LOST");
	rc_frame_body(f, &r);
	TL_PASS(tlp_dec_deliver(&r, &lost));
	cr_assert_eq(lost.n, 3, "LEASE_LOST for %zu leases, held 3", lost.n);
	for (size_t i = 0; i < lost.n; i++) {
		for (int k = 0; k < 3; k++) {
			if (lost.v[i].id.n == strlen(a[k].id) &&
			    memcmp(lost.v[i].id.p, a[k].id, lost.v[i].id.n) ==
			        0) {
				cr_assert_eq(lost.v[i].version, a[k].version);
				seen[k] = true;
			}
		}
	}
	cr_assert(seen[0] && seen[1] && seen[2], "a lease missing from it");
	tlp_deliver_fini(&lost);
	rc_frame_free(f);
	/* The new connection recovers the three leases. */
	cr_assert_eq(collect(c2, b, 3, 10000), 3, "second did not recover 3");
	rc_close(c1);
	rc_close(c2);
	rc_close(p);
}

/* The consumer's index keeps a lease as it was taken; an extend changes only
 * the record. A connection that takes the consumer over after the first
 * lease's end (only the extension holds the message then) gets the lease
 * back as extended: its end and version. */
Test(leases, takeover_recovers_a_lease_as_extended)
{
	const char *ids[1] = {"e1"};
	rc_client *p, *c1, *c2;
	got a, b;
	tlp_result ext;

	c1 = leased_by_alpha("e2e-takeover-ext", &p, ids, 1, 500, &a);
	TL_PASS(rc_one(c1, TLP_OP_EXTEND, "t", "alpha", "e1", a.version, 10000,
	            true, NULL, &ext),
	    "extend: %s", tl_strerror(ext.err));
	while (tli_wall_ms() <= a.lease_until + 100) {
		tt_nap_ms(20);
	}
	c2 = rc_open(B.url, "second");
	TL_PASS(rc_subscribe(c2, "t", "alpha", 30000, 10));
	cr_assert_eq(collect(c2, &b, 1, 5000), 1,
	    "the extended lease was not given back");
	cr_assert_str_eq(b.id, "e1");
	cr_assert_eq(b.version, ext.version, "version %llu, extended %llu",
	    (unsigned long long) b.version, (unsigned long long) ext.version);
	cr_assert_eq(b.lease_until, ext.ts, "lease until %lld, extended %lld",
	    (long long) b.lease_until, (long long) ext.ts);
	rc_close(c1);
	rc_close(c2);
	rc_close(p);
}
