// RecordIO's registry entry: a .rec file, a directory of .rec shards (each
// with its .idx beside it, or scanned), or a gpufeed.json listing them.
#include "format/datasets.h"
#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

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

bool IsRecName(const std::string& name) { return EndsWith(name, ".rec"); }

// The .rec files of `directory`, sorted. Each and its .idx must stay
// inside `directory` unless allowed.
Status ListRecFiles(const std::string& directory, bool allow_external_paths,
                    std::vector<std::string>* rec_files) {
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_regular_file || !IsRecName(entry.name)) continue;
    std::string resolved;
    for (const std::string& member : {entry.name, IndexPathFor(entry.name)}) {
      GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, member, allow_external_paths,
                                                     JoinPath(directory, member), &resolved));
    }
    rec_files->push_back(JoinPath(directory, entry.name));
  }
  return Status::OK();
}

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::vector<std::string> rec_files;
  GPUFEED_RETURN_IF_ERROR(
      ListRecFiles(request.path, request.options.allow_external_paths, &rec_files));
  if (rec_files.empty()) {
    return Status::NotFound(request.path + ": no .rec files (format=\"recordio\")");
  }
  std::vector<RecordIOShardSpec> specs;
  for (const std::string& rec : rec_files) specs.push_back(RecordIOShardAt(rec));
  return OpenRecordIODataset(request.path, specs, nullptr, request.store, dataset);
}

Status ClaimsDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  for (const DirectoryEntry& entry : listing.entries) {
    if (entry.is_regular_file && IsRecName(entry.name)) *claimed = true;
  }
  return Status::OK();
}

Status OpenFile(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenRecordIODataset(request.path, {RecordIOShardAt(request.path)}, nullptr,
                             request.store, dataset);
}

Status OpenManifest(const std::string& manifest_path, const Manifest& manifest,
                    const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  const std::string directory = Dirname(manifest_path);
  std::vector<RecordIOShardSpec> specs;
  GPUFEED_RETURN_IF_ERROR(RecordIOSpecsFromManifest(
      directory, manifest_path, manifest, request.options.allow_external_paths, &specs));
  return OpenRecordIODataset(directory, specs, &manifest, request.store, dataset);
}

}  // namespace

const FormatEntry& RecordIOFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kRecordIO;
    e.name = "recordio";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.open_file = OpenFile;
    e.claims_file_name = IsRecName;
    e.file_names = "a .rec";
    e.open_manifest = OpenManifest;
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
