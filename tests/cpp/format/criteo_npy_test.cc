// criteo_npy (src/format/criteo_npy.h): TorchRec's .npy triplets written
// by NumPy's own np.save, opened by detection and by name, every row
// compared with what np.load gives, and every bad triplet refused naming
// its files.
#include "format/criteo_npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "format/registry.h"
#include "format/tabular.h"
#include "test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// Helpers every script gets: save(stem, dense, sparse, labels) writes a
// triplet into the dataset directory d; expect(stems) writes, into the
// reference directory r, what np.load reads back: each row's stored bytes
// (label, dense, sparse) and its label as float32.
const char kPrelude[] = R"(import os, sys
import numpy as np
d, r = sys.argv[1], sys.argv[2]
def save(stem, dense, sparse, labels):
    np.save(os.path.join(d, stem + '_dense.npy'), dense)
    np.save(os.path.join(d, stem + '_sparse.npy'), sparse)
    np.save(os.path.join(d, stem + '_labels.npy'), labels)
def expect(stems):
    rows, labels = [], []
    for stem in stems:
        D, S, L = (np.load(os.path.join(d, stem + m)) for m in ('_dense.npy', '_sparse.npy', '_labels.npy'))
        L = L.reshape(len(L))
        for i in range(len(D)):
            rows.append(L[i:i + 1].tobytes() + D[i].tobytes() + S[i].tobytes())
            labels.append(float(L[i]))
    open(os.path.join(r, 'rows.bin'), 'wb').write(b''.join(rows))
    np.array(labels, np.float32).tofile(os.path.join(r, 'labels.bin'))
rng = np.random.default_rng(7)
def rows(n, d=13, s=26, dense=np.float32, sparse=np.int64):
    return ((rng.random((n, d)) * 100).astype(dense), rng.integers(0, 2**31 - 1, (n, s)).astype(sparse))
)";

class CriteoNpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = JoinPath(dir_.path(), "criteo");
    reference_ = JoinPath(dir_.path(), "reference");
    ASSERT_TRUE(CreateDirectories(data_).ok());
    ASSERT_TRUE(CreateDirectories(reference_).ok());
  }
  // Runs NumPy code after the prelude; false when NumPy is missing.
  bool Numpy(const std::string& code) {
    const std::string script = JoinPath(dir_.path(), "write.py");
    WriteBytes(script, std::string(kPrelude) + code + "\n");
    const std::string command =
        "/usr/bin/python3 " + script + " " + data_ + " " + reference_ + " 2>&1";
    return std::system(command.c_str()) == 0;
  }
  std::string Member(const std::string& stem, const char* suffix) const {
    return JoinPath(data_, stem + suffix);
  }
  Status Open(std::unique_ptr<Dataset>* dataset, bool by_name = false) {
    DatasetOptions options;
    if (by_name) EXPECT_TRUE(ParseFormat("criteo_npy", &options.format).ok());
    return Dataset::Open(data_, options, dataset);
  }
  // Every row of `dataset` against the reference expect() wrote.
  void ExpectRowsAsNumpy(const Dataset& dataset) {
    const std::string rows = ReadBytes(JoinPath(reference_, "rows.bin"));
    const std::string labels = ReadBytes(JoinPath(reference_, "labels.bin"));
    ASSERT_EQ(labels.size(), dataset.size() * sizeof(float));
    ASSERT_EQ(rows.size() % dataset.size(), 0u);
    const size_t row_bytes = rows.size() / dataset.size();
    Record record;
    for (uint64_t i = 0; i < dataset.size(); ++i) {
      Status status = dataset.Read(i, &record);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ASSERT_EQ(record.data, rows.substr(i * row_bytes, row_bytes)) << "row " << i;
      float label = 0;
      std::memcpy(&label, labels.data() + i * sizeof(float), sizeof(float));
      ASSERT_EQ(record.labels, std::vector<float>{label}) << "row " << i;
      EXPECT_EQ(record.id, i);
    }
  }

  TempDir dir_;
  std::string data_, reference_;
};

