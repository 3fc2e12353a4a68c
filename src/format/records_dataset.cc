// The records dataset: each file one segment of a TabularTable whose only
// part is the file itself (stride: the record size, data from byte 0).
#include <algorithm>
#include <utility>

#include "format/datasets.h"
#include "format/records.h"
#include "format/tabular.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

class RecordsDataset : public TabularDatasetBase {
 public:
  RecordsDataset(std::string path, std::shared_ptr<Store> store, TabularTable table,
                 uint64_t block_bytes, bool integer_labels)
      : TabularDatasetBase(kRecordsFormat, std::move(path), std::move(store), std::move(table),
                           block_bytes) {
    integer_labels_ = integer_labels;
  }
};

bool IsFloat(FieldType type) {
  return type == FieldType::kFloat16 || type == FieldType::kFloat32 || type == FieldType::kFloat64;
}

// The schema as a TabularSchema of one part: label, dense, sparse packed.
TabularSchema TableSchema(const RecordSchema& record) {
  TabularSchema schema;
  schema.text = false;
  schema.label = TabularField{record.label, 1, 0, 0};
  schema.dense = TabularField{record.dense, record.dense_count, 0, FieldTypeSize(record.label)};
  schema.sparse = TabularField{
      record.sparse, record.sparse_count, 0,
      schema.dense.offset + FieldTypeSize(record.dense) * uint64_t{record.dense_count}};
  return schema;
}

// Corruption unless `file`'s size is whole records, and what the manifest
// says of it (when it says it).
Status CheckFileSize(const StoreFile& file, const RecordsFileSpec& spec,
                     const RecordSchema& schema) {
  const uint64_t size = file.size();
  const uint64_t record = schema.record_bytes();
  if (spec.expected_bytes != 0 && size != spec.expected_bytes) {
    return Status::Corruption(file.path() + ": the file ends at byte offset " +
                              std::to_string(size) + " but the manifest " + spec.described_by +
                              " says it holds " + std::to_string(spec.expected_bytes) +
                              " bytes (truncated or replaced since it was described?)");
  }
  if (size % record != 0) {
    return Status::Corruption(file.path() + ": its size, " + std::to_string(size) +
                              " bytes, is not a multiple of the record size " +
                              std::to_string(record) + " (" + DescribeRecordSchema(schema) +
                              "): " + std::to_string(size % record) + " bytes are left after " +
                              std::to_string(size / record) +
                              " records (a truncated file, or another record_schema?)");
  }
  if (spec.expected_records >= 0 && size / record != static_cast<uint64_t>(spec.expected_records)) {
    return Status::Corruption(file.path() + ": " + std::to_string(size / record) + " records of " +
                              std::to_string(record) + " bytes, but the manifest " +
                              spec.described_by + " says " + std::to_string(spec.expected_records) +
                              " (another record_schema than the one it was described with?)");
  }
  return Status::OK();
}

}  // namespace

Status CheckRecordSchema(const RecordSchema& schema) {
  for (const auto& [type, what] : {std::pair<FieldType, const char*>{schema.label, "label"},
                                   {schema.dense, "dense"},
                                   {schema.sparse, "sparse"}}) {
    if (FieldTypeSize(type) == 0) {
      return Status::InvalidArgument(std::string("record_schema: the ") + what + " field type " +
                                     std::to_string(static_cast<int>(type)) + " is no FieldType");
    }
  }
  return Status::OK();
}

std::string DescribeRecordSchema(const RecordSchema& schema) {
  return std::string(FieldTypeName(schema.label)) + " label, " +
         std::to_string(schema.dense_count) + " x " + FieldTypeName(schema.dense) + " dense, " +
         std::to_string(schema.sparse_count) + " x " + FieldTypeName(schema.sparse) +
         " sparse = " + std::to_string(schema.record_bytes()) + " bytes";
}

bool IsSkippedRecordsName(const std::string& name) {
  return name.empty() || name[0] == '.' || EndsWith(name, ".json") || EndsWith(name, ".idx") ||
         EndsWith(name, ".md") || EndsWith(name, ".txt");
}

Status ListRecordsFiles(const std::string& directory, bool allow_external_paths,
                        std::vector<std::string>* files) {
  std::vector<DirectoryEntry> entries;
  GPUFEED_RETURN_IF_ERROR(ListDirectory(directory, &entries));
  std::vector<std::string> names;
  for (const DirectoryEntry& entry : entries) {
    if (entry.is_regular_file && !IsSkippedRecordsName(entry.name)) names.push_back(entry.name);
  }
  if (names.empty()) {
    return Status::NotFound(directory +
                            ": no records files (format=\"records\" reads every "
                            "regular file but hidden, *.json, *.idx, *.md and *.txt ones)");
  }
  std::sort(names.begin(), names.end(), NaturalLess);
  files->clear();
  for (const std::string& name : names) {
    std::string file;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(directory, name, allow_external_paths,
                                                   JoinPath(directory, name), &file));
    files->push_back(std::move(file));
  }
  return Status::OK();
}

Status OpenRecordsDataset(const std::string& path, const std::vector<RecordsFileSpec>& files,
                          const DatasetOptions& options, const std::shared_ptr<Store>& store,
                          std::unique_ptr<Dataset>* dataset) {
  const RecordSchema& schema = options.tabular.record_schema;
  GPUFEED_RETURN_IF_ERROR(CheckRecordSchema(schema));
  if (options.tabular.block_bytes == 0) {
    return Status::InvalidArgument("block_bytes must be at least 1 (bytes of rows read together)");
  }
  const uint64_t record = schema.record_bytes();
  TabularTable table;
  table.schema = TableSchema(schema);
  for (const RecordsFileSpec& spec : files) {
    std::shared_ptr<const StoreFile> file;
    GPUFEED_RETURN_IF_ERROR(store->Open(spec.path, spec.xxh64, &file));
    GPUFEED_RETURN_IF_ERROR(CheckFileSize(*file, spec, schema));
    const uint64_t rows = file->size() / record;
    if (rows == 0) continue;  // an empty file: no segment
    TabularSegment segment;
    segment.first_row = table.rows;
    segment.rows = rows;
    segment.parts.push_back(TabularPart{table.files.size(), 0, record});
    table.files.push_back(std::move(file));
    table.segments.push_back(std::move(segment));
    table.rows += rows;
  }
  if (table.rows == 0) {
    return Status::InvalidArgument(path + ": no records (every file is empty)");
  }
  *dataset = std::make_unique<RecordsDataset>(path, store, std::move(table),
                                              options.tabular.block_bytes, !IsFloat(schema.label));
  return Status::OK();
}

}  // namespace gpufeed
