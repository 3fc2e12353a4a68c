#include "io/read_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "util/logging.h"

namespace gpufeed {

const char* IoBackendName(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kIoUring: return "io_uring";
    case IoBackend::kPread: return "pread";
  }
  return "unknown";
}

// ---------------------------------------------------------------- engine

namespace {
std::mutex test_hooks_mutex;
// Set once a test installs hooks: until then (always, outside tests) an
// engine takes no lock for them, so a forked child never waits for a
// parent thread that was making an engine.
std::atomic<bool> test_hooks_installed{false};
ReadEngineTestHooks& CurrentTestHooks() {
  static ReadEngineTestHooks hooks;
  return hooks;
}
ReadEngineTestHooks TestHooksNow() {
  if (!test_hooks_installed.load(std::memory_order_acquire)) return ReadEngineTestHooks();
  std::lock_guard<std::mutex> lock(test_hooks_mutex);
  return CurrentTestHooks();
}
}  // namespace

ScopedReadEngineTestHooks::ScopedReadEngineTestHooks(ReadEngineTestHooks hooks) {
  test_hooks_installed.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(test_hooks_mutex);
  previous_ = std::move(CurrentTestHooks());
  CurrentTestHooks() = std::move(hooks);
}

ScopedReadEngineTestHooks::~ScopedReadEngineTestHooks() {
  std::lock_guard<std::mutex> lock(test_hooks_mutex);
  CurrentTestHooks() = std::move(previous_);
}

ReadEngine::ReadEngine(const IoOptions& options)
    : options_(options),
      hooks_(TestHooksNow()),
      pool_(std::make_shared<BufferPool>(options.inflight_bytes, options.direct_io)),
      waiters_(std::make_shared<BufferWaiters>()) {
  pool_->AddReleaseListener([waiters = waiters_] {
    if (waiters->waiting.load(std::memory_order_acquire) == 0) return;
    std::lock_guard<std::mutex> lock(waiters->mutex);
    if (waiters->wake) waiters->wake();
  });
}

void ReadEngine::SetBufferWake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(waiters_->mutex);
  waiters_->wake = std::move(wake);
}

ReadEngine::OpenFileEntry::~OpenFileEntry() {
  if (fd >= 0) ::close(fd);
  if (buffered_fd >= 0 && buffered_fd != fd) ::close(buffered_fd);
}

ReadEngine::~ReadEngine() {
  // Consumers may still hold read buffers: the pool stays until they let go.
  pool_->KeepAliveWhileOutstanding(pool_);
  std::lock_guard<std::mutex> lock(files_mutex_);
  files_.clear();  // each entry closes its descriptors when its last reader lets go
}

size_t ReadEngine::open_files() const {
  std::lock_guard<std::mutex> lock(files_mutex_);
  size_t count = 0;
  for (const auto& file : files_) count += file != nullptr;
  return count;
}

Status ReadEngine::Create(const IoOptions& options, std::unique_ptr<ReadEngine>* engine) {
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return Status::InvalidArgument("queue_depth must be between 1 and 4096, got " +
                                   std::to_string(options.queue_depth));
  }
  if (options.threads < 0 || options.threads > 1024) {
    return Status::InvalidArgument("threads must be between 0 and 1024");
  }
  if (options.retries < 0 || options.retries > 100) {
    return Status::InvalidArgument("io retries must be between 0 and 100, got " +
                                   std::to_string(options.retries));
  }
  if (options.retry_backoff_ms < 0 || options.retry_backoff_ms > 600000) {
    return Status::InvalidArgument("io retry_backoff_ms must be between 0 and 600000, got " +
                                   std::to_string(options.retry_backoff_ms));
  }
  if (!(options.timeout_seconds >= 0) || !std::isfinite(options.timeout_seconds)) {
    return Status::InvalidArgument("io timeout must be a finite number of seconds >= 0 (0: none), "
                                   "got " + std::to_string(options.timeout_seconds));
  }
  if (options.backend == IoBackend::kPread) return CreatePreadEngine(options, engine);
  Status status = CreateUringEngine(options, engine);
  if (status.ok() || options.backend == IoBackend::kIoUring) return status;
  Status pool = CreatePreadEngine(options, engine);
  if (pool.ok()) {
    (*engine)->fallback_reason_ = status.message();
    Log().info("io_uring unavailable ({}); reading with a pool of pread threads instead",
               status.message());
  }
  return pool;
}