#define NEED_NUMPY(code) \
  if (!Numpy(code)) GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3"

TEST(CriteoNpyNaturalOrder, DigitRunsCompareByValue) {
  EXPECT_TRUE(NaturalLess("day_2", "day_10"));
  EXPECT_FALSE(NaturalLess("day_10", "day_2"));
  EXPECT_TRUE(NaturalLess("day_0", "day_1"));
  EXPECT_TRUE(NaturalLess("day_9", "day_10"));
  EXPECT_TRUE(NaturalLess("day", "day_0"));
  EXPECT_TRUE(NaturalLess("a_2_b_10", "a_2_b_11"));
  EXPECT_TRUE(NaturalLess("a_2_b_99", "a_10_b_1"));
  EXPECT_TRUE(NaturalLess("part_000999", "part_1000"));
  // Equal values: the leading zeros decide, and only they.
  EXPECT_TRUE(NaturalLess("day_01", "day_1"));
  EXPECT_FALSE(NaturalLess("day_1", "day_01"));
  EXPECT_FALSE(NaturalLess("day_1", "day_1"));
  EXPECT_TRUE(NaturalLess("day_1", "day_1x"));
  EXPECT_TRUE(NaturalLess("test", "train"));
}

TEST_F(CriteoNpyTest, OpensByDetectionAndByNameInNaturalStemOrder) {
  // day_10 written first: the order is the stems', not the writes'; day_1
  // has (N, 1) labels, the others (N,).
  NEED_NUMPY(R"(
for stem, n in (('day_10', 4), ('day_0', 3), ('day_2', 2), ('day_1', 5)):
    dense, sparse = rows(n)
    labels = rng.integers(0, 2, n).astype(np.int32)
    save(stem, dense, sparse, labels.reshape(n, 1) if stem == 'day_1' else labels)
open(os.path.join(d, 'README.txt'), 'w').write('not a member')
np.save(os.path.join(d, 'day_0_sparse_contig_freq.npy'), np.zeros(3))
expect(['day_0', 'day_1', 'day_2', 'day_10']))");
  for (bool by_name : {false, true}) {
    SCOPED_TRACE(by_name ? "by name" : "detected");
    std::unique_ptr<Dataset> dataset;
    Status status = Open(&dataset, by_name);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_STREQ(FormatName(dataset->format()), "criteo_npy");
    EXPECT_EQ(dataset->format(), kCriteoNpyFormat);
    EXPECT_EQ(dataset->size(), 14u);
    const std::vector<ShardInfo>& shards = dataset->shards();
    ASSERT_EQ(shards.size(), 4u);
    const char* stems[] = {"day_0", "day_1", "day_2", "day_10"};
    const uint64_t counts[] = {3, 5, 2, 4};
    uint64_t first = 0;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(shards[i].path, Member(stems[i], "_dense.npy"));
      EXPECT_EQ(shards[i].first_record, first);
      EXPECT_EQ(shards[i].records, counts[i]);
      uint64_t bytes = 0;
      for (const char* suffix : kCriteoSuffixes) {
        uint64_t size = 0;
        ASSERT_TRUE(FileSizeOf(Member(stems[i], suffix), &size).ok());
        bytes += size;
      }
      EXPECT_EQ(shards[i].bytes, bytes);
      first += counts[i];
    }
    ExpectRowsAsNumpy(*dataset);
    Record record;
    ASSERT_TRUE(dataset->Read(9, &record).ok());  // day_2's second row
    EXPECT_EQ(record.key, Member("day_2", "_dense.npy") + ":1");
    EXPECT_NE(record.source.find(Member("day_2", "_dense.npy") + " at byte offset "),
              std::string::npos)
        << record.source;
    EXPECT_EQ(record.data.size(), 4u + 13 * 4 + 26 * 8);
    EXPECT_TRUE(dataset->Read(14, &record).IsOutOfRange());
  }
}

