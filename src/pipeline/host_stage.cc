#include "pipeline/host_stage.h"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "batch/batch_access.h"
#include "batch/host_allocator.h"
#include "device/pinned_host.h"
#include "pipeline/sampler.h"
#include "util/logging.h"
#include "util/system_stats.h"

namespace gpufeed {

namespace {
// WorkSchedule::time_per_run: runs per reading of the thread's CPU time
// (see TimeRun).
constexpr int kCpuSampleRuns = 8;
}  // namespace

Status HostStage::Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                         HostStageSetup setup, std::unique_ptr<HostStage>* stage) {
  BatchLayout layout;
  GPUFEED_RETURN_IF_ERROR(setup.kind->Layout(*dataset, &layout));
  uint64_t max_held_bytes = options.max_held_bytes;
  if (max_held_bytes == 0) {
    // A quarter of the machine's memory.
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    max_held_bytes = pages > 0 && page > 0
                         ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4
                         : uint64_t{1} << 32;
  }
  auto ring = std::make_shared<BatchRing>(
      options.allocator ? options.allocator : MakeHostAllocator(),
      layout.data_bytes(options.batch_size),
      std::max<size_t>(1, layout.label_bytes(options.batch_size)),
      max_held_bytes, options.batch_size);
  GPUFEED_RETURN_IF_ERROR(
      ring->Allocate(static_cast<size_t>(options.prefetch) + 1 + setup.extra_slots));
  std::unique_ptr<HostStage> host(
      new HostStage(std::move(dataset), options, std::move(setup), layout, std::move(ring)));
  // CanLocate, not Locate(0): a shard served from a node-cache copy is not
  // located, yet the others still want the engine.
  const DatasetBase& read_path = ReadPathOf(*host->dataset_);
  if (host->setup_.use_read_engine && read_path.size() > 0 && read_path.CanLocate()) {
    IoOptions io = options.io;
    const uint64_t floor = host->setup_.kind->Schedule(host->shard_sizes_, true).min_read_budget;
    if (floor > io.inflight_bytes) {
      Log().info("read buffers raised from {} to {} KiB: {} samples share block reads, and a "
                 "shuffle window's blocks stay held while the next window's are read",
                 io.inflight_bytes >> 10, floor >> 10, host->setup_.kind->name());
      io.inflight_bytes = static_cast<size_t>(floor);
    }
    host->read_ahead_ =
        ReadAhead::Create(host->dataset_.get(), io, &host->ring_->mutex, &host->ring_->changed);
  }
  host->schedule_ = host->setup_.kind->Schedule(host->shard_sizes_, host->read_ahead_ != nullptr);
  WorkSchedule& schedule = host->schedule_;
  // Random reads, one per sample, that are the work, and no read-ahead of the kind's own.
  const bool random = options.shuffle == ShuffleMode::kGlobal || options.shuffle == ShuffleMode::kNode;
  if (host->read_ahead_ && random && schedule.random_read_ahead && !schedule.whole_runs &&
      schedule.read_ahead_tasks == 0) {
    uint64_t bytes = 0;
    for (const ShardInfo& shard : host->dataset_->shards()) bytes += shard.bytes;
    const uint64_t samples = std::max<uint64_t>(1, host->dataset_->size());
    schedule.read_ahead_tasks =
        GlobalShuffleReadAhead(options.io, bytes > 0 ? bytes / samples : uint64_t{64} << 10);
    schedule.submit_chunk = std::max<uint64_t>(1, static_cast<uint64_t>(options.io.queue_depth) / 4);
  }
  host->stats_.started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(host->ring_->mutex);
    host->StartRun(0, 0);
  }
  HostStage* self = host.get();
  for (int i = 0; i < host->threads_; ++i) host->workers_.emplace_back([self] { self->Work(); });
  *stage = std::move(host);
  return Status::OK();
}

HostStage::HostStage(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                     HostStageSetup setup, const BatchLayout& layout,
                     std::shared_ptr<BatchRing> ring)
    : dataset_(std::move(dataset)),
      options_(options),
      setup_(std::move(setup)),
      layout_(layout),
      writer_(dataset_.get(), setup_.kind, layout_, options.batch_size, options.label_lengths),
      ring_(std::move(ring)) {
  threads_ = options.num_threads > 0
                 ? options.num_threads
                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  shard_sizes_ = ReadPathOf(*dataset_).BlockSizes();
}

