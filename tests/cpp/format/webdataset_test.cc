// WebDataset tar shards: tars written by GNU tar (ustar, GNU long names,
// pax headers) read through the member index; bad tars give errors naming
// the tar, the member and the byte offset.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>

#include "format/dataset_base.h"
#include "format/datasets.h"
#include "format/tar_index.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

bool HaveTar() { return std::system("tar --version >/dev/null 2>&1") == 0; }

// Writes the sample files under dir/src and tars them with GNU tar in
// `format` (ustar, gnu, pax) into dir/name.
class TarFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTar()) GTEST_SKIP() << "GNU tar is not installed (apt-get install tar)";
    source_ = JoinPath(dir_.path(), "src");
    long_dir_ = std::string(120, 'd');  // past ustar's 100-byte name field
    ASSERT_TRUE(CreateDirectories(JoinPath(source_, long_dir_)).ok());
  }

  // Members "<dir>/sNNN.jpg" + "<dir>/sNNN.cls", in order.
  void AddSamples(int count) {
    for (int i = 0; i < count; ++i) {
      std::string base = long_dir_ + "/s" + std::to_string(100 + i);
      WriteBytes(JoinPath(source_, base + ".jpg"),
                 "image-" + std::to_string(i) + std::string(700 * i, 'x'));
      WriteBytes(JoinPath(source_, base + ".cls"), std::to_string(i % 5) + "\n");
      names_.push_back(base + ".jpg");
      names_.push_back(base + ".cls");
    }
  }

  std::string MakeTar(const std::string& name, const std::string& format) {
    std::string list = JoinPath(dir_.path(), "names.txt");
    std::string text;
    for (const std::string& member : names_) text += member + "\n";
    WriteBytes(list, text);
    std::string tar = JoinPath(dir_.path(), name);
    std::string command = "tar --format=" + format + " -cf '" + tar + "' -C '" + source_ +
                          "' --no-recursion -T '" + list + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return tar;
  }

  TempDir dir_;
  std::string source_, long_dir_;
  std::vector<std::string> names_;
};

class FormatsTest : public TarFixture, public ::testing::WithParamInterface<const char*> {};

TEST_P(FormatsTest, SamplesReadBackWithLabels) {
  AddSamples(6);
  std::string tar = MakeTar("shard.tar", GetParam());
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(tar, {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kWebDataset);
  ASSERT_EQ(dataset->size(), 6u);
  EXPECT_TRUE(PathExists(TarIndexPathBeside(tar)));
  Record record;
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.key, long_dir_ + "/s" + std::to_string(100 + i));
    EXPECT_EQ(record.data, "image-" + std::to_string(i) + std::string(700 * i, 'x'));
    EXPECT_EQ(record.labels, std::vector<float>{static_cast<float>(i % 5)});
    // The byte range the read engine would fetch parses to the same record.
    RecordLocation location;
    ASSERT_TRUE(ReadPathOf(*dataset).Locate(i, &location));
    std::string bytes = ReadBytes(tar).substr(location.offset, location.length);
    Record located;
    ASSERT_TRUE(ReadPathOf(*dataset).ParseLocated(i, location, bytes.data(), bytes.size(), &located).ok());
    EXPECT_EQ(located.data, record.data);
    EXPECT_EQ(located.labels, record.labels);
  }
  // The saved index is used the second time; a changed tar invalidates it.
  std::string index_bytes = ReadBytes(TarIndexPathBeside(tar));
  ASSERT_TRUE(Dataset::Open(tar, {}, &dataset).ok());
  struct timeval times[2] = {{1000000, 0}, {1000000, 0}};
  ASSERT_EQ(::utimes(tar.c_str(), times), 0);
  ASSERT_TRUE(Dataset::Open(tar, {}, &dataset).ok());
  EXPECT_NE(ReadBytes(TarIndexPathBeside(tar)), index_bytes);
  EXPECT_EQ(dataset->size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Tar, FormatsTest, ::testing::Values("ustar", "gnu", "pax"));

TEST_F(TarFixture, SourcesDirectoryPatternListAndCompressed) {
  AddSamples(3);
  std::string shards = JoinPath(dir_.path(), "shards");
  ASSERT_TRUE(CreateDirectories(shards).ok());
  std::string a = MakeTar("shards/part-000.tar", "gnu");
  std::string b = MakeTar("shards/part-001.tar", "gnu");
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(shards, {}, &dataset).ok());
  EXPECT_EQ(dataset->size(), 6u);
  EXPECT_EQ(dataset->shards().size(), 2u);
  Status status = Dataset::Open(JoinPath(shards, "part-{000..001}.tar"), {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->size(), 6u);
  status = Dataset::Open(JoinPath(shards, "part-{000..002}.tar"), {}, &dataset);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find("part-002.tar"), std::string::npos) << status.ToString();

  std::string list = JoinPath(shards, "train.txt");
  WriteBytes(list, "# shards\npart-001.tar\n\npart-000.tar\n");
  DatasetOptions options;
  options.format = DatasetFormat::kWebDataset;
  ASSERT_TRUE(Dataset::Open(list, options, &dataset).ok());
  EXPECT_EQ(dataset->shards()[0].path, b);
  options = DatasetOptions();
  options.webdataset.tars = {a};
  ASSERT_TRUE(Dataset::Open(dir_.path(), options, &dataset).ok());
  EXPECT_EQ(dataset->size(), 3u);

  std::string gz = JoinPath(dir_.path(), "c.tar.gz");
  WriteBytes(gz, "\x1f\x8b not really");
  status = Dataset::Open(gz, {}, &dataset);
  EXPECT_EQ(status.code(), Status::Code::kNotSupported) << status.ToString();
  EXPECT_NE(status.message().find("decompress"), std::string::npos) << status.ToString();
}

