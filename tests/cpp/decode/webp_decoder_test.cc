// WebP decoding: files encoded here with libwebp's own encoder (lossy with the
// simple and the strong loop filter, lossless, with alpha), every crop against
// the same region of libwebp's whole-image decode, and bad input. Pillow's
// bytes (the RGBA decode with alpha dropped, animations' first frame) are
// checked in tests/python/test_transforms.py.
#include <gtest/gtest.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "decode/image_decoder.h"
#include "webp_test_util.h"

namespace gpufeed {
namespace {

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// A smooth picture with noise (chroma that varies row to row, so that the
// upsampling of a crop's edge rows shows), width x height x channels.
std::vector<uint8_t> Picture(int width, int height, int channels, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<double> noise(0, 14);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const double v =
            128 + 90 * std::sin(x / (5.0 + c) + c) * std::cos(y / (3.0 + c)) + noise(random);
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::min(255.0, std::max(0.0, v)));
      }
    }
  }
  return pixels;
}

// Encodes with libwebp: lossy at `quality` with loop filter `filter_type`
// (0 simple, 1 strong), or lossless when quality < 0.
std::string Encode(const std::vector<uint8_t>& pixels, int width, int height, bool alpha,
                   float quality, int filter_type = 1) {
  WebPConfig config;
  EXPECT_TRUE(WebPConfigInit(&config));
  if (quality < 0) {
    config.lossless = 1;
  } else {
    config.quality = quality;
    config.filter_type = filter_type;
    config.filter_strength = 60;
  }
  WebPPicture picture;
  EXPECT_TRUE(WebPPictureInit(&picture));
  picture.width = width;
  picture.height = height;
  picture.use_argb = 1;
  const int stride = width * (alpha ? 4 : 3);
  EXPECT_TRUE(alpha ? WebPPictureImportRGBA(&picture, pixels.data(), stride)
                    : WebPPictureImportRGB(&picture, pixels.data(), stride));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  EXPECT_TRUE(WebPEncode(&config, &picture)) << picture.error_code;
  std::string out(reinterpret_cast<const char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  WebPPictureFree(&picture);
  return out;
}

// libwebp's decode of the whole image, RGBA with the alpha dropped (Pillow's).
std::vector<uint8_t> Whole(const std::string& file, int* width, int* height) {
  uint8_t* rgba = WebPDecodeRGBA(Bytes(file), file.size(), width, height);
  EXPECT_NE(rgba, nullptr);
  std::vector<uint8_t> rgb(static_cast<size_t>(*width) * *height * 3);
  for (size_t i = 0; i < rgb.size() / 3; ++i) std::memcpy(&rgb[3 * i], rgba + 4 * i, 3);
  WebPFree(rgba);
  return rgb;
}

void ExpectRegion(const std::vector<uint8_t>& whole, int width, const Image& got,
                  const CropRect& crop, const std::string& what) {
  ASSERT_EQ(got.width, crop.width) << what;
  ASSERT_EQ(got.height, crop.height) << what;
  for (int y = 0; y < crop.height; ++y) {
    const uint8_t* expected = whole.data() + (static_cast<size_t>(crop.y + y) * width + crop.x) * 3;
    ASSERT_EQ(std::memcmp(got.row(y), expected, static_cast<size_t>(crop.width) * 3), 0)
        << what << ": row " << y << " of crop (" << crop.x << ", " << crop.y << ", " << crop.width
        << "x" << crop.height << ")";
  }
}

TEST(WebpDecoderTest, EveryCropEqualsTheWholeDecodesRegion) {
  const int w = 45, h = 37;  // odd: chroma rows and columns end half used
  const std::vector<uint8_t> rgb = Picture(w, h, 3, 1), rgba = Picture(w, h, 4, 2);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"lossy q90 strong filter", Encode(rgb, w, h, false, 90, 1)},
      {"lossy q30 simple filter", Encode(rgb, w, h, false, 30, 0)},
      {"lossy q75 with alpha", Encode(rgba, w, h, true, 75, 1)},
      {"lossless", Encode(rgb, w, h, false, -1)},
      {"lossless with alpha", Encode(rgba, w, h, true, -1)}};
  for (const auto& [name, file] : files) {
    ASSERT_EQ(SniffImageFormat(Bytes(file), file.size()), ImageFormat::kWebp) << name;
    ImageHeader header;
    ASSERT_TRUE(ReadImageHeader(Bytes(file), file.size(), &header).ok()) << name;
    EXPECT_EQ(header.width, w);
    EXPECT_EQ(header.height, h);
    int width = 0, height = 0;
    const std::vector<uint8_t> whole = Whole(file, &width, &height);
    // Every first row and every last row of full-width crops, and columns.
    for (int top = 0; top < h; ++top) {
      for (int bottom = top + 1; bottom <= h; ++bottom) {
        const CropRect crop{(top * 7) % 11, top, w - (top * 7) % 11 - bottom % 5, bottom - top};
        Image image;
        Status status = DecodeRegion(Bytes(file), file.size(), crop, 0, 0, &image);
        ASSERT_TRUE(status.ok()) << name << ": " << status.ToString();
        ExpectRegion(whole, width, image, crop, name);
      }
    }
    Image image;
    ASSERT_TRUE(DecodeRegion(Bytes(file), file.size(), {}, 0, 0, &image).ok());
    ExpectRegion(whole, width, image, {0, 0, w, h}, name + ", whole");
  }
}

