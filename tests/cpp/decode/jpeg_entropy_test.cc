// gpufeed's own baseline entropy decoder (jpeg_entropy.h) against
// libjpeg-turbo's on JPEGs libjpeg wrote with every sampling, restart
// markers, optimized tables and long codes: the same coefficients, block
// for block; data that ends early or is damaged is refused, never misread.
// And the scaled decode built on it (jpeg_scaled.h) against libjpeg's scaled
// decode: the same geometry, close pixels, and libjpeg for what it skips.
#include "decode/jpeg_entropy.h"
#include "decode/image_decoder.h"
#include "decode/jpeg_progressive.h"
#include "decode/jpeg_decoder.h"
#include "decode/jpeg_scaled.h"

#include "jpeg_compare_util.h"
#include "jpeg_encodings_util.h"
#include "jpeg_test_util.h"

#include <gtest/gtest.h>

#include <setjmp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

using jpeg_entropy::BlockSink;
using jpeg_entropy::HuffmanTable;
using jpeg_entropy::kBlockStride;
using jpeg_entropy::Scan;


// A libjpeg decompressor with the header of `jpeg` read.
struct Header {
  jpeg_decompress_struct info;
  jpeg_error_mgr error;
  explicit Header(const std::string& jpeg) {
    info.err = jpeg_std_error(&error);
    jpeg_create_decompress(&info);
    jpeg_mem_src(&info, Bytes(jpeg), jpeg.size());
    jpeg_read_header(&info, TRUE);
  }
  ~Header() { jpeg_destroy_decompress(&info); }
};

// The scan of a baseline JPEG as DecodeScan takes it, keeping `limit`
// coefficients per block (the thread's shared tables).
Scan MakeScan(const jpeg_decompress_struct& info, const std::string& jpeg, int limit) {
  bool ok = false;
  const Scan scan = BaselineScanOf(info, Bytes(jpeg) + jpeg.size(), limit, &ok);
  EXPECT_TRUE(ok);
  return scan;
}

class NullSink : public BlockSink {
 public:
  void Mcu(int x, int y, const int16_t* const*) override {
    ++mcus;
    seen.emplace_back(x, y);
  }
  void RowDone(int y) override { rows_done.push_back(y); }
  long mcus = 0;
  std::vector<std::pair<int, int>> seen;
  std::vector<int> rows_done;
};

// Every MCU of the scan to the sink.
bool DecodeWhole(const Scan& scan, BlockSink* sink) {
  return jpeg_entropy::DecodeScan(scan, {0, scan.mcu_rows - 1, 0, scan.mcus_per_row}, sink);
}


// Decodes the whole scan of `jpeg` keeping `limit` coefficients per block
// and compares them with libjpeg's: the blocks compared and the
// coefficients that differ; -1 blocks when DecodeScan refused the scan.
std::pair<long, long> CompareWhole(const std::string& jpeg, int limit) {
  Header header(jpeg);
  const Scan scan = MakeScan(header.info, jpeg, limit);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
  CoefficientCompareSink sink(&header.info, arrays, scan);
  if (!DecodeWhole(scan, &sink)) return {-1, sink.differences};
  return {sink.blocks_seen, sink.differences};
}

TEST(JpegEntropyTest, CoefficientsEqualLibjpegsAtEveryLimit) {
  for (const Encoding& encoding : Encodings()) {
    const std::string jpeg = Encode(encoding);
    for (int limit : {1, 5, 25, 64}) {
      const auto [blocks, differences] = CompareWhole(jpeg, limit);
      EXPECT_GT(blocks, 0) << Describe(encoding) << " limit " << limit;
      EXPECT_EQ(differences, 0) << Describe(encoding) << " limit " << limit;
    }
  }
}

TEST(JpegEntropyTest, OnlyTheWantedMcusReachTheSink) {
  const std::string jpeg = Encode(Encoding());
  Header header(jpeg);
  const Scan scan = MakeScan(header.info, jpeg, 64);
  NullSink rows;
  ASSERT_TRUE(jpeg_entropy::DecodeScan(scan, {1, 1, 0, scan.mcus_per_row}, &rows));
  EXPECT_EQ(rows.mcus, scan.mcus_per_row);
  EXPECT_EQ(rows.rows_done, std::vector<int>{1});
  ASSERT_GE(scan.mcus_per_row, 3);
  NullSink window;
  ASSERT_TRUE(jpeg_entropy::DecodeScan(scan, {0, 1, 1, 2}, &window));
  EXPECT_EQ(window.seen, (std::vector<std::pair<int, int>>{{1, 0}, {1, 1}}));
  EXPECT_EQ(window.rows_done, (std::vector<int>{0, 1}));
  // The last row's first MCU; then no column (each wanted row still done).
  const int last = scan.mcu_rows - 1;
  NullSink corner;
  ASSERT_TRUE(jpeg_entropy::DecodeScan(scan, {last, last, 0, 1}, &corner));
  EXPECT_EQ(corner.seen, (std::vector<std::pair<int, int>>{{0, last}}));
  EXPECT_EQ(corner.rows_done, std::vector<int>{last});
  NullSink none;
  ASSERT_TRUE(jpeg_entropy::DecodeScan(scan, {0, 1, 2, 2}, &none));
  EXPECT_TRUE(none.seen.empty());
  EXPECT_EQ(none.rows_done, (std::vector<int>{0, 1}));
}

// MCUs outside the window are only read past, their DC predictors kept:
// the window's coefficients equal libjpeg's, with and without restarts.
TEST(JpegEntropyTest, AWindowsCoefficientsEqualLibjpegs) {
  for (const Encoding& encoding : Encodings()) {
    const std::string jpeg = Encode(encoding);
    for (int limit : {1, 5, 64}) {
      Header header(jpeg);
      const Scan scan = MakeScan(header.info, jpeg, limit);
      jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
      CoefficientCompareSink sink(&header.info, arrays, scan);
      const int last_col = std::max(1, scan.mcus_per_row - 1);
      EXPECT_TRUE(jpeg_entropy::DecodeScan(scan, {1, scan.mcu_rows - 1, 1, last_col}, &sink))
          << Describe(encoding) << " limit " << limit;
      EXPECT_EQ(sink.blocks_seen > 0, scan.mcus_per_row > 2 && scan.mcu_rows > 1)
          << Describe(encoding);
      EXPECT_EQ(sink.differences, 0) << Describe(encoding) << " limit " << limit;
    }
  }
}

