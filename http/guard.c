/*
 * The framing guard (guard.h): the request-framing parser, and the relay
 * threads. Each thread has its own epoll set; the listening socket is in
 * every set (EPOLLEXCLUSIVE), and a connection stays on the thread that
 * accepted it, so a connection is only ever touched by one thread. A
 * connection's two sockets are edge-triggered: after every event the
 * connection moves what it can (pump) until nothing moves, so whatever it
 * waits for is a socket that said EAGAIN, whose next edge brings it back
 * (a side is read only while the buffer it reads into is empty, written
 * only while the buffer it drains holds bytes; EPOLLOUT is asked for only
 * while bytes wait). A closing connection
 * lingers: its end is sent, and what the client still sends is read and
 * dropped for up to LINGER_MS, so that the client reads the answer
 * instead of a reset.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base.h"
#include "guard.h"

#define LINE_MAX_BYTES 4096   /* framing lines the guard reads */
#define BUF_CAP (16u * 1024u) /* each way, per connection */
#define LINGER_MS 2000
#define EVENTS 64

/* ---- the parser ---- */

void
tlh_framing_init(tlh_framing *f, uint64_t chunk_max)
{
	memset(f, 0, sizeof(*f));
	f->st = TLH_F_LINE;
	f->chunk_max = chunk_max;
}

/* Takes bytes of the current line up to its '\n'; true when the line
 * ended (*used counts the '\n'). The first TLH_F_KEEP - 1 bytes are kept,
 * NUL-terminated and without the line end. */
static bool
line_take(tlh_framing *f, const char *p, size_t n, size_t *used)
{
	const char *nl = memchr(p, '\n', n);
	size_t len = nl != NULL ? (size_t) (nl - p) : n;
	size_t room = TLH_F_KEEP - 1 > f->llen ? TLH_F_KEEP - 1 - f->llen : 0;
	size_t kept;

	memcpy(f->line + (f->llen < TLH_F_KEEP ? f->llen : TLH_F_KEEP - 1), p,
	    len < room ? len : room);
	f->llen += len;
	*used = nl != NULL ? len + 1 : len;
	if (nl == NULL) {
		return false;
	}
	kept = f->llen < TLH_F_KEEP - 1 ? f->llen : TLH_F_KEEP - 1;
	if (kept > 0 && f->line[kept - 1] == '\r' && f->llen == kept) {
		kept--;
	}
	f->line[kept] = '\0';
	return true;
}

static const char *
ows_skip(const char *s)
{
	while (*s == ' ' || *s == '\t') {
		s++;
	}
	return s;
}

/* A Content-Length value: digits between optional whitespace. */
static bool
cl_parse(const char *v, uint64_t *out)
{
	uint64_t x = 0;
	const char *s = ows_skip(v);

	if (*s < '0' || *s > '9') {
		return false;
	}
	for (; *s >= '0' && *s <= '9'; s++) {
		if (x > (UINT64_MAX - 9) / 10) {
			return false;
		}
		x = x * 10 + (uint64_t) (*s - '0');
	}
	if (*ows_skip(s) != '\0') {
		return false;
	}
	*out = x;
	return true;
}

/* Whether the last coding of a Transfer-Encoding list is chunked. */
static bool
te_last_chunked(const char *v)
{
	const char *last = strrchr(v, ',');
	const char *s = ows_skip(last != NULL ? last + 1 : v);
	size_t n = strcspn(s, " \t;");

	return n == 7 && strncasecmp(s, "chunked", 7) == 0 &&
	    (s[n] == '\0' || *ows_skip(s + n) == ';' ||
	        *ows_skip(s + n) == '\0');
}

