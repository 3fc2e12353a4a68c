// Node-partitioned order (ShuffleMode::kNode): each node of a job reads
// (almost) only its own shards, so a node cache holds 1/num_nodes of the
// data, and the filesystem's metadata server sees each shard opened once
// per node instead of once per rank (docs/scaling.md).
//
// 1. Shards -> nodes, once per (seed, num_nodes), never per epoch (a
//    node's cache keeps its partition): the shards in a seeded order
//    (shuffle with SampleRng(seed ^ kPartitionSalt, num_nodes)), stably
//    sorted by size, largest first, each given to the node with the fewest
//    samples so far (lowest index on ties).
// 2. Per epoch, node n draws from SampleRng(SplitMix64(seed ^ kPartitionSalt)
//    + n, epoch) (kPartitionSalt = 0x6e6f64652d706172, "node-par"): its
//    shards in a shuffled order, each shard's samples shuffled, one list.
// 3. Each rank gets S = SamplesPerRank(total) samples, so node n needs
//    L * S (L = world_size / num_nodes ranks per node). A node with more
//    gives the tail of its list (the samples of its last one or two shards
//    of this epoch's order) to the nodes with fewer, in node order: a few
//    shards read by another node when shards differ in size or a resume left
//    the partition uneven. What no node needs (drop_last) is dropped, a
//    different part every epoch. Then each node's list (kept + received) is
//    shuffled, and a node still short pads by wrapping around its own list
//    (no drop_last, as DistributedSampler).
// 4. Interleaving: position j * w + n * L + l holds node n's sample
//    j * L + l. RankSamples' split (rank r takes r, r + w, ...) then hands
//    the ranks of node n only node n's samples, and each global step of w
//    positions holds L samples of every node.
//
// A resume under another split (node count, world size) keeps the positions
// already consumed from the earlier order and partitions the samples not
// yet drawn over the new nodes (each sample still once per epoch); the
// segments are recorded in the LoaderState, so any chain of such resumes
// is rebuilt exactly.
//
// Thread safety: pure functions.
#ifndef GPUFEED_PIPELINE_NODE_PARTITION_H_
#define GPUFEED_PIPELINE_NODE_PARTITION_H_

#include <cstdint>
#include <vector>

#include "gpufeed/loader.h"
#include "gpufeed/status.h"

namespace gpufeed {

// The node of each shard (in storage order) under (seed, num_nodes).
// REQUIRES: num_nodes > 0.
std::vector<uint32_t> AssignShardsToNodes(const std::vector<uint64_t>& shard_sizes, uint64_t seed,
                                          uint32_t num_nodes);

// The node-partitioned order of an epoch. `earlier` are the splits the
// epoch was drawn under before `split` (empty for a fresh epoch), with
// increasing `until`. InvalidArgument when a split is malformed (world size
// not a multiple of the node count) or an `until` lies beyond its order.
Status NodeEpochOrder(const std::vector<uint64_t>& shard_sizes, uint64_t seed, uint64_t epoch,
                      const std::vector<NodeSplitSegment>& earlier, const NodeSplit& split,
                      std::vector<uint64_t>* order);

// InvalidArgument unless num_nodes > 0 and world_size is a multiple of it.
Status CheckNodeSplit(const NodeSplit& split);

}  // namespace gpufeed

#endif  // GPUFEED_PIPELINE_NODE_PARTITION_H_
