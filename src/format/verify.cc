// Verify: the format (from the manifest, or by opening the dataset), then the
// format's own checks (FormatEntry::verify); every problem listed.

#include "format/datasets.h"
#include "format/manifest.h"
#include "format/registry.h"
#include "format/token_corpus.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

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

Status Verify(const std::string& path, const DatasetOptions& options, VerifyReport* report) {
  *report = VerifyReport();
  bool tokens = false;
  GPUFEED_RETURN_IF_ERROR(VerifyTokenCorpus(path, options, report, &tokens));
  if (tokens) return Status::OK();
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
    if (request.manifest == nullptr) {
      report->problems.push_back(absolute + ": gpufeed verify does not check " +
                                 FormatName(report->format) + " datasets");
    } else {
      // A token manifest (VerifyTokenCorpus did not take it): one that does
      // not identify its files.
      report->problems.push_back(manifest_path + " describes a " + FormatName(report->format) +
                                 " corpus but not every file's bytes, xxh64 and token_dtype: "
                                 "run `gpufeed index` on it again");
    }
    return Status::OK();
  }
  entry->verify(request, report);
  return Status::OK();
}

}  // namespace gpufeed