static int
head_line(tlh_framing *f)
{
	const char *colon;
	size_t nlen;
	bool cl, te;

	if (f->line[0] == ' ' || f->line[0] == '\t') {
		/* obsolete folding: continues the previous field */
		return f->last_framing ? 400 : 0;
	}
	if ((colon = strchr(f->line, ':')) == NULL) {
		f->last_framing = false;
		return 0; /* the server answers what it cannot read */
	}
	nlen = (size_t) (colon - f->line);
	cl = nlen == 14 && strncasecmp(f->line, "Content-Length", 14) == 0;
	te = nlen == 17 && strncasecmp(f->line, "Transfer-Encoding", 17) == 0;
	f->last_framing = cl || te;
	if (!cl && !te) {
		return 0;
	}
	if (f->llen >= TLH_F_KEEP - 1) {
		return 400; /* a framing value too long to read */
	}
	if (cl) {
		uint64_t v;
		if (!cl_parse(colon + 1, &v) || (f->have_cl && v != f->cl)) {
			return 400;
		}
		f->have_cl = true;
		f->cl = v;
	} else {
		f->te = true;
		f->te_chunked = te_last_chunked(colon + 1);
	}
	return 0;
}

static int
head_end(tlh_framing *f)
{
	if (f->te) {
		if (f->have_cl || !f->te_chunked) {
			return 400;
		}
		f->st = TLH_F_SIZE;
	} else if (f->have_cl && f->cl > 0) {
		f->left = f->cl;
		f->st = TLH_F_BODY;
	} else {
		f->st = TLH_F_LINE;
	}
	return 0;
}

static int
size_line(tlh_framing *f)
{
	const char *s = f->line;
	uint64_t v = 0;
	int digits = 0, d;

	if (tlh_hexval(*s) < 0) {
		return 400;
	}
	for (; (d = tlh_hexval(*s)) >= 0; s++) {
		if (v != 0 || d != 0) {
			digits++;
		}
		if (digits > 16) {
			return 400;
		}
		v = v << 4 | (uint64_t) d;
	}
	if (*s == '\0' && f->llen >= TLH_F_KEEP - 1) {
		return 400; /* digits past what was kept */
	}
	s = ows_skip(s);
	if (*s != '\0' && *s != ';') {
		return 400;
	}
	if (v >= (uint64_t) 1 << 63) {
		return 400;
	}
	if (v > f->chunk_max) {
		return 413;
	}
	if (v == 0) {
		f->st = TLH_F_TRAILER;
	} else {
		f->left = v;
		f->st = TLH_F_DATA;
	}
	return 0;
}

/* One completed line in a line state. */
static int
line_done(tlh_framing *f)
{
	switch (f->st) {
	case TLH_F_LINE:
		if (f->line[0] != '\0') {
			f->have_cl = f->te = f->te_chunked = false;
			f->last_framing = false;
			f->cl = 0;
			f->st = TLH_F_HEAD;
		}
		return 0;
	case TLH_F_HEAD:
		return f->line[0] == '\0' ? head_end(f) : head_line(f);
	case TLH_F_SIZE:
		return size_line(f);
	case TLH_F_DATA_END:
		if (f->line[0] != '\0' || f->llen > 1) {
			return 400;
		}
		f->st = TLH_F_SIZE;
		return 0;
	case TLH_F_TRAILER:
		if (f->line[0] == '\0') {
			f->st = TLH_F_LINE;
		}
		return 0;
	default:
		return 400;
	}
}

int
tlh_framing_feed(tlh_framing *f, const char *p, size_t n)
{
	int rv = 0;

	if (f->left == UINT64_MAX) {
		return 400; /* refused before */
	}
	while (n > 0 && rv == 0) {
		size_t used;

		if (f->st == TLH_F_BODY || f->st == TLH_F_DATA) {
			used = n < f->left ? n : (size_t) f->left;
			f->left -= used;
			p += used;
			n -= used;
			if (f->left == 0) {
				f->st = f->st == TLH_F_BODY ? TLH_F_LINE
				                            : TLH_F_DATA_END;
				f->llen = 0;
			}
			continue;
		}
		if (!line_take(f, p, n, &used)) {
			/* a line still coming: the guard's own lines have a
			 * bound (the server bounds the header section) */
			if ((f->st == TLH_F_SIZE && f->llen > LINE_MAX_BYTES) ||
			    (f->st == TLH_F_DATA_END && f->llen > 1)) {
				rv = 400;
			}
			break;
		}
		p += used;
		n -= used;
		rv = line_done(f);
		f->llen = 0;
	}
	if (rv != 0) {
		f->left = UINT64_MAX;
	}
	return rv;
}

