// Pinned host memory for the host stage's batch buffers, and the handle of
// a pinned host batch (pin_memory on the CPU device). CUDA builds define
// them in pinned_host.cc; builds without CUDA in device_stage_stub.cc
// (NotSupported, null).
#ifndef GPUFEED_DEVICE_PINNED_HOST_H_
#define GPUFEED_DEVICE_PINNED_HOST_H_

#include <functional>
#include <memory>

#include "batch/device_handle.h"
#include "gpufeed/batch.h"
#include "gpufeed/status.h"

namespace gpufeed {

// Batch buffers in pinned (page-locked) host memory on `device_id`'s
// context (cudaHostAlloc, portable). Pinning is slow (every page is locked):
// the loader allocates its buffers once at Open, never on the hot path.
Status MakePinnedAllocator(int device_id, std::shared_ptr<BatchAllocator>* allocator);

// The device handle of a pinned host batch on `device_id`: WaitOn and
// RecordStream declare the consumer's streams (no wait: the bytes are on the
// host already); when the handle is destroyed it records an event on each
// (on the legacy default stream when none was declared, where torch's
// default stream copies) and calls `release` with the fence of those events
// (null when there is nothing to wait for). `release` runs on the releasing
// thread. Null without CUDA.
std::shared_ptr<DeviceBatchHandle> MakePinnedBatchHandle(
    int device_id, std::function<void(std::shared_ptr<HostReleaseFence>)> release);

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_PINNED_HOST_H_
