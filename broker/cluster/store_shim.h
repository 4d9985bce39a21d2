/* Temporary: the replication calls of the store until they land in
 * storage/store.h. */
#ifndef TL_BROKER_CLUSTER_STORE_SHIM_H
#define TL_BROKER_CLUSTER_STORE_SHIM_H
#include "store.h"
int tli_store_apply_entry(
    tli_store *s, uint64_t index, const void *entry, size_t len);
uint64_t tli_store_applied_index(tli_store *s);
int tli_store_reload(tli_store *s);
int tli_store_checkpoint(tli_store *s, const char *dir, uint64_t *index);
int tli_store_restore(tli_store *s, const char *dir);
#endif
