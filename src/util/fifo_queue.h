// FifoQueue<T>: a first-in first-out queue over one ring of slots that
// grows by doubling. push_back and pop_front move elements and allocate
// only when the ring grows, so a queue that has reached its working size
// allocates nothing per element (std::deque allocates a 512-byte chunk for
// every few elements that pass through it). The ring is released when the
// queue empties after it outgrew kKeptSlots, so a burst does not hold its
// memory for good.
//
// T must be default-constructible and move-assignable; a popped slot is
// assigned T(), which releases what the moved-from element still holds.
//
// Thread safety: none (guard it as a std::deque would be guarded).
#ifndef GPUFEED_UTIL_FIFO_QUEUE_H_
#define GPUFEED_UTIL_FIFO_QUEUE_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace gpufeed {

template <typename T>
class FifoQueue {
 public:
  static constexpr size_t kKeptSlots = 4096;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // REQUIRES: !empty().
  T& front() { return slots_[head_]; }

  void push_back(T&& value) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }

  // REQUIRES: !empty().
  void pop_front() {
    slots_[head_] = T();
    head_ = (head_ + 1) & (slots_.size() - 1);
    if (--size_ == 0 && slots_.size() > kKeptSlots) {
      std::vector<T>().swap(slots_);
      head_ = 0;
    }
  }

  void swap(FifoQueue& other) noexcept {
    slots_.swap(other.slots_);
    std::swap(head_, other.head_);
    std::swap(size_, other.size_);
  }

 private:
  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // empty, or a power of two of slots
  size_t head_ = 0;       // the front's slot
  size_t size_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_UTIL_FIFO_QUEUE_H_
