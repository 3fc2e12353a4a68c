// The node-local cache on real files, real flock()s and real processes:
// hit and miss, eviction order and watermarks, leases, pinned and
// checkpoint policies, four processes sharing one cache under a budget,
// kill -9 in the middle of a fill, corrupt and replaced files, a full and a
// read-only filesystem, and the directory security checks.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "format/dataset_base.h"
#include "storage/cache_directory.h"
#include "storage/cache_layout.h"
#include "storage/node_cache.h"
#include "format/datasets.h"
#include "format/manifest.h"
#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/writer.h"
#include "test_util.h"
#include "util/checksum.h"
#include "util/path.h"

namespace gpufeed {
namespace {

// Deterministic sample bytes: any wrong byte served from a copy shows.
std::string SampleBytes(uint64_t index, size_t size) {
  std::string bytes(size, '\0');
  uint64_t state = index * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < size; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    bytes[i] = static_cast<char>(state);
  }
  return bytes;
}

// Writes `shards` RecordIO shards of `per_shard` records of `size` bytes,
// with a manifest carrying each shard's xxh64.
void WriteDataset(const std::string& directory, int shards, int per_shard, size_t size,
                  bool with_manifest = true) {
  ASSERT_TRUE(CreateDirectories(directory).ok());
  Manifest manifest;
  manifest.format = DatasetFormat::kRecordIO;
  uint64_t index = 0;
  for (int s = 0; s < shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "part-%05d", s);
    std::string rec = JoinPath(directory, std::string(name) + ".rec");
    std::unique_ptr<ShardWriter> writer;
    ASSERT_TRUE(ShardWriter::Open(rec, ShardFormat::kRecordIO, &writer).ok());
    for (int r = 0; r < per_shard; ++r, ++index) {
      std::string data = SampleBytes(index, size);
      SampleToWrite sample;
      sample.index = index;
      sample.labels = {static_cast<float>(index)};
      sample.data = data;
      ASSERT_TRUE(writer->Append(sample).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
    ManifestShard shard;
    shard.file = std::string(name) + ".rec";
    shard.index = std::string(name) + ".idx";
    shard.records = static_cast<uint64_t>(per_shard);
    ASSERT_TRUE(FileSizeOf(rec, &shard.bytes).ok());
    uint64_t digest = 0;
    ASSERT_TRUE(FileXxh64(rec, &digest).ok());
    shard.xxh64 = Xxh64Hex(digest);
    manifest.shards.push_back(shard);
    manifest.records += shard.records;
  }
  if (with_manifest) {
    ASSERT_TRUE(WriteManifest(JoinPath(directory, kManifestName), manifest).ok());
  }
}

DatasetOptions CachedOptions(const std::string& cache_dir, uint64_t capacity) {
  DatasetOptions options;
  options.cache.cache_dir = cache_dir;
  options.cache.capacity = capacity;
  return options;
}

// Reads every record and checks its bytes and label; returns the failures.
int CheckAll(const Dataset& dataset, size_t size, const std::vector<uint64_t>& order) {
  int wrong = 0;
  Record record;
  for (uint64_t index : order) {
    Status status = dataset.Read(index, &record);
    if (!status.ok() || record.data != SampleBytes(index, size) || record.labels.size() != 1 ||
        record.labels[0] != static_cast<float>(index)) {
      ++wrong;
    }
  }
  return wrong;
}

std::vector<uint64_t> Iota(uint64_t n) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

std::vector<std::string> ListNames(const std::string& directory) {
  std::vector<std::string> names;
  std::vector<DirectoryEntry> entries;
  if (ListDirectory(directory, &entries).ok()) {
    for (const DirectoryEntry& entry : entries) names.push_back(entry.name);
  }
  return names;
}

size_t CountSuffix(const std::string& directory, const std::string& suffix) {
  size_t count = 0;
  for (const std::string& name : ListNames(directory)) count += EndsWith(name, suffix);
  return count;
}

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = JoinPath(dir_.path(), "source");
    cache_dir_ = JoinPath(dir_.path(), "cache");
  }

  // A CacheSource for a plain file of `size` bytes.
  CacheSource MakeFile(const std::string& name, size_t size, int64_t mtime_seconds = 0) {
    std::string path = JoinPath(dir_.path(), name);
    WriteBytes(path, SampleBytes(size + name.size(), size));
    if (mtime_seconds != 0) {
      struct timespec times[2] = {{mtime_seconds, 0}, {mtime_seconds, 0}};
      ::utimensat(AT_FDCWD, path.c_str(), times, 0);
    }
    CacheSource source;
    EXPECT_TRUE(StatCacheSource(path, &source).ok());
    source.dataset = dir_.path();
    return source;
  }

  // Sets an entry's last use (its lease file's mtime) for a deterministic LRU.
  void SetLastUse(const CacheSource& source, int64_t seconds) {
    std::string lease = JoinPath(JoinPath(cache_dir_, "entries"), CacheKeyFor(source) + ".lease");
    struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, lease.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  }

  FillOutcome Fill(CacheDirectory& directory, const CacheSource& source, uint64_t capacity,
                   double low = 0.9) {
    FillRequest request;
    request.budget = {capacity, 1.0, low};
    FillResult result;
    Status status = directory.Fill(source, request, &result);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return result.outcome;
  }

  TempDir dir_;
  std::string source_;
  std::string cache_dir_;
};

