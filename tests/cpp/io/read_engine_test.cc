// ReadEngine: both backends, buffered and O_DIRECT, against a reference
// pread; fallback; errors; buffer accounting; concurrent requesters.
#include "io/read_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "gpufeed/dataset.h"
#include "engine_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 generator(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(generator());
  return bytes;
}

std::string ReferencePread(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY);
  std::string out(length, '\0');
  ssize_t n = ::pread(fd, out.data(), length, static_cast<off_t>(offset));
  ::close(fd);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

class ReadEngineTest : public ::testing::TestWithParam<EngineParam> {
 protected:
  void SetUp() override {
    options_.queue_depth = 32;
    options_.inflight_bytes = 64 << 20;
    Status status = CreateEngineFor(GetParam(), &options_, &engine_);
    if (status.IsNotSupported() && GetParam().backend == IoBackend::kIoUring) {
      GTEST_SKIP() << "io_uring unavailable here: " << status.ToString();
    }
    ASSERT_TRUE(status.ok()) << status.ToString();
    path_ = JoinPath(dir_.path(), "data.bin");
    contents_ = RandomBytes(3 << 20 | 12345, 7);  // not a multiple of any alignment
    WriteBytes(path_, contents_);
  }

  void ExpectSameAsPread(const std::vector<ReadRequest>& requests) {
    std::vector<ReadCompletion> completions;
    ASSERT_TRUE(engine_->ReadAll(requests, &completions).ok());
    ASSERT_EQ(completions.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadRequest& request = requests[i];
      ASSERT_TRUE(completions[i].status.ok()) << completions[i].status.ToString();
      std::string expected = ReferencePread(path_, request.offset, request.length);
      std::string actual(completions[i].buffer.data(), completions[i].buffer.size());
      ASSERT_EQ(actual.size(), expected.size()) << "offset " << request.offset << " length "
                                                << request.length;
      ASSERT_TRUE(actual == expected) << "offset " << request.offset;
    }
    completions.clear();
    EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
  }

  IoOptions options_;
  std::unique_ptr<ReadEngine> engine_;
  TempDir dir_;
  std::string path_;
  std::string contents_;
};

TEST_P(ReadEngineTest, RandomRangesMatchPread) {
  FileId file;
  ASSERT_TRUE(engine_->OpenFile(path_, &file).ok());
  std::mt19937 generator(11);
  std::vector<ReadRequest> requests;
  for (int i = 0; i < 300; ++i) {
    ReadRequest request;
    request.file = file;
    request.offset = generator() % contents_.size();
    request.length = 1 + generator() % (i % 3 == 0 ? (512u << 10) : 9000u);
    requests.push_back(request);
  }
  // Aligned, unaligned, zero-length, the tail, and past the end.
  requests.push_back({file, 0, 4096});
  requests.push_back({file, 4096, 1 << 20});
  requests.push_back({file, 1, 0});
  requests.push_back({file, contents_.size() - 10, 10});
  requests.push_back({file, contents_.size() - 10, 5000});
  requests.push_back({file, contents_.size() + 100, 4096});
  ExpectSameAsPread(requests);
  IoStats stats = engine_->stats();
  EXPECT_EQ(stats.requests, requests.size());
  EXPECT_EQ(stats.errors, 0u);
}