/* ---- the relay ---- */

typedef struct gconn gconn;
typedef struct gthr gthr;

/* What an epoll event is about. */
typedef struct gend {
	gconn *c; /* NULL: the listening socket or the wake-up */
	bool inner;
	bool out; /* EPOLLOUT is asked for */
} gend;

struct gconn {
	gthr *t;
	gconn *prev, *next;
	int cfd, ifd; /* the client; the guard's end of the pair (-1: closed) */
	gend ec, ei;
	tlh_framing f;
	char in[BUF_CAP]; /* client to server */
	size_t in_off, in_len;
	char out[BUF_CAP]; /* server to client */
	size_t out_off, out_len;
	bool c_rd, i_rd;   /* may have bytes to read (since their last edge) */
	bool c_hup, i_hup; /* the peer's end was told (read to the end) */
	bool dead;         /* to be freed after this round of events */
	gconn *dead_next;
	bool c_eof;     /* the client's end came */
	bool i_shut;    /* the server was sent our end */
	bool i_eof;     /* the server's end came (or it was cut off) */
	bool c_shut;    /* the client was sent our end: lingering */
	int64_t linger; /* close by then (ms, monotonic) */
};

struct gthr {
	tlh_guard *g;
	pthread_t tid;
	int ep, wake;
	gend elisten, ewake;
	gconn *conns;        /* every connection of this thread */
	gconn *dead;         /* freed after the round of events */
	int64_t linger_scan; /* the next look for lingering ones to close */
	int lingering;
};

struct tlh_guard {
	tlh_guard_cfg cfg;
	gthr *thr;
	unsigned nthr;
	pthread_mutex_t mtx;
	bool closed; /* accepting no more */
};

#define EV_IN (EPOLLIN | EPOLLRDHUP | EPOLLET)

/* Asks for EPOLLOUT on a socket only while bytes wait for it (each
 * write space edge would wake the thread otherwise). */
static void
want_out(gthr *t, int fd, gend *e, bool want)
{
	struct epoll_event ev = {
	    .events = EV_IN | (want ? EPOLLOUT : 0), .data.ptr = e};

	if (fd >= 0 && want != e->out) {
		epoll_ctl(t->ep, EPOLL_CTL_MOD, fd, &ev);
		e->out = want;
	}
}

static void
conn_free(gconn *c)
{
	gthr *t = c->t;

	if (c->prev != NULL) {
		c->prev->next = c->next;
	} else {
		t->conns = c->next;
	}
	if (c->next != NULL) {
		c->next->prev = c->prev;
	}
	if (c->c_shut) {
		t->lingering--;
	}
	close(c->cfd); /* leaves the epoll set */
	if (c->ifd >= 0) {
		close(c->ifd);
	}
	tli_free(c);
}

static void
inner_close(gconn *c)
{
	if (c->ifd >= 0) {
		close(c->ifd);
		c->ifd = -1;
	}
	c->i_eof = c->i_shut = true;
	c->in_off = c->in_len = 0;
}

