// RAII handles for LMDB and the read-only access gpufeed makes at open:
// MDB_RDONLY | MDB_NOTLS (a read transaction is not tied to a thread),
// transactions from a small pool, cursor walks for the keys and where the
// values lie in data.mdb. Datasets close the environment once they have
// walked it: samples are range reads of data.mdb, never mdb_get.
#ifndef GPUFEED_FORMAT_LMDB_ENV_H_
#define GPUFEED_FORMAT_LMDB_ENV_H_

#include <lmdb.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

// Converts an LMDB return code into a Status naming `context`.
Status LmdbStatus(int rc, const std::string& context);

class LmdbReader {
 public:
  LmdbReader() = default;
  ~LmdbReader();
  LmdbReader(const LmdbReader&) = delete;
  LmdbReader& operator=(const LmdbReader&) = delete;

  // Opens the environment in `directory` read-only. Where the lock file
  // cannot be created or opened (a read-only directory), opens again with
  // MDB_NOLOCK and logs it once: safe because nobody writes a packed dataset.
  Status Open(const std::string& directory);

  // Calls visit(key, value) for every entry in key order (one cursor walk;
  // used at open for Caffe key lists and by verify, never per sample).
  // Stops early when visit returns false.
  template <typename Visit>
  Status ForEach(Visit&& visit) const;

  // Calls visit(key, offset, length) for every entry in key order, where
  // [offset, offset + length) is where the value lies in data.mdb: a cursor
  // walk that touches the branch and leaf pages only, never the values
  // (their pointers into the map give their file offsets). Used at open, so
  // that reads afterwards are plain range reads of data.mdb (through the
  // store, the read engine and the node cache) instead of page faults.
  template <typename Visit>
  Status ForEachLocation(Visit&& visit) const;

  // Number of entries (mdb_env_stat), and the first key (empty if none).
  Status Count(uint64_t* entries) const;
  Status FirstKey(std::string* key) const;

  const std::string& directory() const { return directory_; }

 private:
  Status BeginRead(MDB_txn** txn) const;
  void EndRead(MDB_txn* txn) const;

  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
  std::string directory_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<MDB_txn*> idle_transactions_;
};

template <typename Visit>
Status LmdbReader::ForEach(Visit&& visit) const {
  MDB_txn* txn = nullptr;
  GPUFEED_RETURN_IF_ERROR(BeginRead(&txn));
  MDB_cursor* cursor = nullptr;
  int rc = mdb_cursor_open(txn, dbi_, &cursor);
  if (rc != MDB_SUCCESS) {
    EndRead(txn);
    return LmdbStatus(rc, directory_ + ": mdb_cursor_open");
  }
  MDB_val key, value;
  rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST);
  while (rc == MDB_SUCCESS) {
    if (!visit(std::string_view(static_cast<const char*>(key.mv_data), key.mv_size),
               std::string_view(static_cast<const char*>(value.mv_data), value.mv_size))) {
      break;
    }
    rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT);
  }
  mdb_cursor_close(cursor);
  EndRead(txn);
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND) return LmdbStatus(rc, directory_ + ": cursor walk");
  return Status::OK();
}

// The address at which the file mapped around `inside` starts (its offset
// 0), from /proc/self/maps: LMDB maps data.mdb from offset 0, and a value's
// pointer minus this base is its offset in the file.
Status MapBaseOf(const void* inside, const std::string& what, uintptr_t* base);

template <typename Visit>
Status LmdbReader::ForEachLocation(Visit&& visit) const {
  uintptr_t base = 0;
  bool have_base = false;
  Status status;
  GPUFEED_RETURN_IF_ERROR(ForEach([&](std::string_view key, std::string_view value) {
    uintptr_t at = reinterpret_cast<uintptr_t>(value.data());
    if (!have_base) {
      status = MapBaseOf(value.data(), directory_ + "/data.mdb", &base);
      if (!status.ok()) return false;
      have_base = true;
    }
    if (at < base) {
      status = Status::Corruption(directory_ + "/data.mdb: the value of key \"" +
                                  std::string(key.substr(0, 40)) + "\" lies outside the map");
      return false;
    }
    visit(key, static_cast<uint64_t>(at - base), static_cast<uint64_t>(value.size()));
    return true;
  }));
  return status;
}

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_LMDB_ENV_H_
