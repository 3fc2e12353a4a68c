#include "cache/node_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>

#include "util/logging.h"

namespace gpufeed {

namespace {

bool IsStorageUnavailable(const Status& status) {
  // Read-only, full, or not ours to write: the cache steps aside.
  return status.code() == Status::Code::kIOError ||
         status.code() == Status::Code::kPermissionDenied;
}

}  // namespace

Status NodeCache::Open(const CacheOptions& options, const std::string& dataset,
                       const std::vector<CachedShard>& shards, std::unique_ptr<NodeCache>* cache) {
  cache->reset();
  if (options.cache_dir.empty()) return Status::OK();
  if (!(options.low_watermark > 0 && options.low_watermark <= options.high_watermark &&
        options.high_watermark <= 1.0)) {
    return Status::InvalidArgument("cache watermarks must satisfy 0 < low <= high <= 1 (got low " +
                                   std::to_string(options.low_watermark) + ", high " +
                                   std::to_string(options.high_watermark) + ")");
  }
  if (options.max_leased_shards < 1) {
    return Status::InvalidArgument("max_leased_shards must be at least 1");
  }
  if (options.policy == CachePolicy::kCheckpoint) {
    return Status::InvalidArgument("policy \"checkpoint\" is for checkpoint files "
                                   "(gpufeed.cache.put_checkpoint), not for datasets");
  }
  std::unique_ptr<NodeCache> result(new NodeCache());
  result->options_ = options;
  result->dataset_ = dataset;
  bool unsafe = false;
  Status status = CacheDirectory::Open(options.cache_dir, options.cache_group, /*create=*/true,
                                       &result->directory_, &unsafe);
  if (!status.ok()) {
    if (unsafe || !IsStorageUnavailable(status)) return status;
    Log().warn("cache: cannot use {} ({}); reading {} from the source", options.cache_dir,
               status.ToString(), dataset);
    return Status::OK();
  }
  result->capacity_ = options.capacity;
  if (result->capacity_ == 0) {
    GPUFEED_RETURN_IF_ERROR(result->directory_->DefaultCapacity(&result->capacity_));
    Log().info("cache: {} capacity {} bytes (90% of what its filesystem holds for it)",
               result->directory_->path(), result->capacity_);
  }
  uint64_t total = 0;
  for (const CachedShard& shard : shards) {
    auto slot = std::make_unique<Slot>();
    GPUFEED_RETURN_IF_ERROR(StatCacheSource(shard.path, &slot->source));
    slot->source.xxh64 = shard.xxh64;
    slot->source.dataset = dataset;
    slot->source.policy = options.policy;
    total += slot->source.size;
    result->slots_.push_back(std::move(slot));
  }
  if (options.policy == CachePolicy::kPinned && total > result->capacity_) {
    return Status::InvalidArgument(
        "cache policy \"pinned\": " + dataset + " needs " + std::to_string(total) +
        " bytes, more than cache_capacity (" + std::to_string(result->capacity_) +
        " bytes), so it cannot stay cached; raise cache_capacity or use policy=\"train\"");
  }
  NodeCache* self = result.get();
  result->filler_pid_ = ::getpid();
  result->filler_ = std::make_unique<std::thread>([self] { self->FillerLoop(); });
  if (options.policy == CachePolicy::kPinned) {
    // A validation set is read whole at every evaluation: copy it all now.
    for (size_t i = 0; i < result->slots_.size(); ++i) result->Queue(i, false);
  }
  *cache = std::move(result);
  return Status::OK();
}

NodeCache::~NodeCache() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (filler_pid_ != ::getpid()) {
    (void)filler_.release();  // the parent's thread: not ours to join
  } else if (filler_ && filler_->joinable()) {
    filler_->join();
  }
  FlushCounters();
}

