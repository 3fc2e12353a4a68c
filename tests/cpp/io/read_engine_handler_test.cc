// CompletionQueue with a handler: completions delivered on the engine's
// thread, resubmission from the handler, failures, Close, and destroying
// the engine with reads in flight. Both backends, buffered and O_DIRECT,
// and io_uring as on an old kernel.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "io/read_engine.h"
#include "engine_test_util.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

class ReadEngineHandlerTest : public ::testing::TestWithParam<EngineParam> {
 protected:
  void SetUp() override {
    options_.queue_depth = 16;
    options_.inflight_bytes = 16 << 20;
    Status status = CreateEngineFor(GetParam(), &options_, &engine_);
    if (status.IsNotSupported() && GetParam().backend == IoBackend::kIoUring) {
      GTEST_SKIP() << "io_uring unavailable here: " << status.ToString();
    }
    ASSERT_TRUE(status.ok()) << status.ToString();
    path_ = JoinPath(dir_.path(), "data.bin");
    std::mt19937 generator(3);
    contents_.resize((2 << 20) + 777);
    for (char& c : contents_) c = static_cast<char>(generator());
    WriteBytes(path_, contents_);
    ASSERT_TRUE(engine_->OpenFile(path_, &file_).ok());
  }

  ReadRequest RequestFor(uint64_t tag) const {
    // A pseudo-random range per tag, so a completion can be checked alone.
    std::mt19937_64 generator(tag * 7919 + 1);
    uint64_t offset = generator() % contents_.size();
    uint64_t length = 1 + generator() % 20000;
    return ReadRequest{file_, offset, length, tag};
  }

  bool Matches(const ReadCompletion& completion) const {
    ReadRequest request = RequestFor(completion.tag);
    size_t expected = std::min<uint64_t>(request.length, contents_.size() - request.offset);
    return completion.status.ok() && completion.buffer.size() == expected &&
           std::string(completion.buffer.data(), expected) ==
               contents_.substr(request.offset, expected);
  }

  IoOptions options_;
  std::unique_ptr<ReadEngine> engine_;
  TempDir dir_;
  std::string path_;
  std::string contents_;
  FileId file_ = 0;
};

// A chain as a loader's read-ahead or gpufeed_io_bench --handler runs it:
// every completion is replaced from inside the handler until `total` reads
// were made; each is checked and completes exactly once, and no thread but
// the engine's touches the reads after the first Submit.
TEST_P(ReadEngineHandlerTest, TheHandlerResubmitsUntilEveryReadIsDone) {
  constexpr uint64_t kTotal = 3000, kOutstanding = 24;
  std::mutex mutex;
  std::condition_variable done;
  std::set<uint64_t> seen;
  uint64_t next = kOutstanding, finished = 0;
  std::atomic<int> failures{0};
  std::atomic<std::thread::id> requester{std::this_thread::get_id()};
  std::atomic<int> on_requester{0};
  CompletionQueue queue([&](std::vector<ReadCompletion>* completions) {
    if (std::this_thread::get_id() == requester.load()) on_requester++;
    std::vector<ReadRequest> more;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (ReadCompletion& completion : *completions) {
        if (!Matches(completion) || !seen.insert(completion.tag).second) failures++;
        finished += 1;
        if (next < kTotal) more.push_back(RequestFor(next++));
      }
      if (finished == kTotal) done.notify_all();
    }
    completions->clear();
    if (!more.empty() && !engine_->Submit(std::move(more), &queue).ok()) failures++;
  });
  std::vector<ReadRequest> first;
  for (uint64_t i = 0; i < kOutstanding; ++i) first.push_back(RequestFor(i));
  ASSERT_TRUE(engine_->Submit(std::move(first), &queue).ok());
  {
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return finished == kTotal; }))
        << finished << " of " << kTotal;
  }
  // Even after a failure above: no delivery may reach this frame once it
  // returns. Close first (it waits for the handler calls in progress, and
  // drops later ones), then let the engine finish its reads.
  queue.Close();
  if (finished != kTotal) {
    engine_.reset();
    return;
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(on_requester.load(), 0);
  EXPECT_EQ(seen.size(), kTotal);
  EXPECT_EQ(queue.ready(), 0u);  // a handler's queue holds nothing
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
  EXPECT_EQ(engine_->stats().requests, kTotal);
}

// Completions the handler leaves in the vector are released (their memory
// back to the budget), and Wait on a handler's queue returns at once.
TEST_P(ReadEngineHandlerTest, CompletionsTheHandlerLeavesAreReleased) {
  std::atomic<int> delivered{0};
  CompletionQueue queue([&](std::vector<ReadCompletion>* completions) {
    delivered += static_cast<int>(completions->size());
  });
  std::vector<ReadRequest> requests;
  for (uint64_t i = 0; i < 200; ++i) requests.push_back(RequestFor(i));
  ASSERT_TRUE(engine_->Submit(std::move(requests), &queue).ok());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (delivered.load() < 200 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(delivered.load(), 200);
  std::vector<ReadCompletion> none;
  queue.Wait(1, &none);
  EXPECT_TRUE(none.empty());
  queue.Close();
  EXPECT_EQ(engine_->pool()->buffers_outstanding(), 0u);
}

// A read past the end reaches the handler cut to the file's end, and an
// unknown file id fails at Submit without calling the handler.
TEST_P(ReadEngineHandlerTest, ShortReadsReachTheHandlerAndBadIdsFailAtSubmit) {
  std::mutex mutex;
  std::vector<ReadCompletion> got;
  CompletionQueue queue([&](std::vector<ReadCompletion>* completions) {
    std::lock_guard<std::mutex> lock(mutex);
    for (ReadCompletion& completion : *completions) got.push_back(std::move(completion));
  });
  EXPECT_TRUE(engine_->Submit({{file_ + 1000, 0, 10, 1}}, &queue).IsInvalidArgument());
  ASSERT_TRUE(engine_->Submit({{file_, contents_.size() - 5, 4096, 2}}, &queue).ok());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!got.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  queue.Close();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, 2u);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status.ToString();
  EXPECT_EQ(std::string(got[0].buffer.data(), got[0].buffer.size()),
            contents_.substr(contents_.size() - 5));
}

