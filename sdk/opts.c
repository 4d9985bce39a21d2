/*
 * Client options (tl_opts): the broker's address (one URL or a cluster's
 * comma-separated list), the client's name and
 * credential, the request timeout, the reconnect backoff and the log
 * callback, the TLS settings of tls+tcp:// URLs. Defaults come from the
 * environment (TIMELINE_URL, TIMELINE_TOKEN, TIMELINE_TLS_CA) when set.
 */
#include <stdlib.h>

#include "internal.h"

static int
opts_set_str(char **dst, const char *s)
{
	char *d;

	if (s == NULL) {
		return TL_EINVAL;
	}
	if ((d = tli_strndup(s, strlen(s))) == NULL) {
		return TL_ENOMEM;
	}
	tli_free(*dst);
	*dst = d;
	return TL_OK;
}

int
tli_url_next(const char **p, const char **item, size_t *n)
{
	const char *s = *p, *e;

	while (*s == ' ') {
		s++;
	}
	if (*s == '\0') {
		return 0;
	}
	e = strchr(s, ',');
	*item = s;
	*n = e != NULL ? (size_t) (e - s) : strlen(s);
	while (*n > 0 && s[*n - 1] == ' ') {
		(*n)--;
	}
	*p = e != NULL ? e + 1 : s + strlen(s);
	return 1;
}

/* One URL or a list of up to TLI_MAX_URLS, each with a known scheme and
 * no empty element ("a,,b" and a trailing comma are refused). */
static bool
opts_url_ok(const char *url)
{
	const char *p = url, *item;
	size_t n, cnt = 0;
	size_t len = strlen(url);

	if (len == 0 || url[len - 1] == ',') {
		return false;
	}
	while (tli_url_next(&p, &item, &n)) {
		if (++cnt > TLI_MAX_URLS || !tlp_url_scheme_ok(item, n)) {
			return false;
		}
	}
	return cnt > 0;
}

void
tli_opts_defaults(tl_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->timeout_ms = 10000;
	o->backoff_min_ms = 50;
	o->backoff_max_ms = 5000;
}

void
tli_opts_fini(tl_opts *o)
{
	tli_free(o->url);
	tli_free(o->name);
	tli_free(o->token);
	tli_free(o->tls_ca);
	tli_free(o->tls_server_name);
	tli_free(o->tls_cert);
	tli_free(o->tls_key);
	o->url = o->name = o->token = NULL;
	o->tls_ca = o->tls_server_name = o->tls_cert = o->tls_key = NULL;
}

/* Copy an optional string option. */
static int
opts_copy_opt(char **dst, const char *src)
{
	return src == NULL ? TL_OK : opts_set_str(dst, src);
}

int
tli_opts_copy(tl_opts *dst, const tl_opts *src)
{
	*dst = *src;
	dst->url = dst->name = dst->token = NULL;
	dst->tls_ca = dst->tls_server_name = dst->tls_cert = dst->tls_key =
	    NULL;
	if (opts_set_str(&dst->url, src->url) != TL_OK ||
	    opts_set_str(&dst->name, src->name) != TL_OK ||
	    opts_copy_opt(&dst->token, src->token) != TL_OK ||
	    opts_copy_opt(&dst->tls_ca, src->tls_ca) != TL_OK ||
	    opts_copy_opt(&dst->tls_server_name, src->tls_server_name) !=
	        TL_OK ||
	    opts_copy_opt(&dst->tls_cert, src->tls_cert) != TL_OK ||
	    opts_copy_opt(&dst->tls_key, src->tls_key) != TL_OK) {
		tli_opts_fini(dst);
		return TL_ENOMEM;
	}
	return TL_OK;
}