TEST_F(TarFixture, BadTarsNameTarMemberAndOffset) {
  AddSamples(3);
  std::string good = ReadBytes(MakeTar("good.tar", "ustar"));
  std::string tar = JoinPath(dir_.path(), "bad.tar");
  std::unique_ptr<Dataset> dataset;
  auto open_error = [&](const std::string& bytes) {
    WriteBytes(tar, bytes);
    (void)::unlink(TarIndexPathBeside(tar).c_str());
    Status status = Dataset::Open(tar, {}, &dataset);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.message().find(tar), std::string::npos) << status.ToString();
    return status.ToString();
  };
  std::string bytes = good;
  bytes[512 * 2 + 10] ^= 1;  // the second member's header
  std::string message = open_error(bytes);
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
  EXPECT_NE(message.find("byte offset 1024"), std::string::npos) << message;

  // Cut inside the last image: that member runs past the end.
  message = open_error(good.substr(0, 512 * 10 + 100));
  EXPECT_NE(message.find("s102.jpg"), std::string::npos) << message;
  EXPECT_NE(message.find("runs past the end"), std::string::npos) << message;
  message = open_error(good.substr(0, 512 * 2 + 300));
  EXPECT_NE(message.find("ends inside a header"), std::string::npos) << message;

  // A key again after another: samples are not contiguous.
  names_ = {names_[0], names_[2], names_[1]};
  message = open_error(ReadBytes(MakeTar("split.tar", "ustar")));
  EXPECT_NE(message.find("contiguous"), std::string::npos) << message;
}

TEST_F(TarFixture, MissingOrBadLabelNamesTheMember) {
  AddSamples(2);
  WriteBytes(JoinPath(source_, long_dir_ + "/s101.cls"), "seven");
  names_.push_back(long_dir_ + "/s102.jpg");
  WriteBytes(JoinPath(source_, long_dir_ + "/s102.jpg"), "no label");
  std::string tar = MakeTar("labels.tar", "gnu");
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(tar, {}, &dataset).ok());
  ASSERT_EQ(dataset->size(), 3u);
  Record record;
  EXPECT_TRUE(dataset->Read(0, &record).ok());
  Status status = dataset->Read(1, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("s101.cls at byte offset"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find("\"seven\""), std::string::npos) << status.ToString();
  status = dataset->Read(2, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("no label member (.cls)"), std::string::npos)
      << status.ToString();
  RecordLocation location;
  EXPECT_FALSE(ReadPathOf(*dataset).Locate(2, &location));  // read directly, which reports it

  VerifyReport report;
  ASSERT_TRUE(Verify(tar, {}, &report).ok());
  EXPECT_EQ(report.records_checked, 3u);
  EXPECT_EQ(report.problems.size(), 2u);
}

TEST_F(TarFixture, JsonLabelAndImageKey) {
  WriteBytes(JoinPath(source_, "a.png"), "png-bytes");
  WriteBytes(JoinPath(source_, "a.json"), "{\"label\": 3, \"caption\": \"x\"}");
  names_ = {"a.png", "a.json"};
  std::string tar = MakeTar("json.tar", "pax");
  DatasetOptions options;
  options.webdataset.label_key = "json";
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(tar, options, &dataset).ok());
  Record record;
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  EXPECT_EQ(record.data, "png-bytes");
  EXPECT_EQ(record.labels, std::vector<float>{3});
  options.webdataset.label_field = "missing";
  ASSERT_TRUE(Dataset::Open(tar, options, &dataset).ok());
  Status status = dataset->Read(0, &record);
  EXPECT_NE(status.message().find("field \"missing\""), std::string::npos) << status.ToString();
}

TEST(TarIndexTest, EncodeDecodeAndCorruptIndex) {
  TarIndex index;
  index.tar_size = 1 << 20;
  index.tar_mtime_ns = 12345;
  index.extensions = {"jpg", "cls"};
  index.members = {{0, 512, 100, 0}, {1, 1536, 2, 1024}};
  index.samples = {{"k", 0, 2}};
  std::string encoded;
  EncodeTarIndex(index, &encoded);
  TarIndex decoded;
  ASSERT_TRUE(DecodeTarIndex(encoded, "x.idx", &decoded).ok());
  EXPECT_EQ(decoded.samples.at(0).key, "k");
  EXPECT_EQ(decoded.members.at(1).offset, 1536u);
  EXPECT_EQ(decoded.Find(decoded.samples[0], "cls")->size, 2u);
  encoded[12] ^= 1;
  Status status = DecodeTarIndex(encoded, "x.idx", &decoded);
  EXPECT_TRUE(status.IsCorruption());
  EXPECT_NE(status.message().find("x.idx"), std::string::npos);
}

TEST(TarIndexTest, BracePatternsAndSampleNames) {
  std::vector<std::string> paths;
  ASSERT_TRUE(ExpandBracePattern("s-{008..011}.tar", &paths).ok());
  EXPECT_EQ(paths, (std::vector<std::string>{"s-008.tar", "s-009.tar", "s-010.tar", "s-011.tar"}));
  EXPECT_TRUE(ExpandBracePattern("s-{3..1}.tar", &paths).IsInvalidArgument());
  EXPECT_TRUE(ExpandBracePattern("s-{a..b}.tar", &paths).IsInvalidArgument());
  std::string key, extension;
  ASSERT_TRUE(SplitSampleName("dir.v1/x.seg.png", &key, &extension));
  EXPECT_EQ(key, "dir.v1/x");
  EXPECT_EQ(extension, "seg.png");
  EXPECT_FALSE(SplitSampleName("dir/README", &key, &extension));
}

}  // namespace
}  // namespace gpufeed
