// Embedding rows delivered with tabular batches (LoaderOptions::embeddings)
// through the public Loader: MLPerf-style records written here (label, 13
// dense, 26 sparse int32) and two raw tables (float32 and int8) on disk.
// Every row's embeddings equal the table file's row of its id (the stored
// id floor-modulo the hash size) and a direct EmbeddingTable::Lookup of the
// batch's sparse column, for int64 and int32 ids and every shuffle mode;
// ids outside a table fail their sample (or are skipped); bad options are
// refused at Open.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpufeed/batch.h"
#include "gpufeed/dataset.h"
#include "gpufeed/embedding.h"
#include "gpufeed/loader.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

constexpr uint64_t kRows = 3000;  // 1700 in part_0.bin, 1300 in part_1.bin
constexpr int kDense = 13;
constexpr int kSparse = 26;
constexpr int kFields = 1 + kDense + kSparse;
constexpr int64_t kTableRows = 997;
// Column kInRange holds ids below kTableRows, except in the rows kBadRow
// picks (ids past the table's end).
constexpr int kInRange = 5;
bool BadRow(uint64_t row) { return row % 397 == 11; }

int64_t FloorMod(int64_t value, int64_t size) { return ((value % size) + size) % size; }

class EmbeddingLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 random(7);
    std::uniform_int_distribution<int32_t> any(INT32_MIN, INT32_MAX);
    rows_.assign(kRows * kFields, 0);
    for (uint64_t row = 0; row < kRows; ++row) {
      int32_t* fields = &rows_[row * kFields];
      fields[0] = static_cast<int32_t>(random() % 2);
      for (int i = 1; i < kFields; ++i) fields[i] = any(random);
      fields[1 + kDense + kInRange] =
          static_cast<int32_t>(BadRow(row) ? kTableRows + static_cast<int64_t>(row)
                                           : static_cast<int64_t>(random() % kTableRows));
    }
    ASSERT_TRUE(CreateDirectories(JoinPath(dir_.path(), "data")).ok());
    const char* bytes = reinterpret_cast<const char*>(rows_.data());
    const size_t row_bytes = kFields * sizeof(int32_t);
    WriteBytes(JoinPath(dir_.path(), "data/part_0.bin"), std::string(bytes, 1700 * row_bytes));
    WriteBytes(JoinPath(dir_.path(), "data/part_1.bin"),
               std::string(bytes + 1700 * row_bytes, 1300 * row_bytes));
    DatasetOptions options;
    ASSERT_TRUE(ParseFormat("records", &options.format).ok());
    options.tabular.block_bytes = 16000;  // 100 rows a block
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(JoinPath(dir_.path(), "data"), options, &dataset);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ(dataset->size(), kRows);
    dataset_ = std::move(dataset);
    OpenTable("float.emb", 8, TensorDtype::kFloat32, &float_table_, &float_bytes_);
    OpenTable("int8.emb", 20, TensorDtype::kInt8, &int8_table_, &int8_bytes_);
  }

  // A raw table of kTableRows rows whose every byte is distinct enough to
  // tell rows apart.
  void OpenTable(const std::string& name, uint32_t dim, TensorDtype dtype,
                 std::shared_ptr<EmbeddingTable>* table, std::string* bytes) {
    const size_t row_bytes = dim * TensorDtypeSize(dtype);
    bytes->resize(kTableRows * row_bytes);
    for (int64_t row = 0; row < kTableRows; ++row) {
      for (uint32_t j = 0; j < dim; ++j) {
        char* at = &(*bytes)[row * row_bytes + j * TensorDtypeSize(dtype)];
        if (dtype == TensorDtype::kFloat32) {
          const float value = static_cast<float>(row) + static_cast<float>(j) / 64;
          std::memcpy(at, &value, sizeof(value));
        } else {
          *at = static_cast<char>(row * 31 + j);
        }
      }
    }
    const std::string path = JoinPath(dir_.path(), name);
    WriteBytes(path, *bytes);
    EmbeddingTableOptions options;
    options.dim = dim;
    options.dtype = dtype;
    options.cache_bytes = 16 << 10;  // fewer rows than the table: misses and evictions
    Status status = EmbeddingTable::Open(path, options, table);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ASSERT_EQ((*table)->rows(), static_cast<uint64_t>(kTableRows));
  }

  // hashed: every column modulo the tables' size, embeddings of columns 3
  // and 7; else ids as stored and no embeddings (the test gives them).
  LoaderOptions Options(ShuffleMode shuffle, TensorDtype sparse_dtype, bool hashed) const {
    LoaderOptions options;
    options.batch_size = 256;
    options.num_threads = 2;
    options.shuffle = shuffle;
    options.seed = 3;
    options.transform = TransformKind::kTabular;
    options.tabular.sparse_dtype = sparse_dtype;
    if (hashed) {
      options.tabular.hash_sizes = {static_cast<uint64_t>(kTableRows)};
      options.embeddings = {{3, float_table_}, {7, int8_table_}};
    }
    return options;
  }

  int64_t StoredId(uint64_t row, int column) const {
    return rows_[row * kFields + 1 + kDense + column];
  }

  // Checks batch row `r`'s embeddings against the files and a direct
  // lookup of the batch's own ids.
  void CheckRow(const Batch& batch, const LoaderOptions& options, int64_t r) {
    const uint64_t sample = batch.sample_ids()[r];
    const Tensor& sparse = batch.extras()[0];
    for (size_t l = 0; l < options.embeddings.size(); ++l) {
      const EmbeddingLookup& lookup = options.embeddings[l];
      const int column = static_cast<int>(lookup.column);
      const int64_t id = sparse.dtype == TensorDtype::kInt64
                             ? static_cast<const int64_t*>(sparse.data)[r * kSparse + column]
                             : static_cast<const int32_t*>(sparse.data)[r * kSparse + column];
      const std::vector<uint64_t>& sizes = options.tabular.hash_sizes;
      const int64_t stored = StoredId(sample, column);
      ASSERT_EQ(id,
                sizes.empty()
                    ? stored
                    : FloorMod(stored, static_cast<int64_t>(sizes[sizes.size() == 1 ? 0 : column])))
          << "sample " << sample;
      const size_t row_bytes = lookup.table->row_bytes();
      const char* got = static_cast<const char*>(batch.extras()[1 + l].data) + r * row_bytes;
      const std::string& file = lookup.table == float_table_ ? float_bytes_ : int8_bytes_;
      ASSERT_EQ(std::memcmp(got, file.data() + id * row_bytes, row_bytes), 0)
          << "sample " << sample << ", column " << column << ", id " << id;
      std::string direct(row_bytes, '\0');
      ASSERT_TRUE(lookup.table->Lookup(&id, 1, direct.data()).ok());
      ASSERT_EQ(std::memcmp(got, direct.data(), row_bytes), 0) << "sample " << sample;
    }
  }

  // One epoch: the rows delivered, each checked.
  std::vector<uint64_t> Epoch(Loader* loader, const LoaderOptions& options) {
    std::vector<uint64_t> ids;
    Batch batch;
    while (true) {
      Status status = loader->Next(&batch);
      EXPECT_TRUE(status.ok()) << status.ToString();
      if (!status.ok() || batch.end_of_epoch()) break;
      const int64_t b = batch.size();
      EXPECT_EQ(batch.extras().size(), 1 + options.embeddings.size());
      if (batch.extras().size() != 1 + options.embeddings.size()) break;
      for (size_t l = 0; l < options.embeddings.size(); ++l) {
        const Tensor& plane = batch.extras()[1 + l];
        const EmbeddingTable& table = *options.embeddings[l].table;
        EXPECT_EQ(plane.dtype, table.dtype());
        EXPECT_EQ(plane.shape, (std::vector<int64_t>{b, static_cast<int64_t>(table.dim())}));
        EXPECT_EQ(plane.device, DeviceKind::kCpu);
      }
      for (int64_t r = 0; r < b; ++r) {
        CheckRow(batch, options, r);
        if (HasFatalFailure()) return ids;
        ids.push_back(batch.sample_ids()[r]);
      }
    }
    return ids;
  }

  TempDir dir_;
  std::vector<int32_t> rows_;
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<EmbeddingTable> float_table_, int8_table_;
  std::string float_bytes_, int8_bytes_;
};

