// Token corpora opened from their gpufeed.json (WriteTokenManifest): nothing
// of the token files is opened, stat'ed or read at Dataset::Open, each file
// is opened at its first read, the windows are those of the eager open, a
// node cache's copies spare the source, and a file that no longer matches
// its manifest fails its first read naming the file, offset and sample.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/dataset_base.h"
#include "format/datasets.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "token_test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::vector<std::string> AllWindows(const Dataset& dataset) {
  std::vector<std::string> windows;
  Record record;
  for (uint64_t i = 0; i < dataset.size(); ++i) {
    Status status = dataset.Read(i, &record);
    EXPECT_TRUE(status.ok()) << status.ToString();
    windows.push_back(record.data);
  }
  return windows;
}

DatasetOptions Windows(uint32_t seq_len) {
  DatasetOptions options;
  options.tokens.seq_len = seq_len;
  return options;
}

class TokenManifestTest : public ::testing::Test {
 protected:
  // Three llm.c shards of 101, 7 and 300 tokens: windows of 10 span files.
  void WriteShards() {
    for (int s = 0; s < 3; ++s) {
      shards_.push_back(JoinPath(dir_.path(), "shard_00" + std::to_string(s) + ".bin"));
      WriteLlmc(shards_.back(), s == 0 ? 101 : s == 1 ? 7 : 300, 1 + s);
    }
  }
  void Index(const std::string& path, const DatasetOptions& options = DatasetOptions()) {
    std::string manifest_path;
    uint64_t tokens = 0;
    Status status = WriteTokenManifest(path, options, &manifest_path, &tokens);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(manifest_path, JoinPath(dir_.path(), kManifestName));
  }
  TempDir dir_;
  std::vector<std::string> shards_;
};

TEST_F(TokenManifestTest, LlmcOpensNothingAtOpenAndEachFileOnceAtItsFirstRead) {
  WriteShards();
  std::unique_ptr<Dataset> eager, lazy;
  ASSERT_TRUE(Dataset::Open(dir_.path(), Windows(10), &eager).ok());
  EXPECT_EQ(eager->storage_stats().source_opens, 3u);
  Index(dir_.path());
  ASSERT_TRUE(Dataset::Open(dir_.path(), Windows(10), &lazy).ok());
  EXPECT_EQ(lazy->format(), DatasetFormat::kLlmc);
  EXPECT_EQ(lazy->size(), eager->size());
  EXPECT_EQ(lazy->token_info()->tokens, 408u);
  StorageStats stats = lazy->storage_stats();
  EXPECT_EQ(stats.source_opens, 0u);
  EXPECT_EQ(stats.source_stats, 0u);
  EXPECT_EQ(stats.source_reads, 0u);
  Record record;
  ASSERT_TRUE(lazy->Read(0, &record).ok());
  EXPECT_EQ(lazy->storage_stats().source_opens, 1u);
  EXPECT_EQ(AllWindows(*lazy), AllWindows(*eager));
  stats = lazy->storage_stats();
  EXPECT_EQ(stats.source_opens, 3u);
  EXPECT_EQ(stats.source_stats, 3u);
  // Located reads (the read engine's path) agree too.
  RecordLocation location;
  ASSERT_TRUE(ReadPathOf(*lazy).Locate(20, &location));
  EXPECT_EQ(location.path, shards_[2]);
}

TEST_F(TokenManifestTest, MegatronPrefixOpensNeitherFileAtOpen) {
  std::vector<std::vector<uint16_t>> documents;
  for (int d = 0; d < 20; ++d) documents.emplace_back(5 + d, static_cast<uint16_t>(d));
  const std::string prefix = JoinPath(dir_.path(), "corpus");
  WriteMegatron(prefix, documents);
  std::unique_ptr<Dataset> eager, lazy, whole;
  ASSERT_TRUE(Dataset::Open(prefix, Windows(16), &eager).ok());
  Index(prefix);
  ASSERT_TRUE(Dataset::Open(prefix, Windows(16), &lazy).ok());
  EXPECT_EQ(lazy->format(), DatasetFormat::kMegatron);
  EXPECT_EQ(lazy->token_info()->documents, 20u);
  EXPECT_EQ(lazy->token_info()->sequences, 20u);
  EXPECT_EQ(lazy->storage_stats().source_opens, 0u);
  EXPECT_EQ(AllWindows(*lazy), AllWindows(*eager));
  EXPECT_EQ(lazy->storage_stats().source_opens, 1u);  // the .bin; the .idx is never read
  ASSERT_TRUE(Dataset::Open(dir_.path(), Windows(16), &whole).ok());
  EXPECT_EQ(AllWindows(*whole), AllWindows(*eager));
}

