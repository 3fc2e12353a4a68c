// A ring thread's deadlines (IoOptions::timeout_seconds): requests queued
// or in flight past them fail with the timeout error; those the kernel
// still holds are cancelled and abandoned, their slot and buffer kept until
// the kernel lets go (read_engine_uring.h).
#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "io/read_engine_uring.h"
#include "util/logging.h"

namespace gpufeed {
namespace uring {

void UringEngine::RingThread::ExpireDue(Clock::time_point now) {
  if (expiry_tick == Clock::duration::zero() || now < next_expiry_check) return;
  next_expiry_check = now + expiry_tick;
  std::deque<PendingRequest> expired;
  {
    std::lock_guard<std::mutex> lock(engine->queue_mutex_);
    // Deadlines are submission time + one limit: the front is the oldest.
    while (!engine->queue_.empty() && engine->queue_.front().deadline <= now) {
      expired.push_back(std::move(engine->queue_.front()));
      engine->queue_.pop_front();
    }
  }
  for (PendingRequest& pending : expired) engine->ExpireRequest(pending, /*still_held=*/false);
  for (size_t slot = 0; slot < ops.size(); ++slot) {
    if (ops[slot].busy && !ops[slot].abandoned && pendings[slot].deadline <= now) {
      Abandon(slot, /*closing=*/false);
    }
  }
}

void UringEngine::RingThread::Abandon(size_t slot, bool closing) {
  Op& op = ops[slot];
  const bool held = op.in_flight > 0;
  if (closing) {
    if (held) {
      std::lock_guard<std::mutex> lock(engine->stats_mutex_);
      engine->stats_.abandoned += 1;
    }
    engine->Complete(pendings[slot], Status::Cancelled("read engine stopped"), ReadBuffer(), 0, 0);
  } else {
    engine->ExpireRequest(pendings[slot], held);
  }
  if (!held) {
    // Waiting for a retry or for buffers: nothing of it is in the kernel.
    if (op.fd >= 0) {
      CloseAsync(op.fd);
      op.fd = -1;
    }
    buffers[slot].reset();
    Release(slot);
    return;
  }
  op.abandoned = true;
  abandoned += 1;
  engine->NoteInflight(-1);
  for (OpKind kind : {kRead, kOpen, kStatx}) {
    io_uring_sqe* sqe = NextSqe();
    if (sqe == nullptr) break;  // the SQ stays full: the kernel finishes it in its time
    io_uring_prep_cancel64(sqe, UserData(slot, kind, op.generation), 0);
    io_uring_sqe_set_data64(sqe, UserData(0, kCancel));
  }
  Log().warn("io_uring: a read {}; cancelled and abandoned ({} of {} slots held by the kernel)",
             closing ? "still running when the engine stopped" : "past the io_timeout", abandoned,
             ops.size());
}

void UringEngine::RingThread::HandleAbandoned(OpKind kind, size_t slot, int result) {
  Op& op = ops[slot];
  if (kind == kOpen && result >= 0) op.fd = result;
  if (op.in_flight > 0) return;
  if (op.fd >= 0) {
    CloseAsync(op.fd);
    op.fd = -1;
  }
  buffers[slot].reset();  // the kernel is done with it: back to the pool
  op.abandoned = false;
  op.busy = false;
  pendings[slot] = PendingRequest();
  free_slots.push_back(slot);
  active -= 1;
  abandoned -= 1;
}

void UringEngine::RingThread::AbandonAll() {
  CancelQueued();
  for (size_t slot = 0; slot < ops.size(); ++slot) {
    if (ops[slot].busy && !ops[slot].abandoned) Abandon(slot, /*closing=*/true);
  }
}

void UringEngine::RingThread::KeepAbandonedMemory() {
  // Never destroyed (and reachable, for leak checkers).
  static std::mutex mutex;
  static auto* kept = new std::vector<std::unique_ptr<struct statx>>();
  for (size_t slot = 0; slot < ops.size(); ++slot) {
    if (!ops[slot].abandoned) continue;
    engine->AbandonBuffer(std::move(buffers[slot]));
    // A statx in flight writes its result here when it completes.
    if (ops[slot].statx_buffer) {
      std::lock_guard<std::mutex> lock(mutex);
      kept->push_back(std::move(ops[slot].statx_buffer));
    }
  }
}

}  // namespace uring
}  // namespace gpufeed
