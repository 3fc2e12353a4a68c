// The pixel layouts of TIFF files that gpufeed decodes, as Pillow 9.4's
// TiffImagePlugin names them (its OPEN_INFO table: a mode and rawmode per
// photometric interpretation, sample format, fill order, bits and extra
// samples), and their samples converted to RGB as Pillow's unpackers and
// Image.convert("RGB") convert them (tiff_decoder.h lists the rules).
#ifndef GPUFEED_DECODE_TIFF_LAYOUT_H_
#define GPUFEED_DECODE_TIFF_LAYOUT_H_

#include <tiffio.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {
namespace tiff {

enum class Kind { kBilevel, kGray, kGray16, kSigned, kFloat, kRgb, kPalette, kCmyk };

// How the file's samples become RGB (Pillow's mode and rawmode for the
// file's OPEN_INFO key, and its convert("RGB")).
struct Layout {
  Kind kind = Kind::kGray;
  int bits = 8;             // per sample
  int samples = 1;          // per pixel, extra samples included
  bool inverted = false;    // min-is-white bilevel or gray
  bool premultiplied = false;
  bool planar = false;      // separate planes, one per sample
  int width = 0;            // as stored, before the orientation
  int height = 0;
  int orientation = 1;
  std::array<uint8_t, 3 * 256> palette{};  // RGB, the colormap's high bytes
};

// Whether the first IFD of a classic or BigTIFF file holds `tag` (read
// from the bytes: libtiff fills in some missing tags with a guess).
// REQUIRES: size >= 8.
bool FirstIfdHolds(const uint8_t* data, size_t size, uint16_t tag);

// The layout of the open file's first image, or why it is not decoded
// (NotSupported naming it; Corruption for a bad header). For YCbCr
// compressed with JPEG it asks libtiff for RGB rows (JPEGCOLORMODE_RGB).
// `photometric_tagged`: the file holds the tag (Pillow takes 0 when it
// does not, where libtiff guesses).
Status ReadLayout(TIFF* tif, bool photometric_tagged, Layout* layout);

// Columns [x0, x1) of one decoded row to RGB at `out`. planes[p] is plane
// p's row (separate planes) or planes[0] the interleaved row; `first` is the
// file column of the row's first sample (a tile's left edge).
void RowToRgb(const Layout& layout, const uint8_t* const* planes, int first, int x0, int x1,
              uint8_t* out);

}  // namespace tiff
}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_TIFF_LAYOUT_H_
