// A libjpeg-turbo decompressor kept between images: one per decode thread.
//
// A JpegDecoder is created once and reused: per image, Start parses the
// header once (the dimensions the crop is chosen from) and DecodeRegion
// decodes the crop from that same parse, reading many rows per libjpeg
// call; no decompressor is created or destroyed per image. Results are those
// of DecodeRegion (image_decoder.h), byte for byte.
//
// Baseline JPEGs in one scan (most photographs) are entropy-decoded by
// gpufeed's decoder inside libjpeg's decompression (jpeg_mcu.h): the same
// coefficients, so the same pixels, in less time; libjpeg decodes every
// other JPEG, and any data gpufeed's decoder does not follow.
//
// Errors: Corruption naming the libjpeg message (truncated files included,
// which libjpeg would otherwise pad with gray); the decoder is reset and
// usable for the next image after any error.
//
// Thread safety: one thread at a time per JpegDecoder.
#ifndef GPUFEED_DECODE_JPEG_DECODER_H_
#define GPUFEED_DECODE_JPEG_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "decode/image_decoder.h"
#include "gpufeed/status.h"

namespace gpufeed {

// Where the requested columns lie in an image decoded with whole iMCU
// columns (DecodeRegion's `columns`): out columns [skipped, skipped + width).
struct DecodedColumns {
  int skipped = 0;
  int width = 0;
};

// The DCT scale DecodeRegion decodes `crop` at (its clamped crop): the
// largest denominator of 8, 4 and 2 that keeps it at least min_width x
// min_height, else 1 (also when either is not positive).
int DctDenominator(const CropRect& crop, int min_width, int min_height);

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses the header of the JPEG in `data`. REQUIRES: data stays valid
  // until DecodeRegion returns or the next Start.
  [[nodiscard]] Status Start(const uint8_t* data, size_t size, ImageHeader* header);

  // Decodes `crop` of the image Start parsed, as DecodeRegion does
  // (image_decoder.h: clamping, DCT scaling, max_pixels). REQUIRES: Start
  // returned OK and DecodeRegion was not called since.
  // With `columns`, the rows are decoded straight into *out with the whole
  // iMCU columns libjpeg-turbo decodes (no copy to cut them), and *columns
  // says where the requested ones are; without, *out is exactly the crop.
  // `approximate` (with `columns`): a DCT-scaled decode of a baseline or
  // progressive JPEG goes through gpufeed's own entropy decoders when they
  // take it, else libjpeg's (jpeg_scaled.h): faster, and close to libjpeg's
  // pixels but not identical.
  [[nodiscard]] Status DecodeRegion(const CropRect& crop, int min_width, int min_height,
                                    Image* out, int* scale_denominator, uint64_t max_pixels,
                                    DecodedColumns* columns = nullptr, bool approximate = false);

  // Whether the exact decode reads the entropy-coded data with gpufeed's
  // decoder where it takes the image (jpeg_mcu.h; the pixels are the same
  // either way) or always with libjpeg's. Default: gpufeed's, unless the
  // environment sets GPUFEED_LIBJPEG_ENTROPY=1.
  void set_own_entropy(bool own);
  // Whether the last DecodeRegion went through gpufeed's entropy decoder to
  // the end (not refused, not given up for libjpeg's).
  bool own_entropy_used() const;

 private:
  // DecodeRegion on the clamped crop, once: with gpufeed's entropy decoder
  // when own_entropy and the image allows (*hook_failed set when it gave up:
  // decode again without it); a call with *hook_failed set parses the
  // header again first.
  Status DecodeCrop(const CropRect& crop, int min_width, int min_height, Image* out,
                    int* scale_denominator, DecodedColumns* columns, bool approximate,
                    bool own_entropy, bool* hook_failed);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gpufeed

#endif  // GPUFEED_DECODE_JPEG_DECODER_H_