TEST_F(CacheTest, MissFillsThenHitsServeTheSameBytes) {
  WriteDataset(source_, 4, 20, 3000);
  {
    // Without waiting for fills (with it, the default, the first pass is
    // served from the copies as they are written: hits).
    DatasetOptions no_wait = CachedOptions(cache_dir_, 64 << 20);
    no_wait.cache.wait_for_fill = false;
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, no_wait, &dataset).ok());
    EXPECT_EQ(CheckAll(*dataset, 3000, Iota(80)), 0);  // misses: from the source
  }
  // The misses queued fills (a fill in progress completes before the
  // destructor returns; queued ones are dropped).
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_GT(report.datasets[0].misses, 0u);
  uint64_t misses_before = report.datasets[0].misses;
  {
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
    // Warm what the first pass did not finish, then everything is a hit.
    CacheOptions warm_options = CachedOptions(cache_dir_, 64 << 20).cache;
    CacheWarmSummary summary;
    ASSERT_TRUE(CacheWarm(source_, warm_options, nullptr, &summary).ok());
    EXPECT_EQ(summary.shards, 4u);
    EXPECT_EQ(summary.filled + summary.already_cached, 4u);
    std::unique_ptr<Dataset> again;
    ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &again).ok());
    EXPECT_EQ(CheckAll(*again, 3000, Iota(80)), 0);
  }
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 4u);
  EXPECT_EQ(report.datasets[0].misses, misses_before);  // the second pass: hits only
  EXPECT_GE(report.datasets[0].hits, 80u);
  EXPECT_EQ(report.fills_in_progress, 0u);
}

TEST_F(CacheTest, EvictsLeastRecentlyUsedDownToTheLowWatermark) {
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource a = MakeFile("a", 3000), b = MakeFile("b", 3000), c = MakeFile("c", 3000);
  const uint64_t capacity = 10000;
  for (const CacheSource* source : {&a, &b, &c}) {
    EXPECT_EQ(Fill(*directory, *source, capacity), FillOutcome::kFilled);
  }
  SetLastUse(a, 3000);  // a used last, b first
  SetLastUse(b, 1000);
  SetLastUse(c, 2000);
  // 9000 + 3000 > 10000: evict the LRU (b) until 9000 (90%) holds d.
  CacheSource d = MakeFile("d", 3000);
  EXPECT_EQ(Fill(*directory, d, capacity), FillOutcome::kFilled);
  EXPECT_FALSE(directory->HasEntry(b));
  EXPECT_TRUE(directory->HasEntry(a));
  EXPECT_TRUE(directory->HasEntry(c));
  uint64_t used = 0;
  ASSERT_TRUE(directory->Usage(&used).ok());
  EXPECT_EQ(used, 9000u);
  // A low watermark of 50%: one fill evicts in a batch, down to 5000 with e.
  SetLastUse(c, 1000);
  SetLastUse(d, 2000);
  SetLastUse(a, 3000);
  CacheSource e = MakeFile("e", 2000);
  EXPECT_EQ(Fill(*directory, e, capacity, 0.5), FillOutcome::kFilled);
  EXPECT_FALSE(directory->HasEntry(c));
  EXPECT_FALSE(directory->HasEntry(d));
  EXPECT_TRUE(directory->HasEntry(a));
  ASSERT_TRUE(directory->Usage(&used).ok());
  EXPECT_EQ(used, 5000u);
  // Below the high watermark nothing is evicted.
  CacheSource f = MakeFile("f", 1000);
  EXPECT_EQ(Fill(*directory, f, capacity), FillOutcome::kFilled);
  EXPECT_TRUE(directory->HasEntry(a));
  EXPECT_TRUE(directory->HasEntry(e));
}

TEST_F(CacheTest, ALeasedEntryIsNeverEvicted) {
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource a = MakeFile("a", 6000), b = MakeFile("b", 6000);
  EXPECT_EQ(Fill(*directory, a, 10000), FillOutcome::kFilled);
  CacheLease lease;
  ASSERT_TRUE(directory->OpenEntry(a, &lease).ok());
  EXPECT_TRUE(directory->IsLeased(CacheKeyFor(a)));
  // b does not fit beside a, and a is in use: b is not cached, a stays.
  EXPECT_EQ(Fill(*directory, b, 10000), FillOutcome::kNoRoom);
  EXPECT_TRUE(directory->HasEntry(a));
  // The lease also holds against another process.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::shared_ptr<CacheDirectory> other;
    if (!CacheDirectory::Open(cache_dir_, "", true, &other).ok()) ::_exit(2);
    FillRequest request;
    request.budget.capacity = 10000;
    FillResult result;
    if (!other->Fill(b, request, &result).ok()) ::_exit(3);
    ::_exit(result.outcome == FillOutcome::kNoRoom && other->HasEntry(a) ? 0 : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  lease = CacheLease();  // released: now a can go
  EXPECT_EQ(Fill(*directory, b, 10000), FillOutcome::kFilled);
  EXPECT_FALSE(directory->HasEntry(a));
}

TEST_F(CacheTest, PinnedEntriesStayAndAPinnedDatasetTooLargeIsRefused) {
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource validation = MakeFile("val", 5000);
  validation.policy = CachePolicy::kPinned;
  CacheSource train = MakeFile("train", 3000);
  EXPECT_EQ(Fill(*directory, validation, 10000), FillOutcome::kFilled);
  EXPECT_EQ(Fill(*directory, train, 10000), FillOutcome::kFilled);
  SetLastUse(validation, 1000);  // the oldest, yet pinned
  SetLastUse(train, 2000);
  CacheSource more = MakeFile("more", 4000);
  EXPECT_EQ(Fill(*directory, more, 10000), FillOutcome::kFilled);
  EXPECT_TRUE(directory->HasEntry(validation));
  EXPECT_FALSE(directory->HasEntry(train));

  WriteDataset(source_, 2, 10, 2000);
  DatasetOptions options = CachedOptions(JoinPath(dir_.path(), "cache2"), 10000);
  options.cache.policy = CachePolicy::kPinned;
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(source_, options, &dataset);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("pinned"), std::string::npos) << status.ToString();
  // With room, it is cached (warm waits for the copies; a Dataset copies a
  // pinned dataset whole in the background from Open on).
  options.cache.capacity = 1 << 20;
  ASSERT_TRUE(Dataset::Open(source_, options, &dataset).ok());
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(source_, options.cache, nullptr, &summary).ok());
  EXPECT_EQ(summary.filled + summary.already_cached, 2u);
  CacheReport report;
  ASSERT_TRUE(CacheStat(options.cache.cache_dir, &report).ok());
  EXPECT_EQ(report.entries, 2u);
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_EQ(report.datasets[0].policy, "pinned");
}