TEST_F(CriteoNpyTest, SchemaComesFromTheFiles) {
  // int32 dense, int32 sparse of another width, bool labels.
  NEED_NUMPY(R"(
for stem, n in (('day_0', 6), ('day_1', 3)):
    dense, sparse = rows(n, d=4, s=7, dense=np.int32, sparse=np.int32)
    save(stem, dense, sparse, rng.integers(0, 2, n).astype(bool))
expect(['day_0', 'day_1']))");
  std::unique_ptr<Dataset> dataset;
  Status status = Open(&dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const TabularRows* rows = AsTabularRows(*dataset);
  ASSERT_NE(rows, nullptr);
  const TabularSchema& schema = rows->table().schema;
  EXPECT_FALSE(schema.text);
  EXPECT_EQ(schema.dense.type, FieldType::kInt32);
  EXPECT_EQ(schema.dense.count, 4u);
  EXPECT_EQ(schema.sparse.type, FieldType::kInt32);
  EXPECT_EQ(schema.sparse.count, 7u);
  EXPECT_EQ(schema.label.type, FieldType::kBool);
  EXPECT_EQ(schema.label.count, 1u);
  EXPECT_EQ((std::vector<int>{schema.dense.part, schema.sparse.part, schema.label.part}),
            (std::vector<int>{kCriteoDense, kCriteoSparse, kCriteoLabels}));
  ASSERT_EQ(rows->table().segments.size(), 2u);
  const TabularSegment& segment = rows->table().segments[1];
  EXPECT_EQ(segment.parts[kCriteoDense].stride, 16u);
  EXPECT_EQ(segment.parts[kCriteoSparse].stride, 28u);
  EXPECT_EQ(segment.parts[kCriteoLabels].stride, 1u);
  for (const TabularPart& part : segment.parts) EXPECT_EQ(part.data_offset % 16, 0u);
  ExpectRowsAsNumpy(*dataset);
}

TEST_F(CriteoNpyTest, OtherNumericDtypesAndFloatLabels) {
  NEED_NUMPY(R"(
dense, sparse = rows(5, dense=np.float16, sparse=np.uint16)
save('train', dense, sparse, rng.random(5).astype(np.float32))
expect(['train']))");
  std::unique_ptr<Dataset> dataset;
  Status status = Open(&dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(AsTabularRows(*dataset)->table().schema.dense.type, FieldType::kFloat16);
  EXPECT_EQ(AsTabularRows(*dataset)->table().schema.label.type, FieldType::kFloat32);
  ExpectRowsAsNumpy(*dataset);
}

TEST_F(CriteoNpyTest, BlockSizesCutEachTripletAndSumToTheSize) {
  NEED_NUMPY(R"(
for stem, n in (('day_0', 100), ('day_1', 37)):
    dense, sparse = rows(n)
    save(stem, dense, sparse, np.zeros(n, np.int32))
)");
  DatasetOptions options;
  options.tabular.block_bytes = 10 * (4 + 13 * 4 + 26 * 8);  // 10 rows
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(data_, options, &dataset).ok());
  const std::vector<uint64_t> sizes = ReadPathOf(*dataset).BlockSizes();
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), uint64_t{0}), dataset->size());
  EXPECT_EQ(sizes.size(), 10u + 4u);  // no block spans the two days
  EXPECT_EQ(sizes[9], 10u);
  EXPECT_EQ(sizes[13], 7u);
}

// Opening refuses the directory with `code` and a message holding `says`.
void ExpectRefused(const Status& status, bool (Status::*code)() const,
                   const std::vector<std::string>& says) {
  EXPECT_TRUE((status.*code)()) << status.ToString();
  for (const std::string& text : says) {
    EXPECT_NE(status.message().find(text), std::string::npos)
        << text << " in " << status.ToString();
  }
}