TEST_P(ReadEngineTest, OffsetsBeyondFourGiBInASparseFile) {
  std::string sparse = JoinPath(dir_.path(), "sparse.bin");
  int fd = ::open(sparse.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const uint64_t base = (5ull << 30) + 4097;
  std::string tail = RandomBytes(100000, 3);
  ASSERT_EQ(::pwrite(fd, tail.data(), tail.size(), static_cast<off_t>(base)),
            static_cast<ssize_t>(tail.size()));
  ::close(fd);
  path_ = sparse;
  FileId file;
  ASSERT_TRUE(engine_->OpenFile(sparse, &file).ok());
  ExpectSameAsPread({{file, base, 100000}, {file, base + 3, 777}, {file, (4ull << 30) + 1, 8192},
                     {file, base + 99990, 100}});
}

TEST_P(ReadEngineTest, BudgetSmallerThanTheWorkAndARequestLargerThanTheBudget) {
  IoOptions small = options_;
  small.inflight_bytes = 64 << 10;
  std::unique_ptr<ReadEngine> engine;
  ASSERT_TRUE(ReadEngine::Create(small, &engine).ok());
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path_, &file).ok());
  std::vector<ReadRequest> requests;
  for (uint64_t i = 0; i < 64; ++i) requests.push_back({file, i * 16384 + 3, 16384, i});
  requests.push_back({file, 5, 1 << 20, 64});  // 16x the budget
  std::vector<ReadRequest> copy = requests;
  std::vector<ReadCompletion> batch;
  EXPECT_TRUE(engine->ReadAll(copy, &batch).IsInvalidArgument());  // cannot fit at once
  // Consumed as they arrive, 1 MiB of work flows through a 64 KiB budget.
  CompletionQueue queue;
  ASSERT_TRUE(engine->Submit(copy, &queue).ok());
  size_t received = 0;
  while (received < requests.size()) {
    std::vector<ReadCompletion> completions;
    queue.Wait(1, &completions);
    for (ReadCompletion& completion : completions) {
      ASSERT_TRUE(completion.status.ok()) << completion.status.ToString();
      const ReadRequest& request = requests[completion.tag];
      ASSERT_EQ(std::string(completion.buffer.data(), completion.buffer.size()),
                contents_.substr(request.offset, request.length));
      EXPECT_LE(engine->pool()->bytes_in_use(), std::max<size_t>(64 << 10, (1 << 20) + 8192));
      received += 1;
    }
  }
  EXPECT_EQ(engine->pool()->buffers_outstanding(), 0u);
}

// A small file sized and waiting for buffer budget does not hold back a
// range request that fits the budget left: the range starts at once (no
// completion or release would come to wake the engine for it; deadlines
// are off, so no tick does either).
TEST_P(ReadEngineTest, ARangeStartsWhileASmallFileWaitsForBudget) {
  IoOptions small = options_;
  small.inflight_bytes = 1 << 20;
  small.timeout_seconds = 0;
  std::unique_ptr<ReadEngine> engine;
  ASSERT_TRUE(ReadEngine::Create(small, &engine).ok());
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path_, &file).ok());
  std::vector<ReadCompletion> held;  // 768 KiB of the 1 MiB budget
  ASSERT_TRUE(engine->ReadAll({{file, 0, 768 << 10, 0}}, &held).ok());
  ASSERT_TRUE(held[0].status.ok());
  const std::string big = JoinPath(dir_.path(), "big.bin");
  const std::string big_bytes = RandomBytes(512 << 10, 3);
  WriteBytes(big, big_bytes);
  CompletionQueue whole_queue;
  ReadRequest whole;
  whole.path = big;
  whole.tag = 1;
  ASSERT_TRUE(engine->Submit({whole}, &whole_queue).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // sized, waiting for budget
  CompletionQueue queue;
  ASSERT_TRUE(engine->Submit({{file, 1 << 20, 4096, 2}}, &queue).ok());
  auto range = std::async(std::launch::async, [&] {
    std::vector<ReadCompletion> done;
    queue.Wait(1, &done);
    return done.size() == 1 && done[0].status.ok() &&
           std::string(done[0].buffer.data(), done[0].buffer.size()) ==
               contents_.substr(1 << 20, 4096);
  });
  const bool started = range.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  EXPECT_TRUE(started) << "the range waited for the small file's budget";
  held.clear();  // the budget comes back: the small file goes on
  EXPECT_TRUE(range.get());
  std::vector<ReadCompletion> done;
  whole_queue.Wait(1, &done);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status.ToString();
  EXPECT_TRUE(std::string(done[0].buffer.data(), done[0].buffer.size()) == big_bytes);
}

TEST_P(ReadEngineTest, SmallFileMode) {
  std::vector<ReadRequest> requests;
  std::vector<std::string> expected;
  for (int i = 0; i < 100; ++i) {
    std::string path = JoinPath(dir_.path(), "small_" + std::to_string(i) + ".jpg");
    expected.push_back(RandomBytes(static_cast<size_t>(i * 997 % 70000), i));
    WriteBytes(path, expected.back());
    ReadRequest request;
    request.path = path;
    requests.push_back(request);
  }
  ReadRequest missing;
  missing.path = JoinPath(dir_.path(), "missing.jpg");
  requests.push_back(missing);
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine_->ReadAll(requests, &completions).ok());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(completions[i].status.ok()) << completions[i].status.ToString();
    EXPECT_EQ(std::string(completions[i].buffer.data(), completions[i].buffer.size()),
              expected[i]);
  }
  Status status = completions.back().status;
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find("missing.jpg"), std::string::npos);
  completions.clear();
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
}

