// The source filesystem: files opened once (one open, one fstat), their
// descriptors kept in a bounded LRU so that a dataset of 100,000 shards
// reads under `ulimit -n 1024`. A descriptor evicted while a view holds it
// closes when the last view goes.
//
// Fork safety: a Dataset is handed to forked children (torch DataLoader
// workers) while threads of the parent may be reading through its store. A
// child must not inherit the store's mutex held, its LRU half-changed, or a
// file marked as being opened by a thread that does not exist there: every
// live store's mutex is taken around fork() (util/fork_hooks.h), and the child
// forgets the opens in progress (it opens those files itself) and gets a
// fresh condition variable.
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <list>
#include <mutex>
#include <vector>

#include "storage/store.h"
#include "util/file.h"
#include "util/fork_hooks.h"

namespace gpufeed {

StoreUnit::~StoreUnit() = default;
StoreFile::~StoreFile() = default;
StoreBundle::~StoreBundle() = default;
bool StoreBundle::LocateMember(size_t, FileView*, uint64_t*, uint64_t*) const { return false; }
void StoreFile::Invalidate(FileView* view) const { view->hold.reset(); }

Status StoreFile::ReadAt(uint64_t offset, size_t length, char* destination, size_t* done) const {
  *done = 0;
  // Never past the size the file had when opened (or its manifest's): bytes
  // a grown file gained since, or a filesystem's garbage past the end, are
  // not the dataset's.
  length = offset >= size() ? 0 : static_cast<size_t>(std::min<uint64_t>(length, size() - offset));
  if (length == 0) return Status::OK();
  FileView view;
  GPUFEED_RETURN_IF_ERROR(View(offset, length, &view));
  GPUFEED_RETURN_IF_ERROR(PreadFull(view.fd, destination, length, offset, view.shown, done));
  *done = std::min(*done, length);
  Count(view, *done);
  return Status::OK();
}

Store::~Store() = default;
Status Store::Seal() { return Status::OK(); }
void Store::ExpectUnits(const std::vector<const StoreUnit*>&, uint64_t) const {}
void Store::Drain() const {}

namespace {

// A bundle without a cache: each member is a small file read whole.
class SourceBundle final : public StoreBundle {
 public:
  SourceBundle(const Store* store, std::string name, std::vector<std::string> members)
      : StoreBundle(std::move(name)), store_(store), members_(std::move(members)) {}

  const std::vector<std::string>& members() const override { return members_; }
  uint64_t bytes() const override { return 0; }  // never copied: no working set
  Status ReadMember(size_t index, std::string* data) const override {
    return store_->ReadWholeFile(members_[index], data, nullptr);
  }

 private:
  const Store* store_;  // outlives the bundle (the dataset holds both)
  std::vector<std::string> members_;
};

}  // namespace

Status Store::OpenBundle(const std::string& name, std::vector<std::string> members,
                         std::shared_ptr<const StoreBundle>* bundle) {
  *bundle = std::make_shared<SourceBundle>(this, name, std::move(members));
  return Status::OK();
}

namespace {

size_t DefaultMaxOpenFiles() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur) / 4, 16, 4096);
}

class PosixStore;

class PosixFile final : public StoreFile {
 public:
  PosixFile(std::shared_ptr<const PosixStore> store, std::string path, uint64_t size,
            int64_t mtime_ns, std::string xxh64)
      : StoreFile(std::move(path), size, mtime_ns, std::move(xxh64)), store_(std::move(store)) {}
  // Opened lazily (Store::OpenLazily): no descriptor until the first read.
  PosixFile(std::shared_ptr<const PosixStore> store, std::string path,
            const FileIdentity& identity)
      : StoreFile(std::move(path), identity.size, 0, identity.xxh64, /*lazy=*/true),
        store_(std::move(store)),
        described_by_(identity.described_by) {}
  ~PosixFile() override;

  // The first open of a lazy file found it missing or of another size than
  // its manifest says: the error, naming both.
  Status Explain(const Status& status, uint64_t actual_size) const;

  Status View(uint64_t offset, uint64_t length, FileView* view) const override {
    return SourceView(view);
  }
  Status SourceView(FileView* view) const override;
  void Count(const FileView& view, uint64_t bytes) const override;

