#include "pipeline/stats_window.h"

#include <algorithm>

#include "pipeline/verdict.h"

namespace gpufeed {

namespace {

using SteadyClock = std::chrono::steady_clock;

double Between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

constexpr double kMachineSpanSeconds = 0.5;

template <typename T>
T Delta(T to, T from) {
  return to > from ? to - from : T{0};
}

}  // namespace

LoaderStats StatsBetween(const StatsPoint& from, const StatsPoint& to, StatsSpan span,
                         int cores, const std::string& disk, const std::string& disk_note) {
  const StageStats& a = from.stages;
  const StageStats& b = to.stages;
  LoaderStats stats;
  stats.span = span;
  stats.batches = Delta(b.batches, a.batches);
  stats.samples = Delta(b.samples, a.samples);
  stats.bytes_read = Delta(b.bytes_read, a.bytes_read);
  stats.skipped = Delta(b.skipped, a.skipped);
  stats.threads = b.threads;
  const double wall = std::max(0.0, Between(from.at, to.at));
  stats.elapsed_seconds = wall;
  stats.read_seconds = Delta(b.read_seconds, a.read_seconds);
  stats.decode_seconds = Delta(b.decode_seconds, a.decode_seconds);
  stats.decode_cpu_seconds =
      std::min(stats.decode_seconds, Delta(b.decode_cpu_seconds, a.decode_cpu_seconds));
  stats.lookup_seconds = Delta(b.lookup_seconds, a.lookup_seconds);
  stats.lookup_cpu_seconds =
      std::min(stats.lookup_seconds, Delta(b.lookup_cpu_seconds, a.lookup_cpu_seconds));
  stats.lookup_rows = Delta(b.lookup_rows, a.lookup_rows);
  const uint64_t table_rows = Delta(b.lookup_table_rows, a.lookup_table_rows);
  stats.lookup_ram_hit_rate =
      table_rows > 0
          ? std::min(1.0, static_cast<double>(Delta(b.lookup_ram_hits, a.lookup_ram_hits)) /
                              static_cast<double>(table_rows))
          : -1;
  stats.blocked_seconds = Delta(b.blocked_seconds, a.blocked_seconds);
  stats.other_seconds =
      std::max(0.0, wall * std::max(1, b.threads) - stats.read_seconds - stats.decode_seconds -
                        stats.lookup_seconds - stats.blocked_seconds);
  stats.consumer_wait_seconds = Delta(b.consumer_wait_seconds, a.consumer_wait_seconds);
  uint64_t ready_count = Delta(b.ready_count, a.ready_count);
  stats.mean_ready_batches = ready_count ? Delta(b.ready_sum, a.ready_sum) / ready_count : 0;
  stats.io_backend = b.io_backend;
  stats.sample_kind = b.sample_kind;
  stats.io_requests = Delta(b.io_requests, a.io_requests);
  stats.io_bytes = Delta(b.io_bytes, a.io_bytes);
  stats.io_queue_depth = b.io_queue_depth;
  double busy = Delta(b.io_busy_seconds, a.io_busy_seconds);
  stats.io_mean_inflight = busy > 0 ? Delta(b.io_inflight_seconds, a.io_inflight_seconds) / busy : 0;
  stats.io_busy_share = wall > 0 ? std::min(1.0, busy / wall) : 0;
  stats.device = b.device;
  stats.device_batches = Delta(b.device_batches, a.device_batches);
  stats.device_bytes = Delta(b.device_bytes, a.device_bytes);
  stats.device_copy_seconds = Delta(b.device_copy_seconds, a.device_copy_seconds);
  stats.device_wait_buffer_seconds =
      Delta(b.device_wait_buffer_seconds, a.device_wait_buffer_seconds);

  stats.cores = cores;
  if (wall > 0) {
    stats.process_cpu_cores = Delta(to.process_cpu, from.process_cpu) / wall;
    // /proc/stat counts in ticks (10 ms): a span under half a second has
    // too few of them to say anything.
    if (from.have_machine && to.have_machine && wall >= kMachineSpanSeconds) {
      double busy_cpu = Delta(to.machine.busy, from.machine.busy);
      double steal = Delta(to.machine.steal, from.machine.steal);
      double total = Delta(to.machine.total, from.machine.total);
      double room = std::max(0.0, cores - stats.process_cpu_cores);
      stats.external_cpu_cores =
          std::min(room, std::max(0.0, (busy_cpu - steal) / wall - stats.process_cpu_cores));
      stats.steal_share = total > 0 ? std::min(1.0, steal / total) : 0;
    }
  }
  stats.disk = disk;
  stats.disk_note = disk_note;
  if (from.have_disk && to.have_disk && wall > 0) {
    stats.disk_util = std::min(1.0, Delta(to.disk.io_ticks_ms, from.disk.io_ticks_ms) / 1e3 / wall);
    stats.disk_read_bytes_per_second =
        static_cast<double>(Delta(to.disk.sectors_read, from.disk.sectors_read)) * 512 / wall;
  }
  JudgeBottleneck(&stats);
  return stats;
}

StatsWindow::StatsWindow(const std::string& dataset_path, double window_seconds)
    : window_seconds_(window_seconds > 0 ? window_seconds : 10), cores_(AvailableCores()) {
  disk_ = BlockDeviceForPath(dataset_path, &disk_note_);
  open_.at = SteadyClock::now();
  open_.process_cpu = ProcessCpuSeconds();
  open_.have_machine = ReadMachineCpu(&open_.machine);
  open_.have_disk = ReadDiskCounters(disk_, &open_.disk);
}

StatsPoint StatsWindow::Take(const BatchSource& chain) const {
  StatsPoint point;
  chain.AddStats(&point.stages);
  point.at = SteadyClock::now();
  point.process_cpu = ProcessCpuSeconds();
  point.have_machine = ReadMachineCpu(&point.machine);
  point.have_disk = ReadDiskCounters(disk_, &point.disk);
  return point;
}

void StatsWindow::BeforeNext(const BatchSource& chain) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_ && !epoch_pending_) return;
  }
  StatsPoint point = Take(chain);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!started_) {
    // The recent window starts at the first Next(), not at Open: the time
    // before it (start-up, the first fill) is not the loader's steady state.
    started_ = true;
    points_.clear();
    points_.push_back(point);
  }
  if (epoch_pending_) {
    epoch_start_ = point;
    epoch_pending_ = false;
    epoch_closed_ = false;
  }
}

