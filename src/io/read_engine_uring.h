// The io_uring backend of the read engine: one ring per engine thread, no
// SQPOLL. Private to src/io/; ReadEngine::Create reaches it through
// CreateUringEngine (read_engine.h).
//
// Each thread loops: take as many requests from the shared queue as it has
// free slots and buffer budget for, prepare their SQEs, submit them with one
// io_uring_enter, wait for completions, handle them (matched by user_data;
// they arrive out of order), repeat. New requests, released buffers and
// shutdown wake a waiting thread through an eventfd polled by the ring.
//
// Sources (CMakeLists.txt compiles them when GPUFEED_WITH_IO_URING is ON,
// and read_engine_uring_stub.cc, whose CreateUringEngine returns
// NotSupported, when it is OFF):
//   read_engine_uring.cc          the engine, ring setup and the thread's loop
//   read_engine_uring_submit.cc   slots, and preparing the SQEs of a request
//   read_engine_uring_reap.cc     waiting for completions and handling them
//
// Thread safety: a RingThread's fields are its own thread's (the ring is
// SINGLE_ISSUER), but for event_fd, which any thread may write to wake it.
// The engine's queue_ is guarded by queue_mutex_; stats_ by stats_mutex_.
#ifndef GPUFEED_IO_READ_ENGINE_URING_H_
#define GPUFEED_IO_READ_ENGINE_URING_H_

#include <liburing.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpufeed/options.h"
#include "gpufeed/status.h"
#include "io/read_engine.h"

namespace gpufeed {
namespace uring {

using Clock = std::chrono::steady_clock;

// Registered-file table size per ring; files beyond it use plain fds.
constexpr unsigned kRegisteredFiles = 1024;
// -EAGAIN / -EINTR resubmissions of one request before it is served by pread.
constexpr int kMaxRetries = 3;
// Gathered waits: with kReapWindowMinReads or more reads in flight, and
// the last wait having reaped several completions, a ring thread's wait asks
// the kernel for all of them, returns once kReapWindowMicros have passed
// and a completion is there (IORING_FEAT_MIN_TIMEOUT, Linux 6.12), and at
// the latest after kReapLimitMicros (a completion waits no longer for the
// others). One wake-up of the ring thread and of each requester per
// several reads instead of per read. Otherwise (few reads, a slow device
// completing one at a time, an older kernel) it waits for one completion.
// The choice of figures: docs/tuning.md.
constexpr unsigned kReapWindowMicros = 10;
constexpr long kReapLimitMicros = 200;
constexpr size_t kReapWindowMinReads = 8;
// SQEs per io_uring_enter while a ring thread starts requests. Linux plugs
// the block layer for a submission of more than 2 SQEs (io_uring's
// io_submit_state_start), which holds every read of the submission back
// from the device until the last one is issued; 2 at a time go out as they
// are issued, as fio's one-at-a-time submission does (the measurements:
// docs/tuning.md). A request's SQEs (a small file's openat and statx) go
// out in one submission.
constexpr size_t kSubmitChunk = 2;
// From Linux 6.12's uapi (newer than the liburing headers this builds with).
constexpr uint32_t kFeatureMinTimeout = 1u << 15;  // IORING_FEAT_MIN_TIMEOUT
// struct io_uring_getevents_arg as of Linux 6.12: `pad` became min_wait_usec.
struct GeteventsArg {
  uint64_t sigmask;
  uint32_t sigmask_sz;
  uint32_t min_wait_usec;
  uint64_t ts;
};

// user_data = generation << 32 | slot << 8 | kind; closes carry the fd
// instead of a slot. The generation (the slot's request count) keeps a
// late completion or a cancellation of an abandoned request away from the
// request that reuses its slot.
enum OpKind : uint64_t { kWake = 1, kRead = 2, kOpen = 3, kStatx = 4, kClose = 5, kCancel = 6 };

inline uint64_t UserData(uint64_t slot, OpKind kind, uint32_t generation = 0) {
  return (uint64_t{generation} << 32) | (slot << 8) | kind;
}
inline size_t SlotOf(uint64_t user_data) { return static_cast<size_t>((user_data >> 8) & 0xFFFFFF); }
inline uint32_t GenerationOf(uint64_t user_data) { return static_cast<uint32_t>(user_data >> 32); }

// The state of one slot (one request in flight) of a ring.
struct Op {
  bool busy = false;
  uint32_t generation = 0;  // requests the slot has started
  // SQEs of this request the kernel has not completed yet.
  int in_flight = 0;
  // Past its deadline: completed with the timeout error, waiting only for
  // the kernel to let go of its SQEs (then the slot and buffer are freed).
  bool abandoned = false;
  // Range reads.
  int retries = 0;
  bool buffered = false;  // through the file's buffered descriptor (O_DIRECT refused)
  size_t done = 0;
  bool waiting_for_buffer = false;  // small files: sized, waiting for budget
  Clock::time_point retry_at;
  // Small files.
  int fd = -1;
  int pending_sqes = 0;
  int open_error = 0;
  int statx_error = 0;
  uint64_t file_size = 0;
  // Written by the kernel when the statx completes: kept apart from the Op
  // so that it can outlive the ring thread for an abandoned request.
  std::unique_ptr<struct statx> statx_buffer;
};

class UringEngine final : public ReadEngine {
 public:
  explicit UringEngine(const IoOptions& options) : ReadEngine(options) {}
  // Stops the ring threads once the reads in flight have completed.
  ~UringEngine() override;

