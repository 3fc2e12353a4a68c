// CacheFiller: making a cache entry from its source. A fill reserves through
// the index (CacheIndex::BeginFill: the key's fill lock, room, a temporary
// file), copies without the index lock, checks the copy, and publishes it
// through the index (CacheIndex::PublishFill). Two kinds of source:
//   - a file (Fill): copied front to back in large reads, through a read
//     engine the caller owns, skipping the parts readers already fetched
//     into the copy (FillRequest::claim), hashed as it goes (a region with
//     such parts is hashed from the copy); writes go at most
//     kFillWriteBytesPerSecond, their writeback started as they go so that
//     the fill never holds more than a few regions unwritten; checked against the
//     source's size and mtime before and after and against the manifest's
//     xxh64; the copy carries the source's mtime (0 for a file identified by
//     its checksum).
//   - a bundle of small files (FillBundle): each member read whole through a
//     callback (the source store, so that its counters and throttle apply),
//     written back to back with a trailer (cache_entry.h); the copy carries
//     its newest member's mtime, recorded with its size in the meta.
// Checkpoints are files filled with policy kCheckpoint and no capacity.
//
// Contract: a fill never blocks on another process's fill of the same key
// (kBusy; WaitForFill waits for it), never leaves a partial entry (only
// tmp/ files, removed by the next scan after a crash), and never publishes a
// copy that does not match its source's key.
//
// Thread safety: constant after construction; every method may be called
// from any thread. Two threads filling the same key: one gets kBusy.
#ifndef GPUFEED_STORAGE_CACHE_FILLER_H_
#define GPUFEED_STORAGE_CACHE_FILLER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpufeed/status.h"
#include "io/read_engine.h"
#include "storage/byte_ranges.h"
#include "storage/cache_entry.h"
#include "storage/cache_index.h"

namespace gpufeed {

class StoreFile;

// Called after each chunk of a fill with the bytes copied so far (`total` is
// 0 for a bundle, whose size is not known before); tests use it to kill a
// process in the middle of a fill.
using FillProgress = std::function<void(uint64_t done, uint64_t total)>;
// Reads one member of a bundle whole for its fill (through the source store,
// so that the throttle and the counters apply), with the member's mtime.
// Called from several threads at once.
using ReadMember =
    std::function<Status(const std::string& path, std::string* data, int64_t* mtime_ns)>;
// Called once the copy's temporary file exists, with its descriptor (valid
// during the call only): the node cache serves reads from the copy's
// written part.
using FillStarted = std::function<void(int temp_fd)>;

// Parts of the copy written by others while it is made (NodeCache: readers
// that fetched a range from the source into the copy in progress), so that
// the fill reads only the rest from the source. Called with each region of
// the file before the fill reads it, in order: waits while another fetches
// a part of [begin, end), and returns the parts nobody wrote, in order, now
// claimed by the fill (nobody else fetches them) until its next progress
// call or its end. Parts not returned must be written in the temporary file
// when it returns.
using ClaimRanges = std::function<std::vector<ByteRange>(uint64_t begin, uint64_t end)>;

// How to fill a file's entry.
struct FillRequest {
  // Read the source through this store file (its source view, counted and
  // throttled as the store says); nullptr: open the source's path itself
  // (its bytes counted by CountSourceBytes). Must outlive the call.
  const StoreFile* from = nullptr;
  CacheBudget budget;
  // The engine the copy reads through (CacheFiller::NewReadEngine makes
  // one); nullptr: pread on the calling thread. Must outlive the call.
  ReadEngine* engine = nullptr;
  // May be empty. `done`: every byte below it is written, read whole from an
  // unchanged source; called after each read of the copy, in order.
  FillProgress progress;
  FillStarted started;    // may be empty
  ClaimRanges claim;      // may be empty: the fill reads every byte
  // May be empty (no readers). True while readers use the copy in progress:
  // the fill then claims and reads small regions, so that a reader needing
  // a part the fill claimed waits for one short read (cache_fill.cc).
  std::function<bool()> readers;
};

// How to fill a bundle's entry.
struct BundleFillRequest {
  ReadMember read_member;  // REQUIRES: set
  // The copy's size is known only once its members are read: room for
  // `estimate` bytes is made before, and the fill is dropped (kNoRoom) when
  // the copy then does not fit under the budget's capacity.
  uint64_t estimate = 0;
  CacheBudget budget;
  FillProgress progress;  // may be empty
};

struct FillResult {
  FillOutcome outcome = FillOutcome::kUnavailable;
  uint64_t copied = 0;  // bytes of the source read and copied by this call
};

class CacheFiller {
 public:
  // REQUIRES: `index` not null; shared with the other parts of the
  // directory.
  explicit CacheFiller(std::shared_ptr<const CacheIndex> index) : index_(std::move(index)) {}

  // Copies the file `source` into the cache (see above). A non-OK status
  // comes with result->outcome saying what to do next (kUnavailable: stop
  // using the cache for writes; kSourceChanged: read the source; a
  // Corruption then means a file identified by its checksum is not what its
  // manifest says).
  Status Fill(const CacheSource& source, const FillRequest& request, FillResult* result) const;

  // Copies the bundle `source` (source.members, each read with
  // request.read_member) into the cache. InvalidArgument for a source
  // without members.
  Status FillBundle(const CacheSource& source, const BundleFillRequest& request,
                    FillResult* result) const;

  // Waits until no process fills `source` (a blocking flock on its fill
  // lock).
  void WaitForFill(const CacheSource& source) const;

  // Creates a read engine sized for fills (a few large reads in flight, one
  // thread, small unregistered buffers: a fill is a background task), or
  // returns nullptr after logging why none could be made (fills then copy
  // with pread). The caller owns it: it must outlive every fill given it,
  // and only the process that created it may destroy it (a forked child
  // has the object but not its threads, and must leave it alone).
  static std::unique_ptr<ReadEngine> NewReadEngine();

  // The most bytes per second all file fills of a process write to the
  // cache's disk together: a bounded share of a local NVMe (a few GB/s),
  // more than a node's share of a parallel filesystem, so that fills keep
  // pace with the source without starving the reads of the copies.
  static constexpr uint64_t kFillWriteBytesPerSecond = uint64_t{512} << 20;

 private:
  const std::shared_ptr<const CacheIndex> index_;
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_CACHE_FILLER_H_
