// The C++ Loader: sampler -> read + decode pool -> ordered batches.
//
// Work is handed out one sample at a time in epoch order. Batch k of a run
// lives in slot k % (prefetch + 1); a worker may start a sample of batch k
// when its slot is assigned to k, or free (not held by the consumer, its
// previous batch delivered) and k is within `prefetch` batches of the
// consumer. Each worker reads its record, decodes and transforms it
// straight into its place in the slot, and the consumer takes batches in
// order as they complete. A Batch holds its slot until it is destroyed.
#include "gpufeed/loader.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "decode/transform.h"
#include "device/device_stage.h"
#include "io/read_engine.h"
#include "pipeline/batch_access.h"
#include "pipeline/sampler.h"
#include "pipeline/verdict.h"
#include "util/logging.h"

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

namespace gpufeed {

// ---------------------------------------------------------------- batch

size_t TensorDtypeSize(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8: return 1;
    case TensorDtype::kFloat16:
    case TensorDtype::kBfloat16: return 2;
    case TensorDtype::kInt32:
    case TensorDtype::kFloat32: return 4;
    case TensorDtype::kInt64: return 8;
  }
  return 1;
}

const char* TensorDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kUint8: return "uint8";
    case TensorDtype::kInt32: return "int32";
    case TensorDtype::kInt64: return "int64";
    case TensorDtype::kFloat16: return "float16";
    case TensorDtype::kBfloat16: return "bfloat16";
    case TensorDtype::kFloat32: return "float32";
  }
  return "unknown";
}

size_t Tensor::bytes() const {
  size_t count = 1;
  for (int64_t dimension : shape) count *= static_cast<size_t>(dimension);
  return count * TensorDtypeSize(dtype);
}

BatchAllocator::~BatchAllocator() = default;

Batch::Batch() = default;
Batch::~Batch() = default;
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&&) noexcept = default;

void Batch::reset() {
  // The device handle first: its release records the consumer streams' events.
  device_.reset();
  hold_.reset();
  data_ = Tensor();
  labels_ = Tensor();
  label_lengths_ = Tensor();
  sample_ids_.clear();
  end_of_epoch_ = false;
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kNoBatch = UINT64_MAX;
// on_error=skip: substitutes tried for one bad sample before giving up.
constexpr int kMaxSubstitutes = 16;

double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// Batch buffers straight from the kernel (page-aligned): freeing one gives
// its memory back at once. Through malloc, glibc's dynamic mmap threshold
// would serve multi-MB buffers from the heap after the first free, and the
// extra buffers of held batches would stay resident after their release.
class HostAllocator final : public BatchAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* data = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return data == MAP_FAILED ? nullptr : data;
  }
  void Free(void* data, size_t bytes) override { munmap(data, std::max<size_t>(bytes, 1)); }
};

struct Slot {
  size_t index = 0;  // in LoaderShared::slots
  // Beyond the steady ring (prefetch + 1): added when the consumer held
  // every buffer, freed when its batch is released (data null: retired).
  bool extra = false;
  void* data = nullptr;
  void* labels = nullptr;
  uint64_t batch = kNoBatch;  // batch number of the current run, or none
  int samples = 0;
  int done = 0;
  bool held = false;  // by a consumer's Batch
  // pin_memory: passes when the consumer's async copies from the buffer
  // (released with it) have read it; workers wait before writing.
  std::shared_ptr<HostReleaseFence> fence;
  Status error;
  std::vector<uint64_t> sample_ids;
};

}  // namespace

// State shared with the Batches handed out (they may outlive the Loader).
struct LoaderShared {
  std::mutex mutex;
  std::condition_variable changed;
  // A deque: a Slot keeps its address when the ring grows (workers hold
  // references to theirs outside the lock). Guarded by mutex.
  std::deque<Slot> slots;
  std::shared_ptr<BatchAllocator> allocator;
  size_t data_bytes = 0;
  size_t label_bytes = 0;
  uint64_t max_held_bytes = 0;
  // The process that created the loader: in a forked child its threads do
  // not exist and its mutex may be locked forever, so nothing is touched.
  const pid_t owner = getpid();

  // The consumer released slot `index` (any thread). A slot beyond the
  // steady ring is freed (after its fence: an async copy may still read it).
  void Release(size_t index, std::shared_ptr<HostReleaseFence> fence) {
    if (getpid() != owner) return;  // an inherited Batch in a forked child: left alone
    void* data = nullptr;
    void* labels = nullptr;
    {
      std::lock_guard<std::mutex> guard(mutex);
      Slot& slot = slots[index];
      slot.held = false;
      slot.batch = kNoBatch;
      if (slot.extra) {
        std::swap(data, slot.data);
        std::swap(labels, slot.labels);
        slot.fence.reset();
      } else {
        slot.fence = fence;
      }
    }
    changed.notify_all();
    if (data != nullptr) {
      if (fence) fence->Wait();
      allocator->Free(data, data_bytes);
      allocator->Free(labels, label_bytes);
    }
  }

  ~LoaderShared() {
    for (Slot& slot : slots) {
      if (slot.data) allocator->Free(slot.data, data_bytes);
      if (slot.labels) allocator->Free(slot.labels, label_bytes);
    }
  }
};

