#include "decode/image_decoder.h"

#include <png.h>
#include <setjmp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

namespace gpufeed {

namespace {

// libjpeg reports errors through a longjmp out of the library; nothing with
// a destructor lives between setjmp and the library calls.
struct JpegError {
  jpeg_error_mgr manager;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated = false;
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

// Errors longjmp to the setjmp of the caller (which must stay in the frame
// that calls into libjpeg, so only this part of the set-up is shared).
void AttachJpegError(jpeg_decompress_struct* info, JpegError* error) {
  info->err = jpeg_std_error(&error->manager);
  error->manager.error_exit = JpegErrorExit;
  error->manager.emit_message = JpegEmitMessage;
}

// Buffers sized from a header (within max_pixels) can still be more than
// the memory left to the process (a container's limit, RLIMIT_AS, many
// decode threads at once): that fails this sample with a Status instead of
// throwing std::bad_alloc through a decode thread, which would end the
// process.
bool TryResize(std::vector<uint8_t>* buffer, size_t size) {
  try {
    buffer->resize(size);
    return true;
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  return false;
}

Status OutOfMemory(const char* what, uint64_t bytes, int width, int height) {
  return Status::Internal(std::string("out of memory: cannot allocate ") + std::to_string(bytes) +
                          " bytes for the " + what + " of a " + std::to_string(width) + "x" +
                          std::to_string(height) + " image");
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

CropRect Clamp(const CropRect& crop, int width, int height) {
  CropRect out = crop;
  if (out.width <= 0 || out.height <= 0) out = {0, 0, width, height};
  out.x = std::clamp(out.x, 0, width - 1);
  out.y = std::clamp(out.y, 0, height - 1);
  out.width = std::clamp(out.width, 1, width - out.x);
  out.height = std::clamp(out.height, 1, height - out.y);
  return out;
}

Status DecodeJpeg(const uint8_t* data, size_t size, const CropRect& requested, int min_width,
                  int min_height, Image* out, int* scale_denominator, uint64_t max_pixels) {
  jpeg_decompress_struct info;
  JpegError error;
  AttachJpegError(&info, &error);
  // Scratch state that must survive a longjmp is kept in plain values.
  volatile bool created = false;
  if (setjmp(error.jump)) {
    if (created) jpeg_destroy_decompress(&info);
    return JpegFailure(error, "decode");
  }
  jpeg_create_decompress(&info);
  created = true;
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  if (static_cast<uint64_t>(info.image_width) * info.image_height > max_pixels) {
    uint64_t pixels = static_cast<uint64_t>(info.image_width) * info.image_height;
    jpeg_destroy_decompress(&info);
    return Status::Corruption("JPEG header declares " + std::to_string(pixels) +
                              " pixels, more than the limit of " + std::to_string(max_pixels) +
                              " (a decompression bomb?)");
  }
  CropRect crop = Clamp(requested, static_cast<int>(info.image_width),
                        static_cast<int>(info.image_height));
  // The largest DCT downscale that keeps the crop at least the wanted size.
  int denominator = 1;
  for (int candidate : {8, 4, 2}) {
    if (min_width > 0 && min_height > 0 && crop.width / candidate >= min_width &&
        crop.height / candidate >= min_height) {
      denominator = candidate;
      break;
    }
  }
  info.scale_num = 1;
  info.scale_denom = static_cast<unsigned>(denominator);
  bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  info.dct_method = JDCT_ISLOW;  // the same IDCT as PIL / torchvision's decode
  jpeg_start_decompress(&info);
  // The crop in scaled coordinates.
  int full_width = static_cast<int>(info.output_width);
  int full_height = static_cast<int>(info.output_height);
  int x0 = crop.x / denominator;
  int y0 = crop.y / denominator;
  int x1 = std::min(full_width, (crop.x + crop.width + denominator - 1) / denominator);
  int y1 = std::min(full_height, (crop.y + crop.height + denominator - 1) / denominator);
  x1 = std::max(x1, x0 + 1);
  y1 = std::max(y1, y0 + 1);
  JDIMENSION column = static_cast<JDIMENSION>(x0);
  JDIMENSION columns = static_cast<JDIMENSION>(x1 - x0);
  if (columns < info.output_width) jpeg_crop_scanline(&info, &column, &columns);
  int skip_x = x0 - static_cast<int>(column);
  if (y0 > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(y0));
  out->width = x1 - x0;
  out->height = y1 - y0;
  // One decoded row (cropped columns, RGB or CMYK). Thread-local: nothing
  // with a destructor may sit on the stack across a longjmp.
  thread_local std::vector<uint8_t> row_buffer;
  size_t out_bytes = static_cast<size_t>(out->width) * out->height * 3;
  if (!TryResize(&out->pixels, out_bytes) ||
      !TryResize(&row_buffer, static_cast<size_t>(info.output_width) * info.output_components)) {
    jpeg_destroy_decompress(&info);
    created = false;
    return OutOfMemory("decoded pixels", out_bytes, out->width, out->height);
  }
  std::vector<uint8_t>* scratch = &row_buffer;
  bool adobe = info.saw_Adobe_marker;
  for (int y = 0; y < out->height; ++y) {
    JSAMPROW row = scratch->data();
    if (jpeg_read_scanlines(&info, &row, 1) != 1) break;
    if (cmyk) {
      CmykToRgb(scratch->data() + 4 * skip_x, out->row(y), out->width, adobe);
    } else {
      std::memcpy(out->row(y), scratch->data() + 3 * skip_x, static_cast<size_t>(out->width) * 3);
    }
  }
  bool truncated = error.truncated;
  if (info.output_scanline < info.output_height) {
    jpeg_abort_decompress(&info);  // rows below the crop are not needed
  } else {
    jpeg_finish_decompress(&info);
  }
  jpeg_destroy_decompress(&info);
  created = false;
  if (truncated) {
    return Status::Corruption("JPEG decode: premature end of data (the file is truncated)");
  }
  if (scale_denominator != nullptr) *scale_denominator = denominator;
  return Status::OK();
}

Status DecodePng(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                 uint64_t max_pixels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size)) {
    return Status::Corruption(std::string("PNG header: ") + image.message);
  }
  if (static_cast<uint64_t>(image.width) * image.height > max_pixels) {
    png_image_free(&image);
    return Status::Corruption("PNG header declares " +
                              std::to_string(static_cast<uint64_t>(image.width) * image.height) +
                              " pixels, more than the limit of " + std::to_string(max_pixels));
  }
  // Read RGBA and drop the alpha, as PIL's convert("RGB") does (libpng's RGB
  // output would composite over the output buffer's old contents instead).
  image.format = PNG_FORMAT_RGBA;
  thread_local std::vector<uint8_t> full;
  uint64_t full_bytes = uint64_t{image.width} * image.height * 4;
  if (!TryResize(&full, full_bytes)) {
    png_image_free(&image);
    return OutOfMemory("RGBA rows", full_bytes, static_cast<int>(image.width),
                       static_cast<int>(image.height));
  }
  if (!png_image_finish_read(&image, nullptr, full.data(), 0, nullptr)) {
    std::string message = image.message;
    png_image_free(&image);
    return Status::Corruption("PNG decode: " + message);
  }
  int width = static_cast<int>(image.width), height = static_cast<int>(image.height);
  CropRect crop = Clamp(requested, width, height);
  out->width = crop.width;
  out->height = crop.height;
  if (!TryResize(&out->pixels, static_cast<size_t>(crop.width) * crop.height * 3)) {
    return OutOfMemory("decoded pixels", uint64_t{3} * crop.width * crop.height, crop.width,
                       crop.height);
  }
  for (int y = 0; y < crop.height; ++y) {
    const uint8_t* source = full.data() + (static_cast<size_t>(crop.y + y) * width + crop.x) * 4;
    uint8_t* destination = out->row(y);
    for (int x = 0; x < crop.width; ++x) {
      destination[3 * x] = source[4 * x];
      destination[3 * x + 1] = source[4 * x + 1];
      destination[3 * x + 2] = source[4 * x + 2];
    }
  }
  return Status::OK();
}

}  // namespace

ImageFormat SniffImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Status ReadImageHeader(const uint8_t* data, size_t size, ImageHeader* header) {
  header->format = SniffImageFormat(data, size);
  if (header->format == ImageFormat::kJpeg) {
    jpeg_decompress_struct info;
    JpegError error;
    AttachJpegError(&info, &error);
    volatile bool created = false;
    if (setjmp(error.jump)) {
      if (created) jpeg_destroy_decompress(&info);
      return JpegFailure(error, "header");
    }
    jpeg_create_decompress(&info);
    created = true;
    jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
    jpeg_read_header(&info, TRUE);
    header->width = static_cast<int>(info.image_width);
    header->height = static_cast<int>(info.image_height);
    jpeg_destroy_decompress(&info);
    return Status::OK();
  }
  if (header->format == ImageFormat::kPng) {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, data, size)) {
      return Status::Corruption(std::string("PNG header: ") + image.message);
    }
    header->width = static_cast<int>(image.width);
    header->height = static_cast<int>(image.height);
    png_image_free(&image);
    return Status::OK();
  }
  return Status::NotSupported("not a JPEG or PNG image (first bytes do not match either)");
}

Status DecodeRegion(const uint8_t* data, size_t size, const CropRect& crop, int min_width,
                    int min_height, Image* out, int* scale_denominator, uint64_t max_pixels) {
  switch (SniffImageFormat(data, size)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(data, size, crop, min_width, min_height, out, scale_denominator,
                        max_pixels);
    case ImageFormat::kPng:
      if (scale_denominator != nullptr) *scale_denominator = 1;
      return DecodePng(data, size, crop, out, max_pixels);
    default:
      return Status::NotSupported("not a JPEG or PNG image (first bytes do not match either)");
  }
}

}  // namespace gpufeed