TEST(JpegEntropyTest, DataThatEndsEarlyIsRefused) {
  for (int restart : {0, 2}) {
    Encoding encoding;
    encoding.restart_interval = restart;
    const std::string jpeg = Encode(encoding);
    Header header(jpeg);
    const size_t start = header.info.src->next_input_byte - Bytes(jpeg);
    // The entropy-coded data ends before the EOI marker (2 bytes).
    for (size_t end = start; end + 2 < jpeg.size(); ++end) {
      const std::string cut = jpeg.substr(0, end);
      Scan scan = MakeScan(header.info, jpeg, 64);
      scan.end = Bytes(jpeg) + end;  // the same bytes, the file ending at `end`
      NullSink sink;
      EXPECT_FALSE(DecodeWhole(scan, &sink))
          << "restart " << restart << " data cut at " << end << " of " << jpeg.size();
    }
  }
}

// A restart interval that holds no MCU of the window is passed over unread
// (to the marker after it): damage inside it changes nothing, the window's
// coefficients still equal libjpeg's on the sound file; an interval with a
// wanted MCU is still decoded, so damage there is refused. A wrong marker
// after a passed interval, and data that ends within one, are refused.
TEST(JpegEntropyTest, IntervalsOutsideTheWindowArePassedUnread) {
  Encoding encoding;
  encoding.width = 160, encoding.height = 96;  // 10 x 6 MCUs of 16 x 16
  encoding.restart_interval = 2;
  const std::string jpeg = Encode(encoding);
  Header sound(jpeg);
  const size_t start = sound.info.src->next_input_byte - Bytes(jpeg);
  const auto intervals = Intervals(jpeg, start);
  ASSERT_EQ(intervals.size(), 30u);
  // Rows 3-4, columns 4-6: intervals 17-18 (row 3) and 22-23 (row 4) hold
  // wanted MCUs; 0-16 come before, 19-21 lie in rows 3-4 outside the
  // columns, 24-29 after the window.
  const jpeg_entropy::McuWindow window{3, 4, 4, 7};
  auto decode = [&](const std::string& file, long* differences) {
    Header header(file);
    const Scan scan = MakeScan(header.info, file, 64);
    jvirt_barray_ptr* arrays = jpeg_read_coefficients(&sound.info);
    CoefficientCompareSink sink(&sound.info, arrays, scan);
    const bool ok = jpeg_entropy::DecodeScan(scan, window, &sink);
    *differences = sink.differences;
    EXPECT_EQ(sink.blocks_seen, ok ? 2 * 3 * 6 : sink.blocks_seen);
    return ok;
  };
  long differences = -1;
  ASSERT_TRUE(decode(jpeg, &differences));
  EXPECT_EQ(differences, 0);
  for (int passed : {0, 5, 16, 19, 20}) {
    std::string damaged = jpeg;
    for (size_t at = intervals[passed].first; at < intervals[passed].second; ++at) {
      damaged[at] = static_cast<char>(0x5A);
    }
    differences = -1;
    EXPECT_TRUE(decode(damaged, &differences)) << "interval " << passed;
    EXPECT_EQ(differences, 0) << "interval " << passed;
  }
  for (int wanted : {17, 23}) {
    std::string damaged = jpeg;
    for (size_t at = intervals[wanted].first; at < intervals[wanted].second; ++at) {
      damaged[at] = static_cast<char>(0xFE);
    }
    EXPECT_FALSE(decode(damaged, &differences)) << "interval " << wanted;
  }
  // The marker after interval 4 (RST4) made RST5.
  std::string renumbered = jpeg;
  renumbered[intervals[4].second + 1] = static_cast<char>(0xD5);
  EXPECT_FALSE(decode(renumbered, &differences));
  // Data that ends within a passed interval.
  for (size_t end : {intervals[0].first + 3, intervals[9].second}) {
    Header header(jpeg);
    Scan scan = MakeScan(header.info, jpeg, 64);
    scan.end = Bytes(jpeg) + end;
    NullSink sink;
    EXPECT_FALSE(jpeg_entropy::DecodeScan(scan, window, &sink)) << "cut at " << end;
  }
}

// Damaged data: every result is either refused or decoded within bounds
// (AddressSanitizer checks the reads of the damaged stream's every path).
TEST(JpegEntropyTest, DamagedDataNeverReadsOutOfBounds) {
  std::mt19937 generator(3);
  for (const Encoding& encoding : Encodings()) {
    const std::string jpeg = Encode(encoding);
    Header header(jpeg);
    const size_t start = header.info.src->next_input_byte - Bytes(jpeg);
    for (int trial = 0; trial < 40; ++trial) {
      std::string damaged = jpeg;
      for (int i = 0; i < 1 + trial % 4; ++i) {
        const size_t at = start + generator() % (damaged.size() - start);
        damaged[at] = static_cast<char>(trial % 3 == 0 ? 0xFF : generator() % 256);
      }
      // Copied to a buffer of exactly its size, so a read past it is caught.
      std::unique_ptr<uint8_t[]> exact(new uint8_t[damaged.size()]);
      std::memcpy(exact.get(), damaged.data(), damaged.size());
      Scan scan = MakeScan(header.info, jpeg, 64);
      scan.data = exact.get() + start;
      scan.end = exact.get() + damaged.size();
      NullSink sink;
      (void)DecodeWhole(scan, &sink);
    }
  }
}

TEST(JpegEntropyTest, ImpossibleTablesAreRefused) {
  HuffmanTable table;
  uint8_t counts[17] = {0};
  uint8_t symbols[256] = {0};
  counts[1] = 2;  // two 1-bit codes: 0 and 1, the all-ones code libjpeg refuses
  EXPECT_FALSE(table.Build(counts, symbols, false));
  counts[1] = 3;
  EXPECT_FALSE(table.Build(counts, symbols, false));
  counts[1] = 1;
  counts[2] = 1;
  symbols[1] = 16;  // a DC size over 15
  EXPECT_FALSE(table.Build(counts, symbols, true));
  EXPECT_TRUE(table.Build(counts, symbols, false));
}

