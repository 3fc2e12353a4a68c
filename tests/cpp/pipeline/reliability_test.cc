// Reliability of the Loader (docs/reliability.md): faults injected into a
// running pipeline end in a clear error or a counted skip, never a crash,
// a hang or a lost sample; 50 shuffled epochs leave memory, descriptors and
// threads where they were. Real JPEGs, real RecordIO shards, real reads;
// the read engine's fault hook only for EIO, which real files cannot give
// on demand.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gpufeed/loader.h"
#include "io/read_engine.h"
#include "pipeline/loader_factory.h"
#include "gpufeed/writer.h"
#include "jpeg_test_util.h"
#include "pack_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

size_t CountEntries(const char* directory) {
  size_t count = 0;
  if (DIR* dir = opendir(directory)) {
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

uint64_t ResidentKiB() {
  long pages = 0, resident = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

class ReliabilityTest : public ::testing::TestWithParam<bool> {
 protected:
  static constexpr int kImages = 60;

  void SetUp() override {
    std::string list_dir = JoinPath(dir_.path(), "images");
    ASSERT_TRUE(CreateDirectories(list_dir).ok());
    std::string list;
    for (int i = 0; i < kImages; ++i) {
      std::string name = "img" + std::to_string(i) + ".jpg";
      WriteBytes(JoinPath(list_dir, name), EncodeJpeg(40 + i % 17, 32 + i % 11, JCS_RGB, 90, i));
      list += name + "\t" + std::to_string(i % 4) + "\n";
    }
    WriteBytes(JoinPath(list_dir, "list.txt"), list);
    packed_ = JoinPath(dir_.path(), "packed");
    PackSummary summary;
    // Several shards.
    ASSERT_NO_FATAL_FAILURE(
        PackAndOpen(JoinPath(list_dir, "list.txt"), packed_, 20000, &dataset_, &summary));
    ASSERT_GE(summary.shards, 3u);
  }

  LoaderOptions Options() {
    LoaderOptions options;
    options.batch_size = 6;
    options.num_threads = 2;
    options.prefetch = 1;  // little read ahead: the faults land mid-epoch
    options.image.size = 16;
    options.shuffle = ShuffleMode::kNone;
    return options;
  }
  // The parameter: through the read engine, or every read by the workers.
  LoaderInternals Internals() {
    LoaderInternals internals;
    internals.use_read_engine = GetParam();
    return internals;
  }

  // Runs one epoch to its end. Returns the delivered sample ids; failed
  // Next() calls go to *errors (the loader must go on after each).
  std::vector<uint64_t> RunEpoch(Loader* loader, std::vector<Status>* errors) {
    std::vector<uint64_t> ids;
    Batch batch;
    for (int calls = 0; calls < 1000; ++calls) {
      Status status = loader->Next(&batch);
      if (!status.ok()) {
        errors->push_back(status);
        continue;
      }
      if (batch.end_of_epoch()) return ids;
      for (uint64_t id : batch.sample_ids()) ids.push_back(id);
    }
    ADD_FAILURE() << "the epoch did not end";
    return ids;
  }

  void TruncateWhileReading(OnError mode);

  // Global indices of the samples stored in shard `shard`.
  std::pair<uint64_t, uint64_t> SamplesOf(size_t shard) {
    const ShardInfo& info = dataset_->shards()[shard];
    return {info.first_record, info.first_record + info.records};
  }

  TempDir dir_;
  std::string packed_;
  std::shared_ptr<Dataset> dataset_;
};

void ReliabilityTest::TruncateWhileReading(OnError mode) {
  LoaderOptions options = Options();
  options.on_error = mode;
  options.max_skipped = kImages;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, Internals(), &loader).ok());
  Batch batch;
  ASSERT_TRUE(loader->Next(&batch).ok());  // the pipeline is running
  size_t victim = dataset_->shards().size() - 1;
  const std::string victim_path = dataset_->shards()[victim].path;
  uint64_t size = dataset_->shards()[victim].bytes;
  ASSERT_EQ(::truncate(victim_path.c_str(), static_cast<off_t>(size / 2)), 0);
  std::vector<Status> errors;
  std::vector<uint64_t> ids = batch.sample_ids();  // taken before the truncation
  for (uint64_t id : RunEpoch(loader.get(), &errors)) ids.push_back(id);
  auto [first, end] = SamplesOf(victim);
  std::set<uint64_t> delivered(ids.begin(), ids.end());
  if (mode == OnError::kRaise) {
    ASSERT_FALSE(errors.empty());
    for (const Status& error : errors) {
      EXPECT_TRUE(error.IsCorruption() || error.IsIOError()) << error.ToString();
      EXPECT_NE(error.ToString().find(victim_path), std::string::npos) << error.ToString();
      EXPECT_NE(error.ToString().find("sample"), std::string::npos) << error.ToString();
      EXPECT_NE(error.ToString().find("offset"), std::string::npos) << error.ToString();
    }
  } else {
    EXPECT_TRUE(errors.empty()) << errors[0].ToString();
    // The records past the cut never arrive; each was counted and listed
    // once, and no sample came twice.
    uint64_t lost = 0;
    for (uint64_t id = first; id < end; ++id) lost += delivered.count(id) == 0;
    EXPECT_GE(lost, 1u);
    EXPECT_EQ(loader->Stats().skipped, lost);
    std::set<uint64_t> listed;
    for (const SkippedSample& s : loader->SkippedSamples()) {
      listed.insert(s.sample);
      EXPECT_EQ(s.path, victim_path);
    }
    EXPECT_EQ(listed.size(), lost);
    for (uint64_t id : listed) EXPECT_FALSE(delivered.count(id)) << id;
    // Every sample of the intact shards arrived.
    for (uint64_t id = 0; id < first; ++id) EXPECT_TRUE(delivered.count(id)) << id;
    EXPECT_EQ(ids.size(), delivered.size());
    EXPECT_EQ(ids.size(), static_cast<size_t>(kImages) - lost);
  }
}

TEST_P(ReliabilityTest, ShardTruncatedWhileALoaderReadsItRaises) {
  TruncateWhileReading(OnError::kRaise);
}

TEST_P(ReliabilityTest, ShardTruncatedWhileALoaderReadsItIsSkippedAndCounted) {
  TruncateWhileReading(OnError::kSkip);
}

TEST_P(ReliabilityTest, ShardOverwrittenWhileALoaderReadsIt) {
  LoaderOptions options = Options();
  options.on_error = OnError::kSkip;
  options.max_skipped = kImages;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, Internals(), &loader).ok());
  Batch batch;
  ASSERT_TRUE(loader->Next(&batch).ok());
  // Overwrite the second half of the last shard in place (same size, as a
  // concurrent `cp` onto it would), from a record boundary on.
  size_t victim = dataset_->shards().size() - 1;
  const ShardInfo& info = dataset_->shards()[victim];
  std::string idx = ReadBytes(IndexPathFor(info.path));
  uint64_t middle_record = info.records / 2;
  uint64_t from = 0;
  {
    size_t line_start = 0;
    for (uint64_t line = 0; line < middle_record; ++line) line_start = idx.find('\n', line_start) + 1;
    from = std::stoull(idx.substr(idx.find('\t', line_start) + 1));
  }
  int fd = ::open(info.path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::string garbage(info.bytes - from, '\x5A');
  ASSERT_EQ(::pwrite(fd, garbage.data(), garbage.size(), static_cast<off_t>(from)),
            static_cast<ssize_t>(garbage.size()));
  ::close(fd);
  std::vector<Status> errors;
  std::vector<uint64_t> ids = batch.sample_ids();  // taken before the overwrite
  for (uint64_t id : RunEpoch(loader.get(), &errors)) ids.push_back(id);
  EXPECT_TRUE(errors.empty()) << errors[0].ToString();
  std::set<uint64_t> delivered(ids.begin(), ids.end());
  uint64_t overwritten_from = info.first_record + middle_record;
  // The overwritten records never arrive as data; each was counted once.
  uint64_t skipped = loader->Stats().skipped;
  EXPECT_GE(skipped, 1u);
  EXPECT_EQ(ids.size() + skipped, static_cast<size_t>(kImages));
  EXPECT_EQ(delivered.size(), ids.size());
  for (uint64_t id = overwritten_from; id < info.first_record + info.records; ++id) {
    EXPECT_FALSE(delivered.count(id)) << "sample " << id << " was delivered from garbage";
  }
  for (uint64_t id = 0; id < info.first_record; ++id) EXPECT_TRUE(delivered.count(id)) << id;

  // In raise mode the error names the file, the offset and the sample.
  options.on_error = OnError::kRaise;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, Internals(), &loader).ok());
  errors.clear();
  RunEpoch(loader.get(), &errors);
  ASSERT_FALSE(errors.empty());
  EXPECT_TRUE(errors[0].IsCorruption()) << errors[0].ToString();
  EXPECT_NE(errors[0].ToString().find(info.path + " at byte offset"), std::string::npos)
      << errors[0].ToString();
  // The batch's first error by time: any of the overwritten samples.
  bool names_an_overwritten_sample = false;
  for (uint64_t id = overwritten_from; id < info.first_record + info.records; ++id) {
    names_an_overwritten_sample |=
        errors[0].ToString().find("sample " + std::to_string(id) + " ") != std::string::npos;
  }
  EXPECT_TRUE(names_an_overwritten_sample) << errors[0].ToString();
}