/* The refusal, after what the server has answered; then the end. */
static void
refuse(gconn *c, int status)
{
	tlh_guard *g = c->t->g;
	tlh_error e = status == 413 ? TLH_E_TOO_LARGE : TLH_E_BAD_REQUEST;
	tli_buf body = TLI_BUF_INIT, msg = TLI_BUF_INIT;

	inner_close(c);
	if (g->cfg.body != NULL) {
		g->cfg.body(g->cfg.arg, e, &body);
	} else {
		tli_buf_puts(&body,
		    status == 413 ? "{\"error\":\"Request too large\"}"
		                  : "{\"error\":\"Bad request framing\"}");
	}
	tli_buf_printf(&msg, "HTTP/1.1 %d %s\r\n", status,
	    status == 413 ? "Content Too Large" : "Bad Request");
	for (const char *const *h = g->cfg.headers; h != NULL && h[0] != NULL;
	     h += 2) {
		tli_buf_printf(&msg, "%s: %s\r\n", h[0], h[1]);
	}
	tli_buf_printf(&msg,
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n"
	    "Connection: close\r\n\r\n",
	    body.len);
	tli_buf_append(&msg, body.data, body.len);
	if (c->out_off > 0) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (!msg.oom && !body.oom && msg.len <= BUF_CAP - c->out_len) {
		memcpy(c->out + c->out_len, msg.data, msg.len);
		c->out_len += msg.len;
	}
	tli_buf_fini(&body);
	tli_buf_fini(&msg);
}

static bool
again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* Sends what buf holds from *off to *len: 1 when some went (an emptied
 * buffer starts again at 0), 0 when none could (EAGAIN), -1 when the peer
 * is gone. */
static int
send_some(int fd, const char *buf, size_t *off, size_t *len)
{
	ssize_t n = send(fd, buf + *off, *len - *off, MSG_NOSIGNAL);

	if (n < 0) {
		return again() ? 0 : -1;
	}
	*off += (size_t) n;
	if (*off == *len) {
		*off = *len = 0;
	}
	return n > 0;
}

/* Moves what can be moved; false when the connection is over. */
static bool
pump(gconn *c)
{
	bool moved = true;

	while (moved) {
		ssize_t n;

		moved = false;
		/* client to server */
		if (c->in_len > c->in_off && c->ifd >= 0) {
			int rv =
			    send_some(c->ifd, c->in, &c->in_off, &c->in_len);
			moved = rv > 0;
			if (rv < 0) {
				/* The server takes no more: it answered early
				 * (a 413 at the headers) and closed, or it is
				 * gone. What the client still sends is
				 * dropped; an answer it wrote may still wait
				 * in the socket and is read below (closing the
				 * socket here lost it: the client got no
				 * answer at all). */
				c->i_shut = true;
				c->in_off = c->in_len = 0;
			}
		}
		if (c->in_len == 0 && !c->c_eof && c->c_rd) {
			n = recv(c->cfd, c->in, BUF_CAP, 0);
			/* a short read drained it: the next bytes bring an
			 * edge, but the end, once told, does not */
			c->c_rd = n == (ssize_t) BUF_CAP || (c->c_hup && n > 0);
			if (n > 0) {
				int st = c->c_shut ? 0
				                   : tlh_framing_feed(&c->f,
				                         c->in, (size_t) n);
				c->in_len = c->i_shut ? 0 : (size_t) n;
				if (st != 0) {
					refuse(c, st);
				}
				moved = true;
			} else if (n == 0) {
				c->c_eof = true;
				moved = true;
			} else if (!again()) {
				return false; /* reset */
			}
		}
		if (c->c_eof && c->in_len == 0 && !c->i_shut) {
			shutdown(c->ifd, SHUT_WR);
			c->i_shut = true;
		}
		/* server to client */
		if (c->out_len == 0 && !c->i_eof && c->i_rd) {
			n = recv(c->ifd, c->out, BUF_CAP, 0);
			c->i_rd = n == (ssize_t) BUF_CAP || (c->i_hup && n > 0);
			if (n > 0) {
				c->out_len = (size_t) n;
				moved = true;
			} else if (n == 0 || !again()) {
				inner_close(c); /* what it has not read: gone */
				moved = true;
			}
		}
		if (c->out_len > c->out_off && !c->c_shut) {
			int rv =
			    send_some(c->cfd, c->out, &c->out_off, &c->out_len);
			if (rv < 0) {
				return false;
			}
			moved = moved || rv > 0;
		}
		if (c->i_eof && c->out_len == 0 && !c->c_shut) {
			/* the server's end: ours to the client, then linger
			 * (reading what it still sends, dropped) */
			shutdown(c->cfd, SHUT_WR);
			c->c_shut = true;
			c->linger = tli_mono_ms() + LINGER_MS;
			c->t->lingering++;
			inner_close(c);
		}
		if (c->c_shut) {
			c->in_len = c->in_off = 0; /* dropped */
		}
	}
	/* nothing moves: bytes still waiting met EAGAIN */
	want_out(c->t, c->ifd, &c->ei, c->ifd >= 0 && c->in_len > c->in_off);
	want_out(c->t, c->cfd, &c->ec, !c->c_shut && c->out_len > c->out_off);
	return !(c->c_shut && c->c_eof);
}