// A file's tables are built once per thread: the same contents give the
// same table (with its skip table; its pair table once asked for) until
// kTableCacheSize other lookups; DC and AC builds of one content differ; a
// refused table is nullptr; the tables stay usable after more lookups than
// one decode makes.
TEST(JpegEntropyTest, SharedTablesAreReusedPerThread) {
  uint8_t counts[17] = {0};
  uint8_t symbols[256] = {0};
  counts[1] = 1, counts[2] = 1, counts[3] = 1;
  symbols[0] = 0x00, symbols[1] = 0x01, symbols[2] = 0x02;
  const HuffmanTable* ac = jpeg_entropy::SharedBaselineTable(counts, symbols, false, false);
  ASSERT_NE(ac, nullptr);
  EXPECT_TRUE(ac->skip_built);
  EXPECT_FALSE(ac->pair_built);  // the exact path's lookup: no pair table
  EXPECT_EQ(jpeg_entropy::SharedBaselineTable(counts, symbols, false), ac);
  EXPECT_TRUE(ac->pair_built);
  // The pair entry of 1 0 ... (the 2-bit code of 0x01: run 0, size 1, whose
  // magnitude bit follows) then 0 (end of block): both symbols in 4 bits.
  EXPECT_EQ(ac->pair[0b10000000000] & 63, 4u);  // bits 0-5: the bits taken
  const HuffmanTable* dc = jpeg_entropy::SharedBaselineTable(counts, symbols, true);
  ASSERT_NE(dc, nullptr);
  EXPECT_NE(dc, ac);
  // Other contents: a different table; 2 * kMaxComponents - 2 of them leave
  // the first two in place (a decode looks up at most 2 * kMaxComponents).
  for (int i = 0; i < 2 * jpeg_entropy::kMaxComponents - 2; ++i) {
    uint8_t other[256] = {0};
    other[0] = 0x00, other[1] = static_cast<uint8_t>(0x11 + i), other[2] = 0x02;
    const HuffmanTable* table = jpeg_entropy::SharedBaselineTable(counts, other, false);
    ASSERT_NE(table, nullptr);
    EXPECT_NE(table, ac);
  }
  EXPECT_EQ(jpeg_entropy::SharedBaselineTable(counts, symbols, false), ac);
  EXPECT_EQ(jpeg_entropy::SharedBaselineTable(counts, symbols, true), dc);
  // The table decodes as a freshly built one: the skip entry of 0 (end of
  // block, 1 bit) reads one bit and ends the block.
  EXPECT_EQ(ac->skip[0], 1 | jpeg_entropy::kSkipEndOfBlock);
  counts[1] = 2;  // 0 and 1: the all-ones code
  EXPECT_EQ(jpeg_entropy::SharedBaselineTable(counts, symbols, false), nullptr);
}

// ------------------------------------------------------- the scaled decode

struct Decoded {
  Status status;
  Image image;
  DecodedColumns columns;
  int denominator = 0;
};

Decoded DecodeWith(const std::string& jpeg, const CropRect& crop, int denominator,
                   bool approximate) {
  Decoded out;
  JpegDecoder decoder;
  ImageHeader header;
  out.status = decoder.Start(Bytes(jpeg), jpeg.size(), &header);
  if (!out.status.ok()) return out;
  out.status = decoder.DecodeRegion(crop, crop.width / denominator, crop.height / denominator,
                                    &out.image, &out.denominator, 1u << 30, &out.columns,
                                    approximate);
  return out;
}

// PSNR of the requested columns of a decode of `crop` at 1/denominator
// against the full decode averaged over each scaled pixel's source block
// (what a scaled decode approximates).
double PsnrAgainstBoxes(const Decoded& decoded, const Image& full, const CropRect& crop,
                        int denominator) {
  double sum = 0;
  long count = 0;
  const int x0 = crop.x / denominator, y0 = crop.y / denominator;
  for (int r = 0; r < decoded.image.height; ++r) {
    const uint8_t* row = decoded.image.row(r) + 3 * decoded.columns.skipped;
    for (int i = 0; i < decoded.columns.width; ++i) {
      for (int c = 0; c < 3; ++c, ++count) {
        double total = 0;
        int n = 0;
        for (int y = (y0 + r) * denominator; y < std::min(full.height, (y0 + r + 1) * denominator); ++y) {
          for (int x = (x0 + i) * denominator; x < std::min(full.width, (x0 + i + 1) * denominator); ++x, ++n) {
            total += full.row(y)[3 * x + c];
          }
        }
        const double error = row[3 * i + c] - total / n;
        sum += error * error;
      }
    }
  }
  return sum == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 * count / sum);
}

TEST(JpegScaledTest, SameGeometryAsLibjpegAndClosePixels) {
  for (Encoding encoding : Encodings()) {
    encoding.width = encoding.width * 4 + 3;
    encoding.height = encoding.height * 4 + 5;
    encoding.noise = 6;
    const std::string jpeg = Encode(encoding);
    const int w = encoding.width, h = encoding.height;
    Image full;
    ASSERT_TRUE(DecodeRegion(Bytes(jpeg), jpeg.size(), {}, 0, 0, &full).ok());
    for (const CropRect& crop : {CropRect{0, 0, w, h}, CropRect{w / 5, h / 7, w / 2, h / 2},
                                 CropRect{w / 3 + 8, h / 2, w - w / 3 - 8, h - h / 2}}) {
      for (int denominator : {2, 4, 8}) {
        if (crop.width / denominator < 1 || crop.height / denominator < 1) continue;
        const Decoded own = DecodeWith(jpeg, crop, denominator, true);
        const Decoded reference = DecodeWith(jpeg, crop, denominator, false);
        const std::string what = Describe(encoding) + " crop " + std::to_string(crop.x) + "," +
                                 std::to_string(crop.y) + " " + std::to_string(crop.width) + "x" +
                                 std::to_string(crop.height) + " 1/" + std::to_string(denominator);
        ASSERT_TRUE(own.status.ok()) << what << ": " << own.status.ToString();
        ASSERT_TRUE(reference.status.ok()) << what;
        ASSERT_EQ(own.denominator, denominator) << what;
        ASSERT_EQ(reference.denominator, denominator) << what;
        ASSERT_EQ(own.image.height, reference.image.height) << what;
        ASSERT_EQ(own.columns.width, reference.columns.width) << what;
        ASSERT_LE(own.columns.skipped + own.columns.width, own.image.width) << what;
        ASSERT_EQ(own.image.pixels.size(), static_cast<size_t>(own.image.width) * own.image.height * 3);
        // Faithful to the image's box averages (what a scaled decode
        // approximates; the least faithful case is 4:2:0 at 1/2, whose
        // chroma is replicated).
        EXPECT_GT(PsnrAgainstBoxes(own, full, crop, denominator), 30.0) << what;
      }
    }
  }
}

