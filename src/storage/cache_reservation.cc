// CacheIndex's two steps of every fill (cache_index.h): BeginFill reserves
// (the key's fill lock, room under the budget, the temporary file in tmp/)
// and PublishFill installs the finished copy (meta, lease file, rename into
// entries/), each under the index lock; the copy between them runs without
// it (cache_filler.h).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "storage/cache_index.h"
#include "util/logging.h"

namespace gpufeed {

using cache_internal::DataName;
using cache_internal::ErrnoStatus;
using cache_internal::LeaseName;
using cache_internal::MetaName;
using cache_internal::TryFlock;
using cache_internal::WriteSmallAtomicallyAt;

Status CacheIndex::BeginFill(const CacheSource& source, const FillReservation& reservation,
                             PendingFill* fill, FillOutcome* outcome) const {
  fill->key = CacheKeyFor(source);
  fill->temp_name = cache_internal::TempFillName(fill->key);
  fill->temp_path = layout_->TmpPath(fill->temp_name);
  LockFd held;
  GPUFEED_RETURN_IF_ERROR(layout_->LockIndex(&held));
  if (HasEntry(source)) {
    *outcome = FillOutcome::kAlreadyCached;
    return Status::OK();
  }
  GPUFEED_RETURN_IF_ERROR(layout_->OpenFillLock(fill->key, &fill->fill_lock));
  if (!TryFlock(fill->fill_lock.get(), LOCK_EX)) {
    *outcome = FillOutcome::kBusy;  // another process, or another thread of ours
    return Status::OK();
  }
  bool fits = true;
  GPUFEED_RETURN_IF_ERROR(MakeRoomLocked(reservation.bytes, reservation.budget, &fits));
  if (!fits) {
    *outcome = FillOutcome::kNoRoom;
    return Status::OK();
  }
  return CreateTempLocked(reservation, fill, outcome);
}

Status CacheIndex::CreateTempLocked(const FillReservation& reservation, PendingFill* fill,
                                    FillOutcome* outcome) const {
  const char* temp_name = fill->temp_name.c_str();
  ::unlinkat(layout_->tmp_fd(), temp_name, 0);  // this pid's predecessor's leftover
  int fd = ::openat(layout_->tmp_fd(), temp_name,
                    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, layout_->file_mode());
  if (fd < 0) {
    if (errno == ENOSPC || errno == EROFS || errno == EACCES || errno == EDQUOT) {
      Log().warn("cache: cannot create {} ({}); reading from the source", fill->temp_path,
                 std::strerror(errno));
      *outcome = FillOutcome::kUnavailable;
      return Status::OK();
    }
    return ErrnoStatus(errno, fill->temp_path);
  }
  UniqueFd temp(fd);
  // Reserve the space now: a full disk shows here, before any copying,
  // and the usage scan counts the reservation.
  const uint64_t bytes = reservation.bytes;
  int error = reservation.preallocate && bytes > 0
                  ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))
                  : 0;
  if (error != 0 && error != EOPNOTSUPP && error != EINVAL) {
    ::unlinkat(layout_->tmp_fd(), temp_name, 0);
    if (error == ENOSPC || error == EDQUOT) {
      *outcome = FillOutcome::kUnavailable;
      return Status::IOError(fill->temp_path + ": no space left on the cache's filesystem (" +
                             std::to_string(bytes) + " bytes wanted)");
    }
    return ErrnoStatus(error, fill->temp_path);
  }
  fill->temp = std::move(temp);
  return Status::OK();
}

void CacheIndex::AbandonFill(const PendingFill& fill) const {
  ::unlinkat(layout_->tmp_fd(), fill.temp_name.c_str(), 0);
}

Status CacheIndex::PublishFill(const CacheSource& source, const FillPublication& publication,
                               PendingFill* fill, FillOutcome* outcome) const {
  LockFd held;
  Status locked = layout_->LockIndex(&held);
  if (!locked.ok()) {
    AbandonFill(*fill);
    *outcome = FillOutcome::kUnavailable;
    return locked;
  }
  if (publication.check_room) {
    // The size was not reserved (a bundle): the temporary file is already
    // counted by the scan as a fill in progress, so only room for it is
    // made here.
    bool fits = true;
    Status room = MakeRoomLocked(0, publication.budget, &fits);
    if (!room.ok() || !fits) {
      AbandonFill(*fill);
      *outcome = FillOutcome::kNoRoom;
      return room;
    }
  }
  Status installed = InstallLocked(publication.meta_json, *fill);
  if (!installed.ok()) {
    ::unlinkat(layout_->entries_fd(), MetaName(fill->key).c_str(), 0);
    AbandonFill(*fill);
    *outcome = FillOutcome::kUnavailable;
    return installed;
  }
  ::fsync(layout_->entries_fd());
  CacheCounters filled;
  filled.fills = 1;
  filled.fill_bytes = publication.bytes;
  (void)counters_.AddLocked(source.dataset, source.policy, filled);  // statistics only
  *outcome = FillOutcome::kFilled;
  return Status::OK();
}

Status CacheIndex::InstallLocked(const std::string& meta_json, const PendingFill& fill) const {
  const std::string& key = fill.key;
  const int entries = layout_->entries_fd();
  GPUFEED_RETURN_IF_ERROR(WriteSmallAtomicallyAt(entries, MetaName(key),
                                                 layout_->EntriesPath(MetaName(key)), meta_json,
                                                 layout_->file_mode()));
  // Only this process, under the index lock, creates lease files: a name
  // that is not a regular file was planted, and is removed (the name, never
  // what it points to) before an O_EXCL create.
  struct stat existing;
  if (::fstatat(entries, LeaseName(key).c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    ::unlinkat(entries, LeaseName(key).c_str(), 0);
  }
  UniqueFd lease(::openat(entries, LeaseName(key).c_str(),
                          O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          layout_->file_mode()));
  if (!lease.valid()) return ErrnoStatus(errno, layout_->DataPathFor(key) + " lease");
  if (::renameat(layout_->tmp_fd(), fill.temp_name.c_str(), entries, DataName(key).c_str()) != 0) {
    return ErrnoStatus(errno, layout_->DataPathFor(key));
  }
  return Status::OK();
}

}  // namespace gpufeed
