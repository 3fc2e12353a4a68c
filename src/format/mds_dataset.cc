// MDS datasets: Streaming's shards read in place. A shard's offset table is
// read once, at the shard's first use; a sample is the byte range between
// two offsets, split into columns (format/mds.h). A zstd shard is
// decompressed once into a local file, which is then read like a raw one.
#include <sys/stat.h>

#include <algorithm>
#include <mutex>

#include "format/datasets.h"
#include "format/mds.h"
#include "util/file.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

namespace {

struct MdsShard {
  MdsShardInfo info;
  std::string source;  // the file index.json names (raw, or zip when zipped)
  std::string local;   // the file read: `source`, or the decompressed copy
  size_t image = 0;    // column indices
  size_t label = 0;
  mutable std::once_flag once;
  mutable Status ready;
  mutable std::shared_ptr<const StoreFile> file;
  mutable std::vector<uint32_t> offsets;
};

// The column `wanted` names, or the default when the caller kept it.
Status PickColumns(const WebDatasetOptions& options, const std::string& where, MdsShard* shard) {
  const std::vector<MdsColumn>& columns = shard->info.columns;
  auto find = [&](const std::string& name) -> size_t {
    for (size_t i = 0; i < columns.size(); ++i) {
      if (columns[i].name == name) return i;
    }
    return columns.size();
  };
  std::string names;
  for (const MdsColumn& c : columns)
    names += (names.empty() ? "" : ", ") + c.name + " (" + c.encoding + ")";
  bool default_image = options.image_keys == WebDatasetOptions().image_keys;
  shard->image = columns.size();
  // WebDataset's default extensions name no MDS column: the default is
  // the first column holding an image.
  for (size_t k = 0; !default_image && k < options.image_keys.size(); ++k) {
    if ((shard->image = find(options.image_keys[k])) < columns.size()) break;
  }
  for (size_t i = 0; default_image && shard->image == columns.size() && i < columns.size(); ++i) {
    if (IsMdsImageEncoding(columns[i].kind)) shard->image = i;
  }
  if (shard->image == columns.size()) {
    return Status::InvalidArgument(where + ": no image column (image_key) among " + names);
  }
  const MdsColumn& image = columns[shard->image];
  if (!IsMdsImageEncoding(image.kind) && image.kind != "bytes") {
    return Status::InvalidArgument(where + ": image column \"" + image.name + "\" holds " +
                                   image.encoding + ", not jpeg, png, pil or bytes");
  }
  shard->label = find(options.label_key);
  if (shard->label == columns.size() && options.label_key == WebDatasetOptions().label_key) {
    shard->label = find("label");
  }
  if (shard->label == columns.size()) {
    return Status::InvalidArgument(where + ": no label column \"" + options.label_key +
                                   "\" (label_key; default cls or label) among " + names);
  }
  const MdsColumn& label = columns[shard->label];
  if (!IsMdsIntegerEncoding(label.kind)) {
    return Status::InvalidArgument(where + ": label column \"" + label.name + "\" holds " +
                                   label.encoding + ", not an integer encoding");
  }
  return Status::OK();
}

class MdsDataset final : public DatasetBase {
 public:
  MdsDataset(std::string path, std::shared_ptr<Store> store, std::string fallback_dir)
      : DatasetBase(kMdsFormat, std::move(path), std::move(store)),
        fallback_dir_(std::move(fallback_dir)) {
    integer_labels_ = true;
  }

