// The read engine's answers to storage faults (read_engine.h): which
// errors are retried and after how long, the timeout error and what an
// abandoned read leaves behind, and the routing of files on FUSE to a pread
// pool.
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "io/read_engine.h"
#include "util/logging.h"

namespace gpufeed {

namespace {
constexpr decltype(statfs::f_type) kFuseSuperMagic = 0x65735546;  // linux/magic.h FUSE_SUPER_MAGIC
}  // namespace

bool FileIsOnFuse(int fd) {
  struct statfs filesystem;
  return ::fstatfs(fd, &filesystem) == 0 && filesystem.f_type == kFuseSuperMagic;
}

bool IsTransientReadError(int error_number) {
  switch (error_number) {
    case EIO:
    case ETIMEDOUT:
    case EAGAIN:
    case ESTALE:
    case EINTR:
      return true;
    default:
      return false;
  }
}

Status ReadEngine::TimeoutError(const PendingRequest& pending) const {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", options_.timeout_seconds);
  const ReadRequest& request = pending.request;
  std::string where = request.path.empty()
                          ? pending.file->path + " (read of " + std::to_string(request.length) +
                                " bytes at offset " + std::to_string(request.offset) + ")"
                          : request.path + " (read of the whole file)";
  return Status::FromErrno(ETIMEDOUT, where + " not completed within io_timeout=" + limit +
                                          " s (the storage does not answer: a hung mount?); "
                                          "the read is abandoned");
}

bool ReadEngine::RetryAfter(PendingRequest& pending, int error,
                            std::chrono::steady_clock::duration* wait) {
  if (!IsTransientReadError(error) || pending.transient_retries >= options_.retries) return false;
  const int attempt = pending.transient_retries++;
  const double backoff_ms = options_.retry_backoff_ms * std::ldexp(1.0, std::min(attempt, 20));
  *wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(backoff_ms));
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.transient_retries += 1;
  return true;
}

std::chrono::steady_clock::duration ReadEngine::DeadlineTick(const IoOptions& options) {
  if (options.timeout_seconds <= 0) return std::chrono::steady_clock::duration::zero();
  const double tick = std::min(1.0, std::max(0.01, options.timeout_seconds / 8));
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(tick));
}

void ReadEngine::ExpireRequest(PendingRequest& pending, bool still_held) {
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.timeouts += 1;
    if (still_held) stats_.abandoned += 1;
  }
  Complete(pending, TimeoutError(pending), ReadBuffer(), 0, 0);
}

void ReadEngine::AbandonBuffer(ReadBuffer buffer) {
  if (buffer.capacity() == 0) return;
  // Never destroyed: the memory must outlive any late write by the kernel.
  static std::mutex mutex;
  static auto* kept = new std::vector<ReadBuffer>();
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buffer));
}

void ReadEngine::RouteFuseRequests(std::vector<PendingRequest>* pending) {
  std::vector<PendingRequest> fuse;
  size_t kept = 0;
  for (size_t i = 0; i < pending->size(); ++i) {
    PendingRequest& item = (*pending)[i];
    const bool on_fuse = item.file ? item.file->on_fuse : PathOnFuse(item.request.path);
    if (on_fuse) {
      fuse.push_back(std::move(item));
    } else {
      if (kept != i) (*pending)[kept] = std::move(item);
      kept += 1;
    }
  }
  pending->resize(kept);
  if (fuse.empty()) return;
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.fuse_requests += fuse.size();
  }
  static std::once_flag logged;
  std::call_once(logged, [&] {
    Log().info("{}: on FUSE; its reads go to a pool of pread threads (an io_uring read of a "
               "FUSE file can return wrong bytes past a failed part or the end)",
               fuse.front().file ? fuse.front().file->path : fuse.front().request.path);
  });
  HandToPreadPool(std::move(fuse));
}

void ReadEngine::HandToPreadPool(std::vector<PendingRequest> requests) {
  ReadEngine* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(fuse_mutex_);
    if (!fuse_engine_) {
      IoOptions options = options_;
      options.backend = IoBackend::kPread;
      options.threads = 0;
      if (CreatePreadEngine(options, &fuse_engine_).ok()) {
        // The test hook stands for this engine's kernel, not the pool's.
        fuse_engine_->hooks_ = ReadEngineTestHooks();
      } else {
        fuse_engine_.reset();
      }
    }
    pool = fuse_engine_.get();
  }
  if (pool == nullptr) {
    for (PendingRequest& pending : requests) {
      Complete(pending, Status::Internal("cannot start a pread pool"), ReadBuffer(), 0, 0);
    }
    return;
  }
  pool->Enqueue(std::move(requests));
}

bool ReadEngine::PathOnFuse(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  {
    std::lock_guard<std::mutex> lock(fuse_mutex_);
    for (const auto& [known, on_fuse] : fuse_dirs_) {
      if (known == directory) return on_fuse;
    }
  }
  // Outside the lock: a statfs of a hung mount must not block stats().
  struct statfs filesystem;
  const bool on_fuse =
      ::statfs(directory.c_str(), &filesystem) == 0 && filesystem.f_type == kFuseSuperMagic;
  std::lock_guard<std::mutex> lock(fuse_mutex_);
  // A bounded memo: ImageFolder classes are a few thousand directories.
  if (fuse_dirs_.size() >= 4096) fuse_dirs_.erase(fuse_dirs_.begin());
  fuse_dirs_.emplace_back(directory, on_fuse);
  return on_fuse;
}

}  // namespace gpufeed
