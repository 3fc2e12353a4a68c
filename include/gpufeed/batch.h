// Batch: what Loader::Next hands the consumer. Tensors point into a batch
// buffer owned by the loader; the buffer goes back to the loader when the
// Batch is destroyed or reset (it may outlive the Loader safely).
//
// Thread safety: a Batch is used by one thread at a time.
#ifndef GPUFEED_BATCH_H_
#define GPUFEED_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpufeed/export.h"

namespace gpufeed {

enum class TensorDtype : int { kUint8, kInt32, kInt64, kFloat16, kBfloat16, kFloat32 };
GPUFEED_EXPORT size_t TensorDtypeSize(TensorDtype dtype);
GPUFEED_EXPORT const char* TensorDtypeName(TensorDtype dtype);

// A dense, C-contiguous view. Valid while its Batch holds the buffer.
struct GPUFEED_EXPORT Tensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  TensorDtype dtype = TensorDtype::kUint8;
  size_t bytes() const;
};

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

  // (B, 3, H, W) or (B, H, W, 3) images, or (B, L) raw vectors.
  const Tensor& data() const { return data_; }
  // (B,) class indices (int64) or float labels, or (B, label_count).
  const Tensor& labels() const { return labels_; }
  // Dataset indices of the samples, in batch order.
  const std::vector<uint64_t>& sample_ids() const { return sample_ids_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t index() const { return index_; }  // batch number within the epoch
  int64_t size() const { return data_.shape.empty() ? 0 : data_.shape[0]; }
  // True for the empty batch that marks the end of an epoch.
  bool end_of_epoch() const { return end_of_epoch_; }
  // Returns the buffer to the loader now.
  void reset();

 private:
  friend class LoaderBatchAccess;
  Tensor data_;
  Tensor labels_;
  std::vector<uint64_t> sample_ids_;
  uint64_t epoch_ = 0;
  uint64_t index_ = 0;
  bool end_of_epoch_ = false;
  std::shared_ptr<void> hold_;  // releases the batch buffer
};

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_H_
