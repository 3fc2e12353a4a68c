// Image transforms of the decode pool, torchvision's semantics:
//
//   train:  RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p=0.5)
//   eval:   Resize(shorter side = round(size / 0.875)) + CenterCrop(size)
//   then:   ToTensor (x / 255) + Normalize(mean, std), or uint8 as is,
//           written as NCHW or NHWC, float32 / float16 / bfloat16 / uint8.
//
// Random parameters come from (seed, epoch, sample id) only, so a sample's
// output does not depend on thread count or timing. The crop is decoded as
// a region at full resolution, resampled with PIL's antialiased bilinear
// filter over the exact, fractional source box (resample.h; the flip folded
// into its horizontal pass) and written in the batch's layout and dtype
// (output.h): PIL / torchvision's bytes at every image size. With
// options.exact false, a crop at least twice the output is decoded at 1/2,
// 1/4 or 1/8 in the DCT domain first (baseline and progressive JPEGs by
// gpufeed's own entropy decoders, jpeg_scaled.h; others by libjpeg-turbo),
// to no less than the output size: faster on large photographs, no longer
// PIL's bytes.
#ifndef GPUFEED_DECODE_TRANSFORM_H_
#define GPUFEED_DECODE_TRANSFORM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "decode/image_decoder.h"
#include "decode/jpeg_decoder.h"
#include "decode/output.h"    // WriteOutput, NormalizeTable
#include "decode/resample.h"  // ResampleBilinear
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {


// The parameters drawn for one sample, in source pixels: reported so that
// tests (and users) can reproduce a sample with torchvision.
struct CropParameters {
  double x = 0, y = 0, width = 0, height = 0;
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params with gpufeed's
// generator: 10 attempts, then the central fallback.
CropParameters RandomResizedCropParameters(int width, int height,
                                           const ImageTransformOptions& options, uint64_t seed,
                                           uint64_t epoch, uint64_t sample_id);
// Resize(round(size / crop_fraction)) + CenterCrop(size), as a source box.
CropParameters CenterCropParameters(int width, int height, const ImageTransformOptions& options);

// Thread CPU nanoseconds spent per stage, summed over calls
// (benchmarks/transform_bench.cc prints them per image). Costs three clock
// reads per image when set.
struct TransformStageTimes {
  uint64_t decode_ns = 0;    // header, crop parameters, region decode
  uint64_t resample_ns = 0;  // both passes of ResampleBilinear (and the flip)
  uint64_t write_ns = 0;     // WriteOutput: layout and dtype
  uint64_t images = 0;
};
struct TransformScratch {
  TransformStageTimes* times = nullptr;  // optional: not owned
  std::unique_ptr<JpegDecoder> jpeg;     // created on the first JPEG
  Image decoded;
  Image horizontal;  // after the horizontal pass
  Image resized;     // size x size, flipped when drawn so
};
// Decodes `data`, applies the transform and writes size x size x 3 values
// of options.dtype at `destination` in options.layout. *parameters
// (optional) gets what was drawn. Reuses `scratch` between calls.
Status TransformImage(const uint8_t* data, size_t size, const ImageTransformOptions& options,
                      uint64_t seed, uint64_t epoch, uint64_t sample_id, void* destination,
                      TransformScratch* scratch, CropParameters* parameters = nullptr);

// The same from already-decoded RGB HWC pixels (raw Caffe Datum records).
Status TransformDecoded(const Image& image, const ImageTransformOptions& options, uint64_t seed,
                        uint64_t epoch, uint64_t sample_id, void* destination,
                        TransformScratch* scratch, CropParameters* parameters = nullptr);

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_TRANSFORM_H_
