// gpufeed_embedding_bench: EmbeddingTable lookups of Zipf-distributed ids,
// for profiling the tiers without Python in the way (perf record works on
// it; benchmarks/embedding_compare.py measures the figures through
// the Python API).
//
//   gpufeed_embedding_bench TABLE [--cache-bytes N] [--zipf S] [--batch N]
//       [--lookups N] [--threads N] [--mode fresh|replay|gather] [--direct 0|1]
//       [--preload 0|1] [--seed N]
//
// fresh: new draws every lookup; replay: the first 20 lookups' ids again and
// again; gather: the same ids copied from the whole table held in RAM (the
// memory-bandwidth reference, like torch.index_select). Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpufeed/embedding.h"

using namespace gpufeed;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string table;
  uint64_t cache_bytes = 128ull << 20;
  double zipf = 1.05;
  size_t batch = 4096;
  int lookups = 200;
  int threads = 1;
  std::string mode = "fresh";
  bool direct = false;
  bool preload = false;
  uint64_t seed = 1;
  int warmup = 0;  // lookups (per thread) before the measured ones, not counted
};

bool Parse(int argc, char** argv, Args* args) {
  args->table = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--cache-bytes") args->cache_bytes = std::strtoull(value, nullptr, 10);
    else if (key == "--zipf") args->zipf = std::atof(value);
    else if (key == "--batch") args->batch = std::strtoull(value, nullptr, 10);
    else if (key == "--lookups") args->lookups = std::atoi(value);
    else if (key == "--threads") args->threads = std::atoi(value);
    else if (key == "--mode") args->mode = value;
    else if (key == "--direct") args->direct = std::atoi(value) != 0;
    else if (key == "--preload") args->preload = std::atoi(value) != 0;
    else if (key == "--seed") args->seed = std::strtoull(value, nullptr, 10);
    else if (key == "--warmup") args->warmup = std::atoi(value);
    else return false;
  }
  return true;
}

// Bounded Zipf(s) over `rows` ranks, mapped to rows through a fixed
// permutation (hot rows scattered over the file).
class Zipf {
 public:
  Zipf(uint64_t rows, double s, uint64_t seed) : cdf_(rows), row_of_(rows) {
    double sum = 0;
    for (uint64_t k = 0; k < rows; ++k) cdf_[k] = sum += std::pow(static_cast<double>(k + 1), -s);
    for (double& c : cdf_) c /= sum;
    for (uint64_t k = 0; k < rows; ++k) row_of_[k] = static_cast<int64_t>(k);
    std::mt19937_64 random(12345);
    std::shuffle(row_of_.begin(), row_of_.end(), random);
    random_.seed(seed);
  }
  int64_t Draw() {
    const double u = std::uniform_real_distribution<double>(0, 1)(random_);
    const size_t k = static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    return row_of_[std::min(k, row_of_.size() - 1)];
  }
  // The share of draws an ideal static cache of the `rows` most frequent rows serves.
  double TopShare(uint64_t rows) const {
    return rows == 0 ? 0 : cdf_[std::min<uint64_t>(rows, cdf_.size()) - 1];
  }

 private:
  std::vector<double> cdf_;
  std::vector<int64_t> row_of_;
  std::mt19937_64 random_;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (argc < 2 || !Parse(argc, argv, &args)) {
    std::fprintf(stderr, "usage: %s TABLE [options] (see embedding_bench.cc)\n", argv[0]);
    return 2;
  }
  EmbeddingTableOptions options;
  options.cache_bytes = args.cache_bytes;
  options.io.direct_io = args.direct;
  options.preload = args.preload;
  std::shared_ptr<EmbeddingTable> table;
  Status status = EmbeddingTable::Open(args.table, options, &table);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  const size_t row_bytes = table->row_bytes();
  std::vector<std::vector<std::vector<int64_t>>> ids(args.threads);
  Zipf zipf(table->rows(), args.zipf, args.seed);
  for (int t = 0; t < args.threads; ++t) {
    for (int l = 0; l < args.warmup + args.lookups; ++l) {
      std::vector<int64_t> batch(args.batch);
      if (args.mode == "replay" && l >= 20) {
        batch = ids[t][l % 20];
      } else {
        for (int64_t& id : batch) id = zipf.Draw();
      }
      ids[t].push_back(std::move(batch));
    }
  }
  std::string whole;
  if (args.mode == "gather") {
    FILE* in = std::fopen(args.table.c_str(), "rb");
    if (in == nullptr) return 1;
    std::fseek(in, 0, SEEK_END);
    whole.resize(static_cast<size_t>(std::ftell(in)));
    std::fseek(in, 0, SEEK_SET);
    if (std::fread(whole.data(), 1, whole.size(), in) != whole.size()) return 1;
    std::fclose(in);
  }
  const size_t offset = whole.size() - table->rows() * row_bytes;
  std::vector<std::thread> threads;
  std::vector<std::vector<double>> took(args.threads);  // seconds per lookup
  std::vector<char> scratch(args.batch * row_bytes);
  for (int t = 0; t < args.threads; ++t) {
    for (int l = 0; l < args.warmup; ++l) {
      if (!table->Lookup(ids[t][l].data(), ids[t][l].size(), scratch.data()).ok()) return 1;
    }
    ids[t].erase(ids[t].begin(), ids[t].begin() + args.warmup);
  }
  table->ResetStats();
  const auto started = Clock::now();
  for (int t = 0; t < args.threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<char> out(args.batch * row_bytes);
      for (const auto& batch : ids[t]) {
        const auto one = Clock::now();
        if (args.mode == "gather") {
          for (size_t i = 0; i < batch.size(); ++i) {
            std::memcpy(out.data() + i * row_bytes, whole.data() + offset + batch[i] * row_bytes,
                        row_bytes);
          }
        } else if (!table->Lookup(batch.data(), batch.size(), out.data()).ok()) {
          std::abort();
        }
        took[t].push_back(std::chrono::duration<double>(Clock::now() - one).count());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const EmbeddingStats stats = table->Stats();
  const double rows = static_cast<double>(args.threads) * args.lookups * args.batch;
  std::vector<double> all;
  for (const auto& t : took) all.insert(all.end(), t.begin(), t.end());
  std::sort(all.begin(), all.end());
  const double median = all.empty() ? 0 : all[all.size() / 2];
  std::printf(
      "{\"mode\": \"%s\", \"rows_per_second\": %.0f, \"median_lookup_us\": %.1f, \"hit_rate\": %.4f, \"ideal_hit_rate\": %.4f, "
      "\"ideal_hit_rate_budget\": %.4f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"capacity_rows\": %llu, "
      "\"source_reads\": %llu, \"source_rows\": %llu, \"evicted\": %llu, \"rejected\": %llu}\n",
      args.mode.c_str(), rows / seconds, median * 1e6,
      stats.rows ? static_cast<double>(stats.ram_hits) / static_cast<double>(stats.rows) : 0.0,
      zipf.TopShare(stats.capacity_rows), zipf.TopShare(args.cache_bytes / row_bytes),
      stats.p50_us, stats.p99_us, static_cast<unsigned long long>(stats.capacity_rows),
      static_cast<unsigned long long>(stats.source_reads),
      static_cast<unsigned long long>(stats.source_rows),
      static_cast<unsigned long long>(stats.evicted),
      static_cast<unsigned long long>(stats.rejected));
  return 0;
}
