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
#include "pipeline/sampler.h"
#include "util/logging.h"

namespace gpufeed {

// The stage that limits throughput, from the figures in *stats.
static void SetVerdict(LoaderStats* stats) {
  std::string io;
  if (!stats->io_backend.empty()) {
    char line[160];
    std::snprintf(line, sizeof(line), "; read engine %s: %llu reads, %.1f in flight on average",
                  stats->io_backend.c_str(), static_cast<unsigned long long>(stats->io_requests),
                  stats->io_mean_inflight);
    io = line;
  }
  double capacity = std::max(1e-9, stats->elapsed_seconds * std::max(1, stats->threads));
  double read_share = stats->read_seconds / capacity;
  double decode_share = stats->decode_seconds / capacity;
  double elapsed = std::max(1e-9, stats->elapsed_seconds);
  double wait_share = stats->consumer_wait_seconds / elapsed;
  double copy_share = stats->device_copy_seconds / elapsed;
  char text[512];
  if (stats->batches == 0) {
    stats->verdict = "no batches delivered yet";
  } else if (wait_share < 0.05) {
    std::snprintf(text, sizeof(text),
                  "consumer-bound: Next() waited %.0f%% of the time, workers %.0f%% busy "
                  "(read %.0f%%, decode %.0f%%); the loader keeps up, the training step sets "
                  "the pace",
                  100 * wait_share, 100 * (read_share + decode_share), 100 * read_share,
                  100 * decode_share);
    stats->verdict = text;
    if (!stats->device.empty()) {
      std::snprintf(text, sizeof(text), "; copy stream %.0f%% busy", 100 * copy_share);
      stats->verdict += text;
    }
  } else if (!stats->device.empty() && copy_share > 0.8 &&
             copy_share > std::max(read_share, decode_share)) {
    std::snprintf(text, sizeof(text),
                  "copy-bound: the host-to-device copy stream was busy %.0f%% of the time, the "
                  "consumer waited %.0f%%; ship uint8 and normalize on the GPU "
                  "(normalize_on_device), lower the output size, or check the PCIe link and "
                  "that the process runs on the GPU's NUMA node",
                  100 * copy_share, 100 * wait_share);
    stats->verdict = text;
  } else if (read_share > decode_share) {
    std::snprintf(text, sizeof(text),
                  "read-bound: workers spent %.0f%% of their time reading and %.0f%% "
                  "decoding, the consumer waited %.0f%%; pack small files into shards, cache "
                  "them on local NVMe, or raise the read engine's queue depth for a parallel "
                  "filesystem",
                  100 * read_share, 100 * decode_share, 100 * wait_share);
    stats->verdict = text + io;
  } else {
    std::snprintf(text, sizeof(text),
                  "decode-bound: decode threads %.0f%% busy (reading %.0f%%), the consumer "
                  "waited %.0f%%; add decode threads, or output uint8 and normalize on the "
                  "GPU, or lower the output size",
                  100 * decode_share, 100 * read_share, 100 * wait_share);
    stats->verdict = text;
  }
}

class Loader::Impl {
 public:
  Impl(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options)
      : dataset(std::move(dataset)), options(options) {}

  // The one place where cursors and LoaderStates meet.
  LoaderState StateAt(const BatchCursor& cursor) const {
    LoaderState state;
    state.seed = options.seed;
    state.shuffle = options.shuffle;
    state.shuffle_window_shards = options.shuffle_window_shards;
    state.epoch = cursor.epoch;
    state.consumed = cursor.consumed;
    return state;
  }
  Status CursorFor(const LoaderState& state, BatchCursor* cursor) const {
    if (state.seed != options.seed || state.shuffle != options.shuffle ||
        state.shuffle_window_shards != options.shuffle_window_shards) {
      return Status::InvalidArgument("the state was saved with other seed or shuffle settings");
    }
    *cursor = BatchCursor{state.epoch, state.consumed};
    return Status::OK();
  }

