// Store: the seam every format reads through (like leveldb's Env and
// RandomAccessFile under its tables, or DALI's FileStream under its
// loaders). A format opens the files of its dataset through a Store, asks a
// StoreFile for a FileView (a descriptor held open while the view lives) for
// each range it reads, and says in which order it will need the files. It
// never knows whether the bytes come from the source filesystem, from a
// node-cache copy, or from a copy still being filled.
//
// Implementations (one file each):
//   posix_store.cc     the source: a bounded cache of open descriptors (one
//                      open and one fstat per file when first opened, at
//                      Open or, for OpenLazily, at the first read),
//                      counting opens, stats and bytes.
//   throttled_store.cc a decorator that makes its source as slow as a busy
//                      parallel filesystem (benchmarks only).
//   cached_store.cc    the node-local cache (node_cache.h): complete copies
//                      leased per read, reads of a copy being filled served
//                      from its progress, misses filled in the background.
//
// Stores stack: Dataset::Open builds posix -> (throttled) -> (cached).
//
// Thread safety: every method may be called from any thread at once.
#ifndef GPUFEED_STORAGE_STORE_H_
#define GPUFEED_STORAGE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpufeed/cache.h"
#include "gpufeed/dataset.h"
#include "gpufeed/status.h"
#include "storage/source_throttle.h"

namespace gpufeed {

// Counters of a store chain, summed over its layers (public as
// gpufeed::StorageStats, include/gpufeed/dataset.h).
using StoreStats = StorageStats;

// The descriptor one read goes to, open (and a copy leased) while the view
// lives. Views are cheap: a pointer copy on the hot path.
struct FileView {
  int fd = -1;
  // A node-cache copy (complete, or the part of a fill already written).
  bool local = false;
  // Names what is read, for error messages: the source path, or
  // "<source> (node-cache copy <copy>)".
  std::string shown;
  std::shared_ptr<const void> hold;
};

// What a node cache keeps as one entry and fetches ahead as one: a file
// (StoreFile) or a bundle of small files (StoreBundle). ExpectUnits orders
// them.
class StoreUnit {
 public:
  virtual ~StoreUnit();
  StoreUnit(const StoreUnit&) = delete;
  StoreUnit& operator=(const StoreUnit&) = delete;

  // The bytes a copy of it takes: a file's size; for a bundle its copy's
  // size when known, else an estimate (its members are not stat'ed).
  virtual uint64_t bytes() const = 0;

 protected:
  StoreUnit() = default;
};

// What a manifest says about a file (Store::OpenLazily): its bytes are
// these, so nothing needs to be stat'ed to know or identify them.
struct FileIdentity {
  uint64_t size = 0;
  std::string xxh64;          // 16 hex digits
  std::string described_by;   // the manifest's path, for error messages
};

// One file of a dataset, opened through a Store.
class StoreFile : public StoreUnit {
 public:
  ~StoreFile() override;

  // The source path (absolute), its size and mtime when it was opened; for
  // a file opened lazily the size from its FileIdentity and mtime 0.
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  int64_t mtime_ns() const { return mtime_ns_; }
  uint64_t bytes() const override { return size_; }
  // Opened with Store::OpenLazily: (path, size, xxh64) identify its bytes,
  // and the source is opened only when a read first needs it.
  bool lazy() const { return lazy_; }
  // The checksum a manifest gave (Open's or OpenLazily's), or empty.
  const std::string& xxh64() const { return xxh64_; }

  // A view for reading [offset, offset + length). A node cache may block
  // here until a fill in progress has copied that range.
  virtual Status View(uint64_t offset, uint64_t length, FileView* view) const = 0;
  // The source itself, bypassing any copy (the retry after a copy's bytes
  // failed to parse, and the cache's own fills).
  virtual Status SourceView(FileView* view) const = 0;
  // Accounts a read of `bytes` through `view`: the counters, and for the
  // throttled store the simulated filesystem's delay.
  virtual void Count(const FileView& view, uint64_t bytes) const = 0;
  // The bytes of `view` (a copy) did not parse where the source's did: the
  // copy is dropped and made again. Releases the view (its lease must go
  // for the copy to be removed). A no-op for a source view.
  virtual void Invalidate(FileView* view) const;

  // View + pread of [offset, offset + length) + Count, clamped to size():
  // *done < length only at the end of the file or of its known size, and
  // never a byte past size().
  Status ReadAt(uint64_t offset, size_t length, char* destination, size_t* done) const;

 protected:
  StoreFile(std::string path, uint64_t size, int64_t mtime_ns, std::string xxh64 = {},
            bool lazy = false)
      : path_(std::move(path)),
        size_(size),
        mtime_ns_(mtime_ns),
        xxh64_(std::move(xxh64)),
        lazy_(lazy) {}