 private:
  friend class PosixStore;
  std::shared_ptr<const PosixStore> store_;  // the file keeps the store alive
  // Guarded by the store's mutex.
  mutable std::shared_ptr<const UniqueFd> fd_;
  mutable std::list<const PosixFile*>::iterator lru_;
  mutable bool in_lru_ = false;
  // A lazy file that is missing or of the wrong size stays so for this
  // process: later reads get the error without another open.
  mutable Status failed_;
  std::string described_by_;
};

class PosixStore final : public Store, public std::enable_shared_from_this<PosixStore> {
 public:
  explicit PosixStore(size_t max_open_files)
      : max_open_(max_open_files == 0 ? DefaultMaxOpenFiles() : max_open_files) {
    fork_hooks_ = RegisterForkHooks({[this] { PrepareFork(); }, [this] { AfterForkInParent(); },
                                     [this] { AfterForkInChild(); }});
  }
  ~PosixStore() override { UnregisterForkHooks(fork_hooks_); }

  Status Open(const std::string& path, const std::string& xxh64,
              std::shared_ptr<const StoreFile>* file) override {
    UniqueFd fd;
    uint64_t size = 0;
    int64_t mtime = 0;
    Status status = OpenForRead(path, &fd, &size, &mtime);
    opens_.fetch_add(1, std::memory_order_relaxed);
    stats_.fetch_add(1, std::memory_order_relaxed);  // OpenForRead's fstat
    if (!status.ok()) return status;
    auto opened = std::make_shared<PosixFile>(shared_from_this(), path, size, mtime, xxh64);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      opened->fd_ = std::make_shared<const UniqueFd>(std::move(fd));
      InsertLocked(opened.get());
    }
    *file = std::move(opened);
    return Status::OK();
  }

  Status OpenLazily(const std::string& path, const FileIdentity& identity,
                    std::shared_ptr<const StoreFile>* file) override {
    *file = std::make_shared<PosixFile>(shared_from_this(), path, identity);
    return Status::OK();
  }

  Status ReadWholeFile(const std::string& path, std::string* data,
                       int64_t* mtime_ns) const override {
    opens_.fetch_add(1, std::memory_order_relaxed);
    stats_.fetch_add(1, std::memory_order_relaxed);
    UniqueFd fd;
    uint64_t size = 0;
    int64_t mtime = 0;
    GPUFEED_RETURN_IF_ERROR(OpenForRead(path, &fd, &size, &mtime));
    try {
      data->resize(size);
    } catch (const std::bad_alloc&) {
      return Status::IOError(path + ": out of memory for " + std::to_string(size) + " bytes");
    }
    size_t got = 0;
    GPUFEED_RETURN_IF_ERROR(PreadFull(fd.get(), data->data(), size, 0, path, &got));
    if (got != size) {
      // Shrunk between the fstat and the read: half a file is not a sample
      // (nor a bundle member a node-cache copy may keep).
      return Status::IOError(path + ": the read ended at byte offset " + std::to_string(got) +
                             " of the " + std::to_string(size) +
                             " bytes the file held when opened (changed while read)");
    }
    if (mtime_ns != nullptr) *mtime_ns = mtime;
    CountRead(data->size());
    return Status::OK();
  }

  StoreStats stats() const override {
    StoreStats out;
    out.source_opens = opens_.load(std::memory_order_relaxed);
    out.source_stats = stats_.load(std::memory_order_relaxed);
    out.source_reads = reads_.load(std::memory_order_relaxed);
    out.source_bytes = bytes_.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    out.open_files = lru_.size();
    return out;
  }

  // The file's descriptor, opened at the first read of a lazy file and
  // reopened when it was evicted.
  // One open at a time per file: a thread that finds another opening it
  // waits for that open instead of opening the file a second time (a
  // node-cache fill and a reader of the copy in progress often want the
  // same lazy file at once; the source sees one open per file and node).
  Status Acquire(const PosixFile& file, std::shared_ptr<const UniqueFd>* fd) const {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      opened_.wait(lock, [&] { return !OpeningLocked(file); });
      if (file.fd_) {
        Touch(file);
        *fd = file.fd_;
        return Status::OK();
      }
      if (!file.failed_.ok()) return file.failed_;
      files_opening_.push_back(&file);
    }
    UniqueFd reopened;
    uint64_t size = 0;
    int64_t mtime = 0;
    Status status = OpenForRead(file.path(), &reopened, &size, &mtime);
    opens_.fetch_add(1, std::memory_order_relaxed);
    stats_.fetch_add(1, std::memory_order_relaxed);  // OpenForRead refuses what is not a file
    if (file.lazy() && (!status.ok() || size != file.size())) {
      status = file.Explain(status, size);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    files_opening_.erase(std::find(files_opening_.begin(), files_opening_.end(), &file));
    opened_.notify_all();
    if (!status.ok()) {
      if (file.lazy() && (status.IsNotFound() || status.IsCorruption())) file.failed_ = status;
      return status;
    }
    file.fd_ = std::make_shared<const UniqueFd>(std::move(reopened));
    InsertLocked(&file);
    *fd = file.fd_;
    return Status::OK();
  }

  void Forget(const PosixFile& file) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file.in_lru_) lru_.erase(file.lru_);
    file.in_lru_ = false;
    file.fd_.reset();
  }

  void CountRead(uint64_t bytes) const {
    reads_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    CountSourceBytes(bytes);
  }

 private:
  // REQUIRES: mutex_.
  bool OpeningLocked(const PosixFile& file) const {
    return std::find(files_opening_.begin(), files_opening_.end(), &file) != files_opening_.end();
  }
  // REQUIRES: mutex_.
  void Touch(const PosixFile& file) const {
    if (file.in_lru_) lru_.splice(lru_.begin(), lru_, file.lru_);
  }
  void InsertLocked(const PosixFile* file) const {
    lru_.push_front(file);
    file->lru_ = lru_.begin();
    file->in_lru_ = true;
    while (lru_.size() > max_open_) {
      const PosixFile* victim = lru_.back();
      lru_.pop_back();
      victim->in_lru_ = false;
      victim->fd_.reset();  // closes now, or when the last view holding it goes
    }
  }

  // Around fork() (file comment): the mutex held, so that no other thread
  // is inside it; in the child, the opens in progress and the waiters for
  // them were the parent's threads: the next reader opens the file itself.
  void PrepareFork() const { mutex_.lock(); }
  void AfterForkInParent() const { mutex_.unlock(); }
  void AfterForkInChild() const {
    files_opening_.clear();
    RenewInChild(&opened_);
    mutex_.unlock();
  }

  size_t max_open_;
  mutable std::mutex mutex_;
  mutable std::condition_variable opened_;  // a file left files_opening_
  // The files a thread is opening (Acquire): at most one open per file.
  mutable std::vector<const PosixFile*> files_opening_;
  mutable std::list<const PosixFile*> lru_;
  mutable std::atomic<uint64_t> opens_{0}, stats_{0}, reads_{0}, bytes_{0};
  uint64_t fork_hooks_ = 0;
};

