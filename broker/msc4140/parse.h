/*
 * The gateway's reading of what a client sends (api.c): the query string,
 * path parameters and JSON bodies of the delayed-event endpoints, each on
 * plain text so it can be exercised without a server or a broker (the
 * fuzz targets of tests/fuzz/ call these). The endpoints call them with
 * the request's parts; nothing here blocks or talks to the broker.
 */
#ifndef TL_MSC4140_PARSE_H
#define TL_MSC4140_PARSE_H

#include "api.h"

/* The unstable form's org.matrix.msc4140.delay from a raw query string
 * into *delay; false when o holds the answer (400, or the max-delay
 * refusal the configuration asks for). */
bool tlg_query_delay(
    const tlg_conf *c, const char *query, int64_t *delay, gout *o);
/* The query parameters kept with an event and passed on at send time
 * (all but the gateway's own and the caller's identity) appended to out;
 * false when the query holds a control character or a space. */
bool tlg_extra_query(const char *query, tli_buf *out);
/* A room id, event type or state key: at most 255 bytes of UTF-8 without
 * control characters. */
bool tlg_field_ok(const char *s, size_t n);
/* A delay_id: 1 to TL_MAX_ID_LEN letters, digits, '-' or '_'. */
bool tlg_id_ok(const char *id, size_t n);
/* The body of a scheduling request (n bytes at body): a JSON object; in
 * the stable form (r->stable) also its delay, state_key and content.
 * Sets r->content, and r->delay, r->state and r->skey (owned by r) in the
 * stable form; false when o holds the answer. */
bool tlg_schedule_json(
    const tlg_conf *c, greq *r, const char *body, size_t n, gout *o);
/* The raw bytes of the top-level member key of a JSON object text that
 * was already validated as a whole; false when there is none. */
bool tlg_json_member(const char *p, size_t n, const char *key, gstr *out);
/* The action of a management body {"action": "cancel"|"restart"|"send"}
 * into action (cap bytes); false when o holds the answer. */
bool tlg_manage_action(
    const char *body, size_t n, char *action, size_t cap, gout *o);
/* Whether the delay_id parameters of a raw query string ask for id (all
 * ids when there is none). */
bool tlg_id_wanted(const char *query, const char *id);

#endif
