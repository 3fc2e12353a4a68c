// The io_uring backend: one ring per engine thread, no SQPOLL.
//
// Each thread loops: take as many requests from the shared queue as it has
// free slots and buffer budget for, prepare their SQEs, submit them with one
// io_uring_enter, wait for completions, handle them (matched by user_data;
// they arrive out of order), repeat. New requests, released buffers and
// shutdown wake a waiting thread through an eventfd polled by the ring.
#include "gpufeed/options.h"

#ifdef GPUFEED_HAVE_IO_URING

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <thread>

#include "io/read_engine.h"
#include "util/logging.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

// Registered-file table size per ring; files beyond it use plain fds.
constexpr unsigned kRegisteredFiles = 1024;
constexpr int kMaxRetries = 3;

// user_data = slot << 8 | kind; closes carry the fd instead of a slot.
enum OpKind : uint64_t { kWake = 1, kRead = 2, kOpen = 3, kStatx = 4, kClose = 5 };

uint64_t UserData(uint64_t slot, OpKind kind) { return (slot << 8) | kind; }

struct Op {
  bool busy = false;
  // Range reads.
  int retries = 0;
  size_t done = 0;
  bool waiting_for_buffer = false;  // small files: sized, waiting for budget
  Clock::time_point retry_at;
  // Small files.
  int fd = -1;
  int pending_sqes = 0;
  int open_error = 0;
  int statx_error = 0;
  uint64_t file_size = 0;
  struct statx statx_buffer;
};

class UringEngine final : public ReadEngine {
 public:
  explicit UringEngine(const IoOptions& options) : ReadEngine(options) {}

  ~UringEngine() override {
    SetBufferWake(nullptr);
    stopping_ = true;
    WakeAll();
    for (auto& ring : rings_) {
      if (ring->thread.joinable()) ring->thread.join();
    }
  }

  // Starts the ring threads; each sets its ring up itself (SINGLE_ISSUER
  // binds a ring to the thread that creates it) and reports the outcome.
  Status Start() {
    int threads = options_.threads > 0 ? options_.threads : 1;
    if (hooks_.fail_io_uring_probe != 0) {
      return Status::NotSupported(
          "io_uring_setup (failure injected for testing): " +
          std::string(std::strerror(hooks_.fail_io_uring_probe)));
    }
    SetBufferWake([this] { WakeAll(); });
    for (int i = 0; i < threads; ++i) {
      auto ring = std::make_unique<RingThread>();
      ring->engine = this;
      std::promise<Status> ready;
      std::future<Status> result = ready.get_future();
      RingThread* raw = ring.get();
      ring->thread = std::thread([raw, &ready] { raw->Run(&ready); });
      Status status = result.get();
      rings_.push_back(std::move(ring));
      if (!status.ok()) return status;
    }
    return Status::OK();
  }

  const char* backend_name() const override { return "io_uring"; }

