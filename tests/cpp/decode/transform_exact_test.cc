// TransformImage (region decode + resample) against TransformDecoded on a
// full-resolution decode of the same JPEG: with exact (the default) the bytes
// are the same at every size, as PIL resamples the full decode; exact=false
// takes the DCT-scaled path only when the crop is at least twice the output,
// and stays close to the exact output.
#include "decode/transform.h"
#include "gpufeed/transform.h"  // ImageTransformBytes

#include "jpeg_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// exact=False decodes the crop's region (with a margin) at the DCT scale;
// the scaled pixels of a block depend on that block only, so the output must
// equal a resample of the same box from the whole image decoded at that
// scale: a margin too small for the filter's reach (the edge of the region
// standing in for the edge of the image) shows here.
TEST(TransformExactTest, FastPathRegionEqualsTheWholeImageAtItsScale) {
  for (const bool progressive : {false, true}) {
    std::string jpeg = EncodeJpeg(3000, 2000, JCS_RGB, 90, 4, progressive);
    const auto* data = reinterpret_cast<const uint8_t*>(jpeg.data());
    int compared = 0;
    for (uint64_t sample = 0; sample < 40; ++sample) {
      ImageTransformOptions options = Uint8(sample != 0);
      options.exact = false;
      std::vector<uint8_t> fast(ImageTransformBytes(options));
      TransformScratch scratch;
      CropParameters crop;
      ASSERT_TRUE(
          TransformImage(data, jpeg.size(), options, 5, 0, sample, fast.data(), &scratch, &crop)
              .ok());
      // The scale the transform picks: the largest keeping the crop at the
      // output size. Crops within a pixel of a step are left out (the
      // region's rounding may pick the next scale there).
      int scale = 1;
      while (scale < 8 && crop.width / (2 * scale) >= options.size + 1 &&
             crop.height / (2 * scale) >= options.size + 1) {
        scale *= 2;
      }
      if (scale == 1 || (scale < 8 && (crop.width / (2 * scale) >= options.size - 1 &&
                                       crop.height / (2 * scale) >= options.size - 1))) {
        continue;
      }
      JpegDecoder decoder;
      ImageHeader header;
      ASSERT_TRUE(decoder.Start(data, jpeg.size(), &header).ok());
      Image whole;
      int denominator = 0;
      DecodedColumns columns;
      ASSERT_TRUE(decoder
                      .DecodeRegion({0, 0, header.width, header.height}, header.width / scale,
                                    header.height / scale, &whole, &denominator, 1u << 30,
                                    &columns, /*approximate=*/true)
                      .ok());
      ASSERT_EQ(denominator, scale);
      Image resized, horizontal;
      ResampleBilinear(whole, crop.x / scale, crop.y / scale,
                       std::min((crop.x + crop.width) / scale, 1.0 * whole.width),
                       std::min((crop.y + crop.height) / scale, 1.0 * whole.height),
                       options.size, options.size, &resized, &horizontal, crop.flip);
      ASSERT_EQ(fast, resized.pixels) << (progressive ? "progressive" : "baseline") << " sample "
                                      << sample << " crop " << crop.width << "x" << crop.height
                                      << " at 1/" << scale;
      ++compared;
    }
    EXPECT_GT(compared, 10) << (progressive ? "progressive" : "baseline");
  }
}

}  // namespace
}  // namespace gpufeed
