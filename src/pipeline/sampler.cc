#include "pipeline/sampler.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "pipeline/node_partition.h"

namespace gpufeed {

void ShuffleRange(uint64_t* begin, uint64_t* end, SampleRng* rng) {
  uint64_t length = static_cast<uint64_t>(end - begin);
  for (uint64_t i = length; i > 1; --i) {
    uint64_t j = rng->Bounded(i);
    std::swap(begin[i - 1], begin[j]);
  }
}

namespace {
void Shuffle(std::vector<uint64_t>::iterator begin, std::vector<uint64_t>::iterator end,
             SampleRng* rng) {
  if (begin != end) ShuffleRange(&*begin, &*begin + (end - begin), rng);
}
}  // namespace

NodeSplit NodeSplitOf(const SamplerOptions& options) {
  NodeSplit split;
  split.num_nodes = options.num_nodes;
  split.world_size = options.world_size;
  split.batch_size = options.batch_size;
  split.drop_last = options.drop_last;
  return split;
}

Status EpochOrderAfter(const std::vector<uint64_t>& shard_sizes, const SamplerOptions& options,
                       uint64_t epoch, const std::vector<NodeSplitSegment>& earlier,
                       std::vector<uint64_t>* order) {
  if (options.shuffle != ShuffleMode::kNode) {
    *order = EpochOrder(shard_sizes, options, epoch);
    return Status::OK();
  }
  return NodeEpochOrder(shard_sizes, options.seed, epoch, earlier, NodeSplitOf(options), order);
}

std::vector<uint64_t> EpochOrder(const std::vector<uint64_t>& shard_sizes,
                                 const SamplerOptions& options, uint64_t epoch) {
  uint64_t total = std::accumulate(shard_sizes.begin(), shard_sizes.end(), uint64_t{0});
  std::vector<uint64_t> order;
  order.reserve(total);
  if (options.shuffle == ShuffleMode::kNode) {
    // A malformed split yields an empty order; Loader::Open refuses it first.
    (void)NodeEpochOrder(shard_sizes, options.seed, epoch, {}, NodeSplitOf(options), &order);
    return order;
  }
  SampleRng rng(options.seed, epoch);
  if (options.shuffle == ShuffleMode::kBlock && shard_sizes.size() > 0) {
    std::vector<uint64_t> first(shard_sizes.size());
    std::exclusive_scan(shard_sizes.begin(), shard_sizes.end(), first.begin(), uint64_t{0});
    std::vector<uint64_t> shards(shard_sizes.size());
    std::iota(shards.begin(), shards.end(), uint64_t{0});
    Shuffle(shards.begin(), shards.end(), &rng);
    uint64_t window = std::max<uint32_t>(1, options.window_shards);
    order.resize(total);
    auto end = order.begin();
    for (size_t begin = 0; begin < shards.size(); begin += window) {
      const auto window_start = end;
      for (size_t k = begin; k < std::min<size_t>(shards.size(), begin + window); ++k) {
        std::iota(end, end + static_cast<ptrdiff_t>(shard_sizes[shards[k]]), first[shards[k]]);
        end += static_cast<ptrdiff_t>(shard_sizes[shards[k]]);
      }
      Shuffle(window_start, end, &rng);
    }
    return order;
  }
  order.resize(total);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (options.shuffle == ShuffleMode::kGlobal) Shuffle(order.begin(), order.end(), &rng);
  return order;
}

uint64_t SamplesPerRank(uint64_t remaining, const SamplerOptions& options) {
  uint64_t world = std::max<uint32_t>(1, options.world_size);
  if (options.drop_last) {
    uint64_t per_rank = remaining / world;
    uint64_t batch = std::max<uint32_t>(1, options.batch_size);
    return per_rank / batch * batch;
  }
  return (remaining + world - 1) / world;
}

Status RankSamples(const std::vector<uint64_t>& epoch_order, uint64_t start,
                   const SamplerOptions& options, std::vector<uint64_t>* samples) {
  if (options.world_size == 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is not below world_size " +
                                   std::to_string(options.world_size));
  }
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  samples->clear();
  uint64_t size = epoch_order.size();
  if (start >= size) return Status::OK();
  uint64_t remaining = size - start;
  uint64_t per_rank = SamplesPerRank(remaining, options);
  samples->resize(per_rank);
  uint64_t position = options.rank;
  for (uint64_t j = 0; j < per_rank; ++j, position += options.world_size) {
    // Padding wraps around the remaining positions, as DistributedSampler
    // (a division only for the padding: this runs for every sample).
    (*samples)[j] = epoch_order[start + (position < remaining ? position : position % remaining)];
  }
  return Status::OK();
}

SamplerOptions SamplerOptionsFor(const LoaderOptions& options) {
  SamplerOptions sampler;
  sampler.shuffle = options.shuffle;
  sampler.seed = options.seed;
  sampler.window_shards = options.shuffle_window_shards;
  sampler.rank = options.rank;
  sampler.world_size = options.world_size;
  sampler.num_nodes = options.num_nodes;
  sampler.batch_size = options.batch_size;
  sampler.drop_last = options.drop_last;
  return sampler;
}

}  // namespace gpufeed
