// CacheIndex's eviction: room for a fill under the budget's watermarks, and
// the rotation of checkpoint entries (cache_index.h). Both remove entries
// through RemoveLocked under the index lock, so a leased entry is never
// removed, and count each removal as an eviction.
#include <algorithm>

#include "storage/cache_index.h"

namespace gpufeed {

Status CacheIndex::MakeRoomLocked(uint64_t more, const CacheBudget& budget, bool* fits) const {
  *fits = true;
  if (budget.capacity == 0) return Status::OK();
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(ScanLocked(&entries, &fills, &fill_bytes));
  uint64_t used = fill_bytes;
  for (const CacheEntryInfo& entry : entries) used += entry.bytes;
  double high = budget.high_watermark * static_cast<double>(budget.capacity);
  if (static_cast<double>(used + more) > high) {
    // Least recently used first; only training data is evicted for a
    // fill, and never an entry a process is reading.
    std::sort(entries.begin(), entries.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
      return a.last_use_ns < b.last_use_ns;
    });
    double target = budget.low_watermark * static_cast<double>(budget.capacity);
    for (const CacheEntryInfo& entry : entries) {
      if (static_cast<double>(used + more) <= target) break;
      if (entry.source.policy != CachePolicy::kTrain) continue;
      bool removed = false;
      GPUFEED_RETURN_IF_ERROR(RemoveLocked(entry.key, &removed));
      if (!removed) continue;
      used -= entry.bytes;
      CacheCounters evicted;
      evicted.evictions = 1;
      (void)counters_.AddLocked(entry.source.dataset, entry.source.policy,
                                evicted);  // statistics only
    }
  }
  *fits = used + more <= budget.capacity;
  return Status::OK();
}

Status CacheIndex::RotateCheckpoints(const std::string& group, uint32_t keep) const {
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
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
      (void)counters_.AddLocked(group, CachePolicy::kCheckpoint, evicted);  // statistics only
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
