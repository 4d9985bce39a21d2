/*
 * Named leases: tl_lock_try and tl_lock take the lease on one message by
 * its id (the LOCK request) instead of waiting for a delivery.
 *
 * DESIGN. A lock's lease handle owns a hidden consumer (tl_consumer with
 * lock set): the same object a subscription uses, so tl_lease_extend,
 * tl_lease_release and tl_lease_delete (blocking and asynchronous) queue
 * and batch their operations exactly as for a delivered lease, with its
 * topic and consumer id; connection loss, timeouts and the send thread's
 * batching apply unchanged. The hidden consumer is on the client's
 * consumer list so that those paths see it, but it is never subscribed,
 * re-subscribed after a reconnect or given deliveries (consumer.c skips
 * it). It lives as long as the handle: tl_lease_free frees both.
 */
#include <time.h>

#include "internal.h"

typedef struct lockcall {
	tli_req q;
	tli_waiter w;
	tl_lease *l;   /* the lease taken, on success */
	int64_t until; /* TL_ELEASED / TL_ENOTDUE: when to try again */
} lockcall;

static void
lock_reply(tli_req *q, int err, tlp_r *r)
{
	lockcall *k = (lockcall *) q;
	tlp_delivery d;

	if (err == TL_OK) {
		if ((err = tlp_dec_lock_rep(r, &d)) == TL_OK &&
		    (k->l = tli_lease_new(&d)) == NULL) {
			err = TL_ENOMEM;
		}
	} else if ((err == TL_ELEASED || err == TL_ENOTDUE) && r != NULL) {
		/* An older broker may send no time: then it stays 0. */
		(void) tlp_dec_error_until(r, &k->until);
	}
	tli_wait_done(q->c, &k->w, err);
}

static int
lock_conf_check(const tl_lock_conf *conf, size_t id_len)
{
	int rv;

	if (conf->topic == NULL || conf->id == NULL ||
	    conf->consumer_id == NULL || conf->lease_ms < 0) {
		return TL_EINVAL;
	}
	if ((rv = tli_len_check(strlen(conf->topic), TL_MAX_NAME_LEN)) !=
	        TL_OK ||
	    (rv = tli_len_check(id_len, TL_MAX_ID_LEN)) != TL_OK ||
	    (rv = tli_len_check(strlen(conf->consumer_id), TL_MAX_NAME_LEN)) !=
	        TL_OK) {
		return rv;
	}
	if (conf->create_group != NULL &&
	    (rv = tli_len_check(strlen(conf->create_group), TL_MAX_NAME_LEN)) !=
	        TL_OK) {
		return rv;
	}
	return conf->lease_ms > TL_MAX_LEASE_MS ? TL_ELEASELIMIT : TL_OK;
}

/* The hidden consumer that carries the lease's operations. */
static tl_consumer *
lock_consumer_new(tl_client *c, const tl_lock_conf *conf)
{
	tl_consumer *k = tli_zalloc(sizeof(*k));

	if (k == NULL) {
		return NULL;
	}
	k->client = c;
	k->lock = true;
	k->credit = 1;
	k->lease_ms = conf->lease_ms;
	k->topic = tli_strndup(conf->topic, strlen(conf->topic));
	k->id = tli_strndup(conf->consumer_id, strlen(conf->consumer_id));
	pthread_cond_init(&k->cv, NULL);
	tli_htab_init(&k->lht);
	if (k->topic == NULL || k->id == NULL) {
		tli_consumer_free(k);
		return NULL;
	}
	return k;
}

/* Tie the lease to its own hidden consumer, on the client's list. */
static int
lock_attach(tl_client *c, const tl_lock_conf *conf, tl_lease *l)
{
	tl_consumer *k = lock_consumer_new(c, conf);

	if (k == NULL) {
		return TL_ENOMEM;
	}
	l->cons = k;
	l->client = c;
	l->own = k;
	pthread_mutex_lock(&c->mtx);
	k->next = c->consumers;
	c->consumers = k;
	pthread_mutex_unlock(&c->mtx);
	return TL_OK;
}

