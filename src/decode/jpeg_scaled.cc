#include <cstdio>  // jpeglib.h needs FILE declared first

#include "decode/jpeg_scaled.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "decode/jpeg_decoder.h"
#include "decode/jpeg_entropy.h"
#include "decode/jpeg_progressive.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>  // SSE2: part of x86-64
#define GPUFEED_SCALED_SSE2 1
#endif

namespace gpufeed {

namespace {

using jpeg_entropy::BlockSink;
using jpeg_entropy::HuffmanTable;
using jpeg_entropy::kBlockStride;
using jpeg_entropy::kMaxComponents;
using jpeg_entropy::Scan;

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

inline uint8_t Clamp(int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }
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

template <int W, int H, int RX, int RY>
void TransformBlock(const float* quant, const int16_t* coef, uint8_t* dst, size_t stride) {
  int ac = 0;
  for (int v = 0; v < H; ++v) {
    for (int u = 0; u < W; ++u) ac |= (u | v) != 0 ? coef[v * 8 + u] : 0;
  }
  uint8_t pixels[H][W];
#ifdef GPUFEED_SCALED_SSE2
  if (W == 2 && H == 2) {
    TransformCorner2x2<RX, RY>(quant, coef, dst, stride);
    return;
  }
  if (W == 4 && ac != 0) {  // it dequantizes the corner itself
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

using TransformFunction = void (*)(const float*, const int16_t*, uint8_t*, size_t);

template <int W, int H>
TransformFunction PickRepeat(int repeat_x, int repeat_y) {
  if (repeat_x == 1) return repeat_y == 1 ? TransformBlock<W, H, 1, 1> : TransformBlock<W, H, 1, 2>;
  return repeat_y == 1 ? TransformBlock<W, H, 2, 1> : TransformBlock<W, H, 2, 2>;
}

template <int W>
TransformFunction PickHeight(int h, int repeat_x, int repeat_y) {
  if (h == 1) return PickRepeat<W, 1>(repeat_x, repeat_y);
  return h == 2 ? PickRepeat<W, 2>(repeat_x, repeat_y) : PickRepeat<W, 4>(repeat_x, repeat_y);
}

// The transform for a w x h corner (1, 2 or 4 each) and replication 1 or 2.
TransformFunction PickTransform(int w, int h, int repeat_x, int repeat_y) {
  if (w == 1) return PickHeight<1>(h, repeat_x, repeat_y);
  return w == 2 ? PickHeight<2>(h, repeat_x, repeat_y) : PickHeight<4>(h, repeat_x, repeat_y);
}

// How one component's blocks become pixels of the scaled image.
struct Plan {
  int idct_w = 1, idct_h = 1;        // transform size (1, 2 or 4)
  int repeat_x = 1, repeat_y = 1;    // pixel replication after it (1 or 2)
  int plane = 0;                     // 0 = Y (or gray), 1 = Cb, 2 = Cr
  int h = 1, v = 1;                  // sampling factors
  float quant[16];                   // the corner's steps, [v * idct_w + u]
  TransformFunction transform = nullptr;
};

// JFIF's YCbCr to RGB in libjpeg's 16-bit fixed point (jdcolor.c:
// FIX(1.402), FIX(0.34414), FIX(0.71414), FIX(1.772)): computed into planes
// 64 pixels at a time (a loop that vectorizes), then interleaved.
void YccToRgb(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr, int width, uint8_t* rgb) {
  constexpr int kChunk = 64;
  uint8_t r[kChunk], g[kChunk], b[kChunk];
  for (int start = 0; start < width; start += kChunk) {
    const int n = std::min(kChunk, width - start);
    for (int x = 0; x < n; ++x) {
      const int y = luma[start + x], u = cb[start + x] - 128, v = cr[start + x] - 128;
      r[x] = Clamp(y + ((91881 * v + 32768) >> 16));
      g[x] = Clamp(y + ((-22554 * u - 46802 * v + 32768) >> 16));
      b[x] = Clamp(y + ((116130 * u + 32768) >> 16));
    }
    uint8_t* out = rgb + 3 * start;
    for (int x = 0; x < n; ++x) {
      out[3 * x] = r[x];
      out[3 * x + 1] = g[x];
      out[3 * x + 2] = b[x];
    }
  }
}

// Turns the MCUs of the wanted rows and columns into RGB rows of *out.
class ScaledSink : public BlockSink {
 public:
  ScaledSink(const Plan* plans, int components, int mcu_w, int mcu_h, int first_col, int end_col,
             int y0, int y1, Image* out)
      : plans_(plans), components_(components), mcu_w_(mcu_w), mcu_h_(mcu_h),
        first_col_(first_col), y0_(y0), y1_(y1), out_(out),
        stride_(static_cast<size_t>(end_col - first_col) * mcu_w) {
    strip_.assign(stride_ * mcu_h * components, 128);
  }

  // REQUIRES: first_col <= mcu_x < end_col.
  void Mcu(int mcu_x, int, const int16_t* const* blocks) override {
    for (int c = 0; c < components_; ++c) {
      const Plan& plan = plans_[c];
      const int block_w = plan.idct_w * plan.repeat_x, block_h = plan.idct_h * plan.repeat_y;
      uint8_t* plane = strip_.data() + stride_ * mcu_h_ * plan.plane +
                       static_cast<size_t>(mcu_x - first_col_) * mcu_w_;
      for (int by = 0; by < plan.v; ++by) {
        for (int bx = 0; bx < plan.h; ++bx) {
          plan.transform(plan.quant, blocks[c] + kBlockStride * (by * plan.h + bx),
                         plane + by * block_h * stride_ + bx * block_w, stride_);
        }
      }
    }
  }

  // Converts the strip's rows that lie in [y0, y1) to RGB rows of *out.
  void RowDone(int mcu_y) override {
    const int top = mcu_y * mcu_h_;
    for (int r = std::max(top, y0_); r < std::min(top + mcu_h_, y1_); ++r) {
      const uint8_t* luma = strip_.data() + (r - top) * stride_;
      uint8_t* rgb = out_->row(r - y0_);
      if (components_ == 1) {
        for (int x = 0; x < out_->width; ++x) rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = luma[x];
        continue;
      }
      const uint8_t* cb = luma + stride_ * mcu_h_;
      const uint8_t* cr = cb + stride_ * mcu_h_;
      YccToRgb(luma, cb, cr, out_->width, rgb);
    }
  }

  const Plan* plans_;
  int components_, mcu_w_, mcu_h_, first_col_, y0_, y1_;
  Image* out_;
  size_t stride_;
  std::vector<uint8_t> strip_;  // per plane, mcu_h rows of the wanted columns
};

// Whether this path decodes the frame's colours: YCbCr (3 components) or
// grayscale, 8-bit Huffman-coded.
bool DecodableFrame(const jpeg_decompress_struct& info, bool* gray) {
  if (info.arith_code || info.data_precision != 8) return false;
  *gray = info.num_components == 1 && info.jpeg_color_space == JCS_GRAYSCALE;
  return *gray || (info.num_components == 3 && info.jpeg_color_space == JCS_YCbCr);
}

// How `comp` becomes pixels at 1/denominator, or false for sampling this
// path does not handle (factors other than 1 and 2 of the largest).
bool PlanComponent(const jpeg_decompress_struct& info, const jpeg_component_info& comp,
                   int denominator, bool gray, Plan* plan) {
  const int hmax = info.max_h_samp_factor, vmax = info.max_v_samp_factor;
  const int block = 8 / denominator;  // scaled pixels per block at full sampling
  plan->h = comp.h_samp_factor;
  plan->v = comp.v_samp_factor;
  if (plan->h < 1 || plan->v < 1 || hmax % plan->h != 0 || vmax % plan->v != 0) return false;
  const int fx = hmax / plan->h, fy = vmax / plan->v;
  if (fx > 2 || fy > 2) return false;
  // Chroma is enlarged by the transform while that stays within 4 points.
  plan->idct_w = block * fx <= 4 ? block * fx : block;
  plan->idct_h = block * fy <= 4 ? block * fy : block;
  plan->repeat_x = block * fx / plan->idct_w;
  plan->repeat_y = block * fy / plan->idct_h;
  plan->transform = PickTransform(plan->idct_w, plan->idct_h, plan->repeat_x, plan->repeat_y);
  plan->plane = gray ? 0 : comp.component_index;
  if (plan->plane < 0 || plan->plane >= kMaxComponents) return false;
  // Replicating luma (a file whose luma is sampled less than a chroma
  // component, decoded at 1/2) would blur what the eye sees most: libjpeg's
  // larger transform decodes those.
  if (plan->plane == 0 && (plan->repeat_x > 1 || plan->repeat_y > 1)) return false;
  const JQUANT_TBL* quant = comp.quant_tbl_no >= 0 && comp.quant_tbl_no < NUM_QUANT_TBLS
                                ? info.quant_tbl_ptrs[comp.quant_tbl_no] : nullptr;
  if (quant == nullptr) return false;
  for (int v = 0; v < plan->idct_h; ++v) {
    for (int u = 0; u < plan->idct_w; ++u) plan->quant[v * plan->idct_w + u] = quant->quantval[v * 8 + u];
  }
  return true;
}

// The MCU grid: a single-component image has one block per MCU (its own
// block grid; its plan's sampling becomes 1x1).
void McuGrid(const jpeg_decompress_struct& info, Plan* plans, int* mcus_per_row, int* mcu_rows) {
  const int hmax = info.max_h_samp_factor, vmax = info.max_v_samp_factor;
  if (info.num_components == 1) {
    const long width = (static_cast<long>(info.image_width) * plans[0].h + hmax - 1) / hmax;
    const long height = (static_cast<long>(info.image_height) * plans[0].v + vmax - 1) / vmax;
    *mcus_per_row = static_cast<int>((width + 7) / 8);
    *mcu_rows = static_cast<int>((height + 7) / 8);
    plans[0].h = plans[0].v = 1;
  } else {
    *mcus_per_row = static_cast<int>((info.image_width + 8 * hmax - 1) / (8 * hmax));
    *mcu_rows = static_cast<int>((info.image_height + 8 * vmax - 1) / (8 * vmax));
  }
}

// A baseline scan's layout and each component's plan (in scan order), or
// false when this path does not decode the image.
static_assert(2 * kMaxComponents <= jpeg_entropy::kTableCacheSize,
              "a decode's own tables must outlive its lookups");

bool PlanBaseline(const jpeg_decompress_struct& info, int denominator, Scan* scan, Plan* plans) {
  bool gray = false;
  if (info.progressive_mode || !DecodableFrame(info, &gray)) return false;
  if (info.comps_in_scan != info.num_components) return false;  // one scan holds them all
  if (info.Ss != 0 || info.Se != 63 || info.Ah != 0 || info.Al != 0) return false;
  scan->components = info.comps_in_scan;
  for (int c = 0; c < info.comps_in_scan; ++c) {
    const jpeg_component_info* comp = info.cur_comp_info[c];
    Plan& plan = plans[c];
    if (!PlanComponent(info, *comp, denominator, gray, &plan)) return false;
    const JHUFF_TBL* dc = comp->dc_tbl_no >= 0 && comp->dc_tbl_no < NUM_HUFF_TBLS
                              ? info.dc_huff_tbl_ptrs[comp->dc_tbl_no] : nullptr;
    const JHUFF_TBL* ac = comp->ac_tbl_no >= 0 && comp->ac_tbl_no < NUM_HUFF_TBLS
                              ? info.ac_huff_tbl_ptrs[comp->ac_tbl_no] : nullptr;
    if (dc == nullptr || ac == nullptr) return false;
    // Built once per thread while the files' tables repeat (valid through
    // this decode: it looks up at most 2 * kMaxComponents tables).
    const HuffmanTable* dc_table = jpeg_entropy::SharedBaselineTable(dc->bits, dc->huffval, true);
    const HuffmanTable* ac_table = jpeg_entropy::SharedBaselineTable(ac->bits, ac->huffval, false);
    if (dc_table == nullptr || ac_table == nullptr) return false;
    scan->component[c] = {plan.h, plan.v, dc_table, ac_table,
                          jpeg_entropy::ZigZagLimit(plan.idct_h, plan.idct_w)};
  }
  McuGrid(info, plans, &scan->mcus_per_row, &scan->mcu_rows);
  scan->component[0].h = plans[0].h;
  scan->component[0].v = plans[0].v;
  scan->restart_interval = static_cast<int>(info.restart_interval);
  return true;
}

// A progressive frame's plans (in frame order), or false. A grayscale one
// must have 1x1 sampling (its scans' block grid is then its MCU grid).
bool PlanProgressive(const jpeg_decompress_struct& info, int denominator, Plan* plans,
                     int* mcus_per_row, int* mcu_rows) {
  bool gray = false;
  if (!info.progressive_mode || !DecodableFrame(info, &gray)) return false;
  int blocks_per_mcu = 0;
  for (int c = 0; c < info.num_components; ++c) {
    if (!PlanComponent(info, info.comp_info[c], denominator, gray, &plans[c])) return false;
    blocks_per_mcu += plans[c].h * plans[c].v;
  }
  // The MCU FeedCorners assembles (JPEG's limit for an interleaved scan).
  if (blocks_per_mcu > jpeg_entropy::kMaxBlocksPerMcu) return false;
  if (gray && (plans[0].h != 1 || plans[0].v != 1)) return false;
  McuGrid(info, plans, mcus_per_row, mcu_rows);
  return true;
}

// Hands the window's MCUs from the progressive decode's corners to the
// sink, with its RowDone after each row.
// REQUIRES: corners[c] covers those MCUs' blocks (rows up to (last_row + 1)
// * v, columns below end_col * h); at most kMaxBlocksPerMcu blocks per MCU.
void FeedCorners(jpeg_entropy::CornerPlane* corners, const Plan* plans, int components,
                 const jpeg_entropy::McuWindow& window, BlockSink* sink) {
  alignas(64) int16_t storage[jpeg_entropy::kMaxBlocksPerMcu * kBlockStride];
  const int16_t* blocks[kMaxComponents];
  for (int y = window.first_row; y <= window.last_row; ++y) {
    for (int x = window.first_col; x < window.end_col; ++x) {
      int used = 0;
      for (int c = 0; c < components; ++c) {
        blocks[c] = storage + used * kBlockStride;
        for (int by = 0; by < plans[c].v; ++by) {
          for (int bx = 0; bx < plans[c].h; ++bx, ++used) {
            int16_t* block = storage + used * kBlockStride;
            std::memset(block, 0, sizeof(int16_t) * 64);
            const jpeg_entropy::CornerBlock& kept =
                corners[c].at(x * plans[c].h + bx, y * plans[c].v + by);
            for (int r = 0; r < 4; ++r) std::memcpy(block + 8 * r, kept.corner + 4 * r, 8);
          }
        }
      }
      sink->Mcu(x, y, blocks);
    }
    sink->RowDone(y);
  }
}

bool DecodeScaledUnchecked(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                           const CropRect& crop, int denominator, Image* out,
                           DecodedColumns* columns) {
  Scan scan;
  Plan plans[kMaxComponents];
  const bool progressive = info.progressive_mode;
  if (progressive ? !PlanProgressive(info, denominator, plans, &scan.mcus_per_row, &scan.mcu_rows)
                  : !PlanBaseline(info, denominator, &scan, plans)) {
    return false;
  }
  const int components = info.num_components;
  const uint8_t* start = info.src->next_input_byte;
  if (start < data || start > data + size) return false;
  scan.data = start;
  scan.end = data + size;
  // The MCU's size in scaled pixels: the plan of any component covers it.
  const int mcu_w = plans[0].h * plans[0].idct_w * plans[0].repeat_x;
  const int mcu_h = plans[0].v * plans[0].idct_h * plans[0].repeat_y;
  // Output as libjpeg sizes it: ceil(size / denominator).
  const int out_w = static_cast<int>((info.image_width + denominator - 1) / denominator);
  const int out_h = static_cast<int>((info.image_height + denominator - 1) / denominator);
  const int x0 = crop.x / denominator;
  const int y0 = crop.y / denominator;
  const int x1 = std::max(x0 + 1, std::min(out_w, (crop.x + crop.width + denominator - 1) / denominator));
  const int y1 = std::max(y0 + 1, std::min(out_h, (crop.y + crop.height + denominator - 1) / denominator));
  const int first_col = x0 / mcu_w;
  const int end_col = std::min(scan.mcus_per_row, (x1 + mcu_w - 1) / mcu_w);
  out->width = std::min(out_w, end_col * mcu_w) - first_col * mcu_w;
  out->height = y1 - y0;
  if (out->width <= 0 || out->height <= 0) return false;
  if (!decode_internal::TryResize(&out->pixels, static_cast<size_t>(out->width) * out->height * 3)) {
    return false;
  }
  *columns = {x0 - first_col * mcu_w, x1 - x0};
  ScaledSink sink(plans, components, mcu_w, mcu_h, first_col, end_col, y0, y1, out);
  const int first_row = y0 / mcu_h, last_row = (y1 - 1) / mcu_h;
  const jpeg_entropy::McuWindow window{first_row, last_row, first_col, end_col};
  if (!progressive) return jpeg_entropy::DecodeScan(scan, window, &sink);
  jpeg_entropy::CornerPlane corners[kMaxComponents];
  for (int c = 0; c < components; ++c) {
    corners[c].keep = jpeg_entropy::CornerPositions(plans[c].idct_h, plans[c].idct_w);
  }
  if (!jpeg_entropy::DecodeProgressive(info, data, size, last_row, corners)) return false;
  FeedCorners(corners, plans, components, window, &sink);
  return true;
}

}  // namespace

bool DecodeScaledOwn(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                     const CropRect& crop, int denominator, Image* out, DecodedColumns* columns) {
  // Out of memory for the tables or the strip: libjpeg's path then reports
  // it as a Status, as it would without this path.
  try {
    return DecodeScaledUnchecked(info, data, size, crop, denominator, out, columns);
  } catch (const std::bad_alloc&) {
    return false;
  }
}

}  // namespace gpufeed
