// The Loader with ShuffleMode::kNode: the ranks of a job cover the epoch,
// a state saved under one node count resumes under another, and a state
// saved after such a resume is rebuilt exactly.
#include <gtest/gtest.h>

#include <set>

#include "gpufeed/loader.h"
#include "gpufeed/writer.h"
#include "pack_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

constexpr int kImages = 60;

class NodeLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string folder = JoinPath(dir_.path(), "folder");
    ASSERT_NO_FATAL_FAILURE(
        WriteJpegFolder(folder, kImages, 3, [](int) { return std::make_pair(40, 40); }));
    // Several shards.
    ASSERT_NO_FATAL_FAILURE(PackAndOpen(folder, JoinPath(dir_.path(), "packed"), 12000, &dataset_));
    ASSERT_GE(dataset_->shards().size(), 4u);
  }

  LoaderOptions Options(uint32_t nodes, uint32_t world, uint32_t rank) {
    LoaderOptions options;
    options.batch_size = 4;
    options.num_threads = 1;
    options.image.size = 16;
    options.seed = 9;
    options.shuffle = ShuffleMode::kNode;
    options.num_nodes = nodes;
    options.world_size = world;
    options.rank = rank;
    options.node_rank = rank / (world / nodes);
    return options;
  }

  // Up to `limit` batches of the epoch's rest: their sample ids.
  std::vector<std::vector<uint64_t>> Take(Loader* loader, size_t limit = SIZE_MAX) {
    std::vector<std::vector<uint64_t>> batches;
    Batch batch;
    while (batches.size() < limit) {
      Status status = loader->Next(&batch);
      EXPECT_TRUE(status.ok()) << status.ToString();
      if (!status.ok() || batch.end_of_epoch()) break;
      batches.push_back(batch.sample_ids());
    }
    return batches;
  }

  std::unique_ptr<Loader> Open(const LoaderOptions& options) {
    std::unique_ptr<Loader> loader;
    Status status = Loader::Open(dataset_, options, &loader);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return loader;
  }

  TempDir dir_;
  std::shared_ptr<Dataset> dataset_;
};

TEST_F(NodeLoaderTest, ResumeUnderAnotherNodeCountThenExactly) {
  // 2 nodes x 2 ranks take 2 batches each (4 x 8 = 32 samples).
  std::multiset<uint64_t> delivered;
  LoaderState state;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    std::unique_ptr<Loader> loader = Open(Options(2, 4, rank));
    for (const auto& ids : Take(loader.get(), 2)) delivered.insert(ids.begin(), ids.end());
    state = loader->State();
  }
  EXPECT_EQ(state.consumed, 32u);
  EXPECT_EQ(state.split.num_nodes, 2u);
  EXPECT_EQ(state.split.world_size, 4u);
  EXPECT_TRUE(state.earlier_splits.empty());
  // 3 nodes x 1 rank take one batch each, then save.
  LoaderState second_state;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    std::unique_ptr<Loader> loader = Open(Options(3, 3, rank));
    ASSERT_TRUE(loader->Restore(state).ok());
    for (const auto& ids : Take(loader.get(), 1)) delivered.insert(ids.begin(), ids.end());
    second_state = loader->State();
  }
  EXPECT_EQ(second_state.consumed, 44u);
  ASSERT_EQ(second_state.earlier_splits.size(), 1u);
  EXPECT_EQ(second_state.earlier_splits[0].until, 32u);
  EXPECT_EQ(second_state.earlier_splits[0].split.num_nodes, 2u);
  // The same 3 x 1 split finishes the epoch; twice, identically.
  for (uint32_t rank = 0; rank < 3; ++rank) {
    std::unique_ptr<Loader> loader = Open(Options(3, 3, rank));
    ASSERT_TRUE(loader->Restore(second_state).ok());
    auto rest = Take(loader.get());
    std::unique_ptr<Loader> again = Open(Options(3, 3, rank));
    ASSERT_TRUE(again->Restore(second_state).ok());
    EXPECT_EQ(Take(again.get()), rest) << "rank " << rank;
    for (const auto& ids : rest) delivered.insert(ids.begin(), ids.end());
  }
  // Starting the epoch over draws a fresh order: the history is gone.
  std::unique_ptr<Loader> fresh = Open(Options(3, 3, 0));
  ASSERT_TRUE(fresh->Restore(second_state).ok());
  ASSERT_TRUE(fresh->SetEpoch(second_state.epoch).ok());
  Take(fresh.get(), 4);
  EXPECT_EQ(fresh->State().consumed, 48u);
  EXPECT_TRUE(fresh->State().earlier_splits.empty());
  // 60 samples: 32 + 12, then 16 over 3 ranks (6 each: 2 of padding).
  EXPECT_EQ(std::set<uint64_t>(delivered.begin(), delivered.end()).size(),
            static_cast<size_t>(kImages));
  EXPECT_EQ(delivered.size(), 62u);
}

TEST_F(NodeLoaderTest, BadNodeSplitsAreRefused) {
  std::unique_ptr<Loader> loader;
  LoaderOptions options = Options(2, 4, 1);
  options.num_nodes = 3;  // 4 ranks do not split over 3 nodes
  EXPECT_TRUE(Loader::Open(dataset_, options, &loader).IsInvalidArgument());
  options = Options(2, 4, 1);
  options.node_rank = 1;  // rank 1 is on node 0
  Status status = Loader::Open(dataset_, options, &loader);
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.ToString().find("contiguous"), std::string::npos) << status.ToString();
  // A history that does not fit the dataset.
  ASSERT_TRUE(Loader::Open(dataset_, Options(2, 4, 0), &loader).ok());
  LoaderState state = loader->State();
  state.consumed = 8;
  state.earlier_splits.push_back({4, state.split});
  state.earlier_splits.push_back({2, state.split});
  EXPECT_TRUE(loader->Restore(state).IsInvalidArgument());
}

}  // namespace
}  // namespace gpufeed
