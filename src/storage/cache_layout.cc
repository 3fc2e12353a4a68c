// CacheLayout: opening and checking a cache directory, and the flock and
// small-file primitives of cache_layout.h.
#include "storage/cache_layout.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

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

std::string TempFillName(const std::string& key) {
  return key + "." + std::to_string(::getpid()) + ".fill";
}

}  // namespace cache_internal

using cache_internal::ErrnoStatus;

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
    return Status::PermissionDenied(path +
                                    ": cache directory is group-writable but no "
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
      return Status::PermissionDenied(path +
                                      ": expected a directory of the cache, found a "
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

}  // namespace

Status CacheLayout::Open(const std::string& path, const std::string& group, bool create,
                         std::unique_ptr<CacheLayout>* layout, bool* unsafe) {
  if (path.empty()) return Status::InvalidArgument("empty cache_dir");
  bool ignored = false;
  if (unsafe == nullptr) unsafe = &ignored;
  *unsafe = false;
  std::unique_ptr<CacheLayout> result(new CacheLayout());
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
  GPUFEED_RETURN_IF_ERROR(OpenSubdirectory(parent_fd.get(), parent, Basename(result->path_).c_str(),
                                           mode, gid, create, &result->dir_fd_, unsafe));
  int top = result->dir_fd_.get();
  GPUFEED_RETURN_IF_ERROR(OpenSubdirectory(top, result->path_, "entries", mode, gid, true,
                                           &result->entries_fd_, unsafe));
  GPUFEED_RETURN_IF_ERROR(
      OpenSubdirectory(top, result->path_, "tmp", mode, gid, true, &result->tmp_fd_, unsafe));
  GPUFEED_RETURN_IF_ERROR(
      OpenSubdirectory(top, result->path_, "locks", mode, gid, true, &result->locks_fd_, unsafe));
  *layout = std::move(result);
  return Status::OK();
}

std::string CacheLayout::EntriesPath(const std::string& name) const {
  return JoinPath(JoinPath(path_, "entries"), name);
}

std::string CacheLayout::TmpPath(const std::string& name) const {
  return JoinPath(JoinPath(path_, "tmp"), name);
}

std::string CacheLayout::DataPathFor(const std::string& key) const {
  return EntriesPath(cache_internal::DataName(key));
}

LockFd& LockFd::operator=(LockFd&& other) noexcept {
  if (this != &other) reset(other.fd_.release());
  return *this;
}

void LockFd::reset(int fd) {
  if (fd_.valid()) ::flock(fd_.get(), LOCK_UN);  // also for a child's copy of it
  fd_.reset(fd);
}

Status CacheLayout::LockIndex(LockFd* held) const {
  std::string shown = JoinPath(path_, "lock");
  int fd = ::openat(dir_fd_.get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, file_mode());
  if (fd < 0) return ErrnoStatus(errno, shown);
  held->reset(fd);
  return cache_internal::Flock(fd, LOCK_EX, shown);
}

Status CacheLayout::OpenFillLock(const std::string& key, LockFd* fd) const {
  std::string name = cache_internal::FillLockName(key);
  int raw = ::openat(locks_fd_.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                     file_mode());
  if (raw < 0) return ErrnoStatus(errno, JoinPath(JoinPath(path_, "locks"), name));
  fd->reset(raw);
  return Status::OK();
}

}  // namespace gpufeed
