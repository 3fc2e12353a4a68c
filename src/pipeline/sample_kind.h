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

#include "batch/batch_source.h"
#include "decode/transform.h"
#include "device/device_stage.h"
#include "format/dataset_base.h"
#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"

namespace gpufeed {

// A tensor of a kind beyond data and labels (Batch::extras).
struct ExtraLayout {
  TensorDtype dtype = TensorDtype::kInt64;
  std::vector<int64_t> shape;  // of one sample's part, without the batch dimension
  size_t bytes_per_sample = 0;
};

// Most extra tensors a kind may lay out.
constexpr size_t kMaxExtras = 8;

// The shapes and sizes of a host batch: SampleKind::Layout fills it.
//
// A slot's data buffer holds planes, each a (batch_size, ...) C-contiguous
// array: the data, then each extra tensor, then (labels_in_data) the
// labels, every plane starting at a multiple of kPlaneAlign bytes (laid out
// for the full batch size, so a short last batch leaves the planes where
// they are). One copy of the buffer moves them all.
struct BatchLayout {
  static constexpr size_t kPlaneAlign = 256;

  TensorDtype data_dtype = TensorDtype::kFloat32;
  std::vector<int64_t> sample_shape;  // without the batch dimension
  size_t sample_bytes = 0;
  TensorDtype label_dtype = TensorDtype::kInt64;
  std::vector<int64_t> label_shape;  // of one sample's labels; empty: a scalar
  size_t label_bytes_per_sample = 0;
  size_t lengths_bytes = 0;  // label_lengths: the counts before the labels
  std::vector<ExtraLayout> extras;  // at most kMaxExtras
  // The labels are the data buffer's last plane (no label_lengths): the
  // slot's label buffer is then unused.
  bool labels_in_data = false;

