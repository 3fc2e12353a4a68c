// RewriteProgressiveJpegAsBaseline and RewriteJpegWithRestarts
// (include/gpufeed/writer.h): progressive JPEGs of every sampling libjpeg
// writes become baseline ones, and with restart markers any JPEG, that
// decode to the same pixels, byte for byte (with libjpeg's entropy decoder
// and with gpufeed's, whole and cropped, exactly and DCT-scaled); their
// markers are kept; anything else is left as it is.
#include "gpufeed/writer.h"
#include "decode/jpeg_decoder.h"

#include "jpeg_compare_util.h"
#include "jpeg_encodings_util.h"
#include "jpeg_test_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpufeed {
namespace {

// Whether the JPEG is progressive, and its restart interval in MCUs.
bool IsProgressive(const std::string& jpeg, unsigned* restart_interval = nullptr) {
  jpeg_decompress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, Bytes(jpeg), jpeg.size());
  jpeg_read_header(&info, TRUE);
  const bool progressive = info.progressive_mode;
  if (restart_interval != nullptr) *restart_interval = info.restart_interval;
  jpeg_destroy_decompress(&info);
  return progressive;
}

// The whole image, decoded with libjpeg's entropy decoder or gpufeed's.
RegionDecode DecodeWhole(const std::string& jpeg, bool own) {
  JpegDecoder decoder;
  return DecodeRegionWith(&decoder, Bytes(jpeg), jpeg.size(), CropRect{0, 0, 1 << 20, 1 << 20},
                          0, 0, 1ull << 32, own, false);
}

std::vector<Encoding> ProgressiveEncodings() {
  std::vector<Encoding> all;
  for (Encoding e : Encodings()) {
    e.progressive = true;
    all.push_back(e);
  }
  Encoding script;  // split bands, more refinements
  script.progressive = true, script.custom_script = true;
  all.push_back(script);
  return all;
}

TEST(JpegRewriteTest, ProgressiveFilesBecomeBaselineWithTheSamePixels) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const Encoding& e : ProgressiveEncodings()) files.emplace_back(Describe(e), Encode(e));
  files.emplace_back("cmyk", EncodeJpeg(40, 24, JCS_CMYK, 85, 3, /*progressive=*/true));
  for (const auto& [what, jpeg] : files) {
    ASSERT_TRUE(IsProgressive(jpeg)) << what;
    std::string rewritten = jpeg;
    ASSERT_TRUE(RewriteProgressiveJpegAsBaseline(&rewritten)) << what;
    EXPECT_FALSE(IsProgressive(rewritten)) << what;
    const RegionDecode original = DecodeWhole(jpeg, false);
    ASSERT_TRUE(original.status.ok()) << what << ": " << original.status.ToString();
    for (bool own : {false, true}) {
      const RegionDecode decoded = DecodeWhole(rewritten, own);
      ASSERT_TRUE(decoded.status.ok()) << what << ": " << decoded.status.ToString();
      EXPECT_EQ(decoded.image.width, original.image.width) << what;
      EXPECT_EQ(decoded.image.height, original.image.height) << what;
      EXPECT_TRUE(decoded.image.pixels == original.image.pixels) << what << " own " << own;
      // gpufeed's decoder takes the rewritten file (CMYK stays libjpeg's).
      if (own && what != "cmyk") EXPECT_TRUE(decoded.own_used) << what;
    }
    // Rewriting again changes nothing: the file is baseline now.
    std::string again = rewritten;
    EXPECT_FALSE(RewriteProgressiveJpegAsBaseline(&again)) << what;
    EXPECT_EQ(again, rewritten) << what;
  }
}

// A crop of the middle of the image: exact (min_side 0), or DCT-scaled
// down to min_side, by libjpeg or (approximate: exact=False's decode) by
// gpufeed's own scaled decoders.
RegionDecode DecodeCrop(const std::string& jpeg, bool own, int min_side, bool approximate) {
  JpegDecoder decoder;
  decoder.set_own_entropy(own);
  RegionDecode r;
  ImageHeader header;
  r.status = decoder.Start(Bytes(jpeg), jpeg.size(), &header);
  if (!r.status.ok()) return r;
  const CropRect crop{header.width / 4, header.height / 3, header.width / 2, header.height / 2};
  r.status = decoder.DecodeRegion(crop, min_side, min_side, &r.image, &r.denominator, 1ull << 32,
                                  &r.columns, approximate);
  return r;
}

