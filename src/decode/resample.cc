#include "decode/resample.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "util/logging.h"

namespace gpufeed {

namespace resample_internal {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // libImaging/Resample.c
constexpr int32_t kRounding = 1 << (kPrecisionBits - 1);

inline uint8_t Clip8(int32_t value) {
  value >>= kPrecisionBits;
  return static_cast<uint8_t>(value < 0 ? 0 : value > 255 ? 255 : value);
}

// Two int16 halves of weights, packed as pmaddwd reads a tap pair: k =
// high * 2^11 + low with 0 <= low < 2^11, so both halves fit int16.
uint32_t HalfPair(int32_t a, int32_t b) {
  return static_cast<uint32_t>(static_cast<uint16_t>(a)) |
         static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16;
}

}  // namespace

void PrecomputeCoefficients(int in_size, double box0, double box1, int out_size,
                            Coefficients* out) {
  double scale = (box1 - box0) / out_size;
  double filter_scale = std::max(scale, 1.0);
  double support = 1.0 * filter_scale;  // bilinear: support 1
  int stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  out->stride = stride;
  out->first.assign(out_size, 0);
  out->count.assign(out_size, 0);
  out->weights.assign(static_cast<size_t>(out_size) * stride, 0);
  thread_local std::vector<double> k;
  k.assign(stride, 0.0);
  for (int xx = 0; xx < out_size; ++xx) {
    double center = box0 + (xx + 0.5) * scale;
    double ss = 1.0 / filter_scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0;
    int x = 0;
    for (; x < xmax; ++x) {
      double t = (x + xmin - center + 0.5) * ss;
      double w = t < 0 ? 1.0 + t : 1.0 - t;  // triangle filter
      if (w < 0) w = 0;
      k[x] = w;
      total += w;
    }
    for (x = 0; x < xmax; ++x) {
      double w = total != 0 ? k[x] / total : 0;
      // Round half away from zero, as PIL's normalize_coeffs_8bpc.
      out->weights[static_cast<size_t>(xx) * stride + x] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                     : 0.5 + w * (1 << kPrecisionBits));
    }
    out->first[xx] = xmin;
    out->count[xx] = xmax;
  }
}

void PrecomputeTapPairs(const Coefficients& coefficients, TapPairs* out) {
  const size_t outputs = coefficients.first.size();
  out->offset.resize(outputs + 1);
  out->low.clear();
  out->high.clear();
  for (size_t i = 0; i < outputs; ++i) {
    out->offset[i] = static_cast<int>(out->low.size());
    const int32_t* k = &coefficients.weights[i * coefficients.stride];
    const int count = coefficients.count[i];
    for (int t = 0; t < count; t += 2) {
      int32_t k0 = k[t], k1 = t + 1 < count ? k[t + 1] : 0;
      out->low.push_back(HalfPair(k0 & 2047, k1 & 2047));
      out->high.push_back(HalfPair(k0 >> 11, k1 >> 11));
    }
  }
  out->offset[outputs] = static_cast<int>(out->low.size());
}

void PrecomputeUniformTaps(const Coefficients& coefficients, int in_size, UniformTaps* out) {
  const int outputs = static_cast<int>(coefficients.first.size());
  int pairs = 0;
  for (int count : coefficients.count) pairs = std::max(pairs, (count + 1) / 2);
  out->start.resize(outputs);
  out->low.assign(static_cast<size_t>(outputs) * pairs, 0);
  out->high.assign(static_cast<size_t>(outputs) * pairs, 0);
  if (2 * pairs > in_size) {
    out->pairs = 0;
    return;
  }
  out->pairs = pairs;
  thread_local std::vector<int32_t> taps;
  for (int i = 0; i < outputs; ++i) {
    const int first = coefficients.first[i];
    const int start = std::min(first, in_size - 2 * pairs);
    taps.assign(2 * pairs, 0);
    const int32_t* k = &coefficients.weights[static_cast<size_t>(i) * coefficients.stride];
    for (int t = 0; t < coefficients.count[i]; ++t) taps[first - start + t] = k[t];
    out->start[i] = start;
    for (int j = 0; j < pairs; ++j) {
      out->low[static_cast<size_t>(i) * pairs + j] = HalfPair(taps[2 * j] & 2047, taps[2 * j + 1] & 2047);
      out->high[static_cast<size_t>(i) * pairs + j] = HalfPair(taps[2 * j] >> 11, taps[2 * j + 1] >> 11);
    }
  }
}

