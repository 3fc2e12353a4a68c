// gpufeed LMDB datasets: one environment per shard directory; key = the
// zero-padded decimal global sample index; value = IRHeader payload.
#include <algorithm>
#include <cstdio>

#include "format/datasets.h"
#include "format/irheader.h"
#include "format/lmdb_env.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

std::string LmdbKeyFor(uint64_t index) {
  char key[32];
  std::snprintf(key, sizeof(key), "%0*llu", kLmdbKeyWidth, static_cast<unsigned long long>(index));
  return key;
}

namespace {

// Where each value lies in data.mdb; length kMissing marks a key that the
// environment does not hold.
constexpr uint64_t kMissing = ~uint64_t{0};

// The environment is open only while AddShard walks it: reads are range
// reads of data.mdb through the store, and no LMDB handle crosses a fork().
struct LmdbShard {
  std::shared_ptr<const StoreFile> data;  // data.mdb through the store
  uint64_t key_base = 0;  // sample index of the first key
  int key_width = kLmdbKeyWidth;
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> lengths;
};

class LmdbDataset final : public DatasetBase {
 public:
  LmdbDataset(std::string path, std::shared_ptr<Store> store)
      : DatasetBase(DatasetFormat::kLmdb, std::move(path), std::move(store)) {}

  Status AddShard(const std::string& directory, const ManifestShard* manifest_shard);
  void SetClasses(std::vector<std::string> classes, bool integer_labels) {
    classes_ = std::move(classes);
    integer_labels_ = integer_labels;
  }
  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;
  bool Locate(uint64_t index, RecordLocation* location) const override;
  Status ParseLocated(uint64_t index, const RecordLocation& location, const char* data,
                      size_t size, Record* record) const override;
  bool CanLocate() const override { return total_ > 0; }

 protected:
  const StoreFile* FileOf(uint64_t index) const override {
    return environments_[ShardIndexOf(index)]->data.get();
  }

 private:
  size_t ShardIndexOf(uint64_t index) const {
    return ShardContaining(first_records_, index);
  }
  std::string KeyOf(const LmdbShard& shard, uint64_t local) const {
    char key[32];
    std::snprintf(key, sizeof(key), "%0*llu", shard.key_width,
                  static_cast<unsigned long long>(shard.key_base + local));
    return key;
  }
  // The value's range, or Corruption for a key the environment lacks.
  Status Where(uint64_t index, size_t* shard_index, uint64_t* local) const;
  Status Parse(uint64_t index, size_t shard_index, uint64_t local, const char* data, size_t size,
               Record* record) const;

  std::vector<uint64_t> first_records_;
  std::vector<std::unique_ptr<LmdbShard>> environments_;
  uint64_t total_ = 0;
};

Status LmdbDataset::AddShard(const std::string& directory, const ManifestShard* manifest_shard) {
  auto shard = std::make_unique<LmdbShard>();
  LmdbReader reader;
  GPUFEED_RETURN_IF_ERROR(reader.Open(directory));
  uint64_t entries = 0;
  GPUFEED_RETURN_IF_ERROR(reader.Count(&entries));
  if (manifest_shard != nullptr && entries != manifest_shard->records) {
    return Status::Corruption(directory + ": holds " + std::to_string(entries) +
                              " records but the manifest says " +
                              std::to_string(manifest_shard->records));
  }
  if (entries > 0) {
    std::string first_key;
    GPUFEED_RETURN_IF_ERROR(reader.FirstKey(&first_key));
    if (first_key.empty() || first_key.size() > 19 ||
        first_key.find_first_not_of("0123456789") != std::string::npos) {
      return Status::Corruption(directory + ": first key \"" + first_key.substr(0, 40) +
                                "\" is not a zero-padded decimal sample index "
                                "(is this a Caffe LMDB? open it with format=\"caffe_lmdb\")");
    }
    shard->key_base = std::stoull(first_key);
    shard->key_width = static_cast<int>(first_key.size());
  }
  shard->offsets.assign(entries, 0);
  shard->lengths.assign(entries, kMissing);
  GPUFEED_RETURN_IF_ERROR(reader.ForEachLocation(
      [&](std::string_view key, uint64_t offset, uint64_t length) {
        if (key.size() != static_cast<size_t>(shard->key_width) || key.size() > 19 ||
            key.find_first_not_of("0123456789") != std::string_view::npos) {
          return;  // not a sample key: the gap shows when its sample is read
        }
        uint64_t number = std::stoull(std::string(key));
        if (number < shard->key_base || number - shard->key_base >= entries) return;
        shard->offsets[number - shard->key_base] = offset;
        shard->lengths[number - shard->key_base] = length;
      }));
  std::string data_path = JoinPath(directory, "data.mdb");
  std::string xxh64 = manifest_shard != nullptr ? manifest_shard->xxh64 : std::string();
  GPUFEED_RETURN_IF_ERROR(store_->Open(data_path, xxh64, &shard->data));
  ShardInfo info;
  info.path = directory;
  info.first_record = total_;
  info.records = entries;
  info.xxh64 = xxh64;
  info.bytes = shard->data->size();
  shards_.push_back(info);
  first_records_.push_back(total_);
  total_ += entries;
  environments_.push_back(std::move(shard));
  return Status::OK();
}

Status LmdbDataset::Where(uint64_t index, size_t* shard_index, uint64_t* local) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  *shard_index = ShardIndexOf(index);
  *local = index - first_records_[*shard_index];
  const LmdbShard& shard = *environments_[*shard_index];
  if (shard.lengths[*local] == kMissing) {
    return Status::Corruption(shards_[*shard_index].path + ": key \"" + KeyOf(shard, *local) +
                              "\" is missing (keys must be consecutive sample indices)")
        .WithContext("sample " + std::to_string(index));
  }
  return Status::OK();
}

