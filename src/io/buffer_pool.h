// BufferPool: the read buffers of a ReadEngine, bounded by a byte budget.
//
// One page-aligned arena of `budget` bytes is carved first-fit in 4 KiB
// units, so no read allocates on the hot path, every buffer is aligned for
// O_DIRECT, and the whole arena can be registered with io_uring once. The
// units in use are a bitmap (fixed at construction), so neither acquiring
// nor releasing allocates memory. A request larger than the budget gets a
// dedicated allocation, but only when nothing else is in use: memory stays
// bounded by max(budget, one request).
#ifndef GPUFEED_IO_BUFFER_POOL_H_
#define GPUFEED_IO_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace gpufeed {

constexpr size_t kBufferAlignment = 4096;

class BufferPool {
 public:
  struct Allocation {
    char* data = nullptr;
    size_t capacity = 0;
    bool in_arena = false;
  };

  // huge_pages: back the arena with transparent huge pages (MADV_HUGEPAGE).
  // Worth it for O_DIRECT, where the device DMAs into the buffers: a 128 KiB
  // read becomes one contiguous segment instead of 32 pages. For buffered
  // reads (a copy out of the page cache) there is no such gain, only the
  // cost of zeroing and compacting huge pages, so buffered engines skip it.
  explicit BufferPool(size_t budget, bool huge_pages = false);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Allocates `size` bytes (rounded up to 4 KiB); false when the budget has
  // no room right now (the caller retries after a Release). Thread-safe.
  bool TryAcquire(size_t size, Allocation* allocation);
  void Release(const Allocation& allocation);

  // Called after every Release, under the pool's lock: engines wake up
  // their threads that wait for buffers. A listener must not call into the
  // pool. REQUIRES: before the first TryAcquire.
  void AddReleaseListener(std::function<void()> listener);

  // For the pool's owner letting go of it (an engine being destroyed): the
  // pool keeps itself alive through `self` until its last outstanding
  // allocation is released, then drops it. ReadBuffers hold a plain pointer
  // (no reference count per read), so this is what lets them outlive the
  // engine. Allocations never released (abandoned reads) keep it for good.
  void KeepAliveWhileOutstanding(std::shared_ptr<BufferPool> self);

  char* arena() const { return arena_; }
  size_t arena_size() const { return arena_size_; }
  size_t bytes_in_use() const;
  size_t buffers_outstanding() const;

 private:
  char* arena_ = nullptr;
  size_t arena_size_ = 0;
  mutable std::mutex mutex_;
  // Bit u of used_[u / 64]: arena unit u (4 KiB) is in use. Bits past the
  // arena's last unit are set, so no run reaches past it.
  std::vector<uint64_t> used_;
  size_t free_units_ = 0;  // clear bits of used_ below the arena's end
  // The first unit of a run of `units` free ones (first fit), or SIZE_MAX.
  size_t FindFreeRun(size_t units) const;
  void MarkUnits(size_t first, size_t units, bool in_use);
  size_t bytes_in_use_ = 0;
  size_t outstanding_ = 0;
  size_t oversize_outstanding_ = 0;
  std::vector<std::function<void()>> listeners_;
  std::shared_ptr<BufferPool> keep_alive_;  // see KeepAliveWhileOutstanding
};

// The bytes of one completed read: a slice of a pool allocation. Move-only;
// the allocation returns to the pool when the buffer is destroyed or reset.
// REQUIRES: the pool outlives the buffer (its owner holds it, or handed it
// to KeepAliveWhileOutstanding).
class ReadBuffer {
 public:
  ReadBuffer() = default;
  ReadBuffer(const std::shared_ptr<BufferPool>& pool, BufferPool::Allocation allocation)
      : pool_(pool.get()), allocation_(allocation) {}
  // A temporary owner would leave the buffer's pool pointer dangling.
  ReadBuffer(std::shared_ptr<BufferPool>&& pool, BufferPool::Allocation allocation) = delete;
  ReadBuffer(ReadBuffer&& other) noexcept { *this = std::move(other); }
  ReadBuffer& operator=(ReadBuffer&& other) noexcept;
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  ~ReadBuffer() { reset(); }

  const char* data() const { return allocation_.data + slice_offset_; }
  size_t size() const { return slice_size_; }
  bool empty() const { return slice_size_ == 0; }
  void reset();

  // Engine side: where the read lands, and which part of it was asked for.
  char* raw() const { return allocation_.data; }
  size_t capacity() const { return allocation_.capacity; }
  const BufferPool::Allocation& allocation() const { return allocation_; }
  void set_slice(size_t offset, size_t size) {
    slice_offset_ = offset;
    slice_size_ = size;
  }

 private:
  BufferPool* pool_ = nullptr;
  BufferPool::Allocation allocation_;
  size_t slice_offset_ = 0;
  size_t slice_size_ = 0;
};

}  // namespace gpufeed

#endif  // GPUFEED_IO_BUFFER_POOL_H_
