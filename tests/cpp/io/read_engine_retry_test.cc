// ReadEngine under storage faults: IoOptions::retries (transient errors
// tried again after a backoff, others failing at once) and
// IoOptions::timeout_seconds (a read that never completes fails, is
// abandoned, and the engine still serves other reads and closes).
//
// EIO on demand comes from the engine's fault hook here; the same faults
// through a real FUSE mount are tests/python/test_storage_faults.py. A read
// that never completes is a real one: an io_uring read of an empty pipe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>

#include "io/read_engine.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class ReadEngineRetryTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    path_ = JoinPath(dir_.path(), "f");
    std::mt19937 generator(3);
    bytes_.resize(1 << 20);
    for (char& c : bytes_) c = static_cast<char>(generator());
    WriteBytes(path_, bytes_);
  }
  std::unique_ptr<ReadEngine> Make(std::function<int(uint64_t)> hook, int retries = 3,
                                   double timeout = 60) {
    IoOptions options;
    options.backend = GetParam();
    options.retries = retries;
    options.timeout_seconds = timeout;
    ReadEngineTestHooks injected;
    injected.inject_read_error = std::move(hook);
    ScopedReadEngineTestHooks hooks(std::move(injected));
    std::unique_ptr<ReadEngine> engine;
    if (!ReadEngine::Create(options, &engine).ok()) return nullptr;
    return engine;
  }
  ReadCompletion ReadOne(ReadEngine* engine, uint64_t offset, uint64_t length) {
    FileId file;
    EXPECT_TRUE(engine->OpenFile(path_, &file).ok());
    std::vector<ReadCompletion> completions;
    EXPECT_TRUE(engine->ReadAll({{file, offset, length}}, &completions).ok());
    return std::move(completions[0]);
  }
  TempDir dir_;
  std::string path_, bytes_;
};

TEST_P(ReadEngineRetryTest, AnOutageShorterThanTheRetriesIsRiddenOut) {
  std::atomic<int> calls{0};
  auto engine = Make([&](uint64_t) { return calls++ < 2 ? EIO : 0; });
  if (!engine) GTEST_SKIP() << "backend unavailable";
  auto started = Clock::now();
  ReadCompletion done = ReadOne(engine.get(), 4096, 100000);
  ASSERT_TRUE(done.status.ok()) << done.status.ToString();
  EXPECT_EQ(std::string(done.buffer.data(), done.buffer.size()), bytes_.substr(4096, 100000));
  EXPECT_EQ(engine->stats().transient_retries, 2u);
  EXPECT_GE(SecondsSince(started), 0.150 * 0.9);  // 50 ms, then 100 ms
}

TEST_P(ReadEngineRetryTest, APersistentEioFailsAfterTheRetriesWithItsErrno) {
  for (int retries : {0, 3}) {
    auto engine = Make([](uint64_t) { return EIO; }, retries);
    if (!engine) GTEST_SKIP() << "backend unavailable";
    auto started = Clock::now();
    ReadCompletion done = ReadOne(engine.get(), 0, 8192);
    const double took = SecondsSince(started);
    ASSERT_FALSE(done.status.ok());
    EXPECT_TRUE(done.status.IsIOError()) << done.status.ToString();
    EXPECT_EQ(done.status.error_number(), EIO);
    EXPECT_NE(done.status.message().find("offset 0"), std::string::npos);
    EXPECT_EQ(engine->stats().transient_retries, static_cast<uint64_t>(retries));
    if (retries == 3) {
      EXPECT_NE(done.status.message().find("after 3 retries"), std::string::npos)
          << done.status.ToString();
      EXPECT_GE(took, 0.350 * 0.9);  // 50 + 100 + 200 ms
    } else {
      EXPECT_LT(took, 0.3);
    }
    EXPECT_EQ(engine->pool()->buffers_outstanding(), 0u);
  }
}

TEST_P(ReadEngineRetryTest, ErrorsThatRetryingCannotCureFailAtOnce) {
  for (int error : {ENOTCONN, EBADF, ENXIO}) {
    std::atomic<int> calls{0};
    auto engine = Make([&](uint64_t) { return ++calls, error; });
    if (!engine) GTEST_SKIP() << "backend unavailable";
    ReadCompletion done = ReadOne(engine.get(), 0, 100);
    EXPECT_EQ(done.status.error_number(), error) << done.status.ToString();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(engine->stats().transient_retries, 0u);
  }
}

