// Caffe LMDB datasets (read only): values are caffe.Datum protobufs, samples
// in LMDB key order. Keys and where their values lie in data.mdb are taken
// once at open (one walk of the tree's pages), and the environment is
// closed then; every Read is a range read of data.mdb through the store (no
// LMDB handle crosses a fork()).
#include <cstdint>
#include <string>

#include "format/caffe_datum.h"
#include "format/datasets.h"
#include "format/lmdb_env.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {

namespace {

Status ToHwcRgb(Record* record);

class CaffeLmdbDataset final : public DatasetBase {
 public:
  CaffeLmdbDataset(std::string path, std::shared_ptr<Store> store)
      : DatasetBase(DatasetFormat::kCaffeLmdb, std::move(path), std::move(store)) {
    integer_labels_ = true;
  }

  Status Open() {
    LmdbReader reader;
    GPUFEED_RETURN_IF_ERROR(reader.Open(path_));
    // Keys and where their values lie in data.mdb, in one walk of the
    // tree's pages; values are then range reads through the store.
    GPUFEED_RETURN_IF_ERROR(reader.ForEachLocation(
        [&](std::string_view key, uint64_t offset, uint64_t length) {
          key_ends_.push_back(key_blob_.size() + key.size());
          key_blob_.append(key);
          offsets_.push_back(offset);
          lengths_.push_back(length);
        }));
    GPUFEED_RETURN_IF_ERROR(store_->Open(JoinPath(path_, "data.mdb"), "", &data_));
    ShardInfo info;
    info.path = path_;
    info.records = key_ends_.size();
    info.bytes = data_->size();
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
    value.resize(lengths_[index]);
    FileView view;
    size_t got = 0;
    Status status = data_->View(offsets_[index], lengths_[index], &view);
    if (status.ok()) {
      status = PreadFull(view.fd, value.data(), value.size(), offsets_[index], view.shown, &got);
    }
    if (!status.ok()) return status.WithContext("sample " + std::to_string(index));
    data_->Count(view, got);
    if (got != value.size()) {
      return Status::Corruption(view.shown + ": ends inside the value at byte offset " +
                                std::to_string(offsets_[index]))
          .WithContext(where);
    }
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
    record->layout = Record::PixelLayout::kChw;
    return Status::OK();
  }

  Status ReadForDecode(uint64_t index, Record* record) const override {
    GPUFEED_RETURN_IF_ERROR(Read(index, record));
    if (record->encoded) return Status::OK();
    Status status = ToHwcRgb(record);
    if (!status.ok()) {
      return status.WithContext("sample " + std::to_string(index) + " (" + record->source + ")");
    }
    return Status::OK();
  }

 protected:
  const StoreFile* FileOf(uint64_t) const override { return data_.get(); }

 private:
  std::shared_ptr<const StoreFile> data_;
  std::string key_blob_;
  std::vector<uint64_t> key_ends_;
  std::vector<uint64_t> offsets_, lengths_;
};

// Raw Datum pixels, (C, H, W) planes in BGR order (OpenCV's, as Caffe's
// CVMatToDatum stores them) -> interleaved (H, W, 3) RGB; a gray plane is
// replicated into the three channels.
Status ToHwcRgb(Record* record) {
  if (record->shape.size() != 3 || (record->shape[0] != 3 && record->shape[0] != 1)) {
    return Status::NotSupported("raw records need shape (3, H, W) or (1, H, W) for the image "
                                "transform");
  }
  int64_t channels = record->shape[0], height = record->shape[1], width = record->shape[2];
  // Swapped with record->data: both buffers stay warm for this thread.
  thread_local std::string converted;
  converted.resize(static_cast<size_t>(width * height * 3));
  const uint8_t* data = reinterpret_cast<const uint8_t*>(record->data.data());
  uint8_t* pixels = reinterpret_cast<uint8_t*>(converted.data());
  size_t plane = static_cast<size_t>(width * height);
  for (size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      size_t source_channel = channels == 1 ? 0 : static_cast<size_t>(2 - c);  // BGR -> RGB
      pixels[i * 3 + c] = data[source_channel * plane + i];
    }
  }
  record->data.swap(converted);
  record->shape = {height, width, 3};
  record->layout = Record::PixelLayout::kHwcRgb;
  return Status::OK();
}

}  // namespace

Status OpenCaffeLmdbDataset(const std::string& path, const std::shared_ptr<Store>& store,
                            std::unique_ptr<Dataset>* dataset) {
  auto result = std::make_unique<CaffeLmdbDataset>(path, store);
  GPUFEED_RETURN_IF_ERROR(result->Open());
  if (result->size() == 0) {
    return Status::InvalidArgument(path + ": the dataset is empty (no records)");
  }
  *dataset = std::move(result);
  return Status::OK();
}

}  // namespace gpufeed
