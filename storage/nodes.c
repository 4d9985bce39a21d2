/*
 * The client URLs of a Raft group's nodes (store.h, "the client URLs of
 * the group's nodes"): the replicated entry that sets or removes one, its
 * application, and the listing a node reads at start and after a
 * snapshot. Key "M" id(8, big-endian) in the default column family; the
 * value is the URL without its NUL. The entry is checked whole before
 * anything is written: a URL entry that does not decode is refused
 * (TL_ECORRUPT) and the caller decides what to do with it.
 */
#include <string.h>

#include "store_int.h"

#define NODE_KEY 'M'
#define NODE_KEY_LEN 9

size_t
tli_store_node_entry(
    uint64_t id, const char *url, uint8_t out[TLI_REPL_NODE_MAX])
{
	size_t n = url != NULL ? strlen(url) : 0;

	if (id == 0 || n >= TLI_NODE_URL_CAP) {
		return 0;
	}
	out[0] = TLI_REPL_VERSION;
	out[1] = TLI_REPL_NODE;
	out[2] = TLI_STORE_FORMAT;
	out[3] = 0;
	tli_put_be64(out + TLI_REPL_HEADER, id);
	memcpy(out + TLI_REPL_HEADER + 8, n > 0 ? url : "", n);
	out[TLI_REPL_HEADER + 8 + n] = '\0';
	return TLI_REPL_HEADER + 8 + n + 1;
}

/* Whether the entry decodes; the reason in the store's last error. */
static int
node_check(tli_store *s, uint64_t index, const uint8_t *p, size_t len)
{
	const uint8_t *url = p + TLI_REPL_HEADER + 8;
	const uint8_t *nul;

	if (len < TLI_REPL_HEADER || p[0] != TLI_REPL_VERSION ||
	    p[1] != TLI_REPL_NODE || p[2] != TLI_STORE_FORMAT || p[3] != 0) {
		return tli_store_err(s, TL_ECORRUPT,
		    "replicated entry %llu: not a node URL entry of this "
		    "version",
		    (unsigned long long) index);
	}
	if (len < TLI_REPL_HEADER + 8 + 1 || len > TLI_REPL_NODE_MAX) {
		return tli_store_err(s, TL_ECORRUPT,
		    "replicated entry %llu: a node URL entry of %zu bytes "
		    "(%d to %d)",
		    (unsigned long long) index, len, TLI_REPL_HEADER + 8 + 1,
		    TLI_REPL_NODE_MAX);
	}
	if (tli_get_be64(p + TLI_REPL_HEADER) == 0) {
		return tli_store_err(s, TL_ECORRUPT,
		    "replicated entry %llu: a node URL entry for node 0",
		    (unsigned long long) index);
	}
	nul = memchr(url, '\0', len - TLI_REPL_HEADER - 8);
	if (nul == NULL || nul != p + len - 1) {
		return tli_store_err(s, TL_ECORRUPT,
		    "replicated entry %llu: the URL of a node URL entry %s",
		    (unsigned long long) index,
		    nul == NULL ? "has no terminating NUL"
		                : "has bytes after its NUL");
	}
	return TL_OK;
}

/* The batch of a checked node URL entry: its key set, or deleted for an
 * empty URL. */
static int
build_node(tli_store *s, void *arg, rocksdb_writebatch_t **wb)
{
	const uint8_t *p = arg;
	const char *url = (const char *) p + TLI_REPL_HEADER + 8;
	uint8_t k[NODE_KEY_LEN];

	if ((*wb = rocksdb_writebatch_create()) == NULL) {
		return TL_ENOMEM;
	}
	k[0] = NODE_KEY;
	memcpy(k + 1, p + TLI_REPL_HEADER, 8);
	if (url[0] == '\0') {
		rocksdb_writebatch_delete_cf(
		    *wb, s->cf[CF_DEFAULT], (const char *) k, sizeof(k));
	} else {
		rocksdb_writebatch_put_cf(*wb, s->cf[CF_DEFAULT],
		    (const char *) k, sizeof(k), url, strlen(url));
	}
	return TL_OK;
}

int
tli_store_node_apply(
    tli_store *s, uint64_t index, const void *entry, size_t len)
{
	int rv;

	if (s == NULL || entry == NULL) {
		return TL_EINVAL;
	}
	if ((rv = node_check(s, index, entry, len)) != TL_OK) {
		return rv;
	}
	return tli_store_apply_with(s, index, build_node, (void *) entry);
}

int
tli_store_node_urls(tli_store *s,
    void (*fn)(void *arg, uint64_t id, const char *url), void *arg)
{
	rocksdb_iterator_t *it;
	char *err = NULL;
	int rv;

	if (s == NULL || fn == NULL) {
		return TL_EINVAL;
	}
	if ((rv = tli_db_rdlock(s)) != TL_OK) {
		return rv;
	}
	it = rocksdb_create_iterator_cf(s->db, s->ropts, s->cf[CF_DEFAULT]);
	for (rocksdb_iter_seek(it, "M", 1); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		char url[TLI_NODE_URL_CAP];

		if (kl < 1 || k[0] != NODE_KEY) {
			break;
		}
		if (kl != NODE_KEY_LEN || vl == 0 || vl >= sizeof(url) ||
		    memchr(v, '\0', vl) != NULL) {
			continue;
		}
		memcpy(url, v, vl);
		url[vl] = '\0';
		fn(arg, tli_get_be64((const uint8_t *) k + 1), url);
	}
	rocksdb_iter_get_error(it, &err);
	rv = tli_rdb_err(s, err);
	rocksdb_iter_destroy(it);
	tli_db_unlock(s);
	return rv;
}
