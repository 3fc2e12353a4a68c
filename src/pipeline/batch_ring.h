// The host stage's batch buffers ("slots") and the state the Batches handed
// out share with it (they may outlive the stage and the Loader).
//
// Batch k of a run lives in a slot assigned to k: a worker may start a
// sample of batch k when a slot is assigned to k, or when one is free (not
// held by the consumer, its previous batch delivered) and k is within
// `prefetch` batches of the consumer. A slot belongs to the workers while it
// fills, to the consumer from NextFor until its Batch is released, then
// back to the ring. The steady ring has prefetch + 1 slots (+ extras asked
// by the stage downstream), allocated once; while the consumer holds every
// buffer, one more is added (within max_held_bytes) and freed again when its
// batch is released.
//
// Thread safety: `mutex` guards the slots (and the host stage's run state,
// which changes together with them). Two condition variables, so that a
// hand-off wakes only the side it concerns (each wake-up costs a context
// switch, and token batches come thousands a second): the workers (and
// Quiesce, and the read-ahead's waiters) wait on `changed`, signalled on
// every change they wait for; the consumer waits on `batch_done`, signalled
// when the batch it waits for completes and on the rare changes of the run. A worker keeps a reference to its Slot outside the
// lock (a deque: slots keep their address when the ring grows); it writes
// only its own row, and reads `data`/`labels`, which do not change while the
// slot is assigned.
#ifndef GPUFEED_PIPELINE_BATCH_RING_H_
#define GPUFEED_PIPELINE_BATCH_RING_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "batch/device_handle.h"
#include "gpufeed/batch.h"
#include "gpufeed/loader.h"
#include "gpufeed/status.h"

namespace gpufeed {

constexpr uint64_t kNoBatch = UINT64_MAX;

// on_error=skip: a sample of a slot that failed; its row is left out when
// the batch is delivered.
struct SkippedRow {
  uint64_t task = 0;  // of the run: its row is task % batch_size
  SkippedSample sample;
  Status status;
};

struct Slot {
  size_t index = 0;  // in BatchRing::slots
  // Beyond the steady ring: added when the consumer held every buffer,
  // freed when its batch is released (data null: retired).
  bool extra = false;
  void* data = nullptr;
  void* labels = nullptr;
  uint64_t batch = kNoBatch;  // batch number of the current run, or none
  int samples = 0;
  int done = 0;
  bool held = false;  // by a consumer's Batch
  // pin_memory: passes when the consumer's async copies from the buffer
  // (released with it) have read it; workers wait before writing.
  std::shared_ptr<HostReleaseFence> fence;
  Status error;
  std::vector<uint64_t> sample_ids;
  // on_error=skip: the samples of this batch that failed (any order).
  std::vector<SkippedRow> skipped;
};

class BatchRing {
 public:
  // Slots of data_bytes + label_bytes from `allocator`, for batches of
  // `batch_size`; the ring frees them with it.
  BatchRing(std::shared_ptr<BatchAllocator> allocator, size_t data_bytes, size_t label_bytes,
            uint64_t max_held_bytes, uint32_t batch_size);
  ~BatchRing();
  BatchRing(const BatchRing&) = delete;
  BatchRing& operator=(const BatchRing&) = delete;

  // The steady ring: `count` slots, allocated once (never on the hot path).
  // IOError when the memory cannot be had. REQUIRES: called once, first.
  Status Allocate(size_t count);

  // The consumer released slot `index` (any thread). A slot beyond the
  // steady ring is freed (after its fence: an async copy may still read it).
  void Release(size_t index, std::shared_ptr<HostReleaseFence> fence);

  // The slot assigned to batch k, or null. REQUIRES: mutex.
  Slot* Find(uint64_t k);
  // A slot neither assigned nor held by the consumer, or null. REQUIRES: mutex.
  Slot* Free();
  // True when the consumer holds every buffer. REQUIRES: mutex.
  bool AllHeld() const;
  // Ready batches ahead of `delivered`. REQUIRES: mutex.
  int Ready(uint64_t delivered) const;
  // A new run: no slot assigned (held ones stay held). REQUIRES: mutex.
  void Unassign();
  // One more buffer, for a consumer that holds all of them, within
  // max_held_bytes. REQUIRES: mutex.
  Status GrowLocked();

  size_t data_bytes() const { return data_bytes_; }
  size_t label_bytes() const { return label_bytes_; }

  std::mutex mutex;
  std::condition_variable changed;
  std::condition_variable batch_done;
  // A worker could start a batch but for a free slot: Release wakes the
  // workers only then (guarded by mutex). Usually the window is what holds
  // them, and the consumer's next NextFor moves it.
  bool wanted_free_slot = false;

 private:
  // Constant after construction.
  const std::shared_ptr<BatchAllocator> allocator_;
  const size_t data_bytes_;
  const size_t label_bytes_;
  const uint64_t max_held_bytes_;
  const uint32_t batch_size_;
  // The process that created the ring: in a forked child its threads do not
  // exist and its mutex may be locked forever, so nothing is touched.
  const pid_t owner_;

  std::deque<Slot> slots_;  // guarded by mutex
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_BATCH_RING_H_
