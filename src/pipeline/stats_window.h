// StatsWindow: the loader's figures over a span of time (StatsSpan) rather
// than since Open. It keeps points - the stages' cumulative figures and
// the machine's counters (process and machine CPU time, the block device
// under the dataset) at one moment - taken at Open, at most once a second
// from Next(), and at the start and end of each epoch; a span's figures are
// the difference between a point and now, judged by JudgeBottleneck.
//
// Thread safety: every method may be called from any thread; an internal
// mutex guards the points. Tick runs on the consumer's thread after the
// chain's NextFor returned (never under a stage's lock).
#ifndef GPUFEED_PIPELINE_STATS_WINDOW_H_
#define GPUFEED_PIPELINE_STATS_WINDOW_H_

#include <chrono>
#include <deque>
#include <mutex>
#include <string>

#include "batch/batch_source.h"
#include "gpufeed/loader.h"
#include "util/system_stats.h"

namespace gpufeed {

// The cumulative figures at one moment.
struct StatsPoint {
  std::chrono::steady_clock::time_point at;
  StageStats stages;
  double process_cpu = 0;
  bool have_machine = false;
  MachineCpu machine;
  bool have_disk = false;
  DiskCounters disk;
};

// The figures between two points, with the verdict (exposed for tests).
// `disk`/`disk_note` name the device the points' DiskCounters are of.
LoaderStats StatsBetween(const StatsPoint& from, const StatsPoint& to, StatsSpan span,
                         int cores, const std::string& disk, const std::string& disk_note);

class StatsWindow {
 public:
  // `dataset_path`: where the block device is looked up. Made before the
  // chain's stages start: the Open point is now, with every count at zero
  // (a worker may finish samples before the chain is assembled).
  StatsWindow(const std::string& dataset_path, double window_seconds);

  // A point of `chain` now.
  StatsPoint Take(const BatchSource& chain) const;
  // Before each NextFor of the chain: the first starts the recent window,
  // the first of an epoch its span.
  void BeforeNext(const BatchSource& chain);
  // After each NextFor of the chain: keeps a point a second; `end_of_epoch`
  // closes the epoch span (and returns true with its stats in *epoch).
  bool AfterNext(const BatchSource& chain, bool end_of_epoch, LoaderStats* epoch);
  // The next Tick starts a new epoch span (SetEpoch, Restore).
  void RestartEpoch();
  LoaderStats Stats(const BatchSource& chain, StatsSpan span) const;

 private:
  const double window_seconds_;
  const int cores_;
  std::string disk_;
  std::string disk_note_;

  mutable std::mutex mutex_;  // guards what follows
  StatsPoint open_;
  bool started_ = false;        // a Next() came
  std::deque<StatsPoint> points_;  // a second apart, the oldest just beyond the window
  StatsPoint epoch_start_;
  bool epoch_pending_ = true;   // the next Tick starts the epoch span
  bool epoch_closed_ = false;   // the epoch just ended: its span is frozen
  LoaderStats last_epoch_;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_STATS_WINDOW_H_
