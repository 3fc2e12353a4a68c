// A C++ trainer's data side: a Loader over a dataset, several epochs, the
// per-stage statistics as it runs, and a checkpoint of the LoaderState so
// that a preempted job continues exactly where it stopped (also with a
// different number of ranks).
//
// Build against an installed gpufeed (find_package(gpufeed CONFIG)):
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=$PREFIX && cmake --build build-examples
// Run:
//   build-examples/cpp_trainer /scratch/train-packed --epochs 3 --batch-size 128 \
//       --checkpoint /scratch/ckpt/loader.state [--device cuda] [--raw 64] [--stop-after 100]
//
// --stop-after N stops after N batches of this run, as a preemption would
// (the checkpoint was written after each batch's step). Run the same command
// again: it reads the checkpoint and finishes the remaining epochs. Each run
// prints "samples this run: N"; over all runs they add up to epochs x
// records (batches are not padded, drop_last is off).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "gpufeed/gpufeed.h"

namespace {

struct Arguments {
  std::string dataset;
  int epochs = 2;
  uint32_t batch_size = 64;
  int threads = 0;
  int raw_length = 0;  // > 0: raw records (first N bytes) instead of images
  bool cuda = false;
  std::string checkpoint;
  int64_t stop_after = -1;  // batches of this run, -1: no preemption
  int log_every = 50;
};

int Usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s DATASET [--epochs N] [--batch-size B] [--threads N] [--raw LENGTH]\n"
               "       [--device cpu|cuda] [--checkpoint FILE] [--stop-after BATCHES]\n"
               "       [--log-every BATCHES]\n",
               program);
  return 2;
}

bool Parse(int argc, char** argv, Arguments* args) {
  if (argc < 2 || argv[1][0] == '-') return false;
  args->dataset = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--epochs") {
      args->epochs = std::atoi(value);
    } else if (flag == "--batch-size") {
      args->batch_size = static_cast<uint32_t>(std::atoi(value));
    } else if (flag == "--threads") {
      args->threads = std::atoi(value);
    } else if (flag == "--raw") {
      args->raw_length = std::atoi(value);
    } else if (flag == "--device") {
      if (std::strcmp(value, "cuda") != 0 && std::strcmp(value, "cpu") != 0) return false;
      args->cuda = std::strcmp(value, "cuda") == 0;
    } else if (flag == "--checkpoint") {
      args->checkpoint = value;
    } else if (flag == "--stop-after") {
      args->stop_after = std::atoll(value);
    } else if (flag == "--log-every") {
      args->log_every = std::atoi(value);
    } else {
      return false;
    }
  }
  return args->epochs > 0 && args->batch_size > 0 && args->log_every > 0;
}

// The checkpoint is one text line. Written to a temporary file and renamed
// over the old one, so that a job killed while writing leaves the previous
// checkpoint intact, never half of a new one.
bool SaveState(const std::string& path, const gpufeed::LoaderState& state) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "gpufeed-loader-state 1 " << state.seed << ' ' << state.epoch << ' ' << state.consumed
        << ' ' << static_cast<int>(state.shuffle) << ' ' << state.shuffle_window_shards << '\n';
    out.flush();
    if (!out) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

// Returns false when there is no checkpoint; exits on a malformed one
// rather than silently restarting from scratch.
bool LoadState(const std::string& path, gpufeed::LoaderState* state) {
  std::ifstream in(path);
  if (!in) return false;
  std::string magic;
  int version = 0, shuffle = 0;
  in >> magic >> version >> state->seed >> state->epoch >> state->consumed >> shuffle >>
      state->shuffle_window_shards;
  if (!in || magic != "gpufeed-loader-state" || version != 1 || shuffle < 0 || shuffle > 2) {
    std::fprintf(stderr, "%s: not a loader checkpoint written by this program\n", path.c_str());
    std::exit(1);
  }
  state->shuffle = static_cast<gpufeed::ShuffleMode>(shuffle);
  return true;
}

