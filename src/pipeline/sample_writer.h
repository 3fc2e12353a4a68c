// SampleWriter: one sample into its row of a batch slot. The record is read
// (SampleKind::ReadRecord) or parsed from the read engine's bytes
// (DatasetBase::ParseLocated, or the kind straight from those bytes), then
// the sample kind writes it into the slot's data row and label row (the
// label buffer is [counts: B int32 with label_lengths][labels]). The
// writer times the read and the write; it knows no kind or format.
//
// Thread safety: const after construction; any number of workers write
// different rows at once, each with its own SampleScratch.
#ifndef GPUFEED_PIPELINE_SAMPLE_WRITER_H_
#define GPUFEED_PIPELINE_SAMPLE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "format/dataset_base.h"
#include "pipeline/batch_ring.h"
#include "pipeline/host_stats.h"
#include "pipeline/read_ahead.h"
#include "pipeline/sample_kind.h"

namespace gpufeed {

class SampleWriter {
 public:
  using Scratch = SampleScratch;

  // `dataset` outlives the writer; `kind` was prepared for it.
  SampleWriter(const Dataset* dataset, std::shared_ptr<const SampleKind> kind,
               const BatchLayout& layout, uint32_t batch_size, bool label_lengths);

  // Reads sample `sample` itself and writes it at row `position` of `slot`.
  Status Read(uint64_t sample, uint64_t epoch, Slot& slot, size_t position, Scratch* scratch,
              WorkFigures* figures) const;
  // The same from the bytes the read engine fetched.
  Status Parse(uint64_t sample, uint64_t epoch, const ReadAhead::Fetched& fetched, Slot& slot,
               size_t position, Scratch* scratch, WorkFigures* figures) const;
  // WorkSchedule::whole_runs: samples[0, count) into rows from `position`
  // on (SampleKind::WriteRun), the reads' time and bytes added to *figures.
  Status WriteRun(const uint64_t* samples, size_t count, size_t ahead, Slot& slot,
                  size_t position, size_t* written, WorkFigures* figures) const;

  // Sample `position`'s row of `slot`.
  SampleRow RowOf(Slot& slot, size_t position) const;

 private:
  Status Write(uint64_t sample, uint64_t epoch, const SampleRow& row, Scratch* scratch,
               WorkFigures* figures) const;

  const DatasetBase& dataset_;
  const std::shared_ptr<const SampleKind> kind_;
  const BatchLayout layout_;
  size_t plane_offsets_[kMaxExtras] = {};  // of the extra tensors in a slot's data
  size_t labels_offset_ = 0;               // of the labels there (labels_in_data)
  const bool label_lengths_;
  // The kind's work takes microseconds: the host stage times whole runs,
  // so the per-sample CPU time (a system call) is not read here.
  const bool time_per_run_;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_SAMPLE_WRITER_H_
