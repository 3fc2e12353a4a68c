// The image kind: an encoded image (or raw RGB pixels) decoded, augmented
// and normalised into a (3, size, size) or (size, size, 3) row of
// image.dtype; the record's labels.
#include <string>
#include <utility>

#include "decode/output.h"
#include "pipeline/sample_kind.h"

namespace gpufeed {
namespace {

class ImageSamples final : public SampleKind {
 public:
  explicit ImageSamples(const LoaderOptions& options) : SampleKind(options) {}

  const char* name() const override { return "image"; }

  Status Validate() const override {
    const ImageTransformOptions& image = options_.image;
    if (image.dtype == TensorDtype::kInt32 || image.dtype == TensorDtype::kInt64 ||
        image.dtype == TensorDtype::kInt8) {
      return Status::InvalidArgument(std::string("the image transform outputs uint8, float32, "
                                                 "float16 or bfloat16, not ") +
                                     TensorDtypeName(image.dtype));
    }
    if (image.size <= 0 || image.size > 8192) {
      return Status::InvalidArgument("image size must be between 1 and 8192");
    }
    return Status::OK();
  }

  Status Prepare(std::shared_ptr<const Dataset> opened,
                 std::shared_ptr<const Dataset>* prepared) override {
    return PrepareRecordDataset(std::move(opened), prepared);
  }

  Status Layout(const Dataset& dataset, BatchLayout* layout) const override {
    const int64_t size = options_.image.size;
    layout->data_dtype = options_.image.dtype;
    layout->sample_shape = options_.image.layout == OutputLayout::kNCHW
                               ? std::vector<int64_t>{3, size, size}
                               : std::vector<int64_t>{size, size, 3};
    layout->sample_bytes = TensorDtypeSize(layout->data_dtype) * 3 * size * size;
    return RecordLabelLayout(options_, dataset, layout);
  }

  // Normalisation moves to the device: uint8 HWC crosses PCIe and the
  // kernel writes the dtype and layout asked, with the CPU path's table.
  void ConfigureDevice(const DeviceOptions& device, LoaderOptions* host,
                       DeviceStageOptions* stage) override {
    const ImageTransformOptions image = options_.image;
    stage->normalize = device.normalize_on_device && image.dtype != OutputDtype::kUint8;
    if (!stage->normalize) return;
    stage->normalize_dtype = image.dtype;
    stage->normalize_nchw = image.layout == OutputLayout::kNCHW;
    stage->normalize_table.resize(768 * TensorDtypeSize(image.dtype));
    NormalizeTable(image, image.dtype, stage->normalize_table.data());
    for (ImageTransformOptions* host_image : {&host->image, &options_.image}) {
      host_image->dtype = OutputDtype::kUint8;
      host_image->layout = OutputLayout::kNHWC;
    }
  }

  // The image transform takes raw pixels as RGB HWC, which the format makes.
  Status ReadRecord(const Dataset& dataset, uint64_t sample, Record* record) const override {
    return dataset.ReadForDecode(sample, record);
  }

  Status Write(uint64_t sample, uint64_t epoch, const Record& record, const BatchLayout& layout,
               const SampleRow& row, SampleScratch* scratch) const override {
    Status status = WriteImage(sample, epoch, record, row.data, scratch);
    if (!status.ok()) {
      return status.WithContext("sample " + std::to_string(sample) + " (" + record.source + ")");
    }
    return WriteRecordLabels(options_, layout, sample, record, row);
  }

 private:
  Status WriteImage(uint64_t sample, uint64_t epoch, const Record& record, char* destination,
                    SampleScratch* scratch) const {
    if (record.encoded) {
      return TransformImage(reinterpret_cast<const uint8_t*>(record.data.data()),
                            record.data.size(), options_.image, options_.seed, epoch, sample,
                            destination, &scratch->transform);
    }
    if (record.layout != Record::PixelLayout::kHwcRgb || record.shape.size() != 3 ||
        record.shape[2] != 3) {
      return Status::NotSupported("raw pixels reach the image transform only as (H, W, 3) RGB "
                                  "(Dataset::ReadForDecode)");
    }
    // Already RGB HWC (Caffe's raw Datums, converted by the format).
    Image& image = scratch->raw_image;
    image.height = static_cast<int>(record.shape[0]);
    image.width = static_cast<int>(record.shape[1]);
    image.pixels.assign(record.data.begin(), record.data.end());
    return TransformDecoded(image, options_.image, options_.seed, epoch, sample, destination,
                            &scratch->transform);
  }
};

}  // namespace

std::shared_ptr<SampleKind> NewImageSamples(const LoaderOptions& options) {
  return std::make_shared<ImageSamples>(options);
}

}  // namespace gpufeed
