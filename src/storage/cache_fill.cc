// CacheDirectory's fills: copying a source into the cache. Keeps the
// invariants that locks/K.fill is held (LOCK_EX) by the one process filling
// K, so nobody fills a key twice and a tmp/ file without its lock holder is
// a crash leftover; and that entries/K.data appears only complete and
// verified (fsync, xxh64, source unchanged), renamed into place under the
// index lock after entries/K.meta.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "io/read_engine.h"
#include "storage/cache_directory.h"
#include "storage/cache_directory_internal.h"
#include "storage/source_throttle.h"
#include "storage/store.h"
#include "util/checksum.h"
#include "util/logging.h"
#include "util/path.h"

namespace gpufeed {

using cache_internal::BundleNamesHash;
using cache_internal::DataName;
using cache_internal::ErrnoStatus;
using cache_internal::FillLockName;
using cache_internal::Flock;
using cache_internal::LeaseName;
using cache_internal::MetaName;
using cache_internal::MtimeNs;
using cache_internal::TryFlock;

namespace {

// Large sequential reads for the copy, a few in flight: the source is a
// parallel filesystem that serves big requests best.
constexpr size_t kFillChunk = 4 << 20;
constexpr size_t kFillChunksInFlight = 4;

// One read engine for all fills of the process: large sequential reads, a
// few in flight, small buffers (the fill is a background task).
std::shared_ptr<ReadEngine> FillEngine() {
  static std::mutex mutex;
  static std::shared_ptr<ReadEngine>* engine = new std::shared_ptr<ReadEngine>();
  static pid_t created_in = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (created_in != ::getpid()) {
    // A forked child has the parent's engine object but not its threads:
    // leave that one alone (destroying it would wait for threads that do
    // not exist here) and make one of its own.
    if (created_in != 0) engine = new std::shared_ptr<ReadEngine>();
    created_in = ::getpid();
    IoOptions options;
    options.queue_depth = static_cast<int>(kFillChunksInFlight);
    options.threads = 1;
    options.inflight_bytes = kFillChunk * (kFillChunksInFlight + 1);  // + alignment slack
    options.register_buffers = false;
    options.register_files = false;
    std::unique_ptr<ReadEngine> created;
    Status status = ReadEngine::Create(options, &created);
    if (status.ok()) {
      *engine = std::move(created);
    } else {
      Log().info("cache: no read engine for fills ({}); copying with pread", status.ToString());
    }
  }
  return *engine;
}

}  // namespace

Status CacheDirectory::OpenFillLock(const std::string& key, UniqueFd* fd) const {
  std::string name = FillLockName(key);
  int raw = ::openat(locks_fd_.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                     FileMode());
  if (raw < 0) return ErrnoStatus(errno, JoinPath(JoinPath(path_, "locks"), name));
  fd->reset(raw);
  return Status::OK();
}

void CacheDirectory::WaitForFill(const CacheSource& source) {
  UniqueFd lock;
  if (!OpenFillLock(CacheKeyFor(source), &lock).ok()) return;
  // Shared: granted once the filler's exclusive lock is gone.
  if (Flock(lock.get(), LOCK_SH, "fill lock").ok()) ::flock(lock.get(), LOCK_UN);
}

Status CacheDirectory::MakeRoomLocked(uint64_t more, uint64_t capacity, double high_watermark,
                                      double low_watermark, bool* fits) {
  *fits = true;
  if (capacity == 0) return Status::OK();
  std::vector<CacheEntryInfo> entries;
  uint64_t fills = 0, fill_bytes = 0;
  GPUFEED_RETURN_IF_ERROR(ScanLocked(&entries, &fills, &fill_bytes));
  uint64_t used = fill_bytes;
  for (const CacheEntryInfo& entry : entries) used += entry.bytes;
  double high = high_watermark * static_cast<double>(capacity);
  if (static_cast<double>(used + more) > high) {
    // Least recently used first; only training data is evicted for a
    // fill, and never an entry a process is reading.
    std::sort(entries.begin(), entries.end(),
              [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
                return a.last_use_ns < b.last_use_ns;
              });
    double target = low_watermark * static_cast<double>(capacity);
    for (const CacheEntryInfo& entry : entries) {
      if (static_cast<double>(used + more) <= target) break;
      if (entry.source.policy != CachePolicy::kTrain) continue;
      bool removed = false;
      GPUFEED_RETURN_IF_ERROR(RemoveLocked(entry.key, &removed));
      if (!removed) continue;
      used -= entry.bytes;
      CacheCounters evicted;
      evicted.evictions = 1;
      (void)AddCountersLocked(entry.source.dataset, entry.source.policy, evicted);  // statistics only
    }
  }
  *fits = used + more <= capacity;
  return Status::OK();
}

Status CacheDirectory::BeginFill(const CacheSource& source, uint64_t bytes, bool reserve,
                                 uint64_t capacity, double high_watermark, double low_watermark,
                                 FillOutcome* outcome, PendingFill* fill, bool* proceed) {
  *proceed = false;
  fill->key = CacheKeyFor(source);
  fill->temp_name = fill->key + "." + std::to_string(::getpid()) + ".fill";
  fill->temp_path = JoinPath(JoinPath(path_, "tmp"), fill->temp_name);
  UniqueFd held;
  GPUFEED_RETURN_IF_ERROR(LockIndex(&held));
  if (HasEntry(source)) {
    *outcome = FillOutcome::kAlreadyCached;
    return Status::OK();
  }
  GPUFEED_RETURN_IF_ERROR(OpenFillLock(fill->key, &fill->fill_lock));
  if (!TryFlock(fill->fill_lock.get(), LOCK_EX)) {
    *outcome = FillOutcome::kBusy;  // another process, or another thread of ours
    return Status::OK();
  }
  bool fits = true;
  GPUFEED_RETURN_IF_ERROR(MakeRoomLocked(bytes, capacity, high_watermark, low_watermark, &fits));
  if (!fits) {
    *outcome = FillOutcome::kNoRoom;
    return Status::OK();
  }
  const char* temp_name = fill->temp_name.c_str();
  ::unlinkat(tmp_fd_.get(), temp_name, 0);  // this pid's predecessor's leftover
  int fd = ::openat(tmp_fd_.get(), temp_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    FileMode());
  if (fd < 0) {
    if (errno == ENOSPC || errno == EROFS || errno == EACCES || errno == EDQUOT) {
      Log().warn("cache: cannot create {} ({}); reading from the source", fill->temp_path,
                 std::strerror(errno));
      *outcome = FillOutcome::kUnavailable;
      return Status::OK();
    }
    return ErrnoStatus(errno, fill->temp_path);
  }
  fill->temp.reset(fd);
  // Reserve the space now: a full disk shows here, before any copying,
  // and the usage scan counts the reservation.
  int error = reserve && bytes > 0 ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) : 0;
  if (error != 0 && error != EOPNOTSUPP && error != EINVAL) {
    ::unlinkat(tmp_fd_.get(), temp_name, 0);
    if (error == ENOSPC || error == EDQUOT) {
      *outcome = FillOutcome::kUnavailable;
      return Status::IOError(fill->temp_path + ": no space left on the cache's filesystem (" +
                             std::to_string(bytes) + " bytes wanted)");
    }
    return ErrnoStatus(error, fill->temp_path);
  }
  *proceed = true;
  return Status::OK();
}

