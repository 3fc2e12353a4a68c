// The pread pool: a backend that works everywhere. Each worker thread has
// one read outstanding, so `threads` is the queue depth.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>

#include "io/read_engine.h"

namespace gpufeed {

namespace {

class PreadEngine final : public ReadEngine {
 public:
  explicit PreadEngine(const IoOptions& options) : ReadEngine(options) {
    int threads = options.threads > 0 ? options.threads : std::min(options.queue_depth, 64);
    SetBufferWake([this] {
      {
        std::lock_guard<std::mutex> lock(buffers_mutex_);
        buffer_generation_ += 1;
      }
      buffers_released_.notify_all();
    });
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }

  ~PreadEngine() override {
    SetBufferWake(nullptr);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_available_.notify_all();
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      buffer_generation_ += 1;
    }
    buffers_released_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  const char* backend_name() const override { return "pread"; }

 protected:
  void Enqueue(std::vector<PendingRequest> requests) override {
    size_t count = requests.size();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (PendingRequest& request : requests) queue_.push_back(std::move(request));
    }
    // Wake as many workers as there are new requests: waking all of them for
    // one request only makes them fight over the lock (a thundering herd).
    if (count >= workers_.size()) {
      work_available_.notify_all();
    } else {
      for (size_t i = 0; i < count; ++i) work_available_.notify_one();
    }
  }

 private:
  void Work() {
    while (true) {
      PendingRequest pending;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_available_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        pending = std::move(queue_.front());
        queue_.pop_front();
      }
      size_t active = active_.fetch_add(1) + 1;
      SampleInflight(active, false);
      NoteInflight(1);
      if (pending.request.path.empty()) {
        ReadRange(pending);
      } else {
        ReadSmallFile(pending);
      }
      NoteInflight(-1);
      active_.fetch_sub(1);
    }
  }

  // Waits for `size` bytes of buffer; Cancelled when the engine stops first.
  Status Acquire(size_t size, ReadBuffer* buffer) {
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
      buffers_released_.wait(lock, [&] { return buffer_generation_ != generation || stopping_; });
      waiters_->waiting.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  bool stopping_now() const { return stopping_.load(); }

  void ReadRange(PendingRequest& pending) {
    ReadPlan plan = PlanFor(pending);
    ReadBuffer buffer;
    Status status = Acquire(plan.length, &buffer);
    size_t done = 0;
    if (status.ok() && hooks_.inject_read_error) {
      // Like a pread that fails: EAGAIN/EINTR are retried (as the pool's
      // pread loop does), anything else fails the request.
      for (int attempt = 0;; ++attempt) {
        int injected = hooks_.inject_read_error(pending.request.tag);
        if (injected == 0) break;
        if ((injected == EAGAIN || injected == EINTR) && attempt < 1000) {
          std::lock_guard<std::mutex> lock(stats_mutex_);
          stats_.retries += 1;
          continue;
        }
        status = ErrorFor(pending, injected, "read");
        break;
      }
    }
    if (status.ok()) status = PreadPlanned(pending, plan, 0, buffer.raw(), &done);
    Complete(pending, std::move(status), std::move(buffer), plan.slice_offset, done);
  }

  void ReadSmallFile(PendingRequest& pending) {
    const std::string& path = pending.request.path;
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      Complete(pending, ErrorFor(pending, errno, "open"), ReadBuffer(), 0, 0);
      return;
    }
    struct stat st;
    Status status;
    ReadBuffer buffer;
    size_t done = 0;
    if (::fstat(fd, &st) != 0) {
      status = ErrorFor(pending, errno, "fstat");
    } else {
      status = Acquire(static_cast<size_t>(st.st_size), &buffer);
      if (status.ok()) {
        int error = PreadInto(fd, 0, static_cast<size_t>(st.st_size), buffer.raw(), &done);
        if (error != 0) status = ErrorFor(pending, error, "read");
      }
    }
    ::close(fd);
    Complete(pending, std::move(status), std::move(buffer), 0, done);
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<PendingRequest> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> active_{0};

  std::mutex buffers_mutex_;
  std::condition_variable buffers_released_;
  uint64_t buffer_generation_ = 0;
};

}  // namespace

Status CreatePreadEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine) {
  *engine = std::make_unique<PreadEngine>(options);
  return Status::OK();
}

}  // namespace gpufeed
