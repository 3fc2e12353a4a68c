// CacheDirectory's bundle fills (an ImageFolder's files, 256 to an entry):
// the members read through the source store, written back to back with a
// trailer of their offsets and mtimes, then published as cache_fill.cc
// publishes a file's copy, under the same invariants (fill lock held while
// copying; entries/K.data only complete, after its meta). Also the meta's
// JSON, shared by both kinds of fill.
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

// Members of a bundle read at once during its fill, and how far ahead of
// the copy's writer they may be read (memory: that many small files).
constexpr size_t kBundleReaders = 8;
constexpr size_t kBundleReadsAhead = 32;

constexpr char kBundleMagic[8] = {'G', 'F', 'B', 'U', 'N', 'D', 'L', '1'};

void AppendLittleEndian(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string EncodeBundleTrailer(const std::vector<uint64_t>& offsets,
                                const std::vector<int64_t>& mtimes_ns) {
  std::string out;
  out.reserve(8 * (offsets.size() + mtimes_ns.size() + 2));
  for (uint64_t offset : offsets) AppendLittleEndian(offset, &out);
  for (int64_t mtime : mtimes_ns) AppendLittleEndian(static_cast<uint64_t>(mtime), &out);
  AppendLittleEndian(mtimes_ns.size(), &out);
  out.append(kBundleMagic, sizeof(kBundleMagic));
  return out;
}

std::string CacheDirectory::MetaJson(const CacheSource& source, const std::string& xxh64,
                                     uint64_t bundle_bytes, int64_t bundle_mtime_ns) {
  nlohmann::json json;
  json["source"] = source.path;
  json["size"] = source.bundle() ? bundle_bytes : source.size;
  json["mtime_ns"] = source.bundle() ? bundle_mtime_ns : source.mtime_ns;
  json["xxh64"] = xxh64;
  json["dataset"] = source.dataset;
  json["policy"] = CachePolicyName(source.policy);
  if (!source.group.empty()) json["group"] = source.group;
  if (source.bundle()) {
    // Not the member names: every scan of the index reads every meta (the
    // members' sizes and mtimes are in the copy's trailer).
    json["bundle"] = {{"members", source.members.size()},
                      {"names_xxh64", BundleNamesHash(source)}};
  }
  return json.dump() + "\n";
}

Status CacheDirectory::FillBundle(const CacheSource& source, const ReadMember& read_member,
                                  uint64_t estimate, uint64_t capacity, double high_watermark,
                                  double low_watermark, FillOutcome* outcome, uint64_t* copied,
                                  const FillProgress& progress) {
  *copied = 0;
  if (!source.bundle()) return Status::InvalidArgument(source.path + ": a bundle without members");
  PendingFill fill;
  bool proceed = false;
  GPUFEED_RETURN_IF_ERROR(BeginFill(source, estimate, /*reserve=*/false, capacity,
                                    high_watermark, low_watermark, outcome, &fill, &proceed));
  if (!proceed) return Status::OK();
  auto abandon = [&](Status status, FillOutcome why) {
    AbandonFill(fill);
    *outcome = why;
    return status;
  };
  Xxh64 digest;
  uint64_t offset = 0;
  // Appends to the copy; a full or read-only cache filesystem is kUnavailable.
  auto append = [&](const std::string& bytes, FillOutcome* failed) -> Status {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t written = ::pwrite(fill.temp.get(), bytes.data() + done, bytes.size() - done,
                                 static_cast<off_t>(offset + done));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        int error = written < 0 ? errno : ENOSPC;
        *failed = error == ENOSPC || error == EDQUOT || error == EROFS
                      ? FillOutcome::kUnavailable
                      : FillOutcome::kSourceChanged;
        return ErrnoStatus(error, fill.temp_path);
      }
      done += static_cast<size_t>(written);
    }
    digest.Update(bytes.data(), bytes.size());
    offset += bytes.size();
    return Status::OK();
  };
  std::vector<uint64_t> offsets{0};
  std::vector<int64_t> mtimes;
  offsets.reserve(source.members.size() + 1);
  mtimes.reserve(source.members.size());
  int64_t newest = 0;
  // Members are read by a few threads at once (each read is an open, an
  // fstat and a read of a small remote file: latency, not bandwidth) and
  // written in order, at most kBundleReadsAhead ahead of the writer.
  struct MemberRead {
    std::string data;
    int64_t mtime_ns = 0;
    Status status;
    bool done = false;
  };
  const size_t count = source.members.size();
  std::vector<MemberRead> reads(count);
  std::mutex mutex;
  std::condition_variable changed;
  size_t next = 0, written = 0;
  bool stop = false;
  auto reader = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return stop || next >= count || next < written + kBundleReadsAhead; });
      if (stop || next >= count) return;
      size_t index = next++;
      lock.unlock();
      MemberRead read;
      read.status = read_member(source.members[index], &read.data, &read.mtime_ns);
      read.done = true;
      lock.lock();
      reads[index] = std::move(read);
      changed.notify_all();
    }
  };
  std::vector<std::thread> readers;
  struct JoinReaders {
    std::vector<std::thread>* threads;
    std::mutex* mutex;
    std::condition_variable* changed;
    bool* stop;
    ~JoinReaders() {
      {
        std::lock_guard<std::mutex> lock(*mutex);
        *stop = true;
      }
      changed->notify_all();
      for (std::thread& thread : *threads) thread.join();
    }
  } join_readers{&readers, &mutex, &changed, &stop};
  for (size_t i = 0; i < std::min(kBundleReaders, count); ++i) readers.emplace_back(reader);
  for (size_t index = 0; index < count; ++index) {
    MemberRead read;
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return reads[index].done; });
      read = std::move(reads[index]);
      written = index + 1;
    }
    changed.notify_all();
    if (!read.status.ok()) return abandon(read.status, FillOutcome::kSourceChanged);
    FillOutcome failed = FillOutcome::kSourceChanged;
    Status status = append(read.data, &failed);
    if (!status.ok()) return abandon(status, failed);
    offsets.push_back(offset);
    mtimes.push_back(read.mtime_ns);
    newest = std::max(newest, read.mtime_ns);
    *copied += read.data.size();
    if (progress) progress(*copied, 0);
  }
  FillOutcome failed = FillOutcome::kSourceChanged;
  Status status = append(EncodeBundleTrailer(offsets, mtimes), &failed);
  if (!status.ok()) return abandon(status, failed);
  if (::fsync(fill.temp.get()) != 0) {
    int error = errno;
    return abandon(ErrnoStatus(error, fill.temp_path),
                   error == ENOSPC ? FillOutcome::kUnavailable : FillOutcome::kSourceChanged);
  }
  // The copy carries its newest member's mtime, recorded in the meta with
  // its size: an open compares both, so a copy changed on disk is noticed.
  struct timespec times[2];
  times[0].tv_nsec = UTIME_NOW;
  times[1].tv_sec = static_cast<time_t>(newest / 1000000000);
  times[1].tv_nsec = static_cast<long>(newest % 1000000000);
  if (::futimens(fill.temp.get(), times) != 0) {
    return abandon(ErrnoStatus(errno, fill.temp_path), FillOutcome::kUnavailable);
  }
  std::string hex = Xxh64Hex(digest.Digest());
  GPUFEED_RETURN_IF_ERROR(PublishFill(source, &fill, MetaJson(source, hex, offset, newest), offset,
                                      /*check_room=*/true, capacity, high_watermark,
                                      low_watermark, outcome));
  if (*outcome == FillOutcome::kNoRoom) return Status::OK();
  *outcome = FillOutcome::kFilled;
  return Status::OK();
}

}  // namespace gpufeed
