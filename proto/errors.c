/*
 * Error names, messages and advice, expanded from the error table
 * (timeline/errors.def) so that no error exists in one place and not another.
 */
#include <stdio.h>

#include "timeline/errors.h"

typedef struct {
	const char *name;
	const char *msg;
	const char *advice;
} err_row;

static const err_row err_rows[] = {
    [TL_OK] = {"TL_OK", "success", "Nothing to do."},
#define TL_ERR(name, num, msg, advice) [num] = {#name, msg, advice},
#include "timeline/errors.def"
#undef TL_ERR
};

static const err_row *
err_find(int err)
{
	if (err < 0 || err >= (int) (sizeof(err_rows) / sizeof(err_rows[0])) ||
	    err_rows[err].name == NULL) {
		return NULL;
	}
	return &err_rows[err];
}

const char *
tl_strerror(int err)
{
	static _Thread_local char buf[40];
	const err_row *r = err_find(err);

	if (r != NULL) {
		return r->msg;
	}
	snprintf(buf, sizeof(buf), "unknown error %d", err);
	return buf;
}

const char *
tl_errname(int err)
{
	const err_row *r = err_find(err);
	return r != NULL ? r->name : "TL_E?";
}

const char *
tl_erradvice(int err)
{
	const err_row *r = err_find(err);
	return r != NULL ? r->advice
	                 : "Unknown error code; upgrade the client.";
}
