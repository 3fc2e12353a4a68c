// The raw kind: the record's bytes as a vector of raw.length elements,
// padded with raw.pad (or cut) to that length; the record's labels.
#include <algorithm>
#include <cstring>
#include <utility>

#include "pipeline/sample_kind.h"

namespace gpufeed {
namespace {

class RawSamples final : public SampleKind {
 public:
  explicit RawSamples(const LoaderOptions& options) : SampleKind(options) {}

  const char* name() const override { return "raw"; }

  Status Validate() const override {
    if (options_.raw.length <= 0) {
      return Status::InvalidArgument("a raw transform needs a positive length");
    }
    return Status::OK();
  }

  Status Prepare(std::shared_ptr<const Dataset> opened,
                 std::shared_ptr<const Dataset>* prepared) override {
    return PrepareRecordDataset(std::move(opened), prepared);
  }

  WorkSchedule Schedule(const std::vector<uint64_t>&, bool) const override {
    WorkSchedule schedule;
    schedule.random_read_ahead = true;  // a copy per sample: the reads are the work
    return schedule;
  }

  Status Layout(const Dataset& dataset, BatchLayout* layout) const override {
    using Element = RawTransformOptions::Element;
    const Element element = options_.raw.element;
    layout->data_dtype = element == Element::kInt32     ? TensorDtype::kInt32
                         : element == Element::kInt64   ? TensorDtype::kInt64
                         : element == Element::kFloat32 ? TensorDtype::kFloat32
                                                        : TensorDtype::kUint8;
    layout->sample_shape = {options_.raw.length};
    layout->sample_bytes =
        TensorDtypeSize(layout->data_dtype) * static_cast<size_t>(options_.raw.length);
    return RecordLabelLayout(options_, dataset, layout);
  }

  Status Write(uint64_t sample, uint64_t, const Record& record, const BatchLayout& layout,
               const SampleRow& row, SampleScratch*) const override {
    WriteVector(record, layout.data_dtype, row.data);
    return WriteRecordLabels(options_, layout, sample, record, row);
  }

 private:
  void WriteVector(const Record& record, TensorDtype dtype, char* destination) const {
    const size_t element = TensorDtypeSize(dtype);
    const size_t length = static_cast<size_t>(options_.raw.length);
    const size_t available = std::min(length, record.data.size() / element);
    std::memcpy(destination, record.data.data(), available * element);
    const int64_t pad = options_.raw.pad;
    for (size_t i = available; i < length; ++i) {
      char* out = destination + i * element;
      switch (dtype) {
        case TensorDtype::kInt32: *reinterpret_cast<int32_t*>(out) = static_cast<int32_t>(pad); break;
        case TensorDtype::kInt64: *reinterpret_cast<int64_t*>(out) = pad; break;
        case TensorDtype::kFloat32: *reinterpret_cast<float*>(out) = static_cast<float>(pad); break;
        default: *reinterpret_cast<uint8_t*>(out) = static_cast<uint8_t>(pad); break;
      }
    }
  }
};

}  // namespace

std::shared_ptr<SampleKind> NewRawSamples(const LoaderOptions& options) {
  return std::make_shared<RawSamples>(options);
}

}  // namespace gpufeed