PosixFile::~PosixFile() { store_->Forget(*this); }

Status PosixFile::Explain(const Status& status, uint64_t actual_size) const {
  const std::string manifest = described_by_.empty() ? "its manifest" : "the manifest " + described_by_;
  if (status.IsNotFound()) {
    return Status::NotFound(path() + ": listed in " + manifest + " but does not exist");
  }
  if (!status.ok()) return status;
  return Status::Corruption(path() + ": the file ends at byte offset " +
                            std::to_string(actual_size) + " but " + manifest + " says it holds " +
                            std::to_string(size()) +
                            " bytes (truncated or replaced since it was packed?)");
}

Status PosixFile::SourceView(FileView* view) const {
  std::shared_ptr<const UniqueFd> fd;
  GPUFEED_RETURN_IF_ERROR(store_->Acquire(*this, &fd));
  view->fd = fd->get();
  view->local = false;
  view->shown = path();
  view->hold = std::move(fd);
  return Status::OK();
}

void PosixFile::Count(const FileView& view, uint64_t bytes) const { store_->CountRead(bytes); }

}  // namespace

std::shared_ptr<Store> NewPosixStore(size_t max_open_files) {
  return std::make_shared<PosixStore>(max_open_files);
}

Status NewDatasetStore(const CacheOptions& options, const std::string& dataset,
                       std::shared_ptr<Store>* store) {
  std::shared_ptr<Store> chain = NewPosixStore();
  SourceThrottle throttle = SourceThrottleForBenchmark();
  if (throttle.active()) chain = NewThrottledStore(std::move(chain), throttle);
  if (!options.cache_dir.empty()) {
    return NewCachedStore(std::move(chain), options, dataset, store);
  }
  *store = std::move(chain);
  return Status::OK();
}

}  // namespace gpufeed