HostStage::~HostStage() {
  {
    std::lock_guard<std::mutex> lock(ring_->mutex);
    stopping_ = true;
  }
  ring_->changed.notify_all();
  ring_->batch_done.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // The engine finishes its reads in flight, then its collector stops.
  read_ahead_.reset();
}

// Computes this rank's samples for (epoch, consumed) and resets the slots.
// REQUIRES: the lock; no worker is processing a sample (see Quiesce).
void HostStage::StartRun(uint64_t epoch, uint64_t consumed) {
  SamplerOptions sampler = SamplerOptionsFor(options_);
  std::vector<uint64_t> order;
  // A run of another epoch, or from before the history's end (SetEpoch),
  // draws a fresh order: the history no longer describes where we stand.
  if (earlier_epoch_ != epoch || earlier_.empty() || consumed < earlier_.back().until) {
    earlier_.clear();
  }
  // SetEarlierSplits checked the history; the options were checked by Open.
  (void)EpochOrderAfter(shard_sizes_, sampler, epoch, earlier_, &order);
  epoch_size_ = order.size();
  // The list is the epoch's: a run that starts it (or another epoch) drops it.
  if (epoch != epoch_ || consumed == 0) skipped_.clear();
  max_skipped_ = options_.max_skipped >= 1
                     ? options_.max_skipped
                     : options_.max_skipped *
                           static_cast<double>(SamplesPerRank(epoch_size_, sampler));
  // It fails only for options Loader::Open has already refused.
  (void)RankSamples(order, consumed, sampler, &samples_);
  ReadPathOf(*dataset_).ExpectReads(samples_);  // a node cache fetches the coming shards ahead
  epoch_ = epoch;
  run_start_ = consumed;
  batches_ = (samples_.size() + options_.batch_size - 1) / options_.batch_size;
  next_task_ = 0;
  delivered_ = 0;
  delivered_samples_ = 0;
  end_signalled_ = false;
  order_changed_ = false;
  run_ += 1;
  if (read_ahead_) read_ahead_->Reset(run_);
  ring_->Unassign();
}

// Waits until no worker processes a sample of the current run.
void HostStage::Quiesce(std::unique_lock<std::mutex>& lock) {
  accepting_ = false;
  ring_->changed.wait(lock, [&] { return active_ == 0; });
  accepting_ = true;
}

Status HostStage::Seek(const BatchCursor& cursor) {
  std::unique_lock<std::mutex> lock(ring_->mutex);
  // To where the current run starts, none of it delivered yet (set_epoch
  // right after opening): the run goes on, and keeps the reads it started
  // and the batches it made. Restarting would read them all again.
  // (A node split history, which a restart may drop, always restarts.)
  if (!end_signalled_ && !order_changed_ && earlier_.empty() && delivered_ == 0 &&
      cursor.epoch == epoch_ && cursor.consumed == run_start_) {
    return Status::OK();
  }
  Quiesce(lock);
  StartRun(cursor.epoch, cursor.consumed);
  lock.unlock();
  ring_->changed.notify_all();
  ring_->batch_done.notify_all();
  return Status::OK();
}

Status HostStage::SetEarlierSplits(uint64_t epoch, std::vector<NodeSplitSegment> earlier) {
  if (!earlier.empty()) {
    std::vector<uint64_t> order;
    GPUFEED_RETURN_IF_ERROR(
        EpochOrderAfter(shard_sizes_, SamplerOptionsFor(options_), epoch, earlier, &order));
  }
  std::lock_guard<std::mutex> lock(ring_->mutex);
  earlier_ = std::move(earlier);
  earlier_epoch_ = epoch;
  order_changed_ = true;
  return Status::OK();
}

std::vector<NodeSplitSegment> HostStage::EarlierSplitsAt(const BatchCursor& cursor) const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  if (earlier_.empty() || cursor.epoch != earlier_epoch_) return {};
  return earlier_;
}

BatchCursor HostStage::Position() const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  if (end_signalled_) return BatchCursor{epoch_ + 1, 0};
  return BatchCursor{
      epoch_, std::min<uint64_t>(epoch_size_, run_start_ + delivered_samples_ * options_.world_size)};
}

