// Dataset::Open: format detection and dispatch to the format's factory.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <cstring>

#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "storage/store.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

Dataset::Dataset(DatasetFormat format, std::string path)
    : format_(format), path_(std::move(path)) {}

Dataset::~Dataset() = default;

Status Dataset::ReadForDecode(uint64_t index, Record* record) const { return Read(index, record); }

bool Dataset::Locate(uint64_t, RecordLocation*) const { return false; }

bool Dataset::CanLocate() const {
  RecordLocation probe;
  return size() > 0 && Locate(0, &probe);
}

void Dataset::CountLocatedRead(const RecordLocation&, uint64_t) const {}

void Dataset::ExpectReads(const std::vector<uint64_t>&) const {}

StorageStats Dataset::storage_stats() const { return StorageStats(); }

std::vector<uint64_t> Dataset::BlockSizes() const {
  std::vector<uint64_t> sizes;
  for (const ShardInfo& shard : shards_) sizes.push_back(shard.records);
  if (sizes.empty()) sizes.push_back(size());
  return sizes;
}

Status Dataset::ParseLocated(uint64_t index, const RecordLocation&, const char*, size_t,
                             Record* record) const {
  return Read(index, record);
}

const char* FormatName(DatasetFormat format) {
  switch (format) {
    case DatasetFormat::kAuto: return "auto";
    case DatasetFormat::kRecordIO: return "recordio";
    case DatasetFormat::kLmdb: return "lmdb";
    case DatasetFormat::kCaffeLmdb: return "caffe_lmdb";
    case DatasetFormat::kImageFolder: return "imagefolder";
    case DatasetFormat::kMegatron: return "megatron";
    case DatasetFormat::kLlmc: return "llmc";
    case DatasetFormat::kTokens: return "tokens";
    case DatasetFormat::kWebDataset: return "webdataset";
  }
  return "unknown";
}

Status ParseFormat(const std::string& name, DatasetFormat* format) {
  for (DatasetFormat candidate : {DatasetFormat::kAuto, DatasetFormat::kRecordIO,
                                  DatasetFormat::kLmdb, DatasetFormat::kCaffeLmdb,
                                  DatasetFormat::kImageFolder, DatasetFormat::kWebDataset,
                                  DatasetFormat::kMegatron, DatasetFormat::kLlmc,
                                  DatasetFormat::kTokens}) {
    if (name == FormatName(candidate)) {
      *format = candidate;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown format \"" + name +
                                 "\" (expected auto, recordio, lmdb, caffe_lmdb, imagefolder, "
                                 "webdataset, megatron, llmc or tokens)");
}

Status ResolveInsideDirectory(const std::string& directory, const std::string& name,
                              bool allow_external_paths, const std::string& named_by,
                              std::string* path) {
  if (name.empty() || name.find('\0') != std::string::npos) {
    return Status::InvalidArgument(named_by + ": empty path or a path with a NUL byte");
  }
  *path = AbsolutePath(JoinPath(directory, name));
  if (allow_external_paths) return Status::OK();
  const std::string hint =
      "; refused, as a dataset from elsewhere must not reach other files of this machine "
      "(pass allow_external_paths=True, or --allow-external-paths, if you trust it)";
  if (name.front() == '/') {
    return Status::PermissionDenied(named_by + ": \"" + name + "\" is an absolute path, outside " +
                                    directory + hint);
  }
  for (size_t start = 0; start <= name.size();) {
    size_t slash = name.find('/', start);
    if (slash == std::string::npos) slash = name.size();
    if (name.compare(start, slash - start, "..") == 0) {
      return Status::PermissionDenied(named_by + ": \"" + name +
                                      "\" has a \"..\" segment leading outside " + directory +
                                      hint);
    }
    start = slash + 1;
  }
  // Symlinks: what the kernel will open is realpath(), which must stay
  // under realpath(directory) (the directory itself may be a symlink).
  char* resolved = ::realpath(path->c_str(), nullptr);
  if (resolved == nullptr) return Status::OK();  // missing: the caller says NotFound
  std::string target(resolved);
  std::free(resolved);
  char* resolved_directory = ::realpath(directory.c_str(), nullptr);
  if (resolved_directory == nullptr) return Status::FromErrno(errno, directory);
  std::string root(resolved_directory);
  std::free(resolved_directory);
  if (root != "/" && !StartsWith(target, root + "/")) {
    return Status::PermissionDenied(named_by + ": \"" + name + "\" is a symlink (or lies under one) "
                                    "leading to " + target + ", outside " + root + hint);
  }
  return Status::OK();
}

namespace {

bool IsLmdbDirectory(const std::string& directory) {
  return IsRegularFile(JoinPath(directory, "data.mdb"));
}

// Sorted names of the .rec files / LMDB subdirectories of `directory`. Each
// (its .idx, its data.mdb) must stay inside `directory` unless allowed.
Status ListShards(const std::string& directory, bool allow_external_paths,
                  std::vector<std::string>* rec_files, std::vector<std::string>* lmdb_directories) {
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  for (const DirectoryEntry& entry : entries) {
    std::string full = JoinPath(directory, entry.name);
    bool rec = entry.is_regular_file && EndsWith(entry.name, ".rec");
    bool lmdb = entry.is_directory && IsLmdbDirectory(full);
    if (!rec && !lmdb) continue;
    std::string resolved;
    std::vector<std::string> members = {entry.name};
    members.push_back(rec ? IndexPathFor(entry.name) : JoinPath(entry.name, "data.mdb"));
    for (const std::string& member : members) {
      GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, member, allow_external_paths,
                                                     JoinPath(directory, member), &resolved));
    }
    (rec ? rec_files : lmdb_directories)->push_back(full);
  }
  return Status::OK();
}

