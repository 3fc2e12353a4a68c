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
  int bits = 8;           // per sample
  int samples = 1;        // per pixel, extra samples included
  bool inverted = false;  // min-is-white bilevel or gray
  bool premultiplied = false;
  bool planar = false;  // separate planes, one per sample
  int width = 0;        // as stored, before the orientation
  int height = 0;
  int orientation = 1;
  std::array<uint8_t, 3 * 256> palette{};  // RGB, the colormap's high bytes
};

// The first IFD of a classic or BigTIFF file, read from its bytes: the
// tags libtiff fills in, drops or repairs are read as written, as Pillow
// reads them. Lookups outside the file fail.
class FirstIfd {
 public:
  struct Entry {
    uint16_t type = 0;  // TIFF_SHORT or TIFF_LONG (others are not found)
    int width = 0;      // bytes a value
    uint64_t count = 0;
    uint64_t values = 0;  // file offset of the first value
  };
  FirstIfd(const uint8_t* data, size_t size);
  bool Find(uint16_t tag, Entry* entry) const;
  bool Value(const Entry& entry, uint64_t index, uint32_t* value) const;

 private:
  bool Read(uint64_t at, int bytes, uint64_t* value) const;

  const uint8_t* data_;
  size_t size_;
  bool big_endian_ = false;
  bool bigtiff_ = false;
  uint64_t count_ = 0;    // entries
  uint64_t entries_ = 0;  // file offset of the first
};

// The layout of the open file's first image, or why it is not decoded
// (NotSupported naming it; Corruption for a bad header). For YCbCr
// compressed with JPEG it asks libtiff for RGB rows (JPEGCOLORMODE_RGB).
// `ifd`: the same file's first IFD, for the tags Pillow reads as written.
Status ReadLayout(TIFF* tif, const FirstIfd& ifd, Layout* layout);

// Columns [x0, x1) of one decoded row to RGB at `out`. planes[p] is plane
// p's row (separate planes) or planes[0] the interleaved row; `first` is the
// file column of the row's first sample (a tile's left edge).
void RowToRgb(const Layout& layout, const uint8_t* const* planes, int first, int x0, int x1,
              uint8_t* out);

}  // namespace tiff
}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_TIFF_LAYOUT_H_
