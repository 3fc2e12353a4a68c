// CacheIndex: lookup, scans, listing, usage and removal of entries
// (cache_index.h). Eviction and checkpoint rotation are in
// cache_eviction.cc, the reservation and publication of fills in
// cache_reservation.cc.
#include "storage/cache_index.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

using cache_internal::DataName;
using cache_internal::ErrnoStatus;
using cache_internal::LeaseName;
using cache_internal::MetaName;
using cache_internal::MtimeNs;
using cache_internal::ReadSmallAt;
using cache_internal::TryFlock;

namespace {

// The names in the directory `directory` (a descriptor; not consumed), "."
// and ".." left out.
Status ListNamesAt(int directory, const std::string& shown, std::vector<std::string>* names) {
  names->clear();
  int dup = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (listing == nullptr) {
    int error = errno;
    if (dup >= 0) ::close(dup);
    return ErrnoStatus(error, shown);
  }
  while (struct dirent* item = ::readdir(listing)) {
    if (std::strcmp(item->d_name, ".") != 0 && std::strcmp(item->d_name, "..") != 0) {
      names->push_back(item->d_name);
    }
  }
  ::closedir(listing);
  return Status::OK();
}

}  // namespace

CacheIndex::CacheIndex(std::shared_ptr<const CacheLayout> layout)
    : layout_(std::move(layout)), counters_(layout_) {}

Status CacheIndex::RemoveLeftovers() const {
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  return ScanLocked(&entries, &fills, &fill_bytes);
}

bool CacheIndex::HasEntry(const CacheSource& source) const {
  struct stat st;
  return ::fstatat(layout_->entries_fd(), DataName(CacheKeyFor(source)).c_str(), &st,
                   AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode);
}