  void AddShard(std::unique_ptr<MdsShard> shard) {
    ShardInfo info;
    info.path = shard->source;
    info.first_record = total_;
    info.records = shard->info.samples;
    info.bytes = shard->info.zipped ? shard->info.zip.bytes : shard->info.raw.bytes;
    shards_.push_back(info);
    first_records_.push_back(total_);
    total_ += info.records;
    mds_.push_back(std::move(shard));
  }

  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data, size_t size,
                      Record* record) const override;
  bool CanLocate() const override { return total_ > 0; }

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    const MdsShard& shard = *mds_[ShardContaining(first_records_, index)];
    return Ready(shard).ok() ? shard.file.get() : nullptr;
  }

 private:
  // Opens the shard's file (decompressing a zstd shard first) and reads its
  // offset table, once; later calls return the first call's status.
  Status Ready(const MdsShard& shard) const {
    std::call_once(shard.once, [&] { shard.ready = Prepare(shard); });
    return shard.ready;
  }
  Status Prepare(const MdsShard& shard) const;
  Status LocalCopy(const MdsShard& shard, std::string* local) const;
  // The shard and the sample's byte range [begin, end).
  Status Range(uint64_t index, const MdsShard** shard, uint64_t* begin, uint64_t* end) const {
    GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
    size_t s = ShardContaining(first_records_, index);
    *shard = mds_[s].get();
    GPUFEED_RETURN_IF_ERROR(Ready(**shard));
    uint64_t local = index - first_records_[s];
    *begin = (*shard)->offsets[local];
    *end = (*shard)->offsets[local + 1];
    return Status::OK();
  }
  Status Build(const MdsShard& shard, uint64_t index, uint64_t begin, std::string_view bytes,
               Record* record) const;

  std::string fallback_dir_;
  std::vector<std::unique_ptr<MdsShard>> mds_;
  std::vector<uint64_t> first_records_;
  uint64_t total_ = 0;
};

// A zstd shard's raw bytes: the raw file beside it when there is one of the
// right size, else a copy decompressed once into the fallback directory
// (kept while it is newer than the zstd file and of the right size).
Status MdsDataset::LocalCopy(const MdsShard& shard, std::string* local) const {
  const MdsShardInfo& info = shard.info;
  std::string beside = JoinPath(Dirname(shard.source), info.raw.basename);
  struct stat raw_stat, zip_stat;
  if (stat(beside.c_str(), &raw_stat) == 0 && S_ISREG(raw_stat.st_mode) &&
      static_cast<uint64_t>(raw_stat.st_size) == info.raw.bytes) {
    *local = beside;
    return Status::OK();
  }
  if (fallback_dir_.empty()) {
    return Status::NotFound(shard.source +
                            ": no directory to decompress it into (set "
                            "index_dir or a cache_dir, or decompress it: zstd -d)");
  }
  *local = IndexPathInDirectory(shard.source, fallback_dir_, ".mds");
  if (stat(local->c_str(), &raw_stat) == 0 && stat(shard.source.c_str(), &zip_stat) == 0 &&
      static_cast<uint64_t>(raw_stat.st_size) == info.raw.bytes &&
      raw_stat.st_mtim.tv_sec >= zip_stat.st_mtim.tv_sec) {
    return Status::OK();
  }
  GPUFEED_RETURN_IF_ERROR(CreateDirectories(fallback_dir_));
  Log().info("decompressing {} into {} (once; later opens read the copy)", shard.source, *local);
  return DecompressMdsShard(shard.source, *local, info.raw.bytes);
}

Status MdsDataset::Prepare(const MdsShard& shard) const {
  std::string local = shard.source;
  if (shard.info.zipped) GPUFEED_RETURN_IF_ERROR(LocalCopy(shard, &local));
  GPUFEED_RETURN_IF_ERROR(store_->Open(local, std::string(), &shard.file));
  uint64_t samples = shard.info.samples;
  uint64_t header_size = 4 * (samples + 2);
  if (shard.file->size() < header_size) {
    return Status::Corruption(shard.source + ": " + std::to_string(shard.file->size()) +
                              " bytes cannot hold the offsets of " + std::to_string(samples) +
                              " samples (truncated?)");
  }
  std::string header(header_size, '\0');
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(shard.file->ReadAt(0, header_size, &header[0], &done));
  header.resize(done);
  return ParseMdsOffsets(header, samples, shard.file->size(), local, &shard.offsets);
}