// Stands in for forward/backward: touches every byte of the batch so the
// loop pays for reading it (on the host; a CUDA batch would be consumed by
// kernels on a stream after batch.WaitOn(stream)).
uint64_t TrainStep(const gpufeed::Batch& batch) {
  if (batch.device() != gpufeed::DeviceKind::kCpu) return 0;
  const auto* bytes = static_cast<const uint8_t*>(batch.data().data);
  uint64_t sum = 0;
  for (size_t i = 0; i < batch.data().bytes(); ++i) sum += bytes[i];
  return sum;
}

int Fail(const gpufeed::Status& status) {
  std::fprintf(stderr, "cpp_trainer: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  if (!Parse(argc, argv, &args)) return Usage(argv[0]);

  std::unique_ptr<gpufeed::Dataset> opened;
  gpufeed::Status status = gpufeed::Dataset::Open(args.dataset, gpufeed::DatasetOptions(), &opened);
  if (!status.ok()) return Fail(status);
  std::shared_ptr<gpufeed::Dataset> dataset = std::move(opened);

  gpufeed::LoaderOptions options;
  options.batch_size = args.batch_size;
  options.num_threads = args.threads;
  options.seed = 42;
  if (args.raw_length > 0) {
    options.transform = gpufeed::TransformKind::kRaw;
    options.raw.length = args.raw_length;
  } else {
    // uint8 crosses PCIe at a quarter of float32's bytes; normalize on the GPU.
    options.image.dtype = gpufeed::OutputDtype::kUint8;
  }
  if (args.cuda) options.device.kind = gpufeed::DeviceKind::kCuda;

  std::unique_ptr<gpufeed::Loader> loader;
  status = gpufeed::Loader::Open(dataset, options, &loader);
  if (!status.ok()) return Fail(status);

  int first_epoch = 0;
  bool resumed = false;
  gpufeed::LoaderState state;
  if (!args.checkpoint.empty() && LoadState(args.checkpoint, &state)) {
    status = loader->Restore(state);
    if (!status.ok()) return Fail(status);
    first_epoch = static_cast<int>(state.epoch);
    resumed = true;
    std::printf("resumed from %s: epoch %" PRIu64 ", %" PRIu64 " samples consumed\n",
                args.checkpoint.c_str(), state.epoch, state.consumed);
  }

  uint64_t samples_this_run = 0;
  int64_t batches_this_run = 0;
  uint64_t checksum = 0;
  for (int epoch = first_epoch; epoch < args.epochs; ++epoch) {
    // A restored loader already stands inside its epoch; SetEpoch would
    // restart it from the beginning.
    if (!(resumed && epoch == first_epoch)) loader->SetEpoch(static_cast<uint64_t>(epoch));
    gpufeed::Batch batch;
    while (true) {
      status = loader->Next(&batch);
      if (!status.ok()) return Fail(status);
      if (batch.end_of_epoch()) break;
      checksum += TrainStep(batch);
      samples_this_run += static_cast<uint64_t>(batch.size());
      ++batches_this_run;
      uint64_t index = batch.index();
      batch.reset();  // the step is done with it: the buffer goes back to the loader now
      if (!args.checkpoint.empty() && !SaveState(args.checkpoint, loader->State())) {
        std::fprintf(stderr, "cpp_trainer: cannot write the checkpoint %s\n",
                     args.checkpoint.c_str());
        return 1;
      }
      if (batches_this_run % args.log_every == 0) {
        gpufeed::LoaderStats stats = loader->Stats();
        std::printf("epoch %d batch %" PRIu64 ": %.0f samples/s; bottleneck %s (workers reading "
                    "%.0f%%, decoding %.0f%%; Next() waited %.0f%%)\n",
                    epoch, index, stats.samples / std::max(1e-9, stats.elapsed_seconds),
                    gpufeed::BottleneckName(stats.bottleneck), 100 * stats.read_share,
                    100 * stats.decode_share, 100 * stats.consumer_wait_share);
      }
      if (args.stop_after >= 0 && batches_this_run >= args.stop_after) {
        std::printf("stopping after %" PRId64 " batches (--stop-after)\nsamples this run: %" PRIu64
                    "\n",
                    batches_this_run, samples_this_run);
        return 0;
      }
    }
    std::printf("epoch %d done\n%s\n", epoch, loader->Stats().ToString().c_str());
  }
  std::printf("training done (checksum %" PRIu64 ")\nsamples this run: %" PRIu64 "\n", checksum,
              samples_this_run);
  return 0;
}
