/*
 * The context text of the error-code assertions (see tlcheck.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "tlcheck.h"

const char *
tt_ctx(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	/* The macros prefix a space so that an empty context is a valid
	 * format; drop it, and add "; " before a real context. */
	if (fmt[0] == ' ' && fmt[1] == '\0') {
		buf[0] = '\0';
		return buf;
	}
	snprintf(buf, cap, "; ");
	va_start(ap, fmt);
	vsnprintf(buf + 2, cap - 2, fmt + 1, ap);
	va_end(ap);
	return buf;
}