void
tli_lock_lease_free(tl_lease *l)
{
	tl_consumer *k = l->own;
	tl_client *c = k->client;
	tli_lop *lops = NULL;

	pthread_mutex_lock(&c->mtx);
	tli_consumer_detach(c, k, &lops);
	pthread_mutex_unlock(&c->mtx);
	/* None by the contract of tl_lease_free; if any, they end here. */
	tli_lops_finish(c, lops, TL_ECLOSED);
	tli_consumer_free(k);
	tli_free(l);
}

int
tl_lock_try(
    tl_client *c, const tl_lock_conf *conf, tl_lease **out, int64_t *held_until)
{
	lockcall *k;
	tlp_lock m;
	tlp_w w;
	size_t id_len;
	int rv;

	if (c == NULL || conf == NULL || out == NULL) {
		return TL_EINVAL;
	}
	if ((rv = tli_may_block(c)) != TL_OK) {
		return rv;
	}
	id_len = conf->id == NULL ? 0
	    : conf->id_len > 0    ? conf->id_len
	                          : strlen(conf->id);
	if ((rv = lock_conf_check(conf, id_len)) != TL_OK) {
		return rv;
	}
	if ((k = tli_zalloc(sizeof(*k))) == NULL) {
		return TL_ENOMEM;
	}
	m.topic = TLP_STR(conf->topic);
	m.consumer = TLP_STR(conf->consumer_id);
	m.id = (tlp_str){conf->id, id_len};
	m.lease_ms = conf->lease_ms;
	m.create_group = TLP_STR(conf->create_group);
	tli_frame_start(&k->q.frame, &w, TLP_OP_LOCK);
	tlp_enc_lock(&w, &m);
	k->q.op = TLP_OP_LOCK;
	k->q.on_reply = lock_reply;
	tli_waiter_init(&k->w);
	{
		tli_req *q = &k->q;
		if ((rv = tli_submit(c, &q, 1)) != TL_OK) {
			tli_waiter_fini(&k->w);
			tli_free(k);
			return rv;
		}
	}
	rv = tli_wait(c, &k->w);
	if (rv == TL_OK && (rv = lock_attach(c, conf, k->l)) != TL_OK) {
		tli_free(k->l); /* the lease runs out at the broker */
	}
	if (rv == TL_OK) {
		*out = k->l;
	} else if ((rv == TL_ELEASED || rv == TL_ENOTDUE) &&
	    held_until != NULL) {
		*held_until = k->until;
	}
	tli_free(k);
	return rv;
}

/* The broker's now as this client sees it. */
static int64_t
lock_broker_now(tl_client *c)
{
	int64_t off;

	pthread_mutex_lock(&c->mtx);
	off = c->offset_ms;
	pthread_mutex_unlock(&c->mtx);
	return tli_wall_ms() + off;
}

static void
lock_sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0) {
	}
}

int
tl_lock(tl_client *c, const tl_lock_conf *conf, int timeout_ms, tl_lease **out)
{
	int64_t deadline = tli_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);

	for (;;) {
		int64_t until = 0, wait = 100, left;
		int rv = tl_lock_try(c, conf, out, &until);

		if (rv != TL_ELEASED && rv != TL_ENOTDUE && rv != TL_ECONN) {
			return rv;
		}
		if (rv != TL_ECONN && until > 0) {
			/* Just after the holder's end; at least 1 ms. */
			wait = until - lock_broker_now(c) + 1;
			wait = wait < 1 ? 1 : wait;
		}
		wait = wait > 1000 ? 1000 : wait;
		if (timeout_ms >= 0) {
			if ((left = deadline - tli_mono_ms()) <= 0) {
				return TL_ETIMEDOUT;
			}
			wait = wait < left ? wait : left;
		}
		lock_sleep_ms(wait);
	}
}
