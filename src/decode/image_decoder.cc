#include "decode/image_decoder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "decode/bmp_decoder.h"
#include "decode/jpeg_decoder.h"
#include "decode/png_decoder.h"
#include "decode/tiff_decoder.h"
#include "decode/pnm_decoder.h"
#include "decode/webp_decoder.h"

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

Status StartRgbDecode(const char* format, int width, int height, const CropRect& requested,
                      uint64_t max_pixels, Image* out, CropRect* crop) {
  const uint64_t pixels = static_cast<uint64_t>(width) * height;
  if (pixels > max_pixels) {
    return Status::Corruption(std::string(format) + " header declares " +
                              std::to_string(pixels) + " pixels, more than the limit of " +
                              std::to_string(max_pixels));
  }
  *crop = ClampCrop(requested, width, height);
  out->width = crop->width;
  out->height = crop->height;
  if (!TryResize(&out->pixels, static_cast<size_t>(crop->width) * crop->height * 3)) {
    return OutOfMemory("decoded pixels", uint64_t{3} * crop->width * crop->height, crop->width,
                       crop->height);
  }
  return Status::OK();
}

}  // namespace decode_internal

namespace {

constexpr char kNotAnImage[] =
    "not a JPEG, PNG, Netpbm (PBM/PGM/PPM), BMP, WebP or TIFF image (its first bytes match "
    "none of them)";

bool LooksLikePng(const uint8_t* data, size_t size) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return size >= 8 && std::memcmp(data, kPng, 8) == 0;
}

// The formats decoded to RGB rows by gpufeed's own readers (no DCT
// scaling), tried in this order after JPEG.
struct RgbCodec {
  ImageFormat format;
  bool (*looks)(const uint8_t* data, size_t size);
  Status (*size)(const uint8_t* data, size_t size, int* width, int* height);
  Status (*decode)(const uint8_t* data, size_t size, const CropRect& crop, Image* out,
                   uint64_t max_pixels);
};

const RgbCodec kRgbCodecs[] = {
    {ImageFormat::kPng, LooksLikePng, decode_internal::ReadPngSize, decode_internal::DecodePng},
    {ImageFormat::kPnm, decode_internal::LooksLikePnm, decode_internal::ReadPnmSize,
     decode_internal::DecodePnm},
    {ImageFormat::kBmp, decode_internal::LooksLikeBmp, decode_internal::ReadBmpSize,
     decode_internal::DecodeBmp},
    {ImageFormat::kWebp, decode_internal::LooksLikeWebp, decode_internal::ReadWebpSize,
     decode_internal::DecodeWebp},
    {ImageFormat::kTiff, decode_internal::LooksLikeTiff, decode_internal::ReadTiffSize,
     decode_internal::DecodeTiff}};

const RgbCodec* CodecFor(ImageFormat format) {
  for (const RgbCodec& codec : kRgbCodecs) {
    if (codec.format == format) return &codec;
  }
  return nullptr;
}

}  // namespace

ImageFormat SniffImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  for (const RgbCodec& codec : kRgbCodecs) {
    if (codec.looks(data, size)) return codec.format;
  }
  return ImageFormat::kUnknown;
}

Status ReadImageHeader(const uint8_t* data, size_t size, ImageHeader* header) {
  header->format = SniffImageFormat(data, size);
  if (header->format == ImageFormat::kJpeg) {
    JpegDecoder decoder;
    return decoder.Start(data, size, header);
  }
  const RgbCodec* codec = CodecFor(header->format);
  if (codec == nullptr) return Status::NotSupported(kNotAnImage);
  return codec->size(data, size, &header->width, &header->height);
}

Status DecodeRegion(const uint8_t* data, size_t size, const CropRect& crop, int min_width,
                    int min_height, Image* out, int* scale_denominator, uint64_t max_pixels) {
  const ImageFormat format = SniffImageFormat(data, size);
  if (format == ImageFormat::kJpeg) {
    // A plain decode: a decompressor of its own (the transform keeps one
    // per thread instead, TransformScratch).
    JpegDecoder decoder;
    ImageHeader header;
    GPUFEED_RETURN_IF_ERROR(decoder.Start(data, size, &header));
    return decoder.DecodeRegion(crop, min_width, min_height, out, scale_denominator, max_pixels);
  }
  const RgbCodec* codec = CodecFor(format);
  if (codec == nullptr) return Status::NotSupported(kNotAnImage);
  if (scale_denominator != nullptr) *scale_denominator = 1;
  return codec->decode(data, size, crop, out, max_pixels);
}

}  // namespace gpufeed
