#include "format/tar_index.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace gpufeed {

namespace {

// Bounds that keep a hostile tar from making the scanner allocate much: a
// GNU long name or a pax header larger than these is refused.
constexpr uint64_t kMaxLongName = 64 << 10;
constexpr uint64_t kMaxPaxHeader = 1 << 20;

uint64_t RoundUpToBlock(uint64_t size) {
  return (size + kTarBlockSize - 1) / kTarBlockSize * kTarBlockSize;
}

std::string Where(const std::string& tar_path, uint64_t offset) {
  return tar_path + " at byte offset " + std::to_string(offset);
}

// A NUL-terminated field of at most `width` bytes.
std::string Field(const char* block, size_t at, size_t width) {
  const char* begin = block + at;
  return std::string(begin, strnlen(begin, width));
}

// Octal (leading blanks, ended by NUL or blank) or GNU base-256 (first byte
// 0x80: the rest is a big-endian number).
bool ParseNumeric(const char* field, size_t width, uint64_t* value) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(field);
  *value = 0;
  if (bytes[0] == 0x80) {
    for (size_t i = 1; i < width; ++i) {
      if (*value >> 56 != 0) return false;
      *value = (*value << 8) | bytes[i];
    }
    return true;
  }
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  bool any = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (*value >> 60 != 0) return false;
    *value = *value * 8 + static_cast<uint64_t>(field[i] - '0');
    any = true;
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  return any;
}

}  // namespace

Status ParseTarHeader(const char* block, const std::string& tar_path, uint64_t offset,
                      TarHeader* header) {
  *header = TarHeader();
  if (std::all_of(block, block + kTarBlockSize, [](char c) { return c == 0; })) {
    header->kind = TarHeader::Kind::kEndOfArchive;
    return Status::OK();
  }
  uint64_t stored = 0;
  if (!ParseNumeric(block + 148, 8, &stored)) {
    return Status::Corruption(Where(tar_path, offset) +
                              ": not a tar header (the checksum field is not a number)");
  }
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) {
    unsigned char byte = (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(block[i]);
    unsigned_sum += byte;
    signed_sum += static_cast<signed char>(byte);
  }
  if (stored != unsigned_sum && static_cast<int64_t>(stored) != signed_sum) {
    return Status::Corruption(Where(tar_path, offset) + ": tar header checksum mismatch (stored " +
                              std::to_string(stored) + ", computed " +
                              std::to_string(unsigned_sum) + ")");
  }
  if (!ParseNumeric(block + 124, 12, &header->size)) {
    return Status::Corruption(Where(tar_path, offset) + ": tar header size field is not a number");
  }
  header->typeflag = block[156];
  header->name = Field(block, 0, 100);
  // POSIX ustar ("ustar\0") splits long paths into prefix/name; GNU
  // ("ustar  \0") keeps other fields there.
  if (std::memcmp(block + 257, "ustar\0", 6) == 0) {
    std::string prefix = Field(block, 345, 155);
    if (!prefix.empty()) header->name = prefix + "/" + header->name;
  }
  switch (header->typeflag) {
    case '0':
    case '\0':
    case '7':
      header->kind = TarHeader::Kind::kFile;
      break;
    case 'L':
      header->kind = TarHeader::Kind::kLongName;
      break;
    case 'x':
      header->kind = TarHeader::Kind::kPax;
      break;
    default:
      header->kind = TarHeader::Kind::kSkipped;
      break;
  }
  // Old tars mark directories by a trailing slash only.
  if (header->kind == TarHeader::Kind::kFile && !header->name.empty() &&
      header->name.back() == '/') {
    header->kind = TarHeader::Kind::kSkipped;
  }
  // Hard links, symlinks, devices, directories and FIFOs carry no data,
  // whatever their size field says.
  if (header->typeflag >= '1' && header->typeflag <= '6') header->size = 0;
  return Status::OK();
}

Status ParsePaxRecords(std::string_view text, const std::string& tar_path, uint64_t offset,
                       std::string* path, uint64_t* size, bool* has_size) {
  size_t at = 0;
  while (at < text.size()) {
    if (text[at] == '\0') break;  // padding some writers leave
    auto bad = [&](const std::string& what) {
      return Status::Corruption(Where(tar_path, offset) + ": pax header record at byte " +
                                std::to_string(at) + " " + what);
    };
    uint64_t length = 0;
    size_t digits = at;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9' &&
           length < text.size()) {
      length = length * 10 + static_cast<uint64_t>(text[digits] - '0');
      ++digits;
    }
    if (digits == at || digits >= text.size() || text[digits] != ' ') {
      return bad("does not start with \"LENGTH \"");
    }
    if (length > text.size() - at || length < digits - at + 3) return bad("has a bad length");
    std::string_view record = text.substr(digits + 1, at + length - digits - 1);
    if (record.back() != '\n') return bad("does not end with a newline");
    record.remove_suffix(1);
    size_t equals = record.find('=');
    if (equals == std::string_view::npos) return bad("has no \"=\"");
    std::string_view key = record.substr(0, equals);
    std::string_view value = record.substr(equals + 1);
    if (key == "path") {
      path->assign(value);
    } else if (key == "size") {
      uint64_t parsed = 0;
      if (value.empty() || value.size() > 19) return bad("has a bad size");
      for (char c : value) {
        if (c < '0' || c > '9') return bad("has a bad size");
        parsed = parsed * 10 + static_cast<uint64_t>(c - '0');
      }
      *size = parsed;
      *has_size = true;
    }
    at += length;
  }
  return Status::OK();
}

