// HostStage: the first stage of the chain, a BatchSource of host batches.
// Work is handed out one sample at a time in epoch order to a pool of decode
// threads; each reads its record (ReadAhead's bytes, or Dataset::Read),
// decodes and transforms it straight into its row of a batch slot
// (SampleWriter), and NextFor hands whole batches out in order as they
// complete, up to `prefetch` batches ahead of the consumer (BatchRing).
//
// Thread safety: as BatchSource. The destructor stops the workers promptly
// (mid-epoch, with full slots); Batches handed out stay valid after it.
#ifndef GPUFEED_PIPELINE_HOST_STAGE_H_
#define GPUFEED_PIPELINE_HOST_STAGE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "batch/batch_source.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "pipeline/batch_ring.h"
#include "pipeline/host_stats.h"
#include "pipeline/read_ahead.h"
#include "pipeline/sample_kind.h"
#include "pipeline/sample_writer.h"

namespace gpufeed {

// How the Loader sets the stage up beyond LoaderOptions.
struct HostStageSetup {
  // What a sample becomes (required), prepared for the stage's dataset.
  std::shared_ptr<const SampleKind> kind;
  // false: the workers read every sample themselves (Dataset::Read), never
  // through the read engine (tests compare the two paths).
  bool use_read_engine = true;
  // Slots beyond prefetch + 1: the device stage's copy thread holds up to
  // two host batches while their copies run.
  int extra_slots = 0;
  // pin_memory on the CPU device: batches go back with a fence (see
  // MakePinnedBatchHandle) on this CUDA device; -1: plain release.
  int pinned_device = -1;
};

class HostStage final : public BatchSource {
 public:
  // REQUIRES: options valid (Loader::Open checks them). IOError when the
  // batch buffers cannot be allocated; InvalidArgument for a label layout
  // the dataset cannot fill.
  static Status Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                       HostStageSetup setup, std::unique_ptr<HostStage>* stage);
  ~HostStage() override;

  Status NextFor(Batch* batch, int timeout_ms, bool* ready) override;
  Status Seek(const BatchCursor& cursor) override;
  BatchCursor Position() const override;
  void AddStats(StageStats* stats) const override;

  // The epoch the workers are in.
  uint64_t epoch() const;
  // on_error=skip: the samples left out of the batches handed out in the
  // epoch in progress (Loader::SkippedSamples).
  std::vector<SkippedSample> SkippedSamples() const;
  // kNode: the splits `epoch` was drawn under before this loader's (see
  // LoaderState::earlier_splits); the runs of that epoch from the last
  // segment's end on rebuild the order from them. InvalidArgument when they
  // do not fit the dataset (nothing changes then). Call before Seek.
  Status SetEarlierSplits(uint64_t epoch, std::vector<NodeSplitSegment> earlier);
  // Those splits when the current run uses them and `cursor` lies in their
  // epoch; empty otherwise.
  std::vector<NodeSplitSegment> EarlierSplitsAt(const BatchCursor& cursor) const;
  // Bytes of one slot's data and labels (the device buffers' sizes).
  size_t data_bytes() const { return ring_->data_bytes(); }
  size_t label_bytes() const { return ring_->label_bytes(); }

