#include "io/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>

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
