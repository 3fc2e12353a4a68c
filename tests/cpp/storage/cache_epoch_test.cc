// Epoch 1 with the node cache: readers that race the fills of the files
// they read (8 threads, shuffled order, a slowed source) fetch what they
// need into the copies in progress, and the fills read only the rest, so
// the source is read once. Source bytes are counted by the store
// (SourceBytesRead), not timed; the throttle only makes the race real.
#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "format/dataset_base.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "io/read_engine.h"
#include "storage/byte_ranges.h"
#include "storage/cache_directory.h"
#include "storage/cache_filler.h"
#include "storage/source_throttle.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

constexpr size_t kRecordBytes = 96 << 10;
constexpr int kShards = 2;
constexpr int kPerShard = 300;  // ~29 MB a shard: the fill's ramp, a 16 MiB region and a part

std::string RecordBytes(uint64_t index) {
  std::string bytes(kRecordBytes, '\0');
  uint64_t state = index * 0x9E3779B97F4A7C15ull + 7;
  for (char& byte : bytes) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    byte = static_cast<char>(state);
  }
  return bytes;
}

void WriteShards(const std::string& directory) {
  ASSERT_TRUE(CreateDirectories(directory).ok());
  uint64_t index = 0;
  for (int s = 0; s < kShards; ++s) {
    std::string rec = JoinPath(directory, "part-0000" + std::to_string(s) + ".rec");
    std::unique_ptr<ShardWriter> writer;
    ASSERT_TRUE(ShardWriter::Open(rec, ShardFormat::kRecordIO, &writer).ok());
    for (int r = 0; r < kPerShard; ++r, ++index) {
      std::string data = RecordBytes(index);
      SampleToWrite sample;
      sample.index = index;
      sample.labels = {static_cast<float>(index)};
      sample.data = data;
      ASSERT_TRUE(writer->Append(sample).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
  }
}

uint64_t ShardBytes(const Dataset& dataset) {
  uint64_t bytes = 0;
  for (const ShardInfo& shard : dataset.shards()) bytes += shard.bytes;
  return bytes;
}

// Reads `order` with `threads` threads; returns the records read wrong.
int ReadAll(const Dataset& dataset, const std::vector<uint64_t>& order, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      Record record;
      for (size_t i = next.fetch_add(1); i < order.size(); i = next.fetch_add(1)) {
        Status status = dataset.Read(order[i], &record);
        if (!status.ok() || record.data != RecordBytes(order[i])) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  return wrong.load();
}

class CacheEpochTest : public ::testing::Test {
 protected:
  void TearDown() override { SetSourceThrottleForBenchmark(SourceThrottle()); }
  TempDir dir_;
};

TEST_F(CacheEpochTest, ReadersRacingTheFillsReadTheSourceOnce) {
  const std::string source = JoinPath(dir_.path(), "source");
  WriteShards(source);
  // A busy filesystem: every request waits 2 ms, 300 MB/s shared.
  SourceThrottle throttle;
  throttle.latency_seconds = 0.002;
  throttle.bytes_per_second = 300e6;
  SetSourceThrottleForBenchmark(throttle);
  DatasetOptions options;
  options.cache.cache_dir = JoinPath(dir_.path(), "cache");
  options.cache.capacity = uint64_t{1} << 30;
  std::vector<uint64_t> order(kShards * kPerShard);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  const uint64_t before = SourceBytesRead();
  uint64_t dataset_bytes = 0;
  {
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source, options, &dataset).ok());
    dataset_bytes = ShardBytes(*dataset);
    ReadPathOf(*dataset).ExpectReads(order);
    EXPECT_EQ(ReadAll(*dataset, order, 8), 0);
  }  // the fills finish here
  const uint64_t epoch1 = SourceBytesRead() - before;
  // The .rec files once (their .idx files are a few KB more).
  EXPECT_GE(epoch1, dataset_bytes);
  EXPECT_LE(static_cast<double>(epoch1), 1.05 * static_cast<double>(dataset_bytes));
  // The copies were verified and published: epoch 2 reads no record from
  // the source.
  std::unique_ptr<Dataset> again;
  ASSERT_TRUE(Dataset::Open(source, options, &again).ok());
  const uint64_t opened = SourceBytesRead();
  std::shuffle(order.begin(), order.end(), std::mt19937_64(4));
  EXPECT_EQ(ReadAll(*again, order, 4), 0);
  EXPECT_EQ(SourceBytesRead() - opened, 0u);
}

// What a fill claims at a time (a reader needing a claimed part waits for
// the fill) and how often it publishes: for a file nobody reads yet, regions
// that start small (its readers may come soon) and double up to large ones,
// small ones while readers use the copy, and progress after every read, so
// that a waiting reader is released by the read it needs.
TEST(CacheFillRegionsTest, WithReadersTheFillClaimsAndPublishesSmallRegions) {
  TempDir dir;
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(JoinPath(dir.path(), "cache"), "", true, &directory).ok());
  const uint64_t size = (40 << 20) + 12345;
  for (bool readers : {false, true}) {
    SCOPED_TRACE(readers);
    const std::string path = JoinPath(dir.path(), readers ? "read.rec" : "idle.rec");
    std::string bytes(size, '\0');
    for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131) ^ (i >> 9));
    ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
    CacheSource source;
    ASSERT_TRUE(StatCacheSource(path, &source).ok());
    source.dataset = dir.path();
    std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();
    ASSERT_NE(engine, nullptr);
    std::vector<ByteRange> claims;
    std::vector<uint64_t> progress;
    FillRequest request;
    request.engine = engine.get();
    request.claim = [&](uint64_t begin, uint64_t end) {
      claims.emplace_back(begin, end);
      return std::vector<ByteRange>{{begin, end}};
    };
    request.progress = [&](uint64_t done, uint64_t) { progress.push_back(done); };
    if (readers) request.readers = [] { return true; };
    FillResult result;
    ASSERT_TRUE(directory->Fill(source, request, &result).ok());
    EXPECT_EQ(result.outcome, FillOutcome::kFilled);
    CacheLease lease;
    ASSERT_TRUE(directory->OpenEntry(source, &lease).ok());
    std::string copy;
    ASSERT_TRUE(ReadFileToString(lease.path, &copy).ok());
    EXPECT_TRUE(copy == bytes);
    uint64_t largest = 0;
    for (const ByteRange& claim : claims) largest = std::max(largest, claim.second - claim.first);
    EXPECT_EQ(largest, readers ? uint64_t{1} << 20 : uint64_t{16} << 20);
    ASSERT_GE(claims.size(), 5u);
    // Without readers: 1, 2, 4 MiB, then 9 (up to the first writeback window)
    // and 16.
    EXPECT_EQ(claims[3].second - claims[3].first, readers ? uint64_t{1} << 20 : uint64_t{9} << 20);
    EXPECT_EQ(claims[4].second - claims[4].first, readers ? uint64_t{1} << 20 : uint64_t{16} << 20);
    for (int i = 0; i < 3; ++i) {
      const uint64_t expected = readers ? uint64_t{1} << 20 : uint64_t{1} << (20 + i);
      EXPECT_EQ(claims[i].second - claims[i].first, expected);
    }
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), size);
    uint64_t step = 0, last = 0;
    for (uint64_t done : progress) {
      EXPECT_GE(done, last);
      step = std::max(step, done - last);
      last = done;
    }
    EXPECT_EQ(step, readers ? uint64_t{512} << 10 : uint64_t{4} << 20);
  }
}

TEST(ByteRangesTest, AddRemoveCoverAndGaps) {
  ByteRanges ranges;
  ranges.Add(10, 20);
  ranges.Add(30, 40);
  ranges.Add(20, 25);  // touches: merged
  EXPECT_TRUE(ranges.Covers(10, 25));
  EXPECT_FALSE(ranges.Covers(10, 26));
  EXPECT_TRUE(ranges.Overlaps(24, 31));
  EXPECT_FALSE(ranges.Overlaps(25, 30));
  EXPECT_EQ(ranges.Gaps(0, 50),
            (std::vector<ByteRange>{{0, 10}, {25, 30}, {40, 50}}));
  ranges.Remove(12, 35);
  EXPECT_EQ(ranges.Gaps(0, 50), (std::vector<ByteRange>{{0, 10}, {12, 35}, {40, 50}}));
  EXPECT_EQ(ranges.bytes(), 7u);
  ranges.Clear();
  EXPECT_EQ(ranges.Gaps(5, 6), (std::vector<ByteRange>{{5, 6}}));
}

}  // namespace
}  // namespace gpufeed
