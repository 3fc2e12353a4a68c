// EmbeddingTable: exact rows from .npy and raw files of every dtype, every
// tier (RAM, node-cache copy, source), bounds and truncation errors, and
// concurrent lookups (run under TSan by tests/run.sh --sanitize=thread).
#include "gpufeed/embedding.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "embedding/latency_histogram.h"
#include "embedding/row_cache.h"
#include "test_util.h"

namespace gpufeed {
namespace {

// A .npy version 1.0 header for a (rows, dim) array of `descr`, padded
// so the data starts at a multiple of 64 bytes, as np.save writes it.
std::string NpyHeader(const std::string& descr, uint64_t rows, uint64_t dim) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(rows) + ", " + std::to_string(dim) + "), }";
  const size_t preamble = 10;
  size_t total = preamble + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string header("\x93NUMPY\x01\x00", 8);
  header.push_back(static_cast<char>(dict.size() & 0xff));
  header.push_back(static_cast<char>(dict.size() >> 8));
  return header + dict;
}

// Row r's bytes: a pattern that differs for every row and byte.
std::string TableBytes(uint64_t rows, size_t row_bytes, uint32_t seed = 1) {
  std::string data(rows * row_bytes, '\0');
  std::mt19937_64 random(seed);
  for (char& c : data) c = static_cast<char>(random());
  return data;
}

struct Table {
  std::string path;
  std::string data;
  size_t row_bytes = 0;
};

Table WriteNpy(const TempDir& dir, const std::string& descr, size_t item, uint64_t rows,
               uint32_t dim, const std::string& name = "table.npy") {
  Table table;
  table.path = dir.path() + "/" + name;
  table.row_bytes = item * dim;
  table.data = TableBytes(rows, table.row_bytes);
  WriteBytes(table.path, NpyHeader(descr, rows, dim) + table.data);
  return table;
}

void ExpectRows(const Table& table, const std::vector<int64_t>& ids, const std::vector<char>& out) {
  ASSERT_EQ(out.size(), ids.size() * table.row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(out.data() + i * table.row_bytes,
                             table.data.data() + ids[i] * table.row_bytes, table.row_bytes))
        << "row " << ids[i] << " at position " << i;
  }
}

std::vector<char> Lookup(EmbeddingTable& table, const std::vector<int64_t>& ids) {
  std::vector<char> out(ids.size() * table.row_bytes());
  Status status = table.Lookup(ids.data(), ids.size(), out.data());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

TEST(EmbeddingTableTest, EveryNpyDtypeIsExact) {
  TempDir dir;
  struct Case {
    const char* descr;
    size_t item;
    std::optional<TensorDtype> asked;
    TensorDtype dtype;
  } cases[] = {
      {"<f4", 4, std::nullopt, TensorDtype::kFloat32},
      {"<f2", 2, std::nullopt, TensorDtype::kFloat16},
      {"<u2", 2, TensorDtype::kBfloat16, TensorDtype::kBfloat16},
      {"|i1", 1, std::nullopt, TensorDtype::kInt8},
      {"|u1", 1, std::nullopt, TensorDtype::kUint8},
  };
  for (const Case& c : cases) {
    Table table = WriteNpy(dir, c.descr, c.item, 1000, 7, std::string("t") + c.descr + ".npy");
    EmbeddingTableOptions options;
    options.dtype = c.asked;
    options.cache_bytes = 16 << 10;  // a few rows: most lookups miss
    std::shared_ptr<EmbeddingTable> opened;
    ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok()) << c.descr;
    EXPECT_EQ(opened->rows(), 1000u);
    EXPECT_EQ(opened->dim(), 7u);
    EXPECT_EQ(opened->dtype(), c.dtype);
    // Duplicates, unsorted, the first and last rows, neighbours.
    std::vector<int64_t> ids = {999, 0, 5, 5, 6, 998, 17, 0, 999, 500, 501, 502};
    for (int round = 0; round < 3; ++round) ExpectRows(table, ids, Lookup(*opened, ids));
    // An empty lookup.
    EXPECT_TRUE(opened->Lookup(nullptr, 0, nullptr).ok());
  }
}

