// Image decoding: region and DCT-scaled decodes against full decodes of the
// same real JPEGs (encoded here with libjpeg), PNG (every colour type and
// depth, against PIL's convert("RGB") rules), color spaces, bad input.
#include "decode/image_decoder.h"

#include "jpeg_test_util.h"
#include "png_test_util.h"

#include <gtest/gtest.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace gpufeed {
namespace {

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

Image Decode(const std::string& data, CropRect crop = {}, int min_w = 0, int min_h = 0,
             int* denominator = nullptr) {
  Image image;
  Status status = DecodeRegion(Bytes(data), data.size(), crop, min_w, min_h, &image, denominator);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return image;
}

TEST(ImageDecoderTest, HeaderAndFullDecode) {
  std::string jpeg = EncodeJpeg(500, 375, JCS_RGB);
  ImageHeader header;
  ASSERT_TRUE(ReadImageHeader(Bytes(jpeg), jpeg.size(), &header).ok());
  EXPECT_EQ(header.format, ImageFormat::kJpeg);
  EXPECT_EQ(header.width, 500);
  EXPECT_EQ(header.height, 375);
  Image full = Decode(jpeg);
  EXPECT_EQ(full.width, 500);
  EXPECT_EQ(full.height, 375);
  // Close to the source pixels (quality 90).
  std::vector<uint8_t> source = MakePixels(500, 375, 3, 1);
  double error = 0;
  for (size_t i = 0; i < source.size(); ++i) error += std::abs(source[i] - full.pixels[i]);
  EXPECT_LT(error / source.size(), 6.0);
}

TEST(ImageDecoderTest, RegionDecodeMatchesTheSameRegionOfAFullDecode) {
  std::string jpeg = EncodeJpeg(500, 375, JCS_RGB);
  Image full = Decode(jpeg);
  for (CropRect crop : {CropRect{0, 0, 224, 224}, CropRect{37, 91, 301, 200},
                        CropRect{499, 374, 1, 1}, CropRect{250, 10, 250, 365}}) {
    Image region = Decode(jpeg, crop);
    ASSERT_EQ(region.width, crop.width);
    ASSERT_EQ(region.height, crop.height);
    int worst = 0;
    for (int y = 0; y < crop.height; ++y) {
      for (int x = 0; x < crop.width * 3; ++x) {
        worst = std::max(worst, std::abs(region.row(y)[x] - full.row(crop.y + y)[crop.x * 3 + x]));
      }
    }
    // Chroma upsampling near the cut may differ by a few levels at most.
    EXPECT_LE(worst, 6) << crop.x << "," << crop.y;
  }
}

TEST(ImageDecoderTest, DctScalingPicksTheLargestFactorThatKeepsTheSize) {
  std::string jpeg = EncodeJpeg(640, 480, JCS_RGB);
  int denominator = 0;
  Image quarter = Decode(jpeg, {0, 0, 640, 480}, 150, 110, &denominator);
  EXPECT_EQ(denominator, 4);
  EXPECT_EQ(quarter.width, 160);
  EXPECT_EQ(quarter.height, 120);
  Decode(jpeg, {0, 0, 640, 480}, 224, 224, &denominator);
  EXPECT_EQ(denominator, 2);
  Decode(jpeg, {100, 100, 300, 300}, 224, 224, &denominator);
  EXPECT_EQ(denominator, 1);
  Image eighth = Decode(jpeg, {0, 0, 640, 480}, 16, 16, &denominator);
  EXPECT_EQ(denominator, 8);
  // Scaled pixels approximate a box average of the full decode.
  Image full = Decode(jpeg);
  double error = 0;
  for (int y = 0; y < quarter.height; ++y) {
    for (int x = 0; x < quarter.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int dy = 0; dy < 4; ++dy)
          for (int dx = 0; dx < 4; ++dx) sum += full.row(y * 4 + dy)[(x * 4 + dx) * 3 + c];
        error += std::abs(sum / 16 - quarter.row(y)[x * 3 + c]);
      }
    }
  }
  EXPECT_LT(error / (quarter.width * quarter.height * 3), 4.0);
}