static void
conn_add(gthr *t, int cfd, const struct sockaddr *sa, socklen_t len)
{
	tlh_guard *g = t->g;
	gconn *c;
	int sp[2], one = 1;
	bool handed;
	struct epoll_event ev = {.events = EV_IN};

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
	        sp) != 0) {
		close(cfd);
		return;
	}
	if ((c = tli_zalloc(sizeof(*c))) == NULL) {
		close(cfd);
		close(sp[0]);
		close(sp[1]);
		return;
	}
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pthread_mutex_lock(&g->mtx);
	handed = !g->closed && g->cfg.hand(g->cfg.arg, sp[1], sa, len);
	if (g->closed) {
		close(sp[1]);
	}
	pthread_mutex_unlock(&g->mtx);
	if (!handed) {
		close(cfd);
		close(sp[0]);
		tli_free(c);
		return;
	}
	c->t = t;
	c->cfd = cfd;
	c->c_rd = c->i_rd = true;
	c->ifd = sp[0];
	c->ec = (gend){c, false, false};
	c->ei = (gend){c, true, false};
	tlh_framing_init(&c->f, g->cfg.chunk_max);
	ev.data.ptr = &c->ec;
	epoll_ctl(t->ep, EPOLL_CTL_ADD, cfd, &ev);
	ev.data.ptr = &c->ei;
	epoll_ctl(t->ep, EPOLL_CTL_ADD, c->ifd, &ev);
	c->next = t->conns;
	if (t->conns != NULL) {
		t->conns->prev = c;
	}
	t->conns = c;
	if (!pump(c)) {
		conn_free(c);
	}
}

static void
accept_all(gthr *t)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(t->g->cfg.lfd, (struct sockaddr *) &ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			return; /* EAGAIN, or out of descriptors: later */
		}
		conn_add(t, fd, (struct sockaddr *) &ss, len);
	}
}

static void
linger_expire(gthr *t)
{
	int64_t now = tli_mono_ms();
	gconn *c = t->conns, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		if (c->c_shut && now >= c->linger) {
			conn_free(c);
		}
	}
}

