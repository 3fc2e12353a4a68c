// The registry entries of the LMDB family: gpufeed's LMDB shards (an
// environment, a directory of them, or a gpufeed.json listing them; Pack
// writes part-NNNNN/ environments) and Caffe's LMDB of caffe.Datum values,
// told apart by the first value. A cache warm copies each data.mdb.
#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/irheader.h"
#include "format/lmdb_env.h"
#include "format/registry.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// A directory holding an LMDB environment (its data.mdb).
bool IsLmdbDirectory(const std::string& directory) {
  return IsRegularFile(JoinPath(directory, "data.mdb"));
}

// The sorted subdirectories of `directory` holding an LMDB environment;
// each (and its data.mdb) must stay inside `directory` unless allowed.
Status ListLmdbDirectories(const std::string& directory, bool allow_external_paths,
                           std::vector<std::string>* environments) {
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  for (const DirectoryEntry& entry : entries) {
    std::string full = JoinPath(directory, entry.name);
    if (!entry.is_directory || !IsLmdbDirectory(full)) continue;
    std::string resolved;
    for (const std::string& member : {entry.name, JoinPath(entry.name, "data.mdb")}) {
      GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, member, allow_external_paths,
                                                     JoinPath(directory, member), &resolved));
    }
    environments->push_back(full);
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

Status OpenLmdbDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  if (IsLmdbDirectory(request.path)) {
    return OpenLmdbDataset(request.path, {request.path}, nullptr, request.store, dataset);
  }
  std::vector<std::string> environments;
  GPUFEED_RETURN_IF_ERROR(
      ListLmdbDirectories(request.path, request.options.allow_external_paths, &environments));
  if (environments.empty()) {
    return Status::NotFound(request.path + ": no LMDB environment (data.mdb) here or in its "
                            "subdirectories (format=\"lmdb\")");
  }
  return OpenLmdbDataset(request.path, environments, nullptr, request.store, dataset);
}

// An environment here that is not Caffe's, or environments in subdirectories.
Status ClaimsLmdbDirectory(const DirectoryListing& listing, const OpenRequest& request,
                           bool* claimed) {
  if (IsLmdbDirectory(listing.directory)) {
    *claimed = true;  // CaffeLmdbFormat, asked first, did not take it
    return Status::OK();
  }
  std::vector<std::string> environments;
  GPUFEED_RETURN_IF_ERROR(ListLmdbDirectories(listing.directory,
                                              request.options.allow_external_paths,
                                              &environments));
  *claimed = !environments.empty();
  return Status::OK();
}

Status OpenLmdbManifest(const std::string& manifest_path, const Manifest& manifest,
                        const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  const std::string directory = Dirname(manifest_path);
  std::vector<std::string> environments;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = manifest_path + " shard " + std::to_string(i);
    std::string environment, data_file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, shard.file,
                                                   request.options.allow_external_paths,
                                                   named_by, &environment));
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, JoinPath(shard.file, "data.mdb"),
                                                   request.options.allow_external_paths,
                                                   named_by, &data_file));
    if (!IsLmdbDirectory(environment)) {
      return Status::NotFound(environment + ": LMDB shard listed in the manifest " + manifest_path +
                              " does not exist (or has no data.mdb)");
    }
    environments.push_back(environment);
  }
  return OpenLmdbDataset(directory, environments, &manifest, request.store, dataset);
}

Status OpenCaffeDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  if (!IsLmdbDirectory(request.path)) {
    return Status::NotFound(request.path + ": no data.mdb (format=\"caffe_lmdb\")");
  }
  return OpenCaffeLmdbDataset(request.path, request.store, dataset);
}

Status ClaimsCaffeDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  if (!IsLmdbDirectory(listing.directory)) return Status::OK();
  return LooksLikeCaffe(listing.directory, claimed);
}

