// Fixed-size binary records (format "records", src/format/records.h) on
// files NumPy itself writes: a structured array's tofile, the layout MLPerf
// DLRM's preprocessing writes.
#include "format/records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "format/registry.h"
#include "format/tabular.h"
#include "test_util.h"
#include "util/checksum.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// MLPerf DLRM's record: int32 label, 13 int32 dense, 26 int32 sparse.
constexpr const char* kMlperfDtype =
    "np.dtype([('label', '<i4'), ('dense', '<i4', (13,)), ('sparse', '<i4', (26,))])";
// int8 label, 4 float16 dense, 3 int64 sparse: 33 bytes, nothing aligned.
constexpr const char* kSmallDtype =
    "np.dtype([('label', 'i1'), ('dense', '<f2', (4,)), ('sparse', '<i8', (3,))])";

class RecordsTest : public ::testing::Test {
 protected:
  // Runs NumPy code with `path` bound to `out`; false when NumPy is missing.
  bool WriteWithNumpy(const std::string& out, const std::string& code) {
    const std::string script = JoinPath(dir_.path(), "write.py");
    WriteBytes(script, "import sys\nimport numpy as np\npath = sys.argv[1]\n" + code + "\n");
    const std::string command = "/usr/bin/python3 " + script + " " + out + " 2>/dev/null";
    return std::system(command.c_str()) == 0;
  }
  // `rows` random records of `dtype` (labels: `labels`, a NumPy expression
  // of n) written with tofile to `out`.
  bool WriteRecords(const std::string& out, const char* dtype, int rows, const std::string& labels,
                    int seed = 0) {
    return WriteWithNumpy(
        out, "rng = np.random.default_rng(" + std::to_string(seed) + ")\nn = " +
                 std::to_string(rows) + "\ndt = " + dtype +
                 "\na = np.zeros(n, dt)\n"
                 "a['label'] = " + labels + "\n"
                 "a['dense'] = rng.integers(-1000, 1000, a['dense'].shape)\n"
                 "a['sparse'] = rng.integers(0, 1 << 30, a['sparse'].shape)\n"
                 "a.tofile(path)");
  }
  Status Open(const std::string& path, std::unique_ptr<Dataset>* dataset,
              const RecordSchema& schema = RecordSchema()) {
    DatasetOptions options;
    options.format = kRecordsFormat;
    options.tabular.record_schema = schema;
    return Dataset::Open(path, options, dataset);
  }
  static RecordSchema SmallSchema() {
    RecordSchema schema;
    schema.label = FieldType::kInt8;
    schema.dense = FieldType::kFloat16;
    schema.dense_count = 4;
    schema.sparse = FieldType::kInt64;
    schema.sparse_count = 3;
    return schema;
  }

  TempDir dir_;
};

