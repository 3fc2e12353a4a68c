// NodeCache: one dataset's view of a cache directory. The dataset asks it,
// per read, which descriptor to read a shard from: the leased local copy
// when it is complete, else the source (and a fill is queued). A background
// thread copies shards: the ones readers missed, and the next
// `prefetch_shards` of the epoch order given by ExpectReads.
//
// Thread safety: every method may be called from any thread. Acquire is the
// hot path: one atomic shared_ptr load when the shard is local.
#ifndef GPUFEED_CACHE_NODE_CACHE_H_
#define GPUFEED_CACHE_NODE_CACHE_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_directory.h"
#include "gpufeed/cache.h"
#include "gpufeed/status.h"

namespace gpufeed {

struct CachedShard {
  std::string path;   // absolute source path
  uint64_t size = 0;  // bytes, as the dataset saw it at open
  std::string xxh64;  // from the manifest, or empty
};

class NodeCache {
 public:
  // Opens the cache for the shards of `dataset`. Returns OK with
  // *cache == nullptr when the cache cannot be used but the source can
  // (a read-only or full cache directory): that is logged once. Errors:
  // PermissionDenied for an unsafe directory (see cache.h), InvalidArgument
  // for bad options or a pinned dataset larger than the capacity.
  static Status Open(const CacheOptions& options, const std::string& dataset,
                     const std::vector<CachedShard>& shards, std::unique_ptr<NodeCache>* cache);
  ~NodeCache();

  // The local copy of shard `index` with its lease, or nullptr: read the
  // source (the miss queues a fill, or with wait_for_fill waits for one).
  std::shared_ptr<const CacheLease> Acquire(size_t index);
  // Counts a record read (statistics only).
  void CountRead(bool hit) { (hit ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed); }
  // A local copy that failed to parse where the source did not: drop it
  // (it is removed when no process holds it) and copy it again.
  // REQUIRES: the caller has dropped its own reference to `local`.
  void Invalidate(size_t index, const CacheLease* local);
  // Shard order of the coming reads (this rank's samples mapped to shards),
  // for prefetch; `live_bytes` is the most bytes of shards that are needed
  // at the same time in that order (the working set).
  void ExpectShards(std::vector<size_t> first_use_order, uint64_t live_bytes);

  // Waits for every queued fill (tests, warm).
  void Drain();
  uint64_t capacity() const { return capacity_; }
  CacheDirectory& directory() { return *directory_; }

 private:
  NodeCache() = default;

  struct Slot {
    CacheSource source;
    std::shared_ptr<const CacheLease> local;  // std::atomic_load/store
    std::atomic<uint64_t> last_use{0};
    std::atomic<bool> queued{false};
    std::atomic<bool> bad{false};  // a corrupt copy: never reopened, removed then refilled
    std::mutex fill_mutex;  // wait_for_fill: one thread of this process fills
  };

  bool TryOpenLocal(size_t index);
  void Queue(size_t index, bool front);
  void FillerLoop();
  // Fills synchronously; true when the entry is complete afterwards.
  bool FillNow(size_t index, bool wait_for_others);
  void ReleaseBeyondLimit(size_t keep);
  void NotePosition(size_t index);
  void FlushCounters();
  void DisableWrites(const std::string& why);

  CacheOptions options_;
  std::string dataset_;
  uint64_t capacity_ = 0;
  std::shared_ptr<CacheDirectory> directory_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint64_t> use_clock_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0};
  std::atomic<bool> writes_disabled_{false};
  std::atomic<bool> no_room_logged_{false};

  std::mutex mutex_;  // guards what follows
  std::condition_variable changed_;
  std::deque<size_t> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  struct Plan {
    std::vector<size_t> order;    // first-use order of the shards
    std::vector<size_t> rank_of;  // position of each shard in order (or SIZE_MAX)
    mutable std::atomic<size_t> position{0};  // ranks below it have been read
  };
  std::shared_ptr<const Plan> plan_;  // std::atomic_load/store
  std::atomic<bool> thrash_logged_{false};
  std::mutex leases_mutex_;       // ReleaseBeyondLimit
  // The filler thread of the process that started it. A forked child (a
  // torch DataLoader worker) has the object but not the thread: it leaks
  // the parent's object and starts its own (see Queue).
  std::unique_ptr<std::thread> filler_;
  pid_t filler_pid_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_CACHE_NODE_CACHE_H_