TEST_F(CacheTest, CheckpointsKeepTheNewestN) {
  std::string checkpoints = JoinPath(dir_.path(), "ckpt");
  ASSERT_TRUE(CreateDirectories(checkpoints).ok());
  std::vector<std::string> cached;
  for (int i = 0; i < 5; ++i) {
    std::string path = JoinPath(checkpoints, "step" + std::to_string(i) + ".pt");
    WriteBytes(path, SampleBytes(i, 5000 + i));
    struct timespec times[2] = {{1000 + i, 0}, {1000 + i, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    std::string local;
    ASSERT_TRUE(CachePutCheckpoint(path, cache_dir_, 3, &local).ok());
    EXPECT_EQ(ReadBytes(local), SampleBytes(i, 5000 + i));
    cached.push_back(local);
  }
  EXPECT_FALSE(PathExists(cached[0]));
  EXPECT_FALSE(PathExists(cached[1]));
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(PathExists(cached[i])) << i;
  std::string latest, source;
  ASSERT_TRUE(CacheLatestCheckpoint(checkpoints, cache_dir_, &latest, &source).ok());
  EXPECT_EQ(latest, cached[4]);
  EXPECT_EQ(source, JoinPath(checkpoints, "step4.pt"));
  // Training fills never evict checkpoints.
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource big = MakeFile("big", 20000);
  EXPECT_EQ(Fill(*directory, big, 30000), FillOutcome::kNoRoom);
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(PathExists(cached[i])) << i;
}

TEST_F(CacheTest, FourProcessesShareOneCacheUnderABudget) {
  // 8 shards of ~40 KB, a budget of 3 shards: the dataset streams through.
  WriteDataset(source_, 8, 10, 4000);
  std::unique_ptr<Dataset> plain;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
  uint64_t shard_bytes = plain->shards()[0].bytes;
  const uint64_t capacity = 3 * shard_bytes + shard_bytes / 2;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::vector<pid_t> children;
  for (int child_index = 0; child_index < 4; ++child_index) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      int wrong = 0;
      {
        DatasetOptions options = CachedOptions(cache_dir_, capacity);
        options.cache.wait_for_fill = child_index % 2 == 1;  // both modes at once
        options.cache.max_leased_shards = 1;
        std::unique_ptr<Dataset> dataset;
        if (!Dataset::Open(source_, options, &dataset).ok()) ::_exit(2);
        // The cache directory exists now: the parent may start watching.
        if (::write(ready[1], "r", 1) != 1) ::_exit(3);
        ::close(ready[1]);
        for (int pass = 0; pass < 3; ++pass) {
          // Block order: shard after shard, each shard's records shuffled.
          std::mt19937 rng(child_index * 10 + pass);
          std::vector<uint64_t> order;
          std::vector<int> shard_order = {0, 1, 2, 3, 4, 5, 6, 7};
          std::shuffle(shard_order.begin(), shard_order.end(), rng);
          for (int shard : shard_order) {
            std::vector<uint64_t> records;
            for (int r = 0; r < 10; ++r) records.push_back(shard * 10 + r);
            std::shuffle(records.begin(), records.end(), rng);
            order.insert(order.end(), records.begin(), records.end());
          }
          ReadPathOf(*dataset).ExpectReads(order);
          wrong += CheckAll(*dataset, 4000, order);
        }
      }
      ::_exit(wrong == 0 ? 0 : 1);
    }
    children.push_back(child);
  }
  ::close(ready[1]);
  // Every child has opened its dataset (or died: EOF), however slowly the
  // machine runs: the watch below never starts before the directory exists.
  char byte;
  int opened = 0;
  while (opened < 4 && ::read(ready[0], &byte, 1) == 1) ++opened;
  ::close(ready[0]);
  EXPECT_EQ(opened, 4) << "a child could not open the cached dataset";
  // Meanwhile: usage under the index lock never passes the budget, and no
  // shard has two fills in progress.
  std::shared_ptr<CacheDirectory> directory;
  Status directory_opened = CacheDirectory::Open(cache_dir_, "", false, &directory);
  EXPECT_TRUE(directory_opened.ok()) << directory_opened.ToString();
  uint64_t most = 0;
  int watched = 0;
  bool double_fill = false;
  size_t running = children.size();
  std::vector<int> statuses;
  while (running > 0) {
    if (directory) {
      uint64_t used = 0;
      if (directory->Usage(&used).ok()) {
        most = std::max(most, used);
        ++watched;
      }
      std::set<std::string> keys;
      for (const std::string& name : ListNames(JoinPath(cache_dir_, "tmp"))) {
        std::string key = name.substr(0, name.rfind('.', name.size() - 6));
        if (!keys.insert(key).second) double_fill = true;
      }
    }
    int wait_status = 0;
    pid_t done = ::waitpid(-1, &wait_status, WNOHANG);
    if (done > 0) {
      statuses.push_back(wait_status);
      --running;
    } else {
      ::usleep(500);
    }
  }
  for (int wait_status : statuses) {
    EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
        << "a reader saw wrong bytes or failed (status " << wait_status << ")";
  }
  EXPECT_GT(watched, 0) << "the budget was never watched while the children ran";
  EXPECT_LE(most, capacity);
  EXPECT_FALSE(double_fill);
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_LE(report.bytes, capacity);
  ASSERT_EQ(report.datasets.size(), 1u);
  EXPECT_GT(report.datasets[0].fills, 0u);
  EXPECT_GT(report.datasets[0].hits, 0u);
  EXPECT_GT(report.datasets[0].evictions, 0u);
  EXPECT_EQ(report.datasets[0].hits + report.datasets[0].misses, 4u * 3u * 80u);
}