uint64_t HostStage::epoch() const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  return epoch_;
}

void HostStage::AddStats(StageStats* stats) const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  FillStatsLocked(stats);
}

void HostStage::FillStatsLocked(StageStats* stats) const {
  stats_.Fill(threads_, stats);
  stats->sample_kind = setup_.kind->name();
  setup_.kind->AddStats(stats);
  if (read_ahead_) read_ahead_->AddStats(stats);
}

Status HostStage::NextFor(Batch* batch, int timeout_ms, bool* ready) {
  *ready = true;
  batch->reset();
  std::unique_lock<std::mutex> lock(ring_->mutex);
  if (end_signalled_) {
    // The epoch after the one that just ended.
    Quiesce(lock);
    StartRun(epoch_ + 1, 0);
    ring_->changed.notify_all();
  }
  if (delivered_ >= batches_) {
    end_signalled_ = true;
    BatchAccess::FillEndOfEpoch(batch, epoch_, delivered_);
    return Status::OK();
  }
  uint64_t k = delivered_;
  stats_.ready_sum += ring_->Ready(delivered_);
  stats_.ready_count += 1;
  if (ring_->Find(k) == nullptr && ring_->Free() == nullptr && ring_->AllHeld()) {
    // Every buffer is held by the consumer (list(loader), batches kept
    // for evaluation): waiting would never end, so the ring grows.
    GPUFEED_RETURN_IF_ERROR(ring_->GrowLocked());
    ring_->changed.notify_all();
  }
  auto complete = [&] {
    const Slot* found = ring_->Find(k);
    return found != nullptr && found->done == found->samples;
  };
  if (!WaitForBatch(ring_->batch_done, lock, timeout_ms, complete, &stats_.consumer_wait)) {
    *ready = false;
    return Status::OK();
  }
  Slot& slot = *ring_->Find(k);
  delivered_ += 1;
  // The batch's tasks, skipped ones included: the epoch's position.
  delivered_samples_ += static_cast<uint64_t>(slot.samples);
  int rows = slot.samples;
  if (slot.error.ok()) slot.error = TakeSkipped(slot, &rows);
  if (!slot.error.ok()) {
    Status error = slot.error;
    // Raise mode (or max_skipped passed): the batch is lost, the loader
    // moves on.
    slot.batch = kNoBatch;
    lock.unlock();
    ring_->changed.notify_all();
    return error;
  }
  stats_.batches += 1;
  stats_.samples += static_cast<uint64_t>(rows);
  HandOut(slot, k, rows, batch);
  // The window moved by one batch: the workers wake when that lets one
  // start (a wake-up that finds nothing to do still costs a context switch).
  const bool startable = next_task_ < samples_.size() && CanStart(next_task_);
  lock.unlock();
  if (startable) ring_->changed.notify_all();
  return Status::OK();
}

// Fills *batch with the first `rows` rows of `slot` (batch k), which the
// consumer holds from now on. REQUIRES: the lock.
void HostStage::HandOut(Slot& slot, uint64_t k, int rows, Batch* batch) {
  slot.held = true;
  Tensor data;
  data.data = slot.data;
  data.dtype = layout_.data_dtype;
  data.shape = {rows};
  data.shape.insert(data.shape.end(), layout_.sample_shape.begin(), layout_.sample_shape.end());
  Tensor labels;
  labels.data = layout_.labels_in_data
                    ? static_cast<char*>(slot.data) +
                          layout_.plane_offset(layout_.extras.size(), options_.batch_size)
                    : static_cast<char*>(slot.labels) + layout_.lengths_bytes;
  labels.dtype = layout_.label_dtype;
  labels.shape = {rows};
  labels.shape.insert(labels.shape.end(), layout_.label_shape.begin(), layout_.label_shape.end());
  std::vector<uint64_t> ids(slot.sample_ids.begin(), slot.sample_ids.begin() + rows);
  size_t slot_index = slot.index;
  std::shared_ptr<BatchRing> ring = ring_;
  auto release = [ring, slot_index](std::shared_ptr<HostReleaseFence> fence) {
    ring->Release(slot_index, std::move(fence));
  };
  std::shared_ptr<void> hold;
  std::shared_ptr<DeviceBatchHandle> pinned;
  if (setup_.pinned_device >= 0) {
    // The slot goes back with a fence: the consumer may still be copying
    // from it asynchronously (x.cuda(non_blocking=True)).
    pinned = MakePinnedBatchHandle(setup_.pinned_device, release);
  } else {
    hold = std::shared_ptr<void>(nullptr, [release](void*) { release(nullptr); });
  }
  BatchAccess::Fill(batch, std::move(data), std::move(labels), std::move(ids), epoch_, k, false,
                    std::move(hold), std::move(pinned));
  if (!layout_.extras.empty()) {
    BatchAccess::SetExtras(batch,
                           ExtraTensors(layout_, options_.batch_size, slot.data, rows));
  }
  if (layout_.lengths_bytes > 0) {
    Tensor lengths;
    lengths.data = slot.labels;
    lengths.dtype = TensorDtype::kInt32;
    lengths.shape = {rows};
    BatchAccess::SetLabelLengths(batch, std::move(lengths));
  }
}