Status ReadEngine::OpenFile(const std::string& path, FileId* file) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, path);
  return AddFile(fd, path, path, file);
}

Status ReadEngine::AdoptFile(int fd, const std::string& path, FileId* file) {
  int duplicate = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (duplicate < 0) return Status::FromErrno(errno, path);
  // O_DIRECT through a new open file description of the same file: the
  // flag must not change the caller's descriptor.
  return AddFile(duplicate, path, "/proc/self/fd/" + std::to_string(duplicate), file,
                 /*registrable=*/false);
}

Status ReadEngine::AddFile(int fd, const std::string& path, const std::string& reopen_path,
                           FileId* file, bool registrable) {
  auto entry = std::make_shared<OpenFileEntry>();
  entry->registrable = registrable;
  entry->path = path;
  entry->buffered_fd = fd;
  entry->fd = fd;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) entry->size = static_cast<uint64_t>(st.st_size);
  entry->on_fuse = FileIsOnFuse(fd);
  if (options_.direct_io) {
    int direct = ::open(reopen_path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (direct >= 0) {
      entry->fd = direct;
      entry->direct = true;
      entry->alignment = DirectIoAlignment(direct, path);
    } else if (errno == EINVAL) {
      // tmpfs and some FUSE filesystems refuse O_DIRECT: read buffered.
      static std::once_flag logged;
      std::call_once(logged, [&] {
        Log().info("{}: O_DIRECT refused by the filesystem (EINVAL); using buffered reads", path);
      });
    } else {
      return Status::FromErrno(errno, path + " (O_DIRECT)");  // the entry closes fd
    }
  }
  std::lock_guard<std::mutex> lock(files_mutex_);
  *file = static_cast<FileId>(files_.size());
  files_.push_back(std::move(entry));
  return Status::OK();
}

Status ReadEngine::CloseFile(FileId file) {
  std::shared_ptr<const OpenFileEntry> entry;
  {
    std::lock_guard<std::mutex> lock(files_mutex_);
    if (file >= files_.size() || !files_[file]) {
      return Status::InvalidArgument("CloseFile: unknown file id " + std::to_string(file));
    }
    entry = std::move(files_[file]);
  }
  // The descriptors close when the last in-flight request lets go of the entry.
  return Status::OK();
}

Status ReadEngine::Submit(std::vector<ReadRequest> requests, CompletionQueue* queue) {
  if (queue == nullptr) return Status::InvalidArgument("Submit: no completion queue");
  std::vector<PendingRequest> pending;
  pending.reserve(requests.size());
  const auto deadline =
      options_.timeout_seconds > 0
          ? std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(options_.timeout_seconds))
          : std::chrono::steady_clock::time_point::max();
  {
    std::lock_guard<std::mutex> lock(files_mutex_);
    for (ReadRequest& request : requests) {
      PendingRequest item;
      if (request.path.empty()) {
        if (request.file >= files_.size() || !files_[request.file]) {
          return Status::InvalidArgument("Submit: unknown or closed file id " +
                                         std::to_string(request.file));
        }
        item.file = files_[request.file];
      }
      item.request = std::move(request);
      item.queue = queue;
      item.deadline = deadline;
      pending.push_back(std::move(item));
    }
  }
  if (!SafeOnFuse()) RouteFuseRequests(&pending);
  if (!pending.empty()) Enqueue(std::move(pending));
  return Status::OK();
}