TEST(JpegScaledTest, BaselineJpegsTakeTheOwnPathCmykIsLeftToLibjpeg) {
  for (const Encoding& encoding : Encodings()) {
    const std::string jpeg = Encode(encoding);
    Header header(jpeg);
    Image image;
    DecodedColumns columns;
    EXPECT_TRUE(DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(),
                                CropRect{0, 0, encoding.width, encoding.height}, 2, &image, &columns))
        << Describe(encoding);
  }
  // Luma sampled less than chroma (1x1, 2x2, 1x1): at 1/2 its luma would be
  // replicated, so it is left to libjpeg; at 1/4 its transform enlarges it.
  {
    Encoding odd;
    odd.h = 1, odd.v = 1;
    odd.chroma_h = 2, odd.chroma_v = 2;
    odd.width = 96, odd.height = 64;
    const std::string jpeg = Encode(odd);
    Header header(jpeg);
    Image image;
    DecodedColumns columns;
    EXPECT_FALSE(DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), CropRect{0, 0, 96, 64}, 2,
                                 &image, &columns));
    EXPECT_TRUE(DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), CropRect{0, 0, 96, 64}, 4,
                                &image, &columns));
  }
  // CMYK is left to libjpeg (progressive JPEGs have their own tests below).
  const std::string cmyk = EncodeJpeg(64, 48, JCS_CMYK, 90, 4);
  {
    Header header(cmyk);
    Image image;
    DecodedColumns columns;
    EXPECT_FALSE(DecodeScaledOwn(header.info, Bytes(cmyk), cmyk.size(), CropRect{0, 0, 64, 48}, 2,
                                 &image, &columns));
  }
  const Decoded own = DecodeWith(cmyk, CropRect{0, 0, 64, 48}, 2, true);
  const Decoded reference = DecodeWith(cmyk, CropRect{0, 0, 64, 48}, 2, false);
  ASSERT_TRUE(own.status.ok());
  EXPECT_EQ(own.image.pixels, reference.image.pixels);
}

// Data that ends early: the own path refuses it, so libjpeg's error is the
// one the caller sees, as without the own path.
TEST(JpegScaledTest, TruncatedFilesFailAsWithLibjpeg) {
  Encoding encoding;
  encoding.width = 256, encoding.height = 192;
  const std::string jpeg = Encode(encoding);
  for (size_t keep : {jpeg.size() / 2, jpeg.size() - 40}) {
    const std::string cut = jpeg.substr(0, keep);
    const Decoded own = DecodeWith(cut, CropRect{0, 0, 256, 192}, 4, true);
    const Decoded reference = DecodeWith(cut, CropRect{0, 0, 256, 192}, 4, false);
    EXPECT_FALSE(own.status.ok()) << keep;
    EXPECT_EQ(own.status.ToString(), reference.status.ToString()) << keep;
  }
}

std::vector<Encoding> ProgressiveEncodings() {
  std::vector<Encoding> all;
  for (Encoding e : Encodings()) {
    e.progressive = true;
    all.push_back(e);
  }
  for (int h : {1, 2}) {
    Encoding e;
    e.custom_script = true;
    e.h = h;
    e.restart_interval = h == 2 ? 3 : 0;
    e.width = 150, e.height = 101;
    all.push_back(e);
  }
  // Luma sampling factors of 3 and 4 (up to 10 blocks per MCU), partial
  // MCUs at both edges, restart markers: the interleaved DC scans' block
  // walk and the planes' slack past their last row.
  for (const auto& [h, v] : {std::pair{4, 1}, std::pair{4, 2}, std::pair{3, 2}, std::pair{1, 4}}) {
    Encoding e;
    e.progressive = true;
    e.h = h, e.v = v;
    e.width = 131, e.height = 77;
    e.restart_interval = 5;
    all.push_back(e);
  }
  return all;
}

// Every kept corner coefficient and every nonzero bit equal libjpeg's final
// coefficients after all scans, for the rows asked for.
TEST(JpegProgressiveTest, CornersEqualLibjpegsCoefficients) {
  for (const Encoding& encoding : ProgressiveEncodings()) {
    const std::string jpeg = Encode(encoding);
    Header header(jpeg);
    ASSERT_TRUE(header.info.progressive_mode);
    const int vmax = header.info.max_v_samp_factor;
    const int mcu_rows = static_cast<int>((encoding.height + 8 * vmax - 1) / (8 * vmax));
    // Every corner, then 2 x 2 corners (a 1/4 decode), then DC only, then
    // a 4 x 2 luma corner and 2 x 1 chroma corners.
    const std::vector<std::vector<uint64_t>> keeps = {
        {~0ull, ~0ull, ~0ull},
        {jpeg_entropy::CornerPositions(2, 2), jpeg_entropy::CornerPositions(2, 2),
         jpeg_entropy::CornerPositions(2, 2)},
        {1, 1, 1},
        {jpeg_entropy::CornerPositions(4, 2), jpeg_entropy::CornerPositions(2, 1),
         jpeg_entropy::CornerPositions(2, 1)}};
    for (size_t pass = 0; pass < 2 * keeps.size(); ++pass) {
      const int last_row = pass % 2 == 0 ? mcu_rows - 1 : mcu_rows / 2;
      Header fresh(jpeg);
      jpeg_entropy::CornerPlane planes[3];
      for (int c = 0; c < 3; ++c) planes[c].keep = keeps[pass / 2][c];
      ASSERT_TRUE(jpeg_entropy::DecodeProgressive(fresh.info, Bytes(jpeg), jpeg.size(), last_row,
                                                  planes))
          << Describe(encoding) << (encoding.custom_script ? " custom script" : "");
      jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
      long compared = 0;
      const long mismatches = CompareCorners(&header.info, arrays, planes, &compared);
      jpeg_finish_decompress(&header.info);
      jpeg_abort_decompress(&header.info);
      EXPECT_GT(compared, 0);
      EXPECT_EQ(mismatches, 0) << Describe(encoding) << " last row " << last_row << " keep "
                               << pass / 2;
      // A new header for the next pass (the coefficients were read).
      jpeg_mem_src(&header.info, Bytes(jpeg), jpeg.size());
      jpeg_read_header(&header.info, TRUE);
    }
  }
}

