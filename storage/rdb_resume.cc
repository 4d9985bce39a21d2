/*
 * DB::Resume for the C store. RocksDB 7.8's C API has no rocksdb_resume, so
 * this file reaches the DB behind a rocksdb_t: c.cc defines that struct as
 * holding nothing but the DB pointer, which is what is declared here. After
 * a write fails with no space, RocksDB keeps a background error and refuses
 * every later write until Resume clears it (it flushes the memtables, so it
 * fails again while the disk is still full).
 */
#include <cstdlib>
#include <cstring>
#include <memory>

#include <rocksdb/c.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>

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
