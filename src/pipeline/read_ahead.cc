#include "pipeline/read_ahead.h"

#include <algorithm>
#include <utility>

#include "util/logging.h"

namespace gpufeed {

namespace {
// A pointer to a shared read's completion that does not own it (an
// aliasing shared_ptr with no control block: copies and resets touch no
// reference count). ReadAhead::SharedRead::done owns it.
std::shared_ptr<const ReadCompletion> Unowned(const std::shared_ptr<const ReadCompletion>& owner) {
  return std::shared_ptr<const ReadCompletion>(std::shared_ptr<const ReadCompletion>(),
                                               owner.get());
}
}  // namespace

ReadAhead::ReadAhead(const Dataset* dataset, std::mutex* mutex, std::condition_variable* changed)
    : dataset_(&ReadPathOf(*dataset)),
      tokens_(AsTokenWindows(*dataset)),
      mutex_(mutex),
      changed_(changed) {}

std::unique_ptr<ReadAhead> ReadAhead::Create(const Dataset* dataset, const IoOptions& io,
                                             std::mutex* mutex, std::condition_variable* changed) {
  std::unique_ptr<ReadAhead> read_ahead(new ReadAhead(dataset, mutex, changed));
  // The decode threads' window bounds what is in flight anyway.
  Status status = ReadEngine::Create(io, &read_ahead->engine_);
  if (!status.ok()) {
    Log().info("loader: read engine unavailable ({}); decode threads read records themselves",
               status.ToString());
    return nullptr;
  }
  read_ahead->queue_depth_ = io.queue_depth;
  ReadAhead* self = read_ahead.get();
  read_ahead->collector_ = std::thread([self] { self->Collect(); });
  return read_ahead;
}

ReadAhead::~ReadAhead() {
  engine_.reset();
  queue_.Close();
  if (collector_.joinable()) collector_.join();
}

void ReadAhead::Reset(uint64_t run) {
  run_ = run;
  submit_cursor_ = 0;
  fetched_.clear();
  direct_.clear();
  shared_reads_.clear();
  lead_keys_.clear();
}

void ReadAhead::Submit(std::unique_lock<std::mutex>& lock, const std::vector<uint64_t>& samples,
                       uint64_t end) {
  if (submit_cursor_ >= end) return;
  uint64_t first = submit_cursor_;
  submit_cursor_ = end;  // claimed: no other worker submits these
  uint64_t run = run_;
  std::vector<uint64_t> tasks;
  std::vector<uint64_t> task_samples;
  tasks.reserve(end - first);
  task_samples.reserve(end - first);
  for (uint64_t task = first; task < end; ++task) {
    tasks.push_back(task);
    task_samples.push_back(samples[task]);
  }
  lock.unlock();
  LocatedTasks batch;
  LocateTasks(tasks, task_samples, &batch);
  lock.lock();
  if (run_ != run) return;  // the run changed meanwhile: nothing to record
  for (uint64_t task : batch.direct) direct_.insert(task);
  std::vector<RangeKey> leads;  // ranges this call reads
  std::vector<ReadRequest> requests = PlanReads(run, &batch, &leads);
  lock.unlock();
  if (!requests.empty() && !engine_->Submit(std::move(requests), &queue_).ok()) {
    lock.lock();
    ReadDirectlyAfterFailedSubmit(batch, leads);
    lock.unlock();
  }
  lock.lock();
  changed_->notify_all();
}

void ReadAhead::LocateTasks(const std::vector<uint64_t>& tasks,
                            const std::vector<uint64_t>& task_samples, LocatedTasks* batch) {
  auto& located = batch->located;
  auto& keys = batch->keys;
  auto& files = batch->files;
  located.reserve(tasks.size());
  keys.reserve(tasks.size());
  files.reserve(tasks.size());
  // Token windows of a block already located in this call take its range
  // (ReadUnitOf): the units seen, with where their first window is in
  // `located` (a few blocks per call: a vector searched from the back).
  std::vector<std::pair<uint64_t, size_t>> units;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const uint64_t unit =
        tokens_ != nullptr ? tokens_->ReadUnitOf(task_samples[i]) : TokenWindows::kNoReadUnit;
    if (unit != TokenWindows::kNoReadUnit) {
      auto seen = std::find_if(units.rbegin(), units.rend(),
                               [unit](const auto& u) { return u.first == unit; });
      if (seen != units.rend()) {
        const size_t lead = seen->second;
        RecordLocation range;  // what WindowIn needs: the range, no name or descriptor
        range.offset = located[lead].second.offset;
        range.length = located[lead].second.length;
        files.push_back(files[lead]);
        keys.push_back(keys[lead]);
        located.emplace_back(tasks[i], std::move(range));
        continue;
      }
    }
    RecordLocation location;
    FileId file = 0;
    if (!dataset_->Locate(task_samples[i], &location) ||
        (!location.whole_file && !FileFor(location, &file))) {
      batch->direct.push_back(tasks[i]);
      continue;
    }
    // The engine reads through its own duplicate of the descriptor: the
    // location need not keep the store's open (a window of one-record
    // shards would hold thousands).
    location.hold.reset();
    location.fd = -1;
    files.push_back(file);
    keys.push_back(RangeKey{file, location.offset, location.length});
    if (unit != TokenWindows::kNoReadUnit && !location.whole_file) {
      units.emplace_back(unit, located.size());
    }
    located.emplace_back(tasks[i], std::move(location));
  }
}

