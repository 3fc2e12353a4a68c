// gpufeed.heads (token_heads.h): `gpufeed index` writes the token at every
// 512-byte boundary of each file's token data; a window located alone whose
// last token is one of them is located without it and gets it from the
// heads, with the same bytes as a window read whole. Heads that disagree
// with the data fail the window naming the file, offset and sample; a
// damaged or foreign heads file is not used.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/dataset_base.h"
#include "format/manifest.h"
#include "format/token_corpus.h"
#include "format/token_heads.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "token_test_util.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// seq_len 256 of uint16: a window is 514 bytes at a stride of 512.
constexpr uint32_t kSeqLen = 256;

class TokenHeadsTest : public ::testing::Test {
 protected:
  // Two llm.c shards (token data from byte 1024): shard 0's windows all
  // end on a boundary; shard 1 starts at token 2,280, so its windows start
  // 24 tokens (48 bytes) past one and are read whole.
  void SetUp() override {
    shards_ = {JoinPath(dir_.path(), "shard_000.bin"), JoinPath(dir_.path(), "shard_001.bin")};
    stream_ = WriteLlmc(shards_[0], 5 * kSeqLen + 1000, 1);
    std::vector<uint16_t> second = WriteLlmc(shards_[1], 3000, 2);
    stream_.insert(stream_.end(), second.begin(), second.end());
  }
  void Index() {
    std::string manifest_path;
    uint64_t tokens = 0;
    Status status = WriteTokenManifest(dir_.path(), DatasetOptions(), &manifest_path, &tokens);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  std::unique_ptr<Dataset> Open() {
    DatasetOptions options;
    options.tokens.seq_len = kSeqLen;
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(dir_.path(), options, &dataset);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return dataset;
  }
  // Window `index` as the read engine would give it: Locate's range read
  // from the file, then WindowIn. Sets *length to the located bytes.
  Status Fetch(const Dataset& dataset, uint64_t index, std::string* window, uint64_t* length) {
    RecordLocation location;
    if (!ReadPathOf(dataset).Locate(index, &location)) return Status::NotFound("not located");
    std::string bytes;
    GPUFEED_RETURN_IF_ERROR(ReadFileToString(location.path, &bytes));
    *length = location.length;
    TokenWindowBytes parts;
    GPUFEED_RETURN_IF_ERROR(AsTokenWindows(dataset)->WindowIn(
        index, location, bytes.data() + location.offset, location.length, &parts));
    window->assign(parts.tokens, kSeqLen * 2);
    window->append(parts.last, 2);
    return Status::OK();
  }
  std::string Expected(uint64_t index) const {
    return std::string(reinterpret_cast<const char*>(stream_.data() + index * kSeqLen),
                       (kSeqLen + 1) * 2);
  }
  TempDir dir_;
  std::vector<std::string> shards_;
  std::vector<uint16_t> stream_;
};

TEST(TokenHeadsFormatTest, SpanCountsEveryBoundaryWhoseTokenFits) {
  uint64_t first = 0, count = 0;
  TokenHeadsSpan(1024, 1024 + 2 * 1000, 512, 2, &first, &count);
  EXPECT_EQ(first, 1024u);
  EXPECT_EQ(count, 4u);  // 1024, 1536, 2048, 2560 (3072 is past the data)
  TokenHeadsSpan(6, 6 + 2 * 253, 512, 2, &first, &count);
  EXPECT_EQ(first, 512u);
  EXPECT_EQ(count, 0u);  // the data ends at 512
  TokenHeadsSpan(6, 6 + 2 * 254, 512, 2, &first, &count);
  EXPECT_EQ(count, 1u);
  TokenHeadsSpan(0, 0, 512, 4, &first, &count);
  EXPECT_EQ(count, 0u);
}

TEST_F(TokenHeadsTest, IndexWritesTheTokenAtEveryBoundary) {
  Index();
  std::shared_ptr<const TokenHeads> heads;
  const std::string path = JoinPath(dir_.path(), kTokenHeadsName);
  Status status = TokenHeads::Open(path, &heads);
  ASSERT_TRUE(status.ok()) << status.ToString();
  Manifest manifest;
  ASSERT_TRUE(ReadManifest(JoinPath(dir_.path(), kManifestName), &manifest).ok());
  uint64_t first_token = 0;
  for (size_t s = 0; s < 2; ++s) {
    const ManifestShard& shard = manifest.shards[s];
    const uint64_t end = kLlmcHeaderBytes + shard.records * 2;
    const TokenHeadsEntry* entry = heads->Find(shard.bytes, shard.xxh64, kLlmcHeaderBytes, end);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(heads->Find(shard.bytes + 1, shard.xxh64, kLlmcHeaderBytes, end), nullptr);
    EXPECT_EQ(entry->count, (shard.records * 2 - 2) / 512 + 1);
    for (uint64_t offset = kLlmcHeaderBytes; offset < end; offset += 2) {
      const char* head = heads->At(*entry, offset);
      ASSERT_EQ(head != nullptr, offset % 512 == 0) << offset;
      if (head == nullptr) continue;
      uint16_t token;
      std::memcpy(&token, head, 2);
      EXPECT_EQ(token, stream_[first_token + (offset - kLlmcHeaderBytes) / 2]) << offset;
    }
    first_token += shard.records;
  }
}

TEST_F(TokenHeadsTest, AlignedWindowsReadOneTokenLessWithTheSameBytes) {
  Index();
  std::unique_ptr<Dataset> dataset = Open();
  const uint64_t in_first = (5 * kSeqLen + 1000 - 1) / kSeqLen;  // windows inside shard 0
  size_t shortened = 0;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    std::string window;
    uint64_t length = 0;
    Status status = Fetch(*dataset, i, &window, &length);
    if (status.code() == Status::Code::kNotFound) continue;  // spans both shards
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(window, Expected(i)) << i;
    if (i < in_first) EXPECT_EQ(length, kSeqLen * 2u) << i;
    shortened += length == kSeqLen * 2u ? 1 : 0;
    Record record;
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    EXPECT_EQ(record.data, Expected(i));
  }
  EXPECT_GE(shortened, in_first);
  EXPECT_LT(shortened, dataset->size());  // shard 1's unaligned windows are read whole
}

