// PNG decoding to 8-bit RGB with the bytes of PIL's Image.open(f).convert("RGB"),
// which is what torchvision's ImageFolder loader hands its transforms; the
// exact transform's promise (PIL's bytes) therefore holds on PNGs of every
// colour type and bit depth, not only on 8-bit RGB(A):
//   - 16-bit RGB, RGBA and gray+alpha samples keep their high byte;
//   - 16-bit gray is PIL's 32-bit "I" image, converted by clipping: values
//     above 255 become 255, the rest keep their value;
//   - 1, 2 and 4-bit gray are scaled to 0-255 (x255, x85, x17); palettes are
//     looked up; alpha and tRNS transparency are dropped, not composited;
//   - gAMA, cHRM, sRGB, iCCP and sBIT are ignored (PIL applies none of them;
//     libpng's simplified API would convert a gAMA other than sRGB's);
//   - Adam7-interlaced files are read whole, the others row by row down to
//     the crop's last row only.
#ifndef GPUFEED_DECODE_PNG_DECODER_H_
#define GPUFEED_DECODE_PNG_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {

// The image's width and height from its IHDR chunk. Corruption when the
// signature or the header is bad.
Status ReadPngSize(const uint8_t* data, size_t size, int* width, int* height);

// Decodes `crop` (clamped to the image) into *out as RGB. Images larger
// than max_pixels are refused before any pixel buffer is allocated; a bad
// or truncated file is Corruption naming the row that failed.
Status DecodePng(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                 uint64_t max_pixels);

}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_PNG_DECODER_H_
