// gpufeed_cache_bench: the node-local cache against a simulated busy
// parallel filesystem. Epoch 1 vs epoch 2 throughput, with and without
// prefetch, and the bytes read from the source per epoch. Any format that
// Dataset::Open reads (RecordIO, LMDB, Caffe LMDB; detected unless --format).
//
//   gpufeed_cache_bench DATASET [--cache-dir DIR] [--latency-ms 2] [--mbps 200]
//                       [--threads 8] [--format NAME] [--json OUT.json]
//                       [--epochs 2]
//                       | [--epoch N [--cold] [--keep-cache] [--no-cache] [--prefetch P]]
//
// Without --epoch: three configurations (no cache; cache without prefetch;
// cache with prefetch 2), each with an empty cache and --epochs epochs in this
// one process.
//
// With --epoch N: one epoch (the order of epoch N) in this process, so that a
// script can run epoch 1 and then epoch 2 in a new process against the same
// cache, as a restarted job would. The cache DIR/c is used as found (--cold
// empties it first) and removed at exit unless --keep-cache. --no-cache reads
// the source only, for reference. Opening the dataset and closing it (queued
// fills finish at close, so that a new process finds the copies complete)
// count in the source bytes; their time is printed apart from the epoch's.
//
// Per epoch: seconds, records/s, bytes read from the source (dataset reads
// and cache fills), their ratio to the dataset's size on disk (.rec files,
// data.mdb), reads served from a cache copy, and source files opened. With
// --epoch, a last line "RESULT key=value ..." for scripts.
//
// The simulation (src/storage/source_throttle.h) applies to every read of a
// source file, the dataset's own reads and the cache's fill reads: each
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
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/cache.h"
#include "format/dataset_base.h"
#include "gpufeed/dataset.h"
#include "storage/source_throttle.h"
#include "util/file.h"
#include "util/path.h"

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

// The dataset's size on disk: what the cache copies (whole .rec files, whole
// data.mdb files), the denominator of the source ratio.
uint64_t DatasetBytes(const gpufeed::Dataset& dataset) {
  uint64_t bytes = 0;
  for (const gpufeed::ShardInfo& shard : dataset.shards()) bytes += shard.bytes;
  return bytes;
}

gpufeed::StorageStats Difference(const gpufeed::StorageStats& after,
                                 const gpufeed::StorageStats& before) {
  gpufeed::StorageStats difference;
  difference.source_opens = after.source_opens - before.source_opens;
  difference.source_stats = after.source_stats - before.source_stats;
  difference.source_reads = after.source_reads - before.source_reads;
  difference.source_bytes = after.source_bytes - before.source_bytes;
  difference.cache_reads = after.cache_reads - before.cache_reads;
  difference.open_files = after.open_files;
  return difference;
}

struct EpochResult {
  int epoch = 0;  // 1-based
  double seconds = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;  // record payloads
  // Read from the source during the epoch (every store of the process).
  uint64_t source_bytes = 0;
  // The dataset's storage counters over the epoch.
  gpufeed::StorageStats storage;
  int errors = 0;

  double records_per_s() const { return records / seconds; }
  double mb_per_s() const { return bytes / seconds / 1e6; }
};

EpochResult RunEpoch(const gpufeed::Dataset& dataset, int epoch, int threads) {
  std::vector<uint64_t> order = BlockOrder(dataset, static_cast<uint64_t>(epoch - 1));
  gpufeed::ReadPathOf(dataset).ExpectReads(order);
  std::atomic<uint64_t> next{0}, bytes{0};
  std::atomic<int> errors{0};
  uint64_t source_before = gpufeed::SourceBytesRead();
  gpufeed::StorageStats storage_before = dataset.storage_stats();
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
  result.epoch = epoch;
  result.seconds = SecondsSince(started);
  result.records = order.size();
  result.bytes = bytes.load();
  result.source_bytes = gpufeed::SourceBytesRead() - source_before;
  result.storage = Difference(dataset.storage_stats(), storage_before);
  result.errors = errors.load();
  return result;
}