// A Caffe LMDB's first value parses as a caffe.Datum; a gpufeed payload
// starts with IRHeader.flag, whose first byte is never a valid protobuf tag
// for the small flags gpufeed writes, so the two are told apart reliably.
Status LooksLikeCaffe(const std::string& directory, bool* is_caffe) {
  LmdbReader reader;
  GPUFEED_RETURN_IF_ERROR(reader.Open(directory));
  std::string first_key, first_value;
  GPUFEED_RETURN_IF_ERROR(reader.ForEach([&](std::string_view key, std::string_view value) {
    first_key.assign(key);
    first_value.assign(value);
    return false;
  }));
  *is_caffe = false;
  if (first_key.empty()) return Status::OK();
  bool decimal_key = first_key.find_first_not_of("0123456789") == std::string::npos;
  CaffeDatum datum;
  if (DecodeCaffeDatum(first_value, &datum).ok() &&
      (datum.encoded || !datum.data.empty() || datum.float_data_count > 0)) {
    // A decimal key with a valid IRHeader is gpufeed's own layout.
    *is_caffe = !(decimal_key && first_value.size() >= 24 && first_value[0] == 0);
  }
  return Status::OK();
}

Status OpenFromManifest(const std::string& directory, const DatasetOptions& options,
                        const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset) {
  DatasetFormat requested = options.format;
  bool allow_external_paths = options.allow_external_paths;
  std::string manifest_path = JoinPath(directory, kManifestName);
  Manifest manifest;
  GPUFEED_RETURN_IF_ERROR(ReadManifest(manifest_path, &manifest));
  if (requested != DatasetFormat::kAuto && requested != manifest.format) {
    return Status::InvalidArgument(manifest_path + " describes a " + FormatName(manifest.format) +
                                   " dataset, but format=\"" + FormatName(requested) +
                                   "\" was asked for");
  }
  if (manifest.format == DatasetFormat::kRecordIO) {
    std::vector<RecordIOShardSpec> specs;
    GPUFEED_RETURN_IF_ERROR(RecordIOSpecsFromManifest(directory, manifest_path, manifest,
                                                      allow_external_paths, &specs));
    return OpenRecordIODataset(directory, specs, &manifest, store, dataset);
  }
  if (manifest.format == DatasetFormat::kWebDataset) {
    return OpenWebDatasetFromManifest(directory, manifest, options, store, dataset);
  }
  if (IsTokenFormat(manifest.format)) {
    // OpenTokenCorpus opens a token manifest that identifies its files; one
    // that does not (hand-written) leaves the corpus to be found by its files.
    return Status::InvalidArgument(manifest_path + " describes a " +
                                   FormatName(manifest.format) +
                                   " corpus but not every file's bytes, xxh64 and token_dtype: "
                                   "run `gpufeed index` on it again");
  }
  std::vector<std::string> environments;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = manifest_path + " shard " + std::to_string(i);
    std::string environment, data_file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, shard.file, allow_external_paths,
                                                   named_by, &environment));
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, JoinPath(shard.file, "data.mdb"),
                                                   allow_external_paths, named_by, &data_file));
    if (!IsLmdbDirectory(environment)) {
      return Status::NotFound(environment + ": LMDB shard listed in the manifest " + manifest_path +
                              " does not exist (or has no data.mdb)");
    }
    environments.push_back(environment);
  }
  return OpenLmdbDataset(directory, environments, &manifest, store, dataset);
}

}  // namespace

