// Private factories behind Dataset::Open, one per format, and the helpers
// the formats share with Pack and Verify.
#ifndef GPUFEED_FORMAT_DATASETS_H_
#define GPUFEED_FORMAT_DATASETS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/dataset_base.h"
#include "format/manifest.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "gpufeed/writer.h"
#include "storage/store.h"

namespace gpufeed {

// The shard holding sample `index`, given each shard's first sample id in
// ascending order (first_records[0] == 0). REQUIRES: index < the total.
inline size_t ShardContaining(const std::vector<uint64_t>& first_records, uint64_t index) {
  return static_cast<size_t>(std::upper_bound(first_records.begin(), first_records.end(), index) -
                             first_records.begin() - 1);
}

// Where a located record lies: [offset, offset + length) of `path`, read
// through `view`'s descriptor (leased while the location lives).
inline void SetLocation(const std::string& path, uint64_t offset, uint64_t length,
                        FileView&& view, RecordLocation* location) {
  location->path = path;
  location->offset = offset;
  location->length = length;
  location->whole_file = false;
  location->fd = view.fd;
  location->local = view.local;
  location->hold = std::move(view.hold);
}

// Locate's usual end: a view of that range of `file`, set into *location;
// false when the store cannot give one (the read then reports why).
inline bool LocateRange(const StoreFile& file, const std::string& path, uint64_t offset,
                        uint64_t length, RecordLocation* location) {
  FileView view;
  if (!file.View(offset, length, &view).ok()) return false;
  SetLocation(path, offset, length, std::move(view), location);
  return true;
}

}  // namespace gpufeed

namespace gpufeed {

struct RecordIOShardSpec {
  std::string rec_path;
  std::string idx_path;          // empty: look beside rec_path, else scan
  bool idx_required = false;     // from a manifest: a missing .idx is an error
  int64_t expected_records = -1;  // from a manifest: the count must match
  std::string xxh64;
  // From a manifest: the .rec's size must match (0: not recorded), and the
  // manifest's path for the errors. Checked on the store's own open, so a
  // shard costs one open + fstat of the .rec and one of the .idx.
  uint64_t expected_bytes = 0;
  std::string manifest_path;
  // From a manifest that identifies the .idx too (ManifestIdentifiesEveryFile):
  // the shard is opened lazily (Store::OpenLazily), nothing is opened or
  // stat'ed until its first read, and the .idx is read then (its errors
  // then, naming it).
  bool lazy = false;
  uint64_t index_bytes = 0;
  std::string index_xxh64;
};

// The shards `manifest` (a RecordIO manifest read from `manifest_path` in
// `directory`) lists, their names resolved (ResolveInsideDirectory), lazy
// when the manifest identifies every file. Shared by Dataset::Open and
// `gpufeed cache warm`, whose copies must have the keys a loader looks up.
Status RecordIOSpecsFromManifest(const std::string& directory, const std::string& manifest_path,
                                 const Manifest& manifest, bool allow_external_paths,
                                 std::vector<RecordIOShardSpec>* specs);

inline RecordIOShardSpec RecordIOShardAt(std::string rec_path) {
  RecordIOShardSpec spec;
  spec.rec_path = std::move(rec_path);
  return spec;
}

// Resolves `name` (a shard or index named by a manifest, a list file's
// path, a file found in a shard directory) against `directory`, the
// dataset's (or list file's) directory, into *path (absolute, lexically
// normal). Unless `allow_external_paths`, refuses with PermissionDenied an
// absolute name, a ".." segment, or a name that resolves through symlinks
// to a place outside realpath(directory); `named_by` ("gpufeed.json shard
// 3", "list.txt line 7") starts the message. A name that does not exist is
// not an error here: the caller reports NotFound with its own context.
Status ResolveInsideDirectory(const std::string& directory, const std::string& name,
                              bool allow_external_paths, const std::string& named_by,
                              std::string* path);

Status OpenRecordIODataset(const std::string& path, const std::vector<RecordIOShardSpec>& shards,
                           const Manifest* manifest, const std::shared_ptr<Store>& store,
                           std::unique_ptr<Dataset>* dataset);
Status OpenLmdbDataset(const std::string& path, const std::vector<std::string>& environments,
                       const Manifest* manifest, const std::shared_ptr<Store>& store,
                       std::unique_ptr<Dataset>* dataset);
Status OpenCaffeLmdbDataset(const std::string& path, const std::shared_ptr<Store>& store,
                            std::unique_ptr<Dataset>* dataset);
Status OpenImageFolderDataset(const std::string& path, const std::shared_ptr<Store>& store,
                              std::unique_ptr<Dataset>* dataset);
// WebDataset tar shards (webdataset_dataset.cc): `tars` absolute, in order;
// `manifest` (or nullptr) gives the class names and each tar's sample count.
Status OpenWebDatasetDataset(const std::string& path, const std::vector<std::string>& tars,
                             const DatasetOptions& options, const std::shared_ptr<Store>& store,
                             std::unique_ptr<Dataset>* dataset,
                             const Manifest* manifest = nullptr);
// The tars `path` names for format webdataset (webdataset_sources.cc): a
// .tar, a directory of them, a brace pattern, a list file, or options' tars.
Status ResolveWebDatasetTars(const std::string& path, const DatasetOptions& options,
                             std::vector<std::string>* tars);
// The tars a gpufeed.json of format webdataset lists (kept inside `directory`).
Status OpenWebDatasetFromManifest(const std::string& directory, const Manifest& manifest,
                                  const DatasetOptions& options,
                                  const std::shared_ptr<Store>& store,
                                  std::unique_ptr<Dataset>* dataset);
// The ShardWriters of the formats that have one (FormatEntry::writer):
// RecordIO's .rec (recordio_writer.cc), an LMDB environment directory
// (lmdb_writer.cc), a WebDataset .tar (tar_writer.cc). AlreadyExists when
// `path` is there.
Status NewRecordIOShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer);
Status NewLmdbShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer);
Status NewTarShardWriter(const std::string& path, std::unique_ptr<ShardWriter>* writer);
// A name auto-detection takes for a WebDataset shard: .tar, or a
// compressed tar (refused with a message when opened).
bool IsWebDatasetShardName(const std::string& name);
// NotSupported, saying to decompress, for a .tar.gz (.tgz, .tar.zst, ...).
Status CheckNotCompressedTar(const std::string& path);
// Where a tar's index goes when its directory is not writable, and its name there.
std::string TarIndexFallbackDirectory(const DatasetOptions& options);
std::string TarIndexPathInDirectory(const std::string& tar_path, const std::string& directory);

