/*
 * What the store needs of RocksDB beyond its C API 7.8: DB::Resume, the
 * memtable insert hints and the current log file's number (below). This
 * file reaches the objects behind a rocksdb_t and a rocksdb_options_t: c.cc defines those structs as holding
 * nothing but the DB pointer and the Options, which is what is declared
 * here. After a write fails with no space, RocksDB keeps a background error
 * and refuses every later write until Resume clears it (it flushes the
 * memtables, so it fails again while the disk is still full).
 */
#include <cstdlib>
#include <cstring>
#include <memory>

#include <rocksdb/c.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>

struct rocksdb_t {
	rocksdb::DB *rep;
};

struct rocksdb_options_t {
	rocksdb::Options rep;
};

/* RocksDB's own recovery from a full disk (its SstFileManager, polling
 * every 5 s) waits for as much free space as the largest memtable (64 MiB
 * for the default column family) and, while it waits, DB::Resume answers
 * Busy. It is turned off here (a listener's answer, and no retrying
 * thread for retryable I/O errors): the store's writer calls DB::Resume
 * itself, which succeeds as soon as the memtables can be flushed. */
namespace
{
class manual_resume : public rocksdb::EventListener
{
      public:
	void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason,
	    rocksdb::Status, bool *auto_recovery) override
	{
		*auto_recovery = false;
	}
};
} // namespace

extern "C" void
tli_rdb_manual_resume(rocksdb_options_t *o)
{
	o->rep.max_bgerror_resume_count = 0;
	o->rep.listeners.push_back(std::make_shared<manual_resume>());
}

extern "C" void
tli_rdb_resume(rocksdb_t *db, char **errptr)
{
	rocksdb::Status st = db->rep->Resume();

	if (!st.ok()) {
		*errptr = strdup(st.ToString().c_str());
	}
}

/* Keys of the same topic (every key of the message and index families
 * starts with the topic's 4-byte id) keep a hint of where the last one went
 * into the memtable; the next insert starts its search from there. The
 * writer sorts each batch, so its keys go in ascending order and each
 * search climbs only as far as the gap to the previous key (produce and the
 * lease cycle: docs/benchmarks.md). RocksDB 7.8's C API has no setter; the
 * hint serves inserts from one writer at a time.
 *
 * Only keys longer than the prefix are in the domain. RocksDB 7.8 keeps one
 * hint per prefix for a memtable's point entries and its range deletions
 * alike (MemTable::Add), and a hint of one skiplist used in the other breaks
 * it (the Debian build asserts). A topic's deletion removes its range with
 * exactly the 4-byte id as the start key (topic_delete_apply): such keys
 * take no hint. */
namespace
{
class topic_prefix : public rocksdb::SliceTransform
{
      public:
	const char *Name() const override
	{
		return "timeline.TopicPrefix";
	}

	rocksdb::Slice Transform(const rocksdb::Slice &key) const override
	{
		return rocksdb::Slice(key.data(), 4);
	}

	bool InDomain(const rocksdb::Slice &key) const override
	{
		return key.size() > 4;
	}
};
} // namespace

extern "C" void
tli_rdb_insert_hints(rocksdb_options_t *o)
{
	o->rep.memtable_insert_with_hint_prefix_extractor =
	    std::make_shared<topic_prefix>();
}

/* When sorted runs or compaction debt pile up, RocksDB slows every write
 * to this many bytes per second, and lower by a fifth each time the debt
 * still grows, until the compactions catch up. Its default, 16 MiB/s, is
 * about 55 000 creates a second here (some 300 bytes of batch each): a fill
 * running at 180 000/s fell to that in one step. The store sets twice that,
 * a first step that keeps a fill above 100 000/s. RocksDB 7.8's C API has
 * no setter. */
extern "C" void
tli_rdb_delayed_write_rate(rocksdb_options_t *o, uint64_t bytes_per_s)
{
	o->rep.delayed_write_rate = bytes_per_s;
}

/* The number of the log file RocksDB writes to now (DB::GetCurrentWalFile:
 * its mutex and a stat). 0 on success. */
extern "C" int
tli_rdb_current_wal(rocksdb_t *db, uint64_t *number)
{
	std::unique_ptr<rocksdb::LogFile> f;
	rocksdb::Status st = db->rep->GetCurrentWalFile(&f);

	if (!st.ok() || f == nullptr) {
		return -1;
	}
	*number = f->LogNumber();
	return 0;
}