Status RecordIOSpecsFromManifest(const std::string& directory, const std::string& manifest_path,
                                 const Manifest& manifest, bool allow_external_paths,
                                 std::vector<RecordIOShardSpec>* specs) {
  const bool lazy = ManifestIdentifiesEveryFile(manifest);
  specs->clear();
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = manifest_path + " shard " + std::to_string(i);
    RecordIOShardSpec spec;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, shard.file, allow_external_paths,
                                                   named_by, &spec.rec_path));
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(
        directory, shard.index.empty() ? IndexPathFor(shard.file) : shard.index,
        allow_external_paths, named_by + " index", &spec.idx_path));
    spec.idx_required = true;
    spec.expected_records = static_cast<int64_t>(shard.records);
    spec.xxh64 = shard.xxh64;
    // Existence and the recorded size are checked when the store opens
    // the shard (at Dataset::Open, or at its first read when lazy): no
    // separate stat per shard.
    spec.expected_bytes = shard.bytes;
    spec.manifest_path = manifest_path;
    spec.lazy = lazy;
    spec.index_bytes = shard.index_bytes;
    spec.index_xxh64 = shard.index_xxh64;
    specs->push_back(std::move(spec));
  }
  return Status::OK();
}

namespace {

Status OpenDirectory(const std::string& directory, const DatasetOptions& options,
                     const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset) {
  DatasetFormat requested = options.format;
  bool allow_external_paths = options.allow_external_paths;
  if (PathExists(JoinPath(directory, kManifestName)) && requested != DatasetFormat::kImageFolder &&
      requested != DatasetFormat::kCaffeLmdb) {
    return OpenFromManifest(directory, options, store, dataset);
  }
  auto open_webdataset = [&]() -> Status {
    std::vector<std::string> tars;
    GPUFEED_RETURN_IF_ERROR(ResolveWebDatasetTars(directory, options, &tars));
    return OpenWebDatasetDataset(directory, tars, options, store, dataset);
  };
  if (requested == DatasetFormat::kWebDataset) return open_webdataset();
  std::vector<std::string> rec_files, lmdb_directories;
  if (requested != DatasetFormat::kImageFolder) {
    GPUFEED_RETURN_IF_ERROR(
        ListShards(directory, allow_external_paths, &rec_files, &lmdb_directories));
  }
  bool lmdb_here = IsLmdbDirectory(directory);

  auto open_recordio = [&]() -> Status {
    if (rec_files.empty()) {
      return Status::NotFound(directory + ": no .rec files (format=\"recordio\")");
    }
    std::vector<RecordIOShardSpec> specs;
    for (const std::string& rec : rec_files) specs.push_back(RecordIOShardAt(rec));
    return OpenRecordIODataset(directory, specs, nullptr, store, dataset);
  };
  auto open_lmdb = [&]() -> Status {
    if (lmdb_here) return OpenLmdbDataset(directory, {directory}, nullptr, store, dataset);
    if (lmdb_directories.empty()) {
      return Status::NotFound(directory + ": no LMDB environment (data.mdb) here or in its "
                              "subdirectories (format=\"lmdb\")");
    }
    return OpenLmdbDataset(directory, lmdb_directories, nullptr, store, dataset);
  };

  switch (requested) {
    case DatasetFormat::kRecordIO: return open_recordio();
    case DatasetFormat::kLmdb: return open_lmdb();
    case DatasetFormat::kCaffeLmdb:
      if (!lmdb_here) return Status::NotFound(directory + ": no data.mdb (format=\"caffe_lmdb\")");
      return OpenCaffeLmdbDataset(directory, store, dataset);
    case DatasetFormat::kImageFolder: return OpenImageFolderDataset(directory, store, dataset);
    case DatasetFormat::kWebDataset: return open_webdataset();
    default: break;
  }
  if (!rec_files.empty()) return open_recordio();
  if (lmdb_here) {
    bool is_caffe = false;
    GPUFEED_RETURN_IF_ERROR(LooksLikeCaffe(directory, &is_caffe));
    if (is_caffe) return OpenCaffeLmdbDataset(directory, store, dataset);
    return open_lmdb();
  }
  if (!lmdb_directories.empty()) return open_lmdb();
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  for (const DirectoryEntry& entry : entries) {
    if (entry.is_regular_file && IsWebDatasetShardName(entry.name)) return open_webdataset();
  }
  if (entries.empty()) {
    return Status::InvalidArgument(directory + ": the directory is empty (no dataset here)");
  }
  return OpenImageFolderDataset(directory, store, dataset);
}

}  // namespace

