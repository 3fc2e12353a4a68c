#include "decode/transform.h"
#include "gpufeed/transform.h"

#include <algorithm>
#include <time.h>

#include <cmath>

#include "decode/output.h"
#include "decode/resample.h"
#include "util/random.h"

namespace gpufeed {

namespace {

// Uniform double in [0, 1) from 53 random bits.
double Uniform(SampleRng* rng) {
  return static_cast<double>(rng->Next() >> 11) * (1.0 / 9007199254740992.0);
}

SampleRng RngFor(uint64_t seed, uint64_t epoch, uint64_t sample_id) {
  return SampleRng(seed ^ SplitMix64(sample_id ^ 0x7472616e73666f72ull /* "transfor" */), epoch);
}

// CPU time of the calling thread: on a machine shared with other work the
// stage figures then count this thread's work, not its waits for a core.
uint64_t ThreadCpuNanoseconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

// The decoded region must extend past the crop by the filter's reach so
// that edge pixels are weighted as PIL weights them in the full image.
int Margin(double crop_extent, int out_size) {
  return static_cast<int>(std::ceil(std::max(crop_extent / out_size, 1.0))) + 2;
}

// The part of the image to decode for `crop`: the crop plus the filter's
// margin. options.exact: at full resolution (*wanted_w = *wanted_h = 0), so
// that the resampler sees PIL's pixels. Otherwise DCT-scaled (1/2, 1/4, 1/8)
// while the scaled crop stays at least the output size, i.e. when the crop
// is at least twice the output: *wanted_w x *wanted_h is the smallest region
// whose crop part is still size x size; the margin then also covers the
// filter's reach in scaled pixels. When no scale applies
// (the crop under twice the output), exact=False decodes as exact does.
CropRect RegionToDecode(const CropParameters& crop, const ImageHeader& header,
                        const ImageTransformOptions& options, int* wanted_w, int* wanted_h) {
  int margin_x = Margin(crop.width, options.size), margin_y = Margin(crop.height, options.size);
  if (!options.exact) {
    // Margin covers the filter's reach at every scale ((r + 1) / 2 scaled
    // pixels, r the scaled crop's ratio to the output); two more scaled
    // pixels keep a decoder's edge pixels, which may depend on neighbours it
    // did not decode (libjpeg's fancy upsampling, where it decodes the
    // scaled crop), out of the filter. The scale: the largest DctDenominator
    // can pick (on the crop's whole pixels: floor(w) / s >= size just when
    // w >= s * size, the output size being whole).
    const int scale = DctDenominator({0, 0, static_cast<int>(crop.width),
                                      static_cast<int>(crop.height)},
                                     options.size, options.size);
    margin_x += 2 * scale;
    margin_y += 2 * scale;
  }
  CropRect region;
  region.x = std::max(0, static_cast<int>(std::floor(crop.x)) - margin_x);
  region.y = std::max(0, static_cast<int>(std::floor(crop.y)) - margin_y);
  if (!options.exact) {
    // A multiple of 8 starts at a whole scaled pixel at every DCT scale, so
    // that the box maps source to scaled coordinates exactly.
    region.x &= ~7;
    region.y &= ~7;
  }
  region.width = std::min(header.width, static_cast<int>(std::ceil(crop.x + crop.width)) + margin_x) - region.x;
  region.height = std::min(header.height, static_cast<int>(std::ceil(crop.y + crop.height)) + margin_y) - region.y;
  *wanted_w = options.exact ? 0 : static_cast<int>(std::ceil(options.size * region.width / crop.width));
  *wanted_h = options.exact ? 0 : static_cast<int>(std::ceil(options.size * region.height / crop.height));
  if (!options.exact && DctDenominator(region, *wanted_w, *wanted_h) == 1) {
    // No DCT scale keeps the crop at the output size: the exact region and
    // decode, so that exact=False differs from exact only where it scales.
    ImageTransformOptions exact = options;
    exact.exact = true;
    return RegionToDecode(crop, header, exact, wanted_w, wanted_h);
  }
  return region;
}

Status Finish(const Image& region, double box_x0, double box_y0, double box_x1, double box_y1,
              const ImageTransformOptions& options, bool flip, void* destination,
              TransformScratch* scratch) {
  if (scratch->times == nullptr) {
    ResampleBilinear(region, box_x0, box_y0, box_x1, box_y1, options.size, options.size,
                     &scratch->resized, &scratch->horizontal, flip);
    WriteOutput(scratch->resized, options, destination);
    return Status::OK();
  }
  const uint64_t started = ThreadCpuNanoseconds();
  ResampleBilinear(region, box_x0, box_y0, box_x1, box_y1, options.size, options.size,
                   &scratch->resized, &scratch->horizontal, flip);
  const uint64_t resampled = ThreadCpuNanoseconds();
  WriteOutput(scratch->resized, options, destination);
  const uint64_t written = ThreadCpuNanoseconds();
  scratch->times->resample_ns += resampled - started;
  scratch->times->write_ns += written - resampled;
  scratch->times->images += 1;
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

Status TransformImage(const uint8_t* data, size_t size, const ImageTransformOptions& options,
                      uint64_t seed, uint64_t epoch, uint64_t sample_id, void* destination,
                      TransformScratch* scratch, CropParameters* parameters) {
  const uint64_t started = scratch->times != nullptr ? ThreadCpuNanoseconds() : 0;
  ImageHeader header;
  // JPEGs go through the thread's decompressor: one header parse, no
  // decompressor set-up per image.
  const bool jpeg = SniffImageFormat(data, size) == ImageFormat::kJpeg;
  if (jpeg) {
    if (scratch->jpeg == nullptr) scratch->jpeg = std::make_unique<JpegDecoder>();
    GPUFEED_RETURN_IF_ERROR(scratch->jpeg->Start(data, size, &header));
  } else {
    GPUFEED_RETURN_IF_ERROR(ReadImageHeader(data, size, &header));
  }
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
  int wanted_w = 0, wanted_h = 0;
  const CropRect region = RegionToDecode(crop, header, options, &wanted_w, &wanted_h);
  int denominator = 1;
  DecodedColumns columns;
  if (jpeg) {
    GPUFEED_RETURN_IF_ERROR(scratch->jpeg->DecodeRegion(region, wanted_w, wanted_h,
                                                        &scratch->decoded, &denominator,
                                                        options.max_pixels, &columns,
                                                        /*approximate=*/!options.exact));
  } else {
    GPUFEED_RETURN_IF_ERROR(DecodeRegion(data, size, region, wanted_w, wanted_h, &scratch->decoded,
                                         &denominator, options.max_pixels));
    columns = {0, scratch->decoded.width};
  }
  // The crop box in the decoded region's (scaled) coordinates; the decoded
  // image may hold extra columns left and right of the region (columns).
  // Integers are subtracted before the division, as exact as can be.
  double x0 = (crop.x - (region.x - columns.skipped * denominator)) / denominator;
  double y0 = (crop.y - region.y) / denominator;
  double x1 = x0 + crop.width / denominator;
  double y1 = y0 + crop.height / denominator;
  x1 = std::min(x1, static_cast<double>(columns.skipped + columns.width));
  y1 = std::min(y1, static_cast<double>(scratch->decoded.height));
  if (scratch->times != nullptr) {
    scratch->times->decode_ns += ThreadCpuNanoseconds() - started;
  }
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
  if (options.dtype == TensorDtype::kInt32 || options.dtype == TensorDtype::kInt64 ||
      options.dtype == TensorDtype::kInt8) {
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
