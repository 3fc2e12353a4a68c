#include "device/device_stage.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/batch_access.h"
#include "util/logging.h"

#include <sys/types.h>
#include <unistd.h>

#if GPUFEED_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "decode/transform.h"
#include "device/cuda_util.h"
#include "device/normalize.h"
#endif

namespace gpufeed {

DeviceBatchHandle::~DeviceBatchHandle() = default;
HostReleaseFence::~HostReleaseFence() = default;

// The Batch calls that concern device memory (host batches: no-ops).
void* Batch::ready_event() const { return device_ ? device_->ready_event() : nullptr; }
Status Batch::WaitOn(void* stream) { return device_ ? device_->WaitOn(stream) : Status::OK(); }
Status Batch::RecordStream(void* stream) {
  return device_ ? device_->RecordStream(stream) : Status::OK();
}
Status Batch::Synchronize() { return device_ ? device_->Synchronize() : Status::OK(); }

DeviceStage::DeviceStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

#if !GPUFEED_HAVE_CUDA

Status CudaDeviceUsable(int) {
  return Status::NotSupported("gpufeed was built without CUDA (GPUFEED_WITH_CUDA=OFF); "
                              "use the CPU device");
}
Status MakePinnedAllocator(int device_id, std::shared_ptr<BatchAllocator>*) {
  return CudaDeviceUsable(device_id);
}

std::shared_ptr<DeviceBatchHandle> MakePinnedBatchHandle(
    int, std::function<void(std::shared_ptr<HostReleaseFence>)>) {
  return nullptr;
}

class DeviceStage::Impl {};
Status DeviceStage::Create(HostBatchSource, const DeviceStageOptions& options,
                           std::unique_ptr<DeviceStage>*) {
  return CudaDeviceUsable(options.device_id);
}
DeviceStage::~DeviceStage() = default;
Status DeviceStage::NextFor(Batch*, int, bool*) { return CudaDeviceUsable(0); }
Status DeviceStage::Reconfigure(const std::function<Status()>&) { return CudaDeviceUsable(0); }
LoaderState DeviceStage::State() const { return LoaderState(); }
void DeviceStage::AddStats(LoaderStats*) const {}

#else  // GPUFEED_HAVE_CUDA

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// Release events created per buffer up front: one consumer stream, or two,
// needs no event creation at release time.
constexpr size_t kReleaseEventsPerBuffer = 2;

struct DeviceBuffer {
  void* data = nullptr;
  void* labels = nullptr;
  cudaEvent_t ready = nullptr;  // after the batch's copies and kernel
  // Recorded on the consumer's streams when the batch was released; the
  // copy stream waits for the first `pending_release` before reuse.
  std::vector<cudaEvent_t> release;
  size_t pending_release = 0;
  // Beyond the steady prefetch + 2: added while the consumer held every
  // buffer, freed when its batch is released (data null: retired).
  bool extra = false;
};

}  // namespace

// What the stage and its Batches share; it lives as long as either.
struct DeviceShared {
  // At most this many buffers (steady and extra): `buffers` is reserved to
  // it, so an element never moves and the copy thread may read its own
  // buffer while the consumer's thread appends one (under the mutex).
  static constexpr size_t kMaxBuffers = 1024;
  int device = 0;
  cudaStream_t copy_stream = nullptr;
  std::vector<DeviceBuffer> buffers;
  size_t data_bytes = 0;   // per buffer
  size_t label_bytes = 0;  // per buffer
  uint64_t max_held_bytes = 0;
  // The process that created the stage: in a forked child nothing is
  // touched (no CUDA, no locks).
  const pid_t owner = getpid();
  void* staging = nullptr;  // uint8 HWC batch for device normalization
  void* table = nullptr;    // the normalize table

  std::mutex mutex;
  std::condition_variable changed;
  // Buffers neither queued nor held nor being filled, oldest release first
  // (its events are the likeliest to have passed).
  std::deque<size_t> free;
  size_t held = 0;           // buffers in Batches handed to the consumer
  size_t live = 0;           // buffers allocated (not retired)

