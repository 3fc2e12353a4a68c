#include "decode/pnm_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace gpufeed {
namespace decode_internal {

namespace {

bool IsSpace(uint8_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }

struct PnmHeader {
  int kind = 0;  // 1-6: P1-P6
  int width = 0, height = 0;
  uint32_t maxval = 1;
  size_t data = 0;  // offset of the first data byte
};

Status Bad(const std::string& what, size_t offset) {
  return Status::Corruption("PNM: " + what + " at byte " + std::to_string(offset));
}

// Pillow's _read_token: whitespace skipped before a token ends it after;
// '#' skips to CR, LF or the end and the token goes on; more than 10
// characters, or none before the end, is an error.
Status ReadToken(const uint8_t* data, size_t size, size_t* at, uint32_t* value) {
  char token[12];
  size_t length = 0;
  const size_t start = *at;
  while (length <= 10 && *at < size) {
    const uint8_t c = data[(*at)++];
    if (IsSpace(c)) {
      if (length == 0) continue;
      break;
    }
    if (c == '#') {
      while (*at < size && data[*at] != '\r' && data[*at] != '\n') ++*at;
      if (*at < size) ++*at;
      continue;
    }
    token[length++] = static_cast<char>(c);
  }
  if (length == 0) return Bad("the header ends before its next number", start);
  if (length > 10) return Bad("a header number longer than 10 characters", start);
  uint64_t number = 0;
  for (size_t i = 0; i < length; ++i) {
    if (token[i] < '0' || token[i] > '9') return Bad("a header field that is not a number", start);
    number = number * 10 + static_cast<uint64_t>(token[i] - '0');
  }
  if (number > 0x7FFFFFFF) return Bad("a header number too large", start);
  *value = static_cast<uint32_t>(number);
  return Status::OK();
}

Status ReadHeader(const uint8_t* data, size_t size, PnmHeader* header) {
  if (!LooksLikePnm(data, size)) return Status::Corruption("PNM: not a P1-P6 signature");
  header->kind = data[1] - '0';
  size_t at = 3;
  uint32_t width = 0, height = 0;
  GPUFEED_RETURN_IF_ERROR(ReadToken(data, size, &at, &width));
  GPUFEED_RETURN_IF_ERROR(ReadToken(data, size, &at, &height));
  if (width == 0 || height == 0) return Bad("a zero width or height", 3);
  header->width = static_cast<int>(width);
  header->height = static_cast<int>(height);
  if (header->kind != 1 && header->kind != 4) {
    const size_t field = at;
    GPUFEED_RETURN_IF_ERROR(ReadToken(data, size, &at, &header->maxval));
    if (header->maxval == 0 || header->maxval > 65535) {
      return Bad("maxval " + std::to_string(header->maxval) + " outside 1..65535", field);
    }
  }
  header->data = at;
  return Status::OK();
}

// A sample of `maxval` as Pillow converts it to RGB (pnm_decoder.h).
class SampleScale {
 public:
  explicit SampleScale(const PnmHeader& header) : maxval_(header.maxval) {
    const bool gray = header.kind == 2 || header.kind == 5;
    // A PGM above 255 is Pillow's "I" image: scaled to 0-65535 (raw files
    // of maxval 65535 read as they are), then clipped to 255.
    out_max_ = gray && maxval_ > 255 ? 65535.0 : 255.0;
    identity_ = maxval_ == 255 || (header.kind == 5 && maxval_ == 65535);
  }
  uint8_t operator()(uint32_t v) const {
    if (identity_) return static_cast<uint8_t>(std::min<uint32_t>(v, 255));
    // Python's round(v / maxval * out_max): the same two double operations,
    // then ties to even (nearbyint in the default rounding mode).
    const double scaled = std::nearbyint(static_cast<double>(v) / maxval_ * out_max_);
    return static_cast<uint8_t>(std::min(scaled, 255.0));
  }

