// The CUDA copy stage (device_stage.h), compiled against the CUDA runtime,
// or against the CUDA stand-in for the tests (tests/cuda_standin).
#include "device/device_stage.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "batch/batch_access.h"
#include "batch/device_handle.h"
#include "device/cuda_util.h"
#include "device/device_buffers.h"
#include "device/normalize.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// A prepared item of the queue: a device batch, an error, or an epoch end.
struct Item {
  Batch batch;
  std::shared_ptr<CudaBatchHandle> handle;
  Status error;
  bool end = false;
  uint64_t epoch = 0;
  uint64_t index = 0;
  BatchCursor after;  // upstream's position once this item is consumed
};

// A copy in flight: the host batch goes back when `done` has passed (the
// events are the stage's timing pair, borrowed).
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

namespace {

class CopyStage final : public BatchSource {
 public:
  CopyStage(std::unique_ptr<BatchSource> upstream, const DeviceStageOptions& options)
      : upstream_(std::move(upstream)),
        options_(options),
        shared_(std::make_shared<DeviceShared>()) {}

  ~CopyStage() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      stop_ = true;
    }
    shared_->changed.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      DeviceScope scope(options_.device_id);
      timing_events_.clear();
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
    GPUFEED_RETURN_IF_ERROR(CreateCudaStream(cudaStreamNonBlocking, &shared_->copy_stream));
    GPUFEED_RETURN_IF_ERROR(shared_->Prepare(options_, &element_size_));
    // Timing pairs for the copies in flight (at most kMaxInFlight + 1).
    for (int i = 0; i < kMaxInFlight + 1; ++i) {
      CudaEvent start, done;
      GPUFEED_RETURN_IF_ERROR(CreateCudaEvent(cudaEventDefault, &start));
      // The copy thread waits on `done`: sleeping, not spinning on a core
      // the decode threads need (timing stays enabled).
      GPUFEED_RETURN_IF_ERROR(CreateCudaEvent(cudaEventBlockingSync, &done));
      timing_events_.emplace_back(std::move(start), std::move(done));
    }
    last_position_ = upstream_->Position();
    started_ = Clock::now();
    thread_ = std::thread([this] { Run(); });
    return Status::OK();
  }

  Status NextFor(Batch* batch, int timeout_ms, bool* ready) override {
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
    if (!WaitForBatch(shared_->changed, lock, timeout_ms, [&] { return !ready_.empty(); },
                      &consumer_wait_)) {
      *ready = false;
      return Status::OK();
    }
    ready_sum_ += ready_at_call;  // counted once per batch taken, not per poll
    ready_count_ += 1;
    Item item = std::move(ready_.front());
    ready_.pop_front();
    last_position_ = item.after;
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
      BatchAccess::FillEndOfEpoch(batch, item.epoch, item.index);
      return Status::OK();
    }
    *batch = std::move(item.batch);
    return Status::OK();
  }

  // Pauses the copy thread, drops the batches prepared ahead, seeks
  // upstream and resumes. The dropped batches are not brought back.
  Status Seek(const BatchCursor& cursor) override {
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
    Status status = upstream_->Seek(cursor);
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      last_position_ = upstream_->Position();
      paused_ = false;
    }
    shared_->changed.notify_all();
    return status;
  }

  BatchCursor Position() const override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return last_position_;
  }

  void AddStats(StageStats* stats) const override {
    upstream_->AddStats(stats);
    std::lock_guard<std::mutex> lock(shared_->mutex);
    stats->device = "cuda:" + std::to_string(options_.device_id);
    stats->device_batches = copied_batches_;
    stats->device_bytes = copied_bytes_;
    stats->device_copy_seconds = copy_seconds_;
    stats->device_wait_buffer_seconds = wait_buffer_;
    // The consumer's view: what it took from this stage, and how long it
    // waited here (upstream's consumer figures describe the copy thread).
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

      Item item;
      const bool push = Step(generation, &in_flight, &next_timing, &item);
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

  // One turn of the copy thread, unlocked: host batches whose copy is done
  // go back upstream (at most one copy stays in flight while it waits for
  // the next host batch), then the next host batch, its error or its epoch
  // end becomes *item. False: nothing to publish (no batch yet, or a
  // reconfigure or stop came while waiting for a buffer). The host batch is
  // released before returning, outside the stage's lock (its release takes
  // upstream's).
  bool Step(uint64_t generation, std::deque<InFlight>* in_flight, size_t* next_timing,
            Item* item) {
    Retire(in_flight, 1);
    Batch host;
    bool got = false;
    Status status = upstream_->NextFor(&host, 20, &got);
    if (!status.ok()) {
      item->error = status;
      item->after = upstream_->Position();
      return true;
    }
    if (!got) return false;
    if (host.end_of_epoch()) {
      // Every copy of the epoch is done before its end is announced.
      Retire(in_flight, 0);
      item->end = true;
      item->epoch = host.epoch();
      item->index = host.index();
      item->after = upstream_->Position();
      return true;
    }
    item->after = upstream_->Position();
    size_t index = 0;
    if (!TakeBuffer(generation, &index)) return false;
    InFlight copy;
    copy.start = timing_events_[*next_timing].first.get();
    copy.done = timing_events_[*next_timing].second.get();
    *next_timing = (*next_timing + 1) % timing_events_.size();
    Status issued = Issue(host, index, &copy, item);
    if (issued.ok()) {
      copy.host = std::move(host);
      in_flight->push_back(std::move(copy));
      Retire(in_flight, kMaxInFlight);
    } else {
      // Nothing may still read the host batch when it goes back.
      cudaStreamSynchronize(shared_->copy_stream.get());
      item->handle.reset();  // the buffer goes back
      item->batch.reset();
      item->error = issued;
    }
    return true;
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
    cudaStream_t stream = shared_->copy_stream.get();
    const Tensor& data = host.data();
    const Tensor& labels = host.labels();
    const Tensor& lengths = host.label_lengths();
    // The data and the kind's extra tensors (and labels) after it: one copy.
    bool labels_inside = false;
    size_t data_bytes = DataSpan(host, options_.max_data_bytes, &labels_inside);
    // With label counts, one copy from the counts to the labels' end (one
    // region of the host slot: [counts][labels]).
    const char* label_source = static_cast<const char*>(labels.data);
    size_t lengths_offset = 0;
    if (lengths.data != nullptr) {
      label_source = static_cast<const char*>(lengths.data);
      lengths_offset = static_cast<size_t>(static_cast<const char*>(labels.data) - label_source);
    }
    size_t label_bytes = labels_inside ? 0 : lengths_offset + labels.bytes();
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
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(shared_->staging.get(), data.data, data_bytes,
                                                   cudaMemcpyHostToDevice, stream));
    }
    GPUFEED_RETURN_IF_ERROR(WaitForRelease(&buffer, stream));
    Tensor out_data = OnDevice(data, buffer.data.get());
    GPUFEED_RETURN_IF_ERROR(CopyData(data, data_bytes, buffer, stream, &out_data));
    Tensor out_labels = OnDevice(
        labels, labels_inside ? static_cast<char*>(buffer.data.get()) +
                                    (label_source - static_cast<const char*>(data.data))
                              : static_cast<char*>(buffer.labels.get()) + lengths_offset);
    Tensor out_lengths;
    if (lengths.data != nullptr) out_lengths = OnDevice(lengths, buffer.labels.get());
    if (label_bytes > 0) {
      GPUFEED_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer.labels.get(), label_source, label_bytes,
                                                   cudaMemcpyHostToDevice, stream));
    }
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventRecord(buffer.ready.get(), stream));
    GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventRecord(copy->done, stream));
    copy->bytes = data_bytes + label_bytes;
    BatchAccess::Fill(&item->batch, std::move(out_data), std::move(out_labels),
                            host.sample_ids(), host.epoch(), host.index(), false, nullptr,
                            item->handle);
    if (out_lengths.data != nullptr) {
      BatchAccess::SetLabelLengths(&item->batch, std::move(out_lengths));
    }
    if (!host.extras().empty()) {
      BatchAccess::SetExtras(&item->batch,
                             DeviceExtras(host, buffer.data.get(), options_.device_id));
    }
    return Status::OK();
  }

  // `host`'s description for the same bytes at `data` on this device.
  Tensor OnDevice(const Tensor& host, void* data) const {
    Tensor tensor = host;
    tensor.device = DeviceKind::kCuda;
    tensor.device_id = options_.device_id;
    tensor.data = data;
    return tensor;
  }

  // The consumer's streams must have passed the release point before
  // anything writes the reused buffer. If a wait cannot be queued, the host
  // waits for the remaining events instead, so the buffer is never
  // overwritten early.
  Status WaitForRelease(DeviceBuffer* buffer, cudaStream_t stream) {
    size_t pending;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      pending = buffer->pending_release;
      buffer->pending_release = 0;
    }
    for (size_t i = 0; i < pending; ++i) {
      cudaError_t error = cudaStreamWaitEvent(stream, buffer->release[i].get(), 0);
      if (error != cudaSuccess) {
        for (size_t j = i; j < pending; ++j) cudaEventSynchronize(buffer->release[j].get());
        return CudaError(error, "cudaStreamWaitEvent on a release event");
      }
    }
    return Status::OK();
  }

  // The batch's data into the buffer: copied, or normalised by the kernel
  // from the staging copy ((B, H, W, 3) uint8 in; (B, 3, H, W) or
  // (B, H, W, 3) of the dtype out, set in *out).
  Status CopyData(const Tensor& data, size_t data_bytes, DeviceBuffer& buffer,
                  cudaStream_t stream, Tensor* out) {
    if (!options_.normalize) {
      GPUFEED_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(buffer.data.get(), data.data, data_bytes, cudaMemcpyHostToDevice, stream));
      return Status::OK();
    }
    int64_t images = data.shape[0], height = data.shape[1], width = data.shape[2];
    bool nchw = options_.normalize_nchw;
    // The launch reports the thread's last error: an earlier, unchecked one
    // (a failed cudaEventElapsedTime, say) must not be blamed on it.
    cudaGetLastError();
    GPUFEED_CUDA_RETURN_IF_ERROR(LaunchNormalize(
        static_cast<const uint8_t*>(shared_->staging.get()), buffer.data.get(), element_size_,
        images, height, width, nchw, shared_->table.get(), stream));
    out->shape = nchw ? std::vector<int64_t>{images, 3, height, width}
                      : std::vector<int64_t>{images, height, width, 3};
    out->dtype = options_.normalize_dtype;
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
      in_flight->pop_front();  // the host batch goes back upstream
    }
  }

  const std::unique_ptr<BatchSource> upstream_;
  const DeviceStageOptions options_;
  std::shared_ptr<DeviceShared> shared_;
  size_t element_size_ = 1;
  std::vector<std::pair<CudaEvent, CudaEvent>> timing_events_;  // (start, done)
  std::thread thread_;

  // Guarded by shared_->mutex.
  std::deque<Item> ready_;
  bool stop_ = false;
  bool paused_ = false;
  bool busy_ = false;              // the copy thread works outside the lock
  bool wait_after_end_ = false;    // an epoch end is queued: wait for the consumer
  bool resume_after_end_ = false;  // the consumer took it: go on at its next call
  uint64_t generation_ = 0;        // bumped by Seek: older items are dropped
  BatchCursor last_position_;
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

}  // namespace

Status CreateDeviceStage(std::unique_ptr<BatchSource> upstream, const DeviceStageOptions& options,
                         std::unique_ptr<BatchSource>* stage) {
  if (options.prefetch < 1) return Status::InvalidArgument("device prefetch must be positive");
  auto copy = std::make_unique<CopyStage>(std::move(upstream), options);
  GPUFEED_RETURN_IF_ERROR(copy->Start());
  *stage = std::move(copy);
  return Status::OK();
}

}  // namespace gpufeed