  // Allocates buffer `buffer`'s memory (and its events, the first time).
  // REQUIRES: `device` current.
  Status Allocate(DeviceBuffer* buffer) {
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer->data, std::max<size_t>(data_bytes, 1)));
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer->labels, std::max<size_t>(label_bytes, 1)));
    if (buffer->ready == nullptr) {
      // Blocking sync: a consumer's Synchronize sleeps instead of spinning.
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(
          &buffer->ready, cudaEventDisableTiming | cudaEventBlockingSync));
      for (size_t e = 0; e < kReleaseEventsPerBuffer; ++e) {
        cudaEvent_t event = nullptr;
        GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        buffer->release.push_back(event);
      }
    }
    return Status::OK();
  }

  // One more buffer for a consumer that holds all of them, within
  // max_held_bytes. REQUIRES: mutex.
  Status GrowLocked() {
    const uint64_t buffer_bytes = data_bytes + label_bytes;
    if ((held + 1) * buffer_bytes > max_held_bytes) {
      return Status::InvalidArgument(
          "the consumer holds " + std::to_string(held) + " CUDA batches (" +
          std::to_string(held * buffer_bytes) +
          " bytes of GPU memory) and one more would pass max_held_bytes (" +
          std::to_string(max_held_bytes) +
          " bytes): release the batches you no longer need (or copy those you keep), or raise "
          "max_held_bytes");
    }
    size_t index = buffers.size();
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].extra && buffers[i].data == nullptr) {
        index = i;
        break;
      }
    }
    if (index == buffers.size()) {
      if (buffers.size() == kMaxBuffers) {
        return Status::InvalidArgument("the consumer holds " + std::to_string(held) +
                                       " CUDA batches, the most a loader hands out at once");
      }
      buffers.emplace_back();
      buffers.back().extra = true;
    }
    DeviceScope scope(device);
    DeviceBuffer& buffer = buffers[index];
    Status allocated = Allocate(&buffer);
    if (!allocated.ok()) {
      cudaGetLastError();
      if (buffer.data) cudaFree(buffer.data);
      if (buffer.labels) cudaFree(buffer.labels);
      buffer.data = buffer.labels = nullptr;
      return allocated.WithContext("another device buffer for the batches held");
    }
    buffer.pending_release = 0;
    live += 1;
    free.push_back(index);
    return Status::OK();
  }

  ~DeviceShared() {
    DeviceScope scope(device);
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    for (DeviceBuffer& buffer : buffers) {
      for (size_t i = 0; i < buffer.pending_release; ++i) cudaEventSynchronize(buffer.release[i]);
      for (cudaEvent_t event : buffer.release) cudaEventDestroy(event);
      if (buffer.ready) cudaEventDestroy(buffer.ready);
      if (buffer.data) cudaFree(buffer.data);
      if (buffer.labels) cudaFree(buffer.labels);
    }
    if (staging) cudaFree(staging);
    if (table) cudaFree(table);
    if (copy_stream) cudaStreamDestroy(copy_stream);
  }

  // The consumer released buffer `index`, used by `streams`. Runs on the
  // consumer's thread (or the thread dropping a Python tensor).
  void Release(size_t index, const std::vector<cudaStream_t>& streams, bool delivered) {
    if (getpid() != owner) return;  // an inherited Batch in a forked child: left alone
    if (delivered && buffers[index].extra) {
      // Beyond the steady ring: freed, so memory returns to the steady
      // level. cudaFree synchronizes the device, so whatever the
      // consumer's streams queued on the batch has finished first.
      void* data = nullptr;
      void* labels = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex);
        std::swap(data, buffers[index].data);
        std::swap(labels, buffers[index].labels);
        buffers[index].pending_release = 0;
        held -= 1;
        live -= 1;
      }
      {
        DeviceScope scope(device);
        cudaFree(data);
        cudaFree(labels);
        cudaGetLastError();
      }
      changed.notify_all();
      return;
    }
    {
      DeviceBuffer& buffer = buffers[index];
      size_t count = 0;
      if (delivered) {
        // Without a declared stream the consumer used the legacy default
        // stream (which also orders against every blocking stream). The
        // per-thread default stream is a pseudo-handle that would mean the
        // releasing thread's own: the legacy stream orders against every
        // per-thread default stream, so it stands in for it.
        std::vector<cudaStream_t> used;
        for (cudaStream_t stream : streams) {
          if (stream == cudaStreamPerThread) stream = nullptr;
          if (std::find(used.begin(), used.end(), stream) == used.end()) used.push_back(stream);
        }
        if (used.empty()) used.push_back(nullptr);
        bool needs_device = buffer.release.size() < used.size() ||
                            std::find(used.begin(), used.end(), nullptr) != used.end();
        std::optional<DeviceScope> scope;
        if (needs_device) scope.emplace(device);
        for (cudaStream_t stream : used) {
          if (buffer.release.size() <= count) {
            cudaEvent_t event = nullptr;
            if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
              // Cannot order the reuse on the GPU: order it on the host.
              // (The consumer's thread: its next error check must not see ours.)
              cudaGetLastError();
              cudaStreamSynchronize(stream);
              continue;
            }
            buffer.release.push_back(event);
          }
          if (cudaEventRecord(buffer.release[count], stream) != cudaSuccess) {
            cudaGetLastError();
            cudaStreamSynchronize(stream);
            continue;
          }
          count += 1;
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      // A buffer never handed out keeps the release events it had (its
      // failed Issue may not have queued the waits for them yet).
      if (delivered) buffer.pending_release = count;
      free.push_back(index);
      if (delivered) held -= 1;
    }
    changed.notify_all();
  }
};

