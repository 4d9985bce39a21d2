/*
 * The check of a replicated entry's WriteBatch before it is applied
 * (tli_store_apply_entry). RocksDB's C API can build a WriteBatch from
 * bytes but only walks the default column family's records; this walks
 * them all with WriteBatch::Iterate, which also verifies the record count
 * in the header, so a truncated or damaged entry is refused before any of
 * it reaches the database.
 */
#include <cstdint>
#include <cstring>
#include <string>

#include <rocksdb/write_batch.h>

namespace
{
class batch_check : public rocksdb::WriteBatch::Handler
{
      public:
	batch_check(const uint32_t *ids, size_t n) : ids_(ids), n_(n)
	{
	}

	rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice &,
	    const rocksdb::Slice &) override
	{
		return known(cf);
	}

	rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice &) override
	{
		return known(cf);
	}

	rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice &,
	    const rocksdb::Slice &) override
	{
		return known(cf);
	}

	/* A replicated entry never holds these (the store deletes index
	 * entries with SingleDelete only on a single node: store.c). */
	rocksdb::Status SingleDeleteCF(
	    uint32_t, const rocksdb::Slice &) override
	{
		return rocksdb::Status::Corruption("single delete in entry");
	}

	rocksdb::Status MergeCF(
	    uint32_t, const rocksdb::Slice &, const rocksdb::Slice &) override
	{
		return rocksdb::Status::Corruption("merge in entry");
	}

      private:
	rocksdb::Status known(uint32_t cf)
	{
		for (size_t i = 0; i < n_; i++) {
			if (ids_[i] == cf) {
				return rocksdb::Status::OK();
			}
		}
		return rocksdb::Status::Corruption("unknown column family");
	}

	const uint32_t *ids_;
	size_t n_;
};
} // namespace

static void
set_err(char **errptr, const std::string &what)
{
	std::string t = "Corruption: replicated entry: " + what;

	*errptr = strdup(t.c_str());
}

extern "C" int
tli_rdb_batch_check(
    const char *rep, size_t len, const uint32_t *ids, size_t n, char **errptr)
{
	/* sequence(8) count(4), then the records */
	if (len < 12) {
		set_err(errptr, "shorter than a WriteBatch header");
		return -1;
	}
	rocksdb::WriteBatch wb(std::string(rep, len));
	batch_check h(ids, n);
	rocksdb::Status st = wb.Iterate(&h);
	if (!st.ok()) {
		set_err(errptr, st.ToString());
		return -1;
	}
	return 0;
}
