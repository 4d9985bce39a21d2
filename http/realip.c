/*
 * The client's address behind reverse proxies (tlhttp.h): the trusted
 * proxies, a list of networks, and the walk of X-Forwarded-For from the
 * right. Each proxy appends the address it got the request from, so the
 * last entry was written by the proxy nearest to us and the ones before
 * it by proxies further away, or by the client itself (anything it likes).
 * Starting from the connection's peer, while the address at hand is a
 * trusted proxy, the entry before it names who that proxy served; the
 * first address that is not a trusted proxy is the client. An untrusted
 * peer is the client whatever it sends.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlhttp.h"

struct tlh_nets {
	size_t n;
	struct {
		int family;
		uint8_t addr[16];
		int bits;
	} v[];
};

/* One "ADDR[/BITS]" of len bytes into *e. */
static bool
net_parse(const char *p, size_t len, int *family, uint8_t addr[16], int *bits)
{
	char buf[64], *slash, *end;
	long b;

	if (len == 0 || len >= sizeof(buf)) {
		return false;
	}
	memcpy(buf, p, len);
	buf[len] = '\0';
	if ((slash = strchr(buf, '/')) != NULL) {
		*slash++ = '\0';
	}
	if (inet_pton(AF_INET, buf, addr) == 1) {
		*family = AF_INET;
		*bits = 32;
	} else if (inet_pton(AF_INET6, buf, addr) == 1) {
		*family = AF_INET6;
		*bits = 128;
	} else {
		return false;
	}
	if (slash != NULL) {
		b = strtol(slash, &end, 10);
		if (*slash == '\0' || *end != '\0' || b < 0 || b > *bits) {
			return false;
		}
		*bits = (int) b;
	}
	return true;
}

int
tlh_nets_parse(const char *s, tlh_nets **out)
{
	size_t cap = 1;
	tlh_nets *ns;

	for (const char *p = s; *p != '\0'; p++) {
		cap += *p == ',';
	}
	ns = calloc(1, sizeof(*ns) + cap * sizeof(ns->v[0]));
	if (ns == NULL) {
		return TL_ENOMEM;
	}
	while (*s != '\0') {
		size_t len = strcspn(s, ",");
		const char *p = s;
		size_t l = len;
		while (l > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			l--;
		}
		while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t')) {
			l--;
		}
		if (!net_parse(p, l, &ns->v[ns->n].family, ns->v[ns->n].addr,
		        &ns->v[ns->n].bits)) {
			free(ns);
			return TL_EINVAL;
		}
		ns->n++;
		s += len + (s[len] == ',');
	}
	*out = ns;
	return TL_OK;
}

void
tlh_nets_free(tlh_nets *ns)
{
	free(ns);
}

bool
tlh_nets_has(const tlh_nets *ns, const char *ip)
{
	uint8_t a[16];
	int family;

	if (ns == NULL) {
		return false;
	}
	if (inet_pton(AF_INET, ip, a) == 1) {
		family = AF_INET;
	} else if (inet_pton(AF_INET6, ip, a) == 1) {
		family = AF_INET6;
	} else {
		return false;
	}
	for (size_t i = 0; i < ns->n; i++) {
		int bits = ns->v[i].bits, whole = bits / 8;
		if (ns->v[i].family != family ||
		    memcmp(ns->v[i].addr, a, (size_t) whole) != 0) {
			continue;
		}
		if (bits % 8 == 0 ||
		    ((ns->v[i].addr[whole] ^ a[whole]) &
		        (uint8_t) (0xff << (8 - bits % 8))) == 0) {
			return true;
		}
	}
	return false;
}

void
tlh_client_addr(const tlh_nets *ns, const char *peer, const char *xff,
    char *out, size_t cap)
{
	size_t end = xff != NULL ? strlen(xff) : 0;

	snprintf(out, cap, "%s", peer);
	while (end > 0 && tlh_nets_has(ns, out)) {
		size_t start = end, len;
		const char *p;
		while (start > 0 && xff[start - 1] != ',') {
			start--;
		}
		p = xff + start;
		len = end - start;
		end = start > 0 ? start - 1 : 0;
		while (len > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
			len--;
		}
		if (len == 0 || len >= cap) {
			continue; /* an empty or absurd entry: skipped */
		}
		memcpy(out, p, len);
		out[len] = '\0';
	}
}
