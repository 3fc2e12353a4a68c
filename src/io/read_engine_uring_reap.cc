// A ring thread's completions: waiting for them, and what each one means
// for its slot (read_engine_uring.h). A read is finished, resubmitted for
// its remainder, retried after a backoff, or served by pread.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/read_engine_uring.h"
#include "util/logging.h"

namespace gpufeed {
namespace uring {

void UringEngine::RingThread::WaitAndReap() {
  // The requesters get what is done before this thread sleeps.
  CompletionBatch::FlushOpen(engine);
  auto started = Clock::now();
  Clock::time_point retry = NextWake();
  // How long the wait may last (max(): until a completion).
  Clock::duration wait = Clock::duration::max();
  if (retry != Clock::time_point::max()) {
    wait = std::max<Clock::duration>(retry - started, std::chrono::microseconds(1));
  }
  auto timespec_of = [](Clock::duration d) {
    auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    return __kernel_timespec{nanoseconds / 1000000000, nanoseconds % 1000000000};
  };
  int rc = 0;
  // Free slots change only on this thread, so this holds through the wait.
  const bool accepts = AcceptsRequests();
  sleeping.store(accepts);
  if (!accepts || QueueEmpty()) {
    // Reads the kernel holds for live requests: their completions may gather.
    const size_t reads = active - abandoned;
    // SQEs the loop prepared go out with the wait's io_uring_enter (one
    // system call per turn, as fio's), but for the gathered wait, whose
    // raw call submits nothing.
    const bool submit = prepared > 0;
    if (min_timeout && dense && reads >= kReapWindowMinReads) {
      SubmitPrepared();
      // Bounded: a straggler holds back the others' delivery at most
      // kReapLimitMicros (and a retry or deadline check is never late).
      __kernel_timespec bound =
          timespec_of(std::min<Clock::duration>(wait, std::chrono::microseconds(kReapLimitMicros)));
      rc = WaitCompletions(static_cast<unsigned>(reads), kReapWindowMicros, &bound);
    } else if (wait != Clock::duration::max()) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec limit = timespec_of(wait);
      rc = submit ? io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &limit, nullptr)
                  : io_uring_wait_cqe_timeout(&ring, &cqe, &limit);
    } else if (submit) {
      rc = io_uring_submit_and_wait(&ring, 1);
    } else {
      io_uring_cqe* cqe = nullptr;
      rc = io_uring_wait_cqe(&ring, &cqe);
    }
    if (prepared > 0 && io_uring_sq_ready(&ring) == 0) {  // submitted with the wait
      submit_calls += 1;
      prepared = 0;
    }
  }
  SubmitPrepared();  // not waiting (the queue holds more to start), or the wait failed
  sleeping.store(false);
  double waited = std::chrono::duration<double>(Clock::now() - started).count();
  {
    std::lock_guard<std::mutex> lock(engine->stats_mutex_);
    engine->stats_.wait_seconds += waited;
    AddSubmitFiguresLocked();
  }
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN) {
    Log().error("io_uring_wait_cqe: {}", std::strerror(-rc));
  }
  io_uring_cqe* cqe = nullptr;
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring, head, cqe) {
    Handle(cqe->user_data, cqe->res, cqe->flags);
    seen += 1;
  }
  io_uring_cq_advance(&ring, seen);
  // Completions come several per wait: worth gathering them next time.
  dense = seen >= 2;
  // Delivered at once: what a queue's handler submits in return is started
  // by the loop's next StartRequests, with the slots just freed, before
  // this thread sleeps again.
  if (seen > 0) CompletionBatch::FlushOpen(engine);
}

bool UringEngine::RingThread::AcceptsRequests() const {
  return !free_slots.empty() && !queue_blocked;  // else a completion or a release wakes it
}

int UringEngine::RingThread::WaitCompletions(unsigned wait_nr, unsigned window_us,
                                             const __kernel_timespec* timeout) {
  GeteventsArg arg{};
  arg.sigmask_sz = _NSIG / 8;
  arg.min_wait_usec = window_us;
  arg.ts = reinterpret_cast<uint64_t>(timeout);
  // Completions already in the CQ (or deferred task work) end the wait at
  // once only when there are wait_nr of them; the window bounds the rest.
  int rc = static_cast<int>(::syscall(__NR_io_uring_enter, ring.ring_fd, 0, wait_nr,
                                      IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg,
                                      sizeof(arg)));
  return rc < 0 ? -errno : rc;
}

