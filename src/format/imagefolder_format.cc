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

}  // namespace

const FormatEntry& ImageFolderFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = DatasetFormat::kImageFolder;
    e.name = "imagefolder";
    e.open_directory = OpenDirectory;
    e.claims_directory = ClaimsDirectory;
    e.reads_manifest = false;  // an ImageFolder has none; a gpufeed.json here is another dataset's
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
