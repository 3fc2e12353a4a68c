// gpufeed_io_bench: the ReadEngine against one file, fio-style.
//
//   gpufeed_io_bench --file F [--backend io_uring|pread] [--direct 0|1]
//                    [--pattern seq|rand] [--bs 1048576] [--qd 32] [--threads N]
//                    [--seconds 3] [--seed 1] [--backlog 0] [--handler 0|1]
//                    [--register 0|1] [--plain 0|1]
//
// Keeps `qd` requests of `bs` bytes outstanding (for pread: `threads`
// workers, one read each), time-based like fio --time_based; random offsets
// are multiples of bs, as fio's randread. `backlog` more requests wait in
// the engine's queue (io_uring), as a loader's read-ahead keeps them: the
// engine still holds at most `qd` in the kernel, and starts a queued one as
// soon as one completes instead of waiting for this thread to submit it.
// `--handler 1`: completions go to a CompletionQueue handler,
// which submits each replacement from the engine's own thread (no hand-off
// to this thread per completion; this thread only waits for the end).
// `--plain 1`: io_uring set up as on a kernel before 5.19 (the engine's
// fallback). `--register 0`: no registered buffers or files. A block device
// is sized by seeking to its end.
// Prints one line:
//   RESULT backend=... mb_per_s=... iops=... mean_inflight=... mean_inflight_time=... requests=...
// mean_inflight is sampled after each submission (the ring is refilled
// then); mean_inflight_time is time-weighted while any read was in flight,
// the loader's io_mean_inflight: compare a loader with the latter.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "io/read_engine.h"
#include "util/file.h"

using namespace gpufeed;

