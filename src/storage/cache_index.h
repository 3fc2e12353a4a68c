// CacheIndex: the entries of a cache directory and the space they take:
// lookup, listing, usage, removal and eviction, checkpoint rotation, the
// counters (stats.json), and the two index steps of every fill (reserve room
// and a temporary file; publish the finished copy). The copying itself is
// CacheFiller's (cache_filler.h); opening a copy to read is CacheReader's
// (cache_reader.h).
//
// Invariants, kept across crashes (lock names in cache_layout.h):
//   - entries/K.data exists only complete and verified, and only after
//     entries/K.meta: PublishFill writes the meta, creates the lease file and
//     renames the fsynced copy into place, in that order, under the index
//     lock.
//   - Every create, rename and unlink in entries/ and tmp/ happens under the
//     index lock; a scan removes a data file without a valid meta, a meta
//     without its data, and every tmp/ file whose fill lock nobody holds.
//   - An entry whose lease a process holds (LOCK_SH) is never removed.
//   - Eviction for a fill removes training entries only, least recently used
//     first (the lease file's mtime), from the high watermark down to the low.
//
// Thread safety: constant after construction; every method may be called
// from any thread and from any number of processes on the same directory.
#ifndef GPUFEED_STORAGE_CACHE_INDEX_H_
#define GPUFEED_STORAGE_CACHE_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/status.h"
#include "storage/cache_counters.h"
#include "storage/cache_entry.h"
#include "storage/cache_layout.h"
#include "util/file.h"

namespace gpufeed {

// How much the entries may take: `capacity` bytes (0: no limit); a fill that
// would take usage past capacity * high_watermark evicts down to
// capacity * low_watermark (CacheOptions has the same three fields).
struct CacheBudget {
  uint64_t capacity = 0;
  double high_watermark = 1.0;
  double low_watermark = 0.9;
};

struct CacheEntryInfo {
  std::string key;
  CacheSource source;  // from its meta (no members for a bundle)
  uint64_t bytes = 0;
  int64_t last_use_ns = 0;  // the lease file's mtime
};

enum class FillOutcome {
  kFilled,         // copied and published now
  kAlreadyCached,  // complete before
  kBusy,           // another process (or thread) is filling it
  kNoRoom,         // the budget is held by leased or pinned entries
  kUnavailable,    // the cache cannot be written (ENOSPC, read-only): source only
  kSourceChanged,  // the source no longer matches the key (size/mtime/checksum)
};

// A fill between its reservation (BeginFill) and its publication
// (PublishFill) or abandonment (AbandonFill). Holds the key's fill lock for
// as long as it lives.
struct PendingFill {
  std::string key;
  std::string temp_name;  // in tmp/
  std::string temp_path;  // for messages
  LockFd fill_lock;
  UniqueFd temp;  // valid once the temporary file exists: the copy goes there
};

// What BeginFill reserves.
struct FillReservation {
  uint64_t bytes = 0;  // room made for this many bytes
  // Also allocate them in the temporary file (posix_fallocate), so that a
  // full disk shows before any copying. False when the size is an estimate.
  bool preallocate = true;
  CacheBudget budget;
};

// What PublishFill publishes.
struct FillPublication {
  std::string meta_json;  // EntryMetaJson of the copy
  uint64_t bytes = 0;     // the copy's size, for the counters
  // The size was not reserved before (a bundle): make room for the copy
  // now, and refuse it (kNoRoom) when it does not fit under `budget`.
  bool check_room = false;
  CacheBudget budget;
};

class CacheIndex {
 public:
  // REQUIRES: `layout` not null; shared with the other parts of the
  // directory.
  explicit CacheIndex(std::shared_ptr<const CacheLayout> layout);

  const CacheLayout& layout() const { return *layout_; }
  const CacheCounterFile& counters() const { return counters_; }

  // Removes the leftovers of crashed fills and metadata writes (a scan under
  // the index lock), so that usage counts start right.
  Status RemoveLeftovers() const;

  // Lookup (no lock: one fstatat, or one open and flock).
  bool HasEntry(const CacheSource& source) const;
  // True when a process holds the entry's lease.
  bool IsLeased(const std::string& key) const;
  // Reads and parses entries/K.meta into *recorded.
  Status ReadMeta(const std::string& key, CacheSource* recorded) const;

  // Every complete entry (with its metadata), and bytes in fills now.
  Status List(std::vector<CacheEntryInfo>* entries, uint64_t* fills_in_progress,
              uint64_t* fill_bytes_in_progress) const;
  // Bytes of complete entries plus reserved fills.
  Status Usage(uint64_t* bytes) const;
  // The capacity for CacheOptions::capacity == 0: 90% of free + used.
  Status DefaultCapacity(uint64_t* capacity) const;
  // Removes an entry unless leased; *removed says which.
  Status Remove(const std::string& key, bool* removed) const;
  // Keeps the newest `keep` checkpoint entries of `group` (by the source's
  // mtime) and removes the others, leased ones excepted.
  Status RotateCheckpoints(const std::string& group, uint32_t keep) const;

  // Under the index lock: when there is nothing to do, *outcome says why
  // (kAlreadyCached, kBusy, kNoRoom, kUnavailable) and fill->temp stays
  // invalid; else the key's fill lock is held in *fill, room made for
  // `reservation.bytes` and the temporary file created (fill->temp valid).
  Status BeginFill(const CacheSource& source, const FillReservation& reservation, PendingFill* fill,
                   FillOutcome* outcome) const;
  // Publishes the fsynced temporary file of `fill` as the entry of `source`
  // (meta, lease file, rename, counters) under the index lock; *outcome
  // kFilled, or why not (the temporary file is then removed).
  Status PublishFill(const CacheSource& source, const FillPublication& publication,
                     PendingFill* fill, FillOutcome* outcome) const;
  // Removes the temporary file of a fill that stops before publication.
  void AbandonFill(const PendingFill& fill) const;

 private:
  // REQUIRES: the index lock. Scans tmp/ (live fills) and entries/
  // (complete entries), removing leftovers.
  Status ScanLocked(std::vector<CacheEntryInfo>* entries, uint64_t* fill_count,
                    uint64_t* fill_bytes) const;
  Status ScanFillsLocked(uint64_t* fill_count, uint64_t* fill_bytes) const;
  Status ScanEntriesLocked(std::vector<CacheEntryInfo>* entries) const;
  // REQUIRES: the index lock.
  Status RemoveLocked(const std::string& key, bool* removed) const;
  // REQUIRES: the index lock. Evicts training entries (least recently used
  // first) when `more` bytes beyond what is used would pass the high
  // watermark; *fits says whether they fit under the capacity then.
  Status MakeRoomLocked(uint64_t more, const CacheBudget& budget, bool* fits) const;
  // REQUIRES: the index lock, and `fill`'s fill lock held.
  Status CreateTempLocked(const FillReservation& reservation, PendingFill* fill,
                          FillOutcome* outcome) const;
  // REQUIRES: the index lock. Meta, lease file and rename of a publication.
  Status InstallLocked(const std::string& meta_json, const PendingFill& fill) const;

  const std::shared_ptr<const CacheLayout> layout_;
  const CacheCounterFile counters_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_INDEX_H_
