// WebDataset's registry entry: a .tar, a directory of tars, a brace pattern,
// a list file or an explicit list of tars, or a gpufeed.json listing them;
// Pack writes part-NNNNN.tar (its member index beside it); a cache warm
// copies each tar.
#include "format/datasets.h"
#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status OpenTars(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::vector<std::string> tars;
  GPUFEED_RETURN_IF_ERROR(ResolveWebDatasetTars(request.path, request.options, &tars));
  return OpenWebDatasetDataset(request.path, tars, request.options, request.store, dataset);
}

// A list of tars, or a brace pattern naming them, is no path to stat.
Status OpenBeforeStat(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  if (!request.options.webdataset.tars.empty() ||
      (request.path.find('{') != std::string::npos && !PathExists(request.path))) {
    return OpenTars(request, dataset);
  }
  return Status::OK();
}

Status ClaimsDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  for (const DirectoryEntry& entry : listing.entries) {
    if (entry.is_regular_file && IsWebDatasetShardName(entry.name)) *claimed = true;
  }
  return Status::OK();
}

Status OpenManifest(const std::string& manifest_path, const Manifest& manifest,
                    const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenWebDatasetFromManifest(Dirname(manifest_path), manifest, request.options,
                                    request.store, dataset);
}

// The tars' headers are walked (Dataset::Open builds or checks each member
// index), then every sample is read (its image and label members present,
// the label parsed); with a manifest each tar's xxh64 too.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::unique_ptr<Dataset> opened;
  const Dataset* dataset = DatasetToVerify(request, DatasetFormat::kWebDataset, &opened, report);
  if (dataset == nullptr) return;
  ReadEveryRecord(*dataset, report);
  const Manifest* manifest = request.manifest;
  for (size_t i = 0; i < dataset->shards().size(); ++i) {
    report->shards_checked += 1;
    if (manifest != nullptr && i < manifest->shards.size()) {
      CheckChecksum(dataset->shards()[i].path, manifest->shards[i].xxh64, report);
    }
  }
}

// The store reads each tar as it is.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  return WarmEachShardFile(dataset, nullptr, sources);
}

// The member index is written beside the tar, and not in the manifest.
void NameShard(const std::string& base, ManifestShard* shard) { shard->file = base + ".tar"; }

std::string DataFile(const std::string& shard_path) { return shard_path; }

}  // namespace

const FormatEntry& WebDatasetFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kWebDataset;
    e.name = "webdataset";
    e.open_before_stat = OpenBeforeStat;
    e.open_directory = OpenTars;
    e.claims_directory = ClaimsDirectory;
    e.open_file = OpenTars;
    e.claims_file_name = IsWebDatasetShardName;
    e.file_names = "a .tar";
    e.open_manifest = OpenManifest;
    e.verify = Verify;
    e.warm_sources = WarmSources;
    e.writer.shard_format = ShardFormat::kWebDataset;
    e.writer.open = NewTarShardWriter;
    e.writer.name_shard = NameShard;
    e.writer.data_file = DataFile;
    e.writer.output_suffixes = {".tar", ".tar.gpufeed-index"};
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
