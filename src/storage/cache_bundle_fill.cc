// CacheFiller's bundle fills (an ImageFolder's files, 256 to an entry;
// cache_filler.h): the members read a few at a time through the request's
// callback, written in order back to back, then the trailer (cache_entry.h),
// fsync, the newest member's mtime on the copy, and publication through the
// index, which makes room for the copy's real size then.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "storage/cache_filler.h"
#include "storage/fill_steps.h"
#include "util/checksum.h"

namespace gpufeed {

using cache_internal::ErrnoStatus;

namespace {

// Members of a bundle read at once during its fill, and how far ahead of
// the copy's writer they may be read (memory: that many small files).
constexpr size_t kBundleReaders = 8;
constexpr size_t kBundleReadsAhead = 32;

struct MemberRead {
  std::string data;
  int64_t mtime_ns = 0;
  Status status;
  bool done = false;
};

// Reads a bundle's members on a few threads (each read is an open, an fstat
// and a read of a small remote file: latency, not bandwidth), at most
// kBundleReadsAhead members ahead of the one taken last. The destructor
// stops the readers and joins them.
class MemberReadAhead {
 public:
  // REQUIRES: `members` and `read_member` outlive the object.
  MemberReadAhead(const std::vector<std::string>& members, const ReadMember& read_member)
      : members_(members), read_member_(read_member), reads_(members.size()) {
    for (size_t i = 0; i < std::min(kBundleReaders, members.size()); ++i) {
      threads_.emplace_back([this] { ReaderLoop(); });
    }
  }
  ~MemberReadAhead() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  MemberReadAhead(const MemberReadAhead&) = delete;
  MemberReadAhead& operator=(const MemberReadAhead&) = delete;

  // Waits for member `index` and hands it over. REQUIRES: members are taken
  // in order, each once.
  MemberRead Take(size_t index) {
    MemberRead read;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return reads_[index].done; });
      read = std::move(reads_[index]);
      taken_ = index + 1;
    }
    changed_.notify_all();
    return read;
  }

 private:
  void ReaderLoop() {
    const size_t count = members_.size();
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock,
                    [&] { return stop_ || next_ >= count || next_ < taken_ + kBundleReadsAhead; });
      if (stop_ || next_ >= count) return;
      size_t index = next_++;
      lock.unlock();
      MemberRead read;
      read.status = read_member_(members_[index], &read.data, &read.mtime_ns);
      read.done = true;
      lock.lock();
      reads_[index] = std::move(read);
      changed_.notify_all();
    }
  }

  const std::vector<std::string>& members_;
  const ReadMember& read_member_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<MemberRead> reads_;  // guarded by mutex_
  size_t next_ = 0;                // guarded by mutex_: the next member to read
  size_t taken_ = 0;               // guarded by mutex_: members taken by the writer
  bool stop_ = false;              // guarded by mutex_
  std::vector<std::thread> threads_;
};

// One fill of a bundle, after its reservation: every step returns false once
// the fill stopped (its temporary file removed, result->outcome and status()
// saying why).
class BundleFill : public FillSteps {
 public:
  BundleFill(const CacheIndex& index, const CacheSource& source, const BundleFillRequest& request,
             PendingFill* fill, FillResult* result)
      : FillSteps(index, source, fill, result), request_(request) {
    offsets_.reserve(source.members.size() + 1);
    mtimes_.reserve(source.members.size());
  }

  // Reads the members and writes them in order.
  bool CopyMembers();
  // Trailer, fsync, the copy's mtime.
  bool Finish();
  uint64_t bytes() const { return offset_; }
  int64_t newest_mtime_ns() const { return newest_; }
  std::string checksum() { return Xxh64Hex(digest_.Digest()); }

 private:
  // Appends to the copy; a full or read-only cache filesystem is kUnavailable.
  bool Append(const std::string& bytes);

  const BundleFillRequest& request_;
  Xxh64 digest_;
  uint64_t offset_ = 0;               // bytes written
  std::vector<uint64_t> offsets_{0};  // of the members written, and their end
  std::vector<int64_t> mtimes_;       // of the members written
  int64_t newest_ = 0;                // the newest of mtimes_
};

bool BundleFill::Append(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t written = ::pwrite(fill_.temp.get(), bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(offset_ + done));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      int error = written < 0 ? errno : ENOSPC;
      bool full = error == ENOSPC || error == EDQUOT || error == EROFS;
      return Stop(ErrnoStatus(error, fill_.temp_path),
                  full ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
    }
    done += static_cast<size_t>(written);
  }
  digest_.Update(bytes.data(), bytes.size());
  offset_ += bytes.size();
  return true;
}

bool BundleFill::CopyMembers() {
  MemberReadAhead reads(source_.members, request_.read_member);
  for (size_t index = 0; index < source_.members.size(); ++index) {
    MemberRead read = reads.Take(index);
    if (!read.status.ok()) return Stop(read.status, FillOutcome::kSourceChanged);
    if (!Append(read.data)) return false;
    offsets_.push_back(offset_);
    mtimes_.push_back(read.mtime_ns);
    newest_ = std::max(newest_, read.mtime_ns);
    result_.copied += read.data.size();
    if (request_.progress) request_.progress(result_.copied, 0);
  }
  return true;
}

bool BundleFill::Finish() {
  if (!Append(EncodeBundleTrailer(offsets_, mtimes_))) return false;
  if (::fsync(fill_.temp.get()) != 0) {
    int error = errno;
    return Stop(ErrnoStatus(error, fill_.temp_path),
                error == ENOSPC ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  // The copy carries its newest member's mtime, recorded in the meta with
  // its size: an open compares both, so a copy changed on disk is noticed.
  struct timespec times[2];
  times[0].tv_nsec = UTIME_NOW;
  times[1].tv_sec = static_cast<time_t>(newest_ / 1000000000);
  times[1].tv_nsec = static_cast<long>(newest_ % 1000000000);
  if (::futimens(fill_.temp.get(), times) != 0) {
    return Stop(ErrnoStatus(errno, fill_.temp_path), FillOutcome::kUnavailable);
  }
  return true;
}

}  // namespace

Status CacheFiller::FillBundle(const CacheSource& source, const BundleFillRequest& request,
                               FillResult* result) const {
  *result = FillResult();
  if (!source.bundle()) return Status::InvalidArgument(source.path + ": a bundle without members");
  PendingFill fill;
  FillReservation reservation;
  reservation.bytes = request.estimate;
  reservation.preallocate = false;
  reservation.budget = request.budget;
  GPUFEED_RETURN_IF_ERROR(index_->BeginFill(source, reservation, &fill, &result->outcome));
  if (!fill.temp.valid()) return Status::OK();  // nothing to do: the outcome says why
  BundleFill copy(*index_, source, request, &fill, result);
  if (!copy.CopyMembers() || !copy.Finish()) return copy.status();
  FillPublication publication;
  publication.meta_json =
      EntryMetaJson(source, copy.checksum(), copy.bytes(), copy.newest_mtime_ns());
  publication.bytes = copy.bytes();
  publication.check_room = true;
  publication.budget = request.budget;
  GPUFEED_RETURN_IF_ERROR(index_->PublishFill(source, publication, &fill, &result->outcome));
  if (result->outcome == FillOutcome::kNoRoom) return Status::OK();
  result->outcome = FillOutcome::kFilled;
  return Status::OK();
}

}  // namespace gpufeed