TEST(ImageDecoderTest, GrayscaleAndCmykBecomeRgb) {
  std::string gray = EncodeJpeg(120, 80, JCS_GRAYSCALE);
  Image image = Decode(gray);
  ASSERT_EQ(image.pixels.size(), 120u * 80 * 3);
  for (size_t i = 0; i < image.pixels.size(); i += 3) {
    ASSERT_EQ(image.pixels[i], image.pixels[i + 1]);
    ASSERT_EQ(image.pixels[i], image.pixels[i + 2]);
  }
  std::string cmyk = EncodeJpeg(64, 48, JCS_CMYK);
  image = Decode(cmyk, {8, 8, 16, 16});
  EXPECT_EQ(image.width, 16);
  EXPECT_EQ(image.pixels.size(), 16u * 16 * 3);
}

TEST(ImageDecoderTest, PngCropIsExact) {
  std::vector<uint8_t> pixels = MakePixels(90, 70, 4, 3);  // RGBA
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = 90;
  image.height = 70;
  image.format = PNG_FORMAT_RGBA;
  png_alloc_size_t size = 0;
  ASSERT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::string png(size, '\0');
  ASSERT_TRUE(png_image_write_to_memory(&image, png.data(), &size, 0, pixels.data(), 0, nullptr));
  png.resize(size);
  Image full = Decode(png);
  ASSERT_EQ(full.width, 90);
  Image crop = Decode(png, {10, 20, 30, 40});
  ASSERT_EQ(crop.width, 30);
  ASSERT_EQ(crop.height, 40);
  for (int y = 0; y < 40; ++y) {
    ASSERT_EQ(std::memcmp(crop.row(y), full.row(20 + y) + 30, 90), 0);
  }
}

// What PIL's Image.open(f).convert("RGB") makes of one stored PNG pixel
// (png_decoder.h): an independent statement of the rules, from the samples.
std::array<uint8_t, 3> PilRgb(const PngSpec& spec, const std::vector<uint8_t>& row, int x) {
  const int depth = spec.bit_depth, channels = PngChannels(spec.color_type);
  auto sample = [&](int c) -> int {  // the stored value of channel c
    const size_t index = static_cast<size_t>(x) * channels + c;
    if (depth == 16) return (row[2 * index] << 8) | row[2 * index + 1];
    if (depth == 8) return row[index];
    const size_t bit = index * depth;
    return (row[bit / 8] >> (8 - depth - bit % 8)) & ((1 << depth) - 1);
  };
  auto high = [&](int c) { return static_cast<uint8_t>(depth == 16 ? sample(c) >> 8 : sample(c)); };
  switch (spec.color_type) {
    case PNG_COLOR_TYPE_PALETTE: {
      const int i = sample(0);
      return {static_cast<uint8_t>(i * 37 + 11), static_cast<uint8_t>(255 - i * 53),
              static_cast<uint8_t>(i * 91 + 5)};
    }
    case PNG_COLOR_TYPE_GRAY: {
      int v = sample(0);
      if (depth < 8) v = v * 255 / ((1 << depth) - 1);
      if (depth == 16) v = std::min(v, 255);  // PIL's "I" image clipped
      const uint8_t g = static_cast<uint8_t>(v);
      return {g, g, g};
    }
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return {high(0), high(0), high(0)};
    default:
      return {high(0), high(1), high(2)};
  }
}