Status ReadEngine::ReadAll(std::vector<ReadRequest> requests,
                           std::vector<ReadCompletion>* completions) {
  size_t count = requests.size();
  // All buffers are held until the last read completes, so the batch must
  // fit the budget (a single request of any size is fine).
  uint64_t total = 0;
  for (const ReadRequest& request : requests) {
    if (request.path.empty()) total += (request.length + 2 * kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  if (count > 1 && total > pool_->arena_size()) {
    return Status::InvalidArgument(
        "ReadAll: the batch needs " + std::to_string(total) + " bytes of buffers at once, more "
        "than inflight_bytes (" + std::to_string(pool_->arena_size()) +
        "); Submit and consume completions as they arrive instead");
  }
  for (size_t i = 0; i < count; ++i) requests[i].tag = i;
  CompletionQueue queue;
  GPUFEED_RETURN_IF_ERROR(Submit(std::move(requests), &queue));
  std::vector<ReadCompletion> unordered;
  queue.Wait(count, &unordered);
  completions->clear();
  completions->resize(count);
  for (ReadCompletion& completion : unordered) {
    (*completions)[completion.tag] = std::move(completion);
  }
  return Status::OK();
}

ReadEngine::ReadPlan ReadEngine::PlanFor(const PendingRequest& pending) {
  ReadPlan plan;
  const ReadRequest& request = pending.request;
  plan.offset = request.offset;
  plan.length = request.length;
  if (pending.file && pending.file->direct) {
    uint64_t alignment = pending.file->alignment;
    plan.offset = request.offset / alignment * alignment;
    uint64_t end = (request.offset + request.length + alignment - 1) / alignment * alignment;
    plan.length = end - plan.offset;
    plan.slice_offset = request.offset - plan.offset;
  }
  return plan;
}

void ReadEngine::Complete(PendingRequest& pending, Status status, ReadBuffer buffer,
                          size_t slice_offset, size_t bytes_read) {
  ReadCompletion completion;
  completion.tag = pending.request.tag;
  bool clamped = false;
  if (status.ok() && pending.file) {
    // Never bytes past the size the file had when the engine took it: a
    // FUSE direct_io client reports the whole requested length for a read
    // that crossed the end of the file, the tail garbage.
    // A file may also have grown since (a node-cache copy being filled
    // without preallocation): the size is looked at again before cutting.
    const uint64_t start = pending.request.offset - slice_offset;
    uint64_t size = pending.file->size;
    if (bytes_read > (size > start ? size - start : 0)) {
      struct stat st;
      if (::fstat(pending.file->buffered_fd, &st) == 0 && S_ISREG(st.st_mode)) {
        size = std::max<uint64_t>(size, static_cast<uint64_t>(st.st_size));
      }
    }
    const uint64_t within = size > start ? size - start : 0;
    if (bytes_read > within) {
      bytes_read = static_cast<size_t>(within);
      clamped = true;
    }
  }
  if (status.ok()) {
    size_t available = bytes_read > slice_offset ? bytes_read - slice_offset : 0;
    size_t wanted = pending.request.path.empty() ? pending.request.length : bytes_read;
    buffer.set_slice(slice_offset, std::min<size_t>(available, wanted));
    completion.buffer = std::move(buffer);
  } else {
    buffer.reset();
  }
  const bool failed = !status.ok();
  completion.status = std::move(status);
  pending.file.reset();
  if (CompletionBatch* batch = OpenBatch(this)) {
    batch->Add(pending.queue, std::move(completion), failed, clamped);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.requests += 1;
    stats_.bytes += completion.buffer.size();
    if (failed) stats_.errors += 1;
    if (clamped) stats_.clamped_reads += 1;
  }
  pending.queue->Push(std::move(completion));
}

void ReadEngine::SampleInflight(size_t inflight, bool submitted) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  inflight_samples_sum_ += static_cast<double>(inflight);
  inflight_samples_ += 1;
  if (submitted) stats_.submit_calls += 1;
}

void ReadEngine::NoteInflight(int delta) {
  if (CompletionBatch* batch = OpenBatch(this)) {
    batch->inflight_delta_ += delta;
    return;
  }
  AddInflight(delta);
}

void ReadEngine::AddInflight(int64_t delta) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  double since = std::chrono::duration<double>(now - inflight_changed_).count();
  stats_.inflight_seconds += static_cast<double>(inflight_now_) * since;
  if (inflight_now_ > 0) stats_.busy_seconds += since;
  inflight_changed_ = now;
  inflight_now_ += delta;
}

