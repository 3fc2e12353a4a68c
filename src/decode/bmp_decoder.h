// Windows/OS2 bitmaps (BMP) decoded to 8-bit RGB with the bytes of
// Pillow's Image.open(f).convert("RGB") (its BmpImagePlugin), for the
// .bmp files torchvision's ImageFolder lists:
//   - headers of 12 (OS/2 1.x), 40, 64, 108 and 124 bytes; bottom-up rows,
//     or top-down when the height is negative; rows padded to 4 bytes;
//   - 1, 4 and 8 bits: a palette of `colors` entries (BGR for OS/2, BGRX
//     otherwise; 2^bits when the header says 0), looked up; an index past
//     the palette gives (i, i, i), as Pillow's palette ramp does;
//   - 16 bits: 5-5-5, or 5-6-5 with those bitfields, each channel
//     v * 255 / max (integer division, Pillow's unpackers);
//   - 24 and 32 bits: BGR(X), and the byte-aligned 32-bit bitfield layouts
//     Pillow takes (XBGR, ABGR, RGBA, BGRA); alpha dropped;
//   - Pillow's offset quirk: a data offset right after the header skips a
//     palette of `colors` 4-byte entries.
// Refused with NotSupported (Pillow reads them, gpufeed does not): RLE4 and
// RLE8 compression. Refused with Corruption, as Pillow refuses them: other
// depths, bitfield layouts and compressions. Two files Pillow misreads
// (a 4-bit palette of exactly (i, i, i) for i < 16, an 8-bit one of black
// and white only: Pillow unpacks their indices as 8-bit and 1-bit samples)
// are decoded through their palette instead.
#ifndef GPUFEED_DECODE_BMP_DECODER_H_
#define GPUFEED_DECODE_BMP_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {

// "BM" and room for the file header's size field.
bool LooksLikeBmp(const uint8_t* data, size_t size);

// The image's width and height from its header. Corruption when bad.
Status ReadBmpSize(const uint8_t* data, size_t size, int* width, int* height);

// Decodes `crop` (clamped to the image) into *out as RGB, reading only the
// crop's rows. Images larger than max_pixels are refused before any pixel
// buffer is allocated.
Status DecodeBmp(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                 uint64_t max_pixels);

}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_BMP_DECODER_H_
