// The device buffers of the CUDA copy stage and the handle a device Batch
// carries (device_stage_cuda.cc fills them). CUDA builds only.
//
// DeviceShared is what the stage and the Batches it handed out share: it
// lives as long as either (a device Batch may outlive its Loader). Its
// buffers, their events, the copy stream, the staging buffer and the
// normalize table are owning handles, given back in ~DeviceShared with the
// device current, after the stream and the consumers' release events passed.
#ifndef GPUFEED_DEVICE_DEVICE_BUFFERS_H_
#define GPUFEED_DEVICE_DEVICE_BUFFERS_H_

#include <cuda_runtime_api.h>
#include <sys/types.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "batch/device_handle.h"
#include "device/cuda_util.h"
#include "device/device_stage.h"
#include "gpufeed/status.h"

namespace gpufeed {

// One device batch buffer (data and labels) and its events.
struct DeviceBuffer {
  DeviceMemory data;
  DeviceMemory labels;
  CudaEvent ready;  // after the batch's copies and kernel
  // Recorded on the consumer's streams when the batch was released; the
  // copy stream waits for the first `pending_release` before reuse.
  std::vector<CudaEvent> release;
  size_t pending_release = 0;
  // Beyond the steady prefetch + 2: added while the consumer held every
  // buffer, freed when its batch is released (data null: retired).
  bool extra = false;
};

// What the stage and its Batches share; it lives as long as either.
//
// Thread safety: device, the sizes, copy_stream, staging and table are
// constant once the stage has started. `mutex` guards free, held, live, the
// growth of `buffers` and each buffer's pending_release and retirement; a
// buffer's memory and events are used unlocked by whoever owns the buffer
// (the copy thread while it fills it, the consumer's Batch while held).
struct DeviceShared {
  // At most this many buffers (steady and extra): `buffers` is reserved to
  // it, so an element never moves and the copy thread may read its own
  // buffer while the consumer's thread appends one (under the mutex).
  static constexpr size_t kMaxBuffers = 1024;
  int device = 0;
  CudaStream copy_stream;
  std::vector<DeviceBuffer> buffers;
  size_t data_bytes = 0;   // per buffer
  size_t label_bytes = 0;  // per buffer
  uint64_t max_held_bytes = 0;
  // The process that created the stage: in a forked child nothing is
  // touched (no CUDA, no locks).
  const pid_t owner = getpid();
  DeviceMemory staging;  // uint8 HWC batch for device normalization
  DeviceMemory table;    // the normalize table

  std::mutex mutex;
  std::condition_variable changed;
  // Buffers neither queued nor held nor being filled, oldest release first
  // (its events are the likeliest to have passed).
  std::deque<size_t> free;
  size_t held = 0;           // buffers in Batches handed to the consumer
  size_t live = 0;           // buffers allocated (not retired)

  // Allocates buffer `buffer`'s memory (and its events, the first time).
  // REQUIRES: `device` current.
  // Sizes and allocates the steady buffers (prefetch + 2), and the staging
  // buffer and table of device normalisation, from the stage's options;
  // *element_size: the normalised dtype's size. Called once, by the stage's
  // Start, before the copy thread exists.
  Status Prepare(const DeviceStageOptions& options, size_t* element_size);
  Status Allocate(DeviceBuffer* buffer);

  // One more buffer for a consumer that holds all of them, within
  // max_held_bytes. REQUIRES: mutex.
  Status GrowLocked();

  ~DeviceShared();

  // The consumer released buffer `index`, used by `streams`. Runs on the
  // consumer's thread (or the thread dropping a Python tensor).
  void Release(size_t index, const std::vector<cudaStream_t>& streams, bool delivered);
};

// Behind a CUDA Batch: buffer `index` of `shared`, given back (with events
// on the streams the consumer declared) when the handle is destroyed. A
// handle never marked delivered (a batch dropped before the consumer took
// it) returns its buffer without events.
class CudaBatchHandle final : public DeviceBatchHandle {
 public:
  CudaBatchHandle(std::shared_ptr<DeviceShared> shared, size_t index)
      : shared_(std::move(shared)), index_(index) {}
  ~CudaBatchHandle() override;

  void MarkDelivered() { delivered_ = true; }

  void* ready_event() const override { return shared_->buffers[index_].ready.get(); }
  Status WaitOn(void* stream) override;
  Status RecordStream(void* stream) override;
  Status Synchronize() override;

 private:
  std::shared_ptr<DeviceShared> shared_;
  size_t index_;
  std::vector<cudaStream_t> streams_;
  bool delivered_ = false;
};

// The kind's extra tensors (Batch::extras) lie after the data in the same
// host buffer (planes, pipeline/sample_kind.h), so one copy moves them all.
// The labels may lie there too (their last plane). DataSpan: the bytes
// from data's start to the end of the last tensor in that buffer
// (`buffer_bytes` long), and *labels_inside whether the labels are one of
// them. DeviceExtras: the extras at the same offsets from `device_data`, a
// CUDA buffer on `device_id`.
size_t DataSpan(const Batch& host, size_t buffer_bytes, bool* labels_inside);
std::vector<Tensor> DeviceExtras(const Batch& host, void* device_data, int device_id);

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_DEVICE_BUFFERS_H_