// A window whose first seq_len tokens are shorter than a granule would hold
// no head to check the data against: it is read whole.
TEST_F(TokenHeadsTest, WindowsShorterThanAGranuleAreReadWhole) {
  Index();
  DatasetOptions options;
  options.tokens.seq_len = 128;  // 256 bytes
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir_.path(), options, &dataset).ok());
  for (uint64_t i : {1u, 3u, 5u}) {  // windows ending on a boundary
    RecordLocation location;
    ASSERT_TRUE(ReadPathOf(*dataset).Locate(i, &location));
    EXPECT_EQ(location.length, 129u * 2) << i;
  }
}

TEST_F(TokenHeadsTest, AWriterWithoutCommitLeavesNoFile) {
  const std::string path = JoinPath(dir_.path(), kTokenHeadsName);
  {
    TokenHeadsWriter writer;
    ASSERT_TRUE(writer.Open(path, 2, 2).ok());
    ASSERT_TRUE(writer.Add(TokenHeadsEntry{}, "").ok());
    Status status = writer.Commit();  // one file of two added
    EXPECT_EQ(status.code(), Status::Code::kInternal) << status.ToString();
  }
  std::vector<DirectoryEntry> entries;
  ASSERT_TRUE(ListDirectory(dir_.path(), &entries).ok());
  for (const DirectoryEntry& e : entries) EXPECT_EQ(e.name.find("gpufeed.heads"), std::string::npos);
}

TEST_F(TokenHeadsTest, WithoutHeadsEveryWindowIsReadWhole) {
  Index();
  ASSERT_EQ(::unlink(JoinPath(dir_.path(), kTokenHeadsName).c_str()), 0);
  std::unique_ptr<Dataset> dataset = Open();
  std::string window;
  uint64_t length = 0;
  ASSERT_TRUE(Fetch(*dataset, 0, &window, &length).ok());
  EXPECT_EQ(length, (kSeqLen + 1) * 2u);
  EXPECT_EQ(window, Expected(0));
}