TEST(ImageDecoderTest, PngOfEveryColourTypeAndDepthGivesPilsBytes) {
  struct Kind { int type; std::vector<int> depths; };
  const std::vector<Kind> kinds = {{PNG_COLOR_TYPE_GRAY, {1, 2, 4, 8, 16}},
                                   {PNG_COLOR_TYPE_GRAY_ALPHA, {8, 16}},
                                   {PNG_COLOR_TYPE_RGB, {8, 16}},
                                   {PNG_COLOR_TYPE_RGB_ALPHA, {8, 16}},
                                   {PNG_COLOR_TYPE_PALETTE, {1, 2, 4, 8}}};
  uint32_t seed = 0;
  for (const Kind& kind : kinds) {
    for (int depth : kind.depths) {
      for (int variant = 0; variant < 4; ++variant) {
        PngSpec spec;
        spec.width = 37;
        spec.height = 29;
        spec.bit_depth = depth;
        spec.color_type = kind.type;
        spec.interlaced = variant & 1;
        spec.gamma = variant & 2 ? 1.0 : 0;  // a linear gAMA: ignored, as PIL does
        spec.transparency = variant == 3 && !(kind.type & PNG_COLOR_MASK_ALPHA);
        const auto rows = PngRows(spec, ++seed);
        const std::string png = EncodePng(spec, rows);
        ASSERT_FALSE(png.empty());
        const std::string what = "type " + std::to_string(kind.type) + " depth " +
                                 std::to_string(depth) + " variant " + std::to_string(variant);
        Image full = Decode(png);
        ASSERT_EQ(full.width, 37) << what;
        ASSERT_EQ(full.height, 29) << what;
        for (int y = 0; y < 29; ++y) {
          for (int x = 0; x < 37; ++x) {
            const auto want = PilRgb(spec, rows[y], x);
            const uint8_t* got = full.row(y) + 3 * x;
            ASSERT_TRUE(got[0] == want[0] && got[1] == want[1] && got[2] == want[2])
                << what << " pixel " << x << "," << y << ": " << int(got[0]) << " " << int(got[1])
                << " " << int(got[2]) << " against " << int(want[0]) << " " << int(want[1]) << " "
                << int(want[2]);
          }
        }
        Image crop = Decode(png, {5, 7, 20, 11});
        ASSERT_EQ(crop.width, 20) << what;
        for (int y = 0; y < 11; ++y) {
          ASSERT_EQ(std::memcmp(crop.row(y), full.row(7 + y) + 15, 60), 0) << what << " row " << y;
        }
      }
    }
  }
}

TEST(ImageDecoderTest, BadPngNamesTheRow) {
  PngSpec spec;
  spec.width = 64;
  spec.height = 48;
  for (bool interlaced : {false, true}) {
    spec.interlaced = interlaced;
    const std::string png = EncodePng(spec, PngRows(spec, 5));
    ImageHeader header;
    ASSERT_TRUE(ReadImageHeader(Bytes(png), png.size(), &header).ok());
    EXPECT_EQ(header.format, ImageFormat::kPng);
    EXPECT_EQ(header.width, 64);
    const std::string cut = png.substr(0, png.size() / 2);
    Image image;
    Status status = DecodeRegion(Bytes(cut), cut.size(), {}, 0, 0, &image);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.message().find("row"), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.ToString();
    // The header itself cut.
    status = ReadImageHeader(Bytes(png), 20, &header);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  }
}

