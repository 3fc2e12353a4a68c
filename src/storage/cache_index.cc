// CacheDirectory's index: entries/ and what may change it. Keeps the
// invariants that every create, rename and unlink in entries/ happens under
// the index lock (`lock`, never held during a copy); that an entry is a
// K.data with a valid K.meta beside it (a scan removes anything unpaired and
// every tmp/ file whose fill lock nobody holds); and that a reader holds
// K.lease with LOCK_SH while it reads, so removal (LOCK_EX|LOCK_NB) skips
// an entry in use.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "storage/cache_directory.h"
#include "storage/cache_directory_internal.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

using cache_internal::DataName;
using cache_internal::ErrnoStatus;
using cache_internal::Flock;
using cache_internal::LeaseName;
using cache_internal::MetaName;
using cache_internal::MtimeNs;
using cache_internal::ReadSmallAt;
using cache_internal::TryFlock;
using cache_internal::WriteSmallAtomicallyAt;

namespace {

Status ParseMeta(const std::string& text, const std::string& shown, CacheSource* source) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("source") || !json["source"].is_string() ||
      !json.contains("size") || !json["size"].is_number_unsigned() || !json.contains("mtime_ns") ||
      !json["mtime_ns"].is_number_integer()) {
    return Status::Corruption(shown + ": malformed cache entry metadata");
  }
  source->path = json["source"].get<std::string>();
  source->size = json["size"].get<uint64_t>();
  source->mtime_ns = json["mtime_ns"].get<int64_t>();
  source->xxh64 = json.value("xxh64", std::string());
  source->dataset = json.value("dataset", std::string());
  source->group = json.value("group", std::string());
  if (!ParseCachePolicy(json.value("policy", std::string("train")), &source->policy).ok()) {
    source->policy = CachePolicy::kTrain;
  }
  return Status::OK();
}

}  // namespace

Status CacheDirectory::LockIndex(UniqueFd* held) {
  std::string shown = JoinPath(path_, "lock");
  int fd = ::openat(dir_fd_.get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, FileMode());
  if (fd < 0) return ErrnoStatus(errno, shown);
  held->reset(fd);
  return Flock(fd, LOCK_EX, shown);
}

std::string CacheDirectory::DataPathFor(const std::string& key) const {
  return JoinPath(JoinPath(path_, "entries"), DataName(key));
}

bool CacheDirectory::HasEntry(const CacheSource& source) const {
  struct stat st;
  return ::fstatat(entries_fd_.get(), DataName(CacheKeyFor(source)).c_str(), &st,
                   AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode);
}

