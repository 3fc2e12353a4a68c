// Pack -> manifest -> Dataset, Verify, and the manifest-level bad inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include "format/manifest.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

class PackTest : public ::testing::TestWithParam<ShardFormat> {
 protected:
  void SetUp() override {
    source_ = JoinPath(dir_.path(), "src");
    destination_ = JoinPath(dir_.path(), "packed");
    const char* classes[] = {"b_class", "a_class", "c_class"};
    for (int c = 0; c < 3; ++c) {
      ASSERT_TRUE(CreateDirectories(JoinPath(source_, classes[c])).ok());
      for (int i = 0; i < 7; ++i) {
        std::string name = std::string(classes[c]) + "/img" + std::to_string(i) + ".jpg";
        std::string bytes = name + std::string(1000 * (i + 1), static_cast<char>('a' + i));
        WriteBytes(JoinPath(source_, name), bytes);
      }
    }
  }

  TempDir dir_;
  std::string source_, destination_;
};

TEST_P(PackTest, PackedDatasetReadsBackLikeTheFolder) {
  PackOptions options;
  options.format = GetParam();
  options.shard_size = 10000;  // several shards
  options.workers = 3;
  uint64_t progress_calls = 0;
  options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, 21u);
    EXPECT_EQ(done, ++progress_calls);
  };
  PackSummary summary;
  Status status = Pack(source_, destination_, options, &summary);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(summary.records, 21u);
  EXPECT_GT(summary.shards, 2u);
  EXPECT_EQ(progress_calls, 21u);

  std::unique_ptr<Dataset> folder, packed;
  ASSERT_TRUE(Dataset::Open(source_, {}, &folder).ok());
  status = Dataset::Open(destination_, {}, &packed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(packed->format(), GetParam() == ShardFormat::kLmdb         ? DatasetFormat::kLmdb
                              : GetParam() == ShardFormat::kWebDataset ? DatasetFormat::kWebDataset
                                                                       : DatasetFormat::kRecordIO);
  EXPECT_EQ(packed->classes(), folder->classes());
  EXPECT_TRUE(packed->integer_labels());
  EXPECT_EQ(packed->shards().size(), summary.shards);
  ASSERT_EQ(packed->size(), folder->size());
  Record expected, actual;
  for (uint64_t i = 0; i < folder->size(); ++i) {
    ASSERT_TRUE(folder->Read(i, &expected).ok());
    ASSERT_TRUE(packed->Read(i, &actual).ok());
    EXPECT_EQ(actual.data, expected.data);
    EXPECT_EQ(actual.labels, expected.labels);
    EXPECT_EQ(actual.id, i);
  }
  VerifyReport report;
  ASSERT_TRUE(Verify(destination_, {}, &report).ok());
  EXPECT_TRUE(report.ok()) << report.problems.at(0);
  EXPECT_EQ(report.records_checked, 21u);
  // RecordIO: the .idx's checksum too (index_xxh64).
  EXPECT_EQ(report.checksums_checked,
            GetParam() == ShardFormat::kRecordIO ? 2 * summary.shards : summary.shards);

  // A second pack into the same place is refused, then allowed with overwrite.
  PackSummary again;
  status = Pack(source_, destination_, options, &again);
  EXPECT_EQ(status.code(), Status::Code::kAlreadyExists) << status.ToString();
  options.overwrite = true;
  options.shard_size = 1 << 30;
  options.progress = nullptr;
  ASSERT_TRUE(Pack(source_, destination_, options, &again).ok());
  EXPECT_EQ(again.shards, 1u);
  ASSERT_TRUE(Dataset::Open(destination_, {}, &packed).ok());
  EXPECT_EQ(packed->shards().size(), 1u);
}

TEST_P(PackTest, FlippedByteIsCaughtByVerify) {
  PackOptions options;
  options.format = GetParam();
  PackSummary summary;
  ASSERT_TRUE(Pack(source_, destination_, options, &summary).ok());
  std::string file = GetParam() == ShardFormat::kLmdb
                         ? JoinPath(destination_, "part-00000/data.mdb")
                         : JoinPath(destination_, GetParam() == ShardFormat::kWebDataset
                                                      ? "part-00000.tar"
                                                      : "part-00000.rec");
  std::string bytes = ReadBytes(file);
  // A byte in the middle of a JPEG payload: framing stays valid.
  size_t at = bytes.find("img3.jpgdddd");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] ^= 1;
  WriteBytes(file, bytes);
  VerifyReport report;
  ASSERT_TRUE(Verify(destination_, {}, &report).ok());
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.problems[0].find("xxh64"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[0].find(file), std::string::npos) << report.problems[0];
}

INSTANTIATE_TEST_SUITE_P(Formats, PackTest,
                         ::testing::Values(ShardFormat::kRecordIO, ShardFormat::kLmdb,
                                           ShardFormat::kWebDataset),
                         [](const auto& info) {
                           return info.param == ShardFormat::kLmdb         ? "Lmdb"
                                  : info.param == ShardFormat::kWebDataset ? "WebDataset"
                                                                           : "RecordIO";
                         });

TEST(PackListTest, ListFileWithMultiLabelsAndMissingShardOrIndex) {
  TempDir dir;
  WriteBytes(JoinPath(dir.path(), "a.bin"), "AAAA");
  WriteBytes(JoinPath(dir.path(), "b.bin"), "");
  WriteBytes(JoinPath(dir.path(), "list.txt"),
             "# comment\na.bin\t1.5,2.5,-3\n\nb.bin\t7\n");
  std::string out = JoinPath(dir.path(), "out");
  PackSummary summary;
  ASSERT_TRUE(Pack(JoinPath(dir.path(), "list.txt"), out, {}, &summary).ok());
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(out, {}, &dataset).ok());
  EXPECT_FALSE(dataset->integer_labels());
  Record record;
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  EXPECT_EQ(record.labels, (std::vector<float>{1.5f, 2.5f, -3.0f}));
  EXPECT_EQ(record.data, "AAAA");
  ASSERT_TRUE(dataset->Read(1, &record).ok());
  EXPECT_EQ(record.labels, (std::vector<float>{7.0f}));
  EXPECT_EQ(record.data, "");

  // The manifest identifies every file: a missing one is found by the
  // shard's first read (lazy opens, docs/formats.md), named.
  std::string index_bytes = ReadBytes(JoinPath(out, "part-00000.idx"));
  ASSERT_EQ(::unlink(JoinPath(out, "part-00000.idx").c_str()), 0);
  ASSERT_TRUE(Dataset::Open(out, {}, &dataset).ok());
  Status status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find("part-00000.idx"), std::string::npos);

  WriteBytes(JoinPath(out, "part-00000.idx"), index_bytes);
  ASSERT_EQ(::unlink(JoinPath(out, "part-00000.rec").c_str()), 0);
  ASSERT_TRUE(Dataset::Open(out, {}, &dataset).ok());
  status = dataset->Read(1, &record);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find("part-00000.rec"), std::string::npos);
  EXPECT_NE(status.message().find("manifest"), std::string::npos);

  WriteBytes(JoinPath(dir.path(), "bad.txt"), "a.bin\tnot-a-number\n");
  status = Pack(JoinPath(dir.path(), "bad.txt"), JoinPath(dir.path(), "out2"), {}, &summary);
  EXPECT_TRUE(status.IsInvalidArgument());
  EXPECT_NE(status.message().find("bad.txt line 1"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
