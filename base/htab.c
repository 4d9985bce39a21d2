/*
 * The hash table (htab.h).
 */
#include "base.h"
#include "htab.h"

void
tli_htab_init(tli_htab *t)
{
	memset(t, 0, sizeof(*t));
}

void
tli_htab_fini(tli_htab *t)
{
	tli_free(t->slots);
	memset(t, 0, sizeof(*t));
}

static int
htab_resize(tli_htab *t, size_t cap)
{
	tli_hnode **s = tli_zalloc(sizeof(*s) * cap);

	if (s == NULL) {
		return TL_ENOMEM;
	}
	for (size_t i = 0; i < t->cap; i++) {
		tli_hnode *n = t->slots[i], *nx;
		for (; n != NULL; n = nx) {
			nx = n->next;
			n->next = s[n->hash & (cap - 1)];
			s[n->hash & (cap - 1)] = n;
		}
	}
	tli_free(t->slots);
	t->slots = s;
	t->cap = cap;
	return TL_OK;
}

int
tli_htab_reserve(tli_htab *t, size_t n)
{
	size_t cap = t->cap > 0 ? t->cap : 16;

	while (cap < n) {
		cap *= 2;
	}
	return cap == t->cap ? TL_OK : htab_resize(t, cap);
}

int
tli_htab_insert(tli_htab *t, tli_hnode *n, uint64_t hash)
{
	if (t->n >= t->cap) {
		(void) htab_resize(t, t->cap > 0 ? t->cap * 2 : 16);
	}
	n->hash = hash;
	if (t->cap == 0) {
		/* no slots could be had at all: nothing to chain to */
		n->next = NULL;
		return TL_ENOMEM;
	}
	n->next = t->slots[hash & (t->cap - 1)];
	t->slots[hash & (t->cap - 1)] = n;
	t->n++;
	return TL_OK;
}

void
tli_htab_remove(tli_htab *t, tli_hnode *n)
{
	tli_hnode **pp;

	TLI_ASSERT(t->cap > 0 && t->n > 0);
	pp = &t->slots[n->hash & (t->cap - 1)];
	while (*pp != NULL && *pp != n) {
		pp = &(*pp)->next;
	}
	TLI_ASSERT(*pp == n);
	if (*pp == n) {
		*pp = n->next;
		n->next = NULL;
		t->n--;
	}
}

static tli_hnode *
htab_scan(const tli_htab *t, tli_htab_iter *it)
{
	for (; it->slot < t->cap; it->slot++) {
		if (t->slots[it->slot] != NULL) {
			return t->slots[it->slot];
		}
	}
	return NULL;
}

tli_hnode *
tli_htab_first(const tli_htab *t, tli_htab_iter *it)
{
	it->slot = 0;
	return htab_scan(t, it);
}

tli_hnode *
tli_htab_next(const tli_htab *t, tli_htab_iter *it, const tli_hnode *cur)
{
	if (cur->next != NULL) {
		return cur->next;
	}
	it->slot++;
	return htab_scan(t, it);
}