void PrintEpoch(const char* config, const EpochResult& result, uint64_t source_bytes,
                uint64_t dataset_bytes) {
  std::printf(
      "%-20s epoch %d: %8.0f records/s %8.1f MB/s  source read %8.1f MB (%.2fx the "
      "dataset)  cache reads %7" PRIu64 "  source opens %4" PRIu64 "  (%.2f s%s)\n",
      config, result.epoch, result.records_per_s(), result.mb_per_s(), source_bytes / 1e6,
      dataset_bytes ? static_cast<double>(source_bytes) / dataset_bytes : 0.0,
      result.storage.cache_reads, result.storage.source_opens, result.seconds,
      result.errors ? ", ERRORS" : "");
}

// One epoch as JSON. `source_bytes` is what the figure should count: the
// epoch's own reads (several epochs in one process) or the whole process's
// (open, epoch, close).
std::string EpochJson(const EpochResult& result, uint64_t source_bytes, uint64_t dataset_bytes) {
  char entry[768];
  std::snprintf(
      entry, sizeof entry,
      "{\"epoch\": %d, \"records_per_s\": %.1f, \"mb_per_s\": %.2f, "
      "\"source_mb\": %.2f, \"seconds\": %.3f, \"records\": %" PRIu64 ", \"source_bytes\": %" PRIu64
      ", \"dataset_bytes\": %" PRIu64 ", \"source_ratio\": %.4f, \"cache_reads\": %" PRIu64
      ", \"source_reads\": %" PRIu64 ", \"source_opens\": %" PRIu64 "}",
      result.epoch, result.records_per_s(), result.mb_per_s(), source_bytes / 1e6, result.seconds,
      result.records, source_bytes, dataset_bytes,
      dataset_bytes ? static_cast<double>(source_bytes) / dataset_bytes : 0.0,
      result.storage.cache_reads, result.storage.source_reads, result.storage.source_opens);
  return entry;
}

std::string JsonString(const std::string& text) {
  std::string escaped = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped + "\"";
}

struct Flags {
  std::string path;
  std::string cache_root = "/tmp/gpufeed-cache-bench";
  std::string json_path;
  double latency_ms = 2, mbps = 200;
  int threads = 8, epochs = 2;
  gpufeed::DatasetFormat format = gpufeed::DatasetFormat::kAuto;
  // --epoch mode.
  int epoch = 0;
  bool cold = false, keep_cache = false, no_cache = false;
  uint32_t prefetch = 2;
};

int Usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s DATASET [--cache-dir DIR] [--latency-ms MS] [--mbps MB/s] "
               "[--threads N] [--format NAME] [--json OUT] [--epochs E | --epoch N [--cold] "
               "[--keep-cache] [--no-cache] [--prefetch P]]\n",
               program);
  return 2;
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  if (argc < 2 || argv[1][0] == '-') return false;
  flags->path = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--cold")
      flags->cold = true;
    else if (flag == "--keep-cache")
      flags->keep_cache = true;
    else if (flag == "--no-cache")
      flags->no_cache = true;
    else if (i + 1 == argc) {
      std::fprintf(stderr, "%s needs a value (or is unknown)\n", flag.c_str());
      return false;
    } else {
      const char* value = argv[++i];
      if (flag == "--cache-dir")
        flags->cache_root = value;
      else if (flag == "--latency-ms")
        flags->latency_ms = std::atof(value);
      else if (flag == "--mbps")
        flags->mbps = std::atof(value);
      else if (flag == "--threads")
        flags->threads = std::max(1, std::atoi(value));
      else if (flag == "--epochs")
        flags->epochs = std::max(1, std::atoi(value));
      else if (flag == "--epoch")
        flags->epoch = std::atoi(value);
      else if (flag == "--prefetch")
        flags->prefetch = static_cast<uint32_t>(std::atoi(value));
      else if (flag == "--json")
        flags->json_path = value;
      else if (flag == "--format") {
        gpufeed::Status parsed = gpufeed::ParseFormat(value, &flags->format);
        if (!parsed.ok()) {
          std::fprintf(stderr, "%s\n", parsed.ToString().c_str());
          return false;
        }
      } else {
        std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
        return false;
      }
    }
  }
  if (flags->epoch < 0 ||
      ((flags->cold || flags->keep_cache || flags->no_cache) && flags->epoch == 0)) {
    std::fprintf(stderr, "--cold, --keep-cache and --no-cache go with --epoch N (N >= 1)\n");
    return false;
  }
  return true;
}

