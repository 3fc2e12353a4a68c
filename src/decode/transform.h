// Image transforms of the decode pool, torchvision's semantics:
//
//   train:  RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p=0.5)
//   eval:   Resize(shorter side = round(size / 0.875)) + CenterCrop(size)
//   then:   ToTensor (x / 255) + Normalize(mean, std), or uint8 as is,
//           written as NCHW or NHWC, float32 / float16 / bfloat16 / uint8.
//
// Random parameters come from (seed, epoch, sample id) only, so a sample's
// output does not depend on thread count or timing. The crop is decoded as
// a region (DCT-scaled when much larger than the output, image_decoder.h)
// and resampled with PIL's antialiased bilinear filter over the exact,
// fractional source box.
#ifndef GPUFEED_DECODE_TRANSFORM_H_
#define GPUFEED_DECODE_TRANSFORM_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
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

// Decodes `data`, applies the transform and writes size x size x 3 values
// of options.dtype at `destination` in options.layout. *parameters
// (optional) gets what was drawn. Reuses `scratch` between calls.
struct TransformScratch {
  Image decoded;
  Image horizontal;  // after the horizontal pass
  Image resized;     // size x size
};
Status TransformImage(const uint8_t* data, size_t size, const ImageTransformOptions& options,
                      uint64_t seed, uint64_t epoch, uint64_t sample_id, void* destination,
                      TransformScratch* scratch, CropParameters* parameters = nullptr);

// The same from already-decoded RGB HWC pixels (raw Caffe Datum records).
Status TransformDecoded(const Image& image, const ImageTransformOptions& options, uint64_t seed,
                        uint64_t epoch, uint64_t sample_id, void* destination,
                        TransformScratch* scratch, CropParameters* parameters = nullptr);

// The 3 x 256 output values of ToTensor + Normalize for `dtype` (float32,
// or float16/bfloat16 bits), channel-major: what the CPU path writes for
// value v of channel c is table[c * 256 + v]. The GPU normalize kernel
// gathers from the same table, so both paths agree bit for bit.
// `table` holds 768 elements of TensorDtypeSize(dtype) bytes.
void NormalizeTable(const ImageTransformOptions& options, OutputDtype dtype, void* table);

// PIL's Image.resize(size, BILINEAR, box) for 8-bit RGB: antialiased (the
// filter widens when downscaling), horizontal pass then vertical pass, 22-bit
// fixed-point weights, rounding to uint8 after each pass, as
// libImaging/Resample.c does, so outputs match PIL's bit for bit.
void ResampleBilinear(const Image& source, double box_x0, double box_y0, double box_x1,
                      double box_y1, int out_width, int out_height, Image* output,
                      Image* horizontal);

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_TRANSFORM_H_
