// CacheReader: leases on complete entries (cache_reader.h).
#include "storage/cache_reader.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "util/logging.h"

namespace gpufeed {

using cache_internal::DataName;
using cache_internal::ErrnoStatus;
using cache_internal::LeaseName;
using cache_internal::MtimeNs;
using cache_internal::TryFlock;

bool CacheReader::MatchesRecord(const CacheSource& source, const std::string& key, int data,
                                const struct stat& st, CacheLease* lease) const {
  // A bundle's size and mtime are known from its meta only (its members
  // are not stat'ed); a file's from the source as opened.
  uint64_t expected_size = source.size;
  int64_t expected_mtime_ns = source.mtime_ns;
  if (source.bundle()) {
    CacheSource recorded;
    if (!index_->ReadMeta(key, &recorded).ok()) return false;
    expected_size = recorded.size;
    expected_mtime_ns = recorded.mtime_ns;
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != expected_size ||
      MtimeNs(st) != expected_mtime_ns) {
    return false;
  }
  if (!source.bundle()) return true;
  Status trailer = ReadBundleTrailer(data, expected_size, source.members.size(),
                                     index_->layout().DataPathFor(key), &lease->member_offsets);
  if (!trailer.ok()) {
    Log().warn("cache: {}", trailer.ToString());
    return false;
  }
  return true;
}

Status CacheReader::OpenEntry(const CacheSource& source, CacheLease* lease) const {
  const CacheLayout& layout = index_->layout();
  const int entries = layout.entries_fd();
  std::string key = CacheKeyFor(source);
  std::string data_path = layout.DataPathFor(key);
  UniqueFd lease_fd(::openat(entries, LeaseName(key).c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!lease_fd.valid()) return Status::NotFound(data_path);
  // Without waiting: LOCK_EX held means it is being evicted right now.
  if (!TryFlock(lease_fd.get(), LOCK_SH)) return Status::NotFound(data_path + " (being evicted)");
  // The lease file may have been replaced between our open and our lock.
  struct stat held, current;
  if (::fstat(lease_fd.get(), &held) != 0 ||
      ::fstatat(entries, LeaseName(key).c_str(), &current, AT_SYMLINK_NOFOLLOW) != 0 ||
      held.st_ino != current.st_ino || held.st_dev != current.st_dev) {
    return Status::NotFound(data_path + " (replaced)");
  }
  UniqueFd data(::openat(entries, DataName(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!data.valid()) return Status::NotFound(data_path);
  struct stat st;
  if (::fstat(data.get(), &st) != 0) return ErrnoStatus(errno, data_path);
  if (!MatchesRecord(source, key, data.get(), st, lease)) {
    Log().warn(
        "cache: {} was changed on disk (size {} / mtime / trailer differ from {}); "
        "removing it, it will be copied again",
        data_path, static_cast<uint64_t>(st.st_size), source.path);
    data.reset();
    lease_fd.reset();  // our shared lock would keep the removal out
    bool removed = false;
    (void)index_->Remove(key,
                         &removed);  // best effort: a reader may hold it; the next scan tries again
    return Status::NotFound(data_path + " (changed on disk)");
  }
  // The lease file's mtime is the entry's last use, for LRU.
  ::futimens(lease_fd.get(), nullptr);
  lease->data = std::move(data);
  lease->lease = std::move(lease_fd);
  lease->path = data_path;
  return Status::OK();
}

}  // namespace gpufeed
