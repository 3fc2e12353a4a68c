// ReadEngine: stage 1 of the pipeline. Takes (file, offset, length) requests
// and keeps many reads in flight; completed buffers come back through the
// submitter's CompletionQueue, in completion order.
//
// Protocol: OpenFile once per file -> Submit batches of requests with a
// CompletionQueue -> Wait on that queue for completions -> destroy each
// ReadBuffer when done with it (that returns its memory to the budget).
//
//   std::unique_ptr<ReadEngine> engine;
//   GPUFEED_RETURN_IF_ERROR(ReadEngine::Create(options, &engine));
//   FileId file;
//   GPUFEED_RETURN_IF_ERROR(engine->OpenFile("/lustre/x/part-00000.rec", &file));
//   CompletionQueue done;
//   engine->Submit({{file, 0, 1 << 20, /*tag=*/7}}, &done);
//   std::vector<ReadCompletion> out;
//   done.Wait(1, &out);
//
// Backends: io_uring (one ring per engine thread, batched submission,
// registered buffers and files) and a pread thread pool. See IoOptions.
//
// Thread safety: every method may be called from any thread; any number of
// requesters may share one engine, each with its own CompletionQueue (or a
// shared one). Requests of one Submit complete independently and in any
// order; each completes exactly once. Destroying the engine waits for the
// reads in flight; buffers already handed out stay valid (the pool lives
// until the last ReadBuffer is gone).
#ifndef GPUFEED_IO_READ_ENGINE_H_
#define GPUFEED_IO_READ_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpufeed/options.h"
#include "gpufeed/status.h"
#include "io/buffer_pool.h"
#include "util/fifo_queue.h"

