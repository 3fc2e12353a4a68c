// TIFF decoding: files written here with libtiff's own API (strips and
// tiles, contiguous and separate planes, compressed, reoriented), every crop
// against the same region of the whole-image decode, separate planes
// against contiguous ones, and bad input. Pillow's bytes are checked in
// tests/python/test_tiff.py.
#include "decode/tiff_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "decode/image_decoder.h"
#include "tiff_test_util.h"

namespace gpufeed {
namespace {

using testing::TiffSpec;
using testing::WriteTiff;

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::vector<uint8_t> Random(size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(random());
  return out;
}

Image Decode(const std::string& file, CropRect crop = {}) {
  Image out;
  Status status = decode_internal::DecodeTiff(Bytes(file), file.size(), crop, &out, 1u << 30);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

// Every one of `crops` random crops equals the whole decode's region.
void ExpectCropsEqualTheWhole(const std::string& file, int crops, unsigned seed) {
  ASSERT_FALSE(file.empty());
  int width = 0, height = 0;
  ASSERT_TRUE(decode_internal::ReadTiffSize(Bytes(file), file.size(), &width, &height).ok());
  const Image whole = Decode(file);
  ASSERT_EQ(whole.width, width);
  ASSERT_EQ(whole.height, height);
  std::mt19937 random(seed);
  for (int i = 0; i < crops; ++i) {
    CropRect crop;
    crop.x = static_cast<int>(random() % width);
    crop.y = static_cast<int>(random() % height);
    crop.width = 1 + static_cast<int>(random() % (width - crop.x));
    crop.height = 1 + static_cast<int>(random() % (height - crop.y));
    const Image part = Decode(file, crop);
    ASSERT_EQ(part.width, crop.width);
    ASSERT_EQ(part.height, crop.height);
    for (int y = 0; y < crop.height; ++y) {
      ASSERT_EQ(0, std::memcmp(part.row(y), whole.row(crop.y + y) + 3 * crop.x, 3 * crop.width))
          << "crop " << crop.x << "," << crop.y << " " << crop.width << "x" << crop.height
          << " row " << y;
    }
  }
}

TEST(TiffDecoder, SniffsClassicAndBigTiff) {
  EXPECT_TRUE(decode_internal::LooksLikeTiff(Bytes(std::string("II*\0\x08\0\0\0", 8)), 8));
  EXPECT_TRUE(decode_internal::LooksLikeTiff(Bytes(std::string("MM\0*\0\0\0\x08", 8)), 8));
  EXPECT_TRUE(decode_internal::LooksLikeTiff(Bytes(std::string("II+\0\x08\0\0\0", 8)), 8));
  EXPECT_FALSE(decode_internal::LooksLikeTiff(Bytes(std::string("II*\0", 4)), 4));
  EXPECT_FALSE(decode_internal::LooksLikeTiff(Bytes(std::string("IX*\0\x08\0\0\0", 8)), 8));
}

TEST(TiffDecoder, EveryCropEqualsTheWholeDecodesRegion) {
  const int w = 53, h = 41;
  const auto rgb = Random(size_t{w} * h * 3, 1);
  const auto rgb16 = Random(size_t{w} * h * 6, 2);
  const auto bilevel = Random(size_t{(w + 7) / 8} * h, 3);
  std::vector<uint16_t> colormap(3 * 16);
  for (size_t i = 0; i < colormap.size(); ++i) colormap[i] = static_cast<uint16_t>(i * 1361);
  const auto nibbles = Random(size_t{(w + 1) / 2} * h, 4);
  std::vector<std::pair<TiffSpec, const std::vector<uint8_t>*>> files;
  TiffSpec strips{w, h};
  strips.compression = COMPRESSION_LZW;
  files.push_back({strips, &rgb});
  TiffSpec tiles{w, h, 16, 3};
  tiles.tile = 16;
  tiles.planar = true;
  tiles.compression = COMPRESSION_ADOBE_DEFLATE;
  files.push_back({tiles, &rgb16});
  TiffSpec fax{w, h, 1, 1, PHOTOMETRIC_MINISWHITE};
  fax.compression = COMPRESSION_CCITTFAX4;
  fax.rows_per_strip = 7;
  files.push_back({fax, &bilevel});
  TiffSpec palette{w, h, 4, 1, PHOTOMETRIC_PALETTE};
  palette.tile = 32;
  palette.colormap = colormap;
  files.push_back({palette, &nibbles});
  TiffSpec jpeg{w, h, 8, 3, PHOTOMETRIC_YCBCR};
  jpeg.compression = COMPRESSION_JPEG;
  jpeg.rows_per_strip = 16;
  files.push_back({jpeg, &rgb});
  for (int orientation : {3, 6, 7, 8}) {
    TiffSpec turned = orientation % 2 ? strips : tiles;
    turned.orientation = orientation;
    files.push_back({turned, orientation % 2 ? &rgb : &rgb16});
  }
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectCropsEqualTheWhole(WriteTiff(files[i].first, *files[i].second), 150, 10 + i);
  }
}

TEST(TiffDecoder, SeparatePlanesEqualContiguousSamples) {
  const int w = 37, h = 29;
  for (int bits : {8, 16}) {
    const auto pixels = Random(size_t{w} * h * 4 * bits / 8, bits);
    TiffSpec contiguous{w, h, bits, 4};
    contiguous.extra = {EXTRASAMPLE_ASSOCALPHA};
    TiffSpec planes = contiguous;
    planes.planar = true;
    planes.rows_per_strip = 3;
    TiffSpec tiled_planes = planes;
    tiled_planes.tile = 16;
    tiled_planes.compression = COMPRESSION_LZW;
    const Image want = Decode(WriteTiff(contiguous, pixels));
    EXPECT_EQ(Decode(WriteTiff(planes, pixels)).pixels, want.pixels) << bits;
    EXPECT_EQ(Decode(WriteTiff(tiled_planes, pixels)).pixels, want.pixels) << bits;
  }
}

TEST(TiffDecoder, OrientationSwapsTheSize) {
  TiffSpec spec{30, 20};
  spec.orientation = 6;
  const std::string file = WriteTiff(spec, Random(30 * 20 * 3, 5));
  int width = 0, height = 0;
  ASSERT_TRUE(decode_internal::ReadTiffSize(Bytes(file), file.size(), &width, &height).ok());
  EXPECT_EQ(width, 20);
  EXPECT_EQ(height, 30);
  // Rotated 270 degrees (Pillow's transpose for 6): the stored image's
  // first column, bottom up, is the first row.
  spec.orientation = 1;
  const Image stored = Decode(WriteTiff(spec, Random(30 * 20 * 3, 5)));
  const Image turned = Decode(file);
  for (int x = 0; x < 20; ++x) {
    EXPECT_EQ(0, std::memcmp(turned.row(0) + 3 * x, stored.row(19 - x), 3)) << x;
  }
}

TEST(TiffDecoder, DamageBelowTheCropLeavesTheCropAndTheWholeNamesTheStrip) {
  TiffSpec spec{40, 40};
  spec.rows_per_strip = 8;
  spec.compression = COMPRESSION_LZW;
  const std::string file = WriteTiff(spec, Random(40 * 40 * 3, 6));
  const std::vector<uint64_t> offsets = testing::TiffStripOffsets(file);
  ASSERT_EQ(offsets.size(), 5u);
  std::string damaged = file;
  std::memset(&damaged[offsets[4]], 0xFF, 24);
  const Image whole = Decode(file);
  const Image top = Decode(damaged, {3, 0, 30, 32});
  for (int y = 0; y < 32; ++y) {
    EXPECT_EQ(0, std::memcmp(top.row(y), whole.row(y) + 9, 90)) << y;
  }
  Image out;
  Status status = decode_internal::DecodeTiff(Bytes(damaged), damaged.size(), {}, &out, 1u << 30);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.ToString().find("TIFF strip 4 at byte " + std::to_string(offsets[4]) + ": "),
            std::string::npos)
      << status.ToString();
  // Cut inside the strips: an error, never a crash.
  for (size_t cut : {size_t{9}, offsets[2] + 5, file.size() - 3}) {
    const std::string part = file.substr(0, cut);
    EXPECT_FALSE(decode_internal::DecodeTiff(Bytes(part), part.size(), {}, &out, 1u << 30).ok());
  }
}

TEST(TiffDecoder, RowsBelowTheCropInItsStripAreNotDecompressed) {
  // One LZW strip for the whole image, damaged near its end: a crop of the
  // top rows decompresses only the bytes its rows need, and never meets it.
  TiffSpec spec{40, 40};
  spec.rows_per_strip = 40;
  spec.compression = COMPRESSION_LZW;
  const std::string file = WriteTiff(spec, Random(40 * 40 * 3, 11));
  uint32_t directory = 0;
  std::memcpy(&directory, file.data() + 4, 4);  // little-endian: written here
  ASSERT_EQ(testing::TiffStripOffsets(file).size(), 1u);
  std::string damaged = file;
  std::memset(&damaged[directory - 40], 0xFF, 32);  // the strip ends where the directory starts
  Image out;
  EXPECT_FALSE(
      decode_internal::DecodeTiff(Bytes(damaged), damaged.size(), {}, &out, 1u << 30).ok());
  const Image whole = Decode(file);
  const Image top = Decode(damaged, {0, 0, 40, 10});
  EXPECT_EQ(0, std::memcmp(top.pixels.data(), whole.pixels.data(), 10 * 40 * 3));
}

TEST(TiffDecoder, RefusesImagesOverMaxPixelsBeforeAllocating) {
  TiffSpec spec{64, 64};
  std::string file = WriteTiff(spec, Random(64 * 64 * 3, 7));
  Image out;
  Status status = decode_internal::DecodeTiff(Bytes(file), file.size(), {}, &out, 64 * 63);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.ToString().find("more than the limit"), std::string::npos) << status.ToString();
  EXPECT_TRUE(out.pixels.empty());
}

