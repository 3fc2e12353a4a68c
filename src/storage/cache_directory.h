// CacheDirectory: the on-disk protocol of a node-local cache directory (see
// include/gpufeed/cache.h for the layout). Every process that opens the same
// directory cooperates through it; nothing is shared in memory.
//
// Invariants, kept across crashes:
//   - entries/K.data exists only complete and verified (renamed into place
//     after fsync and checksum), and only after entries/K.meta.
//   - The index lock (`lock`) is held for every create, rename and unlink in
//     entries/, for the usage count and for eviction; never during a copy.
//   - locks/K.fill is held (flock LOCK_EX) by the one process filling K; a
//     tmp/ file whose fill lock nobody holds is a leftover of a crash.
//   - A reader holds entries/K.lease with LOCK_SH while it reads K.data;
//     eviction takes LOCK_EX|LOCK_NB and skips the entry when that fails.
//
// Thread safety: a CacheDirectory may be used from many threads; the locks
// above are flock()s on descriptors opened per call, so they also order the
// threads of one process.
#ifndef GPUFEED_CACHE_CACHE_DIRECTORY_H_
#define GPUFEED_CACHE_CACHE_DIRECTORY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/status.h"
#include "util/file.h"

namespace gpufeed {

// What identifies the bytes of a source file: a changed file is a new key.
// A bundle (`members` not empty) is identified by its path and its members'
// names only: its members are not stat'ed (that is the metadata load the
// cache removes), so a member changed after its bundle was cached is served
// from the copy until the entry is evicted or cleared.
//
// A file a manifest identifies (Store::OpenLazily) has the key (path, size,
// xxh64) and no mtime: processes that read the copy never stat the source.
// Its fill checks the source's size before copying and the copy's checksum
// after, so a source changed since the manifest was written is never
// cached (its copy would not match the key); the copy carries mtime 0.
struct CacheSource {
  std::string path;     // absolute; a bundle: <dataset>/<bundle name>
  uint64_t size = 0;    // a bundle: 0 here; its entry's meta records the copy's
  int64_t mtime_ns = 0;
  std::string xxh64;    // from a manifest; empty: recorded at fill
  // Identified by (path, size, xxh64) from a manifest, not by a stat (see
  // above). REQUIRES: xxh64 not empty.
  bool identified_by_checksum = false;
  std::string dataset;  // for statistics and `cache clear --dataset`
  CachePolicy policy = CachePolicy::kTrain;
  std::string group;    // checkpoints: the source directory
  // A bundle: the members' absolute paths, in order. Not kept in the meta
  // (which records their count and a hash of their names): a scan of the
  // index reads every meta.
  std::vector<std::string> members;
  bool bundle() const { return !members.empty(); }
};

// A bundle entry's data: the members' bytes back to back, then the trailer
//   uint64 offsets[count + 1]   (little-endian; offsets[count] = data bytes)
//   int64  mtimes_ns[count]     (each member's mtime when it was copied)
//   uint64 count
//   char   magic[8] = "GFBUNDL1"
// so a member is one pread. Writes the trailer for `offsets` and `mtimes_ns`.
std::string EncodeBundleTrailer(const std::vector<uint64_t>& offsets,
                                const std::vector<int64_t>& mtimes_ns);
// Reads and checks the trailer of a bundle copy of `file_size` bytes:
// Corruption (naming `shown`) unless it holds `count` members whose offsets
// rise from 0 to where the trailer starts.
Status ReadBundleTrailer(int fd, uint64_t file_size, size_t count, const std::string& shown,
                         std::vector<uint64_t>* offsets);

// Stats the source file at `path` into *source (size, mtime).
Status StatCacheSource(const std::string& path, CacheSource* source);
// "<16 hex digits>-<file name>": stable for (path, size, mtime, xxh64), or
// (path, size, xxh64) for a source identified by its checksum.
std::string CacheKeyFor(const CacheSource& source);

struct CacheEntryInfo {
  std::string key;
  CacheSource source;
  uint64_t bytes = 0;
  int64_t last_use_ns = 0;  // the lease file's mtime
};

// A read-only handle on a complete entry, holding its lease.
struct CacheLease {
  UniqueFd data;
  UniqueFd lease;
  std::string path;  // of the data file, for logs and error messages
  // A bundle: where its members lie in `data` (count + 1 offsets).
  std::vector<uint64_t> member_offsets;
};

// Counter deltas merged into stats.json.
struct CacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fills = 0;
  uint64_t fill_bytes = 0;
  uint64_t evictions = 0;
  bool empty() const { return hits == 0 && misses == 0 && fills == 0 && evictions == 0; }
};

