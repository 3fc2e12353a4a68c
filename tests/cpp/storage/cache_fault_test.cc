// The node cache under read faults, on real files and a real kernel: an EIO
// injected into a fill's reads (ReadEngineTestHooks: the one fault a real
// file cannot produce on demand), sources that really shrink or grow during
// a fill, and a source really rewritten under its manifest's checksum. A
// fill that fails publishes nothing, its readers get the source's bytes,
// and the fill is tried again after its delay (node_cache.h).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "format/manifest.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "io/read_engine.h"
#include "storage/cache_directory.h"
#include "storage/node_cache.h"
#include "storage/store.h"
#include "test_util.h"
#include "util/checksum.h"
#include "util/file.h"
#include "util/path.h"

namespace gpufeed {
namespace {

using std::chrono::milliseconds;

constexpr size_t kChunk = 4 << 20;  // cache_fill.cc's largest read (no readers); tag = offset

std::string Pattern(uint64_t seed, size_t size) {
  std::string bytes(size, '\0');
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    bytes[i] = static_cast<char>(state);
  }
  return bytes;
}

size_t CountSuffix(const std::string& directory, const std::string& suffix) {
  size_t count = 0;
  std::vector<DirectoryEntry> entries;
  if (ListDirectory(directory, &entries).ok()) {
    for (const DirectoryEntry& entry : entries) count += EndsWith(entry.name, suffix);
  }
  return count;
}

// The .data entries in `directory` whose bytes are not those of any file of
// `sources` (a whole-file entry is the file's bytes).
size_t EntriesMatchingNoSource(const std::string& directory,
                               const std::vector<std::string>& sources) {
  std::vector<std::string> originals(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) (void)ReadFileToString(sources[i], &originals[i]);
  size_t unmatched = 0;
  std::vector<DirectoryEntry> entries;
  if (ListDirectory(directory, &entries).ok()) {
    for (const DirectoryEntry& entry : entries) {
      if (!EndsWith(entry.name, ".data")) continue;
      std::string bytes;
      const bool read = ReadFileToString(JoinPath(directory, entry.name), &bytes).ok();
      unmatched += !read || std::find(originals.begin(), originals.end(), bytes) == originals.end();
    }
  }
  return unmatched;
}

// A switchable EIO on the fill reads of chunk `tag` (offset / kChunk; any
// chunk: kAnyTag), counted.
struct Fault {
  static constexpr uint64_t kAnyTag = ~0ull;
  std::atomic<bool> on{true};
  std::atomic<uint64_t> tag{kAnyTag};
  std::atomic<int> injected{0};
};

ReadEngineTestHooks EioHooks(std::shared_ptr<Fault> fault) {
  ReadEngineTestHooks hooks;
  hooks.inject_read_error = [fault](uint64_t tag) {
    if (!fault->on.load()) return 0;
    if (fault->tag.load() != Fault::kAnyTag && fault->tag.load() != tag / kChunk) return 0;
    fault->injected.fetch_add(1);
    return EIO;
  };
  return hooks;
}

class CacheFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_dir_ = JoinPath(dir_.path(), "cache");
    NodeCache::SetRetryFillAfterForTesting(milliseconds(300));
  }
  void TearDown() override { NodeCache::SetRetryFillAfterForTesting(milliseconds(0)); }

  CacheSource MakeFile(const std::string& name, size_t size) {
    std::string path = JoinPath(dir_.path(), name);
    WriteBytes(path, Pattern(size, size));
    CacheSource source;
    EXPECT_TRUE(StatCacheSource(path, &source).ok());
    source.dataset = dir_.path();
    return source;
  }

  // Nothing published for `source`, and no temporary file left.
  void ExpectNothingKept(CacheDirectory& directory, const CacheSource& source) {
    EXPECT_FALSE(directory.HasEntry(source));
    CacheLease lease;
    EXPECT_FALSE(directory.OpenEntry(source, &lease).ok());
    EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 0u);
    EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "entries"), ".data"), 0u);
  }

  void ExpectCopyEqualsSource(CacheDirectory& directory, const CacheSource& source) {
    CacheLease lease;
    ASSERT_TRUE(directory.OpenEntry(source, &lease).ok()) << source.path;
    EXPECT_TRUE(ReadBytes(lease.path) == ReadBytes(source.path)) << lease.path;
  }

  TempDir dir_;
  std::string cache_dir_;
};

