// The normalize "kernel" of the CUDA stand-in: LaunchNormalize of
// src/device/normalize.h, run on the stream's worker thread in stream order
// (a host function), gathering from the same table as normalize.cu does, so
// that the device stage's normalize path (staging buffer, table, layouts,
// dtypes, ordering against the release events) is exercised on every CI run.
#include <cstdint>
#include <cstring>

#include "cuda_runtime_api.h"
#include "device/normalize.h"

namespace gpufeed {

namespace {

struct NormalizeLaunch {
  const uint8_t* input;
  void* output;
  size_t element_size;
  int64_t images, pixels_per_image;
  bool nchw;
  const void* table;
};

void CUDART_CB RunNormalize(void* data) {
  auto* launch = static_cast<NormalizeLaunch*>(data);
  const int64_t pixels = launch->images * launch->pixels_per_image;
  const auto* table = static_cast<const uint8_t*>(launch->table);
  auto* output = static_cast<uint8_t*>(launch->output);
  const size_t size = launch->element_size;
  for (int64_t p = 0; p < pixels; ++p) {
    const uint8_t* pixel = launch->input + p * 3;
    for (int c = 0; c < 3; ++c) {
      int64_t at;
      if (launch->nchw) {
        int64_t image = p / launch->pixels_per_image;
        at = image * 3 * launch->pixels_per_image + c * launch->pixels_per_image +
             (p - image * launch->pixels_per_image);
      } else {
        at = p * 3 + c;
      }
      std::memcpy(output + at * size, table + (c * 256 + pixel[c]) * size, size);
    }
  }
  delete launch;
}

}  // namespace

cudaError_t LaunchNormalize(const uint8_t* input, void* output, size_t element_size,
                            int64_t images, int64_t height, int64_t width, bool nchw,
                            const void* table, cudaStream_t stream) {
  const int64_t pixels_per_image = height * width;
  if (images * pixels_per_image <= 0) return cudaSuccess;
  if (element_size != 4 && element_size != 2) return cudaErrorInvalidValue;
  auto* launch = new NormalizeLaunch{input, output, element_size, images, pixels_per_image, nchw,
                                     table};
  cudaError_t error = cudaLaunchHostFunc(stream, RunNormalize, launch);
  if (error != cudaSuccess) {
    delete launch;
    return error;
  }
  // As normalize.cu: a launch reports the thread's last error.
  return cudaGetLastError();
}

}  // namespace gpufeed
