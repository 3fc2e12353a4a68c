// Verify: the format (a verify_before_stat hook that takes the path, the
// manifest, or the dataset opened), then the format's own checks
// (FormatEntry::verify); every problem listed.
#include <algorithm>

#include "format/datasets.h"
#include "format/manifest.h"
#include "format/registry.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

const Dataset* DatasetToVerify(const VerifyRequest& request, DatasetFormat format,
                               std::unique_ptr<Dataset>* opened, VerifyReport* report) {
  if (request.dataset != nullptr) return request.dataset;
  DatasetOptions options = request.options;
  options.format = format;
  Status status = Dataset::Open(request.path, options, opened);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return nullptr;
  }
  return opened->get();
}

void ReadEveryRecord(const Dataset& dataset, VerifyReport* report) {
  Record record;
  uint64_t reported = 0;
  for (uint64_t i = 0; i < dataset.size(); ++i) {
    Status read = dataset.Read(i, &record);
    if (!read.ok() && reported++ < 100) report->problems.push_back(read.ToString());
    report->records_checked += 1;
  }
}

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

namespace {

// The verify_before_stat hooks, as Dataset::Open asks open_before_stat:
// the format asked for, or each in registry order (a shared hook once).
Status VerifyBeforeStat(const std::string& path, const DatasetOptions& options,
                        VerifyReport* report, bool* taken) {
  *taken = false;
  const FormatEntry* requested = FindFormat(options.format);
  std::vector<decltype(FormatEntry::verify_before_stat)> tried;
  for (const FormatEntry* entry : RegisteredFormats()) {
    if (entry->verify_before_stat == nullptr || (requested != nullptr && entry != requested)) {
      continue;
    }
    if (std::find(tried.begin(), tried.end(), entry->verify_before_stat) != tried.end()) continue;
    tried.push_back(entry->verify_before_stat);
    GPUFEED_RETURN_IF_ERROR(entry->verify_before_stat(path, options, report, taken));
    if (*taken) return Status::OK();
  }
  return Status::OK();
}

}  // namespace

Status Verify(const std::string& path, const DatasetOptions& options, VerifyReport* report) {
  *report = VerifyReport();
  bool taken = false;
  GPUFEED_RETURN_IF_ERROR(VerifyBeforeStat(path, options, report, &taken));
  if (taken) return Status::OK();
  std::string absolute = AbsolutePath(path);
  if (!PathExists(absolute)) return Status::FromErrno(ENOENT, absolute);
  // A dataset's manifest stands for its directory, as for Dataset::Open.
  if (Basename(absolute) == kManifestName) absolute = Dirname(absolute);
  // The manifest is read as Dataset::Open reads it: unless the format asked
  // for has none (ImageFolder, Caffe LMDB), and only when it names that format.
  const FormatEntry* requested = FindFormat(options.format);
  VerifyRequest request{absolute, options, nullptr, "", nullptr};
  std::string manifest_path = JoinPath(absolute, kManifestName);
  Manifest manifest;
  std::unique_ptr<Dataset> dataset;
  if (IsDirectory(absolute) && PathExists(manifest_path) &&
      (requested == nullptr || requested->reads_manifest)) {
    // The manifest names the format, the shards, their sizes and checksums.
    Status status = ReadManifest(manifest_path, &manifest);
    if (!status.ok()) {
      report->problems.push_back(status.ToString());
      return Status::OK();
    }
    if (requested != nullptr && requested->format != manifest.format) {
      return Status::InvalidArgument(manifest_path + " describes a " +
                                     FormatName(manifest.format) + " dataset, but format=\"" +
                                     requested->name + "\" was asked for");
    }
    report->format = manifest.format;
    request.manifest = &manifest;
    request.manifest_path = manifest_path;
  } else {
    // No manifest: open the dataset to learn its format and shards, then
    // check each record's framing (no checksums to compare).
    Status status = Dataset::Open(absolute, options, &dataset);
    if (!status.ok()) {
      if (!status.IsCorruption()) return status;
      report->problems.push_back(status.ToString());
      return Status::OK();
    }
    report->format = dataset->format();
    request.dataset = dataset.get();
  }
  const FormatEntry* entry = FindFormat(report->format);
  if (entry == nullptr || entry->verify == nullptr) {
    report->problems.push_back(absolute + ": gpufeed verify does not check " +
                               FormatName(report->format) + " datasets");
    return Status::OK();
  }
  entry->verify(request, report);
  return Status::OK();
}

}  // namespace gpufeed
