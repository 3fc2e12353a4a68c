#include "storage/cache_directory.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <dirent.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "storage/source_throttle.h"
#include "storage/store.h"
#include "io/read_engine.h"
#include "util/checksum.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// Large sequential reads for the copy, a few in flight: the source is a
// parallel filesystem that serves big requests best.
constexpr size_t kFillChunk = 4 << 20;
constexpr size_t kFillChunksInFlight = 4;

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

Status ErrnoStatus(int error_number, const std::string& what) {
  return Status::FromErrno(error_number, what);
}

// Holds an flock for as long as it lives (the descriptor closes with it).
Status Flock(int fd, int operation, const std::string& what) {
  while (::flock(fd, operation) != 0) {
    if (errno == EINTR) continue;
    return ErrnoStatus(errno, what);
  }
  return Status::OK();
}

bool TryFlock(int fd, int operation) {
  while (::flock(fd, operation | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    return false;
  }
  return true;
}

// Opens (creating when asked) a subdirectory with O_NOFOLLOW and checks it
// like the top directory: a planted symlink or foreign directory is refused.
Status OpenSubdirectory(int parent, const std::string& parent_path, const char* name, mode_t mode,
                        gid_t gid, bool create, UniqueFd* out, bool* unsafe);

// Who may use a cache directory: owned by this user and writable by nobody
// else; with a group, owned by that group and not writable by others.
Status CheckDirectoryOwnership(const struct stat& st, const std::string& path, bool group_mode,
                               gid_t gid) {
  if (!S_ISDIR(st.st_mode)) {
    return Status::PermissionDenied(path + ": the cache path is not a directory");
  }
  uid_t me = ::geteuid();
  if (st.st_mode & S_IWOTH) {
    return Status::PermissionDenied(
        path + ": cache directory is writable by other users (mode " +
        [&] {
          char text[8];
          std::snprintf(text, sizeof text, "%04o", st.st_mode & 07777);
          return std::string(text);
        }() +
        "); any local user could plant or alter entries. Use a directory of your own "
        "(gpufeed creates it 0700), or cache_group= for a team");
  }
  if (group_mode) {
    if (st.st_gid != gid) {
      return Status::PermissionDenied(path + ": cache directory belongs to group id " +
                                      std::to_string(st.st_gid) + ", not to cache_group (gid " +
                                      std::to_string(gid) + ")");
    }
    return Status::OK();
  }
  if (st.st_uid != me) {
    return Status::PermissionDenied(
        path + ": cache directory is owned by uid " + std::to_string(st.st_uid) +
        ", not by this user (uid " + std::to_string(me) +
        "): its owner could plant or alter entries. Use a directory of your own, or cache_group= "
        "for a directory shared by a team");
  }
  if (st.st_mode & S_IWGRP) {
    return Status::PermissionDenied(path + ": cache directory is group-writable but no "
                                           "cache_group= was given; pass cache_group= to share "
                                           "it with a team, or chmod g-w it");
  }
  return Status::OK();
}

Status OpenSubdirectory(int parent, const std::string& parent_path, const char* name, mode_t mode,
                        gid_t gid, bool create, UniqueFd* out, bool* unsafe) {
  std::string path = JoinPath(parent_path, name);
  if (create && ::mkdirat(parent, name, mode) == 0) {
    // mkdir's mode is filtered by the umask: set it exactly.
    UniqueFd made(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made.valid()) return ErrnoStatus(errno, path);
    if (gid != static_cast<gid_t>(-1) && ::fchown(made.get(), static_cast<uid_t>(-1), gid) != 0) {
      return ErrnoStatus(errno, path + " (chown to cache_group)");
    }
    if (::fchmod(made.get(), mode) != 0) return ErrnoStatus(errno, path);
  } else if (create && errno != EEXIST) {
    return ErrnoStatus(errno, path);
  }
  int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      *unsafe = true;
      return Status::PermissionDenied(path + ": expected a directory of the cache, found a "
                                             "symlink or file; refusing to follow it");
    }
    return ErrnoStatus(errno, path);
  }
  out->reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, path);
  Status checked = CheckDirectoryOwnership(st, path, gid != static_cast<gid_t>(-1), gid);
  if (!checked.ok()) *unsafe = true;
  return checked;
}

std::string Hex16(uint64_t value) { return Xxh64Hex(value); }

// The part of a file name kept in a key, for humans reading `ls`.
std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
    out += plain ? c : '_';
    if (out.size() >= 64) break;
  }
  return out;
}