TEST_F(CacheFaultTest, AnEioInTheMiddleOfAFillPublishesNothingAndTheNextFillDoes) {
  // 20 MiB; the fault is on every read that starts in chunk 2 (8 to 12
  // MiB): the fill's read at 11 MiB (its regions ramp up: reads at 0, 0.5,
  // 1, 2, 3, 5, 7, 11, 15 MiB, ...).
  CacheSource source = MakeFile("big.rec", 20 << 20);
  auto fault = std::make_shared<Fault>();
  fault->tag = 2;
  ScopedReadEngineTestHooks scoped(EioHooks(fault));
  std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();
  ASSERT_NE(engine, nullptr);
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  uint64_t progress = 0;
  FillRequest request;
  request.engine = engine.get();
  request.progress = [&](uint64_t done, uint64_t) { progress = done; };
  FillResult result;
  Status status = directory->Fill(source, request, &result);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.ToString().find(source.path), std::string::npos) << status.ToString();
  EXPECT_EQ(result.outcome, FillOutcome::kSourceChanged);
  EXPECT_GT(fault->injected.load(), 0);
  // Progress (what readers of the copy in progress may read) never passed
  // the start of the failed read (11 MiB; 7 MiB when the fill stopped
  // before the read ahead of it landed).
  EXPECT_LE(progress, uint64_t{11} << 20);
  ExpectNothingKept(*directory, source);
  // The fault clears: the next fill, through the same engine, makes the copy.
  fault->on = false;
  status = directory->Fill(source, request, &result);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(result.outcome, FillOutcome::kFilled);
  EXPECT_EQ(progress, source.size);
  ExpectCopyEqualsSource(*directory, source);
}

// Resizes the source after the first batch of the fill was copied.
void FillWhileResizing(CacheDirectory& directory, const CacheSource& source, uint64_t new_size,
                       Status* status, FillResult* result, uint64_t* progress) {
  std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();
  FillRequest request;
  request.engine = engine.get();
  request.progress = [&](uint64_t done, uint64_t) {
    if (*progress == 0) EXPECT_EQ(::truncate(source.path.c_str(), new_size), 0);
    *progress = done;
  };
  *status = directory.Fill(source, request, result);
}

TEST_F(CacheFaultTest, ASourceThatShrinksOrGrowsDuringAFillIsNotPublished) {
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  // 40 MiB, copied in regions of 1, 2, 4, 9 and then 16 MiB (reads of up to
  // 4 MiB); after the first read's progress it shrinks to 10 MiB (the read
  // at 7 MiB comes back short: progress stays at 7 MiB), or to 30 or 36 MiB,
  // or grows by 1 MiB (every read of the first 16 MiB is whole: the size
  // check at the end of the first writeback window sees it).
  const uint64_t size = 40 << 20;
  const std::pair<uint64_t, uint64_t> cases[] = {{uint64_t{10} << 20, uint64_t{7} << 20},
                                                 {uint64_t{30} << 20, uint64_t{16} << 20},
                                                 {uint64_t{36} << 20, uint64_t{16} << 20},
                                                 {size + (1 << 20), uint64_t{16} << 20}};
  for (const auto& [new_size, stopped_at] : cases) {
    SCOPED_TRACE(new_size);
    CacheSource source = MakeFile("resized.rec", size);
    Status status;
    FillResult result;
    uint64_t progress = 0;
    FillWhileResizing(*directory, source, new_size, &status, &result, &progress);
    EXPECT_NE(result.outcome, FillOutcome::kFilled) << status.ToString();
    EXPECT_EQ(result.outcome, FillOutcome::kSourceChanged);
    EXPECT_EQ(progress, stopped_at);  // never reported past the short read or the check
    ExpectNothingKept(*directory, source);
  }
}

// Reads [0, size) of slot `index` through the cache: its bytes, and
// whether they came from a copy.
std::string ReadThrough(NodeCache& cache, size_t index, uint64_t size, bool* local) {
  FileView view;
  Status status = cache.View(index, 0, size, &view);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (!status.ok()) return "";
  std::string bytes(size, '\0');
  size_t done = 0;
  EXPECT_TRUE(PreadFull(view.fd, bytes.data(), size, 0, view.shown, &done).ok());
  bytes.resize(done);
  *local = view.local;
  return bytes;
}

