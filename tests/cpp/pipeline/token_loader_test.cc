// The loader's token-window transform: (x, y) batches of shape (B, seq_len)
// from a headerless token file split in two (a window spans both), every
// window once per epoch for each shuffle mode, through the read engine
// (block reads shared by their windows) and without it; exact resume.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <utility>
#include <vector>
#include <chrono>
#include <thread>

#include "gpufeed/loader.h"
#include "pipeline/loader_factory.h"
#include "test_util.h"
#include "token_test_util.h"
#include "gpufeed/writer.h"
#include "util/path.h"

namespace gpufeed {
namespace {

constexpr uint32_t kSeqLen = 24;

class TokenLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Token t is t % 65521 (uint16): every window is known from its start.
    for (uint32_t t = 0; t < 9000; ++t) stream_.push_back(static_cast<uint16_t>(t % 65521));
    std::string bytes(reinterpret_cast<const char*>(stream_.data()), stream_.size() * 2);
    WriteBytes(JoinPath(dir_.path(), "a.bin"), bytes.substr(0, 5001 * 2));
    WriteBytes(JoinPath(dir_.path(), "b.bin"), bytes.substr(5001 * 2));
    DatasetOptions options;
    options.format = DatasetFormat::kTokens;
    options.tokens.token_dtype = TokenDtype::kUint16;
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(dir_.path(), options, &dataset);
    ASSERT_TRUE(status.ok()) << status.ToString();
    dataset_ = std::move(dataset);
  }

  LoaderOptions Options(ShuffleMode shuffle) {
    LoaderOptions options;
    options.batch_size = 16;
    options.num_threads = 3;
    options.shuffle = shuffle;
    options.seed = 7;
    options.transform = TransformKind::kTokenWindows;
    options.tokens.seq_len = kSeqLen;
    options.tokens.block_bytes = 1000;  // 20 windows a block
    return options;
  }

  // Window starts of one epoch's rows, checking x and y against the stream.
  std::vector<uint64_t> Epoch(Loader* loader) {
    std::vector<uint64_t> starts;
    Batch batch;
    while (true) {
      Status status = loader->Next(&batch);
      EXPECT_TRUE(status.ok()) << status.ToString();
      if (!status.ok() || batch.end_of_epoch()) break;
      EXPECT_EQ(batch.data().shape, (std::vector<int64_t>{batch.size(), kSeqLen}));
      EXPECT_EQ(batch.labels().shape, (std::vector<int64_t>{batch.size(), kSeqLen}));
      const int64_t* x = static_cast<const int64_t*>(batch.data().data);
      const int64_t* y = static_cast<const int64_t*>(batch.labels().data);
      for (int64_t row = 0; row < batch.size(); ++row) {
        uint64_t start = batch.sample_ids()[row] * kSeqLen;
        for (uint32_t j = 0; j < kSeqLen; ++j) {
          EXPECT_EQ(x[row * kSeqLen + j], stream_[start + j]);
          EXPECT_EQ(y[row * kSeqLen + j], stream_[start + j + 1]);
        }
        starts.push_back(start);
      }
    }
    return starts;
  }

  TempDir dir_;
  std::vector<uint16_t> stream_;
  std::shared_ptr<Dataset> dataset_;
};

TEST_F(TokenLoaderTest, EveryWindowOncePerEpochInEachMode) {
  const uint64_t windows = (stream_.size() - 1) / kSeqLen;
  for (ShuffleMode shuffle : {ShuffleMode::kGlobal, ShuffleMode::kBlock, ShuffleMode::kNone}) {
    // prefetch 8: a worker's run spans up to 4 batches.
    for (auto [engine, prefetch] : {std::pair{true, 2}, {false, 2}, {true, 8}}) {
      LoaderOptions options = Options(shuffle);
      options.prefetch = prefetch;
      LoaderInternals internals;
      internals.use_read_engine = engine;
      std::unique_ptr<Loader> loader;
      ASSERT_TRUE(LoaderFactory::Open(dataset_, options, internals, &loader).ok());
      std::vector<uint64_t> starts = Epoch(loader.get());
      ASSERT_EQ(starts.size(), windows);
      EXPECT_EQ(std::set<uint64_t>(starts.begin(), starts.end()).size(), windows);
      if (shuffle == ShuffleMode::kNone) {
        for (uint64_t i = 0; i < windows; ++i) EXPECT_EQ(starts[i], i * kSeqLen);
      }
      if (engine) {
        // Block reads: far fewer requests than windows.
        LoaderStats stats = loader->Stats();
        if (shuffle != ShuffleMode::kGlobal) EXPECT_LT(stats.io_requests, windows / 4);
      }
    }
  }
}

