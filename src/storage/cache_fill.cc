// CacheFiller's file fills (cache_filler.h): the source opened and checked,
// copied front to back in large reads through the caller's read engine (or
// pread), hashed as it goes, fsynced, checked again and published through
// the index. Also WaitForFill and the fill read engine.
//
// Faults: a read that fails, or returns fewer or more bytes than were asked
// (each request is clamped to the source's known size, so "more" is a
// kernel or filesystem fault, such as a FUSE direct_io read returning its
// full length past the end), stops the fill before anything of that read is
// written; so does a source whose size or mtime changes (looked at after
// every 16 MiB and at the end), and nothing of such a fill is published.
// Progress is reported after each read was read whole and written: readers
// of the copy in progress see only bytes that were read successfully (what
// a read of the source would have returned at that time).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "storage/cache_filler.h"
#include "storage/fill_steps.h"
#include "storage/source_throttle.h"
#include "storage/store.h"
#include "util/checksum.h"
#include "util/fork_hooks.h"
#include "util/logging.h"

namespace gpufeed {

using cache_internal::ErrnoStatus;
using cache_internal::Flock;
using cache_internal::MtimeNs;

namespace {

// Large sequential reads for the copy, a few in flight: the source is a
// parallel filesystem that serves big requests best. The unit of claims and
// progress is what one batch of reads covers (a region): a region the fill
// claimed is read by nobody else, so a reader needing a part of it waits
// for the fill. While readers use the file the fill claims small regions
// (kSharedChunk x kSharedChunksInFlight), so that such a wait is one short
// read rather than a batch of large ones. Without readers the regions start
// at the small size and double up to kFillChunk x kFillChunksInFlight (1, 2,
// 4, then 9 MiB up to the first writeback window, then 16 MiB): the readers
// of a prefetched file usually arrive soon after its fill began, and find
// small regions then, while a long fill still reads in large ones. No
// region crosses a writeback window's end.
constexpr size_t kFillChunk = 4 << 20;
constexpr size_t kFillChunksInFlight = 4;
constexpr size_t kSharedChunk = 512 << 10;
constexpr size_t kSharedChunksInFlight = 2;
// Writeback is started per window and a fill holds at most two windows of
// unwritten pages (StartWriteback), whatever its regions.
constexpr uint64_t kWritebackWindow = uint64_t{kFillChunk} * kFillChunksInFlight;

// PaceWrite's state, process-wide. The lock is a leaf, held around fork()
// so that a child's fills find it free; the hooks are registered when the
// library loads (a first fill registering them while another thread forks
// would leave the child waiting for that fill's static initialization).
std::mutex pace_mutex;
std::chrono::steady_clock::time_point pace_next{};  // guarded by pace_mutex
const uint64_t kPaceForkHooks = RegisterForkHooks(
    {[] { pace_mutex.lock(); }, [] { pace_mutex.unlock(); }, [] { pace_mutex.unlock(); }});

// Holds the calling fill so that all fills of the process together write
// at most CacheFiller::kFillWriteBytesPerSecond, with a burst of one region.
void PaceWrite(uint64_t bytes) {
  using Clock = std::chrono::steady_clock;
  constexpr double kRate = static_cast<double>(CacheFiller::kFillWriteBytesPerSecond);
  (void)kPaceForkHooks;
  const auto burst = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(kWritebackWindow / kRate));
  Clock::time_point until;
  {
    std::lock_guard<std::mutex> lock(pace_mutex);
    Clock::time_point now = Clock::now();
    if (pace_next < now - burst) pace_next = now - burst;
    pace_next +=
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bytes / kRate));
    until = pace_next;
  }
  std::this_thread::sleep_until(until);
}

// One fill of a file, after its reservation: every step returns false once
// the fill stopped (its temporary file removed, result->outcome and status()
// saying why).
class FileFill : public FillSteps {
 public:
  FileFill(const CacheIndex& index, const CacheSource& source, const FillRequest& request,
           PendingFill* fill, FillResult* result)
      : FillSteps(index, source, fill, result), request_(request) {}