TEST_F(RecordsTest, ReadsMlperfRecordsAsNumpyWroteThem) {
  const std::string path = JoinPath(dir_.path(), "train_data.bin");
  if (!WriteRecords(path, kMlperfDtype, 100, "rng.integers(0, 2, n)")) {
    GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
  }
  const std::string bytes = ReadBytes(path);
  ASSERT_EQ(bytes.size(), 100u * 160u);
  EXPECT_EQ(RecordSchema().record_bytes(), 160u);
  std::unique_ptr<Dataset> dataset;
  Status status = Open(path, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), kRecordsFormat);
  EXPECT_STREQ(FormatName(dataset->format()), "records");
  EXPECT_EQ(dataset->size(), 100u);
  EXPECT_TRUE(dataset->integer_labels());
  ASSERT_EQ(dataset->shards().size(), 1u);
  EXPECT_EQ(dataset->shards()[0].path, path);
  EXPECT_EQ(dataset->shards()[0].records, 100u);
  EXPECT_EQ(dataset->shards()[0].bytes, bytes.size());
  Record record;
  for (uint64_t i : {0u, 1u, 57u, 99u}) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, bytes.substr(i * 160, 160)) << i;
    int32_t label = 0;
    std::memcpy(&label, bytes.data() + i * 160, 4);
    ASSERT_EQ(record.labels.size(), 1u);
    EXPECT_EQ(record.labels[0], static_cast<float>(label)) << i;
    EXPECT_EQ(record.key, path + ":" + std::to_string(i));
    EXPECT_EQ(record.id, i);
    EXPECT_NE(record.source.find(std::to_string(i * 160)), std::string::npos) << record.source;
  }
  EXPECT_TRUE(dataset->Read(100, &record).IsOutOfRange());
  // The table: one part, label at 0, dense after it, sparse after dense.
  const TabularRows* rows = AsTabularRows(*dataset);
  ASSERT_NE(rows, nullptr);
  const TabularSchema& schema = rows->table().schema;
  EXPECT_FALSE(schema.text);
  EXPECT_EQ(schema.label.offset, 0u);
  EXPECT_EQ(schema.dense.offset, 4u);
  EXPECT_EQ(schema.dense.count, 13u);
  EXPECT_EQ(schema.sparse.offset, 56u);
  EXPECT_EQ(schema.sparse.count, 26u);
  EXPECT_EQ(rows->table().segments[0].parts[0].stride, 160u);
}

TEST_F(RecordsTest, AnotherSchemaUnalignedFieldsAndSignedLabels) {
  const std::string path = JoinPath(dir_.path(), "small.bin");
  if (!WriteRecords(path, kSmallDtype, 37, "rng.integers(-3, 4, n)", 1)) {
    GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
  }
  const std::string labels_path = JoinPath(dir_.path(), "labels.f32");
  ASSERT_TRUE(WriteWithNumpy(labels_path, std::string("a = np.fromfile('") + path + "', " +
                                              kSmallDtype + ")\n"
                                              "a['label'].astype(np.float32).tofile(path)"));
  const std::string bytes = ReadBytes(path);
  const std::string labels = ReadBytes(labels_path);
  ASSERT_EQ(SmallSchema().record_bytes(), 33u);
  ASSERT_EQ(bytes.size(), 37u * 33u);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Open(path, &dataset, SmallSchema()).ok());
  EXPECT_EQ(dataset->size(), 37u);
  Record record;
  for (uint64_t i = 0; i < 37; ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, bytes.substr(i * 33, 33)) << i;
    float label = 0;
    std::memcpy(&label, labels.data() + i * 4, 4);
    EXPECT_EQ(record.labels[0], label) << i;
  }
  // The MLPerf schema does not divide 37 * 33 bytes: refused, not misread.
  Status status = Open(path, &dataset);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
}

