// Node-partitioned order: every sample once per epoch across the job, each
// node reading its own shards, a partition that stays across epochs, and
// exact resume with the same and with another node count.
#include "pipeline/node_partition.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "pipeline/sampler.h"

namespace gpufeed {
namespace {

SamplerOptions NodeOptions(uint32_t nodes, uint32_t ranks_per_node, uint32_t batch, bool drop_last,
                           uint64_t seed) {
  SamplerOptions options;
  options.shuffle = ShuffleMode::kNode;
  options.num_nodes = nodes;
  options.world_size = nodes * ranks_per_node;
  options.batch_size = batch;
  options.drop_last = drop_last;
  options.seed = seed;
  return options;
}

// Each rank's samples from position `start` of `order`.
std::vector<std::vector<uint64_t>> SplitByRank(const std::vector<uint64_t>& order, uint64_t start,
                                               SamplerOptions options) {
  std::vector<std::vector<uint64_t>> ranks(options.world_size);
  for (uint32_t rank = 0; rank < options.world_size; ++rank) {
    options.rank = rank;
    EXPECT_TRUE(RankSamples(order, start, options, &ranks[rank]).ok());
  }
  return ranks;
}

std::vector<uint64_t> ShardOf(const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> shard_of;
  for (size_t shard = 0; shard < sizes.size(); ++shard)
    shard_of.insert(shard_of.end(), sizes[shard], shard);
  return shard_of;
}

TEST(NodePartitionTest, EverySampleOncePerEpochAcrossRanks) {
  std::mt19937 generator(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> sizes(1 + generator() % 12);
    for (uint64_t& size : sizes) size = generator() % 40;
    uint64_t n = 0;
    for (uint64_t size : sizes) n += size;
    SamplerOptions options = NodeOptions(1 + generator() % 5, 1 + generator() % 4,
                                         1 + generator() % 5, generator() % 2 == 0, trial);
    std::vector<uint64_t> order = EpochOrder(sizes, options, trial % 3);
    std::map<uint64_t, uint64_t> seen;
    uint64_t per_rank = SamplesPerRank(n, options);
    for (const std::vector<uint64_t>& samples : SplitByRank(order, 0, options)) {
      ASSERT_EQ(samples.size(), per_rank) << "trial " << trial;
      for (uint64_t sample : samples) seen[sample] += 1;
    }
    uint64_t delivered = per_rank * options.world_size;
    if (options.drop_last) {
      for (auto& [sample, count] : seen) ASSERT_EQ(count, 1u) << "trial " << trial;
      ASSERT_EQ(seen.size(), delivered);
    } else {
      ASSERT_EQ(seen.size(), n) << "trial " << trial;  // every sample, padding repeats
      for (auto& [sample, count] : seen) ASSERT_LT(sample, n);
    }
  }
}

TEST(NodePartitionTest, EachNodeReadsItsOwnShards) {
  // 16 equal shards over 4 nodes x 4 ranks: every rank reads only its node's
  // 4 shards, the nodes' shards are disjoint.
  std::vector<uint64_t> sizes(16, 64);
  std::vector<uint64_t> shard_of = ShardOf(sizes);
  SamplerOptions options = NodeOptions(4, 4, 8, false, 3);
  std::vector<uint32_t> node_of = AssignShardsToNodes(sizes, 3, 4);
  std::vector<uint64_t> shards_per_node(4, 0);
  for (uint32_t node : node_of) shards_per_node[node] += 1;
  EXPECT_EQ(shards_per_node, (std::vector<uint64_t>{4, 4, 4, 4}));
  std::vector<std::vector<uint64_t>> ranks = SplitByRank(EpochOrder(sizes, options, 0), 0, options);
  for (uint32_t rank = 0; rank < 16; ++rank) {
    for (uint64_t sample : ranks[rank]) {
      ASSERT_EQ(node_of[shard_of[sample]], rank / 4) << "rank " << rank << " sample " << sample;
    }
  }
  // Unequal shards: a few samples cross nodes to balance, nothing more.
  std::mt19937 generator(2);
  std::vector<uint64_t> uneven(64);
  for (uint64_t& size : uneven) size = 50 + generator() % 21;
  std::vector<uint64_t> uneven_shard = ShardOf(uneven);
  options = NodeOptions(8, 2, 4, true, 9);
  std::vector<uint32_t> uneven_node = AssignShardsToNodes(uneven, 9, 8);
  uint64_t foreign = 0, total = 0;
  ranks = SplitByRank(EpochOrder(uneven, options, 1), 0, options);
  for (uint32_t rank = 0; rank < 16; ++rank) {
    for (uint64_t sample : ranks[rank]) {
      foreign += uneven_node[uneven_shard[sample]] != rank / 2;
      total += 1;
    }
  }
  EXPECT_LT(foreign * 100, total * 3) << foreign << " of " << total << " read on another node";
}

TEST(NodePartitionTest, PartitionStaysAcrossEpochsOrderChanges) {
  std::vector<uint64_t> sizes(12, 30);
  std::vector<uint64_t> shard_of = ShardOf(sizes);
  SamplerOptions options = NodeOptions(3, 2, 5, false, 7);
  std::vector<std::set<uint64_t>> first_epoch_shards(3);
  std::vector<uint64_t> previous;
  for (uint64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<uint64_t> order = EpochOrder(sizes, options, epoch);
    EXPECT_NE(order, previous);
    previous = order;
    std::vector<std::vector<uint64_t>> ranks = SplitByRank(order, 0, options);
    for (uint32_t rank = 0; rank < 6; ++rank) {
      std::set<uint64_t> shards;
      for (uint64_t sample : ranks[rank]) shards.insert(shard_of[sample]);
      if (epoch == 0) {
        first_epoch_shards[rank / 2].insert(shards.begin(), shards.end());
      } else {
        for (uint64_t shard : shards) EXPECT_EQ(first_epoch_shards[rank / 2].count(shard), 1u);
      }
    }
  }
  // Another seed partitions differently; the same (seed, nodes) identically.
  EXPECT_EQ(AssignShardsToNodes(sizes, 7, 3), AssignShardsToNodes(sizes, 7, 3));
  EXPECT_NE(AssignShardsToNodes(sizes, 7, 3), AssignShardsToNodes(sizes, 8, 3));
}

// Ranks of `options` consume `steps` samples each from `start`; returns them.
std::multiset<uint64_t> Consume(const std::vector<uint64_t>& order, uint64_t start,
                                const SamplerOptions& options, uint64_t steps) {
  std::multiset<uint64_t> taken;
  for (const std::vector<uint64_t>& samples : SplitByRank(order, start, options)) {
    taken.insert(samples.begin(), samples.begin() + std::min<uint64_t>(steps, samples.size()));
  }
  return taken;
}

TEST(NodePartitionTest, ResumeWithTheSameAndAnotherNodeCount) {
  std::vector<uint64_t> sizes(16, 64);  // 1024 samples
  std::vector<uint64_t> shard_of = ShardOf(sizes);
  const uint64_t seed = 5, epoch = 2;
  SamplerOptions four = NodeOptions(4, 4, 8, false, seed);  // 16 ranks
  std::vector<uint64_t> order = EpochOrder(sizes, four, epoch);
  // Same split: the order is rebuilt identically (no earlier splits).
  std::vector<uint64_t> rebuilt;
  ASSERT_TRUE(EpochOrderAfter(sizes, four, epoch, {}, &rebuilt).ok());
  EXPECT_EQ(rebuilt, order);

  // 4 x 4 consumed 24 samples a rank, then 2 nodes x 4 ranks take over.
  std::multiset<uint64_t> delivered = Consume(order, 0, four, 24);
  uint64_t consumed = 24 * 16;
  SamplerOptions two = NodeOptions(2, 4, 8, false, seed);
  std::vector<NodeSplitSegment> history = {{consumed, NodeSplitOf(four)}};
  std::vector<uint64_t> resumed;
  ASSERT_TRUE(EpochOrderAfter(sizes, two, epoch, history, &resumed).ok());
  ASSERT_TRUE(std::equal(order.begin(), order.begin() + consumed, resumed.begin()));
  // The new nodes read their new partition's shards, except the few
  // samples that balance what the old partition left unevenly.
  std::vector<uint32_t> node_of = AssignShardsToNodes(sizes, seed, 2);
  std::vector<std::vector<uint64_t>> ranks = SplitByRank(resumed, consumed, two);
  uint64_t foreign = 0;
  std::vector<std::set<uint64_t>> foreign_shards(2);
  for (uint32_t rank = 0; rank < 8; ++rank) {
    for (uint64_t sample : ranks[rank]) {
      if (node_of[shard_of[sample]] == rank / 4) continue;
      foreign += 1;
      foreign_shards[rank / 4].insert(shard_of[sample]);
    }
  }
  // What moves comes from the giving node's last shards of the epoch: a
  // node cache fetches one or two shards of another node, not all of them.
  EXPECT_LE(foreign_shards[0].size() + foreign_shards[1].size(), 2u);
  std::vector<uint64_t> left(2, 0);
  for (uint64_t position = consumed; position < order.size(); ++position) {
    left[node_of[shard_of[order[position]]]] += 1;
  }
  EXPECT_EQ(foreign, std::max(left[0], left[1]) - (1024 - consumed) / 2);
  // Then 3 nodes x 2 ranks take over after 10 more samples a rank.
  std::multiset<uint64_t> second = Consume(resumed, consumed, two, 10);
  delivered.insert(second.begin(), second.end());
  uint64_t consumed_again = consumed + 10 * 8;
  history.push_back({consumed_again, NodeSplitOf(two)});
  SamplerOptions three = NodeOptions(3, 2, 8, false, seed);
  std::vector<uint64_t> third_order;
  ASSERT_TRUE(EpochOrderAfter(sizes, three, epoch, history, &third_order).ok());
  ASSERT_TRUE(std::equal(resumed.begin(), resumed.begin() + consumed_again, third_order.begin()));
  std::multiset<uint64_t> rest = Consume(third_order, consumed_again, three, UINT64_MAX);
  delivered.insert(rest.begin(), rest.end());
  // Every sample; repeats only from the last segment's padding (560 left
  // over 6 ranks: 94 each, 4 padded).
  for (uint64_t sample = 0; sample < 1024; ++sample) {
    ASSERT_GE(delivered.count(sample), 1u) << sample;
  }
  EXPECT_EQ(delivered.size(), 1024u + 4u);
}

TEST(NodePartitionTest, BadSplitsAreRefused) {
  std::vector<uint64_t> order;
  NodeSplit split;
  split.num_nodes = 3;
  split.world_size = 8;
  EXPECT_TRUE(NodeEpochOrder({10}, 0, 0, {}, split, &order).IsInvalidArgument());
  split.num_nodes = 0;
  EXPECT_TRUE(NodeEpochOrder({10}, 0, 0, {}, split, &order).IsInvalidArgument());
  split.num_nodes = 2;
  split.world_size = 2;
  NodeSplit earlier = split;
  EXPECT_TRUE(NodeEpochOrder({10}, 0, 0, {{11, earlier}}, split, &order).IsInvalidArgument());
  EXPECT_TRUE(NodeEpochOrder({10}, 0, 0, {{4, earlier}}, split, &order).ok());
  EXPECT_EQ(order.size(), 10u);
}

}  // namespace
}  // namespace gpufeed