enum class FillOutcome {
  kFilled,         // copied and published now
  kAlreadyCached,  // complete before
  kBusy,           // another process (or thread) is filling it
  kNoRoom,         // the budget is held by leased or pinned entries
  kUnavailable,    // the cache cannot be written (ENOSPC, read-only): source only
  kSourceChanged,  // the source no longer matches the key (size/mtime/checksum)
};

// Called after each chunk of a fill with the bytes copied so far; tests use
// it to kill a process in the middle of a fill.
using FillProgress = std::function<void(uint64_t done, uint64_t total)>;
// Reads one member of a bundle whole for its fill (through the source store,
// so that the throttle and the counters apply), with the member's mtime.
using ReadMember = std::function<Status(const std::string& path, std::string* data,
                                        int64_t* mtime_ns)>;
// Called once the copy's temporary file exists, with its descriptor (valid
// during the call): the node cache serves reads from the copy's written part.
using FillStarted = std::function<void(int temp_fd)>;

class StoreFile;

class CacheDirectory {
 public:
  // Opens (creating it when `create`) the cache directory and removes the
  // leftovers of crashed fills. PermissionDenied for a directory owned by
  // another user, writable by others, or a symlink; IOError/ReadOnly
  // conditions come back as the errno's Status (callers degrade to the
  // source on those).
  // *unsafe (when not null) tells a refusal by those checks apart from an
  // OS error.
  static Status Open(const std::string& path, const std::string& group, bool create,
                     std::shared_ptr<CacheDirectory>* directory, bool* unsafe = nullptr);

  const std::string& path() const { return path_; }

  // Copies `source` into the cache under `capacity` (0: no limit) with the
  // given watermarks, front to back. Never blocks on another process's fill
  // (kBusy). `from`: read the source through this store file (its source
  // view, counted and throttled as the store says); nullptr opens
  // source.path itself.
  Status Fill(const CacheSource& source, const StoreFile* from, uint64_t capacity,
              double high_watermark, double low_watermark, FillOutcome* outcome,
              uint64_t* copied, const FillProgress& progress = nullptr,
              const FillStarted& started = nullptr);

  // Copies the bundle `source` (source.members, each read with
  // `read_member`) into the cache: members then trailer, fsync, published
  // as Fill does; the meta records the copy's size and mtime (the newest
  // member's), the member count and a hash of their names. The size is
  // known only once the members are read: room for `estimate` bytes is
  // made before, and the fill is abandoned (kNoRoom) when the copy then
  // does not fit under `capacity`. `progress` gets bytes copied (total 0).
  Status FillBundle(const CacheSource& source, const ReadMember& read_member, uint64_t estimate,
                    uint64_t capacity, double high_watermark, double low_watermark,
                    FillOutcome* outcome, uint64_t* copied,
                    const FillProgress& progress = nullptr);

  // Waits until no process fills `source` (blocking flock on its fill lock).
  void WaitForFill(const CacheSource& source);

  // Opens the complete entry of `source` with a lease. NotFound when there is
  // none (or it is being evicted); a copy whose size or mtime no longer
  // matches (changed on disk) is removed and reported as NotFound. For a
  // bundle they are compared with what its meta recorded, and its trailer
  // is read into lease->member_offsets (a bad trailer: removed, NotFound).
  Status OpenEntry(const CacheSource& source, CacheLease* lease);

