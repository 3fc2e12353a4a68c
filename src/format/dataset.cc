// Dataset::Open: the path's kind (a directory, a file, a manifest) and the
// registry's formats (format/registry.h) asked in order.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <cstring>

#include "format/datasets.h"
#include "format/manifest.h"
#include "format/registry.h"
#include "storage/store.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

Dataset::Dataset(DatasetFormat format, std::string path)
    : format_(format), path_(std::move(path)) {}

Dataset::~Dataset() = default;

Status Dataset::ReadForDecode(uint64_t index, Record* record) const { return Read(index, record); }

StorageStats Dataset::storage_stats() const { return StorageStats(); }

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

// A directory whose gpufeed.json is read: the manifest names the format.
Status OpenFromManifest(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::string manifest_path = JoinPath(request.path, kManifestName);
  Manifest manifest;
  GPUFEED_RETURN_IF_ERROR(ReadManifest(manifest_path, &manifest));
  DatasetFormat requested = request.options.format;
  if (requested != DatasetFormat::kAuto && requested != manifest.format) {
    return Status::InvalidArgument(manifest_path + " describes a " + FormatName(manifest.format) +
                                   " dataset, but format=\"" + FormatName(requested) +
                                   "\" was asked for");
  }
  const FormatEntry* entry = FindFormat(manifest.format);
  if (entry == nullptr || entry->open_manifest == nullptr) {
    return Status::InvalidArgument(manifest_path + ": a gpufeed.json cannot describe a " +
                                   FormatName(manifest.format) + " dataset");
  }
  return entry->open_manifest(manifest_path, manifest, request, dataset);
}

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  const FormatEntry* requested = FindFormat(request.options.format);
  if ((requested == nullptr || requested->reads_manifest) &&
      PathExists(JoinPath(request.path, kManifestName))) {
    return OpenFromManifest(request, dataset);
  }
  if (requested != nullptr) {
    if (requested->open_directory == nullptr) {
      return Status::InvalidArgument(request.path + " is a directory, and format=\"" +
                                     requested->name + "\" does not open one");
    }
    return requested->open_directory(request, dataset);
  }
  DirectoryListing listing;
  listing.directory = request.path;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(request.path, &listing.entries));
  if (listing.entries.empty()) {
    return Status::InvalidArgument(request.path + ": the directory is empty (no dataset here)");
  }
  GPUFEED_RETURN_IF_ERROR(RefuseUnreadDirectory(listing));
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->claims_directory == nullptr || entry->open_directory == nullptr) continue;
    bool claimed = false;
    GPUFEED_RETURN_IF_ERROR(entry->claims_directory(listing, request, &claimed));
    if (claimed) return entry->open_directory(request, dataset);
  }
  return Status::InvalidArgument(request.path + ": no dataset format recognises this directory; "
                                 "pass format=");
}

// A regular file: the format asked for, or the one whose names it has.
Status OpenFile(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  const std::string name = Basename(request.path);
  const FormatEntry* requested = FindFormat(request.options.format);
  std::string expected;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->open_file == nullptr) continue;
    if (requested == entry ||
        (requested == nullptr && entry->claims_file_name != nullptr &&
         entry->claims_file_name(name))) {
      return entry->open_file(request, dataset);
    }
    if (entry->file_names != nullptr) expected += std::string(entry->file_names) + " file, ";
  }
  if (requested == nullptr) GPUFEED_RETURN_IF_ERROR(RefuseUnreadFile(request.path));
  return Status::InvalidArgument(request.path + ": cannot tell the dataset format of this file "
                                 "(expected " + expected + "or a directory); pass format=");
}

Status OpenUncached(const std::string& path, const DatasetOptions& options,
                    const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset) {
  if (path.empty()) return Status::InvalidArgument("empty dataset path");
  OpenRequest request{AbsolutePath(path), options, store};
  // Paths that may name no file (a list or pattern of tars, a Megatron
  // prefix), in registry order; a hook shared by a family runs once.
  const FormatEntry* requested = FindFormat(options.format);
  std::vector<Status (*)(const OpenRequest&, std::unique_ptr<Dataset>*)> tried;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->open_before_stat == nullptr || (requested != nullptr && entry != requested)) continue;
    if (std::find(tried.begin(), tried.end(), entry->open_before_stat) != tried.end()) continue;
    tried.push_back(entry->open_before_stat);
    GPUFEED_RETURN_IF_ERROR(entry->open_before_stat(request, dataset));
    if (*dataset) return Status::OK();
  }
  struct stat st;
  if (::stat(request.path.c_str(), &st) != 0) return Status::FromErrno(errno, request.path);
  if (S_ISDIR(st.st_mode)) {
    // Fail early and clearly on a directory we may not list.
    if (::access(request.path.c_str(), R_OK | X_OK) != 0) {
      return Status::FromErrno(errno, request.path);
    }
    return OpenDirectory(request, dataset);
  }
  // A dataset's manifest or an LMDB's data file stands for its directory.
  std::string name = Basename(request.path);
  if (name == kManifestName || name == "data.mdb") {
    OpenRequest directory{Dirname(request.path), options, store};
    return OpenDirectory(directory, dataset);
  }
  return OpenFile(request, dataset);
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
    : Dataset(format, std::move(path)),
      format_(Dataset::format_),
      path_(Dataset::path_),
      classes_(Dataset::classes_),
      integer_labels_(Dataset::integer_labels_),
      shards_(Dataset::shards_),
      store_(std::move(store)) {}

bool DatasetBase::Locate(uint64_t, RecordLocation*) const { return false; }

bool DatasetBase::CanLocate() const {
  RecordLocation probe;
  return size() > 0 && Locate(0, &probe);
}

void DatasetBase::CountLocatedRead(const RecordLocation&, uint64_t) const {}

std::vector<uint64_t> DatasetBase::BlockSizes() const {
  std::vector<uint64_t> sizes;
  for (const ShardInfo& shard : shards_) sizes.push_back(shard.records);
  if (sizes.empty()) sizes.push_back(size());
  return sizes;
}

Status DatasetBase::ParseLocated(uint64_t index, const RecordLocation&, const char*, size_t,
                                 Record* record) const {
  return Read(index, record);
}

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

