// The loader's tabular kind (TransformKind::kTabular) through the public
// Loader and Batch: MLPerf records (label int32, 13 int32 dense, 26 int32
// sparse) written by NumPy's tofile in two files, every batch's dense
// (B, 13) float32, sparse ids extras()[0] (B, 26) and labels (B,) float32
// compared with what NumPy computes for the same transform, every row once
// per epoch in each shuffle mode, and exact resume.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

constexpr uint64_t kRows = 5000;  // 3100 in part_0.bin, 1900 in part_2.bin
constexpr int kDense = 13;
constexpr int kSparse = 26;

// Writes the records and, under ref/, NumPy's view of the transform:
// plain.* (dense as float32, ids as int64, labels as float32) and
// hashed.* (log1p(max(x, 0)) and the ids floor-modulo sizes[i], as int32).
const char kWriter[] = R"(import os, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(11)
t = np.dtype([('label', '<i4'), ('dense', '<i4', (13,)), ('sparse', '<i4', (26,))])
a = np.zeros(5000, t)
a['label'] = rng.integers(0, 2, 5000)
a['dense'] = rng.integers(-100, 100000, (5000, 13))
a['dense'][:, 0] = rng.integers(-3, 50, 5000)
a['sparse'] = rng.integers(-2**31, 2**31, (5000, 26))
a[:3100].tofile(os.path.join(d, 'data', 'part_0.bin'))
a[3100:].tofile(os.path.join(d, 'data', 'part_2.bin'))
sizes = np.array([(i * 7919) % 100000 + 1 for i in range(26)], np.int64)
r = os.path.join(d, 'ref')
a['dense'].astype(np.float32).tofile(os.path.join(r, 'plain.dense'))
a['sparse'].astype(np.int64).tofile(os.path.join(r, 'plain.sparse'))
a['label'].astype(np.float32).tofile(os.path.join(r, 'labels'))
np.log1p(np.maximum(a['dense'].astype(np.float64), 0)).astype(np.float32).tofile(os.path.join(r, 'hashed.dense'))
(a['sparse'].astype(np.int64) % sizes).astype(np.int32).tofile(os.path.join(r, 'hashed.sparse'))
)";

uint64_t HashSize(int column) { return static_cast<uint64_t>(column) * 7919 % 100000 + 1; }

template <typename T>
std::vector<T> ReadArray(const std::string& path) {
  const std::string bytes = ReadBytes(path);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

class TabularLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CreateDirectories(JoinPath(dir_.path(), "data")).ok());
    ASSERT_TRUE(CreateDirectories(JoinPath(dir_.path(), "ref")).ok());
    const std::string script = JoinPath(dir_.path(), "write.py");
    WriteBytes(script, kWriter);
    const std::string command = "/usr/bin/python3 " + script + " " + dir_.path() + " 2>&1";
    if (std::system(command.c_str()) != 0)
      GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
    const std::string ref = JoinPath(dir_.path(), "ref");
    plain_dense_ = ReadArray<float>(JoinPath(ref, "plain.dense"));
    plain_sparse_ = ReadArray<int64_t>(JoinPath(ref, "plain.sparse"));
    hashed_dense_ = ReadArray<float>(JoinPath(ref, "hashed.dense"));
    hashed_sparse_ = ReadArray<int32_t>(JoinPath(ref, "hashed.sparse"));
    labels_ = ReadArray<float>(JoinPath(ref, "labels"));
    ASSERT_EQ(labels_.size(), kRows);
    ASSERT_EQ(plain_sparse_.size(), kRows * kSparse);

    DatasetOptions options;
    ASSERT_TRUE(ParseFormat("records", &options.format).ok());
    options.tabular.block_bytes = 16000;  // 100 rows a block: 31 + 19 blocks
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(JoinPath(dir_.path(), "data"), options, &dataset);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(dataset->size(), kRows);
    dataset_ = std::move(dataset);
  }

  static LoaderOptions Options(ShuffleMode shuffle, bool hashed) {
    LoaderOptions options;
    options.batch_size = 512;
    options.num_threads = 2;
    options.shuffle = shuffle;
    options.seed = 5;
    options.shuffle_window_shards = 4;
    options.transform = TransformKind::kTabular;
    if (hashed) {
      options.tabular.dense_log1p = true;
      for (int i = 0; i < kSparse; ++i) options.tabular.hash_sizes.push_back(HashSize(i));
      options.tabular.sparse_dtype = TensorDtype::kInt32;
    }
    return options;
  }

  // One epoch's sample ids, checking every row's values against NumPy's.
  std::vector<uint64_t> Epoch(Loader* loader, bool hashed) {
    std::vector<uint64_t> ids;
    Batch batch;
    while (true) {
      Status status = loader->Next(&batch);
      EXPECT_TRUE(status.ok()) << status.ToString();
      if (!status.ok() || batch.end_of_epoch()) break;
      const int64_t b = batch.size();
      EXPECT_EQ(batch.data().dtype, TensorDtype::kFloat32);
      EXPECT_EQ(batch.data().shape, (std::vector<int64_t>{b, kDense}));
      EXPECT_EQ(batch.labels().dtype, TensorDtype::kFloat32);
      EXPECT_EQ(batch.labels().shape, (std::vector<int64_t>{b}));
      if (batch.extras().size() != 1) {
        ADD_FAILURE() << batch.extras().size() << " extra tensors";
        break;
      }
      const Tensor& sparse = batch.extras()[0];
      EXPECT_EQ(sparse.dtype, hashed ? TensorDtype::kInt32 : TensorDtype::kInt64);
      EXPECT_EQ(sparse.shape, (std::vector<int64_t>{b, kSparse}));
      EXPECT_EQ(sparse.device, DeviceKind::kCpu);
      const float* dense = static_cast<const float*>(batch.data().data);
      const float* labels = static_cast<const float*>(batch.labels().data);
      for (int64_t row = 0; row < b; ++row) {
        const uint64_t id = batch.sample_ids()[row];
        if (id >= kRows) {
          ADD_FAILURE() << "sample id " << id;
          continue;
        }
        const float* want_dense = (hashed ? hashed_dense_ : plain_dense_).data() + id * kDense;
        // Bit-equal float32 values (the same rounding as NumPy's).
        EXPECT_EQ(std::memcmp(dense + row * kDense, want_dense, kDense * sizeof(float)), 0)
            << "dense of row " << id;
        if (hashed) {
          EXPECT_EQ(std::memcmp(static_cast<const int32_t*>(sparse.data) + row * kSparse,
                                hashed_sparse_.data() + id * kSparse, kSparse * 4),
                    0)
              << "sparse of row " << id;
        } else {
          EXPECT_EQ(std::memcmp(static_cast<const int64_t*>(sparse.data) + row * kSparse,
                                plain_sparse_.data() + id * kSparse, kSparse * 8),
                    0)
              << "sparse of row " << id;
        }
        EXPECT_EQ(labels[row], labels_[id]) << "label of row " << id;
        ids.push_back(id);
      }
    }
    return ids;
  }

  static void ExpectEachOnce(const std::vector<uint64_t>& ids) {
    ASSERT_EQ(ids.size(), kRows);
    std::vector<int> seen(kRows, 0);
    for (uint64_t id : ids) ++seen[id];
    for (uint64_t i = 0; i < kRows; ++i) ASSERT_EQ(seen[i], 1) << "row " << i;
  }

  TempDir dir_;
  std::shared_ptr<const Dataset> dataset_;
  std::vector<float> plain_dense_, hashed_dense_, labels_;
  std::vector<int64_t> plain_sparse_;
  std::vector<int32_t> hashed_sparse_;
};

