// RecordIO's registry entry: a .rec file, a directory of .rec shards (each
// with its .idx beside it, or scanned), or a gpufeed.json listing them;
// verify scans every record and checks each .idx against it; Pack writes
// part-NNNNN.rec + .idx; a cache warm copies each .rec and .idx.
#include <unordered_set>

#include "format/datasets.h"
#include "format/irheader.h"
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

// Scans one .rec file and checks its index against the records found.
void VerifyRecordIOShard(const std::string& rec_path, const std::string& idx_path,
                         int64_t expected_records, VerifyReport* report) {
  report->shards_checked += 1;
  UniqueFd fd;
  uint64_t size = 0;
  Status status = OpenForRead(rec_path, &fd);
  if (status.ok()) status = FileSizeOf(fd.get(), rec_path, &size);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  std::vector<uint64_t> offsets;
  std::vector<float> labels;
  status = ScanRecordIO(fd.get(), rec_path, size, [&](uint64_t offset, const std::string& payload) {
    ParsedPayload parsed;
    Status parse = ParseIRPayload(payload, &labels, &parsed);
    if (!parse.ok()) {
      report->problems.push_back(
          parse.WithContext(rec_path + " at byte offset " + std::to_string(offset)).ToString());
    }
    offsets.push_back(offset);
    report->records_checked += 1;
    return Status::OK();
  });
  if (!status.ok()) report->problems.push_back(status.ToString());
  if (!idx_path.empty() && PathExists(idx_path)) {
    std::vector<uint64_t> idx_offsets;
    std::vector<std::string> keys;
    Status idx_status = ReadRecordIOIndex(idx_path, size, &idx_offsets, &keys);
    if (!idx_status.ok()) {
      report->problems.push_back(idx_status.ToString());
    } else if (status.ok()) {
      std::unordered_set<uint64_t> starts(offsets.begin(), offsets.end());
      size_t reported = 0;
      for (size_t line = 0; line < idx_offsets.size(); ++line) {
        if (!starts.count(idx_offsets[line]) && reported++ < 10) {
          report->problems.push_back(idx_path + " line " + std::to_string(line + 1) +
                                     ": offset " + std::to_string(idx_offsets[line]) +
                                     " is not at a record boundary of " + rec_path);
        }
      }
      if (idx_offsets.size() != offsets.size()) {
        report->problems.push_back(idx_path + ": lists " + std::to_string(idx_offsets.size()) +
                                   " records, " + rec_path + " holds " +
                                   std::to_string(offsets.size()));
      }
    }
  } else if (!idx_path.empty()) {
    report->problems.push_back(idx_path + ": index file is missing");
  }
  if (status.ok() && expected_records >= 0 &&
      offsets.size() != static_cast<uint64_t>(expected_records)) {
    report->problems.push_back(rec_path + ": holds " + std::to_string(offsets.size()) +
                               " records, the manifest says " + std::to_string(expected_records));
  }
}

// Each shard of the manifest (its .rec and .idx inside the directory, the
// record count, both xxh64s), or each .rec of the opened dataset.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  if (request.manifest == nullptr) {
    for (const ShardInfo& shard : request.dataset->shards()) {
      const std::string idx = IndexPathFor(shard.path);
      VerifyRecordIOShard(shard.path, PathExists(idx) ? idx : "", -1, report);
    }
    return;
  }
  const Manifest& manifest = *request.manifest;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const ManifestShard& shard = manifest.shards[i];
    const std::string named_by = request.manifest_path + " shard " + std::to_string(i);
    std::string file, idx;
    Status inside = ResolveInsideDirectory(request.path, shard.file,
                                           request.options.allow_external_paths, named_by, &file);
    if (inside.ok()) {
      inside = ResolveInsideDirectory(
          request.path, shard.index.empty() ? IndexPathFor(shard.file) : shard.index,
          request.options.allow_external_paths, named_by + " index", &idx);
    }
    if (!inside.ok()) {
      report->problems.push_back(inside.ToString());
      continue;
    }
    if (!PathExists(file)) {
      report->problems.push_back(file + ": shard listed in the manifest does not exist");
      continue;
    }
    VerifyRecordIOShard(file, idx, static_cast<int64_t>(shard.records), report);
    CheckChecksum(file, shard.xxh64, report);
    // A lazily opened dataset trusts these to identify its node-cache
    // copies: checked like the .rec's.
    if (!shard.index_xxh64.empty() && PathExists(idx)) {
      CheckChecksum(idx, shard.index_xxh64, report);
    }
  }
}

// Every .rec and .idx with its size and xxh64: the dataset opens lazily.
bool IdentifiesEveryFile(const Manifest& manifest) {
  if (manifest.shards.empty()) return false;
  for (const ManifestShard& shard : manifest.shards) {
    // A shard of records has at least their framing: 0 bytes means "not
    // recorded" (hand-written manifests).
    if (shard.bytes == 0 || shard.xxh64.empty() || shard.index_xxh64.empty() ||
        (shard.index_bytes == 0 && shard.records != 0)) {
      return false;
    }
  }
  return true;
}

// A lazily opened dataset (its manifest identifies every file) keys the
// copies of each .rec and .idx on the manifest's sizes and checksums,
// nothing stat'ed; any other on each .rec's size and mtime.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  const std::string manifest_path = JoinPath(dataset.path(), kManifestName);
  Manifest manifest;
  if (!IsRegularFile(manifest_path) || !ReadManifest(manifest_path, &manifest).ok() ||
      manifest.format != DatasetFormat::kRecordIO || !IdentifiesEveryFile(manifest)) {
    return WarmEachShardFile(dataset, nullptr, sources);
  }
  std::vector<RecordIOShardSpec> specs;
  // Dataset::Open resolved these names already (and refused outside ones).
  GPUFEED_RETURN_IF_ERROR(RecordIOSpecsFromManifest(dataset.path(), manifest_path, manifest,
                                                    /*allow_external_paths=*/true, &specs));
  for (const RecordIOShardSpec& spec : specs) {
    for (int file = 0; file < 2; ++file) {
      WarmSource warm;
      warm.source.path = file == 0 ? spec.rec_path : spec.idx_path;
      warm.source.size = file == 0 ? spec.expected_bytes : spec.index_bytes;
      warm.source.xxh64 = file == 0 ? spec.xxh64 : spec.index_xxh64;
      warm.source.identified_by_checksum = true;
      warm.counts_as_shard = file == 0;
      sources->push_back(std::move(warm));
    }
  }
  return Status::OK();
}

void NameShard(const std::string& base, ManifestShard* shard) {
  shard->file = base + ".rec";
  shard->index = base + ".idx";
}

std::string DataFile(const std::string& shard_path) { return shard_path; }

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
    e.verify = Verify;
    e.manifest_identifies_every_file = IdentifiesEveryFile;
    e.warm_sources = WarmSources;
    e.writer.shard_format = ShardFormat::kRecordIO;
    e.writer.open = NewRecordIOShardWriter;
    e.writer.name_shard = NameShard;
    e.writer.data_file = DataFile;
    e.writer.output_suffixes = {".rec", ".idx"};
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
