// NodeCache: one dataset's view of a cache directory, behind the cached
// store (cached_store.cc). For each read it gives the descriptor to read a
// file from: the leased local copy when it is complete, the part of a copy
// this process is filling when that part is written, else (after waiting
// for the fill with wait_for_fill, or at once without) the source. Filler
// threads copy the files readers missed and the next `prefetch_shards` of
// the epoch order given by ExpectFiles.
//
// Thread safety: every method may be called from any thread. View is the
// hot path: one atomic shared_ptr load when the file is local.
#ifndef GPUFEED_STORAGE_NODE_CACHE_H_
#define GPUFEED_STORAGE_NODE_CACHE_H_

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/status.h"
#include "storage/byte_ranges.h"
#include "storage/cache_directory.h"
#include "storage/store.h"

namespace gpufeed {

class NodeCache {
 public:
  // Opens the cache for the dataset at `dataset`. Returns OK with
  // *cache == nullptr when the cache cannot be used but the source can (a
  // read-only or full cache directory): that is logged once. Errors:
  // PermissionDenied for an unsafe directory (see cache.h), InvalidArgument
  // for bad options.
  static Status Open(const CacheOptions& options, const std::string& dataset,
                     std::unique_ptr<NodeCache>* cache);
  // Finishes the fills of files this process read or will read next, for
  // at most kCloseWaitSeconds (so that the next process finds them), then
  // stops the filler threads.
  ~NodeCache();

  // Adds a file of the dataset (its source handle); returns its index. A
  // lazily opened source (StoreFile::lazy) with a checksum is keyed on its
  // (path, size, xxh64): nothing is stat'ed (cache_directory.h).
  size_t AddFile(std::shared_ptr<const StoreFile> source, const std::string& xxh64);
  // Adds a bundle of the dataset's small files (storage/store.h) named
  // `name`, its members read from `source` for fills and misses; returns
  // its index (files and bundles share the index space of ExpectFiles).
  size_t AddBundle(const std::string& name, std::vector<std::string> members,
                   std::shared_ptr<const Store> source);
  // Every file added: refuses a pinned dataset larger than the capacity
  // (InvalidArgument) and queues a pinned dataset's copies.
  Status Seal();

  // The view for reading [offset, offset + length) of file `index`.
  Status View(size_t index, uint64_t offset, uint64_t length, FileView* view);
  // Reads member `member` of bundle `index` whole: from its complete copy
  // (leased during the read), else (after waiting for its fill with
  // wait_for_fill, or at once without) from the source.
  Status ReadMember(size_t index, size_t member, std::string* data);
  // The member's range in the bundle's complete copy and a view of it;
  // false when there is none (nothing is queued: ReadMember does that).
  bool LocateMember(size_t index, size_t member, FileView* view, uint64_t* offset,
                    uint64_t* length);
  const std::vector<std::string>& members(size_t index) const {
    return slots_[index]->source.members;
  }
  // The bytes of the bundle's copy once known, else an estimate.
  uint64_t BundleBytes(size_t index) const;
  // A view's bytes did not parse where the source's did: the copy is
  // dropped (removed once no process holds it) and made again.
  void Invalidate(size_t index, FileView* view);
  // File order of the coming reads, for prefetch; `live_bytes` is the most
  // bytes of files needed at the same time in that order (the working set).
  void ExpectFiles(std::vector<size_t> first_use_order, uint64_t live_bytes);

  // Waits for every queued fill (tests, warm).
  void Drain();
  uint64_t capacity() const { return capacity_; }
  size_t files() const { return slots_.size(); }
  CacheDirectory& directory() { return *directory_; }
  uint64_t hits() const { return total_hits_.load() + hits_.load(); }
  uint64_t misses() const { return total_misses_.load() + misses_.load(); }

  // How long ~NodeCache lets pending fills finish.
  static constexpr double kCloseWaitSeconds = 30;
  // Copies made at once (they share the cache's fill read engine).
  static constexpr int kFillerThreads = 2;
  // A fill that ends without a copy (a read error or a short or long read
  // of the source, no room, the source changed) is retried, not given up
  // for the life of the process: the unit's reads go to the source, and
  // neither a read nor a prefetch queues its fill again, for
  // kRetryFillAfter, doubled after each further consecutive failure up to
  // kRetryFillAfterMax; the next read or prefetch after that queues it. A
  // fill that makes the copy (or finds it made) resets the delay.
  static constexpr std::chrono::milliseconds kRetryFillAfter{5000};
  static constexpr std::chrono::milliseconds kRetryFillAfterMax{300000};
  // Tests only: the first delay instead of kRetryFillAfter (0: the default);
  // the maximum stays 60 times it.
  static void SetRetryFillAfterForTesting(std::chrono::milliseconds first);
  // Fills of this cache that ended without a copy, since it was opened.
  uint64_t failed_fills() const { return failed_fills_.load(); }