TEST_F(CacheFaultTest, AReaderOfAFailedFillGetsTheSourceAndTheFillIsRetriedAfterItsDelay) {
  // EIO on the fill's first read: the fill claimed it before the reader
  // looks, so the reader waits for the fill rather than fetching the range
  // itself (a reader's own fetch is a pread, which the hook does not see).
  CacheSource source = MakeFile("shard.rec", 6 << 20);
  const std::string expected = ReadBytes(source.path);
  auto fault = std::make_shared<Fault>();
  fault->tag = 0;
  ScopedReadEngineTestHooks scoped(EioHooks(fault));
  CacheOptions options;
  options.cache_dir = cache_dir_;
  options.capacity = 64 << 20;
  std::unique_ptr<NodeCache> cache;
  ASSERT_TRUE(NodeCache::Open(options, dir_.path(), &cache).ok());
  ASSERT_NE(cache, nullptr);
  std::shared_ptr<Store> store = NewPosixStore();
  std::shared_ptr<const StoreFile> file;
  ASSERT_TRUE(store->Open(source.path, "", &file).ok());
  size_t index = cache->AddFile(file, "");
  ASSERT_TRUE(cache->Seal().ok());
  // The reader waits for the fill, which fails: the source's bytes.
  bool local = true;
  EXPECT_TRUE(ReadThrough(*cache, index, source.size, &local) == expected);
  EXPECT_FALSE(local);
  cache->Drain();
  EXPECT_EQ(cache->failed_fills(), 1u);
  EXPECT_GT(fault->injected.load(), 0);
  ExpectNothingKept(cache->directory(), source);
  // Within the delay, reads and prefetches go to the source and queue nothing.
  fault->on = false;
  cache->ExpectFiles({index}, source.size);
  EXPECT_TRUE(ReadThrough(*cache, index, source.size, &local) == expected);
  EXPECT_FALSE(local);
  cache->Drain();
  EXPECT_EQ(cache->failed_fills(), 1u);
  EXPECT_FALSE(cache->directory().HasEntry(source));
  // After it, the next read fills the copy (the fault cleared) and reads it.
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_TRUE(ReadThrough(*cache, index, source.size, &local) == expected);
  EXPECT_TRUE(local);
  cache->Drain();
  EXPECT_EQ(cache->failed_fills(), 1u);
  ExpectCopyEqualsSource(cache->directory(), source);
}

