// The format registry: every dataset format describes, once, how a path is
// recognised as its own, how it opens, verifies, is packed, what its
// gpufeed.json entries hold and which files a cache warm copies (FormatEntry,
// defined beside the format's reader); registry.cc holds the one list of
// them. Dataset::Open, FormatName/ParseFormat, Verify, Pack, ShardWriter,
// the manifest, `gpufeed cache warm` and the Python binding ask the registry
// and never switch on a format.
//
// Adding a format: define its FormatEntry in the format's own source file,
// and declare its accessor and add it to the list in registry.cc (see
// docs/extending.md); nothing else names it.
#ifndef GPUFEED_FORMAT_REGISTRY_H_
#define GPUFEED_FORMAT_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "format/manifest.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "gpufeed/writer.h"
#include "storage/cache_directory.h"
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

// What the verify hooks of formats read record by record share: the
// dataset the request names, else `path` opened as `format` (a failure to
// open becomes the report's problem and the result is null; *opened owns
// what was opened).
const Dataset* DatasetToVerify(const VerifyRequest& request, DatasetFormat format,
                               std::unique_ptr<Dataset>* opened, VerifyReport* report);
// Reads every record of `dataset`, counting them; the first 100 failures
// become the report's problems.
void ReadEveryRecord(const Dataset& dataset, VerifyReport* report);

// How Pack writes a format (FormatEntry::writer); `open` nullptr: the
// format is read only.
struct WriterEntry {
  ShardFormat shard_format = ShardFormat::kRecordIO;  // PackOptions::format
  // Creates the shard at `path` (AlreadyExists when it is there).
  Status (*open)(const std::string& path, std::unique_ptr<ShardWriter>* writer) = nullptr;
  // Names the files of the shard whose base name is `base` ("part-00000"),
  // relative to the destination: shard->file, and shard->index when the
  // shard has an index file whose size and xxh64 the manifest records too.
  void (*name_shard)(const std::string& base, ManifestShard* shard) = nullptr;
  // The file of the finished shard at `shard_path` whose size and xxh64
  // the manifest records: the shard itself, or a file inside it.
  std::string (*data_file)(const std::string& shard_path) = nullptr;
  // What a shard "part-NNNNN" leaves in the destination: "part-NNNNN"
  // followed by one of these ("" is the name alone). An overwrite or a
  // failed Pack removes such names, and nothing else.
  std::vector<std::string> output_suffixes;
};

// A source `gpufeed cache warm` copies (FormatEntry::warm_sources).
struct WarmSource {
  // Keyed as the store Dataset::Open makes looks it up (path, size, mtime,
  // or the manifest's size and xxh64). A bundle (members set) is filled
  // member by member.
  CacheSource source;
  bool counts_as_shard = true;  // false: a shard's index (copied, not counted)
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
  // gpufeed verify before the path is stat'ed (as open_before_stat): when
  // the path is this format's, checks it into *report and sets *taken;
  // else leaves both. Called with the format asked for, or under
  // format=auto; a hook shared by a family is called once.
  Status (*verify_before_stat)(const std::string& path, const DatasetOptions& options,
                               VerifyReport* report, bool* taken) = nullptr;
  // When this format is asked for, a gpufeed.json in the directory is read
  // (false: the format has none, and looks past one).
  bool reads_manifest = true;
  // gpufeed.json (manifest.h), for a format with open_manifest: its own
  // fields of a shard entry. parse_manifest_shard runs after the common
  // fields are read; a Corruption's message (starting with `where`) follows
  // "<path>: invalid manifest: ". write_manifest_shard adds them to `entry`.
  Status (*parse_manifest_shard)(const nlohmann::json& entry, const std::string& where,
                                 ManifestShard* shard) = nullptr;
  void (*write_manifest_shard)(const Manifest& manifest, const ManifestShard& shard,
                               nlohmann::json* entry) = nullptr;
  // True when `manifest` (of this format) gives the size and xxh64 of
  // every file it names: the dataset opens lazily and a node cache keys
  // its copies on them (ManifestIdentifiesEveryFile). nullptr: never.
  bool (*manifest_identifies_every_file)(const Manifest& manifest) = nullptr;
  // Samples are windows of a token stream (TokenCorpusOptions); `gpufeed
  // index` describes such a corpus in a gpufeed.json (WriteTokenManifest),
  // and verify counts its tokens.
  bool token_corpus = false;
  // gpufeed cache warm: what to copy of `dataset` (opened as Dataset::Open
  // does), in order; every source a file, or every source a bundle.
  // nullptr: the format cannot be warmed (NotSupported).
  Status (*warm_sources)(const Dataset& dataset, std::vector<WarmSource>* sources) = nullptr;
  // Pack and ShardWriter::Open; open nullptr when the format has no writer.
  WriterEntry writer;
};

// Every registered format, in the order format=auto tries them.
const std::vector<const FormatEntry*>& RegisteredFormats();
// The entry of `format`; nullptr for kAuto (or a value no entry has).
const FormatEntry* FindFormat(DatasetFormat format);
// The entry whose writer writes `format`; nullptr when none does.
const FormatEntry* FindWriter(ShardFormat format);
// A token corpus format (FormatEntry::token_corpus).
bool IsTokenFormat(DatasetFormat format);

// format=auto: NotSupported naming the format and what to do instead when
// the path is a dataset gpufeed recognises but does not read (FFCV,
// LitData, Parquet, Arrow, HuggingFace datasets, Streaming's text shards;
// unread_formats.cc), else OK. Dataset::Open asks before any format claims
// a directory, and for a file no format's name took.
Status RefuseUnreadDirectory(const DirectoryListing& listing);
Status RefuseUnreadFile(const std::string& path);

// warm_sources of a format whose store reads each shard's file as it is
// (shard.path), or `member` inside each shard's directory ("data.mdb"):
// keyed on their size and mtime, with the shard's xxh64 when known.
Status WarmEachShardFile(const Dataset& dataset, const char* member,
                         std::vector<WarmSource>* sources);

}  // namespace gpufeed

#endif  // GPUFEED_FORMAT_REGISTRY_H_