  bool HasEntry(const CacheSource& source) const;
  std::string DataPathFor(const std::string& key) const;

  // Every complete entry (with its metadata), and bytes in fills now.
  Status List(std::vector<CacheEntryInfo>* entries, uint64_t* fills_in_progress,
              uint64_t* fill_bytes_in_progress);
  // True when a process holds the entry's lease.
  bool IsLeased(const std::string& key) const;
  // Removes an entry unless leased; *removed says which.
  Status Remove(const std::string& key, bool* removed);

  // Bytes of complete entries plus reserved fills (under the index lock).
  Status Usage(uint64_t* bytes);
  // The capacity for CacheOptions::capacity == 0: 90% of free + used.
  Status DefaultCapacity(uint64_t* capacity);

  Status AddCounters(const std::string& dataset, CachePolicy policy, const CacheCounters& delta);
  // stats.json as parsed JSON text ("{}" when absent).
  Status ReadCountersText(std::string* text);

  // Lists checkpoint entries of `group` newest first and removes all but
  // `keep` of them (leased ones stay).
  Status RotateCheckpoints(const std::string& group, uint32_t keep);

 private:
  CacheDirectory() = default;

  // A fill between its reservation and its publication.
  struct PendingFill {
    std::string key;
    std::string temp_name;
    std::string temp_path;
    UniqueFd fill_lock;
    UniqueFd temp;
  };
  // Under the index lock: *proceed false with *outcome set when there is
  // nothing to do (cached, busy, no room, unwritable); else the fill lock
  // is held, room made for `bytes` (reserved with fallocate when
  // `reserve`) and the temporary file created.
  Status BeginFill(const CacheSource& source, uint64_t bytes, bool reserve, uint64_t capacity,
                   double high_watermark, double low_watermark, FillOutcome* outcome,
                   PendingFill* fill, bool* proceed);
  // REQUIRES: the index lock. Evicts training entries (least recently used
  // first) when `more` bytes beyond what is used would pass the high
  // watermark; *fits says whether they fit under `capacity` then.
  Status MakeRoomLocked(uint64_t more, uint64_t capacity, double high_watermark,
                        double low_watermark, bool* fits);
  // Publishes the fsynced temporary file of `fill` as the entry of
  // `source`: meta, lease, rename, under the index lock. `check_room`: the
  // copy's size was not reserved before (a bundle); refuse it (kNoRoom)
  // when it does not fit.
  Status PublishFill(const CacheSource& source, PendingFill* fill, const std::string& meta_json,
                     uint64_t bytes, bool check_room, uint64_t capacity, double high_watermark,
                     double low_watermark, FillOutcome* outcome);
  void AbandonFill(const PendingFill& fill);

  // The index lock, held while the returned descriptor lives.
  Status LockIndex(UniqueFd* held);
  // REQUIRES: the index lock. Scans entries/ and tmp/, removing leftovers.
  Status ScanLocked(std::vector<CacheEntryInfo>* entries, uint64_t* fill_count,
                    uint64_t* fill_bytes);
  Status RemoveLocked(const std::string& key, bool* removed);
  // The meta's JSON text for `source` with the copy's checksum; a bundle
  // also records the copy's size and mtime and its member count and names'
  // hash.
  static std::string MetaJson(const CacheSource& source, const std::string& xxh64,
                              uint64_t bundle_bytes = 0, int64_t bundle_mtime_ns = 0);
  Status WriteMetaLocked(const std::string& key, const std::string& json);
  Status AddCountersLocked(const std::string& dataset, CachePolicy policy,
                           const CacheCounters& delta);
  Status OpenFillLock(const std::string& key, UniqueFd* fd) const;
  int FileMode() const { return group_writable_ ? 0660 : 0600; }

  std::string path_;
  UniqueFd dir_fd_;
  UniqueFd entries_fd_;
  UniqueFd tmp_fd_;
  UniqueFd locks_fd_;
  bool group_writable_ = false;
};

}  // namespace gpufeed

#endif  // GPUFEED_CACHE_CACHE_DIRECTORY_H_
