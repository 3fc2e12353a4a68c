// CacheDirectory's checkpoint rotation. Keeps the invariant that only the
// newest `keep` checkpoint entries of a group stay, and that a leased one is
// never removed (removal goes through RemoveLocked under the index lock).
#include <algorithm>

#include "storage/cache_directory.h"

namespace gpufeed {

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
      (void)AddCountersLocked(group, CachePolicy::kCheckpoint, evicted);  // statistics only
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
