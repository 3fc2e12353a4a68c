// The io_uring engine, the setup of its rings and each ring thread's loop
// (read_engine_uring.h).
#include "io/read_engine_uring.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "util/logging.h"

namespace gpufeed {
namespace uring {

UringEngine::~UringEngine() {
  SetBufferWake(nullptr);
  stopping_ = true;
  WakeAll();
  for (auto& ring : rings_) {
    if (ring->thread.joinable()) ring->thread.join();
  }
}

Status UringEngine::Start() {
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

void UringEngine::Enqueue(std::vector<PendingRequest> requests) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    for (PendingRequest& request : requests) queue_.push_back(std::move(request));
  }
  WakeAll(/*only_sleeping=*/true);
}

void UringEngine::WakeAll(bool only_sleeping) {
  uint64_t one = 1;
  for (auto& ring : rings_) {
    if (only_sleeping && !ring->sleeping.load()) continue;
    if (ring->event_fd >= 0) {
      ssize_t ignored = ::write(ring->event_fd, &one, sizeof(one));
      (void)ignored;
    }
  }
}

UringEngine::RingThread::~RingThread() {
  if (ring_ready) io_uring_queue_exit(&ring);
  if (event_fd >= 0) ::close(event_fd);
}

void UringEngine::RingThread::Run(std::promise<Status>* ready) {
  Status status = Setup();
  ready->set_value(status);
  if (!status.ok()) return;
  Loop();
}

Status UringEngine::RingThread::Setup() {
  const IoOptions& options = engine->options_;
  unsigned entries = static_cast<unsigned>(options.queue_depth) * 2 + 8;
  // Newest flags first; older kernels reject them with EINVAL.
  const unsigned flag_sets[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_COOP_TASKRUN,
      0,
  };
  int rc = -EINVAL;
  io_uring_params params;
  for (unsigned flags : flag_sets) {
    // A test may ask for the oldest setup, as on a kernel before 5.19.
    if (engine->hooks_.plain_io_uring_setup && flags != 0) continue;
    std::memset(&params, 0, sizeof(params));
    params.flags = flags;
    rc = io_uring_queue_init_params(entries, &ring, &params);
    if (rc != -EINVAL) break;
  }
  min_timeout = rc == 0 && (params.features & kFeatureMinTimeout) != 0 &&
                !engine->hooks_.plain_io_uring_setup;
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
  expiry_tick = DeadlineTick(options);
  next_expiry_check = Clock::now() + expiry_tick;
  size_t slots = static_cast<size_t>(options.queue_depth);
  ops.resize(slots);
  pendings.resize(slots);
  buffers.resize(slots);
  plans.resize(slots);
  for (size_t i = slots; i-- > 0;) free_slots.push_back(i);
  return ArmWake() ? Status::OK()
                   : Status::NotSupported("io_uring: cannot poll an eventfd on the ring");
}

bool UringEngine::RingThread::ArmWake() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (sqe == nullptr) return false;
  io_uring_prep_poll_multishot(sqe, event_fd, POLLIN);
  io_uring_sqe_set_data64(sqe, UserData(0, kWake));
  prepared += 1;
  return true;
}

io_uring_sqe* UringEngine::RingThread::NextSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (sqe == nullptr) {
    // The SQ is sized for every slot; only a burst of closes fills it.
    // Whatever `prepared` says: make room.
    submit_calls += io_uring_submit(&ring) > 0;
    prepared = 0;
    sqe = io_uring_get_sqe(&ring);
  }
  prepared += 1;
  return sqe;
}

void UringEngine::RingThread::SubmitPrepared() {
  if (prepared == 0) return;
  int submitted = io_uring_submit(&ring);
  submit_calls += submitted > 0;
  prepared = 0;
}

void UringEngine::RingThread::AddSubmitFiguresLocked() {
  engine->stats_.submit_calls += submit_calls;
  engine->inflight_samples_sum_ += inflight_sum;
  engine->inflight_samples_ += inflight_samples;
  inflight_sum = 0;
  inflight_samples = submit_calls = 0;
}

void UringEngine::RingThread::Loop() {
  // Completions are delivered in batches, before each wait (WaitAndReap)
  // and when the loop ends.
  CompletionBatch batch(engine);
  while (true) {
    const uint64_t submits_before = submit_calls;
    bool was_waiting = waiting_registered;
    const bool stopping = engine->stopping_;
    // Stopping: the queue is drained and the reads in flight finish, for
    // kCloseGrace; what is left then is cancelled or abandoned.
    if (stopping && stop_seen == Clock::time_point()) stop_seen = Clock::now();
    const bool closing = stopping && Clock::now() - stop_seen >= kCloseGrace;
    if (closing) AbandonAll();
    if (!closing) StartRequests();
    // Announced a wait for buffers just now: a release may have slipped
    // in before the announcement without waking us, so look once more.
    if (!closing && waiting_registered && !was_waiting) StartRequests();
    RetryDue();
    ExpireDue(Clock::now());
    // What is prepared is submitted with the wait (WaitAndReap).
    if (prepared > 0 || submit_calls != submits_before) {  // once per turn that submits
      inflight_sum += static_cast<double>(active);
      inflight_samples += 1;
    }
    if (stopping && active == abandoned) {
      SubmitPrepared();
      CancelQueued();  // requests waiting for buffers nobody frees, or none
      KeepAbandonedMemory();
      std::lock_guard<std::mutex> lock(engine->stats_mutex_);
      AddSubmitFiguresLocked();
      return;
    }
    WaitAndReap();
  }
}

bool UringEngine::RingThread::QueueEmpty() {
  std::lock_guard<std::mutex> lock(engine->queue_mutex_);
  return engine->queue_.empty();
}

void UringEngine::RingThread::CancelQueued() {
  FifoQueue<PendingRequest> left;
  {
    std::lock_guard<std::mutex> lock(engine->queue_mutex_);
    left.swap(engine->queue_);
  }
  for (; !left.empty(); left.pop_front()) {
    engine->Complete(left.front(), Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
  }
}

}  // namespace uring

Status CreateUringEngine(const IoOptions& options, std::unique_ptr<ReadEngine>* engine) {
  auto created = std::make_unique<uring::UringEngine>(options);
  Status status = created->Start();
  if (!status.ok()) return status;
  *engine = std::move(created);
  return Status::OK();
}

}  // namespace gpufeed
