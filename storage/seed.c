/*
 * Seeding a new Raft group from a store (store.h, "seeding a new group"):
 * offline, a consistent copy of a stopped store and its preparation (the
 * old group's applied index, key "A", and node URLs, keys "M", removed;
 * the seed mark, key "S", written); online, the seed check entry that the new
 * group's first leader proposes and every node applies. Each offline call opens
 * the database itself; a broker that runs on it holds RocksDB's LOCK file,
 * which is asked first so that the refusal names the process instead of
 * RocksDB's lock error.
 *
 * The seed mark: 8 bytes of id (big-endian), then 0 (pending: no entry of
 * the new group applied yet) or 1 (confirmed by the seed check). The id is
 * the first 8 bytes of the SHA-256 of the default column family (every key
 * and value but "S": format, topics, counters, owner counts, the old
 * applied index), so every copy of one prepared store carries the same
 * id however it was copied, and copies of different stores (or of one
 * store at different times) almost surely not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
#include "store_int.h"

#define SEED_KEY "S"
#define SEED_LEN 9

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

/* The seed id of the store's metadata (the default column family but the
 * seed mark itself); never 0. */
static int
meta_digest(tli_store *s, uint64_t *out)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_iterator_t *it;
	tlp_sha256_ctx h;
	uint8_t d[TLP_SHA256_LEN];
	char *err = NULL;
	int rv;

	tlp_sha256_init(&h);
	it = rocksdb_create_iterator_cf(s->db, ro, s->cf[CF_DEFAULT]);
	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		uint8_t len[8];

		if (kl == 1 && k[0] == SEED_KEY[0]) {
			continue;
		}
		tli_put_be32(len, (uint32_t) kl);
		tli_put_be32(len + 4, (uint32_t) vl);
		tlp_sha256_update(&h, len, sizeof(len));
		tlp_sha256_update(&h, k, kl);
		tlp_sha256_update(&h, v, vl);
	}
	rocksdb_iter_get_error(it, &err);
	rv = tli_rdb_err(s, err);
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	tlp_sha256_final(&h, d);
	*out = tli_get_be64(d);
	if (*out == 0) {
		*out = 1;
	}
	return rv;
}

int
tli_store_seed_get(tli_store *s, uint64_t *id, bool *pending)
{
	uint8_t v[SEED_LEN];
	bool found = false;
	int rv;

	if (s == NULL || id == NULL || pending == NULL) {
		return TL_EINVAL;
	}
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		return rv;
	}
	rv = tli_rdb_get_fixed(s, SEED_KEY, 1, v, sizeof(v), &found);
	tli_db_unlock(s);
	if (rv == TL_OK) {
		*id = found ? tli_get_be64(v) : 0;
		*pending = found && v[8] == 0;
	}
	return rv;
}

/* Remove the applied index and the node URLs and mark the store as the
 * seed `id` (pending), in one synced write. */
static int
mark_seed(tli_store *s, uint64_t id)
{
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	uint8_t v[SEED_LEN];
	char *err = NULL;
	int rv;

	if (wo == NULL || wb == NULL) {
		rv = TL_ENOMEM;
		goto out;
	}
	tli_put_be64(v, id);
	v[8] = 0;
	rocksdb_writebatch_delete_cf(wb, s->cf[CF_DEFAULT], "A", 1);
	/* the old group's node URLs (key "M" id) name other nodes */
	rocksdb_writebatch_delete_range_cf(
	    wb, s->cf[CF_DEFAULT], "M", 1, "N", 1);
	rocksdb_writebatch_put_cf(
	    wb, s->cf[CF_DEFAULT], SEED_KEY, 1, (const char *) v, sizeof(v));
	rocksdb_writeoptions_set_sync(wo, 1);
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = tli_db_rdlock(s)) == TL_OK) {
		rocksdb_write(s->db, wo, wb, &err);
		if ((rv = tli_rdb_err(s, err)) == TL_OK) {
			atomic_store(&s->applied, 0);
		}
		tli_db_unlock(s);
	}
	pthread_mutex_unlock(&s->apply_lock);
out:
	rocksdb_writebatch_destroy(wb);
	rocksdb_writeoptions_destroy(wo);
	return rv;
}

int
tli_store_seed(
    const char *path, uint64_t *was, uint64_t *id, char *why, size_t cap)
{
	tli_store *s;
	uint64_t had, seed = 0;
	bool pending = false;
	int rv;

	if (was == NULL || id == NULL) {
		return say(why, cap, TL_EINVAL, "no result given");
	}
	if ((rv = open_existing(path, &s, why, cap)) != TL_OK) {
		return rv;
	}
	had = tli_store_applied_index(s);
	if ((rv = tli_store_seed_get(s, &seed, &pending)) == TL_OK &&
	    !pending) {
		/* a store never prepared, or the store of a group that was
		 * seeded itself once: a new seed */
		if ((rv = meta_digest(s, &seed)) == TL_OK) {
			rv = mark_seed(s, seed);
		}
	}
	if (rv != TL_OK) {
		say(why, cap, rv, "cannot prepare the store in %s: %s (%s)",
		    path, tl_strerror(rv), tli_store_last_error(s));
	}
	tli_store_close(s);
	if (rv == TL_OK) {
		*was = had;
		*id = seed;
	}
	return rv;
}

void
tli_store_seed_entry(uint64_t id, uint8_t out[TLI_REPL_SEED_LEN])
{
	out[0] = TLI_REPL_VERSION;
	out[1] = TLI_REPL_SEED;
	out[2] = TLI_STORE_FORMAT;
	out[3] = 0;
	tli_put_be64(out + TLI_REPL_HEADER, id);
}

/* With apply_lock and db_lock: mark the seed confirmed and the applied
 * index, in one write (not synced, as every applied entry). */
static int
confirm(tli_store *s, uint64_t index, uint64_t id)
{
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	uint8_t v[SEED_LEN];

	if (wb == NULL) {
		return TL_ENOMEM;
	}
	tli_put_be64(v, id);
	v[8] = 1;
	rocksdb_writebatch_put_cf(
	    wb, s->cf[CF_DEFAULT], SEED_KEY, 1, (const char *) v, sizeof(v));
	return tli_store_write_applied(s, wb, index);
}

int
tli_store_seed_apply(
    tli_store *s, uint64_t index, const void *entry, size_t len, uint64_t *have)
{
	const uint8_t *p = entry;
	uint8_t v[SEED_LEN];
	bool found = false;
	uint64_t want, mine = 0;
	int rv;

	if (s == NULL || p == NULL || have == NULL) {
		return TL_EINVAL;
	}
	if (len != TLI_REPL_SEED_LEN || p[0] != TLI_REPL_VERSION ||
	    p[1] != TLI_REPL_SEED || p[2] != TLI_STORE_FORMAT || p[3] != 0) {
		return TL_ECORRUPT;
	}
	want = tli_get_be64(p + TLI_REPL_HEADER);
	pthread_mutex_lock(&s->apply_lock);
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		pthread_mutex_unlock(&s->apply_lock);
		return rv;
	}
	if (index <= atomic_load(&s->applied)) {
		mine = want; /* applied before (a replay after a restart) */
	} else if ((rv = tli_rdb_get_fixed(
	                s, SEED_KEY, 1, v, sizeof(v), &found)) == TL_OK &&
	    found) {
		mine = tli_get_be64(v);
		if (mine == want) {
			rv = confirm(s, index, want);
		}
	}
	tli_db_unlock(s);
	pthread_mutex_unlock(&s->apply_lock);
	if (rv == TL_OK) {
		*have = mine;
	}
	return rv;
}