TEST_F(EmbeddingLoaderTest, RowsComeWithTheBatchForEveryShuffleAndIdWidth) {
  for (ShuffleMode shuffle : {ShuffleMode::kBlock, ShuffleMode::kGlobal, ShuffleMode::kNone}) {
    for (TensorDtype ids : {TensorDtype::kInt64, TensorDtype::kInt32}) {
      SCOPED_TRACE("shuffle " + std::to_string(static_cast<int>(shuffle)) + ", ids " +
                   TensorDtypeName(ids));
      const LoaderOptions options = Options(shuffle, ids, true);
      std::unique_ptr<Loader> loader;
      Status status = Loader::Open(dataset_, options, &loader);
      ASSERT_TRUE(status.ok()) << status.ToString();
      std::vector<uint64_t> seen = Epoch(loader.get(), options);
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(seen.size(), kRows);
      std::vector<int> count(kRows, 0);
      for (uint64_t id : seen) ++count[id];
      for (uint64_t i = 0; i < kRows; ++i) ASSERT_EQ(count[i], 1) << "row " << i;
      const LoaderStats stats = loader->Stats();
      EXPECT_EQ(stats.lookup_rows, 2 * kRows);
      EXPECT_GT(stats.lookup_seconds, 0);
      EXPECT_GT(stats.lookup_share, 0);
      EXPECT_LE(stats.lookup_cpu_seconds, stats.lookup_seconds);
      // The tables' own counters: 16 KiB RAM tiers hold part of the rows.
      EXPECT_GE(stats.lookup_ram_hit_rate, 0);
      EXPECT_LT(stats.lookup_ram_hit_rate, 1);
      EXPECT_NE(stats.ToString().find("lookup"), std::string::npos) << stats.ToString();
    }
  }
}

