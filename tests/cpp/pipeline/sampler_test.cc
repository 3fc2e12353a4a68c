// Sampler: a portable order, exactly-once across ranks, elastic resume.
#include "pipeline/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace gpufeed {
namespace {

// Golden values computed by an independent Python implementation of the
// generator as specified in sampler.h (tests/python would need a binding):
// any change to the order on any platform fails here.
TEST(SamplerTest, GeneratorAndPermutationAreThePortableSpec) {
  SampleRng rng(0, 0);
  EXPECT_EQ(rng.Next(), 0x06b022e238f6f380ull);
  EXPECT_EQ(rng.Next(), 0x81e9ca8ad217b105ull);
  EXPECT_EQ(rng.Next(), 0xf60d81aafa10baf2ull);
  SamplerOptions options;
  std::vector<uint64_t> sizes = {10};
  EXPECT_EQ(EpochOrder(sizes, options, 0), (std::vector<uint64_t>{3, 9, 6, 8, 5, 1, 2, 7, 4, 0}));
  EXPECT_EQ(EpochOrder(sizes, options, 1), (std::vector<uint64_t>{3, 9, 7, 8, 5, 1, 0, 2, 4, 6}));
  options.seed = 42;
  EXPECT_EQ(EpochOrder(sizes, options, 7), (std::vector<uint64_t>{7, 8, 4, 2, 6, 1, 9, 3, 0, 5}));
}

TEST(SamplerTest, ModesArePermutations) {
  std::vector<uint64_t> sizes = {5, 17, 1, 30, 8, 12};
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kGlobal, ShuffleMode::kBlock}) {
    SamplerOptions options;
    options.shuffle = mode;
    options.window_shards = 2;
    std::vector<uint64_t> order = EpochOrder(sizes, options, 3);
    std::vector<uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> expected(73);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected);
    if (mode == ShuffleMode::kNone) EXPECT_EQ(order, expected);
  }
}

TEST(SamplerTest, BlockShuffleStaysWithinWindowsOfShards) {
  std::vector<uint64_t> sizes(20, 10);  // 20 shards of 10
  SamplerOptions options;
  options.shuffle = ShuffleMode::kBlock;
  options.window_shards = 4;
  std::vector<uint64_t> order = EpochOrder(sizes, options, 0);
  for (size_t window = 0; window < 5; ++window) {
    std::set<uint64_t> shards;
    for (size_t i = window * 40; i < window * 40 + 40; ++i) shards.insert(order[i] / 10);
    EXPECT_EQ(shards.size(), 4u) << "window " << window;
  }
  EXPECT_NE(order, EpochOrder(sizes, options, 1));
}

struct SplitCase {
  uint64_t n;
  uint32_t world, batch;
  bool drop_last;
};

TEST(SamplerTest, ExactlyOncePerEpochAcrossRanks) {
  std::vector<SplitCase> cases;
  for (uint64_t n : {1, 2, 3, 7, 10, 64, 100, 101, 1000, 1001})
    for (uint32_t world : {1, 2, 3, 4, 8, 16})
      for (uint32_t batch : {1, 3, 8, 32})
        for (bool drop_last : {false, true}) cases.push_back({n, world, batch, drop_last});
  for (const SplitCase& c : cases) {
    SamplerOptions options;
    options.world_size = c.world;
    options.batch_size = c.batch;
    options.drop_last = c.drop_last;
    options.seed = c.n * 31 + c.world;
    std::vector<uint64_t> order = EpochOrder({c.n}, options, 2);
    std::map<uint64_t, int> seen;
    size_t per_rank = SIZE_MAX;
    for (uint32_t rank = 0; rank < c.world; ++rank) {
      options.rank = rank;
      std::vector<uint64_t> samples;
      ASSERT_TRUE(RankSamples(order, 0, options, &samples).ok());
      if (per_rank == SIZE_MAX) per_rank = samples.size();
      ASSERT_EQ(samples.size(), per_rank) << "ranks must get equal counts";
      for (uint64_t s : samples) seen[s] += 1;
    }
    std::string where = "n=" + std::to_string(c.n) + " world=" + std::to_string(c.world) +
                        " batch=" + std::to_string(c.batch) + " drop_last=" +
                        std::to_string(c.drop_last);
    if (c.drop_last) {
      EXPECT_EQ(per_rank % c.batch, 0u) << where;
      EXPECT_EQ(per_rank, c.n / c.world / c.batch * c.batch) << where;
      for (auto& [sample, count] : seen) EXPECT_EQ(count, 1) << where;
    } else {
      EXPECT_EQ(per_rank, (c.n + c.world - 1) / c.world) << where;
      EXPECT_EQ(seen.size(), c.n) << where;  // every sample at least once
      // Padding repeats as few samples as possible, each as few times.
      uint64_t extra = per_rank * c.world - c.n;
      uint64_t repeated = 0;
      for (auto& [sample, count] : seen) {
        repeated += count - 1;
        EXPECT_LE(count, 1 + (extra + c.n - 1) / c.n) << where;
      }
      EXPECT_EQ(repeated, extra) << where;
    }
  }
}