TEST(TiffDecoder, NamesTheLayoutsItDoesNotDecode) {
  TiffSpec lab{16, 16, 8, 3, PHOTOMETRIC_CIELAB};
  TiffSpec ycbcr_lzw{16, 16, 8, 3, PHOTOMETRIC_YCBCR};
  ycbcr_lzw.compression = COMPRESSION_LZW;
  TiffSpec doubles{16, 16, 64, 1, PHOTOMETRIC_MINISBLACK};
  doubles.sample_format = SAMPLEFORMAT_IEEEFP;
  const std::pair<TiffSpec, const char*> cases[] = {
      {lab, "CIE L*a*b*"}, {ycbcr_lzw, "YCbCr"}, {doubles, "64 bits"}};
  for (const auto& [spec, name] : cases) {
    const std::string file =
        WriteTiff(spec, Random(size_t{16} * 16 * spec.samples * spec.bits / 8, 8));
    ASSERT_FALSE(file.empty()) << name;
    Image out;
    Status status = decode_internal::DecodeTiff(Bytes(file), file.size(), {}, &out, 1u << 30);
    EXPECT_TRUE(status.IsNotSupported()) << name << ": " << status.ToString();
    EXPECT_NE(status.ToString().find(name), std::string::npos) << status.ToString();
  }
  const std::string garbage = std::string("II*\0\xff\xff\xff\x0f", 8) + std::string(64, '\0');
  Image out;
  Status status = decode_internal::DecodeTiff(Bytes(garbage), garbage.size(), {}, &out, 1u << 30);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.ToString().find("TIFF header"), std::string::npos) << status.ToString();
}

TEST(TiffDecoder, GoesThroughTheCodecTable) {
  TiffSpec spec{20, 10};
  const std::string file = WriteTiff(spec, Random(20 * 10 * 3, 9));
  ImageHeader header;
  ASSERT_TRUE(ReadImageHeader(Bytes(file), file.size(), &header).ok());
  EXPECT_EQ(header.format, ImageFormat::kTiff);
  EXPECT_EQ(header.width, 20);
  Image out;
  ASSERT_TRUE(DecodeRegion(Bytes(file), file.size(), {}, 0, 0, &out).ok());
  EXPECT_EQ(out.pixels, Decode(file).pixels);
}

}  // namespace
}  // namespace gpufeed
