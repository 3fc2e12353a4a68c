#include "storage/node_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "util/file.h"
#include "util/fork_hooks.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

bool IsStorageUnavailable(const Status& status) {
  // Read-only, full, or not ours to write: the cache steps aside.
  return status.code() == Status::Code::kIOError ||
         status.code() == Status::Code::kPermissionDenied;
}

}  // namespace

Status NodeCache::Open(const CacheOptions& options, const std::string& dataset,
                       std::unique_ptr<NodeCache>* cache) {
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
  *cache = std::move(result);
  return Status::OK();
}

size_t NodeCache::AddFile(std::shared_ptr<const StoreFile> source, const std::string& xxh64) {
  auto slot = std::make_unique<Slot>();
  // The key is made from the size and mtime the source had when it was
  // opened, or for a lazily opened file from its manifest's size and
  // checksum: no extra stat of the (remote) source per file.
  slot->source.path = source->path();
  slot->source.size = source->size();
  slot->source.mtime_ns = source->mtime_ns();
  slot->source.xxh64 = xxh64;
  slot->source.identified_by_checksum = source->lazy() && !xxh64.empty();
  slot->source.dataset = dataset_;
  slot->source.policy = options_.policy;
  slot->file = std::move(source);
  std::lock_guard<std::mutex> lock(slots_mutex_);
  slots_.push_back(std::move(slot));
  return slots_.size() - 1;
}

size_t NodeCache::AddBundle(const std::string& name, std::vector<std::string> members,
                            std::shared_ptr<const Store> source) {
  auto slot = std::make_unique<Slot>();
  // Identified by its name and its members' names: nothing is stat'ed.
  slot->source.path = JoinPath(dataset_, name);
  slot->source.members = std::move(members);
  slot->source.dataset = dataset_;
  slot->source.policy = options_.policy;
  slot->members_from = std::move(source);
  std::lock_guard<std::mutex> lock(slots_mutex_);
  slots_.push_back(std::move(slot));
  return slots_.size() - 1;
}

uint64_t NodeCache::BundleBytes(size_t index) const {
  const Slot& slot = *slots_[index];
  uint64_t known = slot.copy_bytes.load(std::memory_order_relaxed);
  return known != 0 ? known : kBundleMemberEstimate * slot.source.members.size();
}

Status NodeCache::ReadFromSource(Slot& slot, size_t member, std::string* data) {
  misses_.fetch_add(1, std::memory_order_relaxed);
  return slot.members_from->ReadWholeFile(slot.source.members[member], data, nullptr);
}

std::shared_ptr<const CacheLease> NodeCache::BundleCopy(size_t index) {
  Slot& slot = *slots_[index];
  std::shared_ptr<const CacheLease> local = LoadShared(slot.local);
  if (local) return local;
  // One fstatat while the bundle has no copy, as for a file.
  if (!slot.bad.load() && directory_->HasEntry(slot.source)) {
    local = OpenLocal(index);
    if (local) return local;
  }
  if (writes_disabled_.load() || slot.bad.load()) return nullptr;
  std::unique_lock<std::mutex> lock(slot.fill_mutex);
  if (Clock::now() < slot.retry_after) return nullptr;
  if (!options_.wait_for_fill) {
    if (slot.state == FillState::kIdle) {
      lock.unlock();
      Queue(index, /*front=*/true);
    }
    return nullptr;
  }
  // A bundle is served once complete (no member is read from a copy being
  // written): its fill is one read per member, queued ahead of prefetches.
  uint64_t attempts = slot.attempts;
  while (true) {
    if (slot.state == FillState::kIdle) {
      local = OpenLocal(index);
      if (local) return local;
      if (slot.attempts != attempts || Clock::now() < slot.retry_after) return nullptr;
      lock.unlock();
      Queue(index, /*front=*/true);
      lock.lock();
      continue;
    }
    if (slot.state == FillState::kQueued) {
      lock.unlock();
      Queue(index, /*front=*/true);
      lock.lock();
    }
    slot.fill_changed.wait_for(lock, std::chrono::milliseconds(200));
    if (writes_disabled_.load()) return nullptr;
  }
}

