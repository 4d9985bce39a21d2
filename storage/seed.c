/*
 * Offline operations on a store directory for seeding a new Raft group
 * (store.h, "seeding a new group"): a consistent copy of a stopped store,
 * and the removal of what ties a copy to the group it came from (the
 * applied index, key "A"). Each opens the database itself; a broker that
 * runs on it holds RocksDB's LOCK file, which is asked first so that the
 * refusal names the process instead of RocksDB's lock error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_int.h"

static int
say(char *why, size_t cap, int rv, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && cap > 0) {
		va_start(ap, fmt);
		vsnprintf(why, cap, fmt, ap);
		va_end(ap);
	}
	return rv;
}

/* Whether dir/name exists. */
static bool
has_file(const char *dir, const char *name)
{
	char path[4096];
	struct stat st;

	if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    sizeof(path)) {
		return false;
	}
	return stat(path, &st) == 0;
}

/* The process holding RocksDB's lock on the database in dir (a POSIX
 * record lock on dir/LOCK, as RocksDB's Posix environment takes it), or 0
 * when none does. A lock this process holds is not seen. */
static pid_t
lock_holder(const char *dir)
{
	char path[4096];
	struct flock fl;
	pid_t pid = 0;
	int fd;

	if ((size_t) snprintf(path, sizeof(path), "%s/LOCK", dir) >=
	        sizeof(path) ||
	    (fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		return 0;
	}
	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
		pid = fl.l_pid > 0 ? fl.l_pid : -1;
	}
	close(fd);
	return pid;
}

/* Open the existing store in dir for an offline operation. */
static int
open_existing(const char *dir, tli_store **out, char *why, size_t cap)
{
	tli_store_opts o;
	pid_t pid;
	int rv;

	if (dir == NULL || dir[0] == '\0') {
		return say(why, cap, TL_EINVAL, "no directory given");
	}
	if (!has_file(dir, "CURRENT")) {
		if (has_file(dir, "store/CURRENT")) {
			return say(why, cap, TL_EINVAL,
			    "%s holds no store; it is a cluster node's data "
			    "directory: its store is %s/store",
			    dir, dir);
		}
		return say(why, cap, TL_EINVAL, "%s holds no store", dir);
	}
	if ((pid = lock_holder(dir)) != 0) {
		if (pid > 0) {
			return say(why, cap, TL_EBUSY,
			    "the store in %s is open by process %ld (a "
			    "running broker?): stop it first",
			    dir, (long) pid);
		}
		return say(why, cap, TL_EBUSY,
		    "the store in %s is open by another process (a running "
		    "broker?): stop it first",
		    dir);
	}
	tli_store_opts_init(&o);
	o.path = dir;
	if ((rv = tli_store_open(out, &o)) != TL_OK) {
		return say(why, cap, rv, "cannot open the store in %s: %s", dir,
		    rv == TL_EFORMAT ? "written by another version"
		                     : tl_strerror(rv));
	}
	return TL_OK;
}

int
tli_store_copy(
    const char *src, const char *dst, uint64_t *index, char *why, size_t cap)
{
	struct stat st;
	tli_store *s;
	uint64_t at = 0;
	int rv;

	if (dst == NULL || dst[0] == '\0' || index == NULL) {
		return say(why, cap, TL_EINVAL, "no destination given");
	}
	if (lstat(dst, &st) == 0 || errno != ENOENT) {
		return say(why, cap, TL_EINVAL,
		    "%s exists: the copy goes to a new directory", dst);
	}
	if ((rv = open_existing(src, &s, why, cap)) != TL_OK) {
		return rv;
	}
	if ((rv = tli_store_checkpoint(s, dst, &at)) != TL_OK) {
		say(why, cap, rv, "cannot copy %s to %s: %s (%s)", src, dst,
		    tl_strerror(rv), tli_store_last_error(s));
	}
	tli_store_close(s);
	if (rv == TL_OK) {
		*index = at;
	}
	return rv;
}

/* Remove the applied index, synced. */
static int
forget_applied(tli_store *s)
{
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char *err = NULL;
	int rv;

	if (wo == NULL) {
		return TL_ENOMEM;
	}
	rocksdb_writeoptions_set_sync(wo, 1);
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = tli_db_rdlock(s)) == TL_OK) {
		rocksdb_delete_cf(s->db, wo, s->cf[CF_DEFAULT], "A", 1, &err);
		if ((rv = tli_rdb_err(s, err)) == TL_OK) {
			atomic_store(&s->applied, 0);
		}
		tli_db_unlock(s);
	}
	pthread_mutex_unlock(&s->apply_lock);
	rocksdb_writeoptions_destroy(wo);
	return rv;
}

int
tli_store_seed(const char *path, uint64_t *was, char *why, size_t cap)
{
	tli_store *s;
	uint64_t had;
	int rv;

	if (was == NULL) {
		return say(why, cap, TL_EINVAL, "no result given");
	}
	if ((rv = open_existing(path, &s, why, cap)) != TL_OK) {
		return rv;
	}
	had = tli_store_applied_index(s);
	if (had != 0 && (rv = forget_applied(s)) != TL_OK) {
		say(why, cap, rv,
		    "cannot clear the applied index of %s: %s (%s)", path,
		    tl_strerror(rv), tli_store_last_error(s));
	}
	tli_store_close(s);
	if (rv == TL_OK) {
		*was = had;
	}
	return rv;
}
