// RecordIO framing and datasets: byte-exact dmlc-core framing, round trips,
// and every malformed input ending in a Corruption that names file + offset.
#include "format/recordio.h"

#include <gtest/gtest.h>

#include <cstring>

#include "format/datasets.h"
#include "format/irheader.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::string U32(uint32_t value) { return std::string(reinterpret_cast<const char*>(&value), 4); }
const std::string kMagic = U32(kRecordIOMagic);

std::string Encode(const std::string& payload) {
  std::string out;
  EncodeRecordIO(payload, &out);
  return out;
}

std::string DecodeAt(const std::string& file, uint64_t offset, uint64_t* next,
                     Status* status_out = nullptr) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "x.rec");
  WriteBytes(path, file);
  UniqueFd fd;
  EXPECT_TRUE(OpenForRead(path, &fd).ok());
  RecordIOCursor cursor(fd.get(), path, file.size(), 64);
  std::string payload;
  Status status = cursor.ReadRecord(offset, &payload, next);
  if (status_out) *status_out = status;
  else EXPECT_TRUE(status.ok()) << status.ToString();
  return payload;
}

TEST(RecordIOFramingTest, SimpleRecordMatchesDmlcBytes) {
  // "abcde": header, 5 bytes, 3 bytes of zero padding.
  std::string expected = kMagic + U32(5) + "abcde" + std::string(3, '\0');
  EXPECT_EQ(Encode("abcde"), expected);
  EXPECT_EQ(Encode(""), kMagic + U32(0));
}

TEST(RecordIOFramingTest, MagicInsidePayloadSplitsLikeDmlc) {
  // payload = "abcd" MAGIC "efgh": part 1 (cflag 1, "abcd"), part 3 (cflag 3, "efgh").
  std::string payload = "abcd" + kMagic + "efgh";
  std::string expected = kMagic + U32((1u << 29) | 4) + "abcd" + kMagic + U32((3u << 29) | 4) +
                         "efgh";
  EXPECT_EQ(Encode(payload), expected);
  // Magic at the very start: an empty first part.
  EXPECT_EQ(Encode(kMagic + "xy"), kMagic + U32(1u << 29) + kMagic + U32((3u << 29) | 2) + "xy" +
                                       std::string(2, '\0'));
  // Magic at the end: an empty last part.
  EXPECT_EQ(Encode("wxyz" + kMagic),
            kMagic + U32((1u << 29) | 4) + "wxyz" + kMagic + U32(3u << 29));
  // Magic not at a 4-byte-aligned offset is left alone.
  std::string unaligned = "ab" + kMagic + "cd";
  EXPECT_EQ(Encode(unaligned), kMagic + U32(8) + unaligned);
}

TEST(RecordIOFramingTest, RoundTripsTrickyPayloads) {
  std::vector<std::string> payloads = {
      "", "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg",
      kMagic, kMagic + kMagic, kMagic + "1234" + kMagic + "5678" + kMagic,
      "abcd" + kMagic, kMagic + "ab", "12345678" + kMagic + "x", std::string(1000, '\xCE')};
  for (const std::string& payload : payloads) {
    std::string file = Encode(payload) + Encode("next");
    uint64_t next = 0;
    EXPECT_EQ(DecodeAt(file, 0, &next), payload);
    EXPECT_EQ(next % 4, 0u);
    uint64_t after = 0;
    EXPECT_EQ(DecodeAt(file, next, &after), "next");
    EXPECT_EQ(after, file.size());
  }
}

