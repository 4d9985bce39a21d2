/*
 * The one growable byte buffer. The bytes are always followed by a NUL
 * (not counted in len) once anything was reserved, so text can be used as a
 * C string. A failed growth sets the sticky `oom` flag and the buffer keeps
 * what it had: callers may append many pieces and check once.
 */
#ifndef TL_BASE_BUF_H
#define TL_BASE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tli_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool oom; /* an append failed; the contents are incomplete */
} tli_buf;

#define TLI_BUF_INIT              \
	{                         \
		NULL, 0, 0, false \
	}

void tli_buf_init(tli_buf *b);
/* Frees the bytes; the buffer is empty and usable again. NULL is fine. */
void tli_buf_fini(tli_buf *b);
/* Empties the buffer (keeps its memory) and clears oom. */
void tli_buf_reset(tli_buf *b);
/* Room for n more bytes (and the NUL). TL_OK or TL_ENOMEM (oom set). */
int tli_buf_reserve(tli_buf *b, size_t n);
/* TL_OK or TL_ENOMEM (oom set, nothing appended). */
int tli_buf_append(tli_buf *b, const void *p, size_t n);
int tli_buf_puts(tli_buf *b, const char *s);
int tli_buf_printf(tli_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The text as a C string ("" when empty). */
static inline const char *
tli_buf_str(const tli_buf *b)
{
	return b->data != NULL ? (const char *) b->data : "";
}
/* Hands the bytes to the caller (free with tli_free), buffer emptied. */
uint8_t *tli_buf_take(tli_buf *b, size_t *len);

#endif
