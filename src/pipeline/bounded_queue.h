// BoundedQueue<T>: the queue between two pipeline stages.
//
// Bounded in items and in bytes; Push blocks while full (back-pressure),
// Pop blocks while empty. Close() ends the stream (Pop drains what is left,
// then returns false); Cancel() wakes everyone at once and makes every call
// return false, so shutdown never waits on a full or empty queue. The queue
// measures the time producers were blocked and consumers starved, and its
// mean fill, for the stage statistics.
//
// Thread safety: all methods may be called from any thread.
#ifndef GPUFEED_PIPELINE_BOUNDED_QUEUE_H_
#define GPUFEED_PIPELINE_BOUNDED_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

namespace gpufeed {

struct QueueStats {
  uint64_t pushed = 0;
  uint64_t popped = 0;
  double blocked_seconds = 0;  // producers waiting for room
  double starved_seconds = 0;  // consumers waiting for items
  double mean_fill = 0;        // items, sampled at each push and pop
};

template <typename T>
class BoundedQueue {
 public:
  // An item larger than max_bytes is still accepted when the queue is empty.
  BoundedQueue(size_t max_items, size_t max_bytes)
      : max_items_(max_items == 0 ? 1 : max_items), max_bytes_(max_bytes) {}

  // False when cancelled or closed (the item is not queued).
  bool Push(T item, size_t bytes = 0) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto has_room = [&] {
      return cancelled_ || closed_ ||
             (items_.size() < max_items_ && (items_.empty() || bytes_ + bytes <= max_bytes_));
    };
    if (!has_room()) {
      auto started = Clock::now();
      not_full_.wait(lock, has_room);
      stats_.blocked_seconds += Seconds(Clock::now() - started);
    }
    if (cancelled_ || closed_) return false;
    items_.emplace_back(std::move(item), bytes);
    bytes_ += bytes;
    stats_.pushed += 1;
    Sample();
    not_empty_.notify_one();
    return true;
  }

  // False when cancelled, or closed and drained.
  bool Pop(T* item) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto ready = [&] { return cancelled_ || closed_ || !items_.empty(); };
    if (!ready()) {
      auto started = Clock::now();
      not_empty_.wait(lock, ready);
      stats_.starved_seconds += Seconds(Clock::now() - started);
    }
    if (cancelled_ || items_.empty()) return false;
    *item = std::move(items_.front().first);
    bytes_ -= items_.front().second;
    items_.pop_front();
    stats_.popped += 1;
    Sample();
    not_full_.notify_one();
    return true;
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  void Cancel() {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }
  size_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  QueueStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    QueueStats out = stats_;
    out.mean_fill = fill_samples_ ? fill_sum_ / fill_samples_ : 0;
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double Seconds(Clock::duration duration) {
    return std::chrono::duration<double>(duration).count();
  }
  void Sample() {
    fill_sum_ += static_cast<double>(items_.size());
    fill_samples_ += 1;
  }

  const size_t max_items_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<std::pair<T, size_t>> items_;
  size_t bytes_ = 0;
  bool closed_ = false;
  bool cancelled_ = false;
  QueueStats stats_;
  double fill_sum_ = 0;
  uint64_t fill_samples_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_BOUNDED_QUEUE_H_