TEST_F(CriteoNpyTest, FortranOrderAndBigEndianAreRefusedNamingTheFile) {
  NEED_NUMPY(R"(
dense, sparse = rows(3)
save('day_0', dense, sparse, np.zeros(3, np.int32))
np.save(os.path.join(d, 'day_0_dense.npy'), np.asfortranarray(dense)))");
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsNotSupported,
                {Member("day_0", "_dense.npy"), "Fortran order"});
  NEED_NUMPY(R"(
dense, sparse = rows(3)
save('day_0', dense, sparse.astype('>i8'), np.zeros(3, np.int32)))");
  ExpectRefused(Open(&dataset, /*by_name=*/true), &Status::IsNotSupported,
                {Member("day_0", "_sparse.npy"), "big-endian"});
}

TEST_F(CriteoNpyTest, UnequalRowCountsNameTheThreeFiles) {
  NEED_NUMPY(R"(
dense, sparse = rows(4)
save('day_0', dense, sparse[:3], np.zeros(4, np.int32)))");
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsCorruption,
                {"row counts differ", Member("day_0", "_dense.npy") + " has 4 rows",
                 Member("day_0", "_sparse.npy") + " has 3 rows",
                 Member("day_0", "_labels.npy") + " has 4 rows"});
}

TEST_F(CriteoNpyTest, TruncatedAndMisshapenFilesAreRefused) {
  NEED_NUMPY(R"(
dense, sparse = rows(4)
save('day_0', dense, sparse, np.zeros(4, np.int32)))");
  const std::string sparse = Member("day_0", "_sparse.npy");
  std::string bytes = ReadBytes(sparse);
  WriteBytes(sparse, bytes.substr(0, bytes.size() - 8));
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsCorruption, {sparse, "truncated"});
  WriteBytes(sparse, bytes.substr(0, 40));  // inside the header
  ExpectRefused(Open(&dataset), &Status::IsCorruption, {sparse});
  NEED_NUMPY("np.save(os.path.join(d, 'day_0_sparse.npy'), np.zeros(4 * 26, np.int64))");
  ExpectRefused(Open(&dataset), &Status::IsCorruption, {sparse, "shape (104,)"});
  NEED_NUMPY(R"(
np.save(os.path.join(d, 'day_0_sparse.npy'), np.zeros((4, 26), np.int64))
np.save(os.path.join(d, 'day_0_labels.npy'), np.zeros((4, 2), np.int32)))");
  ExpectRefused(Open(&dataset), &Status::IsCorruption,
                {Member("day_0", "_labels.npy"), "(rows,) or (rows, 1)"});
}

TEST_F(CriteoNpyTest, AMissingMemberIsNamed) {
  NEED_NUMPY(R"(
for stem in ('day_0', 'day_3'):
    dense, sparse = rows(2)
    save(stem, dense, sparse, np.zeros(2, np.int32))
os.remove(os.path.join(d, 'day_3_labels.npy')))");
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsNotFound,
                {Member("day_3", "_labels.npy") + ": missing", Member("day_3", "_dense.npy")});
}

TEST_F(CriteoNpyTest, TripletsMustAgreeOnDtypesAndColumns) {
  NEED_NUMPY(R"(
dense, sparse = rows(2)
save('day_0', dense, sparse, np.zeros(2, np.int32))
dense, sparse = rows(2, sparse=np.int32)
save('day_1', dense, sparse, np.zeros(2, np.int32)))");
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsCorruption,
                {Member("day_1", "_sparse.npy"), Member("day_0", "_sparse.npy"), "int32", "int64"});
  NEED_NUMPY(R"(
dense, sparse = rows(2, d=12)
save('day_1', dense, sparse, np.zeros(2, np.int32)))");
  ExpectRefused(Open(&dataset), &Status::IsCorruption,
                {Member("day_1", "_dense.npy"), "12 columns", "13 columns"});
}

TEST_F(CriteoNpyTest, EmptyTripletsAddNoRowsAndNoRowsAtAllIsAnError) {
  NEED_NUMPY(R"(
dense, sparse = rows(0)
save('day_0', dense, sparse, np.zeros(0, np.int32)))");
  std::unique_ptr<Dataset> dataset;
  ExpectRefused(Open(&dataset), &Status::IsInvalidArgument, {"no rows"});
  NEED_NUMPY(R"(
dense, sparse = rows(3)
save('day_1', dense, sparse, np.ones(3, np.int32))
expect(['day_0', 'day_1']))");
  ASSERT_TRUE(Open(&dataset).ok());
  EXPECT_EQ(dataset->size(), 3u);
  EXPECT_EQ(dataset->shards().size(), 1u);
  ExpectRowsAsNumpy(*dataset);
}

