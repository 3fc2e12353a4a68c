// The SSE4.1 and AVX2 passes of resample.h, compiled per function with
// __attribute__((target)) so the library itself needs no -mavx2 and runs
// on any x86-64; resample.cc calls them only when the CPU has the feature.
//
// Both passes accumulate the high and low 16-bit halves of PIL's 22-bit
// weights with pmaddwd over pairs of taps, in registers, and combine them
// once: (high << 11) + low + 2^21, >> 22, saturated to uint8. Exact integer
// arithmetic, so the bytes equal the scalar path's (resample.h).
#include "decode/resample.h"

#ifdef GPUFEED_RESAMPLE_X86

#include <immintrin.h>

#include <cstring>

namespace gpufeed {
namespace resample_internal {

namespace {

#define GPUFEED_SSE41 __attribute__((target("sse4.1")))
#define GPUFEED_AVX2 __attribute__((target("avx2")))

constexpr int kRounding = 1 << 21;

// Stores one pixel (the low 3 bytes of `value`): 4 bytes at once where the
// row goes on after it (the 4th is rewritten by the next pixel), 3 at the
// row's end.
inline void StorePixel(uint8_t* at, uint32_t value, bool last) {
  if (last) {
    std::memcpy(at, &value, 3);
  } else {
    std::memcpy(at, &value, 4);
  }
}

GPUFEED_SSE41 inline __m128i CombineSse41(__m128i low, __m128i high) {
  __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(high, 11), low),
                              _mm_set1_epi32(kRounding));
  return _mm_srai_epi32(sum, 22);
}

GPUFEED_AVX2 inline __m256i CombineAvx2(__m256i low, __m256i high) {
  __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(high, 11), low),
                                 _mm256_set1_epi32(kRounding));
  return _mm256_srai_epi32(sum, 22);
}

// Two interleaved RGB pixels (6 bytes) -> R0 R1 G0 G1 B0 B1 0 0 as int16.
GPUFEED_SSE41 inline __m128i TapPairMask() {
  return _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
}

// The second pair of a 16-byte load of four pixels (bytes 6-11): as
// TapPairMask.
GPUFEED_SSE41 inline __m128i SecondTapPairMask() {
  return _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
}

// Two saturated pixels R G B x R G B x -> R G B R G B.
GPUFEED_SSE41 inline __m128i CompactPairMask() {
  return _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
}

// Outputs with their own number of tap pairs (TapPairs): rows too narrow
// for UniformTaps.
GPUFEED_SSE41
void HorizontalVariableSse41(const HorizontalPass& pass, const uint8_t* in, size_t in_stride,
                             int rows, uint8_t* out, size_t out_stride) {
  const Coefficients& c = *pass.coefficients;
  const TapPairs& p = *pass.pairs;
  const __m128i mask = TapPairMask();
  const int width = pass.out_width;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = in + r * in_stride;
    uint8_t* target = out + r * out_stride;
    // In store order, so that each 4-byte store's spare byte is rewritten.
    for (int d = 0; d < width; ++d) {
      const int xx = pass.mirror ? width - 1 - d : d;
      const uint8_t* pixel = row + 3 * c.first[xx];
      const int begin = p.offset[xx], end = p.offset[xx + 1];
      __m128i low = _mm_setzero_si128(), high = _mm_setzero_si128();
      for (int j = begin; j < end; ++j, pixel += 6) {
        __m128i taps = _mm_shuffle_epi8(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel)), mask);
        low = _mm_add_epi32(low, _mm_madd_epi16(taps, _mm_set1_epi32(static_cast<int>(p.low[j]))));
        high = _mm_add_epi32(high,
                             _mm_madd_epi16(taps, _mm_set1_epi32(static_cast<int>(p.high[j]))));
      }
      __m128i sum = CombineSse41(low, high);
      __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      StorePixel(target + 3 * d, static_cast<uint32_t>(_mm_cvtsi128_si32(bytes)), d == width - 1);
    }
  }
}

