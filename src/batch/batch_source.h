// BatchSource: a stage that hands out batches in order. The host stage (the
// decode pool, src/pipeline/host_stage.h) is one; the CUDA copy stage
// (src/device/device_stage.h) is another and takes its host batches from an
// upstream BatchSource. The Loader (src/pipeline/loader.cc) chains them and
// is the only place that knows every stage: a stage knows batches and
// cursors, not loaders, states or options.
//
// Thread safety: NextFor, Seek and Position are called by one consumer
// thread (the stage downstream, or the Loader's caller); AddStats may be
// called from any thread.
#ifndef GPUFEED_BATCH_BATCH_SOURCE_H_
#define GPUFEED_BATCH_BATCH_SOURCE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "gpufeed/batch.h"
#include "gpufeed/status.h"

namespace gpufeed {

// A position in the epochs: the Loader turns it into a LoaderState (with the
// seed and shuffle settings) and back.
struct BatchCursor {
  uint64_t epoch = 0;
  // Positions of the epoch order consumed by all ranks together.
  uint64_t consumed = 0;
};

// What the stages of a chain report; the Loader turns it into LoaderStats
// (and its verdict). A stage fills its own group; the consumer group is
// filled by every stage and the last one's (the stage the consumer calls)
// stays.
struct StageStats {
  // The consumer's side: batches taken from the stage and the waits for them.
  uint64_t batches = 0;
  uint64_t samples = 0;
  double elapsed_seconds = 0;
  double consumer_wait_seconds = 0;
  double mean_ready_batches = 0;
  // The host stage: the decode threads and the read engine.
  uint64_t bytes_read = 0;
  uint64_t skipped = 0;
  int threads = 0;
  double read_seconds = 0;        // waiting for bytes, locating and submitting reads
  double decode_seconds = 0;      // wall time decoding
  double decode_cpu_seconds = 0;  // CPU time of the same (CLOCK_THREAD_CPUTIME_ID)
  double lookup_seconds = 0;      // wall time in embedding lookups (not in read or decode)
  double lookup_cpu_seconds = 0;  // CPU time of the same
  uint64_t lookup_rows = 0;       // ids looked up
  // The embedding tables' own counters (EmbeddingStats rows and ram_hits,
  // summed over the loader's tables; their lookups outside the loader too).
  uint64_t lookup_table_rows = 0;
  uint64_t lookup_ram_hits = 0;
  double blocked_seconds = 0;
  double ready_sum = 0;           // ready batches at each NextFor, summed
  uint64_t ready_count = 0;
  std::string io_backend;
  // What the workers make of a sample (SampleKind::name): "image", "raw",
  // "tokens", "tabular".
  std::string sample_kind;
  uint64_t io_requests = 0;
  double io_mean_inflight = 0;
  uint64_t io_bytes = 0;
  double io_inflight_seconds = 0;  // reads in flight integrated over time
  double io_busy_seconds = 0;      // time with at least one read in flight
  int io_queue_depth = 0;          // the engine's configured queue depth
  // The copy stage (CUDA batches).
  std::string device;
  uint64_t device_batches = 0;
  uint64_t device_bytes = 0;
  double device_copy_seconds = 0;
  double device_wait_buffer_seconds = 0;
};

class BatchSource {
 public:
  virtual ~BatchSource();

  // The next batch in order, or an empty batch with end_of_epoch() after the
  // epoch's last one (the call after it starts the next epoch). With
  // timeout_ms >= 0, *ready is false when no batch came in time (nothing was
  // taken; the call may be repeated); timeout_ms < 0 waits. A failed Status
  // is that batch's error: the batch is lost and the next call goes on.
  virtual Status NextFor(Batch* batch, int timeout_ms, bool* ready) = 0;
  // Drops the batches prepared ahead and continues at `cursor` (the start of
  // an epoch, or a saved position). The stage is at `cursor` afterwards even
  // when the Status is not OK.
  virtual Status Seek(const BatchCursor& cursor) = 0;
  // Where the consumer stands after the batches NextFor has returned (after
  // an end of epoch: the start of the next epoch).
  virtual BatchCursor Position() const = 0;
  // Adds this stage's figures to *stats, after those of the stages upstream.
  virtual void AddStats(StageStats* stats) const = 0;
};

// NextFor's wait: on `changed` until `ready()` holds, forever for
// timeout_ms < 0, else at most timeout_ms. Adds the time waited to
// *waited_seconds. False when the time ran out. REQUIRES: `lock` held.
template <typename Predicate>
bool WaitForBatch(std::condition_variable& changed, std::unique_lock<std::mutex>& lock,
                  int timeout_ms, Predicate ready, double* waited_seconds) {
  auto started = std::chrono::steady_clock::now();
  bool came = true;
  if (timeout_ms < 0) {
    changed.wait(lock, ready);
  } else {
    came = changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
  }
  *waited_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return came;
}

}  // namespace gpufeed

#endif  // GPUFEED_BATCH_BATCH_SOURCE_H_