Status LmdbDataset::Read(uint64_t index, Record* record) const {
  size_t shard_index = 0;
  uint64_t local = 0;
  GPUFEED_RETURN_IF_ERROR(Where(index, &shard_index, &local));
  const LmdbShard& shard = *environments_[shard_index];
  uint64_t offset = shard.offsets[local], length = shard.lengths[local];
  thread_local std::string payload;
  payload.resize(length);
  FileView view;
  size_t got = 0;
  Status status = shard.data->View(offset, length, &view);
  if (status.ok()) status = PreadFull(view.fd, payload.data(), length, offset, view.shown, &got);
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
  shard.data->Count(view, got);
  if (got != length) {
    return Status::Corruption(view.shown + ": ends inside the value of key " +
                              KeyOf(shard, local) + " at byte offset " + std::to_string(offset))
        .WithContext("sample " + std::to_string(index));
  }
  status = Parse(index, shard_index, local, payload.data(), length, record);
  if (status.ok() || !view.local || status.code() != Status::Code::kCorruption) return status;
  // A copy that does not parse where the source does is bad: made again.
  FileView source;
  if (!shard.data->SourceView(&source).ok() ||
      !PreadFull(source.fd, payload.data(), length, offset, source.shown, &got).ok() ||
      got != length) {
    return status;
  }
  Status from_source = Parse(index, shard_index, local, payload.data(), length, record);
  if (from_source.ok()) shard.data->Invalidate(&view);
  return from_source;
}

bool LmdbDataset::Locate(uint64_t index, RecordLocation* location) const {
  size_t shard_index = 0;
  uint64_t local = 0;
  if (!Where(index, &shard_index, &local).ok()) return false;  // Read reports it
  const LmdbShard& shard = *environments_[shard_index];
  return LocateRange(*shard.data, shard.data->path(), shard.offsets[local], shard.lengths[local],
                     location);
}

Status LmdbDataset::ParseLocated(uint64_t index, const RecordLocation& location,
                                 const char* data, size_t size, Record* record) const {
  size_t shard_index = 0;
  uint64_t local = 0;
  GPUFEED_RETURN_IF_ERROR(Where(index, &shard_index, &local));
  const LmdbShard& shard = *environments_[shard_index];
  FileView engine_view;  // what the engine read: counted, never read again
  engine_view.local = location.local;
  shard.data->Count(engine_view, size);
  if (size != shard.lengths[local]) return Read(index, record);  // cut short: read it again
  Status status = Parse(index, shard_index, local, data, size, record);
  if (status.ok() || !location.local || status.code() != Status::Code::kCorruption) return status;
  // Bad bytes from a copy: Read parses the copy again and, when the source
  // parses where the copy does not, replaces the copy.
  return Read(index, record);
}

Status LmdbDataset::Parse(uint64_t index, size_t shard_index, uint64_t local, const char* data,
                          size_t size, Record* record) const {
  const LmdbShard& shard = *environments_[shard_index];
  std::string key = KeyOf(shard, local);
  ParsedPayload parsed;
  Status status = ParseIRPayload(std::string_view(data, size), &record->labels, &parsed);
  if (!status.ok()) {
    return status
        .WithContext(shards_[shard_index].path + "/data.mdb, key \"" + key + "\" at byte offset " +
                     std::to_string(shard.offsets[local]))
        .WithContext("sample " + std::to_string(index));
  }
  record->data.assign(data + parsed.data_offset, size - parsed.data_offset);
  record->id = parsed.id;
  record->key = key;
  record->source = shards_[shard_index].path;
  record->source += "/data.mdb, key ";
  record->source += key;
  record->shape.clear();
  record->encoded = true;
  return Status::OK();
}

}  // namespace

Status OpenLmdbDataset(const std::string& path, const std::vector<std::string>& environments,
                       const Manifest* manifest, const std::shared_ptr<Store>& store,
                       std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<LmdbDataset>(path, store);
  for (size_t i = 0; i < environments.size(); ++i) {
    const ManifestShard* shard = manifest != nullptr ? &manifest->shards[i] : nullptr;
    GPUFEED_RETURN_IF_ERROR(result->AddShard(environments[i], shard));
  }
  if (manifest != nullptr) result->SetClasses(manifest->classes, manifest->integer_labels);
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no records)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
