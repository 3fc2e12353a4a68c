// The inverse transforms of gpufeed's DCT-scaled decode (exact=False,
// jpeg_scaled.cc): a block's n x n low-frequency corner (n = 1, 2 or 4) to
// its pixels at 1/8, 1/4 or 1/2, dequantized, each pixel replicated 1 or 2
// times per axis (chroma brought to the luma's size). Internal to
// src/decode.
//
// Thread safety: the functions are pure (a shared basis is built once, on
// first use, thread-safely).
#ifndef GPUFEED_DECODE_SCALED_TRANSFORM_H_
#define GPUFEED_DECODE_SCALED_TRANSFORM_H_

#include <cstddef>
#include <cstdint>

namespace gpufeed {
namespace scaled_transform {

// Dequantizes and transforms the W x H corner of `coef` (natural order, 8 per
// row; quant: the corner's steps, [v * W + u]) and writes (W * RX) x (H * RY)
// pixels at dst, rows `stride` bytes apart.
using TransformFunction = void (*)(const float* quant, const int16_t* coef, uint8_t* dst,
                                   size_t stride);

// The transform for a w x h corner (1, 2 or 4 each) and replication 1 or 2.
TransformFunction PickTransform(int w, int h, int repeat_x, int repeat_y);

// The same transform as portable loops only: what PickTransform's SIMD
// versions (x86-64: SSE2, for corners 2x2 and 4 wide) must equal byte for
// byte, as the build targets x86-64 without FMA. For tests.
TransformFunction PickPortableTransform(int w, int h, int repeat_x, int repeat_y);

}  // namespace scaled_transform
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_SCALED_TRANSFORM_H_
