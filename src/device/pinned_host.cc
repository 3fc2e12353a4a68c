// Pinned host memory for the loader's batch buffers, and the handle of a
// pinned host batch (pin_memory on the CPU device): see pinned_host.h.
// CUDA builds only; the stubs are in device_stage_stub.cc.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "device/cuda_util.h"
#include "device/device_stage.h"
#include "device/pinned_host.h"
#include "util/logging.h"

namespace gpufeed {

namespace {

class PinnedAllocator final : public BatchAllocator {
 public:
  explicit PinnedAllocator(int device) : device_(device) {}
  void* Allocate(size_t bytes) override {
    DeviceScope scope(device_);
    void* data = nullptr;
    cudaError_t error =
        cudaHostAlloc(&data, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (error != cudaSuccess) {
      Log().error("cudaHostAlloc of {} bytes failed: {}", bytes, cudaGetErrorString(error));
      return nullptr;
    }
    return data;
  }
  void Free(void* data, size_t) override {
    DeviceScope scope(device_);
    cudaFreeHost(data);
  }

 private:
  int device_;
};

// The fence of a released pinned host batch: its events, waited once.
class PinnedFence final : public HostReleaseFence {
 public:
  explicit PinnedFence(std::vector<CudaEvent> events) : events_(std::move(events)) {}
  void Wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (; waited_ < events_.size(); ++waited_) cudaEventSynchronize(events_[waited_].get());
  }

 private:
  std::mutex mutex_;
  const std::vector<CudaEvent> events_;
  size_t waited_ = 0;  // guarded by mutex_
};

class PinnedBatchHandle final : public DeviceBatchHandle {
 public:
  PinnedBatchHandle(int device, std::function<void(std::shared_ptr<HostReleaseFence>)> release)
      : device_(device), release_(std::move(release)) {}
  ~PinnedBatchHandle() override {
    if (getpid() != owner_) return;  // inherited by fork: no CUDA, no locks here
    std::vector<CudaEvent> events;
    {
      DeviceScope scope(device_);
      if (streams_.empty()) streams_.push_back(nullptr);  // torch's default stream
      for (cudaStream_t stream : streams_) {
        CudaEvent event;
        if (!CreateCudaEvent(cudaEventDisableTiming | cudaEventBlockingSync, &event).ok() ||
            cudaEventRecord(event.get(), stream) != cudaSuccess) {
          // Cannot order the reuse on the GPU: order it on the host.
          cudaGetLastError();
          event.reset();
          cudaStreamSynchronize(stream);
          continue;
        }
        events.push_back(std::move(event));
      }
    }
    release_(events.empty() ? nullptr : std::make_shared<PinnedFence>(std::move(events)));
  }

  void* ready_event() const override { return nullptr; }
  // The bytes are on the host already: nothing to wait for, only a user.
  Status WaitOn(void* stream) override { return RecordStream(stream); }
  Status RecordStream(void* stream) override {
    cudaStream_t s = AsStream(stream);
    if (s == cudaStreamPerThread) s = nullptr;  // as in DeviceShared::Release (device_stage_cuda.cc)
    if (std::find(streams_.begin(), streams_.end(), s) == streams_.end()) streams_.push_back(s);
    return Status::OK();
  }
  Status Synchronize() override { return Status::OK(); }

 private:
  int device_;
  std::function<void(std::shared_ptr<HostReleaseFence>)> release_;
  std::vector<cudaStream_t> streams_;
  const pid_t owner_ = getpid();
};

}  // namespace

std::shared_ptr<DeviceBatchHandle> MakePinnedBatchHandle(
    int device_id, std::function<void(std::shared_ptr<HostReleaseFence>)> release) {
  return std::make_shared<PinnedBatchHandle>(device_id, std::move(release));
}

Status MakePinnedAllocator(int device_id, std::shared_ptr<BatchAllocator>* allocator) {
  GPUFEED_RETURN_IF_ERROR(CudaDeviceUsable(device_id));
  *allocator = std::make_shared<PinnedAllocator>(device_id);
  return Status::OK();
}

}  // namespace gpufeed