bool CacheDirectory::IsLeased(const std::string& key) const {
  UniqueFd fd(::openat(entries_fd_.get(), LeaseName(key).c_str(),
                       O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return false;
  return !TryFlock(fd.get(), LOCK_EX);
}

Status CacheDirectory::ScanLocked(std::vector<CacheEntryInfo>* entries, uint64_t* fill_count,
                                  uint64_t* fill_bytes) {
  entries->clear();
  *fill_count = 0;
  *fill_bytes = 0;
  // tmp/: a fill whose lock nobody holds is a crash leftover.
  {
    int dup = ::openat(tmp_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* listing = dup >= 0 ? ::fdopendir(dup) : nullptr;
    if (listing == nullptr) return ErrnoStatus(errno, JoinPath(path_, "tmp"));
    std::vector<std::string> names;
    while (struct dirent* item = ::readdir(listing)) {
      if (std::strcmp(item->d_name, ".") != 0 && std::strcmp(item->d_name, "..") != 0) {
        names.push_back(item->d_name);
      }
    }
    ::closedir(listing);
    for (const std::string& name : names) {
      // "<key>.<pid>.fill"
      size_t dot = name.rfind('.', name.size() >= 6 ? name.size() - 6 : 0);
      std::string key = dot == std::string::npos ? name : name.substr(0, dot);
      UniqueFd lock;
      bool alive = false;
      if (EndsWith(name, ".fill") && OpenFillLock(key, &lock).ok()) {
        alive = !TryFlock(lock.get(), LOCK_EX);
      }
      struct stat st;
      if (alive) {
        if (::fstatat(tmp_fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
          *fill_count += 1;
          *fill_bytes += static_cast<uint64_t>(st.st_size);
        }
        continue;
      }
      Log().info("cache: removing {}, left by an interrupted fill",
                 JoinPath(JoinPath(path_, "tmp"), name));
      ::unlinkat(tmp_fd_.get(), name.c_str(), 0);
    }
  }
  // entries/: data with its meta is an entry; anything unpaired is removed.
  int dup = ::openat(entries_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = dup >= 0 ? ::fdopendir(dup) : nullptr;
  if (listing == nullptr) return ErrnoStatus(errno, JoinPath(path_, "entries"));
  std::vector<std::string> names;
  while (struct dirent* item = ::readdir(listing)) {
    if (std::strcmp(item->d_name, ".") != 0 && std::strcmp(item->d_name, "..") != 0) {
      names.push_back(item->d_name);
    }
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  auto has = [&](const std::string& name) {
    return std::binary_search(names.begin(), names.end(), name);
  };
  std::string entries_path = JoinPath(path_, "entries");
  for (const std::string& name : names) {
    if (name.find(".tmp.") != std::string::npos) {
      ::unlinkat(entries_fd_.get(), name.c_str(), 0);  // a crashed metadata write
      continue;
    }
    if (EndsWith(name, ".meta")) {
      std::string key = name.substr(0, name.size() - 5);
      if (!has(DataName(key))) {
        // Published meta whose rename of the data never happened.
        ::unlinkat(entries_fd_.get(), name.c_str(), 0);
        ::unlinkat(entries_fd_.get(), LeaseName(key).c_str(), 0);
      }
      continue;
    }
    if (!EndsWith(name, ".data")) continue;
    std::string key = name.substr(0, name.size() - 5);
    CacheEntryInfo info;
    info.key = key;
    std::string text;
    struct stat st;
    if (!has(MetaName(key)) ||
        !ReadSmallAt(entries_fd_.get(), MetaName(key), JoinPath(entries_path, MetaName(key)), &text)
             .ok() ||
        !ParseMeta(text, MetaName(key), &info.source).ok() ||
        ::fstatat(entries_fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      Log().warn("cache: removing {}: no valid metadata beside it", JoinPath(entries_path, name));
      bool removed = false;
      (void)RemoveLocked(key, &removed);  // best effort: the next scan tries again
      continue;
    }
    info.bytes = static_cast<uint64_t>(st.st_size);
    struct stat lease;
    info.last_use_ns = ::fstatat(entries_fd_.get(), LeaseName(key).c_str(), &lease,
                                 AT_SYMLINK_NOFOLLOW) == 0
                           ? MtimeNs(lease)
                           : MtimeNs(st);
    entries->push_back(std::move(info));
  }
  return Status::OK();
}

Status CacheDirectory::List(std::vector<CacheEntryInfo>* entries, uint64_t* fills_in_progress,
                            uint64_t* fill_bytes_in_progress) {
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  return ScanLocked(entries, fills_in_progress, fill_bytes_in_progress);
}

Status CacheDirectory::Usage(uint64_t* bytes) {
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(List(&entries, &fills, &fill_bytes));
  *bytes = fill_bytes;
  for (const CacheEntryInfo& entry : entries) *bytes += entry.bytes;
  return Status::OK();
}

Status CacheDirectory::DefaultCapacity(uint64_t* capacity) {
  uint64_t used = 0;
  GPUFEED_RETURN_IF_ERROR(Usage(&used));
  struct statvfs fs;
  if (::fstatvfs(dir_fd_.get(), &fs) != 0) return ErrnoStatus(errno, path_);
  uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  *capacity = static_cast<uint64_t>(0.9 * static_cast<double>(free_bytes + used));
  return Status::OK();
}

Status CacheDirectory::RemoveLocked(const std::string& key, bool* removed) {
  *removed = false;
  UniqueFd lease(::openat(entries_fd_.get(), LeaseName(key).c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (lease.valid() && !TryFlock(lease.get(), LOCK_EX)) return Status::OK();  // in use
  // The data first: without it the entry is gone, whatever else remains.
  if (::unlinkat(entries_fd_.get(), DataName(key).c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, DataPathFor(key));
  }
  ::unlinkat(entries_fd_.get(), MetaName(key).c_str(), 0);
  ::unlinkat(entries_fd_.get(), LeaseName(key).c_str(), 0);
  *removed = true;
  return Status::OK();
}

Status CacheDirectory::Remove(const std::string& key, bool* removed) {
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  return RemoveLocked(key, removed);
}

Status CacheDirectory::WriteMetaLocked(const std::string& key, const std::string& json) {
  return WriteSmallAtomicallyAt(entries_fd_.get(), MetaName(key),
                                JoinPath(JoinPath(path_, "entries"), MetaName(key)), json,
                                FileMode());
}

Status ReadBundleTrailer(int fd, uint64_t file_size, size_t count, const std::string& shown,
                         std::vector<uint64_t>* offsets) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption(shown + ": not a bundle copy of " + std::to_string(count) +
                              " members (" + why + ")");
  };
  uint64_t trailer = 8 * (2 * static_cast<uint64_t>(count) + 1) + 16;
  if (file_size < trailer) return bad("shorter than its trailer");
  std::string bytes(static_cast<size_t>(trailer), '\0');
  size_t got = 0;
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd, bytes.data(), bytes.size(), file_size - trailer, shown,
                                    &got));
  if (got != bytes.size()) return bad("short read");
  auto word = [&](size_t index) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) {
      value = (value << 8) | static_cast<unsigned char>(bytes[8 * index + static_cast<size_t>(i)]);
    }
    return value;
  };
  if (bytes.compare(bytes.size() - 8, 8, "GFBUNDL1") != 0) return bad("no magic");
  if (word(2 * count + 1) != count) return bad("member count differs");
  offsets->resize(count + 1);
  for (size_t i = 0; i <= count; ++i) {
    (*offsets)[i] = word(i);
    if (i == 0 ? (*offsets)[0] != 0 : (*offsets)[i] < (*offsets)[i - 1]) {
      return bad("offsets out of order");
    }
  }
  if ((*offsets)[count] != file_size - trailer) return bad("offsets do not end at the trailer");
  return Status::OK();
}

Status CacheDirectory::OpenEntry(const CacheSource& source, CacheLease* lease) {
  std::string key = CacheKeyFor(source);
  std::string data_path = DataPathFor(key);
  UniqueFd lease_fd(::openat(entries_fd_.get(), LeaseName(key).c_str(),
                             O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!lease_fd.valid()) return Status::NotFound(data_path);
  // Without waiting: LOCK_EX held means it is being evicted right now.
  if (!TryFlock(lease_fd.get(), LOCK_SH)) return Status::NotFound(data_path + " (being evicted)");
  // The lease file may have been replaced between our open and our lock.
  struct stat held, current;
  if (::fstat(lease_fd.get(), &held) != 0 ||
      ::fstatat(entries_fd_.get(), LeaseName(key).c_str(), &current, AT_SYMLINK_NOFOLLOW) != 0 ||
      held.st_ino != current.st_ino || held.st_dev != current.st_dev) {
    return Status::NotFound(data_path + " (replaced)");
  }
  UniqueFd data(::openat(entries_fd_.get(), DataName(key).c_str(),
                         O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!data.valid()) return Status::NotFound(data_path);
  struct stat st;
  if (::fstat(data.get(), &st) != 0) return ErrnoStatus(errno, data_path);
  // A bundle's size and mtime are known from its meta only (its members
  // are not stat'ed); a file's from the source as opened.
  uint64_t expected_size = source.size;
  int64_t expected_mtime_ns = source.mtime_ns;
  bool unreadable_meta = false;
  if (source.bundle()) {
    std::string text;
    CacheSource recorded;
    if (ReadSmallAt(entries_fd_.get(), MetaName(key), DataPathFor(key) + " meta", &text).ok() &&
        ParseMeta(text, MetaName(key), &recorded).ok()) {
      expected_size = recorded.size;
      expected_mtime_ns = recorded.mtime_ns;
    } else {
      unreadable_meta = true;
    }
  }
  bool changed = unreadable_meta || !S_ISREG(st.st_mode) ||
                 static_cast<uint64_t>(st.st_size) != expected_size ||
                 MtimeNs(st) != expected_mtime_ns;
  if (!changed && source.bundle()) {
    Status trailer = ReadBundleTrailer(data.get(), expected_size, source.members.size(),
                                       data_path, &lease->member_offsets);
    if (!trailer.ok()) {
      Log().warn("cache: {}", trailer.ToString());
      changed = true;
    }
  }
  if (changed) {
    Log().warn("cache: {} was changed on disk (size {} / mtime / trailer differ from {}); "
               "removing it, it will be copied again",
               data_path, static_cast<uint64_t>(st.st_size), source.path);
    data.reset();
    lease_fd.reset();  // our shared lock would keep the removal out
    bool removed = false;
    (void)Remove(key, &removed);  // best effort: a reader may hold it; the next scan tries again
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