TEST_P(ReadEngineTest, TruncatedAndDeletedWhileOpen) {
  FileId file;
  ASSERT_TRUE(engine_->OpenFile(path_, &file).ok());
  ASSERT_EQ(::truncate(path_.c_str(), 100000), 0);
  contents_.resize(100000);
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine_->ReadAll({{file, 99000, 5000}, {file, 200000, 4096}}, &completions).ok());
  // Short at the new end of file, empty past it: the caller's framing check
  // turns that into Corruption; the engine reports what the file holds.
  ASSERT_TRUE(completions[0].status.ok());
  EXPECT_EQ(completions[0].buffer.size(), 1000u);
  ASSERT_TRUE(completions[1].status.ok());
  EXPECT_EQ(completions[1].buffer.size(), 0u);
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  ASSERT_TRUE(engine_->ReadAll({{file, 0, 4096}}, &completions).ok());
  ASSERT_TRUE(completions[0].status.ok());  // POSIX: the open file lives on
  EXPECT_EQ(std::string(completions[0].buffer.data(), 4096), contents_.substr(0, 4096));
  completions.clear();
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
}

TEST_P(ReadEngineTest, BadFileIdsAndMissingFiles) {
  FileId file;
  Status status = engine_->OpenFile(JoinPath(dir_.path(), "nope"), &file);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  CompletionQueue queue;
  EXPECT_TRUE(engine_->Submit({{12345, 0, 10}}, &queue).IsInvalidArgument());
  ASSERT_TRUE(engine_->OpenFile(path_, &file).ok());
  ASSERT_TRUE(engine_->CloseFile(file).ok());
  EXPECT_TRUE(engine_->Submit({{file, 0, 10}}, &queue).IsInvalidArgument());
}

TEST_P(ReadEngineTest, PermissionDenied) {
  ::chmod(dir_.path().c_str(), 0755);
  ::chmod(path_.c_str(), 0);
  IoOptions options = options_;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    std::unique_ptr<ReadEngine> engine;
    if (!ReadEngine::Create(options, &engine).ok()) ::_exit(4);
    FileId file;
    Status status = engine->OpenFile(path_, &file);
    ReadRequest request;
    request.path = path_;
    std::vector<ReadCompletion> completions;
    (void)engine->ReadAll({request}, &completions);  // the completions are checked
    bool ok = status.IsPermissionDenied() && completions.size() == 1 &&
              completions[0].status.IsPermissionDenied() &&
              completions[0].status.message().find(path_) != std::string::npos;
    ::_exit(ok ? 0 : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop privileges";
  if (WEXITSTATUS(wait_status) == 4) GTEST_SKIP() << "no engine for an unprivileged user";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
}

TEST_P(ReadEngineTest, ManyConcurrentRequestersEachCompletionExactlyOnce) {
  FileId file;
  ASSERT_TRUE(engine_->OpenFile(path_, &file).ok());
  std::vector<std::thread> requesters;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    requesters.emplace_back([&, t] {
      CompletionQueue queue;
      std::mt19937 generator(100 + t);
      std::vector<ReadRequest> requests;
      for (uint64_t i = 0; i < 200; ++i) {
        requests.push_back({file, generator() % (contents_.size() - 70000),
                            1 + generator() % 65536, i});
      }
      std::vector<ReadRequest> copy = requests;
      // Submit in several batches, interleaved with waiting.
      for (size_t start = 0; start < copy.size(); start += 50) {
        std::vector<ReadRequest> batch(copy.begin() + start, copy.begin() + start + 50);
        if (!engine_->Submit(std::move(batch), &queue).ok()) failures++;
      }
      std::vector<ReadCompletion> completions;
      queue.Wait(requests.size(), &completions);
      std::set<uint64_t> seen;
      for (ReadCompletion& completion : completions) {
        if (!completion.status.ok() || !seen.insert(completion.tag).second) {
          failures++;
          continue;
        }
        const ReadRequest& request = requests[completion.tag];
        if (std::string(completion.buffer.data(), completion.buffer.size()) !=
            contents_.substr(request.offset, request.length)) {
          failures++;
        }
      }
      if (seen.size() != requests.size() || queue.ready() != 0) failures++;
    });
  }
  for (std::thread& thread : requesters) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
}

