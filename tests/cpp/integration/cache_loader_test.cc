// The loader through the node cache: the same batches with and without it,
// every shard's copy used from the second epoch on. It needs the pipeline
// and the cache tools, the two top layers (moved from
// tests/cpp/storage/cache_test.cc, whose binary links the tools library).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "pack_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

DatasetOptions CachedOptions(const std::string& cache_dir, uint64_t capacity) {
  DatasetOptions options;
  options.cache.cache_dir = cache_dir;
  options.cache.capacity = capacity;
  return options;
}

TEST(CacheTest, TheLoaderDeliversTheSameBatchesThroughTheCache) {
  TempDir dir_;
  const std::string source_ = JoinPath(dir_.path(), "source");
  const std::string cache_dir_ = JoinPath(dir_.path(), "cache");
  std::string folder = JoinPath(dir_.path(), "folder");
  ASSERT_NO_FATAL_FAILURE(WriteJpegFolder(folder, 30, 3, [](int i) {
    return std::make_pair(40 + i % 9, 36 + i % 7);
  }));
  PackSummary packed;
  ASSERT_NO_FATAL_FAILURE(PackAndOpen(folder, source_, 12000, nullptr, &packed));
  ASSERT_GT(packed.shards, 2u);
  LoaderOptions options;
  options.batch_size = 4;
  options.num_threads = 2;
  options.image.size = 24;
  options.seed = 3;
  options.shuffle = ShuffleMode::kBlock;
  options.shuffle_window_shards = 2;
  auto epoch = [](Loader* loader, uint64_t number) {
    std::vector<std::string> batches;
    EXPECT_TRUE(loader->SetEpoch(number).ok());
    Batch batch;
    while (loader->Next(&batch).ok() && !batch.end_of_epoch()) {
      batches.emplace_back(static_cast<const char*>(batch.data().data), batch.data().bytes());
    }
    return batches;
  };
  std::unique_ptr<Dataset> plain_dataset;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain_dataset).ok());
  std::unique_ptr<Loader> plain;
  ASSERT_TRUE(Loader::Open(std::shared_ptr<const Dataset>(std::move(plain_dataset)), options,
                           &plain)
                  .ok());
  std::unique_ptr<Dataset> cached_dataset;
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 1 << 20), &cached_dataset).ok());
  std::unique_ptr<Loader> cached;
  ASSERT_TRUE(Loader::Open(std::shared_ptr<const Dataset>(std::move(cached_dataset)), options,
                           &cached)
                  .ok());
  for (uint64_t number = 0; number < 3; ++number) {
    EXPECT_EQ(epoch(plain.get(), number), epoch(cached.get(), number)) << "epoch " << number;
    if (number == 0) {
      // Whatever the background fills have not finished yet: later epochs
      // then read every shard from its copy.
      CacheWarmSummary summary;
      ASSERT_TRUE(CacheWarm(source_, CachedOptions(cache_dir_, 1 << 20).cache, nullptr, &summary)
                      .ok());
    }
  }
  cached.reset();
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  // Each shard's .rec and .idx (the manifest identifies both: lazy opens).
  EXPECT_EQ(report.entries, 2 * packed.shards);
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_GT(report.datasets[0].hits, 0u);
}

}  // namespace
}  // namespace gpufeed
