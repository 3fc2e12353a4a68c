// SampleKind: what a sample becomes in a batch. Chosen once, by Loader::Open,
// from LoaderOptions::transform; the pipeline (Loader, HostStage,
// SampleWriter) asks it and has no branch on the transform or the format.
//
//   image          an encoded image (or raw pixels) decoded and augmented
//                  into a fixed (3, size, size) or (size, size, 3) row;
//                  the record's labels (image_samples.cc)
//   raw            the record's bytes as a padded vector; its labels
//                  (raw_samples.cc)
//   token windows  seq_len + 1 tokens of a corpus: x into the data row, the
//                  next-token targets y into the label row (token_samples.cc)
//
// A new kind is one file here implementing this interface plus one line in
// MakeSampleKind's table (sample_kind.cc).
//
// Thread safety: const after Open; Write and WriteFetched run on many worker
// threads at once, each with its own SampleScratch and row.
#ifndef GPUFEED_PIPELINE_SAMPLE_KIND_H_
#define GPUFEED_PIPELINE_SAMPLE_KIND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "decode/transform.h"
#include "device/device_stage.h"
#include "format/dataset_base.h"
#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"

namespace gpufeed {

// The shapes and sizes of a host batch: SampleKind::Layout fills it.
struct BatchLayout {
  TensorDtype data_dtype = TensorDtype::kFloat32;
  std::vector<int64_t> sample_shape;  // without the batch dimension
  size_t sample_bytes = 0;
  TensorDtype label_dtype = TensorDtype::kInt64;
  std::vector<int64_t> label_shape;  // of one sample's labels; empty: a scalar
  size_t label_bytes_per_sample = 0;
  size_t lengths_bytes = 0;  // label_lengths: the counts before the labels

  size_t data_bytes(uint32_t batch_size) const { return sample_bytes * batch_size; }
  size_t label_bytes(uint32_t batch_size) const {
    return lengths_bytes + label_bytes_per_sample * batch_size;
  }
};

// One sample's place in a batch slot.
struct SampleRow {
  char* data = nullptr;            // sample_bytes
  char* labels = nullptr;          // label_bytes_per_sample
  int32_t* label_count = nullptr;  // label_lengths: this row's count; else null
};

// What a worker reuses from sample to sample.
struct SampleScratch {
  Record record;
  Image raw_image;
  TransformScratch transform;
};

// How the host stage hands work to its threads for this kind.
struct WorkSchedule {
  // Consecutive samples a worker claims at once, and the batches such a
  // run may write into.
  uint64_t run_tasks = 1;
  size_t max_run_batches = 1;
  // Tasks submitted to the read engine beyond the prefetch window (0: none).
  uint64_t read_ahead_tasks = 0;
  // Tasks the read-ahead may lag the window by before a worker submits
  // more (0: submit whenever there are any).
  uint64_t submit_chunk = 0;
  // true: Write takes microseconds, so the worker times whole runs (wall,
  // and CPU time read every few runs) instead of each sample.
  bool time_per_run = false;
};

class SampleKind {
 public:
  virtual ~SampleKind() = default;

  // InvalidArgument for options this kind cannot honour (Loader::Open).
  virtual Status Validate() const = 0;
  // The dataset the loader reads for this kind, made from the one the
  // caller opened (token windows cut a corpus into windows); InvalidArgument
  // when the dataset cannot give this kind's samples. The kind keeps what it
  // needs of *prepared (which outlives it).
  // REQUIRES: called once, before the kind is shared with the workers.
  virtual Status Prepare(std::shared_ptr<const Dataset> opened,
                         std::shared_ptr<const Dataset>* prepared) = 0;
  // The batch's shapes for `dataset` (the prepared one).
  virtual Status Layout(const Dataset& dataset, BatchLayout* layout) const = 0;
  virtual WorkSchedule Schedule(const std::vector<uint64_t>& block_sizes,
                                bool read_engine) const;

  // The kind's own fields of a LoaderState (what its positions mean), and
  // the check that a state was saved by a loader of the same kind and
  // settings (InvalidArgument otherwise).
  virtual void DescribeState(LoaderState* state) const;
  virtual Status CheckState(const LoaderState& state) const;
  // device=cuda: moves work to the device stage where the kind can (the
  // image kind's normalisation): *host, the options of the host stage, and
  // the kind itself then produce what the device stage takes.
  // REQUIRES: called before Prepare, before the kind is shared.
  virtual void ConfigureDevice(const DeviceOptions& device, LoaderOptions* host,
                               DeviceStageOptions* stage);

  // Reads sample `sample` itself (no read engine bytes).
  virtual Status ReadRecord(const Dataset& dataset, uint64_t sample, Record* record) const;
  // Writes the record into `row`. Corruption/InvalidArgument naming the
  // sample for a record this kind cannot write.
  virtual Status Write(uint64_t sample, uint64_t epoch, const Record& record,
                       const BatchLayout& layout, const SampleRow& row,
                       SampleScratch* scratch) const = 0;
  // Writes straight from the read engine's bytes of `location`, with no
  // Record; sets *handled false when the kind does not (the record is then
  // parsed by the dataset and given to Write). *bytes: the sample's bytes.
  virtual Status WriteFetched(const DatasetBase& dataset, uint64_t sample,
                              const RecordLocation& location, const char* data, size_t size,
                              const BatchLayout& layout, const SampleRow& row, bool* handled,
                              uint64_t* bytes) const;

 protected:
  explicit SampleKind(const LoaderOptions& options) : options_(options) {}
  LoaderOptions options_;  // constant once the kind is shared
};

// The kind LoaderOptions::transform names.
Status MakeSampleKind(const LoaderOptions& options, std::shared_ptr<SampleKind>* kind);

// Shared by the kinds whose labels are the record's (image, raw).
// The label layout from label_type, label_count, label_lengths and the
// dataset's integer_labels().
Status RecordLabelLayout(const LoaderOptions& options, const Dataset& dataset,
                         BatchLayout* layout);
// The record's labels into the row, as RecordLabelLayout laid them out.
Status WriteRecordLabels(const LoaderOptions& options, const BatchLayout& layout, uint64_t sample,
                         const Record& record, const SampleRow& row);
// Refuses a token corpus (it needs the token-window kind), else passes the
// dataset on.
Status PrepareRecordDataset(std::shared_ptr<const Dataset> opened,
                            std::shared_ptr<const Dataset>* prepared);

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_SAMPLE_KIND_H_