// AcBits::kSkipLastRefinement (exact=False's scaled decode): the DC
// coefficients equal libjpeg's, and each kept AC coefficient is within one
// of it (the refinement scans of the last bit are not read). libjpeg's
// progression refines every band's last bit, so some coefficients differ.
TEST(JpegProgressiveTest, SkippingTheLastRefinementLeavesEachCoefficientWithinOne) {
  long differing = 0;
  for (const Encoding& encoding : ProgressiveEncodings()) {
    const std::string jpeg = Encode(encoding);
    Header fresh(jpeg);
    jpeg_entropy::CornerPlane planes[3];
    for (int c = 0; c < 3; ++c) planes[c].keep = jpeg_entropy::CornerPositions(4, 4);
    ASSERT_TRUE(jpeg_entropy::DecodeProgressive(fresh.info, Bytes(jpeg), jpeg.size(), 1 << 20,
                                                planes,
                                                jpeg_entropy::AcBits::kSkipLastRefinement))
        << Describe(encoding);
    Header header(jpeg);
    jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
    long blocks = 0, beyond = 0;
    for (int c = 0; c < header.info.num_components; ++c) {
      const jpeg_component_info& comp = header.info.comp_info[c];
      for (int y = 0; y < static_cast<int>(comp.height_in_blocks); ++y) {
        JBLOCKARRAY row = header.info.mem->access_virt_barray(
            reinterpret_cast<j_common_ptr>(&header.info), arrays[c], y, 1, FALSE);
        for (int x = 0; x < static_cast<int>(comp.width_in_blocks); ++x, ++blocks) {
          const jpeg_entropy::CornerBlock& got = planes[c].at(x, y);
          beyond += got.corner[0] != row[0][x][0];
          for (int n = 1; n < 16; ++n) {
            const int difference = got.corner[n] - row[0][x][8 * (n / 4) + n % 4];
            beyond += difference < -1 || difference > 1;
            differing += difference != 0;
          }
        }
      }
    }
    jpeg_finish_decompress(&header.info);
    EXPECT_GT(blocks, 0);
    EXPECT_EQ(beyond, 0) << Describe(encoding);
  }
  EXPECT_GT(differing, 0);
}

TEST(JpegProgressiveTest, ScaledDecodeIsCloseAndCutFilesAreLeftToLibjpeg) {
  Encoding encoding;
  encoding.progressive = true;
  encoding.width = 259, encoding.height = 197, encoding.noise = 6;
  const std::string jpeg = Encode(encoding);
  Image full;
  ASSERT_TRUE(DecodeRegion(Bytes(jpeg), jpeg.size(), {}, 0, 0, &full).ok());
  for (int denominator : {2, 4, 8}) {
    const CropRect crop{40, 30, 180, 150};
    const Decoded own = DecodeWith(jpeg, crop, denominator, true);
    const Decoded reference = DecodeWith(jpeg, crop, denominator, false);
    ASSERT_TRUE(own.status.ok());
    ASSERT_EQ(own.image.height, reference.image.height);
    ASSERT_EQ(own.columns.width, reference.columns.width);
    EXPECT_GT(PsnrAgainstBoxes(own, full, crop, denominator), 30.0) << denominator;
    Header header(jpeg);
    Image image;
    DecodedColumns columns;
    EXPECT_TRUE(DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), crop, denominator, &image,
                                &columns));
  }
  // Cut inside a scan that is decoded, and (at 1/8, where the luma's AC
  // scans are skipped unread) inside one that is only passed.
  for (int denominator : {4, 8}) {
    for (size_t keep : {jpeg.size() / 3, jpeg.size() * 2 / 3, jpeg.size() - 2}) {
      const std::string cut = jpeg.substr(0, keep);
      Header header(cut);
      Image image;
      DecodedColumns columns;
      EXPECT_FALSE(DecodeScaledOwn(header.info, Bytes(cut), cut.size(),
                                   CropRect{0, 0, 259, 197}, denominator, &image, &columns))
          << keep << " at 1/" << denominator;
      const Decoded own = DecodeWith(cut, CropRect{0, 0, 259, 197}, denominator, true);
      const Decoded reference = DecodeWith(cut, CropRect{0, 0, 259, 197}, denominator, false);
      EXPECT_EQ(own.status.ToString(), reference.status.ToString());
    }
  }
}

TEST(JpegProgressiveTest, DamagedFilesNeverReadOutOfBounds) {
  std::mt19937 generator(5);
  for (const Encoding& encoding : ProgressiveEncodings()) {
    const std::string jpeg = Encode(encoding);
    for (int trial = 0; trial < 30; ++trial) {
      std::string damaged = jpeg;
      for (int i = 0; i < 1 + trial % 3; ++i) {
        const size_t at = 200 + generator() % (damaged.size() - 200);
        damaged[at] = static_cast<char>(trial % 4 == 0 ? 0xFF : generator() % 256);
      }
      std::unique_ptr<uint8_t[]> exact(new uint8_t[damaged.size()]);
      std::memcpy(exact.get(), damaged.data(), damaged.size());
      // libjpeg's errors (a damaged header) longjmp back here.
      JpegLongjmpErrors failure;
      jpeg_decompress_struct info;
      CreateDecompressWithLongjmp(&info, &failure);
      if (setjmp(failure.jump) == 0) {
        jpeg_mem_src(&info, exact.get(), damaged.size());
        if (jpeg_read_header(&info, TRUE) == JPEG_HEADER_OK && info.progressive_mode) {
          jpeg_entropy::CornerPlane planes[3];
          (void)jpeg_entropy::DecodeProgressive(info, exact.get(), damaged.size(), 1 << 20, planes);
        }
      }
      jpeg_destroy_decompress(&info);
    }
  }
}

// ------------------------------------------------------------ crafted files