 private:
  std::string path_;
  uint64_t size_ = 0;
  int64_t mtime_ns_ = 0;
  std::string xxh64_;
  bool lazy_ = false;
};

// Consecutive small files of a dataset (ImageFolder images, kBundleFiles of
// them), read whole one at a time. Without a node cache each member read is
// an open, an fstat and a read of the source file; a node cache keeps the
// bundle as one entry (the members' bytes concatenated, then a trailer of
// their offsets), so that a member read is one pread of a local file.
class StoreBundle : public StoreUnit {
 public:
  ~StoreBundle() override;

  // Unique within the dataset (it names the cache entry).
  const std::string& name() const { return name_; }
  // The members' absolute paths, in the order the bundle keeps them.
  virtual const std::vector<std::string>& members() const = 0;

  // Reads member `index` whole into *data. A node cache serves it from the
  // bundle's copy (waiting for its fill with wait_for_fill) or the source.
  virtual Status ReadMember(size_t index, std::string* data) const = 0;
  // The member's byte range in a complete node-cache copy of the bundle,
  // and a view of that copy (leased while it lives), counted as a cache
  // read; false when there is no complete copy (use ReadMember).
  virtual bool LocateMember(size_t index, FileView* view, uint64_t* offset,
                            uint64_t* length) const;
  // True when a node cache serves this bundle: its members are then read
  // through ReadMember or LocateMember, never by path.
  virtual bool cached() const { return false; }

 protected:
  explicit StoreBundle(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// Files per bundle: a cache entry (its data, meta, lease and fill lock, one
// fsync) per 256 files instead of per file, and few enough that the first
// read of a bundle does not wait long for its fill (256 ImageNet images are
// about 28 MB).
constexpr size_t kBundleFiles = 256;

class Store {
 public:
  virtual ~Store();

  // Opens `path`, a file of the dataset. `xxh64` (16 hex digits from a
  // manifest, or empty) lets a node cache verify its copy. Opening the same
  // path twice gives two handles on one file.
  virtual Status Open(const std::string& path, const std::string& xxh64,
                      std::shared_ptr<const StoreFile>* file) = 0;
  // Opens `path` whose size and checksum a manifest gives, touching nothing:
  // no open, no stat here. The source file is opened (one open + fstat,
  // counted, kept in the descriptor cache) when a read first needs it; a
  // size other than identity.size is then Corruption and a missing file
  // NotFound, both naming the file and the manifest, returned by that read
  // and every later one. A node cache identifies its copy by (path, size,
  // xxh64), so a process that finds a copy (or waits for one another
  // process fills) never opens the source; only the filler does.
  virtual Status OpenLazily(const std::string& path, const FileIdentity& identity,
                            std::shared_ptr<const StoreFile>* file) = 0;
  // Reads a whole small file (an ImageFolder image) without keeping it
  // open: one open, one fstat, the read, counted as source reads. The
  // file's mtime goes to *mtime_ns when that is not null.
  virtual Status ReadWholeFile(const std::string& path, std::string* data,
                               int64_t* mtime_ns) const = 0;
  // A bundle of the dataset's small files (`members`, absolute paths, read
  // in that order): nothing is opened or stat'ed here. The default reads
  // each member with ReadWholeFile; the cached store makes the bundle one
  // cache entry. The bundle must not outlive the store.
  virtual Status OpenBundle(const std::string& name, std::vector<std::string> members,
                            std::shared_ptr<const StoreBundle>* bundle);
  // Every file of the dataset is open: a node cache checks that a pinned
  // dataset fits and starts copying it.
  virtual Status Seal();
  // The order in which the files and bundles will first be read (a
  // loader's epoch for this rank), and the most bytes of them in use at the
  // same time. A node cache fetches the next ones ahead of the reads. A
  // later call replaces the earlier one.
  virtual void ExpectUnits(const std::vector<const StoreUnit*>& first_use_order,
                           uint64_t live_bytes) const;
  // Waits for queued background work (fills).
  virtual void Drain() const;
  virtual StoreStats stats() const = 0;
};

// The source filesystem. At most `max_open_files` descriptors stay open
// (least recently used closed first; a descriptor a view holds closes when
// the view goes); 0 chooses a quarter of RLIMIT_NOFILE, at least 16, at
// most 4096.
std::shared_ptr<Store> NewPosixStore(size_t max_open_files = 0);
// Every read from `source` waits as `throttle` says (benchmarks).
std::shared_ptr<Store> NewThrottledStore(std::shared_ptr<Store> source,
                                         const SourceThrottle& throttle);
// The node-local cache over `source`, for the dataset at `dataset` (an
// absolute path, for statistics). *store is `source` itself when the cache
// cannot be used but the source can (logged once). Errors as NodeCache::Open.
Status NewCachedStore(std::shared_ptr<Store> source, const CacheOptions& options,
                      const std::string& dataset, std::shared_ptr<Store>* store);
// The chain Dataset::Open uses: posix, throttled when a benchmark turned
// the throttle on, cached when options name a cache_dir.
Status NewDatasetStore(const CacheOptions& options, const std::string& dataset,
                       std::shared_ptr<Store>* store);

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_STORE_H_
