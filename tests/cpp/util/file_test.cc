#include "util/file.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "util/checksum.h"
#include "util/path.h"

namespace gpufeed {
namespace {

TEST(PathTest, JoinDirnameBasename) {
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a", "/abs"), "/abs");
  EXPECT_EQ(Dirname("/a/b/c.rec"), "/a/b");
  EXPECT_EQ(Dirname("c.rec"), ".");
  EXPECT_EQ(Basename("/a/b/"), "b");
  EXPECT_EQ(IndexPathFor("/d/part-00000.rec"), "/d/part-00000.idx");
}

TEST(FileTest, AtomicWriteAndReadBack) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "f.txt");
  ASSERT_TRUE(WriteFileAtomically(path, "hello").ok());
  std::string text;
  ASSERT_TRUE(ReadFileToString(path, &text).ok());
  EXPECT_EQ(text, "hello");
  ASSERT_TRUE(WriteFileAtomically(path, "world!").ok());
  ASSERT_TRUE(ReadFileToString(path, &text).ok());
  EXPECT_EQ(text, "world!");
  std::vector<DirectoryEntry> entries;
  ASSERT_TRUE(ListDirectory(dir.path(), &entries).ok());
  ASSERT_EQ(entries.size(), 1u);  // no temporary left behind
}

TEST(FileTest, MissingFileIsNotFoundNamingThePath) {
  std::string text;
  Status status = ReadFileToString("/nonexistent/gpufeed/x", &text);
  EXPECT_TRUE(status.IsNotFound());
  EXPECT_NE(status.message().find("/nonexistent/gpufeed/x"), std::string::npos);
}

TEST(ChecksumTest, Xxh64MatchesKnownVector) {
  // XXH64("", seed 0) = 0xef46db3751d8e999 (the reference test vector).
  Xxh64 empty;
  EXPECT_EQ(Xxh64Hex(empty.Digest()), "ef46db3751d8e999");
  TempDir dir;
  std::string path = JoinPath(dir.path(), "empty");
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  uint64_t digest = 0;
  ASSERT_TRUE(FileXxh64(path, &digest).ok());
  EXPECT_EQ(Xxh64Hex(digest), "ef46db3751d8e999");
}

}  // namespace
}  // namespace gpufeed
