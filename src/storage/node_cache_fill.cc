// NodeCache's filler threads: the queue of fills (readers' misses at the
// front, prefetches at the back), the copies themselves through
// CacheFiller::Fill / FillBundle (with this cache's fill read engine), and what a fill's progress tells the
// readers waiting for it (node_cache.h). The read side is node_cache.cc.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>

#include "storage/node_cache.h"
#include "util/file.h"
#include "util/fork_hooks.h"
#include "util/logging.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

// NodeCache::SetRetryFillAfterForTesting's value in milliseconds; 0: none.
std::atomic<int64_t> retry_fill_after_for_testing{0};

}  // namespace

void NodeCache::SetRetryFillAfterForTesting(std::chrono::milliseconds first) {
  retry_fill_after_for_testing.store(first.count());
}

std::chrono::milliseconds NodeCache::RetryDelay(uint32_t failures) {
  int64_t first = retry_fill_after_for_testing.load();
  int64_t most = first > 0 ? first * 60 : kRetryFillAfterMax.count();
  if (first <= 0) first = kRetryFillAfter.count();
  int64_t delay = first;
  for (uint32_t i = 1; i < failures && delay < most; ++i) delay *= 2;
  return std::chrono::milliseconds(std::min(delay, most));
}

void NodeCache::StartFillersLocked() {
  if (!fillers_.empty()) return;
  if (!fill_engine_) fill_engine_ = CacheFiller::NewReadEngine();
  for (int i = 0; i < kFillerThreads; ++i) {
    fillers_.push_back(std::make_unique<std::thread>([this] { FillerLoop(); }));
  }
}

void NodeCache::LockAllForFork() {
  slots_mutex_.lock();
  for (auto& slot : slots_) slot->fill_mutex.lock();
  mutex_.lock();
  leases_mutex_.lock();
  for (std::mutex& lock : pointer_locks_) lock.lock();
}

void NodeCache::UnlockAllAfterFork() {
  for (std::mutex& lock : pointer_locks_) lock.unlock();
  leases_mutex_.unlock();
  mutex_.unlock();
  for (auto& slot : slots_) slot->fill_mutex.unlock();
  slots_mutex_.unlock();
}

void NodeCache::ForgetParentFillsInChild() {
  // This thread holds every lock (LockAllForFork); the parent's other
  // threads do not exist here. Their fills, queued or running, are the
  // parent's business: the child sees those files as not being filled, and
  // a read of one queues a fill of the child's own, which finds the
  // parent's fill lock held (another process's fill) or the copy made.
  for (auto& filler : fillers_) (void)filler.release();  // not ours to join
  fillers_.clear();
  (void)fill_engine_.release();  // its thread is the parent's too
  queue_.clear();
  busy_ = 0;
  // A condition variable may list the parent's waiters: a fresh one.
  RenewInChild(&changed_);
  for (auto& slot : slots_) {
    if (slot->state != FillState::kIdle) EndFillLocked(*slot);
    RenewInChild(&slot->fill_changed);
  }
}

void NodeCache::Queue(size_t index, bool front) {
  Slot& slot = *slots_[index];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    StartFillersLocked();
  }
  {
    std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
    if (slot.state == FillState::kFilling) return;
    // A prefetch waits out the delay after a failed fill (kRetryFillAfter);
    // a reader's View and BundleCopy check it before they queue.
    if (!front && slot.state == FillState::kIdle && Clock::now() < slot.retry_after) return;
    bool queued = slot.state == FillState::kQueued;
    slot.state = FillState::kQueued;
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued) {
      if (!front) return;
      auto found = std::find(queue_.begin(), queue_.end(), index);
      if (found == queue_.begin()) return;
      if (found != queue_.end()) queue_.erase(found);
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
      busy_ += 1;
    }
    Slot& slot = *slots_[index];
    if (slot.bad.load()) {
      // Our own readers dropped their leases when they invalidated it; a
      // reader in another process may still hold it: then try next time.
      bool removed = false;
      (void)directory_->Remove(CacheKeyFor(slot.source), &removed);  // held elsewhere: next time
      if (removed) slot.bad.store(false);
    }
    bool filled = false;
    if (!slot.bad.load() && !writes_disabled_.load() && !LoadShared(slot.local)) {
      filled = FillNow(index);
    }
    {
      std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
      EndFillLocked(slot);
      if (filled) {
        slot.failures = 0;
      } else if (!LoadShared(slot.local) && !directory_->HasEntry(slot.source)) {
        slot.attempts += 1;
        slot.failures += 1;
        slot.retry_after = Clock::now() + RetryDelay(slot.failures);
        failed_fills_.fetch_add(1);
      }
    }
    slot.fill_changed.notify_all();
    FlushCounters();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ -= 1;
    }
    changed_.notify_all();
  }
}

