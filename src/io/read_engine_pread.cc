// The pread pool: a backend that works everywhere. Each worker thread has
// one read outstanding, so `threads` is the queue depth.
//
// Deadlines (IoOptions::timeout_seconds): a watchdog thread looks at the
// queue and at every worker's read once per tick. A queued request past its
// deadline fails at once, and so does one waiting for buffer budget. A
// worker whose read is past it is abandoned: the watchdog completes the
// request with the timeout error, detaches the thread (still inside pread,
// holding its buffer, which goes back to the pool only if the read ever
// returns) and starts a replacement while fewer than kMaxStuckThreads
// threads are still stuck (the pool refills as stuck reads return).
//
// Invariant that makes abandonment safe: a worker touches the engine only
// while it is not `busy` or, being busy, after Leave() saw it was not
// abandoned (both under its Worker::mutex); an abandoned worker's thread
// touches only its Worker, its request copy and its buffer (whose pool is
// shared), so it may outlive the engine.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>

#include "io/read_engine.h"
#include "util/logging.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

// Threads left behind in reads that have not returned yet, at most; past
// it an abandoned thread is not replaced until one of them returns (queued
// requests still fail at their deadlines).
constexpr int kMaxStuckThreads = 256;

class PreadEngine final : public ReadEngine {
 public:
  explicit PreadEngine(const IoOptions& options) : ReadEngine(options) {
    threads_ = options.threads > 0 ? options.threads : std::min(options.queue_depth, 64);
    SetBufferWake([this] {
      {
        std::lock_guard<std::mutex> lock(buffers_mutex_);
        buffer_generation_ += 1;
      }
      buffers_released_.notify_all();
    });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int i = 0; i < threads_; ++i) StartWorkerLocked();
    }
    if (options.timeout_seconds > 0) watchdog_ = std::thread([this] { Watch(); });
  }

  ~PreadEngine() override;

  const char* backend_name() const override { return "pread"; }

 protected:
  bool SafeOnFuse() const override { return true; }
  void Enqueue(std::vector<PendingRequest> requests) override {
    size_t count = requests.size();
    size_t workers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (PendingRequest& request : requests) queue_.push_back(std::move(request));
      workers = workers_.size();
    }
    // Wake as many workers as there are new requests: waking all of them for
    // one request only makes them fight over the lock (a thundering herd).
    if (count >= workers) {
      work_available_.notify_all();
    } else {
      for (size_t i = 0; i < count; ++i) work_available_.notify_one();
    }
  }

 private:
  // A worker thread's state, shared with the thread (it outlives the
  // engine when the thread is abandoned). Guarded by `mutex`.
  struct Worker {
    std::mutex mutex;
    bool busy = false;       // inside a blocking call for `current`
    bool abandoned = false;  // the watchdog or the destructor gave up on it
    bool closed = false;     // the destructor: start no blocking call
    // The engine's count of abandoned threads still in a read: this one
    // decrements it when its read returns (the engine may be gone).
    std::shared_ptr<std::atomic<int>> stuck;
    const PendingRequest* current = nullptr;
    std::thread thread;      // joined or detached by the engine (under its mutex_)
  };

  void StartWorkerLocked() {
    auto worker = std::make_shared<Worker>();
    worker->stuck = stuck_;
    worker->thread = std::thread([this, worker] { Work(worker); });
    workers_.push_back(std::move(worker));
    running_ += 1;
  }

  // Marks `me` busy with `pending` (a blocking call follows); false when
  // the engine is closing (the request is then Cancelled).
  static bool Enter(Worker& me, const PendingRequest& pending) {
    std::lock_guard<std::mutex> lock(me.mutex);
    if (me.closed) return false;
    me.busy = true;
    me.current = &pending;
    return true;
  }
  // The blocking call returned: false when `me` was abandoned meanwhile
  // (then the thread must return without touching the engine).
  static bool Leave(Worker& me) {
    std::lock_guard<std::mutex> lock(me.mutex);
    if (me.abandoned) {
      me.stuck->fetch_sub(1);
      return false;
    }
    me.busy = false;
    me.current = nullptr;
    return true;
  }

  void Work(std::shared_ptr<Worker> me);
  // Each returns true when the worker was abandoned (the thread must end).
  bool ReadRange(Worker& me, PendingRequest& pending);
  bool ReadSmallFile(Worker& me, PendingRequest& pending);
  // The test hook's error for this attempt (0: none); EAGAIN and EINTR
  // are retried here, as the pool's pread loop does.
  int InjectedError(const PendingRequest& pending);
  // After a failed attempt: true when it is to be tried again (the backoff
  // slept, as a busy worker); false with *status set otherwise. *abandoned
  // when the worker was abandoned while sleeping.
  bool Backoff(Worker& me, PendingRequest& pending, int error, const char* what, Status* status,
               bool* abandoned);
  // Waits for `size` bytes of buffer until `pending`'s deadline (then the
  // timeout error: abandoned reads may hold the budget for good);
  // Cancelled when the engine stops first.
  Status Acquire(size_t size, const PendingRequest& pending, ReadBuffer* buffer);
  bool stopping_now() const { return stopping_.load(); }

  void Watch();
  void ExpireOverdue();
  // Gives up on `worker` (busy past its deadline, or past the close grace
  // when `closing`) and leaves its thread behind: true, with a copy of its
  // request in *request for the caller to complete once mutex_ is released
  // (the timeout error, or Cancelled): a completion queue's handler may
  // call Submit, which takes mutex_. REQUIRES: mutex_.
  bool AbandonLocked(const std::shared_ptr<Worker>& worker, bool closing,
                     PendingRequest* request);
  // Starts workers up to `threads_` while fewer than kMaxStuckThreads
  // threads are left behind in reads. REQUIRES: mutex_.
  void TopUpLocked();

  int threads_ = 1;
  std::mutex mutex_;  // guards queue_, workers_, running_, abandoned_threads_
  std::condition_variable work_available_;
  std::condition_variable exited_;
  FifoQueue<PendingRequest> queue_;
  std::vector<std::shared_ptr<Worker>> workers_;
  int running_ = 0;  // worker threads not yet returned nor abandoned
  int abandoned_threads_ = 0;  // in the engine's life
  const std::shared_ptr<std::atomic<int>> stuck_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> active_{0};

  std::mutex watch_mutex_;
  std::condition_variable watch_wake_;
  bool watch_stop_ = false;
  std::thread watchdog_;

  std::mutex buffers_mutex_;
  std::condition_variable buffers_released_;
  uint64_t buffer_generation_ = 0;
};

