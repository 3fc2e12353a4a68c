// CacheDirectory: a node-local cache directory opened as a whole (the
// on-disk protocol is in include/gpufeed/cache.h). Every process that opens
// the same directory cooperates through it; nothing is shared in memory.
//
// The work is done by four parts, each with its own header and contract:
//   CacheLayout  (cache_layout.h)  the checked directory, its locks and files
//   CacheIndex   (cache_index.h)   entries and space: lookup, usage,
//                                  eviction, counters, reserve and publish
//   CacheFiller  (cache_filler.h)  making an entry from a file or a bundle
//   CacheReader  (cache_reader.h)  opening a complete entry under its lease
// CacheDirectory owns them (the parts share the layout and the index) and
// forwards the calls its users make; code that needs one part may hold that
// part alone.
//
// Thread safety: constant after Open; every method may be called from any
// thread (the locks are flock()s on descriptors opened per call, so they
// order the threads of one process as well as processes).
#ifndef GPUFEED_STORAGE_CACHE_DIRECTORY_H_
#define GPUFEED_STORAGE_CACHE_DIRECTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/status.h"
#include "storage/cache_entry.h"
#include "storage/cache_filler.h"
#include "storage/cache_index.h"
#include "storage/cache_layout.h"
#include "storage/cache_reader.h"

namespace gpufeed {

class CacheDirectory {
 public:
  // Opens (creating it when `create`) the cache directory and removes the
  // leftovers of crashed fills. PermissionDenied for a directory owned by
  // another user, writable by others, or a symlink; IOError/ReadOnly
  // conditions come back as the errno's Status (callers degrade to the
  // source on those). *unsafe (when not null) tells a refusal by those
  // checks apart from an OS error.
  static Status Open(const std::string& path, const std::string& group, bool create,
                     std::shared_ptr<CacheDirectory>* directory, bool* unsafe = nullptr);

  const std::string& path() const { return layout_->path(); }
  const CacheIndex& index() const { return *index_; }
  const CacheFiller& filler() const { return filler_; }
  const CacheReader& reader() const { return reader_; }

  // Forwards to the parts (see their headers for the contracts).
  Status Fill(const CacheSource& source, const FillRequest& request, FillResult* result) const {
    return filler_.Fill(source, request, result);
  }
  Status FillBundle(const CacheSource& source, const BundleFillRequest& request,
                    FillResult* result) const {
    return filler_.FillBundle(source, request, result);
  }
  void WaitForFill(const CacheSource& source) const { filler_.WaitForFill(source); }
  Status OpenEntry(const CacheSource& source, CacheLease* lease) const {
    return reader_.OpenEntry(source, lease);
  }
  bool HasEntry(const CacheSource& source) const { return index_->HasEntry(source); }
  std::string DataPathFor(const std::string& key) const { return layout_->DataPathFor(key); }
  Status List(std::vector<CacheEntryInfo>* entries, uint64_t* fills_in_progress,
              uint64_t* fill_bytes_in_progress) const {
    return index_->List(entries, fills_in_progress, fill_bytes_in_progress);
  }
  bool IsLeased(const std::string& key) const { return index_->IsLeased(key); }
  Status Remove(const std::string& key, bool* removed) const {
    return index_->Remove(key, removed);
  }
  Status Usage(uint64_t* bytes) const { return index_->Usage(bytes); }
  Status DefaultCapacity(uint64_t* capacity) const { return index_->DefaultCapacity(capacity); }
  Status RotateCheckpoints(const std::string& group, uint32_t keep) const {
    return index_->RotateCheckpoints(group, keep);
  }
  Status AddCounters(const std::string& dataset, CachePolicy policy,
                     const CacheCounters& delta) const {
    return index_->counters().Add(dataset, policy, delta);
  }
  // stats.json as JSON text ("{}" when absent).
  Status ReadCountersText(std::string* text) const { return index_->counters().ReadText(text); }

 private:
  explicit CacheDirectory(std::shared_ptr<const CacheLayout> layout);

  const std::shared_ptr<const CacheLayout> layout_;
  const std::shared_ptr<const CacheIndex> index_;
  const CacheFiller filler_;
  const CacheReader reader_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_DIRECTORY_H_
