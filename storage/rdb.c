/*
 * The one place where RocksDB's error strings become Timeline error codes.
 * RocksDB reports errors as malloc'd strings; this file frees them, keeps
 * the last one for the logs and maps the kind of failure to a code. Also
 * the fixed-size metadata read (counters, format) the store does often.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "store_int.h"

int
tli_rdb_err(tli_store *s, char *errstr)
{
	int rv;

	if (errstr == NULL) {
		return TL_OK;
	}
	if (strstr(errstr, "No space left") != NULL ||
	    strstr(errstr, "NoSpace") != NULL) {
		rv = TL_ENOSPC;
	} else if (strstr(errstr, "Corruption") != NULL) {
		rv = TL_ECORRUPT;
	} else if (strstr(errstr, "IO error") != NULL) {
		rv = TL_EIO;
	} else {
		rv = TL_ESTORAGE;
	}
	if (s != NULL) {
		pthread_mutex_lock(&s->err_lock);
		snprintf(s->last_err, sizeof(s->last_err), "%s", errstr);
		pthread_mutex_unlock(&s->err_lock);
	}
	rocksdb_free(errstr);
	return rv;
}

int
tli_rdb_get_fixed(
    tli_store *s, const void *k, size_t kl, void *out, size_t len, bool *found)
{
	char *err = NULL;
	size_t vl = 0;
	char *v = rocksdb_get_cf(
	    s->db, s->ropts, s->cf[CF_DEFAULT], k, kl, &vl, &err);
	int rv = tli_rdb_err(s, err);

	*found = rv == TL_OK && v != NULL;
	if (*found && vl != len) {
		*found = false;
		rv = TL_ECORRUPT;
	} else if (*found) {
		memcpy(out, v, len);
	}
	rocksdb_free(v);
	return rv;
}

bool
tli_store_writable(tli_store *s)
{
	return !atomic_load(&s->stopped);
}

uint64_t
tli_store_write_stops(tli_store *s)
{
	return atomic_load(&s->st_stops);
}

const char *
tli_store_last_error(tli_store *s)
{
	/* The buffer only ever grows a new NUL-terminated string, so reading
	 * it without the lock is safe enough for logs. */
	return s != NULL ? s->last_err : "";
}

/* A RocksDB built without NDEBUG (Debian's: CMake build type "None") runs
 * its assertions and test sync points; only such a build defines
 * rocksdb::SyncPoint::GetInstance(). tools/rocksdb-release.sh builds the
 * same version with NDEBUG (docs/benchmarks.md, "The RocksDB it runs on"). */
bool
tli_rdb_assertions(void)
{
	return dlsym(RTLD_DEFAULT, "_ZN7rocksdb9SyncPoint11GetInstanceEv") !=
	    NULL;
}
