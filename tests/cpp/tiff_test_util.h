// TIFF files written with libtiff's own API, for the decoder's tests and
// the fuzzer's seeds: strips or tiles, contiguous or separate planes, any
// compression libtiff encodes (JPEG with PHOTOMETRIC_YCBCR: RGB rows given,
// YCbCr 4:2:0 stored), an Orientation tag.
#ifndef GPUFEED_TESTS_CPP_TIFF_TEST_UTIL_H_
#define GPUFEED_TESTS_CPP_TIFF_TEST_UTIL_H_

#include <tiffio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace gpufeed {
namespace testing {

struct TiffSpec {
  int width = 0;
  int height = 0;
  int bits = 8;
  int samples = 3;
  int photometric = PHOTOMETRIC_RGB;
  bool planar = false;  // separate planes
  int tile = 0;         // tile width and length; 0: strips
  int rows_per_strip = 5;
  int compression = COMPRESSION_NONE;
  int orientation = 1;
  int sample_format = SAMPLEFORMAT_UINT;
  std::vector<uint16_t> extra;     // ExtraSamples
  std::vector<uint16_t> colormap;  // 3 << bits entries (palette images)
};

// The file's bytes; `pixels` holds rows of interleaved samples (packed MSB
// first below 8 bits; wider samples in the machine's order). Empty when
// libtiff refuses the spec.
inline std::string WriteTiff(const TiffSpec& spec, const std::vector<uint8_t>& pixels) {
  char path[] = "/tmp/gpufeed-tiff-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  TIFF* tif = TIFFOpen(path, "w");
  bool ok = tif != nullptr;
  if (ok) {
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, spec.width);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, spec.height);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, spec.bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spec.samples);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, spec.photometric);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG,
                 spec.planar ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, spec.compression);
    if (spec.compression == COMPRESSION_JPEG && spec.photometric == PHOTOMETRIC_YCBCR) {
      TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);  // RGB in, YCbCr 4:2:0 out
    }
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, spec.sample_format);
    if (spec.orientation != 1) TIFFSetField(tif, TIFFTAG_ORIENTATION, spec.orientation);
    if (!spec.extra.empty()) {
      TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, static_cast<uint16_t>(spec.extra.size()),
                   spec.extra.data());
    }
    if (!spec.colormap.empty()) {
      const size_t n = spec.colormap.size() / 3;
      TIFFSetField(tif, TIFFTAG_COLORMAP, spec.colormap.data(), spec.colormap.data() + n,
                   spec.colormap.data() + 2 * n);
    }
    if (spec.tile > 0) {
      TIFFSetField(tif, TIFFTAG_TILEWIDTH, spec.tile);
      TIFFSetField(tif, TIFFTAG_TILELENGTH, spec.tile);
    } else {
      TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, spec.rows_per_strip);
    }
    const int planes = spec.planar ? spec.samples : 1;
    const int per_plane = spec.planar ? 1 : spec.samples;
    const size_t bits_per_pixel = static_cast<size_t>(spec.bits) * spec.samples;
    const size_t row_bytes = (spec.width * bits_per_pixel + 7) / 8;
    const size_t sample_bytes = static_cast<size_t>(spec.bits) / 8;  // planar: whole bytes only
    // One plane's (or the interleaved) row y, columns [x0, x0 + n).
    auto plane_row = [&](int plane, int y, int x0, int n, std::vector<uint8_t>* out) {
      out->assign((static_cast<size_t>(n) * spec.bits * per_plane + 7) / 8, 0);
      const uint8_t* row = pixels.data() + y * row_bytes;
      if (!spec.planar) {
        const size_t first_bit = static_cast<size_t>(x0) * bits_per_pixel;
        for (size_t bit = 0; bit < n * bits_per_pixel; ++bit) {
          const size_t from = first_bit + bit;
          if ((row[from >> 3] >> (7 - (from & 7))) & 1) (*out)[bit >> 3] |= 0x80 >> (bit & 7);
        }
        return;
      }
      for (int x = 0; x < n; ++x) {
        const uint8_t* sample = row + ((x0 + x) * spec.samples + plane) * sample_bytes;
        std::copy(sample, sample + sample_bytes, out->begin() + x * sample_bytes);
      }
    };
    std::vector<uint8_t> buffer;
    for (int plane = 0; ok && plane < planes; ++plane) {
      if (spec.tile == 0) {
        for (int y = 0; ok && y < spec.height; ++y) {
          plane_row(plane, y, 0, spec.width, &buffer);
          ok = TIFFWriteScanline(tif, buffer.data(), y, static_cast<uint16_t>(plane)) >= 0;
        }
        continue;
      }
      std::vector<uint8_t> tile(TIFFTileSize(tif));
      for (int ty = 0; ok && ty < spec.height; ty += spec.tile) {
        for (int tx = 0; ok && tx < spec.width; tx += spec.tile) {
          std::fill(tile.begin(), tile.end(), 0);
          const size_t tile_row = TIFFTileRowSize(tif);
          for (int y = ty; y < std::min(spec.height, ty + spec.tile); ++y) {
            plane_row(plane, y, tx, std::min(spec.tile, spec.width - tx), &buffer);
            std::copy(buffer.begin(), buffer.end(), tile.begin() + (y - ty) * tile_row);
          }
          ok = TIFFWriteTile(tif, tile.data(), tx, ty, 0, static_cast<uint16_t>(plane)) >= 0;
        }
      }
    }
    TIFFClose(tif);
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  return ok ? bytes : std::string();
}

// The StripOffsets of a file WriteTiff wrote (empty when unreadable).
inline std::vector<uint64_t> TiffStripOffsets(const std::string& bytes) {
  char path[] = "/tmp/gpufeed-tiff-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  const bool written = write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  close(fd);
  std::vector<uint64_t> out;
  TIFF* tif = written ? TIFFOpen(path, "r") : nullptr;
  if (tif != nullptr) {
    for (uint32_t i = 0; i < TIFFNumberOfStrips(tif); ++i)
      out.push_back(TIFFGetStrileOffset(tif, i));
    TIFFClose(tif);
  }
  unlink(path);
  return out;
}

}  // namespace testing
}  // namespace gpufeed

#endif  // GPUFEED_TESTS_CPP_TIFF_TEST_UTIL_H_
