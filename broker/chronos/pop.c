/*
 * The pops: the SDK's consumer of the timers' topic hands each lease (one
 * due occurrence of a timer) to a queue; `workers` threads take from it
 * and each makes one callback at a time, so that a slow receiver holds one
 * worker and not the pops of the others. The consumer's credit is twice
 * the workers, so the queue stays short and a lease waits little.
 *
 * A callback is POST <uri> with the opaque data as the body and
 * X-Sequence-Number: the occurrence's number (tl_lease_seq; 1 for a
 * one-pop timer). A 2xx within callback_timeout_ms deletes under the lease,
 * which on the broker completes the occurrence and places the next one in
 * the same write. Anything else is retried: the lease is released to
 * now + backoff (the delay so far, between retry_min_ms and retry_max_ms),
 * so the occurrence comes back with the same sequence number, and an
 * owner's PUT or DELETE in between finds no lease in the way. Once
 * retry_for_ms has passed since the occurrence was due, the pop is logged
 * (C020), counted, and deleted under the lease so that the timer goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* The stored timer of a lease, or NULL when it cannot be read. */
static bool
lease_timer(tlk_timer *t, tl_lease *l)
{
	size_t len;
	const char *body = tl_lease_body(l, &len);
	char err[300];

	if (tlk_timer_parse(t, body, len, INT64_MAX / 4, err, sizeof(err)) ==
	    0) {
		return true;
	}
	tli_log("chronos", TLI_LOG_ERROR, "C021",
	    "timer %s: its stored form is unreadable (%s); dropped",
	    tl_lease_id(l), err);
	return false;
}

/* The occurrence is done (answered, or given up): the delete completes it
 * on the broker; after the last one the timer is gone. */
static void
pop_done(tlk *k, tl_lease *l, uint32_t seq)
{
	uint32_t last = tl_lease_last(l);
	/* taken under the lease: a PUT of the timer waits for it */
	uint64_t gen = tlk_stats_gen(k, tl_lease_id(l));
	int rv = tl_lease_delete(l);

	if (rv == TL_OK && (last == 0 || seq >= last)) {
		tlk_stats_del_gen(k, tl_lease_id(l), gen);
	} else if (rv != TL_OK && rv != TL_ENOTFOUND && rv != TL_EVERSION &&
	    rv != TL_ELEASEEXPIRED) {
		tli_log("chronos", TLI_LOG_WARN, "C022",
		    "timer %s pop %u: cannot complete it on the broker (%s); "
		    "it comes back",
		    tl_lease_id(l), seq, tl_strerror(rv));
	}
}

static void
pop_failed(tlk *k, tl_lease *l, uint32_t seq, const tlh_resp *r)
{
	int64_t now = tl_client_broker_now(k->cl);
	int64_t due = tl_lease_occurrence_at(l);
	int64_t waited = now - due, back;
	char why[160];

	if (r->status != 0) {
		snprintf(why, sizeof(why), "HTTP %ld", r->status);
	} else {
		snprintf(why, sizeof(why), "%s", r->why ? r->why : "no answer");
	}
	if (waited >= k->c.retry_for_ms) {
		atomic_fetch_add(&k->st.failures, 1);
		tli_log("chronos", TLI_LOG_WARN, "C020",
		    "timer %s pop %u failed for %lld ms (last: %s); given up",
		    tl_lease_id(l), seq, (long long) waited, why);
		pop_done(k, l, seq);
		return;
	}
	back = waited < k->c.retry_min_ms ? k->c.retry_min_ms : waited;
	back = back > k->c.retry_max_ms ? k->c.retry_max_ms : back;
	if (waited + back > k->c.retry_for_ms) {
		back = k->c.retry_for_ms - waited; /* one last try at the end */
	}
	atomic_fetch_add(&k->st.retries, 1);
	tli_log("chronos", TLI_LOG_DEBUG, "C023",
	    "timer %s pop %u: %s; again in %lld ms", tl_lease_id(l), seq, why,
	    (long long) back);
	if (tl_lease_release(l, back, true) != TL_OK) {
		/* the lease runs out and the pop comes back by itself */
		return;
	}
}