TEST(EmbeddingTableTest, RawFileNeedsDimAndDtype) {
  TempDir dir;
  Table table;
  table.path = dir.path() + "/table.bin";
  table.row_bytes = 16 * 4;
  table.data = TableBytes(300, table.row_bytes);
  WriteBytes(table.path, table.data);
  std::shared_ptr<EmbeddingTable> opened;
  EmbeddingTableOptions options;
  Status status = EmbeddingTable::Open(table.path, options, &opened);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  options.dim = 16;
  options.dtype = TensorDtype::kFloat32;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  EXPECT_EQ(opened->rows(), 300u);
  std::vector<int64_t> ids = {299, 1, 2, 3, 100, 1};
  ExpectRows(table, ids, Lookup(*opened, ids));
  // A size that is not a whole number of rows names the file.
  options.dim = 7;
  status = EmbeddingTable::Open(table.path, options, &opened);
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.message().find(table.path), std::string::npos) << status.ToString();
}

TEST(EmbeddingTableTest, OutOfRangeIdsNameTheIdAndTable) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 50, 4);
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, EmbeddingTableOptions(), &opened).ok());
  for (int64_t bad : {int64_t{50}, int64_t{-1}, int64_t{1} << 40}) {
    std::vector<int64_t> ids = {1, bad};
    std::vector<char> out(ids.size() * table.row_bytes);
    Status status = opened->Lookup(ids.data(), ids.size(), out.data());
    EXPECT_EQ(status.code(), Status::Code::kOutOfRange);
    EXPECT_NE(status.message().find("id " + std::to_string(bad)), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(table.path), std::string::npos);
  }
}

TEST(EmbeddingTableTest, TruncatedOrExtendedNpyIsRefusedNamingTheFile) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 100, 8);
  const std::string whole = ReadBytes(table.path);
  std::shared_ptr<EmbeddingTable> opened;
  WriteBytes(table.path, whole.substr(0, whole.size() - 5));
  Status status = EmbeddingTable::Open(table.path, EmbeddingTableOptions(), &opened);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(table.path), std::string::npos);
  WriteBytes(table.path, whole + "extra");
  status = EmbeddingTable::Open(table.path, EmbeddingTableOptions(), &opened);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
}

TEST(EmbeddingTableTest, FileCutAfterOpenFailsNamingFileAndOffset) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 1000, 8);
  EmbeddingTableOptions options;
  options.cache_bytes = 0;
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  ASSERT_EQ(0, truncate(table.path.c_str(), 128 + 500 * 32));
  std::vector<int64_t> ids = {10, 900};
  std::vector<char> out(2 * table.row_bytes);
  Status status = opened->Lookup(ids.data(), ids.size(), out.data());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(table.path), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("byte offset"), std::string::npos) << status.ToString();
}

TEST(EmbeddingTableTest, EvictionUnderASmallBudgetStaysExact) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 20000, 16);
  EmbeddingTableOptions options;
  options.cache_bytes = 300 << 10;  // about 2,800 of 20,000 rows
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  std::mt19937_64 random(7);
  // Skewed ids: squares of uniform draws favour low rows.
  for (int round = 0; round < 60; ++round) {
    std::vector<int64_t> ids(512);
    for (int64_t& id : ids) {
      const double u = std::uniform_real_distribution<double>(0, 1)(random);
      id = static_cast<int64_t>(u * u * u * 19999.0);
    }
    ExpectRows(table, ids, Lookup(*opened, ids));
  }
  const EmbeddingStats stats = opened->Stats();
  EXPECT_GT(stats.evicted, 0u);
  EXPECT_GT(stats.rejected, 0u);
  EXPECT_GT(stats.ram_hits, 0u);
  EXPECT_EQ(stats.rows, 60u * 512u);
  EXPECT_EQ(stats.resident_rows, stats.capacity_rows);
  EXPECT_LE(stats.resident_bytes, options.cache_bytes);
  EXPECT_LE(stats.p50_us, stats.p99_us);
}