IoStats ReadEngine::stats() const {
  IoStats fuse;
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(fuse_mutex_));
    if (fuse_engine_) fuse = fuse_engine_->stats();
  }
  std::lock_guard<std::mutex> lock(stats_mutex_);
  IoStats out = stats_;
  // The FUSE pool's reads are this engine's reads.
  out.requests += fuse.requests;
  out.bytes += fuse.bytes;
  out.errors += fuse.errors;
  out.retries += fuse.retries;
  out.pread_fallbacks += fuse.pread_fallbacks;
  out.transient_retries += fuse.transient_retries;
  out.timeouts += fuse.timeouts;
  out.abandoned += fuse.abandoned;
  out.abandoned_threads += fuse.abandoned_threads;
  out.clamped_reads += fuse.clamped_reads;
  out.inflight_seconds += fuse.inflight_seconds;
  out.busy_seconds += fuse.busy_seconds;
  // Up to now, not to the last change.
  double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - inflight_changed_).count();
  out.inflight_seconds += static_cast<double>(inflight_now_) * since;
  if (inflight_now_ > 0) out.busy_seconds += since;
  out.mean_inflight = inflight_samples_ ? inflight_samples_sum_ / inflight_samples_ : 0;
  return out;
}

Status ReadEngine::ErrorFor(const PendingRequest& pending, int error_number, const char* what) {
  const ReadRequest& request = pending.request;
  std::string where;
  if (!request.path.empty()) {
    where = request.path + " (" + what + " of the whole file)";
  } else {
    where = pending.file->path + " (" + what + " of " + std::to_string(request.length) +
            " bytes at offset " + std::to_string(request.offset) + ")";
  }
  if (pending.transient_retries > 0) {
    where += " (after " + std::to_string(pending.transient_retries) + " retries)";
  }
  return Status::FromErrno(error_number, where);
}

int ReadEngine::PreadInto(int fd, uint64_t offset, size_t length, char* destination, size_t* done) {
  *done = 0;
  while (*done < length) {
    ssize_t n = ::pread(fd, destination + *done, length - *done, static_cast<off_t>(offset + *done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno;
    }
    if (n == 0) break;
    *done += static_cast<size_t>(n);
  }
  return 0;
}

int ReadEngine::PreadPlannedRaw(const OpenFileEntry& file, const ReadPlan& plan,
                                size_t already_done, char* destination, size_t* done,
                                bool* fell_back) {
  size_t more = 0;
  int error = 0;
  *fell_back = false;
  const bool aligned = (plan.offset + already_done) % file.alignment == 0;
  if (file.direct && aligned) {
    error = PreadInto(file.fd, plan.offset + already_done, plan.length - already_done,
                      destination + already_done, &more);
  }
  if (!file.direct || !aligned || error == EINVAL) {
    // Buffered: the file is not O_DIRECT, or O_DIRECT refused this range.
    *fell_back = file.direct;
    error = PreadInto(file.buffered_fd, plan.offset + already_done, plan.length - already_done,
                      destination + already_done, &more);
  }
  *done = already_done + more;
  return error;
}

Status ReadEngine::PreadPlanned(const PendingRequest& pending, const ReadPlan& plan,
                                size_t already_done, char* destination, size_t* done) {
  bool fell_back = false;
  const int error =
      PreadPlannedRaw(*pending.file, plan, already_done, destination, done, &fell_back);
  if (fell_back) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.pread_fallbacks += 1;
  }
  if (error != 0) return ErrorFor(pending, error, "read");
  return Status::OK();
}
}  // namespace gpufeed
