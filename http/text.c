/*
 * The text helpers of an HTTP front (tlhttp.h): percent-encoding and
 * decoding of URL parts, JSON string literals, query parameters.
 */
#include <stdio.h>
#include <string.h>

#include "tlhttp.h"

void
tlh_json_str(tli_buf *b, const char *s, size_t n)
{
	size_t run = 0;

	tli_buf_append(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char) s[i];
		if (ch != '"' && ch != '\\' && ch >= 0x20) {
			continue;
		}
		tli_buf_append(b, s + run, i - run);
		run = i + 1;
		if (ch < 0x20) {
			tli_buf_printf(b, "\\u%04x", ch);
		} else {
			char e[2] = {'\\', (char) ch};
			tli_buf_append(b, e, 2);
		}
	}
	tli_buf_append(b, s + run, n - run);
	tli_buf_append(b, "\"", 1);
}

static bool
url_plain(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
	    ch == '~';
}

void
tlh_url_enc(tli_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char) s[i];
		if (url_plain(ch)) {
			tli_buf_append(b, &s[i], 1);
		} else {
			char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
			tli_buf_append(b, e, 3);
		}
	}
}

int
tlh_hexval(char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	if (c >= 'A' && c <= 'F') {
		return c - 'A' + 10;
	}
	return -1;
}

long
tlh_url_dec(char *s, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (s[i] != '%') {
			s[o++] = s[i];
			continue;
		}
		if (i + 2 >= n || (hi = tlh_hexval(s[i + 1])) < 0 ||
		    (lo = tlh_hexval(s[i + 2])) < 0) {
			return -1;
		}
		s[o++] = (char) (hi * 16 + lo);
		i += 2;
	}
	s[o] = '\0';
	return (long) o;
}

const char *
tlh_query_get(const char *query, const char *name, char *out, size_t cap)
{
	const char *q = query;
	size_t nl = strlen(name);

	while (*q != '\0') {
		const char *amp = strchr(q, '&');
		size_t len = amp ? (size_t) (amp - q) : strlen(q);
		if (len > nl && strncmp(q, name, nl) == 0 && q[nl] == '=') {
			size_t vl = len - nl - 1;
			if (vl >= cap) {
				return NULL;
			}
			memcpy(out, q + nl + 1, vl);
			out[vl] = '\0';
			return tlh_url_dec(out, vl) < 0 ? NULL : out;
		}
		if (len == nl && strncmp(q, name, nl) == 0) {
			out[0] = '\0';
			return out;
		}
		q += len + (amp ? 1 : 0);
	}
	return NULL;
}
