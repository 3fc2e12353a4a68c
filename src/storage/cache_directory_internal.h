// Helpers shared by the files that implement CacheDirectory
// (cache_directory.cc, cache_index.cc, cache_fill.cc, cache_counters.cc,
// cache_checkpoints.cc): the names of an entry's files, flock with EINTR
// retried, and small-file reads and atomic writes relative to a directory
// descriptor. Private to src/storage/; the functions that are not inline are
// defined in cache_directory.cc.
#ifndef GPUFEED_STORAGE_CACHE_DIRECTORY_INTERNAL_H_
#define GPUFEED_STORAGE_CACHE_DIRECTORY_INTERNAL_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "gpufeed/status.h"
#include "storage/cache_directory.h"

namespace gpufeed {
namespace cache_internal {

inline int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

inline Status ErrnoStatus(int error_number, const std::string& what) {
  return Status::FromErrno(error_number, what);
}

// Holds an flock for as long as it lives (the descriptor closes with it).
Status Flock(int fd, int operation, const std::string& what);
// Takes the flock without waiting; false when another descriptor holds it.
bool TryFlock(int fd, int operation);

inline std::string LeaseName(const std::string& key) { return key + ".lease"; }
inline std::string DataName(const std::string& key) { return key + ".data"; }
inline std::string MetaName(const std::string& key) { return key + ".meta"; }
inline std::string FillLockName(const std::string& key) { return key + ".fill"; }

// Reads a small file relative to a directory descriptor, without following
// a symlink.
Status ReadSmallAt(int directory, const std::string& name, const std::string& shown,
                   std::string* text);

// Writes `text` as `name` in `directory` atomically: O_EXCL temp file,
// fsync, rename, directory fsync. REQUIRES: the index lock (one writer).
Status WriteSmallAtomicallyAt(int directory, const std::string& name, const std::string& shown,
                              const std::string& text, int mode);

// xxh64 (16 hex digits) of a bundle's member names, in order: part of its
// key and recorded in its meta.
std::string BundleNamesHash(const CacheSource& source);

}  // namespace cache_internal
}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_DIRECTORY_INTERNAL_H_
