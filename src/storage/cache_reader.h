// CacheReader: opening a complete cache entry for reading, under its lease.
//
// Contract: a CacheLease holds entries/K.lease with LOCK_SH for as long as it
// lives, so the entry is neither evicted nor removed while it is read (see
// cache_layout.h for the lock protocol). A copy that no longer matches what
// was recorded for it (size, mtime, a bundle's trailer) is never handed out:
// it is removed (when no other process holds it) and reported NotFound, so
// the caller reads the source and the copy is made again.
//
// Thread safety: constant after construction; every method may be called
// from any thread.
#ifndef GPUFEED_STORAGE_CACHE_READER_H_
#define GPUFEED_STORAGE_CACHE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/status.h"
#include "storage/cache_entry.h"
#include "storage/cache_index.h"
#include "util/file.h"

namespace gpufeed {

// A read-only handle on a complete entry, holding its lease.
struct CacheLease {
  UniqueFd data;
  UniqueFd lease;
  std::string path;  // of the data file, for logs and error messages
  // A bundle: where its members lie in `data` (count + 1 offsets).
  std::vector<uint64_t> member_offsets;
};

class CacheReader {
 public:
  // REQUIRES: `index` not null; shared with the other parts of the
  // directory.
  explicit CacheReader(std::shared_ptr<const CacheIndex> index) : index_(std::move(index)) {}

  // Opens the complete entry of `source` with a lease and marks its last
  // use (the lease file's mtime). NotFound when there is none, or it is
  // being evicted, or its lease file was replaced meanwhile; a copy whose
  // size or mtime no longer matches (changed on disk) is removed and
  // reported NotFound. For a bundle they are compared with what its meta
  // recorded, and its trailer is read into lease->member_offsets (a bad
  // trailer: removed, NotFound).
  Status OpenEntry(const CacheSource& source, CacheLease* lease) const;

 private:
  // Whether the opened copy `data` (fstat'ed into `st`) is still what was
  // recorded for `source`; reads a bundle's trailer into *lease.
  bool MatchesRecord(const CacheSource& source, const std::string& key, int data,
                     const struct stat& st, CacheLease* lease) const;

  const std::shared_ptr<const CacheIndex> index_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_READER_H_
