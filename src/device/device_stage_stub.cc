// The device component in a build without CUDA (GPUFEED_WITH_CUDA=OFF):
// every call says so. CMakeLists.txt compiles this file instead of
// device_stage_cuda.cc, cuda_util.cc, pinned_host.cc and normalize.cu.
#include "device/device_stage.h"
#include "device/pinned_host.h"

namespace gpufeed {

Status CudaDeviceUsable(int) {
  return Status::NotSupported("gpufeed was built without CUDA (GPUFEED_WITH_CUDA=OFF); "
                              "use the CPU device");
}

Status MakePinnedAllocator(int device_id, std::shared_ptr<BatchAllocator>*) {
  return CudaDeviceUsable(device_id);
}

std::shared_ptr<DeviceBatchHandle> MakePinnedBatchHandle(
    int, std::function<void(std::shared_ptr<HostReleaseFence>)>) {
  return nullptr;
}

Status CreateDeviceStage(std::unique_ptr<BatchSource>, const DeviceStageOptions& options,
                         std::unique_ptr<BatchSource>*) {
  return CudaDeviceUsable(options.device_id);
}

}  // namespace gpufeed
