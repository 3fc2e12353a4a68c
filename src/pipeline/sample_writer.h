// SampleWriter: one sample into its row of a batch slot. The record is read
// (Dataset::Read / ReadForDecode) or parsed from the read engine's bytes
// (Dataset::ParseLocated), decoded and transformed straight into the slot's
// data (or copied and padded, for raw vectors), and its labels written into
// the slot's label buffer: [counts: B int32 with label_lengths][labels].
//
// Thread safety: const after construction; any number of workers write
// different rows at once, each with its own Scratch.
#ifndef GPUFEED_PIPELINE_SAMPLE_WRITER_H_
#define GPUFEED_PIPELINE_SAMPLE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "decode/transform.h"
#include "format/token_corpus.h"
#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "pipeline/batch_ring.h"
#include "pipeline/host_stats.h"
#include "pipeline/read_ahead.h"

namespace gpufeed {


// The shapes and sizes of a host batch, from the options and the dataset.
struct BatchLayout {
  TensorDtype data_dtype = TensorDtype::kFloat32;
  std::vector<int64_t> sample_shape;  // without the batch dimension
  size_t sample_bytes = 0;
  TensorDtype label_dtype = TensorDtype::kInt64;
  size_t label_bytes_per_sample = 0;
  size_t lengths_bytes = 0;  // label_lengths: the counts before the labels
  TokenDtype token_dtype = TokenDtype::kAuto;  // token windows: the corpus's

  // InvalidArgument for label_lengths without float32 labels.
  static Status For(const LoaderOptions& options, const Dataset& dataset, BatchLayout* layout);
  size_t data_bytes(uint32_t batch_size) const { return sample_bytes * batch_size; }
  size_t label_bytes(uint32_t batch_size) const {
    return lengths_bytes + label_bytes_per_sample * batch_size;
  }
};

class SampleWriter {
 public:
  // What a worker reuses from sample to sample.
  struct Scratch {
    Record record;
    Image raw_image;
    TransformScratch transform;
  };

  // `dataset` outlives the writer.
  SampleWriter(const Dataset* dataset, const LoaderOptions& options, const BatchLayout& layout);

  // Reads sample `sample` itself and writes it at row `position` of `slot`.
  Status Read(uint64_t sample, uint64_t epoch, Slot& slot, size_t position, Scratch* scratch,
              WorkFigures* figures) const;
  // The same from the bytes the read engine fetched.
  Status Parse(uint64_t sample, uint64_t epoch, const ReadAhead::Fetched& fetched, Slot& slot,
               size_t position, Scratch* scratch, WorkFigures* figures) const;

 private:
  Status Write(uint64_t sample, uint64_t epoch, Slot& slot, size_t position, Scratch* scratch,
               WorkFigures* figures) const;
  void WriteRaw(const Record& record, char* destination) const;
  // Token windows: x (the first seq_len tokens) into the data row, y (the
  // last seq_len) into the label row, widened to the output dtype.
  void WriteTokens(const char* window, Slot& slot, size_t position) const;
  Status WriteLabels(uint64_t sample, const Record& record, char* destination) const;

  const Dataset* const dataset_;
  const TokenWindows* const tokens_;  // dataset_ as token windows, or null
  const LoaderOptions options_;
  const BatchLayout layout_;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_SAMPLE_WRITER_H_
