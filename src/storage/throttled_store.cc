// A decorator that makes its source as slow as a busy parallel filesystem:
// every read waits a fixed latency, and all reads share one link of a given
// bandwidth (they queue behind each other for their transfer time). For
// benchmarks (SetSourceThrottleForBenchmark); reads through a node-cache
// copy above it are not slowed.
#include <chrono>
#include <mutex>
#include <thread>

#include "storage/store.h"

namespace gpufeed {

namespace {

using Clock = std::chrono::steady_clock;

class Link {
 public:
  explicit Link(const SourceThrottle& throttle) : throttle_(throttle), free_at_(Clock::now()) {}

  void Transfer(uint64_t bytes) {
    Clock::time_point done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto start = std::max(Clock::now(), free_at_);
      auto transfer = throttle_.bytes_per_second > 0
                          ? std::chrono::duration<double>(static_cast<double>(bytes) /
                                                          throttle_.bytes_per_second)
                          : std::chrono::duration<double>(0);
      free_at_ = start + std::chrono::duration_cast<Clock::duration>(transfer);
      done = free_at_ + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(throttle_.latency_seconds));
    }
    std::this_thread::sleep_until(done);
  }

 private:
  SourceThrottle throttle_;
  std::mutex mutex_;
  Clock::time_point free_at_;
};

class ThrottledFile final : public StoreFile {
 public:
  ThrottledFile(std::shared_ptr<const StoreFile> source, std::shared_ptr<Link> link)
      : StoreFile(source->path(), source->size(), source->mtime_ns(), source->xxh64(),
                  source->lazy()),
        source_(std::move(source)),
        link_(std::move(link)) {}

  Status View(uint64_t offset, uint64_t length, FileView* view) const override {
    return source_->View(offset, length, view);
  }
  Status SourceView(FileView* view) const override { return source_->SourceView(view); }
  void Count(const FileView& view, uint64_t bytes) const override {
    link_->Transfer(bytes);
    source_->Count(view, bytes);
  }

 private:
  std::shared_ptr<const StoreFile> source_;
  std::shared_ptr<Link> link_;
};

class ThrottledStore final : public Store {
 public:
  ThrottledStore(std::shared_ptr<Store> source, const SourceThrottle& throttle)
      : source_(std::move(source)), link_(std::make_shared<Link>(throttle)) {}

  Status Open(const std::string& path, const std::string& xxh64,
              std::shared_ptr<const StoreFile>* file) override {
    std::shared_ptr<const StoreFile> opened;
    GPUFEED_RETURN_IF_ERROR(source_->Open(path, xxh64, &opened));
    *file = std::make_shared<ThrottledFile>(std::move(opened), link_);
    return Status::OK();
  }
  Status OpenLazily(const std::string& path, const FileIdentity& identity,
                    std::shared_ptr<const StoreFile>* file) override {
    std::shared_ptr<const StoreFile> opened;
    GPUFEED_RETURN_IF_ERROR(source_->OpenLazily(path, identity, &opened));
    *file = std::make_shared<ThrottledFile>(std::move(opened), link_);
    return Status::OK();
  }
  Status ReadWholeFile(const std::string& path, std::string* data,
                       int64_t* mtime_ns) const override {
    GPUFEED_RETURN_IF_ERROR(source_->ReadWholeFile(path, data, mtime_ns));
    link_->Transfer(data->size());
    return Status::OK();
  }
  StoreStats stats() const override { return source_->stats(); }

 private:
  std::shared_ptr<Store> source_;
  std::shared_ptr<Link> link_;
};

}  // namespace

std::shared_ptr<Store> NewThrottledStore(std::shared_ptr<Store> source,
                                         const SourceThrottle& throttle) {
  return std::make_shared<ThrottledStore>(std::move(source), throttle);
}

}  // namespace gpufeed
