/*
 * The cluster's clock watch (clockwatch.h): one SDK session per peer, the
 * offsets they measure, the majority's offset and the degraded state.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "base.h"
#include "broker.h"
#include "clock.h"
#include "clockwatch.h"
#include "frame.h"
#include "msgs.h"
#include "peer.h"
#include "text.h"
#include "tlb_log.h"

#define TLC_CLOCK_TICK_MS 1000
#define TLC_CLOCK_IO_MS 500
#define TLC_CLOCK_MAX_REPLY 4096
/* How long a node waits for any peer's clock before it may lead with its
 * own unchecked. */
#define TLC_CLOCK_GRACE_MS 3000

typedef struct peer {
	uint64_t id;
	char url[256];
	nng_stream *st; /* the watch thread's: a session after its HELLO */
	uint32_t reqid;
	bool known;        /* under the lock, as the field below */
	int64_t offset_ms; /* its broker clock minus ours */
} peer;

struct tlc_clock {
	tlb_broker *b;
	int64_t bound_ms;
	int nnodes; /* the whole cluster, this node included */
	peer peers[TLB_MAX_NODES];
	int npeers;
	nng_aio *aio; /* the watch thread's */
	pthread_t th;
	pthread_mutex_t mtx;
	pthread_cond_t cv;
	bool stop;
	bool degraded;
	bool checked;     /* a round decided, or nobody answered for long */
	int64_t heard_ms; /* monotonic: the last round a peer answered */
	int64_t start_ms;
	bool warned; /* R017 said */
	bool majority_known;
	int64_t majority_ms;
};

/* ---- a session with a peer (peer.h) ---- */

static void
peer_close(peer *p)
{
	tlc_peer_close(&p->st);
}

/* Send HELLO (op HELLO) or PING and read the reply (pushes are not sent
 * to a session that does not subscribe): the peer's broker time, and our
 * broker clock halfway through the round trip. -1 on any failure. */
static int
peer_ask(tlc_clock *k, peer *p, bool hello, int64_t *theirs, int64_t *ours)
{
	uint8_t reply[TLC_CLOCK_MAX_REPLY];
	int64_t t0, t1;
	tli_buf b;
	tlp_w w;
	tlp_r r;
	tlp_str detail;
	size_t nf = 0;
	int err = -1, rv = -1;

	tli_buf_init(&b);
	t0 = tlb_clock_now_us();
	if (hello) {
		tlc_peer_hello(&b, k->b, ++p->reqid, "clock-watch", t0 / 1000);
	} else {
		tlp_frame_begin(&b, &w, TLP_OP_PING, 0, ++p->reqid);
		tlp_enc_ping(&w, t0 / 1000);
	}
	if (tlp_frame_end(&b, 0) != TL_OK ||
	    tlc_peer_call(
	        k->aio, p->st, &b, p->reqid, reply, sizeof(reply), &r) != 0) {
		goto out;
	}
	t1 = tlb_clock_now_us();
	if (tlp_dec_reply_head(&r, &err, &detail, &nf) != TL_OK ||
	    err != TL_OK) {
		goto out;
	}
	if (hello) {
		tlp_hello_rep m;

		if (tlp_dec_hello_rep(&r, &m) != TL_OK) {
			goto out;
		}
		*theirs = m.broker_ms;
	} else if (tlp_dec_ping_rep(&r, theirs) != TL_OK) {
		goto out;
	}
	*ours = (t0 + t1) / 2 / 1000;
	rv = 0;
out:
	tli_buf_fini(&b);
	return rv;
}

/* One measurement of p: open a session when there is none (its HELLO
 * measures), else PING. false when the peer did not answer. */
static bool
peer_measure(tlc_clock *k, peer *p, int64_t *offset)
{
	int64_t theirs = 0, ours = 0;
	bool hello = p->st == NULL;

	if (hello && tlc_peer_dial(k->aio, p->url, &p->st) != 0) {
		return false;
	}
	if (peer_ask(k, p, hello, &theirs, &ours) != 0) {
		peer_close(p);
		return false;
	}
	*offset = theirs - ours;
	return true;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;

	return (x > y) - (x < y);
}

/* The median of this node (0) and the peers it knows; of two middle
 * values the one nearer to ours (an even count cannot outvote us). Under
 * the lock. */