bool StatsWindow::AfterNext(const BatchSource& chain, bool end_of_epoch, LoaderStats* epoch) {
  auto now = SteadyClock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  bool due = end_of_epoch || points_.empty() || Between(points_.back().at, now) >= 1.0;
  if (!due) return false;
  lock.unlock();
  StatsPoint point = Take(chain);
  lock.lock();
  points_.push_back(point);
  // Keep the newest point older than the window, and everything after it.
  while (points_.size() > 1 && Between(points_[1].at, point.at) >= window_seconds_) {
    points_.pop_front();
  }
  if (!end_of_epoch || epoch_pending_) return false;
  last_epoch_ = StatsBetween(epoch_start_, point, StatsSpan::kEpoch, cores_, disk_, disk_note_);
  epoch_closed_ = true;
  epoch_pending_ = true;
  *epoch = last_epoch_;
  return true;
}

void StatsWindow::RestartEpoch() {
  std::lock_guard<std::mutex> lock(mutex_);
  epoch_pending_ = true;
  epoch_closed_ = false;
}

LoaderStats StatsWindow::Stats(const BatchSource& chain, StatsSpan span) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (span == StatsSpan::kEpoch && epoch_closed_) return last_epoch_;
  }
  StatsPoint now = Take(chain);
  std::lock_guard<std::mutex> lock(mutex_);
  const StatsPoint* from = &open_;
  if (span == StatsSpan::kEpoch && !epoch_pending_) {
    from = &epoch_start_;
  } else if (span == StatsSpan::kRecent && !points_.empty()) {
    // The newest point at least the window old, else the oldest kept.
    from = &points_.front();
    for (const StatsPoint& point : points_) {
      if (Between(point.at, now.at) >= window_seconds_) from = &point;
    }
  }
  return StatsBetween(*from, now, span, cores_, disk_, disk_note_);
}

}  // namespace gpufeed