void VerifyLmdbShard(const std::string& directory, bool caffe, int64_t expected_records,
                     VerifyReport* report) {
  report->shards_checked += 1;
  LmdbReader reader;
  Status status = reader.Open(directory);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  uint64_t count = 0;
  std::vector<float> labels;
  size_t reported = 0;
  uint64_t key_base = 0;
  status = reader.ForEach([&](std::string_view key, std::string_view value) {
    Status check;
    if (!caffe) {
      // Reads look keys up as first key + position: they must be consecutive.
      bool decimal = !key.empty() && key.size() <= 19 &&
                     key.find_first_not_of("0123456789") == std::string_view::npos;
      uint64_t number = decimal ? std::stoull(std::string(key)) : 0;
      if (count == 0) key_base = number;
      if (!decimal || number != key_base + count) {
        if (reported++ < 100) {
          report->problems.push_back(directory + "/data.mdb: key \"" + std::string(key) +
                                     "\" at position " + std::to_string(count) +
                                     " is not the consecutive sample index " +
                                     std::to_string(key_base + count));
        }
      }
    }
    if (caffe) {
      CaffeDatum datum;
      check = DecodeCaffeDatum(value, &datum);
      if (check.ok() && !datum.encoded && datum.data.empty()) {
        check = Status::NotSupported("a Datum with float_data instead of uint8 data (byte offset 0 "
                                     "of the value); gpufeed reads uint8 and encoded Datums only");
      }
    } else {
      ParsedPayload parsed;
      check = ParseIRPayload(value, &labels, &parsed);
    }
    if (!check.ok() && reported++ < 100) {
      report->problems.push_back(
          check.WithContext(directory + "/data.mdb, key \"" + std::string(key) + "\"").ToString());
    }
    count += 1;
    return true;
  });
  report->records_checked += count;
  if (!status.ok()) report->problems.push_back(status.ToString());
  if (expected_records >= 0 && count != static_cast<uint64_t>(expected_records)) {
    report->problems.push_back(directory + ": holds " + std::to_string(count) +
                               " records, the manifest says " + std::to_string(expected_records));
  }
}

// Each environment of the manifest (inside the directory, its record count,
// its data.mdb's xxh64), or of the opened dataset.
void VerifyLmdb(const VerifyRequest& request, VerifyReport* report) {
  if (request.manifest == nullptr) {
    for (const ShardInfo& shard : request.dataset->shards()) {
      VerifyLmdbShard(shard.path, false, -1, report);
    }
    return;
  }
  const Manifest& manifest = *request.manifest;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = request.manifest_path + " shard " + std::to_string(i);
    std::string environment, data_file;
    Status inside = ResolveInsideDirectory(request.path, shard.file,
                                           request.options.allow_external_paths, named_by,
                                           &environment);
    // Its data.mdb too (a link out of the directory is refused, as at open).
    if (inside.ok()) {
      inside = ResolveInsideDirectory(request.path, JoinPath(shard.file, "data.mdb"),
                                      request.options.allow_external_paths, named_by, &data_file);
    }
    if (!inside.ok()) {
      report->problems.push_back(inside.ToString());
      continue;
    }
    if (!PathExists(environment)) {
      report->problems.push_back(environment + ": shard listed in the manifest does not exist");
      continue;
    }
    VerifyLmdbShard(environment, false, static_cast<int64_t>(shard.records), report);
    CheckChecksum(JoinPath(environment, "data.mdb"), shard.xxh64, report);
  }
}

// Caffe writes no manifest: the opened environment's Datums.
void VerifyCaffe(const VerifyRequest& request, VerifyReport* report) {
  for (const ShardInfo& shard : request.dataset->shards()) {
    VerifyLmdbShard(shard.path, true, -1, report);
  }
}

// The store reads each environment's data.mdb.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  return WarmEachShardFile(dataset, "data.mdb", sources);
}

void NameShard(const std::string& base, ManifestShard* shard) { shard->file = base; }

std::string DataFile(const std::string& shard_path) { return JoinPath(shard_path, "data.mdb"); }

}  // namespace

const FormatEntry& LmdbFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kLmdb;
    e.name = "lmdb";
    e.open_directory = OpenLmdbDirectory;
    e.claims_directory = ClaimsLmdbDirectory;
    e.open_manifest = OpenLmdbManifest;
    e.verify = VerifyLmdb;
    e.warm_sources = WarmSources;
    e.writer.shard_format = ShardFormat::kLmdb;
    e.writer.open = NewLmdbShardWriter;
    e.writer.name_shard = NameShard;
    e.writer.data_file = DataFile;
    e.writer.output_suffixes = {""};  // the environment's directory
    return e;
  }();
  return entry;
}

const FormatEntry& CaffeLmdbFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kCaffeLmdb;
    e.name = "caffe_lmdb";
    e.open_directory = OpenCaffeDirectory;
    e.claims_directory = ClaimsCaffeDirectory;
    e.verify = VerifyCaffe;
    e.warm_sources = WarmSources;
    e.reads_manifest = false;  // Caffe writes none; a gpufeed.json here is another dataset's
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