std::string LeaseName(const std::string& key) { return key + ".lease"; }
std::string DataName(const std::string& key) { return key + ".data"; }
std::string MetaName(const std::string& key) { return key + ".meta"; }
std::string FillLockName(const std::string& key) { return key + ".fill"; }

// Reads a small file relative to a directory descriptor, without following
// a symlink.
Status ReadSmallAt(int directory, const std::string& name, const std::string& shown,
                   std::string* text) {
  UniqueFd fd(::openat(directory, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, shown);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, shown);
  if (!S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
    return Status::Corruption(shown + ": not a small regular file");
  }
  text->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), text->data(), text->size(), 0, shown, &done));
  text->resize(done);
  return Status::OK();
}

// Writes `text` as `name` in `directory` atomically: O_EXCL temp file,
// fsync, rename, directory fsync. REQUIRES: the index lock (one writer).
Status WriteSmallAtomicallyAt(int directory, const std::string& name, const std::string& shown,
                              const std::string& text, int mode) {
  std::string temp = name + ".tmp." + std::to_string(::getpid());
  ::unlinkat(directory, temp.c_str(), 0);  // a leftover of this pid's crashed predecessor
  UniqueFd fd(::openat(directory, temp.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus(errno, shown);
  Status status = WriteFull(fd.get(), text.data(), text.size(), shown);
  if (status.ok() && ::fsync(fd.get()) != 0) status = ErrnoStatus(errno, shown);
  if (status.ok() && ::renameat(directory, temp.c_str(), directory, name.c_str()) != 0) {
    status = ErrnoStatus(errno, shown);
  }
  if (!status.ok()) {
    ::unlinkat(directory, temp.c_str(), 0);
    return status;
  }
  ::fsync(directory);
  return Status::OK();
}

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

// One read engine for all fills of the process: large sequential reads, a
// few in flight, small buffers (the fill is a background task).
std::shared_ptr<ReadEngine> FillEngine() {
  static std::mutex mutex;
  static std::shared_ptr<ReadEngine>* engine = new std::shared_ptr<ReadEngine>();
  static pid_t created_in = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (created_in != ::getpid()) {
    // A forked child has the parent's engine object but not its threads:
    // leave that one alone (destroying it would wait for threads that do
    // not exist here) and make one of its own.
    if (created_in != 0) engine = new std::shared_ptr<ReadEngine>();
    created_in = ::getpid();
    IoOptions options;
    options.queue_depth = static_cast<int>(kFillChunksInFlight);
    options.threads = 1;
    options.inflight_bytes = kFillChunk * (kFillChunksInFlight + 1);  // + alignment slack
    options.register_buffers = false;
    options.register_files = false;
    std::unique_ptr<ReadEngine> created;
    Status status = ReadEngine::Create(options, &created);
    if (status.ok()) {
      *engine = std::move(created);
    } else {
      Log().info("cache: no read engine for fills ({}); copying with pread", status.ToString());
    }
  }
  return *engine;
}

}  // namespace

const char* CachePolicyName(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kTrain: return "train";
    case CachePolicy::kPinned: return "pinned";
    case CachePolicy::kCheckpoint: return "checkpoint";
  }
  return "unknown";
}

Status ParseCachePolicy(const std::string& name, CachePolicy* policy) {
  for (CachePolicy candidate :
       {CachePolicy::kTrain, CachePolicy::kPinned, CachePolicy::kCheckpoint}) {
    if (name == CachePolicyName(candidate)) {
      *policy = candidate;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown cache policy \"" + name +
                                 "\" (expected train, pinned or checkpoint)");
}

Status StatCacheSource(const std::string& path, CacheSource* source) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  source->path = path;
  source->size = static_cast<uint64_t>(st.st_size);
  source->mtime_ns = MtimeNs(st);
  return Status::OK();
}

std::string CacheKeyFor(const CacheSource& source) {
  std::string identity = source.path;
  identity += '\0';
  identity += std::to_string(source.size);
  identity += '\0';
  identity += std::to_string(source.mtime_ns);
  if (!source.xxh64.empty()) {
    identity += '\0';
    identity += source.xxh64;
  }
  return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" + SafeName(Basename(source.path));
}

