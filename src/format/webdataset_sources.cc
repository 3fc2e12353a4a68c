// The tar files a WebDataset source names: a .tar, a directory of them, a
// brace pattern, a list file, a Python list, or a gpufeed.json.
#include <sys/stat.h>

#include "format/datasets.h"
#include "format/tar_index.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

constexpr const char* kCompressedTarSuffixes[] = {".tar.gz", ".tgz", ".tar.bz2", ".tar.xz",
                                                  ".tar.zst"};

bool IsCompressedTarName(const std::string& name) {
  for (const char* suffix : kCompressedTarSuffixes) {
    if (EndsWith(name, suffix)) return true;
  }
  return false;
}

Status CheckExists(const std::string& tar, const std::string& named_by) {
  if (IsRegularFile(tar)) return Status::OK();
  return Status::NotFound(tar + ": the tar named by " + named_by + " does not exist");
}

// One tar path per line, relative to the list's directory; blank lines and
// lines starting with '#' are ignored.
Status ReadTarList(const std::string& list_path, bool allow_external_paths,
                   std::vector<std::string>* tars) {
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(list_path, &text, uint64_t{64} << 20));
  std::string directory = Dirname(list_path);
  size_t start = 0;
  for (uint64_t line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (line.find('\0') != std::string::npos ||
        (!EndsWith(line, ".tar") && !IsCompressedTarName(line))) {
      return Status::InvalidArgument(list_path + " line " + std::to_string(line_number) +
                                     ": expected the path of a .tar file, got \"" +
                                     line.substr(0, 80) + "\"");
    }
    std::string named_by = list_path + " line " + std::to_string(line_number);
    std::string tar;
    GPUFEED_RETURN_IF_ERROR(
        ResolveInsideDirectory(directory, line, allow_external_paths, named_by, &tar));
    GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(tar));
    GPUFEED_RETURN_IF_ERROR(CheckExists(tar, named_by));
    tars->push_back(tar);
  }
  return Status::OK();
}

}  // namespace

bool IsWebDatasetShardName(const std::string& name) {
  return EndsWith(name, ".tar") || IsCompressedTarName(name);
}

Status CheckNotCompressedTar(const std::string& path) {
  if (!IsCompressedTarName(path)) return Status::OK();
  return Status::NotSupported(
      path +
      ": a compressed tar cannot be read at random offsets; decompress it once "
      "(gzip -dk, bzip2 -dk, xz -dk or zstd -d) and read the .tar it gives");
}

Status ResolveWebDatasetTars(const std::string& path, const DatasetOptions& options,
                             std::vector<std::string>* tars) {
  tars->clear();
  if (!options.webdataset.tars.empty()) {
    for (const std::string& tar : options.webdataset.tars) {
      tars->push_back(AbsolutePath(tar));
      GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(tars->back()));
      GPUFEED_RETURN_IF_ERROR(CheckExists(tars->back(), "the list of tars"));
    }
    return Status::OK();
  }
  if (path.find('{') != std::string::npos && !PathExists(path)) {
    GPUFEED_RETURN_IF_ERROR(ExpandBracePattern(path, tars));
    for (const std::string& tar : *tars) {
      GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(tar));
      GPUFEED_RETURN_IF_ERROR(CheckExists(tar, "the pattern " + path));
    }
    return Status::OK();
  }
  if (IsDirectory(path)) {
    std::vector<DirectoryEntry> entries;
    GPUFEED_RETURN_IF_ERROR(ListDirectory(path, &entries));
    std::string compressed;
    for (const DirectoryEntry& entry : entries) {
      if (!entry.is_regular_file) continue;
      if (IsCompressedTarName(entry.name)) compressed = JoinPath(path, entry.name);
      if (!EndsWith(entry.name, ".tar")) continue;
      std::string tar;
      GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(path, entry.name, options.allow_external_paths,
                                                     JoinPath(path, entry.name), &tar));
      tars->push_back(tar);
    }
    if (tars->empty() && !compressed.empty()) return CheckNotCompressedTar(compressed);
    if (tars->empty()) return Status::NotFound(path + ": no .tar files (format=\"webdataset\")");
    return Status::OK();
  }
  GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTar(path));
  if (EndsWith(path, ".tar")) {
    tars->push_back(path);
    return Status::OK();
  }
  return ReadTarList(path, options.allow_external_paths, tars);
}

Status OpenWebDatasetFromManifest(const std::string& directory, const Manifest& manifest,
                                  const DatasetOptions& options,
                                  const std::shared_ptr<Store>& store,
                                  std::unique_ptr<Dataset>* dataset) {
  std::string manifest_path = JoinPath(directory, kManifestName);
  std::vector<std::string> tars;
  for (size_t i = 0; i < manifest.shards.size(); ++i) {
    const std::string named_by = manifest_path + " shard " + std::to_string(i);
    std::string tar;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, manifest.shards[i].file,
                                                   options.allow_external_paths, named_by, &tar));
    GPUFEED_RETURN_IF_ERROR(CheckExists(tar, "the manifest " + manifest_path));
    uint64_t size = 0;
    GPUFEED_RETURN_IF_ERROR(FileSizeOf(tar, &size));
    if (manifest.shards[i].bytes != 0 && size != manifest.shards[i].bytes) {
      return Status::Corruption(tar + ": the file ends at byte offset " + std::to_string(size) +
                                " but the manifest " + manifest_path + " says it holds " +
                                std::to_string(manifest.shards[i].bytes) +
                                " bytes (truncated or replaced since it was packed?)");
    }
    tars.push_back(tar);
  }
  return OpenWebDatasetDataset(directory, tars, options, store, dataset, &manifest);
}

}  // namespace gpufeed
