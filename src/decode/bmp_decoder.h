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
//     palette of `colors` 4-byte entries;
//   - RLE8 and RLE4 compression (1-, 4- and 8-bit palette images), expanded as
//     Pillow 9.4's BmpRleDecoder expands them, its quirks included (see
//     ExpandRle); the whole image's indices are expanded, then the crop's
//     rows looked up.
// Refused with Corruption, as Pillow refuses them: other depths, bitfield
// layouts and compressions, RLE of 16-32-bit pixels, RLE data that ends
// before the last row, a palette of more than 256 entries held in the file
// (unless they are grey: Pillow then makes an "L" image). Three
// files Pillow misreads or cannot load are decoded through their palette
// instead: a 4-bit raw palette of exactly (i, i, i) for i < 16 and an 8-bit
// raw one of black and white only (Pillow unpacks their indices as 8-bit and
// 1-bit samples), and an RLE image with a black-and-white palette of two
// entries (Pillow's RLE decoder cannot write into its 1-bit image).
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
