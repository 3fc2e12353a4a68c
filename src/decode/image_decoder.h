// Image decoding for the decode pool: JPEG through libjpeg-turbo with
// DCT-domain scaling and region decoding, PNG through libpng, Netpbm
// (PBM/PGM/PPM) and BMP by gpufeed, WebP through libwebp, TIFF through
// libtiff. Output is always RGB,
// 8 bits, HWC (grayscale, CMYK/YCCK, palette and alpha images are converted,
// as PIL's convert("RGB") converts them).
//
// DecodeRegion decodes only what a crop needs: libjpeg-turbo scales in the
// DCT domain (1/8, 1/4, 1/2) when the crop's output is much smaller than
// the crop, skips the rows above and below it (jpeg_skip_scanlines) and
// decodes only the iMCU columns that cover it (jpeg_crop_scanline). A
// 224x224 training crop of a 500x375 ImageNet JPEG thus costs a fraction of
// a full decode.
//
// Thread safety: functions are reentrant; an Image is used by one thread.
#ifndef GPUFEED_DECODE_IMAGE_DECODER_H_
#define GPUFEED_DECODE_IMAGE_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

enum class ImageFormat { kUnknown, kJpeg, kPng, kPnm, kBmp, kWebp, kTiff };

struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
};

// A rectangle of the source image, in source pixels.
struct CropRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// RGB HWC pixels. The vector keeps its capacity between decodes, so a
// decode thread reusing one Image allocates nothing once warm.
struct Image {
  std::vector<uint8_t> pixels;
  int width = 0;
  int height = 0;
  uint8_t* row(int y) { return pixels.data() + static_cast<size_t>(y) * width * 3; }
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * 3; }
};

ImageFormat SniffImageFormat(const uint8_t* data, size_t size);

// Reads dimensions without decoding pixels. Corruption for malformed data,
// NotSupported for formats other than JPEG, PNG, Netpbm, BMP, WebP and TIFF
// (and for the TIFF layouts tiff_decoder.h lists).
Status ReadImageHeader(const uint8_t* data, size_t size, ImageHeader* header);

// Decodes `crop` (clamped to the image) into *out, scaled down by the
// largest DCT factor (1, 1/2, 1/4, 1/8) that keeps the result at least
// min_width x min_height (pass 0, 0 for no scaling). out->width/height are
// the decoded crop's size; *scale_denominator (optional) gets the factor.
// Images larger than max_pixels are refused before any allocation.
Status DecodeRegion(const uint8_t* data, size_t size, const CropRect& crop, int min_width,
                    int min_height, Image* out, int* scale_denominator = nullptr,
                    uint64_t max_pixels = 178956970);

namespace decode_internal {

// `crop` within a width x height image (an empty crop: all of it).
CropRect ClampCrop(const CropRect& crop, int width, int height);
// Resizes, or returns false when the memory is not there (a container's
// limit, many decode threads at once): the sample then fails with a Status
// instead of std::bad_alloc ending a decode thread and the process.
bool TryResize(std::vector<uint8_t>* buffer, size_t size);
// Internal, naming what could not be allocated for which image.
Status OutOfMemory(const char* what, uint64_t bytes, int width, int height);
// The start of a decode that writes RGB rows itself (PNG, Netpbm, BMP, WebP,
// TIFF):
// refuses a width x height image over max_pixels (Corruption naming
// `format`), clamps `requested` into *crop and sizes *out for it.
Status StartRgbDecode(const char* format, int width, int height, const CropRect& requested,
                      uint64_t max_pixels, Image* out, CropRect* crop);

}  // namespace decode_internal

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_IMAGE_DECODER_H_
