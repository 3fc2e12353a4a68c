// gpufeed.json: the manifest written by Pack beside the shards.
//
//   {
//     "format": "recordio" | "lmdb" | ...   (a registered format with open_manifest),
//     "format_version": 1,
//     "created_by": "gpufeed 0.1.0",
//     "records": 2000,
//     "label_kind": "class_index" | "float",
//     "classes": ["n01440764", ...],              (may be empty)
//     "shards": [
//       {"file": "part-00000.rec", "index": "part-00000.idx",   (lmdb: "file": "part-00000")
//        "records": 1000, "bytes": 123456789, "xxh64": "0123456789abcdef",
//        "index_bytes": 14000, "index_xxh64": "fedcba9876543210"}, ...   (RecordIO, optional)
//     ]
//   }
//
// "index_bytes" and "index_xxh64" identify the .idx as "bytes" and "xxh64"
// identify the .rec. Written by Pack since they were added; a manifest that
// has them (and "bytes" and "xxh64") for every shard lets Dataset::Open open
// nothing until a shard is first read, and a node cache identify its copies
// without a stat of the source (ManifestIdentifiesEveryFile). Manifests
// without them are read as before: every shard is opened at Dataset::Open.
//
// A format's own shard fields are read and written by its registry entry
// (FormatEntry::parse_manifest_shard, write_manifest_shard). Token corpora
// (format "megatron", "llmc" or "tokens"; written by WriteTokenManifest,
// `gpufeed index` on a corpus) use the same file: a shard is one token
// file, "records" counts its tokens, and each shard adds
//   "tokens": 1000, "data_offset": 1024, "token_dtype": "uint16",
//   "documents": 10, "sequences": 10      (Megatron, with "index", "index_bytes",
//                                          "index_xxh64" for the .idx)
// A token manifest that identifies every file (ManifestIdentifiesEveryFile)
// lets OpenTokenCorpus open, stat and read nothing of the token files until
// a window is read (token_manifest.cc).
//
// Shard file names are relative to the manifest's directory; Dataset::Open
// refuses names that lead outside it unless allow_external_paths.
#ifndef GPUFEED_FORMAT_MANIFEST_H_
#define GPUFEED_FORMAT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gpufeed/dataset.h"
#include "gpufeed/status.h"

namespace gpufeed {

constexpr const char* kManifestName = "gpufeed.json";
constexpr int kManifestFormatVersion = 1;
// A manifest is ~150 bytes per shard: 64 MiB is hundreds of thousands of
// shards, and a hostile multi-GB "gpufeed.json" is refused unread.
constexpr uint64_t kMaxManifestBytes = 64ull << 20;

struct ManifestShard {
  std::string file;   // relative: "part-00000.rec" or "part-00000" (LMDB directory)
  std::string index;  // relative .idx for RecordIO; empty for LMDB
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::string xxh64;  // 16 hex digits of the .rec file or data.mdb
  // RecordIO: the .idx file's size and checksum (0 and empty in manifests
  // written before they were recorded).
  uint64_t index_bytes = 0;
  std::string index_xxh64;
  // Token corpora (records = tokens): the bytes before the first token, the
  // token dtype, and for a Megatron pair its .idx's counts.
  uint64_t data_offset = 0;
  TokenDtype token_dtype = TokenDtype::kAuto;
  uint64_t documents = 0;
  uint64_t sequences = 0;
};

struct Manifest {
  DatasetFormat format = DatasetFormat::kRecordIO;
  int format_version = kManifestFormatVersion;
  uint64_t records = 0;
  bool integer_labels = false;
  std::vector<std::string> classes;
  std::vector<ManifestShard> shards;
};

// True for a RecordIO manifest giving the size and checksum of every .rec
// and .idx, or a token manifest giving the size, checksum and token dtype of
// every file (and the .idx's of a Megatron pair): its dataset is opened
// lazily (recordio_dataset.cc, token_manifest.cc), and a node cache keys its
// copies on those sizes and checksums.
// The format's FormatEntry::manifest_identifies_every_file says which.
bool ManifestIdentifiesEveryFile(const Manifest& manifest);

// Parses and validates (counts add up, names are non-empty, checksums are
// hex). Corruption naming the file on any problem. Where the names lead is
// checked by Dataset::Open (ResolveInsideDirectory in datasets.h).
// ReadManifest refuses a file over kMaxManifestBytes before reading it.
Status ReadManifest(const std::string& path, Manifest* manifest);
Status ParseManifest(const std::string& text, const std::string& path, Manifest* manifest);
std::string SerializeManifest(const Manifest& manifest);
Status WriteManifest(const std::string& path, const Manifest& manifest);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_MANIFEST_H_