// REQUIRES: the lock.
bool HostStage::CanStart(uint64_t task) {
  uint64_t k = task / options_.batch_size;
  if (ring_->Find(k) != nullptr) return true;
  if (k >= delivered_ + options_.prefetch) return false;  // NextFor moves the window
  if (ring_->Free() != nullptr) return true;
  ring_->wanted_free_slot = true;  // only a released slot helps: Release wakes the workers
  return false;
}

// Claims the next run of tasks: up to schedule_.run_tasks from next_task_, in
// up to schedule_.max_run_batches batches that can start now, assigning their slots. A run
// that fills several batches shares one lock round trip and one wake-up of
// the consumer among them (it then finds the next batches ready). Returns
// the tasks claimed. REQUIRES: the lock; CanStart(next_task_).
uint64_t HostStage::ClaimRun(std::vector<RunPart>* parts) {
  const uint64_t first = next_task_;
  parts->clear();
  uint64_t count = 0;
  while (count < schedule_.run_tasks && first + count < samples_.size()) {
    const uint64_t task = first + count;
    if (count > 0 && (parts->size() >= schedule_.max_run_batches || !CanStart(task))) break;
    const uint64_t k = task / options_.batch_size;
    const uint64_t batch_end = std::min<uint64_t>((k + 1) * options_.batch_size, samples_.size());
    const uint64_t n = std::min<uint64_t>(schedule_.run_tasks - count, batch_end - task);
    Slot* found = ring_->Find(k);
    if (found == nullptr) found = ring_->Free();  // CanStart made sure there is one
    if (found->batch != k) {
      found->batch = k;
      found->samples = static_cast<int>(
          std::min<uint64_t>(options_.batch_size, samples_.size() - k * options_.batch_size));
      found->done = 0;
      found->error = Status::OK();
      found->skipped.clear();
    }
    parts->push_back(RunPart{found, found->fence, task, n});
    count += n;
  }
  next_task_ = first + count;
  return count;
}

// A decode thread: claims a run, fetches its bytes, writes it unlocked,
// then publishes it, until the stage stops.
void HostStage::Work() {
  WorkerRun run;
  std::unique_lock<std::mutex> lock(ring_->mutex);
  while (true) {
    auto wait_started = Clock::now();
    ring_->changed.wait(lock, [&] {
      return stopping_ || (accepting_ && next_task_ < samples_.size() && CanStart(next_task_));
    });
    stats_.blocked += Seconds(Clock::now() - wait_started);
    if (stopping_) return;
    run.first = next_task_;
    run.count = ClaimRun(&run.parts);
    run.epoch = epoch_;
    active_ += 1;
    run.figures = WorkFigures();
    FetchRun(lock, &run);
    lock.unlock();
    WriteRun(&run);
    lock.lock();
    FinishRun(&run);
  }
}

