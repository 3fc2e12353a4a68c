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
  const uint64_t n =
      std::min<uint64_t>(static_cast<uint64_t>(size), source->size - source->position);
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
  // Before a read: its error, not one of opening's (a tag libtiff
  // repaired), names what failed.
  void ClearError() { source_.error.clear(); }
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

// Per-thread buffers above this size are let go after each decode (a
// thread keeps what its ordinary images need, not its largest image's).
constexpr size_t kKeptBufferBytes = size_t{64} << 20;

void ReleaseIfLarge(std::vector<uint8_t>* buffer) {
  if (buffer->capacity() > kKeptBufferBytes) std::vector<uint8_t>().swap(*buffer);
}

// The strips or tiles of the open file: their size in pixels and bytes.
struct Blocks {
  bool tiled = false;
  int64_t width = 0;   // pixels
  int64_t height = 0;  // rows
  uint64_t bytes = 0;  // a block (one plane's)
  uint64_t row_bytes = 0;
};

Status BlocksOf(TiffFile& file, const Layout& layout, Blocks* blocks) {
  TIFF* tif = file.get();
  blocks->tiled = TIFFIsTiled(tif) != 0;
  uint32_t width = static_cast<uint32_t>(layout.width), height = 0;
  if (blocks->tiled) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &width);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &height);
  } else {
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &height);
    height = std::min<uint32_t>(height, static_cast<uint32_t>(layout.height));
  }
  if (width == 0 || height == 0) return Status::Corruption("TIFF: empty strips or tiles");
  blocks->width = width;
  blocks->height = height;
  blocks->bytes = blocks->tiled ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
  blocks->row_bytes = blocks->tiled ? TIFFTileRowSize64(tif) : TIFFScanlineSize64(tif);
  if (blocks->bytes == 0 || blocks->row_bytes == 0 ||
      blocks->row_bytes * blocks->height > blocks->bytes) {
    return Status::Corruption("TIFF: strip or tile size inconsistent with its rows (" +
                              file.error() + ")");
  }
  // A strip holds at most the image's rows; a tile may be larger than the
  // image (a small image in 256x256 tiles), but not without bound: a
  // 240-byte file declaring 32768x32768 tiles would need 3 GB.
  const uint64_t image_bytes = static_cast<uint64_t>(layout.width) * layout.height *
                               layout.samples * std::max(1, layout.bits / 8);
  const uint64_t planes = layout.planar ? layout.samples : 1;
  if (blocks->bytes * planes > std::max<uint64_t>(kKeptBufferBytes, 4 * image_bytes)) {
    return Status::Corruption(
        "TIFF tiles of " + std::to_string(width) + "x" + std::to_string(height) + " pixels for a " +
        std::to_string(layout.width) + "x" + std::to_string(layout.height) + " image");
  }
  return Status::OK();
}

// Reads the first `rows` rows of the block at (x, y) of each plane into
// buffer + p * blocks.bytes (libtiff decompresses no further than the bytes
// asked for: the rows below a crop in its last block are not decoded).
Status ReadBlock(TiffFile& file, const Blocks& blocks, int planes, int64_t x, int64_t y,
                 int64_t rows, uint8_t* buffer) {
  TIFF* tif = file.get();
  for (int p = 0; p < planes; ++p) {
    const uint32_t index = blocks.tiled ? TIFFComputeTile(tif, static_cast<uint32_t>(x),
                                                          static_cast<uint32_t>(y), 0, p)
                                        : TIFFComputeStrip(tif, static_cast<uint32_t>(y), p);
    uint8_t* block = buffer + p * blocks.bytes;
    const tmsize_t size = static_cast<tmsize_t>(
        std::min<uint64_t>(blocks.bytes, static_cast<uint64_t>(rows) * blocks.row_bytes));
    // What a damaged block leaves unwritten of the rows asked for reads as
    // zeros, whichever block the buffer held before (a crop and the whole
    // agree); rows past them are never looked at.
    std::memset(block, 0, static_cast<size_t>(size));
    file.ClearError();
    const tmsize_t got = blocks.tiled ? TIFFReadEncodedTile(tif, index, block, size)
                                      : TIFFReadEncodedStrip(tif, index, block, size);
    if (got < 0) {
      return Status::Corruption(std::string("TIFF ") + (blocks.tiled ? "tile " : "strip ") +
                                std::to_string(index) + " at byte " +
                                std::to_string(TIFFGetStrileOffset(tif, index)) + ": " +
                                (file.error().empty() ? "cannot be read" : file.error()));
    }
  }
  return Status::OK();
}