// Block shuffle holds a shuffle window's blocks while the next window's
// are read. With read buffers for fewer blocks than that (here four, for a
// window of eight), a worker holding the current window's windows waited
// for a read that waited for those buffers, until io_timeout failed the
// epoch. The loader now raises the buffers to what the window needs.
TEST_F(TokenLoaderTest, AShuffleWindowLargerThanTheReadBuffersCompletesItsEpoch) {
  const uint64_t windows = (stream_.size() - 1) / kSeqLen;
  for (uint32_t window_blocks : {8u, 16u}) {
    LoaderOptions options = Options(ShuffleMode::kBlock);
    options.shuffle_window_shards = window_blocks;
    options.io.inflight_bytes = 16 << 10;  // four 4 KiB buffers
    options.io.timeout_seconds = 5;        // a stall fails the test instead of hanging it
    LoaderInternals internals;
    internals.use_read_engine = true;
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(LoaderFactory::Open(dataset_, options, internals, &loader).ok());
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<uint64_t> starts = Epoch(loader.get());
      ASSERT_EQ(starts.size(), windows) << window_blocks << " blocks, epoch " << epoch;
      EXPECT_EQ(std::set<uint64_t>(starts.begin(), starts.end()).size(), windows);
    }
    EXPECT_LT(loader->Stats().io_requests, 2 * windows / 4);  // still one read per block
  }
}

// A block's read is shared by its windows submitted while the read is held,
// so each block must be read once per epoch, whatever the shuffle window:
// block shuffle makes as many reads per epoch as reading in order. Guards
// the epoch's last windows (submitted once the read-ahead window reaches
// them, not when a worker claims them) and a read-ahead that covers the lag
// of chunked submission: a window submitted after the rest of its block was
// released would read the block again.
TEST_F(TokenLoaderTest, EachBlockIsReadOncePerEpoch) {
  const uint64_t windows = (stream_.size() - 1) / kSeqLen;
  LoaderInternals internals;
  internals.use_read_engine = true;
  auto reads_per_epoch = [&](ShuffleMode shuffle, uint32_t window_blocks) {
    LoaderOptions options = Options(shuffle);
    options.shuffle_window_shards = window_blocks;
    std::unique_ptr<Loader> loader;
    std::vector<uint64_t> reads;
    EXPECT_TRUE(LoaderFactory::Open(dataset_, options, internals, &loader).ok());
    if (!loader) return reads;
    uint64_t before = 0;
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      EXPECT_TRUE(loader->SetEpoch(epoch).ok());
      EXPECT_EQ(Epoch(loader.get()).size(), windows);
      const uint64_t now = loader->Stats().io_requests;
      reads.push_back(now - before);
      before = now;
    }
    return reads;
  };
  const std::vector<uint64_t> in_order = reads_per_epoch(ShuffleMode::kNone, 4);
  ASSERT_EQ(in_order.size(), 3u);
  EXPECT_LT(in_order[0], windows / 4);  // block reads
  EXPECT_EQ(in_order, std::vector<uint64_t>(3, in_order[0]));
  for (uint32_t window_blocks : {1u, 2u, 4u, 8u, 32u}) {
    EXPECT_EQ(reads_per_epoch(ShuffleMode::kBlock, window_blocks), in_order)
        << "windows of " << window_blocks << " blocks";
  }
}

// set_epoch(0) right after opening (a training loop's first call) keeps the
// run the loader started when it opened, with the reads it made: the epoch
// is the same as without the call. (How many reads it saves is measured in
// docs/tokens.md.)
TEST_F(TokenLoaderTest, SetEpochAtTheStartKeepsTheRunAndItsOrder) {
  LoaderOptions options = Options(ShuffleMode::kBlock);
  LoaderInternals internals;
  internals.use_read_engine = true;
  std::unique_ptr<Loader> plain;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, internals, &plain).ok());
  const std::vector<uint64_t> expected = Epoch(plain.get());
  ASSERT_FALSE(expected.empty());
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, internals, &loader).ok());
  // The opening run reads ahead and fills batches meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(loader->SetEpoch(0).ok());
  EXPECT_EQ(Epoch(loader.get()), expected);
  // Once delivering began, the same epoch starts over; another epoch too.
  ASSERT_TRUE(loader->SetEpoch(0).ok());
  Batch batch;
  ASSERT_TRUE(loader->Next(&batch).ok());
  ASSERT_TRUE(loader->SetEpoch(0).ok());
  EXPECT_EQ(Epoch(loader.get()), expected);
  ASSERT_TRUE(loader->SetEpoch(1).ok());
  std::vector<uint64_t> next = Epoch(loader.get());
  EXPECT_EQ(next.size(), expected.size());
  EXPECT_NE(next, expected);
}

TEST_F(TokenLoaderTest, ResumesExactlyMidEpoch) {
  std::unique_ptr<Loader> whole;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock), &whole).ok());
  std::vector<uint64_t> expected = Epoch(whole.get());
  std::unique_ptr<Loader> first;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock), &first).ok());
  Batch batch;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(first->Next(&batch).ok());
  LoaderState state = first->State();
  std::unique_ptr<Loader> second;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock), &second).ok());
  ASSERT_TRUE(second->Restore(state).ok());
  std::vector<uint64_t> rest = Epoch(second.get());
  EXPECT_EQ(rest, std::vector<uint64_t>(expected.begin() + 5 * 16, expected.end()));
}