TEST_F(TokenManifestTest, HeaderlessFilesNeedNoDtypeOnceIndexed) {
  const std::string path = JoinPath(dir_.path(), "train.bin");
  std::string bytes;
  for (uint16_t t = 0; t < 500; ++t) Append(&bytes, t);
  WriteBytes(path, bytes);
  DatasetOptions options = Windows(8);
  options.format = DatasetFormat::kTokens;
  options.tokens.token_dtype = TokenDtype::kUint16;
  std::unique_ptr<Dataset> eager, lazy;
  ASSERT_TRUE(Dataset::Open(path, options, &eager).ok());
  Index(path, options);
  options.tokens.token_dtype = TokenDtype::kAuto;
  ASSERT_TRUE(Dataset::Open(path, options, &lazy).ok());
  EXPECT_EQ(lazy->storage_stats().source_opens, 0u);
  EXPECT_EQ(AllWindows(*lazy), AllWindows(*eager));
  options.tokens.token_dtype = TokenDtype::kInt32;
  EXPECT_TRUE(Dataset::Open(path, options, &lazy).IsInvalidArgument());
}

TEST_F(TokenManifestTest, RoundTripKeepsEveryTokenField) {
  WriteMegatron(JoinPath(dir_.path(), "m"), {{1, 2, 3}, {4, 5}});
  std::string manifest_path;
  Manifest written, read;
  ASSERT_TRUE(ManifestForTokenCorpus(dir_.path(), DatasetOptions(), &manifest_path, &written).ok());
  ASSERT_TRUE(ParseManifest(SerializeManifest(written), manifest_path, &read).ok());
  EXPECT_TRUE(ManifestIdentifiesEveryFile(read));
  EXPECT_EQ(read.format, DatasetFormat::kMegatron);
  EXPECT_EQ(read.records, 5u);
  ASSERT_EQ(read.shards.size(), 1u);
  const ManifestShard& shard = read.shards[0];
  EXPECT_EQ(shard.file, "m.bin");
  EXPECT_EQ(shard.index, "m.idx");
  EXPECT_EQ(shard.records, 5u);
  EXPECT_EQ(shard.bytes, 10u);
  EXPECT_EQ(shard.data_offset, 0u);
  EXPECT_EQ(shard.token_dtype, TokenDtype::kUint16);
  EXPECT_EQ(shard.documents, 2u);
  EXPECT_EQ(shard.sequences, 2u);
  EXPECT_EQ(shard.xxh64, written.shards[0].xxh64);
  EXPECT_EQ(shard.index_bytes, written.shards[0].index_bytes);
  EXPECT_EQ(shard.index_xxh64, written.shards[0].index_xxh64);
  // Tokens that cannot fit in the file's bytes are refused unread.
  std::string text = SerializeManifest(written);
  text.replace(text.find("\"bytes\": 10"), 11, "\"bytes\": 8");
  Status status = ParseManifest(text, manifest_path, &read);
  EXPECT_TRUE(status.IsCorruption());
  EXPECT_NE(status.message().find("do not fit"), std::string::npos) << status.ToString();
}

// Megatron's counts, accepted on every token format, survive a write and a
// read of an llm.c manifest too; a shard without them is written without.
TEST_F(TokenManifestTest, RoundTripKeepsCountsGivenOnAnyTokenFormat) {
  const std::string text =
      R"({"format": "llmc", "format_version": 1, "records": 1,
          "shards": [{"file": "a.bin", "records": 1, "documents": 3, "sequences": 4}]})";
  Manifest first, again;
  ASSERT_TRUE(ParseManifest(text, "/x/gpufeed.json", &first).ok());
  ASSERT_TRUE(ParseManifest(SerializeManifest(first), "/x/gpufeed.json", &again).ok());
  ASSERT_EQ(again.shards.size(), 1u);
  EXPECT_EQ(again.shards[0].documents, 3u);
  EXPECT_EQ(again.shards[0].sequences, 4u);
  // Without them, an llm.c shard is written without them.
  first.shards[0].documents = first.shards[0].sequences = 0;
  EXPECT_EQ(SerializeManifest(first).find("documents"), std::string::npos);
}

