// The CUDA stand-in's runtime header: the subset of <cuda_runtime_api.h>
// that gpufeed's device stage and its tests call, with the same names,
// types and numeric values as CUDA 12/13, implemented by host threads in
// cuda_standin.cc (tests only; never installed, nothing shipped links it).
//
// Semantics kept from the real runtime (what the device stage relies on):
//   - each stream runs its operations in order, on its own worker thread,
//     after a random delay per operation (GPUFEED_CUDA_STANDIN_MAX_DELAY_US,
//     default 300; GPUFEED_CUDA_STANDIN_SEED), so an ordering bug shows up
//     as wrong bytes rather than as luck;
//   - the legacy default stream (nullptr, cudaStreamLegacy) waits for the
//     earlier work of every blocking stream of its device, and they wait
//     for it; cudaStreamNonBlocking streams do not; cudaStreamPerThread is
//     treated as the legacy default stream;
//   - an event is a point in one stream: cudaEventRecord snapshots it,
//     cudaStreamWaitEvent waits for the snapshot taken at the call (an event
//     never recorded is complete), cudaEventQuery/Synchronize observe it;
//   - device memory is host memory the stand-in tracks: copies check that
//     each side is (or is not) inside a live allocation for the copy kind,
//     so a copy into a freed or foreign buffer is an error, not a scribble;
//     fresh allocations are filled with 0xCD;
//   - cudaFree / cudaFreeHost synchronize the device first, as CUDA does;
//   - contexts: a thread has none until cudaSetDevice or a call that needs
//     one (then the current device's primary context is created, as the
//     runtime does); cuCtxGetCurrent/cuCtxSetCurrent are served through
//     cudaGetDriverEntryPointByVersion; tests can ask which devices got one.
// Devices: GPUFEED_CUDA_STANDIN_DEVICES (default 2; 0 = no device).
#ifndef GPUFEED_TESTS_CUDA_STANDIN_CUDA_RUNTIME_API_H_
#define GPUFEED_TESTS_CUDA_STANDIN_CUDA_RUNTIME_API_H_

#include <stddef.h>

#define CUDART_VERSION 13000
#define GPUFEED_CUDA_STANDIN 1
#define CUDART_CB
#define CUDARTAPI

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};

enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef void (*cudaHostFn_t)(void* userData);

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaEnableDefault 0x00

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned int cuda_version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult* status);

cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags);
cudaError_t cudaMallocHost(void** pointer, size_t bytes);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes,
                       enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* data);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // GPUFEED_TESTS_CUDA_STANDIN_CUDA_RUNTIME_API_H_