namespace gpufeed {

using FileId = uint32_t;

struct ReadRequest {
  FileId file = 0;
  // Bytes past the file's size (when the engine took it, or now, if it has
  // grown since) are never returned, whatever the kernel says it read.
  uint64_t offset = 0;
  // Bytes wanted. Fewer come back only at end of file.
  uint64_t length = 0;
  // The caller's identifier, returned with the completion.
  uint64_t tag = 0;
  // Small-file mode: when non-empty, `file`, `offset` and `length` are
  // ignored and the whole file at `path` is opened, sized, read and closed
  // with every step in flight at once (io_uring openat + statx, read, close).
  std::string path;
};

struct ReadCompletion {
  uint64_t tag = 0;
  // On failure: names the file, offset, length and errno.
  Status status;
  ReadBuffer buffer;  // the bytes, when status.ok()
};

// Where completions are delivered. Thread-safe.
//
// Two kinds. A plain queue holds completions until a requester Waits for
// them. A queue made with a handler holds nothing: each batch of
// completions goes to the handler on the thread that made it, so no
// requester thread has to be woken for it (one hand-off between threads
// less per batch; what fio's single thread does). The handler's contract:
//  - it runs on the thread that completed the requests: an io_uring ring
//    thread (after each wait), a pread worker (also the pool that serves
//    FUSE files and io_uring's fallbacks), the pread engine's deadline
//    watchdog, or the thread destroying the engine (cancellations); never
//    with an engine lock held. It must not take a lock that a thread
//    calling Submit may hold (a request may in principle fail inside
//    Submit);
//  - calls may overlap (several ring threads, or the ring thread and the
//    pread pool);
//  - it may call ReadEngine::Submit (an io_uring engine starts the new
//    reads in the same turn of its loop, with no wake-up), but not once the
//    engine's destruction has begun (such requests may never complete);
//  - it keeps or drops the completions (moved out of the vector; what it
//    leaves is released);
//  - it must not throw, wait for completions of the same engine, nor
//    destroy it.
class CompletionQueue {
 public:
  using Handler = std::function<void(std::vector<ReadCompletion>* completions)>;
  CompletionQueue() = default;
  explicit CompletionQueue(Handler handler) : handler_(std::move(handler)) {}
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Moves at least `min_count` completions into *out (all that are ready,
  // and no more than `max_count` when it is nonzero), waiting as needed.
  // REQUIRES: no handler.
  void Wait(size_t min_count, std::vector<ReadCompletion>* out, size_t max_count = 0);
  void Push(ReadCompletion completion);
  // Moves every completion of *completions in, in order, with one lock and
  // one wake-up (or hands them to the handler); *completions is left empty.
  void PushAll(std::vector<ReadCompletion>* completions);
  size_t ready() const;  // 0 with a handler
  // Wakes every waiter; from then on Wait returns at once with what is
  // there (possibly nothing). With a handler: waits for the handler calls
  // in progress to return; later completions are released undelivered.
  // REQUIRES (handler): not called by the handler, nor while holding
  // a lock the handler takes.
  void Close();

 private:
  const Handler handler_;
  bool closed_ = false;
  int delivering_ = 0;  // handler calls in progress
  mutable std::mutex mutex_;
  std::condition_variable available_;
  FifoQueue<ReadCompletion> completions_;
};

struct IoStats {
  uint64_t requests = 0;        // completed requests
  uint64_t bytes = 0;           // bytes returned to requesters
  uint64_t submit_calls = 0;    // io_uring_enter calls that submitted work
  // Mean reads in flight: io_uring samples once per turn of a ring thread's
  // loop that submitted; pread as each worker starts a request.
  double mean_inflight = 0;
  // Time-weighted: the integral of reads in flight over time (its change over
  // a span divided by the span is the mean queue depth used), and the time
  // at least one read was in flight. Since the engine started.
  double inflight_seconds = 0;
  double busy_seconds = 0;
  double wait_seconds = 0;      // time engine threads waited for completions
  uint64_t short_reads = 0;     // resubmitted remainders
  uint64_t retries = 0;         // -EAGAIN / -EINTR resubmissions
  uint64_t pread_fallbacks = 0;  // requests served by pread after retries
  uint64_t errors = 0;
  // IoOptions::retries at work: reads tried again after a transient error
  // (EIO, ETIMEDOUT, ESTALE, and EAGAIN/EINTR that outlasted the quick
  // resubmissions), after a backoff.
  uint64_t transient_retries = 0;
  // Reads that failed for not completing within IoOptions::timeout_seconds
  // (queued or in flight), and of those, the ones still held by the
  // kernel or a pread thread (their buffers are never reused), and pread
  // threads left behind in a read that never returned.
  uint64_t timeouts = 0;
  uint64_t abandoned = 0;
  uint64_t abandoned_threads = 0;
  // Reads the kernel said returned bytes past the file's size at open (a
  // FUSE direct_io client returns the whole requested length): cut to it.
  uint64_t clamped_reads = 0;
  // Requests for files on FUSE served by the pread pool (see Submit).
  uint64_t fuse_requests = 0;
};

// The errors IoOptions::retries applies to: EIO, ETIMEDOUT, EAGAIN,
// ESTALE, EINTR.
bool IsTransientReadError(int error_number);
// `fd` is a file on a FUSE filesystem (fstatfs: FUSE_SUPER_MAGIC).
bool FileIsOnFuse(int fd);

// Fault injection for tests, never set by the library: what real files and
// kernels cannot produce on demand.
struct ReadEngineTestHooks {
  // Nonzero: the io_uring probe fails with this errno, as in a container
  // that forbids io_uring.
  int fail_io_uring_probe = 0;
  // Called with the request's tag before a range read completes; a nonzero
  // errno replaces the read's result, as if the kernel had returned it
  // (EAGAIN, EINTR, EIO, ...).
  std::function<int(uint64_t tag)> inject_read_error;
  // The io_uring engine sets its rings up without SINGLE_ISSUER,
  // DEFER_TASKRUN and COOP_TASKRUN and waits for one completion at a time,
  // as on a kernel older than 5.19.
  bool plain_io_uring_setup = false;
};

// Engines created while it lives (also by a Loader) take `hooks`; the
// previous hooks come back when it goes. Tests only; one at a time.
class ScopedReadEngineTestHooks {
 public:
  explicit ScopedReadEngineTestHooks(ReadEngineTestHooks hooks);
  ~ScopedReadEngineTestHooks();
  ScopedReadEngineTestHooks(const ScopedReadEngineTestHooks&) = delete;
  ScopedReadEngineTestHooks& operator=(const ScopedReadEngineTestHooks&) = delete;

