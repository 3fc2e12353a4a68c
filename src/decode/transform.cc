#include "decode/transform.h"
#include "gpufeed/transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/random.h"

namespace gpufeed {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // libImaging/Resample.c

// Uniform double in [0, 1) from 53 random bits.
double Uniform(SampleRng* rng) {
  return static_cast<double>(rng->Next() >> 11) * (1.0 / 9007199254740992.0);
}

SampleRng RngFor(uint64_t seed, uint64_t epoch, uint64_t sample_id) {
  return SampleRng(seed ^ SplitMix64(sample_id ^ 0x7472616e73666f72ull /* "transfor" */), epoch);
}

// One pass of PIL's resampling: weights for each output index.
struct Coefficients {
  std::vector<int> first;   // first source index per output
  std::vector<int> count;   // taps per output
  std::vector<int32_t> weights;  // fixed point, `stride` per output
  int stride = 0;
};

void Precompute(int in_size, double box0, double box1, int out_size, Coefficients* out) {
  double scale = (box1 - box0) / out_size;
  double filter_scale = std::max(scale, 1.0);
  double support = 1.0 * filter_scale;  // bilinear: support 1
  int stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  out->stride = stride;
  out->first.assign(out_size, 0);
  out->count.assign(out_size, 0);
  out->weights.assign(static_cast<size_t>(out_size) * stride, 0);
  std::vector<double> k(stride);
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

// The two hot loops of resampling, compiled for AVX2 as well where the
// compiler can (picked at run time): whole rows are weighted and summed.
// Not under TSan: the clones' ifunc resolvers run while the dynamic linker
// relocates, before the TSan runtime exists, and their instrumentation
// crashes the process at startup (tests/run.sh --sanitize=thread).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define GPUFEED_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GPUFEED_VECTOR_CLONES
#endif

GPUFEED_VECTOR_CLONES
void AccumulateRow(int32_t* __restrict__ sum, const uint8_t* __restrict__ in, int32_t weight,
                   size_t count) {
  for (size_t i = 0; i < count; ++i) sum[i] += in[i] * weight;
}

GPUFEED_VECTOR_CLONES
void ClipRow(uint8_t* __restrict__ out, const int32_t* __restrict__ sum, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    int32_t value = sum[i] >> 22;
    out[i] = static_cast<uint8_t>(value < 0 ? 0 : value > 255 ? 255 : value);
  }
}

inline uint8_t Clip8(int32_t value) {
  value >>= kPrecisionBits;
  return static_cast<uint8_t>(value < 0 ? 0 : value > 255 ? 255 : value);
}

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

// Writes the size x size RGB image (optionally mirrored) at `destination`.
void WriteOutput(const Image& image, const ImageTransformOptions& options, bool flip,
                 void* destination) {
  const int size = options.size;
  const size_t plane = static_cast<size_t>(size) * size;
  const bool planar = options.layout == OutputLayout::kNCHW;
  if (options.dtype == OutputDtype::kUint8 && !planar) {
    // HWC uint8 is the resampled image itself: whole rows, mirrored by pixel.
    uint8_t* out = static_cast<uint8_t*>(destination);
    const size_t row_bytes = static_cast<size_t>(size) * 3;
    for (int y = 0; y < size; ++y) {
      const uint8_t* row = image.row(y);
      uint8_t* target = out + y * row_bytes;
      if (!flip) {
        std::memcpy(target, row, row_bytes);
        continue;
      }
      for (int x = 0; x < size; ++x) std::memcpy(target + 3 * x, row + 3 * (size - 1 - x), 3);
    }
    return;
  }
  if (options.dtype == OutputDtype::kUint8) {
    uint8_t* out = static_cast<uint8_t*>(destination);
    for (int y = 0; y < size; ++y) {
      const uint8_t* row = image.row(y);
      for (int x = 0; x < size; ++x) {
        const uint8_t* pixel = row + (flip ? size - 1 - x : x) * 3;
        size_t at = static_cast<size_t>(y) * size + x;
        for (int c = 0; c < 3; ++c) out[planar ? c * plane + at : at * 3 + c] = pixel[c];
      }
    }
    return;
  }
  // Every output value is one of 256 per channel: a table computed exactly
  // as torchvision computes each value, x.float().div(255).sub(mean).div(std)
  // in float32, so the results are bit-identical and cost one load.
  float table[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      table[c][v] = (static_cast<float>(v) / 255.0f - options.mean[c]) / options.std[c];
    }
  }
  for (int y = 0; y < size; ++y) {
    const uint8_t* row = image.row(y);
    for (int x = 0; x < size; ++x) {
      const uint8_t* pixel = row + (flip ? size - 1 - x : x) * 3;
      size_t at = static_cast<size_t>(y) * size + x;
      for (int c = 0; c < 3; ++c) {
        size_t index = planar ? c * plane + at : at * 3 + c;
        float value = table[c][pixel[c]];
        switch (options.dtype) {
          case OutputDtype::kFloat32: static_cast<float*>(destination)[index] = value; break;
          case OutputDtype::kFloat16:
            static_cast<uint16_t*>(destination)[index] = FloatToHalf(value);
            break;
          case OutputDtype::kBfloat16:
            static_cast<uint16_t*>(destination)[index] = FloatToBfloat16(value);
            break;
          default: break;
        }
      }
    }
  }
}

