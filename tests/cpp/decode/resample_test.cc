// Every resampling path (resample.h) against the scalar reference, byte for
// byte, on random sizes, fractional crop boxes, upscales and downscales,
// mirrored or not; and the output writer's SIMD de-interleave against its
// scalar loop. The scalar path itself is checked against PIL in
// tests/python/test_transforms.py. A path this CPU lacks is skipped with
// the reason.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "decode/output.h"
#include "decode/resample.h"
#include "resample_path_test_util.h"

namespace gpufeed {
namespace {

Image RandomImage(std::mt19937* rng, int width, int height) {
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  // Photographic-ish: a smooth ramp plus noise, with saturated spots, so
  // clipping at 0 and 255 is exercised as well as the middle of the range.
  std::uniform_int_distribution<int> noise(-40, 40), spot(0, 50);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width * 3; ++x) {
      int value = (x * 7 + y * 3) % 256 + noise(*rng);
      if (spot(*rng) == 0) value = (x & 1) ? 0 : 255;
      image.row(y)[x] = static_cast<uint8_t>(value < 0 ? 0 : value > 255 ? 255 : value);
    }
  }
  return image;
}


struct Output {
  Image resized;
  Image horizontal;
};

Output Resample(ResamplePath path, const Image& source, double x0, double y0, double x1,
                double y1, int out_width, int out_height, bool mirror) {
  EXPECT_TRUE(SetResamplePathForTesting(path));
  Output out;
  ResampleBilinear(source, x0, y0, x1, y1, out_width, out_height, &out.resized, &out.horizontal,
                   mirror);
  return out;
}

TEST_P(ResamplePathTest, MatchesScalarOnRandomSizesAndCrops) {
  std::mt19937 rng(1234 + static_cast<int>(GetParam()));
  std::uniform_int_distribution<int> side(1, 520), out_side(1, 300);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int width = side(rng), height = side(rng);
    Image source = RandomImage(&rng, width, height);
    // A fractional box inside the image (RandomResizedCrop's and
    // CenterCrop's boxes are of this kind), sometimes the whole image.
    double x0 = 0, y0 = 0, x1 = width, y1 = height;
    if (trial % 4 != 0) {
      x0 = unit(rng) * width * 0.5;
      y0 = unit(rng) * height * 0.5;
      x1 = x0 + (width - x0) * (0.05 + 0.95 * unit(rng));
      y1 = y0 + (height - y0) * (0.05 + 0.95 * unit(rng));
    }
    const int out_width = trial % 3 == 0 ? 224 : out_side(rng);
    const int out_height = trial % 3 == 0 ? 224 : out_side(rng);
    const bool mirror = trial % 2 == 1;
    Output expected = Resample(ResamplePath::kScalar, source, x0, y0, x1, y1, out_width,
                               out_height, mirror);
    Output actual = Resample(GetParam(), source, x0, y0, x1, y1, out_width, out_height, mirror);
    ASSERT_EQ(expected.resized.width, actual.resized.width);
    ASSERT_EQ(expected.resized.height, actual.resized.height);
    ASSERT_TRUE(expected.resized.pixels == actual.resized.pixels)
        << "trial " << trial << ": " << width << "x" << height << " box (" << x0 << ", " << y0
        << ", " << x1 << ", " << y1 << ") -> " << out_width << "x" << out_height
        << (mirror ? " mirrored" : "");
  }
}

TEST_P(ResamplePathTest, MirrorEqualsFlippedResult) {
  std::mt19937 rng(99);
  Image source = RandomImage(&rng, 333, 250);
  ASSERT_TRUE(SetResamplePathForTesting(GetParam()));
  Output plain = Resample(GetParam(), source, 10.5, 3.25, 300.75, 240, 224, 224, false);
  Output mirrored = Resample(GetParam(), source, 10.5, 3.25, 300.75, 240, 224, 224, true);
  for (int y = 0; y < 224; ++y) {
    for (int x = 0; x < 224; ++x) {
      ASSERT_EQ(0, std::memcmp(plain.resized.row(y) + 3 * x,
                               mirrored.resized.row(y) + 3 * (223 - x), 3))
          << "pixel " << x << ", " << y;
    }
  }
}