TEST(SamplerTest, ResumeAtRandomPointsWithAnyWorldSize) {
  std::mt19937 generator(5);
  for (int trial = 0; trial < 300; ++trial) {
    uint64_t n = 1 + generator() % 500;
    uint32_t world = 1 + generator() % 8;
    uint32_t new_world = 1 + generator() % 8;
    SamplerOptions options;
    options.world_size = world;
    options.batch_size = 1 + generator() % 16;
    options.seed = trial;
    std::vector<uint64_t> order = EpochOrder({n}, options, trial % 3);
    uint64_t per_rank = SamplesPerRank(n, options);
    uint64_t taken = per_rank == 0 ? 0 : generator() % (per_rank + 1);  // mid-batch too
    std::multiset<uint64_t> delivered;
    for (uint32_t rank = 0; rank < world; ++rank) {
      options.rank = rank;
      std::vector<uint64_t> samples;
      ASSERT_TRUE(RankSamples(order, 0, options, &samples).ok());
      delivered.insert(samples.begin(), samples.begin() + taken);
    }
    // State: every rank consumed `taken`, so taken * world positions.
    uint64_t consumed = taken * world;
    options.world_size = new_world;
    for (uint32_t rank = 0; rank < new_world; ++rank) {
      options.rank = rank;
      std::vector<uint64_t> samples;
      ASSERT_TRUE(RankSamples(order, consumed, options, &samples).ok());
      delivered.insert(samples.begin(), samples.end());
    }
    // Nothing lost; repeats only from padding (at most once per rank and stage).
    for (uint64_t s = 0; s < n; ++s) {
      EXPECT_GE(delivered.count(s), 1u) << "lost sample " << s << " trial " << trial;
    }
    uint64_t padding_allowance = world + new_world;
    EXPECT_LE(delivered.size(), n + padding_allowance) << "trial " << trial;
  }
}

TEST(SamplerTest, ResumeWithoutPaddingIsExactlyOnce) {
  // n divisible by both world sizes: no padding, so exactly once.
  SamplerOptions options;
  options.world_size = 4;
  options.batch_size = 5;
  std::vector<uint64_t> order = EpochOrder({120}, options, 0);
  std::multiset<uint64_t> delivered;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    options.rank = rank;
    std::vector<uint64_t> samples;
    ASSERT_TRUE(RankSamples(order, 0, options, &samples).ok());
    delivered.insert(samples.begin(), samples.begin() + 12);  // mid-batch (12 % 5 != 0)
  }
  options.world_size = 6;
  for (uint32_t rank = 0; rank < 6; ++rank) {
    options.rank = rank;
    std::vector<uint64_t> samples;
    ASSERT_TRUE(RankSamples(order, 12 * 4, options, &samples).ok());
    delivered.insert(samples.begin(), samples.end());
  }
  ASSERT_EQ(delivered.size(), 120u);
  for (uint64_t s = 0; s < 120; ++s) EXPECT_EQ(delivered.count(s), 1u);
}

TEST(SamplerTest, InvalidRanks) {
  SamplerOptions options;
  options.world_size = 2;
  options.rank = 2;
  std::vector<uint64_t> samples;
  EXPECT_TRUE(RankSamples({1, 2, 3}, 0, options, &samples).IsInvalidArgument());
  options.rank = 0;
  options.batch_size = 0;
  EXPECT_TRUE(RankSamples({1, 2, 3}, 0, options, &samples).IsInvalidArgument());
}

}  // namespace
}  // namespace gpufeed