// The decoded region must extend past the crop by the filter's reach so
// that edge pixels are weighted as PIL weights them in the full image.
int Margin(double crop_extent, int out_size) {
  return static_cast<int>(std::ceil(std::max(crop_extent / out_size, 1.0))) + 2;
}

Status Finish(const Image& region, double box_x0, double box_y0, double box_x1, double box_y1,
              const ImageTransformOptions& options, bool flip, void* destination,
              TransformScratch* scratch) {
  ResampleBilinear(region, box_x0, box_y0, box_x1, box_y1, options.size, options.size,
                   &scratch->resized, &scratch->horizontal);
  WriteOutput(scratch->resized, options, flip, destination);
  return Status::OK();
}

}  // namespace

CropParameters RandomResizedCropParameters(int width, int height,
                                           const ImageTransformOptions& options, uint64_t seed,
                                           uint64_t epoch, uint64_t sample_id) {
  SampleRng rng = RngFor(seed, epoch, sample_id);
  CropParameters out;
  double area = static_cast<double>(width) * height;
  double log_min = std::log(options.ratio_min), log_max = std::log(options.ratio_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    double target_area = area * (options.scale_min + (options.scale_max - options.scale_min) * Uniform(&rng));
    double aspect = std::exp(log_min + (log_max - log_min) * Uniform(&rng));
    // Python's round(): half to even, which nearbyint does by default.
    int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      out.y = static_cast<double>(rng.Bounded(static_cast<uint64_t>(height - h + 1)));
      out.x = static_cast<double>(rng.Bounded(static_cast<uint64_t>(width - w + 1)));
      out.width = w;
      out.height = h;
      found = true;
    }
  }
  if (!found) {
    double in_ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (in_ratio < options.ratio_min) {
      h = static_cast<int>(std::nearbyint(w / options.ratio_min));
    } else if (in_ratio > options.ratio_max) {
      w = static_cast<int>(std::nearbyint(h * options.ratio_max));
    }
    out.width = w;
    out.height = h;
    out.y = (height - h) / 2;
    out.x = (width - w) / 2;
  }
  out.flip = options.flip && (rng.Next() >> 63) != 0;
  return out;
}

CropParameters CenterCropParameters(int width, int height, const ImageTransformOptions& options) {
  // torchvision Resize(int): the shorter side becomes `resize`, the longer
  // int(resize * long / short); CenterCrop: int(round((H - size) / 2)).
  int resize = static_cast<int>(std::nearbyint(options.size / options.crop_fraction));
  int new_width, new_height;
  if (width <= height) {
    new_width = resize;
    new_height = static_cast<int>(static_cast<int64_t>(resize) * height / width);
  } else {
    new_height = resize;
    new_width = static_cast<int>(static_cast<int64_t>(resize) * width / height);
  }
  double top = std::nearbyint((new_height - options.size) / 2.0);
  double left = std::nearbyint((new_width - options.size) / 2.0);
  double scale_x = static_cast<double>(width) / new_width;
  double scale_y = static_cast<double>(height) / new_height;
  CropParameters out;
  out.x = left * scale_x;
  out.y = top * scale_y;
  out.width = options.size * scale_x;
  out.height = options.size * scale_y;
  return out;
}

