// MDS datasets written here from the format's description (Streaming's
// index.json version 2; a shard is u32 count, count + 1 absolute u32
// offsets, the samples; a sample is the u32 sizes of its variable columns,
// then every column's bytes): opened by format=auto, every sample exact,
// the read engine's byte ranges, pil pixels, and errors naming the file
// and the byte offset.
#include "format/mds.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format/dataset_base.h"
#include "gpufeed/dataset.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string I64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

// Columns: image (jpeg, variable), cls (int, 8), name (str, variable),
// pic (pil, variable), u16 (uint16, 2).
std::string Sample(int i) {
  std::string image = "jpeg-" + std::to_string(i) + std::string(100 * i, 'j');
  std::string name = "n" + std::to_string(i);
  std::string pil =
      U32(2) + U32(1) + U32(1) + "L" + std::string(1, char(i)) + std::string(1, char(2 * i));
  uint16_t u16 = static_cast<uint16_t>(1000 + i);
  return U32(image.size()) + U32(name.size()) + U32(pil.size()) + image + I64(i % 4) + name + pil +
         std::string(reinterpret_cast<const char*>(&u16), 2);
}

std::string Shard(int first, int count) {
  std::string samples;
  std::string offsets;
  uint32_t offset = 4 + 4 * (count + 1);
  offsets += U32(offset);
  for (int i = first; i < first + count; ++i) {
    samples += Sample(i);
    offset = 4 + 4 * (count + 1) + samples.size();
    offsets += U32(offset);
  }
  return U32(count) + offsets + samples;
}

std::string ShardEntry(const std::string& name, uint64_t bytes, int samples) {
  return R"({"column_encodings": ["jpeg", "int", "str", "pil", "uint16"],
    "column_names": ["image", "cls", "name", "pic", "u16"],
    "column_sizes": [null, 8, null, null, 2],
    "compression": null, "format": "mds", "hashes": [], "raw_data": {"basename": ")" +
         name + R"(", "bytes": )" + std::to_string(bytes) + R"(, "hashes": {}}, "samples": )" +
         std::to_string(samples) + R"(, "size_limit": 67108864, "version": 2, "zip_data": null})";
}

class MdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string a = Shard(0, 3), b = Shard(3, 4);
    WriteBytes(JoinPath(dir_.path(), "shard.00000.mds"), a);
    WriteBytes(JoinPath(dir_.path(), "shard.00001.mds"), b);
    WriteBytes(JoinPath(dir_.path(), "index.json"),
               R"({"version": 2, "shards": [)" + ShardEntry("shard.00000.mds", a.size(), 3) + ", " +
                   ShardEntry("shard.00001.mds", b.size(), 4) + "]}");
  }
  TempDir dir_;
};

TEST_F(MdsTest, AutoOpensEverySampleExactly) {
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(dir_.path(), {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(std::string(FormatName(dataset->format())), "mds");
  ASSERT_EQ(dataset->size(), 7u);
  std::string shard0 = ReadBytes(JoinPath(dir_.path(), "shard.00000.mds"));
  Record record;
  for (uint64_t i = 0; i < 7; ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, "jpeg-" + std::to_string(i) + std::string(100 * i, 'j'));
    EXPECT_EQ(record.labels, std::vector<float>{static_cast<float>(i % 4)});
    EXPECT_TRUE(record.encoded);
    RecordLocation location;
    ASSERT_TRUE(ReadPathOf(*dataset).Locate(i, &location));
    std::string bytes = ReadBytes(location.path).substr(location.offset, location.length);
    EXPECT_EQ(bytes, Sample(static_cast<int>(i)));  // exactly the sample, nothing more
    Record located;
    ASSERT_TRUE(
        ReadPathOf(*dataset).ParseLocated(i, location, bytes.data(), bytes.size(), &located).ok());
    EXPECT_EQ(located.data, record.data);
    EXPECT_EQ(located.labels, record.labels);
  }
}

TEST_F(MdsTest, KeysPickColumnsAndPilBecomesRgb) {
  DatasetOptions options;
  options.webdataset.image_keys = {"pic"};
  options.webdataset.label_key = "u16";
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir_.path(), options, &dataset).ok());
  Record record;
  ASSERT_TRUE(dataset->Read(5, &record).ok());
  EXPECT_FALSE(record.encoded);
  EXPECT_EQ(record.shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(record.data, std::string("\x05\x05\x05\x0a\x0a\x0a", 6));
  EXPECT_EQ(record.labels, std::vector<float>{1005});
  options.webdataset.label_key = "name";
  Status status = Dataset::Open(dir_.path(), options, &dataset);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("not an integer encoding"), std::string::npos);
}