void HorizontalScalar(const HorizontalPass& pass, const uint8_t* in, size_t in_stride, int rows,
                      uint8_t* out, size_t out_stride) {
  const Coefficients& c = *pass.coefficients;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = in + r * in_stride;
    uint8_t* target = out + r * out_stride;
    for (int xx = 0; xx < pass.out_width; ++xx) {
      const int32_t* k = &c.weights[static_cast<size_t>(xx) * c.stride];
      const uint8_t* pixel = row + 3 * c.first[xx];
      int32_t sum0 = kRounding, sum1 = kRounding, sum2 = kRounding;
      for (int t = 0; t < c.count[xx]; ++t) {
        sum0 += pixel[3 * t] * k[t];
        sum1 += pixel[3 * t + 1] * k[t];
        sum2 += pixel[3 * t + 2] * k[t];
      }
      uint8_t* at = target + 3 * (pass.mirror ? pass.out_width - 1 - xx : xx);
      at[0] = Clip8(sum0);
      at[1] = Clip8(sum1);
      at[2] = Clip8(sum2);
    }
  }
}

void VerticalScalarValues(const Coefficients& coefficients, const uint8_t* in, size_t in_stride,
                          int from, int values, int row, uint8_t* out) {
  const int32_t* k = &coefficients.weights[static_cast<size_t>(row) * coefficients.stride];
  const uint8_t* base = in + static_cast<size_t>(coefficients.first[row]) * in_stride;
  const int count = coefficients.count[row];
  for (int v = from; v < values; ++v) {
    int32_t sum = kRounding;
    for (int t = 0; t < count; ++t) sum += base[t * in_stride + v] * k[t];
    out[v] = Clip8(sum);
  }
}

void VerticalScalar(const Coefficients& coefficients, const TapPairs& /*pairs*/,
                    const uint8_t* in, size_t in_stride, int values, int out_rows, uint8_t* out,
                    size_t out_stride) {
  for (int row = 0; row < out_rows; ++row) {
    VerticalScalarValues(coefficients, in, in_stride, 0, values, row, out + row * out_stride);
  }
}

}  // namespace resample_internal

// ------------------------------------------------------------------ dispatch

namespace {

using namespace resample_internal;

struct PathFunctions {
  HorizontalFunction horizontal;
  VerticalFunction vertical;
};

PathFunctions FunctionsFor(ResamplePath path) {
  switch (path) {
#ifdef GPUFEED_RESAMPLE_X86
    case ResamplePath::kAvx2: return {HorizontalAvx2, VerticalAvx2};
    case ResamplePath::kSse41: return {HorizontalSse41, VerticalSse41};
#endif
    default: return {HorizontalScalar, VerticalScalar};
  }
}

ResamplePath BestSupportedPath() {
  if (ResamplePathSupported(ResamplePath::kAvx2)) return ResamplePath::kAvx2;
  if (ResamplePathSupported(ResamplePath::kSse41)) return ResamplePath::kSse41;
  return ResamplePath::kScalar;
}

// -1 until first use; then the chosen ResamplePath.
std::atomic<int> g_path{-1};

// GPUFEED_RESAMPLE_PATH (scalar, sse41, avx2) overrides the choice, for
// comparing paths from Python; an unknown or unsupported value is logged
// and ignored.
ResamplePath ChoosePath() {
  ResamplePath best = BestSupportedPath();
  const char* forced = std::getenv("GPUFEED_RESAMPLE_PATH");
  if (forced == nullptr || *forced == '\0') return best;
  ResamplePath path;
  if (!ParseResamplePath(forced, &path) || !ResamplePathSupported(path)) {
    Log().warn("GPUFEED_RESAMPLE_PATH={} is unknown or not supported on this CPU; using {}",
               forced, ResamplePathName(best));
    return best;
  }
  return path;
}

}  // namespace

const char* ResamplePathName(ResamplePath path) {
  switch (path) {
    case ResamplePath::kScalar: return "scalar";
    case ResamplePath::kSse41: return "sse41";
    case ResamplePath::kAvx2: return "avx2";
  }
  return "unknown";
}

