// Internal: what a Batch whose memory the GPU touches carries, and what a
// released pinned host batch leaves behind. Implemented by the device
// component (src/device/), used by the host stage and by Batch itself.
#ifndef GPUFEED_BATCH_DEVICE_HANDLE_H_
#define GPUFEED_BATCH_DEVICE_HANDLE_H_

#include "gpufeed/batch.h"
#include "gpufeed/status.h"

namespace gpufeed {

// Behind a CUDA Batch or a pinned host Batch: the Batch methods that concern
// device memory forward to it (see include/gpufeed/batch.h). Destroying the
// handle releases the buffer (with events on the streams declared).
class DeviceBatchHandle {
 public:
  virtual ~DeviceBatchHandle();
  virtual void* ready_event() const = 0;
  virtual Status WaitOn(void* stream) = 0;
  virtual Status RecordStream(void* stream) = 0;
  virtual Status Synchronize() = 0;
};

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

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_DEVICE_HANDLE_H_
