// The host stage's figures (LoaderStats' read/decode/lookup/blocked/consumer
// fields): gathered by the workers and NextFor, reported through
// BatchSource::AddStats.
#ifndef GPUFEED_PIPELINE_HOST_STATS_H_
#define GPUFEED_PIPELINE_HOST_STATS_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "batch/batch_source.h"

namespace gpufeed {

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

// What a worker gathers for one sample, unlocked, and adds under the lock.
struct WorkFigures {
  double read = 0;    // reading the record, or locating, submitting and waiting for the
                      // read engine's bytes
  double decode = 0;  // parsing, decoding, transforming, writing labels (wall time)
  double decode_cpu = 0;  // the thread's CPU time over the same
  // Embedding lookups (RunFigures), wall and CPU: inside a run's time but
  // neither read nor decode.
  double lookup = 0;
  double lookup_cpu = 0;
  uint64_t lookup_rows = 0;
  uint64_t bytes = 0;
};

// Guarded by the ring's mutex, except `skipped` (counted by workers unlocked).
struct HostStats {
  Clock::time_point started = Clock::now();
  uint64_t batches = 0;
  uint64_t samples = 0;
  double blocked = 0;        // workers waiting for the window to open
  double consumer_wait = 0;  // NextFor waiting for a batch
  double ready_sum = 0;      // ready batches at each NextFor, summed
  uint64_t ready_count = 0;
  uint64_t bytes_read = 0;
  double read_seconds = 0;
  double decode_seconds = 0;
  double decode_cpu_seconds = 0;
  double lookup_seconds = 0;
  double lookup_cpu_seconds = 0;
  uint64_t lookup_rows = 0;
  std::atomic<uint64_t> skipped{0};

  void Add(const WorkFigures& figures) {
    read_seconds += figures.read;
    decode_seconds += figures.decode;
    decode_cpu_seconds += figures.decode_cpu;
    lookup_seconds += figures.lookup;
    lookup_cpu_seconds += figures.lookup_cpu;
    lookup_rows += figures.lookup_rows;
    bytes_read += figures.bytes;
  }
  // Everything but the read engine's figures (ReadAhead::AddStats).
  void Fill(int threads, StageStats* stats) const {
    stats->batches = batches;
    stats->samples = samples;
    stats->bytes_read = bytes_read;
    stats->skipped = skipped.load();
    stats->threads = threads;
    stats->elapsed_seconds = Seconds(Clock::now() - started);
    stats->read_seconds = read_seconds;
    stats->decode_seconds = decode_seconds;
    stats->decode_cpu_seconds = decode_cpu_seconds;
    stats->lookup_seconds = lookup_seconds;
    stats->lookup_cpu_seconds = lookup_cpu_seconds;
    stats->lookup_rows = lookup_rows;
    stats->ready_sum = ready_sum;
    stats->ready_count = ready_count;
    stats->blocked_seconds = blocked;
    stats->consumer_wait_seconds = consumer_wait;
    stats->mean_ready_batches = ready_count ? ready_sum / ready_count : 0;
  }
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_HOST_STATS_H_
