// Verify: framing of every record and each shard's xxh64, all problems listed.
#include <algorithm>
#include <unordered_set>

#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/irheader.h"
#include "format/lmdb_env.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

void CheckChecksum(const std::string& file, const std::string& expected, VerifyReport* report) {
  if (expected.empty()) return;
  uint64_t digest = 0;
  Status status = FileXxh64(file, &digest);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  report->checksums_checked += 1;
  if (Xxh64Hex(digest) != expected) {
    report->problems.push_back(file + ": xxh64 " + Xxh64Hex(digest) +
                               " does not match the manifest's " + expected +
                               " (the file changed or is corrupt)");
  }
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

// WebDataset tars: the headers are walked (Dataset::Open builds or checks
// each member index), then every sample is read (its image and label
// members present, the label parsed); with a manifest each tar's xxh64 too.
void VerifyWebDataset(const std::string& path, const DatasetOptions& options,
                      const Manifest* manifest, VerifyReport* report) {
  report->format = DatasetFormat::kWebDataset;
  DatasetOptions webdataset = options;
  webdataset.format = DatasetFormat::kWebDataset;
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(path, webdataset, &dataset);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  Record record;
  uint64_t reported = 0;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    Status read = dataset->Read(i, &record);
    if (!read.ok() && reported++ < 100) report->problems.push_back(read.ToString());
    report->records_checked += 1;
  }
  for (size_t i = 0; i < dataset->shards().size(); ++i) {
    report->shards_checked += 1;
    if (manifest != nullptr && i < manifest->shards.size()) {
      CheckChecksum(dataset->shards()[i].path, manifest->shards[i].xxh64, report);
    }
  }
}

}  // namespace

Status Verify(const std::string& path, const DatasetOptions& options, VerifyReport* report) {
  *report = VerifyReport();
  bool tokens = false;
  GPUFEED_RETURN_IF_ERROR(VerifyTokenCorpus(path, options, report, &tokens));
  if (tokens) return Status::OK();
  std::string absolute = AbsolutePath(path);
  if (!PathExists(absolute)) return Status::FromErrno(ENOENT, absolute);
  std::string manifest_path = JoinPath(absolute, kManifestName);
  if (IsDirectory(absolute) && PathExists(manifest_path)) {
    Manifest manifest;
    Status status = ReadManifest(manifest_path, &manifest);
    if (!status.ok()) {
      report->problems.push_back(status.ToString());
      return Status::OK();
    }
    report->format = manifest.format;
    if (manifest.format == DatasetFormat::kWebDataset) {
      VerifyWebDataset(absolute, options, &manifest, report);
      return Status::OK();
    }
    for (size_t i = 0; i < manifest.shards.size(); ++i) {
      const ManifestShard& shard = manifest.shards[i];
      const std::string named_by = manifest_path + " shard " + std::to_string(i);
      std::string file, idx;
      Status inside = ResolveInsideDirectory(absolute, shard.file, options.allow_external_paths,
                                             named_by, &file);
      if (inside.ok() && manifest.format == DatasetFormat::kRecordIO) {
        inside = ResolveInsideDirectory(
            absolute, shard.index.empty() ? IndexPathFor(shard.file) : shard.index,
            options.allow_external_paths, named_by + " index", &idx);
      }
      if (!inside.ok()) {
        report->problems.push_back(inside.ToString());
        continue;
      }
      if (!PathExists(file)) {
        report->problems.push_back(file + ": shard listed in the manifest does not exist");
        continue;
      }
      if (manifest.format == DatasetFormat::kRecordIO) {
        VerifyRecordIOShard(file, idx, static_cast<int64_t>(shard.records), report);
        CheckChecksum(file, shard.xxh64, report);
        // A lazily opened dataset trusts these to identify its node-cache
        // copies: checked like the .rec's.
        if (!shard.index_xxh64.empty() && PathExists(idx)) {
          CheckChecksum(idx, shard.index_xxh64, report);
        }
      } else {
        VerifyLmdbShard(file, false, static_cast<int64_t>(shard.records), report);
        CheckChecksum(JoinPath(file, "data.mdb"), shard.xxh64, report);
      }
    }
    return Status::OK();
  }
  // No manifest: open the dataset to learn its format and shards, then check
  // each record's framing (no checksums to compare).
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(absolute, options, &dataset);
  if (!status.ok()) {
    if (status.IsCorruption()) {
      report->problems.push_back(status.ToString());
      return Status::OK();
    }
    return status;
  }
  report->format = dataset->format();
  if (dataset->format() == DatasetFormat::kWebDataset) {
    dataset.reset();
    VerifyWebDataset(absolute, options, nullptr, report);
    return Status::OK();
  }
  for (const ShardInfo& shard : dataset->shards()) {
    switch (dataset->format()) {
      case DatasetFormat::kRecordIO:
        VerifyRecordIOShard(shard.path,
                            PathExists(IndexPathFor(shard.path)) ? IndexPathFor(shard.path) : "",
                            -1, report);
        break;
      case DatasetFormat::kLmdb:
      case DatasetFormat::kCaffeLmdb:
        VerifyLmdbShard(shard.path, dataset->format() == DatasetFormat::kCaffeLmdb, -1, report);
        break;
      default: {
        // ImageFolder: every file must be readable.
        report->shards_checked += 1;
        Record record;
        for (uint64_t i = 0; i < dataset->size(); ++i) {
          Status read = dataset->Read(i, &record);
          if (!read.ok()) report->problems.push_back(read.ToString());
          report->records_checked += 1;
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace gpufeed