Status CacheDirectory::Open(const std::string& path, const std::string& group, bool create,
                            std::shared_ptr<CacheDirectory>* directory, bool* unsafe) {
  if (path.empty()) return Status::InvalidArgument("empty cache_dir");
  bool ignored = false;
  if (unsafe == nullptr) unsafe = &ignored;
  *unsafe = false;
  std::shared_ptr<CacheDirectory> result(new CacheDirectory());
  result->path_ = AbsolutePath(path);
  gid_t gid = static_cast<gid_t>(-1);
  if (!group.empty()) {
    struct group* entry = ::getgrnam(group.c_str());
    if (entry == nullptr) {
      return Status::InvalidArgument("cache_group \"" + group + "\": no such group");
    }
    gid = entry->gr_gid;
    result->group_writable_ = true;
  }
  mode_t mode = gid != static_cast<gid_t>(-1) ? 02770 : 0700;
  std::string parent = Dirname(result->path_);
  if (create && !IsDirectory(parent)) GPUFEED_RETURN_IF_ERROR(CreateDirectories(parent));
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) return ErrnoStatus(errno, parent);
  GPUFEED_RETURN_IF_ERROR(OpenSubdirectory(parent_fd.get(), parent,
                                           Basename(result->path_).c_str(), mode, gid, create,
                                           &result->dir_fd_, unsafe));
  int top = result->dir_fd_.get();
  GPUFEED_RETURN_IF_ERROR(
      OpenSubdirectory(top, result->path_, "entries", mode, gid, true, &result->entries_fd_, unsafe));
  GPUFEED_RETURN_IF_ERROR(
      OpenSubdirectory(top, result->path_, "tmp", mode, gid, true, &result->tmp_fd_, unsafe));
  GPUFEED_RETURN_IF_ERROR(
      OpenSubdirectory(top, result->path_, "locks", mode, gid, true, &result->locks_fd_, unsafe));
  // Remove what crashed fills left behind, so usage counts start right.
  {
    UniqueFd held;
    GPUFEED_RETURN_IF_ERROR(result->LockIndex(&held));
    std::vector<CacheEntryInfo> entries;
    uint64_t fills = 0, fill_bytes = 0;
    GPUFEED_RETURN_IF_ERROR(result->ScanLocked(&entries, &fills, &fill_bytes));
  }
  *directory = std::move(result);
  return Status::OK();
}

Status CacheDirectory::LockIndex(UniqueFd* held) {
  std::string shown = JoinPath(path_, "lock");
  int fd = ::openat(dir_fd_.get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, FileMode());
  if (fd < 0) return ErrnoStatus(errno, shown);
  held->reset(fd);
  return Flock(fd, LOCK_EX, shown);
}

