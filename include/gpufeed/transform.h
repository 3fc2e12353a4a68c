// One image through the loader's image transform: what a decode thread does
// to a sample (decode, RandomResizedCrop + flip for training or Resize +
// CenterCrop for evaluation, ToTensor + Normalize), for tests that compare
// with torchvision and for users who want to see what the loader does.
//
//   std::vector<uint8_t> out(gpufeed::ImageTransformBytes(options));
//   gpufeed::CropInfo crop;
//   gpufeed::TransformOneImage(jpeg.data(), jpeg.size(), options, seed, epoch, id,
//                              out.data(), &crop);
#ifndef GPUFEED_TRANSFORM_H_
#define GPUFEED_TRANSFORM_H_

#include <cstddef>
#include <cstdint>

#include "gpufeed/export.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

// The crop drawn for a sample, in source pixels.
struct CropInfo {
  double x = 0, y = 0, width = 0, height = 0;
  bool flip = false;
};

// Bytes of one transformed image: size x size x 3 values of options.dtype.
GPUFEED_EXPORT size_t ImageTransformBytes(const ImageTransformOptions& options);

// Decodes `data` (JPEG, PNG, ...), transforms it as the loader would for
// sample `sample_id` of `epoch` with `seed`, and writes
// ImageTransformBytes(options) bytes at `output` in options.layout. Errors
// as the loader's: Corruption for a bad image, InvalidArgument for options.
GPUFEED_EXPORT Status TransformOneImage(const uint8_t* data, size_t size,
                                        const ImageTransformOptions& options, uint64_t seed,
                                        uint64_t epoch, uint64_t sample_id, void* output,
                                        CropInfo* crop = nullptr);

}  // namespace gpufeed

#endif  // GPUFEED_TRANSFORM_H_