bool CacheIndex::IsLeased(const std::string& key) const {
  LockFd fd;  // a probe: any lock it takes is let go before the close
  fd.reset(
      ::openat(layout_->entries_fd(), LeaseName(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return false;
  return !TryFlock(fd.get(), LOCK_EX);
}

Status CacheIndex::ReadMeta(const std::string& key, CacheSource* recorded) const {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadSmallAt(layout_->entries_fd(), MetaName(key),
                                      layout_->DataPathFor(key) + " meta", &text));
  return ParseEntryMeta(text, MetaName(key), recorded);
}

Status CacheIndex::ScanLocked(std::vector<CacheEntryInfo>* entries, uint64_t* fill_count,
                              uint64_t* fill_bytes) const {
  entries->clear();
  GPUFEED_RETURN_IF_ERROR(ScanFillsLocked(fill_count, fill_bytes));
  return ScanEntriesLocked(entries);
}

Status CacheIndex::ScanFillsLocked(uint64_t* fill_count, uint64_t* fill_bytes) const {
  *fill_count = 0;
  *fill_bytes = 0;
  std::vector<std::string> names;
  GPUFEED_RETURN_IF_ERROR(ListNamesAt(layout_->tmp_fd(), JoinPath(layout_->path(), "tmp"), &names));
  for (const std::string& name : names) {
    // "<key>.<pid>.fill": a fill whose lock nobody holds is a crash leftover.
    size_t dot = name.rfind('.', name.size() >= 6 ? name.size() - 6 : 0);
    std::string key = dot == std::string::npos ? name : name.substr(0, dot);
    LockFd lock;
    bool alive = false;
    if (EndsWith(name, ".fill") && layout_->OpenFillLock(key, &lock).ok()) {
      alive = !TryFlock(lock.get(), LOCK_EX);
    }
    struct stat st;
    if (alive) {
      if (::fstatat(layout_->tmp_fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        *fill_count += 1;
        *fill_bytes += static_cast<uint64_t>(st.st_size);
      }
      continue;
    }
    Log().info("cache: removing {}, left by an interrupted fill", layout_->TmpPath(name));
    ::unlinkat(layout_->tmp_fd(), name.c_str(), 0);
  }
  return Status::OK();
}

Status CacheIndex::ScanEntriesLocked(std::vector<CacheEntryInfo>* entries) const {
  entries->clear();
  const int directory = layout_->entries_fd();
  std::vector<std::string> names;
  GPUFEED_RETURN_IF_ERROR(ListNamesAt(directory, JoinPath(layout_->path(), "entries"), &names));
  std::sort(names.begin(), names.end());
  auto has = [&](const std::string& name) {
    return std::binary_search(names.begin(), names.end(), name);
  };
  // Data with its meta is an entry; anything unpaired is removed.
  for (const std::string& name : names) {
    if (name.find(".tmp.") != std::string::npos) {
      ::unlinkat(directory, name.c_str(), 0);  // a crashed metadata write
      continue;
    }
    if (EndsWith(name, ".meta")) {
      std::string key = name.substr(0, name.size() - 5);
      if (!has(DataName(key))) {
        // Published meta whose rename of the data never happened.
        ::unlinkat(directory, name.c_str(), 0);
        ::unlinkat(directory, LeaseName(key).c_str(), 0);
      }
      continue;
    }
    if (!EndsWith(name, ".data")) continue;
    CacheEntryInfo info;
    info.key = name.substr(0, name.size() - 5);
    std::string text;
    struct stat st;
    if (!has(MetaName(info.key)) ||
        !ReadSmallAt(directory, MetaName(info.key), layout_->EntriesPath(MetaName(info.key)), &text)
             .ok() ||
        !ParseEntryMeta(text, MetaName(info.key), &info.source).ok() ||
        ::fstatat(directory, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      Log().warn("cache: removing {}: no valid metadata beside it", layout_->EntriesPath(name));
      bool removed = false;
      (void)RemoveLocked(info.key, &removed);  // best effort: the next scan tries again
      continue;
    }
    info.bytes = static_cast<uint64_t>(st.st_size);
    struct stat lease;
    info.last_use_ns =
        ::fstatat(directory, LeaseName(info.key).c_str(), &lease, AT_SYMLINK_NOFOLLOW) == 0
            ? MtimeNs(lease)
            : MtimeNs(st);
    entries->push_back(std::move(info));
  }
  return Status::OK();
}

Status CacheIndex::List(std::vector<CacheEntryInfo>* entries, uint64_t* fills_in_progress,
                        uint64_t* fill_bytes_in_progress) const {
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
  return ScanLocked(entries, fills_in_progress, fill_bytes_in_progress);
}

Status CacheIndex::Usage(uint64_t* bytes) const {
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(List(&entries, &fills, &fill_bytes));
  *bytes = fill_bytes;
  for (const CacheEntryInfo& entry : entries) *bytes += entry.bytes;
  return Status::OK();
}

Status CacheIndex::DefaultCapacity(uint64_t* capacity) const {
  uint64_t used = 0;
  GPUFEED_RETURN_IF_ERROR(Usage(&used));
  struct statvfs fs;
  if (::fstatvfs(layout_->top_fd(), &fs) != 0) return ErrnoStatus(errno, layout_->path());
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  *capacity = static_cast<uint64_t>(0.9 * static_cast<double>(free_bytes + used));
  return Status::OK();
}

Status CacheIndex::RemoveLocked(const std::string& key, bool* removed) const {
  *removed = false;
  const int directory = layout_->entries_fd();
  LockFd lease;  // held exclusively while the entry is removed
  lease.reset(::openat(directory, LeaseName(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (lease.valid() && !TryFlock(lease.get(), LOCK_EX)) return Status::OK();  // in use
  // The data first: without it the entry is gone, whatever else remains.
  if (::unlinkat(directory, DataName(key).c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, layout_->DataPathFor(key));
  }
  ::unlinkat(directory, MetaName(key).c_str(), 0);
  ::unlinkat(directory, LeaseName(key).c_str(), 0);
  *removed = true;
  return Status::OK();
}

Status CacheIndex::Remove(const std::string& key, bool* removed) const {
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
  return RemoveLocked(key, removed);
}

}  // namespace gpufeed