static void *
thr_main(void *arg)
{
	gthr *t = arg;
	struct epoll_event ev[EVENTS];

	for (;;) {
		int n =
		    epoll_wait(t->ep, ev, EVENTS, t->lingering > 0 ? 250 : -1);

		for (int i = 0; i < n; i++) {
			gend *e = ev[i].data.ptr;

			if (e == &t->ewake) {
				return NULL;
			}
			if (e == &t->elisten) {
				accept_all(t);
				continue;
			}
			if (e->c->dead) {
				continue; /* to be freed after this round */
			}
			if ((ev[i].events & ~(uint32_t) EPOLLOUT) != 0) {
				*(e->inner ? &e->c->i_rd : &e->c->c_rd) = true;
			}
			if ((ev[i].events &
			        (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
				*(e->inner ? &e->c->i_hup : &e->c->c_hup) =
				    true;
			}
			/* a client that can take nothing more, or done */
			if ((!e->inner &&
			        (ev[i].events & (EPOLLHUP | EPOLLERR)) != 0) ||
			    !pump(e->c)) {
				/* other events of this round may name it */
				e->c->dead = true;
				e->c->dead_next = t->dead;
				t->dead = e->c;
			}
		}
		while (t->dead != NULL) {
			gconn *c = t->dead;
			t->dead = c->dead_next;
			conn_free(c);
		}
		if (t->lingering > 0 && tli_mono_ms() >= t->linger_scan) {
			linger_expire(
			    t); /* a scan of all at most 4 times a second */
			t->linger_scan = tli_mono_ms() + 250;
		}
	}
}

static void
thr_fini(gthr *t)
{
	while (t->conns != NULL) {
		conn_free(t->conns);
	}
	if (t->ep >= 0) {
		close(t->ep);
	}
	if (t->wake >= 0) {
		close(t->wake);
	}
}

int
tlh_guard_start(tlh_guard **out, const tlh_guard_cfg *cfg)
{
	tlh_guard *g = tli_zalloc(sizeof(*g));
	unsigned i;

	if (g == NULL ||
	    (g->thr = tli_zalloc(
	         (cfg->threads ? cfg->threads : 1) * sizeof(gthr))) == NULL) {
		tli_free(g);
		close(cfg->lfd);
		return TL_ENOMEM;
	}
	g->cfg = *cfg;
	g->nthr = cfg->threads ? cfg->threads : 1;
	pthread_mutex_init(&g->mtx, NULL);
	for (i = 0; i < g->nthr; i++) {
		gthr *t = &g->thr[i];
		struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE};

		t->g = g;
		t->ep = epoll_create1(EPOLL_CLOEXEC);
		t->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		t->elisten = (gend){NULL, false, false};
		t->ewake = (gend){NULL, false, false};
		if (t->ep < 0 || t->wake < 0) {
			break;
		}
		ev.data.ptr = &t->elisten;
		epoll_ctl(t->ep, EPOLL_CTL_ADD, cfg->lfd, &ev);
		ev.events = EPOLLIN;
		ev.data.ptr = &t->ewake;
		epoll_ctl(t->ep, EPOLL_CTL_ADD, t->wake, &ev);
		if (pthread_create(&t->tid, NULL, thr_main, t) != 0) {
			break;
		}
	}
	if (i < g->nthr) {
		g->nthr = i + 1; /* thr[i] is set up, without a thread */
		g->thr[i].tid = 0;
		tlh_guard_free(g);
		return TL_ENOMEM;
	}
	*out = g;
	return TL_OK;
}

void
tlh_guard_close(tlh_guard *g)
{
	if (g == NULL) {
		return;
	}
	pthread_mutex_lock(&g->mtx);
	g->closed = true;
	pthread_mutex_unlock(&g->mtx);
	for (unsigned i = 0; i < g->nthr; i++) {
		if (g->thr[i].ep >= 0) {
			epoll_ctl(
			    g->thr[i].ep, EPOLL_CTL_DEL, g->cfg.lfd, NULL);
		}
	}
}

void
tlh_guard_free(tlh_guard *g)
{
	if (g == NULL) {
		return;
	}
	tlh_guard_close(g);
	for (unsigned i = 0; i < g->nthr; i++) {
		gthr *t = &g->thr[i];
		uint64_t one = 1;

		if (t->tid != 0) {
			(void) !write(t->wake, &one, sizeof(one));
			pthread_join(t->tid, NULL);
		}
		thr_fini(t);
	}
	close(g->cfg.lfd);
	pthread_mutex_destroy(&g->mtx);
	tli_free(g->thr);
	tli_free(g);
}