TEST_P(ReliabilityTest, EioFromTheReadEngine) {
  if (!GetParam()) GTEST_SKIP() << "the fault hook is the read engine's; this run reads without it";
  constexpr uint64_t kVictim = 13;  // with shuffle off, task k reads sample k
  for (OnError mode : {OnError::kRaise, OnError::kSkip}) {
    LoaderOptions options = Options();
    options.on_error = mode;
    options.max_skipped = 1;
    ReadEngineTestHooks injected;
    injected.inject_read_error = [](uint64_t tag) {
      return (tag & ((uint64_t{1} << 40) - 1)) == kVictim ? EIO : 0;
    };
    ScopedReadEngineTestHooks hooks(std::move(injected));
    std::unique_ptr<Loader> loader;
    ASSERT_TRUE(LoaderFactory::Open(dataset_, options, Internals(), &loader).ok());
    std::vector<Status> errors;
    std::vector<uint64_t> ids = RunEpoch(loader.get(), &errors);
    std::multiset<uint64_t> delivered(ids.begin(), ids.end());
    EXPECT_EQ(delivered.count(kVictim), 0u);
    if (mode == OnError::kRaise) {
      ASSERT_EQ(errors.size(), 1u);
      EXPECT_TRUE(errors[0].IsIOError()) << errors[0].ToString();
      EXPECT_NE(errors[0].ToString().find("sample 13"), std::string::npos) << errors[0].ToString();
      EXPECT_NE(errors[0].ToString().find(".rec"), std::string::npos) << errors[0].ToString();
      // Only the batch holding the victim was lost (raise mode drops it).
      EXPECT_EQ(ids.size(), static_cast<size_t>(kImages - options.batch_size));
    } else {
      EXPECT_TRUE(errors.empty()) << errors[0].ToString();
      EXPECT_EQ(loader->Stats().skipped, 1u);
      for (uint64_t id = 0; id < kImages; ++id) {
        if (id != kVictim) EXPECT_EQ(delivered.count(id), 1u) << id;
      }
      ASSERT_EQ(loader->SkippedSamples().size(), 1u);
      EXPECT_EQ(loader->SkippedSamples()[0].sample, kVictim);
      EXPECT_NE(loader->SkippedSamples()[0].reason.find("IOError"), std::string::npos);
    }
  }
}

