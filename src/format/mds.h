// MosaicML Streaming MDS datasets (format "mds"): a directory holding
// index.json (version 2) and its shards, read as they are (docs/formats.md).
// The parsers here take untrusted bytes: every error names the file, the
// byte offset and the sample.
#ifndef GPUFEED_FORMAT_MDS_H_
#define GPUFEED_FORMAT_MDS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"

namespace gpufeed {

constexpr DatasetFormat kMdsFormat = DatasetFormat{24};

// One column of an MDS shard: its name, its encoding as index.json gives
// it ("jpeg:90", "ndarray:uint8:3,32,32"), the encoding's name before the
// first ':' ("jpeg"), and its fixed size in bytes (-1: variable, a u32 size
// before the sample's data).
struct MdsColumn {
  std::string name;
  std::string encoding;
  std::string kind;
  int64_t size = -1;
};

// A file of a shard as index.json describes it: its base name, size and
// the hashes recorded for it (algorithm name -> hex digest).
struct MdsFileInfo {
  std::string basename;
  uint64_t bytes = 0;
  std::map<std::string, std::string> hashes;
};

struct MdsShardInfo {
  std::vector<MdsColumn> columns;
  uint64_t samples = 0;
  std::string compression;  // "" or "zstd:N"
  MdsFileInfo raw;          // the uncompressed shard
  bool zipped = false;      // zip_data given: the file on disk is `zip`
  MdsFileInfo zip;
};

// The encodings Streaming writes: true when `kind` is one of them.
bool IsMdsEncoding(const std::string& kind);
// jpeg, png (encoded images) and pil (raw pixels).
bool IsMdsImageEncoding(const std::string& kind);
// The integer encodings a label may have: int, int8..uint64, str_int.
bool IsMdsIntegerEncoding(const std::string& kind);

// Parses index.json's text (`path` for messages): version 2, every shard
// of format "mds", every column's encoding known and its size consistent
// with the encoding; Corruption or NotSupported naming the shard otherwise.
Status ParseMdsIndex(std::string_view text, const std::string& path,
                     std::vector<MdsShardInfo>* shards);

// Checks a shard's header: `header` holds its first 4 * (samples + 2)
// bytes (the sample count, then samples + 1 offsets); the count must be
// `samples`, the offsets rise from the table's end to `file_size`.
// Fills offsets (samples + 1 of them).
Status ParseMdsOffsets(std::string_view header, uint64_t samples, uint64_t file_size,
                       const std::string& path, std::vector<uint32_t>* offsets);

// Splits one sample's bytes into its columns: the u32 sizes of the
// variable columns, then every column's bytes in order, ending exactly at
// the sample's end. `where` names the sample in errors ("<file>: sample N
// at byte offset X").
Status SplitMdsSample(std::string_view sample, const std::vector<MdsColumn>& columns,
                      const std::string& where, std::vector<std::string_view>* values);

// An integer column's value as a label (IsMdsIntegerEncoding kinds);
// Corruption naming `where` and the column when it is malformed or beyond
// +-2^24 (a float label holds it exactly).
Status MdsIntegerLabel(const MdsColumn& column, std::string_view value, const std::string& where,
                       float* label);

// A pil column's value (u32 width, u32 height, u32 mode length, mode,
// PIL's raw bytes) as (height, width, 3) RGB pixels: modes "RGB" and "L"
// (gray replicated); NotSupported naming the column for other modes.
Status MdsPilToRgb(const MdsColumn& column, std::string_view value, const std::string& where,
                   std::string* pixels, int64_t* height, int64_t* width);

// The hex digest of `algorithm` over `path`'s bytes, for the algorithms
// Debian's libxxhash computes: xxh32, xxh64, xxh3_64, xxh128 (xxh3_128).
// NotSupported for others (sha1, md5, sha256, blake2...: OpenSSL's).
Status MdsFileHash(const std::string& path, const std::string& algorithm, std::string* hex);
bool IsMdsCheckedHash(const std::string& algorithm);

// Decompresses the zstd shard `zip_path` into `raw_path` (written
// atomically); Corruption naming the file when it is not a zstd frame or
// its size is not `raw_bytes`; NotSupported when built without libzstd.
// Whether this build reads zstd shards (libzstd was found).
bool MdsZstdAvailable();
Status DecompressMdsShard(const std::string& zip_path, const std::string& raw_path,
                          uint64_t raw_bytes);

Status OpenMdsDataset(const std::string& directory, const DatasetOptions& options,
                      const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_MDS_H_