  // A bundle's size is known only once it is copied: room is made for this
  // many bytes per member before its fill (about an ImageNet JPEG), and
  // the fill is dropped if the copy then does not fit.
  static constexpr uint64_t kBundleMemberEstimate = 128 << 10;

 private:
  NodeCache();

  enum class FillState { kIdle, kQueued, kFilling };

  struct Slot {
    std::shared_ptr<const StoreFile> file;  // the source (a file; null for a bundle)
    std::shared_ptr<const Store> members_from;  // a bundle: its members' source
    CacheSource source;
    std::shared_ptr<const CacheLease> local;  // LoadShared / StoreShared
    std::atomic<uint64_t> last_use{0};
    std::atomic<bool> bad{false};  // a corrupt copy: never reopened, removed then refilled
    std::atomic<bool> read{false};  // a reader asked for it (finish its fill on close)
    std::atomic<uint64_t> copy_bytes{0};  // a bundle: its copy's size, once seen
    // A file identified by its manifest's checksum whose source a fill found
    // to differ: `mismatch` (written once, before the flag) is what every
    // read of it returns, never the source's other bytes.
    // Cleared when a later fill verifies the source (the mismatch was a
    // read fault's bytes); `mismatch` keeps its first value.
    std::atomic<bool> mismatched{false};
    std::atomic<bool> mismatch_written{false};
    Status mismatch;
    // Guarded by fill_mutex.
    std::mutex fill_mutex;
    std::condition_variable fill_changed;
    FillState state = FillState::kIdle;
    std::shared_ptr<const UniqueFd> partial;  // the copy being written, while filling
    uint64_t filled = 0;                      // bytes of it written, from the start
    // Of the copy being written, beyond `filled`: the ranges readers wrote
    // (fetched from the source for their reads, FetchIntoCopy), and those
    // being fetched now, by readers or by the fill (its claims): no byte is
    // fetched twice. `generation` counts fills, so that a fetch that ends
    // after its fill does changes nothing.
    ByteRanges written;
    ByteRanges fetching;
    uint64_t generation = 0;
    uint64_t attempts = 0;                    // fills that ended without a copy
    uint32_t failures = 0;                    // of them since the last copy made
    std::chrono::steady_clock::time_point retry_after{};
  };

  bool TryOpenLocal(size_t index) { return OpenLocal(index) != nullptr; }
  // The slot's leased copy, opened when complete and not held; null when
  // there is none.
  std::shared_ptr<const CacheLease> OpenLocal(size_t index);
  // A bundle's complete copy, waiting for its fill as View does for a file;
  // null: read the source.
  std::shared_ptr<const CacheLease> BundleCopy(size_t index);
  Status ReadFromSource(Slot& slot, size_t member, std::string* data);
  FileView LocalView(const Slot& slot, std::shared_ptr<const CacheLease> local) const;
  // The written part of the copy this process is filling.
  FileView PartialView(const Slot& slot) const;
  // A fill in progress has written [offset, end): *view is its copy (a
  // hit). REQUIRES: slot.fill_mutex.
  bool ServeWritten(const Slot& slot, uint64_t offset, uint64_t end, FileView* view);
  // Whether [offset, end) of the copy being filled is written.
  // REQUIRES: slot.fill_mutex held.
  static bool Written(const Slot& slot, uint64_t offset, uint64_t end) {
    return slot.partial &&
           (slot.filled >= end || slot.written.Covers(std::max(offset, slot.filled), end));
  }
  // A read of [offset, end) of a file being filled, a part nobody is
  // fetching: reads its parts not written yet, widened to whole blocks of
  // kFetchAlignment bytes, from the source (counted and throttled as the
  // source's reads) into the copy, so that the fill skips them, and gives
  // the view of the copy. False when a read or a write of the range fails
  // (the parts fetched whole are kept; the caller reads the source, whose
  // error the reader then sees) or the fill ended meanwhile. REQUIRES:
  // `lock` holds slot.fill_mutex, the slot filling with `partial` set; it is
  // released during the fetch.
  static constexpr uint64_t kFetchAlignment = 4096;
  bool FetchIntoCopy(Slot& slot, uint64_t offset, uint64_t end,
                     std::unique_lock<std::mutex>& lock, FileView* view);
  // Ends the slot's fill in progress (state kIdle), under slot.fill_mutex.
  static void EndFillLocked(Slot& slot);
  // Queues a fill; `front`: a reader waits for it.
  void Queue(size_t index, bool front);
  void FillerLoop();
  // Fills synchronously; true when the entry is complete afterwards.
  // REQUIRES: called on a filler thread (it reads fill_engine_).
  bool FillNow(size_t index);
  // One attempt of FillNow: the slot's file or bundle through the directory.
  Status CopyOnce(size_t index, FillResult* result);
  // A fill found the source different from its key: logged; for a file
  // identified by its checksum, its reads fail from now on (slot.mismatch).
  void NoteSourceChanged(Slot& slot, const Status& status);
  // The wait before the next fill of a unit whose last `failures` fills
  // made no copy (see kRetryFillAfter).
  static std::chrono::milliseconds RetryDelay(uint32_t failures);
  void ReleaseBeyondLimit(size_t keep);
  void NotePosition(size_t index);
  void FlushCounters();
  void DisableWrites(const std::string& why);
  void StartFillersLocked();
  // The fork hooks (util/fork_hooks.h): every lock below taken in the lock
  // order before a fork and released after it, in the parent and in the
  // child; in the child, ForgetParentFillsInChild runs first, under them.
  void LockAllForFork();
  void UnlockAllAfterFork();
  void ForgetParentFillsInChild();