TEST(EmbeddingTableTest, PreloadReadsTheTableOnceAndThenOnlyHits) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f2", 2, 5000, 32);
  EmbeddingTableOptions options;
  options.cache_bytes = 16 << 20;
  options.preload = true;
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  EXPECT_EQ(opened->Stats().preload_bytes, 5000u * 64u);
  std::vector<int64_t> ids;
  for (int64_t id = 4999; id >= 0; id -= 3) ids.push_back(id);
  ExpectRows(table, ids, Lookup(*opened, ids));
  const EmbeddingStats stats = opened->Stats();
  EXPECT_EQ(stats.ram_hits, ids.size());
  EXPECT_EQ(stats.source_rows + stats.nvme_rows, 0u);
  // A budget too small for the table is refused.
  options.cache_bytes = 64 << 10;
  Status status = EmbeddingTable::Open(table.path, options, &opened);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
}

TEST(EmbeddingTableTest, NeighbouringMissesAreCoalesced) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 10000, 16);
  EmbeddingTableOptions options;
  options.cache_bytes = 0;
  options.coalesce_gap_bytes = 0;
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  std::vector<int64_t> ids = {100, 101, 102, 103, 5000, 5002, 9999};
  ExpectRows(table, ids, Lookup(*opened, ids));
  EXPECT_EQ(opened->Stats().source_reads, 4u);  // 100-103, 5000, 5002, 9999
  EXPECT_EQ(opened->Stats().source_rows, 7u);
}

TEST(EmbeddingTableTest, NodeCacheCopyServesMisses) {
  TempDir dir, cache;
  Table table = WriteNpy(dir, "<f4", 4, 4000, 16);
  EmbeddingTableOptions options;
  options.cache_bytes = 0;
  options.cache.cache_dir = cache.path() + "/cache";
  std::vector<int64_t> ids = {1, 2000, 3999, 7};
  {
    std::shared_ptr<EmbeddingTable> first;
    ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &first).ok());
    ExpectRows(table, ids, Lookup(*first, ids));
  }  // closing finishes the copy (NodeCache::kCloseWaitSeconds)
  std::shared_ptr<EmbeddingTable> second;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &second).ok());
  ExpectRows(table, ids, Lookup(*second, ids));
  const EmbeddingStats stats = second->Stats();
  EXPECT_EQ(stats.nvme_rows, ids.size());
  EXPECT_EQ(stats.source_rows, 0u);
}

TEST(EmbeddingTableTest, ConcurrentLookupsFromEightThreadsAreExact) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 30000, 8);
  EmbeddingTableOptions options;
  options.cache_bytes = 256 << 10;  // eviction and admission race with hits
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(100 + t);
      std::vector<int64_t> ids(300);
      std::vector<char> out(ids.size() * table.row_bytes);
      for (int round = 0; round < 40; ++round) {
        for (int64_t& id : ids) {
          const double u = std::uniform_real_distribution<double>(0, 1)(random);
          id = static_cast<int64_t>(u * u * 29999.0);
        }
        if (!opened->Lookup(ids.data(), ids.size(), out.data()).ok()) ++wrong;
        for (size_t i = 0; i < ids.size(); ++i) {
          if (std::memcmp(out.data() + i * table.row_bytes,
                          table.data.data() + ids[i] * table.row_bytes, table.row_bytes) != 0) {
            ++wrong;
          }
        }
        if (round % 10 == 0) (void)opened->Stats();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(opened->Stats().lookups, 8u * 40u);
}