TEST(ImageDecoderTest, NetpbmGivesPillowsBytes) {
  // P6 at 255: the samples; P5 at maxval 15: v * 17 (round(v / 15 * 255));
  // a PGM of maxval 1000 is Pillow's "I" image: round(v / 1000 * 65535)
  // clipped to 255; P4/P1: 1 is black.
  std::string p6 = "P6\n# comment\n3 2\n255\n";
  for (int i = 0; i < 18; ++i) p6 += static_cast<char>(i * 13);
  std::string p5 = "P5 4 1 15\n";
  for (int v : {0, 1, 14, 15}) p5 += static_cast<char>(v);
  std::string p5_wide = "P5 3 1 1000\n";
  for (int v : {0, 3, 4}) p5_wide += std::string{static_cast<char>(v >> 8), static_cast<char>(v)};
  const std::string p4 = std::string("P4 3 2\n") + '\xA0' + '\x40';
  const std::string p1 = "P1 3 2\n101\n0 1\n#x\n0";
  const std::string p3 = "P3 2 1 15\n1 2 3\n4 5 1#c\n5\n";  // the comment joins "1" and "5"
  struct Case { const std::string* data; std::vector<uint8_t> gray_or_rgb; bool rgb; };
  std::vector<uint8_t> p6_values;
  for (int i = 0; i < 18; ++i) p6_values.push_back(static_cast<uint8_t>(i * 13));
  const Case cases[] = {{&p6, p6_values, true},
                        {&p5, {0, 17, 238, 255}, false},
                        {&p5_wide, {0, 197, 255}, false},
                        {&p4, {0, 255, 0, 255, 0, 255}, false},
                        {&p1, {0, 255, 0, 255, 0, 255}, false},
                        {&p3, {17, 34, 51, 68, 85, 255}, true}};
  for (const Case& c : cases) {
    ImageHeader header;
    ASSERT_TRUE(ReadImageHeader(Bytes(*c.data), c.data->size(), &header).ok()) << *c.data;
    EXPECT_EQ(header.format, ImageFormat::kPnm);
    Image image = Decode(*c.data);
    std::vector<uint8_t> want;
    for (uint8_t v : c.gray_or_rgb) {
      for (int b = 0; b < (c.rgb ? 1 : 3); ++b) want.push_back(v);
    }
    EXPECT_EQ(image.pixels, want) << *c.data;
    EXPECT_EQ(image.width, header.width);
  }
  // A crop of a raw file reads only its rows: the same as the whole's region.
  std::string big = "P6 40 30 255\n";
  for (int i = 0; i < 40 * 30 * 3; ++i) big += static_cast<char>(i * 7 + i / 11);
  Image whole = Decode(big);
  Image crop = Decode(big, {5, 7, 20, 11});
  for (int y = 0; y < 11; ++y) {
    ASSERT_EQ(std::memcmp(crop.row(y), whole.row(7 + y) + 15, 60), 0) << y;
  }
  // Cut after the crop's last row: the crop still decodes, the whole not.
  std::string cut = big.substr(0, 13 + 40 * 3 * 20);
  Image image;
  EXPECT_TRUE(DecodeRegion(Bytes(cut), cut.size(), {5, 7, 20, 11}, 0, 0, &image).ok());
  Status status = DecodeRegion(Bytes(cut), cut.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("at byte 2413"), std::string::npos) << status.ToString();
  // Bad headers and data name the byte.
  for (const char* bad :
       {"P6 4", "P6 4 4 0\n", "P6 4 4 70000\n", "P5 12345678901 2 255\n", "P3 1 1 15\n1 2 16\n",
        "P2 2 1 255\n1 +2\n", "P1 2 1\n02\n", "P6 0 4 255\n"}) {
    status = DecodeRegion(Bytes(bad), std::strlen(bad), {}, 0, 0, &image);
    EXPECT_TRUE(status.IsCorruption()) << bad << ": " << status.ToString();
    EXPECT_NE(status.message().find("at byte"), std::string::npos) << status.ToString();
  }
  // A header over the pixel limit is refused before allocating.
  const std::string bomb = "P5 100000 100000 255\n";
  status = DecodeRegion(Bytes(bomb), bomb.size(), {}, 0, 0, &image);
  EXPECT_NE(status.message().find("10000000000 pixels"), std::string::npos) << status.ToString();
}

// A BMP with a 40-byte header (or 108 with bitfields), rows given top row
// first, stored bottom-up unless top_down.
std::string Bmp(int width, int height, int bits, const std::vector<std::string>& rows,
                const std::string& palette = "", uint32_t compression = 0,
                const std::string& masks = "", bool top_down = false) {
  auto u16 = [](uint32_t v) {
    return std::string{static_cast<char>(v), static_cast<char>(v >> 8)};
  };
  auto u32 = [&](uint32_t v) { return u16(v & 0xFFFF) + u16(v >> 16); };
  const size_t stride = ((static_cast<size_t>(width) * bits + 31) >> 3) & ~size_t{3};
  std::string data;
  for (int i = 0; i < height; ++i) {
    std::string row = rows[top_down ? i : height - 1 - i];
    row.resize(stride, '\0');
    data += row;
  }
  const uint32_t header = masks.size() == 16 ? 108 : 40;
  std::string info = u32(header) + u32(width) + u32(top_down ? -height : height) + u16(1) +
                     u16(bits) + u32(compression) + u32(data.size()) + u32(2835) + u32(2835) +
                     u32(palette.size() / 4) + u32(0);
  if (header == 108) info += masks + std::string(108 - 40 - 16, '\0');
  const std::string after = (header == 40 ? masks : "") + palette;
  const uint32_t offset = 14 + info.size() + after.size();
  return "BM" + u32(offset + data.size()) + u32(0) + u32(offset) + info + after + data;
}

// An RLE-compressed BMP: the stream as it is after a 40-byte header and the palette.
std::string RleBmp(int width, int height, int bits, const std::string& stream,
                   const std::string& palette) {
  std::string file = Bmp(width, height, bits, std::vector<std::string>(height), palette,
                         bits == 4 ? 2 : 1);
  const size_t offset = 14 + 40 + palette.size();
  file = file.substr(0, offset) + stream;
  const uint32_t size = static_cast<uint32_t>(file.size());
  for (int i = 0; i < 4; ++i) file[2 + i] = static_cast<char>(size >> (8 * i));
  return file;
}

