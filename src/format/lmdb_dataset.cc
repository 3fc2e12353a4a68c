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

struct LmdbShard {
  LmdbReader reader;
  uint64_t key_base = 0;  // sample index of the first key
  int key_width = kLmdbKeyWidth;
};

class LmdbDataset final : public DatasetBase {
 public:
  explicit LmdbDataset(std::string path) : DatasetBase(DatasetFormat::kLmdb, std::move(path)) {}

  Status AddShard(const std::string& directory, const ManifestShard* manifest_shard);
  void SetClasses(std::vector<std::string> classes, bool integer_labels) {
    classes_ = std::move(classes);
    integer_labels_ = integer_labels;
  }
  uint64_t size() const override { return total_; }
  Status Read(uint64_t index, Record* record) const override;

  std::vector<uint64_t> first_records_;

 private:
  std::vector<std::unique_ptr<LmdbShard>> environments_;
  uint64_t total_ = 0;
};

Status LmdbDataset::AddShard(const std::string& directory, const ManifestShard* manifest_shard) {
  auto shard = std::make_unique<LmdbShard>();
  GPUFEED_RETURN_IF_ERROR(shard->reader.Open(directory));
  uint64_t entries = 0;
  GPUFEED_RETURN_IF_ERROR(shard->reader.Count(&entries));
  if (manifest_shard != nullptr && entries != manifest_shard->records) {
    return Status::Corruption(directory + ": holds " + std::to_string(entries) +
                              " records but the manifest says " +
                              std::to_string(manifest_shard->records));
  }
  if (entries > 0) {
    std::string first_key;
    GPUFEED_RETURN_IF_ERROR(shard->reader.FirstKey(&first_key));
    if (first_key.empty() || first_key.size() > 19 ||
        first_key.find_first_not_of("0123456789") != std::string::npos) {
      return Status::Corruption(directory + ": first key \"" + first_key.substr(0, 40) +
                                "\" is not a zero-padded decimal sample index "
                                "(is this a Caffe LMDB? open it with format=\"caffe_lmdb\")");
    }
    shard->key_base = std::stoull(first_key);
    shard->key_width = static_cast<int>(first_key.size());
  }
  ShardInfo info;
  info.path = directory;
  info.first_record = total_;
  info.records = entries;
  if (manifest_shard != nullptr) info.xxh64 = manifest_shard->xxh64;
  FileSizeOf(JoinPath(directory, "data.mdb"), &info.bytes);
  shards_.push_back(info);
  first_records_.push_back(total_);
  total_ += entries;
  environments_.push_back(std::move(shard));
  return Status::OK();
}

Status LmdbDataset::Read(uint64_t index, Record* record) const {
  GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
  size_t shard_index = std::upper_bound(first_records_.begin(), first_records_.end(), index) -
                       first_records_.begin() - 1;
  const LmdbShard& shard = *environments_[shard_index];
  uint64_t local = index - first_records_[shard_index];
  char key[32];
  std::snprintf(key, sizeof(key), "%0*llu", shard.key_width,
                static_cast<unsigned long long>(shard.key_base + local));
  thread_local std::string payload;
  Status status = shard.reader.Get(key, &payload);
  if (status.IsNotFound()) {
    status = Status::Corruption(shards_[shard_index].path + ": key \"" + std::string(key) +
                                "\" is missing (keys must be consecutive sample indices)");
  }
  if (status.ok()) {
    ParsedPayload parsed;
    status = ParseIRPayload(payload, &record->labels, &parsed);
    if (status.ok()) {
      record->data.assign(payload, parsed.data_offset, std::string::npos);
      record->id = parsed.id;
    } else {
      // An LMDB value has no file offset of its own; the key locates it.
      status = status.WithContext(shards_[shard_index].path + "/data.mdb, key \"" +
                                  std::string(key) + "\"");
    }
  }
  if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
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
                       const Manifest* manifest, std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<LmdbDataset>(path);
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