TEST_F(TokenManifestTest, AFileThatChangedFailsItsFirstReadNamingItTheOffsetAndTheSample) {
  WriteShards();
  Index(dir_.path());
  // Shard 1 truncated; shard 2 rewritten at the same size as 150 uint32 tokens.
  ASSERT_EQ(::truncate(shards_[1].c_str(), 1024 + 4), 0);
  std::string replaced;
  Append<int32_t>(&replaced, kLlmcMagicUint32);
  Append<int32_t>(&replaced, 1);
  Append<int32_t>(&replaced, 150);
  replaced.resize(kLlmcHeaderBytes + 600, '\0');
  WriteBytes(shards_[2], replaced);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir_.path(), Windows(10), &dataset).ok());
  Record record;
  ASSERT_TRUE(dataset->Read(0, &record).ok());
  Status status = dataset->Read(10, &record);  // tokens 100..110: shards 0, 1, 2
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(shards_[1]), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find(kManifestName), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("sample 10"), std::string::npos) << status.ToString();
  status = dataset->Read(20, &record);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(shards_[2] + " at byte offset 0"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find("sample 20"), std::string::npos) << status.ToString();
  RecordLocation location;
  EXPECT_FALSE(ReadPathOf(*dataset).Locate(21, &location));  // never the wrong tokens
  VerifyReport report;
  ASSERT_TRUE(Verify(dir_.path(), DatasetOptions(), &report).ok());
  EXPECT_EQ(report.problems.size(), 2u);
}

TEST_F(TokenManifestTest, VerifyChecksTheMegatronIndexTheLazyOpenNeverReads) {
  std::vector<std::vector<uint16_t>> documents;
  for (int d = 0; d < 20; ++d) documents.emplace_back(5 + d, static_cast<uint16_t>(d));
  const std::string prefix = JoinPath(dir_.path(), "corpus");
  WriteMegatron(prefix, documents);
  Index(prefix);
  VerifyReport report;
  ASSERT_TRUE(Verify(prefix, DatasetOptions(), &report).ok());
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
  EXPECT_EQ(report.checksums_checked, 2u);  // the .bin and the .idx
  // One document length changed in place: same size, other counts. The
  // lazy open still opens (it reads neither file); verify names the .idx.
  std::string index = ReadBytes(prefix + ".idx");
  index[9 + 8 + 1 + 8 + 8] ^= 1;
  WriteBytes(prefix + ".idx", index);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(prefix, Windows(16), &dataset).ok());
  ASSERT_TRUE(Verify(prefix, DatasetOptions(), &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find(prefix + ".idx: xxh64"), std::string::npos)
      << report.problems[0];
  EXPECT_NE(report.problems[0].find("gpufeed index"), std::string::npos) << report.problems[0];
  // Truncated: its size differs from the manifest's.
  index.resize(index.size() - 8);
  WriteBytes(prefix + ".idx", index);
  ASSERT_TRUE(Verify(prefix, DatasetOptions(), &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("bytes, but the manifest says"), std::string::npos)
      << report.problems[0];
}

TEST_F(TokenManifestTest, WithANodeCacheOnlyTheFillerOpensTheSource) {
  WriteShards();
  Index(dir_.path());
  DatasetOptions options = Windows(10);
  options.cache.cache_dir = JoinPath(dir_.path(), "cache");
  options.cache.capacity = 64 << 20;
  std::vector<std::string> expected;
  {
    std::unique_ptr<Dataset> filler;
    ASSERT_TRUE(Dataset::Open(dir_.path(), options, &filler).ok());
    EXPECT_EQ(filler->storage_stats().source_opens, 0u);
    expected = AllWindows(*filler);
    static_cast<const DatasetBase&>(*filler).store()->Drain();
  }
  std::unique_ptr<Dataset> reader;
  ASSERT_TRUE(Dataset::Open(dir_.path(), options, &reader).ok());
  EXPECT_EQ(AllWindows(*reader), expected);
  StorageStats stats = reader->storage_stats();
  EXPECT_EQ(stats.source_opens, 0u);
  EXPECT_EQ(stats.source_stats, 0u);
  EXPECT_EQ(stats.source_bytes, 0u);
  EXPECT_GT(stats.cache_reads, 0u);
}

}  // namespace
}  // namespace gpufeed