Status NodeCache::ReadMember(size_t index, size_t member, std::string* data) {
  Slot& slot = *slots_[index];
  if (member >= slot.source.members.size()) {
    return Status::OutOfRange(slot.source.path + ": no member " + std::to_string(member));
  }
  NotePosition(index);
  slot.read.store(true, std::memory_order_relaxed);
  std::shared_ptr<const CacheLease> local = BundleCopy(index);
  if (!local) return ReadFromSource(slot, member, data);
  slot.last_use.store(use_clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  // The lease is held (by `local`) during the read.
  const std::vector<uint64_t>& offsets = local->member_offsets;
  uint64_t begin = offsets[member];
  uint64_t length = offsets[member + 1] - begin;
  data->resize(static_cast<size_t>(length));
  size_t got = 0;
  Status status = PreadFull(local->data.get(), data->data(), data->size(), begin,
                            slot.source.path + " (node-cache copy " + local->path + ")", &got);
  if (!status.ok() || got != length) {
    Log().warn("cache: cannot read member {} of {} ({}); reading the source",
               member, local->path, status.ok() ? "short read" : status.ToString());
    return ReadFromSource(slot, member, data);
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

bool NodeCache::LocateMember(size_t index, size_t member, FileView* view, uint64_t* offset,
                             uint64_t* length) {
  Slot& slot = *slots_[index];
  if (member >= slot.source.members.size()) return false;
  std::shared_ptr<const CacheLease> local = LoadShared(slot.local);
  if (!local && !slot.bad.load() && directory_->HasEntry(slot.source)) local = OpenLocal(index);
  if (!local) return false;
  NotePosition(index);
  slot.read.store(true, std::memory_order_relaxed);
  slot.last_use.store(use_clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  hits_.fetch_add(1, std::memory_order_relaxed);
  *offset = local->member_offsets[member];
  *length = local->member_offsets[member + 1] - *offset;
  *view = LocalView(slot, std::move(local));
  return true;
}

Status NodeCache::Seal() {
  uint64_t total = 0;
  for (const auto& slot : slots_) total += slot->source.size;
  if (options_.policy == CachePolicy::kPinned && total > capacity_) {
    return Status::InvalidArgument(
        "cache policy \"pinned\": " + dataset_ + " needs " + std::to_string(total) +
        " bytes, more than cache_capacity (" + std::to_string(capacity_) +
        " bytes), so it cannot stay cached; raise cache_capacity or use policy=\"train\"");
  }
  if (options_.policy == CachePolicy::kPinned) {
    // A validation set is read whole at every evaluation: copy it all now.
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!directory_->HasEntry(slots_[i]->source)) Queue(i, false);
    }
  }
  return Status::OK();
}

NodeCache::NodeCache() {
  // Around fork(): every lock of the cache held, so that the child finds
  // them free (their holders are the parent's threads), and the child
  // forgets the parent's fills.
  fork_hooks_ = RegisterForkHooks({[this] { LockAllForFork(); },
                                   [this] { UnlockAllAfterFork(); },
                                   [this] {
                                     ForgetParentFillsInChild();
                                     UnlockAllAfterFork();
                                   }});
}

NodeCache::~NodeCache() {
  UnregisterForkHooks(fork_hooks_);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!fillers_.empty()) {
      // Files this process read, or queued for the next reads: finish them
      // (bounded), so that the next process finds them complete.
      changed_.wait_for(lock, std::chrono::duration<double>(kCloseWaitSeconds),
                        [&] { return queue_.empty() && busy_ == 0; });
    }
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& filler : fillers_) {
    if (filler && filler->joinable()) filler->join();
  }
  FlushCounters();
}

FileView NodeCache::LocalView(const Slot& slot, std::shared_ptr<const CacheLease> local) const {
  FileView view;
  view.fd = local->data.get();
  view.local = true;
  view.shown = slot.source.path + " (node-cache copy " + local->path + ")";
  view.hold = std::move(local);
  return view;
}

// REQUIRES: slot.fill_mutex, and slot.partial set.
FileView NodeCache::PartialView(const Slot& slot) const {
  FileView view;
  view.fd = slot.partial->get();
  view.local = true;
  view.shown = slot.source.path + " (node-cache copy being filled)";
  view.hold = slot.partial;
  return view;
}

