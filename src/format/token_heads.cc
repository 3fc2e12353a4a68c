// gpufeed.heads: parsing, writing and the read-only mapping (token_heads.h).
#include "format/token_heads.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

constexpr char kMagic[8] = {'G', 'F', 'H', 'E', 'A', 'D', 'S', '1'};
constexpr uint32_t kVersion = 1;

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
void AppendU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }
void AppendU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }

Status Bad(const std::string& path, uint64_t offset, const std::string& what) {
  return Status::Corruption(path + " at byte offset " + std::to_string(offset) + ": " + what +
                            " (not a heads file `gpufeed index` wrote: run it again)");
}

// Checks one directory entry (at byte `offset` of the file) against the
// file's size and the layout.
Status CheckEntry(const TokenHeadsEntry& e, const TokenHeadsLayout& layout, size_t size,
                  size_t arrays_begin, const std::string& path, uint64_t offset) {
  const uint32_t tb = layout.token_bytes;
  if (e.data_offset > e.data_end || e.data_end > e.bytes || e.data_offset % tb != 0 ||
      (e.data_end - e.data_offset) % tb != 0) {
    return Bad(path, offset, "token data [" + std::to_string(e.data_offset) + ", " +
                                 std::to_string(e.data_end) + ") does not fit a file of " +
                                 std::to_string(e.bytes) + " bytes of " + std::to_string(tb) +
                                 "-byte tokens");
  }
  uint64_t first = 0, count = 0;
  TokenHeadsSpan(e.data_offset, e.data_end, layout.granule, tb, &first, &count);
  if (e.first != first || e.count != count) {
    return Bad(path, offset, "first head " + std::to_string(e.first) + " and count " +
                                 std::to_string(e.count) + ", expected " + std::to_string(first) +
                                 " and " + std::to_string(count) + " for its token data");
  }
  // count <= data_end / granule, so count * tb cannot overflow.
  if (e.at < arrays_begin || e.at > size || (size - e.at) / tb < e.count) {
    return Bad(path, offset, "its " + std::to_string(e.count) + " heads at byte " +
                                 std::to_string(e.at) + " lie outside the file's " +
                                 std::to_string(size) + " bytes");
  }
  return Status::OK();
}

}  // namespace

void TokenHeadsSpan(uint64_t data_offset, uint64_t data_end, uint32_t granule,
                    uint32_t token_bytes, uint64_t* first, uint64_t* count) {
  *first = data_offset + (granule - data_offset % granule) % granule;
  *count = data_end >= token_bytes && *first <= data_end - token_bytes
               ? (data_end - token_bytes - *first) / granule + 1
               : 0;
}

Status ParseTokenHeads(const char* data, size_t size, const std::string& path,
                       TokenHeadsLayout* layout) {
  if (size < kTokenHeadsHeaderBytes || std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    return Bad(path, 0, "no GFHEADS1 header");
  }
  if (LoadU32(data + 8) != kVersion) {
    return Bad(path, 8, "version " + std::to_string(LoadU32(data + 8)) + ", this build reads 1");
  }
  layout->granule = LoadU32(data + 12);
  layout->token_bytes = LoadU32(data + 16);
  const uint32_t tb = layout->token_bytes;
  if (tb == 0 || tb > 8 || (tb & (tb - 1)) != 0 || layout->granule < tb ||
      layout->granule > (1u << 20) || (layout->granule & (layout->granule - 1)) != 0) {
    return Bad(path, 12, "granule " + std::to_string(layout->granule) + " and token bytes " +
                             std::to_string(tb) + " (powers of two, tokens of 1-8 bytes)");
  }
  const uint64_t n = LoadU32(data + 20);
  if (n > (size - kTokenHeadsHeaderBytes) / kTokenHeadsEntryBytes) {
    return Bad(path, 20, std::to_string(n) + " entries do not fit in " + std::to_string(size) +
                             " bytes");
  }
  const size_t directory = static_cast<size_t>(n) * kTokenHeadsEntryBytes;
  Xxh64 digest;
  digest.Update(data + kTokenHeadsHeaderBytes, directory);
  if (digest.Digest() != LoadU64(data + 24)) {
    return Bad(path, 24, "the directory's xxh64 differs from its bytes");
  }
  layout->entries.assign(n, TokenHeadsEntry());
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t offset = kTokenHeadsHeaderBytes + i * kTokenHeadsEntryBytes;
    const char* p = data + offset;
    TokenHeadsEntry& e = layout->entries[i];
    e = TokenHeadsEntry{LoadU64(p),      LoadU64(p + 8),  LoadU64(p + 16), LoadU64(p + 24),
                        LoadU64(p + 32), LoadU64(p + 40), LoadU64(p + 48)};
    GPUFEED_RETURN_IF_ERROR(
        CheckEntry(e, *layout, size, kTokenHeadsHeaderBytes + directory, path, offset));
  }
  return Status::OK();
}