PreadEngine::~PreadEngine() {
  SetBufferWake(nullptr);
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      watch_stop_ = true;
    }
    watch_wake_.notify_all();
    watchdog_.join();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  work_available_.notify_all();
  {
    std::lock_guard<std::mutex> buffers(buffers_mutex_);
    buffer_generation_ += 1;
  }
  buffers_released_.notify_all();
  // The queue is drained and the reads in flight finish, for kCloseGrace;
  // reads still running then are abandoned (a hung mount must not hang us).
  exited_.wait_for(lock, kCloseGrace, [&] { return running_ == 0; });
  FifoQueue<PendingRequest> left;
  left.swap(queue_);
  std::vector<std::shared_ptr<Worker>> workers = workers_;
  for (const auto& worker : workers) {
    bool busy;
    {
      std::lock_guard<std::mutex> state(worker->mutex);
      busy = worker->busy && !worker->abandoned;
      worker->closed = true;
    }
    PendingRequest request;
    if (busy && AbandonLocked(worker, /*closing=*/true, &request)) {
      left.push_back(std::move(request));  // still in a read (or a retry's backoff)
    }
  }
  workers = workers_;  // the ones not abandoned: they return promptly now
  lock.unlock();
  work_available_.notify_all();
  for (; !left.empty(); left.pop_front()) {
    Complete(left.front(), Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
  }
  for (const auto& worker : workers) {
    if (worker->thread.joinable()) worker->thread.join();
  }
}