 private:
  ReadEngineTestHooks previous_;
};

class ReadEngine {
 public:
  // Creates the engine chosen by options.backend (auto: io_uring, else the
  // pread pool, with one log line saying why). NotSupported with the reason
  // when io_uring is asked for explicitly and cannot be used.
  static Status Create(const IoOptions& options, std::unique_ptr<ReadEngine>* engine);

  virtual ~ReadEngine();

  // Opens `path` for reading (O_DIRECT when asked and allowed).
  Status OpenFile(const std::string& path, FileId* file);
  // Reads through a duplicate of `fd` (the store's descriptor of `path`, a
  // source or a node-cache copy); with direct_io the file is reopened
  // through /proc/self/fd for O_DIRECT. The caller's descriptor is not
  // changed and may be closed afterwards.
  Status AdoptFile(int fd, const std::string& path, FileId* file);
  // REQUIRES: no request for `file` in flight.
  Status CloseFile(FileId file);
  // Files open now (OpenFile/AdoptFile minus CloseFile).
  size_t open_files() const;

  // Queues the requests; returns at once. InvalidArgument for an unknown
  // file id (nothing of the batch is queued then).
  //
  // Files on FUSE are read by a pool of pread threads even in the io_uring
  // engine: on Linux 6.18 an io_uring read of a FUSE direct_io file that
  // spans several FUSE requests returns the whole requested length when a
  // later request fails (EIO) or the file ends, the extra bytes being the
  // file's own bytes again (tests/tools/fuse_uring_probe.py); pread returns
  // the true count. Whether a mount is direct_io cannot be seen from here.
  Status Submit(std::vector<ReadRequest> requests, CompletionQueue* queue);

  // Convenience: submits, waits for all, returns completions ordered like
  // `requests`. Every buffer is held until the last read completes, so the
  // batch must fit in inflight_bytes (InvalidArgument otherwise; one request
  // of any size is fine). Small-file requests are not counted (their size is
  // unknown until they are opened).
  Status ReadAll(std::vector<ReadRequest> requests, std::vector<ReadCompletion>* completions);

  virtual const char* backend_name() const = 0;
  // Why auto mode fell back to pread (empty otherwise).
  const std::string& fallback_reason() const { return fallback_reason_; }
  IoStats stats() const;
  const std::shared_ptr<BufferPool>& pool() const { return pool_; }
  const IoOptions& options() const { return options_; }

 protected:
  struct OpenFileEntry {
    OpenFileEntry() = default;
    OpenFileEntry(const OpenFileEntry&) = delete;
    OpenFileEntry& operator=(const OpenFileEntry&) = delete;
    ~OpenFileEntry();  // closes the descriptors
    std::string path;
    int fd = -1;           // O_DIRECT when direct, else buffered
    int buffered_fd = -1;  // always buffered: retries, unaligned tails
    bool direct = false;
    uint32_t alignment = 1;  // O_DIRECT offset/length alignment
    // The file's size when it was opened (fstat); reads are cut to it, or
    // to its size now when it has grown since.
    uint64_t size = UINT64_MAX;
    // Registered with io_uring rings (which then hold the file until the
    // engine goes): only files opened by path, never adopted ones (a
    // node-cache copy must not stay pinned after the engine lets it go).
    bool registrable = true;
    // On a FUSE filesystem (fstatfs): read with pread, never io_uring
    // (see ReadEngine::Submit).
    bool on_fuse = false;
  };

