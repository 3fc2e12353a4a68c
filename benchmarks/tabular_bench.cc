// gpufeed_tabular_bench: tabular (CTR) rows through the C++ Loader's tabular
// transform (no Python in the loop): rows/s per epoch, the time to the
// first batch, and the process's RSS after each epoch.
//
//   gpufeed_tabular_bench PATH [--format records|criteo_npy|criteo_tsv|auto] [--batch 65536]
//                         [--shuffle block|global|none] [--direct 0|1] [--threads N]
//                         [--epochs 1] [--prefetch 2] [--block-bytes N] [--window 4]
//                         [--dense-log1p 0|1] [--hash-size H] [--sparse-dtype int64|int32]
//
// Records are read with RecordSchema's default (MLPerf DLRM's 160 bytes).
// Prints per epoch the rows/s over the epoch's wall time and the RSS, then
//   RESULT rows_per_s=<median> rows=... epochs=N first_batch_s=... rss_first_mb=...
//          rss_last_mb=... threads=... read_share=... decode_share=... blocked_share=...
//          io_requests=... verdict="..."
// (the shares are of the first epoch's span: where the workers' time went).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpufeed/loader.h"

using namespace gpufeed;
using Clock = std::chrono::steady_clock;

static double RssMb() {
  long pages = 0, resident = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

static bool ParseArgs(int argc, char** argv, LoaderOptions* options, DatasetOptions* dataset,
                      int* epochs) {
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") {
      options->batch_size = static_cast<uint32_t>(std::atoi(value.c_str()));
    } else if (flag == "--shuffle") {
      options->shuffle = value == "global" ? ShuffleMode::kGlobal
                         : value == "none" ? ShuffleMode::kNone
                                           : ShuffleMode::kBlock;
    } else if (flag == "--direct") {
      options->io.direct_io = value == "1";
    } else if (flag == "--threads") {
      options->num_threads = std::atoi(value.c_str());
    } else if (flag == "--epochs") {
      *epochs = std::atoi(value.c_str());
    } else if (flag == "--prefetch") {
      options->prefetch = std::atoi(value.c_str());
    } else if (flag == "--window") {
      options->shuffle_window_shards = static_cast<uint32_t>(std::atoi(value.c_str()));
    } else if (flag == "--block-bytes") {
      dataset->tabular.block_bytes = static_cast<uint32_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (flag == "--format") {
      if (!ParseFormat(value, &dataset->format).ok()) return false;
    } else if (flag == "--dense-log1p") {
      options->tabular.dense_log1p = value == "1";
    } else if (flag == "--hash-size") {
      options->tabular.hash_sizes = {std::strtoull(value.c_str(), nullptr, 10)};
    } else if (flag == "--sparse-dtype") {
      options->tabular.sparse_dtype = value == "int32" ? TensorDtype::kInt32 : TensorDtype::kInt64;
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return false;
    }
  }
  return true;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH [options] (see the header of tabular_bench.cc)\n",
                 argv[0]);
    return 2;
  }
  auto opened_at = Clock::now();
  LoaderOptions options;
  options.transform = TransformKind::kTabular;
  options.batch_size = 65536;
  options.shuffle = ShuffleMode::kBlock;
  DatasetOptions dataset_options;
  int epochs = 1;
  if (!ParseArgs(argc, argv, &options, &dataset_options, &epochs)) return 2;
  std::unique_ptr<Dataset> opened;
  Status status = Dataset::Open(argv[1], dataset_options, &opened);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::shared_ptr<const Dataset> dataset = std::move(opened);
  std::unique_ptr<Loader> loader;
  status = Loader::Open(dataset, options, &loader);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<double> rates, rss;
  double first_batch_s = -1;
  uint64_t rows_per_epoch = 0;
  LoaderStats first_epoch;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (!loader->SetEpoch(static_cast<uint64_t>(epoch)).ok()) return 1;
    auto started = Clock::now();
    uint64_t rows = 0;
    Batch batch;
    while (true) {
      status = loader->Next(&batch);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
      if (first_batch_s < 0) {
        first_batch_s = std::chrono::duration<double>(Clock::now() - opened_at).count();
      }
      if (batch.end_of_epoch()) break;
      rows += static_cast<uint64_t>(batch.size());
    }
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (epoch == 0) first_epoch = loader->Stats(StatsSpan::kEpoch);
    rows_per_epoch = rows;
    rates.push_back(rows / seconds);
    rss.push_back(RssMb());
    std::printf("epoch %d: %.0f rows/s (%llu rows in %.2f s), RSS %.0f MB\n", epoch,
                rates.back(), static_cast<unsigned long long>(rows), seconds, rss.back());
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("RESULT rows_per_s=%.1f rows=%llu epochs=%d first_batch_s=%.4f rss_first_mb=%.0f "
              "rss_last_mb=%.0f threads=%d read_share=%.3f decode_share=%.3f "
              "blocked_share=%.3f other_share=%.3f io_requests=%llu verdict=\"%s\"\n",
              sorted[sorted.size() / 2], static_cast<unsigned long long>(rows_per_epoch), epochs,
              first_batch_s, rss.front(), rss.back(), first_epoch.threads,
              first_epoch.read_share, first_epoch.decode_share, first_epoch.blocked_share,
              first_epoch.other_share, static_cast<unsigned long long>(first_epoch.io_requests),
              BottleneckName(first_epoch.bottleneck));
  return 0;
}