 private:
  HostStage(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
            HostStageSetup setup, const BatchLayout& layout,
            std::shared_ptr<BatchRing> ring);
  void StartRun(uint64_t epoch, uint64_t consumed);
  void Quiesce(std::unique_lock<std::mutex>& lock);
  bool CanStart(uint64_t task);
  // The part of a worker's run that falls in one batch (slot).
  struct RunPart {
    Slot* slot;
    std::shared_ptr<HostReleaseFence> fence;  // the slot's, when claimed
    uint64_t first;                           // task
    uint64_t count;
  };
  uint64_t ClaimRun(std::vector<RunPart>* parts);
  // What a worker carries from claiming a run to publishing it, reused
  // from run to run.
  struct WorkerRun {
    uint64_t first = 0;  // task
    uint64_t count = 0;
    uint64_t epoch = 0;
    std::vector<RunPart> parts;  // the batches the run writes into
    std::vector<ReadAhead::Fetched> fetched;
    std::vector<char> have_bytes;
    std::vector<Status> statuses;  // raise mode: each task's failure
    std::vector<SkippedRow> skips;  // skip mode: the tasks that failed
    WorkFigures figures;
    SampleWriter::Scratch scratch;
    int cpu_sample_countdown = 0;  // runs until the next CPU time reading
    double on_cpu_share = 1;       // of the wall time, at the last reading
  };
  struct RunTimer {
    bool sample_cpu = false;
    double cpu_before = 0;
    Clock::time_point wall_before;
    WorkFigures before;
  };
  void Work();
  void FetchRun(std::unique_lock<std::mutex>& lock, WorkerRun* run);
  void WriteRun(WorkerRun* run);
  RunTimer StartRunTimer(WorkerRun* run) const;
  void StopRunTimer(const RunTimer& timer, WorkerRun* run) const;
  void FinishRun(WorkerRun* run);
  // One claimed sample into its row (read or parse, then write); a direct
  // read failing with an IOError is tried again (IoOptions::retries).
  // Without the lock.
  Status WriteSample(uint64_t task, uint64_t epoch, Slot& slot, ReadAhead::Fetched* fetched,
                     bool have_bytes, SampleWriter::Scratch* scratch, WorkFigures* figures);
  Status ReadWithRetries(uint64_t sample, uint64_t epoch, Slot& slot, size_t position,
                         SampleWriter::Scratch* scratch, WorkFigures* figures);
  // Task `task` of the run failed: its status (raise) or a SkippedRow (skip).
  // Without the lock.
  void RecordFailure(uint64_t task, Status status, WorkerRun* run);
  // Where sample `sample`'s record lies (SkippedSample's path and offset).
  void LocateSkipped(uint64_t sample, SkippedSample* skipped) const;
  // WorkSchedule::whole_runs: the part's samples written by the kind at once.
  void WriteWholePart(const RunPart& part, WorkerRun* run);
  void LogSkip(const Status& status);
  // on_error=skip, at delivery: lists the slot's skipped samples for the
  // epoch, moves its good rows down to the front of every plane and
  // returns them in *rows; the max_skipped error once the epoch's skips
  // pass it. REQUIRES: the lock; the slot complete.
  Status TakeSkipped(Slot& slot, int* rows);
  void CompactRows(Slot& slot, const std::vector<char>& bad);
  void HandOut(Slot& slot, uint64_t k, int rows, Batch* batch);
  void FillStatsLocked(StageStats* stats) const;

  // Constant after Create.
  const std::shared_ptr<const Dataset> dataset_;
  const LoaderOptions options_;
  const HostStageSetup setup_;
  const BatchLayout layout_;
  const SampleWriter writer_;
  std::vector<uint64_t> shard_sizes_;
  int threads_ = 1;
  // Shared with the Batches handed out; its mutex guards what follows.
  const std::shared_ptr<BatchRing> ring_;
  std::unique_ptr<ReadAhead> read_ahead_;  // null: the workers read everything
  // How the kind wants its work handed out (SampleKind::Schedule, with
  // read_ahead_ known): runs of samples, tasks read ahead, timing per run.
  WorkSchedule schedule_;
  std::vector<std::thread> workers_;

  // The run: this rank's samples from a cursor. Guarded by ring_->mutex.
  std::vector<uint64_t> samples_;
  uint64_t epoch_ = 0;
  uint64_t epoch_size_ = 0;
  uint64_t run_start_ = 0;
  uint64_t run_ = 0;
  uint64_t batches_ = 0;
  uint64_t next_task_ = 0;
  uint64_t delivered_ = 0;
  uint64_t delivered_samples_ = 0;
  bool end_signalled_ = false;
  // on_error=skip: the samples left out of this epoch's delivered batches,
  // and the most it may leave out (LoaderOptions::max_skipped).
  std::vector<SkippedSample> skipped_;
  uint64_t skipped_epoch_ = 0;
  double max_skipped_ = 0;
  // SetEarlierSplits' history, for the epoch earlier_epoch_.
  std::vector<NodeSplitSegment> earlier_;
  uint64_t earlier_epoch_ = 0;
  // SetEarlierSplits was called since the run started: its order may be
  // another, so Seek restarts it even to the run's own start.
  bool order_changed_ = false;
  bool stopping_ = false;
  bool accepting_ = true;
  int active_ = 0;
  HostStats stats_;
  std::atomic<uint64_t> skip_logs_{0};  // failures logged about (LogSkip), unlocked
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_HOST_STAGE_H_
