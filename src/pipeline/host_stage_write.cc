// HostStage's writing of claimed samples into their rows (host_stage.h):
// one at a time, or whole parts of a run for kinds that write runs, the
// retries of direct reads, and what a failure leaves (raise: the batch's
// error; skip: a SkippedRow, its row left out at delivery).
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include "format/dataset_base.h"
#include "pipeline/host_stage.h"
#include "util/logging.h"

namespace gpufeed {

// Writes every sample of the run into its row. Without the lock.
void HostStage::WriteRun(WorkerRun* run) {
  for (RunPart& part : run->parts) {
    if (part.fence) part.fence->Wait();  // before anything writes the slot
  }
  run->statuses.assign(run->count, Status::OK());
  run->skips.clear();
  const RunTimer timer = StartRunTimer(run);
  for (const RunPart& part : run->parts) {
    if (schedule_.whole_runs) {
      WriteWholePart(part, run);
      continue;
    }
    for (uint64_t i = part.first - run->first; i < part.first - run->first + part.count; ++i) {
      Status status = WriteSample(run->first + i, run->epoch, *part.slot, &run->fetched[i],
                                  run->have_bytes[i] != 0, &run->scratch, &run->figures);
      if (!status.ok()) RecordFailure(run->first + i, std::move(status), run);
    }
  }
  StopRunTimer(timer, run);
}

Status HostStage::WriteSample(uint64_t task, uint64_t epoch, Slot& slot,
                              ReadAhead::Fetched* fetched, bool have_bytes,
                              SampleWriter::Scratch* scratch, WorkFigures* figures) {
  const size_t position = task % options_.batch_size;
  const uint64_t sample = samples_[task];
  Status status;
  try {
    // The engine retries its own reads; only direct reads are retried here.
    status = have_bytes
                 ? writer_.Parse(sample, epoch, *fetched, slot, position, scratch, figures)
                 : ReadWithRetries(sample, epoch, slot, position, scratch, figures);
  } catch (const std::exception& e) {
    // Nothing may escape a worker (it would end the process): an
    // allocation failure or a library exception is this sample's error.
    status = Status::Internal("sample " + std::to_string(sample) + ": " + e.what());
  }
  // An unshared read goes back to the engine's budget now; a shared one
  // (a token block) with its last window, in ReadAhead::Release.
  fetched->completion.reset();
  return status;
}

// A transient failure of the operating system (the read engine's list,
// IsTransientReadError, and EMFILE/ENFILE: descriptors run out for a
// moment) may pass: it is tried again up to io.retries times, waiting
// retry_backoff_ms, then twice that, and so on. Any other failure (a
// corrupt record, ENOTCONN from a dead filesystem client) is final at once.
Status HostStage::ReadWithRetries(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                                  SampleWriter::Scratch* scratch, WorkFigures* figures) {
  Status status = writer_.Read(sample, epoch, slot, position, scratch, figures);
  auto transient = [](const Status& failed) {
    const int error = failed.error_number();
    return failed.IsIOError() &&
           (IsTransientReadError(error) || error == EMFILE || error == ENFILE);
  };
  for (int attempt = 0; !status.ok() && transient(status) && attempt < options_.io.retries;
       ++attempt) {
    const int64_t wait_ms = static_cast<int64_t>(std::max(0, options_.io.retry_backoff_ms))
                            << std::min(attempt, 16);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    status = writer_.Read(sample, epoch, slot, position, scratch, figures);
  }
  return status;
}

void HostStage::RecordFailure(uint64_t task, Status status, WorkerRun* run) {
  if (options_.on_error != OnError::kSkip) {
    run->statuses[task - run->first] = std::move(status);
    return;
  }
  LogSkip(status);
  SkippedRow row;
  row.task = task;
  row.sample.sample = samples_[task];
  row.sample.reason = status.ToString();
  const uint64_t i = task - run->first;
  if (i < run->have_bytes.size() && run->have_bytes[i] && !run->fetched[i].location.path.empty()) {
    // Where the engine read it: no second lookup (Locate may touch the
    // store, and the store is what just failed).
    row.sample.path = run->fetched[i].location.path;
    row.sample.offset = run->fetched[i].location.offset;
  } else {
    LocateSkipped(row.sample.sample, &row.sample);
  }
  row.status = std::move(status);
  run->skips.push_back(std::move(row));
}

// The format's byte range when it knows one; else the shard holding the
// sample (no offset), else nothing.
void HostStage::LocateSkipped(uint64_t sample, SkippedSample* skipped) const {
  const DatasetBase& read_path = ReadPathOf(*dataset_);
  RecordLocation location;
  bool located = false;
  try {
    located = sample < read_path.size() && read_path.Locate(sample, &location);
  } catch (const std::exception&) {
    located = false;
  }
  if (located) {
    skipped->path = location.path;
    skipped->offset = location.offset;
    return;
  }
  skipped->offset = UINT64_MAX;
  const std::vector<ShardInfo>& shards = read_path.shards();
  auto after = std::upper_bound(
      shards.begin(), shards.end(), sample,
      [](uint64_t index, const ShardInfo& shard) { return index < shard.first_record; });
  if (after != shards.begin()) {
    const ShardInfo& shard = *(after - 1);
    if (sample < shard.first_record + shard.records) skipped->path = shard.path;
  }
}

// The kind writes the part at once; a sample it cannot write fails the
// batch (raise) or is left out (skip), and the part goes on after it.
// Without the lock.
void HostStage::WriteWholePart(const RunPart& part, WorkerRun* run) {
  uint64_t done = 0;
  while (done < part.count) {
    const uint64_t task = part.first + done;
    size_t written = 0;
    Status status;
    try {
      const size_t count = part.count - done;
      status = writer_.WriteRun(&samples_[task], count, samples_.size() - task - count,
                                *part.slot, task % options_.batch_size, &written, &run->figures);
    } catch (const std::exception& e) {
      status = Status::Internal("samples " + std::to_string(samples_[task]) + " and on: " +
                                e.what());
      written = 0;
    }
    done += written;
    if (status.ok()) break;
    RecordFailure(part.first + done, std::move(status), run);
    done += 1;
  }
}

void HostStage::LogSkip(const Status& status) {
  const uint64_t count = skip_logs_.fetch_add(1);
  // Rate-limited: the first, then every 1000th.
  if (count % 1000 == 0) {
    Log().warn("skipping a bad sample (on_error=skip, {} failed so far): {}", count + 1,
               status.ToString());
  }
}

}  // namespace gpufeed