  // The fill budget from the options and the capacity.
  CacheBudget budget() const;

  CacheOptions options_;
  std::string dataset_;
  uint64_t capacity_ = 0;
  std::shared_ptr<CacheDirectory> directory_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint64_t> use_clock_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0};
  std::atomic<uint64_t> total_hits_{0}, total_misses_{0};
  std::atomic<bool> writes_disabled_{false};
  std::atomic<bool> no_room_logged_{false};
  std::atomic<uint64_t> failed_fills_{0};

  // Lock order: slots_mutex_, then one slot's fill_mutex (never two), then
  // mutex_, then leases_mutex_, then the pointer locks; the source store is
  // never read under any of them (its own lock is taken before these around
  // a fork). Only the fork hooks take them all.
  std::mutex slots_mutex_;  // guards slots_ while AddFile / AddBundle grow it
  std::mutex mutex_;  // guards what follows
  std::condition_variable changed_;
  std::deque<size_t> queue_;
  int busy_ = 0;  // fills running
  bool stopping_ = false;
  struct Plan {
    std::vector<size_t> order;    // first-use order of the files
    std::vector<size_t> rank_of;  // position of each file in order (or SIZE_MAX)
    mutable std::atomic<size_t> position{0};  // ranks below it have been read
  };
  std::shared_ptr<const Plan> plan_;  // LoadShared / StoreShared
  // Each slot's `local` and plan_ are read and replaced under one of these
  // locks (LoadShared, StoreShared), not with std::atomic_load/store:
  // libstdc++'s atomic shared_ptr functions lock a process-wide pool of
  // mutexes, which a fork() can leave held by a thread of the parent, and a
  // forked child (a torch DataLoader worker) then hung in its first read.
  // These are leaf locks, taken around every fork (util/fork_hooks.h).
  static constexpr size_t kPointerLocks = 16;
  mutable std::array<std::mutex, kPointerLocks> pointer_locks_;
  uint64_t fork_hooks_ = 0;
  std::mutex& PointerLock(const void* pointer) const {
    return pointer_locks_[(reinterpret_cast<uintptr_t>(pointer) >> 4) % kPointerLocks];
  }
  template <class T>
  std::shared_ptr<T> LoadShared(const std::shared_ptr<T>& pointer) const {
    std::lock_guard<std::mutex> lock(PointerLock(&pointer));
    return pointer;
  }
  // The value replaced is released after the lock (a lease's release may
  // touch files).
  template <class T>
  void StoreShared(std::shared_ptr<T>* pointer, std::shared_ptr<T> value) const {
    std::lock_guard<std::mutex> lock(PointerLock(pointer));
    pointer->swap(value);  // `value`, now the old one, goes after the lock
  }
  std::atomic<bool> thrash_logged_{false};
  std::mutex leases_mutex_;  // ReleaseBeyondLimit
  // The filler threads, started by the first Queue. A forked child (a torch
  // DataLoader worker) has the object but not the threads: its fork hook
  // leaks the parent's, and its first Queue starts its own. Changed only by
  // StartFillersLocked and the child's fork hook (mutex_ held); ~NodeCache
  // joins them once stopping_.
  std::vector<std::unique_ptr<std::thread>> fillers_;
  // The read engine every fill of this cache copies through (null: pread),
  // made by StartFillersLocked before the fillers, and constant while they
  // run (they read it without a lock). It outlives them: ~NodeCache joins
  // them first. A forked child leaks its parent's engine as it leaks the
  // parent's threads.
  std::unique_ptr<ReadEngine> fill_engine_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_NODE_CACHE_H_