TEST_F(CacheTest, KillDashNineInTheMiddleOfAFillLeavesNothingServed) {
  // 20 MiB: the copy reports progress after 16 MiB, in the middle.
  CacheSource source = MakeFile("big.rec", 20 << 20);
  int in_fill[2];
  ASSERT_EQ(::pipe(in_fill), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(in_fill[0]);
    std::shared_ptr<CacheDirectory> directory;
    if (!CacheDirectory::Open(cache_dir_, "", true, &directory).ok()) ::_exit(2);
    std::unique_ptr<ReadEngine> engine = CacheFiller::NewReadEngine();  // null: pread
    FillRequest request;
    request.engine = engine.get();
    request.progress = [&](uint64_t done, uint64_t total) {
      if (done < total) {
        // Tell the parent, then wait for its SIGKILL mid-copy.
        char byte = 1;
        if (::write(in_fill[1], &byte, 1) != 1) ::_exit(3);
        while (true) ::pause();
      }
    };
    FillResult result;
    Status status = directory->Fill(source, request, &result);
    std::fprintf(stderr, "fill ended without stopping: %s, outcome %d\n", status.ToString().c_str(),
                 static_cast<int>(result.outcome));
    ::_exit(4);  // not reached: the parent kills us first
  }
  ::close(in_fill[1]);
  char byte = 0;
  ASSERT_EQ(::read(in_fill[0], &byte, 1), 1);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status));
  ::close(in_fill[0]);
  // The half-written copy is there, in tmp/, and nowhere it could be served.
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 1u);
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "entries"), ".data"), 0u);
  // The next start removes it and counts nothing.
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 0u);
  EXPECT_FALSE(directory->HasEntry(source));
  uint64_t used = 1;
  ASSERT_TRUE(directory->Usage(&used).ok());
  EXPECT_EQ(used, 0u);
  CacheLease lease;
  EXPECT_FALSE(directory->OpenEntry(source, &lease).ok());
  // And a new fill completes.
  EXPECT_EQ(Fill(*directory, source, 0), FillOutcome::kFilled);
  ASSERT_TRUE(directory->OpenEntry(source, &lease).ok());
  EXPECT_TRUE(ReadBytes(lease.path) == ReadBytes(source.path));
}

TEST_F(CacheTest, ACorruptCopyIsDetectedAndFetchedAgain) {
  WriteDataset(source_, 2, 10, 3000);
  CacheOptions options = CachedOptions(cache_dir_, 1 << 20).cache;
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(source_, options, nullptr, &summary).ok());
  ASSERT_EQ(summary.filled, 2u);
  std::string entries = JoinPath(cache_dir_, "entries");
  std::vector<std::string> copies;
  for (const std::string& name : ListNames(entries)) {
    if (EndsWith(name, ".data")) copies.push_back(JoinPath(entries, name));
  }
  ASSERT_EQ(copies.size(), 2u);
  std::sort(copies.begin(), copies.end(), [](const std::string& a, const std::string& b) {
    return a.find("part-00000") != std::string::npos && b.find("part-00000") == std::string::npos;
  });
  // 1: bytes changed by something that updates the mtime: caught at open.
  {
    std::string bytes = ReadBytes(copies[0]);
    bytes[100] ^= 0x55;
    int fd = ::open(copies[0].c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes.data() + 100, 1, 100), 1);
    ::close(fd);
  }
  // 2: the framing of the first record broken, the mtime put back: caught
  // when the record does not parse, and read from the source.
  {
    struct stat before;
    ASSERT_EQ(::stat(copies[1].c_str(), &before), 0);
    int fd = ::open(copies[1].c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "XXXX", 4, 0), 4);
    ::close(fd);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, copies[1].c_str(), times, 0), 0);
  }
  {
    std::unique_ptr<Dataset> dataset;
    DatasetOptions dataset_options;
    dataset_options.cache = options;
    ASSERT_TRUE(Dataset::Open(source_, dataset_options, &dataset).ok());
    EXPECT_EQ(CheckAll(*dataset, 3000, Iota(20)), 0);
  }
  CacheWarmSummary again;
  ASSERT_TRUE(CacheWarm(source_, options, nullptr, &again).ok());
  EXPECT_EQ(again.filled + again.already_cached, 2u);
  std::unique_ptr<Dataset> plain;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
  for (const ShardInfo& shard : plain->shards()) {
    CacheSource source;
    ASSERT_TRUE(StatCacheSource(shard.path, &source).ok());
    source.xxh64 = shard.xxh64;
    std::shared_ptr<CacheDirectory> directory;
    ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", false, &directory).ok());
    CacheLease lease;
    ASSERT_TRUE(directory->OpenEntry(source, &lease).ok()) << shard.path;
    EXPECT_TRUE(ReadBytes(lease.path) == ReadBytes(shard.path)) << lease.path;
  }
}

TEST_F(CacheTest, ASourceNotMatchingItsManifestChecksumIsNotCached) {
  WriteDataset(source_, 1, 10, 3000);
  std::unique_ptr<Dataset> plain;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource source;
  ASSERT_TRUE(StatCacheSource(plain->shards()[0].path, &source).ok());
  source.xxh64 = "0123456789abcdef";  // not what the bytes hash to
  FillResult result;
  Status status = directory->Fill(source, FillRequest(), &result);
  EXPECT_EQ(status.code(), Status::Code::kCorruption);
  EXPECT_NE(status.message().find("does not match"), std::string::npos) << status.ToString();
  EXPECT_FALSE(directory->HasEntry(source));
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 0u);
}