 private:
  uint32_t maxval_;
  double out_max_ = 255;
  bool identity_ = false;
};

// Raw P4-P6: rows at fixed offsets, only the crop's read.
Status DecodeRaw(const uint8_t* data, size_t size, const PnmHeader& header, const CropRect& crop,
                 Image* out) {
  const int bands = header.kind == 6 ? 3 : 1;
  const size_t sample_bytes = header.maxval > 255 ? 2 : 1;
  const size_t row_bytes = header.kind == 4 ? (static_cast<size_t>(header.width) + 7) / 8
                                            : static_cast<size_t>(header.width) * bands *
                                                  sample_bytes;
  const uint64_t needed = header.data + row_bytes * static_cast<uint64_t>(crop.y + crop.height);
  if (needed > size) {
    return Bad("truncated: rows down to " + std::to_string(crop.y + crop.height) + " need " +
                   std::to_string(needed) + " bytes, the file ends",
               size);
  }
  const SampleScale scale(header);
  for (int y = 0; y < crop.height; ++y) {
    const uint8_t* row = data + header.data + row_bytes * static_cast<size_t>(crop.y + y);
    uint8_t* rgb = out->row(y);
    for (int x = 0; x < crop.width; ++x, rgb += 3) {
      const size_t column = static_cast<size_t>(crop.x + x);
      if (header.kind == 4) {
        const bool black = (row[column / 8] >> (7 - column % 8)) & 1;
        rgb[0] = rgb[1] = rgb[2] = black ? 0 : 255;
        continue;
      }
      for (int b = 0; b < 3; ++b) {
        const size_t index = column * bands + (bands == 3 ? b : 0);
        const uint32_t v = sample_bytes == 1 ? row[index]
                                             : (uint32_t{row[2 * index]} << 8) | row[2 * index + 1];
        rgb[b] = scale(v);
      }
    }
  }
  return Status::OK();
}

// Plain P1-P3 as Pillow's PpmPlainDecoder reads them: comments ('#' to CR
// or LF, that byte included) removed before whitespace splits the tokens,
// so a comment inside a number joins its two halves.
class PlainTokens {
 public:
  PlainTokens(const uint8_t* data, size_t size, size_t at) : data_(data), size_(size), at_(at) {}
  // The next byte that is neither whitespace nor in a comment, -1 at the end.
  int NextByte(bool* space_before) {
    *space_before = false;
    while (at_ < size_) {
      const uint8_t c = data_[at_++];
      if (c == '#') {
        while (at_ < size_ && data_[at_] != '\r' && data_[at_] != '\n') ++at_;
        if (at_ < size_) ++at_;
      } else if (IsSpace(c)) {
        *space_before = true;
      } else {
        return c;
      }
    }
    return -1;
  }
  // The next decimal token's value; Corruption naming where it starts.
  Status Next(uint32_t* value) {
    bool space = false;
    int c = pending_ >= 0 ? pending_ : NextByte(&space);
    pending_ = -1;
    const size_t start = at_ == 0 ? 0 : at_ - 1;
    if (c < 0) return Bad("the pixel data ends early", size_);
    uint64_t number = 0;
    int length = 0;
    while (c >= 0) {
      if (c < '0' || c > '9') return Bad("a pixel value that is not a number", start);
      if (++length > 10) return Bad("a pixel value longer than 10 characters", start);
      number = number * 10 + static_cast<uint64_t>(c - '0');
      c = NextByte(&space);
      if (space) break;  // the token ended before c
    }
    pending_ = c;
    *value = static_cast<uint32_t>(std::min<uint64_t>(number, 0xFFFFFFFF));
    return Status::OK();
  }
  size_t offset() const { return at_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_;
  int pending_ = -1;
};

Status DecodePlain(const uint8_t* data, size_t size, const PnmHeader& header,
                   const CropRect& crop, Image* out) {
  PlainTokens tokens(data, size, header.data);
  const SampleScale scale(header);
  const int bands = header.kind == 3 ? 3 : 1;
  uint8_t pixel[3];
  for (int y = 0; y < crop.y + crop.height; ++y) {
    for (int x = 0; x < header.width; ++x) {
      for (int b = 0; b < bands; ++b) {
        if (header.kind == 1) {  // one byte a token, whitespace optional
          bool space;
          const int c = tokens.NextByte(&space);
          if (c != '0' && c != '1') {
            return c < 0 ? Bad("the pixel data ends early", size)
                         : Bad("a PBM pixel other than 0 or 1", tokens.offset() - 1);
          }
          pixel[0] = c == '1' ? 0 : 255;
          continue;
        }
        uint32_t v = 0;
        GPUFEED_RETURN_IF_ERROR(tokens.Next(&v));
        if (v > header.maxval) {
          return Bad("a pixel value " + std::to_string(v) + " above maxval " +
                         std::to_string(header.maxval),
                     tokens.offset());
        }
        pixel[b] = scale(v);
      }
      if (y < crop.y || x < crop.x || x >= crop.x + crop.width) continue;
      uint8_t* rgb = out->row(y - crop.y) + 3 * (x - crop.x);
      for (int b = 0; b < 3; ++b) rgb[b] = pixel[bands == 3 ? b : 0];
    }
  }
  return Status::OK();
}

}  // namespace

bool LooksLikePnm(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6' && IsSpace(data[2]);
}

Status ReadPnmSize(const uint8_t* data, size_t size, int* width, int* height) {
  PnmHeader header;
  GPUFEED_RETURN_IF_ERROR(ReadHeader(data, size, &header));
  *width = header.width;
  *height = header.height;
  return Status::OK();
}

Status DecodePnm(const uint8_t* data, size_t size, const CropRect& requested, Image* out,
                 uint64_t max_pixels) {
  PnmHeader header;
  GPUFEED_RETURN_IF_ERROR(ReadHeader(data, size, &header));
  CropRect crop;
  GPUFEED_RETURN_IF_ERROR(
      StartRgbDecode("PNM", header.width, header.height, requested, max_pixels, out, &crop));
  return header.kind >= 4 ? DecodeRaw(data, size, header, crop, out)
                          : DecodePlain(data, size, header, crop, out);
}

}  // namespace decode_internal
}  // namespace gpufeed