void ResampleBilinear(const Image& source, double box_x0, double box_y0, double box_x1,
                      double box_y1, int out_width, int out_height, Image* output,
                      Image* horizontal) {
  Coefficients horizontal_coefficients, vertical_coefficients;
  Precompute(source.width, box_x0, box_x1, out_width, &horizontal_coefficients);
  Precompute(source.height, box_y0, box_y1, out_height, &vertical_coefficients);
  // Rows the vertical pass will read.
  int first_row = vertical_coefficients.first[0];
  int last_row = vertical_coefficients.first[out_height - 1] + vertical_coefficients.count[out_height - 1];
  horizontal->width = out_width;
  horizontal->height = last_row - first_row;
  horizontal->pixels.resize(static_cast<size_t>(horizontal->width) * horizontal->height * 3);
  // 32-bit sums suffice (255 x 2^22 x the weights' sum of 1 < 2^31), as in
  // PIL. The horizontal pass runs on the transposed window, where it becomes
  // a weighted sum of whole rows that the compiler vectorizes; the result is
  // transposed back. Same arithmetic, same rounding: bit-identical to PIL.
  const int rows = last_row - first_row;
  const int column0 = horizontal_coefficients.first[0];
  const int column1 = horizontal_coefficients.first[out_width - 1] +
                      horizontal_coefficients.count[out_width - 1];
  const int columns = column1 - column0;
  const size_t line = static_cast<size_t>(rows) * 3;  // one transposed column
  thread_local std::vector<uint8_t> transposed;
  thread_local std::vector<uint8_t> resampled;
  thread_local std::vector<int32_t> sums;
  transposed.resize(static_cast<size_t>(columns) * line);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* in = source.row(first_row + y) + column0 * 3;
    for (int x = 0; x < columns; ++x) {
      uint8_t* out = &transposed[x * line + y * 3];
      out[0] = in[3 * x];
      out[1] = in[3 * x + 1];
      out[2] = in[3 * x + 2];
    }
  }
  resampled.resize(static_cast<size_t>(out_width) * line);
  sums.resize(std::max(line, static_cast<size_t>(out_width) * 3));
  for (int xx = 0; xx < out_width; ++xx) {
    const int32_t* k =
        &horizontal_coefficients.weights[static_cast<size_t>(xx) * horizontal_coefficients.stride];
    int start = horizontal_coefficients.first[xx] - column0;
    int count = horizontal_coefficients.count[xx];
    int32_t* sum = sums.data();
    std::fill(sum, sum + line, 1 << (kPrecisionBits - 1));
    for (int t = 0; t < count; ++t) AccumulateRow(sum, &transposed[(start + t) * line], k[t], line);
    ClipRow(&resampled[xx * line], sum, line);
  }
  horizontal->width = out_width;
  horizontal->height = rows;
  horizontal->pixels.resize(static_cast<size_t>(out_width) * rows * 3);
  for (int xx = 0; xx < out_width; ++xx) {
    const uint8_t* in = &resampled[xx * line];
    for (int y = 0; y < rows; ++y) {
      uint8_t* out = horizontal->row(y) + xx * 3;
      out[0] = in[3 * y];
      out[1] = in[3 * y + 1];
      out[2] = in[3 * y + 2];
    }
  }
  output->width = out_width;
  output->height = out_height;
  output->pixels.resize(static_cast<size_t>(out_width) * out_height * 3);
  const int row_values = out_width * 3;
  for (int yy = 0; yy < out_height; ++yy) {
    const int32_t* k =
        &vertical_coefficients.weights[static_cast<size_t>(yy) * vertical_coefficients.stride];
    int ymin = vertical_coefficients.first[yy] - first_row;
    int count = vertical_coefficients.count[yy];
    int32_t* sum = sums.data();
    std::fill(sum, sum + row_values, 1 << (kPrecisionBits - 1));
    for (int y = 0; y < count; ++y) AccumulateRow(sum, horizontal->row(ymin + y), k[y], row_values);
    ClipRow(output->row(yy), sum, row_values);
  }
}