// A RecordIO dataset of `shards` shards of 20 records of 3000 bytes, with a
// manifest carrying the size and xxh64 of each .rec and .idx (opened
// lazily: the node cache identifies its files by their checksums).
void WriteDataset(const std::string& directory, int shards) {
  ASSERT_TRUE(CreateDirectories(directory).ok());
  Manifest manifest;
  manifest.format = DatasetFormat::kRecordIO;
  uint64_t index = 0;
  for (int s = 0; s < shards; ++s) {
    std::string name = "part-" + std::to_string(s);
    std::string rec = JoinPath(directory, name + ".rec");
    std::unique_ptr<ShardWriter> writer;
    ASSERT_TRUE(ShardWriter::Open(rec, ShardFormat::kRecordIO, &writer).ok());
    for (int r = 0; r < 20; ++r, ++index) {
      const std::string data = Pattern(index, 3000);  // sample.data views it
      SampleToWrite sample;
      sample.index = index;
      sample.labels = {static_cast<float>(index)};
      sample.data = data;
      ASSERT_TRUE(writer->Append(sample).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
    ManifestShard shard;
    shard.file = name + ".rec";
    shard.index = name + ".idx";
    shard.records = 20;
    ASSERT_TRUE(FileSizeOf(rec, &shard.bytes).ok());
    uint64_t digest = 0;
    ASSERT_TRUE(FileXxh64(rec, &digest).ok());
    shard.xxh64 = Xxh64Hex(digest);
    std::string idx = JoinPath(directory, shard.index);
    ASSERT_TRUE(FileSizeOf(idx, &shard.index_bytes).ok());
    ASSERT_TRUE(FileXxh64(idx, &digest).ok());
    shard.index_xxh64 = Xxh64Hex(digest);
    manifest.shards.push_back(shard);
    manifest.records += shard.records;
  }
  ASSERT_TRUE(WriteManifest(JoinPath(directory, kManifestName), manifest).ok());
}

// Reads every record; returns how many were wrong or failed.
int CheckAll(const std::string& source, const CacheOptions& cache, uint64_t records) {
  DatasetOptions options;
  options.cache = cache;
  std::unique_ptr<Dataset> dataset;
  if (!Dataset::Open(source, options, &dataset).ok()) return -1;
  int wrong = 0;
  Record record;
  for (uint64_t i = 0; i < records; ++i) {
    Status status = dataset->Read(i, &record);
    wrong += !status.ok() || record.data != Pattern(i, 3000) || record.labels.size() != 1 ||
             record.labels[0] != static_cast<float>(i);
  }
  return wrong;
}

TEST_F(CacheFaultTest, AfterAFaultThatFailedEveryFillANewProcessReadsEverySampleCorrectly) {
  const std::string source = JoinPath(dir_.path(), "source");
  WriteDataset(source, 3);
  CacheOptions options;
  options.cache_dir = cache_dir_;
  options.capacity = 64 << 20;
  auto fault = std::make_shared<Fault>();  // EIO on every fill read
  {
    ScopedReadEngineTestHooks scoped(EioHooks(fault));
    // Every fill read fails; every sample is read from the source, correctly.
    EXPECT_EQ(CheckAll(source, options, 60), 0);
    EXPECT_GT(fault->injected.load(), 0);
    // A fill skips what readers already fetched into its copy (FillRequest::
    // claim): a reader that fetched a whole small file first leaves its fill
    // no read to fail, and that copy is published. Only such copies may be
    // (found once in an ASan run: part-0.rec, read whole before its fill
    // began), and they hold the source's bytes.
    std::vector<std::string> files;
    for (int shard = 0; shard < 3; ++shard) {
      for (const char* suffix : {".rec", ".idx"}) {
        files.push_back(JoinPath(source, "part-" + std::to_string(shard) + suffix));
      }
    }
    EXPECT_EQ(EntriesMatchingNoSource(JoinPath(cache_dir_, "entries"), files), 0u);
    EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 0u);
  }
  // The fault cleared: a new process reads every sample and fills the cache.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(CheckAll(source, options, 60) == 0 ? 0 : 1);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "entries"), ".data"), 6u);  // each .rec and .idx
  // And the next reads every sample from those copies.
  EXPECT_EQ(CheckAll(source, options, 60), 0);
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 6u);
}

TEST_F(CacheFaultTest, AChecksumMismatchIsNotForeverAFillAfterTheDelayFindsTheSourceRight) {
  const std::string source = JoinPath(dir_.path(), "source");
  WriteDataset(source, 1);
  const std::string rec = JoinPath(source, "part-0.rec");
  const std::string good = ReadBytes(rec);
  // The same size, one byte changed: the manifest's xxh64 does not match.
  std::string bad = good;
  bad[good.size() / 2] ^= 0x20;
  WriteBytes(rec, bad);
  CacheOptions options;
  options.cache_dir = cache_dir_;
  options.capacity = 64 << 20;
  options.wait_for_fill = false;  // reads go to the source while the fill checks it
  DatasetOptions dataset_options;
  dataset_options.cache = options;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source, dataset_options, &dataset).ok());
  Record record;
  // Reads queue the fill; once it found the mismatch, they fail.
  auto read_until = [&](bool corrupt) {
    Status status;
    for (int i = 0; i < 500; ++i) {
      status = dataset->Read(0, &record);
      if (status.IsCorruption() == corrupt && (corrupt || status.ok())) return status;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return status;
  };
  Status status = read_until(/*corrupt=*/true);
  EXPECT_TRUE(status.IsCorruption()) << status.ToString();
  EXPECT_NE(status.message().find("does not match"), std::string::npos) << status.ToString();
  // The source is right again: after the delay a read queues a fill that
  // finds it matching, and the reads work again.
  WriteBytes(rec, good);
  status = read_until(/*corrupt=*/false);
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (uint64_t i = 0; i < 20; ++i) {
    status = dataset->Read(i, &record);
    ASSERT_TRUE(status.ok()) << i << ": " << status.ToString();
    EXPECT_TRUE(record.data == Pattern(i, 3000)) << i;
  }
  dataset.reset();  // lets the fills finish
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "entries"), ".data"), 2u);  // the .rec and .idx
}

}  // namespace
}  // namespace gpufeed
