// ImageFolder datasets: root/<class>/<file>, as torchvision's ImageFolder.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "format/datasets.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

// torchvision.datasets.folder.IMG_EXTENSIONS, compared case-insensitively.
constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};

// Collects (directory, sorted file names) for `directory` and everything
// below it, following symlinks but never entering a directory twice.
Status WalkDirectory(const std::string& directory,
                     std::set<std::pair<dev_t, ino_t>>* visited,
                     std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  struct stat st;
  if (::stat(directory.c_str(), &st) != 0) return Status::FromErrno(errno, directory);
  if (!visited->insert({st.st_dev, st.st_ino}).second) return Status::OK();  // a symlink loop
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  std::vector<std::string> files;
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_directory) files.push_back(entry.name);
  }
  out->emplace_back(directory, std::move(files));
  for (const DirectoryEntry& entry : entries) {
    if (entry.is_directory) {
      GPUFEED_RETURN_IF_ERROR(WalkDirectory(JoinPath(directory, entry.name), visited, out));
    }
  }
  return Status::OK();
}

class ImageFolderDataset final : public DatasetBase {
 public:
  ImageFolderDataset(std::string path, std::shared_ptr<Store> store)
      : DatasetBase(DatasetFormat::kImageFolder, std::move(path), std::move(store)) {
    integer_labels_ = true;
  }

  Status Open() {
    GPUFEED_RETURN_IF_ERROR(ScanImageFolder(path_, &classes_, &entries_));
    ShardInfo info;
    info.path = path_;
    info.records = entries_.size();
    shards_.push_back(info);
    // Bundles of kBundleFiles consecutive files (sorted by class, then
    // directory, then name): a node cache keeps each as one entry. Nothing
    // is opened or stat'ed here.
    for (const ImageFolderBundle& bundle : ImageFolderBundles(path_, entries_)) {
      std::shared_ptr<const StoreBundle> opened;
      GPUFEED_RETURN_IF_ERROR(store_->OpenBundle(bundle.name, bundle.members, &opened));
      bundles_.push_back(std::move(opened));
    }
    return Status::OK();
  }

  uint64_t size() const override { return entries_.size(); }

  // Without a node cache the read engine reads the file by path; with one,
  // a member of a bundle whose copy is complete is a byte range of that
  // copy, and any other is read through the store (Read), which fills it.
  bool Locate(uint64_t index, RecordLocation* location) const override {
    if (index >= entries_.size()) return false;
    const StoreBundle& bundle = *bundles_[index / kBundleFiles];
    if (bundle.cached()) {
      FileView view;
      uint64_t offset = 0, length = 0;
      if (!bundle.LocateMember(index % kBundleFiles, &view, &offset, &length)) return false;
      if (length == 0) return false;
      SetLocation(view.shown, offset, length, std::move(view), location);
      return true;
    }
    location->path = JoinPath(path_, entries_[index].relative_path);
    location->offset = 0;
    location->length = 0;
    location->whole_file = true;
    return true;
  }

  // Whole files or copies' ranges: either way the engine has work.
  bool CanLocate() const override { return !entries_.empty(); }

  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                      size_t size, Record* record) const override {
    GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
    const ImageFolderEntry& entry = entries_[index];
    if (!location.whole_file && size != location.length) {
      return Status::Corruption(location.path + ": " + std::to_string(size) + " bytes of sample " +
                                std::to_string(index) + " where " +
                                std::to_string(location.length) + " were expected");
    }
    record->data.assign(data, size);
    Fill(index, entry, JoinPath(path_, entry.relative_path), record);
    return Status::OK();
  }

  Status Read(uint64_t index, Record* record) const override {
    GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
    const ImageFolderEntry& entry = entries_[index];
    Status status = bundles_[index / kBundleFiles]->ReadMember(index % kBundleFiles, &record->data);
    if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
    Fill(index, entry, JoinPath(path_, entry.relative_path), record);
    return Status::OK();
  }

 protected:
  const StoreUnit* UnitOf(uint64_t index) const override {
    return bundles_[index / kBundleFiles].get();
  }

 private:
  static void Fill(uint64_t index, const ImageFolderEntry& entry, const std::string& file,
                   Record* record) {
    record->labels.assign(1, static_cast<float>(entry.class_index));
    record->key = entry.relative_path;
    record->source = file;
    record->id = index;
    record->shape.clear();
    record->encoded = true;
  }

 public:

 private:
  std::vector<ImageFolderEntry> entries_;
  std::vector<std::shared_ptr<const StoreBundle>> bundles_;  // kBundleFiles entries each
};

}  // namespace

std::vector<ImageFolderBundle> ImageFolderBundles(const std::string& root,
                                                  const std::vector<ImageFolderEntry>& entries) {
  std::vector<ImageFolderBundle> bundles;
  for (size_t first = 0; first < entries.size(); first += kBundleFiles) {
    ImageFolderBundle bundle;
    char name[32];
    std::snprintf(name, sizeof(name), "bundle-%06zu", first / kBundleFiles);
    bundle.name = name;
    for (size_t i = first; i < entries.size() && i < first + kBundleFiles; ++i) {
      bundle.members.push_back(JoinPath(root, entries[i].relative_path));
    }
    bundles.push_back(std::move(bundle));
  }
  return bundles;
}

bool HasImageExtension(const std::string& name) {
  std::string lower = ToLower(name);
  for (const char* extension : kImageExtensions) {
    if (EndsWith(lower, extension)) return true;
  }
  return false;
}

Status ScanImageFolder(const std::string& root, std::vector<std::string>* classes,
                       std::vector<ImageFolderEntry>* entries) {
  classes->clear();
  entries->clear();
  std::vector<DirectoryEntry> top;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(root, &top));
  for (const DirectoryEntry& entry : top) {
    if (entry.is_directory) classes->push_back(entry.name);
  }
  if (classes->empty()) {
    return Status::NotFound(root + ": no class folders (an ImageFolder is root/<class>/<file>)");
  }
  std::vector<std::string> empty_classes;
  for (size_t class_index = 0; class_index < classes->size(); ++class_index) {
    const std::string& name = (*classes)[class_index];
    std::set<std::pair<dev_t, ino_t>> visited;
    std::vector<std::pair<std::string, std::vector<std::string>>> walk;
    GPUFEED_RETURN_IF_ERROR(WalkDirectory(JoinPath(root, name), &visited, &walk));
    // sorted(os.walk(...)): by directory path, then files by name.
    std::sort(walk.begin(), walk.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t before = entries->size();
    for (const auto& [directory, files] : walk) {
      std::string relative_directory = directory.substr(root.size() + (root.back() == '/' ? 0 : 1));
      for (const std::string& file : files) {
        if (!HasImageExtension(file)) continue;
        entries->push_back({JoinPath(relative_directory, file), static_cast<int64_t>(class_index)});
      }
    }
    if (entries->size() == before) empty_classes.push_back(name);
  }
  if (!empty_classes.empty()) {
    std::string list;
    for (size_t i = 0; i < empty_classes.size() && i < 10; ++i) {
      list += (i ? ", " : "") + empty_classes[i];
    }
    if (empty_classes.size() > 10) list += ", ...";
    return Status::NotFound(root + ": no image files (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                            ".webp) in class folder(s) " + list);
  }
  return Status::OK();
}

Status OpenImageFolderDataset(const std::string& path, const std::shared_ptr<Store>& store,
                              std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<ImageFolderDataset>(path, store);
  GPUFEED_RETURN_IF_ERROR(result->Open());
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