Status ScanTokenFile(const std::string& path, uint64_t data_offset, uint64_t data_end,
                     uint32_t token_bytes, uint64_t* xxh64, std::string* heads) {
  uint64_t first = 0, count = 0;
  TokenHeadsSpan(data_offset, data_end, kTokenHeadsGranule, token_bytes, &first, &count);
  uint64_t next = first, taken = 0;
  // Chunks start at multiples of 4 MiB, a multiple of the granule: no head
  // spans two of them.
  GPUFEED_RETURN_IF_ERROR(
      FileXxh64(path, xxh64, [&](uint64_t offset, const char* data, size_t size) {
        for (; taken < count && next + token_bytes <= offset + size; next += kTokenHeadsGranule) {
          heads->append(data + (next - offset), token_bytes);
          ++taken;
        }
      }));
  if (taken != count) {
    return Status::Corruption(path + " at byte offset " + std::to_string(next) +
                              ": the file ends early (its token data ends at " +
                              std::to_string(data_end) + ")");
  }
  return Status::OK();
}

// The header and directory of `layout` (its entries' `at` already set).
std::string SerializeDirectory(const TokenHeadsLayout& layout) {
  std::string directory;
  for (const TokenHeadsEntry& e : layout.entries) {
    for (uint64_t v : {e.bytes, e.xxh64, e.data_offset, e.data_end, e.first, e.count, e.at}) {
      AppendU64(&directory, v);
    }
  }
  std::string out(kMagic, sizeof(kMagic));
  AppendU32(&out, kVersion);
  AppendU32(&out, layout.granule);
  AppendU32(&out, layout.token_bytes);
  AppendU32(&out, static_cast<uint32_t>(layout.entries.size()));
  Xxh64 digest;
  digest.Update(directory.data(), directory.size());
  AppendU64(&out, digest.Digest());
  return out + directory;
}

std::string SerializeTokenHeads(TokenHeadsLayout* layout, const std::vector<std::string>& heads) {
  uint64_t at = kTokenHeadsHeaderBytes + layout->entries.size() * kTokenHeadsEntryBytes;
  for (size_t i = 0; i < layout->entries.size(); ++i) {
    layout->entries[i].at = at;
    at += heads[i].size();
  }
  std::string out = SerializeDirectory(*layout);
  for (const std::string& h : heads) out += h;
  return out;
}

TokenHeadsWriter::~TokenHeadsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
  }
}

Status TokenHeadsWriter::Open(const std::string& path, uint32_t token_bytes, size_t files) {
  path_ = path;
  temporary_ = path + ".tmp." + std::to_string(::getpid());
  layout_ = TokenHeadsLayout();
  layout_.token_bytes = token_bytes;
  files_ = files;
  end_ = kTokenHeadsHeaderBytes + files * kTokenHeadsEntryBytes;
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::FromErrno(errno, "cannot create " + temporary_);
  // The heads follow the header and directory, which Commit writes.
  if (::lseek(fd_, static_cast<off_t>(end_), SEEK_SET) < 0) {
    return Status::FromErrno(errno, "cannot seek in " + temporary_);
  }
  return Status::OK();
}