void PreadEngine::Work(std::shared_ptr<Worker> me) {
  while (true) {
    PendingRequest pending;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_available_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {  // stopping and drained
        running_ -= 1;
        exited_.notify_all();
        return;
      }
      pending = std::move(queue_.front());
      queue_.pop_front();
    }
    if (pending.deadline <= Clock::now()) {
      ExpireRequest(pending, /*still_held=*/false);
      continue;
    }
    size_t active = active_.fetch_add(1) + 1;
    SampleInflight(active, false);
    NoteInflight(1);
    const bool abandoned =
        pending.request.path.empty() ? ReadRange(*me, pending) : ReadSmallFile(*me, pending);
    if (abandoned) return;  // the engine counted it out (AbandonLocked)
    NoteInflight(-1);
    active_.fetch_sub(1);
  }
}

Status PreadEngine::Acquire(size_t size, const PendingRequest& pending, ReadBuffer* buffer) {
  BufferPool::Allocation allocation;
  std::unique_lock<std::mutex> lock(buffers_mutex_);
  while (true) {
    uint64_t generation = buffer_generation_;
    lock.unlock();
    bool acquired = pool_->TryAcquire(size, &allocation);
    lock.lock();
    if (acquired) {
      *buffer = ReadBuffer(pool_, allocation);
      return Status::OK();
    }
    if (stopping_now()) return Status::Cancelled("read engine stopped while waiting for buffers");
    waiters_->waiting.fetch_add(1, std::memory_order_acq_rel);
    // Re-check after announcing the wait: a release in between bumped the
    // generation (it may have skipped the wake before the announcement).
    lock.unlock();
    bool acquired_now = pool_->TryAcquire(size, &allocation);
    lock.lock();
    if (acquired_now) {
      waiters_->waiting.fetch_sub(1, std::memory_order_acq_rel);
      *buffer = ReadBuffer(pool_, allocation);
      return Status::OK();
    }
    const bool woken = buffers_released_.wait_until(
        lock, pending.deadline, [&] { return buffer_generation_ != generation || stopping_; });
    waiters_->waiting.fetch_sub(1, std::memory_order_acq_rel);
    if (!woken) {
      std::lock_guard<std::mutex> stats(stats_mutex_);
      stats_.timeouts += 1;
      return TimeoutError(pending);
    }
  }
}

int PreadEngine::InjectedError(const PendingRequest& pending) {
  if (!hooks_.inject_read_error) return 0;
  for (int attempt = 0;; ++attempt) {
    const int injected = hooks_.inject_read_error(pending.request.tag);
    if ((injected == EAGAIN || injected == EINTR) && attempt < 1000) {
      std::lock_guard<std::mutex> lock(stats_mutex_);
      stats_.retries += 1;
      continue;
    }
    return injected;
  }
}

bool PreadEngine::Backoff(Worker& me, PendingRequest& pending, int error, const char* what,
                          Status* status, bool* abandoned) {
  *abandoned = false;
  Clock::duration wait;
  if (!RetryAfter(pending, error, &wait)) {
    *status = ErrorFor(pending, error, what);
    return false;
  }
  if (Clock::now() + wait >= pending.deadline) {
    // The retry would start past the deadline: the read times out.
    *status = TimeoutError(pending);
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.timeouts += 1;
    return false;
  }
  if (!Enter(me, pending)) {
    *status = Status::Cancelled("read engine stopped");
    return false;
  }
  std::this_thread::sleep_for(wait);
  *abandoned = !Leave(me);
  return !*abandoned;
}

bool PreadEngine::ReadRange(Worker& me, PendingRequest& pending) {
  const ReadPlan plan = PlanFor(pending);
  ReadBuffer buffer;
  Status status = Acquire(plan.length, pending, &buffer);
  size_t done = 0;
  while (status.ok()) {
    int error = InjectedError(pending);
    bool fell_back = false;
    if (!Enter(me, pending)) {
      status = Status::Cancelled("read engine stopped");
      break;
    }
    if (error == 0) {
      error = PreadPlannedRaw(*pending.file, plan, 0, buffer.raw(), &done, &fell_back);
    }
    if (!Leave(me)) return true;  // `buffer` returns to the pool now, if it still exists
    if (fell_back) {
      std::lock_guard<std::mutex> lock(stats_mutex_);
      stats_.pread_fallbacks += 1;
    }
    if (error == 0) break;
    done = 0;
    bool abandoned;
    if (!Backoff(me, pending, error, "read", &status, &abandoned)) {
      if (abandoned) return true;
      break;
    }
  }
  Complete(pending, std::move(status), std::move(buffer), plan.slice_offset, done);
  return false;
}