Status NodeCache::View(size_t index, uint64_t offset, uint64_t length, FileView* view) {
  Slot& slot = *slots_[index];
  std::shared_ptr<const CacheLease> local = LoadShared(slot.local);
  NotePosition(index);
  slot.read.store(true, std::memory_order_relaxed);
  if (local) {
    slot.last_use.store(use_clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
    hits_.fetch_add(1, std::memory_order_relaxed);
    *view = LocalView(slot, std::move(local));
    return Status::OK();
  }
  // The source is never read under fill_mutex (node_cache.h, lock order).
  std::unique_lock<std::mutex> lock(slot.fill_mutex, std::defer_lock);
  auto from_source = [&] {
    if (lock.owns_lock()) lock.unlock();
    if (slot.mismatched.load(std::memory_order_acquire)) return slot.mismatch;
    misses_.fetch_add(1, std::memory_order_relaxed);
    return slot.file->SourceView(view);
  };
  // One fstatat while the file has no copy: cheap beside a read from the
  // source, and a copy another process completed is used at once.
  // The lease OpenLocal returns is the one used: slot.local may be let go
  // (ReleaseBeyondLimit) by another thread right after.
  if (!slot.bad.load() && directory_->HasEntry(slot.source)) {
    if (std::shared_ptr<const CacheLease> opened = OpenLocal(index)) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      *view = LocalView(slot, std::move(opened));
      return Status::OK();
    }
  }
  if (writes_disabled_.load() || slot.bad.load()) return from_source();
  uint64_t end = std::min(offset + length, slot.source.size);
  lock.lock();
  if (Clock::now() < slot.retry_after) return from_source();
  if (!options_.wait_for_fill) {
    // The copy is made in the background; this read goes to the source,
    // unless the part it needs is already written.
    if (ServeWritten(slot, offset, end, view)) return Status::OK();
    bool fetch = slot.state == FillState::kFilling && slot.partial &&
                 !slot.fetching.Overlaps(offset, end);
    if (fetch && FetchIntoCopy(slot, offset, end, lock, view)) return Status::OK();
    if (slot.state == FillState::kIdle) { lock.unlock(); Queue(index, /*front=*/true); }
    return from_source();
  }
  uint64_t attempts = slot.attempts;
  while (true) {
    if (ServeWritten(slot, offset, end, view)) return Status::OK();
    // Not written, nor being fetched (else wait): this read fetches it into
    // the copy; after a fault, the source's own read reports it.
    if (slot.state == FillState::kFilling && slot.partial && !slot.fetching.Overlaps(offset, end)) {
      if (FetchIntoCopy(slot, offset, end, lock, view)) return Status::OK();
      break;
    }
    if (slot.state == FillState::kIdle) {
      std::shared_ptr<const CacheLease> done = OpenLocal(index);
      if (done) {
        hits_.fetch_add(1, std::memory_order_relaxed);
        *view = LocalView(slot, std::move(done));
        return Status::OK();
      }
      if (slot.attempts != attempts || Clock::now() < slot.retry_after) break;  // it failed
      lock.unlock();
      Queue(index, /*front=*/true);
      lock.lock();
      if (slot.state == FillState::kIdle && !LoadShared(slot.local)) break;  // not queued
      continue;
    }
    if (slot.state == FillState::kQueued) {
      lock.unlock();
      Queue(index, /*front=*/true);  // ahead of prefetches: a reader waits
      lock.lock();
    }
    slot.fill_changed.wait_for(lock, std::chrono::milliseconds(200));
    if (writes_disabled_.load()) break;
  }
  return from_source();
}

bool NodeCache::ServeWritten(const Slot& slot, uint64_t offset, uint64_t end, FileView* view) {
  if (slot.state != FillState::kFilling || !Written(slot, offset, end)) return false;
  hits_.fetch_add(1, std::memory_order_relaxed);
  *view = PartialView(slot);
  return true;
}

std::shared_ptr<const CacheLease> NodeCache::OpenLocal(size_t index) {
  Slot& slot = *slots_[index];
  if (slot.bad.load()) return nullptr;
  std::shared_ptr<const CacheLease> held = LoadShared(slot.local);
  if (held) return held;
  CacheLease lease;
  if (!directory_->OpenEntry(slot.source, &lease).ok()) return nullptr;
  if (slot.source.bundle()) {
    struct stat st;
    if (::fstat(lease.data.get(), &st) == 0) slot.copy_bytes.store(static_cast<uint64_t>(st.st_size));
  }
  auto shared = std::make_shared<const CacheLease>(std::move(lease));
  {
    std::lock_guard<std::mutex> lock(PointerLock(&slot.local));
    if (slot.local) return slot.local;  // another thread opened it first (ours is released)
    slot.local = shared;
  }
  slot.last_use.store(use_clock_.fetch_add(1) + 1);
  ReleaseBeyondLimit(options_.max_leased_shards);
  return shared;
}

