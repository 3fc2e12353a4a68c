// Loader: the pipeline in C++. Samples in sampler order are read, decoded
// and transformed by a pool of threads, each writing its sample straight
// into its slot of a batch buffer; whole batches come out of Next() in
// order, up to `prefetch` ahead of the consumer.
//
//   std::shared_ptr<gpufeed::Dataset> dataset = ...;   // Dataset::Open
//   gpufeed::LoaderOptions options;
//   options.batch_size = 256;
//   std::unique_ptr<gpufeed::Loader> loader;
//   GPUFEED_RETURN_IF_ERROR(gpufeed::Loader::Open(dataset, options, &loader));
//   for (int epoch = 0; epoch < 90; ++epoch) {
//     loader->SetEpoch(epoch);
//     gpufeed::Batch batch;
//     while (true) {
//       GPUFEED_RETURN_IF_ERROR(loader->Next(&batch));
//       if (batch.end_of_epoch()) break;
//       train(batch.data(), batch.labels());
//     }
//   }
//
// Thread safety: Next, SetEpoch, State and Restore are called by one
// consumer thread; Stats may be called from any thread. The destructor
// stops every thread promptly (mid-epoch, with full queues).
//
// Batches the consumer keeps stay valid as long as they live (see
// LoaderOptions::max_held_bytes): holding many costs memory, never
// correctness. fork(): a Loader inherited by a child process has no threads
// there; its Next and Restore return InvalidArgument at once (never hang),
// SetEpoch, State and Stats do nothing, and its destructor leaves it as it is
// (no joins, no locks). Create a new Loader in the child; the parent's keeps
// working.
#ifndef GPUFEED_LOADER_H_
#define GPUFEED_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/embedding.h"
#include "gpufeed/export.h"
#include "gpufeed/options.h"
#include "gpufeed/status.h"