TEST(ImageDecoderTest, BmpRleExpandsAsPillowsDecoderDoes) {
  std::string palette;  // index i -> RGB (30i, 20i, 10i); from 3 on Pillow's ramp (i, i, i)
  for (int i = 0; i < 3; ++i) palette += std::string{char(10 * i), char(20 * i), char(30 * i), 0};
  auto rgb = [](std::initializer_list<int> indices) {
    std::vector<uint8_t> out;
    for (int i : indices) {
      for (int c = 0; c < 3; ++c) out.push_back(static_cast<uint8_t>(i < 3 ? (30 - 10 * c) * i : i));
    }
    return out;
  };
  // RLE8, 4x3, stored bottom-up from byte 66: a run; a run cut at the row's
  // end; an end of line on a full row (nothing added); an absolute run of 3
  // (then a pad byte: the file offset is odd); a run; a delta escape (Pillow
  // passes two bytes, then right 1, up 0); a run; an end of line (a zero).
  const std::string rle8("\x03\x05\x02\x07\x00\x00\x00\x03\x01\x02\x03\xEE\x01\x09"
                         "\x00\x02\xAA\xBB\x01\x00\x02\x04\x00\x00",
                         24);
  Image image = Decode(RleBmp(4, 3, 8, rle8, palette));
  std::vector<uint8_t> expected = rgb({0, 4, 4, 0, 1, 2, 3, 9, 5, 5, 5, 7});
  EXPECT_EQ(image.pixels, expected);
  image = Decode(RleBmp(4, 3, 8, rle8, palette), {1, 1, 2, 2});
  EXPECT_EQ(image.pixels, rgb({2, 3, 5, 5}));
  // RLE4, 4x2: a run alternates the nibbles; an absolute run of 3 reads one
  // byte (two indices: Pillow's n / 2), then the pad to an even offset.
  image = Decode(RleBmp(4, 2, 4, std::string("\x03\x12\x00\x03\x34\x50\x00\x00", 8), palette));
  EXPECT_EQ(image.pixels, rgb({4, 0, 0, 0, 1, 2, 1, 3}));
  // An absolute run past the last pixel: the indices past it are ignored.
  image = Decode(RleBmp(2, 1, 8, std::string("\x00\x05\x01\x02\x03\x04\x05\x00", 8), palette));
  EXPECT_EQ(image.pixels, rgb({1, 2}));
  // A 1-bit image RLE-compressed: its indices through the palette too.
  image = Decode(RleBmp(3, 1, 1, std::string("\x02\x01\x01\x07\x00\x01", 6), palette));
  EXPECT_EQ(image.pixels, rgb({1, 1, 7}));
  // An end of bitmap, or of the file, before the last row: Pillow's "not
  // enough image data".
  for (const std::string& stream : {std::string("\x02\x01\x00\x01", 4), rle8.substr(0, 13)}) {
    Status status = DecodeRegion(Bytes(RleBmp(4, 3, 8, stream, palette)), 66 + stream.size(), {},
                                 0, 0, &image);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.message().find("not enough image data"), std::string::npos)
        << status.ToString();
  }
}

