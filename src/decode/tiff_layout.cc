// Pillow's TIFF layouts and their conversion to RGB (tiff_layout.h);
// compiled only with libtiff (GPUFEED_HAVE_TIFF).
#ifdef GPUFEED_HAVE_TIFF
#include "decode/tiff_layout.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace gpufeed {
namespace decode_internal {
namespace tiff {
namespace {

// Pillow's COMPRESSION_INFO: the compressions it names (others raise).
bool PillowNamesCompression(uint16_t compression) {
  static const uint16_t kNamed[] = {1,     2,     3,     4,     5,     6,     7,     8,    32771,
                                    32773, 32809, 32946, 34676, 34677, 34925, 50000, 50001};
  return std::find(std::begin(kNamed), std::end(kNamed), compression) != std::end(kNamed);
}

Status Unsupported(const std::string& what) {
  return Status::NotSupported("TIFF with " + what + " (not decoded by gpufeed)");
}

std::string Describe(uint16_t photometric, uint16_t format, uint16_t bits, uint16_t samples,
                     uint16_t extras) {
  return "photometric interpretation " + std::to_string(photometric) + ", sample format " +
         std::to_string(format) + ", " + std::to_string(samples) + " samples of " +
         std::to_string(bits) + " bits, " + std::to_string(extras) + " extra";
}

// The kind of a one-sample (gray, bilevel or palette) image, as OPEN_INFO
// maps it; false where Pillow has no mode for it.
bool OneSampleKind(uint16_t photometric, uint16_t format, uint16_t bits, uint16_t fill,
                   bool big_endian, Layout* layout) {
  const bool gray = photometric <= 1;
  if (photometric == 3 && format == 1 && (bits == 1 || bits == 2 || bits == 4 || bits == 8)) {
    layout->kind = Kind::kPalette;
    return true;
  }
  if (!gray) return false;
  layout->inverted = photometric == 0;
  if (format == 1 && bits == 1)
    layout->kind = Kind::kBilevel;
  else if (format == 1 && (bits == 2 || bits == 4 || bits == 8))
    layout->kind = Kind::kGray;
  else if (format == 1 && bits == 16 &&
           (photometric == 1 ? fill == 1 || !big_endian : fill == 1 && !big_endian)) {
    layout->kind = Kind::kGray16;
    layout->inverted = false;  // Pillow's I;16 of a min-is-white file is not inverted
  } else if (format == 1 && bits == 12 && photometric == 1 && fill == 1 && !big_endian) {
    layout->kind = Kind::kGray16;  // Pillow's I;12 unpacks to its I;16
  } else if (photometric == 1 && fill == 1 &&
             ((format == 2 && (bits == 16 || bits == 32)) ||
              (format == 1 && bits == 32 && !big_endian))) {
    layout->kind = Kind::kSigned;  // I;16S, I;32S; I;32N is read as signed too
  } else if (format == 3 && bits == 32 && fill == 1) {
    layout->kind = Kind::kFloat;
    layout->inverted = false;
  } else {
    return false;
  }
  return true;
}

// Pillow's layouts of several samples: LA, RGB(A/a/X), PA, CMYK(X).
bool ManySampleKind(uint16_t photometric, uint16_t bits, uint16_t samples, uint16_t fill,
                    bool big_endian, const uint16_t* extra, uint16_t extras, Layout* layout) {
  auto extra_is = [&](std::initializer_list<uint16_t> want) {
    return extras == want.size() && std::equal(want.begin(), want.end(), extra);
  };
  if (photometric == 1 && bits == 8 && samples == 2 && fill == 1 && extra_is({2})) {
    layout->kind = Kind::kGray;
    return true;
  }
  if (photometric == 3 && bits == 8 && samples == 2 && fill == 1 && extra_is({2})) {
    layout->kind = Kind::kPalette;
    return true;
  }
  if (photometric == 2 && (bits == 8 || bits == 16)) {
    layout->kind = Kind::kRgb;
    if (samples == 3) return extras == 0 && (fill == 1 || bits == 8);
    if (fill != 1) return false;
    const uint16_t first = extras > 0 ? extra[0] : 0;
    if (samples == 4 && extras == 0) return true;  // RGBA, its ExtraSamples missing
    if (samples == 4 && extras == 1 && bits == 8 && first == 999) return true;  // Corel Draw 10
    const uint16_t max_extras = bits == 8 ? 3 : 1;
    if (extras != samples - 3 || extras > max_extras || first > 2) return false;
    for (uint16_t i = 1; i < extras; ++i) {
      if (extra[i] != 0) return false;
    }
    layout->premultiplied = first == 1;
    return true;
  }
  if (photometric == 5 && fill == 1) {
    layout->kind = Kind::kCmyk;
    if (bits == 8) {
      return (samples == 4 && extras == 0) || (samples == 5 && extra_is({0})) ||
             (samples == 6 && extra_is({0, 0}));
    }
    return bits == 16 && samples == 4 && extras == 0 && !big_endian;
  }
  return false;
}

// Pillow's palette: the colormap tag as the file holds it (libtiff drops
// one of the wrong length), its values' high bytes as "RGB;L" (all reds,
// then greens, then blues: count / 3 colours); indices past it are grey.
Status ReadPalette(const FirstIfd& ifd, Layout* layout) {
  FirstIfd::Entry entry;
  if (!ifd.Find(TIFFTAG_COLORMAP, &entry)) {
    return Status::Corruption("TIFF palette image without a colormap (Pillow refuses it too)");
  }
  const uint64_t colours = entry.count / 3;
  if (colours > 256) {
    return Status::Corruption("TIFF colormap of " + std::to_string(colours) +
                              " colours, more than 256");
  }
  for (int i = 0; i < 256; ++i) {
    for (int c = 0; c < 3; ++c) layout->palette[3 * i + c] = static_cast<uint8_t>(i);
  }
  for (uint64_t i = 0; i < colours; ++i) {
    for (uint64_t c = 0; c < 3; ++c) {
      uint32_t value = 0;
      if (!ifd.Value(entry, c * colours + i, &value)) {
        return Status::Corruption("TIFF colormap past the end of the file");
      }
      layout->palette[3 * i + c] = static_cast<uint8_t>(value >> 8);
    }
  }
  return Status::OK();
}

// Sample `index` of a row of `bits`-bit samples (MSB first below a byte;
// libtiff has already reversed the bits of a fill order 2 file and swapped
// the bytes of wider samples to the machine's order).
inline uint32_t Sample(const uint8_t* row, size_t index, int bits) {
  switch (bits) {
    case 8:
      return row[index];
    case 16: {
      uint16_t value;
      std::memcpy(&value, row + 2 * index, 2);
      return value;
    }
    case 32: {
      uint32_t value;
      std::memcpy(&value, row + 4 * index, 4);
      return value;
    }
    case 12: {  // packed MSB first, as Pillow's I;12 unpacker reads them
      const size_t bit = index * 12;
      const uint32_t pair = (uint32_t{row[bit >> 3]} << 8) | row[(bit >> 3) + 1];
      return (bit & 7) == 0 ? pair >> 4 : pair & 0xFFF;
    }
    default: {  // 1, 2 or 4
      const size_t bit = index * bits;
      return (row[bit >> 3] >> (8 - bits - (bit & 7))) & ((1u << bits) - 1);
    }
  }
}

inline uint8_t High(uint32_t value, int bits) {
  return static_cast<uint8_t>(bits == 16 ? value >> 8 : value);
}

// Pillow's MULDIV255: a * b / 255 rounded.
inline int MulDiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// One pixel of `layout` to RGB. sample(i) gives its i-th sample.
template <typename SampleAt>
inline void ToRgb(const Layout& layout, const SampleAt& sample, uint8_t* rgb) {
  uint8_t v = 0;
  switch (layout.kind) {
    case Kind::kBilevel:
      v = (sample(0) != 0) != layout.inverted ? 255 : 0;
      break;
    case Kind::kGray:
      v = static_cast<uint8_t>(sample(0) * 255 / ((1u << layout.bits) - 1));
      if (layout.inverted) v = static_cast<uint8_t>(255 - v);
      break;
    case Kind::kGray16:
      v = static_cast<uint8_t>(std::min<uint32_t>(sample(0), 255));
      break;
    case Kind::kSigned: {
      const uint32_t raw = sample(0);
      const int32_t s = layout.bits == 16 ? static_cast<int16_t>(raw) : static_cast<int32_t>(raw);
      v = static_cast<uint8_t>(std::clamp<int32_t>(s, 0, 255));
      break;
    }
    case Kind::kFloat: {
      float f;
      const uint32_t raw = sample(0);
      std::memcpy(&f, &raw, 4);
      v = f >= 255.0f ? 255 : f > 0.0f ? static_cast<uint8_t>(f) : 0;  // NaN: 0
      break;
    }
    case Kind::kPalette:
      std::memcpy(rgb, &layout.palette[3 * sample(0)], 3);
      return;
    case Kind::kRgb: {
      int r = High(sample(0), layout.bits), g = High(sample(1), layout.bits),
          b = High(sample(2), layout.bits);
      if (layout.premultiplied) {
        const int a = High(sample(3), layout.bits);
        if (a == 0)
          r = g = b = 0;
        else if (a != 255) {
          r = std::min(255, r * 255 / a);
          g = std::min(255, g * 255 / a);
          b = std::min(255, b * 255 / a);
        }
      }
      rgb[0] = static_cast<uint8_t>(r);
      rgb[1] = static_cast<uint8_t>(g);
      rgb[2] = static_cast<uint8_t>(b);
      return;
    }
    case Kind::kCmyk: {
      const int nk = 255 - High(sample(3), layout.bits);
      for (int i = 0; i < 3; ++i) {
        rgb[i] = static_cast<uint8_t>(
            std::clamp(nk - MulDiv255(High(sample(i), layout.bits), nk), 0, 255));
      }
      return;
    }
  }
  rgb[0] = rgb[1] = rgb[2] = v;
}

}  // namespace

FirstIfd::FirstIfd(const uint8_t* data, size_t size) : data_(data), size_(size) {
  if (size < 8) return;
  big_endian_ = data[0] == 'M';
  uint64_t version = 0, offset = 0;
  if (!Read(2, 2, &version)) return;
  bigtiff_ = version == 43;
  if (!Read(bigtiff_ ? 8 : 4, bigtiff_ ? 8 : 4, &offset)) return;
  if (!Read(offset, bigtiff_ ? 8 : 2, &count_)) return;
  entries_ = offset + (bigtiff_ ? 8 : 2);
}

bool FirstIfd::Read(uint64_t at, int bytes, uint64_t* value) const {
  if (at > size_ || size_ - at < static_cast<uint64_t>(bytes)) return false;
  *value = 0;
  for (int i = 0; i < bytes; ++i) {
    const uint64_t byte = data_[at + i];
    *value |= big_endian_ ? byte << (8 * (bytes - 1 - i)) : byte << (8 * i);
  }
  return true;
}

bool FirstIfd::Find(uint16_t tag, Entry* entry) const {
  const uint64_t entry_size = bigtiff_ ? 20 : 12;
  uint64_t entry_tag = 0, type = 0;
  for (uint64_t i = 0; i < count_ && Read(entries_ + i * entry_size, 2, &entry_tag); ++i) {
    if (entry_tag != tag) continue;
    const uint64_t at = entries_ + i * entry_size;
    if (!Read(at + 2, 2, &type) || !Read(at + 4, bigtiff_ ? 8 : 4, &entry->count)) return false;
    entry->type = static_cast<uint16_t>(type);
    const int width = type == TIFF_SHORT ? 2 : type == TIFF_LONG ? 4 : 0;
    if (width == 0) return false;  // Pillow's tags here are SHORT or LONG
    entry->width = width;
    const uint64_t inline_bytes = bigtiff_ ? 8 : 4;
    if (entry->count > size_) return false;
    if (entry->count * width <= inline_bytes) {
      entry->values = at + (bigtiff_ ? 12 : 8);
      return true;
    }
    return Read(at + (bigtiff_ ? 12 : 8), bigtiff_ ? 8 : 4, &entry->values);
  }
  return false;
}

bool FirstIfd::Value(const Entry& entry, uint64_t i, uint32_t* value) const {
  uint64_t v = 0;
  if (i >= entry.count || !Read(entry.values + i * entry.width, entry.width, &v)) return false;
  *value = static_cast<uint32_t>(v);
  return true;
}

// The tags libtiff fills in, drops or repairs, as the file holds them
// (Pillow reads them so): Photometric (0 when missing, where libtiff
// guesses, or changes a palette whose colormap it drops), ExtraSamples
// (libtiff pads a short list), Orientation (the first value: libtiff drops
// a tag of two). REQUIRES: the vector of extra samples empty.
void TagsAsWritten(const FirstIfd& ifd, uint16_t* photometric, std::vector<uint16_t>* extra,
                   int* orientation) {
  FirstIfd::Entry entry;
  uint32_t value = 0;
  *photometric = ifd.Find(TIFFTAG_PHOTOMETRIC, &entry) && ifd.Value(entry, 0, &value)
                     ? static_cast<uint16_t>(value)
                     : 0;
  if (ifd.Find(TIFFTAG_EXTRASAMPLES, &entry)) {
    for (uint64_t i = 0; i < entry.count && i < 8 && ifd.Value(entry, i, &value); ++i) {
      extra->push_back(static_cast<uint16_t>(value));
    }
  }
  *orientation = ifd.Find(TIFFTAG_ORIENTATION, &entry) && ifd.Value(entry, 0, &value) &&
                         value >= 1 && value <= 8
                     ? static_cast<int>(value)
                     : 1;
}

Status ReadLayout(TIFF* tif, const FirstIfd& ifd, Layout* layout) {
  uint32_t width = 0, height = 0;
  uint16_t compression = 1, photometric = 0, planar = 1, fill = 1, format = 1, bits = 1,
           samples = 1;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &height);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_FILLORDER, &fill);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
  std::vector<uint16_t> extra;
  TagsAsWritten(ifd, &photometric, &extra, &layout->orientation);
  const uint16_t extras = static_cast<uint16_t>(extra.size());
  if (width == 0 || height == 0 || width > INT32_MAX || height > INT32_MAX) {
    return Status::Corruption("TIFF header: image of " + std::to_string(width) + "x" +
                              std::to_string(height) + " pixels");
  }
  if (!PillowNamesCompression(compression)) {
    return Status::Corruption("TIFF compression " + std::to_string(compression) +
                              " is unknown (Pillow refuses it too)");
  }
  if (compression == COMPRESSION_OJPEG) return Unsupported("old-style JPEG compression");
  layout->width = static_cast<int>(width);
  layout->height = static_cast<int>(height);
  layout->bits = bits;
  layout->samples = samples;
  layout->planar = planar == PLANARCONFIG_SEPARATE && samples > 1;
  const bool big_endian = TIFFIsBigEndian(tif) != 0;
  const std::string described = Describe(photometric, format, bits, samples, extras);
  if (photometric == PHOTOMETRIC_CIELAB) return Unsupported("CIE L*a*b* pixels");
  if (photometric == PHOTOMETRIC_YCBCR) {
    if (compression != COMPRESSION_JPEG || layout->planar) {
      return Unsupported("YCbCr pixels not compressed with JPEG in one plane");
    }
    if (bits != 8 || samples != 3 || extras != 0) return Unsupported(described);
    // libjpeg converts to RGB and upsamples, as Pillow asks libtiff to.
    TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    layout->kind = Kind::kRgb;
    return Status::OK();
  }
  // Pillow folds a per-sample format of all 1s to 1; libtiff holds one value.
  const bool known =
      samples == 1
          ? extras == 0 && OneSampleKind(photometric, format, bits, fill, big_endian, layout)
          : format == 1 && ManySampleKind(photometric, bits, samples, fill, big_endian,
                                          extra.data(), extras, layout);
  if (!known) return Unsupported(described + " (Pillow: unknown pixel mode)");
  // Pillow's libtiff reading of separate planes takes four RGB samples
  // without an ExtraSamples tag as premultiplied (its own unpacking of an
  // uncompressed file does not).
  if (layout->kind == Kind::kRgb && layout->planar && samples == 4 && extras == 0 &&
      compression != COMPRESSION_NONE) {
    layout->premultiplied = true;
  }
  if (layout->kind == Kind::kPalette) return ReadPalette(ifd, layout);
  return Status::OK();
}

void RowToRgb(const Layout& layout, const uint8_t* const* planes, int first, int x0, int x1,
              uint8_t* out) {
  if (!layout.planar && layout.kind == Kind::kRgb && layout.bits == 8 && !layout.premultiplied) {
    const uint8_t* in = planes[0] + static_cast<size_t>(x0 - first) * layout.samples;
    for (int x = x0; x < x1; ++x, in += layout.samples, out += 3) std::memcpy(out, in, 3);
    return;
  }
  for (int x = x0; x < x1; ++x, out += 3) {
    const size_t column = static_cast<size_t>(x - first);
    if (layout.planar) {
      ToRgb(
          layout, [&](int i) { return Sample(planes[i], column, layout.bits); }, out);
    } else {
      const size_t base = column * layout.samples;
      ToRgb(
          layout, [&](int i) { return Sample(planes[0], base + i, layout.bits); }, out);
    }
  }
}

}  // namespace tiff
}  // namespace decode_internal
}  // namespace gpufeed

#endif  // GPUFEED_HAVE_TIFF
