// Completion delivery: CompletionQueue, and ReadEngine::CompletionBatch,
// which gathers an engine thread's completions between two of its waits
// (read_engine.h).
#include <utility>

#include "io/read_engine.h"

namespace gpufeed {

// ---------------------------------------------------------------- queue

// Push and Close notify while holding the mutex: a waiter that sees the
// completion may return and destroy the queue (ReadAll keeps it on its
// stack), so the condition variable must not be touched after the unlock
// (else notify_all races with ~CompletionQueue; ./tests/run.sh
// --sanitize=thread checks it).
void CompletionQueue::Push(ReadCompletion completion) {
  if (handler_) {
    std::vector<ReadCompletion> one;
    one.push_back(std::move(completion));
    PushAll(&one);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  completions_.push_back(std::move(completion));
  available_.notify_all();
}

void CompletionQueue::Wait(size_t min_count, std::vector<ReadCompletion>* out, size_t max_count) {
  if (handler_) return;  // nothing is ever held here
  std::unique_lock<std::mutex> lock(mutex_);
  available_.wait(lock, [&] { return closed_ || completions_.size() >= min_count; });
  size_t take = completions_.size();
  if (max_count != 0) take = std::min(take, std::max(max_count, min_count));
  for (size_t i = 0; i < take; ++i) {
    out->push_back(std::move(completions_.front()));
    completions_.pop_front();
  }
}

void CompletionQueue::Close() {
  std::unique_lock<std::mutex> lock(mutex_);
  closed_ = true;
  available_.notify_all();
  available_.wait(lock, [&] { return delivering_ == 0; });
}

size_t CompletionQueue::ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completions_.size();
}

void CompletionQueue::PushAll(std::vector<ReadCompletion>* completions) {
  if (completions->empty()) return;
  if (handler_) {
    bool open;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open = !closed_;
      delivering_ += open;
    }
    if (!open) {  // released here: the buffers go back to the engine's pool
      completions->clear();
      return;
    }
    handler_(completions);
    completions->clear();
    std::lock_guard<std::mutex> lock(mutex_);
    delivering_ -= 1;
    available_.notify_all();  // under the mutex: Close may return and the queue go
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (ReadCompletion& completion : *completions) completions_.push_back(std::move(completion));
  completions->clear();
  available_.notify_all();  // under the mutex: see Push
}

// ---------------------------------------------------------------- batch

thread_local ReadEngine::CompletionBatch* ReadEngine::open_batch_ = nullptr;

ReadEngine::CompletionBatch::CompletionBatch(ReadEngine* engine)
    : engine_(engine), outer_(open_batch_) {
  open_batch_ = this;
}

ReadEngine::CompletionBatch::~CompletionBatch() {
  Flush();
  open_batch_ = outer_;
}

ReadEngine::CompletionBatch* ReadEngine::OpenBatch(const ReadEngine* engine) {
  CompletionBatch* batch = open_batch_;
  return batch != nullptr && batch->engine_ == engine ? batch : nullptr;
}

void ReadEngine::CompletionBatch::FlushOpen(ReadEngine* engine) {
  if (CompletionBatch* batch = OpenBatch(engine)) batch->Flush();
}

void ReadEngine::CompletionBatch::Add(CompletionQueue* queue, ReadCompletion completion,
                                      bool failed, bool clamped) {
  requests_ += 1;
  bytes_ += completion.buffer.size();
  errors_ += failed;
  clamped_ += clamped;
  // Few queues per batch (one per requester): a linear search. Entries
  // past used_ keep their vectors' capacity for the next rounds.
  size_t i = 0;
  while (i < used_ && queues_[i].first != queue) ++i;
  if (i == used_) {
    if (used_ == queues_.size()) queues_.emplace_back();
    queues_[used_].first = queue;
    used_ += 1;
  }
  queues_[i].second.push_back(std::move(completion));
}

void ReadEngine::CompletionBatch::Flush() {
  if (inflight_delta_ != 0) {
    engine_->AddInflight(inflight_delta_);
    inflight_delta_ = 0;
  }
  if (used_ == 0) return;
  // The statistics first: a requester that sees a completion sees it counted.
  {
    std::lock_guard<std::mutex> lock(engine_->stats_mutex_);
    engine_->stats_.requests += requests_;
    engine_->stats_.bytes += bytes_;
    engine_->stats_.errors += errors_;
    engine_->stats_.clamped_reads += clamped_;
  }
  requests_ = bytes_ = errors_ = clamped_ = 0;
  for (size_t i = 0; i < used_; ++i) {
    queues_[i].first->PushAll(&queues_[i].second);
    queues_[i].first = nullptr;
  }
  used_ = 0;
}

}  // namespace gpufeed
