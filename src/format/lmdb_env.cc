#include "format/lmdb_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>


#include <cerrno>

#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

Status LmdbStatus(int rc, const std::string& context) {
  if (rc == MDB_SUCCESS) return Status::OK();
  if (rc > 0) return Status::FromErrno(rc, context);  // LMDB passes errno values through
  if (rc == MDB_NOTFOUND) return Status::NotFound(context + ": " + mdb_strerror(rc));
  if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND ||
      rc == MDB_VERSION_MISMATCH) {
    return Status::Corruption(context + ": " + mdb_strerror(rc));
  }
  return Status::IOError(context + ": " + mdb_strerror(rc));
}

LmdbReader::~LmdbReader() {
  for (MDB_txn* txn : idle_transactions_) mdb_txn_abort(txn);
  if (env_ != nullptr) mdb_env_close(env_);
}

Status LmdbReader::Open(const std::string& directory) {
  directory_ = directory;
  std::string data_file = JoinPath(directory, "data.mdb");
  if (!PathExists(data_file)) {
    if (!PathExists(directory)) return Status::NotFound(directory + ": no such LMDB directory");
    return Status::NotFound(data_file + ": not an LMDB environment (no data.mdb)");
  }
  // MDB_NORDAHEAD: samples are read in random order; kernel read-ahead
  // would only pull in pages nobody asked for.
  const unsigned base_flags = MDB_RDONLY | MDB_NOTLS | MDB_NORDAHEAD;
  int rc = MDB_SUCCESS;
  for (unsigned flags : {base_flags, base_flags | MDB_NOLOCK}) {
    if (env_ != nullptr) {
      mdb_env_close(env_);
      env_ = nullptr;
    }
    rc = mdb_env_create(&env_);
    if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory + ": mdb_env_create");
    mdb_env_set_maxreaders(env_, 1024);
    mdb_env_set_maxdbs(env_, 0);
    rc = mdb_env_open(env_, directory.c_str(), flags, 0644);
    if (rc == MDB_SUCCESS) {
      if (flags & MDB_NOLOCK) {
        Log().info("{}: the LMDB lock file cannot be used (read-only directory?); "
                   "reading without locks (MDB_NOLOCK)", directory);
      }
      break;
    }
    // EACCES/EROFS/EPERM on lock.mdb: retry without the lock file.
    if (!(rc == EACCES || rc == EROFS || rc == EPERM) || (flags & MDB_NOLOCK)) break;
  }
  if (rc != MDB_SUCCESS) {
    mdb_env_close(env_);
    env_ = nullptr;
    return LmdbStatus(rc, directory + ": mdb_env_open");
  }
  MDB_txn* txn = nullptr;
  GPUFEED_RETURN_IF_ERROR(BeginRead(&txn));
  rc = mdb_dbi_open(txn, nullptr, 0, &dbi_);
  EndRead(txn);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory + ": mdb_dbi_open");
  return Status::OK();
}

Status LmdbReader::BeginRead(MDB_txn** txn) const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!idle_transactions_.empty()) {
      *txn = idle_transactions_.back();
      idle_transactions_.pop_back();
      return Status::OK();
    }
  }
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, txn);
  return LmdbStatus(rc, directory_ + ": mdb_txn_begin");
}

void LmdbReader::EndRead(MDB_txn* txn) const {
  // The environment is never written while gpufeed reads it, so a read
  // transaction can stay open and be reused: its snapshot never goes stale.
  std::lock_guard<std::mutex> lock(pool_mutex_);
  idle_transactions_.push_back(txn);
}

Status LmdbReader::Count(uint64_t* entries) const {
  MDB_stat stat;
  int rc = mdb_env_stat(env_, &stat);
  if (rc != MDB_SUCCESS) return LmdbStatus(rc, directory_ + ": mdb_env_stat");
  *entries = stat.ms_entries;
  return Status::OK();
}

Status LmdbReader::FirstKey(std::string* key) const {
  key->clear();
  return ForEach([&](std::string_view first, std::string_view) {
    key->assign(first);
    return false;
  });
}

Status MapBaseOf(const void* inside, const std::string& what, uintptr_t* base) {
  // /proc files report a size of 0: read until the end.
  std::string maps;
  {
    UniqueFd fd(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "/proc/self/maps");
    char chunk[65536];
    while (true) {
      ssize_t got = ::read(fd.get(), chunk, sizeof(chunk));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return Status::FromErrno(errno, "/proc/self/maps");
      if (got == 0) break;
      maps.append(chunk, static_cast<size_t>(got));
    }
  }
  uintptr_t address = reinterpret_cast<uintptr_t>(inside);
  size_t position = 0;
  while (position < maps.size()) {
    size_t end = maps.find('\n', position);
    if (end == std::string::npos) end = maps.size();
    unsigned long long start = 0, stop = 0, offset = 0;
    if (std::sscanf(maps.c_str() + position, "%llx-%llx %*s %llx", &start, &stop, &offset) == 3 &&
        address >= start && address < stop) {
      *base = static_cast<uintptr_t>(start - offset);
      return Status::OK();
    }
    position = end + 1;
  }
  return Status::Internal(what + ": the memory map of its values is not in /proc/self/maps");
}

}  // namespace gpufeed
