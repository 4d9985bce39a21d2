/*
 * The client's own TCP transport for tcp:// URLs: a non-blocking socket
 * that the connection thread reads itself (recv, and poll when nothing is
 * there) and the send thread writes itself. Through nng's stream the bytes
 * of a push were read by nng's poller thread, which then woke the
 * connection thread: a thread wake-up on the way to every delivery (and
 * reply) that this path does not have. TLS (tls+tcp://) and ipc:// stay on
 * nng's streams.
 *
 * A dial or a HELLO in progress has no published connection that a closer
 * could shut down: its waits are polls of at most TLI_SOCK_SLICE_MS, after
 * which the caller's stop() is asked whether to give up (the client
 * closing). A published connection is shut down (tli_sock_shutdown) by
 * whoever leaves it, which ends the waits on it at once, so they take no
 * stop() and sleep until the socket is ready or the timeout: an idle
 * client does not wake. The descriptor is closed only by its owner, once
 * no thread uses it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define TLI_SOCK_SLICE_MS 50

/* Wait until fd is ready for ev, the deadline passes (TL_ETIMEDOUT) or
 * stop (when given) says so (TL_ECONN). deadline: monotonic ms, INT64_MAX
 * for none. */
static int
sock_wait(int fd, short ev, int64_t deadline, tli_sock_stop_fn stop, void *arg)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = ev, .revents = 0};
		int64_t now = tli_mono_ms();
		int64_t left = deadline == INT64_MAX ? -1 : deadline - now;
		int rv;

		if (deadline != INT64_MAX && left <= 0) {
			return TL_ETIMEDOUT;
		}
		if (stop != NULL) {
			if (stop(arg)) {
				return TL_ECONN;
			}
			if (left < 0 || left > TLI_SOCK_SLICE_MS) {
				left = TLI_SOCK_SLICE_MS;
			}
		} else if (left > INT32_MAX) {
			left = INT32_MAX;
		}
		rv = poll(&p, 1, (int) left);
		if (rv > 0) {
			return TL_OK; /* ready, or an error the next call sees
			               */
		}
		if (rv < 0 && errno != EINTR) {
			return TL_ECONN;
		}
	}
}

static int64_t
sock_deadline(int timeout_ms)
{
	return timeout_ms > 0 ? tli_mono_ms() + timeout_ms : INT64_MAX;
}

/* host and port of "tcp://HOST:PORT" ("[v6]" brackets removed). */
static bool
sock_parse(const char *url, char *host, size_t hsize, char *port, size_t psize)
{
	const char *h = url + 6, *colon, *end;

	if (strncmp(url, "tcp://", 6) != 0 ||
	    (colon = strrchr(h, ':')) == NULL) {
		return false;
	}
	end = colon;
	if (*h == '[') {
		if (colon == h || colon[-1] != ']') {
			return false;
		}
		h++;
		end--;
	}
	if ((size_t) (end - h) >= hsize || strlen(colon + 1) >= psize ||
	    colon[1] == '\0') {
		return false;
	}
	snprintf(host, hsize, "%.*s", (int) (end - h), h);
	snprintf(port, psize, "%s", colon + 1);
	return true;
}

/* Connect one address within the deadline; the socket or -1 (*err). */
static int
sock_connect(const struct addrinfo *ai, int64_t deadline, tli_sock_stop_fn stop,
    void *arg, int *err)
{
	int fd, one = 1, soerr = 0;
	socklen_t len = sizeof(soerr);

	fd = socket(ai->ai_family,
	    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		*err = TL_ECONN;
		return -1;
	}
	/* requests are coalesced into frames already: no Nagle delay */
	(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno != EINPROGRESS) {
			*err = TL_ECONN;
			close(fd);
			return -1;
		}
		if ((*err = sock_wait(fd, POLLOUT, deadline, stop, arg)) !=
		    TL_OK) {
			close(fd);
			return -1;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 ||
		    soerr != 0) {
			*err = TL_ECONN;
			close(fd);
			return -1;
		}
	}
	return fd;
}

int
tli_sock_dial(
    const char *url, int timeout_ms, tli_sock_stop_fn stop, void *arg, int *out)
{
	char host[256], port[16];
	struct addrinfo hints, *res = NULL;
	int64_t deadline = sock_deadline(timeout_ms);
	int err = TL_ECONN;

	if (!sock_parse(url, host, sizeof(host), port, sizeof(port))) {
		return TL_EINVAL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if (getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res) !=
	    0) {
		return TL_ECONN;
	}
	for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
		int fd = sock_connect(ai, deadline, stop, arg, &err);
		if (fd >= 0) {
			freeaddrinfo(res);
			*out = fd;
			return TL_OK;
		}
		if (err == TL_ETIMEDOUT || (stop != NULL && stop(arg))) {
			break;
		}
	}
	freeaddrinfo(res);
	return err;
}

bool
tli_sock_url(const char *url)
{
	char host[256], port[16];

	return sock_parse(url, host, sizeof(host), port, sizeof(port));
}

int
tli_sock_send(int fd, const uint8_t *p, size_t n, int timeout_ms,
    tli_sock_stop_fn stop, void *arg)
{
	int64_t deadline = sock_deadline(timeout_ms);

	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rv;

		if (k > 0) {
			p += k;
			n -= (size_t) k;
			deadline = sock_deadline(timeout_ms); /* progress */
			continue;
		}
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
			return TL_ECONN;
		}
		if ((rv = sock_wait(fd, POLLOUT, deadline, stop, arg)) !=
		    TL_OK) {
			return rv;
		}
	}
	return TL_OK;
}

int
tli_sock_recv(int fd, uint8_t *p, size_t cap, size_t *got, int timeout_ms,
    tli_sock_stop_fn stop, void *arg)
{
	int64_t deadline = sock_deadline(timeout_ms);

	for (;;) {
		ssize_t k = recv(fd, p, cap, MSG_DONTWAIT);
		int rv;

		if (k > 0) {
			*got = (size_t) k;
			return TL_OK;
		}
		if (k == 0) {
			return TL_ECONN; /* the broker closed */
		}
		if (errno == EINTR) {
			continue;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			return TL_ECONN;
		}
		if ((rv = sock_wait(fd, POLLIN, deadline, stop, arg)) !=
		    TL_OK) {
			return rv;
		}
	}
}

void
tli_sock_shutdown(int fd)
{
	(void) shutdown(fd, SHUT_RDWR);
}