TEST_F(TabularLoaderTest, BlockShuffleGivesEveryRowOncePerEpochAsNumpy) {
  for (bool hashed : {false, true}) {
    SCOPED_TRACE(hashed ? "log1p, hashed, int32" : "plain");
    std::unique_ptr<Loader> loader;
    Status status = Loader::Open(dataset_, Options(ShuffleMode::kBlock, hashed), &loader);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(loader->batches_per_epoch(), 10u);  // 9 of 512, then 392
    std::vector<uint64_t> first = Epoch(loader.get(), hashed);
    ExpectEachOnce(first);
    // Another epoch: the same rows in another order.
    std::vector<uint64_t> second = Epoch(loader.get(), hashed);
    ExpectEachOnce(second);
    EXPECT_NE(first, second);
    // Blocks, not single rows: the order is not the storage order, but
    // runs of consecutive rows from one block come together.
    std::vector<uint64_t> sorted(kRows);
    for (uint64_t i = 0; i < kRows; ++i) sorted[i] = i;
    EXPECT_NE(first, sorted);
    const LoaderStats stats = loader->Stats();
    EXPECT_FALSE(stats.verdict.empty());
    EXPECT_EQ(stats.skipped, 0u);
  }
}

TEST_F(TabularLoaderTest, StorageOrderWithoutShuffleAndEveryRowOnceWithGlobalShuffle) {
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kNone, true), &loader).ok());
  std::vector<uint64_t> ids = Epoch(loader.get(), true);
  ASSERT_EQ(ids.size(), kRows);
  for (uint64_t i = 0; i < kRows; ++i) ASSERT_EQ(ids[i], i);
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kGlobal, false), &loader).ok());
  ExpectEachOnce(Epoch(loader.get(), false));
}

TEST_F(TabularLoaderTest, RanksTakeEveryRowOnceAndResumeExactly) {
  // Two ranks, block shuffle: 5000 = 2 x 2500, no padding.
  std::vector<uint64_t> all;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    LoaderOptions options = Options(ShuffleMode::kBlock, false);
    options.rank = rank;
    options.world_size = 2;
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(Loader::Open(dataset_, options, &loader).ok());
    std::vector<uint64_t> ids = Epoch(loader.get(), false);
    EXPECT_EQ(ids.size(), kRows / 2);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  ExpectEachOnce(all);
  // Resume after 3 batches: exactly the rest of the epoch.
  std::unique_ptr<Loader> whole;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock, true), &whole).ok());
  std::vector<uint64_t> expected = Epoch(whole.get(), true);
  std::unique_ptr<Loader> first;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock, true), &first).ok());
  Batch batch;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->Next(&batch).ok());
  const LoaderState state = first->State();
  EXPECT_EQ(state.consumed, 3u * 512);
  std::unique_ptr<Loader> second;
  ASSERT_TRUE(Loader::Open(dataset_, Options(ShuffleMode::kBlock, true), &second).ok());
  ASSERT_TRUE(second->Restore(state).ok());
  EXPECT_EQ(Epoch(second.get(), true),
            std::vector<uint64_t>(expected.begin() + 3 * 512, expected.end()));
}