TEST(ImageDecoderTest, BmpGivesPillowsBytes) {
  // 24-bit BGR, bottom-up and top-down; a 4-bit palette (an index past it:
  // Pillow's ramp, (i, i, i)); 16-bit 5-6-5 (v * 255 / 31, / 63); 32-bit
  // RGBA bitfields (alpha dropped).
  const std::vector<std::string> bgr = {std::string("\x01\x02\x03\x04\x05\x06", 6),
                                        std::string("\x07\x08\x09\x0A\x0B\x0C", 6)};
  const std::vector<uint8_t> rgb = {3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10};
  for (bool top_down : {false, true}) {
    Image image = Decode(Bmp(2, 2, 24, bgr, "", 0, "", top_down));
    EXPECT_EQ(image.pixels, rgb) << top_down;
  }
  std::string palette;
  for (int i = 0; i < 3; ++i) palette += std::string{char(10 * i), char(20 * i), char(30 * i), 0};
  Image image = Decode(Bmp(3, 1, 4, {std::string("\x12\x90", 2)}, palette));  // 1, 2, 9
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{30, 20, 10, 60, 40, 20, 9, 9, 9}));
  const std::string masks565 = std::string("\x00\xF8\x00\x00\xE0\x07\x00\x00\x1F\x00\x00\x00", 12);
  image = Decode(Bmp(2, 1, 16, {std::string("\xFF\xFF\x21\x08", 4)}, "", 3, masks565));
  // 0x0821: r 1, g 1, b 1 -> 8, 4, 8.
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{255, 255, 255, 8, 4, 8}));
  const std::string rgba = std::string("\xFF\0\0\0\0\xFF\0\0\0\0\xFF\0\0\0\0\xFF", 16);
  image = Decode(Bmp(1, 1, 32, {std::string("\x0A\x14\x1E\x80", 4)}, "", 3, rgba));
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{10, 20, 30}));
  // A crop reads its rows only: the whole's region; a file cut in the rows
  // below a crop of a top-down image still gives the crop.
  std::vector<std::string> rows;
  for (int y = 0; y < 30; ++y) {
    std::string row;
    for (int x = 0; x < 40 * 3; ++x) row += static_cast<char>(x * 7 + y * 13);
    rows.push_back(row);
  }
  const std::string big = Bmp(40, 30, 24, rows, "", 0, "", true);
  Image whole = Decode(big);
  Image crop = Decode(big, {5, 7, 20, 11});
  for (int y = 0; y < 11; ++y) {
    ASSERT_EQ(std::memcmp(crop.row(y), whole.row(7 + y) + 15, 60), 0) << y;
  }
  const std::string cut = big.substr(0, big.size() - 5 * 120);
  EXPECT_TRUE(DecodeRegion(Bytes(cut), cut.size(), {5, 7, 20, 11}, 0, 0, &image).ok());
  Status status = DecodeRegion(Bytes(cut), cut.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("truncated: row 25"), std::string::npos) << status.ToString();
  // Other depths and layouts are corrupt, as is RLE of 24-bit pixels.
  for (const std::string& bad : {Bmp(2, 2, 12, {"abc", "def"}), Bmp(2, 1, 16, {"abcd"}, "", 3,
                                 std::string(12, '\x01')), big.substr(0, 30),
                                 RleBmp(2, 2, 24, "\x02\x01\x00\x00", "")}) {
    status = DecodeRegion(Bytes(bad), bad.size(), {}, 0, 0, &image);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.message().find("at byte"), std::string::npos) << status.ToString();
  }
  // A header over the pixel limit is refused before allocating.
  std::string bomb = Bmp(1, 1, 24, {"abc"});
  bomb[18] = bomb[19] = bomb[22] = bomb[23] = '\0';
  bomb[20] = bomb[24] = '\x01';  // 65536 x 65536
  status = DecodeRegion(Bytes(bomb), bomb.size(), {}, 0, 0, &image);
  EXPECT_NE(status.message().find("4294967296 pixels"), std::string::npos) << status.ToString();
}

TEST(ImageDecoderTest, BadInputIsAnErrorNeverACrash) {
  std::string jpeg = EncodeJpeg(300, 200, JCS_RGB);
  Image image;
  // Truncated in the middle of the entropy-coded data.
  std::string truncated = jpeg.substr(0, jpeg.size() / 2);
  Status status = DecodeRegion(Bytes(truncated), truncated.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.ToString();
  // Garbage after a JPEG signature.
  std::string garbage = "\xFF\xD8\xFF" + std::string(100, '\x42');
  status = DecodeRegion(Bytes(garbage), garbage.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  // Not an image.
  status = DecodeRegion(Bytes(std::string("hello")), 5, {}, 0, 0, &image);
  EXPECT_TRUE(status.IsNotSupported());
  // A header declaring 60000 x 60000 pixels is refused before allocating.
  std::string bomb = jpeg;
  size_t sof = bomb.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  bomb[sof + 5] = static_cast<char>(0xEA);  // height 0xEA60 = 60000
  bomb[sof + 6] = static_cast<char>(0x60);
  bomb[sof + 7] = static_cast<char>(0xEA);  // width 60000
  bomb[sof + 8] = static_cast<char>(0x60);
  status = DecodeRegion(Bytes(bomb), bomb.size(), {}, 0, 0, &image);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("3600000000 pixels"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
