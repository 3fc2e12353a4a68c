// WebP decoding to 8-bit RGB with the bytes of PIL's Image.open(f).convert("RGB")
// (Pillow decodes WebP through libwebp's WebPAnimDecoder into RGBA and drops
// the alpha byte; gpufeed links the same libwebp):
//   - lossy (VP8) and lossless (VP8L) files, with or without an alpha chunk:
//     alpha is dropped, not composited; ICC, EXIF and XMP chunks are ignored;
//   - animated files give their first frame as PIL's first frame is: the
//     canvas cleared to zero, the frame drawn at its offset, alpha dropped.
// A still image is decoded by libwebp down to the crop's last row only (rows
// below are not decoded), two rows above the crop's top at the least, so that
// the fancy chroma upsampling of the first kept row sees the row above it as a
// whole decode does. Built without libwebp (GPUFEED_HAVE_WEBP unset), every
// WebP file is NotSupported, naming the missing library.
#ifndef GPUFEED_DECODE_WEBP_DECODER_H_
#define GPUFEED_DECODE_WEBP_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {
namespace decode_internal {

// "RIFF" size "WEBP" and a first chunk "VP8 ", "VP8L" or "VP8X" (PIL's test).
bool LooksLikeWebp(const uint8_t* data, size_t size);

// The image's (canvas's) width and height from its first chunk. Corruption
// naming libwebp's status when the header is bad.
Status ReadWebpSize(const uint8_t* data, size_t size, int* width, int* height);

// Decodes `crop` (clamped to the image) into *out as RGB. Images larger than
// max_pixels are refused before any pixel buffer is allocated; a bad or
// truncated file is Corruption naming libwebp's status.
Status DecodeWebp(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                  uint64_t max_pixels);

}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_DECODE_WEBP_DECODER_H_
