// The registry entry of fixed-size binary records (format "records"): a
// file, a directory of files (natural name order), or a directory whose
// gpufeed.json lists them with their bytes, records and xxh64. Never
// claimed under format=auto: raw records have no signature. Verify checks
// every file's size against the record size (and the manifest's), and each
// xxh64 the manifest records; a cache warm copies each file.
#include "format/datasets.h"
#include "format/records.h"
#include "format/registry.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status OpenFile(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  RecordsFileSpec spec;
  spec.path = request.path;
  return OpenRecordsDataset(request.path, {spec}, request.options, request.store, dataset);
}

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::vector<std::string> paths;
  GPUFEED_RETURN_IF_ERROR(
      ListRecordsFiles(request.path, request.options.allow_external_paths, &paths));
  std::vector<RecordsFileSpec> specs(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) specs[i].path = paths[i];
  return OpenRecordsDataset(request.path, specs, request.options, request.store, dataset);
}

// The files a manifest lists, resolved inside its directory, with what it
// says of each; NotFound naming the manifest for a missing one.
Status SpecsFromManifest(const std::string& manifest_path, const Manifest& manifest,
                         bool allow_external_paths, std::vector<RecordsFileSpec>* specs) {
  const std::string directory = Dirname(manifest_path);
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    RecordsFileSpec spec;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, shard.file, allow_external_paths,
                                                   manifest_path + " shard " + std::to_string(i),
                                                   &spec.path));
    if (!PathExists(spec.path)) {
      return Status::NotFound(spec.path + ": missing (listed by the manifest " + manifest_path +
                              ")");
    }
    spec.xxh64 = shard.xxh64;
    spec.expected_bytes = shard.bytes;
    spec.expected_records = static_cast<int64_t>(shard.records);
    spec.described_by = manifest_path;
    specs->push_back(std::move(spec));
  }
  return Status::OK();
}

Status OpenManifest(const std::string& manifest_path, const Manifest& manifest,
                    const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::vector<RecordsFileSpec> specs;
  GPUFEED_RETURN_IF_ERROR(
      SpecsFromManifest(manifest_path, manifest, request.options.allow_external_paths, &specs));
  return OpenRecordsDataset(Dirname(manifest_path), specs, request.options, request.store, dataset);
}

// Opening checks every file's size (a record's framing is its size); the
// records are counted as checked, and with a manifest each file's xxh64
// is computed and compared.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::unique_ptr<Dataset> opened;
  const Dataset* dataset = request.dataset;
  if (dataset == nullptr) {
    DatasetOptions options = request.options;
    options.format = kRecordsFormat;
    Status status = Dataset::Open(request.path, options, &opened);
    if (!status.ok()) {
      report->problems.push_back(status.ToString());
      return;
    }
    dataset = opened.get();
  }
  report->records_checked += dataset->size();
  if (request.manifest == nullptr) {
    report->shards_checked += dataset->shards().size();
    return;
  }
  std::vector<RecordsFileSpec> specs;
  Status listed = SpecsFromManifest(request.manifest_path, *request.manifest,
                                    request.options.allow_external_paths, &specs);
  if (!listed.ok()) {
    report->problems.push_back(listed.ToString());
    return;
  }
  for (const RecordsFileSpec& spec : specs) {
    report->shards_checked += 1;
    CheckChecksum(spec.path, spec.xxh64, report);
  }
}

// The store reads each file as it is.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  return WarmEachShardFile(dataset, nullptr, sources);
}

}  // namespace

const FormatEntry& RecordsFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = kRecordsFormat;
    e.name = "records";
    e.open_directory = OpenDirectory;
    e.open_file = OpenFile;
    e.open_manifest = OpenManifest;
    e.verify = Verify;
    e.warm_sources = WarmSources;
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