  // Starts the ring threads; each sets its ring up itself (SINGLE_ISSUER
  // binds a ring to the thread that creates it) and reports the outcome.
  // NotSupported with the reason when a ring cannot be set up.
  Status Start();

  const char* backend_name() const override { return "io_uring"; }

 protected:
  void Enqueue(std::vector<PendingRequest> requests) override;

 private:
  struct RingThread {
    UringEngine* engine = nullptr;
    std::thread thread;
    io_uring ring;
    bool ring_ready = false;
    int event_fd = -1;
    bool buffers_registered = false;
    bool files_registered = false;
    std::vector<uint8_t> file_slots;  // FileId -> registered in this ring
    // Per slot (queue_depth of them).
    std::vector<Op> ops;
    std::vector<PendingRequest> pendings;
    std::vector<ReadBuffer> buffers;
    std::vector<ReadPlan> plans;
    std::vector<size_t> free_slots;
    // Requests taken off the engine's queue in one lock, with their buffers
    // and plans (StartRequests; kept to reuse its memory).
    struct Taken {
      PendingRequest pending;
      ReadBuffer buffer;
      ReadPlan plan;
    };
    std::vector<Taken> taken;
    // A slot may have a retry_at set / may wait for buffer budget (small
    // files): set with them, recomputed by the scans that look for them, so
    // that a pass of the loop scans the slots only when one may be there.
    bool retry_pending = false;
    bool small_pending = false;
    size_t active = 0;
    size_t abandoned = 0;  // of `active`: past their deadline, still in the kernel
    size_t prepared = 0;  // SQEs prepared since the last submit
    // Since the last wait (added to the engine's statistics with the
    // wait's time: one lock per wait, not per submission): io_uring_enter
    // calls that submitted, and reads in flight sampled once per turn of
    // the loop that submitted anything.
    double inflight_sum = 0;
    uint64_t inflight_samples = 0;
    uint64_t submit_calls = 0;
    // The kernel can wait for several completions and return after a
    // short window once one is there (IORING_FEAT_MIN_TIMEOUT, Linux 6.12).
    bool min_timeout = false;
    bool dense = false;  // the last wait reaped two completions or more
    // In (or about to enter) its wait for completions with a slot free and
    // the queue not blocked on budget: only then does Enqueue write
    // event_fd. With every slot busy a completion ends the wait, and a
    // queue blocked on budget is unblocked by a release, which wakes the ring
    // (SetBufferWake), so a new request has nothing to wake it for. Set before the ring looks at the
    // queue a last time, read by Enqueue after it queued (both sequentially
    // consistent), so a request is either seen by that look or wakes the wait.
    std::atomic<bool> sleeping{false};
    Clock::time_point stop_seen;  // when the loop first saw the engine stopping
    // Deadlines are looked at once per tick (ReadEngine::DeadlineTick; zero:
    // no timeout), not on every pass of the loop.
    Clock::duration expiry_tick{};
    Clock::time_point next_expiry_check;
    // This ring is counted in engine->waiters_->waiting (it waits for
    // buffer budget).
    bool waiting_registered = false;
    // The front of the engine's queue waits for buffer budget (the queue is
    // FIFO: nothing behind it starts before it). Only then does a new
    // request have nothing to start; small files waiting for budget in
    // their slots do not hold the queue.
    bool queue_blocked = false;