  const std::shared_ptr<const Dataset> dataset;
  const LoaderOptions options;  // as the caller gave them
  HostStage* host = nullptr;    // the chain's first stage (owned by it)
  std::unique_ptr<BatchSource> chain;
};

namespace {

// The stages' figures as the caller sees them, with the verdict.
LoaderStats ToLoaderStats(const StageStats& s) {
  LoaderStats stats;
  stats.batches = s.batches;
  stats.samples = s.samples;
  stats.bytes_read = s.bytes_read;
  stats.skipped = s.skipped;
  stats.threads = s.threads;
  stats.elapsed_seconds = s.elapsed_seconds;
  stats.read_seconds = s.read_seconds;
  stats.decode_seconds = s.decode_seconds;
  stats.blocked_seconds = s.blocked_seconds;
  stats.consumer_wait_seconds = s.consumer_wait_seconds;
  stats.mean_ready_batches = s.mean_ready_batches;
  stats.io_backend = s.io_backend;
  stats.io_requests = s.io_requests;
  stats.io_mean_inflight = s.io_mean_inflight;
  stats.device = s.device;
  stats.device_batches = s.device_batches;
  stats.device_bytes = s.device_bytes;
  stats.device_copy_seconds = s.device_copy_seconds;
  stats.device_wait_buffer_seconds = s.device_wait_buffer_seconds;
  SetVerdict(&stats);
  return stats;
}

Status ValidateOptions(const LoaderOptions& o) {
  if (o.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  if (o.world_size == 0 || o.rank >= o.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not below world_size " +
                                   std::to_string(o.world_size));
  }
  if (o.prefetch < 1 || o.prefetch > 8) {
    return Status::InvalidArgument("prefetch must be between 1 and 8, got " +
                                   std::to_string(o.prefetch));
  }
  if (o.label_count < 1) return Status::InvalidArgument("label_count must be at least 1");
  if (o.transform == TransformKind::kRaw && o.raw.length <= 0) {
    return Status::InvalidArgument("a raw transform needs a positive length");
  }
  if (o.transform == TransformKind::kImage && (o.image.size <= 0 || o.image.size > 8192)) {
    return Status::InvalidArgument("image size must be between 1 and 8192");
  }
  return Status::OK();
}

Status InheritedByFork(int owner) {
  return Status::InvalidArgument(
      "this Loader was created in process " + std::to_string(owner) +
      " and inherited by fork: its threads do not exist in this process; create a new Loader "
      "here (the parent's keeps working)");
}

}  // namespace

std::string LoaderStats::ToString() const {
  std::ostringstream out;
  out << "batches " << batches << ", samples " << samples << ", " << bytes_read / 1e6
      << " MB read, " << skipped << " skipped, " << threads << " threads, " << elapsed_seconds
      << " s\n"
      << "  read " << read_seconds << " s, decode " << decode_seconds << " s, workers blocked (window full) "
      << blocked_seconds << " s, consumer waited " << consumer_wait_seconds
      << " s, ready batches at Next() " << mean_ready_batches << "\n"
      << (io_backend.empty() ? std::string()
                             : "  read engine " + io_backend + ": " + std::to_string(io_requests) +
                                   " reads, " + std::to_string(io_mean_inflight) +
                                   " in flight on average\n")
      << "  verdict: " << verdict;
  return out.str();
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)), owner_process_(getpid()) {}
Loader::~Loader() {
  if (getpid() != owner_process_) {
    // Inherited by fork: the threads to stop do not exist here and the
    // locks may be held by them forever. Left as it is (a deliberate leak).
    (void)impl_.release();
  }
}

Status Loader::Open(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                    std::unique_ptr<Loader>* loader) {
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
  LoaderOptions host = options;
  HostStageSetup setup;
  if ((cuda || device.pin_memory) && !options.allocator) {
    GPUFEED_RETURN_IF_ERROR(MakePinnedAllocator(device.device_id, &host.allocator));
  }
  DeviceStageOptions stage;
  if (cuda) {
    setup.extra_slots = 1;
    stage.device_id = device.device_id;
    stage.prefetch = options.prefetch;
    stage.max_held_bytes = options.max_held_bytes;
    stage.normalize = device.normalize_on_device && options.transform == TransformKind::kImage &&
                      options.image.dtype != OutputDtype::kUint8;
    if (stage.normalize) {
      // uint8 HWC crosses PCIe; the kernel writes the dtype and layout asked.
      host.image.dtype = OutputDtype::kUint8;
      host.image.layout = OutputLayout::kNHWC;
      stage.normalize_dtype = ToTensorDtype(options.image.dtype);
      stage.normalize_nchw = options.image.layout == OutputLayout::kNCHW;
      stage.normalize_table.resize(768 * DtypeSize(options.image.dtype));
      NormalizeTable(options.image, options.image.dtype, stage.normalize_table.data());
    }
  } else if (device.pin_memory) {
    setup.pinned_device = device.device_id;
  }
  setup.epoch_done = [](uint64_t epoch, const StageStats& stats) {
    Log().info("epoch {} done: {}", epoch, ToLoaderStats(stats).verdict);
  };
  auto impl = std::make_unique<Impl>(dataset, options);
  std::unique_ptr<HostStage> host_stage;
  GPUFEED_RETURN_IF_ERROR(HostStage::Create(std::move(dataset), host, std::move(setup), &host_stage));
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
  if (getpid() != owner_process_) return InheritedByFork(owner_process_);
  return impl_->chain->NextFor(batch, timeout_ms, ready);
}
void Loader::SetEpoch(uint64_t epoch) {
  if (getpid() != owner_process_) return;  // Next reports it
  (void)impl_->chain->Seek(BatchCursor{epoch, 0});
}
LoaderState Loader::State() const {
  if (getpid() != owner_process_) return LoaderState();
  return impl_->StateAt(impl_->chain->Position());
}
Status Loader::Restore(const LoaderState& state) {
  if (getpid() != owner_process_) return InheritedByFork(owner_process_);
  BatchCursor cursor;
  GPUFEED_RETURN_IF_ERROR(impl_->CursorFor(state, &cursor));
  return impl_->chain->Seek(cursor);
}
LoaderStats Loader::Stats() const {
  if (getpid() != owner_process_) return LoaderStats();
  StageStats stats;
  impl_->chain->AddStats(&stats);
  return ToLoaderStats(stats);
}
uint64_t Loader::batches_per_epoch() const {
  SamplerOptions sampler;
  sampler.world_size = impl_->options.world_size;
  sampler.batch_size = impl_->options.batch_size;
  sampler.drop_last = impl_->options.drop_last;
  uint64_t per_rank = SamplesPerRank(impl_->dataset->size(), sampler);
  return (per_rank + impl_->options.batch_size - 1) / impl_->options.batch_size;
}
uint64_t Loader::epoch() const { return impl_->host->epoch(); }

}  // namespace gpufeed