TEST_P(ResamplePathTest, Uint8PlanarOutputMatchesScalar) {
  std::mt19937 rng(7);
  for (int size : {1, 15, 16, 17, 224, 299}) {
    Image image = RandomImage(&rng, size, size);
    ImageTransformOptions options;
    options.size = size;
    options.dtype = OutputDtype::kUint8;
    options.layout = OutputLayout::kNCHW;
    std::vector<uint8_t> expected(static_cast<size_t>(size) * size * 3);
    std::vector<uint8_t> actual(expected.size());
    ASSERT_TRUE(SetResamplePathForTesting(ResamplePath::kScalar));
    WriteOutput(image, options, expected.data());
    ASSERT_TRUE(SetResamplePathForTesting(GetParam()));
    WriteOutput(image, options, actual.data());
    ASSERT_TRUE(expected == actual) << "size " << size;
    // And the scalar loop is the plain de-interleave.
    const size_t plane = static_cast<size_t>(size) * size;
    for (size_t at = 0; at < plane; ++at) {
      for (int c = 0; c < 3; ++c) ASSERT_EQ(expected[c * plane + at], image.pixels[3 * at + c]);
    }
  }
}

TEST_P(ResamplePathTest, NormalizedOutputsMatchScalar) {
  std::mt19937 rng(11);
  for (OutputDtype dtype : {OutputDtype::kFloat32, OutputDtype::kFloat16, OutputDtype::kBfloat16}) {
    for (OutputLayout layout : {OutputLayout::kNCHW, OutputLayout::kNHWC}) {
      for (int size : {1, 7, 8, 17, 224}) {
        Image image = RandomImage(&rng, size, size);
        ImageTransformOptions options;
        options.size = size;
        options.dtype = dtype;
        options.layout = layout;
        const size_t bytes = static_cast<size_t>(size) * size * 3 * TensorDtypeSize(dtype);
        std::vector<uint8_t> expected(bytes), actual(bytes, 0xAB);
        ASSERT_TRUE(SetResamplePathForTesting(ResamplePath::kScalar));
        WriteOutput(image, options, expected.data());
        ASSERT_TRUE(SetResamplePathForTesting(GetParam()));
        WriteOutput(image, options, actual.data());
        ASSERT_TRUE(expected == actual) << TensorDtypeName(dtype) << " size " << size
                                        << (layout == OutputLayout::kNCHW ? " NCHW" : " NHWC");
        // And the scalar writer gives the normalize table's entries.
        std::vector<uint8_t> table(768 * TensorDtypeSize(dtype));
        NormalizeTable(options, dtype, table.data());
        const size_t plane = static_cast<size_t>(size) * size, width = TensorDtypeSize(dtype);
        for (size_t at = 0; at < plane; ++at) {
          for (int c = 0; c < 3; ++c) {
            size_t index = layout == OutputLayout::kNCHW ? c * plane + at : at * 3 + c;
            ASSERT_EQ(0, std::memcmp(&expected[index * width],
                                     &table[(c * 256 + image.pixels[3 * at + c]) * width], width));
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, ResamplePathTest, kEveryResamplePath, ResamplePathParamName);

TEST(ResamplePathNames, ParseRoundTrips) {
  for (ResamplePath path : {ResamplePath::kScalar, ResamplePath::kSse41, ResamplePath::kAvx2}) {
    ResamplePath parsed;
    ASSERT_TRUE(ParseResamplePath(ResamplePathName(path), &parsed));
    EXPECT_EQ(path, parsed);
  }
  ResamplePath unused;
  EXPECT_FALSE(ParseResamplePath("neon", &unused));
  EXPECT_TRUE(ResamplePathSupported(ResamplePath::kScalar));
}

}  // namespace
}  // namespace gpufeed