// Verify's checksum check: `file`'s xxh64 against `expected` (16 hex digits;
// empty: nothing recorded, nothing checked); a mismatch or a read error is
// a problem naming the file.
void CheckChecksum(const std::string& file, const std::string& expected, VerifyReport* report);

// Calls `visit(offset, payload)` for each record of a .rec file in order;
// stops at the first framing error or at the first failed visit.
Status ScanRecordIO(int fd, const std::string& path, uint64_t file_size,
                    const std::function<Status(uint64_t, const std::string&)>& visit);

// Parses a .idx file: "key<TAB>offset" per line (blank lines skipped).
// Corruption naming the file and line for a malformed line, an offset past
// the end of the .rec (`rec_size`) or one off the 4-byte record grid.
Status ReadRecordIOIndex(const std::string& idx_path, uint64_t rec_size,
                         std::vector<uint64_t>* offsets, std::vector<std::string>* keys);
// The same from the index's text (`idx_path` only names it in errors); the
// fuzz target's entry point. Also refuses more entries than the .rec could
// hold (8 bytes of framing each), so a hostile index cannot make the offset
// table larger than the data it points into.
Status ParseRecordIOIndex(const std::string& text, const std::string& idx_path, uint64_t rec_size,
                          std::vector<uint64_t>* offsets, std::vector<std::string>* keys);

// ImageFolder enumeration, as torchvision.datasets.ImageFolder: classes are
// the sorted subdirectory names; files are found recursively (symlinks
// followed), sorted by directory then name, filtered by image extension.
struct ImageFolderEntry {
  std::string relative_path;
  int64_t class_index = 0;
};
Status ScanImageFolder(const std::string& root, std::vector<std::string>* classes,
                       std::vector<ImageFolderEntry>* entries);
bool HasImageExtension(const std::string& name);
// The bundles an ImageFolder dataset reads its files in (storage/store.h):
// kBundleFiles consecutive entries each, named "bundle-NNNNNN", members as
// absolute paths under `root`. CacheWarm copies the same bundles.
struct ImageFolderBundle {
  std::string name;
  std::vector<std::string> members;
};
std::vector<ImageFolderBundle> ImageFolderBundles(const std::string& root,
                                                  const std::vector<ImageFolderEntry>& entries);

// Zero-padded decimal LMDB key of a gpufeed sample index.
constexpr int kLmdbKeyWidth = 10;
std::string LmdbKeyFor(uint64_t index);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_DATASETS_H_
