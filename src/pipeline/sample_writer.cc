#include "pipeline/sample_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "format/token_corpus.h"
#include "util/system_stats.h"

namespace gpufeed {

Status BatchLayout::For(const LoaderOptions& o, const Dataset& dataset, BatchLayout* layout) {
  if (o.transform == TransformKind::kImage) {
    int64_t size = o.image.size;
    layout->data_dtype = o.image.dtype;
    layout->sample_shape = o.image.layout == OutputLayout::kNCHW
                               ? std::vector<int64_t>{3, size, size}
                               : std::vector<int64_t>{size, size, 3};
  } else if (o.transform == TransformKind::kTokenWindows) {
    // x in the data, y (the same window shifted by one) in the labels.
    const TokenCorpusInfo* info = dataset.token_info();
    if (info == nullptr) {
      return Status::InvalidArgument(dataset.path() + " is not a token corpus");
    }
    layout->data_dtype = o.tokens.dtype;
    layout->sample_shape = {static_cast<int64_t>(o.tokens.seq_len)};
    layout->sample_bytes = TensorDtypeSize(o.tokens.dtype) * o.tokens.seq_len;
    layout->label_dtype = o.tokens.dtype;
    layout->label_bytes_per_sample = layout->sample_bytes;
    layout->lengths_bytes = 0;
    layout->token_dtype = info->token_dtype;
    return Status::OK();
  } else {
    using Element = RawTransformOptions::Element;
    layout->data_dtype = o.raw.element == Element::kInt32     ? TensorDtype::kInt32
                         : o.raw.element == Element::kInt64   ? TensorDtype::kInt64
                         : o.raw.element == Element::kFloat32 ? TensorDtype::kFloat32
                                                              : TensorDtype::kUint8;
    layout->sample_shape = {o.raw.length};
  }
  layout->sample_bytes = TensorDtypeSize(layout->data_dtype);
  for (int64_t dimension : layout->sample_shape) {
    layout->sample_bytes *= static_cast<size_t>(dimension);
  }
  using LabelType = LoaderOptions::LabelType;
  layout->label_dtype = o.label_type == LabelType::kInt64     ? TensorDtype::kInt64
                        : o.label_type == LabelType::kFloat32 ? TensorDtype::kFloat32
                        : dataset.integer_labels()            ? TensorDtype::kInt64
                                                              : TensorDtype::kFloat32;
  layout->label_bytes_per_sample =
      TensorDtypeSize(layout->label_dtype) * static_cast<size_t>(o.label_count);
  if (o.label_lengths && layout->label_dtype != TensorDtype::kFloat32) {
    return Status::InvalidArgument("label_lengths needs float32 labels (label_type kFloat32)");
  }
  // label_lengths: the slot's label buffer is [counts: B int32][labels],
  // one region, so the device stage copies both at once.
  layout->lengths_bytes = o.label_lengths ? sizeof(int32_t) * o.batch_size : 0;
  return Status::OK();
}

SampleWriter::SampleWriter(const Dataset* dataset, const LoaderOptions& options,
                           const BatchLayout& layout)
    : dataset_(dataset), tokens_(AsTokenWindows(*dataset)), options_(options), layout_(layout) {}

Status SampleWriter::Parse(uint64_t sample, uint64_t epoch, const ReadAhead::Fetched& fetched,
                           Slot& slot, size_t position, Scratch* scratch,
                           WorkFigures* figures) const {
  const ReadCompletion& completion = *fetched.completion;
  Status status = completion.status;
  if (status.ok() && options_.transform == TransformKind::kTokenWindows) {
    // Widened straight from the engine's buffer (a block shared by many
    // windows): no copy into the Record. The time (wall and CPU) is taken
    // per run of windows by the host stage, not here per window.
    const char* window = nullptr;
    status = tokens_ == nullptr
                 ? Status::InvalidArgument(dataset_->path() + " is not a token corpus")
                 : tokens_->WindowIn(sample, fetched.location, completion.buffer.data(),
                                     completion.buffer.size(), &window);
    if (!status.ok()) return status.WithContext("sample " + std::to_string(sample));
    WriteTokens(window, slot, position);
    figures->bytes += TokenDtypeSize(layout_.token_dtype) * options_.tokens.seq_len;
    return Status::OK();
  }
  if (status.ok()) {
    status = dataset_->ParseLocated(sample, fetched.location, completion.buffer.data(),
                                    completion.buffer.size(), &scratch->record);
  }
  if (!status.ok()) return status.WithContext("sample " + std::to_string(sample));
  figures->bytes += scratch->record.data.size();
  return Write(sample, epoch, slot, position, scratch, figures);
}

Status SampleWriter::Read(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                          Scratch* scratch, WorkFigures* figures) const {
  auto read_started = Clock::now();
  // The image transform takes raw pixels as RGB HWC, which the format makes.
  Status status = options_.transform == TransformKind::kImage
                      ? dataset_->ReadForDecode(sample, &scratch->record)
                      : dataset_->Read(sample, &scratch->record);
  figures->read += Seconds(Clock::now() - read_started);
  if (!status.ok()) return status;
  figures->bytes += scratch->record.data.size();
  return Write(sample, epoch, slot, position, scratch, figures);
}

Status SampleWriter::Write(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                           Scratch* scratch, WorkFigures* figures) const {
  auto read_done = Clock::now();
  double cpu_started = ThreadCpuSeconds();
  const Record& record = scratch->record;
  Status status;
  char* destination = static_cast<char*>(slot.data) + position * layout_.sample_bytes;
  if (options_.transform == TransformKind::kImage) {
    if (record.encoded) {
      status = TransformImage(reinterpret_cast<const uint8_t*>(record.data.data()),
                              record.data.size(), options_.image, options_.seed, epoch, sample,
                              destination, &scratch->transform);
    } else if (record.layout != Record::PixelLayout::kHwcRgb || record.shape.size() != 3 ||
               record.shape[2] != 3) {
      status = Status::NotSupported("raw pixels reach the image transform only as (H, W, 3) RGB "
                                    "(Dataset::ReadForDecode)");
    } else {
      // Already RGB HWC (Caffe's raw Datums, converted by the format).
      Image& image = scratch->raw_image;
      image.height = static_cast<int>(record.shape[0]);
      image.width = static_cast<int>(record.shape[1]);
      image.pixels.assign(record.data.begin(), record.data.end());
      status = TransformDecoded(image, options_.image, options_.seed, epoch, sample, destination,
                                &scratch->transform);
    }
    if (!status.ok()) {
      status = Status(status).WithContext("sample " + std::to_string(sample) + " (" +
                                          record.source + ")");
    }
  } else if (options_.transform == TransformKind::kTokenWindows) {
    // seq_len + 1 tokens: x = the first seq_len, y = the last seq_len.
    const size_t length = options_.tokens.seq_len;
    const size_t item = TokenDtypeSize(layout_.token_dtype);
    if (record.data.size() != (length + 1) * item) {
      status = Status::Internal("sample " + std::to_string(sample) + " (" + record.source +
                                "): " + std::to_string(record.data.size()) +
                                " bytes, not a window of " + std::to_string(length + 1) +
                                " tokens");
    } else {
      WriteTokens(record.data.data(), slot, position);
    }
    figures->decode += Seconds(Clock::now() - read_done);
    return status;
  } else {
    WriteRaw(record, destination);
  }
  if (status.ok()) {
    status = WriteLabels(sample, record,
                         static_cast<char*>(slot.labels) + layout_.lengths_bytes +
                             position * layout_.label_bytes_per_sample);
    if (status.ok() && options_.label_lengths) {
      static_cast<int32_t*>(slot.labels)[position] = static_cast<int32_t>(record.labels.size());
    }
  }
  figures->decode += Seconds(Clock::now() - read_done);
  figures->decode_cpu += ThreadCpuSeconds() - cpu_started;
  return status;
}

void SampleWriter::WriteTokens(const char* window, Slot& slot, size_t position) const {
  const size_t length = options_.tokens.seq_len;
  const size_t item = TokenDtypeSize(layout_.token_dtype);
  WidenTokens(layout_.token_dtype, window, length, layout_.data_dtype,
              static_cast<char*>(slot.data) + position * layout_.sample_bytes);
  WidenTokens(layout_.token_dtype, window + item, length, layout_.label_dtype,
              static_cast<char*>(slot.labels) + position * layout_.label_bytes_per_sample);
}

void SampleWriter::WriteRaw(const Record& record, char* destination) const {
  size_t element = TensorDtypeSize(layout_.data_dtype);
  size_t length = static_cast<size_t>(options_.raw.length);
  size_t available = std::min(length, record.data.size() / element);
  std::memcpy(destination, record.data.data(), available * element);
  for (size_t i = available; i < length; ++i) {
    char* out = destination + i * element;
    switch (layout_.data_dtype) {
      case TensorDtype::kInt32: *reinterpret_cast<int32_t*>(out) = static_cast<int32_t>(options_.raw.pad); break;
      case TensorDtype::kInt64: *reinterpret_cast<int64_t*>(out) = options_.raw.pad; break;
      case TensorDtype::kFloat32: *reinterpret_cast<float*>(out) = static_cast<float>(options_.raw.pad); break;
      default: *reinterpret_cast<uint8_t*>(out) = static_cast<uint8_t>(options_.raw.pad); break;
    }
  }
}

Status SampleWriter::WriteLabels(uint64_t sample, const Record& record, char* destination) const {
  const int count = static_cast<int>(record.labels.size());
  if (options_.label_lengths) {
    if (count > options_.label_count) {
      return Status::InvalidArgument(
          "sample " + std::to_string(sample) + " (" + record.source + ") has " +
          std::to_string(count) + " labels, more than label_count (" +
          std::to_string(options_.label_count) + "): raise label_count to the longest record's");
    }
  } else if (count > 1 && count != options_.label_count) {
    // A record with several labels where fewer or more are expected:
    // refused, never truncated (variable counts: label_lengths).
    return Status::InvalidArgument("sample " + std::to_string(sample) + " (" + record.source +
                                   ") has " + std::to_string(count) +
                                   " labels, the loader expects " +
                                   std::to_string(options_.label_count) +
                                   " (records with varying label counts: label_lengths)");
  }
  const float missing = options_.label_lengths ? options_.label_pad : 0.0f;
  for (int i = 0; i < options_.label_count; ++i) {
    float value = i < count ? record.labels[i] : missing;
    if (layout_.label_dtype == TensorDtype::kInt64) {
      if (value != std::floor(value) || !std::isfinite(value)) {
        return Status::InvalidArgument(
            "sample " + std::to_string(sample) + " (" + record.source + ") has label " +
            std::to_string(value) + ", not a class index; use float labels for it");
      }
      reinterpret_cast<int64_t*>(destination)[i] = static_cast<int64_t>(value);
    } else {
      reinterpret_cast<float*>(destination)[i] = value;
    }
  }
  return Status::OK();
}

}  // namespace gpufeed
