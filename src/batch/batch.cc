// Tensor, Batch and the dtype functions of include/gpufeed/batch.h.
#include "gpufeed/batch.h"

#include "batch/batch_source.h"
#include "batch/device_handle.h"

namespace gpufeed {

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
DeviceBatchHandle::~DeviceBatchHandle() = default;
HostReleaseFence::~HostReleaseFence() = default;
BatchSource::~BatchSource() = default;

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

// The calls that concern device memory (host batches: no-ops).
void* Batch::ready_event() const { return device_ ? device_->ready_event() : nullptr; }
Status Batch::WaitOn(void* stream) { return device_ ? device_->WaitOn(stream) : Status::OK(); }
Status Batch::RecordStream(void* stream) {
  return device_ ? device_->RecordStream(stream) : Status::OK();
}
Status Batch::Synchronize() { return device_ ? device_->Synchronize() : Status::OK(); }

}  // namespace gpufeed