TEST_F(RecordsTest, ADirectoryInNaturalOrderSkippingWhatIsNoRecords) {
  const std::string directory = JoinPath(dir_.path(), "days");
  ASSERT_TRUE(CreateDirectories(directory).ok());
  // Files day_0, day_1, day_2, day_10 of 3, 4, 5, 6 rows; labels count on
  // across them in natural order.
  const int rows[] = {3, 4, 5, 6};
  const char* names[] = {"day_0", "day_1", "day_2", "day_10"};
  int first = 0;
  for (int f = 0; f < 4; ++f) {
    const std::string labels = "np.arange(" + std::to_string(first) + ", " +
                               std::to_string(first + rows[f]) + ")";
    if (!WriteRecords(JoinPath(directory, names[f]), kMlperfDtype, rows[f], labels, f)) {
      GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
    }
    first += rows[f];
  }
  WriteBytes(JoinPath(directory, "day_5"), "");  // empty: no rows
  WriteBytes(JoinPath(directory, ".hidden"), "x");
  WriteBytes(JoinPath(directory, "notes.txt"), "x");
  WriteBytes(JoinPath(directory, "meta.json"), "{}");
  WriteBytes(JoinPath(directory, "README.md"), "x");
  ASSERT_TRUE(CreateDirectories(JoinPath(directory, "subdir")).ok());
  std::unique_ptr<Dataset> dataset;
  Status status = Open(directory, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(dataset->size(), 18u);
  ASSERT_EQ(dataset->shards().size(), 4u);
  EXPECT_EQ(Basename(dataset->shards()[0].path), "day_0");
  EXPECT_EQ(Basename(dataset->shards()[2].path), "day_2");
  EXPECT_EQ(Basename(dataset->shards()[3].path), "day_10");
  EXPECT_EQ(dataset->shards()[3].first_record, 12u);
  Record record;
  for (uint64_t i = 0; i < 18; ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.labels[0], static_cast<float>(i));
  }
  ASSERT_TRUE(dataset->Read(12, &record).ok());
  EXPECT_EQ(record.data, ReadBytes(JoinPath(directory, "day_10")).substr(0, 160));
  // Blocks of about 2 rows, never across a file.
  DatasetOptions options;
  options.format = kRecordsFormat;
  options.tabular.block_bytes = 2 * 160;
  ASSERT_TRUE(Dataset::Open(directory, options, &dataset).ok());
  const std::vector<uint64_t> expected = {2, 1, 2, 2, 2, 2, 1, 2, 2, 2};
  EXPECT_EQ(ReadPathOf(*dataset).BlockSizes(), expected);
}

TEST_F(RecordsTest, NaturalOrder) {
  std::vector<std::string> names = {"day_10", "day_2", "day_1", "a", "day_02x", "b1", "b01",
                                    "day_0"};
  std::sort(names.begin(), names.end(), NaturalLess);
  const std::vector<std::string> expected = {"a",     "b01",   "b1",     "day_0",
                                             "day_1", "day_2", "day_02x", "day_10"};
  EXPECT_EQ(names, expected);
  EXPECT_FALSE(NaturalLess("day_2", "day_2"));
  EXPECT_TRUE(IsSkippedRecordsName("gpufeed.json"));
  EXPECT_TRUE(IsSkippedRecordsName(".part"));
  EXPECT_FALSE(IsSkippedRecordsName("part-00000.bin"));
}

