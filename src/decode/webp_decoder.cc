#include "decode/webp_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#ifdef GPUFEED_HAVE_WEBP
#include <webp/decode.h>
#include <webp/demux.h>
#endif

namespace gpufeed {
namespace decode_internal {

bool LooksLikeWebp(const uint8_t* data, size_t size) {
  if (size < 16 || std::memcmp(data, "RIFF", 4) != 0 || std::memcmp(data + 8, "WEBP", 4) != 0) {
    return false;
  }
  const char* chunk = reinterpret_cast<const char*>(data + 12);
  return std::memcmp(chunk, "VP8 ", 4) == 0 || std::memcmp(chunk, "VP8L", 4) == 0 ||
         std::memcmp(chunk, "VP8X", 4) == 0;
}

#ifndef GPUFEED_HAVE_WEBP

namespace {
Status NoWebp() {
  return Status::NotSupported(
      "a WebP image, and this build of gpufeed has no libwebp "
      "(install libwebp-dev and rebuild)");
}
}  // namespace

Status ReadWebpSize(const uint8_t*, size_t, int*, int*) { return NoWebp(); }

Status DecodeWebp(const uint8_t*, size_t, const CropRect&, Image*, uint64_t) { return NoWebp(); }

#else  // GPUFEED_HAVE_WEBP

namespace {

const char* StatusName(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "not enough data (the file is cut short)";
  }
  return "unknown libwebp status";
}

Status Failed(const char* what, VP8StatusCode code, int width, int height) {
  std::string message = std::string("WebP ") + what + ": " + StatusName(code);
  if (width > 0) message += " (" + std::to_string(width) + "x" + std::to_string(height) + ")";
  if (code == VP8_STATUS_OUT_OF_MEMORY) return Status::Internal("out of memory: " + message);
  return Status::Corruption(message);
}

// Copies crop's columns of RGBA rows (stride in bytes) into *out as RGB.
void CopyRgba(const uint8_t* rgba, size_t stride, const CropRect& crop, Image* out) {
  for (int y = 0; y < crop.height; ++y) {
    const uint8_t* in = rgba + (crop.y + y) * stride + size_t{4} * crop.x;
    uint8_t* row = out->row(y);
    for (int x = 0; x < crop.width; ++x) {
      row[3 * x] = in[4 * x];
      row[3 * x + 1] = in[4 * x + 1];
      row[3 * x + 2] = in[4 * x + 2];
    }
  }
}

// The first frame of an animation, as Pillow's WebPAnimDecoder gives it.
Status DecodeFirstFrame(const uint8_t* data, size_t size, const CropRect& crop, int width,
                        int height, Image* out) {
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) {
    return Status::Internal("libwebp: WebPAnimDecoderOptionsInit failed (version mismatch)");
  }
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPData input{data, size};
  WebPAnimDecoder* decoder = WebPAnimDecoderNew(&input, &options);
  if (decoder == nullptr) {
    return Status::Corruption("WebP animation: libwebp's demuxer refused the file (" +
                              std::to_string(width) + "x" + std::to_string(height) + ")");
  }
  uint8_t* canvas = nullptr;
  int timestamp = 0;
  const bool ok = WebPAnimDecoderGetNext(decoder, &canvas, &timestamp) != 0;
  if (ok) CopyRgba(canvas, size_t{4} * width, crop, out);
  WebPAnimDecoderDelete(decoder);
  if (!ok) return Status::Corruption("WebP animation: its first frame does not decode");
  return Status::OK();
}

}  // namespace

Status ReadWebpSize(const uint8_t* data, size_t size, int* width, int* height) {
  WebPBitstreamFeatures features;
  const VP8StatusCode code = WebPGetFeatures(data, size, &features);
  if (code != VP8_STATUS_OK) return Failed("header", code, 0, 0);
  *width = features.width;
  *height = features.height;
  return Status::OK();
}

Status DecodeWebp(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                  uint64_t max_pixels) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return Status::Internal("libwebp: WebPInitDecoderConfig failed (version mismatch)");
  }
  VP8StatusCode code = WebPGetFeatures(data, size, &config.input);
  if (code != VP8_STATUS_OK) return Failed("header", code, 0, 0);
  const int width = config.input.width, height = config.input.height;
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(StartRgbDecode("WebP", width, height, requested, max_pixels, out, &crop));
  if (config.input.has_animation) return DecodeFirstFrame(data, size, crop, width, height, out);
  // Whole rows from `top` (even, as libwebp's cropping wants, and above the
  // crop's first row unless that is the image's) to one row past the crop
  // where there is one: libwebp upsamples the chroma of the first and last
  // rows it emits as an image's edges, which they are not here.
  const int top = crop.y > 0 ? (crop.y - 1) & ~1 : 0;
  const int bottom = std::min(height, crop.y + crop.height + 1);
  const size_t stride = size_t{3} * width;
  thread_local std::vector<uint8_t> rows;
  if (!TryResize(&rows, stride * (bottom - top))) {
    return OutOfMemory("WebP rows", uint64_t{stride} * (bottom - top), width, height);
  }
  config.options.use_cropping = 1;
  config.options.crop_left = 0;
  config.options.crop_top = top;
  config.options.crop_width = width;
  config.options.crop_height = bottom - top;
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = rows.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = rows.size();
  code = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) return Failed("data", code, width, height);
  for (int y = 0; y < crop.height; ++y) {
    std::memcpy(out->row(y), rows.data() + (crop.y - top + y) * stride + size_t{3} * crop.x,
                size_t{3} * crop.width);
  }
  return Status::OK();
}

#endif  // GPUFEED_HAVE_WEBP

}  // namespace decode_internal
}  // namespace gpufeed