class Loader::Impl {
 public:
  Impl(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options)
      : dataset_(std::move(dataset)), options_(options), shared_(std::make_shared<LoaderShared>()) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      stopping_ = true;
    }
    shared_->changed.notify_all();
    for (std::thread& worker : workers_) worker.join();
    // The engine finishes its reads in flight (into queue_), then the
    // collector is told to stop.
    engine_.reset();
    queue_.Close();
    if (collector_.joinable()) collector_.join();
  }

  Status Start() {
    const LoaderOptions& o = options_;
    if (o.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
    if (o.world_size == 0 || o.rank >= o.world_size) {
      return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not below world_size " +
                                     std::to_string(o.world_size));
    }
    if (o.prefetch < 1 || o.prefetch > 8) {
      return Status::InvalidArgument("prefetch must be between 1 and 8, got " +
                                     std::to_string(o.prefetch));
    }
    if (o.label_count < 1) return Status::InvalidArgument("label_count must be at least 1");
    if (o.transform == TransformKind::kRaw && o.raw.length <= 0) {
      return Status::InvalidArgument("a raw transform needs a positive length");
    }
    if (o.transform == TransformKind::kImage && (o.image.size <= 0 || o.image.size > 8192)) {
      return Status::InvalidArgument("image size must be between 1 and 8192");
    }
    threads_ = o.num_threads > 0 ? o.num_threads
                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (const ShardInfo& shard : dataset_->shards()) shard_sizes_.push_back(shard.records);
    if (shard_sizes_.empty()) shard_sizes_.push_back(dataset_->size());

    // Tensor layouts.
    int64_t batch = o.batch_size;
    if (o.transform == TransformKind::kImage) {
      int64_t size = o.image.size;
      data_dtype_ = static_cast<TensorDtype>(
          o.image.dtype == OutputDtype::kUint8     ? TensorDtype::kUint8
          : o.image.dtype == OutputDtype::kFloat16  ? TensorDtype::kFloat16
          : o.image.dtype == OutputDtype::kBfloat16 ? TensorDtype::kBfloat16
                                                    : TensorDtype::kFloat32);
      sample_shape_ = o.image.layout == OutputLayout::kNCHW ? std::vector<int64_t>{3, size, size}
                                                            : std::vector<int64_t>{size, size, 3};
    } else {
      using Element = RawTransformOptions::Element;
      data_dtype_ = o.raw.element == Element::kInt32   ? TensorDtype::kInt32
                    : o.raw.element == Element::kInt64 ? TensorDtype::kInt64
                    : o.raw.element == Element::kFloat32 ? TensorDtype::kFloat32
                                                         : TensorDtype::kUint8;
      sample_shape_ = {o.raw.length};
    }
    sample_bytes_ = TensorDtypeSize(data_dtype_);
    for (int64_t dimension : sample_shape_) sample_bytes_ *= static_cast<size_t>(dimension);
    using LabelType = LoaderOptions::LabelType;
    label_dtype_ = o.label_type == LabelType::kInt64     ? TensorDtype::kInt64
                   : o.label_type == LabelType::kFloat32 ? TensorDtype::kFloat32
                   : dataset_->integer_labels()          ? TensorDtype::kInt64
                                                          : TensorDtype::kFloat32;
    label_bytes_per_sample_ = TensorDtypeSize(label_dtype_) * static_cast<size_t>(o.label_count);
    if (o.label_lengths && label_dtype_ != TensorDtype::kFloat32) {
      return Status::InvalidArgument("label_lengths needs float32 labels (label_type kFloat32)");
    }
    // label_lengths: the slot's label buffer is [counts: B int32][labels],
    // one region, so the device stage copies both at once.
    lengths_bytes_ = o.label_lengths ? sizeof(int32_t) * batch : 0;

    shared_->allocator = o.allocator ? o.allocator : std::make_shared<HostAllocator>();
    shared_->data_bytes = sample_bytes_ * batch;
    shared_->label_bytes = lengths_bytes_ + label_bytes_per_sample_ * batch;
    shared_->slots.resize(static_cast<size_t>(o.prefetch) + 1 + extra_slots_);
    shared_->max_held_bytes = o.max_held_bytes;
    if (shared_->max_held_bytes == 0) {
      // A quarter of the machine's memory.
      long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      shared_->max_held_bytes =
          pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4
                                : uint64_t{1} << 32;
    }
    size_t next_index = 0;
    for (Slot& slot : shared_->slots) {
      slot.index = next_index++;
      // Allocated once, never on the hot path.
      slot.data = shared_->allocator->Allocate(shared_->data_bytes);
      slot.labels = shared_->allocator->Allocate(shared_->label_bytes);
      if (!slot.data || !slot.labels) return Status::IOError("cannot allocate batch buffers");
      slot.sample_ids.resize(o.batch_size);
    }
    // CanLocate, not Locate(0): a shard served from a node-cache copy is not
    // located, yet the others still want the engine.
    if (o.use_read_engine && dataset_->size() > 0 && dataset_->CanLocate()) {
      IoOptions io = o.io;
      // The decode threads' window bounds what is in flight anyway.
      Status status = ReadEngine::Create(io, &engine_);
      if (!status.ok()) {
        Log().info("loader: read engine unavailable ({}); decode threads read records themselves",
                   status.ToString());
        engine_.reset();
      } else {
        collector_ = std::thread([this] { Collect(); });
      }
    }
    started_ = Clock::now();
    StartRun(0, 0);
    for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
    return Status::OK();
  }

  // Computes this rank's samples for (epoch, consumed) and resets the slots.
  // REQUIRES: no worker is processing a sample (see Quiesce).
  void StartRun(uint64_t epoch, uint64_t consumed) {
    SamplerOptions sampler;
    sampler.shuffle = options_.shuffle;
    sampler.seed = options_.seed;
    sampler.window_shards = options_.shuffle_window_shards;
    sampler.rank = options_.rank;
    sampler.world_size = options_.world_size;
    sampler.batch_size = options_.batch_size;
    sampler.drop_last = options_.drop_last;
    std::vector<uint64_t> order = EpochOrder(shard_sizes_, sampler, epoch);
    epoch_size_ = order.size();
    RankSamples(order, consumed, sampler, &samples_);
    dataset_->ExpectReads(samples_);  // a node cache fetches the coming shards ahead
    epoch_ = epoch;
    run_start_ = consumed;
    batches_ = (samples_.size() + options_.batch_size - 1) / options_.batch_size;
    next_task_ = 0;
    submit_cursor_ = 0;
    fetched_.clear();
    direct_.clear();
    delivered_ = 0;
    delivered_samples_ = 0;
    end_signalled_ = false;
    run_ += 1;
    for (Slot& slot : shared_->slots) {
      // A held slot stays held until its Batch goes; it is free after that.
      slot.batch = kNoBatch;
      slot.done = 0;
      slot.error = Status::OK();
    }
  }

  // Waits until no worker processes a sample of the current run.
  void Quiesce(std::unique_lock<std::mutex>& lock) {
    accepting_ = false;
    shared_->changed.wait(lock, [&] { return active_ == 0; });
    accepting_ = true;
  }

  void SetEpoch(uint64_t epoch) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    Quiesce(lock);
    StartRun(epoch, 0);
    lock.unlock();
    shared_->changed.notify_all();
  }

  LoaderState State() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    LoaderState state;
    state.seed = options_.seed;
    state.shuffle = options_.shuffle;
    state.shuffle_window_shards = options_.shuffle_window_shards;
    state.epoch = epoch_;
    state.consumed = std::min<uint64_t>(epoch_size_,
                                        run_start_ + delivered_samples_ * options_.world_size);
    if (end_signalled_) {
      state.epoch = epoch_ + 1;
      state.consumed = 0;
    }
    return state;
  }

  Status CheckState(const LoaderState& state) const {
    if (state.seed != options_.seed || state.shuffle != options_.shuffle ||
        state.shuffle_window_shards != options_.shuffle_window_shards) {
      return Status::InvalidArgument("the state was saved with other seed or shuffle settings");
    }
    return Status::OK();
  }

  Status Restore(const LoaderState& state) {
    GPUFEED_RETURN_IF_ERROR(CheckState(state));
    std::unique_lock<std::mutex> lock(shared_->mutex);
    Quiesce(lock);
    StartRun(state.epoch, state.consumed);
    lock.unlock();
    shared_->changed.notify_all();
    return Status::OK();
  }

  Status Next(Batch* batch) {
    bool ready = false;
    return NextFor(batch, -1, &ready);
  }

  Status NextFor(Batch* batch, int timeout_ms, bool* ready) {
    *ready = true;
    batch->reset();
    std::unique_lock<std::mutex> lock(shared_->mutex);
    if (end_signalled_) {
      // The epoch after the one that just ended.
      Quiesce(lock);
      StartRun(epoch_ + 1, 0);
      shared_->changed.notify_all();
    }
    if (delivered_ >= batches_) {
      end_signalled_ = true;
      Log().info("epoch {} done: {}", epoch_, StatsLocked().verdict);
      LoaderBatchAccess::Fill(batch, Tensor(), Tensor(), {}, epoch_, delivered_, true, nullptr);
      return Status::OK();
    }
    uint64_t k = delivered_;
    ready_samples_sum_ += ReadyBatches();
    ready_samples_count_ += 1;
    if (FindSlot(k) == nullptr && FreeSlot() == nullptr &&
        std::none_of(shared_->slots.begin(), shared_->slots.end(),
                     [](const Slot& s) { return !s.held && s.data != nullptr; })) {
      // Every buffer is held by the consumer (list(loader), batches kept
      // for evaluation): waiting would never end, so the ring grows.
      GPUFEED_RETURN_IF_ERROR(GrowLocked());
      shared_->changed.notify_all();
    }
    auto wait_started = Clock::now();
    auto complete = [&] {
      const Slot* found = FindSlot(k);
      return found != nullptr && found->done == found->samples;
    };
    if (timeout_ms < 0) {
      shared_->changed.wait(lock, complete);
    } else if (!shared_->changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), complete)) {
      consumer_wait_ += Seconds(Clock::now() - wait_started);
      *ready = false;
      return Status::OK();
    }
    consumer_wait_ += Seconds(Clock::now() - wait_started);
    Slot& slot = *FindSlot(k);
    if (!slot.error.ok()) {
      Status error = slot.error;
      // Raise mode: the batch is lost, the loader moves on.
      slot.batch = kNoBatch;
      delivered_ += 1;
      delivered_samples_ += static_cast<uint64_t>(slot.samples);
      lock.unlock();
      shared_->changed.notify_all();
      return error;
    }
    slot.held = true;
    Tensor data;
    data.data = slot.data;
    data.dtype = data_dtype_;
    data.shape = {slot.samples};
    data.shape.insert(data.shape.end(), sample_shape_.begin(), sample_shape_.end());
    Tensor labels;
    labels.data = static_cast<char*>(slot.labels) + lengths_bytes_;
    labels.dtype = label_dtype_;
    labels.shape = {slot.samples};
    if (options_.label_count > 1) labels.shape.push_back(options_.label_count);
    std::vector<uint64_t> ids(slot.sample_ids.begin(), slot.sample_ids.begin() + slot.samples);
    size_t slot_index = slot.index;
    std::shared_ptr<LoaderShared> shared = shared_;
    auto release = [shared, slot_index](std::shared_ptr<HostReleaseFence> fence) {
      shared->Release(slot_index, std::move(fence));
    };
    std::shared_ptr<void> hold;
    std::shared_ptr<DeviceBatchHandle> pinned;
    if (pinned_device_ >= 0) {
      // The slot goes back with a fence: the consumer may still be copying
      // from it asynchronously (x.cuda(non_blocking=True)).
      pinned = MakePinnedBatchHandle(pinned_device_, release);
    } else {
      hold = std::shared_ptr<void>(nullptr, [release](void*) { release(nullptr); });
    }
    delivered_ += 1;
    delivered_samples_ += static_cast<uint64_t>(slot.samples);
    stats_batches_ += 1;
    stats_samples_ += static_cast<uint64_t>(slot.samples);
    LoaderBatchAccess::Fill(batch, std::move(data), std::move(labels), std::move(ids), epoch_, k,
                            false, std::move(hold), std::move(pinned));
    if (options_.label_lengths) {
      Tensor lengths;
      lengths.data = slot.labels;
      lengths.dtype = TensorDtype::kInt32;
      lengths.shape = {slot.samples};
      LoaderBatchAccess::SetLabelLengths(batch, std::move(lengths));
    }
    lock.unlock();
    shared_->changed.notify_all();
    return Status::OK();
  }

  LoaderStats Stats() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return StatsLocked();
  }

  // Slots beyond prefetch + 1: the device stage's copy thread holds up to
  // two host batches while their copies run. Call before Start.
  void set_extra_slots(int extra) { extra_slots_ = extra; }
  // pin_memory on the CPU device: batches released with a fence (see
  // MakePinnedBatchHandle). REQUIRES: before Start.
  void set_pinned_release(int device_id) { pinned_device_ = device_id; }
  size_t data_bytes() const { return shared_->data_bytes; }
  size_t label_bytes() const { return shared_->label_bytes; }

  uint64_t batches_per_epoch() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    SamplerOptions sampler;
    sampler.world_size = options_.world_size;
    sampler.batch_size = options_.batch_size;
    sampler.drop_last = options_.drop_last;
    uint64_t per_rank = SamplesPerRank(dataset_->size(), sampler);
    return (per_rank + options_.batch_size - 1) / options_.batch_size;
  }

  uint64_t epoch() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return epoch_;
  }

 private:
  // Ready batches ahead of the consumer. REQUIRES: the lock.
  double ReadyBatches() const {
    int ready = 0;
    for (const Slot& slot : shared_->slots) {
      if (!slot.held && slot.batch != kNoBatch && slot.batch >= delivered_ &&
          slot.done == slot.samples) {
        ready += 1;
      }
    }
    return ready;
  }

  // The buffer assigned to batch k, or null. REQUIRES: the lock.
  Slot* FindSlot(uint64_t k) const {
    for (Slot& slot : shared_->slots) {
      if (slot.batch == k && !slot.held) return &slot;
    }
    return nullptr;
  }
  // A buffer neither assigned nor held by the consumer. REQUIRES: the lock.
  Slot* FreeSlot() const {
    for (Slot& slot : shared_->slots) {
      if (slot.batch == kNoBatch && !slot.held && slot.data != nullptr) return &slot;
    }
    return nullptr;
  }

  // One more batch buffer, for a consumer that holds all of them, within
  // max_held_bytes. REQUIRES: the lock.
  Status GrowLocked() {
    const uint64_t slot_bytes = shared_->data_bytes + shared_->label_bytes;
    uint64_t held = 0;
    for (const Slot& slot : shared_->slots) held += slot.held ? 1 : 0;
    if ((held + 1) * slot_bytes > shared_->max_held_bytes) {
      return Status::InvalidArgument(
          "the consumer holds " + std::to_string(held) + " batches (" +
          std::to_string(held * slot_bytes) + " bytes) and one more would pass max_held_bytes (" +
          std::to_string(shared_->max_held_bytes) +
          " bytes): release the batches you no longer need (or copy those you keep), or raise "
          "max_held_bytes");
    }
    Slot* slot = nullptr;
    for (Slot& candidate : shared_->slots) {
      if (candidate.extra && candidate.data == nullptr && !candidate.held) {
        slot = &candidate;
        break;
      }
    }
    if (slot == nullptr) {
      shared_->slots.emplace_back();
      slot = &shared_->slots.back();
      slot->index = shared_->slots.size() - 1;
      slot->extra = true;
      slot->sample_ids.resize(options_.batch_size);
    }
    slot->batch = kNoBatch;
    slot->fence.reset();
    slot->data = shared_->allocator->Allocate(shared_->data_bytes);
    slot->labels = shared_->allocator->Allocate(shared_->label_bytes);
    if (slot->data == nullptr || slot->labels == nullptr) {
      if (slot->data) shared_->allocator->Free(slot->data, shared_->data_bytes);
      if (slot->labels) shared_->allocator->Free(slot->labels, shared_->label_bytes);
      slot->data = slot->labels = nullptr;
      return Status::IOError("cannot allocate another batch buffer (" +
                             std::to_string(slot_bytes) + " bytes) for the batches held");
    }
    grown_slots_ += 1;
    return Status::OK();
  }

  // REQUIRES: the lock.
  bool CanStart(uint64_t task) const {
    uint64_t k = task / options_.batch_size;
    if (FindSlot(k) != nullptr) return true;
    return FreeSlot() != nullptr && k < delivered_ + options_.prefetch;
  }

  void Work() {
    TransformScratch scratch;
    Record record;
    Image raw_image;
    std::unique_lock<std::mutex> lock(shared_->mutex);
    while (true) {
      auto wait_started = Clock::now();
      shared_->changed.wait(lock, [&] {
        return stopping_ || (accepting_ && next_task_ < samples_.size() && CanStart(next_task_));
      });
      blocked_ += Seconds(Clock::now() - wait_started);
      if (stopping_) return;
      uint64_t task = next_task_++;
      uint64_t k = task / options_.batch_size;
      Slot* found = FindSlot(k);
      if (found == nullptr) found = FreeSlot();  // CanStart made sure there is one
      Slot& slot = *found;
      if (slot.batch != k) {
        slot.batch = k;
        slot.samples = static_cast<int>(
            std::min<uint64_t>(options_.batch_size, samples_.size() - k * options_.batch_size));
        slot.done = 0;
        slot.error = Status::OK();
      }
      size_t position = task % options_.batch_size;
      std::shared_ptr<HostReleaseFence> fence = slot.fence;
      uint64_t sample = samples_[task];
      uint64_t epoch = epoch_;
      uint64_t run = run_;
      active_ += 1;
      WorkFigures figures;
      Fetched fetched;
      bool have_bytes = false;
      if (engine_) {
        SubmitAhead(lock);
        if (!direct_.count(task)) {
          auto waited = Clock::now();
          // Another worker may still be locating this task (its SubmitAhead
          // runs unlocked) and decide to read it directly: wait for either.
          shared_->changed.wait(lock, [&] {
            return stopping_ || run_ != run || fetched_.count(task) > 0 || direct_.count(task) > 0;
          });
          figures.read += Seconds(Clock::now() - waited);
          auto found = fetched_.find(task);
          if (found != fetched_.end()) {
            fetched = std::move(found->second);
            fetched_.erase(found);
            have_bytes = true;
          }
        }
      }
      lock.unlock();
      if (fence) fence->Wait();  // before anything writes the slot

      Status status;
      try {
        status = have_bytes ? ProcessFetched(sample, epoch, slot, position, &fetched, &record,
                                             &raw_image, &scratch, &figures)
                            : Process(sample, epoch, slot, position, &record, &raw_image,
                                      &scratch, &figures);
      } catch (const std::exception& e) {
        // Nothing may escape a worker (it would end the process): an
        // allocation failure or a library exception is this sample's error.
        status = Status::Internal("sample " + std::to_string(sample) + ": " + e.what());
      }
      fetched.completion.buffer.reset();  // back to the engine's budget
      uint64_t used = sample;
      if (!status.ok() && options_.on_error == OnError::kSkip) {
        LogSkip(status);
        skipped_ += 1;
        for (int attempt = 1; attempt <= kMaxSubstitutes && !status.ok(); ++attempt) {
          used = samples_[(task + attempt) % samples_.size()];
          try {
            status = Process(used, epoch, slot, position, &record, &raw_image, &scratch, &figures);
          } catch (const std::exception& e) {
            status = Status::Internal("sample " + std::to_string(used) + ": " + e.what());
          }
          if (!status.ok()) skipped_ += 1;
        }
      }

      lock.lock();
      active_ -= 1;
      read_seconds_ += figures.read;
      decode_seconds_ += figures.decode;
      bytes_read_ += figures.bytes;
      slot.sample_ids[position] = used;
      if (!status.ok() && slot.error.ok()) slot.error = status;
      slot.done += 1;
      shared_->changed.notify_all();
    }
  }

  void LogSkip(const Status& status) {
    uint64_t count = skipped_.load();
    // Rate-limited: the first, then every 1000th.
    if (count == 0 || count % 1000 == 0) {
      Log().warn("skipping a bad sample (on_error=skip, {} skipped so far): {}", count + 1,
                 status.ToString());
    }
  }

  // Figures a worker gathers unlocked and adds under the lock.
  struct WorkFigures {
    double read = 0;
    double decode = 0;
    uint64_t bytes = 0;
  };

  struct Fetched {
    ReadCompletion completion;
    RecordLocation location;
  };

  static uint64_t Tag(uint64_t run, uint64_t task) { return (run << 40) | task; }

  // Submits reads for the tasks the window now allows. REQUIRES: the lock
  // (released around the submission itself).
  void SubmitAhead(std::unique_lock<std::mutex>& lock) {
    uint64_t end = std::min<uint64_t>(
        samples_.size(), (delivered_ + static_cast<uint64_t>(options_.prefetch)) *
                             options_.batch_size);
    if (submit_cursor_ >= end) return;
    uint64_t first = submit_cursor_;
    submit_cursor_ = end;  // claimed: no other worker submits these
    uint64_t run = run_;
    std::vector<uint64_t> tasks;
    std::vector<uint64_t> samples;
    for (uint64_t task = first; task < end; ++task) {
      tasks.push_back(task);
      samples.push_back(samples_[task]);
    }
    lock.unlock();
    std::vector<ReadRequest> requests;
    std::vector<std::pair<uint64_t, RecordLocation>> located;
    std::vector<uint64_t> direct;
    for (size_t i = 0; i < tasks.size(); ++i) {
      RecordLocation location;
      FileId file = 0;
      if (!dataset_->Locate(samples[i], &location) ||
          (!location.whole_file && !FileFor(location, &file))) {
        direct.push_back(tasks[i]);
        continue;
      }
      // The engine reads through its own duplicate of the descriptor: the
      // location need not keep the store's open (a window of one-record
      // shards would hold thousands).
      location.hold.reset();
      location.fd = -1;
      ReadRequest request;
      request.tag = Tag(run, tasks[i]);
      if (location.whole_file) {
        request.path = location.path;
      } else {
        request.file = file;
        request.offset = location.offset;
        request.length = location.length;
      }
      requests.push_back(std::move(request));
      located.emplace_back(tasks[i], std::move(location));
    }
    lock.lock();
    if (run_ != run) return;  // the run changed meanwhile: nothing to record
    for (uint64_t task : direct) direct_.insert(task);
    for (auto& [task, location] : located) locations_[Tag(run, task)] = std::move(location);
    lock.unlock();
    if (!requests.empty() && !engine_->Submit(std::move(requests), &queue_).ok()) {
      lock.lock();
      for (auto& [task, location] : located) direct_.insert(task);
      lock.unlock();
    }
    lock.lock();
    shared_->changed.notify_all();
  }

  // The engine's handle on the descriptor a location names (a source file
  // or a node-cache copy, kept open by location.hold). At most
  // kEngineFiles stay registered: the least recently used is closed (its
  // reads in flight keep it open until they complete), so a dataset of
  // 100,000 shards reads under a small descriptor limit, and a node-cache
  // copy is not pinned after the store let it go.
  static constexpr size_t kEngineFiles = 64;
  bool FileFor(const RecordLocation& location, FileId* file) {
    const void* key = location.hold.get();
    if (key == nullptr || location.fd < 0) return false;  // read directly
    std::lock_guard<std::mutex> lock(files_mutex_);
    auto found = engine_files_.find(key);
    if (found != engine_files_.end()) {
      engine_lru_.splice(engine_lru_.begin(), engine_lru_, found->second.lru);
      *file = found->second.id;
      return true;
    }
    if (!engine_->AdoptFile(location.fd, location.path, file).ok()) return false;
    engine_lru_.push_front(key);
    engine_files_[key] = EngineFile{*file, location.hold, engine_lru_.begin()};
    while (engine_lru_.size() > kEngineFiles) {
      auto victim = engine_files_.find(engine_lru_.back());
      engine_->CloseFile(victim->second.id);
      engine_files_.erase(victim);
      engine_lru_.pop_back();
    }
    return true;
  }

  // Moves completions into fetched_, for the workers waiting on them.
  void Collect() {
    std::vector<ReadCompletion> completions;
    while (true) {
      completions.clear();
      queue_.Wait(1, &completions);
      if (completions.empty()) return;  // closed
      std::lock_guard<std::mutex> lock(shared_->mutex);
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
        fetched.completion = std::move(completion);
        fetched_[task] = std::move(fetched);
      }
      shared_->changed.notify_all();
    }
  }

  Status ProcessFetched(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                        Fetched* fetched, Record* record, Image* raw_image,
                        TransformScratch* scratch, WorkFigures* figures) {
    const ReadCompletion& completion = fetched->completion;
    Status status = completion.status;
    if (status.ok()) {
      status = dataset_->ParseLocated(sample, fetched->location, completion.buffer.data(),
                                      completion.buffer.size(), record);
    }
    if (!status.ok()) return status.WithContext("sample " + std::to_string(sample));
    figures->bytes += record->data.size();
    return TransformInto(sample, epoch, slot, position, record, raw_image, scratch, figures);
  }

  Status Process(uint64_t sample, uint64_t epoch, Slot& slot, size_t position, Record* record,
                 Image* raw_image, TransformScratch* scratch, WorkFigures* figures) {
    auto read_started = Clock::now();
    Status status = dataset_->Read(sample, record);
    auto read_done = Clock::now();
    figures->read += Seconds(read_done - read_started);
    if (!status.ok()) return status;
    figures->bytes += record->data.size();
    return TransformInto(sample, epoch, slot, position, record, raw_image, scratch, figures);
  }

  Status TransformInto(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                       Record* record, Image* raw_image, TransformScratch* scratch,
                       WorkFigures* figures) {
    auto read_done = Clock::now();
    Status status;
    char* destination = static_cast<char*>(slot.data) + position * sample_bytes_;
    if (options_.transform == TransformKind::kImage) {
      if (record->encoded) {
        status = TransformImage(reinterpret_cast<const uint8_t*>(record->data.data()),
                                record->data.size(), options_.image, options_.seed, epoch, sample,
                                destination, scratch);
      } else {
        status = RawDatumToImage(*record, raw_image);
        if (status.ok()) {
          status = TransformDecoded(*raw_image, options_.image, options_.seed, epoch, sample,
                                    destination, scratch);
        }
      }
      if (!status.ok()) {
        status = Status(status).WithContext("sample " + std::to_string(sample) + " (" +
                                            record->source + ")");
      }
    } else {
      WriteRaw(*record, destination);
    }
    if (status.ok()) {
      status = WriteLabels(sample, *record,
                           static_cast<char*>(slot.labels) + lengths_bytes_ +
                               position * label_bytes_per_sample_);
      if (status.ok() && options_.label_lengths) {
        static_cast<int32_t*>(slot.labels)[position] = static_cast<int32_t>(record->labels.size());
      }
    }
    figures->decode += Seconds(Clock::now() - read_done);
    return status;
  }

  // Caffe raw Datum pixels: CHW, BGR (OpenCV order) -> HWC RGB.
  static Status RawDatumToImage(const Record& record, Image* image) {
    if (record.shape.size() != 3 || (record.shape[0] != 3 && record.shape[0] != 1)) {
      return Status::NotSupported("raw records need shape (3, H, W) or (1, H, W) for the image "
                                  "transform");
    }
    int64_t channels = record.shape[0], height = record.shape[1], width = record.shape[2];
    image->width = static_cast<int>(width);
    image->height = static_cast<int>(height);
    image->pixels.resize(static_cast<size_t>(width * height * 3));
    const uint8_t* data = reinterpret_cast<const uint8_t*>(record.data.data());
    size_t plane = static_cast<size_t>(width * height);
    for (size_t i = 0; i < plane; ++i) {
      for (int c = 0; c < 3; ++c) {
        size_t source_channel = channels == 1 ? 0 : static_cast<size_t>(2 - c);  // BGR -> RGB
        image->pixels[i * 3 + c] = data[source_channel * plane + i];
      }
    }
    return Status::OK();
  }

  void WriteRaw(const Record& record, char* destination) const {
    size_t element = TensorDtypeSize(data_dtype_);
    size_t length = static_cast<size_t>(options_.raw.length);
    size_t available = std::min(length, record.data.size() / element);
    std::memcpy(destination, record.data.data(), available * element);
    for (size_t i = available; i < length; ++i) {
      char* out = destination + i * element;
      switch (data_dtype_) {
        case TensorDtype::kInt32: *reinterpret_cast<int32_t*>(out) = static_cast<int32_t>(options_.raw.pad); break;
        case TensorDtype::kInt64: *reinterpret_cast<int64_t*>(out) = options_.raw.pad; break;
        case TensorDtype::kFloat32: *reinterpret_cast<float*>(out) = static_cast<float>(options_.raw.pad); break;
        default: *reinterpret_cast<uint8_t*>(out) = static_cast<uint8_t>(options_.raw.pad); break;
      }
    }
  }

  Status WriteLabels(uint64_t sample, const Record& record, char* destination) const {
    const int count = static_cast<int>(record.labels.size());
    if (options_.label_lengths) {
      if (count > options_.label_count) {
        return Status::InvalidArgument(
            "sample " + std::to_string(sample) + " (" + record.source + ") has " +
            std::to_string(count) + " labels, more than label_count (" +
            std::to_string(options_.label_count) + "): raise label_count to the longest record's");
      }
    } else if (count > 1 && count != options_.label_count) {
      // A record with several labels where fewer or more are expected:
      // refused, never truncated (variable counts: label_lengths).
      return Status::InvalidArgument("sample " + std::to_string(sample) + " (" + record.source +
                                     ") has " + std::to_string(count) +
                                     " labels, the loader expects " +
                                     std::to_string(options_.label_count) +
                                     " (records with varying label counts: label_lengths)");
    }
    const float missing = options_.label_lengths ? options_.label_pad : 0.0f;
    for (int i = 0; i < options_.label_count; ++i) {
      float value = i < count ? record.labels[i] : missing;
      if (label_dtype_ == TensorDtype::kInt64) {
        if (value != std::floor(value) || !std::isfinite(value)) {
          return Status::InvalidArgument(
              "sample " + std::to_string(sample) + " (" + record.source + ") has label " +
              std::to_string(value) + ", not a class index; use float labels for it");
        }
        reinterpret_cast<int64_t*>(destination)[i] = static_cast<int64_t>(value);
      } else {
        reinterpret_cast<float*>(destination)[i] = value;
      }
    }
    return Status::OK();
  }

  LoaderStats StatsLocked() const {
    LoaderStats stats;
    stats.batches = stats_batches_;
    stats.samples = stats_samples_;
    stats.bytes_read = bytes_read_;
    stats.skipped = skipped_.load();
    stats.threads = threads_;
    stats.elapsed_seconds = Seconds(Clock::now() - started_);
    stats.read_seconds = read_seconds_;
    stats.decode_seconds = decode_seconds_;
    stats.blocked_seconds = blocked_;
    stats.consumer_wait_seconds = consumer_wait_;
    StorageStats store = dataset_->storage_stats();
    stats.source_opens = store.source_opens;
    stats.source_stats = store.source_stats;
    stats.source_bytes = store.source_bytes;
    stats.cache_reads = store.cache_reads;
    stats.open_files = store.open_files;
    stats.mean_ready_batches = ready_samples_count_ ? ready_samples_sum_ / ready_samples_count_ : 0;
    if (engine_) {
      IoStats io_stats = engine_->stats();
      stats.io_backend = engine_->backend_name();
      stats.io_requests = io_stats.requests;
      stats.io_mean_inflight = io_stats.mean_inflight;
    }
    JudgeBottleneck(&stats);
    return stats;
  }

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::shared_ptr<LoaderShared> shared_;
  int extra_slots_ = 0;
  uint64_t grown_slots_ = 0;  // buffers added for held batches (guarded by the lock)
  int pinned_device_ = -1;  // constant after Start
  // Declared before engine_: the engine delivers into it until destroyed.
  CompletionQueue queue_;
  std::unique_ptr<ReadEngine> engine_;
  std::thread collector_;
  std::mutex files_mutex_;
  struct EngineFile {
    FileId id = 0;
    std::shared_ptr<const void> hold;  // the store's descriptor stays open while registered
    std::list<const void*>::iterator lru;
  };
  std::unordered_map<const void*, EngineFile> engine_files_;
  std::list<const void*> engine_lru_;
  // Guarded by shared_->mutex.
  uint64_t submit_cursor_ = 0;
  std::unordered_map<uint64_t, Fetched> fetched_;          // task -> bytes
  std::unordered_map<uint64_t, RecordLocation> locations_;  // tag -> where
  std::unordered_set<uint64_t> direct_;                     // tasks read by the workers
  std::vector<std::thread> workers_;
  int threads_ = 1;
  std::vector<uint64_t> shard_sizes_;
  TensorDtype data_dtype_ = TensorDtype::kFloat32;
  TensorDtype label_dtype_ = TensorDtype::kInt64;
  std::vector<int64_t> sample_shape_;
  size_t sample_bytes_ = 0;
  size_t label_bytes_per_sample_ = 0;
  size_t lengths_bytes_ = 0;  // label_lengths: the counts before the labels

  // Run state, guarded by shared_->mutex.
  std::vector<uint64_t> samples_;
  uint64_t epoch_ = 0;
  uint64_t epoch_size_ = 0;
  uint64_t run_start_ = 0;
  uint64_t run_ = 0;
  uint64_t batches_ = 0;
  uint64_t next_task_ = 0;
  uint64_t delivered_ = 0;
  uint64_t delivered_samples_ = 0;
  bool end_signalled_ = false;
  bool stopping_ = false;
  bool accepting_ = true;
  int active_ = 0;

  // Statistics.
  Clock::time_point started_;
  uint64_t stats_batches_ = 0;
  uint64_t stats_samples_ = 0;
  double blocked_ = 0;
  double consumer_wait_ = 0;
  double ready_samples_sum_ = 0;
  uint64_t ready_samples_count_ = 0;
  uint64_t bytes_read_ = 0;
  std::atomic<uint64_t> skipped_{0};
  double read_seconds_ = 0;
  double decode_seconds_ = 0;
};

