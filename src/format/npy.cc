#include "format/npy.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace gpufeed {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

// A cursor over the header's dict literal; every error names the file and
// the byte offset of the character it stopped at.
class DictCursor {
 public:
  DictCursor(const char* text, size_t size, uint64_t base, const std::string& path)
      : text_(text), size_(size), base_(base), path_(path) {}

  void SkipSpace() {
    while (at_ < size_ && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' ||
                           text_[at_] == '\r')) {
      ++at_;
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return at_ < size_ && text_[at_] == c;
  }
  Status Expect(char c) {
    if (!Peek(c)) return Error(std::string("expected '") + c + "'");
    ++at_;
    return Status::OK();
  }
  // A quoted string ('...' or "..."), without escapes (none of the keys
  // or dtype strings NumPy writes has one).
  Status String(std::string* out) {
    SkipSpace();
    if (at_ >= size_ || (text_[at_] != '\'' && text_[at_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = text_[at_++];
    const size_t start = at_;
    while (at_ < size_ && text_[at_] != quote) {
      if (text_[at_] == '\\') return Error("escaped characters are not expected in a key");
      ++at_;
    }
    if (at_ >= size_) return Error("unterminated string");
    out->assign(text_ + start, at_ - start);
    ++at_;
    return Status::OK();
  }
  Status Bool(bool* out) {
    SkipSpace();
    static const std::pair<const char*, bool> kWords[] = {{"True", true}, {"False", false}};
    for (const auto& [word, value] : kWords) {
      const size_t length = std::strlen(word);
      if (size_ - at_ >= length && std::memcmp(text_ + at_, word, length) == 0) {
        at_ += length;
        *out = value;
        return Status::OK();
      }
    }
    return Error("expected True or False");
  }
  // A tuple of non-negative integers: (), (N,), (N, M), ...
  Status Shape(std::vector<uint64_t>* shape) {
    GPUFEED_RETURN_IF_ERROR(Expect('('));
    shape->clear();
    while (!Peek(')')) {
      uint64_t value = 0;
      GPUFEED_RETURN_IF_ERROR(Integer(&value));
      shape->push_back(value);
      if (shape->size() > 32) return Error("more than 32 dimensions");
      if (!Peek(',')) break;
      ++at_;
    }
    return Expect(')');
  }
  Status Error(const std::string& what) const {
    return Status::Corruption(path_ + ": .npy header at byte offset " + std::to_string(base_ + at_) +
                              ": " + what);
  }

 private:
  Status Integer(uint64_t* value) {
    SkipSpace();
    const size_t start = at_;
    *value = 0;
    while (at_ < size_ && text_[at_] >= '0' && text_[at_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(text_[at_] - '0');
      if (*value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        return Error("a dimension that does not fit 64 bits");
      }
      *value = *value * 10 + digit;
      ++at_;
    }
    if (at_ == start) return Error("expected a non-negative integer in the shape");
    if (at_ < size_ && text_[at_] == 'L') ++at_;  // Python 2's long suffix
    return Status::OK();
  }

  const char* text_;
  size_t size_;
  size_t at_ = 0;
  uint64_t base_;
  const std::string& path_;
};

// descr -> kind and item size, accepting only C-readable numeric dtypes in
// this machine's (little-endian) byte order.
Status ParseDescr(const std::string& descr, const std::string& path, NpyHeader* header) {
  if (descr.size() < 3) {
    return Status::NotSupported(path + ": .npy dtype '" + descr +
                                "' is not a numeric dtype gpufeed reads");
  }
  const char order = descr[0], kind = descr[1];
  if (order == '>') {
    return Status::NotSupported(path + ": .npy dtype '" + descr +
                                "' is big-endian; save it little-endian "
                                "(array.astype(array.dtype.newbyteorder('<')))");
  }
  size_t size = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (descr[i] < '0' || descr[i] > '9' || size > 64) {
      return Status::NotSupported(path + ": .npy dtype '" + descr + "' is not supported");
    }
    size = size * 10 + static_cast<size_t>(descr[i] - '0');
  }
  const bool sized = (kind == 'b' && size == 1) || (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
                     ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8));
  const bool ordered = order == '<' || order == '=' || (order == '|' && size == 1);
  if (!sized || !ordered) {
    return Status::NotSupported(path + ": .npy dtype '" + descr +
                                "' is not supported (bool, int8-64, uint8-64, float16/32/64, "
                                "little-endian)");
  }
  header->kind = kind;
  header->item_size = size;
  header->descr = descr;
  return Status::OK();
}

// The dict's three keys, in any order; each exactly once.
Status ParseDict(DictCursor* cursor, const std::string& path, NpyHeader* header) {
  GPUFEED_RETURN_IF_ERROR(cursor->Expect('{'));
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  while (!cursor->Peek('}')) {
    std::string key;
    GPUFEED_RETURN_IF_ERROR(cursor->String(&key));
    GPUFEED_RETURN_IF_ERROR(cursor->Expect(':'));
    if (key == "descr" && !have_descr) {
      if (cursor->Peek('[')) return Status::NotSupported(path + ": .npy with a structured dtype");
      std::string descr;
      GPUFEED_RETURN_IF_ERROR(cursor->String(&descr));
      GPUFEED_RETURN_IF_ERROR(ParseDescr(descr, path, header));
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      GPUFEED_RETURN_IF_ERROR(cursor->Bool(&fortran));
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      GPUFEED_RETURN_IF_ERROR(cursor->Shape(&header->shape));
      have_shape = true;
    } else {
      return cursor->Error("unexpected or repeated key '" + key + "'");
    }
    if (!cursor->Peek(',')) break;
    GPUFEED_RETURN_IF_ERROR(cursor->Expect(','));
  }
  GPUFEED_RETURN_IF_ERROR(cursor->Expect('}'));
  if (!have_descr || !have_order || !have_shape) {
    return cursor->Error("the header lacks descr, fortran_order or shape");
  }
  if (fortran) {
    return Status::NotSupported(path + ": .npy in Fortran order; save it in C order "
                                "(np.ascontiguousarray)");
  }
  return Status::OK();
}

}  // namespace

Status ParseNpyHeader(const char* data, size_t size, const std::string& path, NpyHeader* header) {
  *header = NpyHeader();
  if (size < kMagicBytes + 4 || std::memcmp(data, kMagic, kMagicBytes) != 0) {
    return Status::Corruption(path + ": not a .npy file (no \\x93NUMPY magic at byte offset 0)");
  }
  header->major = static_cast<uint8_t>(data[6]);
  header->minor = static_cast<uint8_t>(data[7]);
  uint64_t length = 0, preamble = 0;
  if (header->major == 1) {
    length = static_cast<uint8_t>(data[8]) | (static_cast<uint64_t>(static_cast<uint8_t>(data[9])) << 8);
    preamble = 10;
  } else if (header->major == 2 || header->major == 3) {
    if (size < 12) return Status::Corruption(path + ": .npy header cut short at byte offset 8");
    for (int i = 3; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(data[8 + i]);
    preamble = 12;
  } else {
    return Status::NotSupported(path + ": .npy format version " + std::to_string(header->major) +
                                "." + std::to_string(header->minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  if (length > kNpyMaxHeaderBytes || preamble + length > size) {
    return Status::Corruption(path + ": .npy header of " + std::to_string(length) +
                              " bytes at byte offset " + std::to_string(preamble) +
                              " runs past the " + std::to_string(size) + " bytes read");
  }
  DictCursor cursor(data + preamble, static_cast<size_t>(length), preamble, path);
  GPUFEED_RETURN_IF_ERROR(ParseDict(&cursor, path, header));
  header->data_offset = preamble + length;
  header->elements = 1;
  for (uint64_t dimension : header->shape) {
    if (dimension != 0 && header->elements > std::numeric_limits<uint64_t>::max() / dimension) {
      return Status::Corruption(path + ": .npy shape's element count overflows 64 bits");
    }
    header->elements *= dimension;
  }
  if (header->elements > std::numeric_limits<uint64_t>::max() / header->item_size) {
    return Status::Corruption(path + ": .npy shape's byte count overflows 64 bits");
  }
  header->data_bytes = header->elements * header->item_size;
  return Status::OK();
}

Status CheckNpyFileSize(const NpyHeader& header, uint64_t file_bytes, const std::string& path) {
  const uint64_t expected = header.data_offset + header.data_bytes;
  if (expected < header.data_offset || file_bytes < expected) {
    return Status::Corruption(path + ": truncated .npy: " + std::to_string(file_bytes) +
                              " bytes, the header's shape needs " + std::to_string(expected));
  }
  if (file_bytes > expected) {
    return Status::Corruption(path + ": .npy has " + std::to_string(file_bytes - expected) +
                              " bytes after its array (at byte offset " + std::to_string(expected) +
                              ")");
  }
  return Status::OK();
}

}  // namespace gpufeed