namespace {

void PrintResult(ReadEngine& engine, bool direct, const std::string& pattern, uint64_t block,
                 int queue_depth, int backlog, double elapsed, uint64_t completed, uint64_t bytes) {
  IoStats stats = engine.stats();
  std::printf("RESULT backend=%s direct=%d pattern=%s bs=%llu qd=%d seconds=%.3f requests=%llu "
              "mb_per_s=%.1f iops=%.0f mean_inflight=%.1f mean_inflight_time=%.1f submit_calls=%llu wait_s=%.3f backlog=%d\n",
              engine.backend_name(), direct ? 1 : 0, pattern.c_str(),
              static_cast<unsigned long long>(block), queue_depth, elapsed,
              static_cast<unsigned long long>(completed), bytes / elapsed / 1e6,
              completed / elapsed, stats.mean_inflight,
              stats.busy_seconds > 0 ? stats.inflight_seconds / stats.busy_seconds : 0.0,
              static_cast<unsigned long long>(stats.submit_calls), stats.wait_seconds, backlog);
}

// The handler mode: the engine's thread replaces each completed read
// itself; this thread sleeps until the time is up and the last read is in.
template <typename NextRequest>
int RunWithHandler(ReadEngine* engine, NextRequest& next_request, int outstanding, int backlog,
                   double seconds, bool direct, const std::string& pattern, uint64_t block) {
  std::mutex mutex;  // guards what follows, and next_request's generator
  std::condition_variable finished;
  uint64_t completed = 0, bytes = 0, in_flight = outstanding;
  bool stopping = false, failed = false;
  auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  CompletionQueue queue([&](std::vector<ReadCompletion>* done) {
    std::vector<ReadRequest> more;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (ReadCompletion& completion : *done) {
        if (!completion.status.ok()) {
          if (!failed) std::fprintf(stderr, "%s\n", completion.status.ToString().c_str());
          failed = stopping = true;
        }
        completed += 1;
        bytes += completion.buffer.size();
        in_flight -= 1;
        if (!stopping) more.push_back(next_request(completion.tag));
      }
      if (!stopping && std::chrono::steady_clock::now() >= deadline) stopping = true;
      if (stopping) more.clear();
      in_flight += more.size();
      if (in_flight == 0) finished.notify_all();
    }
    done->clear();  // buffers back to the pool before submitting more
    const size_t count = more.size();
    if (count > 0 && !engine->Submit(std::move(more), &queue).ok()) {
      std::lock_guard<std::mutex> lock(mutex);
      failed = stopping = true;
      in_flight -= count;
      if (in_flight == 0) finished.notify_all();
    }
  });
  std::vector<ReadRequest> initial;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (int i = 0; i < outstanding; ++i) initial.push_back(next_request(i));
  }
  if (!engine->Submit(std::move(initial), &queue).ok()) return 1;
  {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return in_flight == 0; });
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  queue.Close();
  if (failed) return 1;
  PrintResult(*engine, direct, pattern, block, outstanding - backlog, backlog, elapsed, completed,
              bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, backend = "io_uring", pattern = "seq";
  bool direct = false;
  uint64_t block = 1 << 20;
  int queue_depth = 32, threads = 0, backlog = 0;
  double seconds = 3;
  uint32_t seed = 1;
  bool register_buffers = true, use_handler = false, plain = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--file") file = value;
    else if (flag == "--backend") backend = value;
    else if (flag == "--direct") direct = value == "1";
    else if (flag == "--pattern") pattern = value;
    else if (flag == "--bs") block = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--qd") queue_depth = std::atoi(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--backlog") backlog = std::atoi(value.c_str());
    else if (flag == "--seconds") seconds = std::atof(value.c_str());
    else if (flag == "--register") register_buffers = value == "1";
    else if (flag == "--handler") use_handler = value == "1";
    else if (flag == "--plain") plain = value == "1";
    else if (flag == "--seed") seed = static_cast<uint32_t>(std::atoi(value.c_str()));
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (file.empty() || block == 0) {
    std::fprintf(stderr, "usage: %s --file F [--backend io_uring|pread] [--direct 0|1] "
                 "[--pattern seq|rand] [--bs BYTES] [--qd N] [--threads N] [--seconds S] [--backlog N] "
                 "[--handler 0|1] [--register 0|1] [--plain 0|1] [--seed N]\n", argv[0]);
    return 2;
  }
  IoOptions options;
  options.backend = backend == "pread" ? IoBackend::kPread : IoBackend::kIoUring;
  options.direct_io = direct;
  options.queue_depth = queue_depth;
  options.threads = threads;
  options.register_buffers = register_buffers;
  options.register_files = register_buffers;
  options.inflight_bytes = std::max<uint64_t>(64ull << 20, block * (queue_depth + 2) + (1 << 20));
  std::unique_ptr<ReadEngine> engine;
  ReadEngineTestHooks hooks;
  hooks.plain_io_uring_setup = plain;
  std::unique_ptr<ScopedReadEngineTestHooks> scoped;
  if (plain) scoped = std::make_unique<ScopedReadEngineTestHooks>(hooks);
  Status status = ReadEngine::Create(options, &engine);
  FileId id = 0;
  if (status.ok()) status = engine->OpenFile(file, &id);
  uint64_t file_size = 0;
  if (status.ok()) status = FileSizeOf(file, &file_size);
  if (status.ok() && file_size == 0) {  // a block device: its size is where it ends
    int fd = ::open(file.c_str(), O_RDONLY);
    off_t end = fd >= 0 ? ::lseek(fd, 0, SEEK_END) : -1;
    if (fd >= 0) ::close(fd);
    file_size = end > 0 ? static_cast<uint64_t>(end) : 0;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  uint64_t blocks = file_size / block;
  if (blocks == 0) {
    std::fprintf(stderr, "file smaller than one block\n");
    return 1;
  }
  std::mt19937_64 generator(seed);
  uint64_t next_block = 0;
  auto next_request = [&](uint64_t tag) {
    uint64_t index = pattern == "rand" ? generator() % blocks : (next_block++ % blocks);
    return ReadRequest{id, index * block, block, tag};
  };
  // pread: one outstanding read per worker thread.
  int outstanding = options.backend == IoBackend::kPread
                        ? (threads > 0 ? threads : std::min(queue_depth, 64))
                        : queue_depth + backlog;
  if (options.backend == IoBackend::kPread) backlog = 0;
  if (use_handler) {
    return RunWithHandler(engine.get(), next_request, outstanding, backlog, seconds, direct,
                          pattern, block);
  }
  CompletionQueue queue;
  std::vector<ReadRequest> initial;
  for (int i = 0; i < outstanding; ++i) initial.push_back(next_request(i));
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::duration<double>(seconds);
  if (!engine->Submit(std::move(initial), &queue).ok()) return 1;
  uint64_t completed = 0, bytes = 0, in_flight = outstanding;
  std::vector<ReadCompletion> done;
  bool stopping = false;
  while (in_flight > 0) {
    done.clear();
    queue.Wait(1, &done);
    std::vector<ReadRequest> more;
    for (ReadCompletion& completion : done) {
      if (!completion.status.ok()) {
        std::fprintf(stderr, "%s\n", completion.status.ToString().c_str());
        return 1;
      }
      completed += 1;
      bytes += completion.buffer.size();
      in_flight -= 1;
      if (!stopping) more.push_back(next_request(completion.tag));
    }
    done.clear();  // buffers back to the pool before submitting more
    if (!stopping && std::chrono::steady_clock::now() >= deadline) stopping = true;
    if (!stopping && !more.empty()) {
      in_flight += more.size();
      if (!engine->Submit(std::move(more), &queue).ok()) return 1;
    }
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintResult(*engine, direct, pattern, block, outstanding - backlog, backlog, elapsed, completed,
              bytes);
  return 0;
}