// ---------------------------------------------------------------- Loader

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), owner_process_(getpid()) {}
Loader::~Loader() {
  if (getpid() != owner_process_) {
    // Inherited by fork: the threads to stop do not exist here and the
    // locks may be held by them forever. Left as it is (a deliberate leak).
    (void)impl_.release();
    (void)device_.release();
  }
}

namespace {
Status InheritedByFork(int owner) {
  return Status::InvalidArgument(
      "this Loader was created in process " + std::to_string(owner) +
      " and inherited by fork: its threads do not exist in this process; create a new Loader "
      "here (the parent's keeps working)");
}
}  // namespace

Status Loader::Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                    std::unique_ptr<Loader>* loader) {
  if (!dataset) return Status::InvalidArgument("Loader::Open: no dataset");
  const DeviceOptions& device = options.device;
  const bool cuda = device.kind == DeviceKind::kCuda;
  LoaderOptions host = options;
  DeviceStageOptions stage;
  if (cuda || device.pin_memory) {
    Status usable = CudaDeviceUsable(device.device_id);
    if (!usable.ok()) {
      return usable.WithContext(cuda ? "Loader::Open(device=cuda)" : "Loader::Open(pin_memory)");
    }
    if (options.prefetch < 1 || options.prefetch > 8) {
      return Status::InvalidArgument("prefetch must be between 1 and 8, got " +
                                     std::to_string(options.prefetch));
    }
    if (!options.allocator) {
      GPUFEED_RETURN_IF_ERROR(MakePinnedAllocator(device.device_id, &host.allocator));
    }
  }
  if (cuda) {
    stage.device_id = device.device_id;
    stage.prefetch = options.prefetch;
    stage.max_held_bytes = options.max_held_bytes;
    stage.image = options.image;
    stage.normalize = device.normalize_on_device && options.transform == TransformKind::kImage &&
                      options.image.dtype != OutputDtype::kUint8;
    if (stage.normalize) {
      // uint8 HWC crosses PCIe; the kernel writes the dtype and layout asked.
      host.image.dtype = OutputDtype::kUint8;
      host.image.layout = OutputLayout::kNHWC;
    }
  }
  auto impl = std::make_unique<Impl>(std::move(dataset), host);
  if (cuda) impl->set_extra_slots(1);
  if (!cuda && device.pin_memory) impl->set_pinned_release(device.device_id);
  GPUFEED_RETURN_IF_ERROR(impl->Start());
  std::unique_ptr<DeviceStage> device_stage;
  if (cuda) {
    stage.max_data_bytes = impl->data_bytes();
    stage.max_label_bytes = impl->label_bytes();
    Impl* source = impl.get();
    HostBatchSource batches;
    batches.next_for = [source](Batch* batch, int timeout_ms, bool* ready) {
      return source->NextFor(batch, timeout_ms, ready);
    };
    batches.state = [source] { return source->State(); };
    GPUFEED_RETURN_IF_ERROR(DeviceStage::Create(std::move(batches), stage, &device_stage));
  }
  loader->reset(new Loader(std::move(impl)));
  (*loader)->device_ = std::move(device_stage);
  return Status::OK();
}