TEST(JpegRewriteTest, RestartMarkersAreAddedToEveryJpegWithTheSamePixels) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const Encoding& e : Encodings()) files.emplace_back(Describe(e), Encode(e));
  for (const Encoding& e : ProgressiveEncodings()) files.emplace_back(Describe(e), Encode(e));
  Encoding wide;  // many MCUs per row: intervals inside rows, a partial last one
  wide.width = 300, wide.height = 70;
  files.emplace_back(Describe(wide), Encode(wide));
  for (const auto& [what, jpeg] : files) {
    const RegionDecode original = DecodeWhole(jpeg, false);
    ASSERT_TRUE(original.status.ok()) << what << ": " << original.status.ToString();
    // exact=False leaves out a progressive file's last AC refinement bit:
    // its crops are compared with those of the same file made baseline.
    std::string baseline = jpeg;
    RewriteProgressiveJpegAsBaseline(&baseline);
    for (int interval : {1, 3, 16}) {
      const std::string label = what + " interval " + std::to_string(interval);
      std::string rewritten = jpeg;
      unsigned declared = 0;
      if (!IsProgressive(jpeg, &declared) && declared == static_cast<unsigned>(interval)) {
        // Baseline with this interval already: left as it is.
        EXPECT_FALSE(RewriteJpegWithRestarts(&rewritten, interval, 0)) << label;
        EXPECT_EQ(rewritten, jpeg) << label;
        continue;
      }
      ASSERT_TRUE(RewriteJpegWithRestarts(&rewritten, interval, 0)) << label;
      EXPECT_FALSE(IsProgressive(rewritten, &declared)) << label;
      EXPECT_EQ(declared, static_cast<unsigned>(interval)) << label;
      for (bool own : {false, true}) {
        const RegionDecode decoded = DecodeWhole(rewritten, own);
        ASSERT_TRUE(decoded.status.ok()) << label << ": " << decoded.status.ToString();
        EXPECT_TRUE(decoded.image.pixels == original.image.pixels) << label << " own " << own;
        // A crop skips whole intervals: the same pixels as the original's
        // crop, exact and DCT-scaled (by libjpeg, and by gpufeed's scaled
        // decoder: approximate).
        for (int min_side : {0, 4}) {
          for (bool approximate : {false, true}) {
            const RegionDecode before = DecodeCrop(baseline, own, min_side, approximate);
            const RegionDecode after = DecodeCrop(rewritten, own, min_side, approximate);
            ASSERT_TRUE(before.status.ok() && after.status.ok()) << label;
            EXPECT_TRUE(SameDecode(after, before))
                << label << " own " << own << " min_side " << min_side << " approximate "
                << approximate;
          }
        }
      }
      // Again with the same interval: nothing to do; with another: rewritten.
      std::string again = rewritten;
      EXPECT_FALSE(RewriteJpegWithRestarts(&again, interval, 0)) << label;
      EXPECT_EQ(again, rewritten) << label;
      EXPECT_TRUE(RewriteJpegWithRestarts(&again, interval + 1, 0)) << label;
      EXPECT_FALSE(RewriteProgressiveJpegAsBaseline(&rewritten)) << label;
    }
  }
}

TEST(JpegRewriteTest, RestartIntervalsOutsideTheirRangeAreRefused) {
  const std::string jpeg = Encode(Encoding());
  for (int interval : {0, -1, kMaxRestartInterval + 1}) {
    std::string copy = jpeg;
    EXPECT_FALSE(RewriteJpegWithRestarts(&copy, interval, 0)) << interval;
    EXPECT_EQ(copy, jpeg) << interval;
  }
  std::string copy = jpeg;
  EXPECT_TRUE(RewriteJpegWithRestarts(&copy, kMaxRestartInterval, 0));
}

TEST(JpegRewriteTest, JpegsUnderTheMinimumGetNoRestartMarkers) {
  Encoding e;  // 64x48
  const std::string baseline = Encode(e);
  e.progressive = true;
  const std::string progressive = Encode(e);
  const uint64_t pixels = 64 * 48;
  // Under the minimum: a baseline file is left as it is, a progressive one
  // becomes baseline without markers.
  std::string copy = baseline;
  EXPECT_FALSE(RewriteJpegWithRestarts(&copy, 4, pixels + 1));
  EXPECT_EQ(copy, baseline);
  EXPECT_FALSE(RewriteJpegWithRestarts(&copy, 4));  // the default minimum: 1 MP
  copy = progressive;
  ASSERT_TRUE(RewriteJpegWithRestarts(&copy, 4, pixels + 1));
  unsigned declared = 1;
  EXPECT_FALSE(IsProgressive(copy, &declared));
  EXPECT_EQ(declared, 0u);
  // At the minimum: markers.
  copy = baseline;
  ASSERT_TRUE(RewriteJpegWithRestarts(&copy, 4, pixels));
  IsProgressive(copy, &declared);
  EXPECT_EQ(declared, 4u);
}

