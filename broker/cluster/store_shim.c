#include "store_shim.h"
__attribute__((weak)) int
tli_store_apply_entry(
    tli_store *s, uint64_t index, const void *entry, size_t len)
{
	(void) s, (void) index, (void) entry, (void) len;
	return TL_ENOTSUP;
}
__attribute__((weak)) uint64_t
tli_store_applied_index(tli_store *s)
{
	(void) s;
	return 0;
}
__attribute__((weak)) int
tli_store_reload(tli_store *s)
{
	(void) s;
	return TL_OK;
}
__attribute__((weak)) int
tli_store_checkpoint(tli_store *s, const char *dir, uint64_t *index)
{
	(void) s, (void) dir, (void) index;
	return TL_ENOTSUP;
}
__attribute__((weak)) int
tli_store_restore(tli_store *s, const char *dir)
{
	(void) s, (void) dir;
	return TL_ENOTSUP;
}
