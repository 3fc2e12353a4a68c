// Batch: what Loader::Next hands the consumer. Tensors point into a batch
// buffer owned by the loader; the buffer goes back to the loader when the
// Batch is destroyed or reset (it may outlive the Loader safely). A consumer
// may keep any number of Batches (a whole epoch, several epochs): their
// bytes are never overwritten, by later batches, SetEpoch, Restore or the
// Loader's destruction; the loader allocates more buffers while they are
// held, within LoaderOptions::max_held_bytes, and frees them on release.
//
// CUDA batches (LoaderOptions::device.kind == kCuda) live in device memory.
// Their copy may still be running on the loader's copy stream when Next
// returns: make the stream that uses the batch wait for it with WaitOn
// (no host stall), or call Synchronize. WaitOn also records the stream as a
// user of the buffer: when the Batch is released, an event is recorded on
// each such stream and the loader reuses the buffer only after the GPU has
// passed it, so kernels still reading the batch finish first.
//
//   gpufeed::Batch batch;
//   loader->Next(&batch);
//   batch.WaitOn(stream);                  // cudaStream_t, as void*
//   my_kernel<<<grid, block, 0, stream>>>(batch.data().data, ...);
//   batch.reset();                         // fine: reuse waits for `stream`
//
// Thread safety: a Batch is used by one thread at a time.
#ifndef GPUFEED_BATCH_H_
#define GPUFEED_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpufeed/export.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

// Where a tensor's memory is.
enum class DeviceKind : int { kCpu = 0, kCuda = 1 };

// A dense, C-contiguous view. Valid while its Batch holds the buffer.
struct GPUFEED_EXPORT Tensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  TensorDtype dtype = TensorDtype::kUint8;
  DeviceKind device = DeviceKind::kCpu;
  int device_id = 0;  // the CUDA device ordinal for kCuda
  size_t bytes() const;
};

class DeviceBatchHandle;  // internal: the device buffer and its events

// Where batch buffers come from: host memory by default; the GPU stage
// backs it with pinned memory. Called from loader threads, never per sample.
class GPUFEED_EXPORT BatchAllocator {
 public:
  virtual ~BatchAllocator();
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* data, size_t bytes) = 0;
};

class GPUFEED_EXPORT Batch {
 public:
  Batch();
  ~Batch();
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // (B, 3, H, W) or (B, H, W, 3) images, (B, L) raw vectors or token
  // windows, or (B, dense count) float32 tabular dense features.
  const Tensor& data() const { return data_; }
  // (B,) class indices (int64) or float labels, or (B, label_count).
  const Tensor& labels() const { return labels_; }
  // With LoaderOptions::label_lengths: (B,) int32, how many of each row's
  // label_count labels the record has (the rest are label_pad). Empty
  // (no data, no shape) otherwise. On the same device as labels().
  const Tensor& label_lengths() const { return label_lengths_; }
  // The kind's further tensors, each (B, ...), on the same device as
  // data(): tabular rows give [sparse ids (B, sparse count)]; empty for
  // the other kinds.
  const std::vector<Tensor>& extras() const { return extras_; }
  // Dataset indices of the samples, in batch order.
  const std::vector<uint64_t>& sample_ids() const { return sample_ids_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t index() const { return index_; }  // batch number within the epoch
  int64_t size() const { return data_.shape.empty() ? 0 : data_.shape[0]; }
  // True for the empty batch that marks the end of an epoch.
  bool end_of_epoch() const { return end_of_epoch_; }
  // Returns the buffer to the loader now.
  void reset();

  // kCpu, or kCuda for batches in device memory.
  DeviceKind device() const { return data_.device; }
  // CUDA batches: the cudaEvent_t (as void*) recorded on the loader's copy
  // stream after the batch's copies and conversion; nullptr for host batches.
  void* ready_event() const;
  // CUDA batches: `stream` (a cudaStream_t; nullptr is the legacy default
  // stream) waits on the GPU until the batch is ready (cudaStreamWaitEvent;
  // the host does not block), and is recorded as a user of the batch (see
  // RecordStream). A no-op for host batches.
  Status WaitOn(void* stream);
  // CUDA batches: when the batch is released, an event is recorded on
  // `stream`; the loader reuses the buffer only after the GPU passed it.
  // Call it for every stream that uses the batch (WaitOn does it for its
  // stream). Without any, the legacy default stream is used.
  Status RecordStream(void* stream);
  // CUDA batches: the host waits until the batch is ready. A no-op for
  // host batches.
  Status Synchronize();

 private:
  friend class BatchAccess;
  Tensor data_;
  Tensor labels_;
  Tensor label_lengths_;
  std::vector<Tensor> extras_;
  std::vector<uint64_t> sample_ids_;
  uint64_t epoch_ = 0;
  uint64_t index_ = 0;
  bool end_of_epoch_ = false;
  std::shared_ptr<void> hold_;  // releases the batch buffer
  std::shared_ptr<DeviceBatchHandle> device_;  // CUDA batches only
};

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_H_