// A grayscale baseline JPEG of w x h: one DC table with the single 1-bit
// code for `dc_symbol`, one AC table with one code of each length 1..n for
// the n `ac_symbols` (0, 10, 110, ...), quantization steps `quant` (16-bit
// when over 255), and `data`.
std::string CraftGray(int w, int h, int quant, int dc_symbol, const std::vector<int>& ac_symbols,
                      const std::string& data) {
  std::string out = "\xFF\xD8";
  std::string dqt(1, quant > 255 ? '\x10' : '\x00');
  for (int i = 0; i < 64; ++i) {
    if (quant > 255) dqt += static_cast<char>(quant >> 8);
    dqt += static_cast<char>(quant & 0xFF);
  }
  out += Segment(0xDB, dqt);
  out += Segment(0xC0, std::string{8, static_cast<char>(h >> 8), static_cast<char>(h & 0xFF),
                                   static_cast<char>(w >> 8), static_cast<char>(w & 0xFF), 1, 1,
                                   0x11, 0});
  auto dht = [](int table_class, const std::vector<int>& lengths_of_one, const std::vector<int>& symbols) {
    std::string payload(1, static_cast<char>(table_class << 4));
    for (int length = 1; length <= 16; ++length) {
      payload += static_cast<char>(length <= static_cast<int>(lengths_of_one.size()) ? lengths_of_one[length - 1] : 0);
    }
    for (int symbol : symbols) payload += static_cast<char>(symbol);
    return Segment(0xC4, payload);
  };
  out += dht(0, {1}, {dc_symbol});
  out += dht(1, std::vector<int>(ac_symbols.size(), 1), ac_symbols);
  out += Segment(0xDA, std::string{1, 1, 0, 0, 63, 0});
  return out + data + "\xFF\xD9";
}

// A DC predictor driven past INT_MAX (every block's difference +32767, no
// restart): it wraps as libjpeg's 16-bit coefficient does, no overflow.
TEST(JpegEntropyTest, TheDcPredictorWrapsAsLibjpegs) {
  const int w = 2048, h = 2056;
  BitWriter bits;
  for (int block = 0; block < (w / 8) * (h / 8); ++block) {
    bits.Put(0, 1);        // DC code: size 15
    bits.Put(0x7FFF, 15);  // +32767
    bits.Put(0, 1);        // AC code: end of block
  }
  const std::string jpeg = CraftGray(w, h, 1, 15, {0x00}, bits.Finish());
  Header header(jpeg);
  const Scan scan = MakeScan(header.info, jpeg, 64);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
  CoefficientCompareSink sink(&header.info, arrays, scan);
  EXPECT_TRUE(DecodeWhole(scan, &sink));
  EXPECT_EQ(sink.differences, 0);
}

// Blocks that end at coefficient 63 without an end of block, and runs of
// sixteen zeros that pass the block's end (libjpeg ends the block there),
// under a table whose short codes put many symbols in one skip lookup: the
// same coefficients as libjpeg at every limit, and the same block ends.
TEST(JpegEntropyTest, SkippedSymbolsEndEachBlockWhereLibjpegDoes) {
  // Codes: end of block 0 (the next block's DC code, 0, reads as one too),
  // sixteen zeros 10, (run 0, size 1) 110, (run 3, size 1) 1110. No value
  // lands past 63 (libjpeg stores such a value at 63, the decoder in a
  // spare slot; either way the block ends there).
  const std::vector<int> symbols = {0x00, 0xF0, 0x01, 0x31};
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 generator(seed);
    const int w = 64, h = 64;
    BitWriter bits;
    for (int block = 0; block < (w / 8) * (h / 8); ++block) {
      bits.Put(0, 1);  // DC: difference 0
      // libjpeg's loop: k from 1 while k < 64; a value lands at k + run.
      for (int k = 1; k < 64; ++k) {
        const int pick = static_cast<int>(generator() % 10);
        if (pick < 2) {
          bits.Put(2, 2);
          k += 15;
        } else if (pick < 6) {
          bits.Put(6, 3);
          bits.Put(generator() & 1, 1);
        } else if (k + 3 <= 63 && (pick < 9 || block % 3 == 0)) {  // every third block: no end of block
          bits.Put(14, 4);
          bits.Put(generator() & 1, 1);
          k += 3;
        } else {
          bits.Put(0, 1);
          break;
        }
      }
    }
    const std::string jpeg = CraftGray(w, h, 1, 0x00, symbols, bits.Finish());
    for (int limit : {1, 2, 5, 25, 32, 33, 64}) {
      const auto [blocks, differences] = CompareWhole(jpeg, limit);
      EXPECT_EQ(blocks, (w / 8) * (h / 8)) << "seed " << seed << " limit " << limit;
      EXPECT_EQ(differences, 0) << "seed " << seed << " limit " << limit;
    }
  }
}

// Random AC tables (short and long codes, sizes up to 15, size-0 symbols
// other than sixteen zeros, which end a block as libjpeg reads them) and
// random streams, with and without restart markers: the same coefficients
// as libjpeg at several limits, in random windows.
TEST(JpegEntropyTest, RandomTablesAndStreamsEqualLibjpegs) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 g(seed);
    std::vector<int> symbols = {0x00, 0xF0};
    for (int i = static_cast<int>(g() % 3); i > 0; --i) symbols.push_back((1 + g() % 14) << 4);
    for (int i = 2 + static_cast<int>(g() % 20); i > 0; --i) {
      const int size = 1 + static_cast<int>(g() % 4 == 0 ? g() % 15 : g() % 3);
      symbols.push_back(static_cast<int>(g() % 16) << 4 | size);
    }
    std::sort(symbols.begin(), symbols.end());
    symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
    std::shuffle(symbols.begin(), symbols.end(), g);
    // Code lengths: a random count per length, drawn again until the codes
    // fit (the all-ones code is never used, as libjpeg requires).
    std::vector<int> counts;
    for (bool fit = false; !fit;) {
      counts.assign(17, 0);
      int left = static_cast<int>(symbols.size());
      fit = true;
      for (uint64_t length = 1, next = 0; length <= 16 && left > 0; ++length, next <<= 1) {
        const int free = static_cast<int>(std::min<uint64_t>((1ull << length) - 1 - next, 1 << 16));
        int count = length == 16 ? left : static_cast<int>(g() % (std::min(free, left) + 1));
        if (count == free && count < left) --count;  // room for longer codes
        fit = fit && count <= free;
        counts[length] = count;
        left -= count;
        next += count;
      }
    }
    std::vector<std::pair<uint32_t, int>> code_of(256);  // (code, length) per symbol
    for (int length = 1, index = 0, code = 0; length <= 16; ++length, code <<= 1) {
      for (int i = 0; i < counts[length]; ++i) code_of[symbols[index++]] = {code++, length};
    }
    std::vector<int> ends;  // the size-0 symbols other than sixteen zeros
    std::vector<int> values;
    for (int symbol : symbols) ((symbol & 15) == 0 && symbol != 0xF0 ? ends : values).push_back(symbol);
    const int w = 8 * (1 + static_cast<int>(g() % 12)), h = 8 * (1 + static_cast<int>(g() % 6));
    const int restart = g() % 3 == 0 ? 1 + static_cast<int>(g() % 5) : 0;
    const uint32_t end_per_mille = 20 + g() % 250;
    BitWriter bits;
    for (int block = 0, marker = 0; block < (w / 8) * (h / 8); ++block) {
      PutMarkerAndRandomDc(&g, block, restart, &marker, &bits);
      for (int k = 1; k < 64; ++k) {
        const int symbol = g() % 1000 < end_per_mille ? ends[g() % ends.size()]
                                                      : values[g() % values.size()];
        bits.Put(code_of[symbol].first, code_of[symbol].second);
        const int run = symbol >> 4, size = symbol & 15;
        if (size == 0 && run != 15) break;
        k += run;
        if (size > 0) bits.Put(g() & ((1u << size) - 1), size);
      }
    }
    std::vector<int> dc_counts(17, 0);
    dc_counts[1] = dc_counts[2] = dc_counts[3] = 1;
    const std::string jpeg = CraftGrayWithTables(w, h, dc_counts, {0, 1, 2}, counts, symbols,
                                                 restart, bits.Finish());
    for (int limit : {1, 2, 5, 25, 32, 33, 63}) {
      Header header(jpeg);
      const Scan scan = MakeScan(header.info, jpeg, limit);
      jvirt_barray_ptr* arrays = jpeg_read_coefficients(&header.info);
      CoefficientCompareSink sink(&header.info, arrays, scan);
      const int first_row = static_cast<int>(g() % scan.mcu_rows);
      const int first_col = static_cast<int>(g() % scan.mcus_per_row);
      const jpeg_entropy::McuWindow window{
          first_row, first_row + static_cast<int>(g() % (scan.mcu_rows - first_row)), first_col,
          first_col + 1 + static_cast<int>(g() % (scan.mcus_per_row - first_col))};
      EXPECT_TRUE(jpeg_entropy::DecodeScan(scan, window, &sink))
          << "seed " << seed << " limit " << limit;
      EXPECT_GT(sink.blocks_seen, 0) << "seed " << seed;
      EXPECT_EQ(sink.differences, 0) << "seed " << seed << " limit " << limit;
    }
  }
}

