// criteo_npy's registry entry: a directory of TorchRec's .npy triplets
// (format/criteo_npy.h). Under format=auto it takes a directory holding at
// least one complete triplet that no format before it took. verify checks
// every triplet's headers, sizes and row counts; a cache warm copies the
// three files of every triplet. No manifest and no writer.
#include "format/criteo_npy.h"
#include "format/registry.h"
#include "format/tabular.h"

namespace gpufeed {

namespace {

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenCriteoNpyDataset(request.path, request.options, request.store, dataset);
}

Status ClaimsDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  for (const CriteoStem& stem : FindCriteoStems(listing.entries)) {
    if (stem.complete()) *claimed = true;
  }
  return Status::OK();
}

// The rows hold no framing to walk: every triplet's headers, file sizes,
// shapes and row counts are checked again from the source (a node cache's
// copies are not consulted), every problem listed. There is no manifest,
// so no checksum.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::shared_ptr<Store> store = NewPosixStore();
  CriteoScan scan;
  Status status = ScanCriteoNpy(request.path, request.options.allow_external_paths, store.get(),
                                /*first_only=*/false, &scan);
  if (!status.ok()) {
    report->problems.push_back(status.ToString());
    return;
  }
  report->shards_checked += scan.stems;
  for (const CriteoTriplet& triplet : scan.triplets) report->records_checked += triplet.rows();
  for (const Status& problem : scan.problems) report->problems.push_back(problem.ToString());
  if (scan.stems == 0) {
    report->problems.push_back(request.path + ": no criteo_npy triplets");
  }
}

// The store reads each triplet's three files as they are: keyed on their
// size and mtime, the dense file counted as the triplet's shard.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  const TabularRows* rows = AsTabularRows(dataset);
  if (rows == nullptr) {
    return Status::InvalidArgument(dataset.path() + " is not a criteo_npy dataset");
  }
  const TabularTable& table = rows->table();
  for (const TabularSegment& segment : table.segments) {
    for (size_t p = 0; p < segment.parts.size(); ++p) {
      WarmSource warm;
      GPUFEED_RETURN_IF_ERROR(
          StatCacheSource(table.files[segment.parts[p].file]->path(), &warm.source));
      warm.counts_as_shard = p == 0;
      sources->push_back(std::move(warm));
    }
  }
  return Status::OK();
}

}  // namespace

const FormatEntry& CriteoNpyFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = kCriteoNpyFormat;
    e.name = "criteo_npy";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.verify = Verify;
    e.warm_sources = WarmSources;
    e.reads_manifest = false;  // the triplets describe themselves; a gpufeed.json is another's
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
