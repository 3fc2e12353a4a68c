#include "pipeline/sample_kind.h"

#include <algorithm>

#include <cmath>
#include <string>
#include <utility>

namespace gpufeed {

// The kinds, one file each.
std::shared_ptr<SampleKind> NewImageSamples(const LoaderOptions& options);
std::shared_ptr<SampleKind> NewRawSamples(const LoaderOptions& options);
std::shared_ptr<SampleKind> NewTokenSamples(const LoaderOptions& options);
std::shared_ptr<SampleKind> NewTabularSamples(const LoaderOptions& options);

Status MakeSampleKind(const LoaderOptions& options, std::shared_ptr<SampleKind>* kind) {
  struct Entry {
    TransformKind transform;
    std::shared_ptr<SampleKind> (*make)(const LoaderOptions&);
  };
  static const Entry kKinds[] = {
      {TransformKind::kImage, NewImageSamples},
      {TransformKind::kRaw, NewRawSamples},
      {TransformKind::kTokenWindows, NewTokenSamples},
      {TransformKind::kTabular, NewTabularSamples},
  };
  for (const Entry& entry : kKinds) {
    if (entry.transform == options.transform) {
      *kind = entry.make(options);
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown transform kind " +
                                 std::to_string(static_cast<int>(options.transform)));
}

std::vector<Tensor> ExtraTensors(const BatchLayout& layout, uint32_t batch_size, void* data,
                                 int64_t samples) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < layout.extras.size(); ++i) {
    Tensor tensor;
    tensor.data = static_cast<char*>(data) + layout.plane_offset(i, batch_size);
    tensor.dtype = layout.extras[i].dtype;
    tensor.shape = {samples};
    tensor.shape.insert(tensor.shape.end(), layout.extras[i].shape.begin(),
                        layout.extras[i].shape.end());
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

Status SampleKind::WriteRun(const DatasetBase&, const uint64_t*, size_t, size_t, const BatchLayout&,
                            const RunRows&, size_t* written, RunFigures*) const {
  *written = 0;
  return Status::Internal("this sample kind does not write whole runs");
}

WorkSchedule SampleKind::Schedule(const std::vector<uint64_t>&, bool) const {
  return WorkSchedule();
}

uint64_t GlobalShuffleReadAhead(const IoOptions& io, uint64_t mean_sample_bytes) {
  const uint64_t depth = static_cast<uint64_t>(std::max(1, io.queue_depth));
  // io_uring: `threads` rings of `queue_depth` slots; pread: `threads`
  // workers (at most queue_depth) of one read each.
  const uint64_t rings =
      io.backend == IoBackend::kPread ? 1 : static_cast<uint64_t>(std::max(1, io.threads));
  const uint64_t by_budget = io.inflight_bytes / 2 / std::max<uint64_t>(1, mean_sample_bytes);
  return std::max<uint64_t>(1, std::min<uint64_t>(2 * depth * rings, by_budget));
}

void SampleKind::DescribeState(LoaderState*) const {}

Status SampleKind::CheckState(const LoaderState& state) const {
  if (state.seq_len == 0) return Status::OK();
  return Status::InvalidArgument(
      "the state was saved by a token-window loader with seq_len " +
      std::to_string(state.seq_len) + " and block_bytes " +
      std::to_string(state.token_block_bytes) +
      "; this loader has no token windows: its positions would name other tokens");
}

void SampleKind::ConfigureDevice(const DeviceOptions&, LoaderOptions*, DeviceStageOptions*) {}

Status SampleKind::ReadRecord(const Dataset& dataset, uint64_t sample, Record* record) const {
  return dataset.Read(sample, record);
}

Status SampleKind::WriteFetched(const DatasetBase&, uint64_t, const RecordLocation&, const char*,
                                size_t, const BatchLayout&, const SampleRow&, bool* handled,
                                uint64_t*) const {
  *handled = false;
  return Status::OK();
}

Status PrepareRecordDataset(std::shared_ptr<const Dataset> opened,
                            std::shared_ptr<const Dataset>* prepared) {
  if (opened->token_info() != nullptr) {
    return Status::InvalidArgument(opened->path() + " is a token corpus (" +
                                   FormatName(opened->format()) +
                                   "): load it with the token-window transform (Python: "
                                   "transform=gpufeed.TokenWindows(seq_len=...))");
  }
  *prepared = std::move(opened);
  return Status::OK();
}

Status RecordLabelLayout(const LoaderOptions& o, const Dataset& dataset, BatchLayout* layout) {
  using LabelType = LoaderOptions::LabelType;
  layout->label_dtype = o.label_type == LabelType::kInt64     ? TensorDtype::kInt64
                        : o.label_type == LabelType::kFloat32 ? TensorDtype::kFloat32
                        : dataset.integer_labels()            ? TensorDtype::kInt64
                                                              : TensorDtype::kFloat32;
  layout->label_bytes_per_sample =
      TensorDtypeSize(layout->label_dtype) * static_cast<size_t>(o.label_count);
  layout->label_shape.clear();
  if (o.label_count > 1) layout->label_shape.push_back(o.label_count);
  if (o.label_lengths && layout->label_dtype != TensorDtype::kFloat32) {
    return Status::InvalidArgument("label_lengths needs float32 labels (label_type kFloat32)");
  }
  // label_lengths: the slot's label buffer is [counts: B int32][labels],
  // one region, so the device stage copies both at once.
  layout->lengths_bytes = o.label_lengths ? sizeof(int32_t) * o.batch_size : 0;
  return Status::OK();
}

namespace {

// InvalidArgument when the record's label count does not fit the options.
Status CheckLabelCount(const LoaderOptions& o, uint64_t sample, const Record& record) {
  const int count = static_cast<int>(record.labels.size());
  if (o.label_lengths) {
    if (count > o.label_count) {
      return Status::InvalidArgument(
          "sample " + std::to_string(sample) + " (" + record.source + ") has " +
          std::to_string(count) + " labels, more than label_count (" +
          std::to_string(o.label_count) + "): raise label_count to the longest record's");
    }
  } else if (count > 1 && count != o.label_count) {
    // A record with several labels where fewer or more are expected:
    // refused, never truncated (variable counts: label_lengths).
    return Status::InvalidArgument("sample " + std::to_string(sample) + " (" + record.source +
                                   ") has " + std::to_string(count) +
                                   " labels, the loader expects " + std::to_string(o.label_count) +
                                   " (records with varying label counts: label_lengths)");
  }
  return Status::OK();
}

}  // namespace

Status WriteRecordLabels(const LoaderOptions& o, const BatchLayout& layout, uint64_t sample,
                         const Record& record, const SampleRow& row) {
  GPUFEED_RETURN_IF_ERROR(CheckLabelCount(o, sample, record));
  const int count = static_cast<int>(record.labels.size());
  const float missing = o.label_lengths ? o.label_pad : 0.0f;
  for (int i = 0; i < o.label_count; ++i) {
    float value = i < count ? record.labels[i] : missing;
    if (layout.label_dtype == TensorDtype::kInt64) {
      if (value != std::floor(value) || !std::isfinite(value)) {
        return Status::InvalidArgument(
            "sample " + std::to_string(sample) + " (" + record.source + ") has label " +
            std::to_string(value) + ", not a class index; use float labels for it");
      }
      reinterpret_cast<int64_t*>(row.labels)[i] = static_cast<int64_t>(value);
    } else {
      reinterpret_cast<float*>(row.labels)[i] = value;
    }
  }
  if (row.label_count != nullptr) *row.label_count = count;
  return Status::OK();
}

}  // namespace gpufeed
