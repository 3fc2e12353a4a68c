// Stage 3 of the pipeline: host batches -> GPU memory (docs/architecture.md).
//
// A copy thread takes host batches, in order, from a source (the host
// loader, whose batch buffers are pinned), and for each one:
//   1. takes a free device buffer; the copy stream waits (on the GPU, the
//      host does not block) for the events the consumer's streams recorded
//      when the buffer's previous batch was released;
//   2. one cudaMemcpyAsync for the data and one for the labels on a
//      dedicated non-blocking stream; with device normalization, the data
//      crosses as uint8 HWC and a kernel on the same stream writes the
//      float16/bfloat16/float32 NCHW/NHWC output;
//   3. records the batch's ready event, and queues the batch for Next.
// The host batch goes back to the host loader when its copy has finished;
// at most two copies are in flight. So while the GPU consumes batch k,
// batch k+1 crosses PCIe and the decode threads fill k+2 onwards.
//
// Device buffers: prefetch + 2, allocated at Create; more while the
// consumer holds all of them (freed again when those are released, within
// max_held_bytes). A buffer is reused
// only after the consumer released its Batch AND the consumer's streams
// passed the events recorded at release (Batch::WaitOn / RecordStream).
// The buffers and the copy stream live as long as the stage or any Batch
// handed out, whichever is longer.
#ifndef GPUFEED_DEVICE_DEVICE_STAGE_H_
#define GPUFEED_DEVICE_DEVICE_STAGE_H_

#include <functional>
#include <memory>

#include "gpufeed/batch.h"
#include "gpufeed/loader.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

// Internal interface behind a CUDA Batch (the Batch methods forward to it).
class DeviceBatchHandle {
 public:
  virtual ~DeviceBatchHandle();
  virtual void* ready_event() const = 0;
  virtual Status WaitOn(void* stream) = 0;
  virtual Status RecordStream(void* stream) = 0;
  virtual Status Synchronize() = 0;
};

// OK when gpufeed was built with CUDA and device `device_id` is usable;
// NotSupported with the reason otherwise (no driver, no device, bad id).
Status CudaDeviceUsable(int device_id);

// Batch buffers in pinned (page-locked) host memory on `device_id`'s
// context (cudaHostAlloc, portable). Pinning costs about 1 GB/s: the loader
// allocates its buffers once at Open, never on the hot path.
Status MakePinnedAllocator(int device_id, std::shared_ptr<BatchAllocator>* allocator);

// What a released pinned host batch leaves behind (pin_memory on the CPU
// device): its buffer may be written again only after Wait() returns, that
// is after the GPU has passed the points recorded on the consumer's streams
// at release (the consumer's cudaMemcpyAsync from it, x.cuda(non_blocking=
// True), has read it). Wait may be called from several threads; it is cheap
// once passed. As torch's caching host allocator does with its events.
class HostReleaseFence {
 public:
  virtual ~HostReleaseFence();
  virtual void Wait() = 0;
};

// The device handle of a pinned host batch on `device_id`: WaitOn and
// RecordStream declare the consumer's streams (no wait: the bytes are on the
// host already); when the handle is destroyed it records an event on each
// (on the legacy default stream when none was declared, where torch's
// default stream copies) and calls `release` with the fence of those events
// (null when there is nothing to wait for). `release` runs on the releasing
// thread. Null without CUDA.
std::shared_ptr<DeviceBatchHandle> MakePinnedBatchHandle(
    int device_id, std::function<void(std::shared_ptr<HostReleaseFence>)> release);

// Host batches in order.
struct HostBatchSource {
  // As Loader::NextFor.
  std::function<Status(Batch* batch, int timeout_ms, bool* ready)> next_for;
  // As Loader::State, after the batches next_for has returned.
  std::function<LoaderState()> state;
};

struct DeviceStageOptions {
  int device_id = 0;
  // Device batches ready ahead of the consumer (device buffers: prefetch + 2).
  int prefetch = 2;
  // Largest host batch, in bytes (data and labels), to size the device buffers.
  size_t max_data_bytes = 0;
  size_t max_label_bytes = 0;
  // As LoaderOptions::max_held_bytes, for device memory (0: a quarter of the
  // GPU memory free at Create).
  uint64_t max_held_bytes = 0;
  // Device normalization: host data is uint8 (B, H, W, 3); the device batch
  // is `image.dtype` in `image.layout`, normalized with image.mean/std.
  bool normalize = false;
  ImageTransformOptions image;
};

class DeviceStage {
 public:
  // NotSupported without CUDA (see CudaDeviceUsable).
  static Status Create(HostBatchSource source, const DeviceStageOptions& options,
                       std::unique_ptr<DeviceStage>* stage);
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;

  // As Loader::NextFor, with device batches.
  Status NextFor(Batch* batch, int timeout_ms, bool* ready);
  // Pauses the copy thread, drops the batches prepared ahead, runs
  // `host_op` (SetEpoch or Restore of the source), and resumes. `host_op`
  // must leave the source at a consistent position even when it fails
  // (Loader validates a state before restoring it): the dropped batches are
  // not brought back.
  Status Reconfigure(const std::function<Status()>& host_op);
  // As Loader::State, for the batches the consumer has taken.
  LoaderState State() const;
  // Fills the device figures and the consumer-side ones (batches, waits).
  void AddStats(LoaderStats* stats) const;

  class Impl;

 private:
  explicit DeviceStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_DEVICE_STAGE_H_
