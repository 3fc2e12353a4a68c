// A dataset of 100,000 shards read (directly and through the loader's read
// engine) under `ulimit -n 1024`: the storage layer's bounded descriptors
// under the loader (moved from tests/cpp/storage/store_test.cc, whose binary
// links the storage library alone).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format/irheader.h"
#include "format/recordio.h"
#include "gpufeed/dataset.h"
#include "gpufeed/loader.h"
#include "storage/store.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::string Payload(uint64_t index) {
  std::string data = "sample-" + std::to_string(index);
  SampleToWrite sample;
  sample.index = index;
  sample.labels = {static_cast<float>(index % 10)};
  sample.data = data;
  std::string payload;
  AppendIRPayload(sample, &payload);
  return payload;
}

// `count` one-record shards part-NNNNNN.rec with their .idx.
void WriteShards(const std::string& directory, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "part-%06llu", static_cast<unsigned long long>(i));
    std::string rec;
    EncodeRecordIO(Payload(i), &rec);
    WriteBytes(JoinPath(directory, std::string(name) + ".rec"), rec);
    WriteBytes(JoinPath(directory, std::string(name) + ".idx"), std::to_string(i) + "\t0\n");
  }
}

TEST(StoreTest, AHundredThousandShardsReadUnderADescriptorLimitOf1024) {
  TempDir dir;
  constexpr uint64_t kShards = 100000;
  WriteShards(dir.path(), kShards);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct rlimit limit = {1024, 1024};
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(10);
    std::unique_ptr<Dataset> opened;
    Status status = Dataset::Open(dir.path(), {}, &opened);
    if (!status.ok()) {
      std::fprintf(stderr, "open: %s\n", status.ToString().c_str());
      ::_exit(11);
    }
    std::shared_ptr<Dataset> dataset = std::move(opened);
    if (dataset->size() != kShards) ::_exit(12);
    Record record;
    for (uint64_t i = 0; i < kShards; i += 7) {
      status = dataset->Read(i, &record);
      if (!status.ok() || record.data != "sample-" + std::to_string(i)) {
        std::fprintf(stderr, "read %llu: %s\n", static_cast<unsigned long long>(i),
                     status.ToString().c_str());
        ::_exit(13);
      }
    }
    // The loader's read engine on top: its own descriptors are bounded too.
    LoaderOptions options;
    options.batch_size = 500;
    options.num_threads = 2;
    options.transform = TransformKind::kRaw;
    options.raw.length = 16;
    options.shuffle = ShuffleMode::kGlobal;
    std::unique_ptr<Loader> loader;
    status = Loader::Open(dataset, options, &loader);
    if (!status.ok()) {
      std::fprintf(stderr, "loader: %s\n", status.ToString().c_str());
      ::_exit(14);
    }
    uint64_t samples = 0;
    Batch batch;
    while (true) {
      status = loader->Next(&batch);
      if (!status.ok()) {
        std::fprintf(stderr, "next: %s\n", status.ToString().c_str());
        ::_exit(15);
      }
      if (batch.end_of_epoch()) break;
      samples += static_cast<uint64_t>(batch.size());
    }
    if (samples != kShards) ::_exit(16);
    StorageStats stats = dataset->storage_stats();
    if (stats.open_files > 256) ::_exit(17);
    ::_exit(0);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
}

}  // namespace
}  // namespace gpufeed