void ExpectCorruption(const std::string& file, uint64_t offset, const std::string& needle) {
  uint64_t next = 0;
  Status status;
  DecodeAt(file, offset, &next, &status);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("x.rec at byte offset"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

TEST(RecordIOFramingTest, MalformedFramingIsCorruption) {
  std::string good = Encode("payload!") + Encode("second");
  ExpectCorruption(good.substr(0, 5), 0, "truncated in a record header");
  ExpectCorruption(good.substr(0, 12), 0, "runs past the end");
  ExpectCorruption(U32(0x12345678) + U32(4) + "abcd", 0, "bad magic 0x12345678");
  ExpectCorruption(U32(kRecordIOLegacyMagic) + U32(4) + "abcd", 0, "pre-2016");
  ExpectCorruption(kMagic + U32((2u << 29) | 4) + "abcd", 0, "without a start part");
  ExpectCorruption(kMagic + U32((3u << 29) | 4) + "abcd", 0, "without a start part");
  ExpectCorruption(kMagic + U32((1u << 29) | 4) + "abcd" + kMagic + U32(4) + "efgh", 0,
                   "starts before the multi-part record");
  ExpectCorruption(kMagic + U32((5u << 29) | 4) + "abcd", 0, "invalid continuation flag");
  ExpectCorruption(kMagic + U32(500u << 20) + std::string(1016, 'x'), 0, "runs past the end");
  // The offset of the bad header is named: here the second record's.
  ExpectCorruption(Encode("abcd") + U32(0xDEADBEEF) + U32(0), 0 + 12, "at byte offset 12");
}

// ---------------------------------------------------------------- datasets

struct Sample {
  std::vector<float> labels;
  std::string data;
};

std::vector<Sample> TrickySamples() {
  std::vector<Sample> samples;
  samples.push_back({{1.0f}, ""});                       // zero-length data
  for (int n = 1; n <= 7; ++n) samples.push_back({{2.0f}, std::string(n, 'a' + n)});
  samples.push_back({{3.0f}, kMagic + "start"});
  samples.push_back({{4.0f}, "1234" + kMagic + "middle"});
  samples.push_back({{5.0f}, "abcd" + kMagic});
  samples.push_back({{6.0f}, kMagic + kMagic + "12" + kMagic + kMagic});
  samples.push_back({{0.5f, 1.5f, 2.5f}, "multi-label"});
  samples.push_back({{-7.25f}, std::string(100000, '\x0A')});
  return samples;
}

void WriteShard(const std::string& path, ShardFormat format, const std::vector<Sample>& samples,
                uint64_t first_index = 0) {
  std::unique_ptr<ShardWriter> writer;
  ASSERT_TRUE(ShardWriter::Open(path, format, &writer).ok());
  for (size_t i = 0; i < samples.size(); ++i) {
    SampleToWrite sample;
    sample.index = first_index + i;
    sample.labels = samples[i].labels;
    sample.data = samples[i].data;
    ASSERT_TRUE(writer->Append(sample).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());
}

TEST(RecordIODatasetTest, RoundTripThroughWriterAndDataset) {
  TempDir dir;
  std::string rec = JoinPath(dir.path(), "part-00000.rec");
  std::vector<Sample> samples = TrickySamples();
  WriteShard(rec, ShardFormat::kRecordIO, samples);
  ASSERT_TRUE(PathExists(JoinPath(dir.path(), "part-00000.idx")));
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(rec, {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kRecordIO);
  ASSERT_EQ(dataset->size(), samples.size());
  Record record;
  for (size_t i = samples.size(); i-- > 0;) {  // backwards: random access
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, samples[i].data) << i;
    EXPECT_EQ(record.labels, samples[i].labels) << i;
    EXPECT_EQ(record.key, std::to_string(i));
    EXPECT_EQ(record.id, i);
  }
  EXPECT_TRUE(dataset->Read(samples.size(), &record).IsOutOfRange());
}

TEST(RecordIODatasetTest, MissingIndexIsScannedAndCanBeWritten) {
  TempDir dir;
  std::string rec = JoinPath(dir.path(), "data.rec");
  WriteShard(rec, ShardFormat::kRecordIO, TrickySamples());
  std::string idx = JoinPath(dir.path(), "data.idx");
  std::string original_index = ReadBytes(idx);
  ASSERT_EQ(::unlink(idx.c_str()), 0);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir.path(), {}, &dataset).ok());
  EXPECT_EQ(dataset->size(), TrickySamples().size());
  uint64_t records = 0;
  ASSERT_TRUE(WriteRecordIOIndex(rec, idx, &records).ok());
  EXPECT_EQ(records, TrickySamples().size());
  EXPECT_EQ(ReadBytes(idx), original_index);
}

TEST(RecordIODatasetTest, SeveralShardsInADirectoryAreOneDataset) {
  TempDir dir;
  std::vector<Sample> samples = TrickySamples();
  std::vector<Sample> first(samples.begin(), samples.begin() + 5);
  std::vector<Sample> second(samples.begin() + 5, samples.end());
  WriteShard(JoinPath(dir.path(), "part-00000.rec"), ShardFormat::kRecordIO, first, 0);
  WriteShard(JoinPath(dir.path(), "part-00001.rec"), ShardFormat::kRecordIO, second, 5);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir.path(), {}, &dataset).ok());
  ASSERT_EQ(dataset->size(), samples.size());
  EXPECT_EQ(dataset->shards().size(), 2u);
  Record record;
  ASSERT_TRUE(dataset->Read(6, &record).ok());
  EXPECT_EQ(record.data, samples[6].data);
  EXPECT_EQ(record.id, 6u);
}