TEST_F(CriteoNpyTest, DetectionLeavesOtherDirectoriesAlone) {
  // Only an incomplete triplet: not criteo_npy's (ImageFolder's, whose
  // classes are subdirectories: it finds no image).
  NEED_NUMPY(R"(
dense, sparse = rows(2)
np.save(os.path.join(d, 'day_0_dense.npy'), dense)
np.save(os.path.join(d, 'day_0_sparse.npy'), sparse))");
  std::unique_ptr<Dataset> dataset;
  Status status = Open(&dataset);
  EXPECT_TRUE(!status.ok() || dataset->format() != kCriteoNpyFormat) << status.ToString();
  // A complete triplet beside a subdirectory: criteo_npy comes before
  // ImageFolder.
  NEED_NUMPY("np.save(os.path.join(d, 'day_0_labels.npy'), np.zeros(2, np.int32))");
  ASSERT_TRUE(CreateDirectories(JoinPath(data_, "cats")).ok());
  WriteBytes(JoinPath(data_, "cats/1.jpg"), "x");
  status = Open(&dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), kCriteoNpyFormat);
}

TEST_F(CriteoNpyTest, VerifyChecksEveryTriplet) {
  NEED_NUMPY(R"(
for stem, n in (('day_0', 3), ('day_1', 4), ('day_2', 5)):
    dense, sparse = rows(n)
    save(stem, dense, sparse, np.zeros(n, np.int32))
)");
  VerifyReport report;
  ASSERT_TRUE(Verify(data_, {}, &report).ok());
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
  EXPECT_EQ(report.format, kCriteoNpyFormat);
  EXPECT_EQ(report.shards_checked, 3u);
  EXPECT_EQ(report.records_checked, 12u);
  // Verify of the opened directory: its open refuses the first problem.
  const std::string labels = Member("day_1", "_labels.npy");
  const std::string bytes = ReadBytes(labels);
  WriteBytes(labels, bytes.substr(0, bytes.size() - 4));
  ASSERT_TRUE(Verify(data_, {}, &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find(labels), std::string::npos) << report.problems[0];
  // The format's hook lists every bad triplet.
  NEED_NUMPY("os.remove(os.path.join(d, 'day_2_sparse.npy'))");
  DatasetOptions options;
  VerifyRequest request{data_, options, nullptr, "", nullptr};
  report = VerifyReport();
  FindFormat(kCriteoNpyFormat)->verify(request, &report);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_NE(report.problems[0].find(labels), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[1].find(Member("day_2", "_sparse.npy") + ": missing"),
            std::string::npos)
      << report.problems[1];
  EXPECT_EQ(report.shards_checked, 3u);
  EXPECT_EQ(report.records_checked, 3u);  // day_0's
}

TEST_F(CriteoNpyTest, WarmSourcesAreEveryTripletsThreeFiles) {
  NEED_NUMPY(R"(
for stem, n in (('day_0', 3), ('day_1', 4)):
    dense, sparse = rows(n)
    save(stem, dense, sparse, np.zeros(n, np.int32))
)");
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(&dataset).ok());
  std::vector<WarmSource> sources;
  Status status = FindFormat(kCriteoNpyFormat)->warm_sources(*dataset, &sources);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(sources.size(), 6u);
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string stem = i < 3 ? "day_0" : "day_1";
    EXPECT_EQ(sources[i].source.path, Member(stem, kCriteoSuffixes[i % 3]));
    EXPECT_FALSE(sources[i].source.bundle());
    EXPECT_GT(sources[i].source.size, 0u);
    EXPECT_EQ(sources[i].counts_as_shard, i % 3 == 0);
  }
}

}  // namespace
}  // namespace gpufeed