TEST_F(MdsTest, CorruptAndTruncatedShardsNameFileAndOffset) {
  std::string path = JoinPath(dir_.path(), "shard.00001.mds");
  std::string shard = ReadBytes(path);
  std::string bad = shard;
  bad.replace(4 + 4 * 5, 4, U32(1 << 20));  // sample 0's image size
  WriteBytes(path, bad);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir_.path(), {}, &dataset).ok());
  Record record;
  Status status = dataset->Read(3, &record);
  EXPECT_EQ(status.code(), Status::Code::kCorruption);
  EXPECT_NE(status.message().find("shard.00001.mds: sample 0 at byte offset 24"), std::string::npos)
      << status.ToString();
  WriteBytes(path, shard.substr(0, shard.size() - 1));
  ASSERT_TRUE(Dataset::Open(dir_.path(), {}, &dataset).ok());  // lazy: index.json only
  status = dataset->Read(4, &record);
  EXPECT_EQ(status.code(), Status::Code::kCorruption);
  EXPECT_NE(status.message().find("shard.00001.mds: at byte offset 20"), std::string::npos)
      << status.ToString();
  EXPECT_TRUE(dataset->Read(0, &record).ok());  // the other shard reads on
}

TEST(MdsParse, IndexAndSamples) {
  std::vector<MdsShardInfo> shards;
  EXPECT_EQ(ParseMdsIndex(R"({"version": 1, "shards": []})", "i.json", &shards).code(),
            Status::Code::kNotSupported);
  EXPECT_EQ(ParseMdsIndex("{", "i.json", &shards).code(), Status::Code::kCorruption);
  std::string entry = ShardEntry("s.mds", 10, 1);
  ASSERT_TRUE(
      ParseMdsIndex(R"({"version": 2, "shards": [)" + entry + "]}", "i.json", &shards).ok());
  ASSERT_EQ(shards.size(), 1u);
  EXPECT_EQ(shards[0].columns[1].size, 8);
  EXPECT_EQ(shards[0].columns[0].kind, "jpeg");
  std::string wrong = entry;
  wrong.replace(wrong.find("[null, 8,"), 9, "[null, 4,");
  Status status = ParseMdsIndex(R"({"version": 2, "shards": [)" + wrong + "]}", "i.json", &shards);
  EXPECT_NE(status.message().find("column \"cls\" (int) has size 4, not 8"), std::string::npos)
      << status.ToString();
  std::string nd = entry;
  nd.replace(nd.find("\"uint16\"]"), 8, "\"ndarray:int16:3,5\"");
  nd.replace(nd.find("null, 2]"), 8, "null, 30]");
  ASSERT_TRUE(ParseMdsIndex(R"({"version": 2, "shards": [)" + nd + "]}", "i.json", &shards).ok());
  EXPECT_EQ(shards[0].columns[4].size, 30);
  MdsColumn i8{"x", "int8", "int8", 1};
  float label = 0;
  ASSERT_TRUE(MdsIntegerLabel(i8, std::string(1, '\xfe'), "w", &label).ok());
  EXPECT_EQ(label, -2.0f);
  MdsColumn si{"x", "str_int", "str_int", -1};
  ASSERT_TRUE(MdsIntegerLabel(si, "-17", "w", &label).ok());
  EXPECT_EQ(label, -17.0f);
  EXPECT_FALSE(MdsIntegerLabel(si, "1.5", "w", &label).ok());
}

}  // namespace
}  // namespace gpufeed