bool SplitSampleName(const std::string& path, std::string* key, std::string* extension) {
  size_t slash = path.rfind('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  key->assign(path, 0, dot);
  extension->assign(path, dot + 1, std::string::npos);
  return !extension->empty();
}

const TarMember* TarIndex::Find(const TarSample& sample, const std::string& extension) const {
  for (uint32_t i = 0; i < sample.member_count; ++i) {
    const TarMember& member = members[sample.first_member + i];
    if (extensions[member.extension] == extension) return &member;
  }
  return nullptr;
}

namespace {

// The bytes of the tar seen through one window, moved forward as needed.
class TarWindow {
 public:
  TarWindow(const TarReader& read, uint64_t tar_size, size_t window)
      : read_(read), tar_size_(tar_size), window_(std::max(window, kTarBlockSize)) {}

  // Points *data at [offset, offset + length), which lies inside the tar.
  Status Get(uint64_t offset, size_t length, const char** data) {
    if (offset < start_ || offset + length > start_ + buffer_.size()) {
      size_t want =
          static_cast<size_t>(std::min<uint64_t>(std::max(window_, length), tar_size_ - offset));
      buffer_.resize(want);
      size_t done = 0;
      GPUFEED_RETURN_IF_ERROR(read_(offset, want, &buffer_[0], &done));
      buffer_.resize(done);
      start_ = offset;
      if (done < length) {
        return Status::Corruption("the file ended at byte offset " + std::to_string(offset + done) +
                                  " while it was read (changed during the scan?)");
      }
    }
    *data = buffer_.data() + (offset - start_);
    return Status::OK();
  }

 private:
  const TarReader& read_;
  uint64_t tar_size_;
  size_t window_;
  uint64_t start_ = 0;
  std::string buffer_;
};

// What a GNU long-name or pax header says of the member that follows it.
struct PendingMetadata {
  std::string name;
  uint64_t size = 0;
  bool has_name = false;
  bool has_size = false;
};

// Reads the data of a GNU long-name or pax header (at `offset`, its data
// at `data_offset`) into *pending.
Status ReadMetadataMember(TarWindow* bytes, const TarHeader& header, const std::string& tar_path,
                          uint64_t offset, uint64_t data_offset, PendingMetadata* pending) {
  const bool long_name = header.kind == TarHeader::Kind::kLongName;
  uint64_t limit = long_name ? kMaxLongName : kMaxPaxHeader;
  if (header.size > limit) {
    return Status::Corruption(Where(tar_path, offset) + ": a " +
                              (long_name ? "GNU long name" : "pax header") + " of " +
                              std::to_string(header.size) + " bytes (at most " +
                              std::to_string(limit) + " accepted)");
  }
  const char* data = nullptr;
  GPUFEED_RETURN_IF_ERROR(bytes->Get(data_offset, static_cast<size_t>(header.size), &data));
  if (long_name) {
    pending->name.assign(data, strnlen(data, static_cast<size_t>(header.size)));
    pending->has_name = true;
    return Status::OK();
  }
  std::string path;
  uint64_t size = 0;
  bool has_size = false;
  GPUFEED_RETURN_IF_ERROR(ParsePaxRecords(std::string_view(data, header.size), tar_path, offset,
                                          &path, &size, &has_size));
  if (!path.empty()) {
    pending->name = path;
    pending->has_name = true;
  }
  if (has_size) {
    pending->size = size;
    pending->has_size = true;
  }
  return Status::OK();
}

// Adds a regular file's member (KEY.EXTENSION) to its sample in *index;
// the samples' keys must be contiguous and each extension once per sample.
class SampleIndexer {
 public:
  SampleIndexer(const std::string& tar_path, TarIndex* index)
      : tar_path_(tar_path), index_(index) {}

  Status Add(const std::string& name, uint64_t member_start, uint64_t data_offset,
             uint64_t size) {
    std::string key, extension;
    if (!SplitSampleName(name, &key, &extension)) return Status::OK();
    bool same_key = !index_->samples.empty() && index_->samples.back().key == key;
    if (!same_key) GPUFEED_RETURN_IF_ERROR(StartSample(name, key, member_start));
    TarSample& sample = index_->samples.back();
    if (index_->Find(sample, extension) != nullptr) {
      return Status::Corruption(Where(tar_path_, member_start) + ": member \"" + name +
                                "\": sample \"" + key + "\" already has a ." + extension +
                                " member");
    }
    auto [found, added] =
        extension_ids_.try_emplace(extension, static_cast<uint32_t>(index_->extensions.size()));
    if (added) index_->extensions.push_back(extension);
    TarMember member;
    member.extension = found->second;
    member.offset = data_offset;
    member.size = size;
    member.header_offset = member_start;
    if (index_->members.size() >= UINT32_MAX) {
      return Status::Corruption(tar_path_ + ": more than 2^32 members in one tar");
    }
    index_->members.push_back(member);
    sample.member_count += 1;
    return Status::OK();
  }

 private:
  Status StartSample(const std::string& name, const std::string& key, uint64_t member_start) {
    if (!index_->samples.empty()) finished_keys_.insert(index_->samples.back().key);
    if (finished_keys_.count(key) != 0) {
      return Status::Corruption(Where(tar_path_, member_start) + ": member \"" + name +
                                "\": key \"" + key +
                                "\" appeared earlier, before other keys "
                                "(WebDataset samples must be contiguous in the tar)");
    }
    if (index_->samples.size() >= UINT32_MAX) {
      return Status::Corruption(tar_path_ + ": more than 2^32 samples in one tar");
    }
    TarSample sample;
    sample.key = key;
    sample.first_member = static_cast<uint32_t>(index_->members.size());
    index_->samples.push_back(std::move(sample));
    return Status::OK();
  }

  const std::string& tar_path_;
  TarIndex* index_;
  std::unordered_map<std::string, uint32_t> extension_ids_;
  std::unordered_set<std::string> finished_keys_;
};

}  // namespace

Status ScanTar(const std::string& tar_path, uint64_t tar_size, const TarReader& read,
               TarIndex* index, size_t window) {
  index->extensions.clear();
  index->members.clear();
  index->samples.clear();
  index->tar_size = tar_size;
  TarWindow bytes(read, tar_size, window);
  SampleIndexer samples(tar_path, index);
  PendingMetadata pending;  // from GNU long-name and pax headers
  uint64_t member_start = 0;  // first header of the member being read
  bool in_member = false;
  uint64_t offset = 0;
  while (offset < tar_size) {
    if (tar_size - offset < kTarBlockSize) {
      return Status::Corruption(Where(tar_path, offset) + ": the tar ends inside a header (" +
                                std::to_string(tar_size - offset) + " of 512 bytes; truncated?)");
    }
    const char* block = nullptr;
    GPUFEED_RETURN_IF_ERROR(bytes.Get(offset, kTarBlockSize, &block));
    TarHeader header;
    GPUFEED_RETURN_IF_ERROR(ParseTarHeader(block, tar_path, offset, &header));
    if (header.kind == TarHeader::Kind::kEndOfArchive) {
      if (in_member) {
        return Status::Corruption(Where(tar_path, offset) +
                                  ": the tar ends after a long-name or pax header with no member");
      }
      break;  // what follows the end marker is padding
    }
    if (!in_member) member_start = offset;
    in_member = true;
    if (pending.has_size && header.kind == TarHeader::Kind::kFile) header.size = pending.size;
    uint64_t data_offset = offset + kTarBlockSize;
    std::string shown_name = pending.has_name ? pending.name : header.name;
    if (header.size > tar_size - data_offset) {
      return Status::Corruption(Where(tar_path, offset) + ": member \"" + shown_name + "\" of " +
                                std::to_string(header.size) +
                                " bytes runs past the end of the "
                                "tar (" +
                                std::to_string(tar_size) + " bytes; truncated?)");
    }
    uint64_t next = data_offset + RoundUpToBlock(header.size);
    if (header.kind == TarHeader::Kind::kLongName || header.kind == TarHeader::Kind::kPax) {
      GPUFEED_RETURN_IF_ERROR(
          ReadMetadataMember(&bytes, header, tar_path, offset, data_offset, &pending));
      offset = next;
      continue;
    }
    in_member = false;
    pending.has_name = pending.has_size = false;
    offset = next;
    if (header.kind != TarHeader::Kind::kFile) continue;
    GPUFEED_RETURN_IF_ERROR(samples.Add(shown_name, member_start, data_offset, header.size));
  }
  if (in_member) {
    return Status::Corruption(Where(tar_path, member_start) +
                              ": the tar ends after a long-name or pax header with no member");
  }
  return Status::OK();
}

}  // namespace gpufeed