namespace {

class CudaBatchHandle final : public DeviceBatchHandle {
 public:
  CudaBatchHandle(std::shared_ptr<DeviceShared> shared, size_t index)
      : shared_(std::move(shared)), index_(index) {}
  ~CudaBatchHandle() override { shared_->Release(index_, streams_, delivered_); }

  void MarkDelivered() { delivered_ = true; }

  void* ready_event() const override { return shared_->buffers[index_].ready; }

  Status WaitOn(void* stream) override {
    std::optional<DeviceScope> scope;
    if (stream == nullptr) scope.emplace(shared_->device);  // that device's legacy stream
    GPUFEED_RETURN_IF_ERROR(RecordStream(stream));
    return CudaError(cudaStreamWaitEvent(AsStream(stream), shared_->buffers[index_].ready, 0),
                     "cudaStreamWaitEvent on the batch's ready event");
  }

  Status RecordStream(void* stream) override {
    cudaStream_t s = AsStream(stream);
    // A stream being captured into a CUDA graph would pull the loader's
    // copy stream into the capture (and the release event would be a graph
    // node, not a point the stream passes): refused.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (s != nullptr && s != cudaStreamPerThread &&
        cudaStreamIsCapturing(s, &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone) {
      return Status::InvalidArgument(
          "the stream is capturing a CUDA graph: wait on the batch before the capture starts "
          "(or copy the batch into the graph's own buffers)");
    }
    if (std::find(streams_.begin(), streams_.end(), s) == streams_.end()) streams_.push_back(s);
    return Status::OK();
  }

  Status Synchronize() override {
    return CudaError(cudaEventSynchronize(shared_->buffers[index_].ready),
                     "cudaEventSynchronize on the batch's ready event");
  }

 private:
  std::shared_ptr<DeviceShared> shared_;
  size_t index_;
  std::vector<cudaStream_t> streams_;
  bool delivered_ = false;
};

// A prepared item of the queue: a device batch, an error, or an epoch end.
struct Item {
  Batch batch;
  std::shared_ptr<CudaBatchHandle> handle;
  Status error;
  bool end = false;
  uint64_t epoch = 0;
  uint64_t index = 0;
  LoaderState after;  // the source's state once this item is consumed
};

// A copy in flight: the host batch goes back when `done` has passed.
struct InFlight {
  Batch host;
  cudaEvent_t start = nullptr;
  cudaEvent_t done = nullptr;
  size_t bytes = 0;
};

}  // namespace

Status CudaDeviceUsable(int device_id) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return Status::NotSupported(std::string("no usable CUDA device: ") + cudaGetErrorName(error) +
                                " (" + cudaGetErrorString(error) + "); use the CPU device");
  }
  if (count == 0) return Status::NotSupported("no CUDA device found; use the CPU device");
  if (device_id < 0 || device_id >= count) {
    return Status::NotSupported("CUDA device " + std::to_string(device_id) + " does not exist (" +
                                std::to_string(count) + " found)");
  }
  return Status::OK();
}

