// TransformImage (region decode + resample) against TransformDecoded on a
// full-resolution decode of the same JPEG: with exact (the default) the bytes
// are the same at every size, as PIL resamples the full decode; exact=false
// takes the DCT-scaled path only when the crop is at least twice the output,
// and stays close to the exact output.
#include "decode/transform.h"
#include "gpufeed/transform.h"  // ImageTransformBytes

#include "jpeg_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace gpufeed {
namespace {

struct Outputs {
  std::vector<uint8_t> region, full;
  CropParameters crop;
};

Outputs Both(const std::string& jpeg, const Image& decoded, const ImageTransformOptions& options,
             uint64_t sample) {
  Outputs out;
  out.region.resize(ImageTransformBytes(options));
  out.full.resize(ImageTransformBytes(options));
  TransformScratch scratch, full_scratch;
  const auto* data = reinterpret_cast<const uint8_t*>(jpeg.data());
  EXPECT_TRUE(TransformImage(data, jpeg.size(), options, 3, 0, sample, out.region.data(), &scratch,
                             &out.crop)
                  .ok());
  EXPECT_TRUE(
      TransformDecoded(decoded, options, 3, 0, sample, out.full.data(), &full_scratch).ok());
  return out;
}

ImageTransformOptions Uint8(bool train) {
  ImageTransformOptions options;
  options.train = train;
  options.dtype = OutputDtype::kUint8;
  options.layout = OutputLayout::kNHWC;
  return options;
}

double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return sum == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 * a.size() / sum);
}

TEST(TransformExactTest, ExactIsTheDefault) { EXPECT_TRUE(ImageTransformOptions().exact); }

// 1 to 14 megapixels, 4:2:0 and progressive: every train crop (large ones
// included, up to 13x the output) and the eval crop equal the full decode's.
TEST(TransformExactTest, RegionDecodeIsBitIdenticalToAFullDecodeAtEverySize) {
  struct Size {
    int width, height;
    bool progressive;
  };
  for (const Size& size : {Size{1280, 800, false}, Size{2560, 1600, true},
                           Size{4608, 3072, false}}) {
    std::string jpeg = EncodeJpeg(size.width, size.height, JCS_RGB, 90, 5, size.progressive);
    Image decoded;
    ASSERT_TRUE(DecodeRegion(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), {}, 0, 0,
                             &decoded)
                    .ok());
    int large_crops = 0;  // >= 2x the output: what exact=false would DCT-scale
    for (uint64_t sample = 0; sample < 12; ++sample) {
      const bool train = sample != 0;
      Outputs out = Both(jpeg, decoded, Uint8(train), sample);
      large_crops += out.crop.width >= 2 * 224 && out.crop.height >= 2 * 224;
      ASSERT_EQ(out.region, out.full) << size.width << "x" << size.height << " sample " << sample
                                      << " crop " << out.crop.width << "x" << out.crop.height;
    }
    EXPECT_GT(large_crops, 0) << size.width << "x" << size.height;
  }
}

TEST(TransformExactTest, FastPathScalesLargeCropsOnlyAndStaysClose) {
  std::string jpeg = EncodeJpeg(3000, 2000, JCS_RGB, 90, 9);
  Image decoded;
  ASSERT_TRUE(
      DecodeRegion(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), {}, 0, 0, &decoded)
          .ok());
  int scaled = 0;
  for (uint64_t sample = 0; sample < 12; ++sample) {
    ImageTransformOptions options = Uint8(sample != 0);
    options.exact = false;
    Outputs out = Both(jpeg, decoded, options, sample);
    if (out.crop.width < 2 * 224 || out.crop.height < 2 * 224) {
      EXPECT_EQ(out.region, out.full) << "sample " << sample << ": a small crop is not scaled";
      continue;
    }
    ++scaled;
    EXPECT_NE(out.region, out.full) << "sample " << sample << ": a large crop is DCT-scaled";
    EXPECT_GT(Psnr(out.region, out.full), 35.0) << "sample " << sample;
  }
  EXPECT_GT(scaled, 0);
  // A small image: no crop reaches twice the output, exact or not.
  std::string small = EncodeJpeg(400, 300, JCS_RGB, 90, 2);
  Image small_decoded;
  ASSERT_TRUE(DecodeRegion(reinterpret_cast<const uint8_t*>(small.data()), small.size(), {}, 0, 0,
                           &small_decoded)
                  .ok());
  ImageTransformOptions options = Uint8(false);
  options.exact = false;
  Outputs out = Both(small, small_decoded, options, 0);
  EXPECT_EQ(out.region, out.full);
}

}  // namespace
}  // namespace gpufeed