// The DHT segments of a JPEG's header, in order (up to its first SOS).
std::string HuffmanTables(const std::string& jpeg) {
  std::string tables;
  size_t at = 2;
  while (at + 4 <= jpeg.size() && static_cast<uint8_t>(jpeg[at]) == 0xFF) {
    const int code = static_cast<uint8_t>(jpeg[at + 1]);
    const size_t length =
        (static_cast<uint8_t>(jpeg[at + 2]) << 8) | static_cast<uint8_t>(jpeg[at + 3]);
    if (code == 0xDA) break;
    if (code == 0xC4) tables += jpeg.substr(at, 2 + length);
    at += 2 + length;
  }
  return tables;
}

TEST(JpegRewriteTest, SmallJpegsGetStandardTablesLargeOnesFittedTables) {
  // Under kMinRestartPixels: libjpeg's standard tables, the same in every
  // file (the decoders' table cache builds them once); from it on, tables
  // fitted to each file. The pixels are the same either way (above).
  std::string small_a = EncodeJpeg(320, 240, JCS_RGB, 90, 1, /*progressive=*/true);
  std::string small_b = EncodeJpeg(200, 300, JCS_RGB, 60, 2, /*progressive=*/true);
  std::string large = EncodeJpeg(1000, 1000, JCS_RGB, 90, 3, /*progressive=*/true);
  std::string large_restarts = large;
  ASSERT_TRUE(RewriteProgressiveJpegAsBaseline(&small_a));
  ASSERT_TRUE(RewriteProgressiveJpegAsBaseline(&small_b));
  ASSERT_TRUE(RewriteProgressiveJpegAsBaseline(&large));
  ASSERT_TRUE(RewriteJpegWithRestarts(&large_restarts, 16));
  const std::string standard = HuffmanTables(EncodeJpeg(64, 48, JCS_RGB));  // libjpeg's defaults
  ASSERT_FALSE(standard.empty());
  EXPECT_EQ(HuffmanTables(small_a), standard);
  EXPECT_EQ(HuffmanTables(small_b), standard);
  EXPECT_NE(HuffmanTables(large), standard);
  EXPECT_NE(HuffmanTables(large_restarts), standard);
}

// A marker segment: 0xFF, the code, the length (2 bytes, itself included).
std::string Segment(int code, const std::string& payload) {
  const size_t length = payload.size() + 2;
  return std::string{'\xFF', static_cast<char>(code), static_cast<char>(length >> 8),
                     static_cast<char>(length & 0xFF)} +
         payload;
}

