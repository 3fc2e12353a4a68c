// TFRecord datasets: files of tf.train.Example records, read in place at
// the offsets of a tfrecord2idx index (tfrecord.h); a sample is one record's
// encoded image and its label(s).
#include <cmath>

#include "format/datasets.h"
#include "format/tfrecord.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

struct TfShard {
  std::string path;
  std::shared_ptr<const StoreFile> file;
  std::vector<TfRecordEntry> entries;
};

// The index of `file`, from `<file>.idx` or the fallback directory, else
// built in one pass and saved beside the file (or in the fallback when the
// file's directory is read-only). An index whose records do not tile the
// file (stale: the file was rewritten or appended to) is built again.
Status LoadOrBuildIndex(const StoreFile& file, const std::string& fallback,
                        std::vector<TfRecordEntry>* entries) {
  const std::string& path = file.path();
  std::vector<std::string> candidates = {TfRecordIndexPathBeside(path)};
  if (!fallback.empty()) candidates.push_back(fallback);
  for (const std::string& candidate : candidates) {
    std::string text;
    if (!PathExists(candidate) || !ReadFileToString(candidate, &text).ok()) continue;
    Status parsed = ParseTfRecordIndex(text, candidate, entries);
    if (!parsed.ok()) {
      Log().warn("{}; building it again", parsed.ToString());
    } else if (TfRecordIndexMatches(*entries, file.size())) {
      return Status::OK();
    } else {
      Log().warn("{} is stale (its records do not cover the {} bytes of {}); building it again",
                 candidate, file.size(), path);
    }
  }
  Log().info("{} has no record index; scanning it once (saved as {})", path, candidates[0]);
  GPUFEED_RETURN_IF_ERROR(ScanTfRecords(
      path, file.size(),
      [&](uint64_t offset, size_t length, char* destination, size_t* done) {
        return file.ReadAt(offset, length, destination, done);
      },
      entries));
  std::string text;
  EncodeTfRecordIndex(*entries, &text);
  Status saved = WriteFileAtomically(candidates[0], text);
  if (!saved.ok() && candidates.size() > 1) {
    saved = CreateDirectories(Dirname(candidates[1]));
    if (saved.ok()) saved = WriteFileAtomically(candidates[1], text);
  }
  if (!saved.ok()) {
    Log().warn("could not save the record index of {} ({}); it is built again next time", path,
               saved.ToString());
  }
  return Status::OK();
}

// What a record holds for a sample: its image bytes and its labels.
struct ExampleFields {
  std::string_view image;
  std::vector<float> labels;
  bool found_image = false;
  bool found_label = false;
  bool integer_label = true;
};

class TfRecordDataset final : public DatasetBase {
 public:
  TfRecordDataset(std::string path, std::shared_ptr<Store> store, std::vector<std::string> images,
                  std::string label)
      : DatasetBase(kTfRecordFormat, std::move(path), std::move(store)),
        image_keys_(std::move(images)),
        label_key_(std::move(label)) {
    integer_labels_ = true;
  }

  Status AddFile(const std::string& file_path, const DatasetOptions& options) {
    auto shard = std::make_unique<TfShard>();
    shard->path = file_path;
    GPUFEED_RETURN_IF_ERROR(store_->Open(file_path, std::string(), &shard->file));
    char head[kTfRecordHeaderSize];
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(shard->file->ReadAt(0, sizeof(head), head, &done));
    GPUFEED_RETURN_IF_ERROR(CheckNotCompressedTfRecord(head, done, file_path));
    GPUFEED_RETURN_IF_ERROR(LoadOrBuildIndex(*shard->file, TfRecordIndexFallback(file_path, options),
                                             &shard->entries));
    ShardInfo info;
    info.path = file_path;
    info.first_record = total_;
    info.records = shard->entries.size();
    info.bytes = shard->file->size();
    shards_.push_back(info);
    first_records_.push_back(total_);
    total_ += info.records;
    files_.push_back(std::move(shard));
    return Status::OK();
  }

  // The labels' dtype follows the first record's label list.
  Status SetLabelKind() {
    if (total_ == 0) return Status::OK();
    const TfShard& shard = *files_[0];
    std::string bytes(shard.entries[0].size, '\0');
    size_t done = 0;
    GPUFEED_RETURN_IF_ERROR(shard.file->ReadAt(shard.entries[0].offset, bytes.size(), &bytes[0],
                                               &done));
    Record record;
    return Build(0, bytes.data(), done, &record, &integer_labels_);
  }

  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data, size_t size,
                      Record* record) const override;
  bool CanLocate() const override { return total_ > 0; }

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    return files_[ShardContaining(first_records_, index)]->file.get();
  }

 private:
  // Checks the framing of the record's bytes and builds the sample;
  // *integer_label (when given): whether its label list is an int64_list.
  Status Build(uint64_t index, const char* bytes, size_t size, Record* record,
               bool* integer_label = nullptr) const;
  Status Fields(std::string_view example, ExampleFields* fields) const;

  std::vector<std::string> image_keys_;
  std::string label_key_;
  std::vector<std::unique_ptr<TfShard>> files_;
  std::vector<uint64_t> first_records_;
  uint64_t total_ = 0;
};

