// Tar member index: the byte ranges of the members of a POSIX tar (ustar,
// GNU and pax headers) grouped into WebDataset samples, built by walking the
// 512-byte headers once and kept in a small binary file beside the tar (or
// in a cache directory when the tar's directory is read-only), so that a
// sample is then one pread at a known offset (docs/formats.md, "WebDataset").
//
// Grouping follows the webdataset library: a member's key is its path up to
// the first dot of its base name, its extension the rest ("a/b/x.seg.png":
// key "a/b/x", extension "seg.png"); the members of one key must be
// contiguous in the tar. Directories, links, device entries and files whose
// base name has no dot are not samples and are passed over.
//
// Thread safety: free functions, no shared state.
#ifndef GPUFEED_FORMAT_TAR_INDEX_H_
#define GPUFEED_FORMAT_TAR_INDEX_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/status.h"

namespace gpufeed {

constexpr size_t kTarBlockSize = 512;

// One 512-byte header block, decoded.
struct TarHeader {
  enum class Kind {
    kFile,          // a regular file ('0', '\0', '7')
    kEndOfArchive,  // an all-zero block
    kLongName,      // GNU 'L': the data is the next member's path
    kPax,           // pax 'x': records for the next member (path, size)
    kSkipped,       // directory, link, device, 'g' global pax, GNU 'K', ...
  };
  Kind kind = Kind::kSkipped;
  std::string name;   // prefix + "/" + name for ustar, the name field otherwise
  uint64_t size = 0;  // bytes of data following the header
  char typeflag = '0';
};

// Decodes the header at byte `offset` of `tar_path` (named in errors).
// Corruption for a bad checksum (naming the stored and the computed sum),
// a size field that is neither octal nor base-256, or a non-tar block.
[[nodiscard]] Status ParseTarHeader(const char* block, const std::string& tar_path, uint64_t offset,
                                    TarHeader* header);

// Reads the pax records "LEN KEY=VALUE\n" of an extended header at `offset`;
// a "path" record goes to *path and a "size" record to *size (untouched when
// absent). Corruption for a malformed record.
[[nodiscard]] Status ParsePaxRecords(std::string_view text, const std::string& tar_path,
                                     uint64_t offset, std::string* path, uint64_t* size,
                                     bool* has_size);

// Splits a member path into WebDataset's key and extension; false when the
// base name has no dot (not part of a sample).
bool SplitSampleName(const std::string& path, std::string* key, std::string* extension);

struct TarMember {
  uint32_t extension = 0;  // into TarIndex::extensions
  uint64_t offset = 0;     // of the data (after the headers)
  uint64_t size = 0;
  uint64_t header_offset = 0;  // of its first header (long name, pax or ustar)
};

struct TarSample {
  std::string key;
  uint32_t first_member = 0;  // into TarIndex::members
  uint32_t member_count = 0;
};

struct TarIndex {
  uint64_t tar_size = 0;
  int64_t tar_mtime_ns = 0;
  std::vector<std::string> extensions;  // distinct extensions, first seen first
  std::vector<TarMember> members;
  std::vector<TarSample> samples;

  // The member of `sample` with extension `extension`, or nullptr.
  const TarMember* Find(const TarSample& sample, const std::string& extension) const;
};

// Reads [offset, offset + length) of the tar into `destination`; *done is
// less than `length` only at the end of the file.
using TarReader =
    std::function<Status(uint64_t offset, size_t length, char* destination, size_t* done)>;

// Walks the headers of a tar of `tar_size` bytes, reading through `read` in
// windows of `window` bytes (a member smaller than the window costs no
// extra read). Errors are Corruption naming the tar, the member and the
// byte offset: a header with a bad checksum, a tar that ends inside a
// header, a member running past the end, a key seen again after another
// key (samples not contiguous), an extension twice in one sample.
[[nodiscard]] Status ScanTar(const std::string& tar_path, uint64_t tar_size, const TarReader& read,
                             TarIndex* index, size_t window = 1 << 20);

// The index file: "GFTARIX1", then varint-coded fields, then the xxh64 of
// everything before it (docs/formats.md).
void EncodeTarIndex(const TarIndex& index, std::string* out);
// Corruption naming `index_path` for a file that is not a whole, valid
// index (bad magic, checksum, counts, or a member outside tar_size).
[[nodiscard]] Status DecodeTarIndex(std::string_view data, const std::string& index_path,
                                    TarIndex* index);

// "<tar>.gpufeed-index": the index's place beside the tar.
std::string TarIndexPathBeside(const std::string& tar_path);

// "shards-{000..009}.tar" -> shards-000.tar ... shards-009.tar (the width of
// the first bound is kept); a path without braces is returned as is.
// InvalidArgument for a malformed or reversed range, or more than 10^7.
[[nodiscard]] Status ExpandBracePattern(const std::string& pattern,
                                        std::vector<std::string>* paths);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_TAR_INDEX_H_