bool PreadEngine::ReadSmallFile(Worker& me, PendingRequest& pending) {
  const std::string& path = pending.request.path;
  while (true) {
    int error = 0;
    const char* what = "open";
    if (!Enter(me, pending)) {
      Complete(pending, Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
      return false;
    }
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    struct stat st;
    if (fd < 0) {
      error = errno;
    } else if (::fstat(fd, &st) != 0) {
      error = errno;
      what = "fstat";
    }
    if (!Leave(me)) {
      if (fd >= 0) ::close(fd);
      return true;
    }
    ReadBuffer buffer;
    size_t done = 0;
    Status status;
    if (error == 0) {
      status = Acquire(static_cast<size_t>(st.st_size), pending, &buffer);
      what = "read";
      if (!Enter(me, pending)) {
        ::close(fd);
        Complete(pending, Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
        return false;
      }
      if (status.ok()) error = PreadInto(fd, 0, static_cast<size_t>(st.st_size), buffer.raw(), &done);
      ::close(fd);
      if (!Leave(me)) return true;
    }
    if (status.ok() && error != 0) {
      bool abandoned;
      if (Backoff(me, pending, error, what, &status, &abandoned)) continue;
      if (abandoned) return true;
    }
    Complete(pending, std::move(status), std::move(buffer), 0, done);
    return false;
  }
}

void PreadEngine::Watch() {
  const auto tick = DeadlineTick(options_);
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!watch_stop_) {
    watch_wake_.wait_for(lock, tick);
    if (watch_stop_) return;
    lock.unlock();
    ExpireOverdue();
    lock.lock();
  }
}

void PreadEngine::ExpireOverdue() {
  const auto now = Clock::now();
  std::deque<PendingRequest> expired;
  std::vector<PendingRequest> held;  // still in a read: its buffer stays with it
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Deadlines are submission time + one limit: the front is the oldest.
    while (!queue_.empty() && queue_.front().deadline <= now) {
      expired.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    std::vector<std::shared_ptr<Worker>> workers = workers_;
    for (const auto& worker : workers) {
      bool overdue;
      {
        std::lock_guard<std::mutex> state(worker->mutex);
        overdue = worker->busy && !worker->abandoned && worker->current->deadline <= now;
      }
      PendingRequest request;
      if (overdue && AbandonLocked(worker, /*closing=*/false, &request)) {
        held.push_back(std::move(request));
      }
    }
    TopUpLocked();  // threads left behind that have returned since are replaced now
  }
  for (PendingRequest& pending : expired) ExpireRequest(pending, /*still_held=*/false);
  for (PendingRequest& pending : held) ExpireRequest(pending, /*still_held=*/true);
}

bool PreadEngine::AbandonLocked(const std::shared_ptr<Worker>& worker, bool closing,
                                PendingRequest* request) {
  PendingRequest& copy = *request;
  {
    std::lock_guard<std::mutex> state(worker->mutex);
    if (!worker->busy || worker->abandoned) return false;
    worker->abandoned = true;
    worker->stuck->fetch_add(1);  // the thread takes it back when its read returns
    copy = *worker->current;      // the worker writes it only after Leave()
  }
  worker->thread.detach();
  workers_.erase(std::find(workers_.begin(), workers_.end(), worker));
  running_ -= 1;
  abandoned_threads_ += 1;
  exited_.notify_all();
  active_.fetch_sub(1);
  NoteInflight(-1);
  if (closing) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.abandoned += 1;
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.abandoned_threads += 1;
  }
  Log().warn("pread engine: a read of {} did not return within the io_timeout; its thread is "
             "left behind ({} so far)",
             copy.file ? copy.file->path : copy.request.path, abandoned_threads_);
  TopUpLocked();
  return true;
}

void PreadEngine::TopUpLocked() {
  while (!stopping_ && static_cast<int>(workers_.size()) < threads_ &&
         stuck_->load() < kMaxStuckThreads) {
    StartWorkerLocked();
  }
}

}  // namespace

Status CreatePreadEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine) {
  *engine = std::make_unique<PreadEngine>(options);
  return Status::OK();
}

}  // namespace gpufeed
