// Token corpora: Megatron .bin/.idx, llm.c shards and headerless files, as
// written here byte by byte (independently of gpufeed's parsers), opened by
// Dataset::Open, read as windows, and refused with the file and offset when
// the header or index is bad.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "format/dataset_base.h"
#include "format/token_corpus.h"
#include "gpufeed/dataset.h"
#include "test_util.h"
#include "token_test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::vector<uint16_t> Window(const Record& record) {
  std::vector<uint16_t> out(record.data.size() / 2);
  std::memcpy(out.data(), record.data.data(), record.data.size());
  return out;
}

TEST(TokenCorpusTest, MegatronWindowsMatchTheStream) {
  TempDir dir;
  std::vector<std::vector<uint16_t>> documents;
  std::mt19937 rng(3);
  for (int d = 0; d < 20; ++d) {
    documents.emplace_back(1 + rng() % 90);
    for (auto& t : documents.back()) t = static_cast<uint16_t>(rng());
  }
  auto stream = WriteMegatron(JoinPath(dir.path(), "corpus"), documents);
  DatasetOptions options;
  options.tokens.seq_len = 16;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(JoinPath(dir.path(), "corpus"), options, &dataset).ok());
  EXPECT_EQ(dataset->format(), DatasetFormat::kMegatron);
  ASSERT_NE(dataset->token_info(), nullptr);
  EXPECT_EQ(dataset->token_info()->tokens, stream.size());
  EXPECT_EQ(dataset->token_info()->documents, 20u);
  EXPECT_EQ(dataset->size(), (stream.size() - 1) / 16);
  Record record;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    std::vector<uint16_t> expected(stream.begin() + i * 16, stream.begin() + i * 16 + 17);
    ASSERT_EQ(Window(record), expected) << i;
  }
  EXPECT_TRUE(dataset->Read(dataset->size(), &record).IsOutOfRange());
}

TEST(TokenCorpusTest, LlmcDirectoryIsOneStreamAndWindowsSpanFiles) {
  TempDir dir;
  auto a = WriteLlmc(JoinPath(dir.path(), "shard_000.bin"), 101, 1);
  auto b = WriteLlmc(JoinPath(dir.path(), "shard_001.bin"), 7, 2);
  auto c = WriteLlmc(JoinPath(dir.path(), "shard_002.bin"), 300, 3);
  std::vector<uint16_t> stream = a;
  stream.insert(stream.end(), b.begin(), b.end());
  stream.insert(stream.end(), c.begin(), c.end());
  DatasetOptions options;
  options.tokens.seq_len = 10;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir.path(), options, &dataset).ok());
  EXPECT_EQ(dataset->format(), DatasetFormat::kLlmc);
  EXPECT_EQ(dataset->shards().size(), 3u);
  Record record;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    std::vector<uint16_t> expected(stream.begin() + i * 10, stream.begin() + i * 10 + 11);
    ASSERT_EQ(Window(record), expected) << i;
    RecordLocation location;
    bool inside = (i * 10 + 11 <= 101) || (i * 10 >= 108 && i * 10 + 11 <= 108 + 300);
    EXPECT_EQ(ReadPathOf(*dataset).Locate(i, &location), inside) << i;  // spanning: Read assembles
  }
}

TEST(TokenCorpusTest, HeaderlessNeedsItsDtype) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "train.bin");
  WriteBytes(path, std::string(1002, '\x01'));
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(path, DatasetOptions(), &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  DatasetOptions options;
  options.format = DatasetFormat::kTokens;
  status = Dataset::Open(path, options, &dataset);
  EXPECT_NE(status.ToString().find("token_dtype"), std::string::npos) << status.ToString();
  options.tokens.token_dtype = TokenDtype::kUint16;
  ASSERT_TRUE(Dataset::Open(path, options, &dataset).ok());
  EXPECT_EQ(dataset->token_info()->tokens, 501u);
  options.tokens.token_dtype = TokenDtype::kInt32;  // 1002 is not a multiple of 4
  status = Dataset::Open(path, options, &dataset);
  EXPECT_TRUE(status.IsCorruption());
  EXPECT_NE(status.ToString().find("train.bin at byte offset 1000"), std::string::npos)
      << status.ToString();
}

TEST(TokenCorpusTest, BadMegatronIndexNamesFileAndOffset) {
  TempDir dir;
  std::string prefix = JoinPath(dir.path(), "m");
  WriteMegatron(prefix, {{1, 2, 3}, {4, 5}, {6}});
  std::string good = ReadBytes(prefix + ".idx");
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::string pointer = good;
  int64_t wrong = 2;  // the second sequence must start at byte 6
  std::memcpy(&pointer[34 + 12 + 8], &wrong, 8);
  std::string documents = good;
  int64_t backwards = 3;  // entry 1 becomes 3, so entry 2 (2) goes backwards
  std::memcpy(&documents[34 + 36 + 8], &backwards, 8);
  std::vector<Case> cases = {
      {good.substr(0, 20), "shorter than the 34-byte"},
      {"XX" + good.substr(2), "byte offset 0"},
      {good.substr(0, good.size() - 1), "do not fit"},
      {pointer, "byte offset 54"},
      {documents, "byte offset 86"},
      {good + "xx", "bytes after the document indices"},
  };
  for (const Case& c : cases) {
    WriteBytes(prefix + ".idx", c.bytes);
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(prefix, DatasetOptions(), &dataset);
    EXPECT_TRUE(status.IsCorruption()) << status.ToString();
    EXPECT_NE(status.ToString().find("m.idx"), std::string::npos) << status.ToString();
    EXPECT_NE(status.ToString().find(c.message), std::string::npos) << status.ToString();
    VerifyReport report;
    ASSERT_TRUE(Verify(prefix, DatasetOptions(), &report).ok());
    EXPECT_FALSE(report.ok());
  }
  // A .bin shorter than the index says.
  WriteBytes(prefix + ".idx", good);
  WriteBytes(prefix + ".bin", std::string(8, '\0'));
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(prefix, DatasetOptions(), &dataset);
  EXPECT_NE(status.ToString().find("past the end of the 8-byte .bin"), std::string::npos)
      << status.ToString();
}

TEST(TokenCorpusTest, LlmcHeaderChecks) {
  char header[kLlmcHeaderBytes] = {};
  int32_t fields[3] = {kLlmcMagicUint32, 7, 10};
  std::memcpy(header, fields, sizeof(fields));
  LlmcHeader parsed;
  EXPECT_TRUE(ParseLlmcHeader(header, sizeof(header), "s.bin", 1024 + 40, &parsed).ok());
  EXPECT_EQ(parsed.dtype, TokenDtype::kUint32);
  Status status = ParseLlmcHeader(header, sizeof(header), "s.bin", 1024 + 39, &parsed);
  EXPECT_NE(status.ToString().find("s.bin at byte offset 8"), std::string::npos);
  EXPECT_TRUE(ParseLlmcHeader(header, 100, "s.bin", 1024 + 40, &parsed).IsCorruption());
  fields[0] = 1234;
  std::memcpy(header, fields, sizeof(fields));
  EXPECT_TRUE(ParseLlmcHeader(header, sizeof(header), "s.bin", 1024 + 40, &parsed).IsCorruption());
}

}  // namespace
}  // namespace gpufeed