// 16-bit quantization steps of 65535 times coefficients of 32767: the
// transform's sums pass int's range; the pixels clamp (no undefined
// conversion).
TEST(JpegScaledTest, SixteenBitQuantizationStepsClampNotOverflow) {
  BitWriter bits;
  bits.Put(0, 1);
  bits.Put(0x7FFF, 15);
  for (int k = 1; k < 25; ++k) {
    bits.Put(0, 1);  // AC code: run 0, size 15 (the table's codes: 0, then 10)
    bits.Put(0x7FFF, 15);
  }
  bits.Put(2, 2);  // AC code: end of block
  const std::string data = bits.Finish();
  const std::string jpeg = CraftGray(16, 16, 65535, 15, {0x0F, 0x00}, data);
  Header header(jpeg);
  Image image;
  DecodedColumns columns;
  ASSERT_FALSE(jpeg.empty());
  // One block holds the data; the 16x16 image's other three blocks are
  // missing, so the decode is refused (left to libjpeg) after the block that
  // overflows; what matters is that transforming it is defined.
  (void)DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), CropRect{0, 0, 16, 16}, 2, &image,
                        &columns);
  const std::string one_block = CraftGray(8, 8, 65535, 15, {0x0F, 0x00}, data);
  Header one(one_block);
  ASSERT_TRUE(DecodeScaledOwn(one.info, Bytes(one_block), one_block.size(), CropRect{0, 0, 8, 8},
                              2, &image, &columns));
  for (uint8_t pixel : image.pixels) EXPECT_TRUE(pixel == 0 || pixel == 255);
}

// A file whose data reaches its last row but lacks EOI, or is followed by
// a marker other than EOI: libjpeg's path refuses it when the crop reaches
// the bottom, and so does the own path (it leaves it to libjpeg).
TEST(JpegScaledTest, AFileWithoutItsEoiFailsAsWithLibjpeg) {
  Encoding encoding;
  encoding.width = 128, encoding.height = 96;
  const std::string jpeg = Encode(encoding);
  ASSERT_EQ(jpeg.substr(jpeg.size() - 2), "\xFF\xD9");
  const std::string without_eoi = jpeg.substr(0, jpeg.size() - 2);
  const std::string other_marker = without_eoi + "\xFF\xD8\xFF\xD9";
  for (const std::string& file : {without_eoi, other_marker}) {
    for (const CropRect& crop : {CropRect{0, 0, 128, 96}, CropRect{0, 0, 128, 40}}) {
      const Decoded own = DecodeWith(file, crop, 4, true);
      const Decoded reference = DecodeWith(file, crop, 4, false);
      EXPECT_EQ(own.status.ok(), reference.status.ok()) << crop.height << " " << own.status.ToString()
                                                        << " / " << reference.status.ToString();
    }
  }
  const Decoded whole = DecodeWith(jpeg, CropRect{0, 0, 128, 96}, 4, true);
  EXPECT_TRUE(whole.status.ok());
}

