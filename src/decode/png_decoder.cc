#include "decode/png_decoder.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

namespace gpufeed {
namespace decode_internal {

namespace {

// One file through libpng's sequential reader. Every libpng call sits in a
// method that sets its own jump point first, so a longjmp from libpng's
// error handler only ever unwinds into a frame that is still live and holds
// nothing with a destructor. Methods return false with error() set.
class PngReader {
 public:
  PngReader(const uint8_t* data, size_t size) : data_(data), size_(size) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, this, &PngReader::OnError,
                                  &PngReader::OnWarning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
  }
  ~PngReader() { png_destroy_read_struct(&png_, &info_, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  // Reads the chunks up to the first IDAT and sets up the conversion to
  // 8-bit RGB (16-bit gray stays 16-bit: gray16() and Convert()).
  bool Start() {
    if (png_ == nullptr || info_ == nullptr) {
      error_ = "cannot create a libpng reader";
      return false;
    }
    if (setjmp(png_jmpbuf(png_))) return false;
    png_set_read_fn(png_, this, &PngReader::OnRead);
    png_read_info(png_, info_);
    width_ = static_cast<int>(png_get_image_width(png_, info_));
    height_ = static_cast<int>(png_get_image_height(png_, info_));
    const int type = png_get_color_type(png_, info_);
    const int depth = png_get_bit_depth(png_, info_);
    interlaced_ = png_get_interlace_type(png_, info_) != PNG_INTERLACE_NONE;
    gray16_ = type == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png_);
    // The high byte, as PIL's ";16B" unpackers keep it.
    if (depth == 16 && !gray16_) png_set_strip_16(png_);
    png_set_strip_alpha(png_);  // also the alpha a palette's tRNS would add
    if ((type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) && !gray16_) {
      png_set_gray_to_rgb(png_);
    }
    passes_ = png_set_interlace_handling(png_);
    png_read_update_info(png_, info_);
    row_bytes_ = png_get_rowbytes(png_, info_);
    const size_t expected = static_cast<size_t>(width_) * (gray16_ ? 2 : 3);
    if (row_bytes_ != expected) {
      error_ = "unexpected row size after conversion (" + std::to_string(row_bytes_) + " bytes)";
      return false;
    }
    return true;
  }

  // The next row of a file that is not interlaced.
  bool ReadRow(uint8_t* row) {
    if (setjmp(png_jmpbuf(png_))) return false;
    png_read_row(png_, row, nullptr);
    return true;
  }

  // Every pass of an interlaced file into rows[0..height).
  bool ReadAll(uint8_t** rows) {
    if (setjmp(png_jmpbuf(png_))) return false;
    for (int pass = 0; pass < passes_; ++pass) {
      for (int y = 0; y < height_; ++y) png_read_row(png_, rows[y], nullptr);
    }
    return true;
  }

  // Copies `width` pixels from column x of a converted row to RGB.
  void Convert(const uint8_t* row, int x, int width, uint8_t* rgb) const {
    if (!gray16_) {
      std::memcpy(rgb, row + 3 * static_cast<size_t>(x), 3 * static_cast<size_t>(width));
      return;
    }
    const uint8_t* in = row + 2 * static_cast<size_t>(x);
    for (int i = 0; i < width; ++i) {
      // PIL's "I" to "RGB": values clipped to 0..255, not scaled.
      const uint8_t v = in[2 * i] != 0 ? 255 : in[2 * i + 1];
      rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = v;
    }
  }

  int width() const { return width_; }
  int height() const { return height_; }
  bool interlaced() const { return interlaced_; }
  size_t row_bytes() const { return row_bytes_; }
  const std::string& error() const { return error_; }

 private:
  static void OnError(png_structp png, png_const_charp message) {
    static_cast<PngReader*>(png_get_error_ptr(png))->error_ = message;
    png_longjmp(png, 1);
  }
  static void OnWarning(png_structp, png_const_charp) {}  // ancillary trouble: PIL reads on
  static void OnRead(png_structp png, png_bytep out, size_t length) {
    auto* self = static_cast<PngReader*>(png_get_io_ptr(png));
    if (length > self->size_ - self->offset_) {
      self->error_ = "truncated: the file ends at byte " + std::to_string(self->size_) +
                     ", a read of " + std::to_string(length) + " bytes at byte " +
                     std::to_string(self->offset_) + " was asked for";
      png_longjmp(png, 1);
    }
    std::memcpy(out, self->data_ + self->offset_, length);
    self->offset_ += length;
  }

  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
  int width_ = 0, height_ = 0, passes_ = 1;
  bool interlaced_ = false, gray16_ = false;
  size_t row_bytes_ = 0;
  std::string error_;
};

Status RowError(const PngReader& reader, int row) {
  return Status::Corruption("PNG decode, row " + std::to_string(row) + " of " +
                            std::to_string(reader.height()) + ": " + reader.error());
}

}  // namespace

Status ReadPngSize(const uint8_t* data, size_t size, int* width, int* height) {
  PngReader reader(data, size);
  if (!reader.Start()) return Status::Corruption("PNG header: " + reader.error());
  *width = reader.width();
  *height = reader.height();
  return Status::OK();
}

Status DecodePng(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                 uint64_t max_pixels) {
  PngReader reader(data, size);
  if (!reader.Start()) return Status::Corruption("PNG header: " + reader.error());
  const int width = reader.width(), height = reader.height();
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(StartRgbDecode("PNG", width, height, requested, max_pixels, out, &crop));
  thread_local std::vector<uint8_t> rows;
  const int kept = reader.interlaced() ? height : 1;  // rows held at once
  const uint64_t row_bytes = reader.row_bytes();
  if (!TryResize(&rows, row_bytes * kept)) {
    return OutOfMemory("PNG rows", row_bytes * kept, width, height);
  }
  if (reader.interlaced()) {
    thread_local std::vector<uint8_t*> pointers;
    pointers.resize(height);
    for (int y = 0; y < height; ++y) pointers[y] = rows.data() + row_bytes * y;
    if (!reader.ReadAll(pointers.data())) return RowError(reader, 0);
    for (int y = 0; y < crop.height; ++y) {
      reader.Convert(pointers[crop.y + y], crop.x, crop.width, out->row(y));
    }
    return Status::OK();
  }
  // Rows below the crop are never decompressed.
  for (int y = 0; y < crop.y + crop.height; ++y) {
    if (!reader.ReadRow(rows.data())) return RowError(reader, y);
    if (y >= crop.y) reader.Convert(rows.data(), crop.x, crop.width, out->row(y - crop.y));
  }
  return Status::OK();
}

}  // namespace decode_internal
}  // namespace gpufeed
