// MDS's registry entry: a directory holding Streaming's index.json (version
// 2) with shards of format "mds". Read only; verify checks every sample,
// each shard file's size and the xxHash digests index.json records.
#include <nlohmann/json.hpp>

#include "format/datasets.h"
#include "format/mds.h"
#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenMdsDataset(request.path, request.options, request.store, dataset);
}

// index.json naming at least one shard of format "mds" (LitData's and
// other index.json files are left to others).
Status ClaimsDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  for (const DirectoryEntry& entry : listing.entries) {
    if (!entry.is_regular_file || entry.name != "index.json") continue;
    std::string text;
    if (!ReadFileToString(JoinPath(listing.directory, entry.name), &text, 1 << 30).ok()) break;
    nlohmann::json index = nlohmann::json::parse(text, nullptr, false);
    if (!index.is_object() || !index.contains("shards") || !index["shards"].is_array()) break;
    for (const nlohmann::json& shard : index["shards"]) {
      if (shard.is_object() && shard.contains("format") && shard["format"] == "mds") {
        *claimed = true;
      }
    }
  }
  return Status::OK();
}

// Each shard file's size and the hashes index.json records for it that
// libxxhash computes (the others are named once in the report).
void CheckShardFile(const std::string& path, const MdsFileInfo& file, VerifyReport* report) {
  uint64_t size = 0;
  Status status = FileSizeOf(path, &size);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  if (size != file.bytes) {
    report->problems.push_back(path + ": " + std::to_string(size) + " bytes, but index.json says " +
                               std::to_string(file.bytes));
    return;
  }
  for (const auto& [algorithm, expected] : file.hashes) {
    if (!IsMdsCheckedHash(algorithm)) continue;
    std::string actual;
    status = MdsFileHash(path, algorithm, &actual);
    report->checksums_checked += 1;
    if (!status.ok()) {
      report->problems.push_back(status.ToString());
    } else if (actual != expected) {
      report->problems.push_back(path + ": " + algorithm + " is " + actual +
                                 ", but index.json records " + expected);
    }
  }
}

void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::string index_path = JoinPath(request.path, "index.json");
  std::string text;
  std::vector<MdsShardInfo> infos;
  Status status = ReadFileToString(index_path, &text, uint64_t{1} << 30);
  if (status.ok()) status = ParseMdsIndex(text, index_path, &infos);
  for (size_t i = 0; status.ok() && i < infos.size(); ++i) {
    const MdsFileInfo& file = infos[i].zipped ? infos[i].zip : infos[i].raw;
    std::string path;
    Status resolved =
        ResolveInsideDirectory(request.path, file.basename, request.options.allow_external_paths,
                               index_path + ": shard " + std::to_string(i), &path);
    if (!resolved.ok()) {
      report->problems.push_back(resolved.ToString());
      continue;
    }
    report->shards_checked += 1;
    CheckShardFile(path, file, report);
  }
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  std::unique_ptr<Dataset> opened;
  DatasetOptions options = request.options;
  options.format = kMdsFormat;
  status = Dataset::Open(request.path, options, &opened);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  ReadEveryRecord(*opened, report);
}

}  // namespace

const FormatEntry& MdsFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = kMdsFormat;
    e.name = "mds";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.verify = Verify;
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