Status CacheDirectory::OpenFillLock(const std::string& key, UniqueFd* fd) const {
  std::string name = FillLockName(key);
  int raw = ::openat(locks_fd_.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                     FileMode());
  if (raw < 0) return ErrnoStatus(errno, JoinPath(JoinPath(path_, "locks"), name));
  fd->reset(raw);
  return Status::OK();
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
      RemoveLocked(key, &removed);
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

Status CacheDirectory::WriteMetaLocked(const std::string& key, const CacheSource& source,
                                       const std::string& xxh64) {
  nlohmann::json json;
  json["source"] = source.path;
  json["size"] = source.size;
  json["mtime_ns"] = source.mtime_ns;
  json["xxh64"] = xxh64;
  json["dataset"] = source.dataset;
  json["policy"] = CachePolicyName(source.policy);
  if (!source.group.empty()) json["group"] = source.group;
  return WriteSmallAtomicallyAt(entries_fd_.get(), MetaName(key),
                                JoinPath(JoinPath(path_, "entries"), MetaName(key)),
                                json.dump() + "\n", FileMode());
}

void CacheDirectory::WaitForFill(const CacheSource& source) {
  UniqueFd lock;
  if (!OpenFillLock(CacheKeyFor(source), &lock).ok()) return;
  // Shared: granted once the filler's exclusive lock is gone.
  if (Flock(lock.get(), LOCK_SH, "fill lock").ok()) ::flock(lock.get(), LOCK_UN);
}

Status CacheDirectory::Fill(const CacheSource& source, const StoreFile* from, uint64_t capacity,
                            double high_watermark, double low_watermark, FillOutcome* outcome,
                            uint64_t* copied, const FillProgress& progress,
                            const FillStarted& started) {
  *copied = 0;
  std::string key = CacheKeyFor(source);
  std::string temp_name = key + "." + std::to_string(::getpid()) + ".fill";
  std::string temp_path = JoinPath(JoinPath(path_, "tmp"), temp_name);
  UniqueFd fill_lock;
  UniqueFd temp;
  {
    UniqueFd held;
    GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
    if (HasEntry(source)) {
      *outcome = FillOutcome::kAlreadyCached;
      return Status::OK();
    }
    GPUFEED_RETURN_IF_ERROR(OpenFillLock(key, &fill_lock));
    if (!TryFlock(fill_lock.get(), LOCK_EX)) {
      *outcome = FillOutcome::kBusy;  // another process, or another thread of ours
      return Status::OK();
    }
    if (capacity > 0) {
      std::vector<CacheEntryInfo> entries;
      uint64_t fills = 0, fill_bytes = 0;
      GPUFEED_RETURN_IF_ERROR(ScanLocked(&entries, &fills, &fill_bytes));
      uint64_t used = fill_bytes;
      for (const CacheEntryInfo& entry : entries) used += entry.bytes;
      double high = high_watermark * static_cast<double>(capacity);
      if (static_cast<double>(used + source.size) > high) {
        // Least recently used first; only training data is evicted for a
        // fill, and never an entry a process is reading.
        std::sort(entries.begin(), entries.end(),
                  [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
                    return a.last_use_ns < b.last_use_ns;
                  });
        double target = low_watermark * static_cast<double>(capacity);
        for (const CacheEntryInfo& entry : entries) {
          if (static_cast<double>(used + source.size) <= target) break;
          if (entry.source.policy != CachePolicy::kTrain) continue;
          bool removed = false;
          GPUFEED_RETURN_IF_ERROR(RemoveLocked(entry.key, &removed));
          if (!removed) continue;
          used -= entry.bytes;
          CacheCounters evicted;
          evicted.evictions = 1;
          AddCountersLocked(entry.source.dataset, entry.source.policy, evicted);
        }
      }
      if (used + source.size > capacity) {
        *outcome = FillOutcome::kNoRoom;
        return Status::OK();
      }
    }
    ::unlinkat(tmp_fd_.get(), temp_name.c_str(), 0);  // this pid's predecessor's leftover
    int fd = ::openat(tmp_fd_.get(), temp_name.c_str(),
                      O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, FileMode());
    if (fd < 0) {
      if (errno == ENOSPC || errno == EROFS || errno == EACCES || errno == EDQUOT) {
        Log().warn("cache: cannot create {} ({}); reading from the source", temp_path,
                   std::strerror(errno));
        *outcome = FillOutcome::kUnavailable;
        return Status::OK();
      }
      return ErrnoStatus(errno, temp_path);
    }
    temp.reset(fd);
    // Reserve the space now: a full disk shows here, before any copying,
    // and the usage scan counts the reservation.
    int error = source.size > 0 ? ::posix_fallocate(fd, 0, static_cast<off_t>(source.size)) : 0;
    if (error != 0 && error != EOPNOTSUPP && error != EINVAL) {
      ::unlinkat(tmp_fd_.get(), temp_name.c_str(), 0);
      if (error == ENOSPC || error == EDQUOT) {
        *outcome = FillOutcome::kUnavailable;
        return Status::IOError(temp_path + ": no space left on the cache's filesystem (" +
                               std::to_string(source.size) + " bytes wanted)");
      }
      return ErrnoStatus(error, temp_path);
    }
  }

  // The copy, without the index lock: other processes fill other shards.
  auto abandon = [&](Status status, FillOutcome why) {
    ::unlinkat(tmp_fd_.get(), temp_name.c_str(), 0);
    *outcome = why;
    return status;
  };
  if (started) started(temp.get());
  UniqueFd input;
  FileView view;
  Status status = from != nullptr ? from->SourceView(&view) : OpenForRead(source.path, &input);
  if (!status.ok()) return abandon(status, FillOutcome::kSourceChanged);
  if (from != nullptr) {
    int duplicate = ::fcntl(view.fd, F_DUPFD_CLOEXEC, 0);
    if (duplicate < 0) return abandon(ErrnoStatus(errno, source.path), FillOutcome::kSourceChanged);
    input.reset(duplicate);
  }
  auto count = [&](uint64_t bytes) {
    if (from != nullptr) {
      from->Count(view, bytes);
    } else {
      CountSourceBytes(bytes);
    }
  };
  struct stat before;
  if (::fstat(input.get(), &before) != 0) {
    return abandon(ErrnoStatus(errno, source.path), FillOutcome::kSourceChanged);
  }
  if (static_cast<uint64_t>(before.st_size) != source.size || MtimeNs(before) != source.mtime_ns) {
    return abandon(Status::OK(), FillOutcome::kSourceChanged);
  }
  Xxh64 digest;
  std::shared_ptr<ReadEngine> engine = FillEngine();
  FileId file = 0;
  bool use_engine = engine && engine->AdoptFile(input.get(), source.path, &file).ok();
  uint64_t offset = 0;
  std::string scratch;
  while (offset < source.size) {
    std::vector<ReadRequest> requests;
    for (size_t i = 0; i < kFillChunksInFlight && offset < source.size; ++i) {
      ReadRequest request;
      request.file = file;
      request.offset = offset;
      request.length = std::min<uint64_t>(kFillChunk, source.size - offset);
      request.tag = i;
      offset += request.length;
      requests.push_back(request);
    }
    std::vector<std::pair<const char*, size_t>> pieces;
    std::vector<ReadCompletion> completions;
    if (use_engine) {
      status = engine->ReadAll(requests, &completions);
      for (const ReadCompletion& completion : completions) {
        if (status.ok() && !completion.status.ok()) status = completion.status;
        pieces.emplace_back(completion.buffer.data(), completion.buffer.size());
      }
    } else {
      scratch.resize(kFillChunk);
      pieces.clear();
    }
    for (size_t i = 0; status.ok() && i < requests.size(); ++i) {
      const char* data = nullptr;
      size_t size = 0;
      if (use_engine) {
        std::tie(data, size) = pieces[i];
      } else {
        status = PreadFull(input.get(), scratch.data(), requests[i].length, requests[i].offset,
                           source.path, &size);
        data = scratch.data();
      }
      if (!status.ok()) break;
      count(size);
      if (size != requests[i].length) {
        status = Status::Corruption(source.path + ": shorter than its " +
                                    std::to_string(source.size) + " bytes while being cached");
        break;
      }
      digest.Update(data, size);
      ssize_t written;
      do {
        written = ::pwrite(temp.get(), data, size, static_cast<off_t>(requests[i].offset));
      } while (written < 0 && errno == EINTR);
      if (written != static_cast<ssize_t>(size)) {
        int error = written < 0 ? errno : ENOSPC;
        status = ErrnoStatus(error, temp_path);
        if (error == ENOSPC || error == EDQUOT || error == EROFS) {
          if (use_engine) engine->CloseFile(file);
          return abandon(status, FillOutcome::kUnavailable);
        }
        break;
      }
      *copied += size;
    }
    if (!status.ok()) break;
    if (progress) progress(*copied, source.size);
  }
  if (use_engine) engine->CloseFile(file);
  if (!status.ok()) return abandon(status, FillOutcome::kSourceChanged);
  if (::fsync(temp.get()) != 0) {
    int error = errno;
    return abandon(ErrnoStatus(error, temp_path),
                   error == ENOSPC ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  std::string hex = Xxh64Hex(digest.Digest());
  if (!source.xxh64.empty() && hex != source.xxh64) {
    return abandon(Status::Corruption(source.path + ": xxh64 " + hex + " does not match " +
                                      source.xxh64 + " from the manifest; not cached"),
                   FillOutcome::kSourceChanged);
  }
  struct stat after;
  if (::fstat(input.get(), &after) != 0 || MtimeNs(after) != source.mtime_ns ||
      static_cast<uint64_t>(after.st_size) != source.size) {
    return abandon(Status::OK(), FillOutcome::kSourceChanged);  // rewritten while we copied
  }
  // The copy carries the source's mtime: an open compares it, so a copy
  // changed on disk afterwards is noticed.
  struct timespec times[2];
  times[0].tv_nsec = UTIME_NOW;
  times[1].tv_sec = static_cast<time_t>(source.mtime_ns / 1000000000);
  times[1].tv_nsec = static_cast<long>(source.mtime_ns % 1000000000);
  if (::futimens(temp.get(), times) != 0) {
    return abandon(ErrnoStatus(errno, temp_path), FillOutcome::kUnavailable);
  }
  {
    UniqueFd held;
    GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
    Status published = WriteMetaLocked(key, source, hex);
    if (published.ok()) {
      // Only this process, under the index lock, creates lease files: a
      // name that is not a regular file was planted, and is removed (the
      // name, never what it points to) before an O_EXCL create.
      struct stat existing;
      if (::fstatat(entries_fd_.get(), LeaseName(key).c_str(), &existing, AT_SYMLINK_NOFOLLOW) ==
          0) {
        ::unlinkat(entries_fd_.get(), LeaseName(key).c_str(), 0);
      }
      UniqueFd lease(::openat(entries_fd_.get(), LeaseName(key).c_str(),
                              O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, FileMode()));
      if (!lease.valid()) published = ErrnoStatus(errno, DataPathFor(key) + " lease");
    }
    if (published.ok() &&
        ::renameat(tmp_fd_.get(), temp_name.c_str(), entries_fd_.get(), DataName(key).c_str()) !=
            0) {
      published = ErrnoStatus(errno, DataPathFor(key));
    }
    if (!published.ok()) {
      ::unlinkat(entries_fd_.get(), MetaName(key).c_str(), 0);
      int error = published.code() == Status::Code::kIOError ? ENOSPC : 0;
      (void)error;
      return abandon(published, FillOutcome::kUnavailable);
    }
    ::fsync(entries_fd_.get());
    CacheCounters filled;
    filled.fills = 1;
    filled.fill_bytes = source.size;
    AddCountersLocked(source.dataset, source.policy, filled);
  }
  *outcome = FillOutcome::kFilled;
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
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != source.size ||
      MtimeNs(st) != source.mtime_ns) {
    Log().warn("cache: {} was changed on disk (size {} / mtime differ from the source {}); "
               "removing it, it will be copied again",
               data_path, static_cast<uint64_t>(st.st_size), source.path);
    data.reset();
    lease_fd.reset();  // our shared lock would keep the removal out
    bool removed = false;
    Remove(key, &removed);
    return Status::NotFound(data_path + " (changed on disk)");
  }
  // The lease file's mtime is the entry's last use, for LRU.
  ::futimens(lease_fd.get(), nullptr);
  lease->data = std::move(data);
  lease->lease = std::move(lease_fd);
  lease->path = data_path;
  return Status::OK();
}

Status CacheDirectory::AddCounters(const std::string& dataset, CachePolicy policy,
                                   const CacheCounters& delta) {
  if (delta.empty()) return Status::OK();
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  return AddCountersLocked(dataset, policy, delta);
}

Status CacheDirectory::AddCountersLocked(const std::string& dataset, CachePolicy policy,
                                         const CacheCounters& delta) {
  std::string text;
  nlohmann::json json = nlohmann::json::object();
  if (ReadSmallAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"), &text).ok()) {
    json = nlohmann::json::parse(text, nullptr, false);
    if (!json.is_object()) json = nlohmann::json::object();
  }
  nlohmann::json& entry = json["datasets"][dataset.empty() ? std::string("-") : dataset];
  auto add = [&](const char* name, uint64_t value) {
    uint64_t old = entry.contains(name) && entry[name].is_number_unsigned()
                       ? entry[name].get<uint64_t>()
                       : 0;
    entry[name] = old + value;
  };
  add("hits", delta.hits);
  add("misses", delta.misses);
  add("fills", delta.fills);
  add("fill_bytes", delta.fill_bytes);
  add("evictions", delta.evictions);
  entry["policy"] = CachePolicyName(policy);
  return WriteSmallAtomicallyAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"),
                                json.dump(1) + "\n", FileMode());
}

Status CacheDirectory::ReadCountersText(std::string* text) {
  Status status = ReadSmallAt(dir_fd_.get(), "stats.json", JoinPath(path_, "stats.json"), text);
  if (status.code() == Status::Code::kNotFound) {
    *text = "{}";
    return Status::OK();
  }
  return status;
}

Status CacheDirectory::RotateCheckpoints(const std::string& group, uint32_t keep) {
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(ScanLocked(&entries, &fills, &fill_bytes));
  std::vector<CacheEntryInfo> checkpoints;
  for (CacheEntryInfo& entry : entries) {
    if (entry.source.policy == CachePolicy::kCheckpoint && entry.source.group == group) {
      checkpoints.push_back(std::move(entry));
    }
  }
  std::sort(checkpoints.begin(), checkpoints.end(),
            [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
              return a.source.mtime_ns > b.source.mtime_ns;
            });
  for (size_t i = keep; i < checkpoints.size(); ++i) {
    bool removed = false;
    GPUFEED_RETURN_IF_ERROR(RemoveLocked(checkpoints[i].key, &removed));
    if (removed) {
      CacheCounters evicted;
      evicted.evictions = 1;
      AddCountersLocked(group, CachePolicy::kCheckpoint, evicted);
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
