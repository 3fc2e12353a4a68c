#include "decode/tiff_decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef GPUFEED_HAVE_TIFF
#include <tiffio.h>

#include "decode/tiff_layout.h"
#endif

namespace gpufeed {
namespace decode_internal {

bool LooksLikeTiff(const uint8_t* data, size_t size) {
  static const char* const kPrefixes[] = {"MM\x00\x2A", "II\x2A\x00", "MM\x2A\x00",
                                          "II\x00\x2A", "MM\x00\x2B", "II\x2B\x00"};
  if (size < 8) return false;
  for (const char* prefix : kPrefixes) {
    if (std::memcmp(data, prefix, 4) == 0) return true;
  }
  return false;
}

#ifndef GPUFEED_HAVE_TIFF

namespace {
Status NoTiff() {
  return Status::NotSupported(
      "a TIFF image, and this build of gpufeed has no libtiff (install libtiff-dev and rebuild)");
}
}  // namespace

Status ReadTiffSize(const uint8_t*, size_t, int*, int*) { return NoTiff(); }

Status DecodeTiff(const uint8_t*, size_t, const CropRect&, Image*, uint64_t) { return NoTiff(); }

#else  // GPUFEED_HAVE_TIFF

namespace {

using tiff::Layout;

// The bytes libtiff reads, through its client procedures (mapped: strips are
// read in place; libtiff copies before it reverses bits, never writing here).
struct Source {
  const uint8_t* data;
  uint64_t size;
  uint64_t position = 0;
  std::string error;  // libtiff's first error message
};

tmsize_t ReadProc(thandle_t handle, void* buffer, tmsize_t size) {
  Source* source = static_cast<Source*>(handle);
  if (size < 0 || source->position >= source->size) return 0;
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(size), source->size - source->position);
  std::memcpy(buffer, source->data + source->position, n);
  source->position += n;
  return static_cast<tmsize_t>(n);
}

tmsize_t WriteProc(thandle_t, void*, tmsize_t) { return -1; }

toff_t SeekProc(thandle_t handle, toff_t offset, int whence) {
  Source* source = static_cast<Source*>(handle);
  uint64_t base = whence == SEEK_CUR ? source->position : whence == SEEK_END ? source->size : 0;
  source->position = base + offset;
  return source->position;
}

int CloseProc(thandle_t) { return 0; }
toff_t SizeProc(thandle_t handle) { return static_cast<Source*>(handle)->size; }

int MapProc(thandle_t handle, void** base, toff_t* size) {
  Source* source = static_cast<Source*>(handle);
  *base = const_cast<uint8_t*>(source->data);
  *size = source->size;
  return 1;
}

void UnmapProc(thandle_t, void*, toff_t) {}

int ErrorHandler(TIFF*, void* user_data, const char* module, const char* format, va_list args) {
  Source* source = static_cast<Source*>(user_data);
  if (source->error.empty()) {
    char message[512];
    std::vsnprintf(message, sizeof(message), format, args);
    // The module is a libtiff function's name, or the file's ("TIFF"): left out.
    const bool named = module != nullptr && std::strcmp(module, "TIFF") != 0;
    source->error = (named ? std::string(module) + ": " : std::string()) + message;
  }
  return 1;  // handled: nothing reaches stderr
}

int WarningHandler(TIFF*, void*, const char*, const char*, va_list) { return 1; }

// An open TIFF file (its first directory read by libtiff).
class TiffFile {
 public:
  TiffFile(const uint8_t* data, size_t size) : source_{data, size, 0, {}} {
    TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
    TIFFOpenOptionsSetErrorHandlerExtR(options, ErrorHandler, &source_);
    TIFFOpenOptionsSetWarningHandlerExtR(options, WarningHandler, &source_);
    tif_ = TIFFClientOpenExt("TIFF", "r", &source_, ReadProc, WriteProc, SeekProc, CloseProc,
                             SizeProc, MapProc, UnmapProc, options);
    TIFFOpenOptionsFree(options);
  }
  ~TiffFile() {
    if (tif_ != nullptr) TIFFClose(tif_);
  }
  TiffFile(const TiffFile&) = delete;
  TiffFile& operator=(const TiffFile&) = delete;

