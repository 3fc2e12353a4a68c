#include "io/buffer_pool.h"

#include <sys/mman.h>

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
  free_blocks_[0] = arena_size_;
}

BufferPool::~BufferPool() {
  if (arena_ != nullptr) ::munmap(arena_, arena_size_);
}

bool BufferPool::TryAcquire(size_t size, Allocation* allocation) {
  size_t wanted = RoundUp(size == 0 ? 1 : size);
  std::lock_guard<std::mutex> lock(mutex_);
  if (wanted <= arena_size_) {
    if (oversize_outstanding_ > 0) return false;  // the budget is lent out whole
    for (auto it = free_blocks_.begin(); it != free_blocks_.end(); ++it) {
      if (it->second < wanted) continue;
      size_t offset = it->first;
      size_t remaining = it->second - wanted;
      free_blocks_.erase(it);
      if (remaining > 0) free_blocks_[offset + wanted] = remaining;
      allocation->data = arena_ + offset;
      allocation->capacity = wanted;
      allocation->in_arena = true;
      bytes_in_use_ += wanted;
      outstanding_ += 1;
      return true;
    }
    return false;
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_in_use_ -= allocation.capacity;
    outstanding_ -= 1;
    if (allocation.in_arena) {
      size_t offset = static_cast<size_t>(allocation.data - arena_);
      size_t length = allocation.capacity;
      auto next = free_blocks_.lower_bound(offset);
      if (next != free_blocks_.end() && offset + length == next->first) {
        length += next->second;
        next = free_blocks_.erase(next);
      }
      if (next != free_blocks_.begin()) {
        auto previous = std::prev(next);
        if (previous->first + previous->second == offset) {
          previous->second += length;
          length = 0;
        }
      }
      if (length > 0) free_blocks_[offset] = length;
    } else {
      oversize_outstanding_ -= 1;
      std::free(allocation.data);
    }
  }
  // listeners_ is only written before the first Acquire: no lock, no copy.
  for (auto& listener : listeners_) listener();
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
    pool_ = std::move(other.pool_);
    allocation_ = other.allocation_;
    slice_offset_ = other.slice_offset_;
    slice_size_ = other.slice_size_;
    other.allocation_ = BufferPool::Allocation();
    other.slice_offset_ = other.slice_size_ = 0;
  }
  return *this;
}

void ReadBuffer::reset() {
  if (pool_ && allocation_.data != nullptr) pool_->Release(allocation_);
  pool_.reset();
  allocation_ = BufferPool::Allocation();
  slice_offset_ = slice_size_ = 0;
}

}  // namespace gpufeed