class DeviceStage::Impl {
 public:
  Impl(HostBatchSource source, const DeviceStageOptions& options)
      : source_(std::move(source)), options_(options), shared_(std::make_shared<DeviceShared>()) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      stop_ = true;
    }
    shared_->changed.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      DeviceScope scope(options_.device_id);
      for (auto& [start, done] : timing_events_) {
        cudaEventDestroy(start);
        cudaEventDestroy(done);
      }
    }
    std::deque<Item> dropped;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      dropped.swap(ready_);
    }
    // Handles release their buffers (taking the lock) as `dropped` goes.
  }

  Status Start() {
    GPUFEED_RETURN_IF_ERROR(CudaDeviceUsable(options_.device_id));
    shared_->device = options_.device_id;
    DeviceScope scope(options_.device_id);
    GPUFEED_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&shared_->copy_stream, cudaStreamNonBlocking));
    size_t data_bytes = options_.max_data_bytes;
    if (options_.normalize) {
      const ImageTransformOptions& image = options_.image;
      size_t pixels = data_bytes / 3;  // the host batch is uint8 HWC
      element_size_ = DtypeSize(image.dtype);
      data_bytes = pixels * 3 * element_size_;
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMalloc(&shared_->staging, options_.max_data_bytes));
      std::vector<uint8_t> table(768 * element_size_);
      NormalizeTable(image, image.dtype, table.data());
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMalloc(&shared_->table, table.size()));
      GPUFEED_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(shared_->table, table.data(), table.size(), cudaMemcpyHostToDevice));
    }
    shared_->data_bytes = data_bytes;
    shared_->label_bytes = options_.max_label_bytes;
    shared_->max_held_bytes = options_.max_held_bytes;
    if (shared_->max_held_bytes == 0) {
      // A quarter of the GPU memory free now.
      size_t free_bytes = 0, total_bytes = 0;
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
      shared_->max_held_bytes = free_bytes / 4;
    }
    shared_->buffers.reserve(DeviceShared::kMaxBuffers);
    shared_->buffers.resize(static_cast<size_t>(options_.prefetch) + 2);
    for (size_t i = 0; i < shared_->buffers.size(); ++i) {
      GPUFEED_RETURN_IF_ERROR(shared_->Allocate(&shared_->buffers[i]));
      shared_->live += 1;
      shared_->free.push_back(i);
    }
    // Timing pairs for the copies in flight (at most kMaxInFlight + 1).
    for (int i = 0; i < kMaxInFlight + 1; ++i) {
      cudaEvent_t start = nullptr, done = nullptr;
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
      // The copy thread waits on `done`: sleeping, not spinning on a core
      // the decode threads need (timing stays enabled).
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventBlockingSync));
      timing_events_.emplace_back(start, done);
    }
    last_state_ = source_.state();
    started_ = Clock::now();
    thread_ = std::thread([this] { Run(); });
    return Status::OK();
  }

  Status NextFor(Batch* batch, int timeout_ms, bool* ready) {
    *ready = true;
    batch->reset();
    std::unique_lock<std::mutex> lock(shared_->mutex);
    if (resume_after_end_) {
      // The consumer is back after an epoch's end: the copy thread goes on.
      resume_after_end_ = false;
      wait_after_end_ = false;
      shared_->changed.notify_all();
    }
    const double ready_at_call = static_cast<double>(ready_.size());
    if (ready_.empty() && shared_->held == shared_->live) {
      // Every device buffer is held by the consumer (list(loader)): the
      // copy thread could never go on, so one more buffer is added.
      GPUFEED_RETURN_IF_ERROR(shared_->GrowLocked());
      shared_->changed.notify_all();
    }
    auto wait_started = Clock::now();
    auto available = [&] { return !ready_.empty(); };
    if (timeout_ms < 0) {
      shared_->changed.wait(lock, available);
    } else if (!shared_->changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), available)) {
      consumer_wait_ += Seconds(Clock::now() - wait_started);
      *ready = false;
      return Status::OK();
    }
    consumer_wait_ += Seconds(Clock::now() - wait_started);
    ready_sum_ += ready_at_call;  // counted once per batch taken, not per poll
    ready_count_ += 1;
    Item item = std::move(ready_.front());
    ready_.pop_front();
    last_state_ = item.after;
    if (item.end) resume_after_end_ = true;
    if (item.handle) {
      item.handle->MarkDelivered();
      shared_->held += 1;
      batches_ += 1;
      samples_ += static_cast<uint64_t>(item.batch.size());
    }
    lock.unlock();
    shared_->changed.notify_all();
    if (!item.error.ok()) return item.error;
    if (item.end) {
      LoaderBatchAccess::Fill(batch, Tensor(), Tensor(), {}, item.epoch, item.index, true, nullptr);
      return Status::OK();
    }
    *batch = std::move(item.batch);
    return Status::OK();
  }

  Status Reconfigure(const std::function<Status()>& host_op) {
    std::deque<Item> dropped;
    {
      std::unique_lock<std::mutex> lock(shared_->mutex);
      paused_ = true;
      generation_ += 1;
      shared_->changed.notify_all();
      shared_->changed.wait(lock, [&] { return !busy_; });
      dropped.swap(ready_);
      wait_after_end_ = false;
      resume_after_end_ = false;
    }
    dropped.clear();  // releases their buffers (takes the lock)
    Status status = host_op();
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      last_state_ = source_.state();
      paused_ = false;
    }
    shared_->changed.notify_all();
    return status;
  }

  LoaderState State() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return last_state_;
  }

  void AddStats(LoaderStats* stats) const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    stats->device = "cuda:" + std::to_string(options_.device_id);
    stats->device_batches = copied_batches_;
    stats->device_bytes = copied_bytes_;
    stats->device_copy_seconds = copy_seconds_;
    stats->device_wait_buffer_seconds = wait_buffer_;
    // The consumer's view: what it took from this stage, and how long it
    // waited here (the host loader's own figures describe the copy thread).
    stats->batches = batches_;
    stats->samples = samples_;
    stats->consumer_wait_seconds = consumer_wait_;
    stats->mean_ready_batches = ready_count_ ? ready_sum_ / ready_count_ : 0;
    stats->elapsed_seconds = Seconds(Clock::now() - started_);
  }

 private:
  static constexpr int kMaxInFlight = 2;

  // The copy thread.
  void Run() {
    cudaSetDevice(options_.device_id);
    std::deque<InFlight> in_flight;
    size_t next_timing = 0;
    std::unique_lock<std::mutex> lock(shared_->mutex);
    auto can_go = [&] {
      return stop_ || (!paused_ && !wait_after_end_ &&
                       ready_.size() < static_cast<size_t>(options_.prefetch));
    };
    while (true) {
      // Parked with copies in flight: hand their host batches back as they
      // finish (and count them) instead of holding them until woken.
      while (!in_flight.empty() && !can_go()) {
        shared_->changed.wait_for(lock, std::chrono::milliseconds(1), can_go);
        lock.unlock();
        Retire(&in_flight, SIZE_MAX);
        lock.lock();
      }
      shared_->changed.wait(lock, can_go);
      if (stop_) break;
      busy_ = true;
      uint64_t generation = generation_;
      lock.unlock();

      // Host batches whose copy is done go back to the host loader; keep at
      // most one copy in flight while waiting for the next host batch.
      Retire(&in_flight, 1);
      Batch host;
      bool got = false;
      Status status = source_.next_for(&host, 20, &got);
      Item item;
      bool push = false;
      if (!status.ok()) {
        item.error = status;
        item.after = source_.state();
        push = true;
      } else if (got && host.end_of_epoch()) {
        // Every copy of the epoch is done before its end is announced.
        Retire(&in_flight, 0);
        item.end = true;
        item.epoch = host.epoch();
        item.index = host.index();
        item.after = source_.state();
        push = true;
      } else if (got) {
        item.after = source_.state();
        size_t index = 0;
        if (TakeBuffer(generation, &index)) {
          InFlight copy;
          copy.start = timing_events_[next_timing].first;
          copy.done = timing_events_[next_timing].second;
          next_timing = (next_timing + 1) % timing_events_.size();
          Status issued = Issue(host, index, &copy, &item);
          if (issued.ok()) {
            copy.host = std::move(host);
            in_flight.push_back(std::move(copy));
            Retire(&in_flight, kMaxInFlight);
          } else {
            // Nothing may still read the host batch when it goes back.
            cudaStreamSynchronize(shared_->copy_stream);
            item.handle.reset();  // the buffer goes back
            item.batch.reset();
            item.error = issued;
          }
          push = true;
        }
      }
      host.reset();  // its release takes the host loader's lock: not under ours
      lock.lock();
      busy_ = false;
      if (push && generation == generation_ && !stop_) {
        if (item.end) wait_after_end_ = true;
        ready_.push_back(std::move(item));
      } else if (push) {
        // Dropped (a reconfigure or stop came meanwhile): release unlocked.
        lock.unlock();
        item = Item();
        lock.lock();
      }
      shared_->changed.notify_all();
    }
    lock.unlock();
    Retire(&in_flight, 0);
  }

  // Waits for a free device buffer. False when a reconfigure or stop came.
  bool TakeBuffer(uint64_t generation, size_t* index) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    auto started = Clock::now();
    shared_->changed.wait(lock, [&] {
      return stop_ || paused_ || generation != generation_ || !shared_->free.empty();
    });
    wait_buffer_ += Seconds(Clock::now() - started);
    if (stop_ || paused_ || generation != generation_) return false;
    *index = shared_->free.front();
    shared_->free.pop_front();
    return true;
  }

  // Enqueues the copies (and the kernel) of `host` into buffer `index`.
  Status Issue(const Batch& host, size_t index, InFlight* copy, Item* item) {
    DeviceBuffer& buffer = shared_->buffers[index];
    // The handle owns the buffer from here: on any failure it goes back.
    item->handle = std::make_shared<CudaBatchHandle>(shared_, index);
    cudaStream_t stream = shared_->copy_stream;
    const Tensor& data = host.data();
    const Tensor& labels = host.labels();
    const Tensor& lengths = host.label_lengths();
    size_t data_bytes = data.bytes();
    // With label counts, one copy from the counts to the labels' end (one
    // region of the host slot: [counts][labels]).
    const char* label_source = static_cast<const char*>(labels.data);
    size_t lengths_offset = 0;
    if (lengths.data != nullptr) {
      label_source = static_cast<const char*>(lengths.data);
      lengths_offset = static_cast<size_t>(static_cast<const char*>(labels.data) - label_source);
    }
    size_t label_bytes = lengths_offset + labels.bytes();
    if (data_bytes > options_.max_data_bytes || label_bytes > options_.max_label_bytes) {
      return Status::Internal("host batch larger than the device buffers");
    }
    if (options_.normalize &&
        (data.dtype != TensorDtype::kUint8 || data.shape.size() != 4 || data.shape[3] != 3)) {
      return Status::Internal("device normalization needs uint8 (B, H, W, 3) host batches");
    }
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy->start, stream));
    if (options_.normalize) {
      // The staging buffer is the stage's own (the stream's order protects
      // it): its copy need not wait for the consumer.
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(shared_->staging, data.data, data_bytes,
                                                   cudaMemcpyHostToDevice, stream));
    }
    // The consumer's streams must have passed the release point before
    // anything writes the reused buffer. If a wait cannot be queued, the
    // host waits for the remaining events instead, so the buffer is never
    // overwritten early.
    size_t pending;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      pending = buffer.pending_release;
      buffer.pending_release = 0;
    }
    for (size_t i = 0; i < pending; ++i) {
      cudaError_t error = cudaStreamWaitEvent(stream, buffer.release[i], 0);
      if (error != cudaSuccess) {
        for (size_t j = i; j < pending; ++j) cudaEventSynchronize(buffer.release[j]);
        return CudaError(error, "cudaStreamWaitEvent on a release event");
      }
    }
    Tensor out_data = data;
    out_data.device = DeviceKind::kCuda;
    out_data.device_id = options_.device_id;
    out_data.data = buffer.data;
    if (options_.normalize) {
      // (B, H, W, 3) uint8 in; (B, 3, H, W) or (B, H, W, 3) of the dtype out.
      int64_t images = data.shape[0], height = data.shape[1], width = data.shape[2];
      bool nchw = options_.image.layout == OutputLayout::kNCHW;
      // The launch reports the thread's last error: an earlier, unchecked
      // one (a failed cudaEventElapsedTime, say) must not be blamed on it.
      cudaGetLastError();
      GPUFEED_CUDA_RETURN_IF_ERROR(LaunchNormalize(static_cast<const uint8_t*>(shared_->staging),
                                                   buffer.data, element_size_, images, height,
                                                   width, nchw, shared_->table, stream));
      out_data.shape = nchw ? std::vector<int64_t>{images, 3, height, width}
                            : std::vector<int64_t>{images, height, width, 3};
      out_data.dtype = options_.image.dtype == OutputDtype::kFloat16    ? TensorDtype::kFloat16
                       : options_.image.dtype == OutputDtype::kBfloat16 ? TensorDtype::kBfloat16
                                                                         : TensorDtype::kFloat32;
    } else {
      GPUFEED_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(buffer.data, data.data, data_bytes, cudaMemcpyHostToDevice, stream));
    }
    Tensor out_labels = labels;
    out_labels.device = DeviceKind::kCuda;
    out_labels.device_id = options_.device_id;
    out_labels.data = static_cast<char*>(buffer.labels) + lengths_offset;
    Tensor out_lengths;
    if (lengths.data != nullptr) {
      out_lengths = lengths;
      out_lengths.device = DeviceKind::kCuda;
      out_lengths.device_id = options_.device_id;
      out_lengths.data = buffer.labels;
    }
    if (label_bytes > 0) {
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer.labels, label_source, label_bytes,
                                                   cudaMemcpyHostToDevice, stream));
    }
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventRecord(buffer.ready, stream));
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy->done, stream));
    copy->bytes = data_bytes + label_bytes;
    LoaderBatchAccess::Fill(&item->batch, std::move(out_data), std::move(out_labels),
                            host.sample_ids(), host.epoch(), host.index(), false, nullptr,
                            item->handle);
    if (out_lengths.data != nullptr) {
      LoaderBatchAccess::SetLabelLengths(&item->batch, std::move(out_lengths));
    }
    return Status::OK();
  }

  // Returns host batches whose copies finished; waits for the oldest while
  // more than `keep` are in flight.
  void Retire(std::deque<InFlight>* in_flight, size_t keep) {
    while (!in_flight->empty()) {
      InFlight& oldest = in_flight->front();
      if (in_flight->size() > keep) {
        cudaEventSynchronize(oldest.done);
      } else if (cudaEventQuery(oldest.done) != cudaSuccess) {
        break;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, oldest.start, oldest.done) != cudaSuccess) ms = 0;
      {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        copy_seconds_ += ms / 1e3;
        copied_bytes_ += oldest.bytes;
        copied_batches_ += 1;
      }
      in_flight->pop_front();  // the host batch goes back to the host loader
    }
  }

  HostBatchSource source_;
  DeviceStageOptions options_;
  std::shared_ptr<DeviceShared> shared_;
  size_t element_size_ = 1;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timing_events_;
  std::thread thread_;

  // Guarded by shared_->mutex.
  std::deque<Item> ready_;
  bool stop_ = false;
  bool paused_ = false;
  bool busy_ = false;              // the copy thread works outside the lock
  bool wait_after_end_ = false;    // an epoch end is queued: wait for the consumer
  bool resume_after_end_ = false;  // the consumer took it: go on at its next call
  uint64_t generation_ = 0;        // bumped by Reconfigure: older items are dropped
  LoaderState last_state_;
  Clock::time_point started_;
  uint64_t batches_ = 0;
  uint64_t samples_ = 0;
  uint64_t copied_batches_ = 0;
  uint64_t copied_bytes_ = 0;
  double copy_seconds_ = 0;
  double wait_buffer_ = 0;
  double consumer_wait_ = 0;
  double ready_sum_ = 0;
  uint64_t ready_count_ = 0;
};

DeviceStage::~DeviceStage() = default;

Status DeviceStage::Create(HostBatchSource source, const DeviceStageOptions& options,
                           std::unique_ptr<DeviceStage>* stage) {
  if (options.prefetch < 1) return Status::InvalidArgument("device prefetch must be positive");
  auto impl = std::make_unique<Impl>(std::move(source), options);
  GPUFEED_RETURN_IF_ERROR(impl->Start());
  stage->reset(new DeviceStage(std::move(impl)));
  return Status::OK();
}

Status DeviceStage::NextFor(Batch* batch, int timeout_ms, bool* ready) {
  return impl_->NextFor(batch, timeout_ms, ready);
}
Status DeviceStage::Reconfigure(const std::function<Status()>& host_op) {
  return impl_->Reconfigure(host_op);
}
LoaderState DeviceStage::State() const { return impl_->State(); }
void DeviceStage::AddStats(LoaderStats* stats) const { impl_->AddStats(stats); }

#endif  // GPUFEED_HAVE_CUDA

}  // namespace gpufeed