Status TfRecordDataset::Fields(std::string_view example, ExampleFields* fields) const {
  size_t image_rank = image_keys_.size();
  std::vector<std::string_view> values;
  std::vector<int64_t> integers;
  return ForEachTfFeature(example, [&](std::string_view key, TfFeatureKind kind,
                                       std::string_view list) -> Status {
    for (size_t i = 0; i < image_rank && kind == TfFeatureKind::kBytes; ++i) {
      if (key != image_keys_[i]) continue;
      GPUFEED_RETURN_IF_ERROR(TfBytesValues(list, &values));
      if (values.empty()) break;
      fields->image = values[0];
      fields->found_image = true;
      image_rank = i;  // an earlier key wins over a later one
    }
    if (key != label_key_) return Status::OK();
    if (kind == TfFeatureKind::kFloat) {
      GPUFEED_RETURN_IF_ERROR(TfFloatValues(list, &fields->labels));
      fields->integer_label = false;
    } else if (kind == TfFeatureKind::kInt64) {
      GPUFEED_RETURN_IF_ERROR(TfInt64Values(list, &integers));
      fields->labels.clear();
      for (int64_t value : integers) {
        if (value > (int64_t{1} << 24) || value < -(int64_t{1} << 24)) {
          return Status::Corruption("label " + std::to_string(value) + " of \"" + label_key_ +
                                    "\" is beyond 2^24 (not a class index)");
        }
        fields->labels.push_back(static_cast<float>(value));
      }
      fields->integer_label = true;
    } else {
      return Status::Corruption("feature \"" + label_key_ + "\" is a " +
                                TfFeatureKindName(kind) + ", not an int64_list or float_list");
    }
    fields->found_label = !fields->labels.empty();
    return Status::OK();
  });
}

Status TfRecordDataset::Build(uint64_t index, const char* bytes, size_t size, Record* record,
                              bool* integer_label) const {
  size_t file_index = ShardContaining(first_records_, index);
  const TfShard& shard = *files_[file_index];
  const TfRecordEntry& entry = shard.entries[index - first_records_[file_index]];
  const std::string where = shard.path + ": the record at byte offset " +
                            std::to_string(entry.offset) + " (sample " + std::to_string(index) +
                            ")";
  std::string_view example;
  Status status = CheckTfRecord(bytes, size, shard.path, entry.offset, &example);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  ExampleFields fields;
  status = Fields(example, &fields);
  if (!status.ok()) return Status::Corruption(where + ": " + status.message());
  if (!fields.found_image || !fields.found_label) {
    std::string keys;
    for (const std::string& key : image_keys_) keys += (keys.empty() ? "\"" : ", \"") + key + "\"";
    return Status::Corruption(where + " has no " +
                              (fields.found_image ? "label feature \"" + label_key_ + "\""
                                                  : "image feature (a bytes_list " + keys + ")") +
                              " (set image_key / label_key)");
  }
  if (integer_label != nullptr) *integer_label = fields.integer_label;
  record->data.assign(fields.image.data(), fields.image.size());
  record->labels = std::move(fields.labels);
  record->key = Basename(shard.path) + "#" + std::to_string(index - first_records_[file_index]);
  record->id = index;
  record->shape.clear();
  record->encoded = true;
  record->layout = Record::PixelLayout::kChw;
  record->source = shard.path + " at byte offset " + std::to_string(entry.offset);
  return Status::OK();
}

Status TfRecordDataset::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  size_t file_index = ShardContaining(first_records_, index);
  const TfShard& shard = *files_[file_index];
  const TfRecordEntry& entry = shard.entries[index - first_records_[file_index]];
  thread_local std::string bytes;
  bytes.resize(entry.size);
  size_t done = 0;
  Status status = shard.file->ReadAt(entry.offset, entry.size, &bytes[0], &done);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  return Build(index, bytes.data(), done, record);
}

bool TfRecordDataset::Locate(uint64_t index, RecordLocation* location) const {
  if (index >= total_) return false;
  size_t file_index = ShardContaining(first_records_, index);
  const TfShard& shard = *files_[file_index];
  const TfRecordEntry& entry = shard.entries[index - first_records_[file_index]];
  return LocateRange(*shard.file, shard.path, entry.offset, entry.size, location);
}

Status TfRecordDataset::ParseLocated(uint64_t index, const RecordLocation& location,
                                     const char* data, size_t size, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  const TfShard& shard = *files_[ShardContaining(first_records_, index)];
  FileView engine_view;  // what the engine read: counted, never read again
  engine_view.local = location.local;
  shard.file->Count(engine_view, size);
  return Build(index, data, size, record);
}

}  // namespace

std::string TfRecordIndexPathBeside(const std::string& file) { return file + ".idx"; }

std::string TfRecordIndexFallback(const std::string& file, const DatasetOptions& options) {
  std::string directory = IndexFallbackDirectory(options.webdataset.index_dir,
                                                 options.cache.cache_dir, "tfrecord-index");
  return directory.empty() ? std::string() : IndexPathInDirectory(file, directory, ".idx");
}

Status OpenTfRecordDataset(const std::string& path, const std::vector<std::string>& files,
                           const DatasetOptions& options, const std::shared_ptr<Store>& store,
                           std::unique_ptr<Dataset>* dataset) {
  if (files.empty()) return Status::NotFound(path + ": no TFRecord files (format=\"tfrecord\")");
  // WebDatasetOptions' defaults (jpg;jpeg;png;webp, cls) mean TFRecord's own.
  const WebDatasetOptions defaults;
  std::vector<std::string> images = options.webdataset.image_keys;
  if (images == defaults.image_keys) images = {"image/encoded"};
  std::string label = options.webdataset.label_key;
  if (label == defaults.label_key) label = "image/class/label";
  if (images.empty() || label.empty()) {
    return Status::InvalidArgument("tfrecord: image_key and label_key must not be empty");
  }
  auto result = std::make_unique<TfRecordDataset>(path, store, images, label);
  for (const std::string& file : files) GPUFEED_RETURN_IF_ERROR(result->AddFile(file, options));
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no records in its files)");
  }
  GPUFEED_RETURN_IF_ERROR(result->SetLabelKind());
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
