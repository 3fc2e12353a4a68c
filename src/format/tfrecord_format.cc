// TFRecord's registry entry and its sources: a TFRecord file, a directory of
// .tfrecord / .tfrec / .tfrecords files (natural order), a glob, a list file
// of paths, or a list of paths (options.webdataset.tars); no manifest, no
// writer. A cache warm copies each file.
#include <glob.h>

#include <algorithm>

#include "format/datasets.h"
#include "format/registry.h"
#include "format/tfrecord.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status CheckExists(const std::string& file, const std::string& named_by) {
  if (IsRegularFile(file)) return Status::OK();
  return Status::NotFound(file + ": the TFRecord file named by " + named_by + " does not exist");
}

void SortNaturally(std::vector<std::string>* files) {
  std::sort(files->begin(), files->end(), [](const std::string& a, const std::string& b) {
    return NaturalLess(a, b);
  });
}

Status ExpandGlob(const std::string& pattern, std::vector<std::string>* files) {
  glob_t matches{};
  int rc = glob(pattern.c_str(), 0, nullptr, &matches);
  for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
    std::string file = matches.gl_pathv[i];
    if (IsRegularFile(file) && !EndsWith(file, ".idx")) files->push_back(file);
  }
  globfree(&matches);
  if (files->empty()) return Status::NotFound(pattern + ": the pattern matches no TFRecord file");
  SortNaturally(files);
  return Status::OK();
}

// A file of paths, one a line (relative to its directory; '#' comments).
Status ReadFileList(const std::string& list_path, const std::string& text, bool allow_external,
                    std::vector<std::string>* files) {
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
    std::string named_by = list_path + " line " + std::to_string(line_number);
    std::string file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, line, allow_external, named_by, &file));
    GPUFEED_RETURN_IF_ERROR(CheckExists(file, named_by));
    files->push_back(file);
  }
  return Status::OK();
}

// A regular file: a TFRecord (its first header's CRC holds, or it is empty),
// a compressed one (NotSupported), or else a text list of TFRecord paths.
Status ResolveFile(const std::string& path, const DatasetOptions& options,
                   std::vector<std::string>* files) {
  UniqueFd fd;
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd, &file_size, &mtime_ns));
  std::string head(kTfRecordHeaderSize, '\0');
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), &head[0], head.size(), 0, path, &done));
  head.resize(done);
  GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTfRecord(head.data(), head.size(), path));
  uint64_t length = 0;
  if (head.empty() || IsTfRecordFileName(path) ||
      (head.size() == kTfRecordHeaderSize &&
       ParseTfRecordHeader(head.data(), path, 0, &length).ok())) {
    files->push_back(path);
    return Status::OK();
  }
  bool text = std::all_of(head.begin(), head.end(), [](char c) {
    return c == '\n' || c == '\r' || c == '\t' || (c >= ' ' && c < 0x7f);
  });
  if (!text) {
    return Status::Corruption(path + ": not a TFRecord (the length CRC at byte offset 0 does not "
                                     "match) nor a list of TFRecord paths");
  }
  std::string list;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(path, &list, uint64_t{64} << 20));
  GPUFEED_RETURN_IF_ERROR(ReadFileList(path, list, options.allow_external_paths, files));
  if (files->empty()) return Status::NotFound(path + ": the list names no TFRecord file");
  return Status::OK();
}

Status OpenFiles(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  std::vector<std::string> files;
  GPUFEED_RETURN_IF_ERROR(ResolveTfRecordFiles(request.path, request.options, &files));
  return OpenTfRecordDataset(request.path, files, request.options, request.store, dataset);
}

bool AllTfRecordNames(const std::vector<std::string>& files) {
  return std::all_of(files.begin(), files.end(), IsTfRecordFileName);
}

// A list of files or a glob is no path to stat: taken when tfrecord is
// asked for, or under auto when every name (or the pattern) is a TFRecord's.
// A TFRecord file is taken here too: its DALI index `<file>.idx` would
// otherwise pass for a Megatron prefix's under auto.
Status OpenBeforeStat(const OpenRequest& request, std::unique_ptr<Dataset>* dataset) {
  bool asked = request.options.format == kTfRecordFormat;
  if (request.options.webdataset.tars.empty() && IsTfRecordFileName(request.path) &&
      IsRegularFile(request.path)) {
    return OpenFiles(request, dataset);
  }
  const std::vector<std::string>& listed = request.options.webdataset.tars;
  if (!listed.empty() && (asked || AllTfRecordNames(listed))) return OpenFiles(request, dataset);
  if (listed.empty() && IsGlobPattern(request.path) && !PathExists(request.path) &&
      (asked || IsTfRecordFileName(request.path))) {
    return OpenFiles(request, dataset);
  }
  return Status::OK();
}

Status ClaimsDirectory(const DirectoryListing& listing, const OpenRequest&, bool* claimed) {
  *claimed = false;
  for (const DirectoryEntry& entry : listing.entries) {
    if (entry.is_regular_file && IsTfRecordFileName(entry.name)) *claimed = true;
  }
  return Status::OK();
}

// Opening scans (or checks the index of) every file; then every record is
// read: both CRCs, the Example's wire bytes, its image and label features.
void Verify(const VerifyRequest& request, VerifyReport* report) {
  std::unique_ptr<Dataset> opened;
  const Dataset* dataset = DatasetToVerify(request, kTfRecordFormat, &opened, report);
  if (dataset == nullptr) return;
  ReadEveryRecord(*dataset, report);
  report->shards_checked += dataset->shards().size();
}

Status WarmSources(const Dataset& dataset, std::vector<WarmSource>* sources) {
  return WarmEachShardFile(dataset, nullptr, sources);
}

}  // namespace

bool IsTfRecordFileName(const std::string& name) {
  return EndsWith(name, ".tfrecord") || EndsWith(name, ".tfrec") || EndsWith(name, ".tfrecords");
}

bool IsGlobPattern(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

Status ResolveTfRecordFiles(const std::string& path, const DatasetOptions& options,
                            std::vector<std::string>* files) {
  files->clear();
  if (!options.webdataset.tars.empty()) {
    for (const std::string& file : options.webdataset.tars) {
      files->push_back(AbsolutePath(file));
      GPUFEED_RETURN_IF_ERROR(CheckExists(files->back(), "the list of files"));
    }
    return Status::OK();
  }
  if (IsGlobPattern(path) && !PathExists(path)) return ExpandGlob(path, files);
  if (!IsDirectory(path)) return ResolveFile(path, options, files);
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(path, &entries));
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_regular_file || !IsTfRecordFileName(entry.name)) continue;
    std::string file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(path, entry.name, options.allow_external_paths,
                                                   JoinPath(path, entry.name), &file));
    files->push_back(file);
  }
  if (files->empty()) {
    return Status::NotFound(path + ": no .tfrecord, .tfrec or .tfrecords files (name others with "
                                   "a glob such as \"" + JoinPath(path, "train-*") +
                            "\" or a list)");
  }
  SortNaturally(files);
  return Status::OK();
}

const FormatEntry& TfRecordFormat() {
  static const FormatEntry entry = [] {
    FormatEntry e;
    e.format = kTfRecordFormat;
    e.name = "tfrecord";
    e.open_before_stat = OpenBeforeStat;
    e.open_directory = OpenFiles;
    e.claims_directory = ClaimsDirectory;
    e.open_file = OpenFiles;
    e.claims_file_name = IsTfRecordFileName;
    e.file_names = "a .tfrecord";
    e.verify = Verify;
    e.warm_sources = WarmSources;
    return e;
  }();
  return entry;
}

}  // namespace gpufeed
