// Fuzz target: JPEG/PNG/Netpbm/BMP header reading, region decode and the full image
// transform of the decode threads (random-resized crop, flip, resample,
// normalize). The last byte picks the mode and the seed, so both the train
// and the eval path, exact and not (exact=false: gpufeed's own entropy
// decoder, jpeg_entropy.h, for DCT-scaled baseline JPEGs), every output
// dtype/layout and every resampling path the CPU has are reached. The transform's scratch (its JPEG decompressor
// included) lives across inputs, as in a decode thread: a decoder left by a
// broken file must serve the next one. And for JPEGs, a differential check:
// the exact decode through gpufeed's entropy decoder inside libjpeg
// (jpeg_mcu.h) must give libjpeg's own status and bytes, or the fuzzer
// aborts; so must a progressive JPEG rewritten as baseline by pack's
// RewriteProgressiveJpegAsBaseline, and any JPEG RewriteJpegWithRestarts
// rewrites with restart markers (the crop then passes over intervals). For
// PNG, Netpbm and BMP files, the crop must be the same region of a whole
// decode.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decode/image_decoder.h"
#include "decode/jpeg_decoder.h"
#include "decode/resample.h"
#include "decode/transform.h"
#include "fuzz_util.h"
#include "gpufeed/writer.h"
#include "jpeg_compare_util.h"

using namespace gpufeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t control = data[size - 1];
  size -= 1;
  ImageHeader header;
  Status status = ReadImageHeader(data, size, &header);
  if (status.ok() && (header.width <= 0 || header.height <= 0)) std::abort();
  const bool header_read = status.ok();

  // A fuzzing budget, not a product limit: 16 M pixels keeps every decode
  // in the fuzzer's 2 GiB memory limit (the default limit is tested in
  // tests/cpp/decode/image_limits_test.cc).
  const uint64_t max_pixels = 16u << 20;
  Image image;
  CropRect crop{control % 7, control % 5, 8 + control % 13, 8 + control % 11};
  status = DecodeRegion(data, size, crop, control % 3 == 0 ? 4 : 0, control % 3 == 0 ? 4 : 0,
                        &image, nullptr, max_pixels);
  if (status.ok() &&
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    std::abort();
  }

  if (SniffImageFormat(data, size) == ImageFormat::kJpeg) {
    // Both decoders live across inputs, as the transform's does.
    static JpegDecoder own_entropy, libjpeg_entropy;
    const int min_side = control % 3 == 1 ? 4 : 0;
    const RegionDecode own = DecodeRegionWith(&own_entropy, data, size, crop, min_side, min_side,
                                              max_pixels, true, false);
    const RegionDecode reference = DecodeRegionWith(&libjpeg_entropy, data, size, crop, min_side,
                                                    min_side, max_pixels, false, false);
    if (!SameDecode(own, reference)) std::abort();
    // A progressive JPEG that pack's rewrite takes must decode to the same
    // pixels as baseline (a JPEG it does not take must come back unchanged).
    std::string rewritten(reinterpret_cast<const char*>(data), size);
    const bool within_budget =
        header_read && static_cast<uint64_t>(header.width) * header.height <= max_pixels;
    if (!within_budget) {
      // The rewrite's own limit is the product's (larger than the fuzzer's
      // memory budget): not tried.
    } else if (RewriteProgressiveJpegAsBaseline(&rewritten)) {
      const RegionDecode after =
          DecodeRegionWith(&libjpeg_entropy, reinterpret_cast<const uint8_t*>(rewritten.data()),
                           rewritten.size(), crop, min_side, min_side, max_pixels, false, false);
      if (!reference.status.ok() || !SameDecode(after, reference)) std::abort();
    } else if (rewritten != std::string(reinterpret_cast<const char*>(data), size)) {
      std::abort();
    }
    std::string restarted(reinterpret_cast<const char*>(data), size);
    if (within_budget && RewriteJpegWithRestarts(&restarted, 1 + control % 5, 0)) {
      for (bool own : {true, false}) {
        const RegionDecode after = DecodeRegionWith(
            own ? &own_entropy : &libjpeg_entropy, reinterpret_cast<const uint8_t*>(restarted.data()),
            restarted.size(), crop, min_side, min_side, max_pixels, own, false);
        if (!reference.status.ok() || !SameDecode(after, reference)) std::abort();
      }
    } else if (restarted != std::string(reinterpret_cast<const char*>(data), size)) {
      std::abort();
    }
  }

  Image whole;
  const ImageFormat format = SniffImageFormat(data, size);
  const bool whole_checked =
      format == ImageFormat::kPng || format == ImageFormat::kPnm || format == ImageFormat::kBmp ||
      format == ImageFormat::kWebp || format == ImageFormat::kTiff;
  if (whole_checked &&
      DecodeRegion(data, size, {}, 0, 0, &whole, nullptr, max_pixels).ok()) {
    // A file that decodes whole decodes cropped, to the same region (a crop
    // may also succeed where the whole fails: rows below it are not read).
    if (!status.ok()) std::abort();
    const CropRect clamped = decode_internal::ClampCrop(crop, header.width, header.height);
    if (image.width != clamped.width || image.height != clamped.height) std::abort();
    for (int y = 0; y < image.height; ++y) {
      if (std::memcmp(image.row(y), whole.row(clamped.y + y) + 3 * clamped.x,
                      3 * static_cast<size_t>(image.width)) != 0) {
        std::abort();
      }
    }
  }

  ImageTransformOptions options;
  options.size = 8 + control % 9;
  options.train = (control & 1) != 0;
  options.max_pixels = max_pixels;
  options.dtype = static_cast<OutputDtype>((control >> 1) % 4);
  options.layout = (control & 0x20) ? OutputLayout::kNHWC : OutputLayout::kNCHW;
  options.exact = (control & 0x40) == 0;
  std::vector<uint8_t> out(static_cast<size_t>(options.size) * options.size * 3 *
                           TensorDtypeSize(options.dtype));
  // Unsupported paths are refused and leave the last one in place.
  (void)SetResamplePathForTesting(static_cast<ResamplePath>((control >> 2) % 3));
  static TransformScratch scratch;
  CropParameters parameters;
  status = TransformImage(data, size, options, control, 1, control, out.data(), &scratch,
                          &parameters);
  if (status.ok() && (parameters.width <= 0 || parameters.height <= 0)) std::abort();
  return 0;
}