// A position names windows of one length: restoring it under another would
// silently deliver other tokens.
TEST_F(TokenLoaderTest, StateOfAnotherWindowLengthIsRefused) {
  std::unique_ptr<Loader> first;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock), &first).ok());
  Batch batch;
  ASSERT_TRUE(first->Next(&batch).ok());
  LoaderState state = first->State();
  EXPECT_EQ(state.seq_len, Options(ShuffleMode::kBlock).tokens.seq_len);
  EXPECT_EQ(state.samples, first->batches_per_epoch() > 0 ? state.samples : 0);
  LoaderOptions other = Options(ShuffleMode::kBlock);
  other.tokens.seq_len += 1;
  std::unique_ptr<Loader> second;
  ASSERT_TRUE(Loader::Open(dataset_, other, &second).ok());
  Status status = second->Restore(state);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.ToString().find("seq_len"), std::string::npos) << status.ToString();
  // States saved before these fields (0: not recorded) are not checked.
  state.seq_len = 0;
  state.token_block_bytes = 0;
  state.samples = 0;
  EXPECT_TRUE(second->Restore(state).ok());
}

TEST_F(TokenLoaderTest, WrongTransformIsRefused) {
  LoaderOptions options = Options(ShuffleMode::kGlobal);
  options.transform = TransformKind::kImage;
  std::unique_ptr<Loader> loader;
  Status status = Loader::Open(dataset_, options, &loader);
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.ToString().find("token corpus"), std::string::npos);
  options = Options(ShuffleMode::kGlobal);
  options.tokens.dtype = TensorDtype::kFloat32;
  EXPECT_TRUE(Loader::Open(dataset_, options, &loader).IsInvalidArgument());
}

// An indexed corpus (gpufeed.heads beside its manifest) under global
// shuffle: windows are read one token short and completed from the heads,
// with the same x and y as the stream, with and without O_DIRECT.
TEST(TokenLoaderHeadsTest, GlobalShuffleReadsOneTokenLessPerWindowWithTheSameBatches) {
  TempDir dir;
  std::vector<std::vector<uint16_t>> documents(7);
  uint16_t next = 1;
  for (auto& d : documents) {
    for (int t = 0; t < 1000; ++t) d.push_back(next++);
  }
  const std::vector<uint16_t> stream = WriteMegatron(JoinPath(dir.path(), "corpus"), documents);
  std::string manifest_path;
  uint64_t tokens = 0;
  ASSERT_TRUE(WriteTokenManifest(dir.path(), DatasetOptions(), &manifest_path, &tokens).ok());
  std::unique_ptr<Dataset> opened;
  ASSERT_TRUE(Dataset::Open(dir.path(), DatasetOptions(), &opened).ok());
  std::shared_ptr<Dataset> dataset = std::move(opened);
  const uint32_t seq_len = 256;  // 514-byte windows at a 512-byte stride
  const uint64_t windows = (stream.size() - 1) / seq_len;
  for (bool direct : {false, true}) {
    LoaderOptions options;
    options.batch_size = 5;
    options.num_threads = 2;
    options.shuffle = ShuffleMode::kGlobal;
    options.seed = 3;
    options.io.direct_io = direct;
    options.transform = TransformKind::kTokenWindows;
    options.tokens.seq_len = seq_len;
    options.drop_last = false;
    LoaderInternals internals;
    internals.use_read_engine = true;
    std::unique_ptr<Loader> loader;
    Status status = LoaderFactory::Open(dataset, options, internals, &loader);
    ASSERT_TRUE(status.ok()) << status.ToString();
    std::set<uint64_t> seen;
    Batch batch;
    while (true) {
      ASSERT_TRUE(loader->Next(&batch).ok());
      if (batch.end_of_epoch()) break;
      const int64_t* x = static_cast<const int64_t*>(batch.data().data);
      const int64_t* y = static_cast<const int64_t*>(batch.labels().data);
      for (int64_t row = 0; row < batch.size(); ++row) {
        const uint64_t start = batch.sample_ids()[row] * seq_len;
        for (uint32_t j = 0; j < seq_len; ++j) {
          ASSERT_EQ(x[row * seq_len + j], stream[start + j]) << direct << " " << start;
          ASSERT_EQ(y[row * seq_len + j], stream[start + j + 1]) << direct << " " << start;
        }
        seen.insert(start);
      }
    }
    EXPECT_EQ(seen.size(), windows);
    EXPECT_EQ(loader->Stats().bytes_read, windows * seq_len * 2) << direct;
  }
}

}  // namespace
}  // namespace gpufeed