namespace {

Status OpenUncached(const std::string& path, const DatasetOptions& options,
                    const std::shared_ptr<Store>& store,
                     std::unique_ptr<Dataset>* dataset) {
  if (path.empty()) return Status::InvalidArgument("empty dataset path");
  std::string absolute = AbsolutePath(path);
  // A list of tars, or a brace pattern naming them, is no path to stat.
  bool any_format = options.format == DatasetFormat::kAuto ||
                    options.format == DatasetFormat::kWebDataset;
  if (any_format && (!options.webdataset.tars.empty() ||
                     (absolute.find('{') != std::string::npos && !PathExists(absolute)))) {
    std::vector<std::string> tars;
    GPUFEED_RETURN_IF_ERROR(ResolveWebDatasetTars(absolute, options, &tars));
    return OpenWebDatasetDataset(absolute, tars, options, store, dataset);
  }
  // Then token corpora: a Megatron prefix names no file of its own.
  std::shared_ptr<const TokenCorpus> corpus;
  bool tokens = false;
  GPUFEED_RETURN_IF_ERROR(OpenTokenCorpus(absolute, options, store, &corpus, &tokens));
  if (tokens) {
    return NewTokenWindowDataset(absolute, store, corpus, options.tokens.seq_len, 0, dataset);
  }
  struct stat st;
  if (::stat(absolute.c_str(), &st) != 0) return Status::FromErrno(errno, absolute);
  if (S_ISDIR(st.st_mode)) {
    // Fail early and clearly on a directory we may not list.
    if (::access(absolute.c_str(), R_OK | X_OK) != 0) return Status::FromErrno(errno, absolute);
    return OpenDirectory(absolute, options, store, dataset);
  }
  std::string name = Basename(absolute);
  if (name == kManifestName || name == "data.mdb") {
    return OpenDirectory(Dirname(absolute), options, store, dataset);
  }
  if (options.format == DatasetFormat::kWebDataset ||
      (options.format == DatasetFormat::kAuto && IsWebDatasetShardName(name))) {
    std::vector<std::string> tars;
    GPUFEED_RETURN_IF_ERROR(ResolveWebDatasetTars(absolute, options, &tars));
    return OpenWebDatasetDataset(absolute, tars, options, store, dataset);
  }
  if (options.format == DatasetFormat::kRecordIO ||
      (options.format == DatasetFormat::kAuto && EndsWith(name, ".rec"))) {
    return OpenRecordIODataset(absolute, {RecordIOShardAt(absolute)}, nullptr, store, dataset);
  }
  return Status::InvalidArgument(absolute + ": cannot tell the dataset format of this file "
                                 "(expected a .rec or .tar file or a directory); pass format=");
}

}  // namespace

Status Dataset::Open(const std::string& path, const DatasetOptions& options,
                     std::unique_ptr<Dataset>* dataset) {
  // Every format reads through the store: the source, throttled for a
  // benchmark, and the node cache when options name a cache_dir.
  std::shared_ptr<Store> store;
  GPUFEED_RETURN_IF_ERROR(NewDatasetStore(options.cache, AbsolutePath(path), &store));
  std::unique_ptr<Dataset> opened;
  GPUFEED_RETURN_IF_ERROR(OpenUncached(path, options, store, &opened));
  GPUFEED_RETURN_IF_ERROR(store->Seal());
  *dataset = std::move(opened);
  return Status::OK();
}

DatasetBase::DatasetBase(DatasetFormat format, std::string path, std::shared_ptr<Store> store)
    : Dataset(format, std::move(path)), store_(std::move(store)) {}

const StoreFile* DatasetBase::FileOf(uint64_t) const { return nullptr; }

void DatasetBase::ExpectReads(const std::vector<uint64_t>& samples) const {
  // First and last position of each file in the coming reads: the order to
  // fetch them in, and how many bytes are needed at the same time.
  std::unordered_map<const StoreUnit*, std::pair<uint64_t, uint64_t>> span;
  std::vector<const StoreUnit*> order;
  for (uint64_t position = 0; position < samples.size(); ++position) {
    if (samples[position] >= size()) continue;
    const StoreUnit* file = UnitOf(samples[position]);
    if (file == nullptr) continue;
    auto [found, added] = span.try_emplace(file, position, position);
    if (added) {
      order.push_back(file);
    } else {
      found->second.second = position;
    }
  }
  std::vector<std::pair<uint64_t, int64_t>> events;  // (position, +/- bytes)
  for (const auto& [file, first_last] : span) {
    int64_t bytes = static_cast<int64_t>(file->bytes());
    events.emplace_back(2 * first_last.first, bytes);
    events.emplace_back(2 * first_last.second + 1, -bytes);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, most = 0;
  for (const auto& [position, bytes] : events) {
    live += bytes;
    most = std::max(most, live);
  }
  store_->ExpectUnits(order, static_cast<uint64_t>(most));
}

StorageStats DatasetBase::storage_stats() const { return store_->stats(); }

}  // namespace gpufeed

