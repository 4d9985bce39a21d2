/*
 * The tl-chronos suites' processes, callback receiver and API client (see
 * chronos_util.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "base.h"
#include "chronos_util.h"
#include "testutil.h"

/* ---- the receiver ---- */

static void
recv_handler(tlh_req *req, void *arg)
{
	ck_recv *r = arg;
	const char *path = tlh_req_path(req), *v;
	size_t len;
	const char *body = tlh_req_body(req, &len);
	ck_hit h;

	memset(&h, 0, sizeof(h));
	snprintf(h.path, sizeof(h.path), "%s", path);
	h.at = tli_wall_ms();
	h.seq = (v = tlh_req_header(req, "X-Sequence-Number")) ? atol(v) : -1;
	h.clen = (v = tlh_req_header(req, "Content-Length")) ? atol(v) : -1;
	h.ctype = tlh_req_header(req, "Content-Type") != NULL;
	snprintf(h.body, sizeof(h.body), "%.*s", (int) len, body);
	pthread_mutex_lock(&r->mtx);
	if (r->n < CK_MAX_HITS) {
		r->hits[r->n++] = h;
	}
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mtx);
	if (strncmp(path, "/slow/", 6) == 0) {
		tt_nap_ms(3000);
	}
	tlh_reply(
	    req, strncmp(path, "/fail/", 6) == 0 ? 500 : 200, NULL, "", 0, 0);
}

void
ck_recv_start(ck_recv *r)
{
	tlh_config cfg = {.listen = "127.0.0.1:0", .arg = r};
	tlh_route fb = {
	    .methods = "*", .pattern = NULL, .handler = recv_handler};

	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mtx, NULL);
	pthread_cond_init(&r->cv, NULL);
	cr_assert_eq(tlh_server_alloc(&r->srv, &cfg), TL_OK);
	cr_assert_eq(tlh_route_add(r->srv, &fb), TL_OK);
	cr_assert_eq(tlh_server_start(r->srv), TL_OK);
	snprintf(r->url, sizeof(r->url), "%s", tlh_server_url(r->srv));
}

void
ck_recv_stop(ck_recv *r)
{
	if (r->srv == NULL) {
		return;
	}
	tlh_server_free(r->srv);
	r->srv = NULL;
	pthread_mutex_destroy(&r->mtx);
	pthread_cond_destroy(&r->cv);
}

static size_t
count_locked(ck_recv *r, const char *path, ck_hit *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < r->n; i++) {
		if (strcmp(r->hits[i].path, path) == 0) {
			if (out != NULL && k < cap) {
				out[k] = r->hits[i];
			}
			k++;
		}
	}
	return k;
}

size_t
ck_hits(ck_recv *r, const char *path, ck_hit *out, size_t cap)
{
	size_t k;

	pthread_mutex_lock(&r->mtx);
	k = count_locked(r, path, out, cap);
	pthread_mutex_unlock(&r->mtx);
	return k;
}

size_t
ck_wait_hits(ck_recv *r, const char *path, size_t n, int ms)
{
	struct timespec dl;
	size_t k;

	tli_deadline(&dl, CLOCK_REALTIME, ms);
	pthread_mutex_lock(&r->mtx);
	while ((k = count_locked(r, path, NULL, 0)) < n) {
		if (pthread_cond_timedwait(&r->cv, &r->mtx, &dl) != 0) {
			k = count_locked(r, path, NULL, 0);
			break;
		}
	}
	pthread_mutex_unlock(&r->mtx);
	return k;
}

/* ---- the processes ---- */

#define ck_copy_url(field, addr) \
	snprintf(field, sizeof(field), "%.*s", (int) sizeof(field) - 1, addr)

static void
ck_describe(ck_env *e, const char *extra)
{
	char url[600];
	tt_proc *p;

	snprintf(url, sizeof(url), "ipc://%s/tl.sock", e->dir);
	if (e->standalone) {
		tt_proc_timelined(&e->tl, e->dir, "timelined");
		tt_proc_arg(&e->tl, "--data");
		tt_proc_arg(&e->tl, "%s/data", e->dir);
		tt_proc_args(&e->tl, "--listen", url, "--metrics", "off", NULL);
		tt_proc_init(&e->k, tt_bin_chronos(), e->dir, "chronos");
		tt_proc_args(&e->k, "--url", url, NULL);
		p = &e->k;
	} else {
		/* tl-chronos inside timelined writes the ready file */
		tt_proc_init(&e->tl, tt_bin_timelined(), e->dir, "timelined");
		tt_proc_arg(&e->tl, "--data");
		tt_proc_arg(&e->tl, "%s/data", e->dir);
		tt_proc_args(&e->tl, "--listen", url, "--metrics", "off", NULL);
		e->tl.conf_flag = "--chronos";
		p = &e->tl;
	}
	tt_proc_set(p, "ready_file", "%s", p->ready);
	tt_proc_set(p, "listen", "127.0.0.1:0");
	if (extra != NULL) {
		tt_proc_conf_text(p, extra);
		tt_proc_conf_text(p, "\n");
	}
}

