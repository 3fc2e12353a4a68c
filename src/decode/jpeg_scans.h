// The scan headers of a progressive JPEG as jpeg_progressive.cc reads them:
// the Huffman tables defined so far (libjpeg's from the header, then the
// DHT segments between scans), the restart interval, each scan's
// parameters, and libjpeg's checks of the progression. Internal to
// src/decode.
//
// Thread safety: one thread at a time per ScanHeaders.
#ifndef GPUFEED_DECODE_JPEG_SCANS_H_
#define GPUFEED_DECODE_JPEG_SCANS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <memory>

#include <jpeglib.h>

#include "decode/jpeg_entropy.h"

namespace gpufeed {
namespace jpeg_entropy {

constexpr int kMaxScanComponents = 4;

// The built baseline table (SharedBaselineTable) of the DHT libjpeg holds for
// scan component `comp`: its DC table when `dc`, else its AC table (with
// its pair table when `pairs`); nullptr when the number is out of range, no
// table is defined, or Build refuses it. May throw std::bad_alloc
// (SharedBaselineTable).
const HuffmanTable* SharedTableOf(const jpeg_decompress_struct& info,
                                  const jpeg_component_info& comp, bool dc, bool pairs = true);

struct ScanParams {
  int count = 0;
  int component[kMaxScanComponents] = {};  // frame component indices
  int dc_table[kMaxScanComponents] = {};
  int ac_table[kMaxScanComponents] = {};
  int ss = 0, se = 0, ah = 0, al = 0;
};

class ScanHeaders {
 public:
  // The tables and restart interval libjpeg read with the header, and the
  // first scan's parameters (*first). False for a scan with more components
  // than a scan holds.
  bool Start(const jpeg_decompress_struct& info, ScanParams* first);

  // libjpeg's checks of a progressive scan (jdphuff.c start_pass), and the
  // progression's state updated; then the scan's tables built. False for
  // what libjpeg refuses or warns about (left to it).
  bool Prepare(const ScanParams& scan);

  // From the marker `marker` (its code read; `at` just after it; the file
  // ends at `end`): the segments between scans, up to the next SOS (*scan,
  // *start: its data) or EOI (*done). False for any other marker (DQT,
  // DNL, a frame, ...) or a malformed segment.
  bool ReadMarkers(int marker, const uint8_t* at, const uint8_t* end, ScanParams* scan,
                   const uint8_t** start, bool* done);

  // The built table of class `cls` (0 DC, 1 AC) and number `t`. REQUIRES:
  // Prepare returned true for a scan that uses it.
  const HuffmanTable& table(int cls, int t) const { return built_[4 * cls + t]; }
  int restart_interval = 0;

 private:
  bool CheckProgression(const ScanParams& scan);
  bool BuildTables(const ScanParams& scan);
  bool ReadDht(const uint8_t* segment, size_t bytes);
  bool ReadSos(const uint8_t* segment, size_t bytes, ScanParams* scan);

  const jpeg_decompress_struct* info_ = nullptr;
  int8_t coef_bits_[kMaxComponents][64];  // per coefficient, its last Al; -1 before any scan
  // DHT contents as defined so far ([0]: DC, [1]: AC), built when used.
  bool defined_[2][4] = {};
  uint8_t counts_[2][4][17] = {};
  uint8_t symbols_[2][4][256] = {};
  bool built_valid_[2][4] = {};
  std::unique_ptr<HuffmanTable[]> built_{new HuffmanTable[8]};  // [4 * class + table]
};

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_SCANS_H_