  TIFF* get() const { return tif_; }
  const std::string& error() const { return source_.error; }
  Status OpenStatus() const {
    if (tif_ != nullptr) return Status::OK();
    return Status::Corruption("TIFF header: libtiff cannot read it (" +
                              (source_.error.empty() ? std::string("no message") : source_.error) +
                              ")");
  }

 private:
  Source source_;
  TIFF* tif_ = nullptr;
};

// A rectangle of the file's image as stored (before the orientation).
struct Rect {
  int x0, y0, x1, y1;
};

// Decodes `rect` into `rgb` (rect's width * 3 bytes a row), reading only
// the strips or tiles that hold part of it.
Status DecodeRect(TiffFile& file, const Layout& layout, const Rect& rect, uint8_t* rgb) {
  TIFF* tif = file.get();
  const int planes = layout.planar ? layout.samples : 1;
  const bool tiled = TIFFIsTiled(tif) != 0;
  uint32_t block_width = static_cast<uint32_t>(layout.width), block_height = 0;
  if (tiled) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &block_width);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &block_height);
  } else {
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &block_height);
    block_height = std::min<uint32_t>(block_height, static_cast<uint32_t>(layout.height));
  }
  if (block_width == 0 || block_height == 0) return Status::Corruption("TIFF: empty strips or tiles");
  const uint64_t block_bytes = tiled ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
  const uint64_t row_bytes = tiled ? TIFFTileRowSize64(tif) : TIFFScanlineSize64(tif);
  if (block_bytes == 0 || row_bytes == 0 || row_bytes * block_height > block_bytes) {
    return Status::Corruption("TIFF: strip or tile size inconsistent with its rows (" +
                              file.error() + ")");
  }
  thread_local std::vector<uint8_t> blocks;
  if (!TryResize(&blocks, block_bytes * planes)) {
    return OutOfMemory("TIFF strips", block_bytes * planes, layout.width, layout.height);
  }
  const size_t out_stride = static_cast<size_t>(rect.x1 - rect.x0) * 3;
  const int first_row = rect.y0 / block_height * block_height;
  for (int by = first_row; by < rect.y1; by += static_cast<int>(block_height)) {
    const int first_col = tiled ? rect.x0 / block_width * block_width : 0;
    for (int bx = first_col; bx < rect.x1; bx += static_cast<int>(block_width)) {
      for (int p = 0; p < planes; ++p) {
        const uint32_t index = tiled ? TIFFComputeTile(tif, bx, by, 0, p)
                                     : TIFFComputeStrip(tif, by, p);
        uint8_t* buffer = blocks.data() + p * block_bytes;
        // What a damaged block leaves unwritten reads as zeros, whichever
        // block the buffer held before (a crop and the whole agree).
        std::memset(buffer, 0, block_bytes);
        const tmsize_t got =
            tiled ? TIFFReadEncodedTile(tif, index, buffer, static_cast<tmsize_t>(block_bytes))
                  : TIFFReadEncodedStrip(tif, index, buffer, static_cast<tmsize_t>(block_bytes));
        if (got < 0) {
          return Status::Corruption(std::string("TIFF ") + (tiled ? "tile " : "strip ") +
                                    std::to_string(index) + " at byte " +
                                    std::to_string(TIFFGetStrileOffset(tif, index)) + ": " +
                                    (file.error().empty() ? "cannot be read" : file.error()));
        }
      }
      const int x0 = std::max(rect.x0, bx), x1 = std::min<int>(rect.x1, bx + block_width);
      const int y0 = std::max(rect.y0, by), y1 = std::min<int>(rect.y1, by + block_height);
      for (int y = y0; y < y1; ++y) {
        const uint8_t* rows[8];
        for (int p = 0; p < planes; ++p) {
          rows[p] = blocks.data() + p * block_bytes + static_cast<size_t>(y - by) * row_bytes;
        }
        tiff::RowToRgb(layout, rows, bx, x0, x1,
                 rgb + static_cast<size_t>(y - rect.y0) * out_stride + size_t{3} * (x0 - rect.x0));
      }
    }
  }
  return Status::OK();
}