static void
pop_one(tlk *k, tl_lease *l)
{
	tlk_timer t;
	tlh_resp r;
	char seqs[16];
	uint32_t seq = tl_lease_seq(l);
	int64_t t0;

	if (!lease_timer(&t, l)) {
		pop_done(k, l, tl_lease_last(l));
		return;
	}
	seq = seq == 0 ? 1 : seq; /* a one-pop timer has no recurrence */
	snprintf(seqs, sizeof(seqs), "%u", seq);
	tlh_hdr hdrs[] = {
	    {"X-Sequence-Number", seqs},
	    /* none of libcurl's own: the seed's request has only these */
	    {"Content-Type", NULL},
	    {"Accept", NULL},
	};
	tlh_fetch_opts o = {
	    .connect_ms = k->c.callback_timeout_ms,
	    .timeout_ms = k->c.callback_timeout_ms,
	    .max_body = 64 * 1024,
	    .abort = &k->stopping,
	};
	t0 = tli_mono_ns();
	tlh_fetch(
	    k->hc, "POST", t.uri, hdrs, 2, t.opaque, t.opaque_len, &o, &r);
	atomic_fetch_add(&k->st.attempts, 1);
	tlk_stats_latency(k, (tli_mono_ns() - t0) / 1000);
	if (r.status >= 200 && r.status < 300) {
		atomic_fetch_add(&k->st.pops, 1);
		pop_done(k, l, seq);
	} else if (!atomic_load(&k->stopping)) {
		pop_failed(k, l, seq, &r);
	}
	tlh_resp_free(&r);
	tlk_timer_fini(&t);
}

static void *
worker_main(void *arg)
{
	tlk *k = arg;

	for (;;) {
		tli_qnode *n;
		kjob *j;

		pthread_mutex_lock(&k->q_mtx);
		while ((n = tli_queue_pop(&k->q)) == NULL && !k->q_stop) {
			pthread_cond_wait(&k->q_cv, &k->q_mtx);
		}
		pthread_mutex_unlock(&k->q_mtx);
		if (n == NULL) {
			return NULL;
		}
		j = TLI_CONTAINER(n, kjob, qn);
		if (!atomic_load(&k->stopping)) {
			pop_one(k, j->lease);
		}
		tl_lease_free(j->lease);
		free(j);
	}
}

static void
on_due(void *arg, tl_lease *l)
{
	tlk *k = arg;
	kjob *j = malloc(sizeof(*j));

	if (j == NULL) {
		tl_lease_free(l); /* it runs out and comes back */
		return;
	}
	j->lease = l;
	pthread_mutex_lock(&k->q_mtx);
	tli_queue_push(&k->q, &j->qn);
	pthread_cond_signal(&k->q_cv);
	pthread_mutex_unlock(&k->q_mtx);
}

int
tlk_pop_start(tlk *k)
{
	tl_consumer_conf cc;
	int rv;

	pthread_mutex_init(&k->q_mtx, NULL);
	pthread_cond_init(&k->q_cv, NULL);
	tli_queue_init(&k->q);
	k->workers = calloc(k->c.workers, sizeof(*k->workers));
	if (k->workers == NULL) {
		return -1;
	}
	for (; k->nworkers < k->c.workers; k->nworkers++) {
		if (pthread_create(
		        &k->workers[k->nworkers], NULL, worker_main, k) != 0) {
			return -1;
		}
	}
	memset(&cc, 0, sizeof(cc));
	cc.topic = k->c.topic;
	cc.consumer_id = k->c.consumer_id;
	cc.lease_ms = k->c.lease_ms;
	cc.credit = 2 * k->c.workers;
	cc.on_message = on_due;
	cc.arg = k;
	if ((rv = tl_consumer_open(&k->cons, k->cl, &cc)) != TL_OK) {
		tli_log("chronos", TLI_LOG_ERROR, "C003",
		    "cannot consume %s: %s", k->c.topic, tl_strerror(rv));
		return -1;
	}
	return 0;
}

void
tlk_pop_stop(tlk *k)
{
	tl_consumer_close(k->cons); /* no more leases come */
	k->cons = NULL;
	if (k->workers == NULL) {
		return;
	}
	pthread_mutex_lock(&k->q_mtx);
	k->q_stop = true;
	pthread_cond_broadcast(&k->q_cv);
	pthread_mutex_unlock(&k->q_mtx);
	for (uint32_t i = 0; i < k->nworkers; i++) {
		pthread_join(k->workers[i], NULL);
	}
	/* what was still queued: its leases run out and come back */
	for (tli_qnode *n; (n = tli_queue_pop(&k->q)) != NULL;) {
		kjob *j = TLI_CONTAINER(n, kjob, qn);
		tl_lease_free(j->lease);
		free(j);
	}
	free(k->workers);
	k->workers = NULL;
	pthread_mutex_destroy(&k->q_mtx);
	pthread_cond_destroy(&k->q_cv);
}
