#include "util/fifo_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <random>
#include <string>

namespace gpufeed {
namespace {

// Random pushes and pops against std::deque: the same elements in the same
// order, through growth, wrap-around and the release of an outgrown ring.
TEST(FifoQueueTest, BehavesAsADeque) {
  FifoQueue<std::string> queue;
  std::deque<std::string> model;
  std::mt19937 random(3);
  for (int step = 0; step < 200000; ++step) {
    // Long stretches of pushes, then of pops, so that the queue passes
    // kKeptSlots and empties again.
    const bool pushing = (step / 12000) % 2 == 0 ? random() % 4 != 0 : random() % 4 == 0;
    if (pushing || model.empty()) {
      std::string value = std::to_string(step) + std::string(random() % 40, 'x');
      model.push_back(value);
      queue.push_back(std::move(value));
    } else {
      ASSERT_EQ(queue.front(), model.front()) << "step " << step;
      queue.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(queue.size(), model.size());
    ASSERT_EQ(queue.empty(), model.empty());
  }
  FifoQueue<std::string> other;
  other.swap(queue);
  EXPECT_TRUE(queue.empty());
  while (!model.empty()) {
    ASSERT_EQ(other.front(), model.front());
    other.pop_front();
    model.pop_front();
  }
  EXPECT_TRUE(other.empty());
}

// A popped element's resources are released at once, not when its slot is
// reused.
TEST(FifoQueueTest, PopReleasesTheElement) {
  FifoQueue<std::shared_ptr<int>> queue;
  auto held = std::make_shared<int>(1);
  queue.push_back(std::shared_ptr<int>(held));
  EXPECT_EQ(held.use_count(), 2);
  std::shared_ptr<int> taken = std::move(queue.front());
  queue.pop_front();
  taken.reset();
  EXPECT_EQ(held.use_count(), 1);
  queue.push_back(std::shared_ptr<int>(held));
  queue.pop_front();  // popped without being moved out
  EXPECT_EQ(held.use_count(), 1);
}

}  // namespace
}  // namespace gpufeed
