// The C++ Loader: assembles the chain of stages and is the only place that
// knows all of them (docs/architecture.md):
//
//   HostStage (sampler -> read + decode pool -> ordered host batches)
//     -> [CUDA copy stage, device=cuda]  -> Next()
//
// Both are BatchSources; the Loader validates the options, chooses pinned
// memory and the device stage's settings, turns cursors into LoaderStates
// and the stages' figures into LoaderStats (with the verdict).
#include "gpufeed/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "batch/batch_source.h"
#include "decode/transform.h"
#include "device/device_stage.h"
#include "device/pinned_host.h"
#include "pipeline/host_stage.h"
#include "pipeline/loader_factory.h"
#include "pipeline/node_partition.h"
#include "pipeline/sampler.h"
#include "pipeline/stats_window.h"
#include "pipeline/verdict.h"
#include "util/logging.h"
#include "util/fork_hooks.h"
#include "util/system_stats.h"

namespace gpufeed {

class Loader::Impl {
 public:
  Impl(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
       std::shared_ptr<const SampleKind> kind)
      : dataset(std::move(dataset)), options(options), kind(std::move(kind)) {}

  // The one place where cursors and LoaderStates meet.
  LoaderState StateAt(const BatchCursor& cursor) const {
    LoaderState state;
    state.seed = options.seed;
    state.shuffle = options.shuffle;
    state.shuffle_window_shards = options.shuffle_window_shards;
    state.epoch = cursor.epoch;
    state.consumed = cursor.consumed;
    state.split = NodeSplitOf(SamplerOptionsFor(options));
    state.earlier_splits = host->EarlierSplitsAt(cursor);
    state.samples = dataset->size();
    kind->DescribeState(&state);
    return state;
  }
  // *earlier: the splits the epoch was drawn under before this loader's
  // (kNode): the state's own history, plus the state's split when it differs.
  Status CursorFor(const LoaderState& state, BatchCursor* cursor,
                   std::vector<NodeSplitSegment>* earlier) const {
    if (state.seed != options.seed || state.shuffle != options.shuffle ||
        state.shuffle_window_shards != options.shuffle_window_shards) {
      return Status::InvalidArgument("the state was saved with other seed or shuffle settings");
    }
    GPUFEED_RETURN_IF_ERROR(kind->CheckState(state));
    if (state.samples != 0 && state.samples != dataset->size()) {
      return Status::InvalidArgument(
          "the state was saved over " + std::to_string(state.samples) + " samples; " +
          dataset->path() + " has " + std::to_string(dataset->size()) +
          " (another dataset, or one that changed): its positions would name other samples");
    }
    *cursor = BatchCursor{state.epoch, state.consumed};
    earlier->clear();
    if (options.shuffle == ShuffleMode::kNode && state.consumed > 0) {
      uint64_t until = 0;
      for (const NodeSplitSegment& segment : state.earlier_splits) {
        if (segment.until < until || segment.until > state.consumed) {
          return Status::InvalidArgument("the state's earlier node splits are out of order");
        }
        until = segment.until;
      }
      *earlier = state.earlier_splits;
      if (state.split != NodeSplitOf(SamplerOptionsFor(options))) {
        earlier->push_back(NodeSplitSegment{state.consumed, state.split});
      }
    }
    return Status::OK();
  }

  const std::shared_ptr<const Dataset> dataset;  // as the sample kind prepared it
  const LoaderOptions options;  // as the caller gave them
  const std::shared_ptr<const SampleKind> kind;
  HostStage* host = nullptr;    // the chain's first stage (owned by it)
  std::unique_ptr<BatchSource> chain;
  std::unique_ptr<StatsWindow> window;  // the spans of Stats()
};

namespace {

Status ValidateOptions(const LoaderOptions& o) {
  if (o.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  if (o.world_size == 0 || o.rank >= o.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not below world_size " +
                                   std::to_string(o.world_size));
  }
  if (o.shuffle == ShuffleMode::kNode) {
    GPUFEED_RETURN_IF_ERROR(CheckNodeSplit(NodeSplitOf(SamplerOptionsFor(o))));
    const uint32_t ranks_per_node = o.world_size / o.num_nodes;
    if (o.node_rank >= o.num_nodes || o.node_rank != o.rank / ranks_per_node) {
      return Status::InvalidArgument(
          "shuffle=node: rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size) +
          " belongs to node " + std::to_string(o.rank / ranks_per_node) + " of " +
          std::to_string(o.num_nodes) + " (the ranks of a node are contiguous), not node_rank " +
          std::to_string(o.node_rank));
    }
  }
  if (o.prefetch < 1 || o.prefetch > 8) {
    return Status::InvalidArgument("prefetch must be between 1 and 8, got " +
                                   std::to_string(o.prefetch));
  }
  if (o.label_count < 1) return Status::InvalidArgument("label_count must be at least 1");
  if (!(o.max_skipped >= 0)) {
    return Status::InvalidArgument("max_skipped must be a count (>= 1) or a fraction (0 to 1), "
                                   "got " + std::to_string(o.max_skipped));
  }
  return Status::OK();
}

Status LoaderInheritedByFork(int owner) {
  return InheritedByFork("this Loader", owner, "create a new Loader here");
}

}  // namespace

Status CudaDeviceStatus(int device_id) { return CudaDeviceUsable(device_id); }

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), owner_process_(CurrentProcessId()) {}
Loader::~Loader() {
  if (CurrentProcessId() != owner_process_) {
    // Inherited by fork: the threads to stop do not exist here and the
    // locks may be held by them forever. Left as it is (a deliberate leak).
    (void)impl_.release();
  }
}

Status Loader::Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                    std::unique_ptr<Loader>* loader) {
  return LoaderFactory::Open(std::move(dataset), options, LoaderInternals(), loader);
}

