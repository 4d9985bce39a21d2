/*
 * driver.h: how tl-bench talks to a system under test. Every system
 * (Timeline, beanstalkd, Redis, ...) is one tlb_driver in one file
 * (drv_<name>.c), listed once in drivers.c. A driver starts its server on
 * a directory of its own and a loopback port, kills and restarts it,
 * opens connections, puts batches of messages with due times (pipelined,
 * returning when every one is acknowledged as the mode promises) and runs
 * a consume loop that leases due messages, optionally extends each lease
 * and deletes it. The workloads in tl_bench.c only see this interface,
 * so every system is measured by the same code.
 *
 * Also here: the helpers drivers share (tlb_sys.c): child processes,
 * loopback ports, a buffered TCP connection for pipelined text protocols,
 * the server's resident memory and bytes on disk, and the message body,
 * which carries its sequence number and due time so that every system's
 * deliveries are checked the same way.
 */
#ifndef TLB_DRIVER_H
#define TLB_DRIVER_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench_util.h" /* clocks and sleeps */

#define TLB_MAX_MODES 2
#define TLB_BODY_MIN 42 /* "<seq> <due>\n" at most */
/* How long a reply may take: a server replaying a large log at restart
 * accepts connections long before it answers them. */
#define TLB_SOCK_TIMEOUT_MS 600000

typedef struct tlb_server tlb_server; /* a driver's running server */
typedef struct tlb_proc_kind tlb_proc_kind;
typedef struct tlb_conn tlb_conn; /* a driver's connection */

typedef struct tlb_server_conf {
	const char *dir;           /* the server's own directory (exists) */
	int mode;                  /* index into the driver's modes */
	int64_t lease_ms;          /* default lease (beanstalkd: the TTR) */
	const char *timelined;     /* path of the broker binary (Timeline) */
	bool ipc;                  /* Timeline: clients over ipc, not TCP */
	const char *tl_durability; /* Timeline: --durability (always) */
} tlb_server_conf;

/* One message to put: its number in the run and its due time (UTC ms). */
typedef struct tlb_item {
	uint64_t seq;
	int64_t due_ms;
} tlb_item;

/* Called once per message acknowledged by the server (any thread). */
typedef void (*tlb_ack_fn)(void *arg, uint64_t seq);

/* What a consume loop does and whom it tells. on_msg is called when a
 * message arrives (before its lease is extended or it is deleted),
 * on_done when its delete was acknowledged (err 0) or failed. */
typedef struct tlb_consume {
	int64_t lease_ms; /* the lease (TTR) taken on each message */
	bool extend;      /* extend each lease once before deleting */
	uint32_t credit;  /* messages held at once, where the system can */
	int index;        /* this consumer's number: stable across restarts */
	bool handoff;     /* Timeline: on_message on the consumer's own thread
	                   * (else inline, on the connection thread) */
	atomic_bool *stop;
	void (*on_msg)(void *arg, uint64_t seq, int64_t due_ms);
	void (*on_done)(void *arg, uint64_t seq, int err);
	void *arg;
} tlb_consume;

