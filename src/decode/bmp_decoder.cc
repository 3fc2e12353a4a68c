#include "decode/bmp_decoder.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace gpufeed {
namespace decode_internal {

namespace {

uint32_t U16(const uint8_t* p) { return p[0] | (uint32_t{p[1]} << 8); }
uint32_t U32(const uint8_t* p) {
  return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

Status Bad(const std::string& what, uint64_t offset) {
  return Status::Corruption("BMP: " + what + " at byte " + std::to_string(offset));
}

constexpr uint32_t kRaw = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3;

struct BmpHeader {
  int width = 0, height = 0;
  bool top_down = false;
  int bits = 0;
  uint32_t compression = 0;  // kRaw, kRle8, kRle4 or kBitfields
  uint64_t data = 0;  // offset of the first stored row
  // 24/32 bits: the byte of each channel in a pixel; 16 bits: 5-6-5 or 5-5-5.
  int r = 2, g = 1, b = 0;
  bool rgb565 = false;
  std::array<uint8_t, 3 * 256> palette{};  // 1-8 bits: RGB of each index
};

// Pillow's byte-aligned 32-bit bitfield layouts: the channel bytes of
// (r, g, b, a) masks; false for a layout Pillow refuses.
bool Layout32(uint32_t r, uint32_t g, uint32_t b, uint32_t a, BmpHeader* h) {
  struct Known { uint32_t r, g, b, a; int rb, gb, bb; };
  static const Known kKnown[] = {{0xFF0000, 0xFF00, 0xFF, 0, 2, 1, 0},
                                 {0xFF000000, 0xFF0000, 0xFF00, 0, 3, 2, 1},
                                 {0xFF000000, 0xFF0000, 0xFF00, 0xFF, 3, 2, 1},
                                 {0xFF, 0xFF00, 0xFF0000, 0xFF000000, 0, 1, 2},
                                 {0xFF0000, 0xFF00, 0xFF, 0xFF000000, 2, 1, 0},
                                 {0, 0, 0, 0, 2, 1, 0}};
  for (const Known& k : kKnown) {
    if (k.r == r && k.g == g && k.b == b && k.a == a) {
      h->r = k.rb, h->g = k.gb, h->b = k.bb;
      return true;
    }
  }
  return false;
}

Status ReadBitfields(const uint8_t* data, size_t size, uint32_t header_size, BmpHeader* h,
                     uint64_t* after) {
  // A 40-byte header's three masks follow it; longer headers hold four.
  const uint64_t at = header_size >= 56 ? 14 + 4 + 36 : 14 + uint64_t{header_size};
  const int count = header_size >= 56 ? 4 : 3;
  if (at + 4 * count > size) return Bad("truncated bitfield masks", size);
  const uint32_t r = U32(data + at), g = U32(data + at + 4), b = U32(data + at + 8);
  const uint32_t a = count == 4 ? U32(data + at + 12) : 0;
  if (header_size < 56) *after += 12;
  bool known = false;
  if (h->bits == 32) {
    known = Layout32(r, g, b, a, h);
  } else if (h->bits == 24) {
    known = r == 0xFF0000 && g == 0xFF00 && b == 0xFF;
  } else if (h->bits == 16) {
    h->rgb565 = r == 0xF800 && g == 0x7E0 && b == 0x1F;
    known = h->rgb565 || (r == 0x7C00 && g == 0x3E0 && b == 0x1F);
  }
  return known ? Status::OK() : Bad("a bitfield layout Pillow does not read", at);
}

Status ReadPalette(const uint8_t* data, size_t size, uint64_t at, uint32_t colors, int entry,
                   BmpHeader* h) {
  if (colors == 0 || colors > 65536) {
    return Bad("a palette of " + std::to_string(colors) + " colours", 14 + 32);
  }
  // Pillow reads what the file holds of the palette (a file that ends
  // first still decodes; the data offset comes from the file header).
  const uint64_t held = at < size ? (size - at) / entry : 0;
  // More than 256 entries read: Pillow raises "invalid palette size" when it
  // applies them, unless all `colors` entries are grey by its test (entry i
  // equal to i mod 256 thrice), which makes the image an "L" image instead.
  if (std::min<uint64_t>(colors, held) > 256) {
    bool grey = held >= colors;
    for (uint32_t i = 0; grey && i < colors; ++i) {
      const uint8_t* bgr = data + at + uint64_t{i} * entry;
      grey = bgr[0] == (i & 255) && bgr[1] == (i & 255) && bgr[2] == (i & 255);
    }
    if (!grey) {
      return Bad("a palette of " + std::to_string(colors) +
                     " colours, more than the 256 Pillow applies (\"invalid palette size\")",
                 at);
    }
  }
  const uint32_t kept = static_cast<uint32_t>(std::min<uint64_t>({colors, 256, held}));
  for (uint32_t i = 0; i < 256; ++i) {
    uint8_t* rgb = &h->palette[3 * i];
    if (i < kept) {
      const uint8_t* bgr = data + at + uint64_t{i} * entry;
      rgb[0] = bgr[2], rgb[1] = bgr[1], rgb[2] = bgr[0];
    } else {
      rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(i);  // Pillow's palette ramp
    }
  }
  return Status::OK();
}

Status ReadHeader(const uint8_t* data, size_t size, BmpHeader* h) {
  if (!LooksLikeBmp(data, size)) return Status::Corruption("BMP: no BM signature");
  const uint32_t header_size = U32(data + 14);
  if (uint64_t{14} + header_size > size) return Bad("truncated header", size);
  uint64_t width, height;
  uint32_t compression = kRaw, colors = 0;
  int entry = 4;
  if (header_size == 12) {  // OS/2 1.x
    width = U16(data + 18), height = U16(data + 20), h->bits = static_cast<int>(U16(data + 24));
    entry = 3;
  } else if (header_size == 40 || header_size == 64 || header_size == 108 || header_size == 124) {
    width = U32(data + 18);
    const bool flip = data[25] == 0xFF;  // Pillow's test of a negative height
    height = flip ? (uint64_t{1} << 32) - U32(data + 22) : U32(data + 22);
    h->top_down = flip;
    h->bits = static_cast<int>(U16(data + 28));
    compression = U32(data + 30);
    colors = U32(data + 46);
  } else {
    return Bad("an unsupported header size " + std::to_string(header_size), 14);
  }
  if (width == 0 || height == 0 || width > 0x7FFFFFFF || height > 0x7FFFFFFF) {
    return Bad("a zero or too large width or height", 18);
  }
  h->width = static_cast<int>(width), h->height = static_cast<int>(height);
  const int bits = h->bits;
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32) {
    return Bad("an unsupported depth of " + std::to_string(bits) + " bits", 28);
  }
  if (colors == 0 && bits <= 8) colors = 1u << bits;
  uint64_t after = 14 + uint64_t{header_size};  // where Pillow's reading stands
  if (compression == kBitfields) {
    GPUFEED_RETURN_IF_ERROR(ReadBitfields(data, size, header_size, h, &after));
  } else if (compression == kRle8 || compression == kRle4) {
    if (bits > 8) {
      return Bad("RLE compression of " + std::to_string(bits) +
                     "-bit pixels (Pillow cannot load it either: RLE indices need a palette)",
                 30);
    }
  } else if (compression != kRaw) {
    return Bad("an unsupported compression " + std::to_string(compression), 30);
  }
  h->compression = compression;
  if (bits <= 8) {
    GPUFEED_RETURN_IF_ERROR(ReadPalette(data, size, after, colors, entry, h));
    after += uint64_t{colors} * entry;
  }
  h->data = U32(data + 10);
  if (h->data == 14 + uint64_t{header_size} && bits <= 8) h->data += 4 * uint64_t{colors};
  if (h->data == 0) h->data = after;  // Pillow reads on from where it stands
  return Status::OK();
}

// A palette index's colour into rgb[0..2].
void PutColor(const BmpHeader& h, int index, uint8_t* rgb) {
  const uint8_t* color = &h.palette[3 * index];
  rgb[0] = color[0], rgb[1] = color[1], rgb[2] = color[2];
}

// One stored row's pixels [x0, x0 + width) to RGB.
void ConvertRow(const BmpHeader& h, const uint8_t* row, int x0, int width, uint8_t* rgb) {
  for (int i = 0; i < width; ++i, rgb += 3) {
    const size_t x = static_cast<size_t>(x0 + i);
    if (h.bits <= 8) {
      const int shift = 8 - h.bits - static_cast<int>((x * h.bits) % 8);
      PutColor(h, (row[x * h.bits / 8] >> shift) & ((1 << h.bits) - 1), rgb);
    } else if (h.bits == 16) {
      const uint32_t v = U16(row + 2 * x);
      const uint32_t g = h.rgb565 ? ((v >> 5) & 63) * 255 / 63 : ((v >> 5) & 31) * 255 / 31;
      rgb[0] = static_cast<uint8_t>(((v >> (h.rgb565 ? 11 : 10)) & 31) * 255 / 31);
      rgb[1] = static_cast<uint8_t>(g);
      rgb[2] = static_cast<uint8_t>((v & 31) * 255 / 31);
    } else {
      const uint8_t* pixel = row + x * (h.bits / 8);
      rgb[0] = pixel[h.r], rgb[1] = pixel[h.g], rgb[2] = pixel[h.b];
    }
  }
}

// Pillow 9.4's BmpRleDecoder, step for step: the palette indices of the
// stored rows (bottom-up unless the height is negative), width * height of
// them. Its quirks are kept: a run past the row's end is cut there, but
// absolute runs are not; an odd absolute RLE4 run reads (n / 2) bytes, two
// indices each; the word alignment after an absolute run follows the file
// offset; a delta escape reads two bytes and then takes right and up from
// the two after them; an end of bitmap (or of the file) before the last row
// is an error ("not enough image data", as Pillow's raw decoder says).
Status ExpandRle(const uint8_t* data, size_t size, const BmpHeader& h, std::vector<uint8_t>* out) {
  const uint64_t width = static_cast<uint32_t>(h.width);
  const uint64_t total = width * static_cast<uint32_t>(h.height);
  const bool rle4 = h.compression == kRle4;
  // *out holds `total` indices (sized by the caller); `length` is how many
  // Pillow's decoder would hold, which may pass `total` on the last step:
  // those past it are counted, never stored (Pillow ignores them).
  uint8_t* indices = out->data();
  uint64_t length = 0, at = h.data, x = 0;
  auto put = [&](uint8_t index) {
    if (length < total) indices[length] = index;
    ++length;
  };
  auto zeros = [&](uint64_t count) {
    if (length < total) std::fill_n(indices + length, std::min(count, total - length), 0);
    length += count;
  };
  while (length < total) {
    if (at + 2 > size) break;
    uint64_t count = data[at];
    const uint8_t value = data[at + 1];
    at += 2;
    if (count > 0) {  // a run of one index (RLE8) or of two alternating (RLE4)
      if (x + count > width) count = x < width ? width - x : 0;
      for (uint64_t i = 0; i < count; ++i) {
        put(rle4 ? (i % 2 == 0 ? value >> 4 : value & 0x0F) : value);
      }
      x += count;
    } else if (value == 0) {  // end of line
      zeros((width - length % width) % width);
      x = 0;
    } else if (value == 1) {  // end of bitmap
      break;
    } else if (value == 2) {  // delta
      if (at + 2 > size) break;
      at += 2;
      if (at + 2 > size) return Bad("RLE delta escape cut short", at);
      zeros(data[at] + uint64_t{data[at + 1]} * width);
      at += 2;
      x = length % width;
    } else {  // absolute: `value` indices stored as they are
      const uint64_t bytes = rle4 ? value / 2 : value;
      const uint64_t held = std::min<uint64_t>(bytes, size > at ? size - at : 0);
      for (uint64_t i = 0; i < held; ++i) {
        const uint8_t byte = data[at + i];
        if (rle4) {
          put(byte >> 4);
          put(byte & 0x0F);
        } else {
          put(byte);
        }
      }
      at += held;
      if (held < bytes) break;
      x += value;
      if (at % 2 != 0) at += 1;
    }
  }
  if (length < total) {
    return Bad("RLE data ends after " + std::to_string(length) + " of " + std::to_string(total) +
                   " pixels (not enough image data)",
               std::min<uint64_t>(at, size));
  }
  return Status::OK();
}

Status DecodeRle(const uint8_t* data, size_t size, const BmpHeader& h, const CropRect& crop,
                 Image* out) {
  thread_local std::vector<uint8_t> indices;
  const uint64_t total = uint64_t{static_cast<uint32_t>(h.width)} * static_cast<uint32_t>(h.height);
  if (!TryResize(&indices, total)) return OutOfMemory("BMP RLE indices", total, h.width, h.height);
  GPUFEED_RETURN_IF_ERROR(ExpandRle(data, size, h, &indices));
  for (int y = 0; y < crop.height; ++y) {
    const int image_row = crop.y + y;
    const uint64_t stored = h.top_down ? image_row : h.height - 1 - image_row;
    const uint8_t* row = indices.data() + stored * static_cast<uint32_t>(h.width) + crop.x;
    uint8_t* rgb = out->row(y);
    for (int x = 0; x < crop.width; ++x, rgb += 3) PutColor(h, row[x], rgb);
  }
  return Status::OK();
}

}  // namespace

bool LooksLikeBmp(const uint8_t* data, size_t size) {
  return size >= 18 && data[0] == 'B' && data[1] == 'M';
}

Status ReadBmpSize(const uint8_t* data, size_t size, int* width, int* height) {
  BmpHeader header;
  GPUFEED_RETURN_IF_ERROR(ReadHeader(data, size, &header));
  *width = header.width;
  *height = header.height;
  return Status::OK();
}

Status DecodeBmp(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                 uint64_t max_pixels) {
  BmpHeader h;
  GPUFEED_RETURN_IF_ERROR(ReadHeader(data, size, &h));
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(
      StartRgbDecode("BMP", h.width, h.height, requested, max_pixels, out, &crop));
  if (h.compression == kRle8 || h.compression == kRle4) return DecodeRle(data, size, h, crop, out);
  const uint64_t stride = ((uint64_t{static_cast<uint32_t>(h.width)} * h.bits + 31) >> 3) & ~3ull;
  const uint64_t used = (uint64_t{static_cast<uint32_t>(h.width)} * h.bits + 7) / 8;
  for (int y = 0; y < crop.height; ++y) {
    const int image_row = crop.y + y;
    const uint64_t stored = h.top_down ? image_row : h.height - 1 - image_row;
    const uint64_t at = h.data + stored * stride;
    if (at + used > size) {
      return Bad("truncated: row " + std::to_string(image_row) + " needs bytes " +
                     std::to_string(at) + "-" + std::to_string(at + used) + ", the file ends",
                 size);
    }
    ConvertRow(h, data + at, crop.x, crop.width, out->row(y));
  }
  return Status::OK();
}

}  // namespace decode_internal
}  // namespace gpufeed