GPUFEED_AVX2
void HorizontalVariableAvx2(const HorizontalPass& pass, const uint8_t* in, size_t in_stride,
                            int rows, uint8_t* out, size_t out_stride) {
  const Coefficients& c = *pass.coefficients;
  const TapPairs& p = *pass.pairs;
  const __m256i mask = _mm256_broadcastsi128_si256(TapPairMask());
  const int width = pass.out_width;
  int r = 0;
  // Two rows per step: row r in the low 128-bit lane, row r + 1 in the
  // high one; both use the same weights.
  for (; r + 1 < rows; r += 2) {
    const uint8_t* row0 = in + r * in_stride;
    const uint8_t* row1 = row0 + in_stride;
    uint8_t* target0 = out + r * out_stride;
    uint8_t* target1 = target0 + out_stride;
    for (int d = 0; d < width; ++d) {
      const int xx = pass.mirror ? width - 1 - d : d;
      const size_t at = 3 * static_cast<size_t>(c.first[xx]);
      const uint8_t* pixel0 = row0 + at;
      const uint8_t* pixel1 = row1 + at;
      const int begin = p.offset[xx], end = p.offset[xx + 1];
      __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
      for (int j = begin; j < end; ++j, pixel0 += 6, pixel1 += 6) {
        __m256i both = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel0))),
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel1)), 1);
        __m256i taps = _mm256_shuffle_epi8(both, mask);
        low = _mm256_add_epi32(
            low, _mm256_madd_epi16(taps, _mm256_set1_epi32(static_cast<int>(p.low[j]))));
        high = _mm256_add_epi32(
            high, _mm256_madd_epi16(taps, _mm256_set1_epi32(static_cast<int>(p.high[j]))));
      }
      __m256i sum = CombineAvx2(low, high);
      __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);
      const bool last = d == width - 1;
      StorePixel(target0 + 3 * d,
                 static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(bytes))), last);
      StorePixel(target1 + 3 * d,
                 static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1))),
                 last);
    }
  }
  if (r < rows) {
    HorizontalVariableSse41(pass, in + r * in_stride, in_stride, 1, out + r * out_stride,
                            out_stride);
  }
}

// The same number of tap pairs for every output (UniformTaps): kPairs when
// it is one of the common counts (the loop then unrolls), else at run time.
template <int kPairs>
GPUFEED_SSE41 void HorizontalUniformSse41(const HorizontalPass& pass, const uint8_t* in,
                                          size_t in_stride, int rows, uint8_t* out,
                                          size_t out_stride) {
  const UniformTaps& u = *pass.uniform;
  const int pairs = kPairs > 0 ? kPairs : u.pairs;
  const __m128i mask = TapPairMask();
  const int width = pass.out_width;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = in + r * in_stride;
    uint8_t* target = out + r * out_stride;
    for (int d = 0; d < width; ++d) {
      const int xx = pass.mirror ? width - 1 - d : d;
      const uint8_t* pixel = row + 3 * u.start[xx];
      const uint32_t* low_weights = &u.low[static_cast<size_t>(xx) * pairs];
      const uint32_t* high_weights = &u.high[static_cast<size_t>(xx) * pairs];
      __m128i low = _mm_setzero_si128(), high = _mm_setzero_si128();
      for (int j = 0; j < pairs; ++j) {
        __m128i taps = _mm_shuffle_epi8(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel + 6 * j)), mask);
        low = _mm_add_epi32(
            low, _mm_madd_epi16(taps, _mm_set1_epi32(static_cast<int>(low_weights[j]))));
        high = _mm_add_epi32(
            high, _mm_madd_epi16(taps, _mm_set1_epi32(static_cast<int>(high_weights[j]))));
      }
      __m128i sum = CombineSse41(low, high);
      __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      StorePixel(target + 3 * d, static_cast<uint32_t>(_mm_cvtsi128_si32(bytes)), d == width - 1);
    }
  }
}