static void
majority_update(tlc_clock *k)
{
	int64_t v[TLB_MAX_NODES + 1];
	int n = 0;

	v[n++] = 0;
	for (int i = 0; i < k->npeers; i++) {
		if (k->peers[i].known) {
			v[n++] = k->peers[i].offset_ms;
		}
	}
	k->majority_known = n > k->nnodes / 2;
	k->majority_ms = 0;
	if (!k->majority_known) {
		return;
	}
	qsort(v, (size_t) n, sizeof(v[0]), cmp_i64);
	if (n % 2 == 1) {
		k->majority_ms = v[n / 2];
	} else {
		/* two middle clocks: they decide only when they agree (two
		 * nodes 5 s apart cannot tell which one is wrong) */
		int64_t a = v[n / 2 - 1], b = v[n / 2];

		if (llabs(b - a) > k->bound_ms) {
			k->majority_known = false;
			return;
		}
		k->majority_ms = llabs(a) < llabs(b) ? a : b;
	}
}

/* One round: open the missing sessions, read every offset. */
static void
watch_round(tlc_clock *k)
{
	bool was, now, any = false, warn = false;
	int64_t maj;

	for (int i = 0; i < k->npeers; i++) {
		peer *p = &k->peers[i];
		int64_t off = 0;
		bool known = peer_measure(k, p, &off);

		pthread_mutex_lock(&k->mtx);
		p->known = known;
		p->offset_ms = known ? off : 0;
		pthread_mutex_unlock(&k->mtx);
		any = any || known;
	}
	pthread_mutex_lock(&k->mtx);
	was = k->degraded;
	majority_update(k);
	/* in with the bound, out below 80 % of it: no flapping at the edge */
	if (any) {
		k->heard_ms = tli_mono_ms();
	}
	/* no peer answers (down, or they want a token: cluster_token): do
	 * not hold the leadership back for ever, but say so */
	if (!k->checked && !k->majority_known &&
	    tli_mono_ms() - (any ? k->heard_ms : k->start_ms) >
	        TLC_CLOCK_GRACE_MS &&
	    !any) {
		k->checked = true;
		warn = !k->warned;
		k->warned = true;
	}
	k->checked = k->checked || k->majority_known;
	if (!k->majority_known) {
		/* undecided: a degraded node stays so, a healthy one too */
	} else if (!was) {
		k->degraded = llabs(k->majority_ms) > k->bound_ms;
	} else {
		k->degraded = llabs(k->majority_ms) * 5 > k->bound_ms * 4;
	}
	now = k->degraded;
	maj = k->majority_ms;
	pthread_mutex_unlock(&k->mtx);
	if (warn) {
		tlb_log(TLB_WARN, "R017",
		    "no other node answers the clock watch (down, or auth = on "
		    "without cluster_token): this node's clock is not checked");
	}
	if (now && !was) {
		tlb_log(TLB_ERROR, "R012",
		    "this node's clock is %lld ms off the cluster majority's "
		    "(bound %lld ms): degraded, it will not lead until its "
		    "clock is fixed",
		    (long long) -maj, (long long) k->bound_ms);
	} else if (was && !now) {
		tlb_log(TLB_INFO, "R013",
		    "this node's clock is back within %lld ms of the cluster "
		    "majority's (%lld ms off): no longer degraded",
		    (long long) k->bound_ms, (long long) -maj);
	}
}

static void *
watch_main(void *arg)
{
	tlc_clock *k = arg;

	pthread_setname_np(pthread_self(), "tl-clockwatch");
	pthread_mutex_lock(&k->mtx);
	while (!k->stop) {
		struct timespec ts;

		pthread_mutex_unlock(&k->mtx);
		watch_round(k);
		pthread_mutex_lock(&k->mtx);
		tli_deadline(&ts, CLOCK_REALTIME, TLC_CLOCK_TICK_MS);
		while (!k->stop &&
		    pthread_cond_timedwait(&k->cv, &k->mtx, &ts) == 0) {
		}
	}
	pthread_mutex_unlock(&k->mtx);
	for (int i = 0; i < k->npeers; i++) {
		peer_close(&k->peers[i]);
	}
	return NULL;
}