std::shared_ptr<const CacheLease> NodeCache::Acquire(size_t index) {
  Slot& slot = *slots_[index];
  std::shared_ptr<const CacheLease> local = std::atomic_load(&slot.local);
  NotePosition(index);
  if (local) {
    slot.last_use.store(use_clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
    return local;
  }
  if (options_.wait_for_fill) {
    std::lock_guard<std::mutex> guard(slot.fill_mutex);
    local = std::atomic_load(&slot.local);
    if (local) return local;
    if (!TryOpenLocal(index) && !writes_disabled_.load()) {
      FillNow(index, /*wait_for_others=*/true);
      TryOpenLocal(index);
    }
    return std::atomic_load(&slot.local);
  }
  // One fstatat while the shard has no copy: cheap beside a read from the
  // source, and a copy another process completes is used at once.
  if (slot.queued.load(std::memory_order_relaxed) || !directory_->HasEntry(slot.source)) {
    if (!writes_disabled_.load()) Queue(index, /*front=*/true);
    return nullptr;
  }
  if (TryOpenLocal(index)) return std::atomic_load(&slot.local);
  if (!writes_disabled_.load()) Queue(index, /*front=*/true);
  return nullptr;
}

bool NodeCache::TryOpenLocal(size_t index) {
  Slot& slot = *slots_[index];
  if (slot.bad.load()) return false;
  CacheLease lease;
  if (!directory_->OpenEntry(slot.source, &lease).ok()) return false;
  auto shared = std::make_shared<const CacheLease>(std::move(lease));
  std::shared_ptr<const CacheLease> expected;
  if (std::atomic_compare_exchange_strong(&slot.local, &expected, shared)) {
    slot.last_use.store(use_clock_.fetch_add(1) + 1);
    ReleaseBeyondLimit(options_.max_leased_shards);
  }
  return true;
}

void NodeCache::ReleaseBeyondLimit(size_t keep) {
  std::lock_guard<std::mutex> lock(leases_mutex_);
  std::vector<std::pair<uint64_t, size_t>> held;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (std::atomic_load(&slots_[i]->local)) held.emplace_back(slots_[i]->last_use.load(), i);
  }
  if (held.size() <= keep) return;
  std::sort(held.begin(), held.end());
  // The least recently used go back to the source; a reader that still
  // holds one keeps its lease until it is done with it.
  for (size_t i = 0; i + keep < held.size(); ++i) {
    std::atomic_store(&slots_[held[i].second]->local, std::shared_ptr<const CacheLease>());
  }
}

void NodeCache::Invalidate(size_t index, const CacheLease* local) {
  Slot& slot = *slots_[index];
  std::shared_ptr<const CacheLease> current = std::atomic_load(&slot.local);
  if (current.get() != local) return;  // already replaced
  Log().warn("cache: {} (copy of {}) is corrupt; reading the source and copying it again",
             local->path, slot.source.path);
  slot.bad.store(true);
  current.reset();
  std::atomic_store(&slot.local, std::shared_ptr<const CacheLease>());
  // With the last reference gone the lease is released and the copy can be
  // removed now; if a reader still holds it, the filler tries again.
  bool removed = false;
  if (directory_->Remove(CacheKeyFor(slot.source), &removed).ok() && removed) {
    slot.bad.store(false);
  }
  Queue(index, /*front=*/true);
}

void NodeCache::Queue(size_t index, bool front) {
  Slot& slot = *slots_[index];
  if (slot.queued.exchange(true) && filler_pid_ == ::getpid()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (filler_pid_ != ::getpid()) {
      // Forked after Open: what the parent had queued is its business.
      (void)filler_.release();
      queue_.clear();
      busy_ = false;
      for (auto& other : slots_) other->queued.store(false);
      slot.queued.store(true);
      filler_pid_ = ::getpid();
      filler_ = std::make_unique<std::thread>([this] { FillerLoop(); });
    }
    if (front) {
      queue_.push_front(index);
    } else {
      queue_.push_back(index);
    }
  }
  changed_.notify_all();
}