// Output pixel xx of rows row0 (low lane) and row1 (high lane): R G B x
// as int32, combined and shifted, not yet saturated. Two tap pairs (four
// pixels, 12 bytes) come from one 16-byte load per row: the taps lie in
// the row (PrecomputeUniformTaps), so it reads at most 4 bytes past the
// row's end, within the 8 the pass guarantees.
template <int kPairs>
GPUFEED_AVX2 inline __m256i UniformPixelAvx2(const UniformTaps& u, int pairs, __m256i mask,
                                             __m256i second_mask, const uint8_t* row0,
                                             const uint8_t* row1, int xx) {
  const size_t at = 3 * static_cast<size_t>(u.start[xx]);
  const uint8_t* pixel0 = row0 + at;
  const uint8_t* pixel1 = row1 + at;
  const uint32_t* low_weights = &u.low[static_cast<size_t>(xx) * pairs];
  const uint32_t* high_weights = &u.high[static_cast<size_t>(xx) * pairs];
  __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
  int j = 0;
  for (; j + 1 < pairs; j += 2) {
    __m256i both = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pixel0 + 6 * j))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(pixel1 + 6 * j)), 1);
    __m256i first = _mm256_shuffle_epi8(both, mask);
    __m256i second = _mm256_shuffle_epi8(both, second_mask);
    low = _mm256_add_epi32(
        low, _mm256_add_epi32(
                 _mm256_madd_epi16(first, _mm256_set1_epi32(static_cast<int>(low_weights[j]))),
                 _mm256_madd_epi16(second,
                                   _mm256_set1_epi32(static_cast<int>(low_weights[j + 1])))));
    high = _mm256_add_epi32(
        high, _mm256_add_epi32(
                  _mm256_madd_epi16(first, _mm256_set1_epi32(static_cast<int>(high_weights[j]))),
                  _mm256_madd_epi16(second,
                                    _mm256_set1_epi32(static_cast<int>(high_weights[j + 1])))));
  }
  for (; j < pairs; ++j) {
    __m256i both = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel0 + 6 * j))),
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pixel1 + 6 * j)), 1);
    __m256i taps = _mm256_shuffle_epi8(both, mask);
    low = _mm256_add_epi32(
        low, _mm256_madd_epi16(taps, _mm256_set1_epi32(static_cast<int>(low_weights[j]))));
    high = _mm256_add_epi32(
        high, _mm256_madd_epi16(taps, _mm256_set1_epi32(static_cast<int>(high_weights[j]))));
  }
  return CombineAvx2(low, high);
}

template <int kPairs>
GPUFEED_AVX2 void HorizontalUniformAvx2(const HorizontalPass& pass, const uint8_t* in,
                                        size_t in_stride, int rows, uint8_t* out,
                                        size_t out_stride) {
  const UniformTaps& u = *pass.uniform;
  const int pairs = kPairs > 0 ? kPairs : u.pairs;
  const __m256i mask = _mm256_broadcastsi128_si256(TapPairMask());
  const __m256i second_mask = _mm256_broadcastsi128_si256(SecondTapPairMask());
  const int width = pass.out_width;
  int r = 0;
  for (; r + 1 < rows; r += 2) {  // row r in the low lane, r + 1 in the high one
    const uint8_t* row0 = in + r * in_stride;
    const uint8_t* row1 = row0 + in_stride;
    uint8_t* target0 = out + r * out_stride;
    uint8_t* target1 = target0 + out_stride;
    // Two output pixels per step: their sums are packed together and each
    // row gets one 8-byte store (6 bytes of pixels; the spare 2 are
    // rewritten by the next step, or not written at the row's end).
    int d = 0;
    for (; d + 1 < width; d += 2) {
      const __m256i first = UniformPixelAvx2<kPairs>(u, pairs, mask, second_mask, row0, row1,
                                                     pass.mirror ? width - 1 - d : d);
      const __m256i second = UniformPixelAvx2<kPairs>(u, pairs, mask, second_mask, row0, row1,
                                                      pass.mirror ? width - 2 - d : d + 1);
      __m256i words = _mm256_packs_epi32(first, second);
      // Per lane: R G B x R G B x (pixel d, then d + 1) -> R G B R G B.
      __m256i bytes = _mm256_shuffle_epi8(_mm256_packus_epi16(words, words),
                                          _mm256_broadcastsi128_si256(CompactPairMask()));
      const uint64_t pair0 =
          static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_castsi256_si128(bytes)));
      const uint64_t pair1 =
          static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_extracti128_si256(bytes, 1)));
      const bool last = d + 2 == width;
      std::memcpy(target0 + 3 * d, &pair0, last ? 6 : 8);
      std::memcpy(target1 + 3 * d, &pair1, last ? 6 : 8);
    }
    if (d < width) {  // an odd width's last pixel
      __m256i sum = UniformPixelAvx2<kPairs>(u, pairs, mask, second_mask, row0, row1,
                                             pass.mirror ? width - 1 - d : d);
      __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);
      StorePixel(target0 + 3 * d,
                 static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(bytes))), true);
      StorePixel(target1 + 3 * d,
                 static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1))),
                 true);
    }
  }
  if (r < rows) {
    HorizontalUniformSse41<kPairs>(pass, in + r * in_stride, in_stride, 1, out + r * out_stride,
                                   out_stride);
  }
}

}  // namespace

