#include "device/cuda_util.h"

namespace gpufeed {

Status CudaError(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::OK();
  return Status::IOError(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) +
                         ")");
}

Status CreateCudaStream(unsigned int flags, CudaStream* stream) {
  cudaStream_t created = nullptr;
  GPUFEED_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&created, flags));
  stream->reset(created);
  return Status::OK();
}

Status CreateCudaEvent(unsigned int flags, CudaEvent* event) {
  cudaEvent_t created = nullptr;
  GPUFEED_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&created, flags));
  event->reset(created);
  return Status::OK();
}

Status AllocateDeviceMemory(size_t bytes, DeviceMemory* memory) {
  void* data = nullptr;
  GPUFEED_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
  memory->reset(data);
  return Status::OK();
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent, reached through the runtime (gpufeed
// links no libcuda: it must load on machines without a driver). Null when
// the runtime cannot serve them.
struct ContextCalls {
  int (*get_current)(void** context) = nullptr;
  int (*set_current)(void* context) = nullptr;
};

void* DriverEntryPoint(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t error =
      cudaGetDriverEntryPointByVersion(symbol, &function, 12000, cudaEnableDefault, &found);
#else
  cudaError_t error = cudaGetDriverEntryPoint(symbol, &function, cudaEnableDefault, &found);
#endif
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();  // not this caller's error to keep
    return nullptr;
  }
  return function;
}

const ContextCalls& Contexts() {
  static const ContextCalls calls = [] {
    ContextCalls c;
    void* get = DriverEntryPoint("cuCtxGetCurrent");
    void* set = DriverEntryPoint("cuCtxSetCurrent");
    if (get != nullptr && set != nullptr) {
      c.get_current = reinterpret_cast<int (*)(void**)>(get);
      c.set_current = reinterpret_cast<int (*)(void*)>(set);
    }
    return c;
  }();
  return calls;
}

}  // namespace

DeviceScope::DeviceScope(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) return;
  const ContextCalls& calls = Contexts();
  void* context = nullptr;
  bool known = calls.get_current != nullptr && calls.get_current(&context) == 0;
  if (current == device && (!known || context != nullptr)) return;
  if (cudaSetDevice(device) != cudaSuccess) return;
  switched_ = true;
  previous_device_ = current;
  previous_context_ = context;
  restore_context_ = known;
}

DeviceScope::~DeviceScope() {
  if (!switched_) return;
  if (restore_context_) {
    Contexts().set_current(previous_context_);  // the caller's, or none
  } else {
    cudaSetDevice(previous_device_);
  }
}

}  // namespace gpufeed
