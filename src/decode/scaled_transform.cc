#include "decode/scaled_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>  // SSE2: part of x86-64
#define GPUFEED_SCALED_SSE2 1
#endif

namespace gpufeed {
namespace scaled_transform {

namespace {

// Inverse-transform basis at 1, 2 and 4 points: basis[i][x][u] =
// C(u)/2 cos((2x+1) u pi / 2n) for n = 1 << i, C(0) = 1/sqrt(2). Applied to
// an 8x8 block's n x n low-frequency corner it gives the block's pixels
// averaged n per 8 (the 1/4 of the 2-D transform splits into 1/2 per axis).
struct Basis {
  float m[3][4][4] = {};
  float t[3][4][4] = {};  // transposed: t[i][u][x] = m[i][x][u]
  Basis() {
    const double pi = std::acos(-1.0);
    for (int i = 0; i < 3; ++i) {
      const int n = 1 << i;
      for (int x = 0; x < n; ++x) {
        for (int u = 0; u < n; ++u) {
          const double c = u == 0 ? std::sqrt(0.5) : 1.0;
          m[i][x][u] = static_cast<float>(0.5 * c * std::cos((2 * x + 1) * u * pi / (2 * n)));
          t[i][u][x] = m[i][x][u];
        }
      }
    }
  }
};
const Basis& TheBasis() {
  static const Basis basis;
  return basis;
}

constexpr int Log2(int n) { return n == 1 ? 0 : n == 2 ? 1 : 2; }

// A transform's sum (already + 128.5) as a pixel: clamped before the
// conversion, which is undefined past int's range (16-bit quantization
// steps times large coefficients reach it).
inline uint8_t ToPixel(float sum) { return static_cast<uint8_t>(std::min(std::max(sum, 0.0f), 255.0f)); }

// Dequantizes and transforms the W x H corner of `coef` (quant: the
// corner's steps, [v * W + u]), writing (W * RX) x (H * RY) pixels at dst.
#ifdef GPUFEED_SCALED_SSE2
// TransformBlock for a corner 4 wide, a row per SSE register: the same
// products summed in the same order as the scalar loops, so the same pixels
// (as built: baseline x86-64 has no FMA to contract either into; a build
// for a CPU with FMA may contract the two differently, by a level at
// most). REQUIRES: the block has AC coefficients.
template <int H, int RX, int RY>
void TransformRows4(const float* quant, const int16_t* coef, uint8_t* dst, size_t stride) {
  const Basis& basis = TheBasis();
  const auto& t = basis.t[2];
  const auto& mh = basis.m[Log2(H)];
  __m128 rows[H];  // the horizontal pass: rows[v][x] = sum over u of m[x][u] * corner[v][u]
  for (int v = 0; v < H; ++v) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(coef + v * 8));
    const __m128i wide = _mm_srai_epi32(_mm_unpacklo_epi16(raw, raw), 16);
    const __m128 corner = _mm_mul_ps(_mm_cvtepi32_ps(wide), _mm_loadu_ps(quant + v * 4));
    __m128 sum = _mm_mul_ps(_mm_shuffle_ps(corner, corner, 0x00), _mm_loadu_ps(t[0]));
    sum = _mm_add_ps(sum, _mm_mul_ps(_mm_shuffle_ps(corner, corner, 0x55), _mm_loadu_ps(t[1])));
    sum = _mm_add_ps(sum, _mm_mul_ps(_mm_shuffle_ps(corner, corner, 0xAA), _mm_loadu_ps(t[2])));
    rows[v] = _mm_add_ps(sum, _mm_mul_ps(_mm_shuffle_ps(corner, corner, 0xFF), _mm_loadu_ps(t[3])));
  }
  for (int y = 0; y < H; ++y) {
    __m128 sum = _mm_set1_ps(128.5f);
    for (int v = 0; v < H; ++v) sum = _mm_add_ps(sum, _mm_mul_ps(_mm_set1_ps(mh[y][v]), rows[v]));
    sum = _mm_min_ps(_mm_max_ps(sum, _mm_setzero_ps()), _mm_set1_ps(255.0f));
    const __m128i words = _mm_packs_epi32(_mm_cvttps_epi32(sum), _mm_setzero_si128());
    __m128i bytes = _mm_packus_epi16(words, words);
    if (RX == 2) bytes = _mm_unpacklo_epi8(bytes, bytes);
    for (int r = 0; r < RY; ++r) {
      uint8_t* row = dst + (y * RY + r) * stride;
      if (RX == 2) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(row), bytes);
      } else {
        const int four = _mm_cvtsi128_si32(bytes);
        std::memcpy(row, &four, 4);
      }
    }
  }
}