Status TransformImage(const uint8_t* data, size_t size, const ImageTransformOptions& options,
                      uint64_t seed, uint64_t epoch, uint64_t sample_id, void* destination,
                      TransformScratch* scratch, CropParameters* parameters) {
  ImageHeader header;
  GPUFEED_RETURN_IF_ERROR(ReadImageHeader(data, size, &header));
  if (header.width <= 0 || header.height <= 0) return Status::Corruption("image has no pixels");
  if (static_cast<uint64_t>(header.width) * header.height > options.max_pixels) {
    return Status::Corruption("image header declares " +
                              std::to_string(static_cast<uint64_t>(header.width) * header.height) +
                              " pixels, more than the limit of " + std::to_string(options.max_pixels));
  }
  CropParameters crop = options.train
                            ? RandomResizedCropParameters(header.width, header.height, options,
                                                          seed, epoch, sample_id)
                            : CenterCropParameters(header.width, header.height, options);
  if (parameters != nullptr) *parameters = crop;
  // Decode the crop plus the filter's margin, DCT-scaled when the crop is
  // at least twice the output in both directions.
  int margin_x = Margin(crop.width, options.size), margin_y = Margin(crop.height, options.size);
  CropRect region;
  region.x = std::max(0, static_cast<int>(std::floor(crop.x)) - margin_x);
  region.y = std::max(0, static_cast<int>(std::floor(crop.y)) - margin_y);
  region.width = std::min(header.width, static_cast<int>(std::ceil(crop.x + crop.width)) + margin_x) - region.x;
  region.height = std::min(header.height, static_cast<int>(std::ceil(crop.y + crop.height)) + margin_y) - region.y;
  // Scale in the DCT domain only while the rest of the way is still at least a
  // 2x antialiased downscale: keeps results close to PIL (mean error < 2 levels).
  int wanted_w = static_cast<int>(std::ceil(2.0 * options.size * region.width / crop.width));
  int wanted_h = static_cast<int>(std::ceil(2.0 * options.size * region.height / crop.height));
  int denominator = 1;
  GPUFEED_RETURN_IF_ERROR(DecodeRegion(data, size, region, wanted_w, wanted_h, &scratch->decoded,
                                       &denominator, options.max_pixels));
  // The crop box in the decoded region's (scaled) coordinates.
  double x0 = (crop.x - region.x) / denominator;
  double y0 = (crop.y - region.y) / denominator;
  double x1 = x0 + crop.width / denominator;
  double y1 = y0 + crop.height / denominator;
  x1 = std::min(x1, static_cast<double>(scratch->decoded.width));
  y1 = std::min(y1, static_cast<double>(scratch->decoded.height));
  return Finish(scratch->decoded, x0, y0, x1, y1, options, crop.flip, destination, scratch);
}

Status TransformDecoded(const Image& image, const ImageTransformOptions& options, uint64_t seed,
                        uint64_t epoch, uint64_t sample_id, void* destination,
                        TransformScratch* scratch, CropParameters* parameters) {
  if (image.width <= 0 || image.height <= 0) return Status::Corruption("image has no pixels");
  CropParameters crop = options.train
                            ? RandomResizedCropParameters(image.width, image.height, options,
                                                          seed, epoch, sample_id)
                            : CenterCropParameters(image.width, image.height, options);
  if (parameters != nullptr) *parameters = crop;
  return Finish(image, crop.x, crop.y, crop.x + crop.width, crop.y + crop.height, options,
                crop.flip, destination, scratch);
}

void NormalizeTable(const ImageTransformOptions& options, OutputDtype dtype, void* table) {
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      // The same expression as WriteOutput's table.
      float value = (static_cast<float>(v) / 255.0f - options.mean[c]) / options.std[c];
      size_t index = static_cast<size_t>(c) * 256 + v;
      switch (dtype) {
        case OutputDtype::kFloat16: static_cast<uint16_t*>(table)[index] = FloatToHalf(value); break;
        case OutputDtype::kBfloat16:
          static_cast<uint16_t*>(table)[index] = FloatToBfloat16(value);
          break;
        case OutputDtype::kFloat32: static_cast<float*>(table)[index] = value; break;
        case OutputDtype::kUint8: static_cast<uint8_t*>(table)[index] = static_cast<uint8_t>(v); break;
        case OutputDtype::kInt32:
        case OutputDtype::kInt64: break;  // not image outputs: refused by the callers
      }
    }
  }
}

}  // namespace gpufeed

// ---------------------------------------------------------------- public API

namespace gpufeed {

size_t ImageTransformBytes(const ImageTransformOptions& options) {
  return static_cast<size_t>(options.size) * static_cast<size_t>(options.size) * 3 *
         TensorDtypeSize(options.dtype);
}

Status TransformOneImage(const uint8_t* data, size_t size, const ImageTransformOptions& options,
                         uint64_t seed, uint64_t epoch, uint64_t sample_id, void* output,
                         CropInfo* crop) {
  if (options.size <= 0 || options.size > 16384) {
    return Status::InvalidArgument("size must be in 1..16384");
  }
  if (options.dtype == TensorDtype::kInt32 || options.dtype == TensorDtype::kInt64) {
    return Status::InvalidArgument(std::string("the image transform outputs uint8, float32, "
                                               "float16 or bfloat16, not ") +
                                   TensorDtypeName(options.dtype));
  }
  TransformScratch scratch;
  CropParameters parameters;
  GPUFEED_RETURN_IF_ERROR(
      TransformImage(data, size, options, seed, epoch, sample_id, output, &scratch, &parameters));
  if (crop != nullptr) {
    crop->x = parameters.x;
    crop->y = parameters.y;
    crop->width = parameters.width;
    crop->height = parameters.height;
    crop->flip = parameters.flip;
  }
  return Status::OK();
}

}  // namespace gpufeed