TEST_F(CacheTest, AReplacedSourceIsNotServedFromItsOldCopy) {
  WriteDataset(source_, 2, 10, 3000, /*with_manifest=*/false);
  CacheOptions options = CachedOptions(cache_dir_, 1 << 20).cache;
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(source_, options, nullptr, &summary).ok());
  ASSERT_EQ(summary.filled, 2u);
  // Rewrite shard 0 with other records (2500-byte samples, other labels).
  std::string rec = JoinPath(source_, "part-00000.rec");
  ::unlink(rec.c_str());
  ::unlink(JoinPath(source_, "part-00000.idx").c_str());
  std::unique_ptr<ShardWriter> writer;
  ASSERT_TRUE(ShardWriter::Open(rec, ShardFormat::kRecordIO, &writer).ok());
  for (int r = 0; r < 10; ++r) {
    std::string data = SampleBytes(r, 3000);
    SampleToWrite sample;
    sample.index = r;
    sample.labels = {static_cast<float>(r)};
    data[0] ^= 1;  // differs from the cached copy
    sample.data = data;
    ASSERT_TRUE(writer->Append(sample).ok());
  }
  ASSERT_TRUE(writer->Finish().ok());
  struct timespec times[2] = {{2000000000, 0}, {2000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, rec.c_str(), times, 0), 0);
  DatasetOptions dataset_options;
  dataset_options.cache = options;
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source_, dataset_options, &dataset).ok());
  Record record;
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    std::string expected = SampleBytes(i, 3000);
    expected[0] ^= 1;
    EXPECT_EQ(record.data, expected) << i;
  }
  EXPECT_EQ(CheckAll(*dataset, 3000, {10, 11, 12, 19}), 0);  // shard 1 unchanged
}

// Mounts a small tmpfs at `path` (root only); false when that is not possible.
bool MountTmpfs(const std::string& path, const char* options, std::string* why) {
  Status made = CreateDirectories(path);
  if (!made.ok()) {
    *why = made.ToString();
    return false;
  }
  if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options) != 0) {
    *why = std::string("cannot mount a tmpfs (") + std::strerror(errno) +
           "); needs root or CAP_SYS_ADMIN";
    return false;
  }
  return true;
}

TEST_F(CacheTest, AFullCacheFilesystemFallsBackToTheSource) {
  std::string mount_point = JoinPath(dir_.path(), "small");
  std::string why;
  if (!MountTmpfs(mount_point, "size=256k,mode=0700", &why)) GTEST_SKIP() << why;
  WriteDataset(source_, 4, 20, 5000);  // ~100 KB a shard: two fit, not four
  std::string cache_dir = JoinPath(mount_point, "cache");
  int wrong = 0;
  {
    std::unique_ptr<Dataset> dataset;
    Status status = Dataset::Open(source_, CachedOptions(cache_dir, 64 << 20), &dataset);
    if (status.ok()) {
      for (int pass = 0; pass < 3; ++pass) wrong += CheckAll(*dataset, 5000, Iota(80));
    } else {
      wrong = -1;
      ADD_FAILURE() << status.ToString();
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir, "tmp"), ".fill"), 0u);
  ::umount2(mount_point.c_str(), MNT_DETACH);
}