    ~RingThread();

    // ---- read_engine_uring.cc: setup and the loop.
    // The thread's body: Setup, its outcome into *ready, then Loop.
    void Run(std::promise<Status>* ready);
    // Creates the ring (newest setup flags the kernel accepts), the eventfd,
    // and registers buffers and files where allowed.
    Status Setup();
    // Arms the multishot poll of event_fd. False when the SQ is full.
    bool ArmWake();
    // An SQE, submitting what is prepared first when the SQ is full.
    io_uring_sqe* NextSqe();
    // Submits the prepared SQEs (if any), counting the submission.
    void SubmitPrepared();
    // Adds the submission figures above to the engine's statistics.
    // REQUIRES: engine->stats_mutex_.
    void AddSubmitFiguresLocked();
    // Until the engine stops and nothing is in flight.
    void Loop();
    bool QueueEmpty();
    // Completes every queued request with Cancelled.
    void CancelQueued();

    // ---- read_engine_uring_submit.cc: slots and SQEs.
    // Moves requests from the shared queue into free slots while the buffer
    // budget allows, preparing their first SQEs.
    void StartRequests();
    // Puts a request StartRequests took in a free slot and prepares its SQEs.
    void StartTaken(Taken& next);
    void SetWaitingForBuffers(bool blocked);
    // The registered-file index of `id` in this ring, or -1 (use `fd`).
    int FixedFileFor(FileId id, int fd);
    void PrepareRead(size_t slot);
    // Small files: openat and statx in flight together.
    void PrepareSmallFileOpen(size_t slot);
    // Small files, once sized: a buffer, then the read (or waits for budget).
    void StartSmallFileRead(size_t slot);
    void PrepareSmallRead(size_t slot);
    void CloseAsync(int fd);
    void Release(size_t slot);
    void FinishRange(size_t slot, Status status);
    void FinishSmallFile(size_t slot, Status status);
    // Resubmits the reads whose backoff has passed.
    void RetryDue();
    // The next retry or deadline to wake up for.
    Clock::time_point NextWake();
    // ---- read_engine_uring_deadline.cc: timeouts and abandonment.
    // Fails queued requests and slots past their deadline; slots the
    // kernel still holds get a cancellation and are abandoned.
    void ExpireDue(Clock::time_point now);
    // Completes the slot's request (timeout, or Cancelled when closing).
    void Abandon(size_t slot, bool closing);
    // A completion for an abandoned slot: frees the slot once the kernel
    // holds none of its SQEs.
    void HandleAbandoned(OpKind kind, size_t slot, int result);
    // Stopping, past kCloseGrace: everything left fails or is abandoned.
    void AbandonAll();
    // Before the ring goes: the buffers and statx results the kernel may
    // still write stay allocated for the rest of the process.
    void KeepAbandonedMemory();

    // ---- read_engine_uring_reap.cc: completions.
    // Delivers the completions made so far, waits for completions (or the
    // next retry), then handles all ready. With many reads in flight it
    // lets completions gather (kReapWindowMicros).
    void WaitAndReap();
    // A slot is free and the queue's front does not wait for budget: a
    // request queued now could start (`sleeping` publishes it to Enqueue).
    bool AcceptsRequests() const;
    // io_uring_enter waiting for `wait_nr` completions, returning after
    // `window_us` once there is one, and by `timeout` (always given).
    int WaitCompletions(unsigned wait_nr, unsigned window_us, const __kernel_timespec* timeout);
    void Handle(uint64_t user_data, int result, unsigned flags);
    void HandleMetadata(OpKind kind, size_t slot, int result);
    void HandleRead(size_t slot, int result);
    // -EAGAIN / -EINTR: a backoff, or the pread pool after kMaxRetries.
    void HandleRetryable(size_t slot);
    // A transient error (IoOptions::retries): true when the read is tried
    // again after a backoff.
    bool RetryTransient(size_t slot, int error);
  };

  // Writes every ring's event_fd (`only_sleeping`: of the rings waiting).
  void WakeAll(bool only_sleeping = false);

  std::vector<std::unique_ptr<RingThread>> rings_;
  std::mutex queue_mutex_;
  FifoQueue<PendingRequest> queue_;  // guarded by queue_mutex_
  std::atomic<bool> stopping_{false};
};

}  // namespace uring
}  // namespace gpufeed

#endif  // GPUFEED_IO_READ_ENGINE_URING_H_