  struct PendingRequest {
    ReadRequest request;
    CompletionQueue* queue = nullptr;
    std::shared_ptr<const OpenFileEntry> file;  // null in small-file mode
    // Submit time + IoOptions::timeout_seconds (time_point::max(): none).
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    int transient_retries = 0;  // IoOptions::retries used so far
  };

  // The byte range actually read: the request widened to the O_DIRECT
  // alignment when the file is opened with O_DIRECT.
  struct ReadPlan {
    uint64_t offset = 0;
    size_t length = 0;
    size_t slice_offset = 0;  // where the requested bytes start in the buffer
  };
  static ReadPlan PlanFor(const PendingRequest& pending);

  explicit ReadEngine(const IoOptions& options);
  virtual void Enqueue(std::vector<PendingRequest> requests) = 0;

  // The completions an engine thread makes between two of its waits,
  // delivered together when it is flushed (before the thread waits, and
  // when it is destroyed): one lock and one wake-up per completion queue,
  // and the statistics added once, instead of per read. While it lives,
  // Complete and NoteInflight on its thread for its engine go through it.
  // The statistics are added before the completions are pushed, so a
  // requester that sees a completion sees it counted.
  class CompletionBatch {
   public:
    explicit CompletionBatch(ReadEngine* engine);
    ~CompletionBatch();
    CompletionBatch(const CompletionBatch&) = delete;
    CompletionBatch& operator=(const CompletionBatch&) = delete;
    void Flush();
    // Flushes the batch this thread has open for `engine`, if any.
    static void FlushOpen(ReadEngine* engine);

   private:
    friend class ReadEngine;
    void Add(CompletionQueue* queue, ReadCompletion completion, bool failed, bool clamped);
    ReadEngine* engine_;
    CompletionBatch* outer_;  // the batch this one hides (another engine's)
    std::vector<std::pair<CompletionQueue*, std::vector<ReadCompletion>>> queues_;
    size_t used_ = 0;  // entries of queues_ holding completions
    uint64_t requests_ = 0, bytes_ = 0, errors_ = 0, clamped_ = 0;
    int64_t inflight_delta_ = 0;
  };

  // Shared by the backends: complete a request with a buffer sliced to what
  // was asked for, or with an error naming everything.
  // `bytes_read`: bytes that landed in the buffer from its start.
  void Complete(PendingRequest& pending, Status status, ReadBuffer buffer, size_t slice_offset,
                size_t bytes_read);
  void SampleInflight(size_t inflight, bool submitted);
  // A read handed to the kernel or a pool thread (+1) or finished (-1):
  // keeps IoStats::inflight_seconds and busy_seconds.
  void NoteInflight(int delta);
  void AddInflight(int64_t delta);  // NoteInflight without a batch
  // The batch this thread has open for `engine`, or null.
  static CompletionBatch* OpenBatch(const ReadEngine* engine);
  // The innermost batch open on this thread (for any engine).
  static thread_local CompletionBatch* open_batch_;
  static Status ErrorFor(const PendingRequest& pending, int error_number, const char* what);
  // The error of a request past its deadline (ETIMEDOUT, never retried).
  Status TimeoutError(const PendingRequest& pending) const;
  // After `error`, the wait before trying `pending` again (IoOptions::
  // retries and retry_backoff_ms), counting the retry; false when the
  // error is not transient or the retries are spent.
  bool RetryAfter(PendingRequest& pending, int error, std::chrono::steady_clock::duration* wait);
  // Completes a request past its deadline with TimeoutError (counted).
  // `still_held`: its read is still running in the kernel or a pread
  // thread, which keeps its buffer (counted as abandoned); the backend
  // must not reuse that buffer before the read returns.
  void ExpireRequest(PendingRequest& pending, bool still_held);
  // How often deadlines are looked at: an eighth of timeout_seconds, 10 ms
  // to 1 s (a request fails at most that late); zero without a timeout.
  static std::chrono::steady_clock::duration DeadlineTick(const IoOptions& options);
  // Destroying an engine waits this long for the reads in flight; those
  // still running then are abandoned (a hung mount must not hang close).
  static constexpr std::chrono::milliseconds kCloseGrace{1000};
  // Keeps `buffer` (a read's destination the kernel may still write) out
  // of the pool for the rest of the process, counted in IoStats::abandoned.
  void AbandonBuffer(ReadBuffer buffer);
  // Synchronous pread of [offset, offset + length) into `destination`,
  // retrying short reads, EINTR and EAGAIN; stops at end of file. Returns 0
  // or the errno. Used by the pool and as io_uring's last resort.
  static int PreadInto(int fd, uint64_t offset, size_t length, char* destination, size_t* done);
  // PreadInto of the plan's range from `already_done` on, through the
  // file's O_DIRECT descriptor, and through the buffered one when O_DIRECT
  // refuses the range (EINVAL; *fell_back). Returns 0 or the errno. Touches
  // no engine state: a pread thread left behind in it may outlive the
  // engine.
  static int PreadPlannedRaw(const OpenFileEntry& file, const ReadPlan& plan, size_t already_done,
                             char* destination, size_t* done, bool* fell_back);
  // PreadPlannedRaw, counting a fallback, with the error as a Status.
  Status PreadPlanned(const PendingRequest& pending, const ReadPlan& plan, size_t already_done,
                      char* destination, size_t* done);