TEST_F(RecordsTest, ASizeThatIsNoMultipleOfTheRecordNamesTheFileAndSizes) {
  const std::string path = JoinPath(dir_.path(), "cut.bin");
  WriteBytes(path, std::string(3 * 160 + 7, '\0'));
  std::unique_ptr<Dataset> dataset;
  Status status = Open(path, &dataset);
  ASSERT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("487 bytes"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("record size 160"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("7 bytes are left after 3 records"), std::string::npos)
      << status.message();
  // In a directory too, naming the file.
  const std::string directory = JoinPath(dir_.path(), "d");
  ASSERT_TRUE(CreateDirectories(directory).ok());
  WriteBytes(JoinPath(directory, "a"), std::string(160, '\0'));
  WriteBytes(JoinPath(directory, "b"), std::string(100, '\0'));
  status = Open(directory, &dataset);
  ASSERT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(JoinPath(directory, "b")), std::string::npos);
  // verify reports it as a problem.
  DatasetOptions options;
  options.format = kRecordsFormat;
  VerifyReport report;
  ASSERT_TRUE(Verify(directory, options, &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("100 bytes"), std::string::npos) << report.problems[0];
}

TEST_F(RecordsTest, EmptyUnknownSchemaAndNeverAuto) {
  const std::string path = JoinPath(dir_.path(), "empty.bin");
  WriteBytes(path, "");
  std::unique_ptr<Dataset> dataset;
  EXPECT_TRUE(Open(path, &dataset).IsInvalidArgument());
  const std::string good = JoinPath(dir_.path(), "good.bin");
  WriteBytes(good, std::string(320, '\1'));
  RecordSchema bad;
  bad.dense = FieldType{99};
  Status status = Open(good, &dataset, bad);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("dense"), std::string::npos);
  // Raw records have no signature: format=auto does not guess them.
  DatasetOptions options;
  status = Dataset::Open(good, options, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  // Any FieldType: float64 labels are float labels.
  RecordSchema wide;
  wide.label = FieldType::kFloat64;
  wide.dense = FieldType::kBool;
  wide.dense_count = 0;
  wide.sparse = FieldType::kUint64;
  wide.sparse_count = 1;
  ASSERT_EQ(wide.record_bytes(), 16u);
  ASSERT_TRUE(Open(good, &dataset, wide).ok());
  EXPECT_EQ(dataset->size(), 20u);
  EXPECT_FALSE(dataset->integer_labels());
}

TEST_F(RecordsTest, VerifyChecksumsFromAManifestAndWarmSources) {
  const std::string directory = JoinPath(dir_.path(), "m");
  ASSERT_TRUE(CreateDirectories(directory).ok());
  if (!WriteRecords(JoinPath(directory, "part-0.bin"), kMlperfDtype, 10, "np.ones(n)")) {
    GTEST_SKIP() << "NumPy is not installed for /usr/bin/python3";
  }
  ASSERT_TRUE(WriteRecords(JoinPath(directory, "part-1.bin"), kMlperfDtype, 5, "np.zeros(n)", 1));
  Manifest manifest;
  manifest.format = kRecordsFormat;
  manifest.records = 15;
  for (const auto& [name, rows] : {std::pair<const char*, uint64_t>{"part-1.bin", 5},
                                   {"part-0.bin", 10}}) {
    ManifestShard shard;
    shard.file = name;
    shard.records = rows;
    shard.bytes = rows * 160;
    uint64_t digest = 0;
    ASSERT_TRUE(FileXxh64(JoinPath(directory, name), &digest).ok());
    shard.xxh64 = Xxh64Hex(digest);
    manifest.shards.push_back(shard);
  }
  ASSERT_TRUE(WriteManifest(JoinPath(directory, kManifestName), manifest).ok());
  // The manifest's order, not the names'.
  std::unique_ptr<Dataset> dataset;
  Status status = Open(directory, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(dataset->size(), 15u);
  EXPECT_EQ(Basename(dataset->shards()[0].path), "part-1.bin");
  Record record;
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  EXPECT_EQ(record.labels[0], 0.0f);
  DatasetOptions options;
  options.format = kRecordsFormat;
  VerifyReport report;
  ASSERT_TRUE(Verify(directory, options, &report).ok());
  EXPECT_TRUE(report.ok()) << report.problems[0];
  EXPECT_EQ(report.records_checked, 15u);
  EXPECT_EQ(report.shards_checked, 2u);
  EXPECT_EQ(report.checksums_checked, 2u);
  // cache warm copies each file, keyed as the store reads it.
  std::vector<WarmSource> sources;
  ASSERT_TRUE(FindFormat(kRecordsFormat)->warm_sources(*dataset, &sources).ok());
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].source.path, JoinPath(directory, "part-1.bin"));
  EXPECT_EQ(sources[0].source.xxh64, manifest.shards[0].xxh64);
  // A byte changed, the size kept: the checksum catches it.
  std::string bytes = ReadBytes(JoinPath(directory, "part-0.bin"));
  bytes[17] ^= 1;
  WriteBytes(JoinPath(directory, "part-0.bin"), bytes);
  ASSERT_TRUE(Verify(directory, options, &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("part-0.bin: xxh64"), std::string::npos) << report.problems[0];
  // Another size than the manifest's: Corruption at open, naming both.
  WriteBytes(JoinPath(directory, "part-0.bin"), bytes.substr(0, 160 * 9));
  status = Open(directory, &dataset);
  ASSERT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(kManifestName), std::string::npos) << status.message();
}

}  // namespace
}  // namespace gpufeed