  // Opens the source and checks it against the key.
  bool OpenInput();
  // Copies the source into the temporary file.
  bool Copy();
  // fsync, the checksum, the source unchanged, the copy's mtime; *hex gets
  // the copy's xxh64.
  bool Finish(std::string* hex);
 private:
  void Count(uint64_t bytes) const;
  // Reads `gaps` from the source and writes them in the copy.
  bool CopyGaps(FileId file, bool use_engine, const std::vector<ByteRange>& gaps, size_t chunk,
                size_t in_flight);
  // Hashes [begin, end) of the copy (a region readers wrote parts of).
  bool HashFromCopy(uint64_t begin, uint64_t end);
  // Starts the writeback of every whole window below `end` (and of the
  // rest at the end of the file); bounds the fill's unwritten pages.
  bool StartWriteback(uint64_t end);
  // The source's size and mtime still those of its key (checked after each
  // batch of reads, before its progress is reported).
  bool SourceUnchanged();
  bool CopyThroughEngine(const std::vector<ReadRequest>& requests);
  bool CopyWithPread(const std::vector<ReadRequest>& requests);
  // Hashes and writes one chunk read for `request`.
  bool Store(const ReadRequest& request, const char* data, size_t size);
  // After Store: readers of the copy in progress may read everything below
  // the end of `request`.
  void Publish(const ReadRequest& request);

  const FillRequest& request_;
  UniqueFd input_;
  FileView view_;  // when reading through request_.from
  Xxh64 digest_;
  std::string scratch_;  // pread's buffer
  bool hash_reads_ = true;  // the region being copied is hashed from its reads
  uint64_t writeback_started_ = 0;  // below it, the copy's writeback was started
  uint64_t checked_ = 0;  // the source was last found unchanged with this much copied
};

void FileFill::Count(uint64_t bytes) const {
  if (request_.from != nullptr) {
    request_.from->Count(view_, bytes);
  } else {
    CountSourceBytes(bytes);
  }
}

bool FileFill::OpenInput() {
  const StoreFile* from = request_.from;
  Status status = from != nullptr ? from->SourceView(&view_) : OpenForRead(source_.path, &input_);
  if (!status.ok()) return Stop(status, FillOutcome::kSourceChanged);
  if (from != nullptr) {
    int duplicate = ::fcntl(view_.fd, F_DUPFD_CLOEXEC, 0);
    if (duplicate < 0) return Stop(ErrnoStatus(errno, source_.path), FillOutcome::kSourceChanged);
    input_.reset(duplicate);
  }
  struct stat before;
  if (::fstat(input_.get(), &before) != 0) {
    return Stop(ErrnoStatus(errno, source_.path), FillOutcome::kSourceChanged);
  }
  // A source identified by its checksum has no mtime to compare: its size
  // now, and its checksum once copied, say whether it is what the manifest
  // describes.
  const bool by_checksum = source_.identified_by_checksum;
  if (static_cast<uint64_t>(before.st_size) != source_.size) {
    return Stop(by_checksum ? Status::Corruption(source_.path + ": holds " +
                                                 std::to_string(before.st_size) +
                                                 " bytes but its manifest says " +
                                                 std::to_string(source_.size) + "; not cached")
                            : Status::OK(),
                FillOutcome::kSourceChanged);
  }
  if (!by_checksum && MtimeNs(before) != source_.mtime_ns) {
    return Stop(Status::OK(), FillOutcome::kSourceChanged);
  }
  return true;
}

