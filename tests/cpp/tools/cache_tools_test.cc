// The cache tools (src/tools/cache_tools.cc, include/gpufeed/cache.h):
// stat, clear, warm and checkpoints, on real cache directories. The cache
// as datasets read through it: tests/cpp/storage/cache_test.cc.
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

class CacheToolsTest : public ::testing::Test {
 protected:
  void SetUp() override { cache_dir_ = JoinPath(dir_.path(), "cache"); }

  // `count` samples of 1,500 bytes packed into RecordIO shards of ~6 KB at
  // dir/<name>; returns the path and sets *shards.
  std::string PackedDataset(const std::string& name, int count, uint64_t* shards) {
    std::string files = JoinPath(dir_.path(), name + "-files");
    EXPECT_TRUE(CreateDirectories(files).ok());
    std::string list;
    for (int i = 0; i < count; ++i) {
      std::string file = "s" + std::to_string(i) + ".bin";
      WriteBytes(JoinPath(files, file), std::string(1500, static_cast<char>('a' + i % 26)));
      list += file + "\t" + std::to_string(i % 3) + "\n";
    }
    WriteBytes(JoinPath(files, "list.txt"), list);
    std::string packed = JoinPath(dir_.path(), name);
    PackOptions pack;
    pack.shard_size = 6000;
    PackSummary summary;
    EXPECT_TRUE(Pack(JoinPath(files, "list.txt"), packed, pack, &summary).ok());
    *shards = summary.shards;
    return packed;
  }

  CacheOptions Options(uint64_t capacity = 64 << 20) const {
    CacheOptions options;
    options.cache_dir = cache_dir_;
    options.capacity = capacity;
    return options;
  }

  // A checkpoint file of `size` bytes with mtime `seconds`.
  std::string Checkpoint(const std::string& directory, const std::string& name, size_t size,
                         int64_t seconds) {
    std::string path = JoinPath(directory, name);
    WriteBytes(path, std::string(size, 'c'));
    struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    return path;
  }

  TempDir dir_;
  std::string cache_dir_;
};

TEST_F(CacheToolsTest, InspectingAMissingCacheIsNotFoundAndCreatesNothing) {
  CacheReport report;
  EXPECT_TRUE(CacheStat(cache_dir_, &report).IsNotFound());
  uint64_t removed = 1, in_use = 1;
  EXPECT_TRUE(CacheClear(cache_dir_, "", &removed, &in_use).IsNotFound());
  std::string cached;
  EXPECT_TRUE(CacheLatestCheckpoint(dir_.path(), cache_dir_, &cached).IsNotFound());
  EXPECT_FALSE(PathExists(cache_dir_));
}

TEST_F(CacheToolsTest, WarmCopiesEveryShardOnceAndReportsItsProgress) {
  uint64_t shards = 0;
  std::string packed = PackedDataset("packed", 20, &shards);
  ASSERT_GT(shards, 2u);
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(packed, Options(),
                        [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); },
                        &summary)
                  .ok());
  EXPECT_EQ(summary.shards, shards);
  EXPECT_EQ(summary.filled, shards);
  EXPECT_EQ(summary.already_cached, 0u);
  EXPECT_EQ(summary.skipped, 0u);
  EXPECT_GT(summary.bytes_copied, 20u * 1500);
  // Progress: from 0 to the total, never backwards, from this thread.
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front().first, 0u);
  EXPECT_EQ(calls.back().first, calls.back().second);
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].first, calls[i - 1].first) << i;
    EXPECT_EQ(calls[i].second, calls.front().second) << i;
  }
  // Again: everything is there already.
  ASSERT_TRUE(CacheWarm(packed, Options(), nullptr, &summary).ok());
  EXPECT_EQ(summary.shards, shards);
  EXPECT_EQ(summary.filled, 0u);
  EXPECT_EQ(summary.already_cached, shards);
  EXPECT_EQ(summary.bytes_copied, 0u);

  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  // Each shard's .rec and .idx (the manifest identifies both).
  EXPECT_EQ(report.entries, 2 * shards);
  EXPECT_EQ(report.fills_in_progress, 0u);
  EXPECT_EQ(report.leased_entries, 0u);
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_EQ(report.datasets[0].entries, 2 * shards);
  EXPECT_EQ(report.datasets[0].bytes, report.bytes);
  EXPECT_EQ(report.datasets[0].policy, "train");
  EXPECT_TRUE(EndsWith(report.datasets[0].dataset, "/packed")) << report.datasets[0].dataset;
}

TEST_F(CacheToolsTest, WarmRefusesNoCacheDirectoryAndAPinnedDatasetTooLarge) {
  uint64_t shards = 0;
  std::string packed = PackedDataset("packed", 12, &shards);
  CacheWarmSummary summary;
  Status status = CacheWarm(packed, CacheOptions(), nullptr, &summary);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  CacheOptions pinned = Options(/*capacity=*/4000);
  pinned.policy = CachePolicy::kPinned;
  status = CacheWarm(packed, pinned, nullptr, &summary);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("pinned"), std::string::npos) << status.ToString();
  EXPECT_EQ(summary.filled, 0u);
  // A missing dataset is the open's error.
  status = CacheWarm(JoinPath(dir_.path(), "nothing"), Options(), nullptr, &summary);
  EXPECT_FALSE(status.ok());
}

