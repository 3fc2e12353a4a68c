// Helpers of the CUDA device stage (CUDA builds only; compiled against the
// real runtime, or against the CUDA stand-in for the tests): CUDA errors as
// Status, consumer stream handles, and DeviceScope.
#ifndef GPUFEED_DEVICE_CUDA_UTIL_H_
#define GPUFEED_DEVICE_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <string>

#include "gpufeed/status.h"

namespace gpufeed {

// OK for cudaSuccess, else IOError "what: cudaErrorName (description)".
Status CudaError(cudaError_t error, const std::string& what);

#define GPUFEED_CUDA_RETURN_IF_ERROR(expr) GPUFEED_RETURN_IF_ERROR(CudaError((expr), #expr))

// cudaStream_t values from a consumer: nullptr is the legacy default stream.
inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Makes `device` current for the scope and gives the caller's thread back
// exactly the context it had (the consumer's thread may work on another
// GPU, or on none yet). It switches only when the thread is on another
// device or has no context, so a thread already on `device` (the usual
// case: torch sets it) never touches another GPU. Restoring goes through
// cuCtxSetCurrent, not cudaSetDevice: since CUDA 12 cudaSetDevice creates
// the device's primary context, so "restoring" device 0 to a thread that
// never used a GPU would leave a stray context (hundreds of MB) on GPU 0.
// Used only where a call needs the current device (the legacy default
// stream, allocation, event creation).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  bool switched_ = false;
  bool restore_context_ = false;
  int previous_device_ = 0;
  void* previous_context_ = nullptr;
};

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_CUDA_UTIL_H_
