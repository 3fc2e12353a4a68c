// ImageFolder's registry entry: root/<class>/<image>, as torchvision reads
// it. Under format=auto it takes any directory no other format claimed. A
// cache warm copies the bundles the dataset reads its files in.
#include "format/datasets.h"
#include "format/registry.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status OpenDirectory(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  return OpenImageFolderDataset(request.path, request.store, dataset);
}

Status ClaimsDirectory(const DirectoryListing&, const OpenRequest&, bool* claimed) {
  *claimed = true;  // the last format asked; the directory is not empty
  return Status::OK();
}

// Every file must be read: an ImageFolder has no framing of its own.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  report->shards_checked += 1;
  Record record;
  for (uint64_t i = 0; i < request.dataset->size(); ++i) {
    Status read = request.dataset->Read(i, &record);
    if (!read.ok()) report->problems.push_back(read.ToString());
    report->records_checked += 1;
  }
}

// The bundles of the dataset (storage/store.h), with the names and members
// the dataset gives them, so the keys a loader looks up. Their sizes are
// not known before they are read: nothing is stat'ed.
Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  std::vector<std::string> classes;
  std::vector<ImageFolderEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ScanImageFolder(dataset.path(), &classes, &entries));
  for (ImageFolderBundle& bundle : ImageFolderBundles(dataset.path(), entries)) {
    WarmSource warm;
    warm.source.path = JoinPath(dataset.path(), bundle.name);
    warm.source.members = std::move(bundle.members);
    sources->push_back(std::move(warm));
  }
  return Status::OK();
}

}  // namespace

const FormatEntry& ImageFolderFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kImageFolder;
    e.name = "imagefolder";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.verify = Verify;
    e.warm_sources = WarmSources;
    e.reads_manifest = false;  // an ImageFolder has none; a gpufeed.json here is another dataset's
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