void CacheDirectory::AbandonFill(const PendingFill& fill) {
  ::unlinkat(tmp_fd_.get(), fill.temp_name.c_str(), 0);
}

Status CacheDirectory::Fill(const CacheSource& source, const StoreFile* from, uint64_t capacity,
                            double high_watermark, double low_watermark, FillOutcome* outcome,
                            uint64_t* copied, const FillProgress& progress,
                            const FillStarted& started) {
  *copied = 0;
  PendingFill fill;
  bool proceed = false;
  GPUFEED_RETURN_IF_ERROR(BeginFill(source, source.size, /*reserve=*/true, capacity,
                                    high_watermark, low_watermark, outcome, &fill, &proceed));
  if (!proceed) return Status::OK();
  const std::string& temp_path = fill.temp_path;
  UniqueFd& temp = fill.temp;

  // The copy, without the index lock: other processes fill other shards.
  auto abandon = [&](Status status, FillOutcome why) {
    AbandonFill(fill);
    *outcome = why;
    return status;
  };
  if (started) started(temp.get());
  UniqueFd input;
  FileView view;
  Status status = from != nullptr ? from->SourceView(&view) : OpenForRead(source.path, &input);
  if (!status.ok()) return abandon(status, FillOutcome::kSourceChanged);
  if (from != nullptr) {
    int duplicate = ::fcntl(view.fd, F_DUPFD_CLOEXEC, 0);
    if (duplicate < 0) return abandon(ErrnoStatus(errno, source.path), FillOutcome::kSourceChanged);
    input.reset(duplicate);
  }
  auto count = [&](uint64_t bytes) {
    if (from != nullptr) {
      from->Count(view, bytes);
    } else {
      CountSourceBytes(bytes);
    }
  };
  struct stat before;
  if (::fstat(input.get(), &before) != 0) {
    return abandon(ErrnoStatus(errno, source.path), FillOutcome::kSourceChanged);
  }
  // A source identified by its checksum has no mtime to compare: its size
  // now, and its checksum once copied, say whether it is what the manifest
  // describes.
  const bool by_checksum = source.identified_by_checksum;
  if (static_cast<uint64_t>(before.st_size) != source.size) {
    return abandon(by_checksum ? Status::Corruption(
                                     source.path + ": holds " + std::to_string(before.st_size) +
                                     " bytes but its manifest says " +
                                     std::to_string(source.size) + "; not cached")
                               : Status::OK(),
                   FillOutcome::kSourceChanged);
  }
  if (!by_checksum && MtimeNs(before) != source.mtime_ns) {
    return abandon(Status::OK(), FillOutcome::kSourceChanged);
  }
  Xxh64 digest;
  std::shared_ptr<ReadEngine> engine = FillEngine();
  FileId file = 0;
  bool use_engine = engine && engine->AdoptFile(input.get(), source.path, &file).ok();
  uint64_t offset = 0;
  std::string scratch;
  while (offset < source.size) {
    std::vector<ReadRequest> requests;
    for (size_t i = 0; i < kFillChunksInFlight && offset < source.size; ++i) {
      ReadRequest request;
      request.file = file;
      request.offset = offset;
      request.length = std::min<uint64_t>(kFillChunk, source.size - offset);
      request.tag = i;
      offset += request.length;
      requests.push_back(request);
    }
    std::vector<std::pair<const char*, size_t>> pieces;
    std::vector<ReadCompletion> completions;
    if (use_engine) {
      status = engine->ReadAll(requests, &completions);
      for (const ReadCompletion& completion : completions) {
        if (status.ok() && !completion.status.ok()) status = completion.status;
        pieces.emplace_back(completion.buffer.data(), completion.buffer.size());
      }
    } else {
      scratch.resize(kFillChunk);
      pieces.clear();
    }
    for (size_t i = 0; status.ok() && i < requests.size(); ++i) {
      const char* data = nullptr;
      size_t size = 0;
      if (use_engine) {
        std::tie(data, size) = pieces[i];
      } else {
        status = PreadFull(input.get(), scratch.data(), requests[i].length, requests[i].offset,
                           source.path, &size);
        data = scratch.data();
      }
      if (!status.ok()) break;
      count(size);
      if (size != requests[i].length) {
        status = Status::Corruption(source.path + ": shorter than its " +
                                    std::to_string(source.size) + " bytes while being cached");
        break;
      }
      digest.Update(data, size);
      ssize_t written;
      do {
        written = ::pwrite(temp.get(), data, size, static_cast<off_t>(requests[i].offset));
      } while (written < 0 && errno == EINTR);
      if (written != static_cast<ssize_t>(size)) {
        int error = written < 0 ? errno : ENOSPC;
        status = ErrnoStatus(error, temp_path);
        if (error == ENOSPC || error == EDQUOT || error == EROFS) {
          if (use_engine) (void)engine->CloseFile(file);
          return abandon(status, FillOutcome::kUnavailable);
        }
        break;
      }
      *copied += size;
    }
    if (!status.ok()) break;
    if (progress) progress(*copied, source.size);
  }
  if (use_engine) (void)engine->CloseFile(file);
  if (!status.ok()) return abandon(status, FillOutcome::kSourceChanged);
  if (::fsync(temp.get()) != 0) {
    int error = errno;
    return abandon(ErrnoStatus(error, temp_path),
                   error == ENOSPC ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  std::string hex = Xxh64Hex(digest.Digest());
  if (!source.xxh64.empty() && hex != source.xxh64) {
    return abandon(Status::Corruption(source.path + ": xxh64 " + hex + " does not match " +
                                      source.xxh64 + " from the manifest; not cached"),
                   FillOutcome::kSourceChanged);
  }
  struct stat after;
  if (::fstat(input.get(), &after) != 0 || (!by_checksum && MtimeNs(after) != source.mtime_ns) ||
      static_cast<uint64_t>(after.st_size) != source.size) {
    return abandon(Status::OK(), FillOutcome::kSourceChanged);  // rewritten while we copied
  }
  // The copy carries the source's mtime (0 for one identified by its
  // checksum): an open compares it, so a copy changed on disk afterwards is
  // noticed.
  struct timespec times[2];
  times[0].tv_nsec = UTIME_NOW;
  times[1].tv_sec = static_cast<time_t>(source.mtime_ns / 1000000000);
  times[1].tv_nsec = static_cast<long>(source.mtime_ns % 1000000000);
  if (::futimens(temp.get(), times) != 0) {
    return abandon(ErrnoStatus(errno, temp_path), FillOutcome::kUnavailable);
  }
  return PublishFill(source, &fill, MetaJson(source, hex), source.size, /*check_room=*/false,
                     capacity, high_watermark, low_watermark, outcome);
}

Status CacheDirectory::PublishFill(const CacheSource& source, PendingFill* fill,
                                   const std::string& meta_json, uint64_t bytes, bool check_room,
                                   uint64_t capacity, double high_watermark, double low_watermark,
                                   FillOutcome* outcome) {
  const std::string& key = fill->key;
  UniqueFd held;
  Status locked = LockIndex(&held);
  if (!locked.ok()) {
    AbandonFill(*fill);
    *outcome = FillOutcome::kUnavailable;
    return locked;
  }
  if (check_room) {
    // The size was not reserved (a bundle): the temporary file is already
    // counted by the scan as a fill in progress, so only room for it is
    // made here.
    bool fits = true;
    Status room = MakeRoomLocked(0, capacity, high_watermark, low_watermark, &fits);
    if (!room.ok() || !fits) {
      AbandonFill(*fill);
      *outcome = FillOutcome::kNoRoom;
      return room;
    }
  }
  Status published = WriteMetaLocked(key, meta_json);
  if (published.ok()) {
    // Only this process, under the index lock, creates lease files: a
    // name that is not a regular file was planted, and is removed (the
    // name, never what it points to) before an O_EXCL create.
    struct stat existing;
    if (::fstatat(entries_fd_.get(), LeaseName(key).c_str(), &existing, AT_SYMLINK_NOFOLLOW) ==
        0) {
      ::unlinkat(entries_fd_.get(), LeaseName(key).c_str(), 0);
    }
    UniqueFd lease(::openat(entries_fd_.get(), LeaseName(key).c_str(),
                            O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, FileMode()));
    if (!lease.valid()) published = ErrnoStatus(errno, DataPathFor(key) + " lease");
  }
  if (published.ok() && ::renameat(tmp_fd_.get(), fill->temp_name.c_str(), entries_fd_.get(),
                                   DataName(key).c_str()) != 0) {
    published = ErrnoStatus(errno, DataPathFor(key));
  }
  if (!published.ok()) {
    ::unlinkat(entries_fd_.get(), MetaName(key).c_str(), 0);
    AbandonFill(*fill);
    *outcome = FillOutcome::kUnavailable;
    return published;
  }
  ::fsync(entries_fd_.get());
  CacheCounters filled;
  filled.fills = 1;
  filled.fill_bytes = bytes;
  (void)AddCountersLocked(source.dataset, source.policy, filled);  // statistics only
  *outcome = FillOutcome::kFilled;
  return Status::OK();
}

}  // namespace gpufeed
