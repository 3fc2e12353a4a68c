// Sampler: the order in which an epoch visits the samples, split across the
// ranks of a distributed job, resumable from "samples consumed".
//
// The order depends only on (seed, epoch, shuffle settings, shard sizes):
// the same on every machine, compiler and thread count. The generator is
// util/random.h's SampleRng (specified in docs/sampler.md), and
//
//   shuffle(a)    = for i = len-1 .. 1: swap(a[i], a[bounded(i + 1)])
//
// Shuffle modes:
//   kNone    samples in storage order.
//   kGlobal  one Fisher-Yates permutation of all sample ids.
//   kBlock   the shard order is shuffled, then samples are shuffled within
//            windows of `window_shards` consecutive shards of that order:
//            reads stay within a few shards at a time (spinning disks,
//            object stores, a cache smaller than the dataset).
//   kNode    shards partitioned over the nodes of the job once, a global
//            shuffle within each node's shards per epoch, interleaved so
//            that each rank gets its node's samples (node_partition.h).
//
// Distributed split (as torch's DistributedSampler): rank r of w takes
// positions r, r + w, r + 2w, ... of the epoch order (from `start`, the
// samples already consumed). Without drop_last the remaining positions are
// padded by wrapping around to a multiple of w, so every rank gets the same
// count; with drop_last the tail is dropped instead, down to whole batches.
//
// Thread safety: a Sampler is immutable after construction.
#ifndef GPUFEED_PIPELINE_SAMPLER_H_
#define GPUFEED_PIPELINE_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "gpufeed/loader.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"
#include "util/random.h"

namespace gpufeed {


struct SamplerOptions {
  ShuffleMode shuffle = ShuffleMode::kGlobal;
  uint64_t seed = 0;
  // kBlock: shards shuffled together in one window.
  uint32_t window_shards = 4;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // kNode: nodes of the job (world_size is a multiple of it).
  uint32_t num_nodes = 1;
  uint32_t batch_size = 1;
  bool drop_last = false;
};

// Fisher-Yates as specified above, on [begin, end).
void ShuffleRange(uint64_t* begin, uint64_t* end, SampleRng* rng);

// The epoch order of all samples (before the rank split). kNode: the order
// of a fresh epoch (node_partition.h; EpochOrderAfter for a resumed one).
// `shard_sizes` gives the samples per shard in storage order (kBlock uses
// it; the other modes only need the total).
std::vector<uint64_t> EpochOrder(const std::vector<uint64_t>& shard_sizes,
                                 const SamplerOptions& options, uint64_t epoch);

// The epoch order when the epoch was drawn under `earlier` splits before
// (kNode only; the other modes ignore them). InvalidArgument for a
// malformed split or history (node_partition.h).
Status EpochOrderAfter(const std::vector<uint64_t>& shard_sizes, const SamplerOptions& options,
                       uint64_t epoch, const std::vector<NodeSplitSegment>& earlier,
                       std::vector<uint64_t>* order);

// The split of kNode orders under these options.
NodeSplit NodeSplitOf(const SamplerOptions& options);

// The sampler settings of a loader's options.
SamplerOptions SamplerOptionsFor(const LoaderOptions& options);

// This rank's samples for the rest of an epoch: positions start, start + w,
// ... of the padded (or trimmed) remaining order. InvalidArgument for
// rank >= world_size, world_size 0 or batch_size 0.
Status RankSamples(const std::vector<uint64_t>& epoch_order, uint64_t start,
                   const SamplerOptions& options, std::vector<uint64_t>* samples);

// Samples each rank gets for the rest of the epoch (equal on all ranks).
uint64_t SamplesPerRank(uint64_t remaining, const SamplerOptions& options);

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_SAMPLER_H_