Status MdsDataset::Build(const MdsShard& shard, uint64_t index, uint64_t begin,
                         std::string_view bytes, Record* record) const {
  uint64_t local = index - first_records_[ShardContaining(first_records_, index)];
  std::string where = shard.source + ": sample " + std::to_string(local) + " at byte offset " +
                      std::to_string(begin);
  thread_local std::vector<std::string_view> values;
  GPUFEED_RETURN_IF_ERROR(SplitMdsSample(bytes, shard.info.columns, where, &values));
  float label = 0;
  const MdsColumn& label_column = shard.info.columns[shard.label];
  GPUFEED_RETURN_IF_ERROR(MdsIntegerLabel(label_column, values[shard.label], where, &label));
  const MdsColumn& image = shard.info.columns[shard.image];
  record->shape.clear();
  record->encoded = image.kind != "pil";
  if (record->encoded) {
    record->data.assign(values[shard.image].data(), values[shard.image].size());
    record->layout = Record::PixelLayout::kChw;
  } else {
    int64_t height = 0, width = 0;
    GPUFEED_RETURN_IF_ERROR(
        MdsPilToRgb(image, values[shard.image], where, &record->data, &height, &width));
    record->shape = {height, width, 3};
    record->layout = Record::PixelLayout::kHwcRgb;
  }
  record->labels.assign(1, label);
  record->key = shard.info.raw.basename + ":" + std::to_string(local);
  record->id = index;
  record->source = where;
  return Status::OK();
}

Status MdsDataset::Read(uint64_t index, Record* record) const {
  const MdsShard* shard = nullptr;
  uint64_t begin = 0, end = 0;
  GPUFEED_RETURN_IF_ERROR(Range(index, &shard, &begin, &end));
  thread_local std::string bytes;
  bytes.resize(end - begin);
  size_t done = 0;
  GPUFEED_RETURN_IF_ERROR(shard->file->ReadAt(begin, end - begin, &bytes[0], &done));
  if (done < end - begin) {
    return Status::Corruption(shard->source + ": sample at byte offset " + std::to_string(begin) +
                              " runs past the end of the file (changed since it was opened?)");
  }
  return Build(*shard, index, begin, bytes, record);
}

bool MdsDataset::Locate(uint64_t index, RecordLocation* location) const {
  const MdsShard* shard = nullptr;
  uint64_t begin = 0, end = 0;
  if (!Range(index, &shard, &begin, &end).ok()) return false;  // Read says why
  return LocateRange(*shard->file, shard->source, begin, end - begin, location);
}

Status MdsDataset::ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                                size_t size, Record* record) const {
  const MdsShard* shard = nullptr;
  uint64_t begin = 0, end = 0;
  GPUFEED_RETURN_IF_ERROR(Range(index, &shard, &begin, &end));
  FileView engine_view;  // what the engine read: counted, never read again
  engine_view.local = location.local;
  shard->file->Count(engine_view, size);
  if (location.offset != begin || size != end - begin) {
    return Status::Corruption(shard->source + ": sample at byte offset " + std::to_string(begin) +
                              " was read as " + std::to_string(size) + " bytes at offset " +
                              std::to_string(location.offset) + " (the file changed?)");
  }
  return Build(*shard, index, begin, std::string_view(data, size), record);
}

}  // namespace

Status OpenMdsDataset(const std::string& directory, const DatasetOptions& options,
                      const std::shared_ptr<Store>& store, std::unique_ptr<Dataset>* dataset) {
  std::string index_path = JoinPath(directory, "index.json");
  std::string text;
  GPUFEED_RETURN_IF_ERROR(ReadFileToString(index_path, &text, uint64_t{1} << 30));
  std::vector<MdsShardInfo> infos;
  GPUFEED_RETURN_IF_ERROR(ParseMdsIndex(text, index_path, &infos));
  std::string fallback =
      IndexFallbackDirectory(options.webdataset.index_dir, options.cache.cache_dir, "mds-raw");
  auto result = std::make_unique<MdsDataset>(directory, store, fallback);
  for (size_t i = 0; i < infos.size(); ++i) {
    auto shard = std::make_unique<MdsShard>();
    shard->info = std::move(infos[i]);
    std::string where = index_path + ": shard " + std::to_string(i);
    const MdsFileInfo& file = shard->info.zipped ? shard->info.zip : shard->info.raw;
    GPUFEED_RETURN_IF_ERROR(ResolveInsideDirectory(
        directory, file.basename, options.allow_external_paths, where, &shard->source));
    GPUFEED_RETURN_IF_ERROR(PickColumns(options.webdataset, where, shard.get()));
    result->AddShard(std::move(shard));
  }
  if (result->size() == 0) {
    return Status::InvalidArgument(index_path +
                                   ": the dataset is empty (no samples in its shards)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