TEST_P(ReliabilityTest, FiftyShuffledEpochsEveryOneExactlyOnceWithFlatResources) {
  LoaderOptions options = Options();
  options.shuffle = ShuffleMode::kGlobal;
  options.prefetch = 2;
  options.seed = 11;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(LoaderFactory::Open(dataset_, options, Internals(), &loader).ok());
  std::vector<uint64_t> first_order;
  size_t fds_warm = 0, threads_warm = 0;
  uint64_t rss_warm = 0;
  for (int epoch = 0; epoch < 50; ++epoch) {
    ASSERT_TRUE(loader->SetEpoch(epoch).ok());
    std::vector<Status> errors;
    std::vector<uint64_t> ids = RunEpoch(loader.get(), &errors);
    ASSERT_TRUE(errors.empty()) << errors[0].ToString();
    std::multiset<uint64_t> seen(ids.begin(), ids.end());
    ASSERT_EQ(seen.size(), static_cast<size_t>(kImages)) << "epoch " << epoch;
    for (uint64_t id = 0; id < kImages; ++id) ASSERT_EQ(seen.count(id), 1u) << "epoch " << epoch;
    if (epoch == 0) first_order = ids;
    if (epoch == 1) EXPECT_NE(ids, first_order);  // reshuffled
    if (epoch == 4) {  // warm: buffers, thread stacks, allocator arenas
      fds_warm = CountEntries("/proc/self/fd");
      threads_warm = CountEntries("/proc/self/task");
      rss_warm = ResidentKiB();
    }
  }
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds_warm);
  EXPECT_EQ(CountEntries("/proc/self/task"), threads_warm);
  // 45 more epochs may not grow RSS by more than 10% + 4 MiB of slack
  // (the allocator's arenas settle; a leak of one sample per epoch would
  // not fit). Sanitizer builds keep freed memory in quarantine.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LE(ResidentKiB(), rss_warm * 11 / 10 + 4096) << "warm " << rss_warm << " KiB";
#else
  (void)rss_warm;
#endif
  size_t threads_with_loader = CountEntries("/proc/self/task");
  loader.reset();
  EXPECT_LT(CountEntries("/proc/self/task"), threads_with_loader);
}

INSTANTIATE_TEST_SUITE_P(ReadPaths, ReliabilityTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("ReadEngine")
                                             : std::string("DecodeThreadsRead");
                         });

}  // namespace
}  // namespace gpufeed