namespace gpufeed {

enum class OnError : int {
  kRaise = 0,  // Next() returns the error (file, offset, sample) of the batch it hits
  kSkip = 1,   // the sample is left out: its batch is delivered with its rows removed (a
               // batch whose every sample failed comes with 0 rows, so every rank still
               // steps through the same number of batches); no sample is delivered twice.
               // Listed by Loader::SkippedSamples, counted in Stats, logged (rate-limited),
               // bounded by LoaderOptions::max_skipped.
};

// A sample left out in on_error=kSkip mode (Loader::SkippedSamples).
struct GPUFEED_EXPORT SkippedSample {
  uint64_t sample = 0;
  // Where its record lies: the file and byte offset the format knows;
  // the shard's path ("" when unknown) and UINT64_MAX when it knows no range.
  std::string path;
  uint64_t offset = UINT64_MAX;
  std::string reason;  // the failure's Status::ToString()
};

// kTokenWindows: token corpora only (LoaderOptions::tokens). kTabular:
// tabular (CTR) datasets only (LoaderOptions::tabular).
enum class TransformKind : int { kImage = 0, kRaw = 1, kTokenWindows = 2, kTabular = 3 };

// Where batches are delivered (stage 3 of the pipeline, docs/architecture.md).
struct DeviceOptions {
  // kCpu: host batches. kCuda: host batch buffers are pinned (allocated once
  // at Open), each batch is copied with cudaMemcpyAsync on a dedicated
  // non-blocking stream into a device buffer, and Next hands out device
  // batches while the next ones are in flight (Batch::WaitOn). Open fails
  // with NotSupported when gpufeed was built without CUDA or no device is
  // usable.
  DeviceKind kind = DeviceKind::kCpu;
  int device_id = 0;
  // Float image output on CUDA: the decode threads produce uint8 HWC, which
  // crosses PCIe (4x fewer bytes than float32) and is normalized into the
  // requested dtype and layout by a kernel on the copy stream, with the same
  // arithmetic as the CPU path. false: the CPU normalizes, floats are copied.
  bool normalize_on_device = true;
  // kCpu: host batch buffers in pinned memory (for the consumer's own
  // non-blocking copies, like torch's pin_memory=True). Needs CUDA.
  bool pin_memory = false;
};

// A table whose rows come with each batch (LoaderOptions::embeddings): row
// sparse[:, column] of `table` for every sample, the ids as the tabular
// transform leaves them (after hash_sizes).
struct EmbeddingLookup {
  uint32_t column = 0;
  std::shared_ptr<EmbeddingTable> table;
};

struct LoaderOptions {
  uint32_t batch_size = 32;
  ShuffleMode shuffle = ShuffleMode::kGlobal;
  uint64_t seed = 0;
  // kBlock: shards shuffled together (more: better mixing, more open shards).
  uint32_t shuffle_window_shards = 4;
  // false: the last batch of an epoch may be short, and ranks are padded by
  // wrapping around (every rank gets the same number of batches).
  bool drop_last = false;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // kNode: the nodes of the job and this process's node. The ranks of a
  // node are contiguous (rank = node_rank * world_size / num_nodes +
  // local rank, as torchrun and Slurm assign them), so world_size must be a
  // multiple of num_nodes and node_rank == rank / (world_size / num_nodes);
  // Open refuses anything else. Ignored by the other shuffle modes.
  uint32_t num_nodes = 1;
  uint32_t node_rank = 0;
  // Decode threads; 0: the cores this process may use.
  int num_threads = 0;
  // Batches prepared ahead of the consumer (1..8). Deeper only costs
  // memory: it absorbs bursts, not a slower stage.
  int prefetch = 2;
  // The span of Stats(StatsSpan::kRecent), seconds.
  double stats_window_seconds = 10;
  TransformKind transform = TransformKind::kImage;
  ImageTransformOptions image;
  RawTransformOptions raw;
  // kTokenWindows: the dataset must be a token corpus; its windows are cut
  // at tokens.seq_len whatever seq_len it was opened with.
  TokenWindowOptions tokens;
  // kTabular: what a row becomes (dense, sparse, label).
  TabularTransformOptions tabular;
  // kTabular: embedding rows delivered with the batch. Lookup i adds
  // Batch::extras()[1 + i], (B, table->dim()) of table->dtype(), equal to
  // table->Lookup(ids of its column) for the batch's rows: the decode
  // threads look the rows up after converting them, ahead of the consumer,
  // and the rows travel in the batch's buffer (one copy to the GPU with
  // device kCuda). An id the table has not (>= rows(), or negative) fails
  // its sample (OutOfRange naming the sample, the id and the table; skipped
  // with on_error kSkip), so give hash_sizes no larger than the tables.
  // The loader shares the tables; their time is LoaderStats::lookup_seconds.
  // InvalidArgument at Open for another transform, a null table, a column
  // not below the dataset's sparse count, or more than 7 lookups.
  std::vector<EmbeddingLookup> embeddings;
  // Labels per sample in the label tensor: 1 gives shape (B,), more give
  // (B, label_count). A record with another number of labels fails naming
  // it (with label_count 1, a record with several is refused too: nothing is
  // dropped silently), unless label_lengths is set.
  int label_count = 1;
  // Variable-length labels (MXNet detection .rec files: IRHeader flag = the
  // record's label count): labels are (B, label_count) float32, each row
  // the record's labels then label_pad, and Batch::label_lengths() gives the
  // counts. A record with more than label_count labels fails naming it.
  bool label_lengths = false;
  float label_pad = -1.0f;
  // kAuto: int64 for class-index datasets, float32 otherwise. kInt64 fails
  // (InvalidArgument naming the sample) on a label that is not integral.
  enum class LabelType : int { kAuto = 0, kInt64 = 1, kFloat32 = 2 };
  LabelType label_type = LabelType::kAuto;
  OnError on_error = OnError::kRaise;
  // on_error=kSkip: the most samples an epoch may skip on this rank; < 1 a
  // fraction of the rank's samples in the epoch, >= 1 a count. Past it, the
  // batch that crossed it (and every later one with a skip in that epoch)
  // fails with the last failure's code. Negative: InvalidArgument.
  double max_skipped = 0.01;
  // Batch buffer memory (nullptr: host memory).
  std::shared_ptr<BatchAllocator> allocator;
  // Batches the consumer keeps alive (a list of an epoch's batches, a few
  // kept for evaluation) never block and are never overwritten: when every
  // buffer is held, Next adds one, and buffers beyond the steady ring
  // (prefetch + 1) are freed as their batches are released. This bounds the
  // bytes held: past it Next fails with InvalidArgument naming the figure.
  // 0: a quarter of the machine's memory (CUDA batches: of the GPU's free
  // memory at Open).
  uint64_t max_held_bytes = 0;
  // Reads go through the read engine (io_uring, many in flight, ahead of
  // the decode threads) for formats with byte ranges (RecordIO shards,
  // LMDB values, ImageFolder files); Caffe records are read by the decode
  // threads.
  IoOptions io;
  DeviceOptions device;
};

// The stage that limits throughput (LoaderStats::bottleneck), judged from
// saturation (docs/tuning.md, "How the verdict is computed"). The values are
// stable: the Python binding exports BottleneckName of each.
enum class Bottleneck : int {
  kNone = 0,      // no batch delivered in the span: nothing to judge
  kConsumer = 1,  // Next() rarely waits: the training step sets the pace
  kRead = 2,      // the workers wait for the storage, decode is not saturated
  kDecode = 3,    // the decode threads are busy (on a CPU or waiting for one) almost all the time
  kCopy = 4,      // the host-to-device copy stream is busy (CUDA batches only)
  kCpuContention = 5,  // decode would keep up, but other processes (or the hypervisor) take the CPUs
  kLookup = 6,    // the workers are busy, embedding lookups (LoaderOptions::embeddings) the most
};

// The stretch of time Loader::Stats covers; every figure and the verdict
// are over it.
enum class StatsSpan : int {
  kSinceOpen = 0,  // since Loader::Open
  kRecent = 1,     // the last LoaderOptions::stats_window_seconds (since the first Next() when younger)
  kEpoch = 2,      // the epoch in progress since its first Next(), or the one just ended
};

// OK when gpufeed was built with CUDA and device `device_id` is usable;
// NotSupported with the reason otherwise (no driver, no device, bad id).
GPUFEED_EXPORT Status CudaDeviceStatus(int device_id);

// "none", "consumer", "read", "decode", "copy", "cpu-contention" or "lookup": a
// static string, never null ("unknown" for a value outside the enum).
GPUFEED_EXPORT const char* BottleneckName(Bottleneck bottleneck);

// Per-stage figures over a span (StatsSpan: since Open, the recent window,
// the epoch). Seconds are summed over the threads of a stage.
struct GPUFEED_EXPORT LoaderStats {
  StatsSpan span = StatsSpan::kSinceOpen;
  uint64_t batches = 0;
  uint64_t samples = 0;
  uint64_t bytes_read = 0;
  uint64_t skipped = 0;          // samples left out in on_error=skip mode (each once)
  int threads = 0;
  double elapsed_seconds = 0;    // wall time of the span
  // Every second of the decode threads (threads x elapsed_seconds) falls in
  // one of: read_seconds, decode_seconds (= decode CPU + waiting for a CPU),
  // lookup_seconds, blocked_seconds and other_seconds.
  double read_seconds = 0;        // waiting for the bytes of a record: reading it, or locating,
                                  // submitting and waiting for the read engine's reads
  double decode_seconds = 0;      // decoding and transforming, wall time
  double decode_cpu_seconds = 0;  // ... of which on a CPU (CLOCK_THREAD_CPUTIME_ID)
  // Workers blocked on the stage downstream: the window of `prefetch` batches
  // is full because the consumer has not taken them.
  double blocked_seconds = 0;
  double other_seconds = 0;       // the rest: locks, bookkeeping, a sample in progress
  // Embedding lookups (LoaderOptions::embeddings): the wall time of the
  // workers' EmbeddingTable::Lookup calls (RAM hits, and waiting for the
  // reads of misses), not counted in read or decode; of which on a CPU; and
  // the ids looked up (rows x tables).
  double lookup_seconds = 0;
  double lookup_cpu_seconds = 0;
  uint64_t lookup_rows = 0;
  // The share of ids the tables' RAM tiers served over the span (their own
  // counters, EmbeddingStats::ram_hits / rows: lookups of the tables
  // outside this loader count too); -1 when no table was looked up.
  double lookup_ram_hit_rate = -1;
  double consumer_wait_seconds = 0;  // Next() waiting for a batch
  double mean_ready_batches = 0;     // batches ready when Next() was called
  // What the workers make of a sample: "image", "raw", "tokens" or
  // "tabular" (the verdict names the work and its remedies by it).
  std::string sample_kind;
  // The read engine, when the loader uses one ("" otherwise).
  std::string io_backend;
  uint64_t io_requests = 0;
  uint64_t io_bytes = 0;
  int io_queue_depth = 0;        // the engine's configured reads in flight
  double io_mean_inflight = 0;   // mean reads in flight while any was (time-weighted)
  double io_busy_share = 0;      // share of the span with at least one read in flight
  // The storage layer under the dataset (src/storage), since the dataset
  // was opened (whatever the span): source files opened and stat'ed (the
  // metadata server's load), bytes read from the source (reads and
  // node-cache fills), reads served from node-cache copies, and source
  // descriptors held now.
  uint64_t source_opens = 0;
  uint64_t source_stats = 0;
  uint64_t source_bytes = 0;
  uint64_t cache_reads = 0;
  uint64_t open_files = 0;
  // The machine over the span (0 / "" where it cannot be read; the span
  // kSinceOpen and the recent and epoch spans all have them).
  int cores = 0;                    // CPUs this process may use
  double process_cpu_cores = 0;     // CPUs the whole process kept busy, on average
  double external_cpu_cores = 0;    // CPUs other processes kept busy
  double steal_share = 0;           // machine CPU time stolen by the hypervisor
  std::string disk;                 // the block device under the dataset ("" unknown)
  std::string disk_note;            // why it is unknown
  double disk_util = -1;            // share of the span it had I/O in progress; -1 unknown
  double disk_read_bytes_per_second = 0;
  // The device stage (CUDA batches only): batches and bytes copied to the
  // GPU, the copy stream's busy time (copies and normalize kernels, timed
  // with CUDA events), and the copy thread waiting for a free device buffer
  // (every buffer held by the consumer or not yet passed by its streams).
  std::string device;  // "" for host batches, else "cuda:<id>"
  uint64_t device_batches = 0;
  uint64_t device_bytes = 0;
  double device_copy_seconds = 0;
  double device_wait_buffer_seconds = 0;
  // The judgement, computed from the figures above (src/pipeline/verdict.h).
  // The shares of the workers' time (threads x elapsed_seconds) sum to 1:
  // read, decode (= decode_cpu + cpu_wait), lookup, blocked, other.
  // consumer_wait_share and copy_share are of elapsed_seconds. A worker's
  // time is added when its sample is done, so a share can pass 1 by a hair.
  Bottleneck bottleneck = Bottleneck::kNone;
  double read_share = 0;
  double decode_share = 0;
  double decode_cpu_share = 0;
  double cpu_wait_share = 0;
  double lookup_share = 0;
  double blocked_share = 0;
  double other_share = 0;
  double consumer_wait_share = 0;
  double copy_share = 0;
  // What the advice would bring: the estimated throughput gain (0.4: +40%)
  // of the change the verdict recommends, 0 when it names none.
  double expected_gain = 0;
  // The same judgement as a sentence for people: the bottleneck, the
  // evidence and quantified advice. Derived from the fields above; programs
  // read `bottleneck` and the shares.
  std::string verdict;
  std::string ToString() const;
};

// How a node-partitioned (kNode) order splits an epoch: the order depends
// on it (the interleaving of the nodes, the samples each rank gets).
struct NodeSplit {
  uint32_t num_nodes = 1;
  uint32_t world_size = 1;
  uint32_t batch_size = 1;  // matters with drop_last only
  bool drop_last = false;
  bool operator==(const NodeSplit& other) const {
    return num_nodes == other.num_nodes && world_size == other.world_size &&
           drop_last == other.drop_last && (!drop_last || batch_size == other.batch_size);
  }
  bool operator!=(const NodeSplit& other) const { return !(*this == other); }
};

// Positions [previous segment's `until`, `until`) of an epoch were drawn
// from the order of `split`: what a resume with another split leaves behind.
struct NodeSplitSegment {
  uint64_t until = 0;
  NodeSplit split;
};

// Where a loader stands in its epochs (see Loader::State).
struct LoaderState {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  // Positions of the epoch order consumed by all ranks together.
  uint64_t consumed = 0;
  ShuffleMode shuffle = ShuffleMode::kGlobal;
  uint32_t shuffle_window_shards = 4;
  // kNode only. `split`: the split of the loader that saved the state.
  // `earlier_splits`: the splits this epoch was drawn under before (empty
  // unless the epoch was resumed with another node count or world size):
  // Restore rebuilds the same order from them, and a restore under another
  // split re-partitions the positions not yet consumed.
  NodeSplit split;
  std::vector<NodeSplitSegment> earlier_splits;
  // What the positions count, checked by Restore (0: not recorded, as in
  // states saved before these fields; then unchecked): the dataset's
  // samples, and for token windows the window length and the block size
  // (both change which tokens a position names).
  uint64_t samples = 0;
  uint32_t seq_len = 0;
  uint32_t token_block_bytes = 0;
};

class GPUFEED_EXPORT Loader {
 public:
  // The loader shares ownership of the dataset. InvalidArgument for bad
  // options (batch_size 0, rank >= world_size, prefetch outside 1..8, a raw
  // transform without a length).
  static Status Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                     std::unique_ptr<Loader>* loader);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of this epoch, or an empty batch with end_of_epoch()
  // true after the last one (the following Next starts the next epoch).
  // In raise mode a bad record fails the call with its Status.
  Status Next(Batch* batch);
  // Next with a deadline: *ready is false when no batch came within
  // `timeout_ms` (the call can be repeated; used to stay responsive to
  // signals in Python).
  Status NextFor(Batch* batch, int timeout_ms, bool* ready);

