// JFIF YCbCr to interleaved RGB rows for the DCT-scaled decode of
// exact=False (jpeg_scaled.cc), in libjpeg's 16-bit fixed point
// (jdcolor.c): with Cb' = Cb - 128 and Cr' = Cr - 128,
//   R = Y + round(1.40200 Cr'), G = Y + round(-0.34414 Cb' - 0.71414 Cr'),
//   B = Y + round(1.77200 Cb'),
// each product FIX()ed and rounded as libjpeg rounds it, then clamped to
// 0..255. The SSE4.1 row (taken on the paths of ActiveResamplePath() other
// than scalar) gives the scalar row's bytes exactly: it splits each constant
// into a multiple of 2^16 and a part that fits pmaddwd (ycc_rgb.cc).
#ifndef GPUFEED_DECODE_YCC_RGB_H_
#define GPUFEED_DECODE_YCC_RGB_H_

#include <cstdint>

namespace gpufeed {

// rgb[3x .. 3x + 2] for x in [0, width) from luma[x], cb[x], cr[x].
// REQUIRES: width >= 0; the rows hold width values (rgb 3 * width bytes).
void YccToRgbRow(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr, int width,
                 uint8_t* rgb);

// rgb[3x .. 3x + 2] = luma[x] for x in [0, width): a grayscale row as RGB.
void GrayToRgbRow(const uint8_t* luma, int width, uint8_t* rgb);

namespace ycc_rgb_internal {
// The scalar rows, whatever the CPU (the reference the tests hold the SIMD
// rows to).
void YccToRgbScalar(const uint8_t* luma, const uint8_t* cb, const uint8_t* cr, int width,
                    uint8_t* rgb);
void GrayToRgbScalar(const uint8_t* luma, int width, uint8_t* rgb);
}  // namespace ycc_rgb_internal

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_YCC_RGB_H_