// Destroying the engine with reads queued and in flight delivers every one
// of them to the handler (done or cancelled), once; after Close, nothing is
// delivered and the buffers still go back.
TEST_P(ReadEngineHandlerTest, DestroyingTheEngineDeliversEveryReadOnce) {
  std::mutex mutex;
  std::set<uint64_t> seen;
  std::atomic<int> failures{0};
  CompletionQueue queue([&](std::vector<ReadCompletion>* completions) {
    std::lock_guard<std::mutex> lock(mutex);
    for (ReadCompletion& completion : *completions) {
      if (completion.status.ok() ? !Matches(completion) : completion.status.code() != Status::Code::kCancelled) {
        failures++;
      }
      if (!seen.insert(completion.tag).second) failures++;
    }
  });
  // Few enough to finish within the engine's close grace (1 s) on a loaded
  // machine: an abandoned read would keep its buffer for good.
  std::vector<ReadRequest> requests;
  for (uint64_t i = 0; i < 500; ++i) requests.push_back(RequestFor(i));
  ASSERT_TRUE(engine_->Submit(std::move(requests), &queue).ok());
  std::shared_ptr<BufferPool> pool = engine_->pool();
  engine_.reset();
  EXPECT_EQ(seen.size(), 500u);
  EXPECT_EQ(failures.load(), 0);
  queue.Close();
  EXPECT_EQ(pool->buffers_outstanding(), 0u);
}

TEST_P(ReadEngineHandlerTest, AfterCloseCompletionsAreReleasedUndelivered) {
  std::atomic<int> delivered{0};
  CompletionQueue queue([&](std::vector<ReadCompletion>*) { delivered++; });
  queue.Close();
  std::vector<ReadRequest> requests;
  for (uint64_t i = 0; i < 100; ++i) requests.push_back(RequestFor(i));
  ASSERT_TRUE(engine_->Submit(std::move(requests), &queue).ok());
  std::shared_ptr<BufferPool> pool = engine_->pool();
  engine_.reset();  // waits for the reads
  EXPECT_EQ(delivered.load(), 0);
  EXPECT_EQ(pool->buffers_outstanding(), 0u);
}

// The pread engine's watchdog completes a request stuck past its deadline
// (an open() of a FIFO nobody writes) on its own thread: the handler's
// Submit there must not wait for a lock the watchdog holds.
TEST(ReadEngineHandlerPreadTest, AHandlerMayResubmitWhenTheWatchdogExpiresARead) {
  TempDir dir;
  const std::string fifo = JoinPath(dir.path(), "fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string small = JoinPath(dir.path(), "small");
  WriteBytes(small, "twelve bytes");
  IoOptions options;
  options.backend = IoBackend::kPread;
  // Long enough that a worker is inside open() before the deadline (so the
  // watchdog abandons it rather than expiring a queued request), and that
  // the replacement read meets its own deadline on a loaded machine.
  options.timeout_seconds = 1.0;
  options.queue_depth = 4;
  std::unique_ptr<ReadEngine> engine;
  ASSERT_TRUE(ReadEngine::Create(options, &engine).ok());
  std::atomic<int> timed_out{0}, resubmitted{0}, read_back{0}, replaced{0};
  CompletionQueue* self = nullptr;
  CompletionQueue queue([&](std::vector<ReadCompletion>* completions) {
    for (ReadCompletion& completion : *completions) {
      if (completion.tag == 2) {
        read_back += completion.status.ok() && completion.buffer.size() == 12;
        replaced++;
        continue;
      }
      timed_out += completion.status.error_number() == ETIMEDOUT;
      ReadRequest again;
      again.path = small;
      again.tag = 2;
      (void)engine->Submit({again}, self);
      resubmitted++;
    }
  });
  self = &queue;
  ReadRequest stuck;
  stuck.path = fifo;
  stuck.tag = 1;
  ASSERT_TRUE(engine->Submit({stuck}, &queue).ok());
  // Until the replacement completed and its handler call returned from
  // Submit (either may come first).
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((replaced.load() == 0 || resubmitted.load() == 0) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (resubmitted.load() == 0) {
    // The handler's Submit never returned: a deadlock no cleanup can undo.
    std::fprintf(stderr, "the handler's Submit is blocked: deadlock\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
  EXPECT_EQ(timed_out.load(), 1);
  EXPECT_EQ(read_back.load(), 1);
  EXPECT_EQ(engine->stats().abandoned_threads, 1u);  // the watchdog's path, not the queue's
  // Lets the thread left behind in open() go (O_RDWR never blocks on a FIFO).
  int writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
  queue.Close();
  engine.reset();
  if (writer >= 0) ::close(writer);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReadEngineHandlerTest, AllEngineParams(), EngineParamName);

}  // namespace
}  // namespace gpufeed