TEST_F(EmbeddingLoaderTest, AnIdOutsideTheTableFailsItsSampleOrIsSkipped) {
  // Unhashed: column kInRange's ids are the table's, but for the bad rows.
  LoaderOptions options = Options(ShuffleMode::kNone, TensorDtype::kInt64, false);
  options.embeddings = {{kInRange, int8_table_}};
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Open(dataset_, options, &loader).ok());
  Batch batch;
  Status status = loader->Next(&batch);  // rows 0-255: row 11 is bad
  EXPECT_EQ(status.code(), Status::Code::kOutOfRange) << status.ToString();
  EXPECT_NE(status.message().find("sample 11"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("sparse column 5"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find(std::to_string(kTableRows + 11)), std::string::npos)
      << status.ToString();
  // Skipped: the bad rows are left out (the batch's planes moved down: every
  // row delivered has its own dense, sparse, labels and embeddings), every
  // good row once, in the rows-from-anywhere path as well.
  // Column 3 hashed into its table, kInRange's ids as stored.
  options.embeddings = {{3, int8_table_}, {kInRange, float_table_}};
  options.on_error = OnError::kSkip;
  options.tabular.hash_sizes.assign(kSparse, uint64_t{1} << 31);
  options.tabular.hash_sizes[3] = kTableRows;
  uint64_t bad = 0;
  for (uint64_t row = 0; row < kRows; ++row) bad += BadRow(row) ? 1 : 0;
  options.max_skipped = static_cast<double>(bad);  // exactly reached: not passed
  for (ShuffleMode shuffle : {ShuffleMode::kNone, ShuffleMode::kGlobal}) {
    options.shuffle = shuffle;
    ASSERT_TRUE(Loader::Open(dataset_, options, &loader).ok());
    std::vector<uint64_t> seen = Epoch(loader.get(), options);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(seen.size(), kRows - bad);
    std::vector<int> count(kRows, 0);
    for (uint64_t id : seen) ++count[id];
    for (uint64_t id = 0; id < kRows; ++id) {
      EXPECT_EQ(count[id], BadRow(id) ? 0 : 1) << "row " << id;
    }
    EXPECT_EQ(loader->Stats().skipped, bad);
    std::vector<SkippedSample> skipped = loader->SkippedSamples();
    EXPECT_EQ(skipped.size(), bad);
    for (const SkippedSample& s : skipped) {
      EXPECT_TRUE(BadRow(s.sample)) << s.sample;
      EXPECT_NE(s.reason.find("OutOfRange"), std::string::npos) << s.reason;
    }
  }
}

TEST_F(EmbeddingLoaderTest, OptionsAreCheckedAtOpen) {
  std::unique_ptr<Loader> loader;
  LoaderOptions options = Options(ShuffleMode::kBlock, TensorDtype::kInt64, true);
  options.transform = TransformKind::kRaw;
  options.raw.length = 16;
  Status status = Loader::Open(dataset_, options, &loader);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("tabular rows only"), std::string::npos) << status.ToString();

  options = Options(ShuffleMode::kBlock, TensorDtype::kInt64, true);
  options.embeddings.push_back({kSparse, float_table_});
  status = Loader::Open(dataset_, options, &loader);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("sparse column 26"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("26 sparse columns"), std::string::npos) << status.ToString();

  options = Options(ShuffleMode::kBlock, TensorDtype::kInt64, true);
  options.embeddings.push_back({4, nullptr});
  status = Loader::Open(dataset_, options, &loader);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("no table for sparse column 4"), std::string::npos);

  options = Options(ShuffleMode::kBlock, TensorDtype::kInt64, true);
  options.embeddings.clear();
  for (uint32_t column = 0; column < 8; ++column)
    options.embeddings.push_back({column, float_table_});
  status = Loader::Open(dataset_, options, &loader);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  options.embeddings.pop_back();  // 7: one plane each beside the ids
  status = Loader::Open(dataset_, options, &loader);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Epoch(loader.get(), options).size(), kRows);
}

}  // namespace
}  // namespace gpufeed