// Requesters that keep one read outstanding each, resubmitting as soon as
// it completes, while another submits bursts: the engine thread sleeps and
// wakes between reads all the time, so a wake-up lost between a Submit and
// the engine's wait (Enqueue writes the ring's eventfd only while it
// waits) would stall a requester; the watchdog turns that into a failure.
TEST_P(ReadEngineTest, RequestersWaitingForEachReadAreNeverStalled) {
  FileId file;
  ASSERT_TRUE(engine_->OpenFile(path_, &file).ok());
  std::atomic<int> failures{0};
  auto one_at_a_time = [&](int seed) {
    CompletionQueue queue;
    std::mt19937 generator(seed);
    for (uint64_t i = 0; i < 1500; ++i) {
      ReadRequest request{file, generator() % (contents_.size() - 8192), 1 + generator() % 8192, i};
      if (!engine_->Submit({request}, &queue).ok()) failures++;
      std::vector<ReadCompletion> done;
      queue.Wait(1, &done);
      if (done.size() != 1 || done[0].tag != i || !done[0].status.ok() ||
          std::string(done[0].buffer.data(), done[0].buffer.size()) !=
              contents_.substr(request.offset, request.length)) {
        failures++;
      }
    }
  };
  auto bursts = [&] {
    CompletionQueue queue;
    std::mt19937 generator(99);
    for (int round = 0; round < 40; ++round) {
      std::vector<ReadRequest> burst;
      for (uint64_t i = 0; i < 64; ++i) {
        burst.push_back({file, generator() % (contents_.size() - 4096), 4096, i});
      }
      if (!engine_->Submit(burst, &queue).ok()) failures++;
      std::vector<ReadCompletion> done;
      queue.Wait(burst.size(), &done);
      for (const ReadCompletion& completion : done) failures += !completion.status.ok();
    }
  };
  auto finished = std::async(std::launch::async, [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) threads.emplace_back(one_at_a_time, 7 + t);
    threads.emplace_back(bursts);
    for (std::thread& thread : threads) thread.join();
  });
  if (finished.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    std::fprintf(stderr, "a requester stalled: a lost wake-up\n");
    std::abort();  // the threads cannot be joined
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
  EXPECT_EQ(engine_->stats().requests, 3u * 1500 + 40 * 64);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReadEngineTest, AllEngineParams(), EngineParamName);

TEST(ReadEngineFallbackTest, ProbeFailureFallsBackOrIsNotSupported) {
  IoOptions options;
  ReadEngineTestHooks failing;
  failing.fail_io_uring_probe = EPERM;
  ScopedReadEngineTestHooks hooks(failing);
  std::unique_ptr<ReadEngine> engine;
  ASSERT_TRUE(ReadEngine::Create(options, &engine).ok());
  EXPECT_STREQ(engine->backend_name(), "pread");
  // A build without liburing has no probe to fail: the reason is the build's.
  const char* reason =
      GetBuildInfo().with_io_uring ? "Operation not permitted" : "built without io_uring";
  EXPECT_NE(engine->fallback_reason().find(reason), std::string::npos)
      << engine->fallback_reason();
  TempDir dir;
  std::string path = JoinPath(dir.path(), "f");
  std::string bytes = RandomBytes(100000, 1);
  WriteBytes(path, bytes);
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path, &file).ok());
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{file, 17, 50000}}, &completions).ok());
  EXPECT_EQ(std::string(completions[0].buffer.data(), completions[0].buffer.size()),
            bytes.substr(17, 50000));

  options.backend = IoBackend::kIoUring;
  Status status = ReadEngine::Create(options, &engine);
  EXPECT_TRUE(status.IsNotSupported()) << status.ToString();
  EXPECT_NE(status.message().find("io_uring"), std::string::npos);
}

TEST(ReadEngineFallbackTest, DestroyingTheEngineKeepsHandedOutBuffersValid) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "f");
  WriteBytes(path, std::string(10000, 'x'));
  std::vector<ReadCompletion> completions;
  {
    std::unique_ptr<ReadEngine> engine;
    ASSERT_TRUE(ReadEngine::Create({}, &engine).ok());
    FileId file;
    ASSERT_TRUE(engine->OpenFile(path, &file).ok());
    ASSERT_TRUE(engine->ReadAll({{file, 0, 10000}}, &completions).ok());
  }
  EXPECT_EQ(std::string(completions[0].buffer.data(), 3), "xxx");
  completions.clear();  // releases into a pool that outlived its engine
}

}  // namespace
}  // namespace gpufeed

