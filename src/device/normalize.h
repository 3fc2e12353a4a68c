// The device-side ToTensor + Normalize: uint8 HWC images -> float32 /
// float16 / bfloat16, NCHW or NHWC, by gathering from the same 3 x 256 table
// the CPU path uses (decode/output.h NormalizeTable), so both agree bit
// for bit.
#ifndef GPUFEED_DEVICE_NORMALIZE_H_
#define GPUFEED_DEVICE_NORMALIZE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gpufeed {

// Launches on `stream`. `input` holds `images` x height x width x 3 bytes;
// `table` (device memory) holds 768 elements of `element_size` bytes (4 or
// 2); `output` gets images x 3 x height x width (nchw) or images x height x
// width x 3 elements.
cudaError_t LaunchNormalize(const uint8_t* input, void* output, size_t element_size,
                            int64_t images, int64_t height, int64_t width, bool nchw,
                            const void* table, cudaStream_t stream);

}  // namespace gpufeed

#endif  // GPUFEED_DEVICE_NORMALIZE_H_
