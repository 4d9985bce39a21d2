/*
 * Timeline error codes. Every fallible function of Timeline returns one of
 * these (TL_OK on success). The numbers are stable and travel on the wire;
 * they are generated from proto/errors.def together with docs/errors.md.
 */
#ifndef TIMELINE_ERRORS_H
#define TIMELINE_ERRORS_H

#include "timeline/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tl_err {
	TL_OK = 0,
#define TL_ERR(name, num, msg, advice) name = num,
#include "timeline/errors.def"
#undef TL_ERR
	TL_ERR_LAST_
} tl_err;

/* A human sentence for an error code; never NULL. Codes outside the table
 * give "unknown error N" from a thread-local buffer. */
TL_API const char *tl_strerror(int err);

/* The symbolic name of an error code ("TL_EVERSION"), or "TL_E?" when the
 * code is not in the table. Never NULL. */
TL_API const char *tl_errname(int err);

/* What a client should do about an error, in one sentence. Never NULL. */
TL_API const char *tl_erradvice(int err);

#ifdef __cplusplus
}
#endif
#endif