// Decodes `rect` into `rgb` (rect's width * 3 bytes a row), reading only
// the strips or tiles that hold part of it.
Status DecodeRect(TiffFile& file, const Layout& layout, const Rect& rect, uint8_t* rgb) {
  Blocks blocks;
  GPUFEED_RETURN_IF_ERROR(BlocksOf(file, layout, &blocks));
  const int planes = layout.planar ? layout.samples : 1;
  thread_local std::vector<uint8_t> buffer;
  if (!TryResize(&buffer, blocks.bytes * planes)) {
    return OutOfMemory("TIFF strips", blocks.bytes * planes, layout.width, layout.height);
  }
  const size_t out_stride = static_cast<size_t>(rect.x1 - rect.x0) * 3;
  Status status;
  for (int64_t by = rect.y0 / blocks.height * blocks.height; status.ok() && by < rect.y1;
       by += blocks.height) {
    const int64_t first_col = blocks.tiled ? rect.x0 / blocks.width * blocks.width : 0;
    for (int64_t bx = first_col; status.ok() && bx < rect.x1; bx += blocks.width) {
      const int y1 = static_cast<int>(std::min<int64_t>(rect.y1, by + blocks.height));
      status = ReadBlock(file, blocks, planes, bx, by, y1 - by, buffer.data());
      if (!status.ok()) break;
      const int x0 = static_cast<int>(std::max<int64_t>(rect.x0, bx));
      const int x1 = static_cast<int>(std::min<int64_t>(rect.x1, bx + blocks.width));
      for (int y = static_cast<int>(std::max<int64_t>(rect.y0, by)); y < y1; ++y) {
        const uint8_t* rows[8];
        for (int p = 0; p < planes; ++p) {
          rows[p] =
              buffer.data() + p * blocks.bytes + static_cast<size_t>(y - by) * blocks.row_bytes;
        }
        tiff::RowToRgb(
            layout, rows, static_cast<int>(bx), x0, x1,
            rgb + static_cast<size_t>(y - rect.y0) * out_stride + size_t{3} * (x0 - rect.x0));
      }
    }
  }
  ReleaseIfLarge(&buffer);
  return status;
}

// Where oriented pixel (x, y) lies in the stored image (Pillow's transpose
// for the Orientation tag: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 270, 7 transverse, 8 rotate 90).
inline void Stored(const Layout& layout, int x, int y, int* sx, int* sy) {
  const int w = layout.width - 1, h = layout.height - 1;
  switch (layout.orientation) {
    case 2:
      *sx = w - x;
      *sy = y;
      return;
    case 3:
      *sx = w - x;
      *sy = h - y;
      return;
    case 4:
      *sx = x;
      *sy = h - y;
      return;
    case 5:
      *sx = y;
      *sy = x;
      return;
    case 6:
      *sx = y;
      *sy = h - x;
      return;
    case 7:
      *sx = w - y;
      *sy = h - x;
      return;
    case 8:
      *sx = w - y;
      *sy = x;
      return;
    default:
      *sx = x;
      *sy = y;
      return;
  }
}

Status OpenLayout(const uint8_t* data, size_t size, TiffFile& file, Layout* layout) {
  GPUFEED_RETURN_IF_ERROR(file.OpenStatus());
  return tiff::ReadLayout(file.get(), tiff::FirstIfd(data, size), layout);
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
  Status status = DecodeRect(file, layout, rect, stored.data());
  if (!status.ok()) {
    ReleaseIfLarge(&stored);
    return status;
  }
  for (int y = 0; y < crop.height; ++y) {
    uint8_t* row = out->row(y);
    for (int x = 0; x < crop.width; ++x) {
      int sx, sy;
      Stored(layout, crop.x + x, crop.y + y, &sx, &sy);
      std::memcpy(row + 3 * x, stored.data() + (sy - rect.y0) * stride + 3 * (sx - rect.x0), 3);
    }
  }
  ReleaseIfLarge(&stored);
  return Status::OK();
}

#endif  // GPUFEED_HAVE_TIFF

}  // namespace decode_internal
}  // namespace gpufeed
