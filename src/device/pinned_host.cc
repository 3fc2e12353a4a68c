// Pinned host memory for the loader's batch buffers, and the handle of a
// pinned host batch (pin_memory on the CPU device): see device_stage.h.
// CUDA builds only; the stubs are in device_stage.cc's no-CUDA half.
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
  explicit PinnedFence(std::vector<cudaEvent_t> events) : events_(std::move(events)) {}
  ~PinnedFence() override {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  void Wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (; waited_ < events_.size(); ++waited_) cudaEventSynchronize(events_[waited_]);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> events_;
  size_t waited_ = 0;  // guarded by mutex_
};

class PinnedBatchHandle final : public DeviceBatchHandle {
 public:
  PinnedBatchHandle(int device, std::function<void(std::shared_ptr<HostReleaseFence>)> release)
      : device_(device), release_(std::move(release)) {}
  ~PinnedBatchHandle() override {
    if (getpid() != owner_) return;  // inherited by fork: no CUDA, no locks here
    std::vector<cudaEvent_t> events;
    {
      DeviceScope scope(device_);
      if (streams_.empty()) streams_.push_back(nullptr);  // torch's default stream
      for (cudaStream_t stream : streams_) {
        cudaEvent_t event = nullptr;
        if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync) !=
                cudaSuccess ||
            cudaEventRecord(event, stream) != cudaSuccess) {
          // Cannot order the reuse on the GPU: order it on the host.
          cudaGetLastError();
          if (event != nullptr) cudaEventDestroy(event);
          cudaStreamSynchronize(stream);
          continue;
        }
        events.push_back(event);
      }
    }
    release_(events.empty() ? nullptr : std::make_shared<PinnedFence>(std::move(events)));
  }

  void* ready_event() const override { return nullptr; }
  // The bytes are on the host already: nothing to wait for, only a user.
  Status WaitOn(void* stream) override { return RecordStream(stream); }
  Status RecordStream(void* stream) override {
    cudaStream_t s = AsStream(stream);
    if (s == cudaStreamPerThread) s = nullptr;  // as in DeviceShared::Release
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