// Hand-made progressive files (a review's findings): the own decoder leaves
// each to libjpeg, never crashes (12 and 24 blocks per MCU once overflowed a
// stack buffer) and never decodes one differently from libjpeg.
class ProgressiveCraft {
 public:
  // One DC table (sizes 0-15, 5-bit codes), one AC table (symbols 0-254,
  // 9-bit codes), all quantization steps 1.
  ProgressiveCraft(int w, int h, const std::vector<std::pair<int, int>>& components) {
    out_ = "\xFF\xD8" + Segment(0xDB, std::string(1, '\0') + std::string(64, '\x01'));
    std::string sof{8, static_cast<char>(h >> 8), static_cast<char>(h), static_cast<char>(w >> 8),
                    static_cast<char>(w), static_cast<char>(components.size())};
    for (const auto& [id, sampling] : components) {
      sof += std::string{static_cast<char>(id), static_cast<char>(sampling), 0};
    }
    out_ += Segment(0xC2, sof);
    std::string dht(1, '\x00');
    for (int length = 1; length <= 16; ++length) dht += static_cast<char>(length == 5 ? 16 : 0);
    for (int symbol = 0; symbol < 16; ++symbol) dht += static_cast<char>(symbol);
    dht += '\x10';
    for (int length = 1; length <= 16; ++length) dht += static_cast<char>(length == 9 ? 255 : 0);
    for (int symbol = 0; symbol < 255; ++symbol) dht += static_cast<char>(symbol);
    out_ += Segment(0xC4, dht);
  }
  // Appends a scan: its header, then the data written since the last one.
  void Scan(const std::vector<int>& ids, int ss, int se, int ah, int al) {
    std::string sos(1, static_cast<char>(ids.size()));
    for (int id : ids) sos += std::string{static_cast<char>(id), 0};
    sos += std::string{static_cast<char>(ss), static_cast<char>(se), static_cast<char>(ah << 4 | al)};
    out_ += Segment(0xDA, sos) + bits_.Finish();
    bits_ = BitWriter();
  }
  void Dc(int diff) {
    const int size = diff == 0 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(std::abs(diff)));
    bits_.Put(static_cast<uint32_t>(size), 5);
    if (size) bits_.Put(static_cast<uint32_t>(diff > 0 ? diff : diff + (1 << size) - 1), size);
  }
  void Ac(int run, int size, int value = 0) {
    bits_.Put(static_cast<uint32_t>(run << 4 | size), 9);
    if (size) bits_.Put(static_cast<uint32_t>(value > 0 ? value : value + (1 << size) - 1), size);
  }
  void Raw(uint32_t value, int bits) { bits_.Put(value, bits); }
  // The file: the scans so far, then EOI.
  std::string File() { return out_ + "\xFF\xD9"; }

 private:
  std::string out_;
  BitWriter bits_;
};

TEST(JpegProgressiveTest, HandMadeFilesAreLeftToLibjpeg) {
  std::vector<std::pair<std::string, std::string>> files;
  {  // an AC value that its point transform wraps to 0 in 16 bits
    ProgressiveCraft f(8, 8, {{1, 0x11}});
    f.Dc(0);
    f.Scan({1}, 0, 0, 0, 0);
    f.Ac(0, 15, 16384);
    f.Ac(0, 0);
    f.Scan({1}, 1, 5, 0, 2);
    f.Ac(0, 1, 1);
    f.Raw(0, 1);
    f.Ac(0, 0);
    f.Raw(0, 8);
    f.Scan({1}, 1, 5, 2, 1);
    files.push_back({"wrap", f.File()});
  }
  {  // duplicate component ids
    ProgressiveCraft f(8, 8, {{1, 0x11}, {2, 0x11}, {2, 0x11}});
    f.Dc(10), f.Dc(20), f.Dc(30);
    f.Scan({1, 2, 2}, 0, 0, 0, 0);
    f.Ac(0, 3, 5);
    f.Ac(0, 0);
    f.Scan({2}, 1, 63, 0, 0);
    files.push_back({"duplicate ids", f.File()});
  }
  {  // 24 blocks per MCU in an interleaved scan
    ProgressiveCraft f(32, 32, {{1, 0x44}, {2, 0x22}, {3, 0x22}});
    for (int i = 0; i < 24; ++i) f.Dc(1);
    f.Scan({1, 2, 3}, 0, 0, 0, 0);
    files.push_back({"24 blocks per MCU", f.File()});
  }
  {  // a scan's components out of the frame's order
    ProgressiveCraft f(8, 8, {{1, 0x11}, {2, 0x11}, {3, 0x11}});
    f.Dc(10), f.Dc(20), f.Dc(30);
    f.Scan({1, 2, 3}, 0, 0, 0, 1);
    f.Raw(0b100, 3);
    f.Scan({3, 1, 2}, 0, 0, 1, 0);
    files.push_back({"components out of order", f.File()});
  }
  {  // every component 2x2 (12 blocks per MCU), scans of one component each
    ProgressiveCraft f(16, 16, {{1, 0x22}, {2, 0x22}, {3, 0x22}});
    for (int id = 1; id <= 3; ++id) {
      for (int i = 0; i < 4; ++i) f.Dc(i == 0 ? 3 * id : 0);
      f.Scan({id}, 0, 0, 0, 0);
    }
    files.push_back({"12 blocks per MCU", f.File()});
  }
  for (const auto& [name, jpeg] : files) {
    Header header(jpeg);
    Image image;
    DecodedColumns columns;
    const int w = static_cast<int>(header.info.image_width);
    const int h = static_cast<int>(header.info.image_height);
    EXPECT_FALSE(DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), CropRect{0, 0, w, h}, 2,
                                 &image, &columns))
        << name;
    const Decoded own = DecodeWith(jpeg, CropRect{0, 0, w, h}, 2, true);
    const Decoded reference = DecodeWith(jpeg, CropRect{0, 0, w, h}, 2, false);
    EXPECT_EQ(own.status.ToString(), reference.status.ToString()) << name;
    if (own.status.ok() && reference.status.ok()) EXPECT_EQ(own.image.pixels, reference.image.pixels) << name;
  }
}

// The progressive corner planes are kept per decoding thread between
// images: a decode after a larger image, a different sampling, or a file
// refused half way gives the pixels a thread's first decode gives.
TEST(JpegProgressiveTest, PlanesKeptBetweenImagesLeaveNoTrace) {
  Encoding large;
  large.progressive = true;
  large.width = 259, large.height = 197, large.seed = 3;
  Encoding small;
  small.progressive = true;
  small.width = 77, small.height = 45, small.h = 1, small.v = 1, small.seed = 4;
  const std::string first = Encode(large), second = Encode(small);
  const std::string cut = first.substr(0, first.size() / 2);
  const CropRect crop{8, 8, 64, 32};
  auto decode = [&](const std::string& jpeg, Image* image) {
    Header header(jpeg);
    DecodedColumns columns;
    return DecodeScaledOwn(header.info, Bytes(jpeg), jpeg.size(), crop, 2, image, &columns);
  };
  Image alone;
  bool alone_ok = false;
  std::thread([&] { alone_ok = decode(second, &alone); }).join();  // a thread's first decode
  ASSERT_TRUE(alone_ok);
  std::thread([&] {
    Image image;
    ASSERT_TRUE(decode(first, &image));
    ASSERT_TRUE(decode(second, &image));
    EXPECT_EQ(image.pixels, alone.pixels) << "after a larger image";
    EXPECT_FALSE(decode(cut, &image));
    ASSERT_TRUE(decode(second, &image));
    EXPECT_EQ(image.pixels, alone.pixels) << "after a refused one";
  }).join();
}

}  // namespace
}  // namespace gpufeed
