#include "decode/output.h"

#include <cstring>
#include <vector>

#include "decode/resample.h"
#include "gpufeed/options.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GPUFEED_OUTPUT_X86 1
#endif

namespace gpufeed {

namespace {

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffff;
  if (((bits >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (remainder > midpoint || (remainder == midpoint && (half & 1))) half += 1;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t remainder = mantissa & 0x1fff;
  if (remainder > 0x1000 || (remainder == 0x1000 && (half & 1))) half += 1;  // may carry into exponent: correct
  return static_cast<uint16_t>(half);
}

uint16_t FloatToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Value v of channel c, as torchvision computes it in float32:
// x.float().div(255).sub(mean).div(std).
float Normalized(const ImageTransformOptions& options, int c, int v) {
  return (static_cast<float>(v) / 255.0f - options.mean[c]) / options.std[c];
}

// The thread's table for the last (mean, std, dtype) it wrote: rebuilt only
// when they change, so the common case costs nothing per image.
struct CachedTable {
  float mean[3] = {0, 0, 0};
  float std[3] = {0, 0, 0};
  OutputDtype dtype = OutputDtype::kUint8;
  bool valid = false;
  std::vector<uint8_t> bytes;
};

const void* TableFor(const ImageTransformOptions& options) {
  thread_local CachedTable cached;
  bool same = cached.valid && cached.dtype == options.dtype;
  for (int c = 0; c < 3 && same; ++c) {
    same = std::memcmp(&cached.mean[c], &options.mean[c], sizeof(float)) == 0 &&
           std::memcmp(&cached.std[c], &options.std[c], sizeof(float)) == 0;
  }
  if (!same) {
    cached.bytes.resize(768 * TensorDtypeSize(options.dtype));
    NormalizeTable(options, options.dtype, cached.bytes.data());
    for (int c = 0; c < 3; ++c) {
      cached.mean[c] = options.mean[c];
      cached.std[c] = options.std[c];
    }
    cached.dtype = options.dtype;
    cached.valid = true;
  }
  return cached.bytes.data();
}

void DeinterleaveScalar(const uint8_t* row, int pixels, uint8_t* r, uint8_t* g, uint8_t* b) {
  for (int x = 0; x < pixels; ++x) {
    r[x] = row[3 * x];
    g[x] = row[3 * x + 1];
    b[x] = row[3 * x + 2];
  }
}

#ifdef GPUFEED_OUTPUT_X86
__attribute__((target("sse4.1"))) inline __m128i Gather(__m128i a, __m128i m, __m128i z,
                                                        __m128i s0, __m128i s1, __m128i s2) {
  return _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, s0), _mm_shuffle_epi8(m, s1)),
                      _mm_shuffle_epi8(z, s2));
}

// RGB RGB ... (48 bytes) -> 16 R, 16 G, 16 B: each plane gathers from the
// three loads with one pshufb each (-1 lanes give 0) and ORs them.
__attribute__((target("sse4.1"))) void DeinterleaveSse41(const uint8_t* row, int pixels,
                                                         uint8_t* r, uint8_t* g, uint8_t* b) {
  const __m128i r0 = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i r1 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
  const __m128i r2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
  const __m128i g0 = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i g1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
  const __m128i g2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
  const __m128i b0 = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i b1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
  const __m128i b2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
  int x = 0;
  for (; x + 16 <= pixels; x += 16) {
    const uint8_t* in = row + 3 * x;
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    __m128i m = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 16));
    __m128i z = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 32));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r + x), Gather(a, m, z, r0, r1, r2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + x), Gather(a, m, z, g0, g1, g2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + x), Gather(a, m, z, b0, b1, b2));
  }
  DeinterleaveScalar(row + 3 * x, pixels - x, r + x, g + x, b + x);
}
#endif

using DeinterleaveFunction = void (*)(const uint8_t* row, int pixels, uint8_t* r, uint8_t* g,
                                      uint8_t* b);

