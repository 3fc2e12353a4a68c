// The YCbCr -> RGB rows of the DCT-scaled decode (ycc_rgb.h): every SIMD
// path against the scalar row on every (Y, Cb, Cr) triple, at widths that
// leave a scalar tail; and the scalar row against libjpeg's formula worked
// by hand at a few points.
#include "decode/ycc_rgb.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "decode/resample.h"
#include "resample_path_test_util.h"

namespace gpufeed {
namespace {

// Each test forces its path (the fixture restores the one in use).
class YccRgbPathTest : public ResamplePathTest {
 protected:
  void SetUp() override {
    ResamplePathTest::SetUp();
    if (!IsSkipped()) ASSERT_TRUE(SetResamplePathForTesting(GetParam()));
  }
};

TEST_P(YccRgbPathTest, EveryTripleEqualsTheScalarRow) {
  // One row per (Cb, Cr): luma 0..255, then 7 more (a tail of 7 past the
  // 16-pixel steps) so that each row's SIMD part and scalar tail both run.
  constexpr int kWidth = 263;
  std::vector<uint8_t> luma(kWidth), cb(kWidth), cr(kWidth);
  std::vector<uint8_t> got(3 * kWidth + 16), want(3 * kWidth + 16);
  for (int x = 0; x < kWidth; ++x) luma[x] = static_cast<uint8_t>(x % 256);
  for (int u = 0; u < 256; ++u) {
    for (int v = 0; v < 256; ++v) {
      for (int x = 0; x < kWidth; ++x) {
        cb[x] = static_cast<uint8_t>(u);
        cr[x] = static_cast<uint8_t>((v + x / 256) % 256);
      }
      got.assign(got.size(), 0xAB);
      want.assign(want.size(), 0xAB);
      YccToRgbRow(luma.data(), cb.data(), cr.data(), kWidth, got.data());
      ycc_rgb_internal::YccToRgbScalar(luma.data(), cb.data(), cr.data(), kWidth, want.data());
      ASSERT_EQ(got, want) << "Cb " << u << " Cr " << v;  // the bytes past the row untouched too
    }
  }
}

TEST_P(YccRgbPathTest, GrayRowsAtEveryWidthUpTo40) {
  std::vector<uint8_t> luma(40);
  for (int x = 0; x < 40; ++x) luma[x] = static_cast<uint8_t>(x * 53 + 7);
  for (int width = 0; width <= 40; ++width) {
    std::vector<uint8_t> got(3 * 40 + 8, 0xCD), want(3 * 40 + 8, 0xCD);
    GrayToRgbRow(luma.data(), width, got.data());
    ycc_rgb_internal::GrayToRgbScalar(luma.data(), width, want.data());
    ASSERT_EQ(got, want) << "width " << width;
  }
}

TEST_P(YccRgbPathTest, ShortRowsLeaveTheBytesAfterThem) {
  for (int width = 0; width <= 40; ++width) {
    std::vector<uint8_t> luma(40, 200), cb(40, 30), cr(40, 220);
    std::vector<uint8_t> rgb(3 * 40 + 8, 0xEE);
    YccToRgbRow(luma.data(), cb.data(), cr.data(), width, rgb.data());
    for (size_t i = 3 * static_cast<size_t>(width); i < rgb.size(); ++i) {
      ASSERT_EQ(rgb[i], 0xEE) << "width " << width << " byte " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, YccRgbPathTest, kEveryResamplePath, ResamplePathParamName);

// libjpeg's constants are FIX(x) = round(x * 2^16); the row adds 2^15 and
// shifts (floor). Worked by hand from jdcolor.c's formula.
TEST(YccRgbTest, ScalarRowMatchesLibjpegAtTheCorners) {
  const uint8_t luma[4] = {0, 255, 128, 76};
  const uint8_t cb[4] = {0, 255, 128, 85};
  const uint8_t cr[4] = {255, 0, 128, 255};
  uint8_t rgb[12];
  ycc_rgb_internal::YccToRgbScalar(luma, cb, cr, 4, rgb);
  // Y 0, Cb' -128, Cr' 127: R = round(1.402 * 127) = 178; G = 0 + 44.05 - 90.70 -> 0;
  // B = -226.8 -> 0.
  EXPECT_EQ(rgb[0], 178);
  EXPECT_EQ(rgb[1], 0);
  EXPECT_EQ(rgb[2], 0);
  // Y 255, Cb' 127, Cr' -128: R = 255 + floor((91881 * -128 + 32768) / 2^16) = 255 - 179;
  // B saturates.
  EXPECT_EQ(rgb[3], 76);
  EXPECT_EQ(rgb[5], 255);
  // Neutral grey stays grey.
  EXPECT_EQ(rgb[6], 128);
  EXPECT_EQ(rgb[7], 128);
  EXPECT_EQ(rgb[8], 128);
}

}  // namespace
}  // namespace gpufeed