bool ParseResamplePath(const std::string& name, ResamplePath* path) {
  for (ResamplePath candidate : {ResamplePath::kScalar, ResamplePath::kSse41, ResamplePath::kAvx2}) {
    if (name == ResamplePathName(candidate)) {
      *path = candidate;
      return true;
    }
  }
  return false;
}

bool ResamplePathSupported(ResamplePath path) {
  switch (path) {
    case ResamplePath::kScalar: return true;
#ifdef GPUFEED_RESAMPLE_X86
    case ResamplePath::kSse41:
      __builtin_cpu_init();
      return __builtin_cpu_supports("sse4.1");
    case ResamplePath::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
#endif
    default: return false;
  }
}

ResamplePath ActiveResamplePath() {
  int path = g_path.load(std::memory_order_relaxed);
  if (path < 0) {
    int expected = -1;
    g_path.compare_exchange_strong(expected, static_cast<int>(ChoosePath()));
    path = g_path.load(std::memory_order_relaxed);
  }
  return static_cast<ResamplePath>(path);
}

bool SetResamplePathForTesting(ResamplePath path) {
  if (!ResamplePathSupported(path)) return false;
  g_path.store(static_cast<int>(path), std::memory_order_relaxed);
  return true;
}

void ResampleBilinear(const Image& source, double box_x0, double box_y0, double box_x1,
                      double box_y1, int out_width, int out_height, Image* output,
                      Image* horizontal, bool mirror) {
  const PathFunctions functions = FunctionsFor(ActiveResamplePath());
  thread_local Coefficients horizontal_coefficients, vertical_coefficients;
  thread_local TapPairs horizontal_pairs, vertical_pairs;
  thread_local UniformTaps uniform;
  PrecomputeCoefficients(source.width, box_x0, box_x1, out_width, &horizontal_coefficients);
  PrecomputeCoefficients(source.height, box_y0, box_y1, out_height, &vertical_coefficients);
  PrecomputeTapPairs(horizontal_coefficients, &horizontal_pairs);
  PrecomputeUniformTaps(horizontal_coefficients, source.width, &uniform);
  PrecomputeTapPairs(vertical_coefficients, &vertical_pairs);
  // The rows the vertical pass reads; its indexes become relative to them.
  const int first_row = vertical_coefficients.first[0];
  const int last_row =
      vertical_coefficients.first[out_height - 1] + vertical_coefficients.count[out_height - 1];
  const int rows = last_row - first_row;
  for (int& first : vertical_coefficients.first) first -= first_row;

  horizontal->width = out_width;
  horizontal->height = rows;
  horizontal->pixels.resize(static_cast<size_t>(out_width) * rows * 3);
  const size_t in_stride = static_cast<size_t>(source.width) * 3;
  const size_t out_stride = static_cast<size_t>(out_width) * 3;
  const HorizontalPass pass{&horizontal_coefficients, &horizontal_pairs, &uniform, out_width,
                            mirror};
  // The SIMD paths load 8 bytes at a tap pair's first pixel: up to 5 bytes
  // past the end of a row. Rows followed by that much of the image are read
  // in place; the others (the last one or two) from a padded copy.
  const size_t total = source.pixels.size();
  int in_place = rows;
  while (in_place > 0 &&
         static_cast<size_t>(first_row + in_place) * in_stride + 8 > total) {
    --in_place;
  }
  if (in_place > 0) {
    functions.horizontal(pass, source.row(first_row), in_stride, in_place,
                         horizontal->row(0), out_stride);
  }
  thread_local std::vector<uint8_t> padded;
  padded.assign(in_stride + 16, 0);
  for (int r = in_place; r < rows; ++r) {
    std::memcpy(padded.data(), source.row(first_row + r), in_stride);
    functions.horizontal(pass, padded.data(), in_stride, 1, horizontal->row(r), out_stride);
  }

  output->width = out_width;
  output->height = out_height;
  output->pixels.resize(static_cast<size_t>(out_width) * out_height * 3);
  functions.vertical(vertical_coefficients, vertical_pairs, horizontal->row(0), out_stride,
                     static_cast<int>(out_stride), out_height, output->row(0), out_stride);
}

}  // namespace gpufeed
