// Progressive JPEG entropy decoding for the DCT-scaled decode of
// exact=False: every scan of the file, keeping per block only the
// low-frequency corner a scaled transform uses (natural rows and columns
// 0-3) and which coefficients are nonzero (what a refinement scan needs of
// the others), and only the block rows down to the crop's bottom: the rest
// of each scan is skipped to its end marker. The AC scans of a component
// of which only the DC coefficient is kept are skipped whole.
//
// libjpeg reads the header up to the first scan (its checks stay); the
// markers between scans (DHT, DRI, COM, APPn) are read here. Anything else
// between scans, a progression libjpeg would warn about (a refinement
// before its first scan, a bad Ah/Al), arithmetic coding, or data this
// decoder does not follow exactly makes it return false: the caller then
// decodes with libjpeg. It never reads outside the file's bytes.
//
// Thread safety: reentrant.
#ifndef GPUFEED_DECODE_JPEG_PROGRESSIVE_H_
#define GPUFEED_DECODE_JPEG_PROGRESSIVE_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE declared first
#include <vector>

#include <jpeglib.h>

namespace gpufeed {
namespace jpeg_entropy {

// One block's kept coefficients: corner[r * 4 + c] for natural row r and
// column c below 4 (quantized, point transforms applied as libjpeg applies
// them); bit k of `nonzero` for each nonzero zig-zag coefficient k >= 1
// (all 0 in a plane that keeps only the DC: its AC scans are not read).
struct CornerBlock {
  int16_t corner[16];
  uint64_t nonzero;
};

// A frame component's blocks, on the grid libjpeg's coefficient arrays use
// (width padded to whole MCUs), rows [0, rows).
struct CornerPlane {
  // The zig-zag positions whose coefficients are kept (set before decoding;
  // only those of the 4 x 4 corner count, e.g. CornerPositions(2, 2); the DC
  // coefficient, position 0, is always kept); the corner's other
  // coefficients stay 0. A refinement's correction bits past the last kept
  // position are skipped unread, however many.
  uint64_t keep = ~0ull;
  int blocks_per_row = 0;
  int rows = 0;
  // rows * blocks_per_row, then a few blocks of slack (where the decoder's
  // block pointers end after a plane's last row; never read).
  std::vector<CornerBlock> blocks;
  // REQUIRES: 0 <= x < blocks_per_row, 0 <= y < rows (not checked).
  CornerBlock& at(int x, int y) { return blocks[static_cast<size_t>(y) * blocks_per_row + x]; }
};

// The most a decoding thread keeps of its corner planes between images (the
// caller releases them after a decode that held more): a 2560 x 1600 4:4:4
// photograph needs 7.7 MB.
constexpr size_t kRetainedCornerBytes = 32u << 20;

// The zig-zag positions of natural rows r < rows and columns c < cols.
uint64_t CornerPositions(int rows, int cols);

// How much of the AC coefficients' precision a decode reads.
enum class AcBits {
  // Every scan: the corners equal libjpeg's coefficients.
  kAll,
  // The AC refinement scans that set the coefficients' last bit (Ah > 0,
  // Al 0) are skipped unread, to their end marker: each kept AC coefficient
  // then differs from libjpeg's by at most 1 (one quantization step), with
  // its nonzero bit as before that scan. Those scans are most of a
  // progressive file's decoding time (libjpeg's default progression ends
  // with them); exact=False's scaled decode takes this (docs/tuning.md,
  // "The last bit of progressive AC coefficients").
  kSkipLastRefinement,
};

// Decodes every scan of the progressive JPEG whose header `info` holds
// (read from data[0, size)), the MCU rows [0, last_mcu_row] of each, into
// planes[c] for frame component c. False when it does not decode the file
// (above). REQUIRES: info.progressive_mode, info.num_components <= 3,
// info.src a memory source over data[0, size) (its position is checked).
bool DecodeProgressive(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                       int last_mcu_row, CornerPlane* planes, AcBits ac_bits = AcBits::kAll);

}  // namespace jpeg_entropy
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_PROGRESSIVE_H_
