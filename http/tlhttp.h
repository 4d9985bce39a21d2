/*
 * tlhttp: the HTTP layer an adapter (the MSC4140 gateway, a timer service)
 * serves its routes through, and the text helpers of an HTTP front.
 * Built on tlbase only; an adapter links it beside the public SDK.
 */
#ifndef TL_HTTP_TLHTTP_H
#define TL_HTTP_TLHTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* ---- text (text.c) ---- */

/* A JSON string literal (quotes included) of n bytes of UTF-8. */
void tlh_json_str(tli_buf *b, const char *s, size_t n);
/* Percent-encode for a URL path segment or query value. */
void tlh_url_enc(tli_buf *b, const char *s, size_t n);
/* Decode %XX in place (NUL-terminated after); returns the new length or -1
 * on a bad escape. */
long tlh_url_dec(char *s, size_t n);
/* The decoded value of parameter name in a raw query string ("a=1&b")
 * into out; "" for a bare name; NULL when absent, too long or badly
 * escaped. */
const char *tlh_query_get(
    const char *query, const char *name, char *out, size_t cap);

#endif