 protected:
  void Enqueue(std::vector<PendingRequest> requests) override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      for (PendingRequest& request : requests) queue_.push_back(std::move(request));
    }
    WakeAll();
  }

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
    std::vector<Op> ops;
    std::vector<PendingRequest> pendings;
    std::vector<ReadBuffer> buffers;
    std::vector<ReadPlan> plans;
    std::vector<size_t> free_slots;
    size_t active = 0;
    size_t prepared = 0;  // SQEs prepared since the last submit
    uint64_t wake_value = 0;

    ~RingThread() {
      if (ring_ready) io_uring_queue_exit(&ring);
      if (event_fd >= 0) ::close(event_fd);
    }

    void Run(std::promise<Status>* ready) {
      Status status = Setup();
      ready->set_value(status);
      if (!status.ok()) return;
      Loop();
    }

    Status Setup() {
      const IoOptions& options = engine->options_;
      unsigned entries = static_cast<unsigned>(options.queue_depth) * 2 + 8;
      // Newest flags first; older kernels reject them with EINVAL.
      const unsigned flag_sets[] = {
          IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
          IORING_SETUP_COOP_TASKRUN,
          0,
      };
      int rc = -EINVAL;
      for (unsigned flags : flag_sets) {
        io_uring_params params;
        std::memset(&params, 0, sizeof(params));
        params.flags = flags;
        rc = io_uring_queue_init_params(entries, &ring, &params);
        if (rc != -EINVAL) break;
      }
      if (rc < 0) {
        std::string reason = "io_uring_setup: " + std::string(std::strerror(-rc));
        if (rc == -ENOSYS) reason += " (kernel without io_uring)";
        if (rc == -EPERM) reason += " (forbidden: seccomp or kernel.io_uring_disabled)";
        if (rc == -ENOMEM) reason += " (RLIMIT_MEMLOCK too small for a ring)";
        return Status::NotSupported(reason);
      }
      ring_ready = true;
      event_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (event_fd < 0) return Status::FromErrno(errno, "eventfd");

      BufferPool& pool = *engine->pool_;
      if (options.register_buffers && pool.arena() != nullptr) {
        iovec arena{pool.arena(), pool.arena_size()};
        int result = io_uring_register_buffers(&ring, &arena, 1);
        buffers_registered = result == 0;
        if (!buffers_registered) {
          static std::once_flag logged;
          std::call_once(logged, [&] {
            Log().info("io_uring: cannot register {} MiB of read buffers ({}); using them "
                       "unregistered (raise RLIMIT_MEMLOCK to register)",
                       pool.arena_size() >> 20, std::strerror(-result));
          });
        }
      }
      if (options.register_files) {
        files_registered = io_uring_register_files_sparse(&ring, kRegisteredFiles) == 0;
        file_slots.assign(kRegisteredFiles, 0);
      }
      size_t slots = static_cast<size_t>(options.queue_depth);
      ops.resize(slots);
      pendings.resize(slots);
      buffers.resize(slots);
      plans.resize(slots);
      for (size_t i = slots; i-- > 0;) free_slots.push_back(i);
      return ArmWake() ? Status::OK()
                       : Status::NotSupported("io_uring: cannot poll an eventfd on the ring");
    }

    bool ArmWake() {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) return false;
      io_uring_prep_poll_multishot(sqe, event_fd, POLLIN);
      io_uring_sqe_set_data64(sqe, UserData(0, kWake));
      prepared += 1;
      return true;
    }

    io_uring_sqe* NextSqe() {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) {
        // The SQ is sized for every slot; only a burst of closes fills it.
        io_uring_submit(&ring);
        prepared = 0;
        sqe = io_uring_get_sqe(&ring);
      }
      prepared += 1;
      return sqe;
    }

    void Loop() {
      while (true) {
        bool was_waiting = waiting_registered;
        StartRequests();
        // Announced a wait for buffers just now: a release may have slipped
        // in before the announcement without waking us, so look once more.
        if (waiting_registered && !was_waiting) StartRequests();
        RetryDue();
        if (prepared > 0) {
          int submitted = io_uring_submit(&ring);
          engine->SampleInflight(active, submitted > 0);
          prepared = 0;
        }
        if (engine->stopping_ && active == 0 && QueueEmpty()) return;
        if (engine->stopping_ && active == 0) {
          CancelQueued();  // stopping while requests wait for buffers nobody frees
          return;
        }
        WaitAndReap();
      }
    }

    bool QueueEmpty() {
      std::lock_guard<std::mutex> lock(engine->queue_mutex_);
      return engine->queue_.empty();
    }

    void CancelQueued() {
      std::deque<PendingRequest> left;
      {
        std::lock_guard<std::mutex> lock(engine->queue_mutex_);
        left.swap(engine->queue_);
      }
      for (PendingRequest& pending : left) {
        engine->Complete(pending, Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
      }
    }

    // Moves requests from the shared queue into free slots while the buffer
    // budget allows, preparing their first SQEs.
    void StartRequests() {
      // Small files that were sized earlier and wait for buffer budget.
      for (size_t slot = 0; slot < ops.size(); ++slot) {
        if (ops[slot].busy && ops[slot].waiting_for_buffer) StartSmallFileRead(slot);
      }
      bool blocked = false;
      while (!free_slots.empty()) {
        PendingRequest pending;
        ReadBuffer buffer;
        ReadPlan plan;
        {
          std::lock_guard<std::mutex> lock(engine->queue_mutex_);
          if (engine->queue_.empty()) break;
          PendingRequest& front = engine->queue_.front();
          if (front.request.path.empty()) {
            plan = PlanFor(front);
            BufferPool::Allocation allocation;
            if (!engine->pool_->TryAcquire(plan.length, &allocation)) {
              blocked = true;
              break;
            }
            buffer = ReadBuffer(engine->pool_, allocation);
          }
          pending = std::move(front);
          engine->queue_.pop_front();
        }
        size_t slot = free_slots.back();
        free_slots.pop_back();
        active += 1;
        engine->NoteInflight(1);
        Op& op = ops[slot];
        op = Op();
        op.busy = true;
        pendings[slot] = std::move(pending);
        buffers[slot] = std::move(buffer);
        plans[slot] = plan;
        if (pendings[slot].request.path.empty()) {
          if (plan.length == 0) {
            FinishRange(slot, Status::OK());
          } else {
            PrepareRead(slot);
          }
        } else {
          PrepareSmallFileOpen(slot);
        }
      }
      SetWaitingForBuffers(blocked);
    }

    void SetWaitingForBuffers(bool blocked) {
      bool small_waiting = false;
      for (const Op& op : ops) small_waiting |= op.busy && op.waiting_for_buffer;
      bool now = blocked || small_waiting;
      if (now != waiting_registered) {
        engine->waiters_->waiting.fetch_add(now ? 1 : -1, std::memory_order_acq_rel);
        waiting_registered = now;
      }
    }
    bool waiting_registered = false;

    int FixedFileFor(FileId id, int fd) {
      if (!files_registered || id >= kRegisteredFiles) return -1;
      if (file_slots[id] == 0) {
        int updated = io_uring_register_files_update(&ring, id, &fd, 1);
        file_slots[id] = updated == 1 ? 1 : 2;  // 2: registration failed, use the fd
      }
      return file_slots[id] == 1 ? static_cast<int>(id) : -1;
    }

    void PrepareRead(size_t slot) {
      Op& op = ops[slot];
      const ReadPlan& plan = plans[slot];
      PendingRequest& pending = pendings[slot];
      const auto& file = *pending.file;
      char* destination = buffers[slot].raw() + op.done;
      unsigned length = static_cast<unsigned>(
          std::min<uint64_t>(plan.length - op.done, 1u << 30));
      uint64_t offset = plan.offset + op.done;
      io_uring_sqe* sqe = NextSqe();
      bool in_arena = buffers[slot].allocation().in_arena;
      if (buffers_registered && in_arena) {
        io_uring_prep_read_fixed(sqe, file.fd, destination, length, offset, 0);
      } else {
        io_uring_prep_read(sqe, file.fd, destination, length, offset);
      }
      int fixed = file.registrable ? FixedFileFor(pending.request.file, file.fd) : -1;
      if (fixed >= 0) {
        sqe->fd = fixed;
        sqe->flags |= IOSQE_FIXED_FILE;
      }
      io_uring_sqe_set_data64(sqe, UserData(slot, kRead));
    }

    void PrepareSmallFileOpen(size_t slot) {
      Op& op = ops[slot];
      const std::string& path = pendings[slot].request.path;
      // Open and size the file at once: two metadata round trips overlap.
      io_uring_sqe* sqe = NextSqe();
      io_uring_prep_openat(sqe, AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC, 0);
      io_uring_sqe_set_data64(sqe, UserData(slot, kOpen));
      sqe = NextSqe();
      io_uring_prep_statx(sqe, AT_FDCWD, path.c_str(), 0, STATX_SIZE,
                          reinterpret_cast<struct ::statx*>(&op.statx_buffer));
      io_uring_sqe_set_data64(sqe, UserData(slot, kStatx));
      op.pending_sqes = 2;
    }

    void StartSmallFileRead(size_t slot) {
      Op& op = ops[slot];
      BufferPool::Allocation allocation;
      if (!engine->pool_->TryAcquire(op.file_size, &allocation)) {
        op.waiting_for_buffer = true;
        return;
      }
      op.waiting_for_buffer = false;
      buffers[slot] = ReadBuffer(engine->pool_, allocation);
      plans[slot] = ReadPlan{0, static_cast<size_t>(op.file_size), 0};
      if (op.file_size == 0) {
        FinishSmallFile(slot, Status::OK());
        return;
      }
      PrepareSmallRead(slot);
    }

    void PrepareSmallRead(size_t slot) {
      Op& op = ops[slot];
      io_uring_sqe* sqe = NextSqe();
      char* destination = buffers[slot].raw() + op.done;
      unsigned length = static_cast<unsigned>(std::min<uint64_t>(op.file_size - op.done, 1u << 30));
      if (buffers_registered && buffers[slot].allocation().in_arena) {
        io_uring_prep_read_fixed(sqe, op.fd, destination, length, op.done, 0);
      } else {
        io_uring_prep_read(sqe, op.fd, destination, length, op.done);
      }
      io_uring_sqe_set_data64(sqe, UserData(slot, kRead));
    }

    void CloseAsync(int fd) {
      io_uring_sqe* sqe = NextSqe();
      io_uring_prep_close(sqe, fd);
      io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(fd) << 8) | kClose);
    }

    void Release(size_t slot) {
      ops[slot].busy = false;
      pendings[slot] = PendingRequest();
      free_slots.push_back(slot);
      active -= 1;
      engine->NoteInflight(-1);
    }

    void FinishRange(size_t slot, Status status) {
      engine->Complete(pendings[slot], std::move(status), std::move(buffers[slot]),
                       plans[slot].slice_offset, ops[slot].done);
      Release(slot);
    }

    void FinishSmallFile(size_t slot, Status status) {
      Op& op = ops[slot];
      if (op.fd >= 0) {
        CloseAsync(op.fd);
        op.fd = -1;
      }
      engine->Complete(pendings[slot], std::move(status), std::move(buffers[slot]), 0, op.done);
      Release(slot);
    }

    void RetryDue() {
      auto now = Clock::now();
      for (size_t slot = 0; slot < ops.size(); ++slot) {
        Op& op = ops[slot];
        if (op.busy && op.retry_at != Clock::time_point() && op.retry_at <= now) {
          op.retry_at = Clock::time_point();
          if (pendings[slot].request.path.empty()) {
            PrepareRead(slot);
          } else {
            PrepareSmallRead(slot);
          }
        }
      }
    }

    Clock::time_point NextRetry() const {
      Clock::time_point next = Clock::time_point::max();
      for (const Op& op : ops) {
        if (op.busy && op.retry_at != Clock::time_point()) next = std::min(next, op.retry_at);
      }
      return next;
    }

    void WaitAndReap() {
      io_uring_cqe* cqe = nullptr;
      auto started = Clock::now();
      Clock::time_point retry = NextRetry();
      int rc;
      if (retry != Clock::time_point::max()) {
        auto wait = std::max<Clock::duration>(retry - started, std::chrono::microseconds(1));
        auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        __kernel_timespec timeout{nanoseconds / 1000000000, nanoseconds % 1000000000};
        rc = io_uring_wait_cqe_timeout(&ring, &cqe, &timeout);
      } else {
        rc = io_uring_wait_cqe(&ring, &cqe);
      }
      double waited = std::chrono::duration<double>(Clock::now() - started).count();
      {
        std::lock_guard<std::mutex> lock(engine->stats_mutex_);
        engine->stats_.wait_seconds += waited;
      }
      if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN) {
        Log().error("io_uring_wait_cqe: {}", std::strerror(-rc));
      }
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        Handle(cqe->user_data, cqe->res, cqe->flags);
        seen += 1;
      }
      io_uring_cq_advance(&ring, seen);
    }

    void Handle(uint64_t user_data, int result, unsigned flags) {
      OpKind kind = static_cast<OpKind>(user_data & 0xff);
      size_t slot = static_cast<size_t>(user_data >> 8);
      switch (kind) {
        case kWake: {
          uint64_t value;
          while (::read(event_fd, &value, sizeof(value)) > 0) {
          }
          if (!(flags & IORING_CQE_F_MORE)) ArmWake();
          return;
        }
        case kClose:
          return;  // nothing waits on a close
        case kOpen:
        case kStatx: {
          Op& op = ops[slot];
          if (kind == kOpen) {
            if (result >= 0) op.fd = result; else op.open_error = -result;
          } else {
            if (result >= 0) op.file_size = op.statx_buffer.stx_size; else op.statx_error = -result;
          }
          if (--op.pending_sqes > 0) return;
          if (op.open_error != 0 || op.statx_error != 0) {
            Status status = op.open_error != 0
                                ? ErrorFor(pendings[slot], op.open_error, "open")
                                : ErrorFor(pendings[slot], op.statx_error, "statx");
            FinishSmallFile(slot, std::move(status));
            return;
          }
          StartSmallFileRead(slot);
          return;
        }
        case kRead:
          HandleRead(slot, result);
          return;
      }
    }

    void HandleRead(size_t slot, int result) {
      Op& op = ops[slot];
      PendingRequest& pending = pendings[slot];
      if (result >= 0 && engine->hooks_.inject_read_error) {
        int injected = engine->hooks_.inject_read_error(pending.request.tag);
        if (injected != 0) {
          result = -injected;
          // The injected failure replaces a read that did happen: forget it.
        }
      }
      bool small = !pending.request.path.empty();
      const ReadPlan& plan = plans[slot];
      if (result == -EAGAIN || result == -EINTR) {
        if (++op.retries <= kMaxRetries) {
          // Back off 50 us, 100 us, 200 us before trying the ring again.
          op.retry_at = Clock::now() + std::chrono::microseconds(50 << (op.retries - 1));
          std::lock_guard<std::mutex> lock(engine->stats_mutex_);
          engine->stats_.retries += 1;
          return;
        }
        // Still refused: serve the rest with a plain pread.
        {
          std::lock_guard<std::mutex> lock(engine->stats_mutex_);
          engine->stats_.pread_fallbacks += 1;
        }
        if (small) {
          size_t more = 0;
          int error = PreadInto(op.fd, op.done, op.file_size - op.done,
                                buffers[slot].raw() + op.done, &more);
          op.done += more;
          FinishSmallFile(slot, error ? ErrorFor(pending, error, "read") : Status::OK());
        } else {
          size_t done = 0;
          Status status = engine->PreadPlanned(pending, plan, op.done, buffers[slot].raw(), &done);
          op.done = done;
          FinishRange(slot, std::move(status));
        }
        return;
      }
      if (result < 0) {
        if (!small && result == -EINVAL && pending.file->direct) {
          // O_DIRECT refused this range: read it buffered.
          size_t done = 0;
          Status status = engine->PreadPlanned(pending, plan, op.done, buffers[slot].raw(), &done);
          op.done = done;
          FinishRange(slot, std::move(status));
          return;
        }
        Status status = ErrorFor(pending, -result, "read");
        if (small) FinishSmallFile(slot, std::move(status)); else FinishRange(slot, std::move(status));
        return;
      }
      op.done += static_cast<size_t>(result);
      size_t wanted = small ? op.file_size : plan.length;
      if (result == 0 || op.done >= wanted) {
        // Complete, or end of file (a short read there is normal).
        if (small) FinishSmallFile(slot, Status::OK()); else FinishRange(slot, Status::OK());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(engine->stats_mutex_);
        engine->stats_.short_reads += 1;
      }
      if (small) {
        PrepareSmallRead(slot);
        return;
      }
      if (pending.file->direct && (plan.offset + op.done) % pending.file->alignment != 0) {
        // An unaligned remainder cannot go through O_DIRECT.
        size_t done = 0;
        Status status = engine->PreadPlanned(pending, plan, op.done, buffers[slot].raw(), &done);
        op.done = done;
        FinishRange(slot, std::move(status));
        return;
      }
      PrepareRead(slot);
    }
  };

  void WakeAll() {
    uint64_t one = 1;
    for (auto& ring : rings_) {
      if (ring->event_fd >= 0) {
        ssize_t ignored = ::write(ring->event_fd, &one, sizeof(one));
        (void)ignored;
      }
    }
  }

  std::vector<std::unique_ptr<RingThread>> rings_;
  std::mutex queue_mutex_;
  std::deque<PendingRequest> queue_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

Status CreateUringEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine) {
  auto uring = std::make_unique<UringEngine>(options);
  Status status = uring->Start();
  if (!status.ok()) return status;
  *engine = std::move(uring);
  return Status::OK();
}

}  // namespace gpufeed

#else  // !GPUFEED_HAVE_IO_URING

#include "io/read_engine.h"

namespace gpufeed {

Status CreateUringEngine(const IoOptions&, std::unique_ptr<ReadEngine>*) {
  return Status::NotSupported(
      "gpufeed was built without io_uring (install liburing-dev and rebuild with "
      "-DGPUFEED_WITH_IO_URING=ON)");
}

}  // namespace gpufeed

#endif  // GPUFEED_HAVE_IO_URING