bool NodeCache::FillNow(size_t index) {
  Slot& slot = *slots_[index];
  {
    std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
    EndFillLocked(slot);
    slot.state = FillState::kFilling;
  }
  slot.fill_changed.notify_all();
  for (int attempt = 0; attempt < 3; ++attempt) {
    FillResult result;
    Status status = CopyOnce(index, &result);
    switch (result.outcome) {
      case FillOutcome::kFilled:
      case FillOutcome::kAlreadyCached:
        // The copy matches the source's key (and its manifest's checksum):
        // a mismatch an earlier fill saw was a fault's, not the file's.
        slot.mismatched.store(false, std::memory_order_release);
        TryOpenLocal(index);
        return true;
      case FillOutcome::kBusy:
        // Another process copies it: the node reads the source once.
        directory_->WaitForFill(slot.source);
        continue;
      case FillOutcome::kNoRoom:
        if (!no_room_logged_.exchange(true)) {
          Log().warn("cache: {} has no room for {} ({} bytes): its capacity of {} bytes is held "
                     "by entries in use or pinned; such files are read from the source",
                     directory_->path(), slot.source.path, slot.source.size, capacity_);
        }
        return false;
      case FillOutcome::kUnavailable:
        DisableWrites(status.ok() ? std::string("the cache cannot be written") : status.ToString());
        return false;
      case FillOutcome::kSourceChanged:
        NoteSourceChanged(slot, status);
        return false;
    }
  }
  return false;
}

Status NodeCache::CopyOnce(size_t index, FillResult* result) {
  Slot& slot = *slots_[index];
  if (slot.source.bundle()) {
    BundleFillRequest request;
    request.read_member = [&slot](const std::string& path, std::string* data, int64_t* mtime_ns) {
      return slot.members_from->ReadWholeFile(path, data, mtime_ns);
    };
    request.estimate = BundleBytes(index);
    request.budget = budget();
    return directory_->FillBundle(slot.source, request, result);
  }
  FillRequest request;
  request.from = slot.file.get();
  request.budget = budget();
  request.engine = fill_engine_.get();
  // Readers of this file are served from the copy as it is written: the
  // copy is made front to back, so every byte below `filled` is final.
  request.started = [&slot](int temp_fd) {
    int duplicate = ::fcntl(temp_fd, F_DUPFD_CLOEXEC, 0);
    if (duplicate < 0) return;
    std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
    EndFillLocked(slot);  // a new copy: nothing of it is written yet
    slot.state = FillState::kFilling;
    slot.partial = std::make_shared<const UniqueFd>(duplicate);
  };
  // Readers may fetch parts of it meanwhile (FetchIntoCopy): the fill
  // waits for those in flight and reads the rest.
  request.claim = [&slot](uint64_t begin, uint64_t end) {
    std::unique_lock<std::mutex> slot_lock(slot.fill_mutex);
    slot.fill_changed.wait(slot_lock, [&] { return !slot.fetching.Overlaps(begin, end); });
    std::vector<ByteRange> gaps = slot.written.Gaps(begin, end);
    for (const ByteRange& gap : gaps) slot.fetching.Add(gap.first, gap.second);
    return gaps;
  };
  request.readers = [&slot] { return slot.read.load(std::memory_order_relaxed); };
  request.progress = [&slot](uint64_t done, uint64_t) {
    {
      std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
      slot.filled = done;
      slot.fetching.Remove(0, done);  // the fill's claims
      slot.written.Remove(0, done);   // now below `filled`
    }
    slot.fill_changed.notify_all();
  };
  return directory_->Fill(slot.source, request, result);
}

void NodeCache::EndFillLocked(Slot& slot) {
  slot.state = FillState::kIdle;
  slot.partial.reset();
  slot.filled = 0;
  slot.written.Clear();
  slot.fetching.Clear();
  slot.generation += 1;
}

