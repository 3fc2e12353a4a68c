// The saved member index of a tar (EncodeTarIndex / DecodeTarIndex) and
// brace-pattern expansion: the file formats around tar_index.cc's scanner.
#include <string>
#include <vector>

#include "format/tar_index.h"
#include "util/checksum.h"

namespace gpufeed {

namespace {

constexpr char kIndexMagic[] = "GFTARIX1";
constexpr size_t kIndexMagicSize = 8;

}  // namespace

namespace {

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutString(const std::string& text, std::string* out) {
  PutVarint(text.size(), out);
  out->append(text);
}

class IndexReader {
 public:
  explicit IndexReader(std::string_view data) : data_(data) {}
  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= data_.size()) return false;
      uint8_t byte = static_cast<uint8_t>(data_[at_++]);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool String(std::string* text) {
    uint64_t size = 0;
    if (!Varint(&size) || size > data_.size() - at_) return false;
    text->assign(data_.substr(at_, size));
    at_ += size;
    return true;
  }
  size_t remaining() const { return data_.size() - at_; }

 private:
  std::string_view data_;
  size_t at_ = 0;
};

}  // namespace

void EncodeTarIndex(const TarIndex& index, std::string* out) {
  out->assign(kIndexMagic, kIndexMagicSize);
  PutVarint(index.tar_size, out);
  PutVarint(static_cast<uint64_t>(index.tar_mtime_ns), out);
  PutVarint(index.extensions.size(), out);
  for (const std::string& extension : index.extensions) PutString(extension, out);
  PutVarint(index.samples.size(), out);
  for (const TarSample& sample : index.samples) {
    PutString(sample.key, out);
    PutVarint(sample.member_count, out);
    for (uint32_t i = 0; i < sample.member_count; ++i) {
      const TarMember& member = index.members[sample.first_member + i];
      PutVarint(member.extension, out);
      PutVarint(member.header_offset, out);
      PutVarint(member.offset - member.header_offset, out);
      PutVarint(member.size, out);
    }
  }
  Xxh64 hash;
  hash.Update(out->data(), out->size());
  uint64_t digest = hash.Digest();
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(digest >> (8 * i)));
}

Status DecodeTarIndex(std::string_view data, const std::string& index_path, TarIndex* index) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption(index_path + ": not a valid tar index (" + what +
                              "); delete it and it is built again");
  };
  if (data.size() < kIndexMagicSize + 8 || data.substr(0, kIndexMagicSize) != kIndexMagic) {
    return bad("bad magic");
  }
  Xxh64 hash;
  hash.Update(data.data(), data.size() - 8);
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) {
    stored |= static_cast<uint64_t>(static_cast<uint8_t>(data[data.size() - 8 + i])) << (8 * i);
  }
  if (hash.Digest() != stored) return bad("checksum mismatch");
  IndexReader reader(data.substr(kIndexMagicSize, data.size() - kIndexMagicSize - 8));
  *index = TarIndex();
  uint64_t mtime = 0, count = 0;
  if (!reader.Varint(&index->tar_size) || !reader.Varint(&mtime) || !reader.Varint(&count)) {
    return bad("truncated header");
  }
  index->tar_mtime_ns = static_cast<int64_t>(mtime);
  if (count > reader.remaining()) return bad("extension count");
  index->extensions.resize(count);
  for (std::string& extension : index->extensions) {
    if (!reader.String(&extension)) return bad("truncated extension");
  }
  if (!reader.Varint(&count) || count > reader.remaining() || count > UINT32_MAX) {
    return bad("sample count");
  }
  index->samples.resize(count);
  for (TarSample& sample : index->samples) {
    uint64_t members = 0;
    if (!reader.String(&sample.key) || !reader.Varint(&members) ||
        members > reader.remaining() / 4 || index->members.size() + members > UINT32_MAX) {
      return bad("truncated sample");
    }
    sample.first_member = static_cast<uint32_t>(index->members.size());
    sample.member_count = static_cast<uint32_t>(members);
    for (uint64_t i = 0; i < members; ++i) {
      TarMember member;
      uint64_t extension = 0, gap = 0;
      if (!reader.Varint(&extension) || !reader.Varint(&member.header_offset) ||
          !reader.Varint(&gap) || !reader.Varint(&member.size)) {
        return bad("truncated member");
      }
      if (extension >= index->extensions.size()) return bad("extension out of range");
      member.extension = static_cast<uint32_t>(extension);
      if (gap > index->tar_size || member.header_offset > index->tar_size - gap ||
          member.size > index->tar_size - member.header_offset - gap) {
        return bad("a member outside the tar");
      }
      member.offset = member.header_offset + gap;
      index->members.push_back(member);
    }
  }
  if (reader.remaining() != 0) return bad("trailing bytes");
  return Status::OK();
}

std::string TarIndexPathBeside(const std::string& tar_path) { return tar_path + ".gpufeed-index"; }

Status ExpandBracePattern(const std::string& pattern, std::vector<std::string>* paths) {
  paths->clear();
  size_t open = pattern.find('{');
  if (open == std::string::npos) {
    paths->push_back(pattern);
    return Status::OK();
  }
  size_t close = pattern.find('}', open);
  size_t dots = pattern.find("..", open);
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("\"" + pattern + "\": " + what +
                                   " (expected a range like shards-{000000..000099}.tar)");
  };
  if (close == std::string::npos || dots == std::string::npos || dots > close) {
    return bad("a brace without a \"{FIRST..LAST}\" range");
  }
  std::string first = pattern.substr(open + 1, dots - open - 1);
  std::string last = pattern.substr(dots + 2, close - dots - 2);
  auto numeric = [](const std::string& text) {
    return !text.empty() && text.size() <= 18 &&
           text.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!numeric(first) || !numeric(last)) return bad("the range bounds are not decimal numbers");
  uint64_t low = std::stoull(first), high = std::stoull(last);
  if (high < low) return bad("the range is reversed");
  if (high - low >= 10000000) return bad("more than 10^7 names");
  std::vector<std::string> tails;
  GPUFEED_RETURN_IF_ERROR(ExpandBracePattern(pattern.substr(close + 1), &tails));
  for (uint64_t value = low; value <= high; ++value) {
    std::string number = std::to_string(value);
    if (number.size() < first.size()) number.insert(0, first.size() - number.size(), '0');
    for (const std::string& tail : tails) {
      paths->push_back(pattern.substr(0, open) + number + tail);
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
