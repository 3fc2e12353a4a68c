// Node-local cache: whole-shard copies of a slow source (a Lustre or GPFS
// mount) on a node's local NVMe, under a byte budget, shared by every process
// of the node.
//
//   gpufeed::DatasetOptions options;
//   options.cache.cache_dir = "/local/nvme/gpufeed-cache";
//   options.cache.capacity = uint64_t{800} << 30;   // 800 GiB
//   gpufeed::Dataset::Open("/lustre/imagenet-train", options, &dataset);
//
// A shard is read from the source until its local copy is complete, then from
// the copy. Copies are filled in the background (the shard a reader missed,
// and the next `prefetch_shards` shards of the epoch order once the loader
// has said what it will read), written to a temporary file, fsynced, checked
// against the manifest's xxh64 and renamed into place: an entry is either
// absent or complete and verified, also after a kill -9 at any moment.
//
// Which formats use it: every format reads through the storage layer
// (src/storage/store.h), and the cache is a store: RecordIO .rec files and
// the data.mdb of LMDB and Caffe LMDB environments are cached whole (LMDB
// values are read as byte ranges of data.mdb; the B-tree pages are read from
// the source's memory map, a fraction of a percent of the bytes).
// ImageFolder files are cached in bundles: 256 consecutive files (in the
// dataset's sorted order) are one entry, their bytes back to back followed by
// a trailer of their offsets, so a file is one read of a local copy and the
// cache holds one entry (meta, lease, fill lock) per 256 files. A bundle is
// identified by the dataset, its number and its files' names, never by their
// sizes or mtimes: the files are not stat'ed when a dataset opens (that
// metadata load on the parallel filesystem is what the cache removes). So a
// file changed after its bundle was cached is served from the copy until the
// bundle is evicted or `gpufeed cache clear` removes it: like a shard, an
// ImageFolder is assumed not to change while jobs read it. A file added or
// removed changes the names, hence the bundles that hold them from there on.
// A bundle's size is known only once it is copied: room is made for 128 KiB a
// file before the copy, and a copy that then does not fit is dropped (its
// files are read from the source). A file read while its bundle is being
// copied waits for the whole bundle (wait_for_fill) or goes to the source.
//
// When a loader closes, fills it queued finish first, for at most 30 s, so
// that the next process finds the copies complete.
//
// Layout of a cache directory (docs/architecture.md, "Node-local cache"):
//   lock                 flock: held briefly for every change of the index
//   entries/K.data       a complete copy; K = xxh64(source path, size, mtime),
//                        for a file a manifest identifies (a RecordIO .rec or
//                        .idx, docs/formats.md "Lazy opens") xxh64(source
//                        path, size, the manifest's xxh64): no stat of the
//                        source to find it, the copy's mtime 0;
//                        for a bundle xxh64(<dataset>/bundle-N, its files' names)
//   entries/K.meta       JSON: source, size, mtime, xxh64, dataset, policy;
//                        a bundle's also its file count and names' hash
//   entries/K.lease      readers hold flock(LOCK_SH) while they use K.data;
//                        eviction takes LOCK_EX without waiting, so a leased
//                        entry is never evicted; its mtime is the last use
//   tmp/K.PID.fill       a copy being written (leftovers removed on open)
//   locks/K.fill         held by the one process filling K
//   stats.json           hits, misses, fills, evictions per dataset
//
// Security (docs/security.md, "Shared cache directories"): the directory is
// created 0700 (02770 with cache_group); one owned by another user or
// writable by others is refused; every file inside is opened relative to the
// directory's descriptor with O_NOFOLLOW, and created with O_EXCL.
//
// Thread safety: the functions below may be called from any thread and any
// number of processes at once on the same directory.
#ifndef GPUFEED_CACHE_H_
#define GPUFEED_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpufeed/export.h"
#include "gpufeed/status.h"

