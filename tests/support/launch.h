/*
 * The one launcher of the end-to-end suites: it runs the real programs
 * (timelined, tl-msc4140, tl-chronos, the test homeserver) as child processes
 * of the test, each described by a tt_proc. A tt_proc owns its command line,
 * the configuration file written from key/value settings, its log file and its
 * ready file. Several can run at once (give each its own name in a shared
 * directory, or its own directory); each can be killed (SIGKILL), paused
 * (SIGSTOP/SIGCONT), stopped gracefully with its exit status checked, and
 * started again on the same data.
 *
 * Every wait has a deadline. A child never outlives the test process
 * (PR_SET_PDEATHSIG), its output is appended to its log, and the log is
 * printed to stderr whenever the process ends badly: it exits before it is
 * ready, is not ready in time, or does not exit with status 0 when stopped.
 */
#ifndef TL_TESTS_LAUNCH_H
#define TL_TESTS_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base.h"

#define TT_PROC_MAXARGS 64
#define TT_PATH 700

typedef struct tt_proc {
	char name[64];       /* in messages and file names */
	char bin[TT_PATH];   /* the program (a path, or a name for PATH) */
	char log[TT_PATH];   /* DIR/NAME.log: stdout and stderr, appended */
	char ready[TT_PATH]; /* DIR/NAME.ready: the ready file */
	char conf[TT_PATH];  /* DIR/NAME.conf: written from the settings */
	char addr[TT_PATH];  /* the ready file's first line once ready */
	/* The arguments and settings live in the struct, not on the heap,
	 * so that a test failing half-way leaks nothing. */
	char *argv[TT_PROC_MAXARGS + 1]; /* argv[0] is bin; into argstore */
	int argc;
	char argstore[8192];
	size_t arglen;
	char settings[8192]; /* "key = value\n" lines; empty: no file */
	size_t settings_len;
	const char *conf_flag; /* passes conf (default "-c"); NULL: not */
	int timeout_ms;        /* start/stop deadline (default 20000) */
	bool trunc_log;        /* the next start truncates the log */
	pid_t pid;             /* > 0 while it runs */
} tt_proc;

/* The programs of the build. */
const char *tt_bin_timelined(void);
const char *tt_bin_msc4140(void);
const char *tt_bin_chronos(void);
const char *tt_bin_store(void); /* tl-store */

/* Run `bin -c DIR/conf_name ARGS` to its end, conf_name holding conf_text;
 * its stdout and stderr go to out (up to cap - 1 bytes, NUL-terminated).
 * Returns its exit status (-1 when it did not exit). */
int tt_run_conf(const char *bin, const char *dir, const char *conf_name,
    const char *conf_text, const char *args, char *out, size_t cap);

/* Run the shell command cmd to its end; its stdout and stderr go to out
 * (up to cap - 1 bytes, NUL-terminated). Returns its exit status (-1 when
 * it did not exit). */
int tt_run(const char *cmd, char *out, size_t cap);

/* Describe a process named `name` whose files live in dir (which must
 * exist); no process yet. bin: a path or a program name found on PATH. */
void tt_proc_init(
    tt_proc *p, const char *bin, const char *dir, const char *name);
/* A timelined in dir: tt_proc_init plus `--ready-file READY`. */
void tt_proc_timelined(tt_proc *p, const char *dir, const char *name);
/* Kill the process if it still runs; forget the arguments and settings. */
void tt_proc_fini(tt_proc *p);

