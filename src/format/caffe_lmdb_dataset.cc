// Caffe LMDB datasets (read only): values are caffe.Datum protobufs, samples
// in LMDB key order. The key list is taken once at open (a cursor walk over
// keys); every Read is an mdb_get by key.
#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/lmdb_env.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

class CaffeLmdbDataset final : public DatasetBase {
 public:
  explicit CaffeLmdbDataset(std::string path)
      : DatasetBase(DatasetFormat::kCaffeLmdb, std::move(path)) {
    integer_labels_ = true;
  }

  Status Open() {
    GPUFEED_RETURN_IF_ERROR(reader_.Open(path_));
    GPUFEED_RETURN_IF_ERROR(reader_.ForEach([&](std::string_view key, std::string_view) {
      key_ends_.push_back(key_blob_.size() + key.size());
      key_blob_.append(key);
      return true;
    }));
    ShardInfo info;
    info.path = path_;
    info.records = key_ends_.size();
    FileSizeOf(JoinPath(path_, "data.mdb"), &info.bytes);
    shards_.push_back(info);
    return Status::OK();
  }

  uint64_t size() const override { return key_ends_.size(); }

  Status Read(uint64_t index, Record* record) const override {
    GPUFEED_RETURN_IF_ERROR(CheckIndex(index));
    size_t begin = index == 0 ? 0 : key_ends_[index - 1];
    std::string_view key(key_blob_.data() + begin, key_ends_[index] - begin);
    thread_local std::string value;
    std::string where = "sample " + std::to_string(index) + ": " + path_ + "/data.mdb, key \"" +
                        std::string(key) + "\"";
    Status status = reader_.Get(key, &value);
    if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
    CaffeDatum datum;
    status = DecodeCaffeDatum(value, &datum);
    if (!status.ok()) return status.WithContext(where);
    if (!datum.encoded && datum.data.empty() && datum.float_data_count > 0) {
      return Status::NotSupported(where + ": a Datum with float_data instead of uint8 data; "
                                  "gpufeed reads uint8 and encoded Datums only");
    }
    record->data.assign(datum.data.data(), datum.data.size());
    record->labels.assign(1, static_cast<float>(datum.label));
    record->key.assign(key);
    record->source = path_ + "/data.mdb, key " + std::string(key);
    record->id = index;
    record->encoded = datum.encoded;
    record->shape.clear();
    if (!datum.encoded) record->shape = {datum.channels, datum.height, datum.width};
    return Status::OK();
  }

 private:
  LmdbReader reader_;
  std::string key_blob_;
  std::vector<uint64_t> key_ends_;
};

}  // namespace

Status OpenCaffeLmdbDataset(const std::string& path, std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<CaffeLmdbDataset>(path);
  GPUFEED_RETURN_IF_ERROR(result->Open());
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no records)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