// A 33x17 grayscale JPEG from image_fuzzer whose coefficients need more
// bits than the standard Huffman tables code (libjpeg decodes it).
const char kOutOfRange[] =
    "\xFF\xD8\xFF\xE0\x00\x10\x4A\x46\x49\x46\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xFF\xDB"
    "\x00\x43\x00\x08\x06\x06\x07\x06\x05\x08\x07\x07\x07\x09\x09\x08\x0A\x0C\x14\x0D\x0C\x0B"
    "\x0B\x0C\x19\x12\x13\x0F\x14\x1D\x1A\x1F\x1E\x1D\x1A\x1C\x1C\x20\x24\x2E\x27\x20\x22\x2C"
    "\x23\x1C\x1C\x28\x37\x29\x2C\x30\x31\x34\x34\x34\x1F\x27\x39\x3D\x38\x32\x3C\x2E\x33\x34"
    "\x32\xFF\xC0\x00\x0B\x08\x00\x11\x00\x21\x01\x01\x11\x00\xFF\xC4\x00\x1F\x00\x00\x01\x05"
    "\x01\x01\x01\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08"
    "\x09\x0A\x0B\xFF\xC4\x00\xB5\x10\x00\x02\x01\x03\x03\x02\x04\x03\x05\x05\x04\x04\x00\x00"
    "\x01\x7D\x01\x02\x03\x00\x04\x11\x05\x12\x21\x31\x41\x06\x13\x51\x61\x07\x22\x71\x14\x32"
    "\x81\x91\xA1\x08\x23\x42\xB1\xC1\x15\x2B\xD1\xF0\x24\x33\x62\x72\x82\x09\x0A\x16\x17\x18"
    "\x19\x1A\x25\x26\x27\x28\x29\x2A\x34\x35\x36\x37\x38\x39\x3A\x43\x44\x45\x46\x47\x48\x49"
    "\x4A\x53\x54\x55\x56\x57\x58\x59\x5A\x63\x64\x65\x66\x67\x68\x69\x6A\x73\x74\x75\x76\x77"
    "\x78\x79\x7A\x83\x84\x85\x86\x87\x88\x89\x8A\x92\x93\x94\x95\x96\x97\x98\x99\x9A\xA2\xA3"
    "\xA4\xA5\xA6\xA7\xA8\xA9\xAA\xB2\xB3\xB4\xB5\xB6\xB7\xB8\xB9\xBA\xC2\xC3\xC4\xC5\xC6\xC7"
    "\xC8\xC9\xCA\xD2\xD3\xD4\xD5\xD6\xD7\xD8\xD9\xDA\xE1\xE2\xE3\xE4\xE5\xE6\xE7\xE8\xE9\xEA"
    "\xF1\xF2\xF3\xF4\xF5\xF6\xF7\xF8\xF9\xFA\xFF\xDA\x00\x08\x01\x01\x00\x00\x3F\x00\xEB\xED"
    "\x4F\x6C\xED\xF5\xF5\xCD\x6B\xC1\xF7\x70\x48\xC6\x39\xC7\x4A\x3F\xBF\x11\x20\xE7\x38\x27"
    "\xAE\x6A\xD2\xB6\xE0\x76\x9E\x9C\xD2\xF9\xA3\xFD\x8F\xCA\xB8\x38\x25\x1B\x73\xD0\x0A\xD7"
    "\x82\x50\x17\x23\xBF\x63\xCE\x6B\x46\x09\x47\x20\x12\x47\x4E\x9D\x6A\xCA\xDC\xE4\x8C\x02"
    "\x7F\xAD\x33\xCE\x4F\xEF\x1F\xFB\xE6\xB8\x4B\x6F\xBD\xFF\x00\x01\xFE\x95\xB9\x6F\xF7\xD7"
    "\xFD\xE3\xFC\xAA\xFF\x00\xF0\x1F\xA7\xF8\x55\xE8\x7E\xE0\xFA\x9F\xE6\x6A\x6A\xFF\xD9";

TEST(JpegRewriteTest, CoefficientsOutOfTheStandardTablesRangeAreNotRewrittenWrongly) {
  // libjpeg's writer gives such a coefficient a code of no bits with
  // standard tables (the file then decodes to other pixels); the rewrite
  // must leave it as it is or keep its pixels.
  const std::string jpeg(kOutOfRange, sizeof(kOutOfRange) - 1);
  const RegionDecode original = DecodeWhole(jpeg, false);
  ASSERT_TRUE(original.status.ok()) << original.status.ToString();
  std::string rewritten = jpeg;
  if (RewriteJpegWithRestarts(&rewritten, 2, 0)) {
    const RegionDecode after = DecodeWhole(rewritten, false);
    ASSERT_TRUE(after.status.ok()) << after.status.ToString();
    EXPECT_TRUE(after.image.pixels == original.image.pixels);
  } else {
    EXPECT_EQ(rewritten, jpeg);
  }
}

TEST(JpegRewriteTest, CmykWithoutAnAdobeMarkerStaysWithoutOne) {
  // Readers take CMYK samples as inverted when an Adobe marker is there
  // (PIL's "CMYK;I"); the rewrite must not add one (found by image_fuzzer).
  for (bool progressive : {false, true}) {
    std::string jpeg = EncodeJpeg(40, 24, JCS_CMYK, 85, 3, progressive);
    const size_t adobe = jpeg.find("\xFF\xEE");
    ASSERT_NE(adobe, std::string::npos);
    const size_t length = (static_cast<uint8_t>(jpeg[adobe + 2]) << 8) |
                          static_cast<uint8_t>(jpeg[adobe + 3]);
    jpeg.erase(adobe, 2 + length);
    const RegionDecode original = DecodeWhole(jpeg, false);
    ASSERT_TRUE(original.status.ok()) << original.status.ToString();
    std::string rewritten = jpeg;
    ASSERT_TRUE(RewriteJpegWithRestarts(&rewritten, 2, 0));
    EXPECT_EQ(rewritten.find("\xFF\xEE"), std::string::npos);
    const RegionDecode after = DecodeWhole(rewritten, false);
    ASSERT_TRUE(after.status.ok()) << after.status.ToString();
    EXPECT_TRUE(after.image.pixels == original.image.pixels) << "progressive " << progressive;
  }
}