/* Append one command-line argument (printf format). */
void tt_proc_arg(tt_proc *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append several arguments, up to a NULL. */
void tt_proc_args(tt_proc *p, ...) __attribute__((sentinel));
/* Add a setting `key = value` (printf format for the value) to the
 * configuration file; with any setting the start writes p->conf and passes
 * `CONF_FLAG p->conf` after the arguments. */
void tt_proc_set(tt_proc *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append raw configuration text (whole lines). */
void tt_proc_conf_text(tt_proc *p, const char *text);
/* Forget the settings given so far. */
void tt_proc_conf_reset(tt_proc *p);

/* Start the process and return at once (no ready wait). */
void tt_proc_spawn(tt_proc *p);
/* Start the process and wait for a non-empty ready file (p->timeout_ms);
 * p->addr gets its first line. Fails the test, printing the log, if the
 * process exits first or the deadline passes. */
void tt_proc_start(tt_proc *p);
/* Wait for an already spawned process's ready file, as tt_proc_start. */
void tt_proc_wait_ready(tt_proc *p);
/* Whether it still runs (reaps it when it has exited). */
bool tt_proc_alive(tt_proc *p);

/* Send sig and reap within timeout_ms, then SIGKILL. Returns the wait
 * status, -1 when nothing ran, -2 when it had to be killed. */
int tt_proc_signal(tt_proc *p, int sig, int timeout_ms);
/* SIGKILL and reap: a crash. */
void tt_proc_kill(tt_proc *p);
/* SIGSTOP / SIGCONT: a process that hangs, then goes on. Each returns
 * once the process is stopped (continued). */
void tt_proc_pause(tt_proc *p);
void tt_proc_resume(tt_proc *p);
/* SIGTERM; returns the wait status (as tt_proc_signal) and prints the log
 * when the process did not exit with status 0. */
int tt_proc_stop(tt_proc *p);
/* SIGTERM; fails the test (printing the log) unless the process exits
 * with status 0 within p->timeout_ms. */
void tt_proc_stop_clean(tt_proc *p);
/* Stop with sig (SIGTERM, SIGKILL) and start again with the same command
 * line and files: the same data directory. */
void tt_proc_restart(tt_proc *p, int sig);
/* Wait (at most timeout_ms) for the process to exit by itself: its exit
 * code, or -1 (killed by a signal or still running, then killed). */
int tt_proc_wait_exit(tt_proc *p, int timeout_ms);

/* Print the log to stderr, framed by its name. */
void tt_proc_dump_log(const tt_proc *p);
/* Whether the log contains `what`, waiting at most timeout_ms. */
bool tt_proc_log_wait(const tt_proc *p, const char *what, int timeout_ms);
/* Fail the test if the log holds a sanitizer report (the children's output
 * does not reach ctest). */
void tt_proc_check_log(const tt_proc *p);

/* ---- small process-level helpers ---- */

/* Sleep ms milliseconds (resuming after signals). */
void tt_nap_ms(int ms);
/* Write text to path (fails the test when it cannot). */
void tt_write_file(const char *path, const char *text);
/* The whole file, NUL-terminated (malloc'd), or NULL. */
char *tt_read_file(const char *path);
/* A TCP connection to 127.0.0.1:port: the fd, or -1 with errno. */
int tt_tcp_connect(int port);
/* connect(fd, sa): fd, or -1 with fd closed and errno kept. */
int tt_connect_or_close(int fd, const void *sa, size_t len);
/* A free TCP port on 127.0.0.1 (bind 0, read it, close), or -1. */
int tt_free_port(void);
/* A raw TCP connection to 127.0.0.1:port whose sends and receives give up
 * after timeout_s (a server that stops reading must not hang the test);
 * fails the test when it cannot connect. */
int tt_tcp_open(int port, int timeout_s);
/* Send n bytes; false when the peer hung up or the send timed out. */
bool tt_send_all(int fd, const void *p, size_t n);
/* Read n bytes; false on close, error or timeout. */
bool tt_recv_all(int fd, void *p, size_t n);
/* True when the peer closes fd within timeout_ms (what it sends before is
 * read and dropped). */
bool tt_closed_within(int fd, int timeout_ms);
/* Fill the file system holding dir with a file dir/filler, to its last
 * free byte (a small tmpfs in the disk-full tests); its path in path. */
void tt_fill_disk(const char *dir, char *path, size_t plen);
/* A line "Key:  N kB" of /proc/PID/status ("VmRSS", "VmHWM"), in KiB;
 * fails the test when there is none. */
long tt_proc_status_kb(pid_t pid, const char *key);
/* The ids of pid's threads named comm (their /proc comm, without its
 * newline), at most max of them into out; how many. 0 when pid is gone. */
int tt_threads_named(pid_t pid, const char *comm, pid_t *out, int max);

#endif