  // Where extra plane i starts in the data buffer (i == extras.size(): the
  // labels' plane, or the end).
  size_t plane_offset(size_t i, uint32_t batch_size) const {
    size_t offset = sample_bytes * batch_size;
    for (size_t e = 0; e < i; ++e) {
      offset = Align(offset) + extras[e].bytes_per_sample * batch_size;
    }
    return i < extras.size() || labels_in_data ? Align(offset) : offset;
  }
  size_t data_bytes(uint32_t batch_size) const {
    const size_t end = plane_offset(extras.size(), batch_size);
    return labels_in_data ? end + label_bytes_per_sample * batch_size : end;
  }
  // The label buffer's bytes (0 with labels_in_data).
  size_t label_bytes(uint32_t batch_size) const {
    return labels_in_data ? 0 : lengths_bytes + label_bytes_per_sample * batch_size;
  }
  static size_t Align(size_t offset) {
    return (offset + kPlaneAlign - 1) / kPlaneAlign * kPlaneAlign;
  }
};

// One sample's place in a batch slot.
struct SampleRow {
  char* data = nullptr;            // sample_bytes
  char* labels = nullptr;          // label_bytes_per_sample
  int32_t* label_count = nullptr;  // label_lengths: this row's count; else null
  char* extras[kMaxExtras] = {};   // extras[i].bytes_per_sample each
};

// The extra tensors of a slot's data buffer holding `samples` samples.
std::vector<Tensor> ExtraTensors(const BatchLayout& layout, uint32_t batch_size, void* data,
                                 int64_t samples);

// Where a whole run writes (SampleKind::WriteRun): the row of its first
// sample; the sample after a row is its pointers advanced by the layout's
// per-sample bytes (a run never crosses a batch).
using RunRows = SampleRow;

// What a kind's embedding lookups took (LoaderOptions::embeddings): wall
// and CPU time of the EmbeddingTable::Lookup calls, and the ids looked up.
struct LookupFigures {
  double seconds = 0;
  double cpu_seconds = 0;
  uint64_t rows = 0;
};

// What a whole run took, for the stats.
struct RunFigures {
  double read_seconds = 0;  // waiting for bytes
  uint64_t bytes = 0;       // of the samples' records
  LookupFigures lookups;    // within the run's time, apart from its reads
};

// What a worker reuses from sample to sample.
struct SampleScratch {
  Record record;
  Image raw_image;
  TransformScratch transform;
  // The lookups of SampleKind::Write since SampleWriter last took them.
  LookupFigures lookups;
};

// How the host stage hands work to its threads for this kind.
struct WorkSchedule {
  // Consecutive samples a worker claims at once, and the batches such a
  // run may write into.
  uint64_t run_tasks = 1;
  size_t max_run_batches = 1;
  // Tasks submitted to the read engine beyond the prefetch window (0: none).
  uint64_t read_ahead_tasks = 0;
  // true: a sample costs less to write than to read (token windows, raw
  // records), so under global or node shuffle the reads, one per sample,
  // are the work: the host stage queues GlobalShuffleReadAhead of them
  // beyond the prefetch window. Kinds that decode (images) leave it false:
  // their decode paces the reads, and reading further ahead only takes CPU
  // and cache from it.
  bool random_read_ahead = false;
  // Tasks the read-ahead may lag the window by before a worker submits
  // more (0: submit whenever there are any).
  uint64_t submit_chunk = 0;
  // Bytes of read buffers the read engine must be able to hold for this
  // schedule not to wait on itself (0: no floor). A kind whose samples
  // share whole-block reads keeps a shuffle window's blocks held while its
  // runs may already wait for the next window's: with fewer buffers than
  // both windows' blocks, a worker holding the current window's samples
  // waits for a read that waits for those very buffers. The host stage
  // raises IoOptions::inflight_bytes to this when it is lower.
  uint64_t min_read_budget = 0;
  // true: Write takes microseconds, so the worker times whole runs (wall,
  // and CPU time read every few runs) instead of each sample.
  bool time_per_run = false;
  // true: samples are a few hundred bytes (tabular rows): the kind reads
  // and writes each part of a run that falls in one batch at once
  // (WriteRun), with no read-ahead per sample. Implies time_per_run.
  bool whole_runs = false;
};

// Global shuffle through the read engine, one read per sample: the reads
// to queue beyond the prefetch window (WorkSchedule::read_ahead_tasks), so
// that the engine does not drain while a batch waits for its last reads
// (the window moves only when a batch is delivered). Twice every ring's
// slots, and at most half the engine's buffer budget in samples of
// `mean_sample_bytes` (at least one).
uint64_t GlobalShuffleReadAhead(const IoOptions& io, uint64_t mean_sample_bytes);

class SampleKind {
 public:
  virtual ~SampleKind() = default;

  // "image", "raw", "tokens", "tabular" (LoaderStats::sample_kind).
  virtual const char* name() const = 0;
  // InvalidArgument for options this kind cannot honour (Loader::Open).
  virtual Status Validate() const = 0;
  // Whether the kind delivers LoaderOptions::embeddings (Loader::Open
  // refuses them for the kinds that do not).
  virtual bool TakesEmbeddings() const { return false; }
  // Adds the kind's own counters (the embedding tables') to *stats. Any
  // thread; the host stage calls it with its lock held.
  virtual void AddStats(StageStats* stats) const {}
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
  // WorkSchedule::whole_runs: writes samples[0, count) into consecutive
  // rows from `first` (their reads included); samples[count, count + ahead)
  // come next in this rank's order (what a kind may read ahead). On a
  // sample it cannot write,
  // returns its error naming it with *written the samples before it that
  // were written (the caller substitutes or fails it, then calls again
  // from the next one); else *written == count. Runs on many workers at once.
  virtual Status WriteRun(const DatasetBase& dataset, const uint64_t* samples, size_t count,
                          size_t ahead, const BatchLayout& layout, const RunRows& first, size_t* written,
                          RunFigures* figures) const;

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