TEST_F(CacheTest, AReadOnlyCacheDirectoryFallsBackToTheSource) {
  std::string mount_point = JoinPath(dir_.path(), "ro");
  std::string why;
  if (!MountTmpfs(mount_point, "size=64k,mode=0700", &why)) GTEST_SKIP() << why;
  ASSERT_EQ(::mount(nullptr, mount_point.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0);
  WriteDataset(source_, 2, 10, 3000);
  std::unique_ptr<Dataset> dataset;
  Status status =
      Dataset::Open(source_, CachedOptions(JoinPath(mount_point, "cache"), 1 << 20), &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(CheckAll(*dataset, 3000, Iota(20)), 0);
  dataset.reset();
  ::umount2(mount_point.c_str(), MNT_DETACH);
}

TEST_F(CacheTest, AnUnsafeCacheDirectoryIsRefused) {
  WriteDataset(source_, 1, 5, 1000);
  std::unique_ptr<Dataset> dataset;
  // Writable by others.
  std::string open_dir = JoinPath(dir_.path(), "world");
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  Status status = Dataset::Open(source_, CachedOptions(open_dir, 1 << 20), &dataset);
  EXPECT_EQ(status.code(), Status::Code::kPermissionDenied) << status.ToString();
  EXPECT_NE(status.message().find("writable by other users"), std::string::npos);
  // Owned by someone else (needs root to set up).
  if (::geteuid() == 0) {
    std::string foreign = JoinPath(dir_.path(), "foreign");
    ASSERT_EQ(::mkdir(foreign.c_str(), 0700), 0);
    ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
    status = Dataset::Open(source_, CachedOptions(foreign, 1 << 20), &dataset);
    EXPECT_EQ(status.code(), Status::Code::kPermissionDenied) << status.ToString();
    EXPECT_NE(status.message().find("owned by uid 65534"), std::string::npos);
  }
  // A symlink as the cache directory.
  std::string real = JoinPath(dir_.path(), "real");
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  std::string link = JoinPath(dir_.path(), "link");
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  status = Dataset::Open(source_, CachedOptions(link, 1 << 20), &dataset);
  EXPECT_EQ(status.code(), Status::Code::kPermissionDenied) << status.ToString();
  // A new cache directory is created 0700.
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 1 << 20), &dataset).ok());
  struct stat st;
  ASSERT_EQ(::stat(cache_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(CacheTest, PlantedSymlinksNeverRedirectAWriteOrARead) {
  WriteDataset(source_, 1, 10, 3000);
  std::unique_ptr<Dataset> plain;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  CacheSource source;
  ASSERT_TRUE(StatCacheSource(plain->shards()[0].path, &source).ok());
  source.xxh64 = plain->shards()[0].xxh64;
  std::string key = CacheKeyFor(source);
  // A victim file another user wants us to overwrite or to serve.
  std::string victim = JoinPath(dir_.path(), "victim");
  WriteBytes(victim, "precious");
  std::string entries = JoinPath(cache_dir_, "entries");
  std::string tmp = JoinPath(cache_dir_, "tmp");
  std::string locks = JoinPath(cache_dir_, "locks");
  ASSERT_EQ(::symlink(victim.c_str(), JoinPath(entries, key + ".data").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), JoinPath(entries, key + ".lease").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(),
                      JoinPath(tmp, key + "." + std::to_string(::getpid()) + ".fill").c_str()),
            0);
  // Reading: the planted data file is not served.
  CacheLease lease;
  EXPECT_FALSE(directory->OpenEntry(source, &lease).ok());
  // The lock file planted as a symlink: refused, not followed.
  ASSERT_EQ(::symlink(victim.c_str(), JoinPath(locks, key + ".fill").c_str()), 0);
  FillResult result;
  Status status = directory->Fill(source, FillRequest(), &result);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(ReadBytes(victim), "precious");
  ::unlink(JoinPath(locks, key + ".fill").c_str());
  // Without it the fill goes ahead, replacing the planted names, never
  // writing through them.
  status = directory->Fill(source, FillRequest(), &result);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(ReadBytes(victim), "precious");
  // The planted names were replaced (the names, not their targets).
  EXPECT_EQ(result.outcome, FillOutcome::kFilled);
  ASSERT_TRUE(directory->OpenEntry(source, &lease).ok());
  EXPECT_EQ(ReadBytes(lease.path), ReadBytes(source.path));
  struct stat st;
  ASSERT_EQ(::lstat(JoinPath(entries, key + ".data").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(ReadBytes(victim), "precious");
}

// An ImageFolder of `count` files in 3 classes (SampleBytes of varied
// sizes); returns each sample's bytes in dataset order.
std::vector<std::string> WriteImageFolder(const std::string& root, int count) {
  std::vector<std::pair<std::string, std::string>> files;  // relative path, bytes
  for (int i = 0; i < count; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "class%d/img%05d.jpg", i % 3, i);
    files.emplace_back(name, SampleBytes(static_cast<uint64_t>(i), 200 + (i * 37) % 900));
  }
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(CreateDirectories(JoinPath(root, "class" + std::to_string(c))).ok());
  }
  for (const auto& [name, bytes] : files) WriteBytes(JoinPath(root, name), bytes);
  std::sort(files.begin(), files.end());  // the dataset's order: class, then name
  std::vector<std::string> expected;
  for (const auto& file : files) expected.push_back(file.second);
  return expected;
}

int CheckImageFolder(const Dataset& dataset, const std::vector<std::string>& expected) {
  int wrong = 0;
  Record record;
  for (uint64_t i = 0; i < expected.size(); ++i) {
    if (!dataset.Read(i, &record).ok() || record.data != expected[i]) ++wrong;
  }
  return wrong;
}

TEST_F(CacheTest, AnImageFolderIsCachedInBundlesAndANewProcessReadsNoSource) {
  const int kFiles = 600;  // three bundles: 256, 256, 88
  std::vector<std::string> expected = WriteImageFolder(source_, kFiles);
  {
    std::unique_ptr<Dataset> plain;
    ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
    ASSERT_EQ(plain->format(), DatasetFormat::kImageFolder);
    EXPECT_EQ(CheckImageFolder(*plain, expected), 0);
  }
  {
    // Epoch 1: each bundle's first read waits for its fill, then every
    // member comes from the copy; the source is read once.
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
    EXPECT_EQ(CheckImageFolder(*dataset, expected), 0);
    StorageStats stats = dataset->storage_stats();
    EXPECT_EQ(stats.source_reads, static_cast<uint64_t>(kFiles)) << "each file read once";
    EXPECT_EQ(stats.cache_reads, static_cast<uint64_t>(kFiles));
  }
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 3u);  // one entry per bundle, not per file
  uint64_t member_bytes = 0;
  for (const std::string& bytes : expected) member_bytes += bytes.size();
  EXPECT_GE(report.bytes, member_bytes);
  EXPECT_LE(report.bytes, member_bytes + 3 * (16 * kBundleFiles + 32));
  // A new process: every member from the copies, nothing from the source
  // but nothing stat'ed or opened there either (the scan lists directories).
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::unique_ptr<Dataset> dataset;
    if (!Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok()) ::_exit(2);
    if (CheckImageFolder(*dataset, expected) != 0) ::_exit(3);
    // The read engine's way: byte ranges of the copies.
    for (uint64_t i = 0; i < expected.size(); i += 97) {
      RecordLocation location;
      if (!ReadPathOf(*dataset).Locate(i, &location) || location.whole_file || !location.local) ::_exit(4);
      std::string bytes(location.length, '\0');
      if (::pread(location.fd, bytes.data(), bytes.size(), static_cast<off_t>(location.offset)) !=
              static_cast<ssize_t>(bytes.size()) ||
          bytes != expected[i]) {
        ::_exit(5);
      }
    }
    StorageStats stats = dataset->storage_stats();
    if (stats.source_bytes != 0 || stats.source_reads != 0) ::_exit(6);
    if (stats.source_opens > 4) ::_exit(7);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Without the cache the read engine still reads whole files by path.
  std::unique_ptr<Dataset> plain;
  ASSERT_TRUE(Dataset::Open(source_, {}, &plain).ok());
  RecordLocation location;
  ASSERT_TRUE(ReadPathOf(*plain).Locate(5, &location));
  EXPECT_TRUE(location.whole_file);
}

