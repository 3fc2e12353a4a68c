// CacheLayout: an opened, checked node-cache directory (layout in
// include/gpufeed/cache.h) and the file primitives every part of the cache
// uses on it: the index lock, fill locks, names of an entry's files, small
// files read and written relative to a checked directory descriptor.
//
// Invariant kept by Open: every directory of the cache is ours to trust:
// owned by this user (or by the cache_group), writable by nobody else, never
// reached through a symlink (O_NOFOLLOW, openat relative to checked
// descriptors).
//
// The locks of the on-disk protocol (all flock()s on descriptors opened per
// call, so they order the threads of one process as well as processes):
//   - the index lock (`lock`, LockIndex): guards every create, rename and
//     unlink in entries/ and tmp/, the usage count, eviction and stats.json;
//     never held during a copy.
//   - locks/K.fill (OpenFillLock, LOCK_EX): held by the one process filling
//     key K; it guards tmp/K.<pid>.fill. A tmp/ file whose fill lock nobody
//     holds is a leftover of a crash.
//   - entries/K.lease (LOCK_SH by readers): guards entries/K.data against
//     removal; removal takes LOCK_EX|LOCK_NB and skips the entry when that
//     fails.
// The index lock, fill locks and the probes of others' locks live in a
// LockFd, which unlocks before it closes (a child forked meanwhile shares
// the lock otherwise); a reader's lease is a plain descriptor (a child that
// inherits it may read through it).
//
// Thread safety: constant after Open; every method may be called from any
// thread.
#ifndef GPUFEED_STORAGE_CACHE_LAYOUT_H_
#define GPUFEED_STORAGE_CACHE_LAYOUT_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "gpufeed/status.h"
#include "util/file.h"

namespace gpufeed {

// A descriptor that one operation of this process flock()s: the index lock,
// a fill lock, a probe of another process's lock. Its reset and destructor
// unlock it (LOCK_UN) before closing it. An flock belongs to the open file
// description, which fork() shares with the child: a close alone would leave
// a lock taken before a fork held for as long as that child lives, and every
// process (the child too, at its own next lock) would wait for it. Not for
// leases: a lease a child inherits is the child's as well.
class LockFd {
 public:
  LockFd() = default;
  LockFd(LockFd&& other) noexcept : fd_(other.fd_.release()) {}
  LockFd& operator=(LockFd&& other) noexcept;
  LockFd(const LockFd&) = delete;
  LockFd& operator=(const LockFd&) = delete;
  ~LockFd() { reset(); }

  int get() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  // Unlocks and closes the descriptor held, then holds `fd`.
  void reset(int fd = -1);

 private:
  UniqueFd fd_;
};

class CacheLayout {
 public:
  // Opens (creating it when `create`) the cache directory at `path` and its
  // entries/, tmp/ and locks/. `group` (may be empty) is the cache_group:
  // directories 02770 owned by it, files 0660; else 0700 and 0600.
  // PermissionDenied for a directory owned by another user, writable by
  // others, or a symlink (*unsafe set true, when not null); other OS errors
  // come back as the errno's Status (callers degrade to the source on them).
  static Status Open(const std::string& path, const std::string& group, bool create,
                     std::unique_ptr<CacheLayout>* layout, bool* unsafe);

  // Absolute path of the cache directory, for messages.
  const std::string& path() const { return path_; }
  // Checked descriptors of the directory and its subdirectories; valid for
  // the layout's lifetime.
  int top_fd() const { return dir_fd_.get(); }
  int entries_fd() const { return entries_fd_.get(); }
  int tmp_fd() const { return tmp_fd_.get(); }
  // Mode of every file the cache creates.
  int file_mode() const { return group_writable_ ? 0660 : 0600; }

  // Paths for messages (and for a cached checkpoint's caller).
  std::string EntriesPath(const std::string& name) const;
  std::string TmpPath(const std::string& name) const;
  std::string DataPathFor(const std::string& key) const;

  // Takes the index lock; it is held while *held lives.
  Status LockIndex(LockFd* held) const;
  // Opens (creating) locks/K.fill for `key`, unlocked.
  Status OpenFillLock(const std::string& key, LockFd* fd) const;

 private:
  CacheLayout() = default;

  std::string path_;
  UniqueFd dir_fd_;
  UniqueFd entries_fd_;
  UniqueFd tmp_fd_;
  UniqueFd locks_fd_;
  bool group_writable_ = false;
};

namespace cache_internal {

inline int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

inline Status ErrnoStatus(int error_number, const std::string& what) {
  return Status::FromErrno(error_number, what);
}

// Takes an flock, retrying EINTR; it is held until released or until the
// descriptor closes.
Status Flock(int fd, int operation, const std::string& what);
// Takes the flock without waiting; false when another descriptor holds it.
bool TryFlock(int fd, int operation);

inline std::string LeaseName(const std::string& key) { return key + ".lease"; }
inline std::string DataName(const std::string& key) { return key + ".data"; }
inline std::string MetaName(const std::string& key) { return key + ".meta"; }
inline std::string FillLockName(const std::string& key) { return key + ".fill"; }
// tmp/ name of this process's copy of `key` being filled.
std::string TempFillName(const std::string& key);

// Reads a small (at most 1 MiB) regular file relative to a directory
// descriptor, without following a symlink.
Status ReadSmallAt(int directory, const std::string& name, const std::string& shown,
                   std::string* text);

// Writes `text` as `name` in `directory` atomically: O_EXCL temp file,
// fsync, rename, directory fsync. REQUIRES: the index lock (one writer).
Status WriteSmallAtomicallyAt(int directory, const std::string& name, const std::string& shown,
                              const std::string& text, int mode);

}  // namespace cache_internal
}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_LAYOUT_H_
