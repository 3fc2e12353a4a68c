// Real JPEGs for tests, encoded with libjpeg.
#ifndef GPUFEED_TESTS_JPEG_TEST_UTIL_H_
#define GPUFEED_TESTS_JPEG_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace gpufeed {

// A photographic-ish test image: gradients, texture and noise.
inline std::vector<uint8_t> MakePixels(int width, int height, int channels, uint32_t seed) {
  std::mt19937 generator(seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        double value = 128 + 60 * std::sin(x * 0.05 + c) + 40 * std::cos(y * 0.07 * (c + 1)) +
                       static_cast<int>(generator() % 20) - 10;
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(value, 0.0, 255.0));
      }
    }
  }
  return pixels;
}

// Compresses width x height pixels of `space` (interleaved, one byte per
// channel) with libjpeg's defaults, then `configure` (quality, sampling,
// progression, ...), into a JPEG file's bytes.
inline std::string CompressJpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                J_COLOR_SPACE space,
                                const std::function<void(jpeg_compress_struct*)>& configure) {
  int channels = space == JCS_GRAYSCALE ? 1 : space == JCS_CMYK ? 4 : 3;
  jpeg_compress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = width;
  info.image_height = height;
  info.input_components = channels;
  info.in_color_space = space;
  jpeg_set_defaults(&info);
  configure(&info);
  jpeg_start_compress(&info, TRUE);
  for (int y = 0; y < height; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) + static_cast<size_t>(y) * width * channels;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::string out(reinterpret_cast<char*>(buffer), size);
  jpeg_destroy_compress(&info);
  free(buffer);
  return out;
}

inline std::string EncodeJpeg(int width, int height, J_COLOR_SPACE space, int quality = 90,
                              uint32_t seed = 1, bool progressive = false) {
  int channels = space == JCS_GRAYSCALE ? 1 : space == JCS_CMYK ? 4 : 3;
  return CompressJpeg(MakePixels(width, height, channels, seed), width, height, space,
                      [&](jpeg_compress_struct* info) {
                        jpeg_set_quality(info, quality, TRUE);
                        if (progressive) jpeg_simple_progression(info);
                      });
}

}  // namespace gpufeed

#endif  // GPUFEED_TESTS_JPEG_TEST_UTIL_H_