// Pillow's first frame of an animation: the canvas cleared to transparent
// black (the background colour is not used), the frame drawn at its offset.
TEST(WebpDecoderTest, AnimationGivesItsFirstFrameOnAClearedCanvas) {
  const int fw = 14, fh = 9, cw = 31, ch = 23, fx = 6, fy = 8;
  const std::vector<uint8_t> rgba = Picture(fw, fh, 4, 5);
  const std::string still = Encode(rgba, fw, fh, true, -1);
  const std::string file = WebpAnimation(still.substr(12), fw, fh, cw, ch, fx, fy);
  ASSERT_EQ(SniffImageFormat(Bytes(file), file.size()), ImageFormat::kWebp);
  int width = 0, height = 0;
  const std::vector<uint8_t> frame = Whole(still, &width, &height);
  std::vector<uint8_t> canvas(static_cast<size_t>(cw) * ch * 3, 0);
  for (int y = 0; y < fh; ++y) {
    std::memcpy(&canvas[(static_cast<size_t>(fy + y) * cw + fx) * 3], &frame[y * fw * 3], fw * 3);
  }
  const CropRect crops[] = {{0, 0, cw, ch}, {3, 5, 20, 10}, {fx + 1, fy + 2, 5, 4}};
  for (const CropRect& crop : crops) {
    Image image;
    Status status = DecodeRegion(Bytes(file), file.size(), crop, 0, 0, &image);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ExpectRegion(canvas, cw, image, crop, "animation");
  }
}

TEST(WebpDecoderTest, BadInputIsAnErrorNeverACrash) {
  const std::vector<uint8_t> rgb = Picture(64, 48, 3, 3);
  for (const std::string& file : {Encode(rgb, 64, 48, false, 80), Encode(rgb, 64, 48, false, -1)}) {
    Image image;
    // Cut at every length: an error naming WebP, never a crash.
    for (size_t cut = 0; cut < file.size(); cut += 7) {
      const std::string part = file.substr(0, cut);
      Status status = DecodeRegion(Bytes(part), part.size(), {}, 0, 0, &image);
      ASSERT_FALSE(status.ok()) << cut;
      if (SniffImageFormat(Bytes(part), part.size()) == ImageFormat::kWebp) {
        EXPECT_TRUE(status.IsCorruption()) << cut << ": " << status.ToString();
        EXPECT_NE(status.message().find("WebP"), std::string::npos) << status.ToString();
      }
    }
    // Damaged data after a sound header: an error or an image, never a crash.
    for (size_t at = 40; at < file.size(); at += 13) {
      std::string damaged = file;
      damaged[at] = static_cast<char>(damaged[at] ^ 0x5A);
      (void)DecodeRegion(Bytes(damaged), damaged.size(), {}, 0, 0, &image);
    }
  }
  // A lossless header declaring 16384 x 16384 pixels is refused before any
  // pixel buffer is allocated.
  std::string bomb = Encode(rgb, 64, 48, false, -1);
  ASSERT_EQ(bomb.substr(12, 4), "VP8L");
  const uint32_t dims = 16383u | (16383u << 14);  // width - 1, height - 1
  for (int i = 0; i < 4; ++i) {
    const uint8_t old = static_cast<uint8_t>(bomb[21 + i]);
    const uint8_t keep = i == 3 ? (old & 0xF0) : 0;  // alpha hint and version bits
    bomb[21 + i] = static_cast<char>(keep | ((dims >> (8 * i)) & (i == 3 ? 0x0F : 0xFF)));
  }
  Image image;
  Status status = DecodeRegion(Bytes(bomb), bomb.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("268435456 pixels"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
