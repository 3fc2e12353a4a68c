#include "decode/jpeg_decoder.h"

#include <setjmp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "decode/jpeg_mcu.h"
#include "decode/jpeg_scaled.h"

namespace gpufeed {

namespace {

using decode_internal::ClampCrop;
using decode_internal::OutOfMemory;
using decode_internal::TryResize;

// Rows per jpeg_read_scanlines call: libjpeg-turbo then works on whole row
// groups (16 rows for 4:2:0) instead of handing out one row per call.
constexpr int kRowsPerRead = 16;

// libjpeg reports errors through a longjmp out of the library; nothing with
// a destructor lives between setjmp and the library calls.
struct JpegError {
  jpeg_error_mgr manager;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated = false;
  bool hook_failed = false;  // gpufeed's entropy decoder gave up (jpeg_mcu.h)
};

void JpegErrorExit(j_common_ptr info) {
  JpegError* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  longjmp(error->jump, 1);
}

void JpegEmitMessage(j_common_ptr info, int level) {
  JpegError* error = reinterpret_cast<JpegError*>(info->err);
  // Warnings are how libjpeg reports a truncated file (it pads with gray
  // and goes on): that is silently wrong data, so it becomes an error.
  // Other warnings (extraneous bytes before a marker, ...) are harmless and
  // ignored, as PIL ignores them.
  if (level == -1 && info->err->msg_code == JWRN_JPEG_EOF) error->truncated = true;
}

// McuHook's Fail: back to the decode's setjmp, which decodes the image
// again with libjpeg's own entropy decoder.
void HookFailed(j_decompress_ptr info) {
  JpegError* error = reinterpret_cast<JpegError*>(info->err);
  error->hook_failed = true;
  longjmp(error->jump, 1);
}

// Whether the exact path may use gpufeed's entropy decoder (jpeg_mcu.h):
// yes unless GPUFEED_LIBJPEG_ENTROPY=1 (libjpeg's own, for comparison).
bool OwnEntropyAllowed() {
  static const bool allowed = [] {
    const char* value = std::getenv("GPUFEED_LIBJPEG_ENTROPY");
    return value == nullptr || std::string(value) != "1";
  }();
  return allowed;
}

Status JpegFailure(const JpegError& error, const char* during) {
  return Status::Corruption(std::string("JPEG ") + during + ": " + error.message);
}

void CmykToRgb(const uint8_t* cmyk, uint8_t* rgb, int width, bool adobe_inverted) {
  for (int x = 0; x < width; ++x) {
    int c = cmyk[4 * x], m = cmyk[4 * x + 1], y = cmyk[4 * x + 2], k = cmyk[4 * x + 3];
    if (!adobe_inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    // Adobe JPEGs store inverted CMYK: R = C * K / 255 (as PIL converts).
    rgb[3 * x] = static_cast<uint8_t>(c * k / 255);
    rgb[3 * x + 1] = static_cast<uint8_t>(m * k / 255);
    rgb[3 * x + 2] = static_cast<uint8_t>(y * k / 255);
  }
}

// The crop in scaled coordinates: rows [y0, y1) and columns [x0, x1) of the
// scaled image, non-empty; the decoder's rows start skip_x columns left of x0
// (whole iMCU columns).
struct ScaledCrop {
  int x0 = 0;
  int y0 = 0;
  int x1 = 0;
  int y1 = 0;
  int skip_x = 0;
};

// Starts decompressing at 1/denominator scale (RGB, or CMYK for CMYK/YCCK
// sources) and positions libjpeg on the crop: its iMCU columns
// (jpeg_crop_scanline) and its first row (jpeg_skip_scanlines). With a
// `hook`, gpufeed's entropy decoder replaces libjpeg's where it takes the
// image (jpeg_mcu.h; `end`: where the file ends).
// REQUIRES: the caller's setjmp is armed (libjpeg errors longjmp there;
// nothing here has a destructor).
ScaledCrop StartScaledCrop(jpeg_decompress_struct* info, const CropRect& crop, int denominator,
                           bool cmyk, jpeg_entropy::McuHook* hook, const uint8_t* end) {
  info->scale_num = 1;
  info->scale_denom = static_cast<unsigned>(denominator);
  info->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  info->dct_method = JDCT_ISLOW;  // the same IDCT as PIL / torchvision's decode
  jpeg_start_decompress(info);
  const int full_width = static_cast<int>(info->output_width);
  const int full_height = static_cast<int>(info->output_height);
  ScaledCrop scaled;
  scaled.x0 = crop.x / denominator;
  scaled.y0 = crop.y / denominator;
  scaled.x1 = std::min(full_width, (crop.x + crop.width + denominator - 1) / denominator);
  scaled.y1 = std::min(full_height, (crop.y + crop.height + denominator - 1) / denominator);
  scaled.x1 = std::max(scaled.x1, scaled.x0 + 1);
  scaled.y1 = std::max(scaled.y1, scaled.y0 + 1);
  JDIMENSION column = static_cast<JDIMENSION>(scaled.x0);
  JDIMENSION columns = static_cast<JDIMENSION>(scaled.x1 - scaled.x0);
  if (columns < info->output_width) jpeg_crop_scanline(info, &column, &columns);
  scaled.skip_x = scaled.x0 - static_cast<int>(column);
  if (hook != nullptr) {
    // The iMCU columns libjpeg keeps (its first_iMCU_col..last_iMCU_col):
    // an iMCU is max_h_samp_factor blocks wide, one block for a lone
    // component, a block 8 / denominator pixels.
    const int blocks = info->comps_in_scan == 1 && info->num_components == 1
                           ? 1 : info->max_h_samp_factor;
    const int align = blocks * (8 / denominator);
    const int first_col = static_cast<int>(column) / align;
    const int end_col = static_cast<int>(column + columns + align - 1) / align;
    hook->Install(info, end, first_col, end_col, HookFailed);
  }
  if (scaled.y0 > 0) jpeg_skip_scanlines(info, static_cast<JDIMENSION>(scaled.y0));
  return scaled;
}

// Reads out->height rows (fewer when the data ends) into *out, kRowsPerRead
// per libjpeg call: straight into out's rows when `in_place`; else through
// `scratch` (kRowsPerRead rows of row_bytes), copying out->width columns from
// skip_x on (CMYK converted to RGB). REQUIRES: out sized, the caller's
// setjmp armed (as StartScaledCrop).
void ReadCropRows(jpeg_decompress_struct* info, bool in_place, bool cmyk, int skip_x,
                  size_t row_bytes, uint8_t* scratch, Image* out) {
  JSAMPROW rows[kRowsPerRead];
  const bool adobe = info->saw_Adobe_marker;
  for (int y = 0; y < out->height;) {
    const int wanted = std::min(kRowsPerRead, out->height - y);
    for (int i = 0; i < wanted; ++i) {
      rows[i] = in_place ? out->row(y + i) : scratch + i * row_bytes;
    }
    const int got =
        static_cast<int>(jpeg_read_scanlines(info, rows, static_cast<JDIMENSION>(wanted)));
    if (got == 0) break;
    for (int i = 0; !in_place && i < got; ++i) {
      if (cmyk) {
        CmykToRgb(rows[i] + 4 * skip_x, out->row(y + i), out->width, adobe);
      } else {
        std::memcpy(out->row(y + i), rows[i] + 3 * skip_x, static_cast<size_t>(out->width) * 3);
      }
    }
    y += got;
  }
}

}  // namespace

// The largest DCT downscale (8, 4, 2, else 1) that keeps the crop at least
// min_width x min_height; 1 when either is not positive.
int DctDenominator(const CropRect& crop, int min_width, int min_height) {
  for (int candidate : {8, 4, 2}) {
    if (min_width > 0 && min_height > 0 && crop.width / candidate >= min_width &&
        crop.height / candidate >= min_height) {
      return candidate;
    }
  }
  return 1;
}

struct JpegDecoder::State {
  jpeg_decompress_struct info;
  JpegError error;
  bool created = false;
  bool used = false;          // a file went through `info` since it was created
  bool started = false;       // a header parsed; its pixels not decoded yet
  const uint8_t* data = nullptr;  // the JPEG Start parsed
  size_t size = 0;
  std::vector<uint8_t> rows;  // kRowsPerRead decoded rows (cropped columns)
  jpeg_entropy::McuHook hook;
  bool own_entropy = OwnEntropyAllowed();