Status TokenHeadsWriter::Add(TokenHeadsEntry entry, const std::string& heads) {
  entry.at = end_;
  GPUFEED_RETURN_IF_ERROR(WriteFull(fd_, heads.data(), heads.size(), temporary_));
  end_ += heads.size();
  layout_.entries.push_back(entry);
  return Status::OK();
}

Status TokenHeadsWriter::Commit() {
  if (layout_.entries.size() != files_) {
    return Status::Internal(temporary_ + ": " + std::to_string(layout_.entries.size()) +
                            " files added of " + std::to_string(files_));
  }
  const std::string head = SerializeDirectory(layout_);
  if (::lseek(fd_, 0, SEEK_SET) < 0) return Status::FromErrno(errno, "cannot seek in " + temporary_);
  GPUFEED_RETURN_IF_ERROR(WriteFull(fd_, head.data(), head.size(), temporary_));
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "cannot fsync " + temporary_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    Status failed = Status::FromErrno(errno, "cannot rename " + temporary_ + " to " + path_);
    ::unlink(temporary_.c_str());
    return failed;
  }
  return SyncDirectory(Dirname(path_));
}

Status TokenHeads::Open(const std::string& path, std::shared_ptr<const TokenHeads>* heads) {
  if (!PathExists(path)) return Status::NotFound(path + ": no heads file");
  UniqueFd fd;
  uint64_t size = 0;
  int64_t mtime = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd, &size, &mtime));
  std::shared_ptr<TokenHeads> opened(new TokenHeads());
  opened->path_ = path;
  if (size > 0) {
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) {
      return Status::IOError(path + ": mmap failed: " + std::strerror(errno));
    }
    opened->base_ = static_cast<const char*>(base);
    opened->size_ = size;
    // Read ahead as a whole (0.4% of the corpus's bytes), not page by page
    // at the windows' random offsets; the page cache shares it between the
    // processes of a node.
    ::madvise(base, size, MADV_WILLNEED);
  }
  GPUFEED_RETURN_IF_ERROR(ParseTokenHeads(opened->base_, opened->size_, path, &opened->layout_));
  for (size_t i = 0; i < opened->layout_.entries.size(); ++i) {
    opened->by_xxh64_.emplace(opened->layout_.entries[i].xxh64, i);
  }
  *heads = std::move(opened);
  return Status::OK();
}

TokenHeads::~TokenHeads() {
  if (base_ != nullptr) ::munmap(const_cast<char*>(base_), size_);
}

const TokenHeadsEntry* TokenHeads::Find(uint64_t bytes, const std::string& xxh64,
                                        uint64_t data_offset, uint64_t data_end) const {
  if (xxh64.size() != 16 || xxh64.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return nullptr;
  }
  auto range = by_xxh64_.equal_range(std::stoull(xxh64, nullptr, 16));
  for (auto it = range.first; it != range.second; ++it) {
    const TokenHeadsEntry& e = layout_.entries[it->second];
    if (e.bytes == bytes && e.data_offset == data_offset && e.data_end == data_end) return &e;
  }
  return nullptr;
}

uint64_t TokenHeads::NextBoundary(const TokenHeadsEntry& entry, uint64_t offset) const {
  if (offset <= entry.first) return entry.first;
  const uint64_t g = layout_.granule;
  return entry.first + (offset - entry.first + g - 1) / g * g;
}

Status TokenHeads::Compare(const TokenHeadsEntry& entry, const std::string& file_path,
                           uint64_t offset, const char* data, size_t size) const {
  const uint32_t item = layout_.token_bytes;
  for (uint64_t b = NextBoundary(entry, offset); b + item <= offset + size; b += layout_.granule) {
    const char* head = At(entry, b);
    if (head == nullptr) break;  // past the entry's last head
    if (std::memcmp(head, data + (b - offset), item) != 0) {
      return Status::Corruption(file_path + " at byte offset " + std::to_string(b) +
                                ": the token there differs from " + path_ +
                                " (the file changed since `gpufeed index`: run it again)");
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