int
tl_opts_alloc(tl_opts **out)
{
	tl_opts *o;
	const char *env;

	if (out == NULL) {
		return TL_EINVAL;
	}
	if ((o = tli_zalloc(sizeof(*o))) == NULL) {
		return TL_ENOMEM;
	}
	tli_opts_defaults(o);
	env = getenv("TIMELINE_URL");
	if (env == NULL || *env == '\0' || !opts_url_ok(env)) {
		env = "tcp://127.0.0.1:7400";
	}
	if (opts_set_str(&o->url, env) != TL_OK ||
	    opts_set_str(&o->name, "libtimeline") != TL_OK) {
		goto fail_strings;
	}
	env = getenv("TIMELINE_TOKEN");
	if (env != NULL && *env != '\0' &&
	    opts_set_str(&o->token, env) != TL_OK) {
		goto fail_strings;
	}
	env = getenv("TIMELINE_TLS_CA");
	if (env != NULL && *env != '\0' &&
	    opts_set_str(&o->tls_ca, env) != TL_OK) {
		goto fail_strings;
	}
	*out = o;
	return TL_OK;

fail_strings:
	tli_opts_fini(o);
	tli_free(o);
	return TL_ENOMEM;
}

void
tl_opts_free(tl_opts *o)
{
	if (o != NULL) {
		tli_opts_fini(o);
		tli_free(o);
	}
}

int
tl_opts_set_url(tl_opts *o, const char *url)
{
	if (o == NULL || url == NULL || !opts_url_ok(url)) {
		return TL_EINVAL;
	}
	return opts_set_str(&o->url, url);
}

int
tl_opts_set_name(tl_opts *o, const char *name)
{
	if (o == NULL || name == NULL || *name == '\0' ||
	    strlen(name) > TL_MAX_NAME_LEN) {
		return TL_EINVAL;
	}
	return opts_set_str(&o->name, name);
}

int
tl_opts_set_token(tl_opts *o, const char *token)
{
	if (o == NULL) {
		return TL_EINVAL;
	}
	if (token == NULL || *token == '\0') {
		tli_free(o->token);
		o->token = NULL;
		return TL_OK;
	}
	if (strlen(token) > 1024) {
		return TL_ETOOLARGE;
	}
	return opts_set_str(&o->token, token);
}

int
tl_opts_set_timeout(tl_opts *o, int ms)
{
	if (o == NULL || ms <= 0) {
		return TL_EINVAL;
	}
	o->timeout_ms = ms;
	return TL_OK;
}

int
tl_opts_set_reconnect(tl_opts *o, int min_ms, int max_ms)
{
	if (o == NULL || min_ms <= 0 || max_ms < min_ms) {
		return TL_EINVAL;
	}
	o->backoff_min_ms = min_ms;
	o->backoff_max_ms = max_ms;
	return TL_OK;
}

int
tl_opts_set_log(tl_opts *o, tl_log_fn fn, void *arg)
{
	if (o == NULL) {
		return TL_EINVAL;
	}
	o->log = fn;
	o->log_arg = arg;
	return TL_OK;
}

/* Set or (NULL or "") clear an optional string option. */
static int
opts_set_or_clear(char **dst, const char *v)
{
	if (v == NULL || *v == '\0') {
		tli_free(*dst);
		*dst = NULL;
		return TL_OK;
	}
	return opts_set_str(dst, v);
}

int
tl_opts_set_tls_ca(tl_opts *o, const char *ca_file)
{
	if (o == NULL) {
		return TL_EINVAL;
	}
	return opts_set_or_clear(&o->tls_ca, ca_file);
}

int
tl_opts_set_tls_server_name(tl_opts *o, const char *name)
{
	if (o == NULL || (name != NULL && strlen(name) > 255)) {
		return TL_EINVAL;
	}
	return opts_set_or_clear(&o->tls_server_name, name);
}

int
tl_opts_set_tls_cert(tl_opts *o, const char *cert_file, const char *key_file)
{
	int rv;

	if (o == NULL || (cert_file == NULL) != (key_file == NULL)) {
		return TL_EINVAL;
	}
	if ((rv = opts_set_or_clear(&o->tls_cert, cert_file)) != TL_OK) {
		return rv;
	}
	if ((rv = opts_set_or_clear(&o->tls_key, key_file)) != TL_OK) {
		tli_free(o->tls_cert);
		o->tls_cert = NULL;
	}
	return rv;
}