  // Creates `info` (its error manager set): false, with `created` false,
  // when libjpeg runs out of memory.
  bool Create() {
    created = false;
    used = false;
    if (setjmp(error.jump)) return false;
    jpeg_create_decompress(&info);
    created = true;
    return true;
  }
};

JpegDecoder::JpegDecoder() : state_(new State) {
  State* s = state_.get();
  s->info.err = jpeg_std_error(&s->error.manager);
  s->error.manager.error_exit = JpegErrorExit;
  s->error.manager.emit_message = JpegEmitMessage;
  s->Create();  // out of memory: Start reports it
}

JpegDecoder::~JpegDecoder() {
  if (state_->created) jpeg_destroy_decompress(&state_->info);
}

Status JpegDecoder::Start(const uint8_t* data, size_t size, ImageHeader* header) {
  State* s = state_.get();
  if (!s->created) return Status::Internal("out of memory: cannot create a JPEG decompressor");
  s->started = false;
  s->error.truncated = false;
  // A fresh decompressor per file (0.1 us): libjpeg keeps the quantization
  // and Huffman tables a file defines for the next one (for abbreviated
  // datastreams), so a file lacking one would decode with the previous
  // file's (a thread's earlier image) where alone, as PIL decodes it, it
  // fails (DQT) or takes the standard tables (DHT).
  if (s->used) {
    jpeg_destroy_decompress(&s->info);
    if (!s->Create()) return Status::Internal("out of memory: cannot create a JPEG decompressor");
  }
  s->used = true;
  if (setjmp(s->error.jump)) {
    jpeg_abort_decompress(&s->info);  // back to idle, ready for the next image
    return JpegFailure(s->error, "header");
  }
  jpeg_mem_src(&s->info, data, static_cast<unsigned long>(size));
  s->data = data;
  s->size = size;
  jpeg_read_header(&s->info, TRUE);
  header->format = ImageFormat::kJpeg;
  header->width = static_cast<int>(s->info.image_width);
  header->height = static_cast<int>(s->info.image_height);
  s->started = true;
  return Status::OK();
}

void JpegDecoder::set_own_entropy(bool own) { state_->own_entropy = own; }

bool JpegDecoder::own_entropy_used() const { return state_->hook.installed(); }

Status JpegDecoder::DecodeRegion(const CropRect& requested, int min_width, int min_height,
                                 Image* out, int* scale_denominator, uint64_t max_pixels,
                                 DecodedColumns* decoded_columns, bool approximate) {
  State* s = state_.get();
  s->hook.Detach();
  if (!s->started) return Status::Internal("JpegDecoder::DecodeRegion without a parsed header");
  s->started = false;
  jpeg_decompress_struct* info = &s->info;
  const uint64_t pixels = static_cast<uint64_t>(info->image_width) * info->image_height;
  if (pixels > max_pixels) {
    jpeg_abort_decompress(info);
    return Status::Corruption("JPEG header declares " + std::to_string(pixels) +
                              " pixels, more than the limit of " + std::to_string(max_pixels) +
                              " (a decompression bomb?)");
  }
  const CropRect crop = ClampCrop(requested, static_cast<int>(info->image_width),
                                  static_cast<int>(info->image_height));
  bool hook_failed = false;
  Status status = DecodeCrop(crop, min_width, min_height, out, scale_denominator,
                             decoded_columns, approximate, s->own_entropy, &hook_failed);
  if (!hook_failed) return status;
  // gpufeed's entropy decoder did not follow the data: again with
  // libjpeg's, whose warnings and errors then apply.
  return DecodeCrop(crop, min_width, min_height, out, scale_denominator, decoded_columns,
                    false, false, &hook_failed);
}

Status JpegDecoder::DecodeCrop(const CropRect& crop, int min_width, int min_height, Image* out,
                               int* scale_denominator, DecodedColumns* decoded_columns,
                               bool approximate, bool own_entropy, bool* hook_failed) {
  State* s = state_.get();
  jpeg_decompress_struct* info = &s->info;
  // A second attempt (own_entropy false after the hook gave up) parses the
  // header again: the first one's decompression was aborted.
  const bool reread = *hook_failed;
  s->hook.Detach();
  s->error.hook_failed = false;
  s->error.truncated = false;
  // Every libjpeg call below, in this function or the helpers it calls,
  // reports an error by a longjmp back here.
  if (setjmp(s->error.jump)) {
    jpeg_abort_decompress(info);
    *hook_failed = s->error.hook_failed;
    return JpegFailure(s->error, "decode");
  }
  if (reread) {
    jpeg_mem_src(info, s->data, static_cast<unsigned long>(s->size));
    jpeg_read_header(info, TRUE);
  }
  const int denominator = DctDenominator(crop, min_width, min_height);
  if (approximate && denominator > 1 && decoded_columns != nullptr &&
      DecodeScaledOwn(*info, s->data, s->size, crop, denominator, out, decoded_columns)) {
    jpeg_abort_decompress(info);
    if (scale_denominator != nullptr) *scale_denominator = denominator;
    return Status::OK();
  }
  const bool cmyk = info->jpeg_color_space == JCS_CMYK || info->jpeg_color_space == JCS_YCCK;
  const ScaledCrop scaled = StartScaledCrop(info, crop, denominator, cmyk,
                                            own_entropy ? &s->hook : nullptr, s->data + s->size);
  const int requested_width = scaled.x1 - scaled.x0;
  // Straight into *out, whole rows as decoded, when the caller takes the
  // extra columns or there are none (RGB only: CMYK is converted row by row).
  const bool whole_rows =
      scaled.skip_x == 0 && requested_width == static_cast<int>(info->output_width);
  const bool in_place = (decoded_columns != nullptr || whole_rows) && !cmyk;
  out->width = in_place ? static_cast<int>(info->output_width) : requested_width;
  out->height = scaled.y1 - scaled.y0;
  if (decoded_columns != nullptr) {
    *decoded_columns = {in_place ? scaled.skip_x : 0, requested_width};
  }
  const size_t row_bytes = static_cast<size_t>(info->output_width) * info->output_components;
  const size_t out_bytes = static_cast<size_t>(out->width) * out->height * 3;
  if (!TryResize(&out->pixels, out_bytes) ||
      (!in_place && !TryResize(&s->rows, row_bytes * kRowsPerRead))) {
    jpeg_abort_decompress(info);
    return OutOfMemory("decoded pixels", out_bytes, out->width, out->height);
  }
  ReadCropRows(info, in_place, cmyk, scaled.skip_x, row_bytes, s->rows.data(), out);
  if (s->hook.installed() && !s->hook.DeferredDataWhole()) {
    // libjpeg's own decoder would have read MCUs the hook left unread, and
    // may have met the file's end there: again with libjpeg's.
    jpeg_abort_decompress(info);
    *hook_failed = true;
    return Status::OK();
  }
  const bool truncated = s->error.truncated;
  // Rows below the crop are not needed; with the hook, libjpeg's source never
  // moved past the scan (the hook checked that EOI follows it).
  if (info->output_scanline < info->output_height || s->hook.installed()) {
    jpeg_abort_decompress(info);
  } else {
    jpeg_finish_decompress(info);
  }
  if (truncated) {
    return Status::Corruption("JPEG decode: premature end of data (the file is truncated)");
  }
  if (scale_denominator != nullptr) *scale_denominator = denominator;
  return Status::OK();
}

}  // namespace gpufeed
