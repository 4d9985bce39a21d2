/*
 * Key and record encodings of the timeline store. Integers are big-endian so
 * that RocksDB's byte order is timeline order; strings inside keys carry a
 * one-byte length prefix so that one consumer's or owner's keys never
 * interleave with another's. docs/storage.md shows the layouts.
 */
#include "store_int.h"

#define TAG_REC 'm'
#define TAG_BODY 'b'
#define TAG_DEAD 'd'

static size_t
key_topic_tag(
    uint8_t *k, uint32_t topic, uint8_t tag, const char *id, size_t len)
{
	tli_put_be32(k, topic);
	k[4] = tag;
	memcpy(k + 5, id, len);
	return 5 + len;
}

size_t
tli_key_msg(uint8_t *k, uint32_t topic, const char *id, size_t len)
{
	return key_topic_tag(k, topic, TAG_REC, id, len);
}

size_t
tli_key_body(uint8_t *k, uint32_t topic, const char *id, size_t len)
{
	return key_topic_tag(k, topic, TAG_BODY, id, len);
}

size_t
tli_key_dead(uint8_t *k, uint32_t topic, const char *id, size_t len)
{
	return key_topic_tag(k, topic, TAG_DEAD, id, len);
}

size_t
tli_key_tl(uint8_t *k, uint32_t topic, uint32_t bucket, int64_t ts,
    const char *id, size_t len)
{
	tli_put_be32(k, topic);
	tli_put_be32(k + 4, bucket);
	tli_put_be64(k + 8, (uint64_t) ts);
	memcpy(k + 16, id, len);
	return 16 + len;
}

size_t
tli_key_cons(uint8_t *k, uint32_t topic, const char *cons, size_t clen,
    const char *id, size_t len)
{
	tli_put_be32(k, topic);
	k[4] = (uint8_t) clen;
	memcpy(k + 5, cons, clen);
	memcpy(k + 5 + clen, id, len);
	return 5 + clen + len;
}

size_t
tli_key_own(uint8_t *k, uint32_t topic, const char *owner, size_t olen,
    int64_t ts, const char *id, size_t len)
{
	tli_put_be32(k, topic);
	k[4] = (uint8_t) olen;
	memcpy(k + 5, owner, olen);
	tli_put_be64(k + 5 + olen, (uint64_t) ts);
	memcpy(k + 13 + olen, id, len);
	return 13 + olen + len;
}

size_t
tli_key_meta_topic(uint8_t *k, const char *name, size_t len)
{
	k[0] = 'T';
	memcpy(k + 1, name, len);
	return 1 + len;
}

size_t
tli_key_meta_counters(uint8_t *k, uint32_t topic)
{
	k[0] = 'C';
	tli_put_be32(k + 1, topic);
	return 5;
}

/* Record format 2 added sched after ts; format 1 records (sched = ts, which
 * is where their owner entry is) are still read. Format 3 added the
 * recurrence block (every, start, seq, last) after the fixed fields, present
 * only with REC_RECUR; format 2 records (no recurrence) are still read. */
#define REC_FORMAT_1 1
#define REC_FORMAT_2 2
#define REC_FORMAT 3

size_t
tli_rec_encode(uint8_t *out, const rec *r)
{
	uint8_t *p = out;

	*p++ = REC_FORMAT;
	*p++ = r->flags;
	tli_put_be64(p, (uint64_t) r->ts);
	tli_put_be64(p + 8, (uint64_t) r->sched);
	tli_put_be64(p + 16, r->version);
	tli_put_be64(p + 24, (uint64_t) r->created_at);
	tli_put_be32(p + 32, r->deliveries);
	tli_put_be32(p + 36, r->bucket);
	tli_put_be32(p + 40, r->body_len);
	p += 44;
	if (r->flags & REC_RECUR) {
		tli_put_be64(p, (uint64_t) r->every);
		tli_put_be64(p + 8, (uint64_t) r->start);
		tli_put_be32(p + 16, r->seq);
		tli_put_be32(p + 20, r->last);
		p += REC_RECUR_LEN;
	}
	*p++ = r->owner_len;
	memcpy(p, r->owner, r->owner_len);
	p += r->owner_len;
	*p++ = r->cons_len;
	memcpy(p, r->cons, r->cons_len);
	p += r->cons_len;
	if (r->flags & REC_INLINE) {
		memcpy(p, r->body, r->body_len);
		p += r->body_len;
	}
	return (size_t) (p - out);
}