void UringEngine::RingThread::Handle(uint64_t user_data, int result, unsigned flags) {
  OpKind kind = static_cast<OpKind>(user_data & 0xff);
  size_t slot = SlotOf(user_data);
  if (kind == kRead || kind == kOpen || kind == kStatx) {
    // Every SQE of a request completes exactly once, so the generation
    // always matches; the check guards the slot's next request.
    if (slot >= ops.size() || GenerationOf(user_data) != ops[slot].generation) return;
    ops[slot].in_flight -= 1;
    if (ops[slot].abandoned) {
      HandleAbandoned(kind, slot, result);
      return;
    }
  }
  switch (kind) {
    case kWake: {
      uint64_t value;
      while (::read(event_fd, &value, sizeof(value)) > 0) {
      }
      if (!(flags & IORING_CQE_F_MORE)) ArmWake();
      return;
    }
    case kClose:
    case kCancel:
      return;  // nothing waits on a close or a cancellation
    case kOpen:
    case kStatx:
      HandleMetadata(kind, slot, result);
      return;
    case kRead:
      HandleRead(slot, result);
      return;
  }
}

void UringEngine::RingThread::HandleMetadata(OpKind kind, size_t slot, int result) {
  Op& op = ops[slot];
  if (kind == kOpen) {
    if (result >= 0) op.fd = result; else op.open_error = -result;
  } else {
    if (result >= 0) op.file_size = op.statx_buffer->stx_size; else op.statx_error = -result;
  }
  if (--op.pending_sqes > 0) return;
  if (op.open_error != 0 || op.statx_error != 0) {
    Status status = op.open_error != 0 ? ErrorFor(pendings[slot], op.open_error, "open")
                                       : ErrorFor(pendings[slot], op.statx_error, "statx");
    FinishSmallFile(slot, std::move(status));
    return;
  }
  StartSmallFileRead(slot);
}

void UringEngine::RingThread::HandleRead(size_t slot, int result) {
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
    HandleRetryable(slot);
    return;
  }
  if (result < 0) {
    if (!small && result == -EINVAL && pending.file->direct && !op.buffered) {
      // O_DIRECT refused this range: read it buffered, through the ring.
      op.buffered = true;
      PrepareRead(slot);
      return;
    }
    if (RetryTransient(slot, -result)) return;
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
    // An unaligned remainder cannot go through O_DIRECT: buffered, through the ring.
    op.buffered = true;
  }
  PrepareRead(slot);
}

bool UringEngine::RingThread::RetryTransient(size_t slot, int error) {
  Clock::duration wait;
  PendingRequest& pending = pendings[slot];
  if (!engine->RetryAfter(pending, error, &wait)) return false;
  const auto at = Clock::now() + wait;
  if (at >= pending.deadline) return false;  // it would time out first: fail now
  // Tried again from where it stopped (op.done bytes are good).
  ops[slot].retry_at = at;
  retry_pending = true;
  return true;
}

void UringEngine::RingThread::HandleRetryable(size_t slot) {
  Op& op = ops[slot];
  if (++op.retries <= kMaxRetries) {
    // Back off 50 us, 100 us, 200 us before trying the ring again.
    op.retry_at = Clock::now() + std::chrono::microseconds(50 << (op.retries - 1));
    retry_pending = true;
    std::lock_guard<std::mutex> lock(engine->stats_mutex_);
    engine->stats_.retries += 1;
    return;
  }
  // Still refused: the pread pool serves it, off the ring thread (a pread
  // here could block the ring and every deadline with it).
  {
    std::lock_guard<std::mutex> lock(engine->stats_mutex_);
    engine->stats_.pread_fallbacks += 1;
  }
  std::vector<PendingRequest> handed;
  handed.push_back(std::move(pendings[slot]));
  if (op.fd >= 0) {
    CloseAsync(op.fd);
    op.fd = -1;
  }
  buffers[slot].reset();
  Release(slot);
  engine->HandToPreadPool(std::move(handed));
}

}  // namespace uring
}  // namespace gpufeed
