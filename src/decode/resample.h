// PIL's antialiased bilinear resampling of 8-bit RGB, bit for bit, with
// SIMD paths chosen once at run time.
//
// Arithmetic (libImaging/Resample.c): per pass, each output value is
// clip8((2^21 + sum_t pixel_t * k_t) >> 22), where k_t are the filter
// weights rounded to 22-bit fixed point; the horizontal pass runs first and
// rounds to uint8, the vertical pass reads its rows.
//
// The SIMD paths keep that arithmetic exactly: each weight is split into
// 16-bit halves, k = high * 2^11 + low with 0 <= low < 2^11, both halves are
// accumulated with pmaddwd (16 x 16 -> 32-bit products summed in pairs of
// taps) in registers across the taps, and the sum is high_sum * 2^11 +
// low_sum: the same integer PIL computes, without overflow (the total stays
// below 255 * (2^22 + taps) + 2^21 < 2^31). So every path gives the same
// bytes as the scalar reference, which gives PIL's.
//
//   scalar  portable C++, the reference (one output value at a time)
//   sse41   one row per step, a tap pair per pmaddwd (x86-64 with SSE4.1)
//   avx2    two rows per step in the horizontal pass, 32 values per step in
//           the vertical pass (x86-64 with AVX2)
//
// The path is the best the CPU supports, chosen on first use; tests and
// benchmarks may force another with SetResamplePathForTesting.
//
// Thread safety: ResampleBilinear is reentrant (scratch is thread-local);
// SetResamplePathForTesting may race with running resamples only in the
// sense that each call uses the path it read when it started.
#ifndef GPUFEED_DECODE_RESAMPLE_H_
#define GPUFEED_DECODE_RESAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "decode/image_decoder.h"

namespace gpufeed {

enum class ResamplePath { kScalar = 0, kSse41 = 1, kAvx2 = 2 };

const char* ResamplePathName(ResamplePath path);
// "scalar", "sse41", "avx2" -> the path; false for other names.
bool ParseResamplePath(const std::string& name, ResamplePath* path);
// Whether this build and this CPU can run `path` (scalar always can).
bool ResamplePathSupported(ResamplePath path);
// The path ResampleBilinear uses now.
ResamplePath ActiveResamplePath();
// Forces `path` for every later call (tests, benchmarks). Returns false, and
// changes nothing, when the path is not supported here.
bool SetResamplePathForTesting(ResamplePath path);

// PIL's Image.resize((out_width, out_height), BILINEAR, box) for 8-bit RGB,
// mirrored left-right when `mirror` (the flip applied to the result, folded
// into the horizontal pass's store index). `horizontal` is scratch for the
// horizontal pass's rows.
void ResampleBilinear(const Image& source, double box_x0, double box_y0, double box_x1,
                      double box_y1, int out_width, int out_height, Image* output,
                      Image* horizontal, bool mirror = false);

namespace resample_internal {

// One pass's weights: output i reads source indexes first[i] ..
// first[i] + count[i] - 1 with weights[i * stride + t] (22-bit fixed point).
struct Coefficients {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
  int stride = 0;
};
void PrecomputeCoefficients(int in_size, double box0, double box1, int out_size,
                            Coefficients* out);

// The weights of tap pairs, ready for pmaddwd: for output i, pairs[i] ..
// holds (count[i] + 1) / 2 entries of the low halves of two taps packed as
// int16 (tap 2p in the low 16 bits, tap 2p + 1, or 0 past the last tap, in
// the high), and the same for the high halves.
struct TapPairs {
  std::vector<int> offset;         // first pair of output i
  std::vector<uint32_t> low;       // (k & 2047) of two taps
  std::vector<uint32_t> high;      // (k >> 11) of two taps
};
void PrecomputeTapPairs(const Coefficients& coefficients, TapPairs* out);

// The horizontal pass's weights with the same number of tap pairs for every
// output, so its inner loop has a fixed trip count (no mispredicted exits):
// taps past an output's last get weight 0, and outputs whose pairs would
// run past the row start earlier, with leading zero weights instead.
// pairs == 0 when the row is narrower than the pairs need (the pass then
// reads TapPairs).
struct UniformTaps {
  int pairs = 0;
  std::vector<int> start;     // first source pixel per output
  std::vector<uint32_t> low;  // `pairs` per output, as TapPairs
  std::vector<uint32_t> high;
};
void PrecomputeUniformTaps(const Coefficients& coefficients, int in_size, UniformTaps* out);

// A pass over rows. Horizontal: `rows` rows of `in` (`in_stride` bytes
// apart, each readable for 8 bytes past the last pixel a tap reads) to
// `out` (out_stride apart, out_width pixels, each row writable for 1 byte
// past its end), optionally mirrored. Vertical: output row i of `values`
// bytes from rows first[i]..first[i] + count[i] - 1 of `in`.
struct HorizontalPass {
  const Coefficients* coefficients;
  const TapPairs* pairs;
  const UniformTaps* uniform;
  int out_width;
  bool mirror;
};
using HorizontalFunction = void (*)(const HorizontalPass& pass, const uint8_t* in,
                                    size_t in_stride, int rows, uint8_t* out, size_t out_stride);
using VerticalFunction = void (*)(const Coefficients& coefficients, const TapPairs& pairs,
                                  const uint8_t* in, size_t in_stride, int values,
                                  int out_rows, uint8_t* out, size_t out_stride);

void HorizontalScalar(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                      uint8_t* out, size_t out_stride);
void VerticalScalar(const Coefficients& coefficients, const TapPairs& pairs, const uint8_t* in,
                    size_t in_stride, int values, int out_rows, uint8_t* out, size_t out_stride);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GPUFEED_RESAMPLE_X86 1
void HorizontalSse41(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                     uint8_t* out, size_t out_stride);
void VerticalSse41(const Coefficients& coefficients, const TapPairs& pairs, const uint8_t* in,
                   size_t in_stride, int values, int out_rows, uint8_t* out, size_t out_stride);
void HorizontalAvx2(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                    uint8_t* out, size_t out_stride);
void VerticalAvx2(const Coefficients& coefficients, const TapPairs& pairs, const uint8_t* in,
                  size_t in_stride, int values, int out_rows, uint8_t* out, size_t out_stride);
#endif

// Exact scalar tail of a vertical pass: values [from, values) of output row i.
void VerticalScalarValues(const Coefficients& coefficients, const uint8_t* in, size_t in_stride,
                          int from, int values, int row, uint8_t* out);

}  // namespace resample_internal

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_RESAMPLE_H_