void NodeCache::FillerLoop() {
  while (true) {
    size_t index = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      index = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    Slot& slot = *slots_[index];
    if (slot.bad.load()) {
      // Our own readers dropped their leases when they invalidated it; a
      // reader in another process may still hold it: then try next time.
      bool removed = false;
      directory_->Remove(CacheKeyFor(slot.source), &removed);
      if (removed) slot.bad.store(false);
    }
    if (!slot.bad.load() && !writes_disabled_.load() && !std::atomic_load(&slot.local)) {
      FillNow(index, /*wait_for_others=*/false);
    }
    slot.queued.store(false);
    FlushCounters();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

bool NodeCache::FillNow(size_t index, bool wait_for_others) {
  Slot& slot = *slots_[index];
  for (int attempt = 0; attempt < 3; ++attempt) {
    FillOutcome outcome = FillOutcome::kUnavailable;
    uint64_t copied = 0;
    Status status = directory_->Fill(slot.source, capacity_, options_.high_watermark,
                                     options_.low_watermark, &outcome, &copied);
    switch (outcome) {
      case FillOutcome::kFilled:
      case FillOutcome::kAlreadyCached:
        return true;
      case FillOutcome::kBusy:
        if (!wait_for_others) return false;
        directory_->WaitForFill(slot.source);
        continue;
      case FillOutcome::kNoRoom:
        if (!no_room_logged_.exchange(true)) {
          Log().warn("cache: {} has no room for {} ({} bytes): its capacity of {} bytes is held "
                     "by entries in use or pinned; such shards are read from the source",
                     directory_->path(), slot.source.path, slot.source.size, capacity_);
        }
        return false;
      case FillOutcome::kUnavailable:
        DisableWrites(status.ok() ? std::string("the cache cannot be written") : status.ToString());
        return false;
      case FillOutcome::kSourceChanged:
        if (!status.ok()) {
          Log().warn("cache: not caching {}: {}", slot.source.path, status.ToString());
        } else {
          Log().warn("cache: not caching {}: it changed since the dataset was opened",
                     slot.source.path);
        }
        return false;
    }
  }
  return false;
}

void NodeCache::DisableWrites(const std::string& why) {
  if (!writes_disabled_.exchange(true)) {
    Log().warn("cache: {}: {}; new copies stop and {} is read from the source (complete copies "
               "are still used)",
               directory_->path(), why, dataset_);
  }
}

void NodeCache::NotePosition(size_t index) {
  std::shared_ptr<const Plan> plan = std::atomic_load(&plan_);
  if (!plan || index >= plan->rank_of.size()) return;
  size_t rank = plan->rank_of[index];
  if (rank == std::numeric_limits<size_t>::max()) return;
  size_t position = plan->position.load(std::memory_order_relaxed);
  while (rank + 1 > position) {
    if (plan->position.compare_exchange_weak(position, rank + 1)) {
      // The reader moved on to a new shard: fetch the next ones ahead.
      for (size_t next = rank + 1;
           next < plan->order.size() && next <= rank + options_.prefetch_shards; ++next) {
        size_t shard = plan->order[next];
        if (!std::atomic_load(&slots_[shard]->local) && !directory_->HasEntry(slots_[shard]->source)) {
          if (!writes_disabled_.load()) Queue(shard, /*front=*/false);
        }
      }
      return;
    }
  }
}

void NodeCache::ExpectShards(std::vector<size_t> first_use_order, uint64_t live_bytes) {
  auto plan = std::make_shared<Plan>();
  plan->rank_of.assign(slots_.size(), std::numeric_limits<size_t>::max());
  for (size_t i = 0; i < first_use_order.size(); ++i) {
    if (first_use_order[i] < slots_.size()) plan->rank_of[first_use_order[i]] = i;
  }
  plan->order = std::move(first_use_order);
  std::atomic_store(&plan_, std::shared_ptr<const Plan>(plan));
  if (live_bytes > capacity_ && !thrash_logged_.exchange(true)) {
    Log().warn("cache: the epoch order keeps {} bytes of shards in use at once, more than the "
               "cache capacity of {} bytes, so most reads go to the source (shuffle=\"global\" "
               "uses every shard throughout the epoch); shuffle=\"block\" reads a few shards at a "
               "time and streams through the cache",
               live_bytes, capacity_);
  }
  FlushCounters();
  // The first shards of the epoch, before any read asks.
  for (size_t next = 0; next < plan->order.size() && next < options_.prefetch_shards; ++next) {
    size_t shard = plan->order[next];
    if (!std::atomic_load(&slots_[shard]->local) && !directory_->HasEntry(slots_[shard]->source) &&
        !writes_disabled_.load()) {
      Queue(shard, /*front=*/false);
    }
  }
}

void NodeCache::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void NodeCache::FlushCounters() {
  CacheCounters delta;
  delta.hits = hits_.exchange(0);
  delta.misses = misses_.exchange(0);
  if (delta.empty()) return;
  Status status = directory_->AddCounters(dataset_, options_.policy, delta);
  if (!status.ok()) {
    hits_.fetch_add(delta.hits);  // counted again next time
    misses_.fetch_add(delta.misses);
  }
}

}  // namespace gpufeed