tlc_clock *
tlc_clock_start(tlb_broker *b)
{
	const tlb_conf *cf = &b->conf;
	tlc_clock *k = tli_zalloc(sizeof(*k));

	if (k == NULL) {
		tlb_log(TLB_ERROR, "R012", "clock watch: out of memory");
		return NULL;
	}
	k->b = b;
	k->bound_ms = cf->cluster_clock_bound_ms;
	k->start_ms = tli_mono_ms();
	k->nnodes = cf->nnodes;
	for (int i = 0; i < cf->nnodes; i++) {
		if (i == cf->self) {
			continue;
		}
		k->peers[k->npeers].id = cf->nodes[i].id;
		snprintf(k->peers[k->npeers].url,
		    sizeof(k->peers[k->npeers].url), "%s", cf->nodes[i].url);
		k->npeers++;
	}
	if (nng_aio_alloc(&k->aio, NULL, NULL) != 0) {
		tlb_log(TLB_ERROR, "R012", "clock watch: out of memory");
		tli_free(k);
		return NULL;
	}
	nng_aio_set_timeout(k->aio, TLC_CLOCK_IO_MS);
	pthread_mutex_init(&k->mtx, NULL);
	pthread_cond_init(&k->cv, NULL);
	if (pthread_create(&k->th, NULL, watch_main, k) != 0) {
		tlb_log(TLB_ERROR, "R012", "clock watch: no thread");
		nng_aio_free(k->aio);
		pthread_cond_destroy(&k->cv);
		pthread_mutex_destroy(&k->mtx);
		tli_free(k);
		return NULL;
	}
	return k;
}

void
tlc_clock_stop(tlc_clock *k)
{
	if (k == NULL) {
		return;
	}
	pthread_mutex_lock(&k->mtx);
	k->stop = true;
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->mtx);
	pthread_join(k->th, NULL);
	nng_aio_free(k->aio);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mtx);
	tli_free(k);
}

bool
tlc_clock_checked(tlc_clock *k)
{
	bool v;

	if (k == NULL) {
		return true;
	}
	pthread_mutex_lock(&k->mtx);
	v = k->checked;
	pthread_mutex_unlock(&k->mtx);
	return v;
}

bool
tlc_clock_degraded(tlc_clock *k)
{
	bool d;

	if (k == NULL) {
		return false;
	}
	pthread_mutex_lock(&k->mtx);
	d = k->degraded;
	pthread_mutex_unlock(&k->mtx);
	return d;
}

int64_t
tlc_clock_majority_offset(tlc_clock *k, bool *known)
{
	int64_t v = 0;

	*known = false;
	if (k == NULL) {
		return 0;
	}
	pthread_mutex_lock(&k->mtx);
	*known = k->majority_known;
	v = k->majority_ms;
	pthread_mutex_unlock(&k->mtx);
	return v;
}

bool
tlc_clock_peer(tlc_clock *k, uint64_t id, int64_t *offset_ms)
{
	bool known = false;

	if (k == NULL) {
		return false;
	}
	pthread_mutex_lock(&k->mtx);
	for (int i = 0; i < k->npeers; i++) {
		if (k->peers[i].id == id && k->peers[i].known) {
			known = true;
			*offset_ms = k->peers[i].offset_ms;
		}
	}
	pthread_mutex_unlock(&k->mtx);
	return known;
}

void
tlc_clock_metrics(tlc_clock *k, tli_buf *o)
{
	if (k == NULL) {
		return;
	}
	pthread_mutex_lock(&k->mtx);
	tli_buf_printf(o,
	    "# HELP timeline_cluster_clock_offset_ms a node's broker clock "
	    "minus this node's, as last measured (only nodes that answer)\n"
	    "# TYPE timeline_cluster_clock_offset_ms gauge\n");
	for (int i = 0; i < k->npeers; i++) {
		if (k->peers[i].known) {
			tli_buf_printf(o,
			    "timeline_cluster_clock_offset_ms{node=\"%llu\"} "
			    "%lld\n",
			    (unsigned long long) k->peers[i].id,
			    (long long) k->peers[i].offset_ms);
		}
	}
	tli_buf_printf(o,
	    "# HELP timeline_cluster_clock_majority_offset_ms the cluster "
	    "majority's clock minus this node's (0 while no majority "
	    "answers)\n# TYPE timeline_cluster_clock_majority_offset_ms "
	    "gauge\ntimeline_cluster_clock_majority_offset_ms %lld\n",
	    (long long) k->majority_ms);
	tli_prom_scalar(o, "timeline_cluster_clock_degraded", "gauge",
	    "1 while this node's clock is off the majority's by more than "
	    "cluster_clock_bound_ms: it does not lead",
	    k->degraded ? 1 : 0);
	pthread_mutex_unlock(&k->mtx);
}
