#include "pipeline/node_partition.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "pipeline/sampler.h"
#include "util/random.h"

namespace gpufeed {

namespace {

constexpr uint64_t kPartitionSalt = 0x6e6f64652d706172ull;  // "node-par"

// Each node's samples not yet `used`: its shards in an order of this epoch,
// each shard's samples shuffled, so that what a full node gives away (or
// drop_last drops) is the tail of its list, one or two shards' worth, a
// different one every epoch. (*rngs)[node] continues the node's draws.
void NodeLists(const std::vector<uint64_t>& shard_sizes, uint64_t seed, uint64_t epoch,
               uint32_t nodes, const std::vector<bool>& used, std::vector<SampleRng>* rngs,
               std::vector<std::vector<uint64_t>>* lists) {
  std::vector<uint32_t> node_of = AssignShardsToNodes(shard_sizes, seed, nodes);
  std::vector<uint64_t> first(shard_sizes.size());
  std::exclusive_scan(shard_sizes.begin(), shard_sizes.end(), first.begin(), uint64_t{0});
  std::vector<std::vector<uint64_t>> node_shards(nodes);
  for (size_t shard = 0; shard < shard_sizes.size(); ++shard) {
    node_shards[node_of[shard]].push_back(shard);
  }
  lists->assign(nodes, {});
  for (uint32_t node = 0; node < nodes; ++node) {
    rngs->emplace_back(SplitMix64(seed ^ kPartitionSalt) + node, epoch);
    SampleRng& rng = rngs->back();
    std::vector<uint64_t>& shards = node_shards[node];
    if (!shards.empty()) ShuffleRange(shards.data(), shards.data() + shards.size(), &rng);
    std::vector<uint64_t>& list = (*lists)[node];
    for (uint64_t shard : shards) {
      size_t begin = list.size();
      for (uint64_t id = first[shard]; id < first[shard] + shard_sizes[shard]; ++id) {
        if (!used[id]) list.push_back(id);
      }
      if (list.size() > begin) ShuffleRange(list.data() + begin, list.data() + list.size(), &rng);
    }
  }
}

// Every list to `target` samples: over-full nodes give their tails,
// under-full ones take them in node order (what is left over is what
// drop_last drops); each node's list is shuffled again (what it kept and
// what it received), then a list still short wraps around itself (a node
// with no sample at all: around everything).
void BalanceNodes(uint64_t target, std::vector<SampleRng>* rngs,
                  std::vector<std::vector<uint64_t>>* lists) {
  std::vector<uint64_t> surplus;
  for (std::vector<uint64_t>& list : *lists) {
    if (list.size() > target) {
      surplus.insert(surplus.end(), list.begin() + static_cast<std::ptrdiff_t>(target), list.end());
      list.resize(target);
    }
  }
  size_t next_surplus = 0;
  for (std::vector<uint64_t>& list : *lists) {
    while (list.size() < target && next_surplus < surplus.size()) {
      list.push_back(surplus[next_surplus++]);
    }
  }
  for (size_t node = 0; node < lists->size(); ++node) {
    std::vector<uint64_t>& list = (*lists)[node];
    if (!list.empty()) ShuffleRange(list.data(), list.data() + list.size(), &(*rngs)[node]);
  }
  std::vector<uint64_t> everything;
  for (std::vector<uint64_t>& list : *lists) {
    if (list.size() < target && list.empty() && everything.empty()) {
      for (const std::vector<uint64_t>& other : *lists) {
        everything.insert(everything.end(), other.begin(), other.end());
      }
    }
    const std::vector<uint64_t>& wrap = list.empty() ? everything : list;
    const size_t own = wrap.size();
    for (size_t k = 0; list.size() < target; ++k) list.push_back(wrap[k % own]);
  }
}

// The order of the samples not yet `used` under `split`, starting at the
// position where the earlier segments ended: w * S positions, rank r's
// positions r, r + w, ... holding its node's samples.
std::vector<uint64_t> NodeTail(const std::vector<uint64_t>& shard_sizes, uint64_t seed,
                               uint64_t epoch, const NodeSplit& split,
                               const std::vector<bool>& used) {
  const uint32_t nodes = split.num_nodes;
  const uint64_t world = split.world_size;
  const uint64_t ranks_per_node = world / nodes;
  std::vector<SampleRng> rngs;
  std::vector<std::vector<uint64_t>> lists;
  NodeLists(shard_sizes, seed, epoch, nodes, used, &rngs, &lists);
  uint64_t remaining = 0;
  for (const std::vector<uint64_t>& list : lists) remaining += list.size();
  SamplerOptions per_rank;
  per_rank.world_size = split.world_size;
  per_rank.batch_size = std::max<uint32_t>(1, split.batch_size);
  per_rank.drop_last = split.drop_last;
  const uint64_t samples_per_rank = SamplesPerRank(remaining, per_rank);
  const uint64_t target = ranks_per_node * samples_per_rank;
  if (target == 0) return {};
  BalanceNodes(target, &rngs, &lists);
  std::vector<uint64_t> tail(world * samples_per_rank);
  for (uint64_t j = 0; j < samples_per_rank; ++j) {
    for (uint32_t node = 0; node < nodes; ++node) {
      for (uint64_t local = 0; local < ranks_per_node; ++local) {
        tail[j * world + node * ranks_per_node + local] = lists[node][j * ranks_per_node + local];
      }
    }
  }
  return tail;
}

}  // namespace

Status CheckNodeSplit(const NodeSplit& split) {
  if (split.num_nodes == 0) return Status::InvalidArgument("num_nodes must be positive");
  if (split.world_size == 0 || split.world_size % split.num_nodes != 0) {
    return Status::InvalidArgument(
        "shuffle=node needs a world_size that is a multiple of num_nodes (the same number of "
        "ranks on every node), got world_size " +
        std::to_string(split.world_size) + " and num_nodes " + std::to_string(split.num_nodes));
  }
  return Status::OK();
}

std::vector<uint32_t> AssignShardsToNodes(const std::vector<uint64_t>& shard_sizes, uint64_t seed,
                                          uint32_t num_nodes) {
  std::vector<uint64_t> shards(shard_sizes.size());
  std::iota(shards.begin(), shards.end(), uint64_t{0});
  SampleRng rng(seed ^ kPartitionSalt, num_nodes);
  if (!shards.empty()) ShuffleRange(shards.data(), shards.data() + shards.size(), &rng);
  std::stable_sort(shards.begin(), shards.end(),
                   [&](uint64_t a, uint64_t b) { return shard_sizes[a] > shard_sizes[b]; });
  std::vector<uint64_t> load(num_nodes, 0);
  std::vector<uint32_t> node_of(shard_sizes.size(), 0);
  for (uint64_t shard : shards) {
    uint32_t lightest =
        static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    node_of[shard] = lightest;
    load[lightest] += shard_sizes[shard];
  }
  return node_of;
}

Status NodeEpochOrder(const std::vector<uint64_t>& shard_sizes, uint64_t seed, uint64_t epoch,
                      const std::vector<NodeSplitSegment>& earlier, const NodeSplit& split,
                      std::vector<uint64_t>* order) {
  order->clear();
  GPUFEED_RETURN_IF_ERROR(CheckNodeSplit(split));
  for (const NodeSplitSegment& segment : earlier) {
    GPUFEED_RETURN_IF_ERROR(CheckNodeSplit(segment.split));
  }
  const uint64_t total = std::accumulate(shard_sizes.begin(), shard_sizes.end(), uint64_t{0});
  std::vector<bool> used(total, false);
  for (const NodeSplitSegment& segment : earlier) {
    std::vector<uint64_t> tail = NodeTail(shard_sizes, seed, epoch, segment.split, used);
    if (segment.until < order->size() || segment.until - order->size() > tail.size()) {
      return Status::InvalidArgument(
          "the state's earlier node splits do not fit this dataset: a segment ends at position " +
          std::to_string(segment.until) + ", outside [" + std::to_string(order->size()) + ", " +
          std::to_string(order->size() + tail.size()) + "]");
    }
    tail.resize(segment.until - order->size());
    for (uint64_t id : tail) used[id] = true;
    order->insert(order->end(), tail.begin(), tail.end());
  }
  std::vector<uint64_t> tail = NodeTail(shard_sizes, seed, epoch, split, used);
  order->insert(order->end(), tail.begin(), tail.end());
  return Status::OK();
}

}  // namespace gpufeed
