// Helpers of the CUDA device stage (CUDA builds only; compiled against the
// real runtime, or against the CUDA stand-in for the tests): CUDA errors as
// Status, consumer stream handles, owning handles for streams, events and
// device memory, and DeviceScope.
#ifndef GPUFEED_DEVICE_CUDA_UTIL_H_
#define GPUFEED_DEVICE_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "gpufeed/status.h"

namespace gpufeed {

// OK for cudaSuccess, else IOError "what: cudaErrorName (description)".
Status CudaError(cudaError_t error, const std::string& what);

#define GPUFEED_CUDA_RETURN_IF_ERROR(expr) GPUFEED_RETURN_IF_ERROR(CudaError((expr), #expr))

// cudaStream_t values from a consumer: nullptr is the legacy default stream.
inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Owns one CUDA handle and gives it back with Deleter when destroyed or
// reset (DALI's UniqueHandle). Move-only. A handle that must be destroyed
// with a particular device current is reset inside a DeviceScope.
template <typename Handle, typename Deleter>
class UniqueCudaHandle {
 public:
  UniqueCudaHandle() = default;
  explicit UniqueCudaHandle(Handle handle) : handle_(handle) {}
  ~UniqueCudaHandle() { reset(); }
  UniqueCudaHandle(UniqueCudaHandle&& other) noexcept : handle_(other.release()) {}
  UniqueCudaHandle& operator=(UniqueCudaHandle&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueCudaHandle(const UniqueCudaHandle&) = delete;
  UniqueCudaHandle& operator=(const UniqueCudaHandle&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  Handle release() { return std::exchange(handle_, nullptr); }
  void reset(Handle handle = nullptr) {
    if (handle_ != nullptr) Deleter()(handle_);
    handle_ = handle;
  }

 private:
  Handle handle_ = nullptr;
};

struct CudaStreamDeleter {
  void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
};
struct CudaEventDeleter {
  void operator()(cudaEvent_t event) const { cudaEventDestroy(event); }
};
struct DeviceMemoryDeleter {
  void operator()(void* data) const { cudaFree(data); }
};
using CudaStream = UniqueCudaHandle<cudaStream_t, CudaStreamDeleter>;
using CudaEvent = UniqueCudaHandle<cudaEvent_t, CudaEventDeleter>;
using DeviceMemory = UniqueCudaHandle<void*, DeviceMemoryDeleter>;

// cudaStreamCreateWithFlags / cudaEventCreateWithFlags / cudaMalloc into an
// owning handle; the failed call named in the Status. REQUIRES: the device
// current.
Status CreateCudaStream(unsigned int flags, CudaStream* stream);
Status CreateCudaEvent(unsigned int flags, CudaEvent* event);
Status AllocateDeviceMemory(size_t bytes, DeviceMemory* memory);

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