typedef struct tlb_driver {
	const char *name;
	int nmodes;
	const char *mode_name[TLB_MAX_MODES]; /* short label */
	const char *mode_desc[TLB_MAX_MODES]; /* exactly how it runs */
	/* Replies before the data are on disk: a kill -9 may lose
	 * acknowledged writes, which the crash workload then reports
	 * rather than counts as a failure of the run. */
	bool lossy[TLB_MAX_MODES];
	int scale_mode; /* the mode the scale workload uses */
	/* Start a server on conf->dir and wait until it accepts. */
	const tlb_proc_kind *proc; /* with tlb_proc_start */
	/* SIGTERM, wait for the exit, free. NULL is fine. */
	void (*stop)(tlb_server *s);
	/* SIGKILL and wait: nothing is flushed. */
	void (*kill9)(tlb_server *s);
	/* Start again on the same directory and port (after stop_only or
	 * kill9); returns once the port accepts. */
	int (*restart)(tlb_server *s);
	/* SIGTERM and wait, keeping s for restart; seconds it took. */
	double (*stop_only)(tlb_server *s);
	/* Resident memory of the server process (kB). */
	int (*rss_kb)(tlb_server *s, uint64_t *out);
	/* Bytes the server's data take on disk (as du counts them). */
	uint64_t (*disk_bytes)(tlb_server *s);
	int (*connect)(tlb_server *s, tlb_conn **out);
	void (*disconnect)(tlb_conn *c);
	/* Put n messages with bodies of body_len bytes; ack(arg, seq) for
	 * each acknowledged one. Returns 0 when all were acknowledged, -1
	 * when the connection failed (those acknowledged were reported). */
	int (*put)(tlb_conn *c, const tlb_item *items, size_t n,
	    size_t body_len, tlb_ack_fn ack, void *arg);
	/* Lease, (extend,) delete until *cc->stop; 0, or -1 when the
	 * connection failed. */
	int (*consume)(tlb_conn *c, const tlb_consume *cc);
	/* A replicated system only (NULL otherwise): SIGKILL the node that
	 * leads now, leaving the others running; 0, or -1 when no leader
	 * was found. restart then starts it again. */
	int (*kill_leader)(tlb_server *s);
	/* One long read of every message of the topic, on a connection of
	 * its own (NULL where the system has none): *n is how many it
	 * counted; 0 or -1. */
	int (*long_read)(tlb_server *s, uint64_t *n);
} tlb_driver;

/* Every driver, in the order of the tables (drivers.c). */
extern const tlb_driver *const tlb_drivers[];
extern const size_t tlb_ndrivers;

/* ---- helpers for drivers (tlb_sys.c) ---- */

/* Fills body[len] (len >= TLB_BODY_MIN) with seq, due and padding. */
void tlb_body_fill(char *body, size_t len, uint64_t seq, int64_t due_ms);
/* Reads seq and due back; false when the body is not one of ours. */
bool tlb_body_parse(const void *body, size_t len, uint64_t *seq, int64_t *due);

/* A free loopback TCP port (bound and released), or -1. */
int tlb_free_port(void);
/* fork + exec argv with stdout and stderr to log; the pid or -1. */
pid_t tlb_spawn(char *const argv[], const char *log);
/* Wait until 127.0.0.1:port accepts; -1 when pid exits or at the
 * deadline (the log is shown). */
int tlb_wait_port(int port, pid_t pid, int deadline_ms, const char *log);
/* Send sig and wait for the exit (SIGKILL after deadline_ms); seconds. */
double tlb_stop_pid(pid_t pid, int sig, int deadline_ms);
/* du of a tree, leaving out files named *.log. */
uint64_t tlb_dir_bytes(const char *dir);

/* ---- the server process every driver runs (tlb_sys.c) ----
 * A driver's struct tlb_server begins with a tlb_proc, and a tlb_proc_kind
 * says what differs: the shared code below then starts, restarts, stops,
 * kills and measures every system the same way. */

struct tlb_proc_kind {
	size_t size;      /* of the driver's struct tlb_server */
	const char *log;  /* log file name in the server's directory */
	const char *data; /* subdirectory with its data; NULL: all of it */
	int start_ms;     /* how long a start may take to accept */
	int term_ms;      /* how long a SIGTERM may take */
	/* The driver's own fields, before the first start; 0 or -1. */
	int (*prepare)(tlb_server *s, const tlb_server_conf *conf);
	/* The command line, NULL-terminated (at most TLB_PROC_ARGS
	 * entries); strings it formats go to the proc's scratch. */
	void (*args)(tlb_server *s, char **argv);
	/* A server of several processes (a cluster): start every one that
	 * is not running and wait until they accept, instead of args; 0 or
	 * -1. NULL for one process. */
	int (*spawn)(tlb_server *s);
};

