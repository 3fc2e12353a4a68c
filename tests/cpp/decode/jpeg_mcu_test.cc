// The exact decode with gpufeed's entropy decoder inside libjpeg
// (jpeg_mcu.h) against the same decode with libjpeg's own: the same status,
// geometry and pixels, byte for byte, for every sampling, restart markers,
// optimized and crossed tables, long codes, crops and DCT scales; damaged
// and truncated files decode (or fail) exactly as with libjpeg alone.
#include "decode/jpeg_mcu.h"
#include "decode/image_decoder.h"
#include "decode/jpeg_decoder.h"

#include "jpeg_compare_util.h"
#include "jpeg_encodings_util.h"
#include "jpeg_test_util.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace gpufeed {
namespace {

// Both ways agree: status, geometry, pixels. Returns whether gpufeed's
// decoder was used to the end.
bool ExpectSameAsLibjpeg(const std::string& jpeg, const CropRect& crop, int min_w, int min_h,
                         bool with_columns, const std::string& what) {
  JpegDecoder own_decoder, libjpeg_decoder;
  const RegionDecode own = DecodeRegionWith(&own_decoder, Bytes(jpeg), jpeg.size(), crop, min_w,
                                            min_h, 1ull << 32, true, with_columns);
  const RegionDecode reference = DecodeRegionWith(&libjpeg_decoder, Bytes(jpeg), jpeg.size(),
                                                  crop, min_w, min_h, 1ull << 32, false,
                                                  with_columns);
  EXPECT_FALSE(reference.own_used) << what;
  EXPECT_EQ(own.status.ok(), reference.status.ok())
      << what << ": " << own.status.ToString() << " / " << reference.status.ToString();
  EXPECT_EQ(own.status.ToString(), reference.status.ToString()) << what;
  if (!own.status.ok() || !reference.status.ok()) return own.own_used;
  EXPECT_EQ(own.image.width, reference.image.width) << what;
  EXPECT_EQ(own.image.height, reference.image.height) << what;
  EXPECT_EQ(own.denominator, reference.denominator) << what;
  EXPECT_EQ(own.columns.skipped, reference.columns.skipped) << what;
  EXPECT_EQ(own.columns.width, reference.columns.width) << what;
  EXPECT_TRUE(own.image.pixels == reference.image.pixels) << what;
  return own.own_used;
}

// Crops of a w x h image: the whole, corners, the middle, one pixel, thin
// strips at the right and bottom edges, a random one.
std::vector<CropRect> Crops(int w, int h, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<CropRect> crops = {{0, 0, w, h},
                                 {0, 0, (w + 1) / 2, (h + 1) / 2},
                                 {w / 3, h / 3, std::max(1, w / 3), std::max(1, h / 3)},
                                 {w - 1, h - 1, 1, 1},
                                 {w - std::min(w, 9), 0, std::min(w, 9), h},
                                 {0, h - std::min(h, 5), w, std::min(h, 5)}};
  const int cw = 1 + static_cast<int>(g() % w), ch = 1 + static_cast<int>(g() % h);
  crops.push_back({static_cast<int>(g() % (w - cw + 1)), static_cast<int>(g() % (h - ch + 1)), cw,
                   ch});
  return crops;
}

TEST(JpegMcuTest, PixelsEqualLibjpegsForEveryEncodingCropAndScale) {
  std::vector<Encoding> encodings = Encodings();
  Encoding wide;  // many MCUs per row: columns outside the crop are read past
  wide.width = 301, wide.height = 77, wide.restart_interval = 7;
  encodings.push_back(wide);
  Encoding progressive;  // never hooked: libjpeg's decoder, the same result
  progressive.progressive = true;
  encodings.push_back(progressive);
  int hooked = 0, decodes = 0;
  for (const Encoding& e : encodings) {
    const std::string jpeg = Encode(e);
    for (const CropRect& crop : Crops(e.width, e.height, e.seed)) {
      // min sizes: none (full scale), then half, a quarter and an eighth of
      // the crop (DCT scales 1/2, 1/4, 1/8 where the crop allows).
      for (int divisor : {0, 2, 4, 8}) {
        const int min_w = divisor ? std::max(1, crop.width / divisor) : 0;
        const int min_h = divisor ? std::max(1, crop.height / divisor) : 0;
        for (bool with_columns : {true, false}) {
          const std::string what = Describe(e) + " crop " + std::to_string(crop.x) + "," +
                                   std::to_string(crop.y) + " " + std::to_string(crop.width) +
                                   "x" + std::to_string(crop.height) + " min " +
                                   std::to_string(min_w) + (with_columns ? " columns" : "");
          hooked += ExpectSameAsLibjpeg(jpeg, crop, min_w, min_h, with_columns, what);
          ++decodes;
        }
      }
    }
  }
  // Every baseline encoding takes gpufeed's decoder; the progressive one not.
  const int per_encoding = decodes / static_cast<int>(encodings.size());
  EXPECT_EQ(hooked, decodes - per_encoding);
}

// Truncated files and damaged entropy-coded bytes: whatever libjpeg alone
// does (an error, or pixels from the damaged data), the decode with
// gpufeed's decoder does too.
TEST(JpegMcuTest, DamagedAndTruncatedFilesDecodeAsWithLibjpeg) {
  std::mt19937 g(5);
  for (const Encoding& e : Encodings()) {
    const std::string jpeg = Encode(e);
    const size_t scan = jpeg.rfind("\xFF\xDA");  // the data starts after the SOS segment
    ASSERT_NE(scan, std::string::npos);
    for (int trial = 0; trial < 12; ++trial) {
      std::string damaged = jpeg;
      if (trial < 4) {
        damaged.resize(scan + 12 + g() % (jpeg.size() - scan - 12));  // cut in the data
      } else {
        for (int flips = 1 + static_cast<int>(g() % 3); flips > 0; --flips) {
          const size_t at = scan + 12 + g() % (jpeg.size() - scan - 14);
          damaged[at] = static_cast<char>(damaged[at] ^ (1 << (g() % 8)));
        }
      }
      for (const CropRect& crop : {CropRect{0, 0, e.width, e.height},
                                   CropRect{e.width / 4, e.height / 2, e.width / 2,
                                            e.height / 2}}) {
        ExpectSameAsLibjpeg(damaged, crop, 0, 0, true,
                            Describe(e) + " trial " + std::to_string(trial));
      }
    }
  }
}

// A file cut anywhere in its data, decoded for a crop that ends above the
// cut or just before it: libjpeg's read-ahead meets the file's end a few
// bytes past the bits it uses and it warns (an error here), or it does not;
// gpufeed's decoder must answer the same either way.
TEST(JpegMcuTest, ACutJustPastACropsDataFailsAsWithLibjpeg) {
  for (int restart : {0, 1}) {
    Encoding e;
    e.width = 64, e.height = 96, e.restart_interval = restart;
    const std::string jpeg = Encode(e);
    const size_t scan = jpeg.rfind("\xFF\xDA");
    ASSERT_NE(scan, std::string::npos);
    for (size_t cut = scan + 14; cut < jpeg.size(); ++cut) {
      // Also followed by fill bytes: libjpeg's read-ahead passes a run of
      // 0xFF as one byte, and meets the end all the same.
      for (const std::string& tail : {std::string(), std::string(16, '\xFF')}) {
        const std::string damaged = jpeg.substr(0, cut) + tail;
        for (const CropRect& crop : {CropRect{0, 0, 64, 8}, CropRect{0, 0, 64, 16},
                                     CropRect{8, 16, 24, 20}, CropRect{0, 0, 64, 32},
                                     CropRect{0, 0, 64, 48}}) {
          ExpectSameAsLibjpeg(damaged, crop, 0, 0, true,
                              "cut at " + std::to_string(cut) + " ri " + std::to_string(restart) +
                                  " tail " + std::to_string(tail.size()));
        }
      }
    }
  }
}

// A restart interval libjpeg needs nothing of (rows above the crop, columns
// beside it) is not read by gpufeed's decoder: damage there leaves the
// decode on gpufeed's decoder to the end, with libjpeg's pixels. Damage in
// an interval the crop needs sends the image back to libjpeg, as before.
TEST(JpegMcuTest, IntervalsLibjpegDoesNotNeedAreNotRead) {
  Encoding e;
  e.width = 160, e.height = 96, e.restart_interval = 2;  // 10 x 6 MCUs of 16 x 16
  const std::string jpeg = Encode(e);
  const auto intervals = Intervals(jpeg, jpeg.rfind("\xFF\xDA") + 14);  // after the SOS segment
  ASSERT_EQ(intervals.size(), 30u);
  const CropRect crop{64, 48, 48, 16};  // MCU row 3, columns 4-6
  EXPECT_TRUE(ExpectSameAsLibjpeg(jpeg, crop, 0, 0, true, "sound"));
  auto damage = [&](int interval) {
    std::string damaged = jpeg;
    for (size_t at = intervals[interval].first; at < intervals[interval].second; ++at) {
      damaged[at] = static_cast<char>(0x5A);
    }
    return damaged;
  };
  // Rows 0 and 1; row 3's columns 0-1 and 8-9.
  for (int unneeded : {0, 4, 5, 15, 19}) {
    EXPECT_TRUE(ExpectSameAsLibjpeg(damage(unneeded), crop, 0, 0, true,
                                    "interval " + std::to_string(unneeded)))
        << "interval " << unneeded << " was read";
  }
  // Row 3's columns 4-5: the crop's.
  EXPECT_FALSE(ExpectSameAsLibjpeg(damage(17), crop, 0, 0, true, "interval 17"));
}

// The JPEG without its header segments of marker `code` (before the first
// SOS; the rest as it is).
std::string WithoutSegments(const std::string& jpeg, int code) {
  std::string out = jpeg.substr(0, 2);
  size_t at = 2;
  while (at + 4 <= jpeg.size() && static_cast<uint8_t>(jpeg[at + 1]) != 0xDA) {
    const size_t length = (static_cast<uint8_t>(jpeg[at + 2]) << 8) |
                          static_cast<uint8_t>(jpeg[at + 3]);
    if (static_cast<uint8_t>(jpeg[at + 1]) != code) out += jpeg.substr(at, 2 + length);
    at += 2 + length;
  }
  return out + jpeg.substr(at);
}

// libjpeg keeps the tables a file defines for the next file read through
// the same decompressor. A decoder that served another image first must
// still decode a file as it decodes alone: without its DQT it fails (not:
// decodes with the last image's quantization), without its DHT it takes
// libjpeg's standard tables (not: the last image's fitted ones).
TEST(JpegMcuTest, AFileDecodesAsAloneWhateverTheDecoderReadBefore) {
  Encoding fitted;
  fitted.optimize = true, fitted.quality = 60, fitted.noise = 40, fitted.seed = 3;
  const std::string before = Encode(fitted);
  const std::string jpeg = Encode(Encoding());  // libjpeg's standard Huffman tables
  const CropRect whole{0, 0, 1 << 20, 1 << 20};
  for (int code : {0xDB, 0xC4}) {
    const std::string lacking = WithoutSegments(jpeg, code);
    ASSERT_LT(lacking.size(), jpeg.size());
    for (bool own : {false, true}) {
      JpegDecoder fresh, reused;
      const RegionDecode alone = DecodeRegionWith(&fresh, Bytes(lacking), lacking.size(), whole,
                                                  0, 0, 1ull << 32, own, false);
      EXPECT_EQ(alone.status.ok(), code == 0xC4) << alone.status.ToString();
      ASSERT_TRUE(DecodeRegionWith(&reused, Bytes(before), before.size(), whole, 0, 0,
                                   1ull << 32, own, false)
                      .status.ok());
      const RegionDecode after = DecodeRegionWith(&reused, Bytes(lacking), lacking.size(), whole,
                                                  0, 0, 1ull << 32, own, false);
      EXPECT_TRUE(SameDecode(after, alone))
          << "marker " << code << " own " << own << ": " << after.status.ToString() << " / "
          << alone.status.ToString();
    }
  }
}

// A fill byte before a stuffed zero (0xFF 0xFF 0x00; no encoder writes
// one): libjpeg's fast path reads a marker there, its slow path a data byte
// 0xFF, and which runs depends on how much data is left. gpufeed's decoder
// leaves such a file to libjpeg.
TEST(JpegMcuTest, AFillByteBeforeAStuffedZeroDecodesAsWithLibjpeg) {
  Encoding e;
  e.width = 256, e.height = 192, e.noise = 60, e.quality = 95;
  const std::string jpeg = Encode(e);
  const size_t scan = jpeg.rfind("\xFF\xDA") + 14;
  int tried = 0;
  for (size_t at = jpeg.find("\xFF\x00", scan, 2); at != std::string::npos && tried < 24;
       at = jpeg.find("\xFF\x00", at + 2, 2), ++tried) {
    std::string damaged = jpeg;
    damaged.insert(at, 1, '\xFF');
    for (const CropRect& crop : {CropRect{0, 0, 256, 192}, CropRect{100, 20, 130, 37}}) {
      ExpectSameAsLibjpeg(damaged, crop, 0, 0, true, "0xFF inserted at " + std::to_string(at));
    }
  }
  EXPECT_GE(tried, 8);
}

// A restart marker out of sequence makes gpufeed's decoder give up midway
// (libjpeg resynchronizes with a warning): the image is decoded again with
// libjpeg's, and the decoder takes the next image with its own again.
TEST(JpegMcuTest, AGivenUpDecodeIsLibjpegsAndTheNextImageIsHooked) {
  Encoding e;
  e.width = 96, e.height = 64, e.restart_interval = 2;
  const std::string jpeg = Encode(e);
  std::string swapped = jpeg;
  const size_t first = swapped.find("\xFF\xD0", swapped.rfind("\xFF\xDA"));
  const size_t second = swapped.find("\xFF\xD1", first);
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  std::swap(swapped[first + 1], swapped[second + 1]);  // RST1 before RST0
  const CropRect whole{0, 0, e.width, e.height};
  EXPECT_FALSE(ExpectSameAsLibjpeg(swapped, whole, 0, 0, true, "swapped restart markers"));
  JpegDecoder decoder;
  const RegionDecode given_up = DecodeRegionWith(&decoder, Bytes(swapped), swapped.size(), whole,
                                                 0, 0, 1ull << 32, true, true);
  EXPECT_FALSE(given_up.own_used);
  const RegionDecode next = DecodeRegionWith(&decoder, Bytes(jpeg), jpeg.size(), whole, 0, 0,
                                             1ull << 32, true, true);
  ASSERT_TRUE(next.status.ok()) << next.status.ToString();
  EXPECT_TRUE(next.own_used);
  EXPECT_TRUE(ExpectSameAsLibjpeg(jpeg, whole, 0, 0, true, "intact"));
}

// Hand-made grayscale streams with random tables (long codes, runs that
// pass the block's end, size-0 symbols that end a block) and restart
// markers: the pixels libjpeg makes of them, through either decoder.
TEST(JpegMcuTest, RandomTablesAndStreamsGiveLibjpegsPixels) {
  int hooked = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 g(seed);
    std::vector<int> symbols = {0x00, 0xF0};
    for (int i = 2 + static_cast<int>(g() % 20); i > 0; --i) {
      symbols.push_back(static_cast<int>(g() % 16) << 4 | (1 + static_cast<int>(g() % 10)));
    }
    std::sort(symbols.begin(), symbols.end());
    symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
    std::shuffle(symbols.begin(), symbols.end(), g);
    // Lengths: two codes of each length from 2 on while they fit, the rest
    // at 16 bits (long codes: past the lookup tables).
    std::vector<int> counts(17, 0);
    int left = static_cast<int>(symbols.size());
    for (int length = 2; length <= 8 && left > 0; ++length) {
      counts[length] = std::min(left, 1);
      left -= counts[length];
    }
    counts[16] = left;
    std::vector<std::pair<uint32_t, int>> code_of(256);
    for (int length = 1, index = 0, code = 0; length <= 16; ++length, code <<= 1) {
      for (int i = 0; i < counts[length]; ++i) code_of[symbols[index++]] = {code++, length};
    }
    const int w = 8 * (1 + static_cast<int>(g() % 12)), h = 8 * (1 + static_cast<int>(g() % 6));
    const int restart = g() % 2 ? 1 + static_cast<int>(g() % 5) : 0;
    BitWriter bits;
    for (int block = 0, marker = 0; block < (w / 8) * (h / 8); ++block) {
      PutMarkerAndRandomDc(&g, block, restart, &marker, &bits);
      for (int k = 1; k < 64;) {  // runs may pass 63, as a damaged stream's do
        const int symbol = g() % 8 == 0 ? 0x00 : symbols[g() % symbols.size()];
        bits.Put(code_of[symbol].first, code_of[symbol].second);
        const int run = symbol >> 4, size = symbol & 15;
        if (size == 0 && run != 15) break;
        if (size > 0) bits.Put(g() & ((1u << size) - 1), size);
        k += run + 1;
      }
    }
    std::vector<int> dc_counts(17, 0);
    dc_counts[1] = dc_counts[2] = dc_counts[3] = 1;
    bits.Align();
    const std::string jpeg = CraftGrayWithTables(w, h, dc_counts, {0, 1, 2}, counts, symbols,
                                                 restart, bits.Finish());
    for (const CropRect& crop : Crops(w, h, seed)) {
      hooked += ExpectSameAsLibjpeg(jpeg, crop, 0, 0, true, "seed " + std::to_string(seed));
    }
  }
  EXPECT_GT(hooked, 0);
}

}  // namespace
}  // namespace gpufeed