TEST_F(CacheTest, ABundleWarmedByTheToolIsTheEntryTheDatasetReads) {
  std::vector<std::string> expected = WriteImageFolder(source_, 300);
  CacheWarmSummary summary;
  ASSERT_TRUE(CacheWarm(source_, CachedOptions(cache_dir_, 64 << 20).cache, nullptr, &summary)
                  .ok());
  EXPECT_EQ(summary.shards, 2u);
  EXPECT_EQ(summary.filled, 2u);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
  EXPECT_EQ(CheckImageFolder(*dataset, expected), 0);
  EXPECT_EQ(dataset->storage_stats().source_bytes, 0u);
  CacheReport report;
  ASSERT_TRUE(CacheStat(cache_dir_, &report).ok());
  EXPECT_EQ(report.entries, 2u);
}

TEST_F(CacheTest, KillDashNineInTheMiddleOfABundleFillLeavesNothingServed) {
  std::vector<std::string> expected = WriteImageFolder(source_, 100);
  std::vector<std::string> classes;
  std::vector<ImageFolderEntry> entries;
  ASSERT_TRUE(ScanImageFolder(source_, &classes, &entries).ok());
  std::vector<ImageFolderBundle> bundles = ImageFolderBundles(source_, entries);
  ASSERT_EQ(bundles.size(), 1u);
  CacheSource source;
  source.path = JoinPath(source_, bundles[0].name);
  source.members = bundles[0].members;
  source.dataset = source_;
  int in_fill[2];
  ASSERT_EQ(::pipe(in_fill), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(in_fill[0]);
    std::shared_ptr<CacheDirectory> directory;
    if (!CacheDirectory::Open(cache_dir_, "", true, &directory).ok()) ::_exit(2);
    std::atomic<int> members{0};  // members are read by several threads
    auto read_member = [&](const std::string& path, std::string* data, int64_t* mtime_ns) {
      if (++members == 40) {
        // Tell the parent, then wait for its SIGKILL mid-copy.
        char byte = 1;
        if (::write(in_fill[1], &byte, 1) != 1) ::_exit(3);
        while (true) ::pause();
      }
      *mtime_ns = 0;
      return ReadFileToString(path, data);
    };
    BundleFillRequest request;
    request.read_member = read_member;
    FillResult result;
    (void)directory->FillBundle(source, request, &result);  // killed
    ::_exit(4);  // not reached: the parent kills us first
  }
  ::close(in_fill[1]);
  char byte = 0;
  ASSERT_EQ(::read(in_fill[0], &byte, 1), 1);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status));
  ::close(in_fill[0]);
  // The half-written copy is in tmp/, and nowhere it could be served.
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 1u);
  EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "entries"), ".data"), 0u);
  {
    std::shared_ptr<CacheDirectory> directory;
    ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
    EXPECT_EQ(CountSuffix(JoinPath(cache_dir_, "tmp"), ".fill"), 0u);
    EXPECT_FALSE(directory->HasEntry(source));
    CacheLease lease;
    EXPECT_FALSE(directory->OpenEntry(source, &lease).ok());
  }
  // The dataset fills it again and serves the right bytes.
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
  EXPECT_EQ(CheckImageFolder(*dataset, expected), 0);
  std::shared_ptr<CacheDirectory> directory;
  ASSERT_TRUE(CacheDirectory::Open(cache_dir_, "", true, &directory).ok());
  EXPECT_TRUE(directory->HasEntry(source));
}

TEST_F(CacheTest, ABundleCopyChangedOnDiskIsNotServed) {
  std::vector<std::string> expected = WriteImageFolder(source_, 50);
  {
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
    EXPECT_EQ(CheckImageFolder(*dataset, expected), 0);
  }
  std::string entries = JoinPath(cache_dir_, "entries");
  std::string data;
  for (const std::string& name : ListNames(entries)) {
    if (EndsWith(name, ".data")) data = JoinPath(entries, name);
  }
  ASSERT_FALSE(data.empty());
  // Truncated by someone: its size no longer matches its meta.
  ASSERT_EQ(::truncate(data.c_str(), 100), 0);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
  EXPECT_EQ(CheckImageFolder(*dataset, expected), 0);
}


// fork() while threads of the parent read through a cached Dataset whose
// copies are complete (torch DataLoader workers are forked so): every child
// reads every record of the same Dataset. A child used to
// hang now and then in its first read, in libstdc++'s lock pool for
// std::atomic_load of a shared_ptr, held by a parent thread at the fork
// (the slots' copies are now behind the cache's own fork-safe locks).
TEST_F(CacheTest, AForkedChildReadsACachedDatasetTheParentsThreadsAreReading) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with running threads under a sanitizer runtime";
#endif
  const int kFiles = 600;
  std::vector<std::string> expected = WriteImageFolder(source_, kFiles);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(source_, CachedOptions(cache_dir_, 64 << 20), &dataset).ok());
  ASSERT_EQ(CheckImageFolder(*dataset, expected), 0);  // every bundle's copy made
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      Record record;
      for (uint64_t i = t * 7; !stop.load(); i = (i * 13 + 5) % kFiles) {
        (void)dataset->Read(i, &record);
      }
    });
  }
  auto read_every_record = [&] { return CheckImageFolder(*dataset, expected) == 0 ? 0 : 2; };
  for (int f = 0; f < 100; ++f) {
    const int status = RunInForkedChild(read_every_record, /*alarm_seconds=*/3);
    if (!ExitedWithZero(status)) {
      ADD_FAILURE() << "fork " << f << ": the child hung or failed (wait status " << status << ")";
      break;
    }
  }
  stop = true;
  for (auto& r : readers) r.join();
}

