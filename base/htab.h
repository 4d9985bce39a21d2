/*
 * The one hash table: intrusive and chained. An entry embeds a tli_hnode
 * and is found by its 64-bit hash (hash.h) plus a comparison the caller
 * gives, so one table type serves ids, names and pairs of them without
 * allocating per entry. The table grows by doubling when it holds more
 * entries than slots; if growing fails it keeps working with longer chains.
 * Not thread-safe: the owner's lock covers it.
 *
 *	struct lease { tli_hnode hn; char id[64]; ... };
 *	static bool lease_is(const tli_hnode *n, const void *key)
 *	{ return strcmp(TLI_CONTAINER(n, struct lease, hn)->id, key) == 0; }
 *	n = tli_htab_find(&t, tli_hash64(id, strlen(id)), lease_is, id);
 */
#ifndef TL_BASE_HTAB_H
#define TL_BASE_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TLI_CONTAINER(ptr, type, member) \
	((type *) (void *) ((char *) (ptr) -offsetof(type, member)))

typedef struct tli_hnode {
	struct tli_hnode *next;
	uint64_t hash;
} tli_hnode;

typedef struct tli_htab {
	tli_hnode **slots;
	size_t cap; /* a power of two, or 0 before the first insert */
	size_t n;
} tli_htab;

typedef bool (*tli_htab_eq)(const tli_hnode *n, const void *key);

void tli_htab_init(tli_htab *t);
/* Frees the slots (not the entries). */
void tli_htab_fini(tli_htab *t);
/* Preallocates for n entries: TL_OK or TL_ENOMEM. */
int tli_htab_reserve(tli_htab *t, size_t n);
/* Adds n (not already in a table) under hash. When the table cannot grow,
 * chains get longer; TL_ENOMEM only when it has no slots at all and none
 * could be had (reserve first where that must not happen). */
int tli_htab_insert(tli_htab *t, tli_hnode *n, uint64_t hash);
/* Unlinks n, which must be in t. */
void tli_htab_remove(tli_htab *t, tli_hnode *n);

/* The first entry with this hash for which eq(entry, key) holds. */
static inline tli_hnode *
tli_htab_find(const tli_htab *t, uint64_t hash, tli_htab_eq eq, const void *key)
{
	if (t->cap == 0) {
		return NULL;
	}
	for (tli_hnode *n = t->slots[hash & (t->cap - 1)]; n != NULL;
	     n = n->next) {
		if (n->hash == hash && eq(n, key)) {
			return n;
		}
	}
	return NULL;
}

/* Iteration in no particular order; the current entry may be removed.
 *	for (tli_hnode *n = tli_htab_first(&t, &it), *nx; n; n = nx) {
 *		nx = tli_htab_next(&t, &it, n); ... }
 */
typedef struct tli_htab_iter {
	size_t slot;
} tli_htab_iter;

tli_hnode *tli_htab_first(const tli_htab *t, tli_htab_iter *it);
tli_hnode *tli_htab_next(
    const tli_htab *t, tli_htab_iter *it, const tli_hnode *cur);

#endif