bool FileFill::Copy() {
  ReadEngine* engine = request_.engine;
  FileId file = 0;
  bool use_engine = engine != nullptr && engine->AdoptFile(input_.get(), source_.path, &file).ok();
  bool going = true;
  uint64_t offset = 0;
  size_t alone_chunk = kSharedChunk;  // the next region's chunk without readers
  while (going && offset < source_.size) {
    const bool shared = request_.readers && request_.readers();
    const size_t chunk = shared ? kSharedChunk : alone_chunk;
    const size_t in_flight = shared || chunk < kFillChunk ? kSharedChunksInFlight
                                                          : kFillChunksInFlight;
    if (!shared) alone_chunk = std::min(kFillChunk, alone_chunk * 2);
    // A region ends at the next writeback window at the latest (the ramp's
    // 1 + 2 + 4 MiB would otherwise shift every later region off them).
    const uint64_t window_end = (offset / kWritebackWindow + 1) * kWritebackWindow;
    const uint64_t end = std::min<uint64_t>(
        {source_.size, offset + uint64_t{chunk} * in_flight, window_end});
    std::vector<ByteRange> gaps;
    if (request_.claim) {
      gaps = request_.claim(offset, end);
    } else {
      gaps.emplace_back(offset, end);
    }
    // A region the fill reads whole is hashed from its reads; one with parts
    // readers wrote, from the copy once complete.
    const bool whole = gaps.size() == 1 && gaps[0] == ByteRange(offset, end);
    hash_reads_ = whole;
    going = CopyGaps(file, use_engine, gaps, chunk, in_flight);
    if (going && !whole) going = HashFromCopy(offset, end);
    // The source's size and mtime once per writeback window (an fstat can
    // be a round trip to a parallel filesystem's servers) and at its end.
    if (going && (end - checked_ >= kWritebackWindow || end == source_.size)) {
      going = SourceUnchanged();
      checked_ = end;
    }
    if (going && request_.progress) request_.progress(end, source_.size);
    // After the progress: readers of the region do not wait for its writeback.
    going = going && StartWriteback(end);
    offset = end;
  }
  if (use_engine) (void)engine->CloseFile(file);
  return going;
}

bool FileFill::CopyGaps(FileId file, bool use_engine, const std::vector<ByteRange>& gaps,
                        size_t chunk, size_t in_flight) {
  // Requests of at most a chunk, in batches of in_flight (the engine's
  // budget holds kFillChunksInFlight chunks and their alignment slack).
  std::vector<ReadRequest> batch;
  auto flush = [&] {
    bool ok = batch.empty() || (use_engine ? CopyThroughEngine(batch) : CopyWithPread(batch));
    batch.clear();
    return ok;
  };
  for (const ByteRange& gap : gaps) {
    for (uint64_t at = gap.first; at < gap.second;) {
      ReadRequest request;
      request.file = file;
      request.offset = at;
      request.length = std::min<uint64_t>(chunk, gap.second - at);
      // The read's offset in the file: unique within a batch, and what a
      // test's injected fault names.
      request.tag = at;
      at += request.length;
      if (batch.size() == in_flight && !flush()) return false;
      batch.push_back(request);
    }
  }
  return flush();
}

bool FileFill::HashFromCopy(uint64_t begin, uint64_t end) {
  scratch_.resize(kFillChunk);
  for (uint64_t at = begin; at < end;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kFillChunk, end - at)), got = 0;
    Status status = PreadFull(fill_.temp.get(), scratch_.data(), want, at, fill_.temp_path, &got);
    if (!status.ok()) return Stop(status, FillOutcome::kUnavailable);
    if (got != want) {
      return Stop(Status::IOError(fill_.temp_path + ": short read of the copy in progress at " +
                                  std::to_string(at)),
                  FillOutcome::kUnavailable);
    }
    digest_.Update(scratch_.data(), got);
    at += got;
  }
  return true;
}

bool FileFill::StartWriteback(uint64_t end) {
  while (writeback_started_ < end &&
         (end - writeback_started_ >= kWritebackWindow || end == source_.size)) {
    const uint64_t begin = writeback_started_;
    const uint64_t stop = std::min<uint64_t>(end, begin + kWritebackWindow);
    // The window two back is waited for: a fill holds at most two windows
    // of unwritten pages, so its fsync is short and the page cache is not
    // filled with its dirty pages at the readers' expense.
    if (begin >= 2 * kWritebackWindow) {
      (void)::sync_file_range(fill_.temp.get(), static_cast<off_t>(begin - 2 * kWritebackWindow),
                              static_cast<off_t>(kWritebackWindow),
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER);
    }
    // Only a hint to start writing: errors show at fsync.
    (void)::sync_file_range(fill_.temp.get(), static_cast<off_t>(begin),
                            static_cast<off_t>(stop - begin), SYNC_FILE_RANGE_WRITE);
    writeback_started_ = stop;
  }
  return true;
}

