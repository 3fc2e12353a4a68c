// ImageFolder's registry entry: root/<class>/<image>, as torchvision reads
// it. Under format=auto it takes any directory no other format claimed.
#include "format/datasets.h"
#include "format/registry.h"

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

}  // namespace

const FormatEntry& ImageFolderFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kImageFolder;
    e.name = "imagefolder";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.verify = Verify;
    e.reads_manifest = false;  // an ImageFolder has none; a gpufeed.json here is another dataset's
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