void
ck_start(ck_env *e, const char *tag, bool standalone, const char *extra)
{
	memset(e, 0, sizeof(*e));
	e->standalone = standalone;
	e->dir = tt_mkdtemp(tag);
	ck_recv_start(&e->recv);
	cr_assert_eq(tlh_client_alloc(&e->hc, 8), TL_OK);
	ck_describe(e, extra);
	tt_proc_start(&e->tl);
	if (standalone) {
		tt_proc_start(&e->k);
		ck_copy_url(e->api, e->k.addr);
	} else {
		ck_copy_url(e->api, e->tl.addr);
	}
}

void
ck_restart_service(ck_env *e, int sig)
{
	tt_proc *p = e->standalone ? &e->k : &e->tl;

	tt_proc_restart(p, sig);
	ck_copy_url(e->api, p->addr);
}

void
ck_restart_broker(ck_env *e, int sig)
{
	tt_proc_restart(&e->tl, sig);
}

void
ck_stop(ck_env *e)
{
	tt_proc_stop(&e->k);
	tt_proc_stop(&e->tl);
	if (e->dir != NULL) {
		tt_proc_check_log(&e->tl);
		tt_proc_check_log(&e->k);
	}
	tt_proc_fini(&e->k);
	tt_proc_fini(&e->tl);
	ck_recv_stop(&e->recv);
	tlh_client_free(e->hc);
	e->hc = NULL;
	if (e->dir != NULL) {
		tt_rmtree(e->dir);
		free(e->dir);
		e->dir = NULL;
	}
}

/* ---- the API ---- */

/* The value of header name in raw "Name: value\r\n" lines into out. */
static void
header_get(const char *lines, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);

	out[0] = '\0';
	for (const char *p = lines; p != NULL && *p != '\0';) {
		const char *eol = strstr(p, "\r\n");
		size_t len = eol ? (size_t) (eol - p) : strlen(p);
		if (len > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (*v == ' ') {
				v++;
			}
			snprintf(out, cap, "%.*s", (int) (p + len - v), v);
			return;
		}
		p = eol ? eol + 2 : NULL;
	}
}

ck_resp
ck_req(ck_env *e, const char *method, const char *path, const char *body)
{
	char url[512];
	tlh_resp r;
	ck_resp out;
	tlh_fetch_opts o = {.timeout_ms = 20000};

	memset(&out, 0, sizeof(out));
	snprintf(url, sizeof(url), "%s%s", e->api, path);
	tlh_fetch(
	    e->hc, method, url, NULL, 0, body, body ? strlen(body) : 0, &o, &r);
	out.status = r.status;
	header_get(tli_buf_str(&r.headers), "Location", out.location,
	    sizeof(out.location));
	header_get(
	    tli_buf_str(&r.headers), "Reason", out.reason, sizeof(out.reason));
	out.body = strdup(tli_buf_str(&r.body));
	tlh_resp_free(&r);
	return out;
}

void
ck_resp_free(ck_resp *r)
{
	free(r->body);
	r->body = NULL;
}

void
ck_timer_json(const ck_env *e, char *out, size_t cap, double interval,
    double repeat, const char *path, const char *opaque)
{
	char rep[64] = "";

	if (repeat >= 0) {
		snprintf(rep, sizeof(rep), ",\"repeat-for\":%g", repeat);
	}
	snprintf(out, cap,
	    "{\"timing\":{\"interval\":%g%s},\"callback\":{\"http\":{"
	    "\"uri\":\"%s%s\",\"opaque\":\"%s\"}}}",
	    interval, rep, e->recv.url, path, opaque);
}

void
ck_post(ck_env *e, const char *json, char *id)
{
	ck_resp r = ck_req(e, "POST", "/timers", json);
	const char *slash;

	cr_assert_eq(r.status, 200, "POST: %ld %s", r.status, r.reason);
	slash = strrchr(r.location, '/');
	cr_assert(slash != NULL && strncmp(r.location, "/timers/", 8) == 0,
	    "Location \"%s\"", r.location);
	snprintf(id, 33, "%s", slash + 1);
	ck_resp_free(&r);
}

double
ck_metric(ck_env *e, const char *name)
{
	ck_resp r = ck_req(e, "GET", "/metrics", NULL);
	size_t nl = strlen(name);
	double v = -1;

	cr_assert_eq(r.status, 200);
	for (const char *p = r.body; p != NULL && *p != '\0';) {
		if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
			v = atof(p + nl + 1);
			break;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	ck_resp_free(&r);
	return v;
}

double
ck_metric_wait(ck_env *e, const char *name, double v, int ms)
{
	int64_t until = tli_mono_ms() + ms;
	double got;

	while ((got = ck_metric(e, name)) != v && tli_mono_ms() < until) {
		tt_nap_ms(20);
	}
	return got;
}
