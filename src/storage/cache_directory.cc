// CacheDirectory, the door: what names an entry (policy names, the key of a
// source) and opening a cache directory. Keeps the invariant that every
// directory of the cache is ours to trust: owned by this user (or the
// cache_group), writable by nobody else, never reached through a symlink
// (O_NOFOLLOW, openat relative to checked descriptors), and that a directory
// is opened only after the leftovers of crashed fills are removed.
// Also defines the openat and flock helpers of cache_directory_internal.h.
#include "storage/cache_directory.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>

#include "storage/cache_directory_internal.h"
#include "util/checksum.h"
#include "util/path.h"

namespace gpufeed {

namespace cache_internal {

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

}  // namespace cache_internal

using cache_internal::ErrnoStatus;
using cache_internal::MtimeNs;

namespace {

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

namespace cache_internal {

std::string BundleNamesHash(const CacheSource& source) {
  Xxh64 digest;
  for (const std::string& member : source.members) digest.Update(member.c_str(), member.size() + 1);
  return Xxh64Hex(digest.Digest());
}

}  // namespace cache_internal

std::string CacheKeyFor(const CacheSource& source) {
  std::string identity = source.path;
  if (source.bundle()) {
    // The members' names, not their sizes or mtimes: those are not stat'ed.
    identity += std::string("\0bundle\0", 8);
    identity += cache_internal::BundleNamesHash(source);
    return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" +
           SafeName(Basename(source.path));
  }
  identity += '\0';
  identity += std::to_string(source.size);
  if (source.identified_by_checksum) {
    // No mtime: it is never stat'ed by the processes that look the copy up.
    identity += std::string("\0xxh64\0", 7);
    identity += source.xxh64;
    return Hex16(XXH64(identity.data(), identity.size(), 0)) + "-" +
           SafeName(Basename(source.path));
  }
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

}  // namespace gpufeed
