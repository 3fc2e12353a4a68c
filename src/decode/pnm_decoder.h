// Netpbm images (PBM, PGM, PPM: P1-P6) decoded to 8-bit RGB with the bytes
// of Pillow's Image.open(f).convert("RGB") (its PpmImagePlugin), so that an
// ImageFolder of .ppm/.pgm/.pbm files (GTSRB's, say) gives torchvision's
// pixels:
//   - the header is whitespace-separated decimal tokens of at most 10
//     characters; '#' starts a comment up to CR or LF, also inside a token;
//     the single whitespace byte after the last token ends the header;
//   - P4 (raw bitmap, rows padded to bytes) and P1 (plain: '0'/'1' bytes,
//     whitespace optional): 1 is black (0), 0 white (255);
//   - P5/P6 with maxval 255: samples as they are; other maxvals (2-byte
//     big-endian samples above 255) are scaled to 0-255 as
//     min(255, round(v / maxval * 255)), Python's round (half to even);
//   - a PGM with maxval above 255 is Pillow's 32-bit "I" image, scaled to
//     0-65535 the same way (maxval 65535: as it is) and then clipped to 255
//     by the conversion to RGB;
//   - P2/P3 (plain): decimal tokens, comments anywhere, a value above maxval
//     is an error, as in Pillow.
// Raw (P4-P6) files are read only down to the crop's last row; plain ones
// are parsed from the start. Bad or short data is Corruption naming the
// byte offset.
#ifndef GPUFEED_DECODE_PNM_DECODER_H_
#define GPUFEED_DECODE_PNM_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {

// 'P', a digit 1-6, and a whitespace byte.
bool LooksLikePnm(const uint8_t* data, size_t size);

// The image's width and height from its header. Corruption when bad.
Status ReadPnmSize(const uint8_t* data, size_t size, int* width, int* height);

// Decodes `crop` (clamped to the image) into *out as RGB. Images larger
// than max_pixels are refused before any pixel buffer is allocated.
Status DecodePnm(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                 uint64_t max_pixels);

}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_PNM_DECODER_H_
