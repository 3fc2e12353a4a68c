// The DCT-scaled decode of exact=False with gpufeed's own entropy decoders
// (jpeg_entropy.h: baseline; jpeg_progressive.h: progressive): 1/2, 1/4 or
// 1/8 of a JPEG's crop, RGB.
//
// libjpeg-turbo parses the header (jpeg_read_header; its checks and
// messages stay), then this reads the scans: each block's low-frequency
// corner (2x2 coefficients at 1/4, say) is dequantized and inverse
// transformed at the scaled size, chroma is brought to the luma's size by a
// larger scaled transform (or, at 1/2, pixel replication) and converted to
// RGB as JFIF defines. The pixels are close to libjpeg's scaled decode, not
// identical: the transform uses the corner only (libjpeg's reduced
// transforms also use the odd high frequencies) and floating point (libjpeg:
// integers). exact=False promises a PSNR, not bytes (docs/tuning.md).
//
// Thread safety: reentrant.
#ifndef GPUFEED_DECODE_JPEG_SCALED_H_
#define GPUFEED_DECODE_JPEG_SCALED_H_

#include <cstddef>
#include <cstdint>

#include <jpeglib.h>

#include "decode/image_decoder.h"

namespace gpufeed {

struct DecodedColumns;

// Decodes rows [crop.y, crop.y + crop.height) / denominator of the image
// whose header `info` holds (read from data[0, size) by jpeg_read_header;
// libjpeg's state is not changed), with the whole MCU columns that cover the
// crop's columns, into *out; *columns says where the crop's columns are.
// Returns false, with *out unspecified, when the image is not one this path
// decodes, or its data is not one it follows exactly as libjpeg reads it
// (the list: docs/tuning.md, "What stays with libjpeg"): the caller then
// decodes with libjpeg.
// REQUIRES: denominator 2, 4 or 8; crop within the image, non-empty;
// info.src a memory source over data[0, size).
bool DecodeScaledOwn(const jpeg_decompress_struct& info, const uint8_t* data, size_t size,
                     const CropRect& crop, int denominator, Image* out, DecodedColumns* columns);

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_SCALED_H_