Status LoaderFactory::Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                           const LoaderInternals& internals, std::unique_ptr<Loader>* loader) {
  if (!dataset) return Status::InvalidArgument("Loader::Open: no dataset");
  const DeviceOptions& device = options.device;
  const bool cuda = device.kind == DeviceKind::kCuda;
  if (cuda || device.pin_memory) {
    Status usable = CudaDeviceUsable(device.device_id);
    if (!usable.ok()) {
      return usable.WithContext(cuda ? "Loader::Open(device=cuda)" : "Loader::Open(pin_memory)");
    }
  }
  GPUFEED_RETURN_IF_ERROR(ValidateOptions(options));
  std::shared_ptr<SampleKind> kind;
  GPUFEED_RETURN_IF_ERROR(MakeSampleKind(options, &kind));
  if (!options.embeddings.empty() && !kind->TakesEmbeddings()) {
    return Status::InvalidArgument(
        std::string("embeddings come with tabular rows only (transform kTabular; Python: "
                    "transform=gpufeed.Tabular(...)), not with ") +
        kind->name() + " samples: their ids are the rows' sparse columns");
  }
  GPUFEED_RETURN_IF_ERROR(kind->Validate());
  LoaderOptions host = options;
  HostStageSetup setup;
  setup.kind = kind;
  setup.use_read_engine = internals.use_read_engine;
  if ((cuda || device.pin_memory) && !options.allocator) {
    GPUFEED_RETURN_IF_ERROR(MakePinnedAllocator(device.device_id, &host.allocator));
  }
  DeviceStageOptions stage;
  if (cuda) {
    setup.extra_slots = 1;
    stage.device_id = device.device_id;
    stage.prefetch = options.prefetch;
    stage.max_held_bytes = options.max_held_bytes;
    kind->ConfigureDevice(device, &host, &stage);
  } else if (device.pin_memory) {
    setup.pinned_device = device.device_id;
  }
  std::shared_ptr<const Dataset> prepared;
  GPUFEED_RETURN_IF_ERROR(kind->Prepare(std::move(dataset), &prepared));
  auto impl = std::make_unique<Loader::Impl>(prepared, options, kind);
  impl->window = std::make_unique<StatsWindow>(prepared->path(), options.stats_window_seconds);
  std::unique_ptr<HostStage> host_stage;
  GPUFEED_RETURN_IF_ERROR(HostStage::Create(std::move(prepared), host, std::move(setup), &host_stage));
  impl->host = host_stage.get();
  impl->chain = std::move(host_stage);
  if (cuda) {
    stage.max_data_bytes = impl->host->data_bytes();
    stage.max_label_bytes = impl->host->label_bytes();
    GPUFEED_RETURN_IF_ERROR(CreateDeviceStage(std::move(impl->chain), stage, &impl->chain));
  }
  loader->reset(new Loader(std::move(impl)));
  return Status::OK();
}

Status Loader::Next(Batch* batch) {
  bool ready = false;
  return NextFor(batch, -1, &ready);
}
Status Loader::NextFor(Batch* batch, int timeout_ms, bool* ready) {
  *ready = true;
  if (CurrentProcessId() != owner_process_) return LoaderInheritedByFork(owner_process_);
  impl_->window->BeforeNext(*impl_->chain);
  Status status = impl_->chain->NextFor(batch, timeout_ms, ready);
  LoaderStats epoch;
  if (impl_->window->AfterNext(*impl_->chain, *ready && status.ok() && batch->end_of_epoch(),
                               &epoch)) {
    Log().info("epoch {} done: {}", batch->epoch(), epoch.verdict);
  }
  return status;
}
Status Loader::SetEpoch(uint64_t epoch) {
  if (CurrentProcessId() != owner_process_) return LoaderInheritedByFork(owner_process_);
  impl_->window->RestartEpoch();
  return impl_->chain->Seek(BatchCursor{epoch, 0});
}
LoaderState Loader::State() const {
  if (CurrentProcessId() != owner_process_) return LoaderState();
  return impl_->StateAt(impl_->chain->Position());
}
Status Loader::Restore(const LoaderState& state) {
  if (CurrentProcessId() != owner_process_) return LoaderInheritedByFork(owner_process_);
  BatchCursor cursor;
  std::vector<NodeSplitSegment> earlier;
  GPUFEED_RETURN_IF_ERROR(impl_->CursorFor(state, &cursor, &earlier));
  GPUFEED_RETURN_IF_ERROR(impl_->host->SetEarlierSplits(cursor.epoch, std::move(earlier)));
  impl_->window->RestartEpoch();
  return impl_->chain->Seek(cursor);
}
LoaderStats Loader::Stats(StatsSpan span) const {
  if (CurrentProcessId() != owner_process_) return LoaderStats();
  LoaderStats stats = impl_->window->Stats(*impl_->chain, span);
  StorageStats storage = impl_->dataset->storage_stats();
  stats.source_opens = storage.source_opens;
  stats.source_stats = storage.source_stats;
  stats.source_bytes = storage.source_bytes;
  stats.cache_reads = storage.cache_reads;
  stats.open_files = storage.open_files;
  return stats;
}
uint64_t Loader::batches_per_epoch() const {
  SamplerOptions sampler = SamplerOptionsFor(impl_->options);
  uint64_t per_rank = SamplesPerRank(impl_->dataset->size(), sampler);
  return (per_rank + impl_->options.batch_size - 1) / impl_->options.batch_size;
}
uint64_t Loader::epoch() const { return impl_->host->epoch(); }
std::vector<SkippedSample> Loader::SkippedSamples() const {
  if (CurrentProcessId() != owner_process_) return {};
  return impl_->host->SkippedSamples();
}

}  // namespace gpufeed