namespace gpufeed {
namespace {

// EAGAIN, EINTR and EIO cannot be produced on demand with real files: the
// engine's fault-injection hook stands in for the kernel there.
class ReadEngineFaultTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    path_ = JoinPath(dir_.path(), "f");
    bytes_ = RandomBytes(1 << 20, 5);
    WriteBytes(path_, bytes_);
  }
  std::unique_ptr<ReadEngine> Make(std::function<int(uint64_t)> hook) {
    IoOptions options;
    options.backend = GetParam();
    ReadEngineTestHooks injected;
    injected.inject_read_error = std::move(hook);
    ScopedReadEngineTestHooks hooks(std::move(injected));
    std::unique_ptr<ReadEngine> engine;
    Status status = ReadEngine::Create(options, &engine);
    if (!status.ok()) return nullptr;
    return engine;
  }
  TempDir dir_;
  std::string path_, bytes_;
};

TEST_P(ReadEngineFaultTest, TransientErrorsAreRetriedThenServed) {
  std::atomic<int> calls{0};
  auto engine = Make([&](uint64_t) { return calls++ < 2 ? EAGAIN : 0; });
  if (!engine) GTEST_SKIP() << "backend unavailable";
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path_, &file).ok());
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{file, 100, 5000}}, &completions).ok());
  ASSERT_TRUE(completions[0].status.ok()) << completions[0].status.ToString();
  EXPECT_EQ(std::string(completions[0].buffer.data(), completions[0].buffer.size()),
            bytes_.substr(100, 5000));
  EXPECT_GE(engine->stats().retries, 2u);
}

// io_uring only: the pool's pread loop retries EINTR itself, as pread users do.
TEST(ReadEngineUringFaultTest, PersistentEagainEndsInPreadFallback) {
  TempDir dir;
  std::string path = JoinPath(dir.path(), "f");
  std::string bytes = RandomBytes(1 << 20, 5);
  WriteBytes(path, bytes);
  IoOptions options;
  options.backend = IoBackend::kIoUring;
  ReadEngineTestHooks injected;
  injected.inject_read_error = [](uint64_t) { return EINTR; };
  ScopedReadEngineTestHooks hooks(std::move(injected));
  std::unique_ptr<ReadEngine> engine;
  if (!ReadEngine::Create(options, &engine).ok()) GTEST_SKIP() << "io_uring unavailable";
  std::string& bytes_ = bytes;
  std::string& path_ = path;
  if (!engine) GTEST_SKIP() << "io_uring unavailable";
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path_, &file).ok());
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{file, 7, 300000}}, &completions).ok());
  ASSERT_TRUE(completions[0].status.ok()) << completions[0].status.ToString();
  EXPECT_EQ(std::string(completions[0].buffer.data(), completions[0].buffer.size()),
            bytes_.substr(7, 300000));
  EXPECT_EQ(engine->stats().pread_fallbacks, 1u);
  EXPECT_EQ(engine->stats().retries, 3u);
}

TEST_P(ReadEngineFaultTest, EioIsAStatusNamingFileOffsetLengthAndErrno) {
  auto engine = Make([](uint64_t tag) { return tag == 1 ? EIO : 0; });
  if (!engine) GTEST_SKIP() << "backend unavailable";
  FileId file;
  ASSERT_TRUE(engine->OpenFile(path_, &file).ok());
  std::vector<ReadCompletion> completions;
  ASSERT_TRUE(engine->ReadAll({{file, 0, 10}, {file, 4096, 8192}, {file, 10, 10}}, &completions).ok());
  EXPECT_TRUE(completions[0].status.ok());
  EXPECT_TRUE(completions[2].status.ok());
  const Status& status = completions[1].status;
  EXPECT_TRUE(status.IsIOError()) << status.ToString();
  for (const char* needle : {"/f", "offset 4096", "8192 bytes", "Input/output error"}) {
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
  }
  completions.clear();
  EXPECT_EQ(engine->pool()->buffers_outstanding(), 0u);
  EXPECT_EQ(engine->stats().errors, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReadEngineFaultTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kPread),
                         [](const auto& info) {
                           return info.param == IoBackend::kIoUring ? "IoUring" : "Pread";
                         });

}  // namespace
}  // namespace gpufeed
