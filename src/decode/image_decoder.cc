#include "decode/image_decoder.h"

#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "decode/jpeg_decoder.h"

namespace gpufeed {

namespace decode_internal {

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

CropRect ClampCrop(const CropRect& crop, int width, int height) {
  CropRect out = crop;
  if (out.width <= 0 || out.height <= 0) out = {0, 0, width, height};
  out.x = std::clamp(out.x, 0, width - 1);
  out.y = std::clamp(out.y, 0, height - 1);
  out.width = std::clamp(out.width, 1, width - out.x);
  out.height = std::clamp(out.height, 1, height - out.y);
  return out;
}

}  // namespace decode_internal

namespace {

using decode_internal::ClampCrop;
using decode_internal::OutOfMemory;
using decode_internal::TryResize;

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
  CropRect crop = ClampCrop(requested, width, height);
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
    JpegDecoder decoder;
    return decoder.Start(data, size, header);
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
    case ImageFormat::kJpeg: {
      // A plain decode: a decompressor of its own (the transform keeps one
      // per thread instead, TransformScratch).
      JpegDecoder decoder;
      ImageHeader header;
      GPUFEED_RETURN_IF_ERROR(decoder.Start(data, size, &header));
      return decoder.DecodeRegion(crop, min_width, min_height, out, scale_denominator,
                                  max_pixels);
    }
    case ImageFormat::kPng:
      if (scale_denominator != nullptr) *scale_denominator = 1;
      return DecodePng(data, size, crop, out, max_pixels);
    default:
      return Status::NotSupported("not a JPEG or PNG image (first bytes do not match either)");
  }
}

}  // namespace gpufeed
