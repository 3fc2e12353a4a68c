// Tensor, Batch and the dtype functions of include/gpufeed/batch.h.
#include "gpufeed/batch.h"

#include "batch/batch_source.h"
#include "batch/device_handle.h"

namespace gpufeed {

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
  extras_.clear();
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
