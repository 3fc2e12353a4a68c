#include "decode/ycc_rgb.h"

#include "decode/resample.h"

#ifdef GPUFEED_RESAMPLE_X86
#include <immintrin.h>
#endif

namespace gpufeed {

namespace ycc_rgb_internal {

namespace {
inline uint8_t Clamp(int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }
}  // namespace

void YccToRgbScalar(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr, int width,
                    uint8_t* rgb) {
  for (int x = 0; x < width; ++x) {
    const int y = luma[x], u = cb[x] - 128, v = cr[x] - 128;
    rgb[3 * x] = Clamp(y + ((91881 * v + 32768) >> 16));
    rgb[3 * x + 1] = Clamp(y + ((-22554 * u - 46802 * v + 32768) >> 16));
    rgb[3 * x + 2] = Clamp(y + ((116130 * u + 32768) >> 16));
  }
}

void GrayToRgbScalar(const uint8_t* luma, int width, uint8_t* rgb) {
  for (int x = 0; x < width; ++x) rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = luma[x];
}

}  // namespace ycc_rgb_internal

#ifdef GPUFEED_RESAMPLE_X86
namespace {

#define GPUFEED_SSE41 __attribute__((target("sse4.1")))

// pshufb masks that interleave three 16-byte planes into 48 bytes: for
// output vector j and plane p, lane l takes that plane's byte (16j + l) / 3
// when (16j + l) % 3 == p, else zero (0x80).
struct InterleaveMasks {
  alignas(16) uint8_t mask[3][3][16];  // [vector j][plane p]
};
constexpr InterleaveMasks MakeInterleaveMasks() {
  InterleaveMasks masks{};
  for (int j = 0; j < 3; ++j) {
    for (int p = 0; p < 3; ++p) {
      for (int l = 0; l < 16; ++l) {
        const int o = 16 * j + l;
        masks.mask[j][p][l] = static_cast<uint8_t>(o % 3 == p ? o / 3 : 0x80);
      }
    }
  }
  return masks;
}
constexpr InterleaveMasks kInterleave = MakeInterleaveMasks();

GPUFEED_SSE41 inline void StoreInterleaved(__m128i r, __m128i g, __m128i b, uint8_t* out) {
  for (int j = 0; j < 3; ++j) {
    const auto* m = reinterpret_cast<const __m128i*>(kInterleave.mask[j]);
    const __m128i bytes = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(r, _mm_load_si128(m)),
                                                    _mm_shuffle_epi8(g, _mm_load_si128(m + 1))),
                                       _mm_shuffle_epi8(b, _mm_load_si128(m + 2)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * j), bytes);
  }
}

// ((pairs . weights) + add) >> 16 for the eight int16 pairs of (a, b),
// packed to int16: pmaddwd over (a[i], b[i]) with (wa, wb).
GPUFEED_SSE41 inline __m128i Term(__m128i a, __m128i b, __m128i weights, __m128i add) {
  const __m128i low =
      _mm_srai_epi32(_mm_add_epi32(_mm_madd_epi16(_mm_unpacklo_epi16(a, b), weights), add), 16);
  const __m128i high =
      _mm_srai_epi32(_mm_add_epi32(_mm_madd_epi16(_mm_unpackhi_epi16(a, b), weights), add), 16);
  return _mm_packs_epi32(low, high);
}

// Eight pixels' R, G, B as int16 (unclamped) from int16 y, u = Cb - 128,
// v = Cr - 128. Each constant is split so that the floor of the shift
// distributes (an exact identity for integers):
//   91881 v + 32768            = 2^16 v + (26345 v + 2 * 16384)
//   -22554 u - 46802 v + 32768 = -2^16 v + (-22554 u + 18734 v) + 32768
//   116130 u + 32768           = 2^17 u + (-14942 u + 2 * 16384)
GPUFEED_SSE41 inline void Convert8(__m128i y, __m128i u, __m128i v, __m128i* r, __m128i* g,
                                   __m128i* b) {
  const __m128i two = _mm_set1_epi16(2), zero = _mm_setzero_si128();
  const __m128i half = _mm_set1_epi32(32768);
  *r =
      _mm_add_epi16(_mm_add_epi16(y, v), Term(v, two, _mm_set1_epi32((16384 << 16) | 26345), zero));
  *g = _mm_add_epi16(_mm_sub_epi16(y, v),
                     Term(u, v, _mm_set1_epi32((18734 << 16) | (-22554 & 0xFFFF)), half));
  *b = _mm_add_epi16(_mm_add_epi16(y, _mm_add_epi16(u, u)),
                     Term(u, two, _mm_set1_epi32((16384 << 16) | (-14942 & 0xFFFF)), zero));
}

GPUFEED_SSE41 int YccToRgbSse41(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr,
                                int width, uint8_t* rgb) {
  const __m128i zero = _mm_setzero_si128(), bias = _mm_set1_epi16(128);
  int x = 0;
  for (; x + 16 <= width; x += 16) {
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(luma + x));
    const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cb + x));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cr + x));
    __m128i r[2], g[2], b[2];
    Convert8(_mm_unpacklo_epi8(y, zero), _mm_sub_epi16(_mm_unpacklo_epi8(u, zero), bias),
             _mm_sub_epi16(_mm_unpacklo_epi8(v, zero), bias), &r[0], &g[0], &b[0]);
    Convert8(_mm_unpackhi_epi8(y, zero), _mm_sub_epi16(_mm_unpackhi_epi8(u, zero), bias),
             _mm_sub_epi16(_mm_unpackhi_epi8(v, zero), bias), &r[1], &g[1], &b[1]);
    // packus saturates to 0..255: the scalar row's Clamp.
    StoreInterleaved(_mm_packus_epi16(r[0], r[1]), _mm_packus_epi16(g[0], g[1]),
                     _mm_packus_epi16(b[0], b[1]), rgb + 3 * x);
  }
  return x;
}

GPUFEED_SSE41 int GrayToRgbSse41(const uint8_t* luma, int width, uint8_t* rgb) {
  int x = 0;
  for (; x + 16 <= width; x += 16) {
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(luma + x));
    StoreInterleaved(y, y, y, rgb + 3 * x);
  }
  return x;
}

}  // namespace
#endif  // GPUFEED_RESAMPLE_X86

void YccToRgbRow(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr, int width,
                 uint8_t* rgb) {
  int done = 0;
#ifdef GPUFEED_RESAMPLE_X86
  if (ActiveResamplePath() != ResamplePath::kScalar) {
    done = YccToRgbSse41(luma, cb, cr, width, rgb);
  }
#endif
  ycc_rgb_internal::YccToRgbScalar(luma + done, cb + done, cr + done, width - done, rgb + 3 * done);
}

void GrayToRgbRow(const uint8_t* luma, int width, uint8_t* rgb) {
  int done = 0;
#ifdef GPUFEED_RESAMPLE_X86
  if (ActiveResamplePath() != ResamplePath::kScalar) done = GrayToRgbSse41(luma, width, rgb);
#endif
  ycc_rgb_internal::GrayToRgbScalar(luma + done, width - done, rgb + 3 * done);
}

}  // namespace gpufeed