// A batch larger than a worker's run (16,384 rows) is written by the
// workers together, a part each: every row lands at its place in the batch,
// so two workers give the batches one worker gives, row for row. Records
// written here: row i holds label i % 2, dense i * 13 + j, ids i * 26 + j.
TEST(TabularLargeBatchTest, ABatchLargerThanARunIsWrittenByTheWorkersTogether) {
  constexpr uint64_t kManyRows = 50000;
  TempDir dir;
  std::string bytes(kManyRows * 160, '\0');
  for (uint64_t i = 0; i < kManyRows; ++i) {
    int32_t fields[40];
    fields[0] = static_cast<int32_t>(i % 2);
    for (int j = 0; j < kDense; ++j) fields[1 + j] = static_cast<int32_t>(i * kDense + j);
    for (int j = 0; j < kSparse; ++j) fields[14 + j] = static_cast<int32_t>(i * kSparse + j);
    std::memcpy(&bytes[i * 160], fields, 160);
  }
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "data")).ok());
  WriteBytes(JoinPath(dir.path(), "data/part_0.bin"), bytes);
  DatasetOptions dataset_options;
  ASSERT_TRUE(ParseFormat("records", &dataset_options.format).ok());
  dataset_options.tabular.block_bytes = 160 * 3000;  // 17 blocks
  std::unique_ptr<Dataset> opened;
  Status status = Dataset::Open(JoinPath(dir.path(), "data"), dataset_options, &opened);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::shared_ptr<const Dataset> dataset = std::move(opened);

  auto epoch_ids = [&](int threads) {
    LoaderOptions options;
    options.batch_size = 40000;  // a batch of three runs (16,384, 16,384, 7,232), then 10,000
    options.num_threads = threads;
    options.shuffle = ShuffleMode::kBlock;
    options.seed = 3;
    options.transform = TransformKind::kTabular;
    std::unique_ptr<Loader> loader;
    Status opened_status = Loader::Open(dataset, options, &loader);
    EXPECT_TRUE(opened_status.ok()) << opened_status.ToString();
    std::vector<uint64_t> ids;
    if (!opened_status.ok()) return ids;
    Batch batch;
    std::vector<int64_t> sizes;
    while (true) {
      Status next = loader->Next(&batch);
      EXPECT_TRUE(next.ok()) << next.ToString();
      if (!next.ok() || batch.end_of_epoch()) break;
      const int64_t b = batch.size();
      sizes.push_back(b);
      const float* dense = static_cast<const float*>(batch.data().data);
      const int64_t* sparse = static_cast<const int64_t*>(batch.extras().at(0).data);
      const float* labels = static_cast<const float*>(batch.labels().data);
      for (int64_t row = 0; row < b; ++row) {
        const uint64_t id = batch.sample_ids()[row];
        bool same = labels[row] == static_cast<float>(id % 2);
        for (int j = 0; j < kDense; ++j) {
          same = same && dense[row * kDense + j] == static_cast<float>(id * kDense + j);
        }
        for (int j = 0; j < kSparse; ++j) {
          same = same && sparse[row * kSparse + j] == static_cast<int64_t>(id * kSparse + j);
        }
        if (!same) {
          ADD_FAILURE() << "row " << row << " of a batch holds another row than sample " << id;
          return ids;
        }
        ids.push_back(id);
      }
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{40000, 10000}));
    return ids;
  };
  const std::vector<uint64_t> two = epoch_ids(2);
  ASSERT_EQ(two.size(), kManyRows);
  std::vector<int> seen(kManyRows, 0);
  for (uint64_t id : two) ++seen[id];
  for (uint64_t i = 0; i < kManyRows; ++i) ASSERT_EQ(seen[i], 1) << "row " << i;
  EXPECT_EQ(epoch_ids(1), two);
}

TEST_F(TabularLoaderTest, HashSizesOfTheWrongLengthAreRefused) {
  LoaderOptions options = Options(ShuffleMode::kBlock, false);
  options.tabular.hash_sizes.assign(25, 1000);
  std::unique_ptr<Loader> loader;
  Status status = Loader::Open(dataset_, options, &loader);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("26 sparse columns"), std::string::npos) << status.ToString();
  options.tabular.hash_sizes.assign(26, 1000);
  options.tabular.hash_sizes[7] = 0;
  EXPECT_EQ(Loader::Open(dataset_, options, &loader).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace gpufeed
