#include "pipeline/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpufeed {
namespace {

TEST(BoundedQueueTest, BoundsItemsAndBytesWithBackPressure) {
  BoundedQueue<int> queue(2, 100);
  ASSERT_TRUE(queue.Push(1, 60));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    queue.Push(2, 60);  // 120 bytes > 100: waits for the first pop
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed.load());
  int value = 0;
  ASSERT_TRUE(queue.Pop(&value));
  EXPECT_EQ(value, 1);
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_GT(queue.stats().blocked_seconds, 0.0);
  // An item larger than the byte bound passes when the queue is empty.
  ASSERT_TRUE(queue.Pop(&value));
  ASSERT_TRUE(queue.Push(3, 1000));
  EXPECT_EQ(queue.bytes(), 1000u);
}

TEST(BoundedQueueTest, CloseDrainsThenEnds) {
  BoundedQueue<int> queue(4, 1 << 20);
  queue.Push(1);
  queue.Push(2);
  queue.Close();
  EXPECT_FALSE(queue.Push(3));
  int value;
  EXPECT_TRUE(queue.Pop(&value));
  EXPECT_TRUE(queue.Pop(&value));
  EXPECT_FALSE(queue.Pop(&value));
}

TEST(BoundedQueueTest, CancelWakesBlockedProducersAndConsumers) {
  BoundedQueue<int> full(1, 1 << 20);
  full.Push(1);
  BoundedQueue<int> empty(1, 1 << 20);
  std::thread producer([&] { EXPECT_FALSE(full.Push(2)); });
  std::thread consumer([&] {
    int value;
    EXPECT_FALSE(empty.Pop(&value));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto started = std::chrono::steady_clock::now();
  full.Cancel();
  empty.Cancel();
  producer.join();
  consumer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
}

}  // namespace
}  // namespace gpufeed
