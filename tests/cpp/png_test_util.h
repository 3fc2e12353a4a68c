// PNGs of any colour type, bit depth and interlacing for tests and fuzz
// seeds, written with libpng's classic write API (the simplified API writes
// neither interlaced files, 16-bit gray, palettes of 1-4 bits, nor gAMA).
#ifndef GPUFEED_TESTS_PNG_TEST_UTIL_H_
#define GPUFEED_TESTS_PNG_TEST_UTIL_H_

#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <string>
#include <vector>

namespace gpufeed {

struct PngSpec {
  int width = 16;
  int height = 16;
  int bit_depth = 8;
  int color_type = PNG_COLOR_TYPE_RGB;
  bool interlaced = false;
  double gamma = 0;             // > 0: a gAMA chunk with this file gamma
  bool transparency = false;    // a tRNS chunk (palette: alternating alphas; gray/RGB: value 0)
};

// Samples per pixel of a colour type, as stored.
inline int PngChannels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // palette indices
  }
}

// rows[y] holds the stored row (samples packed as the PNG stores them:
// big-endian 16-bit, sub-byte samples most significant bits first).
inline std::string EncodePng(const PngSpec& spec, const std::vector<std::vector<uint8_t>>& rows) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return std::string();
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t length) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), length);
      },
      nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette;
  std::vector<png_byte> alphas;
  if (spec.color_type == PNG_COLOR_TYPE_PALETTE) {
    const int entries = 1 << spec.bit_depth;
    for (int i = 0; i < entries; ++i) {
      palette.push_back(png_color{static_cast<png_byte>(i * 37 + 11),
                                  static_cast<png_byte>(255 - i * 53),
                                  static_cast<png_byte>(i * 91 + 5)});
      alphas.push_back(static_cast<png_byte>(i % 2 == 0 ? 0 : 128));
    }
    png_set_PLTE(png, info, palette.data(), entries);
  }
  if (spec.transparency) {
    png_color_16 value{};
    png_set_tRNS(png, info, alphas.empty() ? nullptr : alphas.data(),
                 static_cast<int>(alphas.size()), alphas.empty() ? &value : nullptr);
  }
  if (spec.gamma > 0) png_set_gAMA(png, info, spec.gamma);
  png_write_info(png, info);
  const int passes = png_set_interlace_handling(png);
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < spec.height; ++y) {
      png_write_row(png, const_cast<png_bytep>(rows[y].data()));
    }
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// Rows of pseudo-random stored samples for `spec` (every value the depth allows).
inline std::vector<std::vector<uint8_t>> PngRows(const PngSpec& spec, uint32_t seed) {
  const size_t bits =
      static_cast<size_t>(spec.width) * PngChannels(spec.color_type) * spec.bit_depth;
  std::vector<std::vector<uint8_t>> rows(spec.height, std::vector<uint8_t>((bits + 7) / 8));
  uint32_t state = seed * 2654435761u + 1;
  for (auto& row : rows) {
    for (uint8_t& byte : row) {
      state = state * 1664525u + 1013904223u;
      byte = static_cast<uint8_t>(state >> 24);
    }
  }
  return rows;
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_PNG_TEST_UTIL_H_