void HorizontalSse41(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                     uint8_t* out, size_t out_stride) {
  switch (pass.uniform->pairs) {
    case 0: return HorizontalVariableSse41(pass, in, in_stride, rows, out, out_stride);
    case 1: return HorizontalUniformSse41<1>(pass, in, in_stride, rows, out, out_stride);
    case 2: return HorizontalUniformSse41<2>(pass, in, in_stride, rows, out, out_stride);
    case 3: return HorizontalUniformSse41<3>(pass, in, in_stride, rows, out, out_stride);
    case 4: return HorizontalUniformSse41<4>(pass, in, in_stride, rows, out, out_stride);
    default: return HorizontalUniformSse41<0>(pass, in, in_stride, rows, out, out_stride);
  }
}

void HorizontalAvx2(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                    uint8_t* out, size_t out_stride) {
  switch (pass.uniform->pairs) {
    case 0: return HorizontalVariableAvx2(pass, in, in_stride, rows, out, out_stride);
    case 1: return HorizontalUniformAvx2<1>(pass, in, in_stride, rows, out, out_stride);
    case 2: return HorizontalUniformAvx2<2>(pass, in, in_stride, rows, out, out_stride);
    case 3: return HorizontalUniformAvx2<3>(pass, in, in_stride, rows, out, out_stride);
    case 4: return HorizontalUniformAvx2<4>(pass, in, in_stride, rows, out, out_stride);
    default: return HorizontalUniformAvx2<0>(pass, in, in_stride, rows, out, out_stride);
  }
}