bool FileFill::SourceUnchanged() {
  struct stat now;
  if (::fstat(input_.get(), &now) != 0) {
    return Stop(ErrnoStatus(errno, source_.path), FillOutcome::kSourceChanged);
  }
  if (static_cast<uint64_t>(now.st_size) != source_.size ||
      (!source_.identified_by_checksum && MtimeNs(now) != source_.mtime_ns)) {
    return Stop(Status::IOError(source_.path + ": changed while being cached (" +
                                std::to_string(now.st_size) + " bytes, " +
                                std::to_string(source_.size) + " when opened); not cached"),
                FillOutcome::kSourceChanged);
  }
  return true;
}

bool FileFill::CopyThroughEngine(const std::vector<ReadRequest>& requests) {
  // The reads are in flight together; each is stored and published as soon
  // as it and every read before it are done, so readers waiting for the
  // front of the batch do not wait for the rest of it.
  CompletionQueue queue;
  Status status = request_.engine->Submit(requests, &queue);
  if (!status.ok()) return Stop(status, FillOutcome::kSourceChanged);
  std::vector<ReadCompletion> done(requests.size());
  std::vector<bool> arrived(requests.size(), false);
  size_t received = 0, next = 0;
  bool going = true;
  std::vector<ReadCompletion> batch;
  // Every completion is received, also after a failure: the queue must
  // outlive the reads delivered to it.
  while (received < requests.size()) {
    batch.clear();
    queue.Wait(1, &batch);
    for (ReadCompletion& completion : batch) {
      // Tags are the reads' offsets, increasing within a batch.
      auto found = std::lower_bound(requests.begin(), requests.end(), completion.tag,
                                    [](const ReadRequest& r, uint64_t tag) { return r.offset < tag; });
      const size_t i = static_cast<size_t>(found - requests.begin());
      arrived[i] = true;
      done[i] = std::move(completion);
      received += 1;
    }
    while (going && next < requests.size() && arrived[next]) {
      ReadCompletion& completion = done[next];
      if (!completion.status.ok()) {
        going = Stop(completion.status, FillOutcome::kSourceChanged);
      } else {
        going = Store(requests[next], completion.buffer.data(), completion.buffer.size());
        if (going) Publish(requests[next]);
      }
      completion.buffer = ReadBuffer();  // back to the engine's budget
      next += 1;
    }
  }
  return going;
}

bool FileFill::CopyWithPread(const std::vector<ReadRequest>& requests) {
  scratch_.resize(kFillChunk);
  for (const ReadRequest& request : requests) {
    size_t size = 0;
    Status status = PreadFull(input_.get(), scratch_.data(), request.length, request.offset,
                              source_.path, &size);
    if (!status.ok()) return Stop(status, FillOutcome::kSourceChanged);
    if (!Store(request, scratch_.data(), size)) return false;
    Publish(request);
  }
  return true;
}

void FileFill::Publish(const ReadRequest& request) {
  // Every byte below the read's end is final: the reads before it are
  // stored, and readers' parts of the region were written before the claim.
  if (request_.progress) request_.progress(request.offset + request.length, source_.size);
}

