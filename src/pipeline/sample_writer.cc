#include "pipeline/sample_writer.h"

#include <string>
#include <utility>

#include "util/system_stats.h"

namespace gpufeed {

namespace {

void AddLookups(const LookupFigures& lookups, WorkFigures* figures) {
  figures->lookup += lookups.seconds;
  figures->lookup_cpu += lookups.cpu_seconds;
  figures->lookup_rows += lookups.rows;
}

}  // namespace

SampleWriter::SampleWriter(const Dataset* dataset, std::shared_ptr<const SampleKind> kind,
                           const BatchLayout& layout, uint32_t batch_size, bool label_lengths)
    : dataset_(ReadPathOf(*dataset)),
      kind_(std::move(kind)),
      layout_(layout),
      label_lengths_(label_lengths),
      time_per_run_(kind_->Schedule({}, false).time_per_run) {
  for (size_t i = 0; i < layout_.extras.size() && i < kMaxExtras; ++i) {
    plane_offsets_[i] = layout_.plane_offset(i, batch_size);
  }
  labels_offset_ = layout_.plane_offset(layout_.extras.size(), batch_size);
}

SampleRow SampleWriter::RowOf(Slot& slot, size_t position) const {
  SampleRow row;
  row.data = static_cast<char*>(slot.data) + position * layout_.sample_bytes;
  row.labels = (layout_.labels_in_data ? static_cast<char*>(slot.data) + labels_offset_
                                        : static_cast<char*>(slot.labels) + layout_.lengths_bytes) +
               position * layout_.label_bytes_per_sample;
  if (label_lengths_ && layout_.lengths_bytes > 0) {
    row.label_count = static_cast<int32_t*>(slot.labels) + position;
  }
  for (size_t i = 0; i < layout_.extras.size() && i < kMaxExtras; ++i) {
    row.extras[i] = static_cast<char*>(slot.data) + plane_offsets_[i] +
                    position * layout_.extras[i].bytes_per_sample;
  }
  return row;
}

Status SampleWriter::WriteRun(const uint64_t* samples, size_t count, size_t ahead, Slot& slot,
                              size_t position, size_t* written, WorkFigures* figures) const {
  RunFigures run;
  Status status = kind_->WriteRun(dataset_, samples, count, ahead, layout_, RowOf(slot, position),
                                  written, &run);
  figures->read += run.read_seconds;
  figures->bytes += run.bytes;
  AddLookups(run.lookups, figures);
  return status;
}

Status SampleWriter::Parse(uint64_t sample, uint64_t epoch, const ReadAhead::Fetched& fetched,
                           Slot& slot, size_t position, Scratch* scratch,
                           WorkFigures* figures) const {
  const ReadCompletion& completion = *fetched.completion;
  Status status = completion.status;
  const SampleRow row = RowOf(slot, position);
  bool handled = false;
  if (status.ok()) {
    // The time of a kind that writes from the bytes is taken per run by the
    // host stage, not here per sample.
    uint64_t bytes = 0;
    status = kind_->WriteFetched(dataset_, sample, fetched.location, completion.buffer.data(),
                                 completion.buffer.size(), layout_, row, &handled, &bytes);
    if (handled && status.ok()) figures->bytes += bytes;
  }
  if (status.ok() && !handled) {
    status = dataset_.ParseLocated(sample, fetched.location, completion.buffer.data(),
                                   completion.buffer.size(), &scratch->record);
  }
  if (!status.ok()) return status.WithContext("sample " + std::to_string(sample));
  if (handled) return Status::OK();
  figures->bytes += scratch->record.data.size();
  return Write(sample, epoch, row, scratch, figures);
}

Status SampleWriter::Read(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                          Scratch* scratch, WorkFigures* figures) const {
  auto read_started = Clock::now();
  Status status = kind_->ReadRecord(dataset_, sample, &scratch->record);
  figures->read += Seconds(Clock::now() - read_started);
  if (!status.ok()) return status;
  figures->bytes += scratch->record.data.size();
  return Write(sample, epoch, RowOf(slot, position), scratch, figures);
}

Status SampleWriter::Write(uint64_t sample, uint64_t epoch, const SampleRow& row,
                           Scratch* scratch, WorkFigures* figures) const {
  auto read_done = Clock::now();
  const double cpu_started = time_per_run_ ? 0 : ThreadCpuSeconds();
  scratch->lookups = LookupFigures();
  Status status = kind_->Write(sample, epoch, scratch->record, layout_, row, scratch);
  // The kind's lookups are their own share, not decoding.
  figures->decode += Seconds(Clock::now() - read_done) - scratch->lookups.seconds;
  if (!time_per_run_) {
    figures->decode_cpu += ThreadCpuSeconds() - cpu_started - scratch->lookups.cpu_seconds;
  }
  AddLookups(scratch->lookups, figures);
  return status;
}

}  // namespace gpufeed
