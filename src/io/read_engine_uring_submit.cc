// A ring thread's slots: taking requests off the engine's queue within the
// buffer budget, preparing their SQEs, and releasing a slot once its request
// has completed (read_engine_uring.h).
#include <fcntl.h>

#include <algorithm>

#include "io/read_engine_uring.h"

namespace gpufeed {
namespace uring {

void UringEngine::RingThread::StartRequests() {
  // Small files that were sized earlier and wait for buffer budget.
  if (small_pending) {
    for (size_t slot = 0; slot < ops.size(); ++slot) {
      if (ops[slot].busy && ops[slot].waiting_for_buffer) StartSmallFileRead(slot);
    }
  }
  // As many requests as there are free slots, in one lock.
  bool blocked = false;
  taken.clear();
  {
    std::lock_guard<std::mutex> lock(engine->queue_mutex_);
    while (taken.size() < free_slots.size() && !engine->queue_.empty()) {
      PendingRequest& front = engine->queue_.front();
      Taken next;
      if (front.request.path.empty()) {
        next.plan = PlanFor(front);
        BufferPool::Allocation allocation;
        if (!engine->pool_->TryAcquire(next.plan.length, &allocation)) {
          blocked = true;
          break;
        }
        next.buffer = ReadBuffer(engine->pool_, allocation);
      }
      next.pending = std::move(front);
      engine->queue_.pop_front();
      taken.push_back(std::move(next));
    }
  }
  for (Taken& next : taken) {
    StartTaken(next);
    if (prepared >= kSubmitChunk) SubmitPrepared();  // see kSubmitChunk
  }
  taken.clear();
  SetWaitingForBuffers(blocked);
}

void UringEngine::RingThread::StartTaken(Taken& next) {
  size_t slot = free_slots.back();
  free_slots.pop_back();
  active += 1;
  engine->NoteInflight(1);
  Op& op = ops[slot];
  const uint32_t generation = op.generation + 1;
  op = Op();
  op.busy = true;
  op.generation = generation;
  pendings[slot] = std::move(next.pending);
  buffers[slot] = std::move(next.buffer);
  plans[slot] = next.plan;
  if (!pendings[slot].request.path.empty()) {
    PrepareSmallFileOpen(slot);
  } else if (next.plan.length == 0) {
    FinishRange(slot, Status::OK());
  } else {
    PrepareRead(slot);
  }
}

void UringEngine::RingThread::SetWaitingForBuffers(bool blocked) {
  bool small_waiting = false;
  if (small_pending) {
    for (const Op& op : ops) small_waiting |= op.busy && op.waiting_for_buffer;
    small_pending = small_waiting;
  }
  queue_blocked = blocked;
  bool now = blocked || small_waiting;
  if (now != waiting_registered) {
    engine->waiters_->waiting.fetch_add(now ? 1 : -1, std::memory_order_acq_rel);
    waiting_registered = now;
  }
}

int UringEngine::RingThread::FixedFileFor(FileId id, int fd) {
  if (!files_registered || id >= kRegisteredFiles) return -1;
  if (file_slots[id] == 0) {
    int updated = io_uring_register_files_update(&ring, id, &fd, 1);
    file_slots[id] = updated == 1 ? 1 : 2;  // 2: registration failed, use the fd
  }
  return file_slots[id] == 1 ? static_cast<int>(id) : -1;
}

void UringEngine::RingThread::PrepareRead(size_t slot) {
  Op& op = ops[slot];
  const ReadPlan& plan = plans[slot];
  PendingRequest& pending = pendings[slot];
  const auto& file = *pending.file;
  char* destination = buffers[slot].raw() + op.done;
  unsigned length = static_cast<unsigned>(std::min<uint64_t>(plan.length - op.done, 1u << 30));
  uint64_t offset = plan.offset + op.done;
  io_uring_sqe* sqe = NextSqe();
  bool in_arena = buffers[slot].allocation().in_arena;
  const int fd = op.buffered ? file.buffered_fd : file.fd;
  if (buffers_registered && in_arena) {
    io_uring_prep_read_fixed(sqe, fd, destination, length, offset, 0);
  } else {
    io_uring_prep_read(sqe, fd, destination, length, offset);
  }
  // Only the O_DIRECT (or only) descriptor is registered.
  int fixed = file.registrable && !op.buffered ? FixedFileFor(pending.request.file, fd) : -1;
  if (fixed >= 0) {
    sqe->fd = fixed;
    sqe->flags |= IOSQE_FIXED_FILE;
  }
  io_uring_sqe_set_data64(sqe, UserData(slot, kRead, op.generation));
  op.in_flight += 1;
}

void UringEngine::RingThread::PrepareSmallFileOpen(size_t slot) {
  Op& op = ops[slot];
  const std::string& path = pendings[slot].request.path;
  // Open and size the file at once: two metadata round trips overlap.
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_openat(sqe, AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC, 0);
  io_uring_sqe_set_data64(sqe, UserData(slot, kOpen, op.generation));
  sqe = NextSqe();
  op.statx_buffer = std::make_unique<struct statx>();
  io_uring_prep_statx(sqe, AT_FDCWD, path.c_str(), 0, STATX_SIZE,
                      reinterpret_cast<struct ::statx*>(op.statx_buffer.get()));
  io_uring_sqe_set_data64(sqe, UserData(slot, kStatx, op.generation));
  op.pending_sqes = 2;
  op.in_flight += 2;
}

void UringEngine::RingThread::StartSmallFileRead(size_t slot) {
  Op& op = ops[slot];
  BufferPool::Allocation allocation;
  if (!engine->pool_->TryAcquire(op.file_size, &allocation)) {
    op.waiting_for_buffer = true;
    small_pending = true;
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

void UringEngine::RingThread::PrepareSmallRead(size_t slot) {
  Op& op = ops[slot];
  io_uring_sqe* sqe = NextSqe();
  char* destination = buffers[slot].raw() + op.done;
  unsigned length = static_cast<unsigned>(std::min<uint64_t>(op.file_size - op.done, 1u << 30));
  if (buffers_registered && buffers[slot].allocation().in_arena) {
    io_uring_prep_read_fixed(sqe, op.fd, destination, length, op.done, 0);
  } else {
    io_uring_prep_read(sqe, op.fd, destination, length, op.done);
  }
  io_uring_sqe_set_data64(sqe, UserData(slot, kRead, op.generation));
  op.in_flight += 1;
}

void UringEngine::RingThread::CloseAsync(int fd) {
  io_uring_sqe* sqe = NextSqe();
  io_uring_prep_close(sqe, fd);
  io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(fd) << 8) | kClose);
}

void UringEngine::RingThread::Release(size_t slot) {
  ops[slot].busy = false;
  pendings[slot] = PendingRequest();
  free_slots.push_back(slot);
  active -= 1;
  engine->NoteInflight(-1);
}

void UringEngine::RingThread::FinishRange(size_t slot, Status status) {
  engine->Complete(pendings[slot], std::move(status), std::move(buffers[slot]),
                   plans[slot].slice_offset, ops[slot].done);
  Release(slot);
}

void UringEngine::RingThread::FinishSmallFile(size_t slot, Status status) {
  Op& op = ops[slot];
  if (op.fd >= 0) {
    CloseAsync(op.fd);
    op.fd = -1;
  }
  engine->Complete(pendings[slot], std::move(status), std::move(buffers[slot]), 0, op.done);
  Release(slot);
}

void UringEngine::RingThread::RetryDue() {
  if (!retry_pending) return;
  auto now = Clock::now();
  bool still = false;
  for (size_t slot = 0; slot < ops.size(); ++slot) {
    Op& op = ops[slot];
    if (!op.busy || op.retry_at == Clock::time_point()) continue;
    if (op.retry_at > now) {
      still = true;
      continue;
    }
    op.retry_at = Clock::time_point();
    if (pendings[slot].request.path.empty()) {
      PrepareRead(slot);
    } else {
      PrepareSmallRead(slot);
    }
  }
  retry_pending = still;
}

Clock::time_point UringEngine::RingThread::NextWake() {
  Clock::time_point next = Clock::time_point::max();
  if (retry_pending) {
    for (const Op& op : ops) {
      if (op.busy && !op.abandoned && op.retry_at != Clock::time_point()) {
        next = std::min(next, op.retry_at);
      }
    }
  }
  if (expiry_tick != Clock::duration::zero()) next = std::min(next, next_expiry_check);
  if (stop_seen != Clock::time_point()) next = std::min(next, stop_seen + kCloseGrace);
  return next;
}

}  // namespace uring
}  // namespace gpufeed