std::vector<ReadRequest> ReadAhead::PlanReads(uint64_t run, LocatedTasks* batch,
                                              std::vector<RangeKey>* leads) {
  std::vector<ReadRequest> requests;
  const std::vector<RangeKey>& keys = batch->keys;
  for (size_t i = 0; i < batch->located.size(); ++i) {
    auto& [task, location] = batch->located[i];
    if (!location.whole_file) {
      auto found = shared_reads_.find(keys[i]);
      if (found != shared_reads_.end()) {
        // Present means in flight or still used (Release erases it with
        // its last user).
        SharedRead& shared = found->second;
        shared.users += 1;
        if (shared.in_flight) {
          shared.followers.emplace_back(task, std::move(location));
        } else {
          fetched_[task] = Fetched{Unowned(shared.done), std::move(location), &shared};
        }
        continue;
      }
      SharedRead& shared = shared_reads_[keys[i]];
      shared.key = keys[i];
      shared.users = 1;
      lead_keys_[Tag(run, task)] = keys[i];
      leads->push_back(keys[i]);
    }
    const uint64_t tag = Tag(run, task);
    ReadRequest request;
    request.tag = tag;
    if (location.whole_file) {
      request.path = location.path;
    } else {
      request.file = batch->files[i];
      request.offset = location.offset;
      request.length = location.length;
    }
    requests.push_back(std::move(request));
    locations_[tag] = std::move(location);
  }
  return requests;
}

void ReadAhead::ReadDirectlyAfterFailedSubmit(const LocatedTasks& batch,
                                              const std::vector<RangeKey>& leads) {
  for (const auto& located : batch.located) direct_.insert(located.first);
  for (const RangeKey& key : leads) {
    auto found = shared_reads_.find(key);
    if (found == shared_reads_.end()) continue;
    for (auto& follower : found->second.followers) direct_.insert(follower.first);
    shared_reads_.erase(found);
  }
}

bool ReadAhead::Take(std::unique_lock<std::mutex>& lock, uint64_t task, const bool& stopping,
                     Fetched* fetched, double* waited_seconds) {
  // The common case: the bytes are here already (token windows take one per
  // window); then no clock read and no wait.
  auto ready = fetched_.find(task);
  if (ready != fetched_.end()) {
    *fetched = std::move(ready->second);
    fetched_.erase(ready);
    return true;
  }
  if (direct_.count(task)) return false;
  auto waited = Clock::now();
  uint64_t run = run_;
  // Another worker may still be locating this task (its Submit runs
  // unlocked) and decide to read it directly: wait for either.
  changed_->wait(lock, [&] {
    return stopping || run_ != run || fetched_.count(task) > 0 || direct_.count(task) > 0;
  });
  *waited_seconds += Seconds(Clock::now() - waited);
  auto found = fetched_.find(task);
  if (found == fetched_.end()) return false;
  *fetched = std::move(found->second);
  fetched_.erase(found);
  return true;
}

