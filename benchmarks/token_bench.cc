// gpufeed_token_bench: token bytes/s through the C++ Loader's token-window
// transform (no Python in the loop), and the process's RSS after each epoch.
//
//   gpufeed_token_bench PATH [--seq-len 2048] [--batch 32] [--shuffle block|global|none]
//                       [--direct 0|1] [--register-buffers 0|1] [--threads N] [--dtype int64|int32] [--epochs 1]
//                       [--prefetch 8] [--format auto|tokens] [--token-dtype uint16] [--qd 128]
//
// Prints per epoch the token MB/s (windows x seq_len x token size over the
// epoch's wall time) and RSS, then
//   RESULT token_mb_per_s=<median> epochs=N rss_first_mb=... rss_last_mb=... io_requests=...
//          io_mean_inflight=... threads=... verdict="..."
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

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH [options] (see the header of token_bench.cc)\n", argv[0]);
    return 2;
  }
  std::string path = argv[1];
  LoaderOptions options;
  options.transform = TransformKind::kTokenWindows;
  options.tokens.seq_len = 2048;
  options.batch_size = 32;
  options.shuffle = ShuffleMode::kBlock;
  options.prefetch = 8;
  DatasetOptions dataset_options;
  int epochs = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--seq-len") {
      options.tokens.seq_len = static_cast<uint32_t>(std::atoi(value.c_str()));
    } else if (flag == "--batch") {
      options.batch_size = static_cast<uint32_t>(std::atoi(value.c_str()));
    } else if (flag == "--shuffle") {
      options.shuffle = value == "global" ? ShuffleMode::kGlobal
                        : value == "none" ? ShuffleMode::kNone
                                          : ShuffleMode::kBlock;
    } else if (flag == "--direct") {
      options.io.direct_io = value == "1";
    } else if (flag == "--qd") {
      options.io.queue_depth = std::atoi(value.c_str());
    } else if (flag == "--register-buffers") {
      options.io.register_buffers = value == "1";
    } else if (flag == "--threads") {
      options.num_threads = std::atoi(value.c_str());
    } else if (flag == "--dtype") {
      options.tokens.dtype = value == "int32" ? TensorDtype::kInt32 : TensorDtype::kInt64;
    } else if (flag == "--epochs") {
      epochs = std::atoi(value.c_str());
    } else if (flag == "--prefetch") {
      options.prefetch = std::atoi(value.c_str());
    } else if (flag == "--format") {
      if (!ParseFormat(value, &dataset_options.format).ok()) return 2;
    } else if (flag == "--token-dtype") {
      if (!ParseTokenDtype(value, &dataset_options.tokens.token_dtype).ok()) return 2;
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  std::unique_ptr<Dataset> opened;
  Status status = Dataset::Open(path, dataset_options, &opened);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::shared_ptr<const Dataset> dataset = std::move(opened);
  const size_t token_bytes = TokenDtypeSize(dataset->token_info()->token_dtype);
  std::unique_ptr<Loader> loader;
  status = Loader::Open(dataset, options, &loader);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::vector<double> rates, rss;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (!loader->SetEpoch(static_cast<uint64_t>(epoch)).ok()) return 1;
    auto started = Clock::now();
    uint64_t windows = 0;
    Batch batch;
    while (true) {
      status = loader->Next(&batch);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
      if (batch.end_of_epoch()) break;
      windows += static_cast<uint64_t>(batch.size());
    }
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    rates.push_back(windows * options.tokens.seq_len * token_bytes / seconds / 1e6);
    rss.push_back(RssMb());
    std::printf("epoch %d: %.0f MB/s of tokens (%llu windows in %.2f s), RSS %.0f MB\n", epoch,
                rates.back(), static_cast<unsigned long long>(windows), seconds, rss.back());
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  LoaderStats stats = loader->Stats();
  std::printf("RESULT token_mb_per_s=%.1f epochs=%d rss_first_mb=%.0f rss_last_mb=%.0f "
              "io_requests=%llu io_mean_inflight=%.1f threads=%d verdict=\"%s\"\n",
              sorted[sorted.size() / 2], epochs, rss.front(), rss.back(),
              static_cast<unsigned long long>(stats.io_requests), stats.io_mean_inflight,
              stats.threads, BottleneckName(stats.bottleneck));
  return 0;
}
