// The storage layer: the posix store's bounded descriptors and counters.
// (A dataset of 100,000 shards under `ulimit -n 1024`, which needs the
// loader: tests/cpp/pipeline/descriptor_limit_test.cc.)
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/store.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

TEST(StoreTest, ThePosixStoreKeepsAtMostItsLimitOfDescriptorsOpen) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 40; ++i) {
    paths.push_back(JoinPath(dir.path(), "f" + std::to_string(i)));
    WriteBytes(paths.back(), std::string(100 + i, static_cast<char>('a' + i % 26)));
  }
  std::shared_ptr<Store> store = NewPosixStore(/*max_open_files=*/8);
  std::vector<std::shared_ptr<const StoreFile>> files;
  for (const std::string& path : paths) {
    std::shared_ptr<const StoreFile> file;
    ASSERT_TRUE(store->Open(path, "", &file).ok());
    files.push_back(file);
    EXPECT_LE(store->stats().open_files, 8u);
  }
  EXPECT_EQ(store->stats().source_opens, 40u);
  EXPECT_EQ(store->stats().source_stats, 40u);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 40; ++i) {
      std::string bytes(files[i]->size(), '\0');
      size_t done = 0;
      ASSERT_TRUE(files[i]->ReadAt(0, bytes.size(), bytes.data(), &done).ok());
      EXPECT_EQ(done, bytes.size());
      EXPECT_EQ(bytes, std::string(100 + i, static_cast<char>('a' + i % 26)));
      EXPECT_LE(store->stats().open_files, 8u);
    }
  }
  StorageStats stats = store->stats();
  EXPECT_EQ(stats.source_reads, 80u);
  // Reopened after eviction, never stat'ed again by path.
  EXPECT_GT(stats.source_opens, 40u);
  // A view keeps its descriptor usable after eviction.
  FileView view;
  ASSERT_TRUE(files[0]->View(0, 10, &view).ok());
  for (int i = 1; i < 40; ++i) {
    FileView other;
    ASSERT_TRUE(files[i]->View(0, 10, &other).ok());
  }
  char first = 0;
  EXPECT_EQ(::pread(view.fd, &first, 1, 0), 1);
  EXPECT_EQ(first, 'a');
}

TEST(StoreTest, AReadNeverHandsOnBytesPastTheSizeTheFileHadWhenOpened) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "grows");
  WriteBytes(path, std::string(1000, 'a'));
  std::shared_ptr<Store> store = NewPosixStore();
  std::shared_ptr<const StoreFile> file;
  ASSERT_TRUE(store->Open(path, "", &file).ok());
  ASSERT_EQ(file->size(), 1000u);
  // The file grows after it was opened: its new bytes are not the dataset's.
  WriteBytes(path, std::string(1000, 'a') + std::string(5000, 'b'));
  std::string bytes(4096, '\0');
  size_t done = 0;
  ASSERT_TRUE(file->ReadAt(500, bytes.size(), bytes.data(), &done).ok());
  EXPECT_EQ(done, 500u);
  EXPECT_EQ(bytes.substr(0, done), std::string(500, 'a'));
  EXPECT_EQ(bytes.substr(done), std::string(4096 - 500, '\0'));  // nothing written past it
  ASSERT_TRUE(file->ReadAt(1000, 10, bytes.data(), &done).ok());
  EXPECT_EQ(done, 0u);
  ASSERT_TRUE(file->ReadAt(5000, 10, bytes.data(), &done).ok());
  EXPECT_EQ(done, 0u);
}

}  // namespace
}  // namespace gpufeed