// TransformBlock for a 2 x 2 corner, flat or not, the four pixels in one
// register: the same sums in the same order as the scalar branch below
// (adding a negated term is the subtraction), so the same pixels; a flat
// block's a * 0.125 equals its mean a / 8 exactly.
template <int RX, int RY>
void TransformCorner2x2(const float* quant, const int16_t* coef, uint8_t* dst, size_t stride) {
  int32_t top, bottom;
  std::memcpy(&top, coef, 4);
  std::memcpy(&bottom, coef + 8, 4);
  const __m128i raw = _mm_unpacklo_epi32(_mm_cvtsi32_si128(top), _mm_cvtsi32_si128(bottom));
  const __m128i wide = _mm_srai_epi32(_mm_unpacklo_epi16(raw, raw), 16);
  const __m128 corner = _mm_mul_ps(_mm_cvtepi32_ps(wide), _mm_loadu_ps(quant));  // a bx by c
  // Lanes (y, x) = (0,0) (0,1) (1,0) (1,1): ((a +- bx) +- by) +- c.
  __m128 sum = _mm_shuffle_ps(corner, corner, 0x00);
  sum = _mm_add_ps(sum, _mm_xor_ps(_mm_shuffle_ps(corner, corner, 0x55),
                                   _mm_setr_ps(0.0f, -0.0f, 0.0f, -0.0f)));
  sum = _mm_add_ps(sum, _mm_xor_ps(_mm_shuffle_ps(corner, corner, 0xAA),
                                   _mm_setr_ps(0.0f, 0.0f, -0.0f, -0.0f)));
  sum = _mm_add_ps(sum, _mm_xor_ps(_mm_shuffle_ps(corner, corner, 0xFF),
                                   _mm_setr_ps(0.0f, -0.0f, -0.0f, 0.0f)));
  sum = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(0.125f), sum), _mm_set1_ps(128.5f));
  sum = _mm_min_ps(_mm_max_ps(sum, _mm_setzero_ps()), _mm_set1_ps(255.0f));
  const __m128i words = _mm_packs_epi32(_mm_cvttps_epi32(sum), _mm_setzero_si128());
  __m128i bytes = _mm_packus_epi16(words, words);  // p00 p01 p10 p11
  if (RX == 2) bytes = _mm_unpacklo_epi8(bytes, bytes);
  const uint64_t pixels = static_cast<uint64_t>(_mm_cvtsi128_si64(bytes));
  constexpr int kRowBytes = 2 * RX;
  for (int y = 0; y < 2; ++y) {
    const uint64_t row = pixels >> (8 * kRowBytes * y);  // little-endian: its bytes in order
    for (int r = 0; r < RY; ++r) std::memcpy(dst + (y * RY + r) * stride, &row, kRowBytes);
  }
}
#endif  // GPUFEED_SCALED_SSE2