  // Wakes engine threads that wait for buffer budget. The pool can outlive
  // the engine (buffers still held by a consumer), so its release listener
  // reaches the engine only through this object, which the engine's
  // destructor disconnects first.
  struct BufferWaiters {
    std::mutex mutex;
    std::function<void()> wake;
    std::atomic<int> waiting{0};
  };
  void SetBufferWake(std::function<void()> wake);

  IoOptions options_;
  ReadEngineTestHooks hooks_;  // the test hooks in force when it was created
  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<BufferWaiters> waiters_;
  std::string fallback_reason_;
  mutable std::mutex stats_mutex_;
  IoStats stats_;
  double inflight_samples_sum_ = 0;
  uint64_t inflight_samples_ = 0;
  int64_t inflight_now_ = 0;  // for NoteInflight, under stats_mutex_
  std::chrono::steady_clock::time_point inflight_changed_ = std::chrono::steady_clock::now();

  // Hands requests (their deadlines kept) to the engine's pread pool, made
  // on first use: files on FUSE, and reads the io_uring engine could not
  // serve (persistent EAGAIN) without blocking its ring thread.
  void HandToPreadPool(std::vector<PendingRequest> requests);

 private:
  Status AddFile(int fd, const std::string& path, const std::string& reopen_path, FileId* file,
                 bool registrable = true);

  // True for a backend whose reads are correct on FUSE (the pread pool).
  virtual bool SafeOnFuse() const { return false; }
  // Moves the requests for files on FUSE out of *pending into the pread
  // pool that serves them. See Submit.
  void RouteFuseRequests(std::vector<PendingRequest>* pending);
  bool PathOnFuse(const std::string& path);

  mutable std::mutex files_mutex_;
  std::vector<std::shared_ptr<const OpenFileEntry>> files_;

  std::mutex fuse_mutex_;  // guards what follows
  std::unique_ptr<ReadEngine> fuse_engine_;
  std::vector<std::pair<std::string, bool>> fuse_dirs_;  // directory -> on FUSE (small files)
};

// Backends (read_engine_uring.h, read_engine_pread.cc). Without liburing
// (GPUFEED_WITH_IO_URING=OFF) CreateUringEngine returns NotSupported.
Status CreateUringEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine);
Status CreatePreadEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine);

// The alignment O_DIRECT needs for `fd` (statx STATX_DIOALIGN, else the
// block device's logical block size, else 4096).
uint32_t DirectIoAlignment(int fd, const std::string& path);

}  // namespace gpufeed

#endif  // GPUFEED_IO_READ_ENGINE_H_