TEST_F(CacheToolsTest, ClearRemovesOneDatasetsEntriesOrAll) {
  uint64_t a_shards = 0, b_shards = 0;
  std::string a = PackedDataset("a", 12, &a_shards);
  std::string b = PackedDataset("b", 20, &b_shards);
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(a, Options(), nullptr, &summary).ok());
  ASSERT_TRUE(CacheWarm(b, Options(), nullptr, &summary).ok());
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  ASSERT_EQ(report.entries, 2 * (a_shards + b_shards));
  ASSERT_EQ(report.datasets.size(), 2u);

  uint64_t removed = 0, in_use = 0;
  ASSERT_TRUE(CacheClear(cache_dir_, a, &removed, &in_use).ok());
  EXPECT_EQ(removed, 2 * a_shards);
  EXPECT_EQ(in_use, 0u);
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 2 * b_shards);
  // b's entries are all that is left, and its counters stay.
  uint64_t b_entries = 0;
  for (const CacheDatasetReport& dataset : report.datasets) {
    if (EndsWith(dataset.dataset, "/b")) b_entries = dataset.entries;
    if (EndsWith(dataset.dataset, "/a")) EXPECT_EQ(dataset.entries, 0u);
  }
  EXPECT_EQ(b_entries, 2 * b_shards);

  ASSERT_TRUE(CacheClear(cache_dir_, "", &removed, &in_use).ok());
  EXPECT_EQ(removed, 2 * b_shards);
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 0u);
  EXPECT_EQ(report.bytes, 0u);
  // Nothing left: clearing again removes nothing.
  ASSERT_TRUE(CacheClear(cache_dir_, "", &removed, &in_use).ok());
  EXPECT_EQ(removed, 0u);
}

TEST_F(CacheToolsTest, CheckpointsKeepTheNewestAndSkipARewrittenSource) {
  std::string checkpoints = JoinPath(dir_.path(), "ckpt");
  ASSERT_TRUE(CreateDirectories(checkpoints).ok());
  std::string cached;
  EXPECT_TRUE(CachePutCheckpoint(Checkpoint(checkpoints, "x.pt", 10, 500), cache_dir_, 0, &cached)
                  .IsInvalidArgument());
  std::string first = Checkpoint(checkpoints, "step1.pt", 3000, 1000);
  std::string second = Checkpoint(checkpoints, "step2.pt", 4000, 2000);
  std::string first_copy, second_copy;
  ASSERT_TRUE(CachePutCheckpoint(first, cache_dir_, 2, &first_copy).ok());
  ASSERT_TRUE(CachePutCheckpoint(second, cache_dir_, 2, &second_copy).ok());
  EXPECT_EQ(ReadBytes(first_copy), ReadBytes(first));
  EXPECT_EQ(ReadBytes(second_copy), ReadBytes(second));
  // Putting the same file again is the same copy.
  ASSERT_TRUE(CachePutCheckpoint(second, cache_dir_, 2, &cached).ok());
  EXPECT_EQ(cached, second_copy);

  std::string latest, source;
  ASSERT_TRUE(CacheLatestCheckpoint(checkpoints, cache_dir_, &latest, &source).ok());
  EXPECT_EQ(latest, second_copy);
  EXPECT_EQ(source, second);
  // Another directory has none.
  EXPECT_TRUE(CacheLatestCheckpoint(dir_.path(), cache_dir_, &latest).IsNotFound());
  // The newest source rewritten since: its copy is not it any more.
  Checkpoint(checkpoints, "step2.pt", 4100, 2500);
  ASSERT_TRUE(CacheLatestCheckpoint(checkpoints, cache_dir_, &latest, &source).ok());
  EXPECT_EQ(latest, first_copy);
  EXPECT_EQ(source, first);
  // A source that is gone leaves its copy as the one to restart from.
  ASSERT_EQ(std::remove(second.c_str()), 0);
  ASSERT_TRUE(CacheLatestCheckpoint(checkpoints, cache_dir_, &latest, &source).ok());
  EXPECT_EQ(latest, second_copy);
  // keep=1: putting a newer one removes the older copies.
  std::string third = Checkpoint(checkpoints, "step3.pt", 2000, 3000);
  std::string third_copy;
  ASSERT_TRUE(CachePutCheckpoint(third, cache_dir_, 1, &third_copy).ok());
  EXPECT_TRUE(PathExists(third_copy));
  EXPECT_FALSE(PathExists(first_copy));
  EXPECT_FALSE(PathExists(second_copy));
  // Checkpoints are reported under their directory, with their policy.
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_EQ(report.datasets[0].policy, "checkpoint");
  EXPECT_EQ(report.datasets[0].entries, 1u);
}

}  // namespace
}  // namespace gpufeed