// Threads reading more complete copies than max_leased_shards at once:
// each read's lease may be let go by another thread's open right after it
// is made. A read used to take the slot's lease again after opening it, and
// crashed on the null it found then.
TEST_F(CacheTest, ThreadsReadingMoreCopiesThanLeasesKeptGetTheirBytes) {
  const int kShards = 16, kPerShard = 8;
  const size_t kSize = 2000;
  WriteDataset(source_, kShards, kPerShard, kSize);
  const std::vector<uint64_t> all = Iota(kShards * kPerShard);
  DatasetOptions options = CachedOptions(cache_dir_, 64 << 20);
  {
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, options, &dataset).ok());
    ASSERT_EQ(CheckAll(*dataset, kSize, all), 0);  // every copy made
  }
  options.cache.max_leased_shards = 1;
  for (int round = 0; round < 20; ++round) {
    std::unique_ptr<Dataset> dataset;
    ASSERT_TRUE(Dataset::Open(source_, options, &dataset).ok());
    std::atomic<int> wrong{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t) {
      readers.emplace_back([&, t] {
        std::vector<uint64_t> order = all;
        std::shuffle(order.begin(), order.end(), std::mt19937(round * 4 + t));
        wrong += CheckAll(*dataset, kSize, order);
      });
    }
    for (auto& r : readers) r.join();
    ASSERT_EQ(wrong.load(), 0) << "round " << round;
  }
}

// The locks of one operation (the index lock, a fill lock) are flock()s,
// which belong to the open file description that fork() shares with the
// child: a lock taken before a fork and let go after it must be free while
// the child lives. Closed without LOCK_UN it stayed held until the child
// exited, and every process (the child too, at its next lock) waited for it.
TEST_F(CacheTest, ALockLetGoAfterAForkIsFreeWhileTheChildLives) {
  std::unique_ptr<CacheLayout> layout;
  ASSERT_TRUE(CacheLayout::Open(cache_dir_, "", true, &layout, nullptr).ok());
  LockFd index_lock, fill_lock;
  ASSERT_TRUE(layout->LockIndex(&index_lock).ok());
  ASSERT_TRUE(layout->OpenFillLock("key", &fill_lock).ok());
  ASSERT_TRUE(cache_internal::TryFlock(fill_lock.get(), LOCK_EX));
  IdleChild child(/*alarm_seconds=*/20);  // keeps its copies of both descriptors
  ASSERT_TRUE(child.started());
  index_lock.reset();
  fill_lock.reset();
  LockFd probe;
  probe.reset(::openat(layout->top_fd(), "lock", O_RDWR | O_CLOEXEC));
  EXPECT_TRUE(cache_internal::TryFlock(probe.get(), LOCK_EX)) << "the index lock is held";
  ASSERT_TRUE(layout->OpenFillLock("key", &probe).ok());
  EXPECT_TRUE(cache_internal::TryFlock(probe.get(), LOCK_EX)) << "the fill lock is held";
  EXPECT_TRUE(ExitedWithZero(child.Finish()));
}

// fork() while the parent's threads read a cached Dataset whose copies are
// being made (a torch DataLoader forks its workers so, after the main
// process touched the dataset): every child reads every record right, and a
// child that lives on does not keep the parent's fills from ending, nor the
// cache from being used. A child used to wait forever for a part of a copy
// the parent's filler had claimed (that filler does not exist in the child).
// Each round runs in a process of its own with an alarm, so that a hang
// fails the test.
TEST_F(CacheTest, AForkedChildReadsADatasetWhileTheParentsFillsRun) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "fork with running threads under a sanitizer runtime";
#endif
  const int kShards = 16, kPerShard = 16;
  const size_t kSize = 256 << 10;  // 64 MiB in all: fills run for a while
  WriteDataset(source_, kShards, kPerShard, kSize);
  const std::vector<uint64_t> all = Iota(kShards * kPerShard);
  const int kRounds = 12;
  int forked_during_fills = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string cache_dir = JoinPath(cache_dir_, std::to_string(round));
    auto scenario = [&]() -> int {
      std::unique_ptr<Dataset> dataset;
      if (!Dataset::Open(source_, CachedOptions(cache_dir, 256 << 20), &dataset).ok()) return 3;
      std::atomic<bool> stop{false};
      std::vector<std::thread> readers;
      for (int t = 0; t < 2; ++t) {
        readers.emplace_back([&, t] {
          Record record;
          for (uint64_t i = t * 37; !stop.load(); i = (i * 13 + 7) % all.size()) {
            (void)dataset->Read(i, &record);
          }
        });
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 7 * round));
      const bool filling = CountSuffix(JoinPath(cache_dir, "tmp"), ".fill") > 0;
      // One child reads everything now; another lives on (IdleChild) until the end.
      const int status = RunInForkedChild(
          [&] { return CheckAll(*dataset, kSize, all) == 0 ? 0 : 2; }, /*alarm_seconds=*/30);
      IdleChild lingering(/*alarm_seconds=*/60);
      stop = true;
      for (auto& r : readers) r.join();
      dataset.reset();  // waits for the fills of what was read
      // The cache is usable, and serves every record, with that child alive.
      if (!Dataset::Open(source_, CachedOptions(cache_dir, 256 << 20), &dataset).ok()) return 4;
      const int wrong_after = CheckAll(*dataset, kSize, all);
      dataset.reset();
      const int lingering_status = lingering.Finish();
      if (lingering_status == -1) return 5;
      if (!ExitedWithZero(status)) return 6;
      if (wrong_after != 0) return 7;
      if (!ExitedWithZero(lingering_status)) return 8;
      return filling ? 0 : 1;  // 1: passed, but the fork found no fill running
    };
    const int status = RunInForkedChild(scenario, /*alarm_seconds=*/90);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) <= 1)
        << "round " << round << ": wait status " << status
        << " (exit 2: a child read wrong; 6: it hung or failed; 7: the cache served wrong "
           "after; 8: the lingering child hung; a signal: the round hung)";
    forked_during_fills += WEXITSTATUS(status) == 0;
  }
  // The forks must have met fills in progress for this to test anything.
  EXPECT_GE(forked_during_fills, kRounds / 3);
}

}  // namespace
}  // namespace gpufeed