  // Restarts at the beginning of `epoch` (a new order from seed and epoch).
  // Fails only for a Loader inherited by fork, or when a device stage
  // cannot drain its copies.
  Status SetEpoch(uint64_t epoch);

  // {seed, epoch, samples consumed by all ranks, shuffle}: Restore continues
  // exactly there, with this loader's rank and world size (which may differ
  // from the one that saved it). Assumes the ranks advance together.
  // kNode: with the same split (num_nodes, world_size) the order goes on
  // exactly; with another split the samples not yet consumed are
  // re-partitioned over the new nodes for the rest of the epoch (every
  // sample still once), and the next epochs use the new partition.
  LoaderState State() const;
  Status Restore(const LoaderState& state);

  // The figures and the verdict over `span`. The loader samples its stages
  // and the machine at most once a second from Next(), so a span is
  // measured between such samples and now.
  LoaderStats Stats(StatsSpan span = StatsSpan::kSinceOpen) const;
  // Batches this rank gets in a full epoch.
  uint64_t batches_per_epoch() const;
  // on_error=kSkip: the samples left out of the batches delivered so far in
  // the epoch in progress, in delivery order (with device kCuda: of the host
  // batches the copy stage has taken, up to `prefetch` ahead of Next). Cleared when another epoch
  // starts (the end of one, SetEpoch, a Restore into another epoch or to
  // its start).
  std::vector<SkippedSample> SkippedSamples() const;
  uint64_t epoch() const;

  class Impl;

 private:
  friend class LoaderFactory;  // Open's internal variants (src/pipeline/loader_factory.h)
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // the chain of stages (src/pipeline/loader.cc)
  int owner_process_ = 0;                  // getpid() at Open (fork detection)
};

}  // namespace gpufeed

#endif  // GPUFEED_LOADER_H_