GPUFEED_SSE41
void VerticalSse41(const Coefficients& coefficients, const TapPairs& pairs, const uint8_t* in,
                   size_t in_stride, int values, int out_rows, uint8_t* out, size_t out_stride) {
  const __m128i zero = _mm_setzero_si128();
  for (int row = 0; row < out_rows; ++row) {
    const uint8_t* base = in + static_cast<size_t>(coefficients.first[row]) * in_stride;
    const int count = coefficients.count[row];
    const int begin = pairs.offset[row], end = pairs.offset[row + 1];
    uint8_t* target = out + row * out_stride;
    int v = 0;
    for (; v + 16 <= values; v += 16) {
      __m128i low[4] = {zero, zero, zero, zero}, high[4] = {zero, zero, zero, zero};
      for (int j = begin; j < end; ++j) {
        const int tap = 2 * (j - begin);
        const uint8_t* row0 = base + tap * in_stride + v;
        // Past the last tap the pair's weight is 0: any row will do.
        const uint8_t* row1 = tap + 1 < count ? row0 + in_stride : row0;
        __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row0));
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row1));
        __m128i interleaved_low = _mm_unpacklo_epi8(a, b);
        __m128i interleaved_high = _mm_unpackhi_epi8(a, b);
        const __m128i taps[4] = {_mm_unpacklo_epi8(interleaved_low, zero),
                                 _mm_unpackhi_epi8(interleaved_low, zero),
                                 _mm_unpacklo_epi8(interleaved_high, zero),
                                 _mm_unpackhi_epi8(interleaved_high, zero)};
        const __m128i weight_low = _mm_set1_epi32(static_cast<int>(pairs.low[j]));
        const __m128i weight_high = _mm_set1_epi32(static_cast<int>(pairs.high[j]));
        for (int q = 0; q < 4; ++q) {
          low[q] = _mm_add_epi32(low[q], _mm_madd_epi16(taps[q], weight_low));
          high[q] = _mm_add_epi32(high[q], _mm_madd_epi16(taps[q], weight_high));
        }
      }
      __m128i words01 = _mm_packs_epi32(CombineSse41(low[0], high[0]), CombineSse41(low[1], high[1]));
      __m128i words23 = _mm_packs_epi32(CombineSse41(low[2], high[2]), CombineSse41(low[3], high[3]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(target + v), _mm_packus_epi16(words01, words23));
    }
    if (v < values) VerticalScalarValues(coefficients, in, in_stride, v, values, row, target);
  }
}

GPUFEED_AVX2
void VerticalAvx2(const Coefficients& coefficients, const TapPairs& pairs, const uint8_t* in,
                  size_t in_stride, int values, int out_rows, uint8_t* out, size_t out_stride) {
  const __m256i zero = _mm256_setzero_si256();
  for (int row = 0; row < out_rows; ++row) {
    const uint8_t* base = in + static_cast<size_t>(coefficients.first[row]) * in_stride;
    const int count = coefficients.count[row];
    const int begin = pairs.offset[row], end = pairs.offset[row + 1];
    uint8_t* target = out + row * out_stride;
    int v = 0;
    // 32 values per step. The unpacks work within 128-bit lanes and the
    // packs undo them lane by lane, so the bytes come out in order.
    for (; v + 32 <= values; v += 32) {
      __m256i low[4] = {zero, zero, zero, zero}, high[4] = {zero, zero, zero, zero};
      for (int j = begin; j < end; ++j) {
        const int tap = 2 * (j - begin);
        const uint8_t* row0 = base + tap * in_stride + v;
        const uint8_t* row1 = tap + 1 < count ? row0 + in_stride : row0;
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0));
        __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row1));
        __m256i interleaved_low = _mm256_unpacklo_epi8(a, b);
        __m256i interleaved_high = _mm256_unpackhi_epi8(a, b);
        const __m256i taps[4] = {_mm256_unpacklo_epi8(interleaved_low, zero),
                                 _mm256_unpackhi_epi8(interleaved_low, zero),
                                 _mm256_unpacklo_epi8(interleaved_high, zero),
                                 _mm256_unpackhi_epi8(interleaved_high, zero)};
        const __m256i weight_low = _mm256_set1_epi32(static_cast<int>(pairs.low[j]));
        const __m256i weight_high = _mm256_set1_epi32(static_cast<int>(pairs.high[j]));
        for (int q = 0; q < 4; ++q) {
          low[q] = _mm256_add_epi32(low[q], _mm256_madd_epi16(taps[q], weight_low));
          high[q] = _mm256_add_epi32(high[q], _mm256_madd_epi16(taps[q], weight_high));
        }
      }
      __m256i words01 =
          _mm256_packs_epi32(CombineAvx2(low[0], high[0]), CombineAvx2(low[1], high[1]));
      __m256i words23 =
          _mm256_packs_epi32(CombineAvx2(low[2], high[2]), CombineAvx2(low[3], high[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(target + v),
                          _mm256_packus_epi16(words01, words23));
    }
    if (v < values) VerticalScalarValues(coefficients, in, in_stride, v, values, row, target);
  }
}

}  // namespace resample_internal
}  // namespace gpufeed

#endif  // GPUFEED_RESAMPLE_X86
