// The last step of the transform: the resized RGB image (HWC uint8, the
// flip already applied by the resampler) written into a batch slot in the
// requested layout and dtype.
//
//   uint8 NHWC      row copies
//   uint8 NCHW      de-interleave (pshufb, 16 pixels per step, when the
//                   resampler's SIMD path is active; scalar otherwise)
//   float / half    one table lookup per value (ToTensor + Normalize
//                   computed exactly as torchvision does, per channel and
//                   byte value), planes written in order
//
// Thread safety: reentrant (the tables are thread-local).
#ifndef GPUFEED_DECODE_OUTPUT_H_
#define GPUFEED_DECODE_OUTPUT_H_

#include "decode/image_decoder.h"
#include "gpufeed/options.h"

namespace gpufeed {

// Writes the size x size `image` at `destination` as options.layout and
// options.dtype (uint8, float32, float16 or bfloat16).
void WriteOutput(const Image& image, const ImageTransformOptions& options, void* destination);

// The 3 x 256 output values of ToTensor + Normalize for `dtype` (float32,
// or float16/bfloat16 bits), channel-major: what the CPU path writes for
// value v of channel c is table[c * 256 + v]. The GPU normalize kernel
// gathers from the same table, so both paths agree bit for bit.
// `table` holds 768 elements of TensorDtypeSize(dtype) bytes.
void NormalizeTable(const ImageTransformOptions& options, OutputDtype dtype, void* table);

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_OUTPUT_H_
