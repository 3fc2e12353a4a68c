// The format registry: every dataset format describes, once, how a path is
// recognised as its own and how it opens (FormatEntry, defined beside the
// format's reader); registry.cc holds the one list of them. Dataset::Open,
// FormatName and ParseFormat ask the registry and never switch on a format.
//
// Adding a format: define its FormatEntry in the format's own source file,
// declare its accessor below, and add it to the list in registry.cc (see
// docs/extending.md).
#ifndef GPUFEED_FORMAT_REGISTRY_H_
#define GPUFEED_FORMAT_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/store.h"
#include "util/file.h"

namespace gpufeed {

// What Dataset::Open hands a format's hooks. The references outlive the call.
struct OpenRequest {
  std::string path;  // absolute: a file, a directory, a prefix, a pattern
  const DatasetOptions& options;
  const std::shared_ptr<Store>& store;
};

// A directory opened with format=auto and no manifest, listed once for
// every format's claims_directory.
struct DirectoryListing {
  std::string directory;  // absolute
  std::vector<DirectoryEntry> entries;  // sorted by name, symlinks followed
};

// What `gpufeed verify` hands a format's verify hook: either the dataset's
// gpufeed.json (naming this format), or the dataset opened without one.
struct VerifyRequest {
  std::string path;  // absolute
  const DatasetOptions& options;
  const Manifest* manifest = nullptr;  // with manifest_path, or nullptr
  std::string manifest_path;
  const Dataset* dataset = nullptr;  // when there is no manifest
};

// One dataset format. A hook left nullptr means the format has no such way
// in. Hooks are plain functions: an entry is constant data.
struct FormatEntry {
  DatasetFormat format = DatasetFormat::kAuto;
  const char* name = "";
  // Before the path is stat'ed (it may name no file: a list or a brace
  // pattern of tars, a Megatron prefix): opens *dataset when the path is
  // this format's, else leaves it empty and returns OK. Called with the
  // format asked for, or under format=auto. A hook shared by several entries
  // (a family that tells its members apart itself: the token corpora) is
  // called once.
  Status (*open_before_stat)(const OpenRequest&, std::unique_ptr<Dataset>*) = nullptr;
  // A directory, this format asked for (and no manifest it reads).
  Status (*open_directory)(const OpenRequest&, std::unique_ptr<Dataset>*) = nullptr;
  // format=auto on a directory: is it this format's? Asked in registry
  // order; the first to claim opens it with open_directory. An error (a
  // shard leading outside the directory) ends the open.
  Status (*claims_directory)(const DirectoryListing&, const OpenRequest&, bool* claimed) = nullptr;
  // A regular file, this format asked for, or format=auto when
  // claims_file_name takes its name; `file_names` says which ("a .rec").
  Status (*open_file)(const OpenRequest&, std::unique_ptr<Dataset>*) = nullptr;
  bool (*claims_file_name)(const std::string& name) = nullptr;
  const char* file_names = nullptr;
  // A directory whose gpufeed.json (`manifest`, read from `manifest_path`)
  // names this format.
  Status (*open_manifest)(const std::string& manifest_path, const Manifest& manifest,
                          const OpenRequest&, std::unique_ptr<Dataset>*) = nullptr;
  // gpufeed verify: every record's framing, each shard against what the
  // manifest says of it (records, bytes, xxh64); each problem, naming the
  // file and the offset, appended to report->problems (counted in its
  // records_checked, shards_checked, checksums_checked).
  void (*verify)(const VerifyRequest&, VerifyReport* report) = nullptr;
  // When this format is asked for, a gpufeed.json in the directory is read
  // (false: the format has none, and looks past one).
  bool reads_manifest = true;
};

// Every registered format, in the order format=auto tries them.
const std::vector<const FormatEntry*>& RegisteredFormats();
// The entry of `format`; nullptr for kAuto (or a value no entry has).
const FormatEntry* FindFormat(DatasetFormat format);

// Each format's entry, defined beside its reader.
const FormatEntry& RecordIOFormat();     // recordio_format.cc
const FormatEntry& CaffeLmdbFormat();    // lmdb_format.cc
const FormatEntry& LmdbFormat();         // lmdb_format.cc
const FormatEntry& WebDatasetFormat();   // webdataset_format.cc
const FormatEntry& ImageFolderFormat();  // imagefolder_format.cc
const FormatEntry& MegatronFormat();     // token_format.cc
const FormatEntry& LlmcFormat();         // token_format.cc
const FormatEntry& TokensFormat();       // token_format.cc

// A directory holding an LMDB environment (its data.mdb).
bool IsLmdbDirectory(const std::string& directory);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_REGISTRY_H_