bool FileFill::Store(const ReadRequest& request, const char* data, size_t size) {
  Count(std::min<uint64_t>(size, request.length));
  if (size != request.length) {
    // Nothing of this read is written: its bytes are not known to be the
    // source's. An IOError, not a Corruption: a transient fault, so a file
    // identified by its checksum is not condemned by it (node_cache.h).
    return Stop(Status::IOError(source_.path + " (read of " + std::to_string(request.length) +
                                " bytes at offset " + std::to_string(request.offset) +
                                " returned " + std::to_string(size) + "; the file holds " +
                                std::to_string(source_.size) + " bytes): not cached"),
                FillOutcome::kSourceChanged);
  }
  if (hash_reads_) digest_.Update(data, size);
  PaceWrite(size);
  ssize_t written;
  do {
    written = ::pwrite(fill_.temp.get(), data, size, static_cast<off_t>(request.offset));
  } while (written < 0 && errno == EINTR);
  if (written != static_cast<ssize_t>(size)) {
    int error = written < 0 ? errno : ENOSPC;
    bool full = error == ENOSPC || error == EDQUOT || error == EROFS;
    return Stop(ErrnoStatus(error, fill_.temp_path),
                full ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  result_.copied += size;
  return true;
}

bool FileFill::Finish(std::string* hex) {
  if (::fsync(fill_.temp.get()) != 0) {
    int error = errno;
    return Stop(ErrnoStatus(error, fill_.temp_path),
                error == ENOSPC ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  *hex = Xxh64Hex(digest_.Digest());
  if (!source_.xxh64.empty() && *hex != source_.xxh64) {
    return Stop(Status::Corruption(source_.path + ": xxh64 " + *hex + " does not match " +
                                   source_.xxh64 + " from the manifest; not cached"),
                FillOutcome::kSourceChanged);
  }
  const bool by_checksum = source_.identified_by_checksum;
  struct stat after;
  if (::fstat(input_.get(), &after) != 0 || (!by_checksum && MtimeNs(after) != source_.mtime_ns) ||
      static_cast<uint64_t>(after.st_size) != source_.size) {
    return Stop(Status::OK(), FillOutcome::kSourceChanged);  // rewritten while we copied
  }
  // The copy carries the source's mtime (0 for one identified by its
  // checksum): an open compares it, so a copy changed on disk afterwards is
  // noticed.
  struct timespec times[2];
  times[0].tv_nsec = UTIME_NOW;
  times[1].tv_sec = static_cast<time_t>(source_.mtime_ns / 1000000000);
  times[1].tv_nsec = static_cast<long>(source_.mtime_ns % 1000000000);
  if (::futimens(fill_.temp.get(), times) != 0) {
    return Stop(ErrnoStatus(errno, fill_.temp_path), FillOutcome::kUnavailable);
  }
  return true;
}

}  // namespace

std::unique_ptr<ReadEngine> CacheFiller::NewReadEngine() {
  IoOptions options;
  options.queue_depth = static_cast<int>(kFillChunksInFlight);
  options.threads = 1;
  // A batch of reads and their alignment, with room to spare.
  options.inflight_bytes = kFillChunk * (kFillChunksInFlight + 1);
  options.register_buffers = false;
  options.register_files = false;
  std::unique_ptr<ReadEngine> engine;
  Status status = ReadEngine::Create(options, &engine);
  if (!status.ok()) {
    Log().info("cache: no read engine for fills ({}); copying with pread", status.ToString());
    return nullptr;
  }
  return engine;
}

void CacheFiller::WaitForFill(const CacheSource& source) const {
  LockFd lock;
  if (!index_->layout().OpenFillLock(CacheKeyFor(source), &lock).ok()) return;
  // Shared: granted once the filler's exclusive lock is gone.
  if (Flock(lock.get(), LOCK_SH, "fill lock").ok()) ::flock(lock.get(), LOCK_UN);
}

Status CacheFiller::Fill(const CacheSource& source, const FillRequest& request,
                         FillResult* result) const {
  *result = FillResult();
  PendingFill fill;
  FillReservation reservation;
  reservation.bytes = source.size;
  reservation.preallocate = true;
  reservation.budget = request.budget;
  GPUFEED_RETURN_IF_ERROR(index_->BeginFill(source, reservation, &fill, &result->outcome));
  if (!fill.temp.valid()) return Status::OK();  // nothing to do: the outcome says why
  // The copy, without the index lock: other processes fill other shards.
  if (request.started) request.started(fill.temp.get());
  FileFill copy(*index_, source, request, &fill, result);
  std::string hex;
  if (!copy.OpenInput() || !copy.Copy() || !copy.Finish(&hex)) return copy.status();
  FillPublication publication;
  publication.meta_json = EntryMetaJson(source, hex);
  publication.bytes = source.size;
  publication.check_room = false;
  publication.budget = request.budget;
  return index_->PublishFill(source, publication, &fill, &result->outcome);
}

}  // namespace gpufeed