// kSimd: the SSE2 versions where they exist (else the portable loops,
// which they equal byte for byte).
template <int W, int H, int RX, int RY, bool kSimd>
void TransformBlock(const float* quant, const int16_t* coef, uint8_t* dst, size_t stride) {
  int ac = 0;
  for (int v = 0; v < H; ++v) {
    for (int u = 0; u < W; ++u) ac |= (u | v) != 0 ? coef[v * 8 + u] : 0;
  }
  uint8_t pixels[H][W];
#ifdef GPUFEED_SCALED_SSE2
  if (kSimd && W == 2 && H == 2) {
    TransformCorner2x2<RX, RY>(quant, coef, dst, stride);
    return;
  }
  if (kSimd && W == 4 && ac != 0) {  // it dequantizes the corner itself
    TransformRows4<H, RX, RY>(quant, coef, dst, stride);
    return;
  }
#endif
  const Basis& basis = TheBasis();
  const auto& mw = basis.m[Log2(W)];
  const auto& mh = basis.m[Log2(H)];
  float corner[H][W];
  for (int v = 0; v < H; ++v) {
    for (int u = 0; u < W; ++u) corner[v][u] = coef[v * 8 + u] * quant[v * W + u];
  }
  if (W == 2 && H == 2 && ac != 0) {
    // The 2-point basis is +-sqrt(1/2)/2 on every term: sums and differences.
    const float s = 0.125f;
    const float a = corner[0][0], bx = corner[0][W - 1], by = corner[H - 1][0], c = corner[H - 1][W - 1];
    pixels[0][0] = ToPixel(s * (a + bx + by + c) + 128.5f);
    pixels[0][W - 1] = ToPixel(s * (a - bx + by - c) + 128.5f);
    pixels[H - 1][0] = ToPixel(s * (a + bx - by - c) + 128.5f);
    pixels[H - 1][W - 1] = ToPixel(s * (a - bx - by + c) + 128.5f);
  } else if (ac == 0) {  // a flat block: its mean
    std::memset(pixels, ToPixel(corner[0][0] / 8.0f + 128.5f), sizeof(pixels));
  } else {
    float rows[H][W];  // the horizontal pass
    for (int v = 0; v < H; ++v) {
      for (int x = 0; x < W; ++x) {
        float sum = 0;
        for (int u = 0; u < W; ++u) sum += mw[x][u] * corner[v][u];
        rows[v][x] = sum;
      }
    }
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        float sum = 128.5f;  // + 0.5: rounds (a negative sum clamps to 0 anyway)
        for (int v = 0; v < H; ++v) sum += mh[y][v] * rows[v][x];
        pixels[y][x] = ToPixel(sum);
      }
    }
  }
  for (int y = 0; y < H * RY; ++y) {
    uint8_t* row = dst + y * stride;
    for (int x = 0; x < W * RX; ++x) row[x] = pixels[y / RY][x / RX];
  }
}

template <int W, int H, bool kSimd>
TransformFunction PickRepeat(int repeat_x, int repeat_y) {
  if (repeat_x == 1) {
    return repeat_y == 1 ? TransformBlock<W, H, 1, 1, kSimd> : TransformBlock<W, H, 1, 2, kSimd>;
  }
  return repeat_y == 1 ? TransformBlock<W, H, 2, 1, kSimd> : TransformBlock<W, H, 2, 2, kSimd>;
}

template <int W, bool kSimd>
TransformFunction PickHeight(int h, int repeat_x, int repeat_y) {
  if (h == 1) return PickRepeat<W, 1, kSimd>(repeat_x, repeat_y);
  return h == 2 ? PickRepeat<W, 2, kSimd>(repeat_x, repeat_y)
                : PickRepeat<W, 4, kSimd>(repeat_x, repeat_y);
}

template <bool kSimd>
TransformFunction Pick(int w, int h, int repeat_x, int repeat_y) {
  if (w == 1) return PickHeight<1, kSimd>(h, repeat_x, repeat_y);
  return w == 2 ? PickHeight<2, kSimd>(h, repeat_x, repeat_y)
                : PickHeight<4, kSimd>(h, repeat_x, repeat_y);
}

}  // namespace

TransformFunction PickTransform(int w, int h, int repeat_x, int repeat_y) {
  return Pick<true>(w, h, repeat_x, repeat_y);
}

TransformFunction PickPortableTransform(int w, int h, int repeat_x, int repeat_y) {
  return Pick<false>(w, h, repeat_x, repeat_y);
}

}  // namespace scaled_transform
}  // namespace gpufeed