// Where oriented pixel (x, y) lies in the stored image (Pillow's transpose
// for the Orientation tag: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 270, 7 transverse, 8 rotate 90).
inline void Stored(const Layout& layout, int x, int y, int* sx, int* sy) {
  const int w = layout.width - 1, h = layout.height - 1;
  switch (layout.orientation) {
    case 2: *sx = w - x; *sy = y; return;
    case 3: *sx = w - x; *sy = h - y; return;
    case 4: *sx = x; *sy = h - y; return;
    case 5: *sx = y; *sy = x; return;
    case 6: *sx = y; *sy = h - x; return;
    case 7: *sx = w - y; *sy = h - x; return;
    case 8: *sx = w - y; *sy = x; return;
    default: *sx = x; *sy = y; return;
  }
}

Status OpenLayout(const uint8_t* data, size_t size, TiffFile& file, Layout* layout) {
  GPUFEED_RETURN_IF_ERROR(file.OpenStatus());
  return tiff::ReadLayout(file.get(), tiff::FirstIfdHolds(data, size, TIFFTAG_PHOTOMETRIC), layout);
}

}  // namespace

Status ReadTiffSize(const uint8_t* data, size_t size, int* width, int* height) {
  TiffFile file(data, size);
  Layout layout;
  GPUFEED_RETURN_IF_ERROR(OpenLayout(data, size, file, &layout));
  const bool swapped = layout.orientation >= 5;
  *width = swapped ? layout.height : layout.width;
  *height = swapped ? layout.width : layout.height;
  return Status::OK();
}

Status DecodeTiff(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                  uint64_t max_pixels) {
  TiffFile file(data, size);
  Layout layout;
  GPUFEED_RETURN_IF_ERROR(OpenLayout(data, size, file, &layout));
  const bool swapped = layout.orientation >= 5;
  const int width = swapped ? layout.height : layout.width;
  const int height = swapped ? layout.width : layout.height;
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(StartRgbDecode("TIFF", width, height, requested, max_pixels, out, &crop));
  if (layout.orientation == 1) {
    return DecodeRect(file, layout, {crop.x, crop.y, crop.x + crop.width, crop.y + crop.height},
                      out->pixels.data());
  }
  // The crop's corners in the stored image bound the stored rectangle.
  int ax, ay, bx, by;
  Stored(layout, crop.x, crop.y, &ax, &ay);
  Stored(layout, crop.x + crop.width - 1, crop.y + crop.height - 1, &bx, &by);
  const Rect rect{std::min(ax, bx), std::min(ay, by), std::max(ax, bx) + 1, std::max(ay, by) + 1};
  const size_t stride = static_cast<size_t>(rect.x1 - rect.x0) * 3;
  thread_local std::vector<uint8_t> stored;
  if (!TryResize(&stored, stride * (rect.y1 - rect.y0))) {
    return OutOfMemory("TIFF rows", uint64_t{stride} * (rect.y1 - rect.y0), width, height);
  }
  GPUFEED_RETURN_IF_ERROR(DecodeRect(file, layout, rect, stored.data()));
  for (int y = 0; y < crop.height; ++y) {
    uint8_t* row = out->row(y);
    for (int x = 0; x < crop.width; ++x) {
      int sx, sy;
      Stored(layout, crop.x + x, crop.y + y, &sx, &sy);
      std::memcpy(row + 3 * x, stored.data() + (sy - rect.y0) * stride + 3 * (sx - rect.x0), 3);
    }
  }
  return Status::OK();
}

#endif  // GPUFEED_HAVE_TIFF

}  // namespace decode_internal
}  // namespace gpufeed
