// The heads of a token corpus: the token at every 512-byte boundary of each
// file's token data, written by `gpufeed index` beside gpufeed.json
// (gpufeed.heads). Under global shuffle a window of seq_len + 1 tokens whose
// last token starts at such a boundary is read without it and takes it from
// the heads: seq_len 2048 of uint16 tokens reads 4,096 bytes per window
// instead of the 4,608 an O_DIRECT read of 4,098 bytes needs.
//
// Layout (little-endian; docs/formats.md):
//   0   "GFHEADS1"
//   8   u32 version (1), u32 granule (bytes, a power of two), u32 token bytes,
//       u32 file count N
//   24  u64 xxh64 of the N directory entries that follow
//   32  N x 7 u64: the token file's size, its xxh64, data_offset, data_end
//       (byte offsets in the token file: the token data), first (the first
//       head's byte offset: data_offset rounded up to the granule), count
//       (heads: one per granule boundary b with first <= b and
//       b + token bytes <= data_end), at (where its heads lie in this file)
//   then the heads, `token bytes` each.
// A file's entry is found by its size and xxh64, the identity the manifest
// gives it: heads written for other contents are never used.
//
// Thread safety: a TokenHeads is immutable after Open.
#ifndef GPUFEED_FORMAT_TOKEN_HEADS_H_
#define GPUFEED_FORMAT_TOKEN_HEADS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

constexpr char kTokenHeadsName[] = "gpufeed.heads";
constexpr uint32_t kTokenHeadsGranule = 512;
constexpr size_t kTokenHeadsHeaderBytes = 32;
constexpr size_t kTokenHeadsEntryBytes = 7 * sizeof(uint64_t);

// One token file's heads.
struct TokenHeadsEntry {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
  uint64_t data_offset = 0;
  uint64_t data_end = 0;
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t at = 0;
};

struct TokenHeadsLayout {
  uint32_t granule = kTokenHeadsGranule;
  uint32_t token_bytes = 0;
  std::vector<TokenHeadsEntry> entries;
};

// The first head's offset and the count of heads for token data
// [data_offset, data_end) (both multiples of token_bytes).
void TokenHeadsSpan(uint64_t data_offset, uint64_t data_end, uint32_t granule,
                    uint32_t token_bytes, uint64_t* first, uint64_t* count);

// Parses and checks the header and directory of a heads file of `size`
// bytes (`path` names it in errors): every entry's heads must lie inside
// the file and its counts agree with its data range. The fuzz target's
// entry point. Corruption naming the file and the byte offset otherwise.
Status ParseTokenHeads(const char* data, size_t size, const std::string& path,
                       TokenHeadsLayout* layout);

// Reads a token file once: its xxh64 (all its bytes, as the manifest's) and
// its heads (appended to *heads).
Status ScanTokenFile(const std::string& path, uint64_t data_offset, uint64_t data_end,
                     uint32_t token_bytes, uint64_t* xxh64, std::string* heads);

// The heads file's bytes for `layout` (its entries' `at` are filled in) and
// each entry's heads in the same order.
std::string SerializeTokenHeads(TokenHeadsLayout* layout, const std::vector<std::string>& heads);

// Writes a heads file one token file at a time (memory: one file's heads):
// to a temporary file beside `path`, renamed over it by Commit (readers
// see the old file or the new one). Without Commit the temporary is removed.
class TokenHeadsWriter {
 public:
  TokenHeadsWriter() = default;
  ~TokenHeadsWriter();
  TokenHeadsWriter(const TokenHeadsWriter&) = delete;
  TokenHeadsWriter& operator=(const TokenHeadsWriter&) = delete;

  // For `files` token files of `token_bytes`-byte tokens.
  Status Open(const std::string& path, uint32_t token_bytes, size_t files);
  // The next file's entry (its `at` is set here) and heads.
  Status Add(TokenHeadsEntry entry, const std::string& heads);
  // The header and directory, fsync, rename, and the directory's fsync.
  // REQUIRES: Add called once per file.
  Status Commit();

 private:
  std::string path_, temporary_;
  int fd_ = -1;
  TokenHeadsLayout layout_;
  size_t files_ = 0;
  uint64_t end_ = 0;
};

// A heads file mapped read-only. It is replaced only by a rename
// (`gpufeed index` writes it atomically), so the mapping stays valid.
class TokenHeads {
 public:
  // NotFound when `path` does not exist; Corruption when it is not a valid
  // heads file.
  static Status Open(const std::string& path, std::shared_ptr<const TokenHeads>* heads);
  ~TokenHeads();
  TokenHeads(const TokenHeads&) = delete;
  TokenHeads& operator=(const TokenHeads&) = delete;

  const std::string& path() const { return path_; }
  uint32_t token_bytes() const { return layout_.token_bytes; }
  uint32_t granule() const { return layout_.granule; }
  // The entry of the token file with this size, xxh64 (16 hex digits, as
  // the manifest gives it) and token data range, or null.
  const TokenHeadsEntry* Find(uint64_t bytes, const std::string& xxh64, uint64_t data_offset,
                              uint64_t data_end) const;
  // The token that starts at byte `offset` of the entry's file, or null
  // when no head is kept there.
  const char* At(const TokenHeadsEntry& entry, uint64_t offset) const {
    if (offset < entry.first || (offset - entry.first) % layout_.granule != 0) return nullptr;
    const uint64_t k = (offset - entry.first) / layout_.granule;
    return k < entry.count ? base_ + entry.at + k * layout_.token_bytes : nullptr;
  }
  // OK when every head of `entry` inside [offset, offset + size) equals the
  // token at its place in `data` (those bytes of `file_path`); otherwise
  // Corruption naming the file, the first differing head's byte offset and
  // this heads file.
  Status Compare(const TokenHeadsEntry& entry, const std::string& file_path, uint64_t offset,
                 const char* data, size_t size) const;

 private:
  // The first offset >= `offset` at which a head is kept.
  uint64_t NextBoundary(const TokenHeadsEntry& entry, uint64_t offset) const;

  TokenHeads() = default;
  std::string path_;
  const char* base_ = nullptr;
  size_t size_ = 0;
  TokenHeadsLayout layout_;
  std::unordered_multimap<uint64_t, size_t> by_xxh64_;  // entry xxh64 -> index
};

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TOKEN_HEADS_H_