// Bad inputs through the Dataset API.
class RecordIOBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rec_ = JoinPath(dir_.path(), "d.rec");
    idx_ = JoinPath(dir_.path(), "d.idx");
    WriteShard(rec_, ShardFormat::kRecordIO, {{{1}, "first-record"}, {{2}, "second-record"},
                                              {{3}, "third-record"}});
    bytes_ = ReadBytes(rec_);
  }

  Status OpenAndReadAll() {
    std::unique_ptr<Dataset> dataset;
    GPUFEED_RETURN_IF_ERROR(Dataset::Open(rec_, {}, &dataset));
    Record record;
    for (uint64_t i = 0; i < dataset->size(); ++i) GPUFEED_RETURN_IF_ERROR(dataset->Read(i, &record));
    return Status::OK();
  }

  void ExpectCorruptionNaming(const Status& status, const std::string& file,
                              const std::string& needle) {
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.message().find(file), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("offset"), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
  }

  TempDir dir_;
  std::string rec_, idx_, bytes_;
};

TEST_F(RecordIOBadInputTest, TruncatedMidHeader) {
  // Second record starts at 8 + 24 + 12 = 44; cut 3 bytes into its header.
  WriteBytes(rec_, bytes_.substr(0, 47));
  ::unlink(idx_.c_str());
  ExpectCorruptionNaming(OpenAndReadAll(), rec_, "truncated in a record header");
}

TEST_F(RecordIOBadInputTest, TruncatedMidPayload) {
  WriteBytes(rec_, bytes_.substr(0, 60));
  ::unlink(idx_.c_str());
  ExpectCorruptionNaming(OpenAndReadAll(), rec_, "runs past the end");
}

TEST_F(RecordIOBadInputTest, TruncatedWithIndexStillPointingPastTheEnd) {
  WriteBytes(rec_, bytes_.substr(0, 60));
  ExpectCorruptionNaming(OpenAndReadAll(), idx_, "past the end");
}

TEST_F(RecordIOBadInputTest, WrongMagic) {
  std::string bad = bytes_;
  bad[44] ^= 0x55;
  WriteBytes(rec_, bad);
  Status status = OpenAndReadAll();
  ExpectCorruptionNaming(status, rec_, "bad magic");
  EXPECT_NE(status.message().find("sample 1"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("byte offset 44"), std::string::npos) << status.ToString();
}

TEST_F(RecordIOBadInputTest, LegacyMagicIsNamed) {
  std::string bad = bytes_;
  uint32_t legacy = kRecordIOLegacyMagic;
  std::memcpy(bad.data(), &legacy, 4);
  WriteBytes(rec_, bad);
  ExpectCorruptionNaming(OpenAndReadAll(), rec_, "pre-2016");
}

TEST_F(RecordIOBadInputTest, LengthPastEndOfFile) {
  std::string bad = bytes_;
  uint32_t lrec = 500u << 20;  // 500 MiB in a tiny file: never allocated
  std::memcpy(bad.data() + 4, &lrec, 4);
  WriteBytes(rec_, bad);
  ExpectCorruptionNaming(OpenAndReadAll(), rec_, "runs past the end");
}

TEST_F(RecordIOBadInputTest, ContinuationWithoutStart) {
  std::string bad = bytes_;
  uint32_t lrec;
  std::memcpy(&lrec, bad.data() + 4, 4);
  lrec |= 2u << 29;
  std::memcpy(bad.data() + 4, &lrec, 4);
  WriteBytes(rec_, bad);
  ExpectCorruptionNaming(OpenAndReadAll(), rec_, "without a start part");
}

TEST_F(RecordIOBadInputTest, IndexOffsetNotAtRecordBoundary) {
  WriteBytes(idx_, "0\t0\n1\t48\n2\t88\n");  // 48 is inside record 1's payload
  Status status = OpenAndReadAll();
  ExpectCorruptionNaming(status, rec_, "not at a record boundary");
  EXPECT_NE(status.message().find(idx_ + " line 2"), std::string::npos) << status.ToString();
  WriteBytes(idx_, "0\t0\n1\t45\n");  // off the 4-byte grid: caught at open
  ExpectCorruptionNaming(OpenAndReadAll(), idx_, "not at a record boundary");
}

TEST_F(RecordIOBadInputTest, IndexOffsetPastTheEnd) {
  WriteBytes(idx_, "0\t0\n1\t999999\n");
  ExpectCorruptionNaming(OpenAndReadAll(), idx_, "past the end");
}

TEST_F(RecordIOBadInputTest, MalformedIndexLine) {
  WriteBytes(idx_, "0\t0\nnonsense\n");
  ExpectCorruptionNaming(OpenAndReadAll(), idx_ + " line 2", "expected");
}

TEST_F(RecordIOBadInputTest, EmptyFileIsAnEmptyDataset) {
  WriteBytes(rec_, "");
  WriteBytes(idx_, "");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(rec_, {}, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace gpufeed
