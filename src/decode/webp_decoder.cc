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

// libwebp's failure to decode a width x height image's data.
Status Failed(VP8StatusCode code, int width, int height) {
  const std::string message = std::string("WebP data: ") + StatusName(code) + " (" +
                              std::to_string(width) + "x" + std::to_string(height) + ")";
  if (code == VP8_STATUS_OUT_OF_MEMORY) return Status::Internal("out of memory: " + message);
  return Status::Corruption(message);
}

// The container as Pillow's WebPAnimDecoder sees it: parsed by libwebp's
// demuxer (which refuses what Pillow refuses: chunks out of order, a RIFF
// size that cuts a chunk, ...), and its first frame.
class Demuxed {
 public:
  Demuxed(const uint8_t* data, size_t size) {
    const WebPData input{data, size};
    demux_ = WebPDemux(&input);
    has_frame_ = demux_ != nullptr && WebPDemuxGetFrame(demux_, 1, &frame_) != 0;
  }
  ~Demuxed() {
    if (has_frame_) WebPDemuxReleaseIterator(&frame_);
    WebPDemuxDelete(demux_);
  }
  Demuxed(const Demuxed&) = delete;
  Demuxed& operator=(const Demuxed&) = delete;

  Status status() const {
    if (demux_ == nullptr) {
      return Status::Corruption(
          "WebP container: libwebp's demuxer refuses it (a chunk cut "
          "short, out of order or missing; Pillow refuses it too)");
    }
    if (!has_frame_) return Status::Corruption("WebP container: no image frame");
    return Status::OK();
  }
  int width() const { return static_cast<int>(WebPDemuxGetI(demux_, WEBP_FF_CANVAS_WIDTH)); }
  int height() const { return static_cast<int>(WebPDemuxGetI(demux_, WEBP_FF_CANVAS_HEIGHT)); }
  const WebPIterator& frame() const { return frame_; }

 private:
  WebPDemuxer* demux_ = nullptr;
  WebPIterator frame_{};
  bool has_frame_ = false;
};

// Decodes rows [first, last) of `frame` (whole rows, RGB) into a buffer of
// this thread's; *rows points at row `first`, frame.width * 3 bytes a row,
// valid until the thread's next call. libwebp decodes only down to the last row it is
// asked for; it upsamples the chroma of the first and last rows it emits as
// an image's edges, which they are not here, so it is asked for whole rows
// from an even row above `first` (as its cropping wants; none above the
// frame's first row) to one row past `last` where there is one, and those
// two are dropped.
Status DecodeFrameRows(const WebPIterator& frame, int first, int last, const uint8_t** rows,
                       int canvas_width, int canvas_height) {
  const int top = first > 0 ? (first - 1) & ~1 : 0;
  const int bottom = std::min(frame.height, last + 1);
  const size_t stride = size_t{3} * frame.width;
  thread_local std::vector<uint8_t> decoded;
  if (!TryResize(&decoded, stride * (bottom - top))) {
    return OutOfMemory("WebP rows", uint64_t{stride} * (bottom - top), canvas_width, canvas_height);
  }
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return Status::Internal("libwebp: WebPInitDecoderConfig failed (version mismatch)");
  }
  config.options.use_cropping = 1;
  config.options.crop_left = 0;
  config.options.crop_top = top;
  config.options.crop_width = frame.width;
  config.options.crop_height = bottom - top;
  config.output.colorspace = MODE_RGB;  // the RGB of Pillow's RGBA decode
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = decoded.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = decoded.size();
  const VP8StatusCode code = WebPDecode(frame.fragment.bytes, frame.fragment.size, &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) return Failed(code, canvas_width, canvas_height);
  *rows = decoded.data() + (first - top) * stride;
  return Status::OK();
}

}  // namespace

Status ReadWebpSize(const uint8_t* data, size_t size, int* width, int* height) {
  Demuxed demuxed(data, size);
  GPUFEED_RETURN_IF_ERROR(demuxed.status());
  *width = demuxed.width();
  *height = demuxed.height();
  return Status::OK();
}

Status DecodeWebp(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                  uint64_t max_pixels) {
  Demuxed demuxed(data, size);
  GPUFEED_RETURN_IF_ERROR(demuxed.status());
  const int width = demuxed.width(), height = demuxed.height();
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(StartRgbDecode("WebP", width, height, requested, max_pixels, out, &crop));
  // The first frame, as Pillow's WebPAnimDecoder draws it: on a canvas
  // cleared to transparent black (never blended: a first frame is a key
  // frame), at its offset. A still image's frame is the whole canvas.
  const WebPIterator& frame = demuxed.frame();
  const int x0 = std::max(crop.x, frame.x_offset);
  const int x1 = std::min(crop.x + crop.width, frame.x_offset + frame.width);
  const int y0 = std::max(crop.y, frame.y_offset);
  const int y1 = std::min(crop.y + crop.height, frame.y_offset + frame.height);
  const bool covered =
      x0 == crop.x && y0 == crop.y && x1 == crop.x + crop.width && y1 == crop.y + crop.height;
  if (!covered) std::fill(out->pixels.begin(), out->pixels.end(), 0);
  // A frame outside the crop is not decoded (as rows below a crop are not).
  if (x0 >= x1 || y0 >= y1) return Status::OK();
  const uint8_t* rows = nullptr;
  GPUFEED_RETURN_IF_ERROR(
      DecodeFrameRows(frame, y0 - frame.y_offset, y1 - frame.y_offset, &rows, width, height));
  const size_t stride = size_t{3} * frame.width;
  for (int y = y0; y < y1; ++y) {
    std::memcpy(out->row(y - crop.y) + size_t{3} * (x0 - crop.x),
                rows + (y - y0) * stride + size_t{3} * (x0 - frame.x_offset),
                size_t{3} * (x1 - x0));
  }
  return Status::OK();
}

#endif  // GPUFEED_HAVE_WEBP

}  // namespace decode_internal
}  // namespace gpufeed
