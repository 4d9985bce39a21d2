/*
 * Timeline's hard limits. Every length read from the wire or the disk is
 * checked against one of these before anything is allocated. Topic settings
 * may lower some of them (max_body), never raise them.
 */
#ifndef TIMELINE_LIMITS_H
#define TIMELINE_LIMITS_H

#include <stdint.h>

/* Message ids: 1..128 bytes, any bytes (the broker generates 26-character
 * sortable ids when the producer gives none). */
#define TL_MAX_ID_LEN 128
/* Topic names, producer groups and consumer ids: 1..128 bytes. */
#define TL_MAX_NAME_LEN 128
/* The ceiling for a message body; topics default to TL_DEFAULT_MAX_BODY. */
#define TL_MAX_BODY_LEN (16u * 1024u * 1024u)
#define TL_DEFAULT_MAX_BODY (256u * 1024u)
/* Timeline time: UTC milliseconds from 1970-01-01 to the end of year 9999. */
#define TL_TS_MIN INT64_C(0)
#define TL_TS_MAX INT64_C(253402300799999)
/* Buckets of a topic: 1..TL_MAX_BUCKETS, fixed at creation. */
#define TL_MAX_BUCKETS 4096u
#define TL_DEFAULT_BUCKETS 16u
/* Leases: the default and the ceiling a topic may set. */
#define TL_DEFAULT_LEASE_MS INT64_C(30000)
#define TL_DEFAULT_MAX_LEASE_MS INT64_C(43200000)
#define TL_MAX_LEASE_MS INT64_C(604800000)
/* Deliveries before a message is dead-lettered (0 = never). */
#define TL_DEFAULT_MAX_DELIVERIES 16u
/* Operations in one request or one store submission. */
#define TL_MAX_BATCH 4096u
/* Length of a generated id (sortable, Crockford base32). */
#define TL_GEN_ID_LEN 26

#endif
