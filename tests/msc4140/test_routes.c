/*
 * The route table of the HTTP module (http/tlhttp.h) against a real
 * server on 127.0.0.1:0, through libcurl: a known path asked with another
 * method answers 405 with Allow, an unknown path goes to the fallback, a
 * body over the route's limit answers 413, a captured parameter arrives
 * decoded, and the authentication hook guards a route. Self-contained: it
 * needs only tlhttp and libcurl.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "tlhttp.h"

typedef struct reply {
	long status;
	char body[512];
	size_t len;
	char allow[128];
} reply;

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	reply *r = arg;
	size_t k = size * n;

	if (r->len + k < sizeof(r->body)) {
		memcpy(r->body + r->len, p, k);
		r->len += k;
		r->body[r->len] = '\0';
	}
	return k;
}

static size_t
on_header(char *p, size_t size, size_t n, void *arg)
{
	reply *r = arg;
	size_t k = size * n;

	if (k > 6 && strncasecmp(p, "Allow:", 6) == 0) {
		snprintf(r->allow, sizeof(r->allow), "%.*s", (int) (k - 9),
		    p + 7); /* "Allow: " ... "\r\n" */
	}
	return k;
}

/* One request; hdr: one more header line, or NULL. */
static reply
req_h(const tlh_server *s, const char *method, const char *path,
    const char *body, const char *hdr)
{
	reply r = {0};
	char url[512];
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");

	if (hdr != NULL) {
		h = curl_slist_append(h, hdr);
	}
	cr_assert(c != NULL);
	snprintf(url, sizeof(url), "%s%s", tlh_server_url(s), path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	if (body != NULL) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	}
	cr_assert_eq(curl_easy_perform(c), CURLE_OK, "%s %s", method, path);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return r;
}

static reply
req(const tlh_server *s, const char *method, const char *path, const char *body)
{
	return req_h(s, method, path, body, NULL);
}

/* ---- a small adapter ---- */

static void
text(tlh_req *q, int status, const char *s)
{
	tlh_reply(q, status, "text/plain", s, strlen(s), 0);
}

static void
on_get(tlh_req *q, void *arg)
{
	size_t n;
	const char *id = tlh_req_param(q, "id", &n);

	(void) arg;
	tlh_reply(q, 200, "text/plain", id, n, 0);
}

static void
on_put(tlh_req *q, void *arg)
{
	size_t n;
	const char *b = tlh_req_body(q, &n);

	(void) arg;
	if (tlh_req_body_over(q)) {
		text(q, 413, "over");
		return;
	}
	tlh_reply(q, 201, "text/plain", b, n, 0);
}

static void
on_fallback(tlh_req *q, void *arg)
{
	char s[300];

	(void) arg;
	snprintf(
	    s, sizeof(s), "fallback %s %s", tlh_req_method(q), tlh_req_path(q));
	text(q, 404, s);
}

static bool
on_auth(tlh_req *q, bool optional, void *arg)
{
	const char *t = tlh_req_header(q, "Authorization");

	(void) arg;
	if (optional || (t != NULL && strcmp(t, "Bearer good") == 0)) {
		return true;
	}
	text(q, 401, "who are you");
	return false;
}

static const tlh_route routes[] = {
    {"GET", "/timers/{id}", 0, 0, NULL, NULL, NULL, on_get, NULL},
    {"PUT|POST", "/timers/{id}", 16, 0, NULL, NULL, NULL, on_put, NULL},
    {"DELETE", "/timers/{id}/secret", 0, TLH_AUTH, NULL, NULL, NULL, on_get,
        NULL},
    {"*", NULL, 0, 0, NULL, NULL, NULL, on_fallback, NULL},
};

static tlh_server *
serve(void)
{
	tlh_config cfg = {.listen = "127.0.0.1:0", .auth = on_auth};
	tlh_server *s;

	cr_assert_eq(tlh_server_alloc(&s, &cfg), TL_OK);
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		cr_assert_eq(
		    tlh_route_add(s, &routes[i]), TL_OK, "route %zu", i);
	}
	cr_assert_eq(tlh_server_start(s), TL_OK);
	return s;
}

Test(routes, wrong_method_is_405_with_allow)
{
	tlh_server *s = serve();
	reply r = req(s, "DELETE", "/timers/t1", NULL);

	cr_assert_eq(r.status, 405, "%ld %s", r.status, r.body);
	cr_assert_str_eq(r.allow, "GET, POST, PUT");
	cr_assert(strstr(r.body, "\"error\"") != NULL, "%s", r.body);
	tlh_server_free(s);
}

Test(routes, unknown_path_goes_to_the_fallback)
{
	tlh_server *s = serve();
	reply r = req(s, "GET", "/nowhere/t1?x=1", NULL);

	cr_assert_eq(r.status, 404);
	cr_assert_str_eq(r.body, "fallback GET /nowhere/t1");
	/* a deeper or shallower path is another resource */
	r = req(s, "DELETE", "/timers", NULL);
	cr_assert_str_eq(r.body, "fallback DELETE /timers");
	tlh_server_free(s);
}

Test(routes, body_over_the_route_limit_is_413)
{
	tlh_server *s = serve();
	reply r = req(s, "PUT", "/timers/t1", "0123456789abcdef");

	cr_assert_eq(r.status, 201, "%ld %s", r.status, r.body);
	cr_assert_str_eq(r.body, "0123456789abcdef");
	/* announced by Content-Length: refused before the body is read */
	r = req(s, "PUT", "/timers/t1", "0123456789abcdefX");
	cr_assert_eq(r.status, 413, "%ld %s", r.status, r.body);
	cr_assert(strstr(r.body, "\"error\"") != NULL, "%s", r.body);
	/* streamed: dropped, and the handler is told */
	r = req_h(s, "POST", "/timers/t1", "0123456789abcdefX",
	    "Transfer-Encoding: chunked");
	cr_assert_eq(r.status, 413, "%ld %s", r.status, r.body);
	cr_assert_str_eq(r.body, "over");
	tlh_server_free(s);
}

Test(routes, captured_parameter_is_decoded)
{
	tlh_server *s = serve();
	reply r = req(s, "GET", "/timers/a%2Fb%20c", NULL);

	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "a/b c");
	/* a bad escape matches no route */
	r = req(s, "GET", "/timers/a%ZZ", NULL);
	cr_assert_str_eq(r.body, "fallback GET /timers/a%ZZ");
	tlh_server_free(s);
}

Test(routes, authentication_hook_guards_a_route)
{
	tlh_server *s = serve();
	reply r = req(s, "DELETE", "/timers/t1/secret", NULL);

	cr_assert_eq(r.status, 401, "%ld %s", r.status, r.body);
	r = req_h(s, "DELETE", "/timers/t1/secret", NULL,
	    "Authorization: Bearer good");
	cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
	cr_assert_str_eq(r.body, "t1");
	tlh_server_free(s);
}