namespace gpufeed {

enum class CachePolicy : int {
  // LRU by last use among the entries no process is reading.
  kTrain = 0,
  // Validation sets: never evicted to make room for other entries. A pinned
  // dataset larger than the capacity is refused at Open.
  kPinned = 1,
  // Checkpoint files (CachePutCheckpoint): the newest `keep` files of a
  // directory by mtime; never evicted for training data.
  kCheckpoint = 2,
};

// "train", "pinned", "checkpoint".
GPUFEED_EXPORT const char* CachePolicyName(CachePolicy policy);
GPUFEED_EXPORT Status ParseCachePolicy(const std::string& name, CachePolicy* policy);

struct CacheOptions {
  // Empty: no cache, every read goes to the source.
  std::string cache_dir;
  // Bytes the entries may occupy. 0: 90% of what the cache's filesystem
  // can hold for it when the cache is opened (its free space plus what the
  // cache already uses). Bytes on disk exceed it only by the shards being
  // filled at that moment.
  uint64_t capacity = 0;
  CachePolicy policy = CachePolicy::kTrain;
  // Shards fetched ahead of the reader in epoch order. More hides a slower
  // source; each one costs a shard of cache space that is not yet read.
  uint32_t prefetch_shards = 2;
  // A fill starts when usage would exceed capacity * high_watermark and
  // evicts down to capacity * low_watermark: eviction runs in batches, not
  // once per fill.
  double high_watermark = 1.0;
  double low_watermark = 0.9;
  // True (default): a read of a file without a complete copy waits for the
  // copy (queued ahead of prefetches) and is served from its written part
  // as soon as that covers the read, so the source is read once per node
  // (epoch 1 reads about 1.0x the dataset from the source). A file another
  // process copies is waited for likewise. When a copy cannot be made (no
  // room, the source changed, a read-only cache), reads go to the source.
  // False: while a file is being copied it is read from the source (except
  // the part already copied), so no read ever waits for a copy, at the cost
  // of reading up to twice the dataset from the source in epoch 1.
  bool wait_for_fill = true;
  // Local copies one process keeps open (and leased) at once: enough for
  // the shuffle window plus the prefetch window. Leased entries cannot be
  // evicted, so this bounds what one process pins.
  uint32_t max_leased_shards = 8;
  // A group name: the directory is created 02770 and owned by this group,
  // so that the members of a team share one cache. Empty: 0700, this user
  // only.
  std::string cache_group;
};

// Per dataset (the source directory, or for checkpoints their directory).
struct CacheDatasetReport {
  std::string dataset;
  std::string policy;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  // Records read from a local copy (hits) or from the source (misses).
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fills = 0;
  uint64_t fill_bytes = 0;
  uint64_t evictions = 0;
};

struct CacheReport {
  std::string cache_dir;
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t fills_in_progress = 0;
  uint64_t fill_bytes_in_progress = 0;  // space reserved by those fills
  uint64_t leased_entries = 0;          // entries a process is reading now
  std::vector<CacheDatasetReport> datasets;  // sorted by dataset
};

// What is in a cache directory. NotFound when there is none; the security
// checks of Open apply (a foreign or world-writable directory is refused).
GPUFEED_EXPORT Status CacheStat(const std::string& cache_dir, CacheReport* report);

// Removes the entries of `dataset` (an absolute source path as in the
// report; empty: every entry) and any leftovers of interrupted fills.
// Entries a process is reading are kept and counted in *in_use.
GPUFEED_EXPORT Status CacheClear(const std::string& cache_dir, const std::string& dataset,
                                 uint64_t* removed, uint64_t* in_use);

struct CacheWarmSummary {
  uint64_t shards = 0;
  uint64_t filled = 0;          // copied now
  uint64_t already_cached = 0;  // complete before
  uint64_t skipped = 0;         // did not fit (see the log)
  uint64_t bytes_copied = 0;
};

// Copies every shard of the dataset at `source` into options.cache_dir
// (waiting for fills another process runs): the .rec files of RecordIO (and
// their .idx files when the manifest records their checksums, copied with
// their shard and counted as part of it), the data.mdb of LMDB
// environments, the bundles of an ImageFolder (counted in `shards`). `progress(done, total)` gets bytes, from the calling thread; for
// an ImageFolder `total` is an estimate (128 KiB a file, never below `done`),
// since its files are not stat'ed.
GPUFEED_EXPORT Status CacheWarm(const std::string& source, const CacheOptions& options,
                                const std::function<void(uint64_t, uint64_t)>& progress,
                                CacheWarmSummary* summary);

// Copies the checkpoint file at `path` into the cache (verified, atomic) and
// removes the oldest cached checkpoints of the same directory beyond the
// newest `keep` (by the source files' mtime). *cached_path gets the local
// copy. Not counted against a training budget: `keep` bounds it.
GPUFEED_EXPORT Status CachePutCheckpoint(const std::string& path, const std::string& cache_dir,
                                         uint32_t keep, std::string* cached_path,
                                         const std::string& cache_group = "");

// The local copy of the newest cached checkpoint of `directory` whose source
// file is unchanged (same size and mtime); NotFound when there is none.
GPUFEED_EXPORT Status CacheLatestCheckpoint(const std::string& directory,
                                            const std::string& cache_dir,
                                            std::string* cached_path,
                                            std::string* source_path = nullptr);

}  // namespace gpufeed

#endif  // GPUFEED_CACHE_H_
