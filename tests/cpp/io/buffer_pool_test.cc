#include "io/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace gpufeed {
namespace {

TEST(BufferPoolTest, AlignedAllocationsWithinBudgetAndCoalescing) {
  BufferPool pool(64 << 10);
  BufferPool::Allocation a, b, c, d;
  ASSERT_TRUE(pool.TryAcquire(1, &a));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % kBufferAlignment, 0u);
  EXPECT_EQ(a.capacity, kBufferAlignment);
  ASSERT_TRUE(pool.TryAcquire(30 << 10, &b));  // rounded to 32 KiB
  ASSERT_TRUE(pool.TryAcquire(27 << 10, &c));  // rounded to 28 KiB: the arena is full
  EXPECT_FALSE(pool.TryAcquire(1, &d));
  EXPECT_EQ(pool.buffers_outstanding(), 3u);
  pool.Release(b);
  pool.Release(a);
  // a and b coalesce into one 36 KiB hole.
  ASSERT_TRUE(pool.TryAcquire(36 << 10, &d));
  pool.Release(c);
  pool.Release(d);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.buffers_outstanding(), 0u);
  // Everything coalesced back into the whole arena.
  ASSERT_TRUE(pool.TryAcquire(64 << 10, &a));
  pool.Release(a);
}

// Random acquisitions and releases against a plain first-fit model over
// the arena's units: the same placements, never overlapping, and the arena's
// end respected (200 units: not a multiple of the bitmap's 64).
TEST(BufferPoolTest, PlacementsAreFirstFitOverTheUnits) {
  constexpr size_t kUnits = 200;
  BufferPool pool(kUnits * kBufferAlignment);
  std::vector<bool> model(kUnits, false);
  std::vector<BufferPool::Allocation> held;
  std::mt19937 random(7);
  for (int step = 0; step < 20000; ++step) {
    if (!held.empty() && (random() % 2 == 0 || held.size() > 40)) {
      const size_t pick = random() % held.size();
      const size_t first = static_cast<size_t>(held[pick].data - pool.arena()) / kBufferAlignment;
      for (size_t u = 0; u < held[pick].capacity / kBufferAlignment; ++u) model[first + u] = false;
      pool.Release(held[pick]);
      held.erase(held.begin() + static_cast<long>(pick));
      continue;
    }
    const size_t units = 1 + random() % (random() % 8 == 0 ? 130 : 9);
    size_t expected = SIZE_MAX;  // the model's first fit
    for (size_t start = 0, run = 0; start + run < kUnits;) {
      if (model[start + run]) {
        start += run + 1;
        run = 0;
      } else if (++run == units) {
        expected = start;
        break;
      }
    }
    BufferPool::Allocation allocation;
    const bool acquired = pool.TryAcquire(units * kBufferAlignment - 100, &allocation);
    ASSERT_EQ(acquired, expected != SIZE_MAX) << "step " << step << ", " << units << " units";
    if (!acquired) continue;
    ASSERT_EQ(allocation.data, pool.arena() + expected * kBufferAlignment) << "step " << step;
    ASSERT_EQ(allocation.capacity, units * kBufferAlignment);
    for (size_t u = 0; u < units; ++u) model[expected + u] = true;
    held.push_back(allocation);
  }
  for (const BufferPool::Allocation& allocation : held) pool.Release(allocation);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  BufferPool::Allocation whole;
  ASSERT_TRUE(pool.TryAcquire(kUnits * kBufferAlignment, &whole));
  EXPECT_TRUE(whole.in_arena);
  pool.Release(whole);
}

// ReadBuffers hold a plain pointer: an owner letting go of the pool hands
// it to KeepAliveWhileOutstanding, and the last buffer's release frees it.
TEST(BufferPoolTest, KeptAliveUntilTheLastBufferIsReleased) {
  std::weak_ptr<BufferPool> weak;
  ReadBuffer first, second;
  {
    auto pool = std::make_shared<BufferPool>(64 << 10);
    weak = pool;
    BufferPool::Allocation a, b;
    ASSERT_TRUE(pool->TryAcquire(100, &a));
    ASSERT_TRUE(pool->TryAcquire(5000, &b));
    first = ReadBuffer(pool, a);
    second = ReadBuffer(pool, b);
    pool->KeepAliveWhileOutstanding(pool);
  }
  EXPECT_FALSE(weak.expired());
  std::memset(first.raw(), 1, 100);  // still the pool's memory
  first.reset();
  EXPECT_FALSE(weak.expired());
  std::memset(second.raw(), 2, 5000);
  second.reset();
  EXPECT_TRUE(weak.expired());
  // Nothing outstanding: the owner's reference is not kept.
  auto pool = std::make_shared<BufferPool>(64 << 10);
  weak = pool;
  pool->KeepAliveWhileOutstanding(pool);
  pool.reset();
  EXPECT_TRUE(weak.expired());
}

// Buffers released on several threads at once after the owner let go: the
// last release frees the pool while the others may still be in Release, so
// nothing there may touch the pool after unlocking (ASan and TSan runs).
TEST(BufferPoolTest, ConcurrentReleasesAfterTheOwnerLetGo) {
  for (int trial = 0; trial < 200; ++trial) {
    std::atomic<int> calls{0};
    std::vector<ReadBuffer> buffers(8);
    std::weak_ptr<BufferPool> weak;
    {
      auto pool = std::make_shared<BufferPool>(64 << 10);
      // A slow listener widens the window a release outside the lock had.
      pool->AddReleaseListener([&calls] {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
        calls.fetch_add(1);  // reads the capture, inside the pool's listener list
      });
      for (ReadBuffer& buffer : buffers) {
        BufferPool::Allocation allocation;
        ASSERT_TRUE(pool->TryAcquire(4096, &allocation));
        buffer = ReadBuffer(pool, allocation);
      }
      pool->KeepAliveWhileOutstanding(pool);
      weak = pool;
    }
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (ReadBuffer& buffer : buffers) {
      threads.emplace_back([&buffer, &go] {
        while (!go.load()) {
        }
        buffer.reset();
      });
    }
    go.store(true);
    for (std::thread& thread : threads) thread.join();
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(calls.load(), 8);
  }
}

TEST(BufferPoolTest, OversizeRequestOnlyWhenAlone) {
  BufferPool pool(16 << 10);
  BufferPool::Allocation small, big;
  ASSERT_TRUE(pool.TryAcquire(4096, &small));
  EXPECT_FALSE(pool.TryAcquire(1 << 20, &big));
  pool.Release(small);
  ASSERT_TRUE(pool.TryAcquire(1 << 20, &big));
  EXPECT_FALSE(big.in_arena);
  EXPECT_FALSE(pool.TryAcquire(4096, &small));  // the budget is taken
  pool.Release(big);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(BufferPoolTest, ReadBufferReturnsMemoryOnDestruction) {
  auto pool = std::make_shared<BufferPool>(64 << 10);
  int released = 0;
  pool->AddReleaseListener([&] { released += 1; });
  {
    BufferPool::Allocation allocation;
    ASSERT_TRUE(pool->TryAcquire(100, &allocation));
    ReadBuffer buffer(pool, allocation);
    buffer.set_slice(10, 50);
    EXPECT_EQ(buffer.size(), 50u);
    EXPECT_EQ(buffer.data(), allocation.data + 10);
    ReadBuffer moved = std::move(buffer);
    EXPECT_EQ(buffer.size(), 0u);
    EXPECT_EQ(pool->buffers_outstanding(), 1u);
  }
  EXPECT_EQ(pool->buffers_outstanding(), 0u);
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace gpufeed