TEST(JpegRewriteTest, ExifIccAndCommentsAreKept) {
  Encoding e;
  e.progressive = true;
  const std::string plain = Encode(e);
  const std::string exif = Segment(0xE1, std::string("Exif\0\0", 6) + std::string(300, 'x'));
  const std::string icc = Segment(0xE2, std::string("ICC_PROFILE\0", 12) + "\x01\x01" +
                                            std::string(200, 'p'));
  const std::string comment = Segment(0xFE, "a comment");
  // After SOI and libjpeg's JFIF APP0 (18 bytes).
  ASSERT_EQ(plain.substr(2, 4), std::string("\xFF\xE0\x00\x10", 4));
  const std::string jpeg = plain.substr(0, 20) + exif + icc + comment + plain.substr(20);
  std::string rewritten = jpeg;
  ASSERT_TRUE(RewriteProgressiveJpegAsBaseline(&rewritten));
  for (const std::string& segment : {exif, icc, comment}) {
    const size_t at = rewritten.find(segment);
    EXPECT_NE(at, std::string::npos);
    EXPECT_EQ(rewritten.find(segment, at + 1), std::string::npos);
  }
  // One JFIF marker, libjpeg's (the saved one is not written again).
  const size_t jfif = rewritten.find("JFIF");
  ASSERT_NE(jfif, std::string::npos);
  EXPECT_EQ(rewritten.find("JFIF", jfif + 1), std::string::npos);
  EXPECT_TRUE(DecodeWhole(rewritten, true).image.pixels == DecodeWhole(jpeg, false).image.pixels);
}

// A progressive JPEG's bytes up to the first marker after its first scan's
// data, then EOI.
std::string FirstScanOnly(const std::string& jpeg) {
  const size_t scan = jpeg.find("\xFF\xDA");
  size_t at = scan + 2 + ((static_cast<uint8_t>(jpeg[scan + 2]) << 8) |
                          static_cast<uint8_t>(jpeg[scan + 3]));
  while (at + 1 < jpeg.size() &&
         !(static_cast<uint8_t>(jpeg[at]) == 0xFF && jpeg[at + 1] != 0 &&
           (static_cast<uint8_t>(jpeg[at + 1]) & 0xF8) != 0xD0)) {
    ++at;
  }
  return jpeg.substr(0, at) + "\xFF\xD9";
}

TEST(JpegRewriteTest, EverythingElseIsLeftAsItIs) {
  Encoding progressive;
  progressive.progressive = true;
  const std::string whole = Encode(progressive);
  std::vector<std::pair<std::string, std::string>> others = {
      {"baseline", Encode(Encoding())},
      {"empty", ""},
      {"not a JPEG", "\x89PNG\r\n\x1a\n0000"},
      {"a JPEG's start only", "\xFF\xD8\xFF"},
      {"garbage after SOI", "\xFF\xD8garbage and more garbage"},
      // libjpeg warns (premature end of data) and pads: left for the
      // loader to report as a truncated file.
      {"progressive, cut", whole.substr(0, whole.size() * 2 / 3)},
      // Its first scan (the DC coefficients) and EOI: libjpeg reads it
      // without a warning, and smooths the blocks it has no AC data for.
      {"progressive, first scan only", FirstScanOnly(whole)},
  };
  for (const auto& [what, data] : others) {
    std::string copy = data;
    EXPECT_FALSE(RewriteProgressiveJpegAsBaseline(&copy)) << what;
    EXPECT_EQ(copy, data) << what;
    if (what == "baseline") continue;  // restart markers are added to it
    EXPECT_FALSE(RewriteJpegWithRestarts(&copy, 16, 0)) << what;
    EXPECT_EQ(copy, data) << what;
  }
}

}  // namespace
}  // namespace gpufeed