void ReadAhead::Release(Fetched* fetched) {
  fetched->completion.reset();
  SharedRead* shared = fetched->shared;
  fetched->shared = nullptr;
  if (shared == nullptr || --shared->users > 0 || shared->in_flight) return;
  shared_reads_.erase(shared->key);  // the buffer goes back to the engine
}

void ReadAhead::AddStats(StageStats* stats) const {
  IoStats io_stats = engine_->stats();
  stats->io_backend = engine_->backend_name();
  stats->io_requests = io_stats.requests;
  stats->io_mean_inflight = io_stats.mean_inflight;
  stats->io_bytes = io_stats.bytes;
  stats->io_inflight_seconds = io_stats.inflight_seconds;
  stats->io_busy_seconds = io_stats.busy_seconds;
  stats->io_queue_depth = queue_depth_;
}

bool ReadAhead::FileFor(const RecordLocation& location, FileId* file) {
  const void* key = location.hold.get();
  if (key == nullptr || location.fd < 0) return false;  // read directly
  std::lock_guard<std::mutex> lock(files_mutex_);
  auto found = engine_files_.find(key);
  if (found != engine_files_.end()) {
    engine_lru_.splice(engine_lru_.begin(), engine_lru_, found->second.lru);
    *file = found->second.id;
    return true;
  }
  // Read directly when the engine cannot take it; the error shows there.
  if (!engine_->AdoptFile(location.fd, location.path, file).ok()) return false;
  engine_lru_.push_front(key);
  engine_files_[key] = EngineFile{*file, location.hold, engine_lru_.begin()};
  while (engine_lru_.size() > kEngineFiles) {
    auto victim = engine_files_.find(engine_lru_.back());
    (void)engine_->CloseFile(victim->second.id);  // reads in flight keep it open until done
    engine_files_.erase(victim);
    engine_lru_.pop_back();
  }
  return true;
}

// Moves completions into fetched_, for the workers waiting on them.
void ReadAhead::Collect() {
  std::vector<ReadCompletion> completions;
  while (true) {
    completions.clear();
    queue_.Wait(1, &completions);
    if (completions.empty()) return;  // closed
    std::lock_guard<std::mutex> lock(*mutex_);
    for (ReadCompletion& completion : completions) {
      uint64_t run = completion.tag >> 40;
      uint64_t task = completion.tag & ((uint64_t{1} << 40) - 1);
      auto location = locations_.find(completion.tag);
      Fetched fetched;
      if (location != locations_.end()) {
        fetched.location = std::move(location->second);
        locations_.erase(location);
      }
      if (run != run_) continue;  // a restarted run: drop (the buffer returns now)
      auto shared = std::make_shared<const ReadCompletion>(std::move(completion));
      fetched.completion = shared;
      auto lead = lead_keys_.find(shared->tag);
      if (lead != lead_keys_.end()) {
        auto read = shared_reads_.find(lead->second);
        if (read != shared_reads_.end()) {
          SharedRead& same = read->second;
          for (auto& [follower, where] : same.followers) {
            fetched_[follower] = Fetched{Unowned(shared), std::move(where), &same};
          }
          same.followers.clear();
          same.in_flight = false;
          if (shared->status.ok()) dataset_->CountLocatedRead(fetched.location, shared->buffer.size());
          same.done = std::move(shared);
          fetched.completion = Unowned(same.done);
          fetched.shared = &same;
        }
        lead_keys_.erase(lead);
      }
      fetched_[task] = std::move(fetched);
    }
    changed_->notify_all();
  }
}

}  // namespace gpufeed