Status Loader::Next(Batch* batch) {
  bool ready = false;
  return NextFor(batch, -1, &ready);
}
Status Loader::NextFor(Batch* batch, int timeout_ms, bool* ready) {
  *ready = true;
  if (getpid() != owner_process_) return InheritedByFork(owner_process_);
  if (device_) return device_->NextFor(batch, timeout_ms, ready);
  return impl_->NextFor(batch, timeout_ms, ready);
}
void Loader::SetEpoch(uint64_t epoch) {
  if (getpid() != owner_process_) return;  // Next reports it
  if (!device_) return impl_->SetEpoch(epoch);
  device_->Reconfigure([&] {
    impl_->SetEpoch(epoch);
    return Status::OK();
  });
}
LoaderState Loader::State() const {
  if (getpid() != owner_process_) return LoaderState();
  return device_ ? device_->State() : impl_->State();
}
Status Loader::Restore(const LoaderState& state) {
  if (getpid() != owner_process_) return InheritedByFork(owner_process_);
  if (!device_) return impl_->Restore(state);
  GPUFEED_RETURN_IF_ERROR(impl_->CheckState(state));
  return device_->Reconfigure([&] { return impl_->Restore(state); });
}
LoaderStats Loader::Stats() const {
  if (getpid() != owner_process_) return LoaderStats();
  LoaderStats stats = impl_->Stats();
  if (device_) {
    device_->AddStats(&stats);
    JudgeBottleneck(&stats);
  }
  return stats;
}
uint64_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch(); }
uint64_t Loader::epoch() const { return impl_->epoch(); }

}  // namespace gpufeed