TEST(RowCacheTest, KeepsFrequentRowsOverAOneTimeScan) {
  const size_t row_bytes = 8;
  RowCache cache(64 << 10, row_bytes, 1 << 20);
  ASSERT_GT(cache.capacity_rows(), 100u);
  const uint64_t hot = cache.capacity_rows() / 2;
  std::vector<char> rows(row_bytes * 4096), out(row_bytes * 4096);
  std::vector<uint32_t> missing;
  auto touch = [&](const std::vector<int64_t>& ids) {
    missing.clear();
    cache.Find(ids.data(), ids.size(), out.data(), &missing);
    std::vector<int64_t> offered;
    for (uint32_t i : missing) offered.push_back(ids[i]);
    std::sort(offered.begin(), offered.end());
    offered.erase(std::unique(offered.begin(), offered.end()), offered.end());
    cache.Offer(offered.data(), offered.size(), rows.data());
    return missing.size();
  };
  std::vector<int64_t> hot_ids;
  for (uint64_t id = 0; id < hot; ++id) hot_ids.push_back(static_cast<int64_t>(id));
  for (int round = 0; round < 5; ++round) touch(hot_ids);
  // Ids seen once, four times the capacity per round, between uses of the
  // hot rows: LRU or CLOCK alone would evict every hot row each round; the
  // admission filter keeps them.
  size_t hot_misses = 0;
  for (int64_t base = 100000; base < 100000 + 40 * 4096; base += 4096) {
    std::vector<int64_t> scan;
    for (int64_t id = base; id < base + 4096; ++id) scan.push_back(id);
    touch(scan);
    hot_misses += touch(hot_ids);
  }
  EXPECT_LT(hot_misses, 40 * hot / 10) << "hot rows evicted by ids seen once";
}

TEST(LatencyHistogramTest, PercentilesWithinTheBucketWidth) {
  LatencyHistogram histogram;
  for (uint64_t v = 1; v <= 10000; ++v) histogram.Record(v * 1000);
  EXPECT_NEAR(histogram.Percentile(0.5), 5e6, 5e6 * 0.02);
  EXPECT_NEAR(histogram.Percentile(0.99), 9.9e6, 9.9e6 * 0.02);
  EXPECT_EQ(histogram.count(), 10000u);
}

// A table inherited by fork() (a torch DataLoader worker): its lookups
// fail saying so, rather than wait for the parent's threads, and dropping
// it there neither hangs nor crashes; the parent's keeps working.
TEST(EmbeddingTableTest, AForkedChildsLookupFailsSayingSoAndTheParentsKeepsWorking) {
  TempDir dir;
  Table table = WriteNpy(dir, "<f4", 4, 500, 8);
  EmbeddingTableOptions options;
  options.cache_bytes = 16 << 10;
  std::shared_ptr<EmbeddingTable> opened;
  ASSERT_TRUE(EmbeddingTable::Open(table.path, options, &opened).ok());
  std::vector<int64_t> ids = {3, 499, 3, 0};
  std::vector<char> out(ids.size() * table.row_bytes);
  ASSERT_TRUE(opened->Lookup(ids.data(), ids.size(), out.data()).ok());
  const int status = RunInForkedChild(
      [&] {
        Status looked = opened->Lookup(ids.data(), ids.size(), out.data());
        if (looked.code() != Status::Code::kInvalidArgument ||
            looked.message().find("inherited by fork") == std::string::npos ||
            looked.message().find(table.path) == std::string::npos) {
          return 2;
        }
        opened.reset();
        return 0;
      },
      /*alarm_seconds=*/10);
  EXPECT_TRUE(ExitedWithZero(status)) << "wait status " << status;
  std::vector<char> again(out.size());
  ASSERT_TRUE(opened->Lookup(ids.data(), ids.size(), again.data()).ok());
  EXPECT_EQ(again, out);
}

}  // namespace
}  // namespace gpufeed
