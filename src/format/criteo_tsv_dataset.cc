// Criteo TSV datasets: a file, or a directory of files in natural order,
// one TabularSegment per file whose rows are its lines (criteo_tsv.h).
#include <algorithm>
#include <utility>

#include "format/criteo_line.h"
#include "format/criteo_tsv.h"
#include "format/datasets.h"
#include "format/manifest.h"
#include "format/tabular.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

bool IsCompressedName(const std::string& name) {
  for (const char* suffix : {".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip"}) {
    if (EndsWith(ToLower(name), suffix)) return true;
  }
  return false;
}

Status RefuseCompressed(const std::string& path) {
  return Status::NotSupported(path +
                              " is compressed: criteo_tsv reads plain text lines; "
                              "decompress it first (gunzip, zstd -d, ...)");
}

class CriteoTsvDataset final : public TabularDatasetBase {
 public:
  CriteoTsvDataset(std::string path, std::shared_ptr<Store> store, TabularTable table,
                   uint64_t block_bytes)
      : TabularDatasetBase(kCriteoTsvFormat, std::move(path), std::move(store), std::move(table),
                           block_bytes) {}
};

TabularSchema CriteoTsvSchema() {
  TabularSchema schema;
  schema.text = true;
  schema.label = TabularField{FieldType::kInt64, 1, 0, 0};
  schema.dense = TabularField{FieldType::kInt64, kCriteoDense, 0, 0};
  schema.sparse = TabularField{FieldType::kUint64, kCriteoSparse, 0, 0};
  return schema;
}

}  // namespace

Status ListCriteoTsvFiles(const std::string& path, const DatasetOptions& options,
                          std::vector<std::string>* files) {
  files->clear();
  if (!IsDirectory(path)) {
    if (!PathExists(path)) return Status::NotFound(path + ": no such file or directory");
    if (IsCompressedName(Basename(path))) return RefuseCompressed(path);
    files->push_back(path);
    return Status::OK();
  }
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(path, &entries));
  std::vector<std::string> names;
  for (const DirectoryEntry& entry : entries) {
    if (!entry.is_regular_file || StartsWith(entry.name, ".") || IsLineIndexName(entry.name) ||
        entry.name == kManifestName) {
      continue;
    }
    if (IsCompressedName(entry.name)) return RefuseCompressed(JoinPath(path, entry.name));
    names.push_back(entry.name);
  }
  if (names.empty()) {
    return Status::NotFound(path +
                            ": no files (format=\"criteo_tsv\" reads a TSV file or a "
                            "directory of them)");
  }
  std::sort(names.begin(), names.end(), NaturalLess);
  for (const std::string& name : names) {
    std::string file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(path, name, options.allow_external_paths,
                                                   JoinPath(path, name), &file));
    files->push_back(std::move(file));
  }
  return Status::OK();
}

// Opens `path` (a TSV file or a directory of them) as one table: each file
// with at least one line is a segment; the line indexes are loaded or built.
Status OpenCriteoTsvDataset(const std::string& path, const DatasetOptions& options,
                            const std::shared_ptr<Store>& store,
                            std::unique_ptr<Dataset>* dataset) {
  std::vector<std::string> files;
  GPUFEED_RETURN_IF_ERROR(ListCriteoTsvFiles(path, options, &files));
  const std::string fallback = LineIndexFallbackDirectory(options);
  TabularTable table;
  table.schema = CriteoTsvSchema();
  for (const std::string& name : files) {
    std::shared_ptr<const StoreFile> file;
    GPUFEED_RETURN_IF_ERROR(store->Open(name, std::string(), &file));
    LineIndex index;
    GPUFEED_RETURN_IF_ERROR(LoadOrBuildLineIndex(*file, fallback, &index));
    if (index.lines() == 0) continue;  // an empty file holds no rows
    TabularSegment segment;
    segment.first_row = table.rows;
    segment.rows = index.lines();
    segment.parts.push_back(TabularPart{table.files.size(), 0, 0});
    segment.line_offsets = index.offsets;
    table.files.push_back(std::move(file));
    table.segments.push_back(std::move(segment));
    table.rows += index.lines();
  }
  if (table.rows == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no lines in its files)");
  }
  *dataset = std::make_unique<CriteoTsvDataset>(path, store, std::move(table),
                                                options.tabular.block_bytes);
  return Status::OK();
}

}  // namespace gpufeed
