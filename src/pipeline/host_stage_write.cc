// HostStage's writing of claimed samples into their rows (host_stage.h):
// one at a time, or whole parts of a run for kinds that write runs, and the
// substitutes of on_error=skip.
#include <exception>
#include <string>
#include <utility>

#include "pipeline/host_stage.h"
#include "util/logging.h"

namespace gpufeed {

namespace {
// on_error=skip: substitutes tried for one bad sample before giving up.
constexpr int kMaxSubstitutes = 16;
}  // namespace

Status HostStage::WriteSample(uint64_t task, uint64_t epoch, Slot& slot,
                              ReadAhead::Fetched* fetched, bool have_bytes,
                              SampleWriter::Scratch* scratch, WorkFigures* figures,
                              uint64_t* used) {
  const size_t position = task % options_.batch_size;
  const uint64_t sample = samples_[task];
  Status status;
  try {
    status = have_bytes
                 ? writer_.Parse(sample, epoch, *fetched, slot, position, scratch, figures)
                 : writer_.Read(sample, epoch, slot, position, scratch, figures);
  } catch (const std::exception& e) {
    // Nothing may escape a worker (it would end the process): an
    // allocation failure or a library exception is this sample's error.
    status = Status::Internal("sample " + std::to_string(sample) + ": " + e.what());
  }
  // An unshared read goes back to the engine's budget now; a shared one
  // (a token block) with its last window, in ReadAhead::Release.
  fetched->completion.reset();
  *used = sample;
  if (status.ok()) return status;
  return Substitute(task, epoch, slot, std::move(status), scratch, figures, used);
}

Status HostStage::Substitute(uint64_t task, uint64_t epoch, Slot& slot, Status status,
                             SampleWriter::Scratch* scratch, WorkFigures* figures,
                             uint64_t* used) {
  if (options_.on_error != OnError::kSkip) return status;
  const size_t position = task % options_.batch_size;
  LogSkip(status);
  stats_.skipped += 1;
  for (int attempt = 1; attempt <= kMaxSubstitutes && !status.ok(); ++attempt) {
    *used = samples_[(task + attempt) % samples_.size()];
    try {
      status = writer_.Read(*used, epoch, slot, position, scratch, figures);
    } catch (const std::exception& e) {
      status = Status::Internal("sample " + std::to_string(*used) + ": " + e.what());
    }
    if (!status.ok()) stats_.skipped += 1;
  }
  return status;
}

// The kind writes the part at once; a sample it cannot write is
// substituted (skip) or fails the batch (raise), and the part goes on after
// it. Without the lock.
void HostStage::WriteWholePart(const RunPart& part, WorkerRun* run) {
  uint64_t done = 0;
  while (done < part.count) {
    const uint64_t task = part.first + done;
    size_t written = 0;
    Status status;
    try {
      status = writer_.WriteRun(&samples_[task], part.count - done, *part.slot,
                                task % options_.batch_size, &written, &run->figures);
    } catch (const std::exception& e) {
      status = Status::Internal("samples " + std::to_string(samples_[task]) + " and on: " +
                                e.what());
      written = 0;
    }
    for (uint64_t i = task; i < task + written; ++i) run->used[i - run->first] = samples_[i];
    done += written;
    if (status.ok()) break;
    const uint64_t bad = part.first + done;
    uint64_t* used = &run->used[bad - run->first];
    *used = samples_[bad];
    run->statuses[bad - run->first] = Substitute(bad, run->epoch, *part.slot, std::move(status),
                                                 &run->scratch, &run->figures, used);
    done += 1;
  }
}

void HostStage::LogSkip(const Status& status) {
  uint64_t count = stats_.skipped.load();
  // Rate-limited: the first, then every 1000th.
  if (count == 0 || count % 1000 == 0) {
    Log().warn("skipping a bad sample (on_error=skip, {} skipped so far): {}", count + 1,
               status.ToString());
  }
}

}  // namespace gpufeed