int
tli_rec_decode(rec *r, const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len;

	size_t fix = len > 0 && p[0] == REC_FORMAT_1 ? 8 : 0;
	uint8_t fmt = len > 0 ? p[0] : 0;

	if (len < 2 ||
	    (fmt != REC_FORMAT && fmt != REC_FORMAT_2 && fmt != REC_FORMAT_1) ||
	    len < 47 - fix) {
		return TL_ECORRUPT;
	}
	if ((p[1] & REC_RECUR) &&
	    (fmt != REC_FORMAT || len < 47 + REC_RECUR_LEN)) {
		return TL_ECORRUPT;
	}
	r->flags = p[1];
	p += 2;
	r->ts = (int64_t) tli_get_be64(p);
	if (fix == 0) {
		r->sched = (int64_t) tli_get_be64(p + 8);
		p += 8;
	} else {
		r->sched = r->ts;
	}
	r->version = tli_get_be64(p + 8);
	r->created_at = (int64_t) tli_get_be64(p + 16);
	r->deliveries = tli_get_be32(p + 24);
	r->bucket = tli_get_be32(p + 28);
	r->body_len = tli_get_be32(p + 32);
	p += 36;
	if (r->flags & REC_RECUR) {
		r->every = (int64_t) tli_get_be64(p);
		r->start = (int64_t) tli_get_be64(p + 8);
		r->seq = tli_get_be32(p + 16);
		r->last = tli_get_be32(p + 20);
		p += REC_RECUR_LEN;
	} else {
		r->every = 0;
		r->start = 0;
		r->seq = 0;
		r->last = 0;
	}
	r->owner_len = *p++;
	if (r->owner_len == 0 || r->owner_len > TL_MAX_NAME_LEN ||
	    end - p < r->owner_len + 1) {
		return TL_ECORRUPT;
	}
	memcpy(r->owner, p, r->owner_len);
	p += r->owner_len;
	r->cons_len = *p++;
	if (r->cons_len > TL_MAX_NAME_LEN || end - p < r->cons_len) {
		return TL_ECORRUPT;
	}
	memcpy(r->cons, p, r->cons_len);
	p += r->cons_len;
	if (r->flags & REC_INLINE) {
		if (r->body_len > INLINE_MAX || end - p != (long) r->body_len) {
			return TL_ECORRUPT;
		}
		memcpy(r->body, p, r->body_len);
	} else if (p != end) {
		return TL_ECORRUPT;
	}
	return TL_OK;
}

void
tli_val_tl(uint8_t out[9], uint64_t version, bool locked)
{
	tli_put_be64(out, version);
	out[8] = locked ? 1 : 0;
}

void
tli_val_cons(uint8_t out[16], int64_t ts, uint64_t version)
{
	tli_put_be64(out, (uint64_t) ts);
	tli_put_be64(out + 8, version);
}

size_t
tli_val_cons_ahead(uint8_t out[24], int64_t ts, uint64_t version, int64_t at)
{
	tli_val_cons(out, ts, version);
	if (at == 0) {
		return 16;
	}
	tli_put_be64(out + 16, (uint64_t) at);
	return 24;
}

#define TOPIC_FORMAT 1

size_t
tli_topic_encode(uint8_t *out, const topic_rt *t)
{
	out[0] = TOPIC_FORMAT;
	tli_put_be32(out + 1, t->id);
	tli_put_be64(out + 5, (uint64_t) t->created_at);
	tli_put_be32(out + 13, t->conf.buckets);
	tli_put_be32(out + 17, t->conf.max_body);
	tli_put_be64(out + 21, (uint64_t) t->conf.default_lease_ms);
	tli_put_be64(out + 29, (uint64_t) t->conf.max_lease_ms);
	tli_put_be32(out + 37, t->conf.max_deliveries);
	return 41;
}

int
tli_topic_decode(topic_rt *t, const uint8_t *p, size_t len)
{
	if (len != 41 || p[0] != TOPIC_FORMAT) {
		return TL_ECORRUPT;
	}
	t->id = tli_get_be32(p + 1);
	t->created_at = (int64_t) tli_get_be64(p + 5);
	t->conf.buckets = tli_get_be32(p + 13);
	t->conf.max_body = tli_get_be32(p + 17);
	t->conf.default_lease_ms = (int64_t) tli_get_be64(p + 21);
	t->conf.max_lease_ms = (int64_t) tli_get_be64(p + 29);
	t->conf.max_deliveries = tli_get_be32(p + 37);
	if (t->conf.buckets == 0 || t->conf.buckets > TL_MAX_BUCKETS) {
		return TL_ECORRUPT;
	}
	return TL_OK;
}