// The engine's bytes of the claimed run: submits what the window allows
// (in chunks of schedule_.submit_chunk tasks once the run is submitted:
// each Submit takes and drops the lock, and the read-ahead stays far ahead
// of the runs), then takes each task's completion. REQUIRES: the lock.
void HostStage::FetchRun(std::unique_lock<std::mutex>& lock, WorkerRun* run) {
  if (schedule_.whole_runs) return;  // the kind reads its runs itself (no per-task bytes)
  run->fetched.assign(run->count, ReadAhead::Fetched());
  run->have_bytes.assign(run->count, 0);
  if (!read_ahead_) return;
  const uint64_t window_end = std::min<uint64_t>(
      samples_.size(),
      (delivered_ + static_cast<uint64_t>(options_.prefetch)) * options_.batch_size +
          schedule_.read_ahead_tasks);
  const uint64_t submitted = read_ahead_->submitted();
  // The run's last tasks go out once the window reaches them, not when a
  // worker claims them: a token block read is shared by the windows
  // submitted while it is held, so one of its windows submitted after the
  // others were released would read the block again.
  const bool tail = window_end == samples_.size() && submitted < window_end;
  if (submitted < run->first + run->count || window_end >= submitted + schedule_.submit_chunk ||
      tail) {
    auto submit_started = Clock::now();
    read_ahead_->Submit(lock, samples_, window_end);
    run->figures.read += Seconds(Clock::now() - submit_started);
  }
  for (uint64_t i = 0; i < run->count; ++i) {
    run->have_bytes[i] = read_ahead_->Take(lock, run->first + i, stopping_, &run->fetched[i],
                                           &run->figures.read);
  }
}

// WorkSchedule::time_per_run: the kind's samples take microseconds each, so
// their CPU time is not read per sample (a system call) but around every
// kCpuSampleRuns-th run, and the share of the wall time on a CPU seen there
// applies to the runs between.
HostStage::RunTimer HostStage::StartRunTimer(WorkerRun* run) const {
  RunTimer timer;
  if (!schedule_.time_per_run) return timer;
  timer.sample_cpu = run->cpu_sample_countdown-- == 0;
  if (timer.sample_cpu) run->cpu_sample_countdown = kCpuSampleRuns - 1;
  timer.cpu_before = timer.sample_cpu ? ThreadCpuSeconds() : 0;
  timer.wall_before = Clock::now();
  timer.before = run->figures;
  return timer;
}

// The run's write time (without the reads and embedding lookups done inside
// it: their time stays read and lookup), wall and CPU, the CPU capped by
// the wall.
void HostStage::StopRunTimer(const RunTimer& timer, WorkerRun* run) const {
  if (!schedule_.time_per_run) return;
  WorkFigures& figures = run->figures;
  const double wall =
      std::max(0.0, Seconds(Clock::now() - timer.wall_before) - (figures.read - timer.before.read) -
                        (figures.lookup - timer.before.lookup));
  if (timer.sample_cpu && wall > 0) {
    const double cpu =
        ThreadCpuSeconds() - timer.cpu_before - (figures.lookup_cpu - timer.before.lookup_cpu);
    run->on_cpu_share = std::max(0.0, std::min(1.0, cpu / wall));
  }
  figures.decode = timer.before.decode + wall;
  figures.decode_cpu = timer.before.decode_cpu + wall * run->on_cpu_share;
}

// Publishes the run: bytes back to the engine, figures, each slot's samples
// first error and skipped samples. A finished sample matters to the consumer only when it
// completes the batch the consumer waits for, and to Quiesce when it was
// the last one in progress, so only those wake anyone. REQUIRES: the lock.
void HostStage::FinishRun(WorkerRun* run) {
  if (read_ahead_ && !schedule_.whole_runs) {
    for (uint64_t i = 0; i < run->count; ++i) read_ahead_->Release(&run->fetched[i]);
  }
  active_ -= 1;
  stats_.Add(run->figures);
  bool awaited = false;
  for (const RunPart& part : run->parts) {
    Slot& slot = *part.slot;
    for (uint64_t i = part.first - run->first; i < part.first - run->first + part.count; ++i) {
      slot.sample_ids[(run->first + i) % options_.batch_size] = samples_[run->first + i];
      if (!run->statuses[i].ok() && slot.error.ok()) slot.error = run->statuses[i];
    }
    for (SkippedRow& skip : run->skips) {
      if (skip.task >= part.first && skip.task < part.first + part.count) {
        slot.skipped.push_back(std::move(skip));
      }
    }
    slot.done += static_cast<int>(part.count);
    awaited = awaited || (slot.done == slot.samples && slot.batch == delivered_);
  }
  if (awaited) ring_->batch_done.notify_all();
  if (active_ == 0 && !accepting_) ring_->changed.notify_all();
}

}  // namespace gpufeed
