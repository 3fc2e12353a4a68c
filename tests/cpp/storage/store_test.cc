// The storage layer: the posix store's bounded descriptors and counters.
// (A dataset of 100,000 shards under `ulimit -n 1024`, which needs the
// loader: tests/cpp/pipeline/descriptor_limit_test.cc.)
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
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


// fork() while other threads read through the store (the torch DataLoader
// workers a Dataset is handed to): the child's reads through the same store
// never wait on the store's lock, or on an open, that a thread of the parent
// held at the fork (that thread does not exist in the child). Two files
// open at most for four, so the readers keep reopening them.
TEST(StoreTest, AForkedChildReadsThroughTheStoreTheParentsThreadsAreReading) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with running threads under a sanitizer runtime";
#endif
  TempDir dir;
  std::shared_ptr<Store> store = NewPosixStore(/*max_open_files=*/2);
  std::vector<std::shared_ptr<const StoreFile>> files;
  for (int i = 0; i < 4; ++i) {
    const std::string path = JoinPath(dir.path(), "f" + std::to_string(i));
    WriteBytes(path, std::string(4096, static_cast<char>('a' + i)));
    std::shared_ptr<const StoreFile> file;
    ASSERT_TRUE(store->Open(path, "", &file).ok());
    files.push_back(file);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      char byte = 0;
      size_t done = 0;
      for (unsigned i = t; !stop.load(std::memory_order_relaxed); ++i) {
        (void)files[i % files.size()]->ReadAt(i % 4096, 1, &byte, &done);
      }
    });
  }
  auto read_every_file = [&] {
    for (size_t i = 0; i < files.size(); ++i) {
      char byte = 0;
      size_t done = 0;
      if (!files[i]->ReadAt(100, 1, &byte, &done).ok() || done != 1 ||
          byte != static_cast<char>('a' + i)) {
        return 2;
      }
    }
    return 0;
  };
  for (int fork_index = 0; fork_index < 200; ++fork_index) {
    const int status = RunInForkedChild(read_every_file, /*alarm_seconds=*/2);
    if (!ExitedWithZero(status)) {
      ADD_FAILURE() << "fork " << fork_index << ": the child hung or failed (wait status "
                    << status << ")";
      break;
    }
  }
  stop = true;
  for (std::thread& reader : readers) reader.join();
}

}  // namespace
}  // namespace gpufeed
