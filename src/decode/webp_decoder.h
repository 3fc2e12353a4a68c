// WebP decoding to 8-bit RGB with the bytes of PIL's Image.open(f).convert("RGB")
// (Pillow decodes WebP through libwebp's WebPAnimDecoder into RGBA and drops
// the alpha byte; gpufeed links the same libwebp and follows the same steps):
//   - the container is parsed by libwebp's demuxer, which refuses what
//     Pillow refuses (chunks out of order, cut by the RIFF size, ...);
//   - the first frame is decoded (lossy VP8 or lossless VP8L, with or
//     without an alpha chunk: alpha dropped, not composited) and placed at
//     its offset on a canvas cleared to black, as Pillow's first frame of an
//     animation is (a still image's frame is the whole canvas); ICC, EXIF and
//     XMP chunks are ignored;
//   - only the crop's part of the frame is decoded: libwebp stops after the
//     crop's last row (plus one), and starts from an even row above its
//     first (see DecodeFrameRows: the chroma upsampling of the kept rows then
//     equals the whole image's); memory is the crop's rows, whatever the
//     canvas's size.
// Built without libwebp (GPUFEED_HAVE_WEBP unset), every WebP file is
// NotSupported, naming the missing library.
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