#define TLB_PROC_ARGS 24

typedef struct tlb_proc {
	const tlb_proc_kind *k;
	pid_t pid;
	int port;
	char dir[PATH_MAX];
	char log[PATH_MAX + 16];
	char data[PATH_MAX + 16];
	char scratch[PATH_MAX + 32];
} tlb_proc;

/* Allocates the server (kind->size bytes), fills the proc, runs prepare,
 * starts it and waits until it accepts. */
int tlb_proc_start(
    tlb_server **out, const tlb_server_conf *conf, const tlb_proc_kind *k);
/* The driver operations every system shares (see tlb_driver). */
int tlb_proc_restart(tlb_server *s);
void tlb_proc_stop(tlb_server *s);
double tlb_proc_stop_only(tlb_server *s);
void tlb_proc_kill9(tlb_server *s);
int tlb_proc_rss(tlb_server *s, uint64_t *kb);
uint64_t tlb_proc_disk(tlb_server *s);

/* The table entries every driver has in common. */
#define TLB_DRIVER_OPS(kind, conn, disconn, put_fn, consume_fn)         \
	.proc = (kind), .stop = tlb_proc_stop, .kill9 = tlb_proc_kill9, \
	.restart = tlb_proc_restart, .stop_only = tlb_proc_stop_only,   \
	.rss_kb = tlb_proc_rss, .disk_bytes = tlb_proc_disk,            \
	.connect = (conn), .disconnect = (disconn), .put = (put_fn),    \
	.consume = (consume_fn)

/* A buffered, blocking TCP connection to 127.0.0.1. */
typedef struct tlb_sock {
	int fd;
	char *rbuf;
	size_t rpos, rlen, rcap;
	char *wbuf;
	size_t wlen, wcap;
} tlb_sock;

int tlb_sock_open(tlb_sock *s, int port, int timeout_ms);
void tlb_sock_close(tlb_sock *s);
/* Append to the write buffer; 0 or -1 (out of memory). */
int tlb_sock_put(tlb_sock *s, const void *p, size_t n);
int tlb_sock_printf(tlb_sock *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int tlb_sock_flush(tlb_sock *s);
/* The next line without its "\r\n" (valid until the next read): its
 * length, or -1 on a closed or failed connection. */
long tlb_sock_line(tlb_sock *s, char **line);
/* The next n bytes plus "\r\n"; 0 or -1. */
int tlb_sock_bytes(tlb_sock *s, size_t n, char **p);
/* A whole line is already buffered (reading it will not block). */
bool tlb_sock_has_line(const tlb_sock *s);

/* Puts over a text protocol, pipelined: at most window messages wait for
 * their replies. send writes one message (its body filled in) to the
 * connection's buffer, reply reads one message's replies; 0 or -1. */
typedef struct tlb_pipe {
	size_t window;
	int (*send)(
	    tlb_conn *c, const tlb_item *it, const char *body, size_t len);
	int (*reply)(tlb_conn *c);
} tlb_pipe;

/* A driver's put over s with pipe (see tlb_driver.put). */
int tlb_pipe_put(tlb_conn *c, tlb_sock *s, const tlb_pipe *pipe,
    const tlb_item *items, size_t n, size_t body_len, tlb_ack_fn ack,
    void *arg);

/* The head of a text-protocol driver's struct tlb_conn (its first
 * member): the server and a buffered socket to it. */
typedef struct tlb_text_conn {
	tlb_server *srv;
	tlb_sock s;
} tlb_text_conn;

/* A connection of size bytes with its head connected; NULL on failure. */
tlb_conn *tlb_text_connect(tlb_server *srv, size_t size);
/* Closes and frees; NULL is fine (see tlb_driver.disconnect). */
void tlb_text_disconnect(tlb_conn *c);

#endif /* TLB_DRIVER_H */