TEST_P(ReadEngineRetryTest, RetriesStopAtTheDeadline) {
  // 0.2 s limit, backoffs of 50, 100, 200 ms: the third would start past it.
  auto engine = Make([](uint64_t) { return ESTALE; }, 3, 0.2);
  if (!engine) GTEST_SKIP() << "backend unavailable";
  auto started = Clock::now();
  ReadCompletion done = ReadOne(engine.get(), 0, 100);
  EXPECT_FALSE(done.status.ok());
  EXPECT_LT(SecondsSince(started), 1.0);
  EXPECT_LE(engine->stats().transient_retries, 3u);
}

TEST_P(ReadEngineRetryTest, OptionsAreChecked) {
  for (auto change : std::vector<std::function<void(IoOptions*)>>{
           [](IoOptions* o) { o->retries = -1; }, [](IoOptions* o) { o->retry_backoff_ms = -5; },
           [](IoOptions* o) { o->timeout_seconds = -1; },
           [](IoOptions* o) { o->timeout_seconds = 1.0 / 0.0; }}) {
    IoOptions options;
    options.backend = GetParam();
    change(&options);
    std::unique_ptr<ReadEngine> engine;
    EXPECT_TRUE(ReadEngine::Create(options, &engine).IsInvalidArgument());
  }
}

// Reads are cut to the file's size, but a file that grew since the engine
// took it (a node-cache copy filled without preallocation) is not cut to
// its old size.
TEST_P(ReadEngineRetryTest, AFileThatGrewSinceItWasOpenedIsReadToItsNewEnd) {
  auto engine = Make(nullptr);
  if (!engine) GTEST_SKIP() << "backend unavailable";
  const std::string grown = JoinPath(dir_.path(), "grown");
  WriteBytes(grown, bytes_.substr(0, 1000));
  FileId file;
  ASSERT_TRUE(engine->OpenFile(grown, &file).ok());
  WriteBytes(grown, bytes_.substr(0, 50000));
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{file, 500, 40000}}, &completions).ok());
  ASSERT_TRUE(completions[0].status.ok()) << completions[0].status.ToString();
  EXPECT_EQ(std::string(completions[0].buffer.data(), completions[0].buffer.size()),
            bytes_.substr(500, 40000));
  EXPECT_EQ(engine->stats().clamped_reads, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReadEngineRetryTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kPread),
                         [](const auto& info) {
                           return info.param == IoBackend::kIoUring ? "IoUring" : "Pread";
                         });

// A read that never completes: io_uring reading an empty pipe whose write
// end stays open (the pread backend's pread of a pipe fails with ESPIPE
// instead; its hung reads are tested through FUSE).
TEST(ReadEngineTimeoutTest, AHungReadFailsAtItsDeadlineAndTheEngineGoesOnAndCloses) {
  TempDir dir;
  const std::string fifo = JoinPath(dir.path(), "fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int writer = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // a writer that never writes
  ASSERT_GE(writer, 0);
  const std::string path = JoinPath(dir.path(), "f");
  WriteBytes(path, std::string(10000, 'x'));
  IoOptions options;
  options.backend = IoBackend::kIoUring;
  options.timeout_seconds = 0.3;
  std::unique_ptr<ReadEngine> engine;
  if (!ReadEngine::Create(options, &engine).ok()) GTEST_SKIP() << "io_uring unavailable";
  FileId hung, fine;
  ASSERT_TRUE(engine->OpenFile(fifo, &hung).ok());
  ASSERT_TRUE(engine->OpenFile(path, &fine).ok());
  auto started = Clock::now();
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{hung, 0, 4096}, {fine, 100, 1000}}, &completions).ok());
  const double took = SecondsSince(started);
  EXPECT_TRUE(completions[1].status.ok()) << completions[1].status.ToString();
  ASSERT_FALSE(completions[0].status.ok());
  EXPECT_EQ(completions[0].status.error_number(), ETIMEDOUT);
  EXPECT_NE(completions[0].status.message().find("io_timeout=0.3 s"), std::string::npos)
      << completions[0].status.ToString();
  EXPECT_NE(completions[0].status.message().find("fifo"), std::string::npos);
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(engine->stats().timeouts, 1u);
  // The engine goes on: another read (the cancelled one's slot is free again
  // once the kernel acknowledged the cancellation).
  completions.clear();
  ASSERT_TRUE(engine->ReadAll({{fine, 0, 10000}}, &completions).ok());
  EXPECT_TRUE(completions[0].status.ok());
  // A second hung read, still in flight when the engine is destroyed.
  CompletionQueue queue;
  ASSERT_TRUE(engine->Submit({{hung, 0, 4096}}, &queue).ok());
  started = Clock::now();
  engine.reset();
  EXPECT_LT(SecondsSince(started), 2.5);  // the close grace (1 s) and a margin
  std::vector<ReadCompletion> left;
  queue.Wait(1, &left);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_FALSE(left[0].status.ok());
  ::close(writer);
}

}  // namespace
}  // namespace gpufeed
