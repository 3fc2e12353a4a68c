#include "io/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace gpufeed {

namespace {
size_t RoundUp(size_t size) { return (size + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment; }
}  // namespace

BufferPool::BufferPool(size_t budget, bool huge_pages) {
  arena_size_ = RoundUp(budget == 0 ? kBufferAlignment : budget);
  void* memory = ::mmap(nullptr, arena_size_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    arena_size_ = 0;
    return;
  }
  arena_ = static_cast<char*>(memory);
  if (huge_pages) ::madvise(arena_, arena_size_, MADV_HUGEPAGE);
  const size_t units = arena_size_ / kBufferAlignment;
  used_.assign((units + 63) / 64, 0);
  if (units % 64 != 0) used_.back() = ~0ull << (units % 64);
  free_units_ = units;
}

size_t BufferPool::FindFreeRun(size_t units) const {
  if (units > free_units_) return SIZE_MAX;  // a full arena fails without a scan
  size_t run = 0, start = 0;
  for (size_t w = 0; w < used_.size(); ++w) {
    const uint64_t word = used_[w];
    if (word == ~0ull) {
      run = 0;
      continue;
    }
    int bit = 0;
    while (bit < 64) {
      // Free units from `bit` on (clear bits), then units in use (set bits).
      const uint64_t rest = word >> bit;
      const int free_units = rest == 0 ? 64 - bit : __builtin_ctzll(rest);
      if (free_units > 0) {
        if (run == 0) start = w * 64 + bit;
        run += free_units;
        if (run >= units) return start;
        bit += free_units;
        if (bit >= 64) break;
      }
      const uint64_t free_rest = ~word >> bit;
      bit += free_rest == 0 ? 64 - bit : __builtin_ctzll(free_rest);
      run = 0;
    }
  }
  return SIZE_MAX;
}

void BufferPool::MarkUnits(size_t first, size_t units, bool in_use) {
  free_units_ = in_use ? free_units_ - units : free_units_ + units;
  while (units > 0) {
    const size_t w = first / 64, bit = first % 64;
    const size_t here = std::min<size_t>(units, 64 - bit);
    const uint64_t mask = (here == 64 ? ~0ull : ((1ull << here) - 1)) << bit;
    used_[w] = in_use ? used_[w] | mask : used_[w] & ~mask;
    first += here;
    units -= here;
  }
}

BufferPool::~BufferPool() {
  if (arena_ != nullptr) ::munmap(arena_, arena_size_);
}

bool BufferPool::TryAcquire(size_t size, Allocation* allocation) {
  size_t wanted = RoundUp(size == 0 ? 1 : size);
  std::lock_guard<std::mutex> lock(mutex_);
  if (wanted <= arena_size_) {
    if (oversize_outstanding_ > 0) return false;  // the budget is lent out whole
    const size_t units = wanted / kBufferAlignment;
    const size_t first = FindFreeRun(units);
    if (first == SIZE_MAX) return false;
    MarkUnits(first, units, true);
    allocation->data = arena_ + first * kBufferAlignment;
    allocation->capacity = wanted;
    allocation->in_arena = true;
    bytes_in_use_ += wanted;
    outstanding_ += 1;
    return true;
  }
  // Larger than the whole budget: alone, or not at all.
  if (bytes_in_use_ != 0) return false;
  void* memory = nullptr;
  if (::posix_memalign(&memory, kBufferAlignment, wanted) != 0) return false;
  allocation->data = static_cast<char*>(memory);
  allocation->capacity = wanted;
  allocation->in_arena = false;
  oversize_outstanding_ += 1;
  bytes_in_use_ += wanted;
  outstanding_ += 1;
  return true;
}

void BufferPool::Release(const Allocation& allocation) {
  // Declared before the lock, so dropped after it: may destroy this pool.
  std::shared_ptr<BufferPool> last_owner;
  std::lock_guard<std::mutex> lock(mutex_);
  bytes_in_use_ -= allocation.capacity;
  outstanding_ -= 1;
  if (outstanding_ == 0) last_owner = std::move(keep_alive_);
  if (allocation.in_arena) {
    MarkUnits(static_cast<size_t>(allocation.data - arena_) / kBufferAlignment,
              allocation.capacity / kBufferAlignment, false);
  } else {
    oversize_outstanding_ -= 1;
    std::free(allocation.data);
  }
  // Under the lock: once the pool is kept alive only by its outstanding
  // allocations, the last Release on another thread frees it as soon as
  // this one unlocks, so nothing here may touch it after unlocking.
  // listeners_ is only written before the first Acquire.
  for (auto& listener : listeners_) listener();
}

void BufferPool::KeepAliveWhileOutstanding(std::shared_ptr<BufferPool> self) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (outstanding_ > 0) keep_alive_ = std::move(self);
}

void BufferPool::AddReleaseListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listeners_.push_back(std::move(listener));
}

size_t BufferPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_in_use_;
}

size_t BufferPool::buffers_outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return outstanding_;
}

ReadBuffer& ReadBuffer::operator=(ReadBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    other.pool_ = nullptr;
    allocation_ = other.allocation_;
    slice_offset_ = other.slice_offset_;
    slice_size_ = other.slice_size_;
    other.allocation_ = BufferPool::Allocation();
    other.slice_offset_ = other.slice_size_ = 0;
  }
  return *this;
}

void ReadBuffer::reset() {
  if (pool_ != nullptr && allocation_.data != nullptr) pool_->Release(allocation_);
  pool_ = nullptr;
  allocation_ = BufferPool::Allocation();
  slice_offset_ = slice_size_ = 0;
}

}  // namespace gpufeed