void NodeCache::ReleaseBeyondLimit(size_t keep) {
  std::lock_guard<std::mutex> lock(leases_mutex_);
  std::vector<std::pair<uint64_t, size_t>> held;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (LoadShared(slots_[i]->local)) held.emplace_back(slots_[i]->last_use.load(), i);
  }
  if (held.size() <= keep) return;
  std::sort(held.begin(), held.end());
  // The least recently used are let go; a reader that still holds one
  // keeps its lease until it is done with it, and the next read opens the
  // copy again.
  for (size_t i = 0; i + keep < held.size(); ++i) {
    StoreShared(&slots_[held[i].second]->local, std::shared_ptr<const CacheLease>());
  }
}

void NodeCache::Invalidate(size_t index, FileView* view) {
  Slot& slot = *slots_[index];
  std::shared_ptr<const void> held = std::move(view->hold);
  view->fd = -1;
  if (!view->local) return;
  std::shared_ptr<const CacheLease> current = LoadShared(slot.local);
  bool same = current != nullptr && current.get() == held.get();
  held.reset();  // our reference to the lease goes first
  if (!same) return;  // already replaced
  Log().warn("cache: {} (copy of {}) is corrupt; reading the source and copying it again",
             current->path, slot.source.path);
  slot.bad.store(true);
  current.reset();
  StoreShared(&slot.local, std::shared_ptr<const CacheLease>());
  // With the last reference gone the lease is released and the copy can be
  // removed now; if a reader still holds it, the filler tries again.
  bool removed = false;
  if (directory_->Remove(CacheKeyFor(slot.source), &removed).ok() && removed) {
    slot.bad.store(false);
  }
  Queue(index, /*front=*/true);
}

void NodeCache::NotePosition(size_t index) {
  std::shared_ptr<const Plan> plan = LoadShared(plan_);
  if (!plan || index >= plan->rank_of.size()) return;
  size_t rank = plan->rank_of[index];
  if (rank == std::numeric_limits<size_t>::max()) return;
  size_t position = plan->position.load(std::memory_order_relaxed);
  while (rank + 1 > position) {
    if (plan->position.compare_exchange_weak(position, rank + 1)) {
      // The reader moved on to a new file: fetch the next ones ahead.
      for (size_t next = rank + 1;
           next < plan->order.size() && next <= rank + options_.prefetch_shards; ++next) {
        size_t file = plan->order[next];
        if (!LoadShared(slots_[file]->local) && !directory_->HasEntry(slots_[file]->source)) {
          if (!writes_disabled_.load()) Queue(file, /*front=*/false);
        }
      }
      return;
    }
  }
}

void NodeCache::ExpectFiles(std::vector<size_t> first_use_order, uint64_t live_bytes) {
  auto plan = std::make_shared<Plan>();
  plan->rank_of.assign(slots_.size(), std::numeric_limits<size_t>::max());
  for (size_t i = 0; i < first_use_order.size(); ++i) {
    if (first_use_order[i] < slots_.size()) plan->rank_of[first_use_order[i]] = i;
  }
  plan->order = std::move(first_use_order);
  StoreShared(&plan_, std::shared_ptr<const Plan>(plan));
  if (live_bytes > capacity_ && !thrash_logged_.exchange(true)) {
    Log().warn("cache: the epoch order keeps {} bytes of files in use at once, more than the "
               "cache capacity of {} bytes, so most reads go to the source (shuffle=\"global\" "
               "uses every shard throughout the epoch); shuffle=\"block\" reads a few shards at a "
               "time and streams through the cache",
               live_bytes, capacity_);
  }
  FlushCounters();
  // The first files of the epoch, before any read asks.
  for (size_t next = 0; next < plan->order.size() && next < options_.prefetch_shards; ++next) {
    size_t file = plan->order[next];
    if (!LoadShared(slots_[file]->local) && !directory_->HasEntry(slots_[file]->source) &&
        !writes_disabled_.load()) {
      Queue(file, /*front=*/false);
    }
  }
}

void NodeCache::FlushCounters() {
  CacheCounters delta;
  delta.hits = hits_.exchange(0);
  delta.misses = misses_.exchange(0);
  if (delta.empty()) return;
  total_hits_.fetch_add(delta.hits);
  total_misses_.fetch_add(delta.misses);
  Status status = directory_->AddCounters(dataset_, options_.policy, delta);
  if (!status.ok()) {
    total_hits_.fetch_sub(delta.hits);
    total_misses_.fetch_sub(delta.misses);
    hits_.fetch_add(delta.hits);  // counted again next time
    misses_.fetch_add(delta.misses);
  }
}

}  // namespace gpufeed