std::string JsonHeader(const Flags& flags, const gpufeed::Dataset& dataset) {
  return "{\n  \"latency_ms\": " + std::to_string(flags.latency_ms) +
         ",\n  \"source_mbps\": " + std::to_string(flags.mbps) +
         ",\n  \"threads\": " + std::to_string(flags.threads) +
         ",\n  \"format\": " + JsonString(gpufeed::FormatName(dataset.format())) +
         ",\n  \"dataset\": " + JsonString(dataset.path()) +
         ",\n  \"dataset_bytes\": " + std::to_string(DatasetBytes(dataset));
}

int WriteJson(const std::string& path, const std::string& json) {
  if (path.empty()) return 0;
  gpufeed::Status written = gpufeed::WriteFileAtomically(path, json);
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return 1;
  }
  return 0;
}

gpufeed::DatasetOptions Options(const Flags& flags, bool cache, uint32_t prefetch,
                                const std::string& cache_dir) {
  gpufeed::DatasetOptions options;
  options.format = flags.format;
  if (cache) {
    options.cache.cache_dir = cache_dir;
    options.cache.capacity = uint64_t{64} << 30;
    options.cache.prefetch_shards = prefetch;
  }
  return options;
}

// --epoch N: one epoch in this process, the cache as a previous process left it.
int RunOneEpoch(const Flags& flags) {
  bool cache = !flags.no_cache;
  std::string cache_dir = gpufeed::JoinPath(flags.cache_root, "c");
  if (cache && flags.cold) (void)gpufeed::RemoveRecursively(cache_dir);
  uint64_t source_before = gpufeed::SourceBytesRead();
  auto opened = Clock::now();
  std::unique_ptr<gpufeed::Dataset> dataset;
  gpufeed::Status status = gpufeed::Dataset::Open(
      flags.path, Options(flags, cache, flags.prefetch, cache_dir), &dataset);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  double open_seconds = SecondsSince(opened);
  const char* format = gpufeed::FormatName(dataset->format());
  uint64_t dataset_bytes = DatasetBytes(*dataset);
  std::string json = JsonHeader(flags, *dataset);
  EpochResult result = RunEpoch(*dataset, flags.epoch, flags.threads);
  // The process's counters, opening included (the source opens happen there).
  result.storage = dataset->storage_stats();
  auto closed = Clock::now();
  dataset.reset();  // queued fills finish here
  double close_seconds = SecondsSince(closed);
  uint64_t process_source_bytes = gpufeed::SourceBytesRead() - source_before;
  std::string config = cache ? "cache, prefetch " + std::to_string(flags.prefetch) : "no cache";
  std::printf(
      "%s %s (new process, %d threads; simulated source %.1f ms per request, "
      "%.0f MB/s shared)\n",
      format, flags.path.c_str(), flags.threads, flags.latency_ms, flags.mbps);
  PrintEpoch(config.c_str(), result, process_source_bytes, dataset_bytes);
  std::printf(
      "  open %.2f s, close %.2f s (fills finishing); source bytes from open to close "
      "%" PRIu64 ", of which during the epoch %" PRIu64 "\n",
      open_seconds, close_seconds, process_source_bytes, result.source_bytes);
  std::printf("RESULT format=%s cache=%d epoch=%d records=%" PRIu64
              " seconds=%.3f records_per_s=%.1f source_bytes=%" PRIu64 " dataset_bytes=%" PRIu64
              " source_ratio=%.4f cache_reads=%" PRIu64 " source_opens=%" PRIu64 "\n",
              format, cache ? 1 : 0, flags.epoch, result.records, result.seconds,
              result.records_per_s(), process_source_bytes, dataset_bytes,
              dataset_bytes ? static_cast<double>(process_source_bytes) / dataset_bytes : 0.0,
              result.storage.cache_reads, result.storage.source_opens);
  if (cache && !flags.keep_cache) (void)gpufeed::RemoveRecursively(cache_dir);
  if (result.errors) return 1;
  char timing[160];
  std::snprintf(timing, sizeof timing,
                ",\n  \"process\": \"new\",\n  \"open_seconds\": %.3f,\n  \"close_seconds\": %.3f",
                open_seconds, close_seconds);
  json += timing;
  json += ",\n  \"config\": " + JsonString(config) +
          ",\n  \"cache\": " + (cache ? "true" : "false") +
          ",\n  \"epoch\": " + EpochJson(result, process_source_bytes, dataset_bytes) + "\n}\n";
  return WriteJson(flags.json_path, json);
}

