// gpufeed_read_bench: read every record of a dataset and report throughput.
//
//   gpufeed_read_bench PATH [--threads N] [--passes P] [--format NAME]
//
// Threads take blocks of consecutive records from a shared counter, so reads
// stay sequential within a block. Prints one line per pass and a final
// machine-readable line: "RESULT records=... seconds=... records_per_s=... mb_per_s=...".
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/dataset.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH [--threads N] [--passes P] [--format NAME]\n", argv[0]);
    return 2;
  }
  std::string path = argv[1];
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int passes = 3;
  gpufeed::DatasetOptions options;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--passes")) passes = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--format")) {
      gpufeed::Status s = gpufeed::ParseFormat(argv[i + 1], &options.format);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 2;
      }
    }
  }
  if (threads < 1) threads = 1;
  std::unique_ptr<gpufeed::Dataset> dataset;
  gpufeed::Status status = gpufeed::Dataset::Open(path, options, &dataset);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  const uint64_t total = dataset->size();
  std::printf("dataset %s: format=%s records=%llu shards=%zu threads=%d\n", path.c_str(),
              gpufeed::FormatName(dataset->format()), static_cast<unsigned long long>(total),
              dataset->shards().size(), threads);
  std::vector<double> rates, bandwidths;
  double best_seconds = 0;
  uint64_t pass_bytes = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<bool> failed{false};
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        gpufeed::Record record;
        uint64_t local_bytes = 0;
        constexpr uint64_t kBlock = 32;
        while (!failed) {
          uint64_t begin = next.fetch_add(kBlock);
          if (begin >= total) break;
          for (uint64_t i = begin; i < std::min(total, begin + kBlock); ++i) {
            gpufeed::Status s = dataset->Read(i, &record);
            if (!s.ok()) {
              std::fprintf(stderr, "%s\n", s.ToString().c_str());
              failed = true;
              break;
            }
            local_bytes += record.data.size();
          }
        }
        bytes += local_bytes;
      });
    }
    for (auto& worker : workers) worker.join();
    if (failed) return 1;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double rate = total / seconds;
    double mb = bytes / seconds / 1e6;
    rates.push_back(rate);
    bandwidths.push_back(mb);
    pass_bytes = bytes;
    if (pass == 0 || seconds < best_seconds) best_seconds = seconds;
    std::printf("pass %d: %.3f s  %.0f records/s  %.1f MB/s\n", pass + 1, seconds, rate, mb);
  }
  std::sort(rates.begin(), rates.end());
  std::sort(bandwidths.begin(), bandwidths.end());
  double median_rate = rates[rates.size() / 2];
  double median_mb = bandwidths[bandwidths.size() / 2];
  std::printf("RESULT records=%llu bytes=%llu threads=%d passes=%d median_records_per_s=%.0f "
              "median_mb_per_s=%.1f\n",
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(pass_bytes),
              threads, passes, median_rate, median_mb);
  return 0;
}
