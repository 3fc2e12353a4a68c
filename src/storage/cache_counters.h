// CacheCounterFile: a cache directory's stats.json, the hits, misses, fills,
// fill bytes and evictions of each dataset, merged from every process that
// uses the directory.
//
// Invariant: stats.json is only rewritten under the index lock (one writer)
// and atomically (temp file, fsync, rename), so concurrent processes never
// lose each other's counts nor leave it torn.
//
// Thread safety: constant after construction; every method may be called
// from any thread (the index lock orders the writers).
#ifndef GPUFEED_STORAGE_CACHE_COUNTERS_H_
#define GPUFEED_STORAGE_CACHE_COUNTERS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "gpufeed/cache.h"
#include "gpufeed/status.h"
#include "storage/cache_layout.h"

namespace gpufeed {

// Counter deltas merged into stats.json.
struct CacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fills = 0;
  uint64_t fill_bytes = 0;
  uint64_t evictions = 0;
  bool empty() const { return hits == 0 && misses == 0 && fills == 0 && evictions == 0; }
};

class CacheCounterFile {
 public:
  // REQUIRES: `layout` not null; it is shared with the other parts of the
  // cache directory.
  explicit CacheCounterFile(std::shared_ptr<const CacheLayout> layout)
      : layout_(std::move(layout)) {}

  // Adds `delta` to the counters of `dataset` (recording its policy), under
  // the index lock. Nothing is written for an empty delta.
  Status Add(const std::string& dataset, CachePolicy policy, const CacheCounters& delta) const;
  // The same. REQUIRES: the index lock held by the caller.
  Status AddLocked(const std::string& dataset, CachePolicy policy,
                   const CacheCounters& delta) const;
  // stats.json as JSON text ("{}" when absent).
  Status ReadText(std::string* text) const;

 private:
  const std::shared_ptr<const CacheLayout> layout_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_COUNTERS_H_
