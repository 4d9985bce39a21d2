/*
 * The byte buffer (buf.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "base.h"
#include "buf.h"

void
tli_buf_init(tli_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void
tli_buf_fini(tli_buf *b)
{
	if (b == NULL) {
		return;
	}
	tli_free(b->data);
	memset(b, 0, sizeof(*b));
}

void
tli_buf_reset(tli_buf *b)
{
	b->len = 0;
	b->oom = false;
	if (b->data != NULL) {
		b->data[0] = '\0';
	}
}

int
tli_buf_reserve(tli_buf *b, size_t n)
{
	size_t cap;
	uint8_t *d;

	TLI_ASSERT(b->len <= b->cap);
	if (b->cap - b->len > n) {
		return TL_OK;
	}
	if (n > SIZE_MAX / 2 - b->len) {
		b->oom = true;
		return TL_ENOMEM;
	}
	cap = b->cap == 0 ? 256 : b->cap;
	while (cap - b->len <= n) {
		cap *= 2;
	}
	if ((d = tli_realloc(b->data, cap)) == NULL) {
		b->oom = true;
		return TL_ENOMEM;
	}
	b->data = d;
	b->cap = cap;
	return TL_OK;
}

int
tli_buf_append(tli_buf *b, const void *p, size_t n)
{
	if (tli_buf_reserve(b, n) != TL_OK) {
		return TL_ENOMEM;
	}
	if (n > 0) {
		memcpy(b->data + b->len, p, n);
	}
	b->len += n;
	b->data[b->len] = '\0';
	return TL_OK;
}

int
tli_buf_puts(tli_buf *b, const char *s)
{
	return tli_buf_append(b, s, strlen(s));
}

int
tli_buf_printf(tli_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		return TL_EINVAL;
	}
	if (tli_buf_reserve(b, (size_t) n) != TL_OK) {
		return TL_ENOMEM;
	}
	va_start(ap, fmt);
	vsnprintf((char *) b->data + b->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t) n;
	return TL_OK;
}

uint8_t *
tli_buf_take(tli_buf *b, size_t *len)
{
	uint8_t *d = b->data;

	if (len != NULL) {
		*len = b->len;
	}
	memset(b, 0, sizeof(*b));
	return d;
}