bool NodeCache::FetchIntoCopy(Slot& slot, uint64_t offset, uint64_t end,
                              std::unique_lock<std::mutex>& lock, FileView* view) {
  // Only the parts not written yet (no byte is read from the source twice)
  // and nobody fetches, widened to whole kFetchAlignment blocks: what lies
  // between records (headers, index pages) is fetched with them, or the
  // fill would read each such sliver as a request of its own.
  const uint64_t from = std::max(offset / kFetchAlignment * kFetchAlignment, slot.filled);
  const uint64_t to = std::min(slot.source.size, (end + kFetchAlignment - 1) / kFetchAlignment *
                                                     kFetchAlignment);
  std::vector<ByteRange> gaps;
  for (const ByteRange& unwritten : slot.written.Gaps(from, to)) {
    for (const ByteRange& gap : slot.fetching.Gaps(unwritten.first, unwritten.second)) {
      gaps.push_back(gap);
    }
  }
  for (const ByteRange& gap : gaps) slot.fetching.Add(gap.first, gap.second);
  std::shared_ptr<const UniqueFd> copy = slot.partial;
  const uint64_t generation = slot.generation;
  lock.unlock();
  thread_local std::string buffer;
  FileView source;
  Status status = slot.file->SourceView(&source);
  size_t fetched = 0;  // gaps read and written whole
  for (; status.ok() && fetched < gaps.size(); ++fetched) {
    const size_t length = static_cast<size_t>(gaps[fetched].second - gaps[fetched].first);
    const uint64_t at = gaps[fetched].first;
    buffer.resize(length);
    size_t got = 0;
    status = PreadFull(source.fd, buffer.data(), length, at, source.shown, &got);
    if (got > 0) slot.file->Count(source, got);
    if (status.ok() && got != length) status = Status::IOError(source.shown + ": short read");
    for (size_t put = 0; status.ok() && put < length;) {
      ssize_t n = ::pwrite(copy->get(), buffer.data() + put, length - put,
                           static_cast<off_t>(at + put));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) status = Status::IOError(source.shown + ": cannot write the copy");
      if (n > 0) put += static_cast<size_t>(n);
    }
    if (!status.ok()) break;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  const bool current = slot.generation == generation;
  if (current) {
    for (size_t i = 0; i < gaps.size(); ++i) {
      slot.fetching.Remove(gaps[i].first, gaps[i].second);
      if (i < fetched) slot.written.Add(gaps[i].first, gaps[i].second);
    }
  }
  lock.unlock();
  slot.fill_changed.notify_all();
  lock.lock();
  // A failed gap outside the read's own range (the widening) costs nothing.
  if (!current || !Written(slot, offset, end)) return false;
  FileView local;
  local.fd = copy->get();
  local.local = true;
  local.shown = slot.source.path + " (node-cache copy being filled)";
  local.hold = std::move(copy);
  *view = std::move(local);
  return true;
}

void NodeCache::NoteSourceChanged(Slot& slot, const Status& status) {
  uint32_t failures = 0;
  {
    std::lock_guard<std::mutex> slot_lock(slot.fill_mutex);
    failures = slot.failures + 1;  // this one, counted by FillerLoop after
  }
  const double retry_s = RetryDelay(failures).count() / 1000.0;
  if (slot.source.identified_by_checksum && status.IsCorruption()) {
    // The source is not what the manifest describes: its reads fail
    // (named), rather than serve bytes the dataset's index does not
    // describe, until a later fill finds it matching.
    Log().error("cache: {}; its reads fail until a copy made in {:.1f} s or later matches",
                status.ToString(), retry_s);
    if (!slot.mismatch_written.exchange(true)) slot.mismatch = status;
    slot.mismatched.store(true, std::memory_order_release);
    return;
  }
  // Nothing of this fill is kept or served: its readers go to the source.
  if (!status.ok()) {
    Log().warn("cache: not caching {} now: {}; reading it from the source, and copying it "
               "again in {:.1f} s or later", slot.source.path, status.ToString(), retry_s);
  } else {
    Log().warn("cache: not caching {}: it changed since the dataset was opened",
               slot.source.path);
  }
}

CacheBudget NodeCache::budget() const {
  CacheBudget budget;
  budget.capacity = capacity_;
  budget.high_watermark = options_.high_watermark;
  budget.low_watermark = options_.low_watermark;
  return budget;
}

void NodeCache::DisableWrites(const std::string& why) {
  if (!writes_disabled_.exchange(true)) {
    Log().warn("cache: {}: {}; new copies stop and {} is read from the source (complete copies "
               "are still used)",
               directory_->path(), why, dataset_);
  }
  for (auto& slot : slots_) slot->fill_changed.notify_all();
}

void NodeCache::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

}  // namespace gpufeed