TEST_F(TokenHeadsTest, ADamagedHeadsFileIsNotUsed) {
  Index();
  const std::string path = JoinPath(dir_.path(), kTokenHeadsName);
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(path, &bytes).ok());
  bytes[kTokenHeadsHeaderBytes + 3] ^= 1;  // a directory byte: its checksum fails
  WriteBytes(path, bytes);
  std::shared_ptr<const TokenHeads> heads;
  Status status = TokenHeads::Open(path, &heads);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(path + " at byte offset 24"), std::string::npos)
      << status.ToString();
  std::unique_ptr<Dataset> dataset = Open();
  std::string window;
  uint64_t length = 0;
  ASSERT_TRUE(Fetch(*dataset, 1, &window, &length).ok());
  EXPECT_EQ(length, (kSeqLen + 1) * 2u);
  EXPECT_EQ(window, Expected(1));
}

TEST_F(TokenHeadsTest, HeadsThatDisagreeWithTheDataFailNamingFileOffsetAndSample) {
  Index();
  // Shard 0 rewritten at the same size after `gpufeed index`: its manifest
  // identity still holds for the lazy open, but its tokens changed.
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(shards_[0], &bytes).ok());
  for (size_t i = kLlmcHeaderBytes; i < bytes.size(); ++i) bytes[i] = static_cast<char>(~bytes[i]);
  WriteBytes(shards_[0], bytes);
  std::unique_ptr<Dataset> dataset = Open();
  std::string window;
  uint64_t length = 0;
  Status status = Fetch(*dataset, 3, &window, &length);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find(shards_[0] + " at byte offset " +
                                  std::to_string(kLlmcHeaderBytes + 3 * 512)),
            std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find(kTokenHeadsName), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("sample 3"), std::string::npos) << status.ToString();
}

TEST_F(TokenHeadsTest, VerifyComparesEveryHeadWithItsToken) {
  Index();
  VerifyReport clean;
  ASSERT_TRUE(Verify(dir_.path(), DatasetOptions(), &clean).ok());
  EXPECT_TRUE(clean.problems.empty()) << clean.problems.front();
  // The last byte of the file is the last head of shard 1.
  const std::string path = JoinPath(dir_.path(), kTokenHeadsName);
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(path, &bytes).ok());
  bytes.back() ^= 1;
  WriteBytes(path, bytes);
  VerifyReport report;
  ASSERT_TRUE(Verify(dir_.path(), DatasetOptions(), &report).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  const uint64_t last_head = kLlmcHeaderBytes + (3000 * 2 - 2) / 512 * 512;
  EXPECT_NE(report.problems[0].find(shards_[1] + " at byte offset " + std::to_string(last_head)),
            std::string::npos)
      << report.problems[0];
  EXPECT_NE(report.problems[0].find(kTokenHeadsName), std::string::npos) << report.problems[0];
}

TEST(TokenHeadsFormatTest, ParserRefusesEntriesOutsideTheFile) {
  TokenHeadsLayout layout;
  layout.token_bytes = 2;
  TokenHeadsEntry entry{4096, 7, 0, 4096, 0, 0, 0};
  TokenHeadsSpan(0, 4096, layout.granule, 2, &entry.first, &entry.count);
  layout.entries.push_back(entry);
  std::string bytes = SerializeTokenHeads(&layout, {std::string(entry.count * 2, 'x')});
  TokenHeadsLayout parsed;
  ASSERT_TRUE(ParseTokenHeads(bytes.data(), bytes.size(), "t.heads", &parsed).ok());
  EXPECT_EQ(parsed.entries.size(), 1u);
  EXPECT_EQ(parsed.entries[0].at, kTokenHeadsHeaderBytes + kTokenHeadsEntryBytes);
  Status status = ParseTokenHeads(bytes.data(), bytes.size() - 1, "t.heads", &parsed);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("t.heads at byte offset 32"), std::string::npos)
      << status.ToString();
  status = ParseTokenHeads(bytes.data(), 10, "t.heads", &parsed);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
}

}  // namespace
}  // namespace gpufeed
