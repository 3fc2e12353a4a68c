// gpufeed_cache_bench: the node-local cache against a simulated busy
// parallel filesystem. Epoch 1 vs epoch 2 throughput, with and without
// prefetch, and the bytes read from the source per epoch.
//
//   gpufeed_cache_bench DATASET [--cache-dir DIR] [--latency-ms 2] [--mbps 200]
//                       [--threads 8] [--epochs 2] [--json OUT.json]
//
// The simulation (src/cache/source_throttle.h) applies to every read of a
// source shard, the dataset's own reads and the cache's fill reads: each
// request waits --latency-ms, and all share a link of --mbps megabytes per
// second, as a Lustre/GPFS client behind a congested network would. It is a
// model, not a measurement of any real filesystem; the cache's reads of its
// local copies are real reads of this machine's disk (page cache included).
//
// The epoch order is "block" shuffled: shards in a random order, records
// shuffled within a window of 2 shards (what streams through a cache). The
// readers are --threads threads taking positions of that order in turn.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "storage/source_throttle.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "util/file.h"
#include "util/path.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint64_t> BlockOrder(const gpufeed::Dataset& dataset, uint64_t epoch) {
  std::mt19937_64 rng(epoch * 7919 + 1);
  std::vector<size_t> shards(dataset.shards().size());
  for (size_t i = 0; i < shards.size(); ++i) shards[i] = i;
  std::shuffle(shards.begin(), shards.end(), rng);
  std::vector<uint64_t> order;
  for (size_t start = 0; start < shards.size(); start += 2) {
    std::vector<uint64_t> window;
    for (size_t i = start; i < std::min(start + 2, shards.size()); ++i) {
      const gpufeed::ShardInfo& shard = dataset.shards()[shards[i]];
      for (uint64_t r = 0; r < shard.records; ++r) window.push_back(shard.first_record + r);
    }
    std::shuffle(window.begin(), window.end(), rng);
    order.insert(order.end(), window.begin(), window.end());
  }
  return order;
}

struct EpochResult {
  double seconds = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t source_bytes = 0;
  int errors = 0;
};

EpochResult RunEpoch(const gpufeed::Dataset& dataset, uint64_t epoch, int threads) {
  std::vector<uint64_t> order = BlockOrder(dataset, epoch);
  dataset.ExpectReads(order);
  std::atomic<uint64_t> next{0}, bytes{0};
  std::atomic<int> errors{0};
  uint64_t source_before = gpufeed::SourceBytesRead();
  auto started = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      gpufeed::Record record;
      while (true) {
        uint64_t position = next.fetch_add(1);
        if (position >= order.size()) return;
        if (!dataset.Read(order[position], &record).ok()) {
          errors.fetch_add(1);
          continue;
        }
        bytes.fetch_add(record.data.size());
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  EpochResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  result.records = order.size();
  result.bytes = bytes.load();
  result.source_bytes = gpufeed::SourceBytesRead() - source_before;
  result.errors = errors.load();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DATASET [--cache-dir DIR] [--latency-ms MS] [--mbps MB/s] "
                 "[--threads N] [--epochs E] [--json OUT]\n",
                 argv[0]);
    return 2;
  }
  std::string path = argv[1];
  std::string cache_root = "/tmp/gpufeed-cache-bench";
  std::string json_path;
  double latency_ms = 2, mbps = 200;
  int threads = 8, epochs = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--cache-dir") cache_root = argv[i + 1];
    else if (flag == "--latency-ms") latency_ms = std::atof(argv[i + 1]);
    else if (flag == "--mbps") mbps = std::atof(argv[i + 1]);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--epochs") epochs = std::atoi(argv[i + 1]);
    else if (flag == "--json") json_path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  gpufeed::SourceThrottle throttle;
  throttle.latency_seconds = latency_ms / 1000.0;
  throttle.bytes_per_second = mbps * 1e6;
  gpufeed::SetSourceThrottleForBenchmark(throttle);
  std::printf("simulated source: %.1f ms per request, %.0f MB/s shared; %d reader threads\n",
              latency_ms, mbps, threads);

  struct Config {
    const char* name;
    bool cache;
    uint32_t prefetch;
  };
  const Config configs[] = {{"no cache", false, 0},
                            {"cache, no prefetch", true, 0},
                            {"cache, prefetch 2", true, 2}};
  std::string json = "{\n  \"latency_ms\": " + std::to_string(latency_ms) +
                     ",\n  \"source_mbps\": " + std::to_string(mbps) +
                     ",\n  \"threads\": " + std::to_string(threads) + ",\n  \"runs\": [\n";
  std::vector<std::pair<std::string, double>> chart;
  bool first_config = true;
  for (const Config& config : configs) {
    std::string cache_dir = gpufeed::JoinPath(cache_root, config.cache ? "c" : "none");
    gpufeed::RemoveRecursively(cache_dir);
    gpufeed::DatasetOptions options;
    if (config.cache) {
      options.cache.cache_dir = cache_dir;
      options.cache.capacity = uint64_t{64} << 30;
      options.cache.prefetch_shards = config.prefetch;
    }
    std::unique_ptr<gpufeed::Dataset> dataset;
    gpufeed::Status status = gpufeed::Dataset::Open(path, options, &dataset);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    if (!first_config) json += ",\n";
    first_config = false;
    json += "    {\"config\": \"" + std::string(config.name) + "\", \"epochs\": [";
    for (int epoch = 0; epoch < epochs; ++epoch) {
      EpochResult result = RunEpoch(*dataset, static_cast<uint64_t>(epoch), threads);
      double records_per_s = result.records / result.seconds;
      double mb_per_s = result.bytes / result.seconds / 1e6;
      std::printf("%-20s epoch %d: %8.0f records/s %8.1f MB/s  source read %8.1f MB  (%.2f s%s)\n",
                  config.name, epoch + 1, records_per_s, mb_per_s, result.source_bytes / 1e6,
                  result.seconds, result.errors ? ", ERRORS" : "");
      if (result.errors) return 1;
      char entry[256];
      std::snprintf(entry, sizeof entry,
                    "%s{\"epoch\": %d, \"records_per_s\": %.1f, \"mb_per_s\": %.2f, "
                    "\"source_mb\": %.2f, \"seconds\": %.3f}",
                    epoch ? ", " : "", epoch + 1, records_per_s, mb_per_s,
                    result.source_bytes / 1e6, result.seconds);
      json += entry;
      chart.emplace_back(std::string(config.name) + "\nepoch " + std::to_string(epoch + 1),
                         records_per_s);
    }
    json += "]}";
    dataset.reset();
    if (config.cache) gpufeed::RemoveRecursively(cache_dir);
  }
  json += "\n  ],\n  \"chart\": {\"title\": \"node-local cache over a simulated busy filesystem\", "
          "\"unit\": \"records/s\", \"labels\": [";
  for (size_t i = 0; i < chart.size(); ++i) {
    std::string label = chart[i].first;
    std::string escaped;
    for (char c : label) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    json += (i ? ", \"" : "\"") + escaped + "\"";
  }
  json += "], \"values\": [";
  for (size_t i = 0; i < chart.size(); ++i) {
    char value[32];
    std::snprintf(value, sizeof value, "%s%.1f", i ? ", " : "", chart[i].second);
    json += value;
  }
  json += "]}\n}\n";
  if (!json_path.empty()) {
    gpufeed::Status written = gpufeed::WriteFileAtomically(json_path, json);
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