// The SIMD de-interleave when the resampler's SIMD paths are in use (the
// same switch, so tests forcing a path exercise both).
DeinterleaveFunction ChooseDeinterleave() {
#ifdef GPUFEED_OUTPUT_X86
  if (ActiveResamplePath() != ResamplePath::kScalar) return DeinterleaveSse41;
#endif
  return DeinterleaveScalar;
}

template <typename T>
void Lookup(const uint8_t* __restrict__ bytes, int count, const T* __restrict__ table,
            T* __restrict__ out) {
  for (int x = 0; x < count; ++x) out[x] = table[bytes[x]];
}

// Planar (NCHW): each row de-interleaved into three byte planes, then one
// contiguous lookup loop per plane (never a strided loop over the
// interleaved row). Interleaved (NHWC): three lookups per pixel, in output
// order.
template <typename T>
void WriteTable(const Image& image, int size, bool planar, const T* __restrict__ table,
                T* __restrict__ out) {
  const size_t plane = static_cast<size_t>(size) * size;
  if (planar) {
    const DeinterleaveFunction deinterleave = ChooseDeinterleave();
    thread_local std::vector<uint8_t> planes;
    planes.resize(3 * static_cast<size_t>(size));
    uint8_t* bytes = planes.data();
    for (int y = 0; y < size; ++y) {
      deinterleave(image.row(y), size, bytes, bytes + size, bytes + 2 * size);
      for (int c = 0; c < 3; ++c) {
        Lookup(bytes + c * size, size, table + c * 256,
               out + c * plane + static_cast<size_t>(y) * size);
      }
    }
    return;
  }
  for (int y = 0; y < size; ++y) {
    const uint8_t* row = image.row(y);
    T* target = out + static_cast<size_t>(y) * size * 3;
    for (int x = 0; x < size; ++x) {
      target[3 * x] = table[row[3 * x]];
      target[3 * x + 1] = table[256 + row[3 * x + 1]];
      target[3 * x + 2] = table[512 + row[3 * x + 2]];
    }
  }
}

}  // namespace

void WriteOutput(const Image& image, const ImageTransformOptions& options, void* destination) {
  const int size = options.size;
  const size_t plane = static_cast<size_t>(size) * size;
  const bool planar = options.layout == OutputLayout::kNCHW;
  if (options.dtype == OutputDtype::kUint8) {
    uint8_t* out = static_cast<uint8_t*>(destination);
    if (!planar) {  // HWC uint8 is the resampled image itself
      std::memcpy(out, image.pixels.data(), plane * 3);
      return;
    }
    const DeinterleaveFunction deinterleave = ChooseDeinterleave();
    for (int y = 0; y < size; ++y) {
      size_t at = static_cast<size_t>(y) * size;
      deinterleave(image.row(y), size, out + at, out + plane + at, out + 2 * plane + at);
    }
    return;
  }
  // Every output value is one of 256 per channel: a table computed exactly
  // as torchvision computes each value, so the results are bit-identical
  // and cost one load.
  const void* table = TableFor(options);
  if (options.dtype == OutputDtype::kFloat32) {
    WriteTable(image, size, planar, static_cast<const float*>(table),
               static_cast<float*>(destination));
  } else {  // float16, bfloat16: the table holds their bits
    WriteTable(image, size, planar, static_cast<const uint16_t*>(table),
               static_cast<uint16_t*>(destination));
  }
}

void NormalizeTable(const ImageTransformOptions& options, OutputDtype dtype, void* table) {
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float value = Normalized(options, c, v);
      size_t index = static_cast<size_t>(c) * 256 + v;
      switch (dtype) {
        case OutputDtype::kFloat16: static_cast<uint16_t*>(table)[index] = FloatToHalf(value); break;
        case OutputDtype::kBfloat16:
          static_cast<uint16_t*>(table)[index] = FloatToBfloat16(value);
          break;
        case OutputDtype::kFloat32: static_cast<float*>(table)[index] = value; break;
        case OutputDtype::kUint8: static_cast<uint8_t*>(table)[index] = static_cast<uint8_t>(v); break;
        case OutputDtype::kInt32:
        case OutputDtype::kInt64:
        case OutputDtype::kInt8: break;  // not image outputs: refused by the callers
      }
    }
  }
}

}  // namespace gpufeed
