#include "device/normalize.h"

#include <algorithm>

namespace gpufeed {

namespace {

// One thread per pixel (grid-stride): three byte loads, three table
// gathers from shared memory, three stores (coalesced per plane for NCHW).
template <typename T>
__global__ void NormalizeKernel(const uint8_t* __restrict__ input, T* __restrict__ output,
                                int64_t pixels_per_image, int64_t pixels, bool nchw,
                                const T* __restrict__ table) {
  __shared__ T lut[768];
  for (int i = threadIdx.x; i < 768; i += blockDim.x) lut[i] = table[i];
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += stride) {
    const uint8_t* pixel = input + p * 3;
    T r = lut[pixel[0]];
    T g = lut[256 + pixel[1]];
    T b = lut[512 + pixel[2]];
    if (nchw) {
      int64_t image = p / pixels_per_image;
      int64_t at = p - image * pixels_per_image;
      T* base = output + image * 3 * pixels_per_image + at;
      base[0] = r;
      base[pixels_per_image] = g;
      base[2 * pixels_per_image] = b;
    } else {
      T* out = output + p * 3;
      out[0] = r;
      out[1] = g;
      out[2] = b;
    }
  }
}

}  // namespace

cudaError_t LaunchNormalize(const uint8_t* input, void* output, size_t element_size,
                            int64_t images, int64_t height, int64_t width, bool nchw,
                            const void* table, cudaStream_t stream) {
  const int64_t pixels_per_image = height * width;
  const int64_t pixels = images * pixels_per_image;
  if (pixels <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t wanted = (pixels + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<int64_t>(wanted, 8192));
  if (element_size == 4) {
    NormalizeKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(
        input, static_cast<uint32_t*>(output), pixels_per_image, pixels, nchw,
        static_cast<const uint32_t*>(table));
  } else if (element_size == 2) {
    NormalizeKernel<uint16_t><<<blocks, kThreads, 0, stream>>>(
        input, static_cast<uint16_t*>(output), pixels_per_image, pixels, nchw,
        static_cast<const uint16_t*>(table));
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace gpufeed