// Without --epoch: the three configurations, each cold, all epochs in this process.
int RunConfigurations(const Flags& flags) {
  struct Config {
    const char* name;
    bool cache;
    uint32_t prefetch;
  };
  const Config configs[] = {
      {"no cache", false, 0}, {"cache, no prefetch", true, 0}, {"cache, prefetch 2", true, 2}};
  std::string json;
  std::vector<std::pair<std::string, double>> chart;
  bool first_config = true;
  for (const Config& config : configs) {
    std::string cache_dir = gpufeed::JoinPath(flags.cache_root, config.cache ? "c" : "none");
    (void)gpufeed::RemoveRecursively(cache_dir);
    std::unique_ptr<gpufeed::Dataset> dataset;
    gpufeed::Status status = gpufeed::Dataset::Open(
        flags.path, Options(flags, config.cache, config.prefetch, cache_dir), &dataset);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    uint64_t dataset_bytes = DatasetBytes(*dataset);
    if (first_config) {
      std::printf("%s %s: %zu shards, %.1f MB on disk\n", gpufeed::FormatName(dataset->format()),
                  flags.path.c_str(), dataset->shards().size(), dataset_bytes / 1e6);
      json = JsonHeader(flags, *dataset) + ",\n  \"runs\": [\n";
    } else {
      json += ",\n";
    }
    first_config = false;
    json += "    {\"config\": " + JsonString(config.name) +
            ", \"cache\": " + (config.cache ? "true" : "false") + ", \"epochs\": [";
    for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
      EpochResult result = RunEpoch(*dataset, epoch, flags.threads);
      PrintEpoch(config.name, result, result.source_bytes, dataset_bytes);
      if (result.errors) return 1;
      json += (epoch > 1 ? ", " : "") + EpochJson(result, result.source_bytes, dataset_bytes);
      chart.emplace_back(std::string(config.name) + "\nepoch " + std::to_string(epoch),
                         result.records_per_s());
    }
    json += "]}";
    dataset.reset();
    if (config.cache) (void)gpufeed::RemoveRecursively(cache_dir);
  }
  json +=
      "\n  ],\n  \"chart\": {\"title\": \"node-local cache over a simulated busy filesystem\", "
      "\"unit\": \"records/s\", \"labels\": [";
  for (size_t i = 0; i < chart.size(); ++i) json += (i ? ", " : "") + JsonString(chart[i].first);
  json += "], \"values\": [";
  for (size_t i = 0; i < chart.size(); ++i) {
    char value[32];
    std::snprintf(value, sizeof value, "%s%.1f", i ? ", " : "", chart[i].second);
    json += value;
  }
  json += "]}\n}\n";
  return WriteJson(flags.json_path, json);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return Usage(argv[0]);
  gpufeed::SourceThrottle throttle;
  throttle.latency_seconds = flags.latency_ms / 1000.0;
  throttle.bytes_per_second = flags.mbps * 1e6;
  gpufeed::SetSourceThrottleForBenchmark(throttle);
  if (flags.epoch > 0) return RunOneEpoch(flags);
  std::printf("simulated source: %.1f ms per request, %.0f MB/s shared; %d reader threads\n",
              flags.latency_ms, flags.mbps, flags.threads);
  return RunConfigurations(flags);
}
